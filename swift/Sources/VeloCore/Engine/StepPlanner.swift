/// Guesses for one sequence's next tokens (speculative decoding) and the proposer's
/// distribution at each (one-hot for prompt lookup), which verification needs.
typealias Guesses = (proposals: [Int32], q: [[(id: Int32, p: Double)]])

/// One step's decision, a plain value: which sequences run which tokens in the forward pass,
/// and which rows of its output each reads. `StepPlanner.schedule` makes it; the scheduler runs
/// `batch` and applies the outputs to the sequences (`Scheduler.step`).
struct StepPlan {
    /// One sequence's share of the step.
    struct Entry {
        let seq: Sequence
        /// Tokens fed from position `seq.computed`: a decode token and any guesses, or a chunk
        /// of the prompt.
        let tokens: [Int32]
        /// Positions that count as computed once the pass ran (guesses count once accepted).
        let advance: Int
        /// The entry's first row in the pass's logits; nil when it reads none (a prompt chunk
        /// before the last, an embedding). A decode reads 1 + guesses rows.
        let firstLogitRow: Int?
        var proposals: [Int32] = []
        var q: [[(id: Int32, p: Double)]] = []
    }

    var entries: [Entry] = []
    /// Sequences admitted this step (running from now on), re-admissions after preemption too.
    var admitted: [Sequence] = []
    /// Sequences refused at admission, with the reason (they never ran and hold no pages).
    var refused: [(seq: Sequence, message: String)] = []
    /// Running sequences put back at the front of the queue, pages freed (recomputed later).
    var preempted: [Sequence] = []
    /// Set when nothing could run (no pages, nothing to preempt): the oldest running sequence,
    /// which must end, or the engine would spin.
    var stalled: Sequence?
    /// For each hidden-state row of the batch (embeddings), in order, its sequence.
    var pooled: [Sequence] = []
    var batch = ForwardBatch()

    /// The entries that read logits, in row order.
    var outputs: [Entry] { entries.filter { $0.firstLogitRow != nil } }

    mutating func add(_ e: Entry, logitRows: Int) {
        let seqIndex = batch.tables.count
        batch.tables.append(e.seq.table)
        batch.stateSlots.append(e.seq.stateSlot ?? -1)
        if let cp = e.seq.restoreState { batch.stateLoads.append((Int(cp), e.seq.stateSlot!)) }
        for (k, t) in e.tokens.enumerated() {
            batch.tokens.append(t)
            batch.positions.append(e.seq.computed + k)
            batch.sequence.append(seqIndex)
        }
        for r in (batch.count - logitRows)..<batch.count { batch.logitRows.append(r) }
        entries.append(e)
    }
}

/// Decides each step, and does nothing else (vLLM's `Scheduler.schedule`): admits waiting
/// sequences while their prompts fit the page pool, starting each on its longest cached prefix;
/// forms the batch, a decode token (with its guesses) for every running sequence first so that
/// their latency stays flat, then prompt chunks within the token budget; preempts the youngest
/// sequence when pages run out. It changes the queues and the page tables only: it runs no
/// model, samples nothing and emits no event, so it is tested with hand-made outputs
/// (StepPlannerTests).
final class StepPlanner {
    struct Limits {
        /// Most sequences running at once.
        var sequences: Int
        /// Most tokens in one forward pass.
        var tokens: Int
        /// Most positions one sequence may hold.
        var context: Int
    }

    let limits: Limits
    let kv: PagePool
    /// The prefix index over the pages (nil when disabled).
    let cache: RadixCache?
    private(set) var waiting: [Sequence] = []
    private(set) var running: [Sequence] = []
    private(set) var preemptions = 0
    /// Recurrent-state slots not held by a running sequence (models with DeltaNet layers: one
    /// slot a running sequence, taken at admission, given back when it ends or is preempted).
    private var freeSlots: [Int]
    let usesStateSlots: Bool

    init(limits: Limits, kv: PagePool, cache: RadixCache?, stateSlots: Bool = false) {
        self.limits = limits
        usesStateSlots = stateSlots
        freeSlots = stateSlots ? Array((0..<limits.sequences).reversed()) : []
        self.kv = kv
        self.cache = cache
    }

    var hasWork: Bool { !waiting.isEmpty || !running.isEmpty }

    func submit(_ s: Sequence) { waiting.append(s) }

    /// Takes a sequence out of the queue (cancelled before it ran).
    func removeWaiting(_ id: Int) -> Sequence? {
        guard let i = waiting.firstIndex(where: { $0.id == id }) else { return nil }
        return waiting.remove(at: i)
    }

