#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `ForwardOps` on a GPU: weights uploaded once, activations and K/V in GPU memory, and each
/// forward pass recorded into one command buffer (one dispatch per op, kernels from
/// `shaders/`), run at `finish`, with the logits read back from mapped memory. The same code
/// drives Vulkan and Metal through `GPUDevice`.
final class GPUForward: ForwardOps {
    let device: GPUDevice
    let config: ModelConfig
    let kv: GPUKVPages
    let layers: Int
    let kvDim: Int
    let maxTokens: Int
    let maxLogitRows: Int
    let profiler: Profiler
    /// Where each activation lives: a buffer, a byte offset into it and the floats between rows.
    /// Q, K and V are views of one buffer whose rows are Q|K|V (when the offsets suit every
    /// device's binding alignment), so one product with the layer's concatenated Q/K/V weight
    /// fills all three.
    private var views: [(buffer: GPUBuffer, offset: Int, stride: Int)] = []
    private let logitsBuffer: GPUBuffer
    /// Where logits are made on a discrete card when the tiled matmul writes them or only their
    /// argmaxes are read, copied to `logitsBuffer` after if the host reads them.
    private let logitsStaging: GPUBuffer?
    /// Each logit row's argmax (argmax_rows), when the batch asks for them.
    private let argmaxBuffer: GPUBuffer
    private var argmaxesMade = false
    /// `hidden`'s output, a row per workspace token, read back like the logits; made on the
    /// first batch that asks (embeddings only).
    private var hiddenBuffer: GPUBuffer?
    /// Per-step inputs, host-written: token ids, positions, page-table starts, logit rows,
    /// attention blocks, hidden-state rows, page tables (sections at aligned offsets of one
    /// mapped buffer).
    private let inputs: GPUBuffer
    /// Query blocks of this step for attention_tiled (GPUKernels.attentionBlocks); 0: split-K.
    private var tiledBlocks = 0
    /// This step's attention splits (keys a split, splits), the same for every layer.
    private var attentionPlan = (chunk: 0, splits: 1)
    /// Prefill attention on tensor cores (attention_coop, blocks of its rows) or attention_tiled.
    private let coopAttention: Bool
    /// Batches of up to this many rows take the decode kernels (matvec, the 8-bit activations,
    /// split attention); larger ones the tiled products (GPUKernels.matvecMaxRows(device:model:)).
    private let matvecMaxRows: Int
    /// Decode batches' products through matvec_dot_batch_T; prefill products through matmul_cm2_T
    /// (for its weight types): what the device allows, asked once.
    private let dotBatch: Bool
    /// The weight types whose prefill products take matmul_cm2_T (its pipeline built).
    private var cm2: Set<GGMLType>
    /// matmul_cm2_T's pipelines while a background thread builds them, and their types: a
    /// driver without them cached takes ~18 s for one (H200, matmul_cm2h_q4_0), so the load
    /// does not wait; prefill takes matmul_coop_T until `settleKernels` adopts them.
    private var cm2Pending: (pipelines: PendingPipelines, types: [GGMLType])?
    /// A decode token's Q|K|V product waits in `pendingQKV` for rope_store, which it then does
    /// itself (matvec_dot_rope_T: one dispatch a layer fewer); any other op dispatches it as it
    /// was. `ropeJoin`: the cache type those kernels are built for, nil where they do not apply.
    private let ropeJoin: KVCacheType?
    private var pendingQKV: (w: WeightMatrix, buffers: [GPUBinding], params: [UInt32], groups: (Int, Int, Int))?
    private let sections: (tokens: Int, tokpos: Int, tokpt: Int, rowsel: Int, blocks: Int, hiddensel: Int, pagetab: Int)
    private let pagetabCapacity: Int
    private var weights: [UnsafeRawPointer: GPUBuffer] = [:]
    /// The model's gated-MLP (gate, up) pairs as one weight each, keyed by the gate's data: row
    /// 2i is gate row i, row 2i+1 up row i (`gatedUp`); such gates and ups are not in `weights`.
    private var gatedWeights: [UnsafeRawPointer: GPUBuffer] = [:]
    /// Each layer's Q, K and V weights as one (rows concatenated), keyed by Q's data, with the
    /// K and V it holds; such weights are not in `weights`.
    private var qkvWeights: [UnsafeRawPointer: (buffer: GPUBuffer, k: UnsafeRawPointer, v: UnsafeRawPointer)] = [:]
    /// Prefill products of an interleaved pair (maxTokens rows of 2·ffnDim), swiglu_pairs' input;
    /// nil when no pair or no batch larger than matvecMaxRows.
    private let gluScratch: GPUBuffer?
    private var vectors: [String: GPUBuffer] = [:]
    /// Each stacked expert tensor of a layer as one buffer, keyed by its first expert's view
    /// (`ExpertLayer`): down, and gate and up interleaved by rows as one stack (expert e's row
    /// 2i gate row i, 2i+1 up row i: the dense gated pairs' layout) where their formats agree,
    /// else each on its own. Such weights are not in `weights`.
    private var expertStacks: [UnsafeRawPointer: ExpertStack] = [:]
    private struct ExpertStack {
        let buffer: GPUBuffer
        /// One expert's weight (its rows: 2·ffn for an interleaved pair).
        let expert: WeightMatrix
        var expertBytes: Int { expert.rows * expert.rowBytes }
    }
    /// Mixture-of-experts layers' buffers (nil: a dense model).
    private let moe: MoEBuffers?
    /// Each of `config.ropes`' per-pair frequencies.
    private var ropeFreqs: [GPUBuffer] = []
    private var batch = ForwardBatch()
    private var n = 0
    private var recordStart: UInt64 = 0
    /// Partials of split-K attention (GPUKernels.attentionSplits), merged by attention_combine.
    private let attnScratch: GPUBuffer
    /// attention_q8's counters, one a (token, KV head) of a decode batch, zero between dispatches.
    private let attnDone: GPUBuffer?
    private let maxContext: Int
    /// Decode with 8-bit activations (matvec_dot_T): quantize_q8's outputs for up to
    /// matvecMaxRows rows (values, (d, sum) pairs); nil when the device or no weight type has it.
    private let q8: (values: GPUBuffer, scales: GPUBuffer)?
    /// Which activation rows a converted copy (q8, x16) holds: buffer, offset, rows, stride, K.
    private typealias RowsKey = (buffer: ObjectIdentifier, offset: Int, rows: Int, xStride: Int, k: Int)
    private func rowsKey(_ x: GPUBinding, rows: Int, xStride: Int, k: Int) -> RowsKey {
        (ObjectIdentifier(x.buffer), x.offset, rows, xStride, k)
    }
    /// The activation rows q8 holds now; any dispatch but quantize_q8 and matvec_dot_T may
    /// change them, so every other one clears this.
    private var q8Source: RowsKey?
    /// Row length q8 holds blocks for (the longest input of a matvec_dot weight).
    private let q8Width: Int
    /// Prefill on tensor cores (matmul_coop_T): to_f16's copy of the activation rows, and which
    /// rows it holds now (as q8Source; any dispatch but to_f16, matmul_coop_T and sum_splits
    /// clears it).
    private let x16: GPUBuffer?
    /// matmul_coop_batch_T's split-K counters (GPUKernels.coopBatchCounters), with x16.
    private let splitDone: GPUBuffer?
    private var x16Source: RowsKey?
    /// Where products round through float16: matmul_cm2h_T's sums, and the activations' copies
    /// (x16). Each is given up, in that order, when a pass that used it ends with a non-finite
    /// norm (`widen`): an overflow past 65504 becomes inf, and inf or NaN reaches the norms.
    private var f16Sums = GPUKernels.cm2F16Sums
    private var f16Inputs = true
    /// What this pass rounded through float16 (cleared by `begin`).
    private var passUsed = (sums: false, inputs: false)
    /// The norms' flag word: 1 when a row's sum of squares was not finite.
    private let nonfinite: GPUBuffer
    private let weightTypes: Set<GGMLType>
    /// This model's K/V inside the pages (the pool's types; a draft's own layers and width), and
    /// where each of its layers lives: buffer, words between pages, words into a page.
    private let kvLayout: KVLayout
    private let kvPlaces: [GPUKVPages.Place]
    /// The K/V page kernels for the cache's types.
    private let kvStoreKernel, ropeStoreKernel, attentionKernel, attentionQ8Kernel, attentionX16Kernel, attentionTiledKernel, attentionCoopKernel: GPUKernels.Kernel
    /// Decode attention over long f16 caches (nil where the pages do not suit it), and whether
    /// this step takes it.
    private let attentionStagedKernels: (plain: GPUKernels.Kernel, q8: GPUKernels.Kernel)?
    private var stagedStep = false

