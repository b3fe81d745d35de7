/// Engine settings (from the CLI / server flags).
public struct EngineOptions: Sendable {
    public var threads = max(1, cpuCount())
    /// Most positions one sequence may hold (prompt + output).
    public var contextSize = 2048
    /// Most sequences decoding at once.
    public var maxBatchSize = 1
    /// Most tokens in one forward pass (prefill chunks are cut to fit).
    public var batchTokens = 512
    public var pageSize = 16
    /// KV pages in the pool; 0 = from kvMemoryBytes, or enough for maxBatchSize full contexts.
    public var kvPages = 0
    public var kvMemoryBytes = 0
    /// Finished chat sessions whose KV is kept for their next turn.
    public var maxSessions = 4
    /// Time every kind of op (reported in the stats).
    public var profile = false

    public init() {}
}

/// The continuous-batching step loop (ARCHITECTURE §3), single-threaded: the engine thread
/// calls `step()`; each step admits waiting requests while pages are free, forms one batch
/// (a decode token for every running sequence plus prefill chunks within the token budget),
/// runs one forward pass, samples and emits events.
final class Scheduler {
    let model: LanguageModel
    let tokenizer: Tokenizer
    let options: EngineOptions
    let kv: PagePool
    let ops: TransformerOps
    let ws: Workspace
    var waiting: [Sequence] = []
    var running: [Sequence] = []
    /// Session key → (tokens whose KV is kept, their pages), most recent last.
    var sessions: [(key: String, tokens: [Int32], table: BlockTable)] = []
    var events: [EngineEvent] = []
    // counters for stats
    var stepsRun = 0
    var tokensGenerated = 0
    var tokensPrefilled = 0
    var preemptions = 0

    init(model: LanguageModel, tokenizer: Tokenizer, options: EngineOptions) throws {
        var o = options
        let c = model.config
        guard o.contextSize >= 2 else { throw VeloError(.invalidArgument, "context size must be at least 2") }
        guard o.maxBatchSize >= 1 else { throw VeloError(.invalidArgument, "max batch size must be at least 1") }
        o.batchTokens = max(o.batchTokens, o.maxBatchSize)
        if o.kvPages <= 0 && o.kvMemoryBytes > 0 {
            o.kvPages = o.kvMemoryBytes / PagePool.bytesPerPage(pageSize: o.pageSize, layers: c.layers, kvDim: c.kvDim)
            guard o.kvPages > 0 else { throw VeloError(.invalidArgument, "the KV memory budget is smaller than one page") }
        }
        if o.kvPages <= 0 {
            o.kvPages = o.maxBatchSize * ((o.contextSize + o.pageSize - 1) / o.pageSize)
        }
        self.options = o
        self.model = model
        self.tokenizer = tokenizer
        kv = try PagePool(pageCount: o.kvPages, pageSize: o.pageSize, layers: c.layers, kvDim: c.kvDim)
        let pool = ThreadPool(threads: o.threads)
        ops = TransformerOps(config: c, pool: pool, profiler: Profiler(enabled: o.profile))
        ws = Workspace(config: c, maxTokens: o.batchTokens, maxLogitRows: o.maxBatchSize, maxContext: o.contextSize, threads: pool.size)
    }

    var hasWork: Bool { !waiting.isEmpty || !running.isEmpty }

    func submit(_ seq: Sequence) {
        waiting.append(seq)
    }

    func cancel(_ id: Int) {
        if let i = waiting.firstIndex(where: { $0.id == id }) {
            let s = waiting.remove(at: i)
            finish(s, .cancelled)
        } else if let s = running.first(where: { $0.id == id }) {
            s.cancelled = true
        }
    }

    // MARK: the step

