/// Where guesses come from (speculative decoding). Prompt lookup and a draft model today;
/// MTP heads and EAGLE would be more conformers: the step, the verification and the
/// adaptive k stay as they are.
protocol Proposer: AnyObject {
    /// Up to k guesses for each sequence given (none for a sequence it cannot guess for).
    func propose(_ chosen: [(seq: Sequence, k: Int)]) -> [ObjectIdentifier: Guesses]
    /// Wall time of one guessing step, in nanoseconds, for the adaptive k (0: free).
    var stepNanos: Double { get }
}

/// Prompt lookup: the tokens that followed the latest earlier occurrence of the sequence's
/// last few tokens (`ngramProposal`), with a one-hot distribution.
final class PromptLookupProposer: Proposer {
    var stepNanos: Double { 0 }

    func propose(_ chosen: [(seq: Sequence, k: Int)]) -> [ObjectIdentifier: Guesses] {
        var out: [ObjectIdentifier: Guesses] = [:]
        for (s, k) in chosen {
            let p = ngramProposal(s.tokens, k: k)
            if !p.isEmpty { out[ObjectIdentifier(s)] = (p, p.map { [($0, 1.0)] }) }
        }
        return out
    }
}

/// A small model of the same vocabulary: it catches up on each sequence's tokens, then guesses
/// k tokens one step at a time (all sequences batched), sampling with the sequence's own
/// settings. Its K/V live in the target's page pool (`SpeculationState.draftTable`).
final class DraftModelProposer: Proposer {
    let model: LanguageModel
    let ops: ForwardOps
    let kv: PagePool
    let maxTokens: Int
    /// Frees cached pages nobody uses, enough for n more positions (the planner's).
    let evict: (Int) -> Bool
    private(set) var stepNanos = 0.0

    init(model: LanguageModel, ops: ForwardOps, kv: PagePool, maxTokens: Int, evict: @escaping (Int) -> Bool) {
        self.model = model
        self.ops = ops
        self.kv = kv
        self.maxTokens = maxTokens
        self.evict = evict
    }

    private typealias Drafting = (s: Sequence, k: Int, proposals: [Int32], q: [[(id: Int32, p: Double)]])

    func propose(_ chosen: [(seq: Sequence, k: Int)]) -> [ObjectIdentifier: Guesses] {
        let vocab = model.config.vocabSize
        var active: [Drafting] = []
        for (s, k) in chosen {
            s.spec.draftTable.length = s.spec.draftComputed
            let need = s.tokens.count + k - s.spec.draftComputed
            var ok = s.spec.draftTable.reserve(need, in: kv)
            if !ok, evict(need) { ok = s.spec.draftTable.reserve(need, in: kv) }
            if ok { active.append((s, k, [], [])) }
        }
        // catch up (prompt and accepted tokens), in chunks that fit the workspace
        while true {
            var batch = ForwardBatch()
            var rowsFor: [(index: Int, row: Int)] = []
            for (i, a) in active.enumerated() {
                let s = a.s
                let pending = s.tokens.count - s.spec.draftComputed
                let room = maxTokens - batch.count
                guard pending > 0, room > 0 else { continue }
                let n = min(pending, room)
                batch.tables.append(s.spec.draftTable)
                for j in 0..<n {
                    batch.tokens.append(s.tokens[s.spec.draftComputed + j])
                    batch.positions.append(s.spec.draftComputed + j)
                    batch.sequence.append(batch.tables.count - 1)
                }
                if n == pending {
                    rowsFor.append((i, batch.logitRows.count))
                    batch.logitRows.append(batch.count - 1)
                }
                s.spec.draftComputed += n
            }
            guard batch.count > 0 else { break }
            let t0 = nowNanos()
            guard let logits = try? model.run(batch, on: ops) else { return [:] } // speculation is optional
            if batch.count == batch.tables.count { stepNanos = SpeculationCosts.ema(stepNanos, Double(nowNanos() - t0)) }
            for r in rowsFor { guessNext(&active[r.index], logits: logits + r.row * vocab, vocab: vocab) }
        }
        // further guesses: feed the last guess, read the next
        while true {
            let more = active.indices.filter { active[$0].proposals.count < active[$0].k && !active[$0].proposals.isEmpty }
            guard !more.isEmpty else { break }
            var batch = ForwardBatch()
            for i in more {
                let s = active[i].s
                batch.tables.append(s.spec.draftTable)
                batch.tokens.append(active[i].proposals.last!)
                batch.positions.append(s.tokens.count + active[i].proposals.count - 1)
                batch.sequence.append(batch.tables.count - 1)
                batch.logitRows.append(batch.count - 1)
            }
            let t0 = nowNanos()
            guard let logits = try? model.run(batch, on: ops) else { break }
            stepNanos = SpeculationCosts.ema(stepNanos, Double(nowNanos() - t0))
            for (row, i) in more.enumerated() {
                active[i].s.spec.draftComputed += 1
                guessNext(&active[i], logits: logits + row * vocab, vocab: vocab)
            }
        }
        var out: [ObjectIdentifier: Guesses] = [:]
        for a in active where !a.proposals.isEmpty { out[ObjectIdentifier(a.s)] = (a.proposals, a.q) }
        return out
    }

    private func guessNext(_ a: inout Drafting, logits: UnsafeMutablePointer<Float>, vocab: Int) {
        // a draft whose logits are not numbers guesses no further (the target decides anyway)
        guard Sampler.allFinite(logits, vocab) else { a.k = a.proposals.count; return }
        let q = a.s.sampler.probabilities(logits, vocab: vocab, history: (a.s.tokens + a.proposals)[...])
        a.proposals.append(a.s.sampler.draw(q))
        a.q.append(q)
    }
}
