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

    private static func unique(_ stacks: [[Int32]]) -> [[Int32]] {
        stacks.count < 2 ? stacks : Array(Set(stacks))
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

    /// The stacks after `bytes` (empty: not allowed), without moving.
    func after(_ bytes: [UInt8]) -> [[Int32]] {
        var st = stacks
        for b in bytes {
            st = step(st, b)
            if st.isEmpty { break }
        }
        return st
    }

    /// Moves past a token's bytes; false (and no move) when the grammar does not allow them.
    @discardableResult
    func accept(_ bytes: [UInt8]) -> Bool {
        let st = after(bytes)
        guard !st.isEmpty else { return false }
        stacks = st
        return true
    }

    /// Bit t set: token t's bytes are allowed next (end-of-generation tokens aside: see
    /// `isComplete`). Computed by walking the vocabulary's trie with the stacks, pruned where
    /// no stack survives; kept per state in the grammar, since states repeat (every string
    /// of a JSON document, every element of an array).
    func mask(_ trie: TokenTrie) -> [UInt64] {
        var stats = GrammarStats()
        return mask(trie, &stats)
    }

    func mask(_ trie: TokenTrie, _ stats: inout GrammarStats) -> [UInt64] {
        let key = stacks.sorted { $0.lexicographicallyPrecedes($1) }
        if let m = grammar.maskCache[key] { return m }
        let t0 = nowNanos()
        defer { stats.masksComputed += 1; stats.maskNanos += nowNanos() - t0 }
        var bits = [UInt64](repeating: 0, count: (trie.vocabSize + 63) / 64)
        walk(trie, node: 0, stacks, &bits)
        if grammar.maskCache.count >= 512 { grammar.maskCache.removeAll(keepingCapacity: true) }
        grammar.maskCache[key] = bits
        return bits
    }

    private func walk(_ trie: TokenTrie, node: Int32, _ st: [[Int32]], _ bits: inout [UInt64]) {
        for c in trie.children(node) {
            let next = step(st, trie.byte[Int(c)])
            if next.isEmpty { continue }
            for t in trie.tokens(c) { bits[Int(t) >> 6] |= 1 << UInt64(t & 63) }
            walk(trie, node: c, next, &bits)
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

    var json: JSON {
        .object([("tokens", .int(tokens)), ("fast_path", .int(fastPath)), ("masks_computed", .int(masksComputed)),
                 ("mask_ms", .number(Double(maskNanos) / 1e6)), ("choice_ms", .number(Double(choiceNanos) / 1e6))])
    }
}

/// The vocabulary's token byte strings as a trie (built once per tokenizer): node 0 is the
/// root; each node's children are consecutive, and each node lists the tokens ending there.
/// Control tokens and tokens with no bytes are left out (a grammar never produces them).
final class TokenTrie: @unchecked Sendable {
    let vocabSize: Int
    /// Per node: its byte (root: 0), first child and child count, first token and count.
    let byte: [UInt8]
    private let childStart: [Int32]
    private let childCount: [Int32]
    private let tokenStart: [Int32]
    private let tokenCount: [Int32]
    private let tokenList: [Int32]
    /// Each token's bytes (empty for those left out).
    let bytes: [[UInt8]]

    init(tokenizer: Tokenizer) {
        vocabSize = tokenizer.vocabSize
        var bytes = [[UInt8]](repeating: [], count: vocabSize)
        for id in 0..<vocabSize where !tokenizer.isControl(Int32(id)) {
            bytes[id] = (try? tokenizer.piece(Int32(id))) ?? []
        }
        self.bytes = bytes
        // sort tokens by bytes; a node per distinct prefix, built breadth-first so that each
        // node's children are consecutive
        let order = (0..<vocabSize).filter { !bytes[$0].isEmpty }.sorted { bytes[$0].lexicographicallyPrecedes(bytes[$1]) }
        var byte: [UInt8] = [0], childStart: [Int32] = [0], childCount: [Int32] = [0]
        var tokenStart: [Int32] = [0], tokenCount: [Int32] = [0], tokenList: [Int32] = []
        // level by level: ranges of `order` sharing a prefix of `depth` bytes, and their node
        var groups: [(node: Int32, lo: Int, hi: Int)] = [(0, 0, order.count)]
        var depth = 0
        while !groups.isEmpty {
            var next: [(node: Int32, lo: Int, hi: Int)] = []
            for g in groups {
                var i = g.lo
                // tokens that end at this node come first in sorted order
                tokenStart[Int(g.node)] = Int32(tokenList.count)
                while i < g.hi && bytes[order[i]].count == depth { tokenList.append(Int32(order[i])); i += 1 }
                tokenCount[Int(g.node)] = Int32(tokenList.count) - tokenStart[Int(g.node)]
                childStart[Int(g.node)] = Int32(byte.count)
                while i < g.hi {
                    let b = bytes[order[i]][depth]
                    var j = i
                    while j < g.hi && bytes[order[j]][depth] == b { j += 1 }
                    let node = Int32(byte.count)
                    byte.append(b); childStart.append(0); childCount.append(0); tokenStart.append(0); tokenCount.append(0)
                    next.append((node, i, j))
                    i = j
                }
                childCount[Int(g.node)] = Int32(byte.count) - childStart[Int(g.node)]
            }
            groups = next
            depth += 1
        }
        self.byte = byte
        self.childStart = childStart
        self.childCount = childCount
        self.tokenStart = tokenStart
        self.tokenCount = tokenCount
        self.tokenList = tokenList
    }

    func children(_ n: Int32) -> Range<Int32> { childStart[Int(n)]..<(childStart[Int(n)] + childCount[Int(n)]) }
    func tokens(_ n: Int32) -> ArraySlice<Int32> {
        tokenList[Int(tokenStart[Int(n)])..<Int(tokenStart[Int(n)] + tokenCount[Int(n)])]
    }
}
