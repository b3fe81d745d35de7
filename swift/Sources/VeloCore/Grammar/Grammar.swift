/// A context-free grammar over bytes, compiled from GBNF (llama.cpp's grammar format) by
/// `GBNFParser`. Characters become UTF-8 byte sequences at compile time, so matching, token
/// masks and tokens that end inside a character all work byte by byte.
///
/// Layout (as llama.cpp's): every alternative of every rule is a run of elements in `elements`
/// ended by `.end`; `alternatives[r]` holds where rule r's runs start. A match position is an
/// index into `elements`.
public final class Grammar: @unchecked Sendable {
    enum Element: Equatable {
        /// One byte out of `byteSets[i]`.
        case bytes(Int32)
        /// Any alternative of rule r.
        case rule(Int32)
        case end
    }

    let elements: [Element]
    let alternatives: [[Int32]]
    /// 256-bit sets as four words each.
    let byteSets: [ByteSet]
    let root: Int32
    /// Token masks already computed, by matcher state (`GrammarMatcher.mask`); engine thread only.
    var maskCache: [[[Int32]]: [UInt64]] = [:]
    /// A lazily built DFA over matcher states (sets of stacks), shared by every walk and match
    /// of this grammar: state ids, and per state the state after each byte (-2: not yet known,
    /// -1: dead). Cleared when it grows past `maxStates`. Engine thread only.
    var stateIDs: [[[Int32]]: Int32] = [:]
    var states: [[[Int32]]] = []
    var transitions: [[Int32]] = []
    static let maxStates = 1 << 14

    init(elements: [Element], alternatives: [[Int32]], byteSets: [ByteSet], root: Int32) {
        self.elements = elements
        self.alternatives = alternatives
        self.byteSets = byteSets
        self.root = root
    }

    /// Compiles GBNF text; errors say what is wrong and where.
    public convenience init(gbnf: String) throws {
        let b = try GBNFParser.parse(gbnf)
        try self.init(builder: b)
    }

    @inline(__always) func matches(_ set: Int32, _ byte: UInt8) -> Bool { byteSets[Int(set)].contains(byte) }

    /// Limits that keep a hostile grammar from taking the engine's memory or time.
    static let maxElements = 1 << 20
    static let maxRules = 1 << 16
}

/// A set of byte values (256 bits): a grammar element's bytes, the bytes below a trie node,
/// the bytes a matcher state loops on.
struct ByteSet: Hashable {
    private var w: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

    static func == (a: ByteSet, b: ByteSet) -> Bool { a.w == b.w }
    func hash(into h: inout Hasher) { h.combine(w.0); h.combine(w.1); h.combine(w.2); h.combine(w.3) }

    static func range(_ lo: UInt8, _ hi: UInt8) -> ByteSet {
        var s = ByteSet()
        for b in lo...hi { s.insert(b) }
        return s
    }

    @inline(__always) func contains(_ b: UInt8) -> Bool {
        let word: UInt64
        switch b >> 6 {
        case 0: word = w.0
        case 1: word = w.1
        case 2: word = w.2
        default: word = w.3
        }
        return word >> UInt64(b & 63) & 1 != 0
    }

    mutating func insert(_ b: UInt8) {
        let bit = UInt64(1) << UInt64(b & 63)
        switch b >> 6 {
        case 0: w.0 |= bit
        case 1: w.1 |= bit
        case 2: w.2 |= bit
        default: w.3 |= bit
        }
    }

    mutating func insert(_ lo: UInt8, _ hi: UInt8) { for b in lo...hi { insert(b) } }

    func isDisjoint(with o: ByteSet) -> Bool {
        w.0 & o.w.0 == 0 && w.1 & o.w.1 == 0 && w.2 & o.w.2 == 0 && w.3 & o.w.3 == 0
    }

    func subtracting(_ o: ByteSet) -> ByteSet {
        var s = ByteSet()
        s.w = (w.0 & ~o.w.0, w.1 & ~o.w.1, w.2 & ~o.w.2, w.3 & ~o.w.3)
        return s
    }

    var elements: [UInt8] {
        var out: [UInt8] = []
        for (k, word) in [w.0, w.1, w.2, w.3].enumerated() {
            var x = word
            while x != 0 {
                out.append(UInt8(k << 6 | x.trailingZeroBitCount))
                x &= x - 1
            }
        }
        return out
    }
}

