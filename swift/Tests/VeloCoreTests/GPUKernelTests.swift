import CKernels
import XCTest
@testable import VeloCore

/// Every GPU kernel (shaders/) against a plain CPU reference, on small and odd shapes, on the
/// machine's GPU backend: Vulkan (lavapipe in CI, VK_DRIVER_FILES picks it) or Metal on macOS.
final class GPUKernelTests: XCTestCase {
    func device() throws -> GPUDevice { try TestGPU.device() }

    // MARK: helpers

    func upload(_ bytes: UnsafeRawBufferPointer) throws -> GPUBuffer {
        let d = try device()
        let b = try d.makeBuffer(bytes: max(bytes.count, 16), memory: .device, label: "test")
        if bytes.count > 0 { try d.upload(b, offset: 0, from: bytes.baseAddress!, bytes: bytes.count) }
        return b
    }
    func upload(_ f: [Float]) throws -> GPUBuffer { try f.withUnsafeBytes { try upload($0) } }
    func upload(_ i: [Int32]) throws -> GPUBuffer { try i.withUnsafeBytes { try upload($0) } }
    func upload(_ u: [UInt8]) throws -> GPUBuffer { try u.withUnsafeBytes { try upload($0) } }

    func read(_ b: GPUBuffer, _ count: Int) throws -> [Float] {
        var out = [Float](repeating: 0, count: count)
        try out.withUnsafeMutableBytes { try device().download(b, offset: 0, into: $0.baseAddress!, bytes: $0.count) }
        return out
    }

    func run(_ k: GPUKernels.Kernel, _ buffers: [GPUBuffer], _ params: [UInt32], _ groups: (Int, Int, Int)) throws {
        try run(k, bindings: buffers.map { GPUBinding($0) }, params, groups)
    }

    func run(_ k: GPUKernels.Kernel, bindings: [GPUBinding], _ params: [UInt32], _ groups: (Int, Int, Int)) throws {
        let d = try device()
        let p = try d.pipeline(k.name, buffers: k.buffers, constants: k.constants)
        try d.begin()
        d.dispatch(p, bindings, params: params, groups: groups, op: .other)
        try d.commit(profiler: nil)
    }

    func readBytes(_ b: GPUBuffer, _ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        try out.withUnsafeMutableBytes { try device().download(b, offset: 0, into: $0.baseAddress!, bytes: $0.count) }
        return out
    }

    /// quantize_q8's blocks of `m` rows of `k` values (rows `xStride` apart) on the device.
    func q8Buffers(_ x: GPUBuffer, k: Int, m: Int, xStride: Int? = nil) throws -> (values: GPUBuffer, scales: GPUBuffer) {
        let sizes = GPUKernels.q8Bytes(k: k, m: m)
        let xq = try upload([UInt8](repeating: 0, count: sizes.values)), xd = try upload([UInt8](repeating: 0, count: sizes.scales))
        try run(GPUKernels.quantizeQ8, [x, xq, xd], [UInt32(k), UInt32(m), UInt32(xStride ?? k)], GPUKernels.quantizeQ8Groups(k: k, m: m))
        return (xq, xd)
    }
    /// The same, read back (values, scales as bytes).
    func quantizeQ8(_ x: GPUBuffer, k: Int, m: Int) throws -> (values: [UInt8], scales: [UInt8]) {
        let (xq, xd) = try q8Buffers(x, k: k, m: m)
        let sizes = GPUKernels.q8Bytes(k: k, m: m)
        return (try readBytes(xq, sizes.values), try readBytes(xd, sizes.scales))
    }

    var rng = SplitMix64(seed: 42)
    func random(_ n: Int, scale: Float = 1) -> [Float] { (0..<n).map { _ in Float.random(in: -scale...scale, using: &rng) } }

    func assertClose(_ got: [Float], _ want: [Double], tolerance: [Double], _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(got.count, want.count, what, file: file, line: line)
        var bad = 0
        for i in want.indices where !(abs(Double(got[i]) - want[i]) <= tolerance[i]) {
            if bad < 5 { XCTFail("\(what): [\(i)] = \(got[i]), expected \(want[i]) ± \(tolerance[i])", file: file, line: line) }
            bad += 1
        }
        if bad > 5 { XCTFail("\(what): \(bad) values off in all", file: file, line: line) }
    }

    // MARK: weights

    /// Quantized random rows and their exact dequantized values.
    func weights(_ type: GGMLType, rows: Int, cols: Int) -> (bytes: [UInt8], rowBytes: Int, values: [Float]) {
        let rowBytes = ck_row_size(Int32(type.rawValue), Int64(cols))
        var bytes = [UInt8](repeating: 0, count: rowBytes * rows)
        var values = [Float](repeating: 0, count: rows * cols)
        let src = random(rows * cols)
        bytes.withUnsafeMutableBytes { b in
            for r in 0..<rows {
                src.withUnsafeBufferPointer { ck_quantize_row(Int32(type.rawValue), $0.baseAddress! + r * cols, b.baseAddress! + r * rowBytes, Int64(cols)) }
                values.withUnsafeMutableBufferPointer { ck_dequantize_row(Int32(type.rawValue), b.baseAddress! + r * rowBytes, $0.baseAddress! + r * cols, Int64(cols)) }
            }
        }
        return (bytes, rowBytes, values)
    }

    /// W · X in float64 for `m` activation rows of `k` values and `n` weight rows, with error
    /// bounds for float kernels (`tol`) and for 8-bit activations (`tolDot`): x_j becomes q_j d
    /// with d = f16(amax/127), |q_j d - x_j| <= d/2 + 127 |d - amax/127| <= (1/2 + 127 * 2^-11)
    /// amax/127 per block of 32, so a product moves by at most that times the block's sum of |w|.
    func products(_ w: [Float], _ x: [Float], n: Int, k: Int, m: Int) -> (want: [Double], tol: [Double], tolDot: [Double]) {
        var want = [Double](repeating: 0, count: m * n), tol = want, tolDot = want
        for i in 0..<m {
            for r in 0..<n {
                var s = 0.0, a = 0.0
                for j in 0..<k {
                    let p = Double(w[r * k + j]) * Double(x[i * k + j])
                    s += p
                    a += abs(p)
                }
                want[i * n + r] = s
                tol[i * n + r] = 1e-4 * a + 1e-5
                var td = tol[i * n + r]
                for b in 0..<(k / 32) {
                    var amax: Float = 0, aw = 0.0
                    for j in (b * 32)..<(b * 32 + 32) {
                        amax = max(amax, abs(x[i * k + j]))
                        aw += abs(Double(w[r * k + j]))
                    }
                    td += aw * Double(amax) / 127 * (0.5 + 127.0 / 2048) * 1.001
                }
                tolDot[i * n + r] = td
            }
        }
        return (want, tol, tolDot)
    }

    func testMatrixKernelsEveryType() throws {
        #if !canImport(Metal)
        // lavapipe has VK_KHR_shader_integer_dot_product: the matvec_dot_T kernels are checked here
        let d = try device()
        if d.isSoftware && !GPUKernels.dotDisabled { XCTAssertTrue(GPUKernels.integerDot(d), "no integer dot products on \(d.name)") }
        #endif
        for type in GPUKernels.weightTypes {
            // (MXFP4's 17-byte blocks: rows of an even number of them, as GPUForward.lacking requires)
            let k = type.blockSize == 256 ? 512 : type == .mxfp4 ? 128 : 96
            for (n, ms) in [(5, [1, 3, 8, 9, 17]), (37, [2, 16, 70])] {
                let w = weights(type, rows: n, cols: k)
                let wb = try upload(w.bytes)
                for m in ms {
                    let x = random(m * k)
                    let (want, tol, tolDot) = products(w.values, x, n: n, k: k, m: m)
                    let xb = try upload(x)
                    let params = [UInt32(k), UInt32(n), UInt32(m), UInt32(w.rowBytes), UInt32(k), UInt32(n), 0]
                    if m <= GPUKernels.matvecMaxRows {
                        let yb = try upload([Float](repeating: .nan, count: m * n))
                        try run(GPUKernels.matvec(type, rows: m, n: n), [wb, xb, yb], params, GPUKernels.matvecGroups(n: n, m: m))
                        assertClose(try read(yb, m * n), want, tolerance: tol, "matvec \(type.name) N=\(n) M=\(m) K=\(k)")
                    }
                    if m <= GPUKernels.matvecMaxRows, GPUKernels.dotTypes.contains(type), GPUKernels.integerDot(try device()) {
                        let (xq, xd) = try q8Buffers(xb, k: k, m: m)
                        let yb = try upload([Float](repeating: .nan, count: m * n))
                        try run(GPUKernels.matvecDot(type, rows: m, n: n), [wb, xq, xd, yb], params, GPUKernels.matvecGroups(n: n, m: m, dot: true))
                        assertClose(try read(yb, m * n), want, tolerance: tolDot, "matvec_dot \(type.name) N=\(n) M=\(m) K=\(k)")
                    }
                    // several activation-row groups: 4 columns per workgroup
                    let k4 = GPUKernels.Kernel(name: "matvec_" + GPUKernels.suffix(type), buffers: 3,
                                               constants: [GPUKernels.matvecLocal, 4, UInt32(GPUKernels.matvecRowsPerGroup)])
                    let y4 = try upload([Float](repeating: .nan, count: m * n))
                    try run(k4, [wb, xb, y4], params, ((n + GPUKernels.matvecRowsPerGroup - 1) / GPUKernels.matvecRowsPerGroup, (m + 3) / 4, 1))
                    assertClose(try read(y4, m * n), want, tolerance: tol, "matvec/4 \(type.name) N=\(n) M=\(m) K=\(k)")
                    let yb = try upload([Float](repeating: .nan, count: m * n))
                    try run(GPUKernels.matmul(type), [wb, xb, yb], params, GPUKernels.matmulGroups(n: n, m: m))
                    assertClose(try read(yb, m * n), want, tolerance: tol, "matmul \(type.name) N=\(n) M=\(m) K=\(k)")
                }
            }
        }
    }

    /// matvec_dot_batch_T (decode batches) against float64 in the shapes the host may pick
    /// (SGR 2 and 4, BPL 1 and 2, 64 to 256 threads): rows of 3 blocks and of 67 (chunks of 32 and 64 blocks, the
    /// last one partial), N not a multiple of a workgroup's rows, 1…16 activation rows, plain
    /// and GLU mode (silu), and the host's own choice where the device takes it.
    func testMatvecDotBatch() throws {
        let d = try device()
        guard GPUKernels.integerDot(d) else {
            XCTAssertFalse(d.isSoftware, "lavapipe has integer dot products: this test must run there")
            return
        }
        XCTAssertTrue(GPUKernels.dotBatchFits(d) || !d.isSoftware, "lavapipe takes the batch kernel")
        for type in GPUKernels.dotTypes.sorted(by: { $0.rawValue < $1.rawValue }) {
            // (K-quants: whole super-blocks of 256; 2304 is 72 blocks of 32, chunks of 64 and 8)
            // (MXFP4: rows of an even number of its 17-byte blocks, 68 = 64 + 4)
            let sizes = type.blockSize == 256 ? [(512, 37, [1, 2, 3, 8, 9, 16]), (2304, 300, [3, 16])]
                : type == .mxfp4 ? [(128, 37, [1, 2, 3, 8, 9, 16]), (2176, 300, [3, 16])]
                : [(96, 37, [1, 2, 3, 8, 9, 16]), (2144, 300, [3, 16])]
            for (k, n, ms) in sizes {
                let w = weights(type, rows: n, cols: k)
                let wb = try upload(w.bytes)
                for m in ms {
                    let x = random(m * k)
                    let (want, _, tolDot) = products(w.values, x, n: n, k: k, m: m)
                    let xb = try upload(x)
                    let (xq, xd) = try q8Buffers(xb, k: k, m: m)
                    let pairs = n / 2
                    let gluWant = (0..<(m * pairs)).map { o -> Double in
                        let i = o / pairs, p = o % pairs
                        return Self.gluAct(want[i * n + 2 * p], 1) * want[i * n + 2 * p + 1]
                    }
                    let gluTol = (0..<(m * pairs)).map { o -> Double in
                        let i = o / pairs, p = o % pairs
                        let g = want[i * n + 2 * p], u = want[i * n + 2 * p + 1], dg = tolDot[i * n + 2 * p], du = tolDot[i * n + 2 * p + 1]
                        return 1.2 * dg * (abs(u) + du) + abs(Self.gluAct(g, 1)) * du + abs(Self.gluAct(g, 1) * u) * 1e-5 + 1e-6
                    }
                    // every shape for Q4_0 at 1, 3 and 9 rows (lavapipe compiles each
                    // pipeline: a few seconds apiece), the host's shape elsewhere
                    let every = type == .q4_0 && [1, 3, 9].contains(m)
                    let shapes = every ? [(2, 1, 256), (4, 1, 256), (2, 2, 256), (4, 2, 256), (2, 2, 128), (4, 1, 64)]
                        : [(GPUKernels.dotBatch.sgr, GPUKernels.dotBatch.bpl, GPUKernels.dotBatchLocal)]
                    for (sgr, bpl, threads) in shapes {
                        let cols = GPUKernels.matvecCols(m), rows = sgr * threads / 32
                        let kernel = GPUKernels.Kernel(name: "matvec_dot_batch_" + GPUKernels.suffix(type), buffers: 4,
                                                       constants: [UInt32(threads), UInt32(cols), UInt32(sgr), UInt32(bpl)])
                        let groups = ((n + rows - 1) / rows, (m + cols - 1) / cols, 1)
                        let what = "matvec_dot_batch \(type.name) SGR=\(sgr) BPL=\(bpl) threads=\(threads) N=\(n) M=\(m) K=\(k)"
                        let yb = try upload([Float](repeating: .nan, count: m * n))
                        try run(kernel, [wb, xq, xd, yb], [UInt32(k), UInt32(n), UInt32(m), UInt32(w.rowBytes), UInt32(k), UInt32(n), 0], groups)
                        assertClose(try read(yb, m * n), want, tolerance: tolDot, what)
                        let yg = try upload([Float](repeating: .nan, count: m * pairs))
                        try run(kernel, [wb, xq, xd, yg], [UInt32(k), UInt32(2 * pairs), UInt32(m), UInt32(w.rowBytes), UInt32(k), UInt32(pairs), 1], groups)
                        assertClose(try read(yg, m * pairs), gluWant, tolerance: gluTol, "glu " + what)
                    }
                    if GPUKernels.dotBatchFits(d) && GPUKernels.dotBatchTakes(rows: m) {
                        let yb = try upload([Float](repeating: .nan, count: m * n))
                        try run(GPUKernels.matvecDotBatch(type, rows: m), [wb, xq, xd, yb], [UInt32(k), UInt32(n), UInt32(m), UInt32(w.rowBytes), UInt32(k), UInt32(n), 0],
                                GPUKernels.matvecDotBatchGroups(n: n, m: m))
                        assertClose(try read(yb, m * n), want, tolerance: tolDot, "matvec_dot_batch (host shape) \(type.name) N=\(n) M=\(m) K=\(k)")
                    }
                }
            }
        }
    }

