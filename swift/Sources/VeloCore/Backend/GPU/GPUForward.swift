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
    let logitsBuffer: GPUBuffer
    /// Where logits are made on a discrete card when the tiled matmul writes them or only their
    /// argmaxes are read, copied to `logitsBuffer` after if the host reads them.
    let logitsStaging: GPUBuffer?
    /// Each logit row's argmax (argmax_rows), when the batch asks for them.
    let argmaxBuffer: GPUBuffer
    var argmaxesMade = false
    /// `hidden`'s output, a row per workspace token, read back like the logits; made on the
    /// first batch that asks (embeddings only).
    private var hiddenBuffer: GPUBuffer?
    /// Per-step inputs, host-written: token ids, positions, page-table starts, logit rows,
    /// attention blocks, hidden-state rows, page tables (sections at aligned offsets of one
    /// mapped buffer).
    private let inputs: GPUBuffer
    /// Query blocks of this step for attention_tiled (GPUKernels.attentionBlocks); 0: split-K.
    var tiledBlocks = 0
    /// This step's attention splits (keys a split, splits), the same for every layer.
    var attentionPlan = (chunk: 0, splits: 1)
    /// Prefill attention on tensor cores (attention_coop, blocks of its rows) or attention_tiled.
    let coopAttention: Bool
    /// Batches of up to this many rows take the decode kernels (matvec, the 8-bit activations,
    /// split attention); larger ones the tiled products (GPUKernels.matvecMaxRows(device:model:)).
    let matvecMaxRows: Int
    /// Decode batches' products through matvec_dot_batch_T; prefill products through matmul_cm2_T
    /// (for its weight types): what the device allows, asked once.
    let dotBatch: Bool
    /// The weight types whose prefill products take matmul_cm2_T (its pipeline built).
    var cm2: Set<GGMLType>
    /// matmul_cm2_T's pipelines while a background thread builds them, and their types: a
    /// driver without them cached takes ~18 s for one (H200, matmul_cm2h_q4_0), so the load
    /// does not wait; prefill takes matmul_coop_T until `settleKernels` adopts them.
    private var cm2Pending: (pipelines: PendingPipelines, types: [GGMLType])?
    /// A decode token's Q|K|V product waits in `pendingQKV` for rope_store, which it then does
    /// itself (matvec_dot_rope_T: one dispatch a layer fewer, with the Q|K|V biases three
    /// more); any other op dispatches it as it was. `ropeJoin`: the cache type those kernels
    /// are built for, nil where they do not apply.
    let ropeJoin: KVCacheType?
    /// `biases`: the add_bias ops that came after it, held too (`addBias`).
    var pendingQKV: (w: WeightMatrix, buffers: [GPUBinding], params: GPUParams.Product, groups: (Int, Int, Int), scaled: Bool,
                     biases: [(Activation, WeightVector)])?
    /// Each layer's Q, K and V biases as one vector (matvec_dot_rope_T adds them), keyed by Q's
    /// name, with K's and V's names.
    var qkvBiases: [String: (buffer: GPUBuffer, k: String, v: String)] = [:]
    /// A decode token's O or down product, held for the residual add and norm after it, which
    /// it then does itself (matvec_dot_q8out_T, `residualProduct`); any other op dispatches it
    /// as it was.
    var pendingResidual: (w: WeightMatrix, src: Activation, dst: Activation)?
    /// (dnseq, dnrows: the DeltaNet kernels' sequence table and row list, recurrentInputs)
    let sections: (tokens: Int, tokpos: Int, tokpt: Int, rowsel: Int, blocks: Int, hiddensel: Int, dnseq: Int, dnrows: Int, pagetab: Int)
    private let pagetabCapacity: Int
    var weights: [UnsafeRawPointer: GPUBuffer] = [:]
    /// The model's gated-MLP (gate, up) pairs as one weight each, keyed by the gate's data: row
    /// 2i is gate row i, row 2i+1 up row i (`gatedUp`); such gates and ups are not in `weights`.
    var gatedWeights: [UnsafeRawPointer: GPUBuffer] = [:]
    /// Each layer's Q, K and V weights as one (rows concatenated), keyed by Q's data, with the
    /// K and V it holds; such weights are not in `weights`.
    var qkvWeights: [UnsafeRawPointer: (buffer: GPUBuffer, k: UnsafeRawPointer, v: UnsafeRawPointer)] = [:]
    /// Prefill products of an interleaved pair (maxTokens rows of 2·ffnDim), swiglu_pairs' input;
    /// nil when no pair or no batch larger than matvecMaxRows.
    let gluScratch: GPUBuffer?
    var vectors: [String: GPUBuffer] = [:]
    /// Each stacked expert tensor of a layer as one buffer, keyed by its first expert's view
    /// (`ExpertLayer`): down, and gate and up interleaved by rows as one stack (expert e's row
    /// 2i gate row i, 2i+1 up row i: the dense gated pairs' layout) where their formats agree,
    /// else each on its own. Such weights are not in `weights`.
    var expertStacks: [UnsafeRawPointer: ExpertStack] = [:]
    struct ExpertStack {
        let buffer: GPUBuffer
        /// One expert's weight (its rows: 2·ffn for an interleaved pair).
        let expert: WeightMatrix
        var expertBytes: Int { expert.rows * expert.rowBytes }
    }
    /// Mixture-of-experts layers' buffers (nil: a dense model).
    let moe: MoEBuffers?
    /// Recurrent states and the hybrid layers' buffers (nil: no DeltaNet layers).
    let recurrent: GPURecurrentBuffers?
    /// Per-layer embeddings' buffers (nil: none; Gemma 4's E2B/E4B have them).
    let perLayer: GPUPerLayerBuffers?
    /// Multi-head latent attention's buffers (nil: not an MLA model).
    let latent: GPULatentBuffers?
    /// Each expert's factor on its routing weight where every layer scales its weights alike
    /// (DeepSeek's expert_weights_scale; nil: 1).
    var weightsScale: GPUBuffer?
    /// Ones, as wide as the widest head: the gain of a head norm that has none (Gemma 4's V).
    private var ones: GPUBuffer?
    /// The states of a pass that may round through float16, as they were before it (a slot
    /// per sequence of the batch): a pass `widen` asks again for starts from them, not from
    /// the states the failed pass advanced. nil without float16 products or DeltaNet layers.
    let stateBackup: GPUBuffer?
    var restoreStates = false
    /// Each of `config.ropes`' per-pair frequencies.
    var ropeFreqs: [GPUBuffer] = []
    var batch = ForwardBatch()
    var n = 0
    private var recordStart: UInt64 = 0
    /// Partials of split-K attention (GPUKernels.attentionSplits), merged by attention_combine.
    let attnScratch: GPUBuffer
    /// attention_q8's counters, one a (token, KV head) of a decode batch, zero between dispatches.
    let attnDone: GPUBuffer?
    private let maxContext: Int
    /// Decode with 8-bit activations (matvec_dot_T): quantize_q8's outputs for up to
    /// matvecMaxRows rows (values, (d, sum) pairs); nil when the device or no weight type has it.
    let q8: (values: GPUBuffer, scales: GPUBuffer)?
    /// Decode tokens' products that write the next product's 8-bit input themselves
    /// (matvec_dot_q8out_T): a second set of 8-bit buffers (one product never reads and writes
    /// one set) and the residual mode's sums of squares, a float a block. nil where that does
    /// not apply (GPUKernels.q8OutModel).
    let q8Out: (values: GPUBuffer, scales: GPUBuffer, sums: GPUBuffer)?
    /// The set of 8-bit buffers holding q8Source's rows (0: q8, 1: q8Out's), and whether those
    /// still wait for the norm's 1/rms (matvec_dot_q8out_T's residual mode).
    var q8Set = 0
    var q8Scaled = false
    /// Which activation rows a converted copy (q8, x16) holds: buffer, offset, rows, stride, K.
    typealias RowsKey = (buffer: ObjectIdentifier, offset: Int, rows: Int, xStride: Int, k: Int)
    func rowsKey(_ x: GPUBinding, rows: Int, xStride: Int, k: Int) -> RowsKey {
        (ObjectIdentifier(x.buffer), x.offset, rows, xStride, k)
    }
    /// The activation rows q8 holds now; any dispatch but quantize_q8 and matvec_dot_T may
    /// change them, so every other one clears this.
    var q8Source: RowsKey?
    /// Row length q8 holds blocks for (the longest input of a matvec_dot weight).
    let q8Width: Int
    /// Prefill on tensor cores (matmul_coop_T): to_f16's copy of the activation rows, and which
    /// rows it holds now (as q8Source; any dispatch but to_f16, matmul_coop_T and sum_splits
    /// clears it).
    let x16: GPUBuffer?
    /// matmul_coop_batch_T's split-K counters (GPUKernels.coopBatchCounters), with x16.
    let splitDone: GPUBuffer?
    var x16Source: RowsKey?
    /// Where products round through float16: matmul_cm2h_T's sums, and the activations' copies
    /// (x16). Each is given up, in that order, when a pass that used it ends with a non-finite
    /// norm (`widen`): an overflow past 65504 becomes inf, and inf or NaN reaches the norms.
    var f16Sums = GPUKernels.cm2F16Sums
    var f16Inputs = true
    /// What this pass rounded through float16 (cleared by `begin`).
    var passUsed = (sums: false, inputs: false)
    /// The norms' flag word: 1 when a row's sum of squares was not finite.
    let nonfinite: GPUBuffer
    private let weightTypes: Set<GGMLType>
    /// This model's K/V inside the pages (the pool's types; a draft's own layers and width), and
    /// where each of its layers lives: buffer, words between pages, words into a page.
    let kvLayout: KVLayout
    let kvPlaces: [GPUKVPages.Place]
    /// The K/V page kernels for the cache's types.
    let kvStoreKernel, ropeStoreKernel, attentionKernel, attentionQ8Kernel, attentionX16Kernel, attentionTiledKernel, attentionCoopKernel: GPUKernels.Kernel
    /// Decode attention over long f16 caches (nil where the pages do not suit it), and whether
    /// this step takes it.
    let attentionStagedKernels: (plain: GPUKernels.Kernel, q8: GPUKernels.Kernel)?
    var stagedStep = false
    /// Prefill attention on attention_cm2 (nil where the device, pages or model do not suit it):
    /// its kernel, the gathered K/V copy and the keys it holds; this step's run of tokens it
    /// takes (the batch's last sequence's: first token, tokens, keys, page-table start, split
    /// plan), and the tokens before that run, which the other kernels take.
    let cm2Attention: (kernel: GPUKernels.Kernel, copy: GPUBuffer, cap: Int)?
    var cm2AttentionStep: (first: Int, count: Int, keys: Int, pt: Int, chunk: Int, splits: Int)?
    var attentionTokens = 0

    init(device: GPUDevice, model: LanguageModel, kv: GPUKVPages, layers: Int, kvDim: Int,
         maxTokens: Int, maxLogitRows: Int, maxSequences: Int, maxContext: Int, checkpoints: Int, profiler: Profiler) throws {
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
        let valueDim = c.mla?.kvLora
        if let wrong = c.headShapes.first(where: { !GPUKernels.attentionFits(headDim: $0.headDim, valueDim: valueDim ?? $0.headDim) }) {
            throw VeloError(.unsupported, "the GPU attention kernels take head sizes that are multiples of 4 up to \(GPUKernels.attentionMaxValueDim) (\(GPUKernels.attentionMaxHeadDim) for MLA's rows); this model's are \(wrong.headDim) (use --backend cpu)")
        }
        kvLayout = KVLayout(pageSize: kv.pageSize, layers: layers, kvDim: kvDim, typeK: kv.layout.typeK, typeV: kv.layout.typeV,
                            layerDims: layers == c.kvLayers && kvDim == c.kvDim ? c.kvLayerDims : [])
        kvPlaces = try kv.places(for: kvLayout)
        let (tk, tv) = (kv.layout.typeK, kv.layout.typeV)
        ropeJoin = GPUKernels.ropeJoin(c, kv: (tk, tv))
        kvStoreKernel = GPUKernels.kvVariant(GPUKernels.kvStore, k: tk, v: tv)
        ropeStoreKernel = GPUKernels.kvVariant(GPUKernels.ropeStore, k: tk, v: tv)
        // (the kernels' group constant is a bound: layers of smaller groups take it too)
        let group = c.maxGroup
        attentionKernel = GPUKernels.attentionGrouped(GPUKernels.kvVariant(GPUKernels.attention, k: tk, v: tv), groupHeads: group, device: device)
        attentionQ8Kernel = GPUKernels.attentionGrouped(GPUKernels.kvVariant(GPUKernels.attentionQ8, k: tk, v: tv), groupHeads: group, device: device)
        attentionX16Kernel = GPUKernels.attentionGrouped(GPUKernels.kvVariant(GPUKernels.attentionX16, k: tk, v: tv), groupHeads: group, device: device)
        attentionStagedKernels = c.layerHeads.isEmpty && GPUKernels.attentionStagedFits(k: tk, v: tv, pageSize: kv.pageSize, kvDim: kvDim, headDim: c.headDim,
                                                                places: kvPlaces.map { ($0.pageStride, $0.layerOff) })
            ? (GPUKernels.attentionGrouped(GPUKernels.attentionStaged, groupHeads: group, device: device),
               GPUKernels.attentionGrouped(GPUKernels.attentionQ8Staged, groupHeads: group, device: device)) : nil
        attentionTiledKernel = GPUKernels.kvVariant(GPUKernels.attentionTiled, k: tk, v: tv)
        attentionCoopKernel = GPUKernels.kvVariant(GPUKernels.attentionCoop, k: tk, v: tv)
        attnScratch = try device.makeBuffer(
            bytes: max(GPUKernels.attentionScratchFloats(maxTokens: maxTokens, maxContext: maxContext, heads: c.heads, headDim: c.maxHeadDim) * 4, 16),
            memory: .device, label: "attention partials")
        // (attention_cm2 has no sinks: gpt-oss's windows keep it out already, this any sink model)
        let sinks = (model as? DecoderModel)?.layers.contains { $0.sinks != nil } ?? false
        if !sinks, GPUKernels.attentionCM2Fits(device, c, k: tk, v: tv, pageSize: kv.pageSize, kvDim: kvDim,
                                       places: kvPlaces.map { ($0.pageStride, $0.layerOff) }) {
            let cap = GPUKernels.attentionCM2Capacity(maxContext: maxContext)
            cm2Attention = (GPUKernels.attentionCM2(headDim: c.headDim),
                            try device.makeBuffer(bytes: cap * kvDim * 4, memory: .device, label: "gathered K/V"), cap)
        } else {
            cm2Attention = nil
        }
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
            bl = align(rs + maxLogitRows * 4), hs = align(bl + maxTokens * 8), ds = align(hs + maxTokens * 4),
            dr = align(ds + maxSequences * 16), tab = align(dr + maxTokens * 4)
        sections = (t, p, pt, rs, bl, hs, ds, dr, tab)
        coopAttention = config.headShapes.allSatisfy { GPUKernels.useAttentionCoop(device, heads: $0.heads, kvHeads: $0.kvHeads, headDim: $0.headDim) }
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
            let rows = InterleavedRows(blocks: [[g.data, u.data]], rows: g.rows, rowBytes: rb)
            try device.upload(b, offset: 0, bytes: bytes) { rows.write(into: $0, at: $1, count: $2) }
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
            // (biased experts keep gate and up apart, each taking its bias before the GLU, and so
            // do other activations than SiLU: the interleaved paths apply SiLU)
            let interleave = g.type == u.type && g.rows == u.rows && g.cols == u.cols && g.rowBytes == u.rowBytes && l.biases == nil
                && c.experts!.glu == .swiglu
            for stack in interleave ? [l.gate, l.down] : [l.gate, l.up, l.down] {
                let w = stack[0], pair = interleave && w.data == g.data
                let bytes = w.rows * w.rowBytes * (pair ? 2 : 1)
                guard bytes * stack.count <= device.maxBindingBytes else {
                    throw VeloError(.unsupported, "\(w.name)\(pair ? " with its up weights" : "") (\((bytes * stack.count) >> 20) MiB) is larger than one GPU buffer binding may be on \(device.name)")
                }
                let b = try device.makeBuffer(bytes: bytes * stack.count, memory: .device, label: w.name)
                if pair {
                    // each expert's gate and up rows interleaved, expert after expert
                    let rows = InterleavedRows(blocks: zip(l.gate, l.up).map { [$0.data, $1.data] }, rows: w.rows, rowBytes: w.rowBytes)
                    try device.upload(b, offset: 0, bytes: rows.bytes) { rows.write(into: $0, at: $1, count: $2) }
                    paired.formUnion(l.up.map(\.data))
                } else {
                    try Self.upload(stack, device: device, into: b)
                }
                let expert = WeightMatrix(name: w.name, type: w.type, data: w.data, rows: w.rows * (pair ? 2 : 1), cols: w.cols, rowBytes: w.rowBytes)
                expertStacks[w.data] = ExpertStack(buffer: b, expert: expert)
                paired.formUnion(stack.map(\.data))
            }
        }
        moe = c.experts == nil ? nil : try MoEBuffers(device: device, config: c, maxTokens: maxTokens)
        recurrent = c.deltaNet == nil ? nil
            : try GPURecurrentBuffers(device: device, config: c, maxTokens: maxTokens, sequences: maxSequences, checkpoints: checkpoints)
        perLayer = c.perLayerWidth == 0 ? nil : try GPUPerLayerBuffers(device: device, config: c, maxTokens: maxTokens)
        latent = c.mla == nil ? nil : try GPULatentBuffers(device: device, config: c, maxTokens: maxTokens, decodeRows: matvecMaxRows)
        // each layer's attn_k_b and attn_v_b as one stack too: a decode step's heads as the experts
        // of one dispatch (prefill reads each head's own upload below; a stack too large for one
        // binding leaves decode a head at a time as well)
        for stack in Self.headStacks(model) where stack[0].rows * stack[0].rowBytes * stack.count <= device.maxBindingBytes {
            let b = try device.makeBuffer(bytes: stack[0].rows * stack[0].rowBytes * stack.count, memory: .device, label: stack[0].name)
            try Self.upload(stack, device: device, into: b)
            expertStacks[stack[0].data] = ExpertStack(buffer: b, expert: stack[0])
        }
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
        if c.valueNorm { ones = try upload([Float](repeating: 1, count: c.maxHeadDim), label: "ones") }
        if let e = c.experts, e.weightsScale != 1 { weightsScale = try upload([Float](repeating: e.weightsScale, count: e.count), label: "expert weights scale") }
        if ropeJoin != nil {
            for (q, k, v) in model.attentionBiases where q.values.count == c.qDim && k.values.count == kvDim && v.values.count == kvDim {
                qkvBiases[q.name] = (try upload(q.values + k.values + v.values, label: q.name), k.name, v.name)
            }
        }
        ropeFreqs = try c.ropes.map { try upload($0.freqs, label: "rope frequencies") }
        if maxTokens > matvecMaxRows, let k = model.matrices.filter({ GPUKernels.useCoop(device, $0.type) }).map(\.cols).max() {
            x16 = try device.makeBuffer(bytes: GPUKernels.f16Bytes(maxTokens: maxTokens, maxCols: k, experts: c.experts), memory: .device, label: "float16 activations")
            splitDone = try Self.counters(device, GPUKernels.coopBatchCounters, label: "split-K counters")
            stateBackup = try c.deltaNet.map { try device.makeBuffer(bytes: maxSequences * $0.slotFloats * 4, memory: .device, label: "recurrent states before a pass") }
        } else {
            x16 = nil
            splitDone = nil
            stateBackup = nil
        }
        let q8k = model.matrices.filter { GPUKernels.dotTypes.contains($0.type) }.map(\.cols).max()
        q8Width = q8k ?? 0
        // the pipelines this model's passes can use (matmul_cm2_T's apart: those may fail)
        var wanted: [GPUKernels.Kernel] = [], wantedCM2: [(kernel: GPUKernels.Kernel, type: GGMLType)] = []
        func want(_ k: GPUKernels.Kernel) { wanted.append(k) }
        if let b = Self.q8Bytes(device: device, model: model) {
            q8 = (try device.makeBuffer(bytes: b.values, memory: .device, label: "8-bit activations"),
                  try device.makeBuffer(bytes: b.scales, memory: .device, label: "8-bit activation scales"))
            attnDone = try Self.counters(device, GPUKernels.attentionJoinRows * c.kvHeads, label: "attention counters")
            if ropeJoin != nil && GPUKernels.q8OutFits(device) && GPUKernels.q8OutModel(model) && gatedWeights.count == c.layers && qkvWeights.count == c.layers {
                q8Out = (try device.makeBuffer(bytes: b.values, memory: .device, label: "8-bit activations (second set)"),
                         try device.makeBuffer(bytes: b.scales, memory: .device, label: "8-bit activation scales (second set)"),
                         try device.makeBuffer(bytes: c.dim / 32 * 4, memory: .device, label: "norm sums of squares"))
            } else {
                q8Out = nil
            }
            for k in [GPUKernels.quantizeQ8, GPUKernels.addRMSNormQ8, GPUKernels.attentionCombineQ8, attentionQ8Kernel] + [attentionStagedKernels?.q8].compactMap({ $0 }) {
                want(k)
            }
            if x16 != nil && matvecMaxRows < GPUKernels.attentionJoinRows { want(attentionX16Kernel) }
            for w in Self.distinctShapes(model.matrices) where GPUKernels.dotTypes.contains(w.type) {
                for m in [1, 2, 4, 8, 16] {
                    for glu in [false, true] { want(GPUKernels.matvecDot(w.type, rows: m, n: w.rows, glu: glu)) }
                }
                if let kv = ropeJoin {
                    for scaled in q8Out != nil ? [false, true] : [false] {
                        want(GPUKernels.matvecDotRope(w.type, kv: kv, scaled: scaled, neox: c.ropeStyle == .neox, bias: !qkvBiases.isEmpty))
                    }
                }
                if q8Out != nil {
                    for (glu, scaled) in [(false, false), (true, false), (true, true)] { want(GPUKernels.matvecDotQ8Out(w.type, glu: glu, scaled: scaled)) }
                }
            }
        } else {
            q8 = nil
            q8Out = nil
            attnDone = nil
        }
        // every product's (type, N, K), the gate/up pairs' as one product
        let products = model.matrices.map { ($0.type, $0.rows, $0.cols) } + model.gatedPairs.map { ($0.0.type, 2 * $0.0.rows, $0.0.cols) }
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
                        // (its prefetch depth follows the product's shape: each depth the type's
                        // products take)
                        var seen = Set<[UInt32]>()
                        for p in products where p.0 == w.type {
                            let k = GPUKernels.matmulCoopBatch(w.type, rows: m, n: p.1, k: p.2)
                            if seen.insert(k.constants).inserted { want(k) }
                        }
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
        if recurrent != nil { for k in [GPUKernels.deltaNetConv, GPUKernels.deltaNetRecur, GPUKernels.splitQuery, GPUKernels.sigmoidGate] { want(k) } }
        if let p = (model as? DecoderModel)?.perLayerEmbeddings {
            for k in [GPUKernels.perLayerInputs, GPUKernels.perLayerGate, GPUKernels.getRows(p.tokens.type)] { want(k) }
        }
        if (model as? DecoderModel)?.layers.contains(where: { $0.outScale != nil }) ?? false { want(GPUKernels.scale) }
        if latent != nil {
            want(GPUKernels.copyRows)
            for w in Self.headStacks(model).map({ $0[0] }) where expertStacks[w.data] != nil {
                want(q8 != nil && GPUKernels.dotTypes.contains(w.type) ? GPUKernels.matvecDotID(w.type, k: w.cols) : GPUKernels.matvecID(w.type))
            }
        }
        if let a = cm2Attention { want(a.kernel); want(GPUKernels.kvGather) }
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
                             maxContext: Int, pageSize: Int, checkpoints: Int) -> Int {
        let c = model.config
        var b = max(GPUKernels.attentionScratchFloats(maxTokens: maxTokens, maxContext: maxContext, heads: c.heads, headDim: c.maxHeadDim) * 4, 16)
        b += maxTokens * Activation.allCases.reduce(0) { $0 + width($1, c) } * 4
        b += maxLogitRows * c.vocabSize * 4 * (device.stagesReadback ? 2 : 1) + max(maxLogitRows * 4, 16)
        let pagetab = maxSequences * ((maxContext + pageSize - 1) / pageSize + 1) + 16
        b += maxTokens * 28 + maxLogitRows * 4 + maxSequences * 16 + pagetab * 4 + 2048
        let matvecMaxRows = GPUKernels.matvecMaxRows(device: device, model: model)
        if maxTokens > matvecMaxRows, let rows = model.gatedPairs.map({ $0.0.rows }).max() { b += maxTokens * 2 * rows * 4 }
        if maxTokens > matvecMaxRows, let k = model.matrices.filter({ GPUKernels.useCoop(device, $0.type) }).map(\.cols).max() {
            b += GPUKernels.f16Bytes(maxTokens: maxTokens, maxCols: k, experts: c.experts) + GPUKernels.coopBatchCounters * 4
            b += (c.deltaNet?.slotFloats ?? 0) * maxSequences * 4 // stateBackup
        }
        if let q = q8Bytes(device: device, model: model) {
            b += q.values + q.scales
            if GPUKernels.q8OutModel(model) { b += q.values + q.scales + c.dim / 32 * 4 } // q8Out (counted whether or not the rope joins)
        }
        // attention_cm2's gathered K/V (counted for any cache type: init knows the pages')
        if GPUKernels.attentionCM2Model(device, c) {
            b += GPUKernels.attentionCM2Capacity(maxContext: maxContext) * c.kvDim * 4
        }
        return b + MoEBuffers.bytes(config: c, maxTokens: maxTokens)
            + GPURecurrentBuffers.bytes(config: c, maxTokens: maxTokens, sequences: maxSequences, checkpoints: checkpoints)
            + GPUPerLayerBuffers.bytes(config: c, maxTokens: maxTokens) + (c.valueNorm ? c.maxHeadDim * 4 : 0)
            + GPULatentBuffers.bytes(config: c, maxTokens: maxTokens, decodeRows: GPUKernels.matvecMaxRows(device: device, model: model))
            + (c.experts.map { $0.count * 4 } ?? 0) + headStacks(model).joined().reduce(0) { $0 + $1.rows * $1.rowBytes }
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
        if let s = model.config.mla {
            // a decode step's heads' rows at once (GPUForward.latentQKV's head products)
            let d = GPUKernels.q8Bytes(k: max(s.nope, s.kvLora), m: matvecMaxRows * model.config.heads)
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

    /// A buffer of `count` zeroed 32-bit counters (kernels that count their workgroups done
    /// leave them zero again).
    private static func counters(_ device: GPUDevice, _ count: Int, label: String) throws -> GPUBuffer {
        let zeros = [UInt32](repeating: 0, count: count)
        let b = try device.makeBuffer(bytes: count * 4, memory: .device, label: label)
        try zeros.withUnsafeBytes { try device.upload(b, offset: 0, from: $0.baseAddress!, bytes: $0.count) }
        return b
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

    private func dispatch(_ k: GPUKernels.Kernel, _ buffers: [GPUBinding], words params: [UInt32], _ groups: (Int, Int, Int), _ op: Profiler.Op) {
        flushQKV()
        flushResidual()
        // every pipeline was made in init; a failure here would be a bug, not bad input
        let p = try! pipeline(k)
        if q8Source != nil && k.name != GPUKernels.quantizeQ8.name && !k.name.hasPrefix("matvec_dot_") { q8Source = nil }
        if x16Source != nil && k.name != GPUKernels.toF16.name && k.name != GPUKernels.sumSplits.name && !k.name.hasPrefix("matmul_coop_") && !k.name.hasPrefix("matmul_cm2") { x16Source = nil }
        device.dispatch(p, buffers, params: params, groups: groups, op: op)
    }

    func dispatch(_ k: GPUKernels.Kernel, _ buffers: [GPUBinding], _ params: some KernelParams, _ groups: (Int, Int, Int), _ op: Profiler.Op) {
        dispatch(k, buffers, words: params.words, groups, op)
    }

    /// The held Q|K|V product as it was, when the op after it is not rope_store.
    func flushQKV() {
        guard let p = pendingQKV else { return }
        pendingQKV = nil
        precondition(!p.scaled, "a Q|K|V product on 8-bit input still waiting for the norm's 1/rms (GPUKernels.q8OutModel let in a layer it does not cover)")
        dispatch(GPUKernels.matvecDot(p.w.type, rows: 1, n: p.w.rows), p.buffers, p.params, p.groups, .matmul)
        for (a, b) in p.biases { addBias(a, b) }
    }

    /// The held O or down product as it was, when the op after it is not the residual's add
    /// and norm (the last layer's add, a post norm).
    func flushResidual() {
        guard let p = pendingResidual else { return }
        pendingResidual = nil
        products(p.src, [(p.w, p.dst)])
    }

    /// The 8-bit buffers of set `s` (q8Set).
    func q8Buffers(_ s: Int) -> (values: GPUBuffer, scales: GPUBuffer) { s == 0 ? q8! : (q8Out!.values, q8Out!.scales) }

    /// Records that the 8-bit buffers of `set` hold these activation rows (`scaled`: without
    /// the norm's 1/rms).
    func holdQ8(_ key: RowsKey, set: Int = 0, scaled: Bool = false) {
        q8Source = key
        q8Set = set
        q8Scaled = scaled
    }

    func act(_ a: Activation) -> GPUBinding { GPUBinding(views[a.rawValue].buffer, offset: views[a.rawValue].offset) }
    /// Floats between rows of an activation.
    func stride(_ a: Activation) -> Int { views[a.rawValue].stride }
    /// An expert stack's weights into one buffer, expert after expert: in one copy where they are
    /// consecutive in the file, else one each (views of a tensor that holds more: Gemma 4's
    /// gate and up stacked in one).
    private static func upload(_ stack: [WeightMatrix], device: GPUDevice, into b: GPUBuffer) throws {
        let bytes = stack[0].rows * stack[0].rowBytes
        if zip(stack, stack.dropFirst()).allSatisfy({ $1.data == $0.data + bytes }) {
            try device.upload(b, offset: 0, from: stack[0].data, bytes: bytes * stack.count)
        } else {
            for (i, w) in stack.enumerated() { try device.upload(b, offset: i * bytes, from: w.data, bytes: bytes) }
        }
    }

    /// An MLA model's per-head weights, a stack a layer each: attn_k_b's and attn_v_b's.
    private static func headStacks(_ model: LanguageModel) -> [[WeightMatrix]] {
        (model as? MLAModel)?.layers.flatMap { [$0.attention.kB, $0.attention.vB] } ?? []
    }

    /// y = rmsnorm(x) * gain over `rows` rows of `width` (strides apart; y may be x).
    func normRows(_ x: GPUBinding, xStride: Int, width: Int, rows: Int, gain: WeightVector, into y: GPUBinding, yStride: Int) {
        dispatch(GPUKernels.rmsNorm, [x, GPUBinding(vectors[gain.name]!), y, input(sections.rowsel, maxLogitRows), GPUBinding(nonfinite)],
                 GPUParams.RMSNorm(n: UInt32(width), rows: UInt32(rows), eps: config.normEps, useRowsel: 0, xStride: UInt32(xStride), heads: 1, yStride: UInt32(yStride)),
                 (rows, 1, 1), .norm)
    }

    /// Rows of `a` (an activation with a buffer of its own) `width` floats apart from here on:
    /// the layer's own width where layers differ (Gemma 4's heads and MLPs).
    func setRowWidth(_ a: Activation, _ width: Int) {
        precondition(views[a.rawValue].offset == 0 && width <= Self.width(a, config), "rows of \(width) in \(a)'s buffer")
        views[a.rawValue].stride = width
    }
    func input(_ offset: Int, _ count: Int) -> GPUBinding { GPUBinding(inputs, offset: offset, size: max(count, 1) * 4) }
    var tokpos: GPUBinding { input(sections.tokpos, maxTokens) }
    var tokpt: GPUBinding { input(sections.tokpt, maxTokens) }
    var pagetab: GPUBinding { input(sections.pagetab, pagetabCapacity) }

    // MARK: ForwardOps

    func begin(_ batch: ForwardBatch) throws {
        precondition(batch.count <= maxTokens && batch.logitRows.count <= maxLogitRows, "batch larger than the GPU workspace")
        precondition(recurrent != nil || (batch.stateLoads.isEmpty && batch.stateSaves.isEmpty), "recurrent state copies for a model without them")
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
        if let l = latent, n <= matvecMaxRows { l.writeRouting(tokens: n, heads: config.heads) }
        if recurrent != nil {
            let r = recurrentInputs(batch)
            write(sections.dnseq, r.seqs)
            write(sections.dnrows, r.rows)
        }
        if !table.isEmpty { write(sections.pagetab, table) }
        // attention_cm2 takes the batch's last run of one sequence's tokens (a prompt chunk: the
        // scheduler puts decode tokens first) when it is the whole step or a block at least;
        // the tokens before it, `attentionTokens`, take the other kernels
        cm2AttentionStep = nil
        attentionTokens = n
        if cm2Attention != nil, n > matvecMaxRows, let last = batch.sequence.last {
            var first = n
            while first > 0 && batch.sequence[first - 1] == last { first -= 1 }
            let count = n - first, runKeys = batch.positions[first...].max()! + 1
            if first == 0 || count >= GPUKernels.attentionCM2Shape.br {
                // beside other tokens unsplit: attention_combine merges every token's splits alike
                let plan = first == 0 ? GPUKernels.attentionCM2Splits(keys: runKeys, n: count, heads: config.heads, maxTokens: maxTokens, maxContext: maxContext)
                    : (chunk: runKeys, splits: 1)
                cm2AttentionStep = (first, count, runKeys, Int(starts[last]), plan.chunk, plan.splits)
                attentionTokens = first
            }
        }
        let na = attentionTokens, sequence = Array(batch.sequence[0..<na])
        // (blocks of as few tokens as the largest group's: each layer's group takes them; MLA's
        // rows, whose values are part of a head, take the split-K kernels)
        let blocks = na > matvecMaxRows && config.mla == nil && config.headShapes.allSatisfy({ GPUKernels.attentionTiledFits(heads: $0.heads, kvHeads: $0.kvHeads, headDim: $0.headDim) })
            ? GPUKernels.attentionBlocks(sequence: sequence, heads: config.heads, kvHeads: config.heads / config.maxGroup, headDim: config.maxHeadDim,
                                         rows: coopAttention ? GPUKernels.attentionCoopRows : GPUKernels.attentionTiledRows) : nil
        if let blocks { write(sections.blocks, blocks) }
        tiledBlocks = (blocks?.count ?? 0) / 2
        let keys = (batch.positions[0..<na].max() ?? 0) + 1
        stagedStep = tiledBlocks == 0 && attentionStagedKernels != nil && keys >= GPUKernels.attentionStagedMinKeys
        attentionPlan = tiledBlocks > 0
            ? GPUKernels.prefillAttentionSplits(keys: keys, n: na, workgroups: tiledBlocks * config.kvHeads, maxTokens: maxTokens, maxContext: maxContext)
            : stagedStep
            ? GPUKernels.attentionStagedSplits(keys: keys, n: na, kvHeads: config.kvHeads, headDim: config.headDim, maxTokens: maxTokens, maxContext: maxContext)
            : GPUKernels.attentionSplits(keys: keys, n: na, maxTokens: maxTokens, maxContext: maxContext)
        recordStart = nowNanos()
        try device.begin()
        copyStates(batch, loads: true)
        // (only passes past matvecMaxRows round through float16, and so may be asked again)
        if let b = stateBackup, n > matvecMaxRows {
            backUpStates(batch, b, restore: restoreStates)
        }
        restoreStates = false
    }

    func embed(_ table: WeightMatrix, scale: Float) {
        dispatch(GPUKernels.getRows(table.type),
                 [GPUBinding(weights[table.data]!), input(sections.tokens, maxTokens), act(.x)],
                 GPUParams.GetRows(k: UInt32(table.cols), rowBytes: UInt32(table.rowBytes), n: UInt32(n), scale: scale), (n, 1, 1), .embed)
    }

    func rmsNorm(_ src: Activation, _ w: WeightVector, into dst: Activation) {
        norm(src, w, rows: n, selection: nil, into: act(dst))
    }

    /// Norms `rows` rows of `src`: the first ones, or those a selection section lists.
    func norm(_ src: Activation, _ w: WeightVector, rows: Int, selection: GPUBinding?, into dst: GPUBinding) {
        dispatch(GPUKernels.rmsNorm,
                 [act(src), GPUBinding(vectors[w.name]!), dst, selection ?? input(sections.rowsel, maxLogitRows), GPUBinding(nonfinite)],
                 GPUParams.RMSNorm(n: UInt32(config.dim), rows: UInt32(rows), eps: config.normEps, useRowsel: selection != nil ? 1 : 0,
                                   xStride: UInt32(config.dim), heads: 1, yStride: UInt32(config.dim)),
                 (rows, 1, 1), .norm)
    }

    func headNorm(_ a: Activation, _ w: WeightVector?, heads: Int, headDim: Int) {
        let s = UInt32(stride(a)), gain = w.map { vectors[$0.name]! } ?? ones!
        dispatch(GPUKernels.rmsNorm, [act(a), GPUBinding(gain), act(a), input(sections.rowsel, maxLogitRows), GPUBinding(nonfinite)],
                 GPUParams.RMSNorm(n: UInt32(headDim), rows: UInt32(n * heads), eps: config.normEps, useRowsel: 0, xStride: s, heads: UInt32(heads), yStride: s),
                 (n * heads, 1, 1), .norm)
    }

    func addBias(_ a: Activation, _ b: WeightVector) {
        // a held Q|K|V product takes its layer's biases, in order, for matvec_dot_rope_T to add
        if var p = pendingQKV, p.biases.count < 3, let first = p.biases.first?.1 ?? (a == .q ? b : nil), let cat = qkvBiases[first.name],
           ([Activation.q, .k, .v][p.biases.count], [first.name, cat.k, cat.v][p.biases.count]) == (a, b.name) {
            p.biases.append((a, b))
            pendingQKV = p
            return
        }
        addBias(act(a), b, rows: n, stride: stride(a))
    }

    /// x's `rows` rows, `stride` floats apart, each += b.
    func addBias(_ x: GPUBinding, _ b: WeightVector, rows: Int, stride: Int) {
        let width = b.values.count
        dispatch(GPUKernels.addBias, [x, GPUBinding(vectors[b.name]!)], GPUParams.AddBias(n: UInt32(width), rows: UInt32(rows), stride: UInt32(stride)),
                 ((width + 255) / 256, rows, 1), .other)
    }

    func addRMSNorm(_ dst: Activation, _ src: Activation, _ w: WeightVector, into out: Activation) {
        if let p = pendingResidual, p.dst == src, n == 1 {
            pendingResidual = nil
            residualProduct(p.w, p.src, residual: dst, norm: w, out: out)
            return
        }
        let dim = config.dim, params = GPUParams.AddRMSNorm(n: UInt32(dim), rows: UInt32(n), eps: config.normEps)
        let bindings = [act(dst), act(src), GPUBinding(vectors[w.name]!), act(out)]
        if let q8, n <= matvecMaxRows, dim % 32 == 0, dim <= GPUKernels.addRMSNormQ8MaxWidth, dim <= q8Width {
            // the norm also as 8-bit blocks, for the matvec_dot products that read it next
            dispatch(GPUKernels.addRMSNormQ8, bindings + [GPUBinding(q8.values), GPUBinding(q8.scales)], params, (n, 1, 1), .norm)
            holdQ8(rowsKey(act(out), rows: n, xStride: stride(out), k: dim))
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
        dispatch(GPUKernels.add, [act(dst), act(src)], GPUParams.Add(count: UInt32(count)), ((count + 255) / 256, 1, 1), .other)
    }

    func hidden(norm w: WeightVector) {
        let rows = batch.hiddenRows.count
        guard rows > 0, let out = hiddenBuffer else { return }
        norm(.x, w, rows: rows, selection: input(sections.hiddensel, maxTokens), into: GPUBinding(out))
    }

    var hiddenStates: UnsafePointer<Float> { UnsafePointer(hiddenBuffer!.contents!.assumingMemoryBound(to: Float.self)) }

    var argmaxes: UnsafePointer<Int32>? { argmaxesMade ? UnsafePointer(argmaxBuffer.contents!.assumingMemoryBound(to: Int32.self)) : nil }

    /// After `finish`: when a norm of the pass saw inf or NaN and the pass rounded through
    /// float16, gives up the narrowest rounding it used (float16 sums, then float16 activation
    /// copies, for the rest of this engine's life) and asks for the pass again. Re-running is
    /// safe: a pass rewrites the K/V of its own positions before reading them, and starts from
    /// the recurrent states `stateBackup` kept.
    func widen() -> Bool {
        let flag = nonfinite.contents!.assumingMemoryBound(to: UInt32.self)
        guard flag.pointee != 0 else { return false }
        flag.pointee = 0
        // (a pass asked again starts from the states it began with)
        restoreStates = stateBackup != nil && (passUsed.sums || passUsed.inputs)
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
        flushResidual()
        copyStates(batch, loads: false)
        let t0 = nowNanos()
        if profiler.enabled { profiler.add(.record, nanos: t0 - recordStart) }
        try device.commit(profiler: profiler.enabled ? profiler : nil)
        if profiler.enabled { profiler.add(.wait, nanos: nowNanos() - t0) }
        return logitsBuffer.contents!.assumingMemoryBound(to: Float.self)
    }
}

extension GPUForward {
    /// What `model` needs that the GPU kernels do not have yet, in words (nil: nothing).
    static func lacking(_ model: LanguageModel) -> String? {
        let c = model.config
        var missing: [String] = []
        if let d = c.deltaNet {
            if d.state > GPUKernels.deltaNetMaxState { missing.append("DeltaNet states wider than \(GPUKernels.deltaNetMaxState)") }
            if d.conv > GPUKernels.deltaNetMaxTaps { missing.append("DeltaNet convolutions of more than \(GPUKernels.deltaNetMaxTaps) taps") }
        }
        if let e = c.experts {
            // (moe_route's choice biases recompute the weight as a sigmoid)
            if e.selectionBias && e.gating != .sigmoid { missing.append("choice biases over softmax routing") }
            if let g = e.groups, g.count > GPUKernels.moeRouteMaxGroups { missing.append("more than \(GPUKernels.moeRouteMaxGroups) expert groups") }
        }
        if let t = Set(model.matrices.map(\.type)).first(where: { !GPUKernels.weightTypes.contains($0) }) { missing.append("\(t.name) weights") }
        // quants.glsl reads rows from a word boundary: MXFP4's 17-byte blocks need an even count a row
        if let w = model.matrices.first(where: { $0.type == .mxfp4 && $0.rowBytes % 2 != 0 }) { missing.append("MXFP4 rows of an odd number of blocks (\(w.name))") }
        return missing.isEmpty ? nil : missing.joined(separator: ", ")
    }
}
