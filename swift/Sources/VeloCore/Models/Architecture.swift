/// An architecture is configuration: how its GGUF metadata maps onto `ModelConfig`'s quirks and
/// which optional tensors its layers carry. The forward pass is `DecoderModel`'s, shared by all but the hybrids (`HybridModel`) and MLA (`MLAModel`).
/// Each architecture is one file in `Architectures/` plus one line in `architectures` below.
protocol Architecture {
    /// Tensors every layer of this architecture must have beyond the Llama set.
    static var layerTensors: LayerTensors { get }
    /// Changes the Llama defaults `config` starts with where this architecture differs.
    static func configure(_ config: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws
    /// The model its layers make (`DecoderModel` unless its blocks are of other kinds).
    static func model(_ config: ModelConfig, _ w: WeightLoader) throws -> LanguageModel
}

extension Architecture {
    static var layerTensors: LayerTensors { [] }
    static func model(_ config: ModelConfig, _ w: WeightLoader) throws -> LanguageModel {
        try DecoderModel(config: config, weights: w, layerTensors: layerTensors)
    }
}

/// The registry: `general.architecture` → its file. The supported list is its keys.
let architectures: [String: Architecture.Type] = [
    "llama": Llama.self,
    "qwen2": Qwen2.self,
    "qwen3": Qwen3.self,
    "qwen2moe": Qwen2MoE.self,
    "qwen3moe": Qwen3MoE.self,
    "gemma2": Gemma2.self,
    "gemma3": Gemma3.self,
    "gemma4": Gemma4.self,
    "phi3": Phi3.self,
    "gpt-oss": GptOss.self,
    "qwen35": Qwen35.self,
    "qwen35moe": Qwen35MoE.self,
    "qwen3next": Qwen3Next.self,
    "deepseek2": DeepSeek2.self,
]

/// Optional per-layer tensors an architecture requires (names as llama.cpp's converter writes).
struct LayerTensors: OptionSet {
    let rawValue: Int
    /// attn_{q,k,v}.bias
    static let qkvBias = LayerTensors(rawValue: 1)
    /// attn_q_norm, attn_k_norm: RMSNorm of each head of Q and K before RoPE
    static let qkNorm = LayerTensors(rawValue: 2)
    /// post_attention_norm, post_ffw_norm: RMSNorm of each block's output before the residual add
    static let postNorms = LayerTensors(rawValue: 4)
    /// attn_output.bias
    static let outputBias = LayerTensors(rawValue: 8)
    /// attn_sinks.weight: one logit per query head that joins its softmax with no value (gpt-oss)
    static let sinks = LayerTensors(rawValue: 16)
}

/// Opens `file`'s architecture. `contextSize`: the context the engine will run at (some RoPE
/// scalings depend on it).
func loadLanguageModel(_ file: ModelFile, contextSize: Int) throws -> LanguageModel {
    let gguf = file.gguf
    guard let arch = gguf.architecture else {
        throw VeloError(.invalidFile, "\(file.path): no general.architecture: not a model file (a vocabulary only?)")
    }
    guard let kind = architectures[arch] else {
        throw VeloError(.unsupported, "\(file.path): architecture '\(arch)' is not supported (supported: \(architectures.keys.sorted().joined(separator: ", ")))")
    }
    let w = WeightLoader(gguf: gguf)
    var c = try ModelConfig(gguf: gguf, arch: arch)
    let m = Metadata(gguf: gguf, arch: arch)
    c.ropes = [try Rope.load(m, base: m.double("rope.freq_base") ?? 10000, dims: c.ropeDim, weights: w, contextSize: contextSize)]
    try kind.configure(&c, m, w, contextSize: contextSize)
    let model = try kind.model(c, w)
    if (m.int("nextn_predict_layers") ?? 0) > 0 { w.skipBlocks(from: c.layers) }
    try w.checkAllUsed()
    return model
}