    init(device: GPUDevice, model: LanguageModel, kv: GPUKVPages, layers: Int, kvDim: Int,
         maxTokens: Int, maxLogitRows: Int, maxSequences: Int, maxContext: Int, profiler: Profiler) throws {
        self.device = device
        config = model.config
        self.kv = kv
        self.layers = layers
        self.kvDim = kvDim
        self.maxTokens = maxTokens
        self.maxLogitRows = maxLogitRows
        self.profiler = profiler
        self.maxContext = maxContext
        let c = config
        guard GPUKernels.attentionFits(headDim: c.headDim) else {
            throw VeloError(.unsupported, "the GPU attention kernels take head sizes that are multiples of 4 up to \(GPUKernels.attentionMaxHeadDim); this model's are \(c.headDim) (use --backend cpu)")
        }
        kvLayout = KVLayout(pageSize: kv.pageSize, layers: layers, kvDim: kvDim, typeK: kv.layout.typeK, typeV: kv.layout.typeV)
        kvPlaces = try kv.places(for: kvLayout)
        let (tk, tv) = (kv.layout.typeK, kv.layout.typeV)
        ropeJoin = GPUKernels.ropeJoin(c, kv: (tk, tv))
        kvStoreKernel = GPUKernels.kvVariant(GPUKernels.kvStore, k: tk, v: tv)
        ropeStoreKernel = GPUKernels.kvVariant(GPUKernels.ropeStore, k: tk, v: tv)
        let group = c.heads / max(c.kvHeads, 1)
        attentionKernel = GPUKernels.attentionGrouped(GPUKernels.kvVariant(GPUKernels.attention, k: tk, v: tv), groupHeads: group, device: device)
        attentionQ8Kernel = GPUKernels.attentionGrouped(GPUKernels.kvVariant(GPUKernels.attentionQ8, k: tk, v: tv), groupHeads: group, device: device)
        attentionX16Kernel = GPUKernels.attentionGrouped(GPUKernels.kvVariant(GPUKernels.attentionX16, k: tk, v: tv), groupHeads: group, device: device)
        attentionStagedKernels = GPUKernels.attentionStagedFits(k: tk, v: tv, pageSize: kv.pageSize, kvDim: kvDim, headDim: c.headDim,
                                                                places: kvPlaces.map { ($0.pageStride, $0.layerOff) })
            ? (GPUKernels.attentionGrouped(GPUKernels.attentionStaged, groupHeads: group, device: device),
               GPUKernels.attentionGrouped(GPUKernels.attentionQ8Staged, groupHeads: group, device: device)) : nil
        attentionTiledKernel = GPUKernels.kvVariant(GPUKernels.attentionTiled, k: tk, v: tv)
        attentionCoopKernel = GPUKernels.kvVariant(GPUKernels.attentionCoop, k: tk, v: tv)
        attnScratch = try device.makeBuffer(
            bytes: max(GPUKernels.attentionScratchFloats(maxTokens: maxTokens, maxContext: maxContext, heads: c.heads, headDim: c.headDim) * 4, 16),
            memory: .device, label: "attention partials")
        let qkvRows = (c.qDim * 4) % device.bindingAlignment == 0 && (c.kvDim * 4) % device.bindingAlignment == 0
        let qkvWidth = c.qDim + 2 * c.kvDim
        let qkv = qkvRows ? try device.makeBuffer(bytes: maxTokens * qkvWidth * 4, memory: .device, label: "Q|K|V activations") : nil
        for a in Activation.allCases {
            switch (a, qkv) {
            case (.q, let b?): views.append((b, 0, qkvWidth))
            case (.k, let b?): views.append((b, c.qDim * 4, qkvWidth))
            case (.v, let b?): views.append((b, (c.qDim + c.kvDim) * 4, qkvWidth))
            default:
                views.append((try device.makeBuffer(bytes: maxTokens * Self.width(a, c) * 4, memory: .device, label: "activations"), 0, Self.width(a, c)))
            }
        }
        logitsBuffer = try device.makeBuffer(bytes: maxLogitRows * c.vocabSize * 4, memory: .readback, label: "logits")
        logitsStaging = device.stagesReadback
            ? try device.makeBuffer(bytes: maxLogitRows * c.vocabSize * 4, memory: .device, label: "logits (staging)") : nil
        argmaxBuffer = try device.makeBuffer(bytes: max(maxLogitRows * 4, 16), memory: .readback, label: "argmaxes")
        pagetabCapacity = maxSequences * ((maxContext + kv.pageSize - 1) / kv.pageSize + 1) + 16
        func align(_ x: Int) -> Int { (x + 255) / 256 * 256 }
        let t = 0, p = align(t + maxTokens * 4), pt = align(p + maxTokens * 4), rs = align(pt + maxTokens * 4),
            bl = align(rs + maxLogitRows * 4), hs = align(bl + maxTokens * 8), tab = align(hs + maxTokens * 4)
        sections = (t, p, pt, rs, bl, hs, tab)
        coopAttention = GPUKernels.useAttentionCoop(device, heads: config.heads, kvHeads: config.kvHeads, headDim: config.headDim)
        dotBatch = GPUKernels.dotBatchFits(device)
        matvecMaxRows = GPUKernels.matvecMaxRows(device: device, model: model)
        cm2 = GPUKernels.hasCM2(device) ? GPUKernels.cm2Types : []
        inputs = try device.makeBuffer(bytes: tab + pagetabCapacity * 4, memory: .upload, label: "step inputs")
        nonfinite = try device.makeBuffer(bytes: 256, memory: .readback, label: "non-finite flag")
        nonfinite.contents!.storeBytes(of: 0, as: UInt32.self)
        weightTypes = Set(model.matrices.map(\.type))
        // gated-MLP pairs: one interleaved weight each (raw rows, so every weight kernel reads it)
        let pairs = model.gatedPairs.filter { g, u in
            g.type == u.type && g.rows == u.rows && g.cols == u.cols && g.rowBytes == u.rowBytes && g.data != u.data
        }
        gluScratch = pairs.isEmpty || maxTokens <= matvecMaxRows ? nil
            : try device.makeBuffer(bytes: maxTokens * 2 * pairs.map { $0.0.rows }.max()! * 4, memory: .device, label: "gate/up products")
        var paired = Set<UnsafeRawPointer>()
        for (g, u) in pairs where gatedWeights[g.data] == nil && !paired.contains(u.data) {
            let rb = g.rowBytes, bytes = 2 * rb * g.rows
            guard bytes <= device.maxBindingBytes else {
                throw VeloError(.unsupported, "\(g.name) with its up weight (\(bytes >> 20) MiB) is larger than one GPU buffer binding may be on \(device.name)")
            }
            let b = try device.makeBuffer(bytes: bytes, memory: .device, label: g.name)
            let staging = UnsafeMutableRawPointer.allocate(byteCount: bytes, alignment: 16)
            defer { staging.deallocate() }
            for r in 0..<g.rows {
                (staging + 2 * r * rb).copyMemory(from: g.data + r * rb, byteCount: rb)
                (staging + (2 * r + 1) * rb).copyMemory(from: u.data + r * rb, byteCount: rb)
            }
            try device.upload(b, offset: 0, from: staging, bytes: bytes)
            gatedWeights[g.data] = b
            paired.formUnion([g.data, u.data])
        }
        // Q/K/V triples: one concatenated weight each, when Q, K and V are views of one row
        for (q, k, v) in model.attentionInputs where qkvRows && qkvWeights[q.data] == nil {
            let ws = [q, k, v]
            guard ws.allSatisfy({ $0.type == q.type && $0.cols == q.cols && $0.rowBytes == q.rowBytes && !paired.contains($0.data) }),
                  q.rows == c.qDim, k.rows == c.kvDim, v.rows == c.kvDim,
                  Set(ws.map(\.data)).count == 3 else { continue }
            let bytes = ws.reduce(0) { $0 + $1.rows * $1.rowBytes }
            guard bytes <= device.maxBindingBytes else { continue } // the three stay separate
            let b = try device.makeBuffer(bytes: bytes, memory: .device, label: q.name)
            var at = 0
            for w in ws {
                try device.upload(b, offset: at, from: w.data, bytes: w.rows * w.rowBytes)
                at += w.rows * w.rowBytes
            }
            qkvWeights[q.data] = (b, k.data, v.data)
            paired.formUnion(ws.map(\.data))
        }
        // stacked expert tensors: one buffer each, bound whole (the expert-indexed kernels find
        // expert e at e times an expert's bytes)
        for l in model.expertLayers {
            let (g, u) = (l.gate[0], l.up[0])
            let interleave = g.type == u.type && g.rows == u.rows && g.cols == u.cols && g.rowBytes == u.rowBytes
            for stack in interleave ? [l.gate, l.down] : [l.gate, l.up, l.down] {
                let w = stack[0], pair = interleave && w.data == g.data
                let bytes = w.rows * w.rowBytes * (pair ? 2 : 1)
                guard bytes * stack.count <= device.maxBindingBytes else {
                    throw VeloError(.unsupported, "\(w.name)\(pair ? " with its up weights" : "") (\((bytes * stack.count) >> 20) MiB) is larger than one GPU buffer binding may be on \(device.name)")
                }
                let b = try device.makeBuffer(bytes: bytes * stack.count, memory: .device, label: w.name)
                if pair {
                    // staged a few experts at a time (each upload waits): up to 64 MiB, or one
                    let rb = w.rowBytes, per = max(1, (64 << 20) / bytes)
                    let staging = UnsafeMutableRawPointer.allocate(byteCount: per * bytes, alignment: 16)
                    defer { staging.deallocate() }
                    for first in Swift.stride(from: 0, to: stack.count, by: per) {
                        let count = min(per, stack.count - first)
                        for j in 0..<count {
                            let (ge, ue, at) = (l.gate[first + j], l.up[first + j], staging + j * bytes)
                            for r in 0..<w.rows {
                                (at + 2 * r * rb).copyMemory(from: ge.data + r * rb, byteCount: rb)
                                (at + (2 * r + 1) * rb).copyMemory(from: ue.data + r * rb, byteCount: rb)
                            }
                        }
                        try device.upload(b, offset: first * bytes, from: staging, bytes: count * bytes)
                    }
                    paired.formUnion(l.up.map(\.data))
                } else {
                    try device.upload(b, offset: 0, from: w.data, bytes: bytes * stack.count)
                }
                let expert = WeightMatrix(name: w.name, type: w.type, data: w.data, rows: w.rows * (pair ? 2 : 1), cols: w.cols, rowBytes: w.rowBytes)
                expertStacks[w.data] = ExpertStack(buffer: b, expert: expert)
                paired.formUnion(stack.map(\.data))
            }
        }
        moe = c.experts == nil ? nil : try MoEBuffers(device: device, config: c, maxTokens: maxTokens)
        // weights: once, in the file's own formats
        for w in model.matrices where weights[w.data] == nil && !paired.contains(w.data) {
            let bytes = w.rowBytes * w.rows
            guard bytes <= device.maxBindingBytes else {
                throw VeloError(.unsupported, "\(w.name) (\(bytes >> 20) MiB) is larger than one GPU buffer binding may be on \(device.name)")
            }
            let b = try device.makeBuffer(bytes: bytes, memory: .device, label: w.name)
            try device.upload(b, offset: 0, from: w.data, bytes: bytes)
            weights[w.data] = b
        }
        func upload(_ values: [Float], label: String) throws -> GPUBuffer {
            let b = try device.makeBuffer(bytes: values.count * 4, memory: .device, label: label)
            try values.withUnsafeBytes { try device.upload(b, offset: 0, from: $0.baseAddress!, bytes: $0.count) }
            return b
        }
        for v in model.vectors { vectors[v.name] = try upload(v.values, label: v.name) }
        ropeFreqs = try c.ropes.map { try upload($0.freqs, label: "rope frequencies") }
        if maxTokens > matvecMaxRows, let k = model.matrices.filter({ GPUKernels.useCoop(device, $0.type) }).map(\.cols).max() {
            x16 = try device.makeBuffer(bytes: GPUKernels.f16Bytes(maxTokens: maxTokens, maxCols: k, experts: c.experts), memory: .device, label: "float16 activations")
            let zeros = [UInt32](repeating: 0, count: GPUKernels.coopBatchCounters)
            let done = try device.makeBuffer(bytes: zeros.count * 4, memory: .device, label: "split-K counters")
            try zeros.withUnsafeBytes { try device.upload(done, offset: 0, from: $0.baseAddress!, bytes: $0.count) }
            splitDone = done
        } else {
            x16 = nil
            splitDone = nil
        }
        let q8k = model.matrices.filter { GPUKernels.dotTypes.contains($0.type) }.map(\.cols).max()
        q8Width = q8k ?? 0
        // the pipelines this model's passes can use (matmul_cm2_T's apart: those may fail)
        var wanted: [GPUKernels.Kernel] = [], wantedCM2: [(kernel: GPUKernels.Kernel, type: GGMLType)] = []
        func want(_ k: GPUKernels.Kernel) { wanted.append(k) }
        if let b = Self.q8Bytes(device: device, model: model) {
            q8 = (try device.makeBuffer(bytes: b.values, memory: .device, label: "8-bit activations"),
                  try device.makeBuffer(bytes: b.scales, memory: .device, label: "8-bit activation scales"))
            let zeros = [UInt32](repeating: 0, count: GPUKernels.attentionJoinRows * c.kvHeads)
            let done = try device.makeBuffer(bytes: zeros.count * 4, memory: .device, label: "attention counters")
            try zeros.withUnsafeBytes { try device.upload(done, offset: 0, from: $0.baseAddress!, bytes: $0.count) }
            attnDone = done
            for k in [GPUKernels.quantizeQ8, GPUKernels.addRMSNormQ8, GPUKernels.attentionCombineQ8, attentionQ8Kernel] + [attentionStagedKernels?.q8].compactMap({ $0 }) {
                want(k)
            }
            if x16 != nil && matvecMaxRows < GPUKernels.attentionJoinRows { want(attentionX16Kernel) }
            for w in Self.distinctShapes(model.matrices) where GPUKernels.dotTypes.contains(w.type) {
                for m in [1, 2, 4, 8, 16] {
                    for glu in [false, true] { want(GPUKernels.matvecDot(w.type, rows: m, n: w.rows, glu: glu)) }
                }
                if let kv = ropeJoin { want(GPUKernels.matvecDotRope(w.type, kv: kv)) }
            }
        } else {
            q8 = nil
            attnDone = nil
        }
        for w in Self.distinctShapes(model.matrices) {
            for m in [1, 2, 4, 8, 16] {
                for glu in [false, true] { want(GPUKernels.matvec(w.type, rows: m, n: w.rows, glu: glu)) }
            }
            want(GPUKernels.matmul(w.type))
            if GPUKernels.useCoop(device, w.type) {
                for m in [32, 64, 128] { want(GPUKernels.matmulCoop(w.type, rows: m)) } // each tile height
                if cm2.contains(w.type) && maxTokens >= GPUKernels.cm2MinRows {
                    wantedCM2.append((GPUKernels.matmulCM2(w.type, f16Sums: f16Sums.contains(w.type)), w.type))
                }
                if GPUKernels.coopBatchShape != nil && GPUKernels.coopBatchTypes.contains(w.type) {
                    // each tile height some batch past matvec's rows takes
                    for m in Swift.stride(from: 16, through: GPUKernels.coopBatchRows, by: 16) where m > matvecMaxRows && m - 15 <= maxTokens {
                        // (its prefetch depth follows the product's shape: each shape of the type,
                        // the gate/up pairs' as one product)
                        let shapes = model.matrices.map { ($0.type, $0.rows, $0.cols) } + model.gatedPairs.map { ($0.0.type, 2 * $0.0.rows, $0.0.cols) }
                        for s in shapes where s.0 == w.type { want(GPUKernels.matmulCoopBatch(w.type, rows: m, n: s.1, k: s.2)) }
                    }
                }
            }
        }
        if x16 != nil {
            for k in [GPUKernels.toF16, GPUKernels.sumSplits] + (GPUKernels.f16OutFused ? [GPUKernels.addRMSNormF16, GPUKernels.swigluPairsF16] : []) {
                want(k)
            }
        }
        if coopAttention { want(attentionCoopKernel) }
        want(GPUKernels.getRows(model.matrices[0].type))
        if moe != nil {
            for k in [GPUKernels.moeRoute, GPUKernels.moeCombine] { want(k) }
            for t in Set(expertStacks.values.map(\.expert.type)) {
                for k in [GPUKernels.matvecID(t), GPUKernels.matmulID(t)] { want(k) }
                if x16 != nil && GPUKernels.useCoop(device, t) {
                    for m in [32, 64, 128] { want(GPUKernels.matmulCoopID(t, rows: m)) } // each tile height
                }
            }
            if q8 != nil {
                for s in expertStacks.values where GPUKernels.dotTypes.contains(s.expert.type) {
                    want(GPUKernels.matvecDotID(s.expert.type, k: s.expert.cols))
                }
            }
        }
        for k in [GPUKernels.rmsNorm, GPUKernels.addRMSNorm, ropeStoreKernel, GPUKernels.rope, kvStoreKernel, attentionKernel, attentionTiledKernel, GPUKernels.attentionCombine, GPUKernels.swiglu, GPUKernels.swigluPairs, GPUKernels.add, GPUKernels.addBias, GPUKernels.softcap, GPUKernels.argmaxRows] + [attentionStagedKernels?.plain].compactMap({ $0 }) { want(k) }
        // compiled now (on several threads where the device can), not in the first request;
        // matmul_cm2_T's in the background (`cm2Pending`)
        if let e = device.prepare(wanted.map(Self.key)).compactMap({ $0 }).first { throw e }
        if !wantedCM2.isEmpty {
            cm2.subtract(wantedCM2.map(\.type))
            cm2Pending = (device.prepareInBackground(wantedCM2.map { Self.key($0.kernel) }), wantedCM2.map(\.type))
            if GPUKernels.cm2AtLoad { settleKernels(wait: true) }
        }
    }

