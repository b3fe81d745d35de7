/// A GPU kernel's parameter block: its shader's `uniform Params`, as a struct whose fields are
/// the block's, in its order and under its names (GPUParamsTests reads the shaders and checks
/// each). Every field is one 32-bit scalar, so std140 packs the block as consecutive words,
/// which is how Swift lays out such a struct (checked there too): `words` is the block as the
/// device uploads it.
protocol KernelParams {}

extension KernelParams {
    var words: [UInt32] { withUnsafeBytes(of: self) { Array($0.bindMemory(to: UInt32.self)) } }
}

/// One struct per kernel family (as llama.cpp's vk_*_push_constants). The matrix products and
/// the attention kernels, whose blocks have variants per build, still pass positional words.
enum GPUParams {
    /// add.comp
    struct Add: KernelParams { var count: UInt32 = 0 }
    /// add_bias.comp
    struct AddBias: KernelParams { var n: UInt32 = 0, rows: UInt32 = 0, stride: UInt32 = 0 }
    /// rms_norm.comp: `useRowsel` takes row i from the selection; rows are `heads` heads of `n`
    /// values, `xStride` / `yStride` apart.
    struct RMSNorm: KernelParams {
        var n: UInt32 = 0, rows: UInt32 = 0
        var eps: Float = 0
        var useRowsel: UInt32 = 0, xStride: UInt32 = 0, heads: UInt32 = 0, yStride: UInt32 = 0
    }
    /// add_rms_norm.comp (and its q8 and f16 outputs)
    struct AddRMSNorm: KernelParams {
        var n: UInt32 = 0, rows: UInt32 = 0
        var eps: Float = 0
    }
    /// argmax_rows.comp
    struct ArgmaxRows: KernelParams { var n: UInt32 = 0, stride: UInt32 = 0 }
    /// get_rows.comp
    struct GetRows: KernelParams {
        var k: UInt32 = 0, rowBytes: UInt32 = 0, n: UInt32 = 0
        var scale: Float = 0
    }
    /// quantize_q8.comp
    struct QuantizeQ8: KernelParams { var k: UInt32 = 0, m: UInt32 = 0, xStride: UInt32 = 0 }
    /// to_f16.comp: `kp` is K rounded up to the products' tile
    struct ToF16: KernelParams { var k: UInt32 = 0, m: UInt32 = 0, xStride: UInt32 = 0, kp: UInt32 = 0 }
    /// sum_splits.comp
    struct SumSplits: KernelParams { var n: UInt32 = 0, m: UInt32 = 0, yStride: UInt32 = 0, splits: UInt32 = 0, plane: UInt32 = 0 }
    /// swiglu.comp and swiglu_pairs.comp: `act` is the GLU's activation (glu.glsl)
    struct GLU: KernelParams { var count: UInt32 = 0, act: UInt32 = 0 }
    /// softcap.comp
    struct Softcap: KernelParams {
        var count: UInt32 = 0
        var cap: Float = 0
    }
    /// rope.comp
    struct Rope: KernelParams {
        var rows: UInt32 = 0, heads: UInt32 = 0, headDim: UInt32 = 0, ropeDim: UInt32 = 0, neox: UInt32 = 0
        var magnitude: Float = 0
        var rowStride: UInt32 = 0
    }
    /// kv_store.comp: (pageStride, layerOff) find the layer's planes in its buffer
    struct KVStore: KernelParams {
        var n: UInt32 = 0, kvDim: UInt32 = 0, pageSize: UInt32 = 0, pageStride: UInt32 = 0, layerOff: UInt32 = 0, kvStride: UInt32 = 0
    }
    /// rope_store.comp
    struct RopeStore: KernelParams {
        var n: UInt32 = 0, heads: UInt32 = 0, kvHeads: UInt32 = 0, headDim: UInt32 = 0, ropeDim: UInt32 = 0, neox: UInt32 = 0
        var magnitude: Float = 0
        var kvDim: UInt32 = 0, pageSize: UInt32 = 0, pageStride: UInt32 = 0, layerOff: UInt32 = 0, qStride: UInt32 = 0, kvStride: UInt32 = 0
    }
    /// moe_route.comp
    struct MoERoute: KernelParams { var tokens: UInt32 = 0, experts: UInt32 = 0, used: UInt32 = 0, normalize: UInt32 = 0, cap: UInt32 = 0 }
    /// moe_combine.comp
    struct MoECombine: KernelParams { var width: UInt32 = 0, used: UInt32 = 0, sharedExpert: UInt32 = 0, yStride: UInt32 = 0, tokens: UInt32 = 0 }
}
