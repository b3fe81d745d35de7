/// gpt-oss (gpt-oss-20b, -120b), as llama.cpp's openai-moe graph: biased Q/K/V and output
/// projections, attention sinks, sliding windows on every other layer (from the first, or
/// `sliding_window_pattern`), NeoX RoPE with YaRN, and a mixture of experts whose router has a
/// bias and takes the softmax of the chosen logits only, each expert biased with gpt-oss's
/// clamped SwiGLU (α 1.702, limit 7, fixed in llama.cpp's graph). The FFN's input norm is
/// `post_attention_norm`; the experts ship in MXFP4.
enum GptOss: Architecture {
    static let layerTensors: LayerTensors = [.qkvBias, .outputBias, .sinks]

    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        c.ropeStyle = .neox
        c.ffnNormTensor = "post_attention_norm.weight"
        try c.readExperts(m, ownWidth: true)
        c.experts!.gating = .softmaxChosen
        c.experts!.normalizeWeights = false
        c.experts!.glu = .swigluClamped(alpha: 1.702, limit: 7)
        c.experts!.biases = true
        let window = try m.required("attention.sliding_window")
        let period = m.int("attention.sliding_window_pattern") ?? 2
        c.slidingWindow(window) { period == 0 || $0 % period < period - 1 }
        // the windowed layers turn at rope.freq_base_swa where the file has one, scaled alike
        if let base = m.double("rope.freq_base_swa"), base != m.double("rope.freq_base") {
            c.ropes.append(try Rope.load(m, base: base, dims: c.ropeDim, weights: w, contextSize: contextSize))
            c.layerRope = c.layerWindow.map { $0 > 0 ? 1 : 0 }
        }
    }
}