    func step() {
        for s in running where s.cancelled { finish(s, .cancelled) }
        running.removeAll { $0.cancelled }
        admit()
        var batch = ForwardBatch()
        var logitOwners: [Sequence] = []
        var fed: [(Sequence, Int)] = []
        var budget = options.batchTokens
        // decode tokens first: they keep latency flat while prompts are admitted
        for s in running where s.pending == 1 {
            guard budget > 0 else { break }
            guard reservePages(for: s, count: 1, protecting: fed) else { continue }
            add(s, count: 1, to: &batch, logits: true, owners: &logitOwners, fed: &fed)
            budget -= 1
        }
        for s in running where s.pending > 1 && budget > 0 {
            let n = min(s.pending, budget)
            guard reservePages(for: s, count: n, protecting: fed) else { continue }
            add(s, count: n, to: &batch, logits: n == s.pending, owners: &logitOwners, fed: &fed)
            budget -= n
        }
        guard batch.count > 0 else {
            // Nothing could get pages and nothing could be preempted: the pool is too small for
            // even one sequence to go on. End the oldest rather than spin forever.
            if let s = running.first {
                finishWithText(s, .length, message: "the KV cache is full (\(kv.pageCount) pages)")
                running.removeAll { $0.finishedFlag }
            }
            return
        }
        model.forward(batch, kv: kv, ops: ops, ws: ws)
        stepsRun += 1
        let now = nowNanos()
        for (s, n) in fed {
            s.computed += n
            s.table.length = s.computed
            if s.generated == 0 { tokensPrefilled += n }
        }
        let vocab = model.config.vocabSize
        for (i, s) in logitOwners.enumerated() {
            if s.promptDoneAt == 0 { s.promptDoneAt = now }
            let logits = ws.logits + i * vocab
            var top: [(Int32, Float)] = []
            if s.request.topLogits > 0 {
                top = Sampler.topCandidates(logits, vocab: vocab, k: min(s.request.topLogits, vocab)).map { ($0.id, $0.logit) }
            }
            let token = s.sampler.sample(logits, vocab: vocab, history: s.tokens[...])
            accept(token, for: s, now: now, topLogits: top)
        }
        running.removeAll { $0.finishedFlag }
    }

    private func add(_ s: Sequence, count n: Int, to batch: inout ForwardBatch, logits: Bool,
                     owners: inout [Sequence], fed: inout [(Sequence, Int)]) {
        let seqIndex = batch.tables.count
        batch.tables.append(s.table)
        for k in 0..<n {
            batch.tokens.append(s.tokens[s.computed + k])
            batch.positions.append(s.computed + k)
            batch.sequence.append(seqIndex)
        }
        if logits {
            batch.logitRows.append(batch.count - 1)
            owners.append(s)
        }
        fed.append((s, n))
    }

    /// Pages for `count` more positions of `s`; preempts the youngest other sequence (its KV
    /// is recomputed later) when the pool is dry. False if nothing could be freed.
    private func reservePages(for s: Sequence, count: Int, protecting fed: [(Sequence, Int)]) -> Bool {
        while !s.table.reserve(count, in: kv) {
            if evictSession() { continue }
            // never a sequence already in this step's batch: its K/V are about to be written
            guard let victim = running.last(where: { v in v !== s && !v.table.pages.isEmpty && !fed.contains { $0.0 === v } })
            else { return false }
            preempt(victim)
        }
        return true
    }

    private func preempt(_ s: Sequence) {
        preemptions += 1
        s.table.releaseAll(to: kv)
        s.computed = 0
        s.cachedTokens = 0
        running.removeAll { $0 === s }
        waiting.insert(s, at: 0)
    }

    private func admit() {
        while running.count < options.maxBatchSize, let s = waiting.first {
            if s.tokens.isEmpty {
                waiting.removeFirst()
                finish(s, .error, message: "the prompt is empty")
                continue
            }
            if s.tokens.count >= options.contextSize {
                waiting.removeFirst()
                finish(s, .error, message: "the prompt has \(s.tokens.count) tokens, more than the context size \(options.contextSize) allows (it needs room for at least one generated token)")
                continue
            }
            reuseSession(for: s)
            // the whole prompt's pages up front, so a prefill never stalls half-way
            let need = s.tokens.count - s.computed
            while !s.table.reserve(need, in: kv), evictSession() {}
            if s.table.pages.count * kv.pageSize < s.tokens.count {
                if running.isEmpty {
                    waiting.removeFirst()
                    s.table.releaseAll(to: kv)
                    finish(s, .error, message: "the prompt needs \((s.tokens.count + kv.pageSize - 1) / kv.pageSize) KV pages, the pool has \(kv.pageCount)")
                    continue
                }
                break // wait for running sequences to free pages
            }
            waiting.removeFirst()
            s.admittedAt = nowNanos()
            running.append(s)
        }
    }

