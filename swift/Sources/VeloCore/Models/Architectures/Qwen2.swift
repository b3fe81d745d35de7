/// Qwen2 and Qwen2.5: Llama with biases on Q, K and V and half-split (NeoX) RoPE pairs.
enum Qwen2: Architecture {
    static let layerTensors: LayerTensors = .qkvBias

    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        c.ropeStyle = .neox
    }
}
