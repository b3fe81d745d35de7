/// Speculative decoding: a cheap proposer guesses k tokens, the target checks all of them in
/// one batched forward pass. Greedy acceptance is an exact match against what the target would
/// pick; sampled acceptance is rejection sampling, which leaves the target's distribution
/// unchanged. The number of guesses follows the measured acceptance and speed, and turns
/// itself off for a sequence when guessing would be slower than plain decoding.
public struct SpeculationOptions: Sendable {
    public enum Mode: String, Sendable, CaseIterable { case off, ngram, draft }
    public var mode: Mode = .off
    /// Most tokens proposed per step.
    public var draftMax = 8
    /// Adapt k and switch off when it does not pay; false keeps k = draftMax (for measuring
    /// acceptance the way llama.cpp reports it).
    public var adapt = true
    public init() {}
}

/// Per-sequence speculation state.
struct SpeculationState {
    /// Draft model KV: its pages (in the shared pool) and how many tokens they hold.
    var draftTable = BlockTable()
    var draftComputed = 0
    /// Running acceptance rate (exponential average), the current k, and a pause counter.
    var acceptRate = 0.7
    var k = 4
    var pausedSteps = 0
    var pauseLength = 8
    var drafted = 0
    var accepted = 0
}

/// Engine-wide acceptance counters (for the stats and /metrics).
struct SpeculationStats {
    var drafted = 0
    var accepted = 0
    /// acceptedAt[i]: proposals at draft position i that were accepted; draftedAt[i]: made.
    var draftedAt = [Int](repeating: 0, count: 16)
    var acceptedAt = [Int](repeating: 0, count: 16)
    var specSteps = 0
    var pausedSteps = 0

    mutating func record(position i: Int, accepted ok: Bool) {
        drafted += 1
        if ok { accepted += 1 }
        if i < draftedAt.count {
            draftedAt[i] += 1
            if ok { acceptedAt[i] += 1 }
        }
    }

    var json: JSON {
        let n = draftedAt.lastIndex { $0 > 0 }.map { $0 + 1 } ?? 0
        return .object([
            ("drafted", .int(drafted)), ("accepted", .int(accepted)),
            ("acceptance", .number(drafted > 0 ? Double(accepted) / Double(drafted) : 0)),
            ("acceptance_by_position", .array((0..<n).map { .number(draftedAt[$0] > 0 ? Double(acceptedAt[$0]) / Double(draftedAt[$0]) : 0) })),
            ("steps", .int(specSteps)), ("paused_steps", .int(pausedSteps)),
        ])
    }
}

/// Step-time model the adaptive k works from: exponential averages of the target's forward time
/// with one row per sequence (plain decode) and with k+1 rows (verification), and of one draft
/// step. Expected tokens per verification with acceptance a and k guesses: (1 - a^(k+1)) / (1 - a).
struct SpeculationCosts {
    var plain = 0.0
    var verify = [Double](repeating: 0, count: 17)
    /// Measured wall time per emitted token: plain decode steps, and steps that speculated.
    var plainPerToken = 0.0
    var specPerToken = 0.0
    /// Steps a sequence waits before guessing again; 0 while speculation pays (engine-wide).
    var pauseLength = 0

    static func ema(_ old: Double, _ new: Double) -> Double { old == 0 ? new : 0.8 * old + 0.2 * new }

    /// Verification time for k guesses: measured if seen, else plain time grown 3 % a row.
    func verifyTime(_ k: Int) -> Double {
        verify[k] > 0 ? verify[k] : plain * (1 + 0.03 * Double(k))
    }

    /// Expected speed-up of guessing k tokens at acceptance `a`, over plain decoding.
    func speedup(k: Int, acceptance a: Double, draftCostPerToken: Double) -> Double {
        guard plain > 0 else { return 1 }
        let expected = a >= 0.999 ? Double(k + 1) : (1 - pow(a, Double(k + 1))) / (1 - a)
        return expected * plain / (Double(k) * draftCostPerToken + verifyTime(k))
    }

