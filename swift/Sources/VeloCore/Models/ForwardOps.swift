import CKernels
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The activation buffers of a forward pass; every backend keeps one of each, `maxTokens`
/// rows wide: x and xn are model-width, q and attn query-width, k and v K/V-width, gate and
/// up MLP-width.
enum Activation: Int, CaseIterable {
    case x, xn, q, k, v, attn, gate, up
}

/// The operations an architecture's forward pass is written in, over the tokens of the batch
/// given to `begin`. The CPU runs them as it goes; a GPU records them into one command buffer
/// and runs the whole pass at `finish`. K/V go to the batch's pages.
protocol ForwardOps: AnyObject {
    func begin(_ batch: ForwardBatch) throws
    /// x = the embedding rows of the batch's tokens, times `scale`.
    func embed(_ table: WeightMatrix, scale: Float)
    /// dst = rmsnorm(src) * w, every row (dst may be src).
    func rmsNorm(_ src: Activation, _ w: WeightVector, into dst: Activation)
    /// In place: each of the `heads` heads (of `headDim`) of every row = rmsnorm(head) * w
    /// (Q/K norms; no gain where w is nil: Gemma 4's V).
    func headNorm(_ a: Activation, _ w: WeightVector?, heads: Int, headDim: Int)
    /// out = W · src for several weights sharing one input.
    func matmul(_ src: Activation, _ pairs: [(WeightMatrix, Activation)])
    /// a += b on every row.
    func addBias(_ a: Activation, _ b: WeightVector)
    /// Rotary embedding `config.ropes[rope]` in place on `heads` heads of `headDim` per row, at each token's position.
    func rope(_ a: Activation, heads: Int, headDim: Int, rope: Int)
    /// Writes k and v (`kvDim` a row) into the pages of layer `layer`.
    func storeKV(layer: Int, kvDim: Int)
    /// Rotary embedding of q and k at each token's position, then k and v into the pages.
    func ropeAndStoreKV(layer: Int, _ shape: HeadShape, rope: Int)
    /// attn = causal attention of q over each token's own sequence, layer `layer`.
    func attention(layer: Int, _ p: AttentionParams)
    /// dst += src (model-width rows).
    func add(_ dst: Activation, _ src: Activation)
    /// The residual add and the norm after it: dst += src, then out = rmsnorm(dst) * w.
    func addRMSNorm(_ dst: Activation, _ src: Activation, _ w: WeightVector, into out: Activation)
    /// gate = act(gate) * up, `width` a row.
    func glu(_ act: ModelConfig.FFNActivation, width: Int)
    /// gate = act(gate_w · src) * (up_w · src): a gated MLP's input (the pair should be in the
    /// model's `gatedPairs`, so a GPU has it interleaved for one dispatch).
    func gatedUp(_ src: Activation, gate: WeightMatrix, up: WeightMatrix, _ act: ModelConfig.FFNActivation)
    /// The final-norm hidden states of the batch's `hiddenRows`, rmsnorm(x) * norm (what the
    /// output projection reads), for embeddings; nothing when it has none.
    func hidden(norm: WeightVector)
    /// dst = the layer's mixture-of-experts FFN of src (`ModelConfig.experts`; dst may be src),
    /// its router reading `router` (src itself but for Gemma 4's).
    func experts(_ src: Activation, _ layer: ExpertLayer, routedBy router: Activation, into dst: Activation)
    /// dst = the Gated DeltaNet block of src (`ModelConfig.deltaNet`), through and into each
    /// sequence's recurrent state (`ForwardBatch.stateSlots`); dst may be src.
    func deltaNet(_ src: Activation, _ layer: DeltaNetLayer, into dst: Activation)
    /// q = each head's query from `w` · src, whose rows are every head's query then its output
    /// gate (Qwen3.5's gated attention); the gates are kept for `gateAttention`.
    func gatedQuery(_ src: Activation, _ w: WeightMatrix)
    /// attn *= sigmoid(the gates `gatedQuery` kept).
    func gateAttention()
    /// Multi-head latent attention's inputs from src (MLA.swift): q = every head's absorbed
    /// query, k = v = the token's latent row, each [RoPE part, latent], RoPE not yet turned.
    func latentQKV(_ src: Activation, _ layer: MLALayer)
    /// dst = each head's output taken out of latent space (attn_v_b), `heads × vHead` a row.
    func latentOutput(_ layer: MLALayer, into dst: Activation)
    /// a's model-width rows times `s` (Gemma 4's layer output scale).
    func scale(_ a: Activation, by s: Float)
    /// Each token's per-layer inputs from its embedding row and x (the scaled main embedding),
    /// kept for `perLayerEmbedding` through the pass (PerLayerEmbeddings.swift).
    func perLayerInputs(_ p: PerLayerEmbeddings)
    /// x += layer `layer`'s per-layer embedding block of x.
    func perLayerEmbedding(layer: Int, _ b: PerLayerBlock)
    /// Logits of the batch's `logitRows`: output · rmsnorm(x) * norm, then softcapped (0: not).
    func logits(norm: WeightVector, output: WeightMatrix, softcap: Float)
    /// Runs what was recorded; the logits, `logitRows.count` rows of `vocabSize`.
    func finish() throws -> UnsafeMutablePointer<Float>
    /// After `finish`: the hidden states `hidden` wrote, `hiddenRows.count` rows of `dim`.
    var hiddenStates: UnsafePointer<Float> { get }
    /// After `finish` of a batch that asked for them (`ForwardBatch.argmaxes`): each logit row's
    /// argmax, as `Sampler.argmax` picks it, found where the logits were made; nil from backends
    /// that leave it to the host (the CPU's logits are already in its caches).
    var argmaxes: UnsafePointer<Int32>? { get }
    /// After `finish`: whether the pass must run again because a narrower-than-float32 path
    /// overflowed (the backend has given that path up). A pass may be re-run: it rewrites the
    /// K/V of its own positions before reading them.
    func widen() -> Bool
    /// Takes kernels a background thread was building since the load once they are built;
    /// with `wait`, waits for them first (benchmarks, before they time anything).
    func settleKernels(wait: Bool)
}