    // MARK: mixture of experts

    /// Router logits on a grid of 1/16 (distinct ones far apart for any exp, equal ones exact
    /// ties), with expert j's bias[j] added: some experts favoured, some never chosen.
    func routerLogits(tokens: Int, bias: [Float]) -> [Float] {
        (0..<tokens * bias.count).map { i in ((Float.random(in: -4...4, using: &rng) * 16).rounded() / 16) + bias[i % bias.count] }
    }

    /// moe_route's output for these logits: the routing buffer and its words.
    func route(_ logits: [Float], tokens: Int, experts: Int, used: Int, normalize: Bool, softmaxChosen: Bool = false,
               factors: [Float]? = nil, sigmoid: Bool = false, bias: [Float]? = nil, groups: (count: Int, used: Int)? = nil) throws -> (buffer: GPUBuffer, words: [UInt32], cap: Int) {
        let d = try device()
        let cap = MoEBuffers.cap(pairs: tokens * used, alignment: d.bindingAlignment)
        let words = 5 * cap + 2 * experts
        let lb = try upload(logits), rb = try upload([UInt8](repeating: 0xEE, count: words * 4))
        try run(GPUKernels.moeRoute, [lb, rb, try upload(factors ?? [0]), try upload(bias ?? [0])],
                GPUParams.MoERoute(tokens: UInt32(tokens), experts: UInt32(experts), used: UInt32(used), normalize: normalize ? 1 : 0, cap: UInt32(cap),
                                   softmaxChosen: softmaxChosen ? 1 : 0, scaled: factors == nil ? 0 : 1, sigmoid: sigmoid ? 1 : 0, biased: bias == nil ? 0 : 1,
                                   groups: UInt32(groups?.count ?? 0), groupsUsed: UInt32(groups?.used ?? 0)).words, (1, 1, 1))
        var out = [UInt32](repeating: 0, count: words)
        try out.withUnsafeMutableBytes { try d.download(rb, offset: 0, into: $0.baseAddress!, bytes: $0.count) }
        return (rb, out, cap)
    }

    /// moe_route against the CPU's routing (ExpertRoutes): each expert's first row and count,
    /// its rows' tokens in token order, each pair's row and weight (picks largest first), with
    /// exact ties (the lower expert wins), experts that get no rows, experts with more rows than
    /// a matmul tile, and more pairs than one of the kernel's chunks.
    func testMoERoute() throws {
        // (chosen: gpt-oss's routing, picks by logit and the softmax of the chosen logits;
        // scaled: Gemma 4's, each weight then times its expert's factor; v3: DeepSeek-V3's,
        // sigmoid probabilities picked with choice biases from the best 2 of 4 groups, or of 8)
        let cases: [(tokens: Int, experts: Int, used: Int, normalize: Bool, chosen: Bool, scaled: Bool, v3: Int)] = [
            (1, 128, 8, true, false, false, 0), (300, 16, 4, true, false, false, 0), (37, 60, 4, false, false, false, 0), (2100, 8, 2, true, false, false, 0),
            (5, 3, 3, true, false, false, 0), (3, 512, 8, true, false, false, 0), (1, 32, 4, false, true, false, 0), (300, 128, 4, false, true, false, 0),
            (37, 24, 4, true, true, false, 0), (300, 16, 4, true, false, true, 0), (1, 128, 8, true, false, true, 0),
            (300, 16, 4, true, false, false, 4), (5, 256, 8, true, false, false, 8), (40, 64, 6, true, false, true, 8),
        ]
        for c in cases {
            let what = "moe_route \(c.tokens) tokens, \(c.used) of \(c.experts) experts\(c.chosen ? ", softmax of the chosen" : "")\(c.scaled ? ", scaled" : "")\(c.v3 > 0 ? ", V3 in \(c.v3) groups" : "")"
            var bias = [Float](repeating: 0, count: c.experts)
            if c.experts > 4 { bias[1] = 2; bias[c.experts - 1] = -12; bias[c.experts / 2] = -12 }
            let logits = routerLogits(tokens: c.tokens, bias: bias)
            let factors = c.scaled ? random(c.experts).map { 1 + $0 } : nil
            let choice = c.v3 > 0 ? random(c.experts, scale: 0.5) : nil, groups = c.v3 > 0 ? (count: c.v3, used: 2) : nil
            let (_, r, cap) = try route(logits, tokens: c.tokens, experts: c.experts, used: c.used, normalize: c.normalize, softmaxChosen: c.chosen, factors: factors,
                                        sigmoid: c.v3 > 0, bias: choice, groups: groups)
            var probs = logits
            var e = Experts(count: c.experts, used: c.used, ffnDim: 1, normalizeWeights: c.normalize)
            if c.chosen { e.gating = .softmaxChosen }
            if let groups { e.gating = .sigmoid; e.groups = groups }
            let want = probs.withUnsafeMutableBufferPointer { ExpertRoutes(logits: $0.baseAddress!, tokens: c.tokens, e, bias: choice) }
            var first = 0
            for e in 0..<c.experts {
                let rows = want.rows[e]
                XCTAssertEqual(r[5 * cap + 2 * e], UInt32(first), "\(what): expert \(e)'s first row")
                XCTAssertEqual(r[5 * cap + 2 * e + 1], UInt32(rows.count), "\(what): expert \(e)'s rows")
                for (i, t) in rows.enumerated() where first + i < c.tokens * c.used {
                    let row = first + i
                    XCTAssertEqual(r[row], UInt32(t), "\(what): row \(row)'s token")
                    XCTAssertEqual(r[3 * cap + row], UInt32(e), "\(what): row \(row)'s expert")
                    guard let k = (0..<c.used).first(where: { r[cap + t * c.used + $0] == UInt32(row) }) else {
                        XCTFail("\(what): no pair of token \(t) at row \(row)")
                        continue
                    }
                    let w = Float(bitPattern: r[2 * cap + t * c.used + k]), wanted = want.weights[e][i] * (factors?[e] ?? 1)
                    XCTAssertEqual(w, wanted, accuracy: 1e-5 * max(1, wanted), "\(what): token \(t)'s weight for expert \(e)")
                }
                first += rows.count
            }
            XCTAssertEqual(first, c.tokens * c.used, what)
            // each token's picks, largest weight first (before the factors; V3's by biased score)
            for t in 0..<c.tokens where !c.scaled && c.v3 == 0 {
                let w = (0..<c.used).map { Float(bitPattern: r[2 * cap + t * c.used + $0]) }
                XCTAssertEqual(w, w.sorted(by: >), "\(what): token \(t)'s weights in order")
            }
            if c.tokens == 300 && c.v3 == 0 { XCTAssertGreaterThan(want.rows[1].count, GPUKernels.matmulBM, what) }
            if c.experts > 4 && c.v3 == 0 { XCTAssertTrue(want.rows[c.experts - 1].isEmpty, what) }
        }
    }

    /// add_bias_id: each expert-ordered row of a product takes its expert's bias (gpt-oss's
    /// expert biases), rows from moe_route (300 tokens, 4 of 16 experts), 70 of the rows' 72
    /// floats, the rest untouched.
    func testAddBiasID() throws {
        let (tokens, experts, used, n, stride) = (300, 16, 4, 70, 72)
        let (buffer, r, cap) = try route(routerLogits(tokens: tokens, bias: [Float](repeating: 0, count: experts)), tokens: tokens, experts: experts, used: used, normalize: true)
        let rows = tokens * used
        let x = random(rows * stride), bias = random(experts * n)
        let xb = try upload(x)
        try run(GPUKernels.addBiasID, [xb, try upload(bias), buffer], [UInt32(n), UInt32(rows), UInt32(stride), UInt32(3 * cap)], ((n + 255) / 256, rows, 1))
        let want = (0..<(rows * stride)).map { i -> Double in
            let row = i / stride, c = i % stride
            return Double(x[i]) + (c < n ? Double(bias[Int(r[3 * cap + row]) * n + c]) : 0)
        }
        assertClose(try read(xb, rows * stride), want, tolerance: want.map { abs($0) * 1e-6 + 1e-7 }, "add_bias_id")
        XCTAssertGreaterThan(Set((0..<rows).map { r[3 * cap + $0] }).count, experts / 2, "add_bias_id: rows of several experts")
    }

    /// matvec_id_T and matmul_id_T for every weight type against float64 products of each
    /// routed pair's expert (a stacked tensor of 6 experts of 37 rows), routed by moe_route:
    /// one expert never chosen, one with more rows than a matmul tile (150 tokens), rows read
    /// through the routing from a strided input (gather) or a row per pair; and matvec_id_T's
    /// GLU mode (interleaved gate/up experts).
    func testExpertProductsEveryType() throws {
        let experts = 6, used = 2, n = 37
        for type in GPUKernels.weightTypes {
            let k = type.blockSize == 256 ? 256 : 64
            let w = weights(type, rows: experts * n, cols: k) // expert e: rows e·n ..< (e + 1)·n
            let wb = try upload(w.bytes)
            for tokens in [3, 150] {
                let (rb, r, cap) = try route(routerLogits(tokens: tokens, bias: [0, 3, 0, -12, 0, 0]), tokens: tokens, experts: experts, used: used, normalize: true)
                let pairs = tokens * used
                XCTAssertEqual(r[5 * cap + 7], 0, "expert 3 chosen")
                for gather in [true, false] {
                    let xStride = gather ? k + 4 : k
                    let x = random((gather ? tokens : pairs) * xStride)
                    // each pair: its expert's rows times its activation row, as products() does
                    var want: [Double] = [], tol: [Double] = [], tolDot: [Double] = []
                    for i in 0..<pairs {
                        let e = Int(r[3 * cap + i]), xr = (gather ? Int(r[i]) : i) * xStride
                        let p = products(Array(w.values[(e * n * k)..<((e + 1) * n * k)]), Array(x[xr..<(xr + k)]), n: n, k: k, m: 1)
                        want += p.want
                        tol += p.tol
                        tolDot += p.tolDot
                    }
                    let xb = try upload(x)
                    let params = [UInt32(k), UInt32(n), UInt32(pairs), UInt32(w.rowBytes), UInt32(xStride), UInt32(n), 0,
                                  UInt32(n * w.rowBytes / 2), gather ? 1 : 0, 0, UInt32(3 * cap), UInt32(5 * cap)]
                    let what = "\(type.name), \(tokens) tokens\(gather ? ", gathered" : "")"
                    let y1 = try upload([Float](repeating: .nan, count: pairs * n))
                    try run(GPUKernels.matvecID(type), bindings: [GPUBinding(wb), GPUBinding(xb), GPUBinding(y1), GPUBinding(rb)], params,
                            GPUKernels.matvecIDGroups(n: n, pairs: pairs))
                    assertClose(try read(y1, pairs * n), want, tolerance: tol, "matvec_id \(what)")
                    var p2 = params
                    p2[2] = UInt32(tokens)
                    let y2 = try upload([Float](repeating: .nan, count: pairs * n))
                    try run(GPUKernels.matmulID(type), bindings: [GPUBinding(wb), GPUBinding(xb), GPUBinding(y2), GPUBinding(rb)], p2,
                            GPUKernels.matmulIDGroups(n: n, tokens: tokens, experts: experts))
                    assertClose(try read(y2, pairs * n), want, tolerance: tol, "matmul_id \(what)")
                    // GLU mode: each expert's first 36 rows as 18 interleaved (gate, up) pairs
                    let half = 18
                    var gw = [Double](repeating: 0, count: pairs * half)
                    func gluTol(_ t: [Double]) -> [Double] {
                        (0..<(pairs * half)).map { o in
                            let (i, j) = (o / half, o % half), (g, u) = (want[i * n + 2 * j], want[i * n + 2 * j + 1])
                            let (dg, du) = (t[i * n + 2 * j], t[i * n + 2 * j + 1])
                            return 1.1 * dg * (abs(u) + du) + abs(Self.gluAct(g, 1)) * du + 1e-5
                        }
                    }
                    for i in 0..<pairs {
                        for j in 0..<half { gw[i * half + j] = Self.gluAct(want[i * n + 2 * j], 1) * want[i * n + 2 * j + 1] }
                    }
                    let gt = gluTol(tol)
                    var p3 = params
                    (p3[1], p3[5], p3[6]) = (UInt32(2 * half), UInt32(half), 1)
                    let y3 = try upload([Float](repeating: .nan, count: pairs * half))
                    try run(GPUKernels.matvecID(type), bindings: [GPUBinding(wb), GPUBinding(xb), GPUBinding(y3), GPUBinding(rb)], p3,
                            GPUKernels.matvecIDGroups(n: 2 * half, pairs: pairs))
                    assertClose(try read(y3, pairs * half), gw, tolerance: gt, "matvec_id GLU \(what)")
                    if GPUKernels.dotTypes.contains(type), GPUKernels.integerDot(try device()) {
                        // matvec_dot_id_T on quantize_q8's rows (the tokens' when gathered, else the
                        // pairs'), in the host's shape for this K and in matvec_dot_T's
                        let xrows = gather ? tokens : pairs
                        let (xq, xd) = try q8Buffers(xb, k: k, m: xrows, xStride: xStride)
                        let host = GPUKernels.matvecDotID(type, k: k)
                        let dense = GPUKernels.Kernel(name: host.name, buffers: 5,
                                                      constants: [GPUKernels.matvecDotLocal, 1, UInt32(GPUKernels.matvecDotRowsPerGroup)])
                        XCTAssertEqual(GPUKernels.matvecDotIDGroups(n: n, k: k, pairs: pairs).0, (n + Int(host.constants[2]) - 1) / Int(host.constants[2]))
                        for kernel in [host, dense] {
                            let per = Int(kernel.constants[2]), shape = "\(kernel.constants[0])x\(per)"
                            let bindings = { (y: GPUBuffer) in [GPUBinding(wb), GPUBinding(xq), GPUBinding(xd), GPUBinding(y), GPUBinding(rb)] }
                            let yd = try upload([Float](repeating: .nan, count: pairs * n))
                            try run(kernel, bindings: bindings(yd), params, ((n + per - 1) / per, pairs, 1))
                            assertClose(try read(yd, pairs * n), want, tolerance: tolDot, "matvec_dot_id \(shape) \(what)")
                            let yg = try upload([Float](repeating: .nan, count: pairs * half))
                            try run(kernel, bindings: bindings(yg), p3, ((2 * half + per - 1) / per, pairs, 1))
                            assertClose(try read(yg, pairs * half), gw, tolerance: gluTol(tolDot), "matvec_dot_id GLU \(shape) \(what)")
                        }
                    }
                }
            }
        }
    }

