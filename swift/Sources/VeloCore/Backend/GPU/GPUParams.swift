/// A GPU kernel's parameter block: its shader's `uniform Params`, as a struct whose fields are
/// the block's, in its order and under its names (GPUParamsTests reads the shaders and checks
/// each). Every field is one 32-bit scalar, so std140 packs the block as consecutive words,
/// which is how Swift lays out such a struct (checked there too): `words` is the block as the
/// device uploads it.
protocol KernelParams {}

extension KernelParams {
    var words: [UInt32] { withUnsafeBytes(of: self) { Array($0.bindMemory(to: UInt32.self)) } }
}

/// One struct per kernel family (as llama.cpp's vk_*_push_constants); a shader whose block has
/// variants per build (experts, a joined RoPE, a float16 output) has a struct per variant, the
/// shared part nested (its words come first, as the block's fields do).
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
    /// swiglu.comp: GLU, whose act 3 (the clamped SwiGLU) takes alpha and limit
    struct SwiGLU: KernelParams {
        var count: UInt32 = 0, act: UInt32 = 0
        var alpha: Float = 0, limit: Float = 0
    }
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
    struct MoERoute: KernelParams {
        var tokens: UInt32 = 0, experts: UInt32 = 0, used: UInt32 = 0, normalize: UInt32 = 0, cap: UInt32 = 0
        /// 1: the weights are the softmax of the chosen logits (picked by logit), not the chosen probabilities
        var softmaxChosen: UInt32 = 0
        /// 1: each weight times its expert's factor (the S buffer: Gemma 4's ffn_down_exps.scale)
        var scaled: UInt32 = 0
        /// DeepSeek-V3's routing: sigmoid probabilities, picks by them plus the B buffer's
        /// biases, and only the best `groupsUsed` of `groups` groups (0: no groups)
        var sigmoid: UInt32 = 0, biased: UInt32 = 0, groups: UInt32 = 0, groupsUsed: UInt32 = 0
    }
    /// deltanet_conv.comp: `layerOff` the layer's floats into a slot; `grouped` reads Qwen3-Next's
    /// ssm_in rows (hk, hv: a key head's q/k and v widths)
    struct DeltaNetConv: KernelParams {
        var convDim: UInt32 = 0, taps: UInt32 = 0, inStride: UInt32 = 0, slotFloats: UInt32 = 0, layerOff: UInt32 = 0
        var grouped: UInt32 = 0, keyDim: UInt32 = 0, hk: UInt32 = 0, hv: UInt32 = 0
    }
    /// deltanet_recur.comp: `layerOff` where the layer's recurrent part of a slot starts
    struct DeltaNetRecur: KernelParams {
        var n: UInt32 = 0, kHeads: UInt32 = 0, vHeads: UInt32 = 0, convDim: UInt32 = 0, slotFloats: UInt32 = 0, layerOff: UInt32 = 0
        var grouped: UInt32 = 0, groupedRates: UInt32 = 0, groupedValues: UInt32 = 0, zStride: UInt32 = 0, betaStride: UInt32 = 0, alphaStride: UInt32 = 0
        var eps: Float = 0
    }
    /// split_query.comp, sigmoid_gate.comp: `stride` the Q or attention rows'
    struct GatedQuery: KernelParams { var qDim: UInt32 = 0, headDim: UInt32 = 0, rows: UInt32 = 0, stride: UInt32 = 0 }
    /// copy_rows.comp: row (a, b) at a·xA + b·xB + xOff in X, a·yA + b·yB + yOff in Y
    struct CopyRows: KernelParams {
        var width: UInt32 = 0, xA: UInt32 = 0, xB: UInt32 = 0, xOff: UInt32 = 0, yA: UInt32 = 0, yB: UInt32 = 0, yOff: UInt32 = 0
    }
    /// scale.comp
    struct Scale: KernelParams { var count: UInt32 = 0, s: Float = 0 }
    /// per_layer_inputs.comp: rows of `layers` × `width`
    struct PerLayerInputs: KernelParams {
        var width: UInt32 = 0, layers: UInt32 = 0
        var eps: Float = 0, projScale: Float = 0, mix: Float = 0
    }
    /// per_layer_gate.comp: the inputs' rows `iStride` floats apart, the layer's slice `iOff` into each
    struct PerLayerGate: KernelParams { var width: UInt32 = 0, rows: UInt32 = 0, iStride: UInt32 = 0, iOff: UInt32 = 0 }
    /// add_bias_id.comp
    struct AddBiasID: KernelParams { var n: UInt32 = 0, rows: UInt32 = 0, stride: UInt32 = 0, idsOff: UInt32 = 0 }
    /// matvec.comp, matvec_dot.comp, matvec_dot_batch.comp: Y (M rows, yStride apart) = W
    /// (N rows of K values, rowBytes each) · X (M rows, xStride apart); `glu` > 0: the rows come
    /// in (gate, up) pairs and Y takes act(gate) * up (glu.glsl's activation).
    struct Product: KernelParams {
        var k: UInt32 = 0, n: UInt32 = 0, m: UInt32 = 0, rowBytes: UInt32 = 0, xStride: UInt32 = 0, yStride: UInt32 = 0, glu: UInt32 = 0
    }
    /// matmul.comp: Product's tiles, without the GLU mode
    struct Tiles: KernelParams {
        var k: UInt32 = 0, n: UInt32 = 0, m: UInt32 = 0, rowBytes: UInt32 = 0, xStride: UInt32 = 0, yStride: UInt32 = 0
    }
    /// The expert-indexed products' routing (moe_route's sections): an expert's words in the
    /// stacked tensor, whether row i of X is pair i's token's row, and the sections' offsets.
    struct Routing: KernelParams {
        var expertWords: UInt32 = 0, gather: UInt32 = 0, rowsOff: UInt32 = 0, idsOff: UInt32 = 0, expertsOff: UInt32 = 0
    }
    /// matvec.comp, matvec_dot.comp and matmul.comp with EXPERTS (M counts the pairs; matmul's
    /// the most rows one expert can have)
    struct ExpertProduct: KernelParams { var product = Product(), routing = Routing() }
    /// matvec_dot.comp with ROPE_KV: the Q|K|V product, then RoPE and the K/V stores
    /// (kv_store's page parameters); `eps` the norm's, for a SCALED input
    struct ProductRopeKV: KernelParams {
        var product = Product()
        var qDim: UInt32 = 0, kvDim: UInt32 = 0, headDim: UInt32 = 0, ropeDim: UInt32 = 0
        var magnitude: Float = 0
        var pageSize: UInt32 = 0, pageStride: UInt32 = 0, layerOff: UInt32 = 0
        var eps: Float = 0
    }
    /// matvec_dot_q8out.comp: `act` the GLU mode's activation, `eps` the norm's (residual mode)
    struct ProductQ8Out: KernelParams {
        var k: UInt32 = 0, rowBytes: UInt32 = 0, act: UInt32 = 0
        var eps: Float = 0
    }
    /// matmul_coop.comp and matmul_cm2.comp (X as to_f16's rows, xStride its padded K): split
    /// `plane` of split-K, each split `splitUnits` units of 16 values (UInt32.max: one split)
    struct CoopProduct: KernelParams {
        var k: UInt32 = 0, n: UInt32 = 0, m: UInt32 = 0, rowBytes: UInt32 = 0, xStride: UInt32 = 0, yStride: UInt32 = 0
        var splitUnits: UInt32 = 0, plane: UInt32 = 0
    }
    /// matmul_coop.comp with EXPERTS
    struct CoopExpertProduct: KernelParams { var product = CoopProduct(), routing = Routing() }
    /// matmul_coop_batch.comp: the last split of a tile adds the `splits` planes into Y
    /// (outStride apart)
    struct CoopBatchProduct: KernelParams {
        var product = CoopProduct()
        var outStride: UInt32 = 0, splits: UInt32 = 0
    }
    /// attention.comp (decode's split-K over the pages; Q8 also writes 8-bit blocks)
    struct Attention: KernelParams {
        var n: UInt32 = 0, heads: UInt32 = 0, kvHeads: UInt32 = 0, headDim: UInt32 = 0, kvDim: UInt32 = 0, pageSize: UInt32 = 0,
            pageStride: UInt32 = 0, layerOff: UInt32 = 0
        var scale: Float = 0
        var chunk: UInt32 = 0, splits: UInt32 = 0, qStride: UInt32 = 0
        var softcap: Float = 0
        var window: UInt32 = 0
        /// 1: the layer's attention sinks (attention_sink.glsl) are bound
        var sinks: UInt32 = 0
        /// The values: vDim dimensions from vOff of each V head (0: all headDim; MLA's latent part)
        var vOff: UInt32 = 0, vDim: UInt32 = 0
    }
    /// attention.comp with F16OUT: the output also as to_f16's rows, x16Stride halves apart
    struct AttentionX16: KernelParams {
        var attention = Attention()
        var x16Stride: UInt32 = 0
    }
    /// attention_tiled.comp and attention_coop.comp (prefill's tiles over the pages)
    struct AttentionTiles: KernelParams {
        var heads: UInt32 = 0, kvHeads: UInt32 = 0, headDim: UInt32 = 0, kvDim: UInt32 = 0, pageSize: UInt32 = 0, pageStride: UInt32 = 0,
            layerOff: UInt32 = 0
        var scale: Float = 0
        var qStride: UInt32 = 0
        var softcap: Float = 0
        var window: UInt32 = 0, chunk: UInt32 = 0, splits: UInt32 = 0, sinks: UInt32 = 0
    }
    /// attention_cm2.comp: tokens first..<end over kv_gather's contiguous keys (cap rows a plane)
    struct AttentionCM2: KernelParams {
        var first: UInt32 = 0, end: UInt32 = 0, heads: UInt32 = 0, kvHeads: UInt32 = 0, kvDim: UInt32 = 0, qStride: UInt32 = 0, cap: UInt32 = 0
        var scale: Float = 0
        var chunk: UInt32 = 0, splits: UInt32 = 0
    }
    /// attention_combine.comp (and its Q8 output)
    struct AttentionCombine: KernelParams {
        var n: UInt32 = 0, heads: UInt32 = 0, headDim: UInt32 = 0, chunk: UInt32 = 0, splits: UInt32 = 0, sinks: UInt32 = 0
    }
    /// kv_gather.comp: a sequence's `keys` keys (padded rows) from page table row `pt`
    struct KVGather: KernelParams {
        var kvDim: UInt32 = 0, headDim: UInt32 = 0, pageSize: UInt32 = 0, pageStride: UInt32 = 0, layerOff: UInt32 = 0
        var keys: UInt32 = 0, padded: UInt32 = 0, cap: UInt32 = 0, pt: UInt32 = 0
    }
    /// moe_combine.comp
    struct MoECombine: KernelParams { var width: UInt32 = 0, used: UInt32 = 0, sharedExpert: UInt32 = 0, yStride: UInt32 = 0, tokens: UInt32 = 0 }
}
