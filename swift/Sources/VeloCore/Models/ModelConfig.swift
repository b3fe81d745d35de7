/// Hyper-parameters of a decoder-only transformer, read from GGUF metadata
/// (`{arch}.embedding_length`, `.block_count`, …). Architecture quirks are fields here so the
/// architecture files stay small.
public struct ModelConfig: Sendable {
    public enum RopeStyle: Sendable { case normal, neox }

    public var architecture: String
    public var dim: Int
    public var layers: Int
    public var heads: Int
    public var kvHeads: Int
    public var headDim: Int
    public var ffnDim: Int
    public var vocabSize: Int
    public var contextLength: Int
    public var normEps: Float
    public var ropeBase: Float
    public var ropeDim: Int
    /// Positions are multiplied by this (linear RoPE scaling).
    public var ropeScale: Float
    public var ropeStyle: RopeStyle

    public var qDim: Int { heads * headDim }
    public var kvDim: Int { kvHeads * headDim }

    static let supported = ["llama"]

    public init(gguf: GGUFFile) throws {
        guard let arch = gguf.architecture else {
            throw VeloError(.invalidFile, "\(gguf.file.path): no general.architecture: not a model file (a vocabulary only?)")
        }
        guard ModelConfig.supported.contains(arch) else {
            throw VeloError(.unsupported, "\(gguf.file.path): architecture '\(arch)' is not supported (supported: \(ModelConfig.supported.joined(separator: ", ")))")
        }
        func req(_ key: String) throws -> Int {
            guard let v = gguf.int("\(arch).\(key)"), v > 0 else {
                throw VeloError(.invalidFile, "\(gguf.file.path): missing or invalid \(arch).\(key)")
            }
            return v
        }
        architecture = arch
        dim = try req("embedding_length")
        layers = try req("block_count")
        heads = try req("attention.head_count")
        kvHeads = gguf.int("\(arch).attention.head_count_kv") ?? heads
        ffnDim = try req("feed_forward_length")
        contextLength = gguf.int("\(arch).context_length") ?? 2048
        headDim = gguf.int("\(arch).attention.key_length") ?? dim / heads
        normEps = Float(gguf.double("\(arch).attention.layer_norm_rms_epsilon") ?? 1e-5)
        ropeBase = Float(gguf.double("\(arch).rope.freq_base") ?? 10000)
        ropeDim = gguf.int("\(arch).rope.dimension_count") ?? headDim
        ropeScale = 1
        if gguf.string("\(arch).rope.scaling.type") == "linear", let f = gguf.double("\(arch).rope.scaling.factor"), f > 0 {
            ropeScale = Float(1 / f)
        }
        ropeStyle = .normal
        if let tokens = gguf["tokenizer.ggml.tokens"]?.array {
            vocabSize = tokens.count
        } else if let v = gguf.int("\(arch).vocab_size") {
            vocabSize = v
        } else {
            vocabSize = gguf.tensor("token_embd.weight")?.dims.last ?? 0
        }
        guard heads % kvHeads == 0, kvHeads > 0 else {
            throw VeloError(.invalidFile, "\(gguf.file.path): \(heads) attention heads cannot share \(kvHeads) KV heads")
        }
        guard ropeDim <= headDim, ropeDim % 2 == 0 else {
            throw VeloError(.invalidFile, "\(gguf.file.path): rope dimension \(ropeDim) does not fit head size \(headDim)")
        }
    }
}
