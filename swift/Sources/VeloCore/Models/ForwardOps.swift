import CKernels

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
    /// x = the embedding rows of the batch's tokens.
    func embed(_ table: WeightMatrix)
    /// dst = rmsnorm(src) * w, every row.
    func rmsNorm(_ src: Activation, _ w: WeightVector, into dst: Activation)
    /// out = W · src for several weights sharing one input.
    func matmul(_ src: Activation, _ pairs: [(WeightMatrix, Activation)])
    /// Rotary embedding in place on `heads` heads per row, at each token's position.
    func rope(_ a: Activation, heads: Int)
    /// Writes k and v into the pages of layer `layer`.
    func storeKV(layer: Int)
    /// Rotary embedding of q and k at each token's position, then k and v into the pages.
    func ropeAndStoreKV(layer: Int, heads: Int, kvHeads: Int)
    /// attn = causal attention of q over each token's own sequence, layer `layer`.
    func attention(layer: Int)
    /// dst += src (model-width rows).
    func add(_ dst: Activation, _ src: Activation)
    /// The residual add and the norm after it: dst += src, then out = rmsnorm(dst) * w.
    func addRMSNorm(_ dst: Activation, _ src: Activation, _ w: WeightVector, into out: Activation)
    /// gate = silu(gate) * up.
    func swiglu()
    /// gate = silu(gate_w · src) * (up_w · src): a gated MLP's input (the pair should be in the
    /// model's `gatedPairs`, so a GPU has it interleaved for one dispatch).
    func gatedUp(_ src: Activation, gate: WeightMatrix, up: WeightMatrix)
    /// Logits of the batch's `logitRows`: output · rmsnorm(x) * norm.
    func logits(norm: WeightVector, output: WeightMatrix)
    /// Runs what was recorded; the logits, `logitRows.count` rows of `vocabSize`.
    func finish() throws -> UnsafeMutablePointer<Float>
}

extension ForwardOps {
    /// What a backend without fused kernels runs instead.
    func ropeAndStoreKV(layer: Int, heads: Int, kvHeads: Int) {
        rope(.q, heads: heads)
        rope(.k, heads: kvHeads)
        storeKV(layer: layer)
    }

    func addRMSNorm(_ dst: Activation, _ src: Activation, _ w: WeightVector, into out: Activation) {
        add(dst, src)
        rmsNorm(dst, w, into: out)
    }
}

extension ForwardOps {
    /// The two products, then swiglu, where a backend has no fused kernel.
    func gatedUp(_ src: Activation, gate: WeightMatrix, up: WeightMatrix) {
        matmul(src, [(gate, .gate), (up, .up)])
        swiglu()
    }
}

extension LanguageModel {
    /// One forward pass of `batch` on `ops`: the logits of its `logitRows`.
    func run(_ batch: ForwardBatch, on ops: ForwardOps) throws -> UnsafeMutablePointer<Float> {
        try ops.begin(batch)
        forward(ops)
        return try ops.finish()
    }
}

/// `ForwardOps` on the CPU thread pool (`TransformerOps` holds the kernels' callers).
final class CPUForward: ForwardOps {
    let config: ModelConfig
    let ops: TransformerOps
    let ws: Workspace
    let kv: KVView
    private var batch = ForwardBatch()
    private var ropeTable: (cos: [Float], sin: [Float]) = ([], [])

    init(config: ModelConfig, ops: TransformerOps, ws: Workspace, kv: KVView) {
        self.config = config
        self.ops = ops
        self.ws = ws
        self.kv = kv
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
        ropeTable = ops.profiler.measure(.rope) { ops.ropeTable(positions: batch.positions) }
    }

    func embed(_ table: WeightMatrix) {
        ops.profiler.measure(.embed) {
            for (i, t) in batch.tokens.enumerated() {
                ck_dequantize_row(Int32(table.type.rawValue), table.data + Int(t) * table.rowBytes,
                                  ws.x + i * config.dim, Int64(config.dim))
            }
        }
    }

    func rmsNorm(_ src: Activation, _ w: WeightVector, into dst: Activation) {
        ops.rmsNorm(buf(src), w, rows: batch.count, n: config.dim, into: buf(dst))
    }

    func matmul(_ src: Activation, _ pairs: [(WeightMatrix, Activation)]) {
        ops.matmul(buf(src), rows: batch.count, pairs.map { ($0.0, buf($0.1)) }, ws: ws)
    }

    func rope(_ a: Activation, heads: Int) {
        ops.rope(buf(a), rows: batch.count, heads: heads, table: ropeTable)
    }

    func storeKV(layer: Int) { ops.storeKV(batch, layer: layer, kv: kv, ws: ws) }

    func attention(layer: Int) { ops.attention(batch, layer: layer, kv: kv, ws: ws) }

    func add(_ dst: Activation, _ src: Activation) {
        ops.profiler.measure(.other) { ops.addInPlace(buf(dst), buf(src), count: batch.count * config.dim) }
    }

    func swiglu() {
        let f = config.ffnDim
        ops.profiler.measure(.mlpActivation) {
            for r in 0..<batch.count {
                ck_swiglu(ws.gate + r * f, ws.up + r * f, ws.gate + r * f, Int64(f))
            }
        }
    }

    func logits(norm: WeightVector, output: WeightMatrix) {
        // only the rows that need logits go through the (large) output projection
        let rows = batch.logitRows
        guard !rows.isEmpty else { return }
        norm.values.withUnsafeBufferPointer { w in
            for (i, r) in rows.enumerated() {
                ck_rms_norm(ws.x + r * config.dim, w.baseAddress, ws.xn + i * config.dim, Int64(config.dim), config.normEps)
            }
        }
        ops.matmul(ws.xn, rows: rows.count, [(output, ws.logits)], ws: ws)
    }

    func finish() throws -> UnsafeMutablePointer<Float> { ws.logits }
}
