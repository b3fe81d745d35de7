/// Per-layer embeddings (Gemma 4's E2B/E4B, llama.cpp's gemma4 graph): a second, narrow
/// embedding of `width` values a layer, mixed with a projection of the token's main embedding
/// once before the first layer; each layer then adds a projection of its own slice, gated by
/// its output.
struct PerLayerEmbeddings {
    let width: Int
    /// per_layer_token_embd: a row of layers × width a token.
    let tokens: WeightMatrix
    /// per_layer_model_proj: layers × width rows over the (scaled) main embedding.
    let modelProj: WeightMatrix
    /// per_layer_proj_norm: the RMSNorm gain of each layer's projected slice.
    let projNorm: WeightVector

    init(_ w: WeightLoader, _ c: ModelConfig) throws {
        width = c.perLayerWidth
        tokens = try w.matrix("per_layer_token_embd.weight", rows: c.vocabSize, cols: c.layers * width)
        modelProj = try w.matrix("per_layer_model_proj.weight", rows: c.layers * width, cols: c.dim)
        projNorm = try w.vector("per_layer_proj_norm.weight", count: width)
    }
}

/// One layer's use of its slice: x += rmsnorm(proj · (gelu(gate · x) ⊙ slice)) · postNorm.
struct PerLayerBlock {
    /// inp_gate: width rows over the model width.
    let gate: WeightMatrix
    /// proj: model-width rows over width.
    let proj: WeightMatrix
    let postNorm: WeightVector

    init(_ w: WeightLoader, prefix p: String, _ c: ModelConfig) throws {
        gate = try w.matrix(p + "inp_gate.weight", rows: c.perLayerWidth, cols: c.dim)
        proj = try w.matrix(p + "proj.weight", rows: c.dim, cols: c.perLayerWidth)
        postNorm = try w.vector(p + "post_norm.weight", count: c.dim)
    }
}