    /// Bytes of GPU memory a forward pass of these sizes allocates besides weights and K/V
    /// (activations, logits, attention partials, step inputs, the prefill and 8-bit scratch),
    /// as `init` makes them: the fit check, before one is made.
    static func scratchBytes(device: GPUDevice, model: LanguageModel, maxTokens: Int, maxLogitRows: Int, maxSequences: Int,
                             maxContext: Int, pageSize: Int) -> Int {
        let c = model.config
        var b = max(GPUKernels.attentionScratchFloats(maxTokens: maxTokens, maxContext: maxContext, heads: c.heads, headDim: c.headDim) * 4, 16)
        b += maxTokens * Activation.allCases.reduce(0) { $0 + width($1, c) } * 4
        b += maxLogitRows * c.vocabSize * 4 * (device.stagesReadback ? 2 : 1) + max(maxLogitRows * 4, 16)
        let pagetab = maxSequences * ((maxContext + pageSize - 1) / pageSize + 1) + 16
        b += maxTokens * 24 + maxLogitRows * 4 + pagetab * 4 + 1536
        let matvecMaxRows = GPUKernels.matvecMaxRows(device: device, model: model)
        if maxTokens > matvecMaxRows, let rows = model.gatedPairs.map({ $0.0.rows }).max() { b += maxTokens * 2 * rows * 4 }
        if maxTokens > matvecMaxRows, let k = model.matrices.filter({ GPUKernels.useCoop(device, $0.type) }).map(\.cols).max() {
            b += GPUKernels.f16Bytes(maxTokens: maxTokens, maxCols: k, experts: c.experts) + GPUKernels.coopBatchCounters * 4
        }
        if let q = q8Bytes(device: device, model: model) { b += q.values + q.scales }
        return b + MoEBuffers.bytes(config: c, maxTokens: maxTokens)
    }