    /// Forgets running sequences that have finished (their pages are already released).
    func dropFinished() {
        for s in running where s.finishedFlag { releaseSlot(s) }
        running.removeAll { $0.finishedFlag }
    }

    private func releaseSlot(_ s: Sequence) {
        if let slot = s.stateSlot { freeSlots.append(slot) }
        s.stateSlot = nil
        if let cp = s.restoreState { cache?.unpin(cp) }
        if let save = s.saveState { cache?.returnState(save.id) }
        (s.restoreState, s.saveState, s.branchPoint) = (nil, nil, nil)
    }

    /// The step: admission, then the batch. `guesses` are the proposer's, for sequences that
    /// were running before this step.
    func schedule(guesses: [ObjectIdentifier: Guesses] = [:]) -> StepPlan {
        var plan = StepPlan()
        admit(&plan)
        var budget = limits.tokens
        var fed: [Sequence] = []
        for s in running where s.pending == 1 && s.embedding == nil {
            let g = guesses[ObjectIdentifier(s)]
            let tokens = [s.tokens[s.computed]] + (g?.proposals ?? [])
            guard budget >= tokens.count, reservePages(for: s, count: tokens.count, protecting: fed, &plan) else { continue }
            plan.add(.init(seq: s, tokens: tokens, advance: 1, firstLogitRow: plan.batch.logitRows.count,
                           proposals: g?.proposals ?? [], q: g?.q ?? []), logitRows: tokens.count)
            fed.append(s)
            budget -= tokens.count
        }
        // prompt chunks; an embedding's prompt is all prefill, its last token included
        for s in running where (s.pending > 1 || s.embedding != nil) && budget > 0 {
            var n = min(s.pending, budget)
            guard reservePages(for: s, count: n, protecting: fed, &plan) else { continue }
            if let boundary = checkpointBoundary(s, chunk: n), let id = cache?.takeState() {
                // the chunk ends there, and the state after it goes to the cache with its pages
                n = boundary - s.computed
                s.saveState = (id, boundary)
                plan.batch.stateSaves.append((s.stateSlot!, Int(id)))
            }
            let wantsLogits = s.embedding == nil && n == s.pending
            plan.add(.init(seq: s, tokens: Array(s.tokens[s.computed..<s.computed + n]), advance: n,
                           firstLogitRow: wantsLogits ? plan.batch.logitRows.count : nil), logitRows: wantsLogits ? 1 : 0)
            if let e = s.embedding {
                for k in 0..<n where e.pooling.wants(position: s.computed + k, count: s.tokens.count) {
                    plan.batch.hiddenRows.append(plan.batch.count - n + k)
                    plan.pooled.append(s)
                }
            }
            fed.append(s)
            budget -= n
        }
        if plan.batch.count == 0 { plan.stalled = running.first }
        return plan
    }

    private func admit(_ plan: inout StepPlan) {
        while running.count < limits.sequences, let s = waiting.first {
            if let why = refusal(s) {
                waiting.removeFirst()
                plan.refused.append((s, why))
                continue
            }
            reuseCachedPrefix(for: s)
            // check that the whole prompt fits (evicting cached pages if needed), but hold only
            // the first chunk's pages: the rest are taken chunk by chunk, so pages never sit
            // reserved-but-empty through a long prefill
            let need = s.tokens.count - s.computed
            while !s.table.reserve(need, in: kv), evictCached(need) {}
            if s.table.pages.count * kv.pageSize < s.tokens.count {
                guard running.isEmpty else { break } // wait for running sequences to free pages
                waiting.removeFirst()
                s.table.releaseAll(to: kv)
                plan.refused.append((s, "the prompt needs \((s.tokens.count + kv.pageSize - 1) / kv.pageSize) KV pages, the pool has \(kv.pageCount)"))
                continue
            }
            s.table.truncate(to: s.computed + min(need, limits.tokens), in: kv)
            waiting.removeFirst()
            if usesStateSlots { s.stateSlot = freeSlots.removeLast() } // running.count < sequences: one is free
            plan.admitted.append(s)
            running.append(s)
        }
    }

    /// Why a waiting sequence can never run, or nil.
    private func refusal(_ s: Sequence) -> String? {
        let ctx = limits.context
        if s.tokens.isEmpty { return "the prompt is empty" }
        if s.embedding != nil && s.tokens.count > ctx {
            return "the input has \(s.tokens.count) tokens, more than the context size \(ctx)"
        }
        if s.embedding == nil && s.tokens.count >= ctx {
            return "the prompt has \(s.tokens.count) tokens, more than the context size \(ctx) allows (it needs room for at least one generated token)"
        }
        return nil
    }