    /// moe_combine against float64 weighted sums: each token's rows of E (through moe_route's
    /// slots) and weights, with a shared expert (the gate's dot over the row the kernel then
    /// overwrites; one group a token), an ungated shared expert (mode 2: DeepSeek's) and none
    /// (the row in column blocks), odd widths, strided rows.
    func testMoECombine() throws {
        for (tokens, width, mode) in [(1, 2048, 0), (3, 700, 0), (2, 300, 1), (5, 1000, 1), (3, 500, 2)] as [(Int, Int, UInt32)] {
            let shared = mode != 0
            let experts = 8, used = 3, yStride = width + 5
            let (_, r, cap) = try route(routerLogits(tokens: tokens, bias: [Float](repeating: 0, count: experts)), tokens: tokens,
                                        experts: experts, used: used, normalize: true)
            let pairs = tokens * used
            let slot = (0..<pairs).map { r[cap + $0] }, w = (0..<pairs).map { Float(bitPattern: r[2 * cap + $0]) }
            let e = random(pairs * width), y = random(tokens * yStride), sh = random(tokens * width), g = random(width, scale: 0.05)
            var want = [Double](repeating: 0, count: tokens * yStride), tol = want
            for t in 0..<tokens {
                var dot = 0.0
                for c in 0..<width { dot += Double(g[c]) * Double(y[t * yStride + c]) }
                let gate = mode == 2 ? 1 : 1 / (1 + exp(-dot))
                for c in 0..<yStride {
                    guard c < width else { want[t * yStride + c] = Double(y[t * yStride + c]); continue }
                    var s = 0.0, a = 0.0
                    for k in 0..<used {
                        let v = Double(w[t * used + k]) * Double(e[Int(slot[t * used + k]) * width + c])
                        s += v
                        a += abs(v)
                    }
                    if shared { s += gate * Double(sh[t * width + c]); a += abs(Double(sh[t * width + c])) }
                    want[t * yStride + c] = s
                    tol[t * yStride + c] = 1e-5 * a + 1e-6
                }
            }
            let yb = try upload(y), eb = try upload(e), sb = try upload(slot.map { Int32(bitPattern: $0) }), wb = try upload(w)
            let shb = try upload(sh), gb = try upload(g)
            let groups = GPUKernels.moeCombineGroups(tokens: tokens, width: width, shared: shared)
            if !shared { XCTAssertGreaterThan(groups.1, 1) }
            try run(GPUKernels.moeCombine, [yb, eb, sb, wb, shb, gb], [UInt32(width), UInt32(used), mode, UInt32(yStride), UInt32(tokens)], groups)
            assertClose(try read(yb, tokens * yStride), want, tolerance: tol, "moe_combine \(tokens) tokens of \(width), shared mode \(mode)")
        }
    }

    /// The gated MLP's activations of the kernels' `act` codes (glu.glsl) in float64: 1 SiLU,
    /// 2 tanh-approximated GELU (ggml_gelu's formula).
    static func gluAct(_ g: Double, _ act: UInt32) -> Double {
        if act != 2 { return g / (1 + exp(-g)) }
        let inner: Double = 0.7978845608028654 * g * (1 + 0.044715 * g * g)
        return 0.5 * g * (1 + tanh(inner))
    }

    /// GELU's float rounding beyond the relative: tanh in float is good to a few 1e-7 in
    /// absolute terms (GPU drivers build it from exp), and for negative gates 1 + tanh(...)
    /// cancels, so the result is off by up to 0.5·|g|·|u| times that (here 2^-20, ~1e-6).
    static func geluSlack(_ g: Double, _ u: Double, _ act: UInt32) -> Double { act == 2 ? abs(g * u) * 0x1p-21 : 0 }

    /// The fused MLP input (GLU mode of matvec_T / matvec_dot_T on interleaved (gate, up) rows, and
    /// the prefill path: matmul_T into interleaved products, then swiglu_pairs) against
    /// act(g)·u in float64, for both activations (SiLU, GELU).
    func testGatedUp() throws {
        let dot = GPUKernels.integerDot(try device())
        for type in [GGMLType.f32, .f16, .bf16, .q4_0, .q5_1, .q8_0, .q4_K, .q6_K] {
            for k in ([GGMLType.q4_K, .q5_K, .q6_K].contains(type) ? [512] : [96, 512]) {
                for pairs in [5, 37] {
                    let n = 2 * pairs
                    let w = weights(type, rows: n, cols: k) // row 2i gate i, row 2i+1 up i
                    let wb = try upload(w.bytes)
                    for m in [1, 3, 16, 40] {
                        let x = random(m * k)
                        // products and their error bounds (float, 8-bit activations)
                        let (prod, tol, tolDot) = products(w.values, x, n: n, k: k, m: m)
                        let xb = try upload(x)
                        // prefill: interleaved products (then swiglu_pairs for each activation)
                        let sb = try upload([Float](repeating: .nan, count: m * n))
                        try run(GPUKernels.matmul(type), [wb, xb, sb], [UInt32(k), UInt32(n), UInt32(m), UInt32(w.rowBytes), UInt32(k), UInt32(n), 0],
                                GPUKernels.matmulGroups(n: n, m: m))
                        for act: UInt32 in [1, 2] {
                            func f(_ g: Double) -> Double { Self.gluAct(g, act) }
                            let want = (0..<(m * pairs)).map { o -> Double in
                                let i = o / pairs, p = o % pairs
                                return f(prod[i * n + 2 * p]) * prod[i * n + 2 * p + 1]
                            }
                            func bound(_ t: [Double]) -> [Double] {
                                (0..<(m * pairs)).map { o in
                                    let i = o / pairs, p = o % pairs
                                    let g = prod[i * n + 2 * p], u = prod[i * n + 2 * p + 1]
                                    let dg = t[i * n + 2 * p], du = t[i * n + 2 * p + 1]
                                    // |silu'| <= 1.1, |gelu'| <= 1.13; the cross term and float rounding
                                    let cross: Double = 1.2 * dg * (abs(u) + du) + abs(f(g)) * du
                                    return cross + abs(f(g) * u) * 1e-5 + 1e-6 + Self.geluSlack(g, u, act)
                                }
                            }
                            let what = "\(type.name) act=\(act) pairs=\(pairs) M=\(m) K=\(k)"
                            if m <= GPUKernels.matvecMaxRows {
                                let params = [UInt32(k), UInt32(n), UInt32(m), UInt32(w.rowBytes), UInt32(k), UInt32(pairs), act]
                                let yb = try upload([Float](repeating: .nan, count: m * pairs))
                                try run(GPUKernels.matvec(type, rows: m, n: n, glu: true), [wb, xb, yb], params, GPUKernels.matvecGroups(n: n, m: m, glu: true))
                                assertClose(try read(yb, m * pairs), want, tolerance: bound(tol), "matvec glu " + what)
                                if dot, GPUKernels.dotTypes.contains(type) {
                                    let (xq, xd) = try q8Buffers(xb, k: k, m: m)
                                    let yd = try upload([Float](repeating: .nan, count: m * pairs))
                                    try run(GPUKernels.matvecDot(type, rows: m, n: n, glu: true), [wb, xq, xd, yd], params, GPUKernels.matvecGroups(n: n, m: m, dot: true, glu: true))
                                    assertClose(try read(yd, m * pairs), want, tolerance: bound(tolDot), "matvec_dot glu " + what)
                                }
                            }
                            let gb = try upload([Float](repeating: .nan, count: m * pairs))
                            let count = m * pairs
                            try run(GPUKernels.swigluPairs, [sb, gb], [UInt32(count), act], ((count + 255) / 256, 1, 1))
                            assertClose(try read(gb, count), want, tolerance: bound(tol), "matmul + swiglu_pairs " + what)
                        }
                    }
                }
            }
        }
        // swiglu_pairs alone, with fewer groups than values (grid-stride), gates far into both
        // tails; the two activations must differ on these values (or the check could not tell)
        let count = 3000
        var s = random(2 * count, scale: 4)
        for j in stride(from: 0, to: count, by: 97) { s[2 * j] *= 10 }
        let sb = try upload(s)
        var results: [[Float]] = []
        for act: UInt32 in [1, 2] {
            let gb = try upload([Float](repeating: .nan, count: count))
            try run(GPUKernels.swigluPairs, [sb, gb], [UInt32(count), act], (3, 1, 1))
            let want = (0..<count).map { Self.gluAct(Double(s[2 * $0]), act) * Double(s[2 * $0 + 1]) }
            results.append(try read(gb, count))
            let tol = (0..<count).map { i -> Double in abs(want[i]) * 1e-5 + 1e-6 + Self.geluSlack(Double(s[2 * i]), Double(s[2 * i + 1]), act) }
            assertClose(results[results.count - 1], want, tolerance: tol, "swiglu_pairs act=\(act)")
            // swiglu_pairs_f16: the same values, and to_f16's copy of them (two a thread)
            let g2 = try upload([Float](repeating: .nan, count: count)), g16 = try upload([UInt8](repeating: 0xFF, count: count * 2))
            try run(GPUKernels.swigluPairsF16, [sb, g2, g16], [UInt32(count), act], (3, 1, 1))
            let fused = try read(g2, count)
            assertClose(fused, want, tolerance: tol, "swiglu_pairs_f16 act=\(act)")
            assertClose(try readF16(g16, count), fused.map(Double.init), tolerance: fused.map { abs(Double($0)) / 1024 + 1e-7 }, "swiglu_pairs_f16 float16 copy act=\(act)")
        }
        XCTAssertGreaterThan(zip(results[0], results[1]).filter { abs($0 - $1) > 1e-2 }.count, count / 4, "swiglu_pairs: SiLU and GELU agree")
    }

    /// Embedding rows, dequantized, times `scale` (1, Gemma's √dim, and a negative one).
    func testGetRowsEveryType() throws {
        for type in GPUKernels.weightTypes {
            let k = type.blockSize == 256 ? 256 : 64 // whole blocks of every type
            let w = weights(type, rows: 11, cols: k)
            let tokens: [Int32] = [3, 0, 10, 3, 7]
            let wb = try upload(w.bytes), tb = try upload(tokens)
            for scale: Float in [1, Float(k).squareRoot(), -0.37] {
                let out = try upload([Float](repeating: .nan, count: tokens.count * k))
                try run(GPUKernels.getRows(type), [wb, tb, out],
                        [UInt32(k), UInt32(w.rowBytes), UInt32(tokens.count), scale.bitPattern], (tokens.count, 1, 1))
                let want = tokens.flatMap { t in (0..<k).map { Double(w.values[Int(t) * k + $0]) * Double(scale) } }
                assertClose(try read(out, tokens.count * k), want, tolerance: want.map { abs($0) * 1e-6 + 1e-7 }, "get_rows \(type.name) scale=\(scale)")
            }
        }
    }

    /// The norms' flag word (their fifth buffer): 0 while every row's sum of squares is finite.
    func flagWord(_ b: GPUBuffer) throws -> UInt32 { try read(b, 1)[0].bitPattern }

    func testRMSNorm() throws {
        let flag = try upload([Int32(0)])
        for n in [7, 64, 1000, 4096, 5003, 9000] {
            let rows = 5
            let x = random(rows * n, scale: 3), w = random(n)
            let eps: Float = 1e-5
            for select in [false, true] {
                let rowsel: [Int32] = select ? [4, 1] : []
                let outRows = select ? rowsel.map(Int.init) : Array(0..<rows)
                let out = try upload([Float](repeating: .nan, count: outRows.count * n))
                try run(GPUKernels.rmsNorm, [try upload(x), try upload(w), out, try upload(rowsel.isEmpty ? [0] : rowsel), flag],
                        [UInt32(n), UInt32(outRows.count), eps.bitPattern, select ? 1 : 0, UInt32(n), 1, UInt32(n)], (outRows.count, 1, 1))
                var want: [Double] = []
                for r in outRows {
                    let ss = (0..<n).reduce(0.0) { $0 + Double(x[r * n + $1]) * Double(x[r * n + $1]) }
                    let scale = 1 / (ss / Double(n) + Double(eps)).squareRoot()
                    want += (0..<n).map { Double(x[r * n + $0]) * scale * Double(w[$0]) }
                }
                assertClose(try read(out, outRows.count * n), want, tolerance: want.map { abs($0) * 1e-5 + 1e-6 }, "rms_norm n=\(n) rowsel=\(select)")
            }
            XCTAssertEqual(try flagWord(flag), 0, "rms_norm n=\(n): flagged finite rows")
            // an inf in row 3 (a float16 overflow upstream) sets the flag; a row not normed does not
            for (selected, flagged) in [([Int32(1), 3], UInt32(1)), ([Int32(0), 4], 0)] {
                var bad = x
                bad[3 * n + n / 2] = .infinity
                let f = try upload([Int32(0)])
                try run(GPUKernels.rmsNorm, [try upload(bad), try upload(w), try upload([Float](repeating: 0, count: 2 * n)), try upload(selected), f],
                        [UInt32(n), 2, eps.bitPattern, 1, UInt32(n), 1, UInt32(n)], (2, 1, 1))
                XCTAssertEqual(try flagWord(f), flagged, "rms_norm n=\(n) rows \(selected): the flag")
            }
        }
    }