    /// Chat turns: take the session's kept KV for the longest common prefix.
    private func reuseSession(for s: Sequence) {
        guard let key = s.request.session, s.computed == 0,
              let i = sessions.firstIndex(where: { $0.key == key }) else { return }
        var kept = sessions.remove(at: i)
        var common = 0
        let limit = min(kept.tokens.count, s.tokens.count - 1) // keep ≥1 token to compute logits
        while common < limit, kept.tokens[common] == s.tokens[common] { common += 1 }
        kept.table.truncate(to: common, in: kv)
        kept.table.length = common
        s.table = kept.table
        s.computed = common
        s.cachedTokens = common
    }

    @discardableResult
    private func evictSession() -> Bool {
        guard !sessions.isEmpty else { return false }
        var oldest = sessions.removeFirst()
        oldest.table.releaseAll(to: kv)
        return true
    }

    private func accept(_ token: Int32, for s: Sequence, now: UInt64, topLogits: [(Int32, Float)]) {
        if s.firstTokenAt == 0 { s.firstTokenAt = now }
        let eog = tokenizer.isEndOfGeneration(token) && !s.request.ignoreEOS
        if eog {
            finishWithText(s, .stop)
            return
        }
        s.tokens.append(token)
        tokensGenerated += 1
        let piece = (try? tokenizer.piece(token)) ?? []
        let text = s.text.push(piece)
        events.append(.tokens(id: s.id, tokens: [token], text: text, topLogits: topLogits))
        if s.text.stopped {
            finish(s, .stop)
        } else if s.generated >= s.request.maxTokens || s.tokens.count >= options.contextSize {
            finishWithText(s, .length)
        }
    }

    private func finishWithText(_ s: Sequence, _ reason: FinishReason, message: String? = nil) {
        let rest = s.text.flush()
        if !rest.isEmpty { events.append(.tokens(id: s.id, tokens: [], text: rest)) }
        finish(s, reason, message: message)
    }

    private func finish(_ s: Sequence, _ reason: FinishReason, message: String? = nil) {
        s.finishedFlag = true
        let now = nowNanos()
        var u = EngineEvent.Usage()
        u.promptTokens = s.promptCount
        u.completionTokens = s.generated
        u.cachedTokens = s.cachedTokens
        if s.firstTokenAt > 0 { u.timeToFirstTokenMs = Double(s.firstTokenAt - s.submittedAt) / 1e6 }
        if s.promptDoneAt > 0 {
            u.promptMs = Double(s.promptDoneAt - max(s.admittedAt, s.submittedAt)) / 1e6
            u.generationMs = Double(now - s.promptDoneAt) / 1e6
        }
        // keep a chat session's KV for its next turn; everything else goes back to the pool
        if let key = s.request.session, reason != .error, s.computed > 0 {
            sessions.removeAll { old in
                guard old.key == key else { return false }
                var t = old.table
                t.releaseAll(to: kv)
                return true
            }
            sessions.append((key, Array(s.tokens[..<s.computed]), s.table))
            s.table = BlockTable()
            while sessions.count > options.maxSessions { evictSession() }
        } else {
            s.table.releaseAll(to: kv)
        }
        events.append(.finished(id: s.id, reason: reason, message: message, usage: u))
    }

    /// Slots in pages held by running sequences, and how many of them hold a token: the
    /// difference is the KV waste (only the tail of each sequence's last page).
    var kvReservedSlots: Int { running.reduce(0) { $0 + $1.table.pages.count } * kv.pageSize }
    var kvUsedSlots: Int { running.reduce(0) { $0 + $1.computed } }

    var statsJSON: JSON {
        .object([
            ("running", .int(running.count)), ("waiting", .int(waiting.count)),
            ("kv_pages_total", .int(kv.pageCount)), ("kv_pages_used", .int(kv.usedPages)),
            ("kv_pages_free", .int(kv.freePages)), ("page_size", .int(kv.pageSize)),
            ("sessions", .int(sessions.count)), ("steps", .int(stepsRun)),
            ("tokens_generated", .int(tokensGenerated)), ("tokens_prefilled", .int(tokensPrefilled)),
            ("preemptions", .int(preemptions)), ("threads", .int(ops.pool.size)),
            ("context_size", .int(options.contextSize)), ("max_batch_size", .int(options.maxBatchSize)),
            ("kv_bytes_per_page", .int(PagePool.bytesPerPage(pageSize: kv.pageSize, layers: kv.layers, kvDim: kv.kvDim))),
            ("kv_reserved_slots", .int(kvReservedSlots)), ("kv_used_slots", .int(kvUsedSlots)),
            ("profile_ms", ops.profiler.enabled ? ops.profiler.json : .null),
        ])
    }
}
