/// llama.cpp's token attributes (`llama_token_attr`): the GGUF token type, plus flags the
/// loader adds (strip rules, control status for end-of-generation texts).
struct TokenAttributes: OptionSet, Sendable {
    let rawValue: UInt16

    static let unknown = TokenAttributes(rawValue: 1 << 0)
    static let unused = TokenAttributes(rawValue: 1 << 1)
    static let normal = TokenAttributes(rawValue: 1 << 2)
    static let control = TokenAttributes(rawValue: 1 << 3)
    static let userDefined = TokenAttributes(rawValue: 1 << 4)
    static let byte = TokenAttributes(rawValue: 1 << 5)
    static let lstrip = TokenAttributes(rawValue: 1 << 7)
    static let rstrip = TokenAttributes(rawValue: 1 << 8)
}

extension TokenAttributes {
    /// From `tokenizer.ggml.token_type` (1 normal, 2 unknown, 3 control, 4 user-defined,
    /// 5 unused, 6 byte; anything else is undefined).
    init(tokenType: Int) {
        switch tokenType {
        case 1: self = .normal
        case 2: self = .unknown
        case 3: self = .control
        case 4: self = .userDefined
        case 5: self = .unused
        case 6: self = .byte
        default: self = []
        }
    }
}

/// Cuts the special tokens out of a text before the model's tokenizer sees it.
///
/// The rule is llama.cpp's: special tokens are taken longest text first, each one wherever
/// it occurs (left to right) in the text that earlier, longer tokens left over. User-defined
/// tokens always split; control and unknown tokens only when parsing specials.
struct SpecialTokenSplitter {
    enum Fragment: Equatable {
        case text(Range<Int>)
        case token(Int32)
    }

    private struct Special {
        let id: Int32
        let text: [UInt8]
        let onlyWhenParsing: Bool
        let lstrip: Bool
        let rstrip: Bool
    }

    /// In priority order: longest text first, then lowest id.
    private let specials: [Special]
    private let trie: ByteTrie

    init(texts: [[UInt8]], attributes: [TokenAttributes]) {
        var list: [Special] = []
        for (id, attr) in attributes.enumerated()
        where !attr.isDisjoint(with: [.control, .userDefined, .unknown]) && !texts[id].isEmpty {
            list.append(Special(id: Int32(id), text: texts[id],
                                onlyWhenParsing: !attr.isDisjoint(with: [.control, .unknown]),
                                lstrip: attr.contains(.lstrip), rstrip: attr.contains(.rstrip)))
        }
        list.sort { $0.text.count != $1.text.count ? $0.text.count > $1.text.count : $0.id < $1.id }
        specials = list
        trie = ByteTrie(list.map(\.text))
    }

    func split(_ text: UnsafeBufferPointer<UInt8>, parseSpecial: Bool) -> [Fragment] {
        let n = text.count
        guard n > 0 else { return [] }
        guard !specials.isEmpty else { return [.text(0..<n)] }

        // Which special tokens occur at all, and where first: one pass over the text.
        var firstAt = [Int](repeating: -1, count: specials.count)
        var present = 0
        for p in 0..<n {
            trie.forEachMatch(in: text, at: p) { k in
                if firstAt[k] < 0 && (parseSpecial || !specials[k].onlyWhenParsing) {
                    firstAt[k] = p
                    present += 1
                }
            }
        }
        guard present > 0 else { return [.text(0..<n)] }

        // Claim occurrences token by token, in priority order. `taken` marks bytes that belong
        // to a claimed token or were stripped next to one.
        var taken = [Bool](repeating: false, count: n)
        var claimed: [(at: Int, index: Int)] = []
        for (k, special) in specials.enumerated() where firstAt[k] >= 0 {
            let t = special.text
            let len = t.count
            var p = firstAt[k]
            while p + len <= n {
                guard !taken[p], text[p] == t[0], Self.matches(text, p, t, taken) else {
                    p += 1
                    continue
                }
                for i in p..<(p + len) { taken[i] = true }
                claimed.append((p, k))
                if special.lstrip {
                    var q = p - 1
                    while q >= 0 && !taken[q] && Self.isSpace(text[q]) {
                        taken[q] = true
                        q -= 1
                    }
                }
                p += len
                if special.rstrip {
                    while p < n && !taken[p] && Self.isSpace(text[p]) {
                        taken[p] = true
                        p += 1
                    }
                }
            }
        }

        claimed.sort { $0.at < $1.at }
        var fragments: [Fragment] = []
        var cursor = 0
        func flushText(upTo end: Int) {
            var i = cursor
            while i < end {
                while i < end && taken[i] { i += 1 }
                let start = i
                while i < end && !taken[i] { i += 1 }
                if i > start { fragments.append(.text(start..<i)) }
            }
        }
        for c in claimed {
            flushText(upTo: c.at)
            fragments.append(.token(specials[c.index].id))
            cursor = c.at + specials[c.index].text.count
        }
        flushText(upTo: n)
        return fragments
    }