extension ForwardOps {
    func experts(_ src: Activation, _ layer: ExpertLayer, into dst: Activation) { experts(src, layer, routedBy: src, into: dst) }

    /// Backends that round through nothing narrower than float32 never re-run a pass.
    func widen() -> Bool { false }

    var argmaxes: UnsafePointer<Int32>? { nil }

    /// Backends that build every kernel at load have none pending.
    func settleKernels(wait: Bool) {}

    /// What a backend without fused kernels runs instead.
    func ropeAndStoreKV(layer: Int, _ s: HeadShape, rope r: Int) {
        rope(.q, heads: s.heads, headDim: s.headDim, rope: r)
        rope(.k, heads: s.kvHeads, headDim: s.headDim, rope: r)
        storeKV(layer: layer, kvDim: s.kvDim)
    }

    func addRMSNorm(_ dst: Activation, _ src: Activation, _ w: WeightVector, into out: Activation) {
        add(dst, src)
        rmsNorm(dst, w, into: out)
    }
}

extension ForwardOps {
    /// The two products, then the activation, where a backend has no fused kernel.
    func gatedUp(_ src: Activation, gate: WeightMatrix, up: WeightMatrix, _ act: ModelConfig.FFNActivation) {
        matmul(src, [(gate, .gate), (up, .up)])
        glu(act, width: gate.rows)
    }
}

extension LanguageModel {
    /// One forward pass of `batch` on `ops`: the logits of its `logitRows`.
    func run(_ batch: ForwardBatch, on ops: ForwardOps) throws -> UnsafeMutablePointer<Float> {
        while true {
            try ops.begin(batch)
            forward(ops)
            let logits = try ops.finish()
            if !ops.widen() { return logits } // true at most once for each path given up
        }
    }
}

/// `ForwardOps` on the CPU thread pool (`TransformerOps` holds the kernels' callers).
final class CPUForward: ForwardOps {
    let config: ModelConfig
    let ops: TransformerOps
    let ws: Workspace
    let kv: KVView
    private var batch = ForwardBatch()
    /// cos/sin of this batch's positions for each of `config.ropes`.
    private var ropeTables: [(cos: [Float], sin: [Float])] = []
    /// `hidden`'s output, a row per workspace token; made on the first batch that asks
    /// (embeddings only).
    private var hiddenBuffer: UnsafeMutablePointer<Float>?

    init(config: ModelConfig, ops: TransformerOps, ws: Workspace, kv: KVView) {
        self.config = config
        self.ops = ops
        self.ws = ws
        self.kv = kv
    }

    deinit {
        perLayerScratch?.deallocate()
        hiddenBuffer?.deallocate()
        gatedScratch?.deallocate()
        latentScratch?.deallocate()
    }

