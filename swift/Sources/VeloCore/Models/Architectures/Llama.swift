/// Llama 1/2/3 (3.1/3.2 RoPE scaling through `rope_freqs.weight`, read by `Rope.load`),
/// Mistral, TinyLlama, TinyStories: the defaults of `ModelConfig`. RoPE pairs are interleaved
/// because llama.cpp's converter permutes Llama's Q/K rows to suit them. A file with
/// `llama.expert_count` is Mixtral: each FFN is a mixture of experts of `feed_forward_length`,
/// the chosen experts' weights renormalised (softmax over the chosen ones).
enum Llama: Architecture {
    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        if (m.int("expert_count") ?? 0) > 0 { try c.readExperts(m) }
    }
}
