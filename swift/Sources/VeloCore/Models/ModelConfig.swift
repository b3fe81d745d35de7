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
    /// Each layer's MLP width where layers differ (Gemma 4; empty: `ffnDim` everywhere).
    public var layerFFNDim: [Int] = []
    func ffnDim(layer: Int) -> Int { layerFFNDim.isEmpty ? ffnDim : layerFFNDim[layer] }
    /// The layers that keep K/V in the pages (every one, but a hybrid's attention layers only).
    public var kvLayers: Int
    /// Multi-head latent attention (DeepSeek-V2/V3, GLM-4.7-Flash, Kimi; nil: grouped-query).
    public var mla: MLAShape?
    /// The first layers whose FFN is one dense gated MLP of `ffnDim` though the rest have
    /// experts (DeepSeek's leading_dense_block_count).
    public var leadingDenseLayers = 0

    /// Each layer's heads where layers differ (Gemma 4: 256-wide sliding heads and 512-wide
    /// global ones, each with its own K/V head count); empty: every layer has `uniformHeads`.
    public var layerHeads: [HeadShape] = []
    /// The layer whose K/V pages a layer reads: itself, or, for Gemma 4's last layers, an
    /// earlier layer's (they keep none of their own). Empty: every layer its own.
    public var kvSource: [Int] = []
    /// Each head of V is RMS-normed (no gain) before it is stored, and a layer without its own
    /// V projection uses K's (Gemma 4).
    public var valueNorm = false
    /// Per-layer embeddings of this many values a layer (Gemma 4's E2B/E4B; 0: none).
    public var perLayerWidth = 0

    public var uniformHeads: HeadShape { HeadShape(heads: heads, kvHeads: kvHeads, headDim: headDim) }
    func heads(layer: Int) -> HeadShape { layerHeads.isEmpty ? uniformHeads : layerHeads[layer] }
    func kvLayer(_ layer: Int) -> Int { kvSource.isEmpty ? layer : kvSource[layer] }
    /// The widest layer's Q and K/V rows (buffers and KV pages are sized by them).
    public var qDim: Int { layerHeads.map(\.qDim).max() ?? heads * headDim }
    public var kvDim: Int { layerHeads.map(\.kvDim).max() ?? kvHeads * headDim }
    /// Each K/V-keeping layer's K/V values a row where they differ (the page layout's
    /// `layerDims`; those layers are the first `kvLayers`, `kvSource` pointing back into them).
    var kvLayerDims: [Int] {
        let dims = layerHeads.prefix(kvLayers).map(\.kvDim)
        return Set(dims).count > 1 ? Array(dims) : []
    }
    /// The most query heads that share one K/V head in any layer.
    var maxGroup: Int { layerHeads.map(\.group).max() ?? heads / kvHeads }
    /// The widest head of any layer, and each head shape the layers have (once each).
    var maxHeadDim: Int { layerHeads.map(\.headDim).max() ?? headDim }
    var headShapes: [HeadShape] { layerHeads.isEmpty ? [uniformHeads] : layerHeads.reduce(into: []) { if !$0.contains($1) { $0.append($1) } } }
    /// The widest gated-MLP hidden layer the forward pass has: the dense FFN's, or an expert's
    /// or the shared expert's (a mixture-of-experts model's `ffnDim` is not used).
    var hiddenWidth: Int { experts.map { max($0.ffnDim, $0.sharedFFNDim, leadingDenseLayers > 0 || $0.mlpBeside ? ffnDim : 0) } ?? ffnDim }

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
        // (both may be one a layer: Gemma 4's K/V heads and its wider MLPs in the last layers)
        let kvPerLayer = try m.perLayer("attention.head_count_kv", layers: layers)
        kvHeads = kvPerLayer?.max() ?? heads
        let ffnPerLayer = try m.perLayer("feed_forward_length", layers: layers)
        guard let widest = ffnPerLayer?.max(), widest > 0 else {
            throw VeloError(.invalidFile, "\(gguf.file.path): missing or invalid \(arch).feed_forward_length")
        }
        ffnDim = widest
        if let f = ffnPerLayer, Set(f).count > 1 { layerFFNDim = f }
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
        for kv in Set(kvPerLayer ?? [kvHeads]) where kv <= 0 || heads % kv != 0 {
            throw VeloError(.invalidFile, "\(gguf.file.path): \(heads) attention heads cannot share \(kv) KV heads")
        }
        if let kv = kvPerLayer, Set(kv).count > 1 {
            layerHeads = kv.map { HeadShape(heads: heads, kvHeads: $0, headDim: headDim) }
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

/// A layer's attention heads: query heads, the K/V heads they share, and one head's width.
public struct HeadShape: Sendable, Equatable {
    public var heads, kvHeads, headDim: Int
    public var qDim: Int { heads * headDim }
    public var kvDim: Int { kvHeads * headDim }
    public var group: Int { heads / kvHeads }
}

/// `{arch}.key` lookups for one file, with errors that name the file and the key.
struct Metadata {
    let gguf: GGUFFile
    let arch: String

    func int(_ key: String) -> Int? { gguf.int("\(arch).\(key)") }
    func double(_ key: String) -> Double? { gguf.double("\(arch).\(key)") }
    func string(_ key: String) -> String? { gguf.string("\(arch).\(key)") }
    /// A key that is one integer for every layer or an array of one per layer.
    func perLayer(_ key: String, layers: Int) throws -> [Int]? {
        guard let v = gguf["\(arch).\(key)"] else { return nil }
        if let i = v.int { return Array(repeating: i, count: layers) }
        guard let a = v.array?.map(\.int), a.count == layers, a.allSatisfy({ $0 != nil }) else {
            throw VeloError(.invalidFile, "\(gguf.file.path): \(arch).\(key) is neither an integer nor one a layer (\(layers))")
        }
        return a.map { $0! }
    }

    func required(_ key: String) throws -> Int {
        guard let v = int(key), v > 0 else {
            throw VeloError(.invalidFile, "\(gguf.file.path): missing or invalid \(arch).\(key)")
        }
        return v
    }
}
