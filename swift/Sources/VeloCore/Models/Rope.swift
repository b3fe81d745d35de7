#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One rotary embedding, whatever its scaling: pair i of a head turns by position · freqs[i],
/// and cos/sin are multiplied by `magnitude`. Linear, Llama 3, YaRN and longrope scaling all
/// reduce to per-pair frequencies and one magnitude, so every backend's kernel takes this one
/// table (as llama.cpp's ggml_rope_ext takes frequency factors and an attention factor).
public struct Rope: Sendable, Equatable {
    public var freqs: [Float]
    public var magnitude: Float = 1

    /// base^(-2i/dims), divided by `factors[i]` where given (Llama 3.1's `rope_freqs.weight`,
    /// Phi-3's longrope factors).
    init(base: Double, dims: Int, factors: [Float]? = nil) {
        freqs = (0..<dims / 2).map { i in
            Float(pow(base, -2.0 * Double(i) / Double(dims)) / Double(factors?[i] ?? 1))
        }
    }

    /// Positions compressed by `factor` (linear scaling).
    mutating func scaleLinear(_ factor: Double) {
        freqs = freqs.map { Float(Double($0) / factor) }
    }

    /// YaRN: pairs that turn slowly (below `betaSlow` turns over the original context) are
    /// interpolated by `factor`, fast ones (above `betaFast`) kept, a linear ramp between; the
    /// magnitude grows by 0.1·ln(factor) (ggml's rope_yarn, with ext_factor 1).
    mutating func yarn(factor: Double, originalContext: Int, base: Double, dims: Int, betaFast: Double = 32, betaSlow: Double = 1) {
        func corrDim(_ beta: Double) -> Double {
            Double(dims) * log(Double(originalContext) / (beta * 2 * Double.pi)) / (2 * log(base))
        }
        let low = max(0, floor(corrDim(betaFast))), high = min(Double(dims - 1), ceil(corrDim(betaSlow)))
        freqs = freqs.enumerated().map { i, f in
            let y = (Double(i) - low) / max(0.001, high - low)
            let keep = 1 - min(1, max(0, y)) // 1: extrapolate (keep), 0: interpolate
            return Float(Double(f) * ((1 - keep) / factor + keep))
        }
        magnitude *= Float(1 + 0.1 * log(factor))
    }

    /// The model's rope from `{arch}.rope.*` metadata and the optional factor tensors, as
    /// llama.cpp reads them: a scaling type absent means linear (with no factor, none).
    /// `contextSize`: the context the engine runs at (longrope picks its long factors past the
    /// original context, as llama.cpp does).
    static func load(_ m: Metadata, base: Double, dims: Int, weights: WeightLoader, contextSize: Int) throws -> Rope {
        var factors = try weights.optionalVector("rope_freqs.weight", count: dims / 2)?.values
        let original = m.int("rope.scaling.original_context_length") ?? m.int("context_length") ?? 2048
        if factors == nil, m.gguf.tensor("rope_factors_long.weight") != nil {
            let long = try weights.vector("rope_factors_long.weight", count: dims / 2)
            let short = try weights.vector("rope_factors_short.weight", count: dims / 2)
            factors = (contextSize > original ? long : short).values
        }
        var rope = Rope(base: base, dims: dims, factors: factors)
        let type = m.string("rope.scaling.type") ?? "linear"
        let factor = m.double("rope.scaling.factor") ?? m.double("rope.scale_linear") ?? 0
        switch type {
        case "none":
            break
        case "linear", "longrope":
            if factor > 0 { rope.scaleLinear(factor) }
        case "yarn":
            if factor > 0 {
                rope.yarn(factor: factor, originalContext: original, base: base, dims: dims,
                          betaFast: m.double("rope.scaling.yarn_beta_fast") ?? 32, betaSlow: m.double("rope.scaling.yarn_beta_slow") ?? 1)
            }
        default:
            throw VeloError(.unsupported, "\(m.gguf.file.path): RoPE scaling type '\(type)' is not supported (none, linear, yarn, longrope)")
        }
        if let a = m.double("rope.scaling.attn_factor"), a > 0 { rope.magnitude *= Float(a) }
        return rope
    }
}
