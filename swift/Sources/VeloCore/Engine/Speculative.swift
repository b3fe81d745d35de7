/// Speculative decoding: a cheap proposer guesses k tokens, the target checks all of them in
/// one batched forward pass. Greedy acceptance is an exact match against what the target would
/// pick; sampled acceptance is rejection sampling, which leaves the target's distribution
/// unchanged. The number of guesses follows the measured acceptance and speed, and turns
/// itself off for a sequence when guessing would be slower than plain decoding.
public struct SpeculationOptions: Sendable {
    public enum Mode: String, Sendable { case off, ngram, draft }
    public var mode: Mode = .off
    /// Most tokens proposed per step.
    public var maxDraft = 8
    /// Adapt k and switch off when it does not pay; false keeps k = maxDraft (for measuring
    /// acceptance the way llama.cpp reports it).
    public var adaptive = true
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
    var draftStep = 0.0
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
