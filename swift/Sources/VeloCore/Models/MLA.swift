/// Multi-head latent attention (DeepSeek-V2/V3, GLM-4.7-Flash, Kimi/Moonlight), run absorbed as
/// llama.cpp's deepseek2 graph does: the cache keeps one compressed latent per token (the
/// kv_a_mqa product's first `kvLora` values, normed) and its RoPE part, shared by every head,
/// so attention is multi-query over rows of `rope + kvLora`. A head's query folds its key
/// up-projection in (q_nope · attn_k_b, in latent space); its output leaves latent space through
/// attn_v_b. A row is laid out [RoPE part, latent] so the ordinary RoPE (the first `rope` values
/// of a head) and attention kernels run it. V pages hold the same row as K (the attention
/// output's first `rope` values are unused): twice the latent's memory, where llama.cpp reads
/// V as a view of K.
public struct MLAShape: Sendable {
    /// attention.kv_lora_rank: the latent's width.
    public var kvLora: Int
    /// attention.q_lora_rank: queries through a low-rank pair with a norm between (0: attn_q).
    public var qLora: Int
    /// A head's query/key parts without and with RoPE (key_length_mla = nope + rope).
    public var nope: Int
    public var rope: Int
    /// value_length_mla: a head's output width.
    public var vHead: Int

    /// A cache row and an absorbed query head: [RoPE part, latent].
    var rowWidth: Int { rope + kvLora }
    /// A head of the query product's output: [nope, rope].
    var queryHead: Int { nope + rope }
}

/// One layer's MLA weights.
struct MLALayer {
    enum Query {
        case direct(WeightMatrix)
        /// attn_q_a, its norm, attn_q_b
        case lowRank(a: WeightMatrix, norm: WeightVector, b: WeightMatrix)
    }

    let query: Query
    /// attn_kv_a_mqa: x → [latent, RoPE part].
    let kvA: WeightMatrix
    let kvANorm: WeightVector
    /// Per head: attn_k_b (kvLora × nope: q_nope → latent) and attn_v_b (vHead × kvLora).
    let kB, vB: [WeightMatrix]
    let wo: WeightMatrix

    init(_ w: WeightLoader, prefix p: String, _ c: ModelConfig, _ s: MLAShape) throws {
        let qRows = c.heads * s.queryHead
        if s.qLora > 0 {
            query = .lowRank(a: try w.matrix(p + "attn_q_a.weight", rows: s.qLora, cols: c.dim),
                             norm: try w.vector(p + "attn_q_a_norm.weight", count: s.qLora),
                             b: try w.matrix(p + "attn_q_b.weight", rows: qRows, cols: s.qLora))
        } else {
            query = .direct(try w.matrix(p + "attn_q.weight", rows: qRows, cols: c.dim))
        }
        kvA = try w.matrix(p + "attn_kv_a_mqa.weight", rows: s.kvLora + s.rope, cols: c.dim)
        kvANorm = try w.vector(p + "attn_kv_a_norm.weight", count: s.kvLora)
        guard w.gguf.tensor(p + "attn_k_b.weight") != nil || w.gguf.tensor(p + "attn_kv_b.weight") == nil else {
            throw VeloError(.unsupported, "\(w.gguf.file.path): \(p)attn_kv_b.weight unsplit (a GGUF converted before llama.cpp split it into attn_k_b and attn_v_b): convert the model again")
        }
        kB = try w.experts(p + "attn_k_b.weight", count: c.heads, rows: s.kvLora, cols: s.nope)
        vB = try w.experts(p + "attn_v_b.weight", count: c.heads, rows: s.vHead, cols: s.kvLora)
        wo = try w.matrix(p + "attn_output.weight", rows: c.dim, cols: c.heads * s.vHead)
    }

    var matrices: [WeightMatrix] {
        switch query {
        case let .direct(q): [q, kvA, wo] + kB + vB
        case let .lowRank(a, _, b): [a, b, kvA, wo] + kB + vB
        }
    }

    var vectors: [WeightVector] {
        if case let .lowRank(_, norm, _) = query { [kvANorm, norm] } else { [kvANorm] }
    }
}

/// A decoder of MLA attention and a gated MLP or experts (the first `leadingDenseLayers` dense).
final class MLAModel: LanguageModel, @unchecked Sendable {
    struct Layer {
        let attnNorm: WeightVector
        let attention: MLALayer
        let ffnNorm: WeightVector
        let ffn: FeedForward
    }

    let config: ModelConfig
    let embeddings: WeightMatrix
    let layers: [Layer]
    let outputNorm: WeightVector
    let output: WeightMatrix

    init(config c: ModelConfig, weights w: WeightLoader) throws {
        config = c
        let s = c.mla!
        embeddings = try w.matrix("token_embd.weight", rows: c.vocabSize, cols: c.dim)
        layers = try (0..<c.layers).map { i in
            let p = "blk.\(i)."
            return Layer(attnNorm: try w.vector(p + "attn_norm.weight", count: c.dim),
                         attention: try MLALayer(w, prefix: p, c, s),
                         ffnNorm: try w.vector(p + "ffn_norm.weight", count: c.dim),
                         ffn: try FeedForward(w, prefix: p, c, dense: i < c.leadingDenseLayers))
        }
        outputNorm = try w.vector("output_norm.weight", count: c.dim)
        output = try w.optionalMatrix("output.weight", rows: c.vocabSize, cols: c.dim) ?? embeddings
    }

    var matrices: [WeightMatrix] {
        [embeddings] + layers.flatMap { $0.attention.matrices + $0.ffn.matrices } + (output.data == embeddings.data ? [] : [output])
    }

    var vectors: [WeightVector] {
        layers.flatMap { [$0.attnNorm, $0.ffnNorm] + $0.attention.vectors } + expertLayers.flatMap(\.vectors) + [outputNorm]
    }

    var expertLayers: [ExpertLayer] { layers.compactMap(\.ffn.experts) }

    var gatedPairs: [(WeightMatrix, WeightMatrix)] { layers.compactMap(\.ffn.gatedPair) }

    func forward(_ ops: ForwardOps) {
        let c = config
        ops.embed(embeddings, scale: 1)
        ops.rmsNorm(.x, layers[0].attnNorm, into: .xn)
        for (li, l) in layers.enumerated() {
            ops.latentQKV(.xn, l.attention)
            ops.ropeAndStoreKV(layer: li, c.uniformHeads, rope: 0)
            ops.attention(layer: li, c.attention(layer: li))
            ops.latentOutput(l.attention, into: .q)
            ops.matmul(.q, [(l.attention.wo, .xn)])
            ops.addRMSNorm(.x, .xn, l.ffnNorm, into: .xn)
            l.ffn.run(ops, .silu)
            if li + 1 < layers.count {
                ops.addRMSNorm(.x, .xn, layers[li + 1].attnNorm, into: .xn)
            } else {
                ops.add(.x, .xn)
            }
        }
        ops.hidden(norm: outputNorm)
        ops.logits(norm: outputNorm, output: output, softcap: 0)
    }
}
