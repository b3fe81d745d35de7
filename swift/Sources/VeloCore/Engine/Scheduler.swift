import CKernels

/// The continuous-batching step loop, single-threaded: the engine thread calls `step()`, which
/// is plan → run → apply, as vLLM's `EngineCore.step` is: the planner decides which sequences
/// run which tokens (`StepPlanner.schedule`), the model runner runs that batch on its backend
/// (`ModelRunners`), and the outputs are applied: tokens chosen (`TokenSelector`), guesses
/// verified (`Speculator`), text, stops and events.
final class Scheduler {
    let model: LanguageModel
    let tokenizer: Tokenizer
    let options: EngineOptions
    let kv: PagePool
    /// The prefix index over KV pages (nil when disabled).
    let cache: RadixCache?
    let planner: StepPlanner
    let runners: ModelRunners
    let selector: TokenSelector
    /// Speculative decoding (nil when off).
    let speculator: Speculator?
    let profiler: Profiler
    /// The memory plan the options came from (Engine makes it before loading).
    let plan: MemoryPlan
    /// The logits of the last forward pass.
    private var logits: UnsafeMutablePointer<Float>?
    var events: [EngineEvent] = []
    /// Vectors of embedding requests finished since the engine last took them (with their
    /// `finished` events).
    var embeddings: [(id: Int, vector: [Float])] = []
    // counters for stats
    var stepsRun = 0
    var tokensGenerated = 0
    var tokensPrefilled = 0

    /// `options` as `Engine.plan` left them (context, batch, pages and token budget decided);
    /// `gpu`: the device the plan chose (nil: the CPU).
    init(model: LanguageModel, tokenizer: Tokenizer, options o: EngineOptions, draftModel: LanguageModel? = nil,
         gpu: GPUDevice?, plan: MemoryPlan) throws {
        let c = model.config
        guard o.contextSize >= 2 else { throw VeloError(.invalidArgument, "context size must be at least 2") }
        guard o.maxBatchSize >= 1 else { throw VeloError(.invalidArgument, "max batch size must be at least 1") }
        guard o.kvPages > 0, o.batchTokens >= o.maxBatchSize else { throw VeloError(.internalError, "the engine's page and token budgets were not planned") }
        if o.spec.mode == .draft && draftModel == nil {
            throw VeloError(.invalidArgument, "draft speculation needs a draft model")
        }
        self.model = model
        self.tokenizer = tokenizer
        self.options = o
        self.plan = plan
        kv = try PagePool(pageCount: o.kvPages, pageSize: o.pageSize, layers: c.kvLayers, kvDim: c.kvDim,
                          typeK: o.cacheTypeK, typeV: o.cacheTypeV, layerDims: c.kvLayerDims, hostStorage: gpu == nil)
        cache = o.prefixCache ? RadixCache(pool: kv, states: DeltaNetShape.checkpoints(c, sequences: o.maxBatchSize, prefixCache: true)) : nil
        planner = StepPlanner(limits: .init(sequences: o.maxBatchSize, tokens: o.batchTokens, context: o.contextSize), kv: kv, cache: cache,
                              stateSlots: c.deltaNet != nil)
        profiler = Profiler(enabled: o.profile)
        let spec = o.spec.mode == .off ? 0 : o.spec.draftMax
        runners = try ModelRunners.make(model: model, draft: o.spec.mode == .draft ? draftModel : nil, kv: kv, gpu: gpu,
                                        options: o, logitRows: o.maxBatchSize * (spec + 1), profiler: profiler)
        selector = TokenSelector(tokenizer: tokenizer, vocab: c.vocabSize)
        let planner = self.planner
        switch o.spec.mode {
        case .off: speculator = nil
        case .ngram: speculator = Speculator(options: o.spec, contextSize: o.contextSize, proposer: PromptLookupProposer())
        case .draft:
            let d = runners.draft!
            let proposer = DraftModelProposer(model: d.model, ops: d.ops, kv: kv, maxTokens: o.batchTokens, evict: { planner.evictCached($0) })
            speculator = Speculator(options: o.spec, contextSize: o.contextSize, proposer: proposer)
        }
    }

    var hasWork: Bool { planner.hasWork }
    /// Every request not yet finished.
    var inFlight: [Sequence] { planner.waiting + planner.running }

    func submit(_ seq: Sequence) { planner.submit(seq) }

    func cancel(_ id: Int) {
        if let s = planner.removeWaiting(id) {
            finish(s, .cancelled)
        } else if let s = planner.running.first(where: { $0.id == id }) {
            s.cancelled = true
        }
    }

    // MARK: the step

