/// Where a generation stands in a `Grammar`: the set of pushdown stacks (llama.cpp's model)
/// that the bytes so far leave possible. Each stack holds element positions, the innermost
/// last; after expansion its top is always a byte element, and an empty stack means the
/// grammar is complete. Right recursion (`x*`) does not grow the stacks.
final class GrammarMatcher {
    let grammar: Grammar
    private(set) var stacks: [[Int32]]
    /// More simultaneous stacks than this means an ambiguous grammar gone exponential.
    static let maxStacks = 4096

    init(_ grammar: Grammar) throws {
        self.grammar = grammar
        var out: [[Int32]] = []
        for start in grammar.alternatives[Int(grammar.root)] {
            try Self.expand(grammar, grammar.elements[Int(start)] == .end ? [] : [start], into: &out)
        }
        stacks = Self.unique(out)
    }

    /// The grammar may end here (end-of-generation tokens are allowed).
    var isComplete: Bool { stacks.contains { $0.isEmpty } }
    /// Nothing but the end is possible.
    var onlyEnd: Bool { stacks.allSatisfy { $0.isEmpty } }

    /// Pushes the alternatives of rule references at the top until every stack's top is a
    /// byte element (or the stack is empty).
    private static func expand(_ g: Grammar, _ stack: [Int32], into out: inout [[Int32]]) throws {
        guard let top = stack.last else { out.append(stack); return }
        guard case .rule(let r) = g.elements[Int(top)] else { out.append(stack); return }
        var base = stack
        base.removeLast()
        if g.elements[Int(top) + 1] != .end { base.append(top + 1) }
        for start in g.alternatives[Int(r)] {
            var s = base
            if g.elements[Int(start)] != .end { s.append(start) }
            try expand(g, s, into: &out)
            if out.count > maxStacks {
                throw VeloError(.invalidArgument, "grammar is too ambiguous (over \(maxStacks) parses at once)")
            }
        }
    }

    /// Without duplicates, in a canonical order (states compare and hash as arrays).
    private static func unique(_ stacks: [[Int32]]) -> [[Int32]] {
        stacks.count < 2 ? stacks : Set(stacks).sorted { $0.lexicographicallyPrecedes($1) }
    }

    /// The stacks after one more byte (empty: the byte is not allowed).
    func step(_ stacks: [[Int32]], _ byte: UInt8) -> [[Int32]] {
        var out: [[Int32]] = []
        for s in stacks {
            guard let top = s.last, case .bytes(let set) = grammar.elements[Int(top)], grammar.matches(set, byte) else { continue }
            var n = s
            n.removeLast()
            if grammar.elements[Int(top) + 1] != .end { n.append(top + 1) }
            // expansion cannot fail here beyond what init checked, short of a pathological grammar
            guard (try? Self.expand(grammar, n, into: &out)) != nil else { return [] }
        }
        return Self.unique(out)
    }

    /// Whether `bytes` may come next (through the grammar's DFA: repeated checks are lookups).
    func allows(_ bytes: [UInt8]) -> Bool {
        var id = stateID(stacks)
        for b in bytes {
            id = transition(id, b)
            if id < 0 { return false }
        }
        return true
    }

    /// The stacks after `bytes` (empty: not allowed), without moving.
    func after(_ bytes: [UInt8]) -> [[Int32]] {
        var id = stateID(stacks)
        for b in bytes {
            id = transition(id, b)
            if id < 0 { return [] }
        }
        return grammar.states[Int(id)]
    }

    /// Moves past a token's bytes; false (and no move) when the grammar does not allow them.
    @discardableResult
    func accept(_ bytes: [UInt8]) -> Bool {
        trimDFA()
        let st = after(bytes)
        guard !st.isEmpty else { return false }
        stacks = st
        return true
    }

    /// Bit t set: token t's bytes are allowed next (end-of-generation tokens aside: see
    /// `isComplete`). Computed by walking the vocabulary's trie with the stacks, pruned where no
    /// stack survives, and skipping whole subtrees whose bytes all leave the state unchanged
    /// (inside a JSON string, nearly every token): their tokens are allowed wholesale. Kept per
    /// state in the grammar, since states repeat (every string of a document, every element of
    /// an array).
    func mask(_ trie: TokenTrie) -> [UInt64] {
        var stats = GrammarStats()
        return mask(trie, &stats)
    }

    func mask(_ trie: TokenTrie, _ stats: inout GrammarStats) -> [UInt64] {
        if let m = grammar.maskCache[stacks] { return m }
        let t0 = nowNanos()
        defer { stats.masksComputed += 1; stats.maskNanos += nowNanos() - t0 }
        trimDFA()
        var walk = MaskWalk(matcher: self, trie: trie)
        walk.run(node: 0, stateID(stacks))
        let bits = trie.idMask(walk.sorted)
        if grammar.maskCache.count >= 512 { grammar.maskCache.removeAll(keepingCapacity: true) }
        grammar.maskCache[stacks] = bits
        return bits
    }
}

