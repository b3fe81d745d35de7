/// Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3's attention (Q/K head norms, NeoX RoPE) with a
/// mixture of experts of `expert_feed_forward_length` in every layer, the chosen experts'
/// weights always renormalised, as llama.cpp's qwen3moe graph does (it does not read
/// `expert_weights_norm`).
enum Qwen3MoE: Architecture {
    static let layerTensors: LayerTensors = .qkNorm

    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        c.ropeStyle = .neox
        try c.readExperts(m, ownWidth: true)
    }
}
