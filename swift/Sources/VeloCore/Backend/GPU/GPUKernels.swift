#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The kernels of `shaders/` as the hosts see them: names, buffer counts, specialization
/// constants and dispatch sizes (shaders/README.md is the other half of this contract).
/// Constant 0 is always the workgroup size: Metal needs it at dispatch as threads per group.
enum GPUKernels {
    struct Kernel {
        let name: String
        let buffers: Int
        let constants: [UInt32]
    }

    /// Weight types with GPU kernels (every type the CPU computes with). Kernel names end in the
    /// lowercased ggml name (`matvec_q2_k`, `get_rows_iq4_nl`), the Makefile's WTYPES.
    static let weightTypes: [GGMLType] = [.f32, .f16, .bf16, .q4_0, .q4_1, .q5_0, .q5_1, .q8_0, .q4_K, .q5_K, .q6_K,
                                          .q2_K, .q3_K, .iq4_nl, .iq4_xs, .mxfp4]

    static func suffix(_ t: GGMLType) -> String { suffixes[t] ?? t.name.lowercased() }
    /// Made once: kernels are looked up for every dispatch of every step.
    private static let suffixes: [GGMLType: String] = Dictionary(uniqueKeysWithValues: weightTypes.map { ($0, $0.name.lowercased()) })

    // matrix × vector (decode): NCOLS activation rows per weight read (1, 2, 4, 8 or 16: the
    // smallest that covers the batch), ROWS weight rows per group, THREADS per group
    static let matvecLocal: UInt32 = tuning?.local ?? 128
    static let matvecRowsPerGroup = tuning?.rows ?? 4
    /// The 8-bit-activation kernel in smaller groups: 64 threads over 2 weight rows decoded 8B
    /// Q4_0 at 248.7 t/s against 238.8 with 128 over 4, and 8 sequences at 937 against 785
    /// (H100, bench/RESULTS.md).
    static let matvecDotLocal: UInt32 = tuning?.local ?? 64
    static let matvecDotRowsPerGroup = tuning?.rows ?? 2
    /// VELO_GPU_MATVEC=THREADS,ROWS overrides both shapes (tuning runs on a device; ROWS even,
    /// for the gated-MLP pairs; more than 8 would spill the accumulators).
    private static let tuning: (local: UInt32, rows: Int)? = {
        guard let s = getenv("VELO_GPU_MATVEC").map({ String(cString: $0) }) else { return nil }
        let f = s.split(separator: ",").compactMap { Int($0) }
        guard f.count == 2, [32, 64, 128, 256, 512].contains(f[0]), [2, 4, 6, 8].contains(f[1]) else {
            fputs("velo: ignoring VELO_GPU_MATVEC=\(s) (expected THREADS,ROWS: THREADS 32…512, a power of two; ROWS 2, 4, 6 or 8)\n", stderr)
            return nil
        }
        return (UInt32(f[0]), f[1])
    }()
    /// Up to this many activation rows go through matvec, reading each weight once; more go
    /// through the tiled (tensor-core where there are some) matmul. The matvec kernels' limit;
    /// a model's own crossover is `matvecMaxRows(device:model:)`. VELO_GPU_MATVEC_MAX_ROWS
    /// (1…16) sets both (tuning runs on a device).
    static let matvecMaxRows: Int = matvecRowsSwitch ?? 16
    private static let matvecRowsSwitch: Int? = {
        guard let e = getenv("VELO_GPU_MATVEC_MAX_ROWS") else { return nil }
        if let v = Int(String(cString: e)), (1...16).contains(v) { return v }
        fputs("velo: ignoring VELO_GPU_MATVEC_MAX_ROWS=\(String(cString: e)) (expected 1…16)\n", stderr)
        return nil
    }()
    /// A model's crossover from matvec to the tiled products. matvec_dot_batch_T's cost grows
    /// with the rows (dp4a and shared-memory reads a row: an 8B's gate/up took 60.7 µs at 8
    /// rows and 123 at 16 on an H200), matmul_coop_batch_T's barely does; so where every layer
    /// product has the tensor-core batch kernel, batches past 8 rows take it. Other models keep
    /// matvec up to 16 rows: K-quant products of 9–16 rows through matmul_coop_T were slower
    /// (bench/RESULTS.md).
    static func matvecMaxRows(device: GPUDevice, model: LanguageModel) -> Int {
        if let v = matvecRowsSwitch { return v }
        let c = model.config
        return matvecMaxRows(layerProducts: model.matrices.filter { $0.rows != c.vocabSize }, experts: c.experts != nil,
                             tensorCores: useCoop(device) && integerDot(device))
    }
    /// The rule above, for the layers' products (the embedding and output left out).
    static func matvecMaxRows(layerProducts: [WeightMatrix], experts: Bool, tensorCores: Bool) -> Int {
        let batchKernel = tensorCores && !experts && !layerProducts.isEmpty
            && layerProducts.allSatisfy { useCoopBatch($0.type, rows: 16, k: $0.cols) }
        return batchKernel ? 8 : 16
    }
    /// Weights of at most this many rows (a mixture-of-experts router: one row an expert) go
    /// through matvec at any batch: the tiled matmul makes a handful of workgroups of them
    /// (Qwen3-30B-A3B's 128 x 2048 router at 512 tokens: 16 of 256 threads, 268 µs a layer on
    /// an H100).
    static let matvecAnyRows = 256
    // tiled matrix × matrix (prefill)
    static let matmulBM = 64
    static let matmulBN = 64