    /// Q/K head norms (heads > 1): each head of `n` values normalized on its own, rows of heads
    /// `xStride` apart. In place on a view of a wider row (K inside a Q|K|V row, as GPUForward
    /// runs it: the rest of the row must stay as it was), and into rows `yStride` apart.
    func testRMSNormHeads() throws {
        for (n, heads) in [(7, 3), (64, 8), (128, 2), (256, 4), (5000, 2)] {
            let tokens = 3, eps: Float = 1e-6
            let off = 64, xStride = off + heads * n + 37 // the view starts `off` floats into each row
            let x = random(tokens * xStride, scale: 3), w = random(n)
            var want = x.map(Double.init)
            for t in 0..<tokens {
                for h in 0..<heads {
                    let b = t * xStride + off + h * n
                    let ss = (0..<n).reduce(0.0) { $0 + Double(x[b + $1]) * Double(x[b + $1]) }
                    let scale = 1 / (ss / Double(n) + Double(eps)).squareRoot()
                    for j in 0..<n { want[b + j] = Double(x[b + j]) * scale * Double(w[j]) }
                }
            }
            let wb = try upload(w), sel = try upload([Int32(0)]), flag = try upload([Int32(0)])
            let params = [UInt32(n), UInt32(tokens * heads), eps.bitPattern, 0, UInt32(xStride), UInt32(heads), UInt32(xStride)]
            let buf = try upload(x)
            let view = GPUBinding(buf, offset: off * 4)
            try run(GPUKernels.rmsNorm, bindings: [view, GPUBinding(wb), view, GPUBinding(sel), GPUBinding(flag)], params, (tokens * heads, 1, 1))
            assertClose(try read(buf, x.count), want, tolerance: want.map { abs($0) * 1e-5 + 1e-6 }, "rms_norm heads=\(heads) n=\(n) in place")
            // out of place, output rows yStride apart (the gaps stay NaN)
            let yStride = heads * n + 5
            let yb = try upload([Float](repeating: .nan, count: tokens * yStride))
            try run(GPUKernels.rmsNorm, bindings: [GPUBinding(try upload(x), offset: off * 4), GPUBinding(wb), GPUBinding(yb), GPUBinding(sel), GPUBinding(flag)],
                    [UInt32(n), UInt32(tokens * heads), eps.bitPattern, 0, UInt32(xStride), UInt32(heads), UInt32(yStride)], (tokens * heads, 1, 1))
            let got = try read(yb, tokens * yStride)
            for t in 0..<tokens {
                let w0 = t * xStride + off
                let wantRow = Array(want[w0..<(w0 + heads * n)])
                assertClose(Array(got[(t * yStride)..<(t * yStride + heads * n)]), wantRow, tolerance: wantRow.map { abs($0) * 1e-5 + 1e-6 },
                            "rms_norm heads=\(heads) n=\(n) token \(t) into rows of \(yStride)")
                XCTAssert(got[(t * yStride + heads * n)..<((t + 1) * yStride)].allSatisfy(\.isNaN), "rms_norm heads=\(heads) n=\(n): wrote past token \(t)'s heads")
            }
        }
    }

    /// The residual add fused with the next norm, writing the norm over its own input (as the
    /// Llama forward does).
    func testAddRMSNorm() throws {
        for n in [7, 64, 96, 4096, 5003, 8192] {
            let rows = 3
            let x = random(rows * n, scale: 3), d = random(rows * n), w = random(n)
            let eps: Float = 1e-5
            let xb = try upload(x), db = try upload(d), flag = try upload([Int32(0)])
            try run(GPUKernels.addRMSNorm, [xb, db, try upload(w), db, flag], [UInt32(n), UInt32(rows), eps.bitPattern], (rows, 1, 1))
            XCTAssertEqual(try flagWord(flag), 0, "add_rms_norm n=\(n): flagged finite rows")
            do { // a NaN in the added rows (inf - inf upstream) sets the flag
                var bad = d
                bad[(rows - 1) * n] = .nan
                let f = try upload([Int32(0)])
                try run(GPUKernels.addRMSNorm, [try upload(x), try upload(bad), try upload(w), try upload(bad), f], [UInt32(n), UInt32(rows), eps.bitPattern], (rows, 1, 1))
                XCTAssertEqual(try flagWord(f), 1, "add_rms_norm n=\(n): a NaN row not flagged")
            }
            let sum = (0..<(rows * n)).map { Double(x[$0] + d[$0]) }
            var want: [Double] = []
            for r in 0..<rows {
                let ss = (0..<n).reduce(0.0) { $0 + sum[r * n + $1] * sum[r * n + $1] }
                let scale = 1 / (ss / Double(n) + Double(eps)).squareRoot()
                want += (0..<n).map { sum[r * n + $0] * scale * Double(w[$0]) }
            }
            assertClose(try read(xb, rows * n), sum, tolerance: sum.map { abs($0) * 1e-6 + 1e-6 }, "add_rms_norm sum n=\(n)")
            assertClose(try read(db, rows * n), want, tolerance: want.map { abs($0) * 1e-5 + 1e-6 }, "add_rms_norm n=\(n)")
            if n % 4 == 0 { // add_rms_norm_f16: the same, and to_f16's copy of the norm
                let xb2 = try upload(x), db2 = try upload(d), x16 = try upload([UInt8](repeating: 0xFF, count: rows * n * 2))
                try run(GPUKernels.addRMSNormF16, [xb2, db2, try upload(w), db2, try upload([Int32(0)]), x16], [UInt32(n), UInt32(rows), eps.bitPattern], (rows, 1, 1))
                let norm = try read(db2, rows * n)
                assertClose(norm, want, tolerance: want.map { abs($0) * 1e-5 + 1e-6 }, "add_rms_norm_f16 n=\(n)")
                assertClose(try readF16(x16, rows * n), norm.map(Double.init), tolerance: norm.map { abs(Double($0)) / 1024 + 1e-7 }, "add_rms_norm_f16 float16 copy n=\(n)")
            }
            // the decode kernel that also writes 8-bit blocks (rows of whole blocks, at most
            // addRMSNormQ8MaxWidth): the same sums and norms, and exactly the blocks quantize_q8
            // makes of its norms
            guard n % 32 == 0, GPUKernels.integerDot(try device()) else { continue }
            let xb2 = try upload(x), db2 = try upload(d)
            let sizes = GPUKernels.q8Bytes(k: n, m: rows)
            let xq = try upload([UInt8](repeating: 0xAB, count: sizes.values)), xd = try upload([UInt8](repeating: 0xAB, count: sizes.scales))
            try run(GPUKernels.addRMSNormQ8, [xb2, db2, try upload(w), db2, xq, xd], [UInt32(n), UInt32(rows), eps.bitPattern], (rows, 1, 1))
            XCTAssertEqual(try read(xb2, rows * n), try read(xb, rows * n), "add_rms_norm_q8 sums n=\(n)")
            assertClose(try read(db2, rows * n), want, tolerance: want.map { abs($0) * 1e-5 + 1e-6 }, "add_rms_norm_q8 n=\(n)")
            let want8 = try quantizeQ8(db2, k: n, m: rows)
            XCTAssertEqual(try readBytes(xq, sizes.values), want8.values, "add_rms_norm_q8 values n=\(n)")
            XCTAssertEqual(try readBytes(xd, sizes.scales), want8.scales, "add_rms_norm_q8 scales n=\(n)")
        }
    }

    // MARK: rope

    /// Llama 3.1's per-pair frequencies: base^(-2i/dims), kept for short wavelengths (under
    /// original/high turns), divided by `factor` for long ones (over original/low), a smooth
    /// ramp between; `original` small so that short tables have pairs of all three kinds.
    static func llama31Freqs(base: Double, dims: Int, original: Double = 2048, factor: Double = 8, low: Double = 1, high: Double = 4) -> [Float] {
        (0..<dims / 2).map { i in
            let f = pow(base, -2.0 * Double(i) / Double(dims)), wavelen = 2 * Double.pi / f
            if wavelen < original / high { return Float(f) }
            if wavelen > original / low { return Float(f / factor) }
            let smooth = (original / wavelen - low) / (high - low)
            return Float((1 - smooth) * f / factor + smooth * f)
        }
    }

    /// The rotation in float64: pair i of each head (2i, 2i+1, or i, i + ropeDim/2 for neox)
    /// turned by pos·freqs[i] (the float table's values exactly) and scaled by `magnitude`;
    /// values past ropeDim unchanged. Rows `stride` apart, heads `hd` apart. Also the error
    /// bound of each value, relative to the pair's size: cos/sin and the products (2e-5, with
    /// margin), and the angle's, |θ|·2^-22 (shaders/README.md): the kernels reduce θ modulo 2π
    /// with fma, exact only where fma rounds once, and Vulkan lets it round twice (lavapipe
    /// does: about 2e-3 rad at θ = 131000 here).
    static func ropeReference(_ x: [Float], rows: Int, heads: Int, hd: Int, ropeDim: Int, neox: Bool, stride: Int,
                              pos: [Int32], freqs: [Float], magnitude: Float) -> (want: [Double], tol: [Double]) {
        var want = x.map(Double.init), tol = [Double](repeating: 0, count: x.count)
        let half = ropeDim / 2, m = Double(magnitude)
        for r in 0..<rows {
            for h in 0..<heads {
                let base = r * stride + h * hd
                for i in 0..<half {
                    let theta = Double(pos[r]) * Double(freqs[i])
                    let (a, b) = neox ? (base + i, base + i + half) : (base + 2 * i, base + 2 * i + 1)
                    let xa = Double(x[a]), xb = Double(x[b])
                    want[a] = m * (xa * cos(theta) - xb * sin(theta))
                    want[b] = m * (xa * sin(theta) + xb * cos(theta))
                    tol[a] = (2e-5 + abs(theta) * 0x1p-22) * m * (abs(xa) + abs(xb)) + 1e-7
                    tol[b] = tol[a]
                }
            }
        }
        return (want, tol)
    }

    /// rope with Llama 3.1 frequency tables and a YaRN-like magnitude, at positions up to 131000
    /// (angles of 10^5 radians reduced in float32), against float64; past ropeDim and between
    /// rows nothing changes.
    func testRope() throws {
        let cases: [(Bool, Int, Int, Double)] = [(false, 8, 8, 10000), (true, 16, 16, 500000), (false, 64, 32, 10000), (true, 64, 48, 500000), (true, 128, 128, 500000)]
        for (neox, hd, ropeDim, base) in cases {
            let rows = 4, heads = 2, stride = heads * hd + 3
            let x = random(rows * stride)
            let pos: [Int32] = [0, 7, 1000, 131000]
            let freqs = Self.llama31Freqs(base: base, dims: ropeDim)
            let plain = (0..<ropeDim / 2).map { Float(pow(base, -2.0 * Double($0) / Double(ropeDim))) }
            if ropeDim >= 16 { XCTAssertNotEqual(freqs, plain, "the table must differ from base^(-2i/d)") }
            for magnitude: Float in [1, 1.2079442] {
                let buf = try upload(x)
                try run(GPUKernels.rope, [buf, try upload(pos), try upload(freqs)],
                        [UInt32(rows), UInt32(heads), UInt32(hd), UInt32(ropeDim), neox ? 1 : 0, magnitude.bitPattern, UInt32(stride)],
                        (rows, heads, 1))
                let (want, tol) = Self.ropeReference(x, rows: rows, heads: heads, hd: hd, ropeDim: ropeDim, neox: neox, stride: stride,
                                                     pos: pos, freqs: freqs, magnitude: magnitude)
                assertClose(try read(buf, x.count), want, tolerance: tol, "rope neox=\(neox) hd=\(hd) ropeDim=\(ropeDim) magnitude=\(magnitude)")
            }
        }
    }