    /// The k in 1...maxK with the best expected speed-up, and that speed-up.
    func best(maxK: Int, acceptance a: Double, draftCostPerToken: Double) -> (k: Int, speedup: Double) {
        var best = (k: 1, speedup: speedup(k: 1, acceptance: a, draftCostPerToken: draftCostPerToken))
        if maxK >= 2 {
            for k in 2...maxK {
                let s = speedup(k: k, acceptance: a, draftCostPerToken: draftCostPerToken)
                if s > best.speedup { best = (k, s) }
            }
        }
        return best
    }
}

/// Speculation's bookkeeping around the step: which sequences guess this step and how many
/// tokens (the adaptive k, the pauses), the verification of guesses against the target's
/// logits, and the measured gate that pauses guessing when it does not pay. Where guesses
/// come from is the proposer's business.
final class Speculator {
    let options: SpeculationOptions
    let contextSize: Int
    let proposer: Proposer
    private(set) var costs = SpeculationCosts()
    private(set) var stats = SpeculationStats()

    init(options: SpeculationOptions, contextSize: Int, proposer: Proposer) {
        self.options = options
        self.contextSize = contextSize
        self.proposer = proposer
    }

    /// Guesses for every decoding sequence that speculates this step.
    func guesses(for running: [Sequence]) -> [ObjectIdentifier: Guesses] {
        var chosen: [(seq: Sequence, k: Int)] = []
        // a grammar's mask depends on each accepted token: constrained sequences do not guess
        for s in running where s.pending == 1 && !s.cancelled && s.matcher == nil && s.embedding == nil {
            if s.spec.pausedSteps > 0 {
                s.spec.pausedSteps -= 1
                stats.pausedSteps += 1
                continue
            }
            // plain decoding's speed is the yardstick: measure it before guessing
            if costs.plain == 0 && options.adapt { continue }
            let k = options.adapt ? s.spec.k : options.draftMax
            let room = contextSize - s.tokens.count - 1
            if room >= 1 { chosen.append((s, max(1, min(k, options.draftMax, room)))) }
        }
        return chosen.isEmpty ? [:] : proposer.propose(chosen)
    }

    /// A sequence starts (or starts again after preemption) where the engine's verdict stands.
    func admitted(_ s: Sequence) {
        if options.adapt { s.spec.pausedSteps = costs.pauseLength }
    }

    /// Checks the guesses against the target's logits, left to right: guess d is kept with
    /// probability min(1, p(d) / q(d)); the first refused one is replaced by a draw from the
    /// leftover mass max(0, p - q), and if all are kept the last row gives one more token.
    /// With greedy settings p and q are one-hot, so this is an exact-match test. `accept`
    /// takes each token as the sequence's next.
    func verify(_ e: StepPlan.Entry, logits: UnsafeMutablePointer<Float>, vocab: Int, accept: (Int32) -> Void) {
        let s = e.seq
        let k = e.proposals.count
        var kept = 0
        for i in 0...k {
            if s.finishedFlag { break }
            let p = s.sampler.probabilities(logits + (e.firstLogitRow! + i) * vocab, vocab: vocab, history: s.tokens[...])
            if i == k {
                accept(s.sampler.draw(p))
                break
            }
            let d = e.proposals[i]
            let pd = p.first { $0.id == d }?.p ?? 0
            let qd = e.q[i].first { $0.id == d }?.p ?? 1
            let ok = s.sampler.uniform() < min(1, pd / qd)
            stats.record(position: i, accepted: ok)
            s.spec.drafted += 1
            if ok {
                kept += 1
                s.spec.accepted += 1
                // the guess's K/V were computed in this pass: they count from now on
                s.computed += 1
                s.table.length = s.computed
                accept(d)
                continue
            }
            var rest: [Int32: Double] = [:]
            for c in p { rest[c.id] = c.p }
            for c in e.q[i] { rest[c.id] = max(0, (rest[c.id] ?? 0) - c.p) }
            let residual = rest.filter { $0.value > 0 }.map { (id: $0.key, p: $0.value) }.sorted { $0.id < $1.id }
            accept(s.sampler.draw(residual.isEmpty ? p : residual))
            break
        }
        s.spec.draftComputed = min(s.spec.draftComputed, s.computed)
        stats.specSteps += 1
        adapt(s, kept: kept, k: k)
    }