    static func matvecCols(_ m: Int) -> Int { m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : m <= 8 ? 8 : 16 }
    /// Weight rows per workgroup for a product of `n` rows: the tuned count, or 1 where that
    /// would leave fewer than `matvecSmallGroups` workgroups a column group (a router's 128 rows:
    /// 32 groups at 4 rows, too few to keep a large GPU's memory busy). GLU mode keeps the pairs
    /// (an even count); a VELO_GPU_MATVEC override holds for every N.
    static func matvecRows(n: Int, dot: Bool = false, glu: Bool = false) -> Int {
        let rows = dot ? matvecDotRowsPerGroup : matvecRowsPerGroup
        return tuning == nil && !glu && (n + rows - 1) / rows < matvecSmallGroups ? 1 : rows
    }
    static let matvecSmallGroups = 256
    /// matvec_T for `m` activation rows of a weight of `n` rows (`glu`: interleaved pairs).
    static func matvec(_ t: GGMLType, rows m: Int, n: Int, glu: Bool = false) -> Kernel {
        Kernel(name: "matvec_" + suffix(t), buffers: 3, constants: [matvecLocal, UInt32(matvecCols(m)), UInt32(matvecRows(n: n, glu: glu))])
    }
    static func matvecGroups(n: Int, m: Int, dot: Bool = false, glu: Bool = false) -> (Int, Int, Int) {
        let cols = matvecCols(m), rows = matvecRows(n: n, dot: dot, glu: glu)
        return ((n + rows - 1) / rows, (m + cols - 1) / cols, 1)
    }
    /// Weight types with an 8-bit-activation matvec (`matvec_dot_T`: integer dot products with
    /// the activations quantized once per input by `quantizeQ8`), on devices that have them.
    /// Q4_K and Q6_K joined them: 8B Q4_K_M-shaped tg128 133.8 -> 192.4 -> ~197 t/s on the H100;
    /// then Q5_K (the 8B Q5_K_M-like file decoded at 127.9 t/s without it; bench/RESULTS.md);
    /// MXFP4 so that gpt-oss's experts round their inputs to Q8_0 as llama.cpp's do.
    static let dotTypes: Set<GGMLType> = [.q4_0, .q4_1, .q5_0, .q5_1, .q8_0, .q4_K, .q5_K, .q6_K, .mxfp4]
    /// The logits product keeps float activations (`matvec_T`) unless VELO_GPU_OUTPUT_DOT is set
    /// (A/B runs): on 8-bit ones an 8B Q4_0's logits sat 1.07e-2 from the float32 path, against
    /// llama.cpp's own 2.8e-3 and 1.8e-5 with float ones (bench/RESULTS.md).
    static let outputDot = getenv("VELO_GPU_OUTPUT_DOT") != nil
    /// VELO_GPU_NO_DOT (any value) keeps decode on the float matvec_T (A/B checks).
    static let dotDisabled = getenv("VELO_GPU_NO_DOT") != nil
    /// Whether matvec_dot_T runs on this device: Vulkan with VK_KHR_shader_integer_dot_product.
    /// (Metal keeps matvec_T: Apple GPUs have no packed 4x8-bit dot instruction, so the
    /// translated kernel would only emulate it.)
    static func integerDot(_ device: GPUDevice) -> Bool {
        #if canImport(CVulkan)
        if let v = device as? VulkanDevice { return v.integerDot && !dotDisabled }
        #endif
        return false
    }
    /// Buffers: W, XQ, XD (quantize_q8's outputs), Y; dispatched as matvec_T (matvecGroups, dot).
    static func matvecDot(_ t: GGMLType, rows m: Int, n: Int, glu: Bool = false) -> Kernel {
        Kernel(name: "matvec_dot_" + suffix(t), buffers: 4,
               constants: [matvecDotLocal, UInt32(matvecCols(m)), UInt32(matvecRows(n: n, dot: true, glu: glu))])
    }
    /// matvec_dot_T joined with rope_store's work for a decode token's Q|K|V product
    /// (matvec_dot_rope_T, -DROPE_KV): 2 weight rows a group (a rotary pair), f32 or f16 caches
    /// (both K and V). Buffers W, XQ, XD, Y, kv, tokpos, tokpt, pagetab, freqs, S, B;
    /// `scaled`: its input is matvec_dot_q8out_T's residual-mode output, S that kernel's sums
    /// of squares; `neox`: the rope's (i, i + ropeDim/2) pairs; `bias`: B holds the Q|K|V
    /// rows' biases, added first.
    static func matvecDotRope(_ t: GGMLType, kv: KVCacheType, scaled: Bool = false, neox: Bool = false, bias: Bool = false) -> Kernel {
        Kernel(name: "matvec_dot_rope_" + suffix(t) + kvSuffix(kv, kv), buffers: 11,
               constants: [matvecDotLocal, 1, 2, scaled ? 1 : 0, neox ? 1 : 0, bias ? 1 : 0])
    }
    /// matvec_dot_q8out_T: a decode token's product whose workgroups each make one block of 32
    /// outputs and write it as the next product's 8-bit input (residual mode: O and down, adding
    /// into the residual and leaving the norm's 1/rms to the next product; `glu`: gate/up).
    /// Buffers W, AQ, AD, Y, NW, XQ, XD, S; params K, rowBytes, activation, eps; dispatch
    /// (outputs / 32, 1, 1).
    static func matvecDotQ8Out(_ t: GGMLType, glu: Bool, scaled: Bool) -> Kernel {
        let tpr = glu ? q8OutThreads.glu : q8OutThreads.residual
        return Kernel(name: "matvec_dot_q8out_" + suffix(t), buffers: 8,
                      constants: [UInt32(32 * tpr), UInt32(tpr), glu ? 1 : 0, scaled ? 1 : 0, UInt32(q8OutUnroll)])
    }
    /// Blocks of a row a matvec_dot_q8out_T thread loads before using them
    /// (VELO_GPU_Q8OUT_UNROLL: 1, 2 or 4; tuning runs: 2 and 4 were slower on an H200).
    static let q8OutUnroll: Int = {
        guard let e = getenv("VELO_GPU_Q8OUT_UNROLL") else { return 1 }
        if let v = Int(String(cString: e)), [1, 2, 4].contains(v) { return v }
        fputs("velo: ignoring VELO_GPU_Q8OUT_UNROLL=\(String(cString: e)) (expected 1, 2 or 4)\n", stderr)
        return 1
    }()
    /// Threads an output of matvec_dot_q8out_T in residual and GLU mode (VELO_GPU_Q8OUT_THREADS=R,G
    /// or one value for both: 8, 16 or 32; tuning runs).
    static let q8OutThreads: (residual: Int, glu: Int) = {
        guard let e = getenv("VELO_GPU_Q8OUT_THREADS") else { return (32, 32) }
        let v = String(cString: e).split(separator: ",").compactMap { Int($0) }
        if (v.count == 1 || v.count == 2), v.allSatisfy({ [8, 16, 32].contains($0) }) { return (v[0], v[v.count - 1]) }
        fputs("velo: ignoring VELO_GPU_Q8OUT_THREADS=\(String(cString: e)) (expected R[,G]: 8, 16 or 32 each)\n", stderr)
        return (32, 32)
    }()
    /// VELO_GPU_NO_Q8OUT (any value): decode keeps quantize_q8 and add_rms_norm_q8 as dispatches
    /// of their own (A/B runs).
    static let q8OutDisabled = getenv("VELO_GPU_NO_Q8OUT") != nil
    /// Whether the device takes matvec_dot_q8out_T's workgroups (32 outputs × their threads).
    static func q8OutFits(_ device: GPUDevice) -> Bool {
        #if canImport(CVulkan)
        if let v = device as? VulkanDevice { return v.maxWorkgroupThreads >= 32 * max(q8OutThreads.residual, q8OutThreads.glu) }
        #endif
        return false
    }
    /// Whether a decode token's O, down and gate/up products can write the next product's 8-bit
    /// input (matvec_dot_q8out_T): Llama-shaped layers (no head norms or post norms, Q|K|V
    /// biases on every layer or none, dense gated MLPs), every layer product of an 8-bit-dot
    /// type, widths in whole blocks. The norm's float output is then never written, so nothing
    /// but these products may read it.
    static func q8OutModel(_ model: LanguageModel) -> Bool {
        let c = model.config
        // the norms, and Q|K|V biases only where every layer has them (Qwen2's: the Q|K|V product adds them)
        let biases = model.attentionBiases.count
        guard !q8OutDisabled, !fuseDisabled, tuning == nil, c.experts == nil, c.dim % 32 == 0, c.ffnDim % 32 == 0,
              biases == 0 || biases == c.layers, model.vectors.count == 2 * c.layers + 1 + 3 * biases,
              model.gatedPairs.count == c.layers else { return false }
        return model.matrices.filter { $0.rows != c.vocabSize }.allSatisfy { dotTypes.contains($0.type) }
    }
    /// The cache type matvec_dot_rope_T is joined for with this model and cache, or nil.
    static func ropeJoin(_ c: ModelConfig, kv: (KVCacheType, KVCacheType)) -> KVCacheType? {
        let fits = c.headDim % 2 == 0 && c.ropeDim % 2 == 0 && kv.0 == kv.1 && (kv.0 == .f32 || kv.0 == .f16)
        return fits && tuning == nil && !fuseDisabled ? kv.0 : nil
    }
    /// VELO_GPU_NO_FUSE (any value): decode's joined dispatches apart again (rope_store after
    /// the Q|K|V product, attention_combine_q8 after split attention), for A/B runs.
    static let fuseDisabled = getenv("VELO_GPU_NO_FUSE") != nil
    /// matvec_dot_batch_T: matvec_dot_T for 2…16 activation rows with many weight rows a
    /// workgroup (8 groups of 32 invocations, SGR rows each), the activation blocks shared
    /// through shared memory in chunks of 32 BPL blocks. Where it runs: Vulkan with integer dot
    /// products and subgroups of at most 32 (the sizes that divide 32), batches of at least
    /// MINROWS rows. VELO_GPU_DOT_BATCH=SGR,BPL,MINROWS[,THREADS] sets the shape (SGR 2 or 4,
    /// BPL 1 or 2, MINROWS 1…17 (17 turns it off), THREADS 64, 128 or 256). 8B Q4_0 on the H100, 8 / 16 sequences (`h100.sh
    /// batchvariants`, one call): matvec_dot_T 926–951 / 1029–1043 t/s; (2,1) 1049 / 1189; (2,2)
    /// 1057 / 1239; (4,1) 895 / 969; (4,2) 986 / 990 (bench/RESULTS.md).
    static let dotBatch: (sgr: Int, bpl: Int, minRows: Int, local: Int) = {
        if let e = getenv("VELO_GPU_DOT_BATCH") {
            let v = String(cString: e).split(separator: ",").compactMap { Int($0) }
            if v.count == 3 || v.count == 4, [2, 4].contains(v[0]), [1, 2].contains(v[1]), (1...17).contains(v[2]),
               v.count == 3 || [64, 128, 256].contains(v[3]) { return (v[0], v[1], v[2], v.count == 4 ? v[3] : 256) }
            fputs("velo: ignoring VELO_GPU_DOT_BATCH=\(String(cString: e)) (expected SGR,BPL,MINROWS[,THREADS]: SGR 2 or 4, BPL 1 or 2, MINROWS 1…17, THREADS 64, 128 or 256)\n", stderr)
        }
        return (2, 2, 2, 256)
    }()
    static var dotBatchLocal: Int { dotBatch.local }
    /// Whether the device runs it at all (asked once, by GPUForward at set-up), and whether a
    /// product of `m` activation rows takes it.
    static func dotBatchFits(_ device: GPUDevice) -> Bool {
        #if canImport(CVulkan)
        if let v = device as? VulkanDevice { return [4, 8, 16, 32].contains(v.subgroupSize) }
        #endif
        return false
    }
    static func dotBatchTakes(rows m: Int) -> Bool { m >= dotBatch.minRows }
    static func matvecDotBatch(_ t: GGMLType, rows m: Int) -> Kernel {
        Kernel(name: "matvec_dot_batch_" + suffix(t), buffers: 4,
               constants: [UInt32(dotBatchLocal), UInt32(matvecCols(m)), UInt32(dotBatch.sgr), UInt32(dotBatch.bpl)])
    }
    static func matvecDotBatchGroups(n: Int, m: Int) -> (Int, Int, Int) {
        let rows = dotBatch.sgr * dotBatchLocal / 32, cols = matvecCols(m)
        return ((n + rows - 1) / rows, (m + cols - 1) / cols, 1)
    }
    /// matvec_dot_T over a stacked expert tensor (-DEXPERTS), a routed pair a group: buffers W,
    /// XQ, XD (quantize_q8 of the gathered input rows or of the pairs' rows), Y, R
    /// (moe_route's); params as matvec_id_T. Rows of at most 32 blocks (an expert's down, K =
    /// its FFN width) take one 32-thread group over 4 weight rows, so that more of the threads
    /// have a block each; longer rows matvec_dot_T's shape.
    static func matvecDotID(_ t: GGMLType, k: Int) -> Kernel {
        let s = matvecDotIDShape(k: k)
        return Kernel(name: "matvec_dot_id_" + suffix(t), buffers: 5, constants: [s.local, 1, UInt32(s.rows)])
    }
    static func matvecDotIDShape(k: Int) -> (local: UInt32, rows: Int) {
        if tuning == nil && k / 32 <= 32 { return (32, 4) }
        return (matvecDotLocal, matvecDotRowsPerGroup)
    }
    static func matvecDotIDGroups(n: Int, k: Int, pairs: Int) -> (Int, Int, Int) {
        let rows = matvecDotIDShape(k: k).rows
        return ((n + rows - 1) / rows, pairs, 1)
    }
    /// Activation rows to 8-bit blocks of 32 (X, XQ, XD): 8 threads per block.
    static let quantizeQ8 = Kernel(name: "quantize_q8", buffers: 3, constants: [256])
    static func quantizeQ8Groups(k: Int, m: Int) -> (Int, Int, Int) { ((k / 32 + 31) / 32, m, 1) }
    /// Bytes of quantize_q8's outputs for `m` rows of `k` values: values (XQ), (d, sum) pairs (XD).
    static func q8Bytes(k: Int, m: Int) -> (values: Int, scales: Int) { (m * k, m * (k / 32) * 8) }
    static func matmul(_ t: GGMLType) -> Kernel {
        Kernel(name: "matmul_" + suffix(t), buffers: 3, constants: [256, UInt32(matmulBM), UInt32(matmulBN)])
    }
    static func matmulGroups(n: Int, m: Int) -> (Int, Int, Int) {
        ((n + matmulBN - 1) / matmulBN, (m + matmulBM - 1) / matmulBM, 1)
    }
    // tiled matrix × matrix on tensor cores (cooperative matrices, Vulkan only): 128 × 128
    // tiles, 256 threads (8 subgroups of 32); see shaders/matmul_coop.comp
    static let matmulCoopTile = 128
    /// VELO_GPU_NO_COOPMAT (any value) keeps prefill on the portable matmul_T (A/B checks).
    static let coopDisabled = getenv("VELO_GPU_NO_COOPMAT") != nil
    static func useCoop(_ device: GPUDevice) -> Bool { device.cooperativeMatrix && !coopDisabled }
    /// Weight types whose tensor-core products were checked on a device with cooperative
    /// matrices (bench/gpu/coopmat-check.ts on the H100 and H200, against the GPU's float32 path;
    /// lavapipe has none): Q4_0, Q8_0, the Q4_K and Q5_K models (with Q6_K). The others (Q2_K,
    /// Q3_K, IQ4_NL and IQ4_XS included: their matmul_coop_T variants are built but unchecked)
    /// keep the portable matmul_T until each is checked.
    static let coopTypes: Set<GGMLType> = [.q4_0, .q8_0, .q4_K, .q5_K, .q6_K]
    static func useCoop(_ device: GPUDevice, _ t: GGMLType) -> Bool { useCoop(device) && coopTypes.contains(t) }
    typealias CoopShape = (tm: Int, prefetch: Int, wgm: Int, bk: Int, stages: Int)
    /// matmul_coop_T for `m` activation rows: tiles of as few rows as hold them for batches of
    /// decoding sequences (17-64 rows: most of a 128-row tile would be empty, and smaller tiles
    /// make more workgroups), the prefill shape above that.
    static func matmulCoop(_ t: GGMLType, rows m: Int) -> Kernel {
        let s = coopShape(rows: m)
        return Kernel(name: "matmul_coop_" + suffix(t), buffers: 3,
                      constants: [UInt32(128 * s.wgm), UInt32(s.tm), UInt32(s.prefetch), UInt32(s.wgm), UInt32(s.bk), UInt32(s.stages)])
    }
    /// 8B Q4_0 on the H100, decode of 32 / 64 sequences (bench/RESULTS.md, `h100.sh rows` under
    /// VELO_GPU_COOP): 1307 / 2070 t/s with the prefill shape, 1636 / 1962 with 32-row tiles
    /// (1,0,2), 1532 / 2367 with 64-row tiles (2,0,2). VELO_GPU_COOP sets one shape for all.
    static func coopShape(rows m: Int) -> CoopShape {
        if coopShapeOverridden { return coopShape }
        if m <= 32 { return (1, 0, 2, 64, 1) }
        if m <= 64 { return (2, 0, 2, 64, 1) }
        return coopShape
    }
    static let coopShapeOverridden = getenv("VELO_GPU_COOP") != nil
    /// matmul_coop_T's 16-row tiles per subgroup along M, its prefetch switch, its subgroups
    /// along M (activation rows per workgroup: 16 TM WGM), values of K a step and shared
    /// buffers; VELO_GPU_COOP=TM,PREFETCH,WGM[,BK,STAGES] overrides them (tuning runs; shapes
    /// past 48 KiB of shared memory are refused).
    static let coopShape: CoopShape = {
        if let e = getenv("VELO_GPU_COOP") {
            let v = String(cString: e).split(separator: ",").compactMap { Int($0) }
            if v.count == 3 || v.count == 5, [1, 2, 4].contains(v[0]), [0, 1].contains(v[1]), [1, 2, 4].contains(v[2]) {
                let bk = v.count == 5 ? v[3] : 64, stages = v.count == 5 ? v[4] : 1
                let shared = stages * (16 * v[0] * v[2] + 128) * (bk + 8) * 2 + 8192
                if [16, 32, 64, 128].contains(bk), [1, 2].contains(stages), shared <= 49152 { return (v[0], v[1], v[2], bk, stages) }
            }
            fputs("velo: ignoring VELO_GPU_COOP=\(String(cString: e)) (expected TM,PREFETCH,WGM[,BK,STAGES] within 48 KiB of shared memory)\n", stderr)
        }
        // 128 x 128 tiles of 16 subgroups, each 32 x 32, no register prefetch: 112 registers a
        // thread on the H100 (8 subgroups of 64 x 32 took 185, one workgroup an SM); 8B Q4_0
        // pp512 7341 against 6658 for 8 subgroups of 32 x 32 and 5905 for 8 of 64 x 32
        // (bench/RESULTS.md)
        return (2, 0, 4, 64, 1)
    }()
    /// matmul_cm2_T: the tensor-core product through VK_NV_cooperative_matrix2 (a workgroup-scope
    /// tile, weight blocks decoded by the driver's block loads), for the weight types it has a
    /// decode callback for. Prefill takes it wherever the device has the extension, for products
    /// of at least `cm2MinRows` activation rows (fewer keep matmul_coop_T and the decode-batch
    /// kernels). On the H200 it beat matmul_coop_T from 64 rows up, 8B Q4_0 pp512 by 1.30x
    /// (bench/RESULTS.md).
    /// VELO_GPU_CM2=off leaves it out (the device then does not enable the extension);
    /// VELO_GPU_CM2=THREADS,TW,TX,BK,UNROLL sets the tile (weight rows x activation rows), the
    /// values a step, the steps unrolled and the workgroup; VELO_GPU_CM2_MIN_ROWS the threshold.
    /// Q4_K's and Q5_K's callbacks read a scale table that THREADS / TW threads fill for each
    /// weight row (one of 1, 2, 4, 8). VELO_GPU_CM2_KQUANTS=off leaves K-quants on matmul_coop_T;
    /// =TYPE,... lets only the K-quants named take matmul_cm2_T (A/B runs).
    static let cm2Types: Set<GGMLType> = {
        var kquants: Set<GGMLType> = [.q6_K]
        if cm2Shape.threads % cm2Shape.tw == 0, [1, 2, 4, 8].contains(cm2Shape.threads / cm2Shape.tw) { kquants.formUnion([.q4_K, .q5_K]) }
        if let e = getenv("VELO_GPU_CM2_KQUANTS").map({ String(cString: $0) }) {
            kquants = e == "off" ? [] : kquants.filter { t in e.split(separator: ",").contains { $0.lowercased() == t.name.lowercased() } }
        }
        return kquants.union([.q4_0, .q8_0])
    }()
    static let cm2Wanted = getenv("VELO_GPU_CM2").map { String(cString: $0) != "off" } ?? true
    static let cm2MinRows = getenv("VELO_GPU_CM2_MIN_ROWS").flatMap { Int(String(cString: $0)) } ?? 64
    /// VELO_GPU_CM2_AT_LOAD (any value): the load waits for matmul_cm2_T's pipelines instead of
    /// building them in the background (A/B runs of first-load time).
    static let cm2AtLoad = getenv("VELO_GPU_CM2_AT_LOAD") != nil
    static func useCM2(_ t: GGMLType, rows: Int) -> Bool { cm2Types.contains(t) && rows >= cm2MinRows }
    /// Whether the device enabled the extension (asked once, by GPUForward at set-up).
    static func hasCM2(_ device: GPUDevice) -> Bool {
        #if canImport(CVulkan)
        if let v = device as? VulkanDevice { return v.cooperativeMatrix2 }
        #endif
        return false
    }
    static let cm2Shape: (threads: Int, tw: Int, tx: Int, bk: Int, unroll: Int) = {
        // 128 weight rows x 256 activation rows, 64 values a step, 8 steps unrolled (255
        // registers): on the H200 8B Q4_0 pp512 10141; 128 x 128 10092; 256 x 128 at 32 values
        // and 4 steps 7606 (bench/RESULTS.md)
        let best = (256, 128, 256, 64, 8)
        guard let e = getenv("VELO_GPU_CM2"), !["on", "off"].contains(String(cString: e)) else { return best }
        let v = String(cString: e).split(separator: ",").compactMap { Int($0) }
        if v.count == 5, [128, 256, 512].contains(v[0]), [32, 64, 128, 256].contains(v[1]), [64, 128, 256].contains(v[2]),
           [32, 64].contains(v[3]), [1, 2, 4, 8].contains(v[4]) { return (v[0], v[1], v[2], v[3], v[4]) }
        fputs("velo: VELO_GPU_CM2=\(String(cString: e)) is not a shape (expected on, off, or THREADS,TW,TX,BK,UNROLL: THREADS 128, 256 or 512; TW 32…256; TX 64, 128 or 256; BK 32 or 64; UNROLL 1…8); using \(best)\n", stderr)
        return best
    }()
    /// The weight types whose products sum in float16 (matmul_cm2h_T, llama.cpp's choice for
    /// default-precision products): every type matmul_cm2_T takes. On an H200, 8B Q4_0 pp512
    /// 11700 against 9964 with float32 sums, max |Δlogit| 1.04e-2 against 9.2e-3 from the
    /// float32 path; the 8B Q4_K_M-like file 10656 against 9560, 1.86e-1 against 4.7e-2, where
    /// llama.cpp's own GPU logits for the same prompt sit 2.29e-1 from that path
    /// (bench/RESULTS.md): float16 sums stay within the reference's rounding. A sum past 65504
    /// overflows; the norms after it see the inf or NaN and GPUForward re-runs the pass with
    /// float32 sums (`GPUForward.widen`). VELO_GPU_CM2_ACC=f16 (every type), f32 (none) or
    /// TYPE,... (those).
    static let cm2F16Sums: Set<GGMLType> = {
        let standard = cm2Types
        guard let e = getenv("VELO_GPU_CM2_ACC").map({ String(cString: $0) }) else { return standard }
        if e == "f16" { return cm2Types }
        if e == "f32" { return [] }
        let named = Set(e.split(separator: ",").compactMap { n in cm2Types.first { $0.name.lowercased() == n.lowercased() } })
        if named.isEmpty { fputs("velo: ignoring VELO_GPU_CM2_ACC=\(e) (expected f16, f32 or weight types such as q4_0,q8_0)\n", stderr); return standard }
        return named
    }()
    static func matmulCM2(_ t: GGMLType, f16Sums: Bool) -> Kernel {
        let s = cm2Shape
        return Kernel(name: (f16Sums ? "matmul_cm2h_" : "matmul_cm2_") + suffix(t), buffers: 3,
                      constants: [UInt32(s.threads), UInt32(s.tw), UInt32(s.tx), UInt32(s.bk), UInt32(s.unroll)])
    }
    static func matmulCM2Groups(n: Int, m: Int) -> (Int, Int, Int) {
        ((n + cm2Shape.tw - 1) / cm2Shape.tw, (m + cm2Shape.tx - 1) / cm2Shape.tx, 1)
    }
    /// matmul_coop_batch_T: tensor-core products for decode batches of 9 (or 17: see
    /// matvecMaxRows(device:model:)) to 32 rows, each
    /// subgroup streaming its own chunks of 32 weight rows (shaders/matmul_coop_batch.comp),
    /// Q4_0 and Q8_0. 8B Q4_0 on an H200 (bench/RESULTS.md): 32 sequences decode 2125 t/s
    /// against 1667-1714 through matmul_coop_T; at 64 rows the two were even (2589 / 2615),
    /// so 33 rows and more keep matmul_coop_T. VELO_GPU_COOP_BATCH=SUBGROUPS,GROUPS,TILES sets
    /// the subgroups a workgroup (1, 2, 4 or 8; fewer where shared memory needs), the
    /// workgroups split-K aims for and the most 16-row activation tiles a workgroup (1-4; more
    /// rows take more workgroups); VELO_GPU_COOP_BATCH=off keeps matmul_coop_T (A/B runs).
    /// Without it, one 16-row tile (9-16 rows) takes 2 subgroups a workgroup, more take 4: 8B
    /// Q4_0 on an H200, 16 sequences 1823.0 / 1838.8 against 1746.9 with 4 and 1693.5 with 1;
    /// 32 sequences 2950.0 / 2945.4 with 4 (bench/RESULTS.md, tenth session).
    static let coopBatchTypes: Set<GGMLType> = [.q4_0, .q8_0]
    static let coopBatchRows = 32
    static let coopBatchShape: (subgroups: Int?, groups: Int, tiles: Int)? = {
        let best: (Int?, Int, Int) = (nil, 512, 4)
        guard let e = getenv("VELO_GPU_COOP_BATCH") else { return best }
        let s = String(cString: e)
        if s == "off" { return nil }
        let v = s.split(separator: ",").compactMap { Int($0) }
        if v.count == 3, [1, 2, 4, 8].contains(v[0]), v[1] >= 1, (1...4).contains(v[2]) { return (v[0], v[1], v[2]) }
        fputs("velo: ignoring VELO_GPU_COOP_BATCH=\(s) (expected off or SUBGROUPS,GROUPS,TILES: SUBGROUPS 1, 2, 4 or 8; TILES 1-4)\n", stderr)
        return best
    }()
    static func useCoopBatch(_ t: GGMLType, rows m: Int, k: Int) -> Bool {
        coopBatchShape != nil && m <= coopBatchRows && coopBatchTypes.contains(t) && k % 64 == 0
    }
    /// Shared memory of matmul_coop_batch_T (raw blocks, decoded chunks, activation tiles,
    /// partial sums), and the subgroups a workgroup: the shape's, halved until it fits 48 KiB.
    static func coopBatchShared(subgroups: Int, mt: Int, type t: GGMLType) -> Int {
        let cw = t == .q8_0 ? 17 : 9
        return subgroups * (32 * cw * 4 + 32 * 144 + 16 * mt * 144) + 2048 * mt
    }
    static func coopBatchSubgroups(_ t: GGMLType, rows m: Int) -> Int {
        var g = coopBatchShape?.subgroups ?? (coopBatchTiles(rows: m) == 1 ? 2 : 4)
        while g > 1, coopBatchShared(subgroups: g, mt: coopBatchTiles(rows: m), type: t) > 49152 { g /= 2 }
        return g
    }
    /// 16-row activation tiles a workgroup for `m` rows.
    /// Tiles (workgroups along N and M) of a split matmul_coop_batch_T that its counters cover;
    /// a split plan makes fewer than the shape's aim.
    static let coopBatchCounters = 4096
    /// VELO_GPU_SPLIT_SUM=dispatch: split-K sums by sum_splits again (A/B runs).
    static let coopBatchSumsSplits = getenv("VELO_GPU_SPLIT_SUM").map { String(cString: $0) } != "dispatch"
    static func coopBatchTiles(rows m: Int) -> Int { min((m + 15) / 16, coopBatchShape?.tiles ?? 4) }
    /// Buffers W, X (to_f16's), Y, Out, Done; params matmul_coop_T's and (outStride, splits):
    /// with splits > 1 the tile's last split adds the planes in Y into Out, counting on Done
    /// (coopBatchCounters zeros; the kernel leaves them zero).
    static func matmulCoopBatch(_ t: GGMLType, rows m: Int, n: Int, k: Int) -> Kernel {
        Kernel(name: "matmul_coop_batch_" + suffix(t), buffers: 5,
               constants: [UInt32(32 * coopBatchSubgroups(t, rows: m)), UInt32(coopBatchTiles(rows: m)), UInt32(coopBatchPrefetch(t, n: n, k: k))])
    }
    /// Chunks of weights a subgroup of matmul_coop_batch_T keeps in flight (its PF) for an
    /// N x K product: two for Q4_0 (H200, 8B: 16 sequences +3.6 %, 32 +4 %; three no better).
    /// Q8_0's chunk takes twice the registers: two paid on the 8B, whose products are all at
    /// least 4096 by 4096 (+3 %), and cost the 1.1B 2-3 % at 16 sequences (none is; two for its
    /// down product alone, 5632 wide, cost as much), so Q8_0 takes two only there
    /// (bench/RESULTS.md). VELO_GPU_COOP_BATCH_PREFETCH=1…4 overrides (A/B runs on a device).
    static func coopBatchPrefetch(_ t: GGMLType, n: Int, k: Int) -> Int {
        coopBatchPrefetchOverride ?? (t == .q4_0 || (n >= 4096 && k >= 4096) ? 2 : 1)
    }
    private static let coopBatchPrefetchOverride: Int? = {
        guard let e = getenv("VELO_GPU_COOP_BATCH_PREFETCH") else { return nil }
        if let v = Int(String(cString: e)), (1...4).contains(v) { return v }
        fputs("velo: ignoring VELO_GPU_COOP_BATCH_PREFETCH=\(String(cString: e)) (expected 1-4)\n", stderr)
        return nil
    }()
    /// Workgroups along N (32 rows each), and the split-K that brings the grid to the shape's
    /// aim while each subgroup keeps at least two chunks of 64 values a split; units (16
    /// values) a split.
    static func coopBatchPlan(n: Int, k: Int, rows m: Int, type t: GGMLType) -> (groups: Int, rowGroups: Int, splits: Int, splitUnits: Int) {
        let rowGroups = (m + 16 * coopBatchTiles(rows: m) - 1) / (16 * coopBatchTiles(rows: m))
        let groups = (n + 31) / 32, chunks = k / 64, sg = coopBatchSubgroups(t, rows: m), aim = coopBatchShape?.groups ?? 512
        var splits = 1
        while splits < 16, groups * rowGroups * splits < aim, chunks / (2 * splits) >= 2 * sg { splits *= 2 }
        return (groups, rowGroups, splits, (chunks + splits - 1) / splits * 4)
    }
    /// Activation rows of one tile of matmul_coop_T for `m` rows.
    static func matmulCoopRows(_ m: Int) -> Int { let s = coopShape(rows: m); return 16 * s.tm * s.wgm }
    /// Split-K for tensor-core products with few workgroups (the H100 has 132 SMs; an 8B's
    /// N = 4096 products at 512 rows make 128 workgroups of 8 subgroups, too few to hide
    /// latency): up to 4 splits of at least 1024 values of K each, quantized weights only (whole
    /// units of 16 values), while the grid stays under 256 workgroups. Each split writes its
    /// own plane of a scratch; `sumSplits` adds them into Y. VELO_GPU_NO_SPLITK (any value)
    /// turns it off (A/B checks).
    static func coopSplits(n: Int, m: Int, k: Int, type: GGMLType, tile: (Int, Int)? = nil) -> Int {
        guard ![.f32, .f16, .bf16].contains(type), !splitKDisabled else { return 1 }
        let tile = tile ?? (matmulCoopTile, matmulCoopRows(m))
        let wgs = ((n + tile.0 - 1) / tile.0) * ((m + tile.1 - 1) / tile.1)
        let cap = splitKTuning
        var s = 1
        while s < cap.splits, wgs * s < cap.groups, k / (2 * s) >= cap.minK { s *= 2 }
        return s
    }
    static let splitKDisabled = getenv("VELO_GPU_NO_SPLITK") != nil
    /// coopSplits' limits (most splits, fewest workgroups it aims for, least K a split);
    /// VELO_GPU_SPLITK=SPLITS,GROUPS,MINK overrides them (tuning runs on a device).
    static let splitKTuning: (splits: Int, groups: Int, minK: Int) = {
        if let e = getenv("VELO_GPU_SPLITK") {
            let v = String(cString: e).split(separator: ",").compactMap { Int($0) }
            if v.count == 3, (1...64).contains(v[0]), v[0].nonzeroBitCount == 1, v[1] >= 1, v[2] >= 64 { return (v[0], v[1], v[2]) }
            fputs("velo: ignoring VELO_GPU_SPLITK=\(String(cString: e)) (expected SPLITS,GROUPS,MINK: SPLITS a power of two up to 64, MINK at least 64)\n", stderr)
        }
        return (4, 256, 1024)
    }()
    /// Units (16 values) of K per split: a multiple of the kernel's 4 units a step (of 16, a
    /// K-quant block, for matmul_cm2_T, which steps a block at a time there).
    static func coopSplitUnits(k: Int, splits: Int, multiple: Int = 4) -> Int { ((k / 16 + splits - 1) / splits + multiple - 1) / multiple * multiple }
    /// P (splits planes of M x N), Y; params N, M, yStride, splits, plane (grid-stride).
    static let sumSplits = Kernel(name: "sum_splits", buffers: 2, constants: [256])