    private func buf(_ a: Activation) -> UnsafeMutablePointer<Float> {
        switch a {
        case .x: return ws.x
        case .xn: return ws.xn
        case .q: return ws.q
        case .k: return ws.k
        case .v: return ws.v
        case .attn: return ws.attn
        case .gate: return ws.gate
        case .up: return ws.up
        }
    }

    func begin(_ batch: ForwardBatch) throws {
        precondition(batch.count <= ws.maxTokens, "batch of \(batch.count) tokens over the workspace's \(ws.maxTokens)")
        self.batch = batch
        for (checkpoint, slot) in batch.stateLoads { ws.deltaNet!.load(checkpoint, into: slot) }
        ropeTables = ops.profiler.measure(.rope) { config.ropes.map { ops.ropeTable($0, positions: batch.positions) } }
    }

    func embed(_ table: WeightMatrix, scale: Float) {
        ops.profiler.measure(.embed) {
            for (i, t) in batch.tokens.enumerated() {
                let row = ws.x + i * config.dim
                ck_dequantize_row(Int32(table.type.rawValue), table.data + Int(t) * table.rowBytes, row, Int64(config.dim))
                if scale != 1 { for j in 0..<config.dim { row[j] *= scale } }
            }
        }
    }

    func rmsNorm(_ src: Activation, _ w: WeightVector, into dst: Activation) {
        ops.rmsNorm(buf(src), w, rows: batch.count, n: config.dim, into: buf(dst))
    }

    func headNorm(_ a: Activation, _ w: WeightVector?, heads: Int, headDim: Int) {
        // a token's heads are consecutive rows of headDim
        ops.rmsNorm(buf(a), w, rows: batch.count * heads, n: headDim, into: buf(a))
    }

    func addBias(_ a: Activation, _ b: WeightVector) {
        let x = buf(a), n = b.values.count
        ops.profiler.measure(.other) {
            b.values.withUnsafeBufferPointer { bp in
                for r in 0..<batch.count { ck_add_f32(x + r * n, bp.baseAddress, x + r * n, Int64(n)) }
            }
        }
    }

    func matmul(_ src: Activation, _ pairs: [(WeightMatrix, Activation)]) {
        ops.matmul(buf(src), rows: batch.count, pairs.map { ($0.0, buf($0.1)) }, ws: ws)
    }

    func rope(_ a: Activation, heads: Int, headDim: Int, rope: Int) {
        ops.rope(buf(a), rows: batch.count, heads: heads, headDim: headDim, table: ropeTables[rope])
    }

    func storeKV(layer: Int, kvDim: Int) { ops.storeKV(batch, layer: layer, kvDim: kvDim, kv: kv, ws: ws) }

    func attention(layer: Int, _ p: AttentionParams) { ops.attention(batch, layer: layer, p, kv: kv, ws: ws) }

    func add(_ dst: Activation, _ src: Activation) {
        ops.profiler.measure(.other) { ops.addInPlace(buf(dst), buf(src), count: batch.count * config.dim) }
    }

    func glu(_ act: ModelConfig.FFNActivation, width f: Int) {
        ops.profiler.measure(.mlpActivation) {
            for r in 0..<batch.count {
                let g = ws.gate + r * f, u = ws.up + r * f
                switch act {
                case .silu: ck_swiglu(g, u, g, Int64(f))
                case .geluTanh: ck_geglu(g, u, g, Int64(f))
                }
            }
        }
    }

    func hidden(norm: WeightVector) {
        let rows = batch.hiddenRows, dim = config.dim
        guard !rows.isEmpty else { return }
        let out = hiddenBuffer ?? .allocate(capacity: ws.maxTokens * dim)
        hiddenBuffer = out
        ops.profiler.measure(.norm) {
            norm.values.withUnsafeBufferPointer { w in
                for (i, r) in rows.enumerated() {
                    ck_rms_norm(ws.x + r * dim, w.baseAddress, out + i * dim, Int64(dim), config.normEps)
                }
            }
        }
    }

    var hiddenStates: UnsafePointer<Float> { UnsafePointer(hiddenBuffer!) }

    func experts(_ src: Activation, _ layer: ExpertLayer, routedBy router: Activation, into dst: Activation) {
        ops.experts(buf(src), rows: batch.count, layer, router: buf(router), into: buf(dst), ws: ws)
    }

    func deltaNet(_ src: Activation, _ layer: DeltaNetLayer, into dst: Activation) {
        ops.deltaNet(buf(src), rows: batch.count, layer, batch: batch, into: buf(dst), ws: ws)
    }

