/// Qwen3-Next (Qwen3-Next-80B-A3B), as llama.cpp's qwen3next graph: Qwen3.6-35B-A3B's layers
/// (`Qwen35MoE`: Gated DeltaNet and gated attention, experts with a gated shared expert) but each
/// key head's value heads stored together (`DeltaNetShape.groupedValues`), and, in files from
/// its first converter, the DeltaNet's inputs fused by key head (`ssm_in`, `ssm_ba`;
/// `DeltaNetLayer.Inputs`, `.Rates`). Its RoPE is plain NeoX over `rope.dimension_count`.
enum Qwen3Next: Architecture {
    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        try Qwen35MoE.configure(&c, m, w, contextSize: contextSize)
        c.deltaNet!.groupedValues = true
        // the first converter's files: ssm_in in every DeltaNet layer, no attn_qkv
        if let i = c.deltaNet!.layers.firstIndex(of: true) {
            c.deltaNet!.fusedInputs = w.gguf.tensor("blk.\(i).ssm_in.weight") != nil && w.gguf.tensor("blk.\(i).attn_qkv.weight") == nil
        }
    }

    static func model(_ c: ModelConfig, _ w: WeightLoader) throws -> LanguageModel { try HybridModel(config: c, weights: w) }
}