    /// Bytes of the 8-bit activations' buffers (values, scales), nil without matvec_dot: up to
    /// matvecMaxRows rows of the longest input of a matvec_dot weight, or of a decode step's
    /// routed pairs' hidden rows where an expert layer's down product runs on matvec_dot_id.
    static func q8Bytes(device: GPUDevice, model: LanguageModel) -> (values: Int, scales: Int)? {
        guard GPUKernels.integerDot(device), let k = model.matrices.filter({ GPUKernels.dotTypes.contains($0.type) }).map(\.cols).max() else { return nil }
        let matvecMaxRows = GPUKernels.matvecMaxRows(device: device, model: model)
        var b = GPUKernels.q8Bytes(k: k, m: matvecMaxRows)
        if let e = model.config.experts, model.expertLayers.contains(where: { GPUKernels.dotTypes.contains($0.down[0].type) }) {
            let d = GPUKernels.q8Bytes(k: e.ffnDim, m: matvecMaxRows * e.used)
            b = (max(b.values, d.values), max(b.scales, d.scales))
        }
        return b
    }

    /// One matrix of each (type, rows) (the pipelines a matrix needs depend on nothing else;
    /// a mixture of experts has thousands of expert views).
    private static func distinctShapes(_ ws: [WeightMatrix]) -> [WeightMatrix] {
        var seen = Set<[Int]>()
        return ws.filter { seen.insert([Int($0.type.rawValue), $0.rows]).inserted }
    }

    static func width(_ a: Activation, _ c: ModelConfig) -> Int {
        switch a {
        case .x, .xn: return c.dim
        case .q, .attn: return c.qDim
        case .k, .v: return c.kvDim
        case .gate, .up: return c.hiddenWidth
        }
    }

    private static func key(_ k: GPUKernels.Kernel) -> PipelineKey { PipelineKey(name: k.name, buffers: k.buffers, constants: k.constants) }

    /// Takes matmul_cm2_T's pipelines once their background build has ended (waiting for it
    /// with `wait`); a type whose pipeline the driver cannot build (its tile needs 47 KiB of
    /// shared memory) keeps matmul_coop_T rather than failing.
    func settleKernels(wait: Bool) {
        guard let (pending, types) = cm2Pending else { return }
        while wait && !pending.isDone { usleep(2000) }
        guard let errors = device.adopt(pending) else { return }
        cm2Pending = nil
        for (t, e) in zip(types, errors) {
            if let e {
                fputs("velo: matmul_cm2_T for \(t.name) unavailable (\(e)); its prefill uses matmul_coop_T\n", stderr)
            } else {
                cm2.insert(t)
            }
        }
    }

    private func pipeline(_ k: GPUKernels.Kernel) throws -> GPUPipeline {
        try device.pipeline(k.name, buffers: k.buffers, constants: k.constants)
    }

    private func dispatch(_ k: GPUKernels.Kernel, _ buffers: [GPUBinding], _ params: [UInt32], _ groups: (Int, Int, Int), _ op: Profiler.Op) {
        flushQKV()
        // every pipeline was made in init; a failure here would be a bug, not bad input
        let p = try! pipeline(k)
        if q8Source != nil && k.name != GPUKernels.quantizeQ8.name && !k.name.hasPrefix("matvec_dot_") { q8Source = nil }
        if x16Source != nil && k.name != GPUKernels.toF16.name && k.name != GPUKernels.sumSplits.name && !k.name.hasPrefix("matmul_coop_") && !k.name.hasPrefix("matmul_cm2") { x16Source = nil }
        device.dispatch(p, buffers, params: params, groups: groups, op: op)
    }

    /// The held Q|K|V product as it was, when the op after it is not rope_store.
    private func flushQKV() {
        guard let p = pendingQKV else { return }
        pendingQKV = nil
        dispatch(GPUKernels.matvecDot(p.w.type, rows: 1, n: p.w.rows), p.buffers, p.params, p.groups, .matmul)
    }

    private func act(_ a: Activation) -> GPUBinding { GPUBinding(views[a.rawValue].buffer, offset: views[a.rawValue].offset) }
    /// Floats between rows of an activation.
    private func stride(_ a: Activation) -> Int { views[a.rawValue].stride }
    private func input(_ offset: Int, _ count: Int) -> GPUBinding { GPUBinding(inputs, offset: offset, size: max(count, 1) * 4) }
    private var tokpos: GPUBinding { input(sections.tokpos, maxTokens) }
    private var tokpt: GPUBinding { input(sections.tokpt, maxTokens) }
    private var pagetab: GPUBinding { input(sections.pagetab, pagetabCapacity) }

    // MARK: ForwardOps