    func step() {
        let tStep = nowNanos()
        defer { if profiler.enabled { profiler.add(.step, nanos: nowNanos() - tStep) } }
        // cancelled sequences go first: their pages are free for this step's admissions
        for s in planner.running where s.cancelled { finish(s, .cancelled) }
        planner.dropFinished()
        let tDraft = nowNanos()
        let guesses = speculator?.guesses(for: planner.running) ?? [:]
        let draftNs = Double(nowNanos() - tDraft)
        var plan = planner.schedule(guesses: guesses)
        for (s, why) in plan.refused { finish(s, .error, message: why) }
        for s in plan.admitted {
            if s.admittedAt == 0 { s.admittedAt = nowNanos() } // the first admission, not one after preemption
            speculator?.admitted(s)
        }
        if let s = plan.stalled {
            // Nothing could get pages and nothing could be preempted: the pool is too small for
            // even one sequence to go on. End the oldest rather than spin forever.
            finishWithText(s, .length, message: "the KV cache is full (\(kv.pageCount) pages)")
            planner.dropFinished()
            return
        }
        guard plan.batch.count > 0 else { return }
        let outputs = plan.outputs
        // rows whose token is their argmax as the model made it: the backend may find those
        // itself, and when every row is one, keep the logits out of host memory
        let argmaxOnly = outputs.map(selector.choosesArgmax)
        plan.batch.argmaxes = argmaxOnly.contains(true)
        plan.batch.hostLogits = argmaxOnly.contains(false)
        let t0 = nowNanos()
        do {
            logits = try model.run(plan.batch, on: runners.target)
        } catch {
            // a failed device step ends the sequences in it, with the reason; the engine goes on
            for e in plan.entries where !e.seq.finishedFlag { finishWithText(e.seq, .error, message: "\(error)") }
            planner.dropFinished()
            return
        }
        stepsRun += 1
        let now = nowNanos()
        let generatedBefore = tokensGenerated
        speculator?.recordStepTime(Double(now - t0), outputs: outputs, batch: plan.batch)
        apply(plan, outputs: outputs, argmaxOnly: argmaxOnly, now: now)
        speculator?.judge(outputs, ns: draftNs + Double(now - t0), emitted: tokensGenerated - generatedBefore)
        planner.dropFinished()
    }

    /// What the pass computed, into the sequences: positions computed, embeddings pooled, and
    /// each output's next token (or its guesses checked).
    private func apply(_ plan: StepPlan, outputs: [StepPlan.Entry], argmaxOnly: [Bool], now: UInt64) {
        for e in plan.entries {
            let s = e.seq
            s.computed += e.advance
            s.table.length = s.computed
            if s.generated == 0 { tokensPrefilled += e.advance }
        }
        planner.ran(plan)
        if !plan.pooled.isEmpty {
            let hidden = runners.target.hiddenStates, dim = model.config.dim
            for (i, s) in plan.pooled.enumerated() { s.embedding!.add(hidden + i * dim) }
        }
        for e in plan.entries where e.seq.embedding != nil && e.seq.pending == 0 { finishEmbedding(e.seq, now: now) }
        let vocab = model.config.vocabSize
        let tSample = nowNanos()
        defer { if profiler.enabled { profiler.add(.sample, nanos: nowNanos() - tSample) } }
        let argmaxes = runners.target.argmaxes
        for (e, argmaxOnly) in zip(outputs, argmaxOnly) {
            let s = e.seq, row = e.firstLogitRow!
            if s.promptDoneAt == 0 {
                s.promptDoneAt = now
                planner.index(s) // concurrent requests with the same prompt can share it from now on
            }
            guard selector.finite(e, argmaxOnly: argmaxOnly, logits: logits, argmaxes: argmaxes) else {
                finishWithText(s, .error, message: TokenSelector.nonFiniteLogits)
                continue
            }
            if argmaxOnly {
                // what the sampler would pick: prepare() changes nothing, choose() is the argmax
                accept(argmaxes?[row] ?? Sampler.argmax(logits! + row * vocab, vocab), for: s, now: now, topLogits: [])
            } else if let speculator, !e.proposals.isEmpty {
                speculator.verify(e, logits: logits!, vocab: vocab) { accept($0, for: s, now: now, topLogits: []) }
            } else {
                switch selector.select(s, logits! + row * vocab) {
                case .token(let t, let top, let lp): accept(t, for: s, now: now, topLogits: top, logprobs: lp)
                case .grammarComplete: finishWithText(s, .stop)
                case .grammarStuck: finishWithText(s, .error, message: "no token of the vocabulary can continue the grammar")
                }
            }
        }
    }

    private func accept(_ token: Int32, for s: Sequence, now: UInt64, topLogits: [(Int32, Float)], logprobs: TokenLogprobs? = nil) {
        if s.firstTokenAt == 0 { s.firstTokenAt = now }
        let eog = tokenizer.isEndOfGeneration(token) && !s.request.ignoreEOS
        if eog {
            finishWithText(s, .stop)
            return
        }
        s.tokens.append(token)
        tokensGenerated += 1
        let piece = (try? tokenizer.piece(token)) ?? []
        selector.advanceGrammar(s, past: token)
        let text = s.text.push(piece)
        events.append(.tokens(id: s.id, tokens: [token], text: text, topLogits: topLogits, logprobs: logprobs))
        if s.text.stopped {
            finish(s, .stop)
        } else if s.generated >= s.request.maxTokens || s.tokens.count >= options.contextSize {
            finishWithText(s, .length)
        }
    }

