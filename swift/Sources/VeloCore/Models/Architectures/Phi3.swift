/// Phi-3, 3.5 and 4-mini: fused Q|K|V and gate|up weights (split into views at load), NeoX
/// RoPE over `rope.dimension_count` of each head (partial on Phi-4-mini), and longrope's
/// per-pair factors and attention factor (`Rope.load`). Phi-3's sliding window is not
/// applied, as llama.cpp does not apply it.
enum Phi3: Architecture {
    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        c.ropeStyle = .neox
    }
}