/// Rules as lists of alternatives of element sequences, before flattening into a `Grammar`.
struct GrammarBuilder {
    enum Item: Hashable {
        case bytes(ByteSet)
        case rule(Int)
    }

    var names: [String] = []
    var rules: [[[Item]]?] = []
    var index: [String: Int] = [:]
    var elementCount = 0

    /// The rule called `name`, made (undefined) on first mention.
    mutating func ruleID(_ name: String) -> Int {
        if let i = index[name] { return i }
        index[name] = names.count
        names.append(name)
        rules.append(nil)
        return names.count - 1
    }

    mutating func define(_ id: Int, _ alts: [[Item]]) throws {
        rules[id] = alts
        elementCount += alts.reduce(0) { $0 + $1.count + 1 }
        guard elementCount <= Grammar.maxElements, rules.count <= Grammar.maxRules else {
            throw VeloError(.invalidArgument, "grammar too large (over \(Grammar.maxElements) elements or \(Grammar.maxRules) rules)")
        }
    }

    /// A new anonymous rule named after `base`.
    mutating func anonymous(_ base: String, _ alts: [[Item]]) throws -> Int {
        var name = "\(base)-\(names.count)"
        while index[name] != nil { name += "_" }
        let id = ruleID(name)
        try define(id, alts)
        return id
    }
}

extension Grammar {
    convenience init(builder b: GrammarBuilder) throws {
        guard let root = b.index["root"] else {
            throw VeloError(.invalidArgument, "grammar has no 'root' rule")
        }
        for (i, r) in b.rules.enumerated() where r == nil {
            throw VeloError(.invalidArgument, "grammar rule '\(b.names[i])' is used but never defined")
        }
        let rules = b.rules.map { $0! }
        try Grammar.checkLeftRecursion(rules, names: b.names)
        var sets: [ByteSet] = []
        var setIndex: [ByteSet: Int32] = [:]
        var elements: [Element] = []
        var alternatives: [[Int32]] = []
        for alts in rules {
            var starts: [Int32] = []
            for seq in alts {
                starts.append(Int32(elements.count))
                for item in seq {
                    switch item {
                    case .rule(let r): elements.append(.rule(Int32(r)))
                    case .bytes(let s):
                        if setIndex[s] == nil {
                            setIndex[s] = Int32(sets.count)
                            sets.append(s)
                        }
                        elements.append(.bytes(setIndex[s]!))
                    }
                }
                elements.append(.end)
            }
            alternatives.append(starts)
        }
        self.init(elements: elements, alternatives: alternatives, byteSets: sets, root: Int32(root))
    }

    /// A rule that can begin with itself (directly or through rules that may match nothing)
    /// would make matching loop forever: refuse it, naming the rule.
    static func checkLeftRecursion(_ rules: [[[GrammarBuilder.Item]]], names: [String]) throws {
        // which rules can match the empty string (to a fixed point)
        var nullable = [Bool](repeating: false, count: rules.count)
        var changed = true
        while changed {
            changed = false
            for (r, alts) in rules.enumerated() where !nullable[r] {
                if alts.contains(where: { seq in seq.allSatisfy { if case .rule(let x) = $0 { return nullable[x] } else { return false } } }) {
                    nullable[r] = true
                    changed = true
                }
            }
        }
        // r → x when x can come first in an alternative of r
        let firsts: [[Int]] = rules.map { alts in
            var out: [Int] = []
            for seq in alts {
                for item in seq {
                    guard case .rule(let x) = item else { break }
                    out.append(x)
                    if !nullable[x] { break }
                }
            }
            return out
        }
        var state = [UInt8](repeating: 0, count: rules.count) // 0 new, 1 on the path, 2 done
        for start in 0..<rules.count where state[start] == 0 {
            var stack: [(rule: Int, next: Int)] = [(start, 0)]
            state[start] = 1
            while var top = stack.popLast() {
                if top.next < firsts[top.rule].count {
                    let x = firsts[top.rule][top.next]
                    top.next += 1
                    stack.append(top)
                    if state[x] == 1 {
                        throw VeloError(.invalidArgument, "grammar rule '\(names[x])' is left-recursive (it can begin with itself), which is not supported")
                    }
                    if state[x] == 0 {
                        state[x] = 1
                        stack.append((x, 0))
                    }
                } else {
                    state[top.rule] = 2
                }
            }
        }
    }
}