    /// gatedQuery's buffers, made on first use: the product (2·qDim a row), then the gates
    /// (qDim a row), `maxTokens` rows each.
    private var gatedScratch: UnsafeMutablePointer<Float>?

    func gatedQuery(_ src: Activation, _ w: WeightMatrix) {
        let n = batch.count, qd = config.qDim, hd = config.headDim
        let both = gatedScratch ?? .allocate(capacity: ws.maxTokens * 3 * qd)
        gatedScratch = both
        let g = both + ws.maxTokens * 2 * qd
        ops.matmul(buf(src), rows: n, [(w, both)], ws: ws)
        ops.profiler.measure(.other) {
            for t in 0..<n {
                for h in 0..<config.heads {
                    (ws.q + t * qd + h * hd).update(from: both + t * 2 * qd + 2 * h * hd, count: hd)
                    (g + t * qd + h * hd).update(from: both + t * 2 * qd + (2 * h + 1) * hd, count: hd)
                }
            }
        }
    }

    func gateAttention() {
        let n = batch.count * config.qDim, g = gatedScratch! + ws.maxTokens * 2 * config.qDim
        ops.profiler.measure(.other) {
            for i in 0..<n { ws.attn[i] *= 1 / (1 + expf(-g[i])) }
        }
    }

    /// latentQKV's and latentOutput's buffers, made on first use, `maxTokens` rows each: the
    /// query product, q_a, kv_a, and one head's gathered input and output.
    private var latentScratch: UnsafeMutablePointer<Float>?

    private func latentBuffers() -> (q: UnsafeMutablePointer<Float>, qa: UnsafeMutablePointer<Float>, kva: UnsafeMutablePointer<Float>, gin: UnsafeMutablePointer<Float>, gout: UnsafeMutablePointer<Float>) {
        let s = config.mla!, m = ws.maxTokens, g = max(s.nope, s.kvLora, s.vHead)
        let widths = [config.heads * s.queryHead, s.qLora, s.rowWidth, g, g]
        let base = latentScratch ?? .allocate(capacity: m * widths.reduce(0, +))
        latentScratch = base
        var at = base, parts: [UnsafeMutablePointer<Float>] = []
        for w in widths { parts.append(at); at += m * w }
        return (parts[0], parts[1], parts[2], parts[3], parts[4])
    }

    func latentQKV(_ src: Activation, _ l: MLALayer) {
        let s = config.mla!, n = batch.count, heads = config.heads, row = s.rowWidth, qh = s.queryHead
        let b = latentBuffers(), x = buf(src)
        switch l.query {
        case let .direct(wq):
            ops.matmul(x, rows: n, [(wq, b.q), (l.kvA, b.kva)], ws: ws)
        case let .lowRank(a, norm, wb):
            ops.matmul(x, rows: n, [(a, b.qa), (l.kvA, b.kva)], ws: ws)
            ops.rmsNorm(b.qa, norm, rows: n, n: s.qLora, into: b.qa)
            ops.matmul(b.qa, rows: n, [(wb, b.q)], ws: ws)
        }
        ops.profiler.measure(.other) {
            l.kvANorm.values.withUnsafeBufferPointer { nw in
                for t in 0..<n {
                    // kv_a's row is [latent, RoPE part]; the cache's [RoPE part, normed latent]
                    let k = ws.k + t * row, from = b.kva + t * row
                    k.update(from: from + s.kvLora, count: s.rope)
                    ck_rms_norm(from, nw.baseAddress, k + s.rope, Int64(s.kvLora), config.normEps)
                    (ws.v + t * row).update(from: k, count: row)
                    for h in 0..<heads {
                        (ws.q + (t * heads + h) * row).update(from: b.q + (t * heads + h) * qh + s.nope, count: s.rope)
                    }
                }
            }
        }
        // each head's q_nope through its attn_k_b into latent space
        for h in 0..<heads {
            for t in 0..<n { (b.gin + t * s.nope).update(from: b.q + (t * heads + h) * qh, count: s.nope) }
            ops.matmul(b.gin, rows: n, [(l.kB[h], b.gout)], ws: ws)
            for t in 0..<n { (ws.q + (t * heads + h) * row + s.rope).update(from: b.gout + t * s.kvLora, count: s.kvLora) }
        }
    }

