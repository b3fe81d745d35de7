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
    /// Keep finished sequences' full KV pages in the radix prefix cache for reuse.
    public var prefixCache = true
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
    /// The prefix index over KV pages (nil when disabled).
    let cache: RadixCache?
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
        cache = o.prefixCache ? RadixCache(pool: kv) : nil
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
            if s.promptDoneAt == 0 {
                s.promptDoneAt = now
                index(s) // concurrent requests with the same prompt can share it from now on
            }
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
            if evictCached(count) { continue }
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
            reuseCachedPrefix(for: s)
            // the whole prompt's pages up front, so a prefill never stalls half-way
            let need = s.tokens.count - s.computed
            while !s.table.reserve(need, in: kv), evictCached(need) {}
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

    /// Starts a sequence on the longest cached prefix of its tokens (whole pages, leaving at
    /// least one token to compute so there are logits to sample from).
    private func reuseCachedPrefix(for s: Sequence) {
        guard let cache, s.computed == 0, s.table.pages.isEmpty else { return }
        let pages = cache.match(s.tokens, limit: s.tokens.count - 1)
        for p in pages { kv.retain(p) }
        s.table.pages = pages
        s.computed = pages.count * kv.pageSize
        s.table.length = s.computed
        s.cachedTokens = s.computed
    }

    /// Frees cached pages nobody uses; true if any were freed.
    private func evictCached(_ pages: Int) -> Bool {
        guard let cache else { return false }
        return cache.evict(max(pages / kv.pageSize + 1, 1)) > 0
    }

    /// Makes a sequence's computed full pages available to later requests.
    private func index(_ s: Sequence) {
        guard let cache, s.computed >= kv.pageSize else { return }
        cache.insert(Array(s.tokens[..<s.computed]), pages: s.table.pages)
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
        if reason != .error { index(s) }
        s.table.releaseAll(to: kv)
        events.append(.finished(id: s.id, reason: reason, message: message, usage: u))
    }

    /// Slots in pages held by running sequences, and how many of them hold a token: the
    /// difference is the KV waste (only the tail of each sequence's last page).
    var kvReservedSlots: Int { running.reduce(0) { $0 + $1.table.pages.count } * kv.pageSize }
    var kvUsedSlots: Int { running.reduce(0) { $0 + $1.computed } }

    var cachedOnly: Int { cache.map { $0.pagesHeld - $0.pagesShared } ?? 0 }

    var statsJSON: JSON {
        var pairs: [(String, JSON)] = []
        func put(_ key: String, _ v: Int) { pairs.append((key, .int(v))) }
        put("running", running.count)
        put("waiting", waiting.count)
        put("kv_pages_total", kv.pageCount)
        // pages held by sequences; pages only the prefix cache holds are counted apart
        put("kv_pages_used", kv.usedPages - cachedOnly)
        put("kv_pages_cached", cache?.pagesHeld ?? 0)
        put("kv_pages_free", kv.freePages)
        put("page_size", kv.pageSize)
        put("kv_bytes_per_page", PagePool.bytesPerPage(pageSize: kv.pageSize, layers: kv.layers, kvDim: kv.kvDim))
        put("kv_reserved_slots", kvReservedSlots)
        put("kv_used_slots", kvUsedSlots)
        put("steps", stepsRun)
        put("tokens_generated", tokensGenerated)
        put("tokens_prefilled", tokensPrefilled)
        put("preemptions", preemptions)
        put("threads", ops.pool.size)
        put("context_size", options.contextSize)
        put("max_batch_size", options.maxBatchSize)
        pairs.append(("prefix_cache_enabled", .bool(cache != nil)))
        put("prefix_cache_hits", cache?.hits ?? 0)
        put("prefix_cache_misses", cache?.misses ?? 0)
        put("prefix_cache_tokens_served", cache?.cachedTokensServed ?? 0)
        put("prefix_cache_evictions", cache?.evictions ?? 0)
        put("prefix_cache_pages", cache?.pagesHeld ?? 0)
        put("kv_pages_shared", cache?.pagesShared ?? 0)
        pairs.append(("profile_ms", ops.profiler.enabled ? ops.profiler.json : .null))
        return .object(pairs)
    }
}
