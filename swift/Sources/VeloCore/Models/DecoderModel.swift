/// The decoder-only transformer every supported architecture is: pre-norm blocks of
/// grouped-query attention with RoPE and a gated MLP, with each quirk (biases, Q/K norms,
/// post-block norms, softcaps, windows, activation, scales) taken from `ModelConfig` and the
/// layer's optional tensors. Written once in `ForwardOps`, so every backend runs every model.
final class DecoderModel: LanguageModel, @unchecked Sendable {
    struct Layer {
        let attnNorm: WeightVector
        let wq, wk, wv, wo: WeightMatrix
        let bq, bk, bv, bo: WeightVector?
        let sinks: WeightVector?
        let qNorm, kNorm: WeightVector?
        let postAttnNorm: WeightVector?
        let ffnNorm: WeightVector
        let ffn: FeedForward
        let postFFNNorm: WeightVector?
    }

    let config: ModelConfig
    let embeddings: WeightMatrix
    let layers: [Layer]
    let outputNorm: WeightVector
    let output: WeightMatrix

    init(config c: ModelConfig, weights w: WeightLoader, layerTensors: LayerTensors) throws {
        config = c
        embeddings = try w.matrix("token_embd.weight", rows: c.vocabSize, cols: c.dim)
        layers = try (0..<c.layers).map { i in
            let p = "blk.\(i)."
            // a fused Q|K|V (Phi-3) becomes views of its rows
            let q, k, v: WeightMatrix
            if let qkv = try w.optionalMatrix(p + "attn_qkv.weight", rows: c.qDim + 2 * c.kvDim, cols: c.dim) {
                (q, k, v) = (qkv.rows(0, c.qDim), qkv.rows(c.qDim, c.kvDim), qkv.rows(c.qDim + c.kvDim, c.kvDim))
            } else {
                (q, k, v) = (try w.matrix(p + "attn_q.weight", rows: c.qDim, cols: c.dim),
                             try w.matrix(p + "attn_k.weight", rows: c.kvDim, cols: c.dim),
                             try w.matrix(p + "attn_v.weight", rows: c.kvDim, cols: c.dim))
            }
            // required where the architecture has them, else used when present (as llama.cpp
            // does for Llama's optional biases)
            func vector(_ name: String, _ count: Int, _ required: LayerTensors) throws -> WeightVector? {
                layerTensors.contains(required) ? try w.vector(p + name, count: count) : try w.optionalVector(p + name, count: count)
            }
            return Layer(
                attnNorm: try w.vector(p + "attn_norm.weight", count: c.dim),
                wq: q, wk: k, wv: v,
                wo: try w.matrix(p + "attn_output.weight", rows: c.dim, cols: c.qDim),
                bq: try vector("attn_q.bias", c.qDim, .qkvBias),
                bk: try vector("attn_k.bias", c.kvDim, .qkvBias),
                bv: try vector("attn_v.bias", c.kvDim, .qkvBias),
                bo: try vector("attn_output.bias", c.dim, .outputBias),
                sinks: layerTensors.contains(.sinks) ? try w.vector(p + "attn_sinks.weight", count: c.heads) : nil,
                qNorm: try vector("attn_q_norm.weight", c.headDim, .qkNorm),
                kNorm: try vector("attn_k_norm.weight", c.headDim, .qkNorm),
                // (an FFN norm of that name, as gpt-oss's, is not a post-attention norm too)
                postAttnNorm: c.ffnNormTensor == "post_attention_norm.weight" ? nil : try vector("post_attention_norm.weight", c.dim, .postNorms),
                ffnNorm: try w.vector(p + c.ffnNormTensor, count: c.dim),
                ffn: try FeedForward(w, prefix: p, c),
                postFFNNorm: try vector("post_ffw_norm.weight", c.dim, .postNorms))
        }
        outputNorm = try w.vector("output_norm.weight", count: c.dim)
        output = try w.optionalMatrix("output.weight", rows: c.vocabSize, cols: c.dim) ?? embeddings
    }

