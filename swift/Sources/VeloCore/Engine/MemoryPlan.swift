import CKernels
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What an engine will hold in memory on its device, worked out before anything is allocated:
/// the weights, the KV pool and the scratch of the forward pass, against
/// what the device has free. Defaults the caller left open (the context; the batch when it is
/// only a default) shrink until the plan fits, context first, then batch; a configuration that
/// cannot fit is refused with the numbers; with `--backend auto` a GPU that cannot hold the
/// model hands it to the CPU.
public struct MemoryPlan: Sendable {
    public var backend = "cpu"
    public var device = "cpu"
    public var weightsBytes = 0
    public var kvBytes = 0
    public var scratchBytes = 0
    /// What the device has free (GPU memory, or RAM for the CPU) and its size.
    public var freeBytes = 0
    public var totalBytes = 0
    /// Bytes the plan may take: what is free less a reserve (driver, allocator blocks).
    public var budgetBytes = 0
    public var contextSize = 0
    public var maxBatchSize = 0
    public var kvPages = 0
    /// Most tokens in one forward pass: the option, raised to a decode row (and its guesses)
    /// for every sequence.
    public var batchTokens = 0
    public var typeLabel = "f16"
    /// What was changed from the request and why ("context 131072 → 16384 to fit").
    public var notes: [String] = []

    public var neededBytes: Int { weightsBytes + kvBytes + scratchBytes }

    static func size(_ b: Int) -> String {
        func one(_ x: Double) -> String {
            let t = Int((x * 10).rounded())
            return "\(t / 10).\(t % 10)"
        }
        let x = Double(b)
        if x >= Double(1 << 30) { return one(x / Double(1 << 30)) + " GiB" }
        if x >= Double(1 << 20) { return one(x / Double(1 << 20)) + " MiB" }
        return one(x / 1024) + " KiB"
    }

    /// "weights 4.2 GiB + KV 2.0 GiB (f16, 8 × 4096) + scratch 0.3 GiB on NVIDIA H100 80GB HBM3"
    public var summary: String {
        "weights \(Self.size(weightsBytes)) + KV \(Self.size(kvBytes)) (\(typeLabel), \(maxBatchSize) × \(contextSize)) + scratch \(Self.size(scratchBytes)) on \(device)"
    }

    var json: JSON {
        .object([
            ("backend", .string(backend)), ("device", .string(device)),
            ("weights_bytes", .int(weightsBytes)), ("kv_bytes", .int(kvBytes)), ("scratch_bytes", .int(scratchBytes)),
            ("needed_bytes", .int(neededBytes)), ("free_bytes", .int(freeBytes)), ("total_bytes", .int(totalBytes)),
            ("budget_bytes", .int(budgetBytes)),
            ("context_size", .int(contextSize)), ("max_batch_size", .int(maxBatchSize)), ("kv_pages", .int(kvPages)),
            ("batch_tokens", .int(batchTokens)),
            ("kv_types", .string(typeLabel)),
            ("notes", .array(notes.map { .string($0) })), ("summary", .string(summary)),
        ])
    }
}

/// The host's memory: RAM not in use (Linux MemAvailable: free plus what the kernel can drop)
/// and its size.
func hostMemory() -> (available: Int, total: Int) {
    #if os(Linux)
    if let f = fopen("/proc/meminfo", "r") {
        defer { fclose(f) }
        var avail = -1, total = -1
        var line = [CChar](repeating: 0, count: 256)
        while fgets(&line, 256, f) != nil {
            let s = String(cString: line)
            let kb = Int(s.split(separator: " ").dropFirst().first ?? "") ?? -1
            if s.hasPrefix("MemAvailable:") { avail = kb * 1024 }
            if s.hasPrefix("MemTotal:") { total = kb * 1024 }
        }
        if avail >= 0 && total > 0 { return (avail, total) }
    }
    #elseif canImport(Darwin)
    var size: UInt64 = 0
    var len = MemoryLayout<UInt64>.size
    if sysctlbyname("hw.memsize", &size, &len, nil, 0) == 0 {
        // macOS does not say what is free as Linux does; take three quarters of RAM
        return (Int(size) / 4 * 3, Int(size))
    }
    #endif
    let pages = sysconf(Int32(_SC_PHYS_PAGES)), page = sysconf(Int32(_SC_PAGESIZE))
    let total = pages > 0 && page > 0 ? pages * page : 8 << 30
    return (total / 2, total)
}