    /// rope_store (the fused kernel) against float64 (Q in place, K rotated into the pages, V
    /// copied), and against rope on q and k, then kv_store; a Llama 3.1 table and magnitude 1.2.
    func testRopeStore() throws {
        for (neox, heads, kvHeads, hd, ropeDim) in [(false, 4, 2, 16, 16), (true, 6, 2, 64, 48), (false, 8, 8, 128, 128)] {
            let n = 3, kvDim = kvHeads * hd, ps = 4, layers = 2, layer = 1, pages = 8
            let pageStride = layers * 2 * ps * kvDim
            // tokens 0 and 1 of one sequence (pages 3, 1), token 2 of another at position 1003
            // (its page list from pagetab[2]: entry 250 is page 7, the others page 0, unread)
            let positions: [Int32] = [0, 5, 1003], tokpt: [Int32] = [0, 0, 2]
            var pagetab: [Int32] = [3, 1] + [Int32](repeating: 0, count: 251)
            pagetab[2 + 1003 / ps] = 7
            let q = random(n * heads * hd), k = random(n * kvDim), v = random(n * kvDim)
            let freqs = Self.llama31Freqs(base: 500000, dims: ropeDim), magnitude: Float = 1.2
            let layerOff = UInt32(layer * 2 * ps * kvDim)
            let posB = try upload(positions), ptB = try upload(tokpt), tabB = try upload(pagetab), freqB = try upload(freqs)
            // reference path
            let q1 = try upload(q), k1 = try upload(k), kv1 = try upload([Float](repeating: 0, count: pages * pageStride))
            try run(GPUKernels.rope, [q1, posB, freqB], [UInt32(n), UInt32(heads), UInt32(hd), UInt32(ropeDim), neox ? 1 : 0, magnitude.bitPattern, UInt32(heads * hd)], (n, heads, 1))
            try run(GPUKernels.rope, [k1, posB, freqB], [UInt32(n), UInt32(kvHeads), UInt32(hd), UInt32(ropeDim), neox ? 1 : 0, magnitude.bitPattern, UInt32(kvDim)], (n, kvHeads, 1))
            try run(GPUKernels.kvStore, [k1, try upload(v), kv1, posB, ptB, tabB], [UInt32(n), UInt32(kvDim), UInt32(ps), UInt32(pageStride), layerOff, UInt32(kvDim)], (n, (kvDim + 63) / 64, 1))
            // fused, Q, K and V as views of one Q|K|V row (as GPUForward lays them out)
            let qd = heads * hd, width = qd + 2 * kvDim
            var rowsQKV = [Float]()
            for t in 0..<n { rowsQKV += q[(t * qd)..<((t + 1) * qd)] + k[(t * kvDim)..<((t + 1) * kvDim)] + v[(t * kvDim)..<((t + 1) * kvDim)] }
            let qkv = try upload(rowsQKV), kv2 = try upload([Float](repeating: 0, count: pages * pageStride))
            try run(GPUKernels.ropeStore, bindings: [GPUBinding(qkv), GPUBinding(qkv, offset: qd * 4), GPUBinding(qkv, offset: (qd + kvDim) * 4),
                                                     GPUBinding(kv2), GPUBinding(posB), GPUBinding(ptB), GPUBinding(tabB), GPUBinding(freqB)],
                    [UInt32(n), UInt32(heads), UInt32(kvHeads), UInt32(hd), UInt32(ropeDim), neox ? 1 : 0, magnitude.bitPattern,
                     UInt32(kvDim), UInt32(ps), UInt32(pageStride), layerOff, UInt32(width), UInt32(width)], (n, heads + kvHeads, 1))
            let what = "neox=\(neox) hd=\(hd) ropeDim=\(ropeDim)"
            let got = try read(qkv, n * width), gotKV = try read(kv2, pages * pageStride)
            let gotQ = (0..<n).flatMap { got[($0 * width)..<($0 * width + qd)] }
            // float64
            let rq = Self.ropeReference(q, rows: n, heads: heads, hd: hd, ropeDim: ropeDim, neox: neox, stride: qd, pos: positions, freqs: freqs, magnitude: magnitude)
            let rk = Self.ropeReference(k, rows: n, heads: kvHeads, hd: hd, ropeDim: ropeDim, neox: neox, stride: kvDim, pos: positions, freqs: freqs, magnitude: magnitude)
            assertClose(gotQ, rq.want, tolerance: rq.tol, "rope_store q (float64) " + what)
            var pagedK: [Float] = [], pagedV: [Float] = []
            for t in 0..<n {
                let pos = Int(positions[t]), page = Int(pagetab[Int(tokpt[t]) + pos / ps]), slot = pos % ps
                let kb = page * pageStride + Int(layerOff), vb = kb + ps * kvDim + slot * kvDim
                pagedK += (0..<kvDim).map { gotKV[kb + $0 * ps + slot] }
                pagedV += gotKV[vb..<(vb + kvDim)]
            }
            assertClose(pagedK, rk.want, tolerance: rk.tol, "rope_store k (float64) " + what)
            XCTAssertEqual(pagedV, v, "rope_store v " + what)
            // the unfused kernels
            let wantQ = try read(q1, q.count).map(Double.init), wantKV = try read(kv1, pages * pageStride).map(Double.init)
            assertClose(gotQ, wantQ, tolerance: wantQ.map { abs($0) * 1e-6 + 1e-6 }, "rope_store q " + what)
            assertClose(gotKV, wantKV, tolerance: wantKV.map { abs($0) * 1e-6 + 1e-6 }, "rope_store kv " + what)
        }
    }

    /// kv_gather (attention_cm2's input, lavapipe runs it though it has no attention_cm2): one
    /// sequence's keys, stored by kv_store_f16_f16 into scattered f16 pages, come out as
    /// [kvHead][key][dim] K then V rows, float16 rounding apart; V is zero past the last key up
    /// to the padded length; a page-table start other than 0 is followed (from layer 1's planes,
    /// so the layer offset is too).
    func testKVGather() throws {
        for (kvHeads, hd, keys, pt) in [(2, 64, 37, 1), (8, 128, 64, 0), (1, 16, 5, 2)] {
            let kvDim = kvHeads * hd, ps = 16, layers = 2, layer = 1, cap = 128
            let padded = (keys + 63) / 64 * 64
            let pageWords = layers * ps * kvDim, layerOff = layer * ps * kvDim   // f16: K and V planes of ps * kvDim / 2 words each
            var pagetab: [Int32] = [Int32](repeating: 0, count: pt) + [5, 2, 7, 0, 4]
            pagetab += [Int32](repeating: 0, count: 8)
            let pages = 8, k = random(keys * kvDim, scale: 4), v = random(keys * kvDim, scale: 4)
            let kv = try upload([UInt8](repeating: 0, count: pages * pageWords * 4))
            try run(GPUKernels.kvVariant(GPUKernels.kvStore, k: .f16, v: .f16),
                    [try upload(k), try upload(v), kv, try upload((0..<keys).map { Int32($0) }), try upload([Int32](repeating: Int32(pt), count: keys)), try upload(pagetab)],
                    [UInt32(keys), UInt32(kvDim), UInt32(ps), UInt32(pageWords), UInt32(layerOff), UInt32(kvDim)], (keys, (kvDim + 63) / 64, 1))
            let copy = try upload([UInt8](repeating: 0xFF, count: cap * kvDim * 4))   // NaN halves: every one read must be written
            try run(GPUKernels.kvGather, [kv, copy, try upload(pagetab)],
                    [UInt32(kvDim), UInt32(hd), UInt32(ps), UInt32(pageWords), UInt32(layerOff), UInt32(keys), UInt32(padded), UInt32(cap), UInt32(pt)],
                    GPUKernels.kvGatherGroups(padded: padded, kvDim: kvDim))
            let got = try readF16(copy, 2 * cap * kvDim)
            var gotK: [Float] = [], gotV: [Float] = [], wantK: [Double] = [], wantV: [Double] = []
            for h in 0..<kvHeads {
                for j in 0..<padded {
                    for d in 0..<hd {
                        let row = (h * cap + j) * hd + d
                        if j < keys {
                            gotK.append(got[row])
                            wantK.append(Double(k[j * kvDim + h * hd + d]))
                        }
                        gotV.append(got[cap * kvDim + row])
                        wantV.append(j < keys ? Double(v[j * kvDim + h * hd + d]) : 0)
                    }
                }
            }
            let what = "kvHeads=\(kvHeads) hd=\(hd) keys=\(keys) pt=\(pt)"
            assertClose(gotK, wantK, tolerance: wantK.map { abs($0) / 1024 }, "kv_gather K " + what)
            assertClose(gotV, wantV, tolerance: wantV.map { abs($0) / 1024 }, "kv_gather V " + what)
        }
    }

    /// attention_cm2's key splits: none while its workgroups fill about a wave, whole tiles,
    /// every key in a split, no split under prefillSplitMinKeys keys.
    func testAttentionCM2Splits() {
        let bc = GPUKernels.attentionCM2Shape.bc
        for (keys, n, heads, wantSplits) in [(16896, 512, 32, 1), (4608, 512, 32, 1), (16512, 128, 32, 4), (700, 128, 32, 1), (300, 1, 8, 1)] {
            let s = GPUKernels.attentionCM2Splits(keys: keys, n: n, heads: heads, maxTokens: 512, maxContext: 32768)
            XCTAssertEqual(s.splits, wantSplits, "keys=\(keys) n=\(n)")
            XCTAssertEqual(s.chunk % bc, 0, "keys=\(keys) n=\(n): chunk \(s.chunk)")
            XCTAssertGreaterThanOrEqual(s.chunk * s.splits, keys)
            XCTAssertLessThan(s.chunk * (s.splits - 1), keys)
        }
    }

    /// `count` float16 values, read back through CKernels (Swift has no Float16 on x86-64 macOS).
    func readF16(_ b: GPUBuffer, _ count: Int) throws -> [Float] {
        try readBytes(b, count * 2).withUnsafeBytes { raw in
            (0..<count).map { i -> Float in
                var h = raw.load(fromByteOffset: 2 * i, as: UInt16.self), f: Float = 0
                ck_f16_to_f32(&h, &f, 1)
                return f
            }
        }
    }

    /// to_f16 (the tensor-core GEMM's input): rows of K from a longer stride, padded with zeros
    /// to whole groups of 4, within float16 rounding.
    func testToF16() throws {
        for k in [5, 64, 131] {
            let m = 3, xStride = k + 3, kp = GPUKernels.f16Row(k)
            let x = random(m * xStride, scale: 50)
            let y = try upload([UInt8](repeating: 0xFF, count: m * kp * 2))
            try run(GPUKernels.toF16, [try upload(x), y], [UInt32(k), UInt32(m), UInt32(xStride), UInt32(kp)], GPUKernels.toF16Groups(k: k, m: m))
            // float16 through CKernels: Swift has no Float16 on x86-64 macOS (Intel Macs)
            let got = try readBytes(y, m * kp * 2).withUnsafeBytes { raw in
                (0..<(m * kp)).map { i -> Float in
                    var h = raw.load(fromByteOffset: 2 * i, as: UInt16.self), f: Float = 0
                    ck_f16_to_f32(&h, &f, 1)
                    return f
                }
            }
            let want = (0..<(m * kp)).map { i -> Double in i % kp < k ? Double(x[(i / kp) * xStride + i % kp]) : 0 }
            assertClose(got, want, tolerance: want.map { abs($0) / 1024 }, "to_f16 K=\(k)")
        }
    }

    /// Pipelines built off the calling thread (matmul_cm2_T's after a load): `adopt` is nil
    /// until every build has ended, then gives each one's error; a built one is the cached
    /// pipeline from then on, and runs; a kernel that does not exist is an error, not a crash.
    func testPipelinesBuiltInBackground() throws {
        let d = try device()
        // constants no other test uses, so the pipeline is not cached yet
        let k = GPUKernels.Kernel(name: GPUKernels.toF16.name, buffers: 2, constants: [64])
        let keys = [PipelineKey(name: k.name, buffers: 2, constants: [64]), PipelineKey(name: "no_such_kernel", buffers: 1, constants: [])]
        let pending = d.prepareInBackground(keys)
        var errors: [Error?]?
        for _ in 0..<60_000 where errors == nil {
            errors = d.adopt(pending)
            if errors == nil { usleep(1000) }
        }
        let e = try XCTUnwrap(errors, "background build never ended")
        XCTAssertNil(e[0])
        XCTAssertNotNil(e[1])
        guard case .success(let built) = pending.results?[0] else { return XCTFail("toF16 not built") }
        XCTAssertTrue(try d.pipeline(k.name, buffers: 2, constants: [64]) === built)
        let x: [Float] = [1.5, -2, 3.25, 65504, 0.5]
        let y = try upload([UInt8](repeating: 0xFF, count: 8 * 2))
        try run(k, [try upload(x), y], [5, 1, 5, 8], GPUKernels.toF16Groups(k: 5, m: 1))
        let got = try readBytes(y, 16).withUnsafeBytes { raw in
            (0..<8).map { i -> Float in
                var h = raw.load(fromByteOffset: 2 * i, as: UInt16.self), f: Float = 0
                ck_f16_to_f32(&h, &f, 1)
                return f
            }
        }
        XCTAssertEqual(got, x + [0, 0, 0])
    }

    /// argmax_rows against the host's choice (ck_argmax_f32) on rows built to catch each rule:
    /// the largest value wins wherever it is (first and last index, past the threads' first
    /// stride), ties go to the first index; a row with a NaN or an infinity anywhere gives -1
    /// (where the host's ck_all_finite_f32 says false); rows a stride apart (the padding holds a
    /// larger value that must not be read), a vocabulary like Llama 3's and one smaller than a
    /// workgroup.
    func testArgmaxRows() throws {
        for (n, stride) in [(128_256, 128_256), (1000, 1100), (37, 40)] {
            var rows: [[Float]] = []
            func row(_ edit: (inout [Float]) -> Void) { var r = random(n, scale: 8); edit(&r); rows.append(r) }
            row { _ in }
            row { $0[0] = 100 }
            row { $0[n - 1] = 100 }
            row { $0[n / 2 + 3] = 50; $0[n / 3] = 50 } // a tie: the first wins
            row { $0[n - 2] = 20; $0[1] = .nan; $0[n / 2] = .nan } // NaNs are skipped
            row { $0 = [Float](repeating: -.infinity, count: n); $0[0] = .nan; $0[n / 2] = .nan } // -inf from index 1
            row { $0 = [Float](repeating: .nan, count: n) } // nothing: 0
            row { $0 = [Float](repeating: 3, count: n) } // all equal: 0
            row { $0 = [Float](repeating: -1, count: n); $0[n - 1] = .infinity; $0[n / 2] = .infinity }
            row { $0[n - 1] = -.infinity } // one -inf, at the end: not finite
            var x = [Float](repeating: 1000, count: rows.count * stride)
            for (r, v) in rows.enumerated() { for j in 0..<n { x[r * stride + j] = v[j] } }
            let want = rows.map { r in
                r.withUnsafeBufferPointer { ck_all_finite_f32($0.baseAddress!, Int64(n)) != 0 ? Int32(ck_argmax_f32($0.baseAddress!, Int64(n))) : -1 }
            }
            XCTAssertEqual(Array(want[1...9]), [0, Int32(n - 1), Int32(n / 3), -1, -1, -1, 0, -1, -1], "the reference's rules, n=\(n)")
            let out = try upload([Int32](repeating: -7, count: rows.count))
            try run(GPUKernels.argmaxRows, [try upload(x), out], [UInt32(n), UInt32(stride)], (rows.count, 1, 1))
            let got = try readBytes(out, rows.count * 4).withUnsafeBytes { Array($0.bindMemory(to: Int32.self)) }
            XCTAssertEqual(got, want, "argmax_rows, n=\(n) stride=\(stride)")
        }
    }