extension GrammarMatcher {
    /// The id of a state in the grammar's DFA (added when new).
    func stateID(_ st: [[Int32]]) -> Int32 {
        if let id = grammar.stateIDs[st] { return id }
        let id = Int32(grammar.states.count)
        grammar.stateIDs[st] = id
        grammar.states.append(st)
        grammar.transitions.append([Int32](repeating: -2, count: 256))
        return id
    }

    /// The DFA's step: the state after `byte` (-1: dead).
    func transition(_ id: Int32, _ byte: UInt8) -> Int32 {
        let t = grammar.transitions[Int(id)][Int(byte)]
        if t != -2 { return t }
        let next = step(grammar.states[Int(id)], byte)
        let n = next.isEmpty ? -1 : stateID(next)
        grammar.transitions[Int(id)][Int(byte)] = n
        return n
    }

    /// Forgets the DFA when it has grown past its bound (only between walks: ids stay valid
    /// within one).
    func trimDFA() {
        guard grammar.states.count >= Grammar.maxStates else { return }
        grammar.stateIDs.removeAll(keepingCapacity: true)
        grammar.states.removeAll(keepingCapacity: true)
        grammar.transitions.removeAll(keepingCapacity: true)
    }
}

/// One trie walk of `GrammarMatcher.mask`: the allowed tokens as bits in the trie's sorted order
/// (where a subtree is a range), and what is known of each state's loop bytes (those it steps
/// to itself on): tested lazily, so a state that is no loop costs one step to find out.
private struct MaskWalk {
    let matcher: GrammarMatcher
    let trie: TokenTrie
    var sorted: [UInt64]
    var loops: [Int32: (yes: ByteSet, no: ByteSet)] = [:]

    init(matcher: GrammarMatcher, trie: TokenTrie) {
        self.matcher = matcher
        self.trie = trie
        sorted = [UInt64](repeating: 0, count: (trie.sortedCount + 63) / 64)
    }

    /// Every byte of `bytes` steps state `st` to itself.
    mutating func closed(_ st: Int32, under bytes: ByteSet) -> Bool {
        var known = loops[st] ?? (ByteSet(), ByteSet())
        defer { loops[st] = known }
        if !bytes.isDisjoint(with: known.no) { return false }
        for b in bytes.subtracting(known.yes).elements {
            if matcher.transition(st, b) == st {
                known.yes.insert(b)
            } else {
                known.no.insert(b)
                return false
            }
        }
        return true
    }

    mutating func run(node: Int32, _ st: Int32) {
        for c in trie.children(node) {
            let next = matcher.transition(st, trie.byte[Int(c)])
            if next < 0 { continue }
            if let below = trie.subtreeBytes(c), closed(next, under: below) {
                setRange(trie.range(c))
                continue
            }
            setRange(trie.ownRange(c))
            run(node: c, next)
        }
    }

    mutating func setRange(_ r: Range<Int32>) {
        var i = Int(r.lowerBound)
        let end = Int(r.upperBound)
        while i < end {
            if i & 63 == 0 && end - i >= 64 {
                sorted[i >> 6] = ~0
                i += 64
            } else {
                sorted[i >> 6] |= 1 << UInt64(i & 63)
                i += 1
            }
        }
    }
}

/// What constrained sampling cost (engine stats and `bench/grammar.ts`).
struct GrammarStats {
    /// Tokens chosen under a grammar, and how many of those took the unconstrained choice.
    var tokens = 0
    var fastPath = 0
    /// Masks walked from the trie (the rest came from the cache), and the time they took.
    var masksComputed = 0
    var maskNanos: UInt64 = 0
    /// All time spent choosing constrained tokens (checks, masks, the choice itself).
    var choiceNanos: UInt64 = 0
    /// Per token, what the grammar added to the choice a plain decode makes (the check, the
    /// mask, the masked choice): the latest `overheadWindow` tokens, for percentiles.
    private(set) var overheadNanos: [UInt64] = []
    private var overheadNext = 0
    static let overheadWindow = 4096

    mutating func recordOverhead(_ nanos: UInt64) {
        if overheadNanos.count < Self.overheadWindow {
            overheadNanos.append(nanos)
        } else {
            overheadNanos[overheadNext] = nanos
            overheadNext = (overheadNext + 1) % Self.overheadWindow
        }
    }

    mutating func clearOverhead() {
        overheadNanos.removeAll()
        overheadNext = 0
    }

    var json: JSON {
        let sorted = overheadNanos.sorted()
        func us(_ q: Double) -> Double { sorted.isEmpty ? 0 : Double(sorted[min(sorted.count - 1, Int(q * Double(sorted.count)))]) / 1e3 }
        let mean = sorted.isEmpty ? 0 : Double(sorted.reduce(0, +)) / Double(sorted.count) / 1e3
        return .object([("tokens", .int(tokens)), ("fast_path", .int(fastPath)), ("masks_computed", .int(masksComputed)),
                        ("mask_ms", .number(Double(maskNanos) / 1e6)), ("choice_ms", .number(Double(choiceNanos) / 1e6)),
                        ("overhead_us_p50", .number(us(0.5))), ("overhead_us_p90", .number(us(0.9))),
                        ("overhead_us_p99", .number(us(0.99))), ("overhead_us_mean", .number(mean))])
    }
}