    /// Follows the acceptance rate: picks the k with the best expected speed-up, and pauses
    /// speculation for the sequence (for longer each time) when no k beats plain decoding.
    private func adapt(_ s: Sequence, kept: Int, k: Int) {
        s.spec.acceptRate = 0.7 * s.spec.acceptRate + 0.3 * Double(kept) / Double(k)
        guard options.adapt else { return }
        let best = costs.best(maxK: options.draftMax, acceptance: s.spec.acceptRate, draftCostPerToken: proposer.stepNanos)
        if best.speedup < 1 {
            s.spec.pausedSteps = s.spec.pauseLength
            s.spec.pauseLength = min(s.spec.pauseLength * 2, 256)
            s.spec.k = 2
            s.spec.acceptRate = max(s.spec.acceptRate, 0.5) // give it a fair chance when it resumes
        } else {
            s.spec.k = best.k
        }
    }

    /// Step times for the adaptive model: plain decode steps, and verification steps by k.
    func recordStepTime(_ ns: Double, outputs: [StepPlan.Entry], batch: ForwardBatch) {
        guard !outputs.isEmpty, batch.count == outputs.reduce(0, { $0 + 1 + $1.proposals.count }) else { return }
        let ks = Set(outputs.map { $0.proposals.count })
        guard ks.count == 1, let k = ks.first else { return }
        if k == 0 { costs.plain = SpeculationCosts.ema(costs.plain, ns) }
        else if k < costs.verify.count { costs.verify[k] = SpeculationCosts.ema(costs.verify[k], ns) }
    }

    /// The measured gate over the model-based choice of k: the wall time per emitted token of
    /// steps that speculated (drafting, the draft's catch-up after a pause, and verification)
    /// against that of plain decode steps. When speculating costs more per token, every
    /// sequence that speculated pauses, for twice as long each time it happens again.
    func judge(_ outputs: [StepPlan.Entry], ns: Double, emitted: Int) {
        let decoding = outputs.filter { $0.seq.generated > 0 || !$0.proposals.isEmpty }
        guard emitted > 0, !decoding.isEmpty, decoding.count == outputs.count else { return }
        let perToken = ns / Double(emitted)
        let speculated = decoding.filter { !$0.proposals.isEmpty }
        if speculated.isEmpty {
            costs.plainPerToken = SpeculationCosts.ema(costs.plainPerToken, perToken)
            return
        }
        costs.specPerToken = SpeculationCosts.ema(costs.specPerToken, perToken)
        guard options.adapt, costs.plainPerToken > 0 else { return }
        guard costs.specPerToken > costs.plainPerToken else {
            costs.pauseLength = max(costs.pauseLength / 2, 0)
            return
        }
        // the verdict is the engine's: new sequences start from it instead of learning again
        costs.pauseLength = min(max(costs.pauseLength * 2, 8), 1024)
        for o in speculated where o.seq.spec.pausedSteps == 0 { o.seq.spec.pausedSteps = costs.pauseLength }
        costs.specPerToken = 0 // judge the next attempt on its own
    }
}

/// Prompt lookup: the tokens that followed the latest earlier occurrence of the sequence's last
/// n tokens (n from 4 down to 1), up to k of them.
func ngramProposal(_ tokens: [Int32], k: Int) -> [Int32] {
    let count = tokens.count
    for n in stride(from: min(4, count - 1), through: 1, by: -1) {
        let tail = tokens[(count - n)...]
        var start = count - n - 1
        while start >= 0 {
            if tokens[start..<start + n].elementsEqual(tail) {
                let from = start + n
                let to = min(from + k, count)
                if to > from { return Array(tokens[from..<to]) }
            }
            start -= 1
        }
    }
    return []
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
