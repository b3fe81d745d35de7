/// A decoder whose layers mix Gated DeltaNet blocks (linear attention with a recurrent state per
/// sequence) and gated full-attention blocks, each followed by a gated MLP or a mixture of
/// experts with a shared expert: Qwen3.5's graphs (llama.cpp's qwen35.cpp, qwen35moe.cpp). Attention layers keep K/V in the pages, numbered among
/// themselves (`ModelConfig.kvLayers`); DeltaNet layers keep their state in the sequence's slot.
final class HybridModel: LanguageModel, @unchecked Sendable {
    /// Qwen3.5's attention: one projection gives each head's query and output gate; Q/K norms,
    /// partial RoPE; the output times sigmoid(gate) before attn_output.
    struct GatedAttention {
        let wq, wk, wv, wo: WeightMatrix
        let qNorm, kNorm: WeightVector
        /// This layer's K/V layer in the pages.
        let kvLayer: Int
    }

    enum Mixer {
        case attention(GatedAttention)
        case deltaNet(DeltaNetLayer)
    }

    struct Layer {
        let attnNorm: WeightVector
        let mixer: Mixer
        /// post_attention_norm: the FFN's input norm.
        let ffnNorm: WeightVector
        let ffn: FeedForward
    }

    let config: ModelConfig
    let embeddings: WeightMatrix
    let layers: [Layer]
    let outputNorm: WeightVector
    let output: WeightMatrix

    init(config c: ModelConfig, weights w: WeightLoader) throws {
        config = c
        let d = c.deltaNet!
        embeddings = try w.matrix("token_embd.weight", rows: c.vocabSize, cols: c.dim)
        var kvLayer = 0, dnLayer = 0
        layers = try (0..<c.layers).map { i in
            let p = "blk.\(i)."
            let mixer: Mixer
            if d.layers[i] {
                mixer = .deltaNet(try DeltaNetLayer(w, prefix: p, c, d, index: dnLayer))
                dnLayer += 1
            } else {
                mixer = .attention(GatedAttention(
                    wq: try w.matrix(p + "attn_q.weight", rows: 2 * c.qDim, cols: c.dim),
                    wk: try w.matrix(p + "attn_k.weight", rows: c.kvDim, cols: c.dim),
                    wv: try w.matrix(p + "attn_v.weight", rows: c.kvDim, cols: c.dim),
                    wo: try w.matrix(p + "attn_output.weight", rows: c.dim, cols: c.qDim),
                    qNorm: try w.vector(p + "attn_q_norm.weight", count: c.headDim),
                    kNorm: try w.vector(p + "attn_k_norm.weight", count: c.headDim),
                    kvLayer: kvLayer))
                kvLayer += 1
            }
            return Layer(attnNorm: try w.vector(p + "attn_norm.weight", count: c.dim), mixer: mixer,
                         ffnNorm: try w.vector(p + "post_attention_norm.weight", count: c.dim),
                         ffn: try FeedForward(w, prefix: p, c))
        }
        outputNorm = try w.vector("output_norm.weight", count: c.dim)
        output = try w.optionalMatrix("output.weight", rows: c.vocabSize, cols: c.dim) ?? embeddings
    }

    var matrices: [WeightMatrix] {
        [embeddings] + layers.flatMap { l -> [WeightMatrix] in
            let mix: [WeightMatrix]
            switch l.mixer {
            case let .attention(a): mix = [a.wq, a.wk, a.wv, a.wo]
            case let .deltaNet(d): mix = d.matrices
            }
            return mix + l.ffn.matrices
        } + (output.data == embeddings.data ? [] : [output])
    }

    var vectors: [WeightVector] {
        layers.flatMap { l -> [WeightVector] in
            let mix: [WeightVector]
            switch l.mixer {
            case let .attention(a): mix = [a.qNorm, a.kNorm]
            case let .deltaNet(d): mix = d.vectors
            }
            return [l.attnNorm, l.ffnNorm] + mix
        } + expertLayers.flatMap(\.vectors) + [outputNorm]
    }

    var expertLayers: [ExpertLayer] { layers.compactMap(\.ffn.experts) }

    var gatedPairs: [(WeightMatrix, WeightMatrix)] { layers.compactMap(\.ffn.gatedPair) }

    func forward(_ ops: ForwardOps) {
        let c = config
        ops.embed(embeddings, scale: 1)
        ops.rmsNorm(.x, layers[0].attnNorm, into: .xn)
        for (li, l) in layers.enumerated() {
            switch l.mixer {
            case let .deltaNet(d):
                ops.deltaNet(.xn, d, into: .xn)
            case let .attention(a):
                ops.gatedQuery(.xn, a.wq)
                ops.matmul(.xn, [(a.wk, .k), (a.wv, .v)])
                ops.headNorm(.q, a.qNorm, heads: c.heads, headDim: c.headDim)
                ops.headNorm(.k, a.kNorm, heads: c.kvHeads, headDim: c.headDim)
                ops.ropeAndStoreKV(layer: a.kvLayer, c.uniformHeads, rope: 0)
                ops.attention(layer: a.kvLayer, c.attention(layer: li))
                ops.gateAttention()
                ops.matmul(.attn, [(a.wo, .xn)])
            }
            // the residual add, fused with the FFN's input norm
            ops.addRMSNorm(.x, .xn, l.ffnNorm, into: .xn)
            l.ffn.run(ops, .silu)
            if li + 1 < layers.count {
                ops.addRMSNorm(.x, .xn, layers[li + 1].attnNorm, into: .xn)
            } else {
                ops.add(.x, .xn)
            }
        }
        ops.hidden(norm: outputNorm)
        ops.logits(norm: outputNorm, output: output, softcap: 0)
    }
}
