import CKernels

/// The Llama architecture (Llama 2/3, Mistral-style, TinyLlama, TinyStories): pre-norm
/// blocks of grouped-query attention with RoPE and a SwiGLU MLP; tied or separate output.
final class LlamaModel: LanguageModel, @unchecked Sendable {
    struct Layer {
        let attnNorm: WeightVector
        let wq, wk, wv, wo: WeightMatrix
        let ffnNorm: WeightVector
        let gate, up, down: WeightMatrix
    }

    let config: ModelConfig
    let embeddings: WeightMatrix
    let layers: [Layer]
    let outputNorm: WeightVector
    let output: WeightMatrix

    init(file: ModelFile) throws {
        let gguf = file.gguf
        var c = try ModelConfig(gguf: gguf)
        c.ropeStyle = .normal // the GGUF converter permutes Q/K for llama into interleaved pairs
        config = c
        let w = WeightLoader(gguf: gguf)
        embeddings = try w.matrix("token_embd.weight", rows: c.vocabSize, cols: c.dim)
        layers = try (0..<c.layers).map { i in
            let p = "blk.\(i)."
            return Layer(
                attnNorm: try w.vector(p + "attn_norm.weight", count: c.dim),
                wq: try w.matrix(p + "attn_q.weight", rows: c.qDim, cols: c.dim),
                wk: try w.matrix(p + "attn_k.weight", rows: c.kvDim, cols: c.dim),
                wv: try w.matrix(p + "attn_v.weight", rows: c.kvDim, cols: c.dim),
                wo: try w.matrix(p + "attn_output.weight", rows: c.dim, cols: c.qDim),
                ffnNorm: try w.vector(p + "ffn_norm.weight", count: c.dim),
                gate: try w.matrix(p + "ffn_gate.weight", rows: c.ffnDim, cols: c.dim),
                up: try w.matrix(p + "ffn_up.weight", rows: c.ffnDim, cols: c.dim),
                down: try w.matrix(p + "ffn_down.weight", rows: c.dim, cols: c.ffnDim))
        }
        outputNorm = try w.vector("output_norm.weight", count: c.dim)
        output = try w.optionalMatrix("output.weight", rows: c.vocabSize, cols: c.dim) ?? embeddings
    }

    func forward(_ batch: ForwardBatch, kv: KVView, ops: TransformerOps, ws: Workspace) {
        let c = config
        let n = batch.count
        ops.profiler.measure(.embed) { embed(batch.tokens, into: ws.x) }
        let rope = ops.profiler.measure(.rope) { ops.ropeTable(positions: batch.positions) }
        for (li, l) in layers.enumerated() {
            ops.rmsNorm(ws.x, l.attnNorm, rows: n, n: c.dim, into: ws.xn)
            ops.matmul(ws.xn, rows: n, [(l.wq, ws.q), (l.wk, ws.k), (l.wv, ws.v)], ws: ws)
            ops.rope(ws.q, rows: n, heads: c.heads, table: rope)
            ops.rope(ws.k, rows: n, heads: c.kvHeads, table: rope)
            ops.storeKV(batch, layer: li, kv: kv, ws: ws)
            ops.attention(batch, layer: li, kv: kv, ws: ws)
            ops.matmul(ws.attn, rows: n, [(l.wo, ws.xn)], ws: ws)
            ops.profiler.measure(.other) { ops.addInPlace(ws.x, ws.xn, count: n * c.dim) }
            ops.rmsNorm(ws.x, l.ffnNorm, rows: n, n: c.dim, into: ws.xn)
            ops.gatedMLP(rows: n, gate: l.gate, up: l.up, down: l.down, ws: ws)
        }
        // Only the rows that need logits go through the (large) output projection.
        for (i, r) in batch.logitRows.enumerated() {
            ck_rms_norm(ws.x + r * c.dim, outputNorm.values, ws.xn + i * c.dim, Int64(c.dim), c.normEps)
        }
        if !batch.logitRows.isEmpty {
            ops.matmul(ws.xn, rows: batch.logitRows.count, [(output, ws.logits)], ws: ws)
        }
    }

    func embed(_ tokens: [Int32], into x: UnsafeMutablePointer<Float>) {
        for (i, t) in tokens.enumerated() {
            ck_dequantize_row(Int32(embeddings.type.rawValue), embeddings.data + Int(t) * embeddings.rowBytes,
                              x + i * config.dim, Int64(config.dim))
        }
    }
}
