#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import CKernels

/// Per-request sampling settings. Names and defaults follow llama.cpp.
public struct SamplingParams: Sendable, Equatable {
    /// 0 or less means greedy.
    public var temperature: Float = 0.8
    public var topK: Int = 40
    public var topP: Float = 0.95
    public var minP: Float = 0.05
    public var repeatPenalty: Float = 1.0
    public var presencePenalty: Float = 0
    public var frequencyPenalty: Float = 0
    /// How many recent tokens the penalties look at (-1: the whole context).
    public var penaltyWindow: Int = 64
    public var seed: UInt64 = 0xC0FFEE
    /// Added to these tokens' logits first (-100 bans a token, as OpenAI's logit_bias).
    public var logitBias: [Int32: Float] = [:]

    public init() {}

    public static var greedy: SamplingParams {
        var p = SamplingParams()
        p.temperature = 0
        return p
    }

    public var isGreedy: Bool { temperature <= 0 }

    /// Greedy with nothing that changes the logits first (bias, penalties): the token is the
    /// row's argmax as it comes out of the model, which a GPU can find on its own.
    public var choosesArgmax: Bool { isGreedy && logitBias.isEmpty && !penalizes }

    /// Whether any penalty applies to recent tokens.
    public var penalizes: Bool { repeatPenalty != 1 || presencePenalty != 0 || frequencyPenalty != 0 }
}

/// xoshiro256**: small, fast, and reproducible across platforms for a given seed.
public struct SeededRandom: Sendable {
    private var s: (UInt64, UInt64, UInt64, UInt64)

    public init(seed: UInt64) {
        var z = seed
        func splitmix() -> UInt64 {
            z &+= 0x9E37_79B9_7F4A_7C15
            var x = z
            x = (x ^ (x >> 30)) &* 0xBF58_476D_1CE4_E5B9
            x = (x ^ (x >> 27)) &* 0x94D0_49BB_1331_11EB
            return x ^ (x >> 31)
        }
        s = (splitmix(), splitmix(), splitmix(), splitmix())
    }

    public mutating func next() -> UInt64 {
        let result = ((s.1 &* 5) << 7 | (s.1 &* 5) >> 57) &* 9
        let t = s.1 << 17
        s.2 ^= s.0
        s.3 ^= s.1
        s.1 ^= s.2
        s.0 ^= s.3
        s.2 ^= t
        s.3 = s.3 << 45 | s.3 >> 19
        return result
    }

    /// Uniform in [0, 1).
    public mutating func unit() -> Double {
        Double(next() >> 11) * (1.0 / 9_007_199_254_740_992.0)
    }
}

/// Turns logits into the next token: penalties, then greedy or top-k → top-p → min-p →
/// temperature → a seeded draw (the order of llama.cpp's default chain).
public struct Sampler: Sendable {
    public let params: SamplingParams
    private var rng: SeededRandom

    public init(_ params: SamplingParams) {
        self.params = params
        rng = SeededRandom(seed: params.seed)
    }

    /// `history`: the tokens so far (prompt and output), for the penalties.
    public mutating func sample(_ logits: UnsafeMutablePointer<Float>, vocab: Int, history: ArraySlice<Int32>) -> Int32 {
        prepare(logits, vocab: vocab, history: history)
        return choose(logits, vocab: vocab)
    }

    /// The logits as the choice sees them: biased, then penalised (in place).
    public mutating func prepare(_ logits: UnsafeMutablePointer<Float>, vocab: Int, history: ArraySlice<Int32>) {
        for (t, b) in params.logitBias where Int(t) < vocab { logits[Int(t)] += b }
        applyPenalties(logits, vocab: vocab, history: history)
    }

    /// Greedy, or a draw after truncation and temperature, from prepared logits.
    public mutating func choose(_ logits: UnsafeMutablePointer<Float>, vocab: Int) -> Int32 {
        if params.isGreedy { return Sampler.argmax(logits, vocab) }
        return draw(distribution(logits, vocab: vocab))
    }

    /// `choose` among the tokens whose bits are set in `allowed` (the others as if their logits
    /// were -inf), in one masked scan; nil when none is allowed. Without top-k truncation the
    /// caller masks the logits instead (the distribution spans the vocabulary anyway).
    mutating func choose(_ logits: UnsafeMutablePointer<Float>, vocab: Int, allowed: UnsafePointer<UInt64>) -> Int32? {
        let k = params.isGreedy ? 1 : params.topK
        precondition(k > 0 && k < vocab, "masked choice needs top-k truncation")
        let cands = Sampler.topCandidates(logits, vocab: vocab, k: k, allowed: allowed)
        if cands.isEmpty { return nil }
        return params.isGreedy ? cands[0].id : draw(distribution(cands))
    }

    /// Whether `choose(_:vocab:allowed:)` applies (greedy, or sampling with top-k).
    func choosesMasked(vocab: Int) -> Bool { params.isGreedy || (params.topK > 0 && params.topK < vocab) }

