/// Hyper-parameters of a decoder-only transformer, read from GGUF metadata
/// (`{arch}.embedding_length`, `.block_count`, …), and every architecture quirk as a field with
/// the Llama default: an architecture file only changes what differs (docs/development.md, "Adding an architecture").
public struct ModelConfig: Sendable {
    public enum RopeStyle: Sendable { case normal, neox }
    /// The gate's activation in the gated MLP.
    public enum FFNActivation: Int32, Sendable { case silu = 1, geluTanh = 2 }

    public var architecture: String
    public var dim: Int
    public var layers: Int
    public var heads: Int
    public var kvHeads: Int
    public var headDim: Int
    public var ffnDim: Int
    public var vocabSize: Int
    /// The context the model was trained at (`{arch}.context_length`).
    public var contextLength: Int
    public var normEps: Float
    public var ropeDim: Int
    public var ropeStyle: RopeStyle
    /// The rotary tables the layers use (`layerRope` picks one per layer).
    public var ropes: [Rope]
    public var layerRope: [Int]
    /// Scores are q·k times this (1/√headDim unless the model says otherwise).
    public var attentionScale: Float
    /// Scores become cap·tanh(s/cap) before the softmax (0: off).
    public var attentionSoftcap: Float = 0
    /// Each layer's sliding window in keys, itself included (0: the whole context).
    public var layerWindow: [Int]
    /// Logits become cap·tanh(l/cap) (0: off).
    public var finalSoftcap: Float = 0
    /// The embedding rows are multiplied by this.
    public var embeddingScale: Float = 1
    public var activation: FFNActivation = .silu
    /// `{arch}.pooling_type` (nil: absent): how embeddings pool the hidden states (`Pooling`).
    public var poolingType: Int?
    /// The FFN is a mixture of experts (nil: one dense gated MLP of `ffnDim`).
    public var experts: Experts?
    /// The norm before each layer's FFN (gpt-oss names it post_attention_norm).
    var ffnNormTensor = "ffn_norm.weight"
    /// Gated DeltaNet layers between the attention layers (Qwen3.5; nil: attention everywhere).
    public var deltaNet: DeltaNetShape?
    /// The layers that keep K/V in the pages (every one, but a hybrid's attention layers only).
    public var kvLayers: Int
    /// Multi-head latent attention (DeepSeek-V2/V3, GLM-4.7-Flash, Kimi; nil: grouped-query).
    public var mla: MLAShape?
    /// The first layers whose FFN is one dense gated MLP of `ffnDim` though the rest have
    /// experts (DeepSeek's leading_dense_block_count).
    public var leadingDenseLayers = 0

    public var qDim: Int { heads * headDim }
    public var kvDim: Int { kvHeads * headDim }
    /// The widest gated-MLP hidden layer the forward pass has: the dense FFN's, or an expert's
    /// or the shared expert's (a mixture-of-experts model's `ffnDim` is not used).
    var hiddenWidth: Int { experts.map { max($0.ffnDim, $0.sharedFFNDim, leadingDenseLayers > 0 ? ffnDim : 0) } ?? ffnDim }

    /// The shape and the Llama defaults; `Architecture.configure` adjusts the quirks.
    init(gguf: GGUFFile, arch: String) throws {
        let m = Metadata(gguf: gguf, arch: arch)
        architecture = arch
        dim = try m.required("embedding_length")
        // multi-token-prediction heads (`nextn_predict_layers`: Qwen3.5/3.6, GLM-4.5) are stored
        // as the last blocks; the model is the blocks before them (Velo does not run the heads)
        let blocks = try m.required("block_count"), nextn = m.int("nextn_predict_layers") ?? 0
        guard nextn >= 0, nextn < blocks else {
            throw VeloError(.invalidFile, "\(gguf.file.path): \(nextn) prediction heads of \(blocks) blocks")
        }
        layers = blocks - nextn
        heads = try m.required("attention.head_count")
        kvHeads = m.int("attention.head_count_kv") ?? heads
        ffnDim = try m.required("feed_forward_length")
        contextLength = m.int("context_length") ?? 2048
        headDim = m.int("attention.key_length") ?? dim / heads
        normEps = Float(m.double("attention.layer_norm_rms_epsilon") ?? 1e-5)
        poolingType = m.int("pooling_type")
        ropeDim = m.int("rope.dimension_count") ?? headDim
        ropeStyle = .normal
        attentionScale = 1 / Float(headDim).squareRoot()
        layerWindow = Array(repeating: 0, count: layers)
        kvLayers = layers
        ropes = []
        layerRope = Array(repeating: 0, count: layers)
        if let tokens = gguf["tokenizer.ggml.tokens"]?.array {
            vocabSize = tokens.count
        } else if let v = m.int("vocab_size") {
            vocabSize = v
        } else {
            vocabSize = gguf.tensor("token_embd.weight")?.dims.last ?? 0
        }
        guard kvHeads > 0, heads % kvHeads == 0 else {
            throw VeloError(.invalidFile, "\(gguf.file.path): \(heads) attention heads cannot share \(kvHeads) KV heads")
        }
        guard ropeDim <= headDim, ropeDim % 2 == 0 else {
            throw VeloError(.invalidFile, "\(gguf.file.path): rope dimension \(ropeDim) does not fit head size \(headDim)")
        }
        // (multi-head latent attention's values are its latent, narrower than its keys: MLA.swift)
        if let v = m.int("attention.value_length"), v != headDim, m.int("attention.kv_lora_rank") == nil {
            throw VeloError(.unsupported, "\(gguf.file.path): value heads of \(v) differ from key heads of \(headDim), which Velo does not support")
        }
    }

    /// Reads `{arch}.expert_count` and `.expert_used_count`, weights renormalised (Mixtral's
    /// routing); architectures adjust the rest. Each expert is `ffnDim` wide, or with
    /// `ownWidth` (the Qwen MoE converters) `expert_feed_forward_length` wide, ffnDim / used
    /// when absent, as llama.cpp defaults it.
    mutating func readExperts(_ m: Metadata, ownWidth: Bool = false) throws {
        let count = try m.required("expert_count"), used = try m.required("expert_used_count")
        guard used <= count else {
            throw VeloError(.invalidFile, "\(m.gguf.file.path): \(used) experts used of \(count)")
        }
        let width = ownWidth ? m.int("expert_feed_forward_length") ?? ffnDim / used : ffnDim
        experts = Experts(count: count, used: used, ffnDim: width)
    }

    /// Sets one sliding window on the layers where `isLocal` holds.
    mutating func slidingWindow(_ window: Int, where isLocal: (Int) -> Bool) {
        layerWindow = (0..<layers).map { isLocal($0) ? window : 0 }
    }
}

/// `{arch}.key` lookups for one file, with errors that name the file and the key.
struct Metadata {
    let gguf: GGUFFile
    let arch: String

    func int(_ key: String) -> Int? { gguf.int("\(arch).\(key)") }
    func double(_ key: String) -> Double? { gguf.double("\(arch).\(key)") }
    func string(_ key: String) -> String? { gguf.string("\(arch).\(key)") }

    func required(_ key: String) throws -> Int {
        guard let v = int(key), v > 0 else {
            throw VeloError(.invalidFile, "\(gguf.file.path): missing or invalid \(arch).\(key)")
        }
        return v
    }
}