    var matrices: [WeightMatrix] {
        [embeddings] + layers.flatMap { [$0.wq, $0.wk, $0.wv, $0.wo] + $0.ffn.matrices } + (output.data == embeddings.data ? [] : [output])
    }

    var vectors: [WeightVector] {
        layers.flatMap { l in [l.attnNorm, l.ffnNorm] + [l.bq, l.bk, l.bv, l.bo, l.sinks, l.qNorm, l.kNorm, l.postAttnNorm, l.postFFNNorm].compactMap { $0 } }
            + expertLayers.flatMap(\.vectors) + [outputNorm]
    }

    var expertLayers: [ExpertLayer] {
        layers.compactMap(\.ffn.experts)
    }

    var gatedPairs: [(WeightMatrix, WeightMatrix)] {
        layers.compactMap(\.ffn.gatedPair)
    }

    var attentionInputs: [(WeightMatrix, WeightMatrix, WeightMatrix)] { layers.map { ($0.wq, $0.wk, $0.wv) } }

    var attentionBiases: [(WeightVector, WeightVector, WeightVector)] {
        layers.compactMap { l in l.bq.flatMap { q in l.bk.flatMap { k in l.bv.map { (q, k, $0) } } } }
    }

    func forward(_ ops: ForwardOps) {
        let c = config
        ops.embed(embeddings, scale: c.embeddingScale)
        ops.rmsNorm(.x, layers[0].attnNorm, into: .xn)
        for (li, l) in layers.enumerated() {
            ops.matmul(.xn, [(l.wq, .q), (l.wk, .k), (l.wv, .v)])
            for (b, a) in [(l.bq, Activation.q), (l.bk, .k), (l.bv, .v)] { if let b { ops.addBias(a, b) } }
            if let n = l.qNorm { ops.headNorm(.q, n, heads: c.heads) }
            if let n = l.kNorm { ops.headNorm(.k, n, heads: c.kvHeads) }
            ops.ropeAndStoreKV(layer: li, heads: c.heads, kvHeads: c.kvHeads, rope: c.layerRope[li])
            var attention = c.attention(layer: li)
            attention.sinks = l.sinks
            ops.attention(layer: li, attention)
            ops.matmul(.attn, [(l.wo, .xn)])
            if let b = l.bo { ops.addBias(.xn, b) }
            if let n = l.postAttnNorm { ops.rmsNorm(.xn, n, into: .xn) }
            ops.addRMSNorm(.x, .xn, l.ffnNorm, into: .xn)
            l.ffn.run(ops, c.activation)
            if let n = l.postFFNNorm { ops.rmsNorm(.xn, n, into: .xn) }
            // the residual add, fused with the next layer's input norm
            if li + 1 < layers.count {
                ops.addRMSNorm(.x, .xn, layers[li + 1].attnNorm, into: .xn)
            } else {
                ops.add(.x, .xn)
            }
        }
        ops.hidden(norm: outputNorm)
        ops.logits(norm: outputNorm, output: output, softcap: c.finalSoftcap)
    }
}

/// What one layer's attention does beyond softmax(q·k)v.
struct AttentionParams {
    /// Scores are q·k times this.
    var scale: Float
    /// Scores become cap·tanh(s/cap) (0: off).
    var softcap: Float = 0
    /// Keys within this many positions of the query, itself included (0: all).
    var window: Int = 0
    /// One logit per query head that joins its softmax with no value (gpt-oss; nil: none).
    var sinks: WeightVector?

    /// The first key position a query at `pos` sees.
    func firstKey(_ pos: Int) -> Int { window > 0 ? max(0, pos - window + 1) : 0 }
}

extension ModelConfig {
    func attention(layer: Int) -> AttentionParams {
        AttentionParams(scale: attentionScale, softcap: attentionSoftcap, window: layerWindow[layer])
    }
}
