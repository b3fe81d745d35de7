#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// DeepSeek-V2/V2.5/V3 and the models built on them (GLM-4.7-Flash, Kimi/Moonlight), as
/// llama.cpp's deepseek2 graph: multi-head latent attention (MLA.swift; queries direct or
/// through q_lora_rank), adjacent-pair RoPE over its RoPE part, the first
/// `leading_dense_block_count` layers dense, then experts of `expert_feed_forward_length` with
/// `expert_shared_count` shared experts added as they are, routed by a softmax or a sigmoid
/// (`expert_gating_func`), with exp_probs_b choice biases, groups, renormalising and a scale
/// where the file has them. Its YaRN as llama.cpp runs it for DeepSeek (TAG_DEEPSEEK2_YARN_LOG_MUL_FIX):
/// the rotary tables keep only `rope.scaling.attn_factor` as their magnitude (YaRN's 1 + 0.1·ln F
/// cancels), and the scores take mscale² with mscale = attn_factor · (1 + 0.1·m·ln F), m being
/// mscale_all_dim (the file's `yarn_log_multiplier` is a tenth of it).
enum DeepSeek2: Architecture {
    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        let path = m.gguf.file.path
        guard let kLen = m.int("attention.key_length_mla"), let vLen = m.int("attention.value_length_mla") else {
            throw VeloError(.unsupported, "\(path): no \(m.arch).attention.key_length_mla / value_length_mla: a conversion from before llama.cpp's absorbed MLA, which Velo does not run (convert the model again)")
        }
        let s = MLAShape(kvLora: try m.required("attention.kv_lora_rank"), qLora: m.int("attention.q_lora_rank") ?? 0,
                         nope: kLen - c.ropeDim, rope: c.ropeDim, vHead: vLen)
        guard s.nope > 0, c.headDim == s.rowWidth, m.int("attention.value_length") ?? s.kvLora == s.kvLora else {
            throw VeloError(.invalidFile, "\(path): MLA heads of \(kLen) (RoPE \(c.ropeDim)) with a latent of \(s.kvLora) do not match key_length \(c.headDim)")
        }
        c.mla = s
        c.kvHeads = 1 // one latent row a token, shared by every head
        c.attentionScale = 1 / Float(kLen).squareRoot()
        if m.string("rope.scaling.type") == "yarn", let factor = m.double("rope.scaling.factor"), factor > 1 {
            let attnFactor = m.double("rope.scaling.attn_factor").flatMap { $0 > 0 ? $0 : nil } ?? 1
            let mscale = attnFactor * (1 + 0.1 * (m.double("rope.scaling.yarn_log_multiplier") ?? 0) / 0.1 * log(factor))
            c.ropes[0].magnitude = Float(attnFactor)
            c.attentionScale = Float(mscale * mscale / Double(kLen).squareRoot())
        }
        c.leadingDenseLayers = m.int("leading_dense_block_count") ?? 0
        try c.readExperts(m, ownWidth: true)
        var e = c.experts!
        e.normalizeWeights = m.gguf.bool("\(m.arch).expert_weights_norm") ?? false
        if let scale = m.double("expert_weights_scale"), scale != 0 { e.weightsScale = Float(scale) }
        switch m.int("expert_gating_func") {
        case nil, 1: e.gating = .softmax
        case 2: e.gating = .sigmoid
        case let f?: throw VeloError(.unsupported, "\(path): expert_gating_func \(f) is not supported (1 softmax, 2 sigmoid)")
        }
        e.selectionBias = c.leadingDenseLayers < c.layers && w.gguf.tensor("blk.\(c.leadingDenseLayers).exp_probs_b.bias") != nil
        e.sharedFFNDim = (m.int("expert_shared_count") ?? 0) * e.ffnDim
        e.sharedGated = false
        if let g = m.int("expert_group_count"), g > 1 {
            let used = try m.required("expert_group_used_count")
            guard e.count % g == 0, used < g, e.used <= used * (e.count / g) else {
                throw VeloError(.invalidFile, "\(path): \(e.count) experts in \(g) groups, \(used) used, cannot route \(e.used)")
            }
            e.groups = (g, used)
        }
        c.experts = e
    }

    static func model(_ c: ModelConfig, _ w: WeightLoader) throws -> LanguageModel { try MLAModel(config: c, weights: w) }
}
