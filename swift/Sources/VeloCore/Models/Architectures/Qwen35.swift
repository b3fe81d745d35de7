/// Qwen3.5 / 3.6 dense (Qwen3.5-9B, Qwen3.6-27B), as llama.cpp's qwen35 graph: Gated DeltaNet
/// layers with every `full_attention_interval`-th layer (or where `attention.recurrent_layers`
/// says) a gated attention layer with Q/K norms and NeoX RoPE over `rope.dimension_count` of each
/// head. Its M-RoPE sections turn every text position alike, so text needs plain RoPE.
enum Qwen35: Architecture {
    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        c.ropeStyle = .neox
        let vHeads = try m.required("ssm.time_step_rank"), state = try m.required("ssm.state_size")
        let layers: [Bool]
        if let flags = m.gguf["\(m.arch).attention.recurrent_layers"]?.array {
            layers = flags.prefix(c.layers).map { $0.bool ?? false }
            guard layers.count == c.layers else {
                throw VeloError(.invalidFile, "\(m.gguf.file.path): \(m.arch).attention.recurrent_layers has \(flags.count) entries for \(c.layers) layers")
            }
        } else {
            let interval = m.int("full_attention_interval") ?? 4
            layers = (0..<c.layers).map { ($0 + 1) % interval != 0 }
        }
        let d = DeltaNetShape(kHeads: try m.required("ssm.group_count"), vHeads: vHeads, state: state, conv: try m.required("ssm.conv_kernel"), layers: layers)
        guard try m.required("ssm.inner_size") == d.valueDim, d.vHeads % d.kHeads == 0, d.conv >= 2 else {
            throw VeloError(.unsupported, "\(m.gguf.file.path): a DeltaNet of \(d.kHeads) key heads, \(d.vHeads) value heads of \(state), inner size \(m.int("ssm.inner_size") ?? 0) and \(d.conv) taps, which Velo does not support")
        }
        c.deltaNet = d
        c.kvLayers = layers.filter { !$0 }.count
    }

    static func model(_ c: ModelConfig, _ w: WeightLoader) throws -> LanguageModel { try HybridModel(config: c, weights: w) }
}
