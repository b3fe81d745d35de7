import CKernels

/// Engine settings (from the CLI / server flags).
public struct EngineOptions: Sendable {
    public var threads = max(1, cpuCount())
    /// Most positions one sequence may hold (prompt + output); 0: the model's trained context,
    /// shortened to what fits the device (`MemoryPlan`).
    public var contextSize = 0
    /// Most sequences decoding at once.
    public var maxBatchSize = 1
    /// maxBatchSize is a default the engine may lower (after the context) to fit the device.
    public var batchAuto = false
    /// Pretend the device (GPU memory, or RAM for the CPU) has this many bytes free (0: ask it).
    public var memoryBudgetBytes = 0
    /// Most tokens in one forward pass (prefill chunks are cut to fit).
    public var batchTokens = 512
    public var pageSize = 16
    /// KV pages in the pool; 0 = from kvMemoryBytes, or enough for maxBatchSize full contexts.
    public var kvPages = 0
    public var kvMemoryBytes = 0
    /// How K and V are stored in the pages (llama.cpp's --cache-type-k / --cache-type-v).
    public var cacheTypeK = KVCacheType.f16
    public var cacheTypeV = KVCacheType.f16
    /// Keep finished sequences' full KV pages in the radix prefix cache for reuse.
    public var prefixCache = true
    /// Time every kind of op (reported in the stats).
    public var profile = false
    public var speculation = SpeculationOptions()
    /// Where forward passes run: the CPU, or a GPU through Vulkan or Metal.
    public var backend = BackendChoice.auto
    /// Which GPU of the backend (nil: the first real one).
    public var device: Int?

    public init() {}
}

/// The continuous-batching step loop, single-threaded: the engine thread
/// calls `step()`; each step admits waiting requests while pages are free, forms one batch
/// (a decode token for every running sequence plus prefill chunks within the token budget),
/// runs one forward pass, samples and emits events.
final class Scheduler {
    let model: LanguageModel
    let tokenizer: Tokenizer
    let options: EngineOptions
    let kv: PagePool
    /// The target model's forward pass on the chosen backend, and the logits of the last one.
    let forwardOps: ForwardOps
    private var logits: UnsafeMutablePointer<Float>?
    let profiler: Profiler
    let threads: Int
    /// "cpu", or the GPU API and device name.
    let backendName: String
    let deviceName: String
    var waiting: [Sequence] = []
    var running: [Sequence] = []
    /// The prefix index over KV pages (nil when disabled).
    let cache: RadixCache?
    var events: [EngineEvent] = []
    /// Vectors of embedding requests finished since the engine last took them (with their
    /// `finished` events).
    var embeddings: [(id: Int, vector: [Float])] = []
    /// Speculative decoding: the draft model and its scratch (draft mode only), the step-time
    /// model and the counters.
    let draft: (model: LanguageModel, ops: ForwardOps)?
    var specCosts = SpeculationCosts()
    var specStats = SpeculationStats()
    // counters for stats
    var stepsRun = 0
    var tokensGenerated = 0
    var tokensPrefilled = 0
    var preemptions = 0

    /// The memory plan the options came from (Engine makes it before loading).
    let plan: MemoryPlan

