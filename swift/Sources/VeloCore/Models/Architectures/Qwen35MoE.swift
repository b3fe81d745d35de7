/// Qwen3.5 / 3.6 with experts (Qwen3.6-35B-A3B, Qwen3.5-122B-A10B), as llama.cpp's qwen35moe
/// graph: Qwen3.5's DeltaNet and gated attention layers, each followed by a mixture of
/// `expert_feed_forward_length` experts (softmax router, the chosen weights renormalised) and a
/// shared expert of `expert_shared_feed_forward_length` scaled by sigmoid(ffn_gate_inp_shexp · x).
enum Qwen35MoE: Architecture {
    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        try Qwen35.configure(&c, m, w, contextSize: contextSize)
        try c.readExperts(m, ownWidth: true)
        // llama.cpp: the shared expert where its tensors are, ffn width when the key is absent
        if m.gguf.tensor("blk.0.ffn_up_shexp.weight") != nil {
            c.experts!.sharedFFNDim = m.int("expert_shared_feed_forward_length") ?? c.ffnDim
        }
    }

    static func model(_ c: ModelConfig, _ w: WeightLoader) throws -> LanguageModel { try HybridModel(config: c, weights: w) }
}
