/// Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): Qwen2's attention (Q/K/V biases, NeoX RoPE)
/// with a mixture of experts of `expert_feed_forward_length` whose weights are the softmax
/// probabilities as they are (not renormalised), plus a shared expert of
/// `expert_shared_feed_forward_length` on every token, scaled by sigmoid(ffn_gate_inp_shexp · x).
enum Qwen2MoE: Architecture {
    static let layerTensors: LayerTensors = .qkvBias

    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        c.ropeStyle = .neox
        try c.readExperts(m, ownWidth: true)
        c.experts!.normalizeWeights = false
        c.experts!.sharedFFNDim = m.int("expert_shared_feed_forward_length") ?? c.ffnDim
    }
}