    /// The distribution `sample` draws from, normalised (greedy: all mass on the argmax).
    /// Speculative decoding compares the target's and the draft's with it.
    public mutating func probabilities(_ logits: UnsafeMutablePointer<Float>, vocab: Int, history: ArraySlice<Int32>) -> [(id: Int32, p: Double)] {
        prepare(logits, vocab: vocab, history: history)
        if params.isGreedy { return [(Sampler.argmax(logits, vocab), 1)] }
        let d = distribution(logits, vocab: vocab)
        let z = d.reduce(0) { $0 + $1.p }
        return d.map { ($0.id, $0.p / z) }
    }

    /// One draw from a (possibly unnormalised) distribution with this sampler's generator.
    public mutating func draw(_ probs: [(id: Int32, p: Double)]) -> Int32 {
        var u = rng.unit() * probs.reduce(0) { $0 + $1.p }
        for c in probs {
            u -= c.p
            if u <= 0 { return c.id }
        }
        return probs.last!.id
    }

    /// Uniform in [0, 1) from this sampler's generator (acceptance tests).
    public mutating func uniform() -> Double { rng.unit() }

    /// The candidates left after truncation, with unnormalised probabilities, most likely first.
    func distribution(_ logits: UnsafeMutablePointer<Float>, vocab: Int) -> [(id: Int32, p: Double)] {
        distribution(Sampler.topCandidates(logits, vocab: vocab, k: params.topK > 0 ? min(params.topK, vocab) : vocab))
    }

    /// The same from the top-k candidates, most likely first.
    func distribution(_ candidates: [(id: Int32, logit: Float)]) -> [(id: Int32, p: Double)] {
        var cands = candidates
        // top-p (on the softmax at temperature 1, like llama.cpp)
        let maxLogit = Double(cands[0].logit)
        var probs = cands.map { exp(Double($0.logit) - maxLogit) }
        let total = probs.reduce(0, +)
        if params.topP < 1 {
            var cum = 0.0
            var keep = cands.count
            for i in 0..<cands.count {
                cum += probs[i] / total
                if cum >= Double(params.topP) { keep = i + 1; break }
            }
            cands.removeLast(cands.count - keep)
            probs.removeLast(probs.count - keep)
        }
        if params.minP > 0 {
            // relative to the most likely token: p_i / p_max = probs[i] since probs[0] == 1
            let keep = probs.firstIndex { $0 < Double(params.minP) } ?? probs.count
            cands.removeLast(cands.count - max(keep, 1))
        }
        let t = Double(params.temperature)
        return cands.map { (id: $0.id, p: exp((Double($0.logit) - maxLogit) / t)) }
    }

    mutating func applyPenalties(_ logits: UnsafeMutablePointer<Float>, vocab: Int, history: ArraySlice<Int32>) {
        let p = params
        guard p.penalizes else { return }
        let window = p.penaltyWindow < 0 ? history : history.suffix(p.penaltyWindow)
        var counts: [Int32: Int] = [:]
        for t in window where t >= 0 && Int(t) < vocab { counts[t, default: 0] += 1 }
        for (t, n) in counts {
            var l = logits[Int(t)]
            if p.repeatPenalty != 1 { l = l > 0 ? l / p.repeatPenalty : l * p.repeatPenalty }
            l -= Float(n) * p.frequencyPenalty + p.presencePenalty
            logits[Int(t)] = l
        }
    }

    /// log-softmax of `chosen` and of the `top` most likely tokens.
    static func logprobs(_ logits: UnsafePointer<Float>, vocab: Int, chosen: Int32, top: Int) -> TokenLogprobs {
        let m = logits[Int(argmax(logits, vocab))]
        var sum = 0.0
        for i in 0..<vocab { sum += exp(Double(logits[i] - m)) }
        let lse = Double(m) + log(sum)
        let best = top > 0 ? topCandidates(logits, vocab: vocab, k: min(top, vocab)) : []
        return TokenLogprobs(chosen: Float(Double(logits[Int(chosen)]) - lse),
                             top: best.map { ($0.id, Float(Double($0.logit) - lse)) })
    }

    /// The first index of the largest logit (CKernels: vectorised, a 128K vocabulary in
    /// microseconds; a fast GPU decode step is a few milliseconds).
    public static func argmax(_ logits: UnsafePointer<Float>, _ n: Int) -> Int32 {
        Int32(ck_argmax_f32(logits, Int64(n)))
    }

    /// Whether a row holds no NaN and no infinity (CKernels: vectorised).
    public static func allFinite(_ logits: UnsafePointer<Float>, _ n: Int) -> Bool {
        ck_all_finite_f32(logits, Int64(n)) != 0
    }

    /// The k largest logits, sorted descending (ties: lower id first, for determinism), among
    /// the `allowed` bits when given.
    static func topCandidates(_ logits: UnsafePointer<Float>, vocab: Int, k: Int, allowed: UnsafePointer<UInt64>? = nil) -> [(id: Int32, logit: Float)] {
        if k >= vocab && allowed == nil {
            return (0..<vocab).map { (Int32($0), logits[$0]) }.sorted { $0.logit > $1.logit || ($0.logit == $1.logit && $0.id < $1.id) }
        }
        let k = min(k, vocab)
        var ids = [Int32](repeating: 0, count: k), vals = [Float](repeating: 0, count: k)
        let n = Int(ck_top_k_f32(logits, Int64(vocab), allowed, Int64(k), &ids, &vals))
        return (0..<n).map { (ids[$0], vals[$0]) }
    }
}
