/// Gemma 2: embeddings scaled by √dim, norms after each block as well as before (the
/// converter stores Gemma's (1 + w) norm gains already added up), a tanh-GELU gated MLP,
/// softcapped attention scores and logits, and a sliding window on every other layer
/// (0, 2, 4, …), as llama.cpp's gemma2 graph does.
enum Gemma2: Architecture {
    static let layerTensors: LayerTensors = .postNorms

    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        c.ropeStyle = .neox
        c.activation = .geluTanh
        c.embeddingScale = Float(c.dim).squareRoot()
        c.attentionSoftcap = Float(m.double("attn_logit_softcapping") ?? 50)
        c.finalSoftcap = Float(m.double("final_logit_softcapping") ?? 30)
        c.attentionScale = gemmaAttentionScale(c, largest: 46)
        if let window = m.int("attention.sliding_window"), window > 0 {
            c.slidingWindow(window) { $0 % 2 == 0 }
        }
    }
}

/// Gemma's query scale (gemma_pytorch's query_pre_attn_scalar, which GGUF does not carry):
/// 1/√(dim/heads) for the 27B model (`largest` layers), 1/√headDim otherwise, as llama.cpp
/// decides it.
func gemmaAttentionScale(_ c: ModelConfig, largest: Int) -> Float {
    1 / Float(c.layers == largest ? c.dim / c.heads : c.headDim).squareRoot()
}