    func begin(_ batch: ForwardBatch) throws {
        precondition(batch.count <= maxTokens && batch.logitRows.count <= maxLogitRows, "batch larger than the GPU workspace")
        if !batch.hiddenRows.isEmpty && hiddenBuffer == nil {
            hiddenBuffer = try device.makeBuffer(bytes: maxTokens * config.dim * 4, memory: .readback, label: "hidden states")
        }
        settleKernels(wait: false)
        self.batch = batch
        n = batch.count
        passUsed = (false, false)
        argmaxesMade = false
        let base = inputs.contents!
        func write(_ offset: Int, _ values: [Int32]) {
            values.withUnsafeBytes { (base + offset).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        }
        var starts: [Int32] = []
        var table: [Int32] = []
        for t in batch.tables {
            starts.append(Int32(table.count))
            table += t.pages
        }
        guard table.count <= pagetabCapacity else {
            throw VeloError(.internalError, "GPU page table overflow (\(table.count) > \(pagetabCapacity))")
        }
        write(sections.tokens, batch.tokens)
        write(sections.tokpos, batch.positions.map { Int32($0) })
        write(sections.tokpt, batch.sequence.map { starts[$0] })
        write(sections.rowsel, batch.logitRows.map { Int32($0) })
        if !batch.hiddenRows.isEmpty { write(sections.hiddensel, batch.hiddenRows.map { Int32($0) }) }
        if !table.isEmpty { write(sections.pagetab, table) }
        let blocks = n > matvecMaxRows
            ? GPUKernels.attentionBlocks(sequence: batch.sequence, heads: config.heads, kvHeads: config.kvHeads, headDim: config.headDim,
                                         rows: coopAttention ? GPUKernels.attentionCoopRows : GPUKernels.attentionTiledRows) : nil
        if let blocks { write(sections.blocks, blocks) }
        tiledBlocks = (blocks?.count ?? 0) / 2
        let keys = (batch.positions.max() ?? 0) + 1
        stagedStep = tiledBlocks == 0 && attentionStagedKernels != nil && keys >= GPUKernels.attentionStagedMinKeys
        attentionPlan = tiledBlocks > 0
            ? GPUKernels.prefillAttentionSplits(keys: keys, n: n, workgroups: tiledBlocks * config.kvHeads, maxTokens: maxTokens, maxContext: maxContext)
            : stagedStep
            ? GPUKernels.attentionStagedSplits(keys: keys, n: n, kvHeads: config.kvHeads, headDim: config.headDim, maxTokens: maxTokens, maxContext: maxContext)
            : GPUKernels.attentionSplits(keys: keys, n: n, maxTokens: maxTokens, maxContext: maxContext)
        recordStart = nowNanos()
        try device.begin()
    }

    func embed(_ table: WeightMatrix, scale: Float) {
        dispatch(GPUKernels.getRows(table.type),
                 [GPUBinding(weights[table.data]!), input(sections.tokens, maxTokens), act(.x)],
                 [UInt32(table.cols), UInt32(table.rowBytes), UInt32(n), scale.bitPattern], (n, 1, 1), .embed)
    }

    func rmsNorm(_ src: Activation, _ w: WeightVector, into dst: Activation) {
        norm(src, w, rows: n, selection: nil, into: act(dst))
    }

    /// Norms `rows` rows of `src`: the first ones, or those a selection section lists.
    private func norm(_ src: Activation, _ w: WeightVector, rows: Int, selection: GPUBinding?, into dst: GPUBinding) {
        dispatch(GPUKernels.rmsNorm,
                 [act(src), GPUBinding(vectors[w.name]!), dst, selection ?? input(sections.rowsel, maxLogitRows), GPUBinding(nonfinite)],
                 [UInt32(config.dim), UInt32(rows), config.normEps.bitPattern, selection != nil ? 1 : 0, UInt32(config.dim), 1, UInt32(config.dim)],
                 (rows, 1, 1), .norm)
    }

    func headNorm(_ a: Activation, _ w: WeightVector, heads: Int) {
        let s = UInt32(stride(a))
        dispatch(GPUKernels.rmsNorm, [act(a), GPUBinding(vectors[w.name]!), act(a), input(sections.rowsel, maxLogitRows), GPUBinding(nonfinite)],
                 [UInt32(config.headDim), UInt32(n * heads), config.normEps.bitPattern, 0, s, UInt32(heads), s],
                 (n * heads, 1, 1), .norm)
    }

    func addBias(_ a: Activation, _ b: WeightVector) {
        let width = b.values.count
        dispatch(GPUKernels.addBias, [act(a), GPUBinding(vectors[b.name]!)], [UInt32(width), UInt32(n), UInt32(stride(a))],
                 ((width + 255) / 256, n, 1), .other)
    }

    func matmul(_ src: Activation, _ pairs: [(WeightMatrix, Activation)]) {
        if pairs.count == 3, pairs[0].1 == .q, pairs[1].1 == .k, pairs[2].1 == .v, let m = qkvWeights[pairs[0].0.data],
           m.k == pairs[1].0.data, m.v == pairs[2].0.data {
            // the concatenated weight: its rows land as Q|K|V rows, the three views
            let q = pairs[0].0, rows = config.qDim + 2 * config.kvDim
            let w = WeightMatrix(name: q.name, type: q.type, data: q.data, rows: rows, cols: q.cols, rowBytes: q.rowBytes)
            multiply(w, act(src), rows: n, xStride: stride(src), into: act(.q), yStride: stride(.q), op: .matmul, weight: GPUBinding(m.buffer),
                     ropeNext: true)
            return
        }
        for (w, dst) in pairs {
            multiply(w, act(src), rows: n, xStride: stride(src), into: act(dst), yStride: stride(dst), op: .matmul)
        }
    }

    /// x16, when this pass's rows of `width` values (whole f16vec4s, so to_f16's rows are the
    /// values themselves) go to tensor-core products and a kernel may write their float16 copy.
    private func f16Copy(width: Int) -> GPUBuffer? {
        guard GPUKernels.f16OutFused, f16Inputs, n > matvecMaxRows, width % 4 == 0, let x16, x16.size >= n * width * 2 else { return nil }
        return x16
    }

    /// quantize_q8 of `rows` rows of X into q8, unless it holds them already.
    private func quantizeQ8(_ x: GPUBinding, _ q8: (values: GPUBuffer, scales: GPUBuffer), rows: Int, xStride: Int, k: Int, op: Profiler.Op) {
        let key = rowsKey(x, rows: rows, xStride: xStride, k: k)
        if q8Source.map({ $0 != key }) ?? true {
            dispatch(GPUKernels.quantizeQ8, [x, GPUBinding(q8.values), GPUBinding(q8.scales)],
                     [UInt32(k), UInt32(rows), UInt32(xStride)], GPUKernels.quantizeQ8Groups(k: k, m: rows), op)
            q8Source = key
        }
    }

    /// Y = W · X over `rows` activation rows: the matrix×vector kernel for decode-sized batches
    /// (each weight read once for all rows), the tiled one for prefill.
    /// `glu` (decode only, an interleaved pair's weight as `weight`): Y = silu(gate·X) * (up·X),
    /// w.rows counting the interleaved rows.
    private func multiply(_ w: WeightMatrix, _ x: GPUBinding, rows: Int, xStride: Int, into y: GPUBinding, yStride: Int, op: Profiler.Op,
                          weight: GPUBinding? = nil, glu: ModelConfig.FFNActivation? = nil, ropeNext: Bool = false) {
        precondition(glu == nil || rows <= matvecMaxRows)
        let params = [UInt32(w.cols), UInt32(w.rows), UInt32(rows), UInt32(w.rowBytes), UInt32(xStride), UInt32(yStride), UInt32(glu?.rawValue ?? 0)]
        let wb = weight ?? GPUBinding(weights[w.data]!)
        if rows <= matvecMaxRows, let q8, GPUKernels.dotTypes.contains(w.type) {
            // activations to 8 bits once per input (the Q, K and V products share it), then
            // integer dot products with the weight blocks
            quantizeQ8(x, q8, rows: rows, xStride: xStride, k: w.cols, op: op)
            let buffers = [wb, GPUBinding(q8.values), GPUBinding(q8.scales), y]
            if ropeNext && rows == 1 && ropeJoin != nil && GPUKernels.matvecRows(n: w.rows, dot: true) == 2 {
                flushQKV()
                pendingQKV = (w, buffers, params, GPUKernels.matvecGroups(n: w.rows, m: 1, dot: true)) // for ropeAndStoreKV
            } else if dotBatch && GPUKernels.dotBatchTakes(rows: rows) {
                dispatch(GPUKernels.matvecDotBatch(w.type, rows: rows), buffers, params, GPUKernels.matvecDotBatchGroups(n: w.rows, m: rows), op)
            } else {
                dispatch(GPUKernels.matvecDot(w.type, rows: rows, n: w.rows, glu: glu != nil), buffers, params,
                         GPUKernels.matvecGroups(n: w.rows, m: rows, dot: true, glu: glu != nil), op)
            }
            if q8Source?.buffer == ObjectIdentifier(y.buffer) { q8Source = nil } // Y overwrote them
        } else if rows <= matvecMaxRows || w.rows <= GPUKernels.matvecAnyRows {
            let k = GPUKernels.matvec(w.type, rows: rows, n: w.rows, glu: glu != nil)
            dispatch(k, [wb, x, y], params, GPUKernels.matvecGroups(n: w.rows, m: rows, glu: glu != nil), op)
        } else if GPUKernels.useCoop(device, w.type), f16Inputs, let x16 {
            // activations to float16 once per input (Q|K|V, gate/up, O and down each have one)
            let kp = GPUKernels.f16Row(w.cols)
            let key = rowsKey(x, rows: rows, xStride: xStride, k: w.cols)
            if x16Source.map({ $0 != key }) ?? true {
                dispatch(GPUKernels.toF16, [x, GPUBinding(x16)], [UInt32(w.cols), UInt32(rows), UInt32(xStride), UInt32(kp)],
                         GPUKernels.toF16Groups(k: w.cols, m: rows), op)
                x16Source = key
            }
            var p16 = params
            p16[4] = UInt32(kp)
            // the kernel, its grid along N and M, its splits of K and the units (16 values) of each
            let cm2 = self.cm2.contains(w.type) && GPUKernels.useCM2(w.type, rows: rows)
            passUsed = (passUsed.sums || (cm2 && f16Sums.contains(w.type)), true)
            let kernel: GPUKernels.Kernel, g: (Int, Int, Int), splits: Int, splitUnits: Int
            let batchKernel = !cm2 && GPUKernels.useCoopBatch(w.type, rows: rows, k: w.cols)
            if batchKernel {
                let plan = GPUKernels.coopBatchPlan(n: w.rows, k: w.cols, rows: rows, type: w.type)
                (kernel, g) = (GPUKernels.matmulCoopBatch(w.type, rows: rows, n: w.rows, k: w.cols), (plan.groups, plan.rowGroups, 1))
                (splits, splitUnits) = (plan.splits, plan.splitUnits)
            } else {
                kernel = cm2 ? GPUKernels.matmulCM2(w.type, f16Sums: f16Sums.contains(w.type)) : GPUKernels.matmulCoop(w.type, rows: rows)
                g = cm2 ? GPUKernels.matmulCM2Groups(n: w.rows, m: rows) : GPUKernels.matmulCoopGroups(n: w.rows, m: rows)
                splits = GPUKernels.coopSplits(n: w.rows, m: rows, k: w.cols, type: w.type,
                                           tile: cm2 ? (GPUKernels.cm2Shape.tw, GPUKernels.cm2Shape.tx) : nil)
                splitUnits = GPUKernels.coopSplitUnits(k: w.cols, splits: splits, multiple: cm2 ? max(4, w.type.blockSize / 16) : 4)
            }
            if splits > 1, let scratch = gluScratch, y.buffer !== scratch, splits * rows * w.rows * 4 <= scratch.size {
                // split-K: each split's plane of the scratch, then their sum into Y
                let plane = rows * w.rows
                p16[5] = UInt32(w.rows)
                p16[6] = UInt32(splitUnits)
                let planes = GPUBinding(scratch)
                if batchKernel, GPUKernels.coopBatchSumsSplits, let done = splitDone, g.0 * g.1 <= GPUKernels.coopBatchCounters {
                    // the last split of each tile adds the planes itself
                    dispatch(kernel, [wb, GPUBinding(x16), planes, y, GPUBinding(done)], p16 + [UInt32(plane), UInt32(yStride), UInt32(splits)], (g.0, g.1, splits), op)
                } else {
                    let b = batchKernel ? [wb, GPUBinding(x16), planes, planes, GPUBinding(splitDone!)] : [wb, GPUBinding(x16), planes]
                    dispatch(kernel, b, p16 + [UInt32(plane)] + (batchKernel ? [UInt32(w.rows), 1] : []), (g.0, g.1, splits), op)
                    dispatch(GPUKernels.sumSplits, [planes, y], [UInt32(w.rows), UInt32(rows), UInt32(yStride), UInt32(splits), UInt32(plane)],
                             (min((plane + 255) / 256, 65535), 1, 1), op)
                }
            } else {
                p16[6] = UInt32.max // one split: every unit
                let b = batchKernel ? [wb, GPUBinding(x16), y, y, GPUBinding(splitDone!)] : [wb, GPUBinding(x16), y]
                dispatch(kernel, b, p16 + [0] + (batchKernel ? [UInt32(yStride), 1] : []), g, op)
            }
            if x16Source?.buffer == ObjectIdentifier(y.buffer) { x16Source = nil } // Y overwrote them
        } else {
            let k = GPUKernels.matmul(w.type)
            dispatch(k, [wb, x, y], params, GPUKernels.matmulGroups(n: w.rows, m: rows), op)
        }
    }

    func rope(_ a: Activation, heads: Int, rope r: Int) {
        let c = config
        dispatch(GPUKernels.rope, [act(a), tokpos, GPUBinding(ropeFreqs[r])],
                 [UInt32(n), UInt32(heads), UInt32(c.headDim), UInt32(c.ropeDim), c.ropeStyle == .neox ? 1 : 0,
                  c.ropes[r].magnitude.bitPattern, UInt32(stride(a))],
                 (n, heads, 1), .rope)
    }

    /// The buffer holding a layer's K/V, and the (pageStride, layerOff) parameters that find
    /// its planes in it (32-bit words).
    private func kvBinding(_ layer: Int) -> GPUBinding { GPUBinding(kvPlaces[layer].buffer) }
    private func kvParams(_ layer: Int) -> [UInt32] { [UInt32(kvPlaces[layer].pageStride), UInt32(kvPlaces[layer].layerOff)] }

    func storeKV(layer: Int) {
        let ps = kv.pageSize
        dispatch(kvStoreKernel, [act(.k), act(.v), kvBinding(layer), tokpos, tokpt, pagetab],
                 [UInt32(n), UInt32(kvDim), UInt32(ps)] + kvParams(layer) + [UInt32(stride(.k))],
                 (n, (kvDim + 63) / 64, 1), .attention)
    }

    /// Split-K attention: keys in splits of `chunk` (from the longest context of the batch),
    /// one workgroup per (token, KV head, split), then the combine kernel merges the splits
    /// (a single split writes the output directly).
    func ropeAndStoreKV(layer: Int, heads: Int, kvHeads: Int, rope r: Int) {
        let c = config, ps = kv.pageSize
        if let p = pendingQKV, let kvType = ropeJoin, heads == c.heads, kvHeads == c.kvHeads, p.w.rows == c.qDim + 2 * kvDim {
            pendingQKV = nil
            dispatch(GPUKernels.matvecDotRope(p.w.type, kv: kvType), p.buffers + [kvBinding(layer), tokpos, tokpt, pagetab, GPUBinding(ropeFreqs[r])],
                     p.params + [UInt32(c.qDim), UInt32(kvDim), UInt32(c.headDim), UInt32(c.ropeDim), c.ropes[r].magnitude.bitPattern, UInt32(ps)]
                        + kvParams(layer), p.groups, .matmul)
            return
        }
        dispatch(ropeStoreKernel, [act(.q), act(.k), act(.v), kvBinding(layer), tokpos, tokpt, pagetab, GPUBinding(ropeFreqs[r])],
                 [UInt32(n), UInt32(heads), UInt32(kvHeads), UInt32(c.headDim), UInt32(c.ropeDim), c.ropeStyle == .neox ? 1 : 0,
                  c.ropes[r].magnitude.bitPattern, UInt32(kvDim), UInt32(ps)] + kvParams(layer) + [
                  UInt32(stride(.q)), UInt32(stride(.k))],
                 (n, heads + kvHeads, 1), .rope)
    }

    func attention(layer: Int, _ a: AttentionParams) {
        let c = config, ps = kv.pageSize
        let mask = [a.softcap.bitPattern, UInt32(a.window)]
        let (chunk, splits) = attentionPlan
        let combineGroups = GPUKernels.attentionCombineGroups(n: n, heads: c.heads, headDim: c.headDim)
        if tiledBlocks > 0 {
            dispatch(coopAttention ? attentionCoopKernel : attentionTiledKernel,
                     [act(.q), kvBinding(layer), act(.attn), tokpos, tokpt, pagetab, input(sections.blocks, 2 * maxTokens), GPUBinding(attnScratch)],
                     [UInt32(c.heads), UInt32(c.kvHeads), UInt32(c.headDim), UInt32(kvDim), UInt32(ps)] + kvParams(layer) +
                     [a.scale.bitPattern, UInt32(stride(.q))] + mask + [UInt32(chunk), UInt32(splits)],
                     (tiledBlocks, c.kvHeads, splits), .attention)
            if splits > 1 {
                dispatch(GPUKernels.attentionCombine, [GPUBinding(attnScratch), act(.attn), tokpos],
                         [UInt32(n), UInt32(c.heads), UInt32(c.headDim), UInt32(chunk), UInt32(splits)], combineGroups, .attention)
            }
            return
        }
        // the output as 8-bit blocks too, for the O product's matvec_dot: by the attention
        // kernel itself (a single split, or the last of a few), else by the combine
        let q8Out = q8 != nil && n <= matvecMaxRows && c.headDim % 32 == 0
            && c.headDim <= GPUKernels.attentionCombineQ8MaxHeadDim && c.qDim <= q8Width
        var buffers = [act(.q), kvBinding(layer), act(.attn), tokpos, tokpt, pagetab, GPUBinding(attnScratch)]
        var params = [UInt32(n), UInt32(c.heads), UInt32(c.kvHeads), UInt32(c.headDim), UInt32(kvDim), UInt32(ps)] + kvParams(layer) +
            [a.scale.bitPattern, UInt32(chunk), UInt32(splits), UInt32(stride(.q))] + mask
        let kernels = stagedStep ? attentionStagedKernels! : (plain: attentionKernel, q8: attentionQ8Kernel)
        var kernel = kernels.plain
        let x16Row = GPUKernels.f16Row(c.qDim)
        if splits <= GPUKernels.attentionJoinMaxSplits, q8Out, let q8, let done = attnDone {
            buffers += [GPUBinding(q8.values), GPUBinding(q8.scales), GPUBinding(done)]
            kernel = kernels.q8
        } else if splits <= GPUKernels.attentionJoinMaxSplits, !GPUKernels.attentionX16Disabled, !stagedStep, n > matvecMaxRows, n <= GPUKernels.attentionJoinRows,
                  f16Inputs, let x16, x16.size >= n * x16Row * 2, let done = attnDone {
            // a decode batch whose O product runs on tensor cores: its float16 input written here
            buffers += [GPUBinding(x16), GPUBinding(done)]
            params.append(UInt32(x16Row))
            kernel = attentionX16Kernel
        }
        dispatch(kernel, buffers, params, (n, c.kvHeads, splits), .attention)
        if buffers.count == 10 { q8Source = rowsKey(act(.attn), rows: n, xStride: stride(.attn), k: c.qDim) }
        if buffers.count == 9 { x16Source = rowsKey(act(.attn), rows: n, xStride: stride(.attn), k: c.qDim) }
        guard splits > 1 && buffers.count == 7 else { return }
        let combine = [UInt32(n), UInt32(c.heads), UInt32(c.headDim), UInt32(chunk), UInt32(splits)]
        if let q8, q8Out {
            // the output also as 8-bit blocks, for the O product's matvec_dot
            dispatch(GPUKernels.attentionCombineQ8, [GPUBinding(attnScratch), act(.attn), tokpos, GPUBinding(q8.values), GPUBinding(q8.scales)],
                     combine, combineGroups, .attention)
            q8Source = rowsKey(act(.attn), rows: n, xStride: stride(.attn), k: c.qDim)
        } else {
            dispatch(GPUKernels.attentionCombine, [GPUBinding(attnScratch), act(.attn), tokpos], combine, combineGroups, .attention)
        }
    }

    func addRMSNorm(_ dst: Activation, _ src: Activation, _ w: WeightVector, into out: Activation) {
        let dim = config.dim, params = [UInt32(dim), UInt32(n), config.normEps.bitPattern]
        let bindings = [act(dst), act(src), GPUBinding(vectors[w.name]!), act(out)]
        if let q8, n <= matvecMaxRows, dim % 32 == 0, dim <= GPUKernels.addRMSNormQ8MaxWidth, dim <= q8Width {
            // the norm also as 8-bit blocks, for the matvec_dot products that read it next
            dispatch(GPUKernels.addRMSNormQ8, bindings + [GPUBinding(q8.values), GPUBinding(q8.scales)], params, (n, 1, 1), .norm)
            q8Source = rowsKey(act(out), rows: n, xStride: stride(out), k: dim)
        } else if let x16 = f16Copy(width: dim) {
            // the norm also as to_f16's float16 rows, for the tensor-core products that read it next
            dispatch(GPUKernels.addRMSNormF16, bindings + [GPUBinding(nonfinite), GPUBinding(x16)], params, (n, 1, 1), .norm)
            x16Source = rowsKey(act(out), rows: n, xStride: stride(out), k: dim)
        } else {
            dispatch(GPUKernels.addRMSNorm, bindings + [GPUBinding(nonfinite)], params, (n, 1, 1), .norm)
        }
    }

    func add(_ dst: Activation, _ src: Activation) {
        let count = n * config.dim
        dispatch(GPUKernels.add, [act(dst), act(src)], [UInt32(count)], ((count + 255) / 256, 1, 1), .other)
    }

    func glu(_ a: ModelConfig.FFNActivation) {
        let count = n * config.ffnDim
        dispatch(GPUKernels.swiglu, [act(.gate), act(.up)], [UInt32(count), UInt32(a.rawValue)], ((count + 255) / 256, 1, 1), .mlpActivation)
    }

    /// One matvec in GLU mode for decode; for prefill the interleaved product into gluScratch,
    /// then swiglu_pairs. Pairs not uploaded interleaved take the two products and swiglu.
    func gatedUp(_ src: Activation, gate: WeightMatrix, up: WeightMatrix, _ a: ModelConfig.FFNActivation) {
        guard let wb = gatedWeights[gate.data] else {
            matmul(src, [(gate, .gate), (up, .up)])
            glu(a)
            return
        }
        let ffn = gate.rows
        precondition(ffn == Self.width(.gate, config))
        let pair = WeightMatrix(name: gate.name, type: gate.type, data: gate.data, rows: 2 * ffn, cols: gate.cols, rowBytes: gate.rowBytes)
        let x = act(src), xStride = stride(src)
        if n <= matvecMaxRows {
            multiply(pair, x, rows: n, xStride: xStride, into: act(.gate), yStride: ffn, op: .matmul, weight: GPUBinding(wb), glu: a)
        } else {
            let s = GPUBinding(gluScratch!)
            multiply(pair, x, rows: n, xStride: xStride, into: s, yStride: 2 * ffn, op: .matmul, weight: GPUBinding(wb))
            let count = n * ffn
            if let x16 = f16Copy(width: ffn) {
                // with to_f16's copy for the down product
                dispatch(GPUKernels.swigluPairsF16, [s, act(.gate), GPUBinding(x16)], [UInt32(count), UInt32(a.rawValue)],
                         (min((count / 2 + 255) / 256, 65535), 1, 1), .mlpActivation)
                x16Source = rowsKey(act(.gate), rows: n, xStride: ffn, k: ffn)
            } else {
                dispatch(GPUKernels.swigluPairs, [s, act(.gate)], [UInt32(count), UInt32(a.rawValue)], (min((count + 255) / 256, 65535), 1, 1), .mlpActivation)
            }
        }
    }

    func hidden(norm w: WeightVector) {
        let rows = batch.hiddenRows.count
        guard rows > 0, let out = hiddenBuffer else { return }
        norm(.x, w, rows: rows, selection: input(sections.hiddensel, maxTokens), into: GPUBinding(out))
    }

    var hiddenStates: UnsafePointer<Float> { UnsafePointer(hiddenBuffer!.contents!.assumingMemoryBound(to: Float.self)) }

    var argmaxes: UnsafePointer<Int32>? { argmaxesMade ? UnsafePointer(argmaxBuffer.contents!.assumingMemoryBound(to: Int32.self)) : nil }

    /// The router's product, then moe_route (each token's experts and weights, the pairs grouped
    /// by expert, all on the device: no wait), one expert-indexed product per stacked tensor
    /// (gate and up read each pair's token row from the layer's input, down the pairs' hidden
    /// rows), SwiGLU over all the pairs, and moe_combine's weighted sum into dst.
    func experts(_ src: Activation, _ l: ExpertLayer, into dst: Activation) {
        let c = config, e = c.experts!, m = moe!, d = c.dim, h = e.ffnDim
        let x = act(src), xs = stride(src)
        multiply(l.router, x, rows: n, xStride: xs, into: GPUBinding(m.router), yStride: e.count, op: .matmul)
        dispatch(GPUKernels.moeRoute, [GPUBinding(m.router), GPUBinding(m.routing)],
                 [UInt32(n), UInt32(e.count), UInt32(e.used), e.normalizeWeights ? 1 : 0, UInt32(m.cap)], (1, 1, 1), .other)
        let pairs = n * e.used, gate = expertStacks[l.gate[0].data]!
        if gate.expert.rows == h {
            // gate and up apart
            expertProduct(gate, x, xStride: xs, gather: true, into: GPUBinding(m.gate), yStride: h)
            expertProduct(expertStacks[l.up[0].data]!, x, xStride: xs, gather: true, into: GPUBinding(m.up), yStride: h)
            swiglu(GPUBinding(m.gate), GPUBinding(m.up), count: pairs * h)
        } else if n <= matvecMaxRows {
            // interleaved: SwiGLU in the product's GLU mode
            expertProduct(gate, x, xStride: xs, gather: true, into: GPUBinding(m.gate), yStride: h, glu: .silu)
        } else {
            // interleaved products (2·ffn a pair, in `up`), then swiglu_pairs
            expertProduct(gate, x, xStride: xs, gather: true, into: GPUBinding(m.up), yStride: 2 * h)
            let count = pairs * h
            dispatch(GPUKernels.swigluPairs, [GPUBinding(m.up), GPUBinding(m.gate)], [UInt32(count), UInt32(ModelConfig.FFNActivation.silu.rawValue)],
                     (min((count + 255) / 256, 65535), 1, 1), .mlpActivation)
        }
        expertProduct(expertStacks[l.down[0].data]!, GPUBinding(m.gate), xStride: h, gather: false, into: GPUBinding(m.output), yStride: d)
        var shared = (out: GPUBinding(m.output), gate: GPUBinding(m.output))
        if let sh = l.shared, let out = m.shared {
            let w = e.sharedFFNDim
            multiply(sh.gate, x, rows: n, xStride: xs, into: act(.gate), yStride: w, op: .matmul)
            multiply(sh.up, x, rows: n, xStride: xs, into: act(.up), yStride: w, op: .matmul)
            swiglu(act(.gate), act(.up), count: n * w)
            multiply(sh.down, act(.gate), rows: n, xStride: w, into: GPUBinding(out), yStride: d, op: .matmul)
            shared = (GPUBinding(out), GPUBinding(vectors[sh.gateInput.name]!))
        }
        dispatch(GPUKernels.moeCombine,
                 [act(dst), GPUBinding(m.output), m.section(.slot), m.section(.weight), shared.out, shared.gate],
                 [UInt32(d), UInt32(e.used), l.shared == nil ? 0 : 1, UInt32(stride(dst)), UInt32(n)],
                 GPUKernels.moeCombineGroups(tokens: n, width: d, shared: l.shared != nil), .other)
    }

    /// Y = each routed pair's expert times its activation row, over all the pairs of the step
    /// in one dispatch: matvec_id_T for decode-sized batches (a workgroup per pair and few
    /// rows, reading only the chosen experts' weights; matvec_dot_id_T on 8-bit activations
    /// where the device and the type have integer dot products), matmul_id_T's tiles per
    /// expert above.
    /// `gather`: row i of X is pair i's token's row (else X has a row per pair). `glu` (decode,
    /// an interleaved gate/up stack): Y = act(gate·X) * (up·X), as matvec_T's GLU mode.
    private func expertProduct(_ s: ExpertStack, _ x: GPUBinding, xStride: Int, gather: Bool, into y: GPUBinding, yStride: Int,
                               glu: ModelConfig.FFNActivation? = nil) {
        let w = s.expert, e = config.experts!, m = moe!
        precondition(glu == nil || n <= matvecMaxRows)
        let params = [UInt32(w.cols), UInt32(w.rows), UInt32(n * e.used), UInt32(w.rowBytes), UInt32(xStride), UInt32(yStride), UInt32(glu?.rawValue ?? 0),
                      UInt32(s.expertBytes / 2), gather ? 1 : 0] + m.offsets.map { UInt32($0) }
        let buffers = [GPUBinding(s.buffer), x, y, GPUBinding(m.routing)]
        if n <= matvecMaxRows, let q8, GPUKernels.dotTypes.contains(w.type) {
            // 8-bit activations (the layer's input rows, or the pairs' hidden rows) and integer
            // dot products, as matvec_dot_T
            quantizeQ8(x, q8, rows: gather ? n : n * e.used, xStride: xStride, k: w.cols, op: .matmul)
            dispatch(GPUKernels.matvecDotID(w.type, k: w.cols), [GPUBinding(s.buffer), GPUBinding(q8.values), GPUBinding(q8.scales), y, GPUBinding(m.routing)],
                     params, GPUKernels.matvecDotIDGroups(n: w.rows, k: w.cols, pairs: n * e.used), .matmul)
            if q8Source?.buffer == ObjectIdentifier(y.buffer) { q8Source = nil } // Y overwrote them
        } else if n <= matvecMaxRows {
            dispatch(GPUKernels.matvecID(w.type), buffers, params, GPUKernels.matvecIDGroups(n: w.rows, pairs: n * e.used), .matmul)
        } else if GPUKernels.useCoop(device, w.type), f16Inputs, let x16 {
            passUsed.inputs = true
            // tensor cores: the input rows (tokens, or pairs for down) to float16 once, then
            // tiles as tall as an expert's rows on average
            let xRows = gather ? n : n * e.used, kp = GPUKernels.f16Row(w.cols)
            let key = rowsKey(x, rows: xRows, xStride: xStride, k: w.cols)
            if x16Source.map({ $0 != key }) ?? true {
                dispatch(GPUKernels.toF16, [x, GPUBinding(x16)], [UInt32(w.cols), UInt32(xRows), UInt32(xStride), UInt32(kp)],
                         GPUKernels.toF16Groups(k: w.cols, m: xRows), .matmul)
                x16Source = key
            }
            let perExpert = (n * e.used + e.count - 1) / e.count
            let p = [UInt32(w.cols), UInt32(w.rows), UInt32(n), UInt32(w.rowBytes), UInt32(kp), UInt32(yStride), UInt32.max, 0,
                     UInt32(s.expertBytes / 2), gather ? 1 : 0] + m.offsets.map { UInt32($0) }
            dispatch(GPUKernels.matmulCoopID(w.type, rows: perExpert), [GPUBinding(s.buffer), GPUBinding(x16), y, GPUBinding(m.routing)], p,
                     GPUKernels.matmulCoopIDGroups(n: w.rows, rows: perExpert, tokens: n, experts: e.count), .matmul)
            if x16Source?.buffer == ObjectIdentifier(y.buffer) { x16Source = nil } // Y overwrote them
        } else {
            var p = params
            p[2] = UInt32(n) // the most rows one expert can have
            dispatch(GPUKernels.matmulID(w.type), buffers, p, GPUKernels.matmulIDGroups(n: w.rows, tokens: n, experts: e.count), .matmul)
        }
    }

    private func swiglu(_ gate: GPUBinding, _ up: GPUBinding, count: Int) {
        dispatch(GPUKernels.swiglu, [gate, up], [UInt32(count), UInt32(ModelConfig.FFNActivation.silu.rawValue)],
                 (min((count + 255) / 256, 65535), 1, 1), .mlpActivation)
    }

    func logits(norm w: WeightVector, output: WeightMatrix, softcap: Float) {
        let rows = batch.logitRows.count
        guard rows > 0 else { return }
        norm(.x, w, rows: rows, selection: input(sections.rowsel, maxLogitRows), into: act(.xn))
        // On a discrete card the logits are made in device memory when the tiled matmul writes
        // them (its 16 x 16 tile stores would cross the bus in 64-byte pieces: 8B, 64 rows, 11 ms
        // a step on an H100; one copy moves the rows at the bus's speed) or when only their
        // argmaxes are read; matvec otherwise writes whole rows straight to host memory.
        let staged = rows > matvecMaxRows || batch.argmaxes ? logitsStaging : nil
        let target = GPUBinding(staged ?? logitsBuffer)
        multiply(output, act(.xn), rows: rows, xStride: config.dim, into: target, yStride: config.vocabSize, op: .output)
        let count = rows * config.vocabSize
        if softcap > 0 {
            dispatch(GPUKernels.softcap, [target], [UInt32(count), softcap.bitPattern], (min((count + 255) / 256, 65535), 1, 1), .output)
        }
        if batch.argmaxes {
            dispatch(GPUKernels.argmaxRows, [target, GPUBinding(argmaxBuffer)], [UInt32(config.vocabSize), UInt32(config.vocabSize)], (rows, 1, 1), .output)
            argmaxesMade = true
        }
        if let staged, batch.hostLogits { device.copy(staged, to: logitsBuffer, bytes: count * 4, op: .output) }
    }

    /// After `finish`: when a norm of the pass saw inf or NaN and the pass rounded through
    /// float16, gives up the narrowest rounding it used (float16 sums, then float16 activation
    /// copies, for the rest of this engine's life) and asks for the pass again. Re-running is
    /// safe: a pass rewrites the K/V of its own positions before reading them.
    func widen() -> Bool {
        let flag = nonfinite.contents!.assumingMemoryBound(to: UInt32.self)
        guard flag.pointee != 0 else { return false }
        flag.pointee = 0
        if passUsed.sums {
            f16Sums = []
            for t in cm2 where weightTypes.contains(t) && (try? pipeline(GPUKernels.matmulCM2(t, f16Sums: false))) == nil { cm2.remove(t) }
            fputs("velo: a prefill's float16 sums overflowed; products sum in float32 from now on\n", stderr)
            return true
        }
        if passUsed.inputs {
            f16Inputs = false
            fputs("velo: a prefill's float16 activations overflowed; products read them in float32 from now on\n", stderr)
            return true
        }
        return false
    }

    func finish() throws -> UnsafeMutablePointer<Float> {
        flushQKV()
        let t0 = nowNanos()
        if profiler.enabled { profiler.add(.record, nanos: t0 - recordStart) }
        try device.commit(profiler: profiler.enabled ? profiler : nil)
        if profiler.enabled { profiler.add(.wait, nanos: nowNanos() - t0) }
        return logitsBuffer.contents!.assumingMemoryBound(to: Float.self)
    }
}

/// The KV pages in GPU memory, in as many buffers as the pool needs (each within what one
/// binding may cover): buffer g holds layers [g·L, (g+1)·L) of every page, page-major, each
/// page's part in `PagePool`'s layout (layer by layer, K plane then V plane; shaders/README.md).
/// A dispatch touches one layer, so it binds the one buffer that holds it; the pool's size is
/// bounded by device memory only. With one buffer this is exactly the host pool's layout.
final class GPUKVPages {
    struct Group {
        let buffer: GPUBuffer
        let firstLayer: Int
        let layers: Int
        /// Bytes of one page's part in this buffer.
        let pageBytes: Int
    }
    /// Where one layer of a model lives: its buffer, 32-bit words from a page to the next in it,
    /// and words from a page's start in it to the layer's K plane.
    struct Place {
        let buffer: GPUBuffer
        let pageStride: Int
        let layerOff: Int
    }
    let groups: [Group]
    let pageSize: Int
    let layout: KVLayout
    let pageCount: Int