    /// An embedding whose whole prompt went through: its vector out, then finished as a
    /// generation is (full pages into the prefix cache, the rest freed).
    private func finishEmbedding(_ s: Sequence, now: UInt64) {
        s.promptDoneAt = now
        embeddings.append((s.id, s.embedding!.vector))
        finish(s, .stop)
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
        // Doubles, not UInt64 differences: nothing here may trap on a clock edge case
        func ms(_ from: UInt64, _ to: UInt64) -> Double { max(0, Double(to) - Double(from)) / 1e6 }
        if s.firstTokenAt > 0 { u.timeToFirstTokenMs = ms(s.submittedAt, s.firstTokenAt) }
        if s.promptDoneAt > 0 {
            u.promptMs = ms(max(s.admittedAt, s.submittedAt), s.promptDoneAt)
            u.generationMs = ms(s.promptDoneAt, now)
        }
        if reason != .error { planner.index(s) }
        s.table.releaseAll(to: kv)
        s.spec.draftTable.releaseAll(to: kv)
        u.draftedTokens = s.spec.drafted
        u.acceptedTokens = s.spec.accepted
        events.append(.finished(id: s.id, reason: reason, message: message, usage: u))
    }

    /// Slots in pages held by running sequences, and how many of them hold a token: the
    /// difference is the KV waste (only the tail of each sequence's last page).
    var kvReservedSlots: Int { planner.running.reduce(0) { $0 + $1.table.pages.count } * kv.pageSize }
    var kvUsedSlots: Int { planner.running.reduce(0) { $0 + $1.computed } }

    var cachedOnly: Int { cache.map { $0.pagesHeld - $0.pagesShared } ?? 0 }

    var statsJSON: JSON {
        var pairs: [(String, JSON)] = []
        func put(_ key: String, _ v: Int) { pairs.append((key, .int(v))) }
        put("running", planner.running.count)
        put("waiting", planner.waiting.count)
        put("kv_pages_total", kv.pageCount)
        // pages held by sequences; pages only the prefix cache holds are counted apart
        put("kv_pages_used", kv.usedPages - cachedOnly)
        put("kv_pages_cached", cache?.pagesHeld ?? 0)
        put("kv_pages_free", kv.freePages)
        put("page_size", kv.pageSize)
        put("kv_bytes_per_page", kv.pageBytes)
        pairs.append(("cache_type_k", .string(kv.typeK.rawValue)))
        pairs.append(("cache_type_v", .string(kv.typeV.rawValue)))
        // GPU buffers the pool spans (1 on the CPU)
        put("kv_buffers", kv.gpu?.pages.groups.count ?? 1)
        put("kv_reserved_slots", kvReservedSlots)
        put("kv_used_slots", kvUsedSlots)
        put("steps", stepsRun)
        put("tokens_generated", tokensGenerated)
        put("tokens_prefilled", tokensPrefilled)
        put("preemptions", planner.preemptions)
        put("threads", runners.threads)
        pairs.append(("backend", .string(runners.backend)))
        pairs.append(("device", .string(runners.device)))
        put("context_size", options.contextSize)
        put("embedding_length", model.config.dim)
        // how embeddings pool (null: this model gives none)
        pairs.append(("pooling", (try? Pooling(ggufType: model.config.poolingType)).map { .string($0.rawValue) } ?? .null))
        put("max_batch_size", options.maxBatchSize)
        pairs.append(("prefix_cache_enabled", .bool(cache != nil)))
        put("prefix_cache_hits", cache?.hits ?? 0)
        put("prefix_cache_misses", cache?.misses ?? 0)
        put("prefix_cache_tokens_served", cache?.cachedTokensServed ?? 0)
        put("prefix_cache_evictions", cache?.evictions ?? 0)
        put("prefix_cache_pages", cache?.pagesHeld ?? 0)
        if let cache, cache.stateCapacity > 0 { put("prefix_cache_states", cache.statesHeld) }
        put("kv_pages_shared", cache?.pagesShared ?? 0)
        pairs.append(("profile_ms", profiler.enabled ? profiler.json : .null))
        pairs.append(("grammar", selector.grammarStats.json))
        pairs.append(("kernel_ms", profiler.enabled ? profiler.kernelJSON : .null))
        pairs.append(("speculation", speculator?.stats.json ?? .null))
        pairs.append(("speculation_mode", .string(options.spec.mode.rawValue)))
        pairs.append(("memory", plan.json))
        return .object(pairs)
    }
}