    /// `gpu`: the device the plan chose (nil: the CPU).
    init(model: LanguageModel, tokenizer: Tokenizer, options: EngineOptions, draftModel: LanguageModel? = nil,
         gpu: GPUDevice?, plan: MemoryPlan) throws {
        var o = options
        let c = model.config
        self.plan = plan
        guard o.contextSize >= 2 else { throw VeloError(.invalidArgument, "context size must be at least 2") }
        guard o.maxBatchSize >= 1 else { throw VeloError(.invalidArgument, "max batch size must be at least 1") }
        o.batchTokens = max(o.batchTokens, o.maxBatchSize)
        if o.kvPages <= 0 && o.kvMemoryBytes > 0 {
            o.kvPages = o.kvMemoryBytes / PagePool.bytesPerPage(pageSize: o.pageSize, layers: c.layers, kvDim: c.kvDim, typeK: o.cacheTypeK, typeV: o.cacheTypeV)
            guard o.kvPages > 0 else { throw VeloError(.invalidArgument, "the KV memory budget is smaller than one page") }
        }
        if o.kvPages <= 0 {
            o.kvPages = o.maxBatchSize * ((o.contextSize + o.pageSize - 1) / o.pageSize)
            // a draft model keeps its K/V in the same pages: add its share
            if let d = draftModel?.config, o.speculation.mode == .draft {
                let share = Double(d.layers * d.kvDim) / Double(c.layers * c.kvDim)
                o.kvPages += Int((Double(o.kvPages) * share).rounded(.up))
            }
        }
        self.model = model
        self.tokenizer = tokenizer
        kv = try PagePool(pageCount: o.kvPages, pageSize: o.pageSize, layers: c.layers, kvDim: c.kvDim,
                          typeK: o.cacheTypeK, typeV: o.cacheTypeV, hostStorage: gpu == nil)
        let kv = self.kv
        cache = o.prefixCache ? RadixCache(pool: kv) : nil
        let profiler = Profiler(enabled: o.profile)
        self.profiler = profiler
        let spec = o.speculation.mode == .off ? 0 : o.speculation.maxDraft
        o.batchTokens = max(o.batchTokens, o.maxBatchSize * (spec + 1))
        if o.speculation.mode == .draft && draftModel == nil {
            throw VeloError(.invalidArgument, "draft speculation needs a draft model")
        }
        let draftModel = o.speculation.mode == .draft ? draftModel : nil
        if let gpu {
            let pages = try GPUKVPages(device: gpu, pool: kv)
            kv.gpu = (gpu, pages)
            threads = 1
            #if canImport(Metal)
            backendName = "metal"
            #else
            backendName = "vulkan"
            #endif
            deviceName = gpu.name
            let (batchTokens, ctx, seqs) = (o.batchTokens, o.contextSize, o.maxBatchSize)
            func runner(_ m: LanguageModel, logitRows: Int) throws -> ForwardOps {
                try GPUForward(device: gpu, model: m, kv: pages, layers: m.config.layers, kvDim: m.config.kvDim, maxTokens: batchTokens,
                               maxLogitRows: logitRows, maxSequences: seqs, maxContext: ctx, profiler: profiler)
            }
            forwardOps = try runner(model, logitRows: o.maxBatchSize * (spec + 1))
            draft = try draftModel.map { ($0, try runner($0, logitRows: o.maxBatchSize)) }
        } else {
            let pool = ThreadPool(threads: o.threads)
            threads = pool.size
            backendName = "cpu"
            deviceName = ck_isa_name().map { String(cString: $0) } ?? "cpu"
            let (batchTokens, ctx, prof) = (o.batchTokens, o.contextSize, profiler)
            func runner(_ m: LanguageModel, kv view: KVView, logitRows: Int) -> ForwardOps {
                let mc = m.config
                return CPUForward(config: mc, ops: TransformerOps(config: mc, pool: pool, profiler: prof),
                                  ws: Workspace(config: mc, maxTokens: batchTokens, maxLogitRows: logitRows, maxContext: ctx, threads: pool.size),
                                  kv: view)
            }
            forwardOps = runner(model, kv: kv.view, logitRows: o.maxBatchSize * (spec + 1))
            draft = try draftModel.map { d in
                (d, runner(d, kv: try KVView(pool: kv, layers: d.config.layers, kvDim: d.config.kvDim), logitRows: o.maxBatchSize))
            }
        }
        self.options = o
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

    /// One sequence's share of a step's logits: `count` rows starting at `first`, and the
    /// guesses they verify (with the proposer's distributions) when speculating.
    struct Output {
        let seq: Sequence
        let first: Int
        let proposals: [Int32]
        let q: [[(id: Int32, p: Double)]]
    }

    func step() {
        let tStep = nowNanos()
        defer { if profiler.enabled { profiler.add(.step, nanos: nowNanos() - tStep) } }
        for s in running where s.cancelled { finish(s, .cancelled) }
        running.removeAll { $0.cancelled }
        admit()
        let tDraft = nowNanos()
        let guesses = options.speculation.mode == .off ? [:] : propose()
        let draftNs = Double(nowNanos() - tDraft)
        let generatedBefore = tokensGenerated
        var batch = ForwardBatch()
        var outputs: [Output] = []
        var fed: [(Sequence, Int)] = []
        var budget = options.batchTokens
        // decode tokens first (with any guesses to verify): they keep latency flat while
        // prompts are admitted
        for s in running where s.pending == 1 && s.embedding == nil {
            let g = guesses[ObjectIdentifier(s)]
            let tokens = [s.tokens[s.computed]] + (g?.proposals ?? [])
            guard budget >= tokens.count else { continue }
            guard reservePages(for: s, count: tokens.count, protecting: fed) else { continue }
            outputs.append(Output(seq: s, first: batch.logitRows.count, proposals: g?.proposals ?? [], q: g?.q ?? []))
            add(s, tokens: tokens, to: &batch, logits: tokens.count)
            fed.append((s, 1)) // guessed tokens count once accepted
            budget -= tokens.count
        }
        // the sequences of the batch's hidden-state rows, in order (embeddings)
        var pooled: [Sequence] = []
        // prompt chunks; an embedding's prompt is all prefill, its last token included
        for s in running where (s.pending > 1 || s.embedding != nil) && budget > 0 {
            let n = min(s.pending, budget)
            guard reservePages(for: s, count: n, protecting: fed) else { continue }
            let wantsLogits = s.embedding == nil && n == s.pending
            if wantsLogits { outputs.append(Output(seq: s, first: batch.logitRows.count, proposals: [], q: [])) }
            add(s, tokens: Array(s.tokens[s.computed..<s.computed + n]), to: &batch, logits: wantsLogits ? 1 : 0)
            if let e = s.embedding {
                for k in 0..<n where e.pooling.wants(position: s.computed + k, count: s.tokens.count) {
                    batch.hiddenRows.append(batch.count - n + k)
                    pooled.append(s)
                }
            }
            fed.append((s, n))
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
        // rows whose token is their argmax as the model made it: the backend may find those
        // itself, and when every row is one, keep the logits out of host memory
        let argmaxOnly = outputs.map(choosesArgmax)
        batch.argmaxes = argmaxOnly.contains(true)
        batch.hostLogits = argmaxOnly.contains(false)
        let t0 = nowNanos()
        do {
            logits = try model.run(batch, on: forwardOps)
        } catch {
            // a failed device step ends the sequences in it, with the reason; the engine goes on
            for (s, _) in fed where !s.finishedFlag { finishWithText(s, .error, message: "\(error)") }
            running.removeAll { $0.finishedFlag }
            return
        }
        stepsRun += 1
        let now = nowNanos()
        recordStepTime(Double(now - t0), outputs: outputs, batch: batch)
        for (s, n) in fed {
            s.computed += n
            s.table.length = s.computed
            if s.generated == 0 { tokensPrefilled += n }
        }
        if !pooled.isEmpty {
            let hidden = forwardOps.hiddenStates, dim = model.config.dim
            for (i, s) in pooled.enumerated() { s.embedding!.add(hidden + i * dim) }
        }
        for (s, _) in fed where s.embedding != nil && s.pending == 0 { finishEmbedding(s, now: now) }
        let vocab = model.config.vocabSize
        let tSample = nowNanos()
        defer { if profiler.enabled { profiler.add(.sample, nanos: nowNanos() - tSample) } }
        let argmaxes = forwardOps.argmaxes
        for (o, argmaxOnly) in zip(outputs, argmaxOnly) {
            let s = o.seq
            if s.promptDoneAt == 0 {
                s.promptDoneAt = now
                index(s) // concurrent requests with the same prompt can share it from now on
            }
            guard finiteLogits(o, argmaxOnly: argmaxOnly, argmaxes: argmaxes) else {
                finishWithText(s, .error, message: Scheduler.nonFiniteLogits)
                continue
            }
            if argmaxOnly {
                // what the sampler would pick: prepare() changes nothing, choose() is the argmax
                accept(argmaxes?[o.first] ?? Sampler.argmax(self.logits! + o.first * vocab, vocab), for: s, now: now, topLogits: [])
            } else if o.proposals.isEmpty {
                let logits = self.logits! + o.first * vocab
                var top: [(Int32, Float)] = []
                if s.request.topLogits > 0 {
                    top = Sampler.topCandidates(logits, vocab: vocab, k: min(s.request.topLogits, vocab)).map { ($0.id, $0.logit) }
                }
                s.sampler.prepare(logits, vocab: vocab, history: s.tokens[...])
                let wantLogprobs = s.request.logprobs >= 0
                let token: Int32
                if let m = s.matcher {
                    guard !m.onlyEnd, let t = constrainedChoice(s, m, logits, fullMask: wantLogprobs) else {
                        // the grammar is complete and allows nothing more, or no token can continue it
                        finishWithText(s, m.onlyEnd ? .stop : .error, message: m.onlyEnd ? nil : "no token of the vocabulary can continue the grammar")
                        continue
                    }
                    token = t
                } else {
                    token = s.sampler.choose(logits, vocab: vocab)
                }
                let lp = wantLogprobs ? Sampler.logprobs(logits, vocab: vocab, chosen: token, top: s.request.logprobs) : nil
                accept(token, for: s, now: now, topLogits: top, logprobs: lp)
            } else {
                verify(o, now: now)
            }
        }
        if options.speculation.mode != .off {
            judgeSpeculation(outputs, ns: draftNs + Double(now - t0), emitted: tokensGenerated - generatedBefore)
        }
        running.removeAll { $0.finishedFlag }
    }

    /// The measured gate over the model-based choice of k: the wall time per emitted token of
    /// steps that speculated (drafting, the draft's catch-up after a pause, and verification)
    /// against that of plain decode steps. When speculating costs more per token, every
    /// sequence that speculated pauses, for twice as long each time it happens again.
    private func judgeSpeculation(_ outputs: [Output], ns: Double, emitted: Int) {
        let decoding = outputs.filter { $0.seq.generated > 0 || !$0.proposals.isEmpty }
        guard emitted > 0, !decoding.isEmpty, decoding.count == outputs.count else { return }
        let perToken = ns / Double(emitted)
        let speculated = decoding.filter { !$0.proposals.isEmpty }
        if speculated.isEmpty {
            specCosts.plainPerToken = SpeculationCosts.ema(specCosts.plainPerToken, perToken)
            return
        }
        specCosts.specPerToken = SpeculationCosts.ema(specCosts.specPerToken, perToken)
        guard options.speculation.adaptive, specCosts.plainPerToken > 0 else { return }
        guard specCosts.specPerToken > specCosts.plainPerToken else {
            specCosts.pauseLength = max(specCosts.pauseLength / 2, 0)
            return
        }
        // the verdict is the engine's: new sequences start from it instead of learning again
        specCosts.pauseLength = min(max(specCosts.pauseLength * 2, 8), 1024)
        for o in speculated where o.seq.spec.pausedSteps == 0 { o.seq.spec.pausedSteps = specCosts.pauseLength }
        specCosts.specPerToken = 0 // judge the next attempt on its own
    }

    static let nonFiniteLogits = "the model computed logits that are not numbers (NaN or infinity): its weights are "
        + "probably damaged (a corrupted download or a broken fine-tune); --check-tensors checks every tensor's values at load"

    /// Whether an output's logit rows hold only finite numbers. NaN or infinite logits (damaged
    /// weights, an overflow) would make every comparison of the choice false; the request ends
    /// with an error instead, and the engine goes on. A row the device chose from is checked by
    /// argmax_rows itself (-1 for a row with a NaN or an infinity).
    private func finiteLogits(_ o: Output, argmaxOnly: Bool, argmaxes: UnsafePointer<Int32>?) -> Bool {
        if argmaxOnly, let a = argmaxes { return a[o.first] >= 0 }
        let vocab = model.config.vocabSize
        return (0...o.proposals.count).allSatisfy { Sampler.allFinite(logits! + (o.first + $0) * vocab, vocab) }
    }

    /// Whether an output's token is its row's argmax and nothing else of the row is read: no
    /// guesses to verify, no grammar, no logprobs or top logits, a sampler that only takes the
    /// argmax (`SamplingParams.choosesArgmax`).
    private func choosesArgmax(_ o: Output) -> Bool {
        let r = o.seq.request
        return o.proposals.isEmpty && o.seq.matcher == nil && r.logprobs < 0 && r.topLogits == 0 && o.seq.sampler.params.choosesArgmax
    }

    private func add(_ s: Sequence, tokens: [Int32], to batch: inout ForwardBatch, logits: Int) {
        let seqIndex = batch.tables.count
        batch.tables.append(s.table)
        for (k, t) in tokens.enumerated() {
            batch.tokens.append(t)
            batch.positions.append(s.computed + k)
            batch.sequence.append(seqIndex)
        }
        for r in (batch.count - logits)..<batch.count { batch.logitRows.append(r) }
    }

    // MARK: speculative decoding

    typealias Guesses = (proposals: [Int32], q: [[(id: Int32, p: Double)]])
    typealias Drafting = (s: Sequence, k: Int, proposals: [Int32], q: [[(id: Int32, p: Double)]])

    /// Guesses for every decoding sequence that speculates this step.
    private func propose() -> [ObjectIdentifier: Guesses] {
        var chosen: [(Sequence, Int)] = []
        // a grammar's mask depends on each accepted token: constrained sequences do not guess
        for s in running where s.pending == 1 && !s.cancelled && s.matcher == nil && s.embedding == nil {
            if s.spec.pausedSteps > 0 {
                s.spec.pausedSteps -= 1
                specStats.pausedSteps += 1
                continue
            }
            // plain decoding's speed is the yardstick: measure it before guessing
            if specCosts.plain == 0 && options.speculation.adaptive { continue }
            let k = options.speculation.adaptive ? s.spec.k : options.speculation.maxDraft
            let room = options.contextSize - s.tokens.count - 1
            if room >= 1 { chosen.append((s, max(1, min(k, options.speculation.maxDraft, room)))) }
        }
        guard !chosen.isEmpty else { return [:] }
        if options.speculation.mode == .ngram {
            var out: [ObjectIdentifier: Guesses] = [:]
            for (s, k) in chosen {
                let p = ngramProposal(s.tokens, k: k)
                if !p.isEmpty { out[ObjectIdentifier(s)] = (p, p.map { [($0, 1.0)] }) }
            }
            return out
        }
        return runDraft(chosen)
    }

    /// The draft model catches up on each sequence's tokens, then guesses k tokens one step at
    /// a time (all sequences batched), sampling with the sequence's own settings.
    private func runDraft(_ chosen: [(Sequence, Int)]) -> [ObjectIdentifier: Guesses] {
        guard let d = draft else { return [:] }
        let vocab = d.model.config.vocabSize
        var active: [Drafting] = []
        for (s, k) in chosen {
            s.spec.draftTable.length = s.spec.draftComputed
            let need = s.tokens.count + k - s.spec.draftComputed
            var ok = s.spec.draftTable.reserve(need, in: kv)
            if !ok, evictCached(need) { ok = s.spec.draftTable.reserve(need, in: kv) }
            if ok { active.append((s, k, [], [])) }
        }
        // catch up (prompt and accepted tokens), in chunks that fit the workspace
        while true {
            var batch = ForwardBatch()
            var rowsFor: [(index: Int, row: Int)] = []
            for (i, a) in active.enumerated() {
                let s = a.s
                let pending = s.tokens.count - s.spec.draftComputed
                let room = options.batchTokens - batch.count
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
            guard let logits = try? d.model.run(batch, on: d.ops) else { return [:] } // speculation is optional
            if batch.count == batch.tables.count { specCosts.draftStep = SpeculationCosts.ema(specCosts.draftStep, Double(nowNanos() - t0)) }
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
            guard let logits = try? d.model.run(batch, on: d.ops) else { break }
            specCosts.draftStep = SpeculationCosts.ema(specCosts.draftStep, Double(nowNanos() - t0))
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

    /// Checks the guesses against the target's logits, left to right: guess d is kept with
    /// probability min(1, p(d) / q(d)); the first refused one is replaced by a draw from the
    /// leftover mass max(0, p - q), and if all are kept the last row gives one more token.
    /// With greedy settings p and q are one-hot, so this is an exact-match test.
    private func verify(_ o: Output, now: UInt64) {
        let s = o.seq
        let vocab = model.config.vocabSize
        let k = o.proposals.count
        var kept = 0
        for i in 0...k {
            if s.finishedFlag { break }
            let p = s.sampler.probabilities(logits! + (o.first + i) * vocab, vocab: vocab, history: s.tokens[...])
            if i == k {
                accept(s.sampler.draw(p), for: s, now: now, topLogits: [])
                break
            }
            let d = o.proposals[i]
            let pd = p.first { $0.id == d }?.p ?? 0
            let qd = o.q[i].first { $0.id == d }?.p ?? 1
            let ok = s.sampler.uniform() < min(1, pd / qd)
            specStats.record(position: i, accepted: ok)
            s.spec.drafted += 1
            if ok {
                kept += 1
                s.spec.accepted += 1
                // the guess's K/V were computed in this pass: they count from now on
                s.computed += 1
                s.table.length = s.computed
                accept(d, for: s, now: now, topLogits: [])
                continue
            }
            var rest: [Int32: Double] = [:]
            for c in p { rest[c.id] = c.p }
            for c in o.q[i] { rest[c.id] = max(0, (rest[c.id] ?? 0) - c.p) }
            let residual = rest.filter { $0.value > 0 }.map { (id: $0.key, p: $0.value) }.sorted { $0.id < $1.id }
            accept(s.sampler.draw(residual.isEmpty ? p : residual), for: s, now: now, topLogits: [])
            break
        }
        s.spec.draftComputed = min(s.spec.draftComputed, s.computed)
        specStats.specSteps += 1
        adapt(s, kept: kept, k: k)
    }

    /// Follows the acceptance rate: picks the k with the best expected speed-up, and pauses
    /// speculation for the sequence (for longer each time) when no k beats plain decoding.
    private func adapt(_ s: Sequence, kept: Int, k: Int) {
        s.spec.acceptRate = 0.7 * s.spec.acceptRate + 0.3 * Double(kept) / Double(k)
        guard options.speculation.adaptive else { return }
        let draftCost = options.speculation.mode == .draft ? specCosts.draftStep : 0
        let best = specCosts.best(maxK: options.speculation.maxDraft, acceptance: s.spec.acceptRate, draftCostPerToken: draftCost)
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
    private func recordStepTime(_ ns: Double, outputs: [Output], batch: ForwardBatch) {
        guard options.speculation.mode != .off, !outputs.isEmpty,
              batch.count == outputs.reduce(0, { $0 + 1 + $1.proposals.count }) else { return }
        let ks = Set(outputs.map { $0.proposals.count })
        guard ks.count == 1, let k = ks.first else { return }
        if k == 0 { specCosts.plain = SpeculationCosts.ema(specCosts.plain, ns) }
        else if k < specCosts.verify.count { specCosts.verify[k] = SpeculationCosts.ema(specCosts.verify[k], ns) }
    }

    /// Pages for `count` more positions of `s`; preempts the youngest other sequence (its KV
    /// is recomputed later) when the pool is dry. False if nothing could be freed.
    private func reservePages(for s: Sequence, count: Int, protecting fed: [(Sequence, Int)]) -> Bool {
        while !s.table.reserve(count, in: kv) {
            if evictCached(count) { continue }
            if dropDraftPages() { continue }
            // never a sequence already in this step's batch: its K/V are about to be written
            guard let victim = running.last(where: { v in v !== s && !v.table.pages.isEmpty && !fed.contains { $0.0 === v } })
            else { return false }
            preempt(victim)
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
            if s.embedding != nil && s.tokens.count > options.contextSize {
                waiting.removeFirst()
                finish(s, .error, message: "the input has \(s.tokens.count) tokens, more than the context size \(options.contextSize)")
                continue
            }
            if s.embedding == nil && s.tokens.count >= options.contextSize {
                waiting.removeFirst()
                finish(s, .error, message: "the prompt has \(s.tokens.count) tokens, more than the context size \(options.contextSize) allows (it needs room for at least one generated token)")
                continue
            }
            reuseCachedPrefix(for: s)
            // check that the whole prompt fits (evicting cached pages if needed), but hold only
            // the first chunk's pages: the rest are taken chunk by chunk, so pages never sit
            // reserved-but-empty through a long prefill
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
            s.table.truncate(to: s.computed + min(need, options.batchTokens), in: kv)
            waiting.removeFirst()
            if s.admittedAt == 0 { s.admittedAt = nowNanos() } // the first admission, not a re-admission after preemption
            if options.speculation.adaptive { s.spec.pausedSteps = specCosts.pauseLength }
            running.append(s)
        }
    }

    /// Starts a sequence on the longest cached prefix of its tokens (whole pages, leaving at
    /// least one token to compute so there are logits to sample from).
    private func reuseCachedPrefix(for s: Sequence) {
        guard let cache, s.computed == 0, s.table.pages.isEmpty else { return }
        // the cache keeps K/V, not hidden states: only last-token pooling may skip positions
        if let e = s.embedding, e.pooling != .last { return }
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

    private var grammarStats = GrammarStats()
    func clearGrammarOverhead() { grammarStats.clearOverhead() }
    /// The end-of-generation tokens as mask bits (allowed when a grammar is complete).
    private lazy var endMask: [UInt64] = {
        var bits = [UInt64](repeating: 0, count: (model.config.vocabSize + 63) / 64)
        for t in 0..<model.config.vocabSize where tokenizer.isEndOfGeneration(Int32(t)) { bits[t >> 6] |= 1 << UInt64(t & 63) }
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
        let vocab = model.config.vocabSize, trie = tokenTrie
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

    /// Makes a sequence's computed full pages available to later requests.
    private func index(_ s: Sequence) {
        guard let cache, s.computed >= kv.pageSize else { return }
        cache.insert(Array(s.tokens[..<s.computed]), pages: s.table.pages)
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
        if let m = s.matcher { m.accept(tokenTrie.bytes[Int(token)]) }
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
        if reason != .error { index(s) }
        s.table.releaseAll(to: kv)
        s.spec.draftTable.releaseAll(to: kv)
        u.draftedTokens = s.spec.drafted
        u.acceptedTokens = s.spec.accepted
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
        put("preemptions", preemptions)
        put("threads", threads)
        pairs.append(("backend", .string(backendName)))
        pairs.append(("device", .string(deviceName)))
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
        put("kv_pages_shared", cache?.pagesShared ?? 0)
        pairs.append(("profile_ms", profiler.enabled ? profiler.json : .null))
        pairs.append(("grammar", grammarStats.json))
        pairs.append(("kernel_ms", profiler.enabled ? profiler.kernelJSON : .null))
        pairs.append(("speculation", options.speculation.mode == .off ? .null : specStats.json))
        pairs.append(("speculation_mode", .string(options.speculation.mode.rawValue)))
        pairs.append(("memory", plan.json))
        return .object(pairs)
    }
}