    /// Most bytes one KV buffer may take: what a binding may cover, below 4 GiB (the kernels
    /// index 16-bit halves with 32-bit integers). VELO_GPU_KV_BUFFER_BYTES lowers it (tests of
    /// pools that span several buffers).
    static func bufferLimit(_ device: GPUDevice) -> Int {
        var limit = min(device.maxBindingBytes, (1 << 32) - 256)
        if let e = getenv("VELO_GPU_KV_BUFFER_BYTES"), let v = Int(String(cString: e)), v > 0 { limit = min(limit, v) }
        return limit
    }

    /// How many layers each buffer holds (all but the last), 0 when one layer is too big.
    static func layersPerBuffer(pageCount: Int, layout: KVLayout, limit: Int) -> Int {
        min(layout.layers, limit / max(1, pageCount * layout.layerBytes))
    }

    init(device: GPUDevice, pool: PagePool) throws {
        pageSize = pool.pageSize
        layout = pool.layout
        pageCount = pool.pageCount
        let limit = Self.bufferLimit(device)
        let per = Self.layersPerBuffer(pageCount: pageCount, layout: layout, limit: limit)
        guard per > 0 else {
            throw VeloError(.invalidArgument, "one layer of the KV cache (\(pageCount) pages of \(layout.layerBytes) bytes: \((pageCount * layout.layerBytes) >> 20) MiB) is larger than one GPU buffer may be on \(device.name) (\(limit >> 20) MiB): lower --ctx-size or --max-batch-size, or use --cache-type-k/--cache-type-v q8_0")
        }
        var groups: [Group] = []
        var first = 0
        while first < layout.layers {
            let n = min(per, layout.layers - first), bytes = n * layout.layerBytes
            let b = try device.makeBuffer(bytes: pageCount * bytes, memory: .device,
                                          label: layout.layers > per ? "KV cache (layers \(first)-\(first + n - 1))" : "KV cache")
            groups.append(Group(buffer: b, firstLayer: first, layers: n, pageBytes: bytes))
            first += n
        }
        self.groups = groups
    }

