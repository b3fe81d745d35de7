/// Token selection, apart from the step: the next token of a sequence from its row of logits
/// (the sampler's choice, under the request's grammar when it has one), with the log-probs and
/// top logits the request asked for; and the checks that decide what a row needs (its argmax
/// only, which the device may find itself; numbers, not NaN).
final class TokenSelector {
    let tokenizer: Tokenizer
    let vocab: Int
    private(set) var grammarStats = GrammarStats()

    init(tokenizer: Tokenizer, vocab: Int) {
        self.tokenizer = tokenizer
        self.vocab = vocab
    }

    enum Choice {
        case token(Int32, topLogits: [(Int32, Float)], logprobs: TokenLogprobs?)
        /// The grammar is complete and allows nothing more.
        case grammarComplete
        /// No token of the vocabulary can continue the grammar.
        case grammarStuck
    }

    /// Whether an output's token is its row's argmax and nothing else of the row is read: no
    /// guesses to verify, no grammar, no logprobs or top logits, a sampler that only takes the
    /// argmax (`SamplingParams.choosesArgmax`).
    func choosesArgmax(_ e: StepPlan.Entry) -> Bool {
        let r = e.seq.request
        return e.proposals.isEmpty && e.seq.matcher == nil && r.logprobs < 0 && r.topLogits == 0 && e.seq.sampler.params.choosesArgmax
    }

    /// Whether an output's logit rows hold only finite numbers. NaN or infinite logits (damaged
    /// weights, an overflow) would make every comparison of the choice false; the request ends
    /// with an error instead, and the engine goes on. A row the device chose from is checked by
    /// argmax_rows itself (-1 for a row with a NaN or an infinity).
    func finite(_ e: StepPlan.Entry, argmaxOnly: Bool, logits: UnsafeMutablePointer<Float>?, argmaxes: UnsafePointer<Int32>?) -> Bool {
        let first = e.firstLogitRow!
        if argmaxOnly, let a = argmaxes { return a[first] >= 0 }
        return (0...e.proposals.count).allSatisfy { Sampler.allFinite(logits! + (first + $0) * vocab, vocab) }
    }

    static let nonFiniteLogits = "the model computed logits that are not numbers (NaN or infinity): its weights are "
        + "probably damaged (a corrupted download or a broken fine-tune); --check-tensors checks every tensor's values at load"

    /// The next token of `s` from its row of logits (changed in place: penalties, masks).
    func select(_ s: Sequence, _ logits: UnsafeMutablePointer<Float>) -> Choice {
        var top: [(Int32, Float)] = []
        if s.request.topLogits > 0 {
            top = Sampler.topCandidates(logits, vocab: vocab, k: min(s.request.topLogits, vocab)).map { ($0.id, $0.logit) }
        }
        s.sampler.prepare(logits, vocab: vocab, history: s.tokens[...])
        let wantLogprobs = s.request.logprobs >= 0
        let token: Int32
        if let m = s.matcher {
            if m.onlyEnd { return .grammarComplete }
            guard let t = constrainedChoice(s, m, logits, fullMask: wantLogprobs) else { return .grammarStuck }
            token = t
        } else {
            token = s.sampler.choose(logits, vocab: vocab)
        }
        let lp = wantLogprobs ? Sampler.logprobs(logits, vocab: vocab, chosen: token, top: s.request.logprobs) : nil
        return .token(token, topLogits: top, logprobs: lp)
    }

    /// Moves a constrained sequence's grammar past a token it took.
    func advanceGrammar(_ s: Sequence, past token: Int32) {
        s.matcher?.accept(tokenTrie.bytes[Int(token)])
    }

    func clearGrammarOverhead() { grammarStats.clearOverhead() }

    /// The end-of-generation tokens as mask bits (allowed when a grammar is complete).
    private lazy var endMask: [UInt64] = {
        var bits = [UInt64](repeating: 0, count: (vocab + 63) / 64)
        for t in 0..<vocab where tokenizer.isEndOfGeneration(Int32(t)) { bits[t >> 6] |= 1 << UInt64(t & 63) }
        return bits
    }()
    /// The vocabulary as a trie, for grammar masks (built on the first constrained request).
    private lazy var tokenTrie = TokenTrie(tokenizer: tokenizer)

    /// The next token of a constrained sequence from prepared logits: the unconstrained choice
    /// when the grammar allows it (for a draw this is rejection sampling: the same distribution
    /// as drawing from the masked logits), else the choice among allowed tokens in one masked
    /// scan (greedy, top-k), or with the others' logits set to -inf (no truncation, or when
    /// logprobs must see the masked logits). nil: no token is allowed.
    private func constrainedChoice(_ s: Sequence, _ m: GrammarMatcher, _ logits: UnsafeMutablePointer<Float>, fullMask: Bool) -> Int32? {
        let trie = tokenTrie
        let t0 = nowNanos()
        var unconstrained: UInt64 = 0 // the choice a plain decode makes too: not the grammar's cost
        grammarStats.tokens += 1
        defer {
            let total = nowNanos() - t0
            grammarStats.choiceNanos += total
            grammarStats.recordOverhead(total - unconstrained)
        }
        if !fullMask {
            let t = s.sampler.choose(logits, vocab: vocab)
            unconstrained = nowNanos() - t0
            let allowed = tokenizer.isEndOfGeneration(t) ? m.isComplete : (!trie.bytes[Int(t)].isEmpty && m.allows(trie.bytes[Int(t)]))
            if allowed {
                grammarStats.fastPath += 1
                return t
            }
        }
        var bits = m.mask(trie, &grammarStats)
        if m.isComplete { for w in 0..<bits.count { bits[w] |= endMask[w] } }
        if !fullMask && s.sampler.choosesMasked(vocab: vocab) {
            return bits.withUnsafeBufferPointer { s.sampler.choose(logits, vocab: vocab, allowed: $0.baseAddress!) }
        }
        var any = false
        for w in 0..<bits.count {
            let allowed = bits[w]
            if allowed != 0 { any = true }
            if allowed == ~0 { continue }
            let base = w << 6
            for j in 0..<min(64, vocab - base) where allowed >> UInt64(j) & 1 == 0 { logits[base + j] = -Float.infinity }
        }
        return any ? s.sampler.choose(logits, vocab: vocab) : nil
    }
}
