/// The kernels of `shaders/` as the hosts see them: names, buffer counts, specialization
/// constants and dispatch sizes (shaders/README.md is the other half of this contract).
/// Constant 0 is always the workgroup size: Metal needs it at dispatch as threads per group.
enum GPUKernels {
    struct Kernel {
        let name: String
        let buffers: Int
        let constants: [UInt32]
    }

    /// Weight types with GPU kernels (every type the CPU computes with).
    static let weightTypes: [GGMLType] = [.f32, .f16, .bf16, .q4_0, .q4_1, .q5_0, .q5_1, .q8_0, .q4_K, .q5_K, .q6_K]

    static func suffix(_ t: GGMLType) -> String { t.name.lowercased() }

    // matrix × vector (decode): NCOLS activation rows per weight read (1, 2, 4, 8 or 16: the
    // smallest that covers the batch), ROWS weight rows per group
    static let matvecLocal: UInt32 = 128
    static let matvecRowsPerGroup = 4
    /// Up to this many activation rows go through matvec, reading each weight once.
    static let matvecMaxRows = 16
    // tiled matrix × matrix (prefill)
    static let matmulBM = 64
    static let matmulBN = 64

    static func matvecCols(_ m: Int) -> Int { m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : m <= 8 ? 8 : 16 }
    static func matvec(_ t: GGMLType, rows m: Int) -> Kernel {
        Kernel(name: "matvec_" + suffix(t), buffers: 3, constants: [matvecLocal, UInt32(matvecCols(m)), UInt32(matvecRowsPerGroup)])
    }
    static func matvecGroups(n: Int, m: Int) -> (Int, Int, Int) {
        let cols = matvecCols(m)
        return ((n + matvecRowsPerGroup - 1) / matvecRowsPerGroup, (m + cols - 1) / cols, 1)
    }
    static func matmul(_ t: GGMLType) -> Kernel {
        Kernel(name: "matmul_" + suffix(t), buffers: 3, constants: [256, UInt32(matmulBM), UInt32(matmulBN)])
    }
    static func matmulGroups(n: Int, m: Int) -> (Int, Int, Int) {
        ((n + matmulBN - 1) / matmulBN, (m + matmulBM - 1) / matmulBM, 1)
    }
    static func getRows(_ t: GGMLType) -> Kernel { Kernel(name: "get_rows_" + suffix(t), buffers: 3, constants: [256]) }

    /// One workgroup of 1024 threads per row (4 independent loads per thread per step).
    static let rmsNorm = Kernel(name: "rms_norm", buffers: 4, constants: [1024])
    static let rope = Kernel(name: "rope", buffers: 2, constants: [64])
    static let kvStore = Kernel(name: "kv_store", buffers: 6, constants: [64])
    /// Split-K attention: (n, kvHeads, splits) workgroups, each over `chunk` keys of a token;
    /// with splits > 1 each writes partials to a scratch buffer and `attentionCombine`
    /// ((n, heads, 1) workgroups) merges them. Both take 128 threads (attention needs ≥ 64).
    static let attention = Kernel(name: "attention", buffers: 7, constants: [128])
    static let attentionCombine = Kernel(name: "attention_combine", buffers: 3, constants: [128])
    /// Keys per attention tile; chunks are multiples of it.
    static let attentionTile = 32
    /// Most splits per token (attention_combine weighs up to 256).
    static let attentionMaxSplits = 64
    /// Splits a step can afford: the scratch holds `capacity` (token, split) pairs.
    static func attentionSplitLimit(maxTokens: Int, maxContext: Int) -> (splits: Int, capacity: Int) {
        let splits = max(1, min(attentionMaxSplits, (maxContext + attentionTile - 1) / attentionTile))
        return (splits, min(maxTokens, 16) * splits)
    }
    /// Floats of the scratch buffer for attention partials.
    static func attentionScratchFloats(maxTokens: Int, maxContext: Int, heads: Int, headDim: Int) -> Int {
        attentionSplitLimit(maxTokens: maxTokens, maxContext: maxContext).capacity * heads * (headDim + 2)
    }
    /// Keys per split and split count for `n` tokens whose longest context is `keys` keys:
    /// tiles of 32 keys each their own split while that fits (decode: many small workgroups),
    /// else the fewest tiles per split that keep splits × n within the scratch.
    static func attentionSplits(keys: Int, n: Int, maxTokens: Int, maxContext: Int) -> (chunk: Int, splits: Int) {
        let lim = attentionSplitLimit(maxTokens: maxTokens, maxContext: maxContext)
        let cap = max(1, min(lim.splits, lim.capacity / max(n, 1)))
        let tiles = max(1, (keys + attentionTile - 1) / attentionTile)
        let chunk = (tiles + cap - 1) / cap * attentionTile
        return (chunk, (keys + chunk - 1) / chunk)
    }
    static let swiglu = Kernel(name: "swiglu", buffers: 2, constants: [256])
    static let add = Kernel(name: "add", buffers: 2, constants: [256])
}