    func latentOutput(_ l: MLALayer, into dst: Activation) {
        let s = config.mla!, n = batch.count, heads = config.heads, row = s.rowWidth
        let b = latentBuffers(), out = buf(dst)
        for h in 0..<heads {
            for t in 0..<n { (b.gin + t * s.kvLora).update(from: ws.attn + (t * heads + h) * row + s.rope, count: s.kvLora) }
            ops.matmul(b.gin, rows: n, [(l.vB[h], b.gout)], ws: ws)
            for t in 0..<n { (out + (t * heads + h) * s.vHead).update(from: b.gout + t * s.vHead, count: s.vHead) }
        }
    }

    func scale(_ a: Activation, by s: Float) {
        let x = buf(a)
        ops.profiler.measure(.other) { for i in 0..<batch.count * config.dim { x[i] *= s } }
    }

    /// perLayerInputs' and perLayerEmbedding's buffers, made on first use, `maxTokens` rows
    /// each: the inputs (layers × width a row), then the gate's and the projection's outputs.
    private var perLayerScratch: UnsafeMutablePointer<Float>?

    private func perLayerBuffers(_ width: Int) -> (inputs: UnsafeMutablePointer<Float>, gated: UnsafeMutablePointer<Float>, out: UnsafeMutablePointer<Float>) {
        let m = ws.maxTokens, all = config.layers * width
        let base = perLayerScratch ?? .allocate(capacity: m * (all + width + config.dim))
        perLayerScratch = base
        return (base, base + m * all, base + m * (all + width))
    }

    func perLayerInputs(_ p: PerLayerEmbeddings) {
        let n = batch.count, w = p.width, all = config.layers * w, b = perLayerBuffers(w)
        ops.matmul(ws.x, rows: n, [(p.modelProj, b.inputs)], ws: ws)
        ops.profiler.measure(.embed) {
            let row = UnsafeMutablePointer<Float>.allocate(capacity: all)
            defer { row.deallocate() }
            let projScale = 1 / Float(config.dim).squareRoot(), tokenScale = Float(w).squareRoot(), mix = 1 / Float(2).squareRoot()
            p.projNorm.values.withUnsafeBufferPointer { g in
                for (t, token) in batch.tokens.enumerated() {
                    let x = b.inputs + t * all
                    ck_dequantize_row(Int32(p.tokens.type.rawValue), p.tokens.data + Int(token) * p.tokens.rowBytes, row, Int64(all))
                    for i in 0..<all { x[i] *= projScale }
                    for l in 0..<config.layers { ck_rms_norm(x + l * w, g.baseAddress, x + l * w, Int64(w), config.normEps) }
                    for i in 0..<all { x[i] = (x[i] + row[i] * tokenScale) * mix }
                }
            }
        }
    }

    func perLayerEmbedding(layer: Int, _ pb: PerLayerBlock) {
        let n = batch.count, w = pb.gate.rows, all = config.layers * w, b = perLayerBuffers(w)
        ops.matmul(ws.x, rows: n, [(pb.gate, b.gated)], ws: ws)
        ops.profiler.measure(.mlpActivation) {
            for t in 0..<n { ck_geglu(b.gated + t * w, b.inputs + t * all + layer * w, b.gated + t * w, Int64(w)) }
        }
        ops.matmul(b.gated, rows: n, [(pb.proj, b.out)], ws: ws)
        ops.rmsNorm(b.out, pb.postNorm, rows: n, n: config.dim, into: b.out)
        ops.profiler.measure(.other) { ops.addInPlace(ws.x, b.out, count: n * config.dim) }
    }

    func logits(norm: WeightVector, output: WeightMatrix, softcap: Float) {
        // only the rows that need logits go through the (large) output projection
        let rows = batch.logitRows
        guard !rows.isEmpty else { return }
        norm.values.withUnsafeBufferPointer { w in
            for (i, r) in rows.enumerated() {
                ck_rms_norm(ws.x + r * config.dim, w.baseAddress, ws.xn + i * config.dim, Int64(config.dim), config.normEps)
            }
        }
        ops.matmul(ws.xn, rows: rows.count, [(output, ws.logits)], ws: ws)
        if softcap > 0 {
            let l = ws.logits
            for i in 0..<rows.count * config.vocabSize { l[i] = softcap * tanhf(l[i] / softcap) }
        }
    }

    func finish() throws -> UnsafeMutablePointer<Float> {
        for (slot, checkpoint) in batch.stateSaves { ws.deltaNet!.save(slot: slot, to: checkpoint) }
        return ws.logits
    }
}