    func testElementwise() throws {
        let count = 1000
        let a = random(count, scale: 4), b = random(count)
        let ab = try upload(a)
        try run(GPUKernels.add, [ab, try upload(b)], [UInt32(count)], ((count + 255) / 256, 1, 1))
        let sum = (0..<count).map { Double(a[$0]) + Double(b[$0]) }
        assertClose(try read(ab, count), sum, tolerance: sum.map { abs($0) * 1e-6 + 1e-7 }, "add")
        // swiglu with both activations (1 SiLU, 2 GELU), gates up to ±4
        let upB = try upload(b)
        var acts: [[Float]] = []
        for act: UInt32 in [1, 2] {
            let gb = try upload(a)
            try run(GPUKernels.swiglu, [gb, upB], [UInt32(count), act, 0, 0], ((count + 255) / 256, 1, 1))
            let sw = (0..<count).map { Self.gluAct(Double(a[$0]), act) * Double(b[$0]) }
            acts.append(try read(gb, count))
            let tol = (0..<count).map { i -> Double in abs(sw[i]) * 1e-5 + 1e-6 + Self.geluSlack(Double(a[i]), Double(b[i]), act) }
            assertClose(acts[acts.count - 1], sw, tolerance: tol, "swiglu act=\(act)")
        }
        XCTAssertGreaterThan(zip(acts[0], acts[1]).filter { abs($0 - $1) > 1e-2 }.count, count / 4, "swiglu: SiLU and GELU agree")
        // act 3, gpt-oss's clamped SwiGLU (α 1.702, limit 7) against ck_swiglu_clamped, gates and
        // ups to ±12 so that both clamps bite
        do {
            let g = random(count, scale: 12), u = random(count, scale: 12), (alpha, limit): (Float, Float) = (1.702, 7)
            let gb = try upload(g)
            try run(GPUKernels.swiglu, [gb, try upload(u)], [UInt32(count), 3, alpha.bitPattern, limit.bitPattern], ((count + 255) / 256, 1, 1))
            var want = [Float](repeating: 0, count: count)
            ck_swiglu_clamped(g, u, &want, Int64(count), alpha, limit)
            assertClose(try read(gb, count), want.map { Double($0) }, tolerance: want.map { abs(Double($0)) * 1e-5 + 1e-6 }, "swiglu clamped")
            XCTAssertGreaterThan(g.filter { $0 > limit }.count, count / 10)
            XCTAssertGreaterThan(u.filter { abs($0) > limit }.count, count / 10)
        }
        // add_bias: a bias of 300 on 4 rows 320 floats apart (the rest of each row untouched)
        do {
            let (n, rows, stride) = (300, 4, 320)
            let x = random(rows * stride, scale: 4), bias = random(n)
            let xb = try upload(x)
            try run(GPUKernels.addBias, [xb, try upload(bias)], [UInt32(n), UInt32(rows), UInt32(stride)], ((n + 255) / 256, rows, 1))
            let want = (0..<(rows * stride)).map { i -> Double in Double(x[i]) + (i % stride < n ? Double(bias[i % stride]) : 0) }
            assertClose(try read(xb, rows * stride), want, tolerance: want.map { abs($0) * 1e-6 + 1e-7 }, "add_bias")
            XCTAssertGreaterThan(zip(x, want).filter { abs(Double($0) - $1) > 1e-3 }.count, rows * n / 2)
        }
        // softcap: cap·tanh(x/cap) in place (Gemma 2's final logits, cap 30; and a cap of 0.5),
        // values from tiny to far past the clamp of the tanh argument (±15); one workgroup per
        // 256 values, and 3 workgroups striding over 3000. tanh in float is good to a few 1e-7
        // in absolute terms (not relative, near 0), so the bound has cap·1e-6 besides.
        let caps: [(Float, Int, Int)] = [(30, 1000, 4), (0.5, 3000, 3)]
        for (cap, n, groups) in caps {
            var x = random(n, scale: 6 * cap)
            x[0] = 0; x[1] = 1e-3; x[2] = -1e4; x[3] = 1e4; x[4] = 20 * cap; x[5] = -16 * cap
            let xb = try upload(x)
            try run(GPUKernels.softcap, [xb], [UInt32(n), cap.bitPattern], (groups, 1, 1))
            let want = x.map { Double(cap) * tanh(Double($0) / Double(cap)) }
            assertClose(try read(xb, n), want, tolerance: want.map { abs($0) * 1e-5 + Double(cap) * 1e-6 }, "softcap cap=\(cap)")
            XCTAssertGreaterThan(zip(x, want).filter { abs(Double($0) - $1) > 0.1 * Double(cap) }.count, n / 2)
        }
        // split-K planes (3 of 5 x 7) summed into rows 9 floats apart (the gaps stay NaN)
        let (n, m, splits, yStride) = (7, 5, 3, 9)
        let planes = random(splits * m * n)
        let yb = try upload([Float](repeating: .nan, count: m * yStride))
        try run(GPUKernels.sumSplits, [try upload(planes), yb], [UInt32(n), UInt32(m), UInt32(yStride), UInt32(splits), UInt32(m * n)], (1, 1, 1))
        let got = try read(yb, m * yStride)
        for r in 0..<m {
            let want = (0..<n).map { c in (0..<splits).reduce(0.0) { $0 + Double(planes[$1 * m * n + r * n + c]) } }
            assertClose(Array(got[(r * yStride)..<(r * yStride + n)]), want, tolerance: want.map { abs($0) * 1e-6 + 1e-6 }, "sum_splits row \(r)")
            XCTAssert(got[(r * yStride + n)..<((r + 1) * yStride)].allSatisfy(\.isNaN), "sum_splits wrote past row \(r)")
        }
        // the host's split plans: only small grids of quantized weights, whole steps of 4 units
        XCTAssertEqual(GPUKernels.coopSplits(n: 4096, m: 512, k: 14336, type: .q4_0, tile: (128, 128)), 2)
        XCTAssertEqual(GPUKernels.coopSplits(n: 4096, m: 512, k: 14336, type: .q4_0, tile: (128, 64)), 1)
        XCTAssertEqual(GPUKernels.coopSplits(n: 4096, m: 256, k: 14336, type: .q4_0, tile: (128, 64)), 2)
        XCTAssertEqual(GPUKernels.coopSplits(n: 28672, m: 512, k: 4096, type: .q4_0), 1)
        XCTAssertEqual(GPUKernels.coopSplits(n: 2048, m: 512, k: 8192, type: .q4_K, tile: (128, 128)), 4)
        XCTAssertEqual(GPUKernels.coopSplits(n: 4096, m: 512, k: 4096, type: .f16), 1)
        XCTAssertEqual(GPUKernels.coopSplits(n: 256, m: 32, k: 1024, type: .q8_0), 1)
        for (k, sp) in [(14336, 2), (4096, 4), (8192, 4), (2048, 2)] {
            let u = GPUKernels.coopSplitUnits(k: k, splits: sp)
            XCTAssert(u % 4 == 0 && u * sp >= k / 16 && u * (sp - 1) < k / 16, "split units k=\(k) splits=\(sp)")
            // matmul_cm2_T's K-quant splits: whole blocks of 256 values, none empty
            let b = GPUKernels.coopSplitUnits(k: k, splits: sp, multiple: 16)
            XCTAssert(b % 16 == 0 && b * sp >= k / 16 && b * (sp - 1) < k / 16, "K-quant split units k=\(k) splits=\(sp)")
        }
        // matmul_coop_batch_T's plans (the kernel itself needs cooperative matrices: checked on
        // the device by coopmat-check): every shape within 48 KiB of shared memory, splits of
        // whole 64-value chunks that cover K with none empty, and at most 32 rows
        for t in GPUKernels.coopBatchTypes {
            for m in 1...64 {
                let sg = GPUKernels.coopBatchSubgroups(t, rows: m), mt = GPUKernels.coopBatchTiles(rows: m)
                XCTAssertLessThanOrEqual(GPUKernels.coopBatchShared(subgroups: sg, mt: mt, type: t), 49152, "\(t) rows \(m)")
                for (n, k) in [(4096, 4096), (4096, 14336), (28672, 4096), (6144, 4096), (128256, 4096), (96, 128)] {
                    let plan = GPUKernels.coopBatchPlan(n: n, k: k, rows: m, type: t)
                    XCTAssert(plan.groups * 32 >= n && (plan.groups - 1) * 32 < n)
                    XCTAssertGreaterThanOrEqual(plan.rowGroups * 16 * mt, m)
                    let units = k / 16
                    XCTAssert(plan.splitUnits % 4 == 0 && plan.splitUnits * plan.splits >= units && plan.splitUnits * (plan.splits - 1) < units,
                              "\(t) n=\(n) k=\(k) rows \(m): \(plan)")
                }
            }
        }
        XCTAssertEqual(GPUKernels.coopBatchPlan(n: 4096, k: 4096, rows: 32, type: .q4_0).splits, 4)
        XCTAssertEqual(GPUKernels.coopBatchPlan(n: 28672, k: 4096, rows: 32, type: .q4_0).splits, 1)
        XCTAssertFalse(GPUKernels.useCoopBatch(.q4_0, rows: 33, k: 4096))
        XCTAssertFalse(GPUKernels.useCoopBatch(.q4_0, rows: 32, k: 4096 + 32))
        XCTAssertFalse(GPUKernels.useCoopBatch(.q4_K, rows: 32, k: 4096))
        XCTAssertTrue(GPUKernels.useCoopBatch(.q8_0, rows: 17, k: 2048))
        if ProcessInfo.processInfo.environment["VELO_GPU_COOP_BATCH_PREFETCH"] == nil && ProcessInfo.processInfo.environment["VELO_GPU_COOP_BATCH"] == nil {
            // chunks in flight a subgroup (the last constant): two of Q4_0's; of Q8_0's, two for
            // products at least 4096 by 4096
            XCTAssertEqual(GPUKernels.matmulCoopBatch(.q4_0, rows: 16, n: 2048, k: 2048).constants, [64, 1, 2])
            XCTAssertEqual(GPUKernels.matmulCoopBatch(.q8_0, rows: 16, n: 2048, k: 5632).constants, [64, 1, 1])
            XCTAssertEqual(GPUKernels.matmulCoopBatch(.q8_0, rows: 16, n: 4096, k: 14336).constants, [64, 1, 2])
        }
        // the decode kernels' crossover: batches past 8 rows take the tensor-core batch kernel
        // where every layer product has it; otherwise matvec keeps up to 16 rows
        func product(_ t: GGMLType, k: Int = 4096) -> WeightMatrix {
            WeightMatrix(name: "w", type: t, data: UnsafeRawPointer(bitPattern: 64)!, rows: 4096, cols: k, rowBytes: k / t.blockSize * t.bytesPerBlock)
        }
        if ProcessInfo.processInfo.environment["VELO_GPU_MATVEC_MAX_ROWS"] == nil && ProcessInfo.processInfo.environment["VELO_GPU_COOP_BATCH"] == nil {
            XCTAssertEqual(GPUKernels.matvecMaxRows(layerProducts: [product(.q4_0), product(.q8_0)], experts: false, tensorCores: true), 8)
            XCTAssertEqual(GPUKernels.matvecMaxRows(layerProducts: [product(.q4_0), product(.q6_K)], experts: false, tensorCores: true), 16)
            XCTAssertEqual(GPUKernels.matvecMaxRows(layerProducts: [product(.q4_0), product(.q4_0, k: 4096 + 32)], experts: false, tensorCores: true), 16)
            XCTAssertEqual(GPUKernels.matvecMaxRows(layerProducts: [product(.q4_0)], experts: true, tensorCores: true), 16)
            XCTAssertEqual(GPUKernels.matvecMaxRows(layerProducts: [product(.q4_0)], experts: false, tensorCores: false), 16)
            XCTAssertEqual(GPUKernels.coopBatchSubgroups(.q4_0, rows: 16), 2)
            XCTAssertEqual(GPUKernels.coopBatchSubgroups(.q4_0, rows: 32), 4)
        }
        XCTAssertGreaterThanOrEqual(GPUKernels.f16Bytes(maxTokens: 20, maxCols: 4096, experts: nil), 64 * 4096 * 2)
        // matmul_cm2_T's plan (the kernel needs VK_NV_cooperative_matrix2: checked on the device
        // by coopmat-check). It reads its last tile's activation rows unchecked, so the float16
        // copy holds whole tiles; its narrowed last tiles (TX/2, TX/4) stay whole 16-row
        // matrices; it takes Q4_0, Q8_0, Q4_K, Q5_K and Q6_K products of 64 rows and more.
        let tx = GPUKernels.cm2Shape.tx
        XCTAssertEqual(tx % 64, 0)
        for rows in [1, 63, 64, 65, 255, 256, 257, 700] {
            XCTAssertGreaterThanOrEqual(GPUKernels.f16Bytes(maxTokens: rows, maxCols: 4096, experts: nil), (rows + tx - 1) / tx * tx * 4096 * 2, "\(rows) rows")
        }
        XCTAssertTrue(GPUKernels.useCM2(.q4_0, rows: 64))
        XCTAssertTrue(GPUKernels.useCM2(.q8_0, rows: 512))
        XCTAssertFalse(GPUKernels.useCM2(.q4_0, rows: 63))
        XCTAssertTrue(GPUKernels.useCM2(.q4_K, rows: 512))
        XCTAssertTrue(GPUKernels.useCM2(.q6_K, rows: 64))
        XCTAssertFalse(GPUKernels.useCM2(.q6_K, rows: 63))
        XCTAssertTrue(GPUKernels.useCM2(.q5_K, rows: 512))
        XCTAssertFalse(GPUKernels.useCM2(.q2_K, rows: 512))
        // float16 sums for every type on matmul_cm2_T (llama.cpp's default precision)
        XCTAssertEqual(GPUKernels.cm2F16Sums, [.q4_0, .q8_0, .q4_K, .q5_K, .q6_K])
        XCTAssertEqual(GPUKernels.matmulCM2(.q4_K, f16Sums: false).name, "matmul_cm2_q4_k")
    }

    /// One batch of two sequences for the attention kernels: (heads, kvHeads, hd, pageSize,
    /// sequence lengths, fresh tokens per sequence, softcap, window).
    typealias AttentionCase = (heads: Int, kvHeads: Int, hd: Int, pageSize: Int, lengths: [Int], fresh: [Int], softcap: Float, window: Int)