    /// Pages for `count` more positions of `s`: cached pages nobody uses go first, then draft
    /// pages, then the youngest other running sequence (its KV is recomputed later). False if
    /// nothing could be freed.
    private func reservePages(for s: Sequence, count: Int, protecting fed: [Sequence], _ plan: inout StepPlan) -> Bool {
        while !s.table.reserve(count, in: kv) {
            if evictCached(count) || dropDraftPages() { continue }
            // never a sequence already in this step's batch: its K/V are about to be written
            guard let victim = running.last(where: { v in v !== s && !v.table.pages.isEmpty && !fed.contains { $0 === v } })
            else { return false }
            preempt(victim)
            plan.preempted.append(victim)
        }
        return true
    }

    /// Frees every sequence's draft-model pages (cheap to recompute): true if any were held.
    private func dropDraftPages() -> Bool {
        var freed = false
        for s in running where !s.spec.draftTable.pages.isEmpty {
            s.spec.draftTable.releaseAll(to: kv)
            s.spec.draftComputed = 0
            freed = true
        }
        return freed
    }

    private func preempt(_ s: Sequence) {
        preemptions += 1
        s.table.releaseAll(to: kv)
        s.spec.draftTable.releaseAll(to: kv)
        s.spec.draftComputed = 0
        s.computed = 0
        s.cachedTokens = 0
        s.embedding?.reset()
        releaseSlot(s)
        running.removeAll { $0 === s }
        waiting.insert(s, at: 0)
    }

    /// For a model with a recurrent state: the next page boundary this chunk of `n` reaches
    /// where the state is worth saving: where the prompt parts from a cached one (what the two
    /// share, a system prompt, may start a third), then the last boundary before its last token
    /// (a longer prompt that starts with this one, as a conversation's next turn does, resumes
    /// there).
    private func checkpointBoundary(_ s: Sequence, chunk n: Int) -> Int? {
        guard usesStateSlots, cache != nil, s.embedding == nil, s.saveState == nil else { return nil }
        let last = (s.tokens.count - 1) / kv.pageSize * kv.pageSize
        return [s.branchPoint, last].compactMap { $0 }.first { $0 > s.computed && s.computed + n >= $0 }
    }

    /// What the pass did to the sequences' checkpoints: loaded states are unpinned, saved ones
    /// indexed with their prefix's pages (after `computed` has advanced).
    func ran(_ plan: StepPlan) {
        for e in plan.entries {
            let s = e.seq
            if let cp = s.restoreState {
                cache?.unpin(cp)
                s.restoreState = nil
            }
            if let save = s.saveState, s.computed == save.at, let cache {
                cache.insert(Array(s.tokens[..<save.at]), pages: Array(s.table.pages[..<(save.at / kv.pageSize)]), state: save.id)
                s.saveState = nil
            }
        }
    }

    /// Starts a sequence on the longest cached prefix of its tokens (whole pages, leaving at
    /// least one token to compute so there are logits to sample from); with a recurrent state,
    /// the longest that ends at a checkpoint, which its slot loads before its first pass.
    private func reuseCachedPrefix(for s: Sequence) {
        guard let cache, s.computed == 0, s.table.pages.isEmpty else { return }
        // the cache keeps K/V, not hidden states: only last-token pooling may skip positions
        if let e = s.embedding, e.pooling != .last || usesStateSlots { return }
        let pages: [Int32]
        if usesStateSlots {
            let cached: Int
            (pages, s.restoreState, cached) = cache.matchWithState(s.tokens, limit: s.tokens.count - 1)
            s.branchPoint = cached > pages.count ? cached * kv.pageSize : nil
        } else {
            pages = cache.match(s.tokens, limit: s.tokens.count - 1)
        }
        for p in pages { kv.retain(p) }
        s.table.pages = pages
        s.computed = pages.count * kv.pageSize
        s.table.length = s.computed
        s.cachedTokens = s.computed
    }

    /// Frees cached pages nobody uses, enough for `positions` more; true if any were freed.
    func evictCached(_ positions: Int) -> Bool {
        guard let cache else { return false }
        return cache.evict(max(positions / kv.pageSize + 1, 1)) > 0
    }

    /// Makes a sequence's computed full pages available to later requests.
    func index(_ s: Sequence) {
        guard let cache, s.computed >= kv.pageSize else { return }
        cache.insert(Array(s.tokens[..<s.computed]), pages: s.table.pages)
    }
}
