/// The decoder-only transformer every supported architecture is: pre-norm blocks of
/// grouped-query attention with RoPE and a gated MLP, with each quirk (biases, Q/K norms,
/// post-block norms, softcaps, windows, activation, scales) taken from `ModelConfig` and the
/// layer's optional tensors. Written once in `ForwardOps`, so every backend runs every model.
/// Gemma 4's pieces are parameters too: per-layer head shapes, layers that read an earlier
/// layer's K/V (`ModelConfig.kvSource`), V norms, per-layer embeddings, output scales.
final class DecoderModel: LanguageModel, @unchecked Sendable {
    struct Layer {
        let attnNorm: WeightVector
        /// wk and wv are unused where the layer reads another layer's K/V.
        let wq, wk, wv, wo: WeightMatrix
        let bq, bk, bv, bo: WeightVector?
        let sinks: WeightVector?
        let qNorm, kNorm: WeightVector?
        let postAttnNorm: WeightVector?
        let ffnNorm: WeightVector
        let ffn: FeedForward
        let postFFNNorm: WeightVector?
        /// Gemma 4: the layer's own slice of the per-layer embeddings joins its output.
        let perLayer: PerLayerBlock?
        /// Gemma 4's layer_output_scale: the layer's output (the residual stream) times this.
        let outScale: Float?
    }

    let config: ModelConfig
    let embeddings: WeightMatrix
    let perLayerEmbeddings: PerLayerEmbeddings?
    let layers: [Layer]
    let outputNorm: WeightVector
    let output: WeightMatrix

    init(config c: ModelConfig, weights w: WeightLoader, layerTensors: LayerTensors) throws {
        config = c
        embeddings = try w.matrix("token_embd.weight", rows: c.vocabSize, cols: c.dim)
        perLayerEmbeddings = c.perLayerWidth > 0 ? try PerLayerEmbeddings(w, c) : nil
        layers = try (0..<c.layers).map { i in
            let p = "blk.\(i).", s = c.heads(layer: i), ownKV = c.kvLayer(i) == i
            // a fused Q|K|V (Phi-3) becomes views of its rows
            let q, k, v: WeightMatrix
            if let qkv = try w.optionalMatrix(p + "attn_qkv.weight", rows: s.qDim + 2 * s.kvDim, cols: c.dim) {
                (q, k, v) = (qkv.rows(0, s.qDim), qkv.rows(s.qDim, s.kvDim), qkv.rows(s.qDim + s.kvDim, s.kvDim))
            } else {
                q = try w.matrix(p + "attn_q.weight", rows: s.qDim, cols: c.dim)
                if !ownKV {
                    // never run: the layer attends over its source layer's K/V
                    w.skip([p + "attn_k.weight", p + "attn_v.weight", p + "attn_k_norm.weight"])
                    (k, v) = (q, q)
                } else {
                    k = try w.matrix(p + "attn_k.weight", rows: s.kvDim, cols: c.dim)
                    // Gemma 4's global layers may have no V projection: V is K's product
                    v = c.valueNorm ? try w.optionalMatrix(p + "attn_v.weight", rows: s.kvDim, cols: c.dim) ?? k
                        : try w.matrix(p + "attn_v.weight", rows: s.kvDim, cols: c.dim)
                }
            }
            // required where the architecture has them, else used when present (as llama.cpp
            // does for Llama's optional biases)
            func vector(_ name: String, _ count: Int, _ required: LayerTensors) throws -> WeightVector? {
                layerTensors.contains(required) ? try w.vector(p + name, count: count) : try w.optionalVector(p + name, count: count)
            }
            return Layer(
                attnNorm: try w.vector(p + "attn_norm.weight", count: c.dim),
                wq: q, wk: k, wv: v,
                wo: try w.matrix(p + "attn_output.weight", rows: c.dim, cols: s.qDim),
                bq: try vector("attn_q.bias", s.qDim, .qkvBias),
                bk: try vector("attn_k.bias", s.kvDim, .qkvBias),
                bv: try vector("attn_v.bias", s.kvDim, .qkvBias),
                bo: try vector("attn_output.bias", c.dim, .outputBias),
                sinks: layerTensors.contains(.sinks) ? try w.vector(p + "attn_sinks.weight", count: c.heads) : nil,
                qNorm: try vector("attn_q_norm.weight", s.headDim, .qkNorm),
                kNorm: ownKV ? try vector("attn_k_norm.weight", s.headDim, .qkNorm) : nil,
                // (an FFN norm of that name, as gpt-oss's, is not a post-attention norm too)
                postAttnNorm: c.ffnNormTensor == "post_attention_norm.weight" ? nil : try vector("post_attention_norm.weight", c.dim, .postNorms),
                ffnNorm: try w.vector(p + c.ffnNormTensor, count: c.dim),
                ffn: try FeedForward(w, prefix: p, c, width: c.ffnDim(layer: i)),
                postFFNNorm: try vector("post_ffw_norm.weight", c.dim, .postNorms),
                perLayer: c.perLayerWidth > 0 ? try PerLayerBlock(w, prefix: p, c) : nil,
                outScale: try w.optionalVector(p + "layer_output_scale.weight", count: 1)?.values[0])
        }
        outputNorm = try w.vector("output_norm.weight", count: c.dim)
        output = try w.optionalMatrix("output.weight", rows: c.vocabSize, cols: c.dim) ?? embeddings
    }