    /// kv_store then attention (split-K with the host's plan, one split, and fixed chunks; and
    /// attention_tiled where the shape suits it) through page tables, against softmax(QKᵀ)V in
    /// float64 with the softcap (cap·tanh(s/cap)) and the window (a query at position q sees keys
    /// max(0, q - window + 1) ... q). Keys before every window of their sequence get V rows of
    /// 1000s, so any weight on them shows; with a softcap the scores are scaled up to about ±1 and
    /// more, so that the cap bends them (checked on the reference).
    /// `sinks`: each head's sink logit (random, about the scores' size) joins its softmax, as gpt-oss's.
    func checkPagedAttention(_ cases: [AttentionCase], sinks: Bool = false) throws {
        for (heads, kvHeads, hd, pageSize, lengths, fresh, softcap, window) in cases {
            let kvDim = kvHeads * hd, layers = 2, layer = 1
            let pageStride = layers * 2 * pageSize * kvDim
            func firstKey(_ pos: Int) -> Int { window > 0 && pos + 1 > window ? pos + 1 - window : 0 }
            // every sequence on its own shuffled pages
            let pagesPer = lengths.map { ($0 + pageSize - 1) / pageSize }
            let pageCount = pagesPer.reduce(0, +) + 2
            var perm = Array(0..<pageCount)
            perm.shuffle(using: &rng)
            var pageLists: [[Int32]] = []
            var next = 0
            for c in pagesPer { pageLists.append(perm[next..<(next + c)].map { Int32($0) }); next += c }
            var kvHost = [Float](repeating: 0, count: pageCount * pageStride)
            var keys = lengths.map { [[Float]](repeating: [], count: $0) }, values = keys
            for s in 0..<2 {
                // the batch's first token of the sequence has the earliest window
                let unseen = firstKey(lengths[s] - fresh[s])
                for j in 0..<lengths[s] {
                    keys[s][j] = random(kvDim)
                    values[s][j] = j < unseen ? [Float](repeating: 1000, count: kvDim) : random(kvDim)
                }
            }
            // the earlier positions are written by the host; each sequence's last `fresh` come in
            // this batch through kv_store
            for s in 0..<2 {
                for j in 0..<(lengths[s] - fresh[s]) {
                    let page = Int(pageLists[s][j / pageSize]), slot = j % pageSize
                    let base = page * pageStride + layer * 2 * pageSize * kvDim
                    for d in 0..<kvDim {
                        kvHost[base + d * pageSize + slot] = keys[s][j][d]
                        kvHost[base + pageSize * kvDim + slot * kvDim + d] = values[s][j][d]
                    }
                }
            }
            var tokpos: [Int32] = [], tokpt: [Int32] = [], tokseq: [Int] = [], kIn: [Float] = [], vIn: [Float] = []
            let pagetab = pageLists[0] + pageLists[1]
            for s in 0..<2 {
                for j in (lengths[s] - fresh[s])..<lengths[s] {
                    tokpos.append(Int32(j))
                    tokpt.append(s == 0 ? 0 : Int32(pageLists[0].count))
                    tokseq.append(s)
                    kIn += keys[s][j]
                    vIn += values[s][j]
                }
            }
            let n = tokpos.count
            let kv = try upload(kvHost)
            let posB = try upload(tokpos), ptB = try upload(tokpt), tabB = try upload(pagetab)
            let layerOff = UInt32(layer * 2 * pageSize * kvDim)
            try run(GPUKernels.kvStore, [try upload(kIn), try upload(vIn), kv, posB, ptB, tabB],
                    [UInt32(n), UInt32(kvDim), UInt32(pageSize), UInt32(pageStride), layerOff, UInt32(kvDim)], (n, (kvDim + 63) / 64, 1))
            let q = random(n * heads * hd)
            // Q rows padded to a longer stride (as views of Q|K|V rows): the gaps are NaN
            let qStride = heads * hd + 2 * kvDim
            var padded = [Float](repeating: .nan, count: n * qStride)
            for t in 0..<n {
                for i in 0..<(heads * hd) { padded[t * qStride + i] = q[t * heads * hd + i] }
            }
            let qB = try upload(padded)
            let scale = (softcap > 0 ? 3 : 1) / Float(hd).squareRoot()
            let sinkLogits = (0..<heads).map { _ in Float.random(in: 0...4, using: &rng) }
            let sinkB = try upload(sinks ? sinkLogits : [0])
            func reference(cap: Float, sinks: Bool) -> [Double] {
                var want: [Double] = []
                for t in 0..<n {
                    let s = tokseq[t]
                    let first = firstKey(Int(tokpos[t])), len = Int(tokpos[t]) + 1
                    for h in 0..<heads {
                        let kvh = h / (heads / kvHeads)
                        let qh = (0..<hd).map { Double(q[(t * heads + h) * hd + $0]) }
                        let sc = (first..<len).map { j -> Double in
                            let x = (0..<hd).reduce(0.0) { $0 + qh[$1] * Double(keys[s][j][kvh * hd + $1]) } * Double(scale)
                            return cap > 0 ? Double(cap) * tanh(x / Double(cap)) : x
                        }
                        let sink = sinks ? Double(sinkLogits[h]) : -Double.infinity
                        let m = max(sc.max()!, sink)
                        let e = sc.map { exp($0 - m) }
                        let z = e.reduce(0, +) + exp(sink - m)
                        want += (0..<hd).map { d in (first..<len).reduce(0.0) { $0 + e[$1 - first] / z * Double(values[s][$1][kvh * hd + d]) } }
                    }
                }
                return want
            }
            let want = reference(cap: softcap, sinks: sinks)
            let what = "heads=\(heads)/\(kvHeads) hd=\(hd) page=\(pageSize) lengths=\(lengths) fresh=\(fresh) softcap=\(softcap) window=\(window) sinks=\(sinks)"
            if sinks {
                XCTAssertGreaterThan(zip(want, reference(cap: softcap, sinks: false)).map { abs($0 - $1) }.max()!, 1e-2, "the sinks must matter: " + what)
            }
            if softcap > 0 {
                XCTAssertGreaterThan(zip(want, reference(cap: 0, sinks: sinks)).map { abs($0 - $1) }.max()!, 1e-2, "the softcap must matter: " + what)
            }
            let mask: [UInt32] = [softcap.bitPattern, UInt32(window), sinks ? 1 : 0, 0, 0] // (vOff, vDim 0: the whole head)
            // the host's plan (decode-sized workspace), one split (direct), and fixed chunks
            let keysMax = lengths.max()!
            let planned = GPUKernels.attentionSplits(keys: keysMax, n: n, maxTokens: 16, maxContext: 4096)
            var plans = [planned, (keysMax, 1), (32, (keysMax + 31) / 32), (64, (keysMax + 63) / 64), (96, (keysMax + 95) / 96)]
            plans = plans.filter { $0.1 <= 256 }
            for (chunk, splits) in plans {
                let out = try upload([Float](repeating: .nan, count: n * heads * hd))
                let part = try upload([Float](repeating: .nan, count: n * heads * splits * (hd + 2)))
                try run(GPUKernels.attention, [qB, kv, out, posB, ptB, tabB, part, sinkB],
                        [UInt32(n), UInt32(heads), UInt32(kvHeads), UInt32(hd), UInt32(kvDim), UInt32(pageSize), UInt32(pageStride), layerOff,
                         scale.bitPattern, UInt32(chunk), UInt32(splits), UInt32(qStride)] + mask,
                        (n, kvHeads, splits))
                if splits > 1 {
                    let params: [UInt32] = [UInt32(n), UInt32(heads), UInt32(hd), UInt32(chunk), UInt32(splits), sinks ? 1 : 0]
                    try run(GPUKernels.attentionCombine, [part, out, posB, sinkB], params, GPUKernels.attentionCombineGroups(n: n, heads: heads, headDim: hd))
                    if hd % 32 == 0, GPUKernels.integerDot(try device()) {
                        // the variant that also writes 8-bit blocks: the same floats, and the
                        // blocks quantize_q8 makes of them
                        let out8 = try upload([Float](repeating: .nan, count: n * heads * hd))
                        let sizes = GPUKernels.q8Bytes(k: heads * hd, m: n)
                        let xq = try upload([UInt8](repeating: 0xAB, count: sizes.values)), xd = try upload([UInt8](repeating: 0xAB, count: sizes.scales))
                        try run(GPUKernels.attentionCombineQ8, [part, out8, posB, xq, xd, sinkB], params, GPUKernels.attentionCombineGroups(n: n, heads: heads, headDim: hd))
                        XCTAssertEqual(try read(out8, n * heads * hd), try read(out, n * heads * hd), "attention_combine_q8 floats hd=\(hd)")
                        let want8 = try quantizeQ8(out8, k: heads * hd, m: n)
                        XCTAssertEqual(try readBytes(xq, sizes.values), want8.values, "attention_combine_q8 values hd=\(hd)")
                        XCTAssertEqual(try readBytes(xd, sizes.scales), want8.scales, "attention_combine_q8 scales hd=\(hd)")
                    }
                }
                if hd % 32 == 0, splits <= 16, GPUKernels.integerDot(try device()) {
                    // attention_q8: one split, or the token's last split merging the others
                    // (twice: the counters must be back at zero): the floats within rounding of
                    // the combine's, and exactly the blocks quantize_q8 makes of them
                    let done = try upload([UInt8](repeating: 0, count: 4 * n * kvHeads))
                    for round in 0..<2 {
                        let out8 = try upload([Float](repeating: .nan, count: n * heads * hd))
                        let part8 = try upload([Float](repeating: .nan, count: n * heads * splits * (hd + 2)))
                        let sizes = GPUKernels.q8Bytes(k: heads * hd, m: n)
                        let xq = try upload([UInt8](repeating: 0xAB, count: sizes.values)), xd = try upload([UInt8](repeating: 0xAB, count: sizes.scales))
                        try run(GPUKernels.attentionQ8, [qB, kv, out8, posB, ptB, tabB, part8, xq, xd, done, sinkB],
                                [UInt32(n), UInt32(heads), UInt32(kvHeads), UInt32(hd), UInt32(kvDim), UInt32(pageSize), UInt32(pageStride), layerOff,
                                 scale.bitPattern, UInt32(chunk), UInt32(splits), UInt32(qStride)] + mask,
                                (n, kvHeads, splits))
                        let got = try read(out8, n * heads * hd), ref = try read(out, n * heads * hd)
                        assertClose(got, ref.map { Double($0) }, tolerance: ref.map { abs(Double($0)) * 1e-5 + 1e-6 }, "attention_q8 floats \(what) splits=\(splits) round \(round)")
                        let want8 = try quantizeQ8(out8, k: heads * hd, m: n)
                        XCTAssertEqual(try readBytes(xq, sizes.values), want8.values, "attention_q8 values \(what) splits=\(splits)")
                        XCTAssertEqual(try readBytes(xd, sizes.scales), want8.scales, "attention_q8 scales \(what) splits=\(splits)")
                        XCTAssertEqual(try readBytes(done, 4 * n * kvHeads), [UInt8](repeating: 0, count: 4 * n * kvHeads), "attention_q8 counters \(what)")
                    }
                }
                if splits <= 16 {
                    // attention_x16: the same merge, and exactly to_f16's float16 rows of its
                    // output (rows of a longer stride); twice, the counters back at zero
                    let done = try upload([UInt8](repeating: 0, count: 4 * n * kvHeads))
                    let width = heads * hd, x16Row = width + 4
                    for round in 0..<2 {
                        let outH = try upload([Float](repeating: .nan, count: n * width))
                        let partH = try upload([Float](repeating: .nan, count: n * heads * splits * (hd + 2)))
                        let x16 = try upload([UInt8](repeating: 0xAB, count: n * x16Row * 2))
                        try run(GPUKernels.attentionX16, [qB, kv, outH, posB, ptB, tabB, partH, x16, done, sinkB],
                                [UInt32(n), UInt32(heads), UInt32(kvHeads), UInt32(hd), UInt32(kvDim), UInt32(pageSize), UInt32(pageStride), layerOff,
                                 scale.bitPattern, UInt32(chunk), UInt32(splits), UInt32(qStride)] + mask + [UInt32(x16Row)],
                                (n, kvHeads, splits))
                        let got = try read(outH, n * width), ref = try read(out, n * width)
                        assertClose(got, ref.map { Double($0) }, tolerance: ref.map { abs(Double($0)) * 1e-5 + 1e-6 }, "attention_x16 floats \(what) splits=\(splits) round \(round)")
                        let want16 = try upload([UInt8](repeating: 0xAB, count: n * x16Row * 2))
                        try run(GPUKernels.toF16, [outH, want16], [UInt32(width), UInt32(n), UInt32(width), UInt32(x16Row)], GPUKernels.toF16Groups(k: width, m: n))
                        let a = try readBytes(x16, n * x16Row * 2), b = try readBytes(want16, n * x16Row * 2)
                        for t in 0..<n {
                            let r = (2 * t * x16Row)..<(2 * (t * x16Row + width))
                            XCTAssertEqual(Array(a[r]), Array(b[r]), "attention_x16 float16 row \(t) \(what) splits=\(splits)")
                        }
                        XCTAssertEqual(try readBytes(done, 4 * n * kvHeads), [UInt8](repeating: 0, count: 4 * n * kvHeads), "attention_x16 counters \(what)")
                    }
                }
                assertClose(try read(out, n * heads * hd), want, tolerance: want.map { abs($0) * 1e-4 + 1e-5 },
                            "attention \(what) chunk=\(chunk) splits=\(splits)")
                // specialised for the group's heads (the host's choice, GPUKernels.attentionGrouped)
                // and for half of them (two passes a group): the same floats as the default.
                // Metal has no such specialisation (its functions take no constant after 0).
                let group = heads / kvHeads, specializes = try device().specializes
                for gs in Set([group, max(1, group / 2)]) where gs < 8 && specializes {
                    let k = gs == group ? GPUKernels.attentionGrouped(GPUKernels.attention, groupHeads: gs, device: try device())
                        : GPUKernels.Kernel(name: "attention", buffers: 8, constants: [128, UInt32(gs)])
                    XCTAssertEqual(k.constants, [128, UInt32(gs)])
                    let outG = try upload([Float](repeating: .nan, count: n * heads * hd))
                    let partG = try upload([Float](repeating: .nan, count: n * heads * splits * (hd + 2)))
                    try run(k, [qB, kv, outG, posB, ptB, tabB, partG, sinkB],
                            [UInt32(n), UInt32(heads), UInt32(kvHeads), UInt32(hd), UInt32(kvDim), UInt32(pageSize), UInt32(pageStride), layerOff,
                             scale.bitPattern, UInt32(chunk), UInt32(splits), UInt32(qStride)] + mask,
                            (n, kvHeads, splits))
                    if splits > 1 {
                        try run(GPUKernels.attentionCombine, [partG, outG, posB, sinkB], [UInt32(n), UInt32(heads), UInt32(hd), UInt32(chunk), UInt32(splits), sinks ? 1 : 0], GPUKernels.attentionCombineGroups(n: n, heads: heads, headDim: hd))
                    }
                    XCTAssertEqual(try read(outG, n * heads * hd).map(\.bitPattern), try read(out, n * heads * hd).map(\.bitPattern),
                                   "attention with \(gs) heads a pass, \(what) chunk=\(chunk) splits=\(splits)")
                }
            }
            // FlashAttention-2 tiles over query blocks (each case's shapes suit the kernel
            // except head sizes past 128)
            // FlashAttention-2 tiles, whole and in key splits merged by attention_combine (the
            // host's plan, and splits of 32 and 48 keys: many workgroups with no rows' keys, and
            // window cases whose early splits hold none of a row's keys)
            if GPUKernels.attentionTiledFits(heads: heads, kvHeads: kvHeads, headDim: hd) {
                let blocks = GPUKernels.attentionQueryBlocks(sequence: tokseq, group: heads / kvHeads)
                let host = GPUKernels.prefillAttentionSplits(keys: keysMax, n: n, workgroups: blocks.count / 2 * kvHeads, maxTokens: n, maxContext: 4096)
                for (chunk, splits) in [host, (keysMax, 1), (32, (keysMax + 31) / 32), (48, (keysMax + 47) / 48)] where splits <= 256 {
                    let out = try upload([Float](repeating: .nan, count: n * heads * hd))
                    let part = try upload([Float](repeating: .nan, count: max(n * heads * splits * (hd + 2), 1)))
                    try run(GPUKernels.attentionTiled, [qB, kv, out, posB, ptB, tabB, try upload(blocks), part, sinkB],
                            [UInt32(heads), UInt32(kvHeads), UInt32(hd), UInt32(kvDim), UInt32(pageSize), UInt32(pageStride), layerOff,
                             scale.bitPattern, UInt32(qStride), softcap.bitPattern, UInt32(window), UInt32(chunk), UInt32(splits), sinks ? 1 : 0],
                            (blocks.count / 2, kvHeads, splits))
                    if splits > 1 {
                        try run(GPUKernels.attentionCombine, [part, out, posB, sinkB], [UInt32(n), UInt32(heads), UInt32(hd), UInt32(chunk), UInt32(splits), sinks ? 1 : 0], GPUKernels.attentionCombineGroups(n: n, heads: heads, headDim: hd))
                    }
                    assertClose(try read(out, n * heads * hd), want, tolerance: want.map { abs($0) * 1e-4 + 1e-5 },
                                "attention_tiled \(what) chunk=\(chunk) splits=\(splits)")
                }
            } else {
                XCTAssert(hd > GPUKernels.attentionTiledMaxHeadDim || hd % 4 != 0, "attention_tiled should take heads=\(heads)/\(kvHeads) hd=\(hd)")
            }
        }
    }

