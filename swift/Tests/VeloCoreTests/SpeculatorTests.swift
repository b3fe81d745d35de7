import XCTest
@testable import VeloCore

/// Speculation's bookkeeping without a model: which sequences guess (pauses, room, the
/// measurement first), and verification against hand-made logit rows (what is kept, what
/// replaces the first refused guess, the counters, positions counted only when kept).
final class SpeculatorTests: XCTestCase {
    private let vocab = 8

    private func speculator(adaptive: Bool = false, draftMax: Int = 3, context: Int = 64) -> Speculator {
        var o = SpeculationOptions()
        o.mode = .ngram
        o.draftMax = draftMax
        o.adapt = adaptive
        return Speculator(options: o, contextSize: context, proposer: PromptLookupProposer())
    }

    /// A greedy sequence whose tokens are `tokens`, all computed but the last.
    private func seq(_ tokens: [Int32]) -> Sequence {
        var r = GenerationRequest(prompt: tokens)
        r.sampling.temperature = 0
        let s = Sequence(id: 1, request: r, now: 0)
        s.computed = tokens.count - 1
        return s
    }

    /// Logit rows whose argmaxes are `argmaxes`, one row each.
    private func rows(_ argmaxes: [Int32]) -> UnsafeMutablePointer<Float> {
        let p = UnsafeMutablePointer<Float>.allocate(capacity: argmaxes.count * vocab)
        for (r, a) in argmaxes.enumerated() {
            for t in 0..<vocab { p[r * vocab + t] = t == Int(a) ? 5 : 0 }
        }
        return p
    }

    /// The entry the planner makes for a decode with these guesses, after the pass ran (the
    /// decode token counted, as the scheduler does before verifying).
    private func ranEntry(_ s: Sequence, guesses: [Int32]) -> StepPlan.Entry {
        let e = StepPlan.Entry(seq: s, tokens: [s.tokens.last!] + guesses, advance: 1, firstLogitRow: 0,
                               proposals: guesses, q: guesses.map { [($0, 1.0)] })
        s.computed += 1
        return e
    }

    func testGreedyVerificationKeepsTheMatchingPrefixThenTheTargetsToken() {
        let sp = speculator()
        let s = seq([1, 2, 3])
        s.spec.draftComputed = 100
        let e = ranEntry(s, guesses: [5, 6, 7])
        let logits = rows([5, 6, 4, 0])
        defer { logits.deallocate() }
        var taken: [Int32] = []
        sp.verify(e, logits: logits, vocab: vocab) { taken.append($0); s.tokens.append($0) }
        XCTAssertEqual(taken, [5, 6, 4], "two guesses kept, the third replaced by the target's own choice")
        XCTAssertEqual(s.computed, 3 + 2, "the kept guesses' positions count; the refused one's does not")
        XCTAssertEqual(s.table.length, s.computed)
        XCTAssertEqual([s.spec.drafted, s.spec.accepted], [3, 2])
        XCTAssertEqual([sp.stats.drafted, sp.stats.accepted, sp.stats.specSteps], [3, 2, 1])
        XCTAssertEqual(Array(sp.stats.acceptedAt.prefix(3)), [1, 1, 0], "acceptance by position")
        XCTAssertEqual(s.spec.draftComputed, s.computed, "the draft's K/V past the kept tokens are stale")
        XCTAssertEqual(s.spec.acceptRate, 0.7 * 0.7 + 0.3 * 2 / 3, accuracy: 1e-12)
    }

    func testAllKeptGivesOneTokenMoreAndAFinishStopsIt() {
        let sp = speculator()
        let s = seq([1, 2, 3])
        let e = ranEntry(s, guesses: [5, 6])
        let logits = rows([5, 6, 2])
        defer { logits.deallocate() }
        var taken: [Int32] = []
        sp.verify(e, logits: logits, vocab: vocab) { taken.append($0); s.tokens.append($0) }
        XCTAssertEqual(taken, [5, 6, 2], "every guess kept, and the last row's token after them")
        XCTAssertEqual(s.spec.accepted, 2)

        let t = seq([1, 2, 3])
        let f = ranEntry(t, guesses: [5, 6])
        var taken2: [Int32] = []
        sp.verify(f, logits: logits, vocab: vocab) { taken2.append($0); t.finishedFlag = true } // a stop string in the first
        XCTAssertEqual(taken2, [5], "nothing is taken after the sequence finished")
    }

    func testWhoGuessesThisStep() {
        let sp = speculator(draftMax: 3)
        let a = seq([1, 2, 3, 1, 2])
        let paused = seq([1, 2, 3, 1, 2])
        paused.spec.pausedSteps = 2
        let full = Sequence(id: 3, request: GenerationRequest(prompt: [1, 2, 3, 1, 2]), now: 0)
        full.computed = 4
        let g = sp.guesses(for: [a, paused])
        XCTAssertEqual(g[ObjectIdentifier(a)]?.proposals, [3, 1, 2], "prompt lookup: what followed the last 1 2")
        XCTAssertNil(g[ObjectIdentifier(paused)])
        XCTAssertEqual(paused.spec.pausedSteps, 1)
        XCTAssertEqual(sp.stats.pausedSteps, 1)
        // no room in the context for a guess and the token after it
        XCTAssertTrue(speculator(context: 6).guesses(for: [full]).isEmpty)
        // adaptive: plain decoding is measured before anything is guessed
        XCTAssertTrue(speculator(adaptive: true).guesses(for: [a]).isEmpty)
    }
}