    /// Where each layer of a model laid out as `view` lives. The pool's own layout maps layer l
    /// to the buffer that holds it; a draft model (speculative decoding: other layers, other
    /// widths, the same pages) has its layers packed in order into each buffer's part of a page.
    func places(for view: KVLayout) throws -> [Place] {
        precondition(view.typeK == layout.typeK && view.typeV == layout.typeV && view.pageSize == pageSize)
        var out: [Place] = []
        var g = 0, used = 0
        for _ in 0..<view.layers {
            while g < groups.count && used + view.layerBytes > groups[g].pageBytes { g += 1; used = 0 }
            guard g < groups.count else {
                throw VeloError(.invalidArgument, "a model with \(view.layers) layers of \(view.kvDim) K/V values does not fit the KV pages (\(layout.layers) × \(layout.kvDim))")
            }
            out.append(Place(buffer: groups[g].buffer, pageStride: groups[g].pageBytes / 4, layerOff: used / 4))
            used += view.layerBytes
        }
        return out
    }

    /// A whole page in `PagePool`'s layout (prefix files): each buffer's part in turn.
    func readPage(_ page: Int32, device: GPUDevice, into dst: UnsafeMutableRawPointer) throws {
        for g in groups {
            try device.download(g.buffer, offset: Int(page) * g.pageBytes, into: dst + g.firstLayer * layout.layerBytes, bytes: g.pageBytes)
        }
    }

