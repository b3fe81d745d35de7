#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One loaded model served by one engine thread. Callers never block on a
/// forward pass: `submit` queues a request, `poll` drains the events produced so far, and
/// `cancel` asks for a request to stop. Everything crossing threads goes through `lock`.
public final class Engine: @unchecked Sendable {
    public let file: ModelFile
    /// The draft model of speculative decoding (kept open while the engine runs).
    public let draftFile: ModelFile?
    let scheduler: Scheduler
    private var mutex = pthread_mutex_t()
    private var wake = pthread_cond_t()      // engine thread: new work
    private var ready = pthread_cond_t()     // callers: new events
    private var inbox: [Sequence] = []
    private var cancels: [Int] = []
    /// Work that must run on the engine thread between steps (it owns the pages and the cache).
    private var tasks: [() -> Void] = []
    private var taskDone = pthread_cond_t()
    private var outbox: [EngineEvent] = []
    /// Vectors of finished embedding requests, by id, until `takeEmbedding` (a caller that
    /// never takes one leaves it here until the engine goes).
    private var embeddings: [Int: [Float]] = [:]
    private var nextId = 1
    private var shuttingDown = false
    private var thread: pthread_t?
    private var stats: JSON = .null

    public init(file: ModelFile, options: EngineOptions, draft: ModelFile? = nil) throws {
        self.file = file
        let tokenizer = try file.requireTokenizer()
        if let draft { try Engine.checkSameVocabulary(target: tokenizer, draft: try draft.requireTokenizer(), draftPath: draft.path) }
        // the plan (context, batch, backend) before anything big is allocated; the model is
        // loaded again if the plan changed its context (some RoPE scalings depend on it)
        var o = options
        let first = o.contextSize > 0 ? o.contextSize : 2048
        var model = try loadLanguageModel(file, contextSize: first)
        var draftModel = try draft.map { try loadLanguageModel($0, contextSize: first) }
        // a recurrent state (DeltaNet layers) cannot take back rejected guesses yet
        guard o.spec.mode == .off || (model.config.deltaNet == nil && draftModel?.config.deltaNet == nil) else {
            throw VeloError(.unsupported, "speculative decoding with a model that has a recurrent state (Gated DeltaNet layers) is not supported yet: leave out --spec and --draft")
        }
        var gpu = try openGPUDevice(o.backend, index: o.device)
        // what the GPU kernels cannot run yet runs on the CPU under auto, and is refused by name otherwise
        let lacking = gpu == nil ? nil : GPUForward.lacking(model)
        if let lacking {
            guard o.backend == .auto else { throw VeloError(.unsupported, "the GPU backends cannot run this model yet: they lack \(lacking) (use --backend cpu)") }
            gpu = nil
        }
        var plan = try Engine.plan(&o, model: model, draft: o.spec.mode == .draft ? draftModel : nil, gpu: &gpu)
        if let lacking { plan.notes.insert("runs on the CPU: the GPU kernels lack \(lacking)", at: 0) }
        if o.contextSize != first {
            model = try loadLanguageModel(file, contextSize: o.contextSize)
            draftModel = try draft.map { try loadLanguageModel($0, contextSize: o.contextSize) }
        }
        if gpu == nil { // the CPU reads weights faster from anonymous (huge) pages
            // only with room for the copy beside what runs (MemAvailable counts the file's own
            // cached pages, which the copy lets the kernel drop)
            for f in [file, draft].compactMap({ $0 }) where hostMemory().available > f.gguf.file.size + (1 << 30) {
                f.gguf.file.makeResident()
            }
        }
        self.draftFile = draft
        scheduler = try Scheduler(model: model, tokenizer: tokenizer, options: o, draftModel: draftModel, gpu: gpu, plan: plan)
        stats = scheduler.statsJSON
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&wake, nil)
        pthread_cond_init(&ready, nil)
        pthread_cond_init(&taskDone, nil)
        let unmanaged = Unmanaged.passRetained(self)
        // pthread_t is an integer on Linux and a pointer on Darwin; the start routine's
        // argument is optional on one and not the other: both go through engineThreadMain.
        #if canImport(Darwin)
        var t: pthread_t?
        #else
        var t = pthread_t()
        #endif
        let rc = pthread_create(&t, nil, { engineThreadMain($0) }, unmanaged.toOpaque())
        guard rc == 0 else {
            unmanaged.release()
            throw VeloError(.internalError, "cannot start the engine thread (error \(rc))")
        }
        thread = t
    }

    public var config: ModelConfig { scheduler.model.config }

    /// Fits the options to the device (`MemoryPlanner`): sets the context, batch and KV pages
    /// the plan chose; moves an `auto` backend to the CPU when the GPU cannot hold the model;
    /// throws with the numbers when nothing sensible fits.
    static func plan(_ o: inout EngineOptions, model: LanguageModel, draft: LanguageModel?, gpu: inout GPUDevice?) throws -> MemoryPlan {
        let planner = MemoryPlanner(model: model, draft: draft, options: o)
        func attempt(_ device: GPUDevice?) -> (MemoryPlan?, MemoryPlan) { planner.plan(gpu: device) }
        var (plan, smallest) = attempt(gpu)
        if plan == nil, gpu != nil, o.backend == .auto {
            let why = MemoryPlanner.refusal(smallest, gpu: true)
            let (cpu, cpuSmallest) = attempt(nil)
            guard var cpu else { throw VeloError(.outOfMemory, MemoryPlanner.refusal(cpuSmallest, gpu: false)) }
            cpu.notes.insert("the GPU cannot hold the model, so it runs on the CPU (\(why))", at: 0)
            gpu = nil
            plan = cpu
        }
        guard let plan else { throw VeloError(.outOfMemory, MemoryPlanner.refusal(smallest, gpu: gpu != nil)) }
        guard plan.kvPages > 0 else { throw VeloError(.invalidArgument, "the KV memory budget is smaller than one page") }
        // the page and token budgets are decided here, once: the scheduler takes them as they are
        o.contextSize = plan.contextSize
        o.maxBatchSize = plan.maxBatchSize
        o.kvPages = plan.kvPages
        o.batchTokens = plan.batchTokens
        return plan
    }

    /// A draft must speak the target's language token for token, or its guesses mean nothing.
    static func checkSameVocabulary(target: Tokenizer, draft: Tokenizer, draftPath: String) throws {
        guard target.vocabSize == draft.vocabSize else {
            throw VeloError(.invalidArgument, "the draft model \(draftPath) has a vocabulary of \(draft.vocabSize) tokens, the target \(target.vocabSize): they must be the same")
        }
        for id in 0..<Int32(target.vocabSize) where target.tokenText(id) != draft.tokenText(id) {
            throw VeloError(.invalidArgument, "the draft model \(draftPath) has a different vocabulary from the target (token \(id) differs)")
        }
    }
    public var options: EngineOptions { scheduler.options }

    private func locked<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return try body()
    }

    /// Queues a request; returns its id. Events for it arrive through `poll`.
    public func submit(_ request: GenerationRequest) throws -> Int {
        guard request.maxTokens >= 0 else { throw VeloError(.invalidArgument, "max_tokens must not be negative") }
        try checkVocabulary(request.prompt)
        return try enqueue { id in
            let matcher = try request.grammar.map { try GrammarMatcher(try compiledGrammar($0)) }
            return Sequence(id: id, request: request, matcher: matcher, now: nowNanos())
        }
    }

    /// Queues the embedding of `tokens` (as given: no BOS or EOS added); returns its id. It runs
    /// through the step loop with the generations, batched with them; its `finished` event
    /// arrives through `poll`, and then `takeEmbedding` gives the vector.
    public func submitEmbedding(_ tokens: [Int32]) throws -> Int {
        let pooling = try Pooling(ggufType: config.poolingType)
        guard !tokens.isEmpty else { throw VeloError(.invalidArgument, "the input is empty") }
        let ctx = options.contextSize
        guard tokens.count <= ctx else {
            throw VeloError(.contextOverflow, "the input has \(tokens.count) tokens, more than the context size \(ctx)")
        }
        try checkVocabulary(tokens)
        var request = GenerationRequest(prompt: tokens)
        request.maxTokens = 0
        let pool = EmbeddingPool(pooling: pooling, dim: config.dim)
        return try enqueue { Sequence(id: $0, request: request, embedding: pool, now: nowNanos()) }
    }

    /// Gives the vector of a finished embedding request to `body`, then forgets it (kept if
    /// `body` throws, e.g. on a caller's buffer that is too small).
    func takeEmbedding(_ id: Int, _ body: ([Float]) throws -> Void) throws {
        try locked {
            guard let v = embeddings[id] else {
                throw VeloError(.invalidArgument, "no embedding for request \(id): not an embedding, not finished, failed or cancelled, or already taken")
            }
            try body(v)
            embeddings[id] = nil
        }
    }

    private func checkVocabulary(_ tokens: [Int32]) throws {
        let vocab = scheduler.model.config.vocabSize
        if let bad = tokens.first(where: { $0 < 0 || Int($0) >= vocab }) {
            throw VeloError(.invalidArgument, "prompt token \(bad) is outside the vocabulary (0..<\(vocab))")
        }
    }

    /// Gives the sequence `make` builds the next id and queues it for the engine thread.
    private func enqueue(_ make: (Int) throws -> Sequence) throws -> Int {
        try locked {
            guard !shuttingDown else { throw VeloError(.invalidArgument, "the engine is shut down") }
            let s = try make(nextId)
            nextId += 1
            inbox.append(s)
            pthread_cond_signal(&wake)
            return s.id
        }
    }

    /// Grammars by their text: a schema used again keeps its computed token masks.
    private var grammars: [(text: String, grammar: Grammar)] = []

    /// (Under the lock.) The grammar of `text`, compiled or from the last few used.
    private func compiledGrammar(_ text: String) throws -> Grammar {
        if let i = grammars.firstIndex(where: { $0.text == text }) {
            let g = grammars.remove(at: i)
            grammars.append(g)
            return g.grammar
        }
        let g = try Grammar(gbnf: text)
        grammars.append((text, g))
        if grammars.count > 16 { grammars.removeFirst() }
        return g
    }

    public func cancel(_ id: Int) {
        locked {
            cancels.append(id)
            pthread_cond_signal(&wake)
        }
    }

    /// Drains the events produced so far (never blocks on the engine).
    public func poll() -> [EngineEvent] {
        locked {
            let out = outbox
            outbox.removeAll(keepingCapacity: true)
            return out
        }
    }

    /// Puts undelivered events back at the front (a caller's buffer was too small).
    func unpoll(_ events: [EngineEvent]) {
        locked { outbox.insert(contentsOf: events, at: 0) }
    }

    /// Waits up to `timeoutMs` for events; true if some are ready.
    public func wait(timeoutMs: Int) -> Bool {
        locked {
            if !outbox.isEmpty { return true }
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            var deadline = now
            let ns = Int(now.tv_nsec) + (timeoutMs % 1000) * 1_000_000
            deadline.tv_sec += timeoutMs / 1000 + ns / 1_000_000_000
            deadline.tv_nsec = ns % 1_000_000_000
            while outbox.isEmpty {
                if pthread_cond_timedwait(&ready, &mutex, &deadline) != 0 { break }
            }
            return !outbox.isEmpty
        }
    }

    /// A snapshot of the scheduler's counters (updated after every step).
    public var statsJSON: JSON { locked { stats } }

    /// Runs `body` on the engine thread between two steps and returns its result.
    func onEngineThread<T>(_ body: @escaping (Scheduler) throws -> T) throws -> T {
        var result: Result<T, Error>?
        try locked {
            guard !shuttingDown else { throw VeloError(.invalidArgument, "the engine is shut down") }
            tasks.append { [scheduler] in
                let r = Result { try body(scheduler) }
                self.locked {
                    result = r
                    pthread_cond_broadcast(&self.taskDone)
                }
            }
            pthread_cond_signal(&wake)
            while result == nil { pthread_cond_wait(&taskDone, &mutex) }
        }
        return try result!.get()
    }

    /// Writes the cached KV pages of `tokens`' longest cached prefix to a file; returns how
    /// many tokens it holds.
    public func savePrefix(_ tokens: [Int32], to path: String) throws -> Int {
        let tag = try PrefixFile.modelTag(file.gguf)
        return try onEngineThread { try PrefixFile.save(tokens, scheduler: $0, modelTag: tag, path: path) }
    }

    /// Clears the profile (stats' profile_ms and kernel_ms) and the grammar's per-token overhead
    /// samples, on the engine thread between steps (after a benchmark's warm-up).
    public func resetProfile() throws {
        let snapshot = try onEngineThread { scheduler -> JSON in
            scheduler.profiler.reset()
            scheduler.selector.clearGrammarOverhead()
            return scheduler.statsJSON
        }
        locked { stats = snapshot }
    }

    /// Waits until kernels built in the background since the load are in use (matmul_cm2_T's,
    /// when the driver has not cached them): benchmarks call it before timing anything.
    public func waitForKernels() throws {
        try onEngineThread { scheduler in
            scheduler.runners.target.settleKernels(wait: true)
            scheduler.runners.draft?.ops.settleKernels(wait: true)
        }
    }

    /// Loads a prefix file into the cache; returns how many tokens it added.
    public func loadPrefix(from path: String) throws -> Int {
        let tag = try PrefixFile.modelTag(file.gguf)
        return try onEngineThread { try PrefixFile.load(path, scheduler: $0, modelTag: tag) }
    }

    /// Stops the engine thread after cancelling everything in flight.
    public func shutdown() {
        let t: pthread_t? = locked {
            if shuttingDown { return nil }
            shuttingDown = true
            pthread_cond_signal(&wake)
            return thread
        }
        if let t { pthread_join(t, nil) }
    }

    fileprivate func runLoop() {
        while true {
            var newSeqs: [Sequence] = []
            var newCancels: [Int] = []
            var newTasks: [() -> Void] = []
            let stop: Bool = locked {
                while inbox.isEmpty && cancels.isEmpty && tasks.isEmpty && !shuttingDown && !scheduler.hasWork {
                    pthread_cond_wait(&wake, &mutex)
                }
                newSeqs = inbox
                newCancels = cancels
                newTasks = tasks
                inbox.removeAll()
                cancels.removeAll()
                tasks.removeAll()
                return shuttingDown
            }
            for task in newTasks { task() }
            for s in newSeqs { scheduler.submit(s) }
            for id in newCancels { scheduler.cancel(id) }
            if stop {
                for s in scheduler.inFlight { scheduler.cancel(s.id) }
                scheduler.step() // finishes the cancelled ones and frees their pages
                publish()
                return
            }
            if scheduler.hasWork { scheduler.step() }
            publish()
        }
    }

    /// When the stats snapshot was last rebuilt: it walks the prefix tree, so while busy it is
    /// refreshed at most every 20 ms rather than after every step; when idle, always.
    private var statsBuiltAt: UInt64 = 0

    private func publish() {
        let events = scheduler.events
        scheduler.events.removeAll(keepingCapacity: true)
        let vectors = scheduler.embeddings
        scheduler.embeddings.removeAll()
        let now = nowNanos()
        var snapshot: JSON?
        if !scheduler.hasWork || now - statsBuiltAt >= 20_000_000 {
            snapshot = scheduler.statsJSON
            statsBuiltAt = now
        }
        locked {
            // a vector is in place before its finished event can be polled
            for (id, v) in vectors { embeddings[id] = v }
            outbox.append(contentsOf: events)
            if let snapshot { stats = snapshot }
            if !events.isEmpty { pthread_cond_broadcast(&ready) }
        }
    }
}

private func engineThreadMain(_ arg: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    Unmanaged<Engine>.fromOpaque(arg!).takeRetainedValue().runLoop()
    return nil
}