    /// Two sequences sharing a batch with positions that cross page edges, GQA groups (1, 3, 4,
    /// 8 query heads per KV head) and odd head sizes; single-split (direct) and split-K (partials
    /// + attention_combine) paths, short and long (300+ keys, many tiles and splits) contexts;
    /// no softcap, no window.
    func testPagedAttention() throws {
        let cases: [AttentionCase] = [
            (4, 2, 16, 4, [37, 6], [3, 2], 0, 0), (3, 1, 40, 16, [37, 6], [3, 2], 0, 0), (8, 8, 64, 16, [37, 6], [3, 2], 0, 0),
            (2, 1, 128, 8, [37, 6], [3, 2], 0, 0),
            (32, 8, 128, 16, [333, 17], [1, 1], 0, 0), (8, 1, 80, 16, [517, 40], [2, 1], 0, 0), (16, 2, 64, 16, [1000, 70], [1, 3], 0, 0),
            (4, 4, 128, 16, [129, 2], [2, 1], 0, 0), (9, 1, 64, 16, [260, 100], [1, 1], 0, 0),
            // prefill-sized: many fresh tokens, so attention_tiled gets several blocks a sequence
            (4, 2, 16, 4, [37, 6], [37, 6], 0, 0), (32, 8, 128, 16, [333, 17], [45, 17], 0, 0), (9, 1, 64, 16, [70, 100], [13, 31], 0, 0),
            (3, 1, 12, 8, [50, 33], [50, 20], 0, 0), (2, 2, 8, 16, [90, 1], [90, 1], 0, 0),
        ]
        try checkPagedAttention(cases)
        // query blocks: one sequence each, consecutive, at most 32 / G tokens, all tokens covered
        let seq = [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]
        XCTAssertEqual(GPUKernels.attentionQueryBlocks(sequence: seq, group: 4), [0, 3, 3, 8, 11, 1, 12, 1])
        XCTAssertEqual(GPUKernels.attentionQueryBlocks(sequence: [], group: 4), [])
        // attention_coop's blocks of 64 rows: 16 tokens at G = 4, 8 at G = 8
        XCTAssertEqual(GPUKernels.attentionQueryBlocks(sequence: [Int](repeating: 0, count: 20), group: 4, rows: 64), [0, 16, 16, 4])
        XCTAssertEqual(GPUKernels.attentionQueryBlocks(sequence: [0, 0, 0, 1] + [Int](repeating: 2, count: 9), group: 8, rows: 64),
                       [0, 3, 3, 1, 4, 8, 12, 1])
        XCTAssertNotNil(GPUKernels.attentionBlocks(sequence: [Int](repeating: 0, count: 512), heads: 32, kvHeads: 8, headDim: 128, rows: 64))
        XCTAssertNil(GPUKernels.attentionBlocks(sequence: [Int](repeating: 0, count: 512), heads: 64, kvHeads: 1, headDim: 64, rows: 32),
                     "a KV group larger than a block")
        XCTAssertNil(GPUKernels.attentionBlocks(sequence: Array(0..<32), heads: 32, kvHeads: 8, headDim: 128), "decode step")
        XCTAssertNotNil(GPUKernels.attentionBlocks(sequence: [Int](repeating: 0, count: 512), heads: 32, kvHeads: 8, headDim: 128))
        XCTAssertNil(GPUKernels.attentionBlocks(sequence: [Int](repeating: 0, count: 512), heads: 8, kvHeads: 1, headDim: 256))
        // the host's plans: splits × tokens within the scratch, every key covered
        for (n, keys) in [(1, 16), (1, 200), (1, 4096), (16, 4096), (512, 512), (512, 4096), (7, 1)] {
            let lim = GPUKernels.attentionSplitLimit(maxTokens: 512, maxContext: 4096)
            let (chunk, splits) = GPUKernels.attentionSplits(keys: keys, n: n, maxTokens: 512, maxContext: 4096)
            XCTAssert(chunk % GPUKernels.attentionTile == 0 && chunk * splits >= keys && chunk * (splits - 1) < keys, "plan n=\(n) keys=\(keys)")
            XCTAssert(splits == 1 || n * splits <= lim.capacity, "plan n=\(n) keys=\(keys) splits=\(splits)")
        }
        // prefill: one split over a short cache; over a long one, splits to ~1024 workgroups
        // within the scratch, every key covered
        XCTAssertEqual(GPUKernels.prefillAttentionSplits(keys: 512, n: 512, workgroups: 256, maxTokens: 512, maxContext: 8192).splits, 1)
        for (n, keys, wg) in [(512, 16896, 256), (512, 4608, 256), (2048, 16896, 1024), (100, 100_000, 8), (17, 2000, 16)] {
            let lim = GPUKernels.attentionSplitLimit(maxTokens: 2048, maxContext: 131072)
            let (chunk, splits) = GPUKernels.prefillAttentionSplits(keys: keys, n: n, workgroups: wg, maxTokens: 2048, maxContext: 131072)
            XCTAssert(chunk % GPUKernels.attentionTile == 0 && chunk * splits >= keys && chunk * (splits - 1) < keys, "prefill plan n=\(n) keys=\(keys)")
            XCTAssert(splits == 1 || n * splits <= lim.capacity, "prefill plan n=\(n) keys=\(keys) splits=\(splits)")
            XCTAssert(splits == 1 || chunk >= GPUKernels.prefillSplitMinKeys - GPUKernels.attentionTile, "prefill plan n=\(n) keys=\(keys) chunk=\(chunk)")
        }
        XCTAssertEqual(GPUKernels.prefillAttentionSplits(keys: 16896, n: 512, workgroups: 256, maxTokens: 512, maxContext: 17408).splits, 4)
        // long contexts: up to 64 splits through 4096 keys, then 64 keys a split up to 256 splits
        XCTAssertEqual(GPUKernels.attentionSplits(keys: 4096, n: 1, maxTokens: 512, maxContext: 16384).splits, 64)
        XCTAssertEqual(GPUKernels.attentionSplits(keys: 8192, n: 1, maxTokens: 512, maxContext: 16384).splits, 128)
        XCTAssertEqual(GPUKernels.attentionSplits(keys: 16384, n: 1, maxTokens: 512, maxContext: 16384).splits, 256)
        XCTAssertEqual(GPUKernels.attentionSplits(keys: 16384, n: 1, maxTokens: 512, maxContext: 16384).chunk, 64)
        // staged decode: whole tiles a split, every key covered, about one wave of workgroups,
        // within the scratch
        XCTAssertEqual([64, 80, 128, 160, 256, 40].map { GPUKernels.attentionStagedTile(headDim: $0) }, [128, 64, 64, 32, 32, 128])
        for (n, keys, kvHeads, hd) in [(1, 16512, 8, 128), (1, 4224, 8, 128), (1, 1024, 4, 64), (16, 8192, 8, 128), (64, 131072, 8, 128), (1, 100_000, 1, 256)] {
            let (chunk, splits) = GPUKernels.attentionStagedSplits(keys: keys, n: n, kvHeads: kvHeads, headDim: hd, maxTokens: 512, maxContext: 131072)
            let tile = GPUKernels.attentionStagedTile(headDim: hd), lim = GPUKernels.attentionSplitLimit(maxTokens: 512, maxContext: 131072)
            let what = "staged plan n=\(n) keys=\(keys) kvHeads=\(kvHeads) hd=\(hd): \(chunk) x \(splits)"
            XCTAssert(chunk % tile == 0 && chunk * splits >= keys && chunk * (splits - 1) < keys, what)
            XCTAssert(splits <= lim.splits && (splits == 1 || n * splits <= lim.capacity), what)
            XCTAssertLessThanOrEqual(n * kvHeads * splits, max(GPUKernels.attentionStagedWorkgroups, n * kvHeads), what)
        }
        XCTAssertEqual(GPUKernels.attentionStagedSplits(keys: 16512, n: 1, kvHeads: 8, headDim: 128, maxTokens: 16, maxContext: 32768).splits, 43)
        // pages the staged build takes: f16, 8-key runs at 16-byte boundaries, heads it can tile
        let places = [(pageStride: 4096, layerOff: 512)]
        XCTAssertTrue(GPUKernels.attentionStagedFits(k: .f16, v: .f16, pageSize: 16, kvDim: 1024, headDim: 128, places: places))
        XCTAssertFalse(GPUKernels.attentionStagedFits(k: .f16, v: .q8_0, pageSize: 16, kvDim: 1024, headDim: 128, places: places))
        XCTAssertFalse(GPUKernels.attentionStagedFits(k: .f16, v: .f16, pageSize: 12, kvDim: 1024, headDim: 128, places: places))
        XCTAssertFalse(GPUKernels.attentionStagedFits(k: .f16, v: .f16, pageSize: 16, kvDim: 1024, headDim: 128, places: [(4096, 514)]))
        XCTAssertFalse(GPUKernels.attentionStagedFits(k: .f16, v: .f16, pageSize: 16, kvDim: 576, headDim: 72, places: places))
        XCTAssertFalse(GPUKernels.attentionStagedFits(k: .f16, v: .f16, pageSize: 16, kvDim: 1024, headDim: 512, places: places))
    }

    /// Softcapped scores (Gemma 2) and sliding windows: windows that leave whole splits of the
    /// split-K kernel empty (chunks of 32 with a window of 40 over 333 keys: splits 0-8 hold no
    /// key of it), that start inside a page or on its edge, of 1 key (the query's own), past the
    /// context (no effect); in prefill batches, windows shorter than a key tile so that a query
    /// block's later rows find whole tiles before their window (G = 1: 32 tokens a block).
    func testPagedAttentionSoftcapAndWindow() throws {
        let cases: [AttentionCase] = [
            (4, 2, 16, 4, [37, 6], [3, 2], 1.5, 8), (3, 1, 40, 16, [37, 6], [3, 2], 0, 3),
            (32, 8, 128, 16, [333, 17], [1, 1], 0, 40), (8, 1, 80, 16, [517, 40], [2, 1], 2, 100),
            (16, 2, 64, 16, [1000, 70], [1, 3], 0, 1), (9, 1, 64, 16, [260, 100], [1, 1], 1, 257),
            (4, 4, 128, 16, [129, 2], [2, 1], 1.5, 4096),
            // prefill-sized
            (4, 2, 16, 4, [37, 6], [37, 6], 1.5, 8), (32, 8, 128, 16, [333, 17], [45, 17], 0, 20), (9, 1, 64, 16, [70, 100], [13, 31], 2, 10),
            (3, 1, 12, 8, [50, 33], [50, 20], 0, 2), (2, 2, 8, 16, [90, 1], [90, 1], 1, 5), (4, 4, 64, 16, [200, 3], [64, 3], 0, 7),
        ]
        try checkPagedAttention(cases)
    }

    /// Attention sinks (gpt-oss: 64 query heads of 64 over 8 KV heads, windows of 128 on every
    /// other layer), where each path normalises: one split, the split-K merge (attention_combine,
    /// attention_q8's and attention_x16's own), the tiled prefill, with and without a window.
    func testPagedAttentionSinks() throws {
        let cases: [AttentionCase] = [
            (8, 1, 64, 16, [37, 6], [3, 2], 0, 0), (16, 2, 64, 16, [333, 17], [1, 1], 0, 128), (4, 2, 16, 4, [260, 100], [2, 1], 0, 0),
            // prefill-sized
            (8, 1, 64, 16, [70, 100], [13, 31], 0, 0), (16, 2, 64, 16, [200, 3], [64, 3], 0, 40),
        ]
        try checkPagedAttention(cases, sinks: true)
    }
}