    func writePage(_ page: Int32, device: GPUDevice, from src: UnsafeRawPointer) throws {
        for g in groups {
            try device.upload(g.buffer, offset: Int(page) * g.pageBytes, from: src + g.firstLayer * layout.layerBytes, bytes: g.pageBytes)
        }
    }
}

/// A mixture-of-experts model's GPU buffers, `maxTokens` tokens' worth: the router's logits,
/// moe_route's output (sections of `cap` words: each pair-in-expert-order's token, each token's
/// pairs' rows and weights, each row's expert, a scratch, each expert's first row and count;
/// shaders/moe_route.comp), the experts' hidden and output rows, and the shared expert's output.
struct MoEBuffers {
    let router, routing, gate, up, output: GPUBuffer
    let shared: GPUBuffer?
    /// Words of each section of `routing`: the pairs, aligned so each may start a binding.
    let cap: Int
    enum Section: Int { case rows, slot, weight, ids, scratch, experts }

    init(device: GPUDevice, config c: ModelConfig, maxTokens: Int) throws {
        let e = c.experts!, pairs = maxTokens * e.used
        guard e.count <= GPUKernels.moeRouteMaxExperts else {
            throw VeloError(.unsupported, "\(e.count) experts: the GPU's routing takes at most \(GPUKernels.moeRouteMaxExperts)")
        }
        cap = Self.cap(pairs: pairs, alignment: device.bindingAlignment)
        router = try device.makeBuffer(bytes: maxTokens * e.count * 4, memory: .device, label: "router logits")
        routing = try device.makeBuffer(bytes: (5 * cap + 2 * e.count) * 4, memory: .device, label: "expert routing")
        gate = try device.makeBuffer(bytes: pairs * e.ffnDim * 4, memory: .device, label: "expert gate products")
        up = try device.makeBuffer(bytes: pairs * 2 * e.ffnDim * 4, memory: .device, label: "expert up (or interleaved gate/up) products")
        output = try device.makeBuffer(bytes: pairs * c.dim * 4, memory: .device, label: "expert outputs")
        shared = e.sharedFFNDim > 0 ? try device.makeBuffer(bytes: maxTokens * c.dim * 4, memory: .device, label: "shared expert outputs") : nil
    }

    static func cap(pairs: Int, alignment: Int) -> Int { (pairs * 4 + alignment - 1) / alignment * alignment / 4 }

    /// One section of `routing` as a binding.
    func section(_ s: Section) -> GPUBinding { GPUBinding(routing, offset: s.rawValue * cap * 4, size: cap * 4) }
    /// The word offsets of the rows, ids and experts sections (the expert-indexed kernels' last
    /// parameters).
    var offsets: [Int] { [Section.rows, .ids, .experts].map { $0.rawValue * cap } }

    static func bytes(config c: ModelConfig, maxTokens: Int) -> Int {
        guard let e = c.experts else { return 0 }
        let pairs = maxTokens * e.used
        return 4 * (maxTokens * e.count + 5 * pairs + 2 * e.count + pairs * (c.dim + 3 * e.ffnDim) + (e.sharedFFNDim > 0 ? maxTokens * c.dim : 0)) + 2048
    }
}