/// Works out a `MemoryPlan` for an engine's options on a device (nil: the CPU).
struct MemoryPlanner {
    let model: LanguageModel
    let draft: LanguageModel?
    let options: EngineOptions

    /// Bytes the weights take once loaded: every matrix once (the GPU's concatenated and
    /// interleaved copies replace their parts) and every vector. On the CPU they are the model
    /// file's pages, mapped.
    static func weightBytes(_ m: LanguageModel) -> Int {
        var seen = Set<UnsafeRawPointer>()
        var b = 0
        for w in m.matrices where seen.insert(w.data).inserted { b += w.rowBytes * w.rows }
        for v in m.vectors { b += v.values.count * 4 }
        for r in m.config.ropes { b += r.freqs.count * 4 }
        return b
    }

    var specRows: Int { options.spec.mode == .off ? 1 : options.spec.draftMax + 1 }

    /// Tokens of the largest forward pass.
    func batchTokens(_ batch: Int) -> Int { max(options.batchTokens, batch, batch * specRows) }

    /// KV pages for `batch` sequences of `ctx` positions (the pool's size: computed here only).
    func kvPages(ctx: Int, batch: Int) -> Int {
        let o = options, c = model.config
        if o.kvPages > 0 { return o.kvPages }
        if o.kvMemory > 0 { return o.kvMemory / pageBytes }
        var pages = batch * ((ctx + o.pageSize - 1) / o.pageSize)
        if let d = draft?.config {
            let share = Double(d.kvLayers * d.kvDim) / Double(c.kvLayers * c.kvDim)
            pages += Int((Double(pages) * share).rounded(.up))
        }
        return pages
    }

    var pageBytes: Int {
        let c = model.config
        return PagePool.bytesPerPage(pageSize: options.pageSize, layers: c.kvLayers, kvDim: c.kvDim, typeK: options.cacheTypeK, typeV: options.cacheTypeV,
                                     layerDims: c.kvLayerDims)
    }

    func scratch(ctx: Int, batch: Int, gpu: GPUDevice?) -> Int {
        let tokens = batchTokens(batch)
        var b = 0
        for (m, rows) in [(model, batch * specRows)] + (draft.map { [($0, batch)] } ?? []) {
            if let gpu {
                b += GPUForward.scratchBytes(device: gpu, model: m, maxTokens: tokens, maxLogitRows: rows, maxSequences: batch,
                                             maxContext: ctx, pageSize: options.pageSize,
                                             checkpoints: DeltaNetShape.checkpoints(m.config, sequences: batch, prefixCache: options.prefixCache))
            } else {
                b += Workspace.bytes(config: m.config, maxTokens: tokens, maxLogitRows: rows, maxContext: ctx, threads: options.threads, sequences: batch,
                                     checkpoints: DeltaNetShape.checkpoints(m.config, sequences: batch, prefixCache: options.prefixCache))
            }
        }
        return b
    }

    /// The plan for (ctx, batch) on a device.
    func estimate(ctx: Int, batch: Int, gpu: GPUDevice?) -> MemoryPlan {
        var p = MemoryPlan()
        p.contextSize = ctx
        p.maxBatchSize = batch
        p.kvPages = kvPages(ctx: ctx, batch: batch)
        p.batchTokens = batchTokens(batch)
        p.kvBytes = p.kvPages * pageBytes
        p.weightsBytes = Self.weightBytes(model) + (draft.map(Self.weightBytes) ?? 0)
        p.scratchBytes = scratch(ctx: ctx, batch: batch, gpu: gpu)
        p.typeLabel = options.cacheTypeK == options.cacheTypeV ? options.cacheTypeK.rawValue : "\(options.cacheTypeK.rawValue)/\(options.cacheTypeV.rawValue)"
        if let gpu {
            p.backend = gpu.api
            p.device = gpu.name
            let m = gpu.memory
            (p.freeBytes, p.totalBytes) = m
            // the driver's own needs and the allocator's partly used blocks: 2 % and 512 MiB on
            // a real GPU (lavapipe's "GPU memory" is the host's RAM)
            p.budgetBytes = gpu.isSoftware ? m.free : max(0, m.free - m.total / 50 - (512 << 20))
        } else {
            p.device = "CPU (" + (ck_isa_name().map { String(cString: $0) } ?? "?") + ")"
            let h = hostMemory()
            (p.freeBytes, p.totalBytes) = (h.available, h.total)
            // the pool and scratch must fit in RAM not in use; the mapped weights with them in RAM
            p.budgetBytes = min(h.available / 10 * 9 + p.weightsBytes, h.total / 20 * 19)
        }
        if options.memoryBudget > 0 {
            // a budget the caller gives (tests, a shared GPU): all of it usable
            (p.freeBytes, p.budgetBytes) = (options.memoryBudget, options.memoryBudget)
        }
        return p
    }