    var matrices: [WeightMatrix] {
        var all = [embeddings]
        if let p = perLayerEmbeddings { all += [p.tokens, p.modelProj] }
        for l in layers {
            all += [l.wq, l.wk, l.wv, l.wo] + l.ffn.matrices
            if let b = l.perLayer { all += [b.gate, b.proj] }
        }
        return output.data == embeddings.data ? all : all + [output]
    }

    var vectors: [WeightVector] {
        var all: [WeightVector] = []
        for l in layers {
            let optional: [WeightVector?] = [l.bq, l.bk, l.bv, l.bo, l.sinks, l.qNorm, l.kNorm, l.postAttnNorm, l.postFFNNorm, l.perLayer?.postNorm]
            all += [l.attnNorm, l.ffnNorm] + optional.compactMap { $0 }
        }
        all += expertLayers.flatMap(\.vectors) + layers.flatMap(\.ffn.norms) + [outputNorm]
        if let p = perLayerEmbeddings { all.append(p.projNorm) }
        return all
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
        if let p = perLayerEmbeddings { ops.perLayerInputs(p) }
        ops.rmsNorm(.x, layers[0].attnNorm, into: .xn)
        for (li, l) in layers.enumerated() {
            let s = c.heads(layer: li), kvLayer = c.kvLayer(li)
            if kvLayer == li {
                ops.matmul(.xn, [(l.wq, .q), (l.wk, .k), (l.wv, .v)])
                for (b, a) in [(l.bq, Activation.q), (l.bk, .k), (l.bv, .v)] { if let b { ops.addBias(a, b) } }
                if let n = l.qNorm { ops.headNorm(.q, n, heads: s.heads, headDim: s.headDim) }
                if let n = l.kNorm { ops.headNorm(.k, n, heads: s.kvHeads, headDim: s.headDim) }
                if c.valueNorm { ops.headNorm(.v, nil, heads: s.kvHeads, headDim: s.headDim) }
                ops.ropeAndStoreKV(layer: li, s, rope: c.layerRope[li])
            } else {
                // the query only: its keys and values are the source layer's
                ops.matmul(.xn, [(l.wq, .q)])
                if let b = l.bq { ops.addBias(.q, b) }
                if let n = l.qNorm { ops.headNorm(.q, n, heads: s.heads, headDim: s.headDim) }
                ops.rope(.q, heads: s.heads, headDim: s.headDim, rope: c.layerRope[li])
            }
            var attention = c.attention(layer: li)
            attention.sinks = l.sinks
            ops.attention(layer: kvLayer, attention)
            ops.matmul(.attn, [(l.wo, .xn)])
            if let b = l.bo { ops.addBias(.xn, b) }
            if let n = l.postAttnNorm { ops.rmsNorm(.xn, n, into: .xn) }
            ops.addRMSNorm(.x, .xn, l.ffnNorm, into: .xn)
            l.ffn.run(ops, c.activation)
            if let n = l.postFFNNorm { ops.rmsNorm(.xn, n, into: .xn) }
            if l.perLayer != nil || l.outScale != nil {
                ops.add(.x, .xn)
                if let b = l.perLayer { ops.perLayerEmbedding(layer: li, b) }
                if let s = l.outScale { ops.scale(.x, by: s) }
                if li + 1 < layers.count { ops.rmsNorm(.x, layers[li + 1].attnNorm, into: .xn) }
            } else if li + 1 < layers.count {
                // the residual add, fused with the next layer's input norm
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
    /// The layer's heads.
    var shape: HeadShape
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
        AttentionParams(shape: heads(layer: layer), scale: attentionScale, softcap: attentionSoftcap, window: layerWindow[layer])
    }
}
