/// The kernels of `shaders/` as the hosts see them: names, buffer counts, specialization
/// constants and dispatch sizes (shaders/README.md is the other half of this contract).
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
    static func matmul(_ t: GGMLType) -> Kernel { Kernel(name: "matmul_" + suffix(t), buffers: 3, constants: []) }
    static func matmulGroups(n: Int, m: Int) -> (Int, Int, Int) {
        ((n + matmulBN - 1) / matmulBN, (m + matmulBM - 1) / matmulBM, 1)
    }
    static func getRows(_ t: GGMLType) -> Kernel { Kernel(name: "get_rows_" + suffix(t), buffers: 3, constants: []) }

    static let rmsNorm = Kernel(name: "rms_norm", buffers: 4, constants: [])
    static let rope = Kernel(name: "rope", buffers: 2, constants: [])
    static let kvStore = Kernel(name: "kv_store", buffers: 6, constants: [])
    static let attention = Kernel(name: "attention", buffers: 6, constants: [])
    static let swiglu = Kernel(name: "swiglu", buffers: 2, constants: [])
    static let add = Kernel(name: "add", buffers: 2, constants: [])
}