    func fits(_ p: MemoryPlan) -> Bool { p.neededBytes <= p.budgetBytes }

    /// The largest of lo, the multiples of `step` between, and hi for which `ok` holds (nil if
    /// not even lo); `ok` must hold below some value and fail above it.
    static func largest(_ lo: Int, _ hi: Int, step: Int, _ ok: (Int) -> Bool) -> Int? {
        guard lo <= hi else { return nil }
        var cands = [lo]
        var x = (lo / step + 1) * step
        while x < hi { cands.append(x); x += step }
        if hi > lo { cands.append(hi) }
        guard ok(cands[0]) else { return nil }
        var a = 0, b = cands.count - 1
        while a < b {
            let m = (a + b + 1) / 2
            if ok(cands[m]) { a = m } else { b = m - 1 }
        }
        return cands[a]
    }

    /// The plan on `gpu` (nil: the CPU), shrinking what the options leave open; nil when even
    /// the smallest sensible configuration does not fit.
    func plan(gpu: GPUDevice?) -> (MemoryPlan?, MemoryPlan) {
        let o = options
        let trained = max(2, min(model.config.contextLength, 1 << 20))
        let ctxAuto = o.contextSize <= 0
        let want = ctxAuto ? trained : o.contextSize
        let batch = o.maxBatchSize
        let requested = estimate(ctx: want, batch: batch, gpu: gpu)
        if fits(requested) { return (requested, requested) }
        let step = 256
        let floor = min(trained, 4096), least = min(trained, 256)
        func ctxFits(_ b: Int) -> (Int) -> Bool { { fits(estimate(ctx: $0, batch: b, gpu: gpu)) } }
        // 1. the context, down to 4096 (or the model's own if smaller)
        if ctxAuto, let c = Self.largest(floor, want, step: step, ctxFits(batch)) {
            var p = estimate(ctx: c, batch: batch, gpu: gpu)
            p.notes.append("context \(want) → \(c) to fit")
            return (p, requested)
        }
        // 2. the batch, when it is only a default
        let ctx = ctxAuto ? floor : want
        if o.batchAuto, batch > 1,
           let b = Self.largest(1, batch - 1, step: 1, { fits(estimate(ctx: ctx, batch: $0, gpu: gpu)) }) {
            var p = estimate(ctx: ctx, batch: b, gpu: gpu)
            if ctx != want { p.notes.append("context \(want) → \(ctx) to fit") }
            p.notes.append("batch \(batch) → \(b) to fit")
            return (p, requested)
        }
        // 3. a shorter context still (one sequence, if the batch may shrink)
        let b = o.batchAuto ? 1 : batch
        if ctxAuto, let c = Self.largest(least, floor, step: step, ctxFits(b)) {
            var p = estimate(ctx: c, batch: b, gpu: gpu)
            p.notes.append("context \(want) → \(c) to fit")
            if b != batch { p.notes.append("batch \(batch) → \(b) to fit") }
            return (p, requested)
        }
        // nothing fits: the smallest configuration tried, for the message
        return (nil, estimate(ctx: ctxAuto ? least : want, batch: b, gpu: gpu))
    }

    static func refusal(_ p: MemoryPlan, gpu: Bool) -> String {
        let s = MemoryPlan.size
        var m = "not enough memory on \(p.device): weights \(s(p.weightsBytes)) + KV \(s(p.kvBytes)) (\(p.typeLabel), \(p.maxBatchSize) × \(p.contextSize))"
            + " + scratch \(s(p.scratchBytes)) = \(s(p.neededBytes)), but \(s(p.budgetBytes)) is usable (\(s(p.freeBytes)) free of \(s(p.totalBytes)))."
        if p.weightsBytes > p.budgetBytes {
            m += gpu ? " The weights alone do not fit: use --backend cpu or a smaller quantization." : " The weights alone do not fit: use a smaller quantization."
        } else {
            m += " Lower --ctx-size or --max-batch-size, or store K/V in fewer bits (--cache-type-k q8_0 --cache-type-v q8_0)" + (gpu ? ", or use --backend cpu." : ".")
        }
        return m
    }
}