    /// Activation rows to float16 for matmul_coop_T (X, Y; rows of K padded with zeros to `f16Row(K)`).
    static let toF16 = Kernel(name: "to_f16", buffers: 2, constants: [256])
    static func f16Row(_ k: Int) -> Int { (k + 3) / 4 * 4 }
    static func toF16Groups(k: Int, m: Int) -> (Int, Int, Int) { ((f16Row(k) / 4 + 255) / 256, m, 1) }
    static func matmulCoopGroups(n: Int, m: Int) -> (Int, Int, Int) {
        ((n + matmulCoopTile - 1) / matmulCoopTile, (m + matmulCoopRows(m) - 1) / matmulCoopRows(m), 1)
    }
    static func getRows(_ t: GGMLType) -> Kernel { Kernel(name: "get_rows_" + suffix(t), buffers: 3, constants: [256]) }

    /// One workgroup of 1024 threads per row (4 independent loads per thread per step).
    /// Both set a flag word (their fifth buffer) when a row's sum of squares is not finite.
    static let rmsNorm = Kernel(name: "rms_norm", buffers: 5, constants: [1024])
    static let addRMSNorm = Kernel(name: "add_rms_norm", buffers: 5, constants: [1024])
    /// add_rms_norm and swiglu_pairs that also write to_f16's copy of their output (buffers + X16)
    /// for the tensor-core products that read it next: a to_f16 dispatch fewer each (Vulkan only;
    /// rows a multiple of 4 values). VELO_GPU_NO_F16_OUT (any value) keeps to_f16 (A/B runs).
    static let addRMSNormF16 = Kernel(name: "add_rms_norm_f16", buffers: 6, constants: [1024])
    static let swigluPairsF16 = Kernel(name: "swiglu_pairs_f16", buffers: 3, constants: [256])
    static let f16OutFused = getenv("VELO_GPU_NO_F16_OUT") == nil
    /// add_rms_norm that also writes its output as quantize_q8's blocks (buffers + XQ, XD), for
    /// rows of at most `addRMSNormQ8MaxWidth` values, a multiple of 32.
    /// 256 threads, 8 values a thread a run, 4 runs at most: rows of up to 8192 values.
    static let addRMSNormQ8 = Kernel(name: "add_rms_norm_q8", buffers: 6, constants: [256])
    static let addRMSNormQ8MaxWidth = 8192
    /// Both take the rope's per-pair frequencies as a buffer (`Rope`, uploaded once).
    static let rope = Kernel(name: "rope", buffers: 3, constants: [64])
    static let ropeStore = Kernel(name: "rope_store", buffers: 8, constants: [64])
    static let kvStore = Kernel(name: "kv_store", buffers: 6, constants: [64])
    /// The K/V page kernels are built once per (K type, V type) of the cache (shaders/kv_types.glsl),
    /// named `<kernel>_<k>_<v>`; f32/f32 keeps the plain name.
    static func kvSuffix(_ k: KVCacheType, _ v: KVCacheType) -> String { k == .f32 && v == .f32 ? "" : "_\(k.rawValue)_\(v.rawValue)" }
    static func kvVariant(_ kernel: Kernel, k: KVCacheType, v: KVCacheType) -> Kernel {
        Kernel(name: kernel.name + kvSuffix(k, v), buffers: kernel.buffers, constants: kernel.constants)
    }
    /// Split-K attention: (n, kvHeads, splits) workgroups, each over `chunk` keys of a token;
    /// with splits > 1 each writes partials to a scratch buffer and `attentionCombine`
    /// (`attentionCombineGroups`) merges them. Both take 128 threads (attention: exactly).
    static let attention = Kernel(name: "attention", buffers: 8, constants: [128])
    /// A decode attention kernel (attention, attention_q8 and their cache-type variants)
    /// specialised for `groupHeads` query heads a KV head: it keeps that many heads' state in
    /// registers (up to 8, the shader's GMAX) instead of 8. Llama 3 8B (4 a group) on an H200:
    /// 140 → 117 registers, attention at 16384 keys 100 → 79 µs a layer (bench/RESULTS.md).
    static func attentionGrouped(_ k: Kernel, groupHeads: Int, device: GPUDevice) -> Kernel {
        guard device.specializes, groupHeads < 8 else { return k }
        return Kernel(name: k.name, buffers: k.buffers, constants: [k.constants[0], UInt32(max(1, groupHeads))])
    }
    /// Decode attention over long caches in f16 (attention.comp's STAGED build): each tile's K
    /// and V loads issued at once, the pages' offsets read a tile ahead. 8B Q4_0 on an H200,
    /// tg128 after 16384 tokens: 172 → 191–195 t/s; after 4096: 255 → 267 (bench/RESULTS.md).
    static let attentionStaged = Kernel(name: "attention_staged_f16_f16", buffers: 8, constants: [128])
    static let attentionQ8Staged = Kernel(name: "attention_q8_staged_f16_f16", buffers: 11, constants: [128])
    /// Below this many keys the plain build is as fast: a step's attention is then a few
    /// workgroups, each a short chain of loads that staging does not shorten (bench/RESULTS.md).
    /// VELO_GPU_ATTN_STAGED_MIN_KEYS sets another threshold (tuning runs).
    static let attentionStagedMinKeys: Int = {
        guard let e = getenv("VELO_GPU_ATTN_STAGED_MIN_KEYS") else { return 1024 }
        if let v = Int(String(cString: e)), v >= 0 { return v }
        fputs("velo: ignoring VELO_GPU_ATTN_STAGED_MIN_KEYS=\(String(cString: e)) (expected a key count)\n", stderr)
        return 1024
    }()
    /// Workgroups a staged step aims for: about one wave of an H100 or H200 (132 SMs × 3 of them);
    /// a second, mostly empty wave costs more than it hides (16384 keys, 8 KV heads: 43 splits
    /// 196 t/s, 65 splits 178, 86 splits 193).
    static let attentionStagedWorkgroups = 384
    /// Keys of a staged tile (the kernel's TK / KT): 8192 halves of K at most, a power of two up to 128.
    static func attentionStagedTile(headDim: Int) -> Int {
        var t = 128
        while t * headDim > 8192 { t /= 2 }
        return t
    }
    /// Whether attention_staged takes these pages (the kernel checks the same and otherwise reads
    /// as the plain build does): f16 K and V, 8-key runs at 16-byte boundaries (page sizes and
    /// widths multiples of 8, planes at whole 16 bytes), head sizes whose tiles fit its registers.
    static func attentionStagedFits(k: KVCacheType, v: KVCacheType, pageSize: Int, kvDim: Int, headDim: Int,
                                    places: [(pageStride: Int, layerOff: Int)]) -> Bool {
        guard k == .f16, v == .f16, pageSize % 8 == 0, kvDim % 8 == 0, headDim % 4 == 0, headDim <= 256,
              headDim % 16 == 0 || headDim * 128 <= 8192,
              places.allSatisfy({ $0.pageStride % 4 == 0 && $0.layerOff % 4 == 0 }) else { return false }
        let cols = headDim / 4, groups = 128 / cols, tile = attentionStagedTile(headDim: headDim)
        return (tile + groups - 1) / groups <= 16
    }
    /// Keys per split and split count for staged decode: whole tiles a split, about
    /// `attentionStagedWorkgroups` workgroups over the step's tokens and KV heads, within the scratch.
    static func attentionStagedSplits(keys: Int, n: Int, kvHeads: Int, headDim: Int, maxTokens: Int, maxContext: Int) -> (chunk: Int, splits: Int) {
        let lim = attentionSplitLimit(maxTokens: maxTokens, maxContext: maxContext)
        let tile = attentionStagedTile(headDim: headDim), tiles = max(1, (keys + tile - 1) / tile)
        let wanted = attentionSplitsOverride ?? max(1, attentionStagedWorkgroups / max(1, kvHeads * n))
        let cap = max(1, min(lim.splits, wanted, lim.capacity / max(n, 1)))
        let chunk = (tiles + cap - 1) / cap * tile
        return (chunk, (keys + chunk - 1) / chunk)
    }
    static let attentionMaxHeadDim = 576, attentionMaxValueDim = 512
    /// Head sizes the attention kernels take (64 to 512, and MLA's 576-wide rows of which the
    /// values are the 512 after the RoPE part).
    static func attentionFits(headDim: Int, valueDim: Int) -> Bool {
        headDim % 4 == 0 && headDim <= attentionMaxHeadDim && valueDim % 4 == 0 && valueDim <= attentionMaxValueDim
    }
    static let attentionCombine = Kernel(name: "attention_combine", buffers: 4, constants: [128])
    /// attention_combine's (and attention_combine_q8's) grid: a workgroup a (token, head, block of
    /// 32 dimensions).
    static func attentionCombineGroups(n: Int, heads: Int, headDim: Int) -> (Int, Int, Int) { (n, heads, (headDim + 31) / 32) }
    /// attention that also writes its output as quantize_q8's blocks, a token's splits (up to
    /// `attentionJoinMaxSplits`) merged by the last of them to finish: buffers + XQ, XD and a
    /// zeroed counter a (token, KV head); head sizes as attention_combine_q8's. Decode needs no
    /// quantize_q8 (one split) or attention_combine_q8 (splits) after it (H100, 8B, a layer:
    /// 12.0 µs against 11.6 + 3.7 for one split; bench/RESULTS.md).
    static let attentionQ8 = Kernel(name: "attention_q8", buffers: 11, constants: [128])
    /// attention that also writes its output as to_f16's float16 rows, merging up to
    /// `attentionJoinMaxSplits` splits itself as attention_q8 does: buffers + X16 and the
    /// counters; params attention's + the float16 rows' stride (halves). For decode batches
    /// whose O product runs on tensor cores (9-32 rows of a Q4_0 or Q8_0 model): no
    /// attention_combine and no to_f16 after it. Vulkan only.
    static let attentionX16 = Kernel(name: "attention_x16", buffers: 10, constants: [128])
    /// Decode rows attention_x16 (and attention_q8) keep counters for.
    static let attentionJoinRows = 32
    /// VELO_GPU_NO_X16_ATTN (any value): decode batches on tensor cores take attention and
    /// attention_combine, then to_f16 (A/B runs).
    static let attentionX16Disabled = getenv("VELO_GPU_NO_X16_ATTN") != nil
    /// Most splits attention_q8 merges itself (the shader's JMAX); 1 with fuseDisabled.
    static let attentionJoinMaxSplits = fuseDisabled ? 1 : 16
    /// Prefill attention in FlashAttention-2 tiles: (blocks, kvHeads, splits) workgroups of 128
    /// threads, each over `attentionTiledRows` query rows (tokens × the heads of a KV group) that
    /// share every K/V tile it loads, and over one split of the keys (`prefillAttentionSplits`;
    /// partials merged by attentionCombine as for split-K). Head sizes: multiples of 4, at most 128.
    static let attentionTiled = Kernel(name: "attention_tiled", buffers: 9, constants: [128])
    static let attentionTiledRows = 32
    static let attentionTiledMaxHeadDim = 128
    /// Whether attention_tiled takes a model's heads: G = heads / kvHeads query heads per KV
    /// head fill at most one block's rows, head sizes a multiple of 4 up to 128.
    static func attentionTiledFits(heads: Int, kvHeads: Int, headDim: Int) -> Bool {
        kvHeads > 0 && heads % kvHeads == 0 && heads / kvHeads <= attentionTiledRows
            && headDim % 4 == 0 && headDim <= attentionTiledMaxHeadDim
    }
    /// attention_tiled's query blocks for a step's tokens (`sequence[t]`: token t's sequence):
    /// runs of consecutive tokens of one sequence, at most rows / G tokens each, as (first
    /// token, tokens) pairs.
    static func attentionQueryBlocks(sequence: [Int], group: Int, rows: Int = attentionTiledRows) -> [Int32] {
        guard !sequence.isEmpty else { return [] }
        let per = rows / group
        var blocks: [Int32] = []
        var start = 0
        for t in 1...sequence.count where t == sequence.count || sequence[t] != sequence[start] || t - start == per {
            blocks += [Int32(start), Int32(t - start)]
            start = t
        }
        return blocks
    }
    /// The blocks when attention_tiled should take the step: the heads fit and the blocks are
    /// at least half full on average. Decode steps (a token per sequence) stay with split-K
    /// attention, which spreads each token's keys over many workgroups.
    static func attentionBlocks(sequence: [Int], heads: Int, kvHeads: Int, headDim: Int, rows: Int = attentionTiledRows) -> [Int32]? {
        guard attentionTiledFits(heads: heads, kvHeads: kvHeads, headDim: headDim), heads / kvHeads <= rows else { return nil }
        let g = heads / kvHeads, blocks = attentionQueryBlocks(sequence: sequence, group: g, rows: rows)
        return !blocks.isEmpty && blocks.count / 2 * (rows / g) <= 2 * sequence.count ? blocks : nil
    }
    /// attention_tiled on tensor cores (Vulkan cooperative matrices): the same buffers,
    /// parameters and blocks, of `attentionCoopRows` query rows; head sizes multiples of 16 up
    /// to 128. VELO_GPU_NO_COOP_ATTN (any value) keeps attention_tiled (A/B checks).
    static let attentionCoop = Kernel(name: "attention_coop", buffers: 9, constants: [128])
    static let attentionCoopRows = 64
    static let coopAttentionDisabled = getenv("VELO_GPU_NO_COOP_ATTN") != nil
    static func useAttentionCoop(_ device: GPUDevice, heads: Int, kvHeads: Int, headDim: Int) -> Bool {
        useCoop(device) && !coopAttentionDisabled && headDim % 16 == 0
            && attentionTiledFits(heads: heads, kvHeads: kvHeads, headDim: headDim)
    }
    /// Prefill attention of one sequence on VK_NV_cooperative_matrix2 (attention_cm2: buffers Q,
    /// the gathered K/V, out, tokpos, partials; params first, end (the tokens), heads, kvHeads,
    /// kvDim, qStride, cap, scale, chunk, splits; groups (⌈(end - first) / BR⌉, heads, splits)), over kv_gather's contiguous
    /// float16 copy of the layer's keys (buffers pages, copy, page table; params kvDim, headDim,
    /// pageSize, pageStride, layerOff, keys, padded, cap, first page-table entry). It takes a
    /// step's last run of one sequence's tokens (`GPUForward.begin`: the whole step, or a prompt
    /// chunk of at least BR tokens after other sequences' tokens), with f16 pages, head sizes
    /// 64…128 in steps of 16, models without window or soft cap; the rest keep attention_coop
    /// and the decode kernels. 8B pp512 on an H200 (bench/RESULTS.md): attention
    /// 38.8 us a layer against attention_coop's 79.3 at no depth, 201 against 609 + 96 merging
    /// at depth 4096, 756 against 2056 + 96 at 16384. VELO_GPU_NO_CM2_ATTN (any value) leaves it
    /// out (VELO_GPU_NO_COOPMAT and VELO_GPU_CM2=off do too); VELO_GPU_CM2_ATTN=THREADS,BR,BC
    /// sets the workgroup and tile (A/B runs).
    static let attentionCM2Disabled = getenv("VELO_GPU_NO_CM2_ATTN") != nil
    static let attentionCM2Shape: (threads: Int, br: Int, bc: Int) = {
        let best = (128, 64, 64)
        guard let e = getenv("VELO_GPU_CM2_ATTN") else { return best }
        let v = String(cString: e).split(separator: ",").compactMap { Int($0) }
        if v.count == 3, [128, 256].contains(v[0]), [32, 64, 128].contains(v[1]), [32, 64].contains(v[2]) { return (v[0], v[1], v[2]) }
        fputs("velo: ignoring VELO_GPU_CM2_ATTN=\(String(cString: e)) (expected THREADS,BR,BC: 128 or 256; 32, 64 or 128; 32 or 64)\n", stderr)
        return best
    }()
    static func attentionCM2(headDim: Int) -> Kernel {
        let s = attentionCM2Shape
        return Kernel(name: "attention_cm2", buffers: 5, constants: [UInt32(s.threads), UInt32(s.br), UInt32(s.bc), UInt32(headDim)])
    }
    static let kvGather = Kernel(name: "kv_gather", buffers: 3, constants: [256])
    /// Whether the device and model suit attention_cm2: the extension, head sizes 64…128 in
    /// steps of 16, no soft cap or window on any layer (a layer on attention_coop would need a
    /// plan of its own). The memory plan counts its copy from this.
    static func attentionCM2Model(_ device: GPUDevice, _ c: ModelConfig) -> Bool {
        hasCM2(device) && useCoop(device) && !attentionCM2Disabled && c.layerHeads.isEmpty && c.headDim % 16 == 0 && (64...128).contains(c.headDim)
            && c.attentionSoftcap == 0 && c.layerWindow.allSatisfy { $0 == 0 }
    }
    /// ... and the pages: f16 K and V whose 8-key runs sit at 16-byte boundaries (kv_gather's copies).
    static func attentionCM2Fits(_ device: GPUDevice, _ c: ModelConfig, k: KVCacheType, v: KVCacheType, pageSize: Int, kvDim: Int,
                                 places: [(pageStride: Int, layerOff: Int)]) -> Bool {
        attentionCM2Model(device, c) && k == .f16 && v == .f16 && pageSize % 8 == 0 && kvDim % 8 == 0
            && places.allSatisfy({ $0.pageStride % 4 == 0 && $0.layerOff % 4 == 0 })
    }
    /// Keys the gathered copy holds for contexts of up to `maxContext`: whole tiles.
    static func attentionCM2Capacity(maxContext: Int) -> Int { (maxContext + 63) / 64 * 64 }
    /// kv_gather's groups for `padded` keys (grid-stride past 8192 groups).
    static func kvGatherGroups(padded: Int, kvDim: Int) -> (Int, Int, Int) { (min((kvDim * padded / 4 + 255) / 256, 8192), 1, 1) }
    /// attention_cm2's key splits, in whole tiles: as the tiled kernels' (prefillAttentionSplits)
    /// but to about `attentionCM2SplitTarget` workgroups, about one wave at its two workgroups a
    /// multiprocessor (255 registers). 8B pp512 at depth 16384 on an H200 (bench/RESULTS.md):
    /// its 256 workgroups unsplit 1877 us a layer, in 2 splits 1923, in 4 1923 + 96 merging.
    /// VELO_GPU_CM2_ATTN_SPLITS asks for a count.
    static func attentionCM2Splits(keys: Int, n: Int, heads: Int, maxTokens: Int, maxContext: Int) -> (chunk: Int, splits: Int) {
        prefillAttentionSplits(keys: keys, n: n, workgroups: (n + attentionCM2Shape.br - 1) / attentionCM2Shape.br * heads,
                               maxTokens: maxTokens, maxContext: maxContext, target: attentionCM2SplitTarget,
                               tile: attentionCM2Shape.bc, override: attentionCM2SplitsOverride)
    }
    static let attentionCM2SplitTarget = 256
    static let attentionCM2SplitsOverride: Int? = getenv("VELO_GPU_CM2_ATTN_SPLITS").flatMap { Int(String(cString: $0)) }.map { max(1, min(256, $0)) }
    /// attention_combine that also writes its output as quantize_q8's blocks (buffers + XQ, XD),
    /// for head sizes that are multiples of 32, at most `attentionCombineQ8MaxHeadDim`.
    static let attentionCombineQ8 = Kernel(name: "attention_combine_q8", buffers: 6, constants: [128])
    static let attentionCombineQ8MaxHeadDim = 256
    /// Keys per attention tile; chunks are multiples of it.
    static let attentionTile = 32
    /// Most splits per token (attention_combine weighs up to 256). VELO_GPU_ATTN_SPLITS (1…256)
    /// caps it lower or higher for every context (tuning runs).
    static let attentionMaxSplits: Int = attentionSplitsOverride ?? 256
    static let attentionSplitsOverride: Int? = {
        guard let e = getenv("VELO_GPU_ATTN_SPLITS") else { return nil }
        if let v = Int(String(cString: e)), (1...256).contains(v) { return v }
        fputs("velo: ignoring VELO_GPU_ATTN_SPLITS=\(String(cString: e)) (expected 1…256)\n", stderr)
        return nil
    }()
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
    /// else the fewest tiles per split that keep splits × n within the scratch. Up to 64 splits
    /// whatever the context; past 4096 keys, as many as keep 64 keys a split (up to 256). 8B
    /// decode on the H100 after 16384 tokens: 101.8 t/s with 64 splits, 108.3 with 128, 113.6
    /// with 256; after 4096, 201.1 with 64 and 184.9 with 256 (bench/RESULTS.md).
    static func attentionSplits(keys: Int, n: Int, maxTokens: Int, maxContext: Int) -> (chunk: Int, splits: Int) {
        let lim = attentionSplitLimit(maxTokens: maxTokens, maxContext: maxContext)
        let tiles = max(1, (keys + attentionTile - 1) / attentionTile)
        let wanted = attentionSplitsOverride ?? max(64, tiles / 2)
        let cap = max(1, min(lim.splits, wanted, lim.capacity / max(n, 1)))
        let chunk = (tiles + cap - 1) / cap * attentionTile
        return (chunk, (keys + chunk - 1) / chunk)
    }
    /// Key splits for the tiled prefill kernels, whose `workgroups` (blocks × KV heads) each
    /// walk every key of their block: over a long cache that is too few workgroups for a large
    /// GPU (8B, 512 tokens: 256), so the keys are split until there are about
    /// `prefillSplitTarget` workgroups, each split at least `prefillSplitMinKeys` keys, within the
    /// partials' scratch; chunks of whole `tile`s. VELO_GPU_PREFILL_SPLITS (1…256) asks for a
    /// count (tuning runs).
    static func prefillAttentionSplits(keys: Int, n: Int, workgroups: Int, maxTokens: Int, maxContext: Int,
                                       target: Int = prefillSplitTarget, tile: Int = attentionTile,
                                       override: Int? = prefillSplitsOverride) -> (chunk: Int, splits: Int) {
        let lim = attentionSplitLimit(maxTokens: maxTokens, maxContext: maxContext)
        let wanted = override ?? min((target + workgroups - 1) / max(workgroups, 1), keys / prefillSplitMinKeys)
        let cap = max(1, min(lim.splits, wanted, lim.capacity / max(n, 1)))
        let chunk = ((keys + cap - 1) / cap + tile - 1) / tile * tile
        return (chunk, (keys + chunk - 1) / chunk)
    }
    static let prefillSplitTarget = 1024
    static let prefillSplitMinKeys = 512
    static let prefillSplitsOverride: Int? = {
        guard let e = getenv("VELO_GPU_PREFILL_SPLITS") else { return nil }
        if let v = Int(String(cString: e)), (1...256).contains(v) { return v }
        fputs("velo: ignoring VELO_GPU_PREFILL_SPLITS=\(String(cString: e)) (expected 1…256)\n", stderr)
        return nil
    }()
    /// gate = act(gate) * up (params count, activation).
    static let swiglu = Kernel(name: "swiglu", buffers: 2, constants: [256])
    /// Prefill half of the fused MLP input: gate = act(S[2j]) * S[2j+1] from the interleaved (gate, up)
    /// products S (buffers S, gate; params count, activation; grid-stride, so at most 65535 groups).
    static let swigluPairs = Kernel(name: "swiglu_pairs", buffers: 2, constants: [256])
    static let add = Kernel(name: "add", buffers: 2, constants: [256])
    /// Mixture-of-experts layers: the routing (each token's top experts and weights, the pairs
    /// grouped by expert; one workgroup: (1, 1, 1)), the expert-indexed products over a stacked
    /// expert tensor, then the weighted sum of the experts' outputs (and the gated shared
    /// expert's) back into each token's row.
    static let moeRoute = Kernel(name: "moe_route", buffers: 4, constants: [512])
    /// The most expert groups moe_route takes.
    static let moeRouteMaxGroups = 64
    /// Most experts moe_route takes (its shared counters).
    static let moeRouteMaxExperts = 512
    static let moeCombine = Kernel(name: "moe_combine", buffers: 6, constants: [256])
    /// moe_combine's groups: a token's row in blocks of 256 columns (decode: one token's row
    /// over several groups), the whole row in one group with a shared expert (its gate's dot
    /// reads the row before it is written).
    static func moeCombineGroups(tokens: Int, width: Int, shared: Bool) -> (Int, Int, Int) {
        (tokens, shared ? 1 : min((width + 255) / 256, 65535), 1)
    }
    /// Buffers W (the stacked tensor), X, Y, R (moe_route's); params matvec's + expertWords,
    /// gather, rowsOff, idsOff, expertsOff. One pair a group: (⌈N/ROWS⌉, pairs, 1).
    static func matvecID(_ t: GGMLType) -> Kernel {
        Kernel(name: "matvec_id_" + suffix(t), buffers: 4, constants: [matvecLocal, 1, UInt32(matvecRowsPerGroup)])
    }
    static func matvecIDGroups(n: Int, pairs: Int) -> (Int, Int, Int) { ((n + matvecRowsPerGroup - 1) / matvecRowsPerGroup, pairs, 1) }
    /// matmul_T's tiles, workgroup z an expert: (⌈N/BN⌉, ⌈tokens/BM⌉, experts).
    static func matmulID(_ t: GGMLType) -> Kernel {
        Kernel(name: "matmul_id_" + suffix(t), buffers: 4, constants: [256, UInt32(matmulBM), UInt32(matmulBN)])
    }
    static func matmulIDGroups(n: Int, tokens: Int, experts: Int) -> (Int, Int, Int) {
        ((n + matmulBN - 1) / matmulBN, (tokens + matmulBM - 1) / matmulBM, experts)
    }
    /// matmul_coop_T's tiles per expert (tensor cores), X as float16 rows: buffers W, X16, Y, R;
    /// params matmul_coop_T's (one split) + expertWords, gather, rowsOff, idsOff, expertsOff.
    /// Tiles as tall as an expert's rows on average (`rows`), (⌈N/128⌉, ⌈tokens/BM⌉, experts).
    static func matmulCoopID(_ t: GGMLType, rows: Int) -> Kernel {
        let k = matmulCoop(t, rows: rows)
        return Kernel(name: "matmul_coop_id_" + suffix(t), buffers: 4, constants: k.constants)
    }
    static func matmulCoopIDGroups(n: Int, rows: Int, tokens: Int, experts: Int) -> (Int, Int, Int) {
        let bm = matmulCoopRows(rows)
        return ((n + matmulCoopTile - 1) / matmulCoopTile, (tokens + bm - 1) / bm, experts)
    }
    /// Bytes of the float16 copy of activation rows the tensor-core products read: `maxTokens`
    /// rows of the widest input, or a mixture-of-experts layer's routed pairs' hidden rows.
    /// Whole blocks of 64 rows, or of matmul_cm2_T's tile if taller (both read whole tiles
    /// unchecked; the rows past the batch only reach result rows they do not store).
    static func f16Bytes(maxTokens: Int, maxCols: Int, experts: Experts?) -> Int {
        let tile = max(64, cm2Shape.tx)
        return max((maxTokens + tile - 1) / tile * tile * f16Row(maxCols), experts.map { maxTokens * $0.used * f16Row($0.ffnDim) } ?? 0) * 2
    }
    /// A bias on every row: (ceil(n / 256), rows, 1) workgroups.
    static let addBias = Kernel(name: "add_bias", buffers: 2, constants: [256])
    /// Gated DeltaNet layers (Qwen3.5, Qwen3-Next): the causal convolution of each sequence's
    /// rows, (ceil(convDim / 64), sequences, 1) workgroups, and the recurrence with the gated
    /// output norm, a workgroup of 128 a (value head, sequence): (vHeads, sequences, 1).
    static let deltaNetConv = Kernel(name: "deltanet_conv", buffers: 6, constants: [64])
    static let deltaNetRecur = Kernel(name: "deltanet_recur", buffers: 11, constants: [128])
    /// The widest state deltanet_recur keeps (a thread a row) and the most taps deltanet_conv takes.
    static let deltaNetMaxState = 128, deltaNetMaxTaps = 8
    /// Gated attention's query split and output gate: (ceil(qDim / 256), rows, 1) workgroups.
    static let splitQuery = Kernel(name: "split_query", buffers: 2, constants: [256])
    static let sigmoidGate = Kernel(name: "sigmoid_gate", buffers: 2, constants: [256])
    /// Rows between layouts (MLA's query heads, latent rows and outputs): (⌈width / 64⌉, B, A).
    static let copyRows = Kernel(name: "copy_rows", buffers: 2, constants: [64])
    /// Gemma 4: x *= s (grid-stride); the per-layer inputs, a workgroup a (layer, token):
    /// (layers, tokens, 1); one layer's gated slice of them: (ceil(width / 256), rows, 1).
    static let scale = Kernel(name: "scale", buffers: 1, constants: [256])
    static let perLayerInputs = Kernel(name: "per_layer_inputs", buffers: 3, constants: [128])
    static let perLayerGate = Kernel(name: "per_layer_gate", buffers: 2, constants: [256])
    /// Each expert-ordered row's expert's bias: (ceil(n / 256), rows, 1) workgroups.
    static let addBiasID = Kernel(name: "add_bias_id", buffers: 3, constants: [256])
    /// cap·tanh(x/cap) in place (grid-stride, so at most 65535 groups).
    static let softcap = Kernel(name: "softcap", buffers: 1, constants: [256])
    /// Each logit row's argmax (X, I; params n, stride), a workgroup a row.
    static let argmaxRows = Kernel(name: "argmax_rows", buffers: 2, constants: [1024])
}
