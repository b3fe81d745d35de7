/// Gemma 3 (text): Gemma 2's block with Q/K head norms instead of softcapped scores; five
/// sliding-window layers to one global layer; local layers turn RoPE at `rope.freq_base_swa`
/// (10000 when absent) unscaled, global layers at the file's base and scaling (as llama.cpp's
/// gemma3 graph does).
enum Gemma3: Architecture {
    static let layerTensors: LayerTensors = [.qkNorm, .postNorms]

    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        c.ropeStyle = .neox
        c.activation = .geluTanh
        c.embeddingScale = Float(c.dim).squareRoot()
        c.finalSoftcap = Float(m.double("final_logit_softcapping") ?? 0)
        c.attentionScale = gemmaAttentionScale(c, largest: 62)
        if let window = m.int("attention.sliding_window"), window > 0 {
            let isLocal = { (layer: Int) in layer % 6 < 5 }
            c.slidingWindow(window, where: isLocal)
            c.ropes.append(Rope(base: m.double("rope.freq_base_swa") ?? 10000, dims: c.ropeDim))
            c.layerRope = (0..<c.layers).map { isLocal($0) ? 1 : 0 }
        }
    }
}
