/// Qwen3 (dense): Llama with an RMSNorm on each head of Q and K before RoPE, NeoX RoPE pairs,
/// and heads of `key_length` values (not dim/heads).
enum Qwen3: Architecture {
    static let layerTensors: LayerTensors = .qkNorm

    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        c.ropeStyle = .neox
    }
}