/// The vocabulary's token byte strings as a trie (built once per tokenizer). Tokens are
/// numbered in sorted byte order, so each node's subtree is a range of those numbers, with the
/// tokens ending at the node first. Node 0 is the root; a node's children are consecutive.
/// Control tokens and tokens with no bytes are left out (a grammar never produces them).
final class TokenTrie: @unchecked Sendable {
    let vocabSize: Int
    /// Each token's bytes (empty for those left out).
    let bytes: [[UInt8]]
    /// Token ids in sorted byte order.
    private let order: [Int32]
    var sortedCount: Int { order.count }
    /// Per node: its byte (root: 0), its children, its subtree's range of `order` and how many
    /// tokens end at it.
    let byte: [UInt8]
    private let childStart: [Int32]
    private let childCount: [Int32]
    private let lo: [Int32]
    private let hi: [Int32]
    private let own: [Int32]
    /// For nodes with subtrees of `skipMin` tokens or more: the bytes that follow the node's own
    /// in its subtree's tokens (smaller subtrees are cheaper to walk than to test).
    private let below: [Int32: ByteSet]
    private static let skipMin = 8

    init(tokenizer: Tokenizer) {
        vocabSize = tokenizer.vocabSize
        var bytes = [[UInt8]](repeating: [], count: vocabSize)
        for id in 0..<vocabSize where !tokenizer.isControl(Int32(id)) {
            bytes[id] = (try? tokenizer.piece(Int32(id))) ?? []
        }
        self.bytes = bytes
        let order = (0..<vocabSize).filter { !bytes[$0].isEmpty }.sorted { bytes[$0].lexicographicallyPrecedes(bytes[$1]) }.map { Int32($0) }
        self.order = order
        var byte: [UInt8] = [0], childStart: [Int32] = [0], childCount: [Int32] = [0]
        var lo: [Int32] = [0], hi: [Int32] = [Int32(order.count)], own: [Int32] = [0]
        // level by level: ranges of `order` sharing `depth` bytes, and their node
        var groups: [Int32] = [0]
        var depth = 0
        while !groups.isEmpty {
            var next: [Int32] = []
            for g in groups {
                let end = Int(hi[Int(g)])
                var i = Int(lo[Int(g)])
                while i < end && bytes[Int(order[i])].count == depth { i += 1 }
                own[Int(g)] = Int32(i) - lo[Int(g)]
                childStart[Int(g)] = Int32(byte.count)
                while i < end {
                    let b = bytes[Int(order[i])][depth]
                    var j = i
                    while j < end && bytes[Int(order[j])][depth] == b { j += 1 }
                    next.append(Int32(byte.count))
                    byte.append(b); childStart.append(0); childCount.append(0)
                    lo.append(Int32(i)); hi.append(Int32(j)); own.append(0)
                    i = j
                }
                childCount[Int(g)] = Int32(byte.count) - childStart[Int(g)]
            }
            groups = next
            depth += 1
        }
        // the bytes below each large node: its tokens' bytes past the node's depth
        var below: [Int32: ByteSet] = [:]
        var depthOf = [Int32](repeating: 0, count: byte.count)
        for n in 0..<byte.count {
            for c in childStart[n]..<(childStart[n] + childCount[n]) { depthOf[Int(c)] = depthOf[n] + 1 }
            guard hi[n] - lo[n] >= Self.skipMin else { continue }
            var set = ByteSet()
            for k in Int(lo[n])..<Int(hi[n]) {
                for b in bytes[Int(order[k])][Int(depthOf[n])...] { set.insert(b) }
            }
            below[Int32(n)] = set
        }
        self.byte = byte
        self.childStart = childStart
        self.childCount = childCount
        self.lo = lo
        self.hi = hi
        self.own = own
        self.below = below
    }

    func children(_ n: Int32) -> Range<Int32> { childStart[Int(n)]..<(childStart[Int(n)] + childCount[Int(n)]) }
    /// The subtree's tokens, as positions in sorted order.
    func range(_ n: Int32) -> Range<Int32> { lo[Int(n)]..<hi[Int(n)] }
    /// The tokens ending at the node.
    func ownRange(_ n: Int32) -> Range<Int32> { lo[Int(n)]..<(lo[Int(n)] + own[Int(n)]) }
    /// The bytes below a large node (nil: walk it).
    func subtreeBytes(_ n: Int32) -> ByteSet? {
        hi[Int(n)] - lo[Int(n)] >= Self.skipMin ? below[n] : nil
    }

    /// Bits over sorted positions → bits over token ids.
    func idMask(_ sorted: [UInt64]) -> [UInt64] {
        var bits = [UInt64](repeating: 0, count: (vocabSize + 63) / 64)
        for (w, word) in sorted.enumerated() where word != 0 {
            var x = word
            while x != 0 {
                let p = w << 6 | x.trailingZeroBitCount
                x &= x - 1
                let id = Int(order[p])
                bits[id >> 6] |= 1 << UInt64(id & 63)
            }
        }
        return bits
    }
}