    private static func matches(_ text: UnsafeBufferPointer<UInt8>, _ p: Int, _ t: [UInt8], _ taken: [Bool]) -> Bool {
        for i in 0..<t.count where text[p + i] != t[i] || taken[p + i] {
            return false
        }
        return true
    }

    /// C's isspace: the characters llama.cpp strips around lstrip/rstrip tokens.
    private static func isSpace(_ b: UInt8) -> Bool {
        b == 0x20 || (b >= 0x09 && b <= 0x0D)
    }
}

/// A byte trie over a fixed set of strings, reporting every string that starts at a position.
private struct ByteTrie {
    private var root = [Int32](repeating: -1, count: 256)
    // Node i's children are edges[edgeStart[i] ..< edgeStart[i + 1]], sorted by byte.
    private var edgeStart: [Int32] = []
    private var edgeByte: [UInt8] = []
    private var edgeTarget: [Int32] = []
    private var terminal: [Int32] = []   // index of the string ending at the node, or -1

    init(_ strings: [[UInt8]]) {
        // Build with per-node dictionaries, then flatten.
        var children: [[UInt8: Int32]] = []
        var ends: [Int32] = []
        var rootMap: [UInt8: Int32] = [:]
        for (index, s) in strings.enumerated() where !s.isEmpty {
            var node: Int32
            if let existing = rootMap[s[0]] {
                node = existing
            } else {
                node = Int32(children.count)
                children.append([:])
                ends.append(-1)
                rootMap[s[0]] = node
            }
            for b in s.dropFirst() {
                if let next = children[Int(node)][b] {
                    node = next
                } else {
                    let next = Int32(children.count)
                    children.append([:])
                    ends.append(-1)
                    children[Int(node)][b] = next
                    node = next
                }
            }
            if ends[Int(node)] < 0 { ends[Int(node)] = Int32(index) }
        }
        for (b, node) in rootMap { root[Int(b)] = node }
        for node in children {
            edgeStart.append(Int32(edgeByte.count))
            for (b, target) in node.sorted(by: { $0.key < $1.key }) {
                edgeByte.append(b)
                edgeTarget.append(target)
            }
        }
        edgeStart.append(Int32(edgeByte.count))
        terminal = ends
    }

    @inline(__always)
    func forEachMatch(in text: UnsafeBufferPointer<UInt8>, at p: Int, _ body: (Int) -> Void) {
        var node = root[Int(text[p])]
        var i = p + 1
        while node >= 0 {
            if terminal[Int(node)] >= 0 { body(Int(terminal[Int(node)])) }
            guard i < text.count else { return }
            node = child(node, text[i])
            i += 1
        }
    }

    @inline(__always)
    private func child(_ node: Int32, _ b: UInt8) -> Int32 {
        var lo = Int(edgeStart[Int(node)]), hi = Int(edgeStart[Int(node) + 1])
        while lo < hi {
            let mid = (lo + hi) >> 1
            let m = edgeByte[mid]
            if m == b { return edgeTarget[mid] }
            if m < b { lo = mid + 1 } else { hi = mid }
        }
        return -1
    }
}
