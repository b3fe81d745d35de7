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

    var matrices: [WeightMatrix] {
        [embeddings] + layers.flatMap { [$0.wq, $0.wk, $0.wv, $0.wo, $0.gate, $0.up, $0.down] } + (output.data == embeddings.data ? [] : [output])
    }

    var vectors: [WeightVector] { layers.flatMap { [$0.attnNorm, $0.ffnNorm] } + [outputNorm] }

    var gatedPairs: [(WeightMatrix, WeightMatrix)] { layers.map { ($0.gate, $0.up) } }

    var attentionInputs: [(WeightMatrix, WeightMatrix, WeightMatrix)] { layers.map { ($0.wq, $0.wk, $0.wv) } }

    func forward(_ ops: ForwardOps) {
        let c = config
        ops.embed(embeddings)
        ops.rmsNorm(.x, layers[0].attnNorm, into: .xn)
        for (li, l) in layers.enumerated() {
            ops.matmul(.xn, [(l.wq, .q), (l.wk, .k), (l.wv, .v)])
            ops.ropeAndStoreKV(layer: li, heads: c.heads, kvHeads: c.kvHeads)
            ops.attention(layer: li)
            ops.matmul(.attn, [(l.wo, .xn)])
            ops.addRMSNorm(.x, .xn, l.ffnNorm, into: .xn)
            ops.gatedUp(.xn, gate: l.gate, up: l.up)
            ops.matmul(.gate, [(l.down, .xn)])
            // the residual add, fused with the next layer's input norm
            if li + 1 < layers.count {
                ops.addRMSNorm(.x, .xn, layers[li + 1].attnNorm, into: .xn)
            } else {
                ops.add(.x, .xn)
            }
        }
        ops.logits(norm: outputNorm, output: output)
    }
}
