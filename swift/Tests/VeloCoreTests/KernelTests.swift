import CKernels
import Foundation
import VeloCore
import XCTest

/// Tests of the C kernels (CKernels) against the plain Swift references in KernelReference.swift,
/// at every ISA level the machine has (scalar, AVX2/NEON, AVX-512 VNNI, AMX).
final class KernelTests: XCTestCase {
    override func tearDown() {
        ck_set_isa_limit(Int32(CK_ISA_BEST))
        super.tearDown()
    }

    /// The ISA levels that select different kernel sets here, with their names.
    private func isaLevels() -> [(level: Int32, name: String)] {
        var seen = Set<String>(), out: [(Int32, String)] = []
        for level in Int32(CK_ISA_SCALAR)...Int32(CK_ISA_BEST) {
            ck_set_isa_limit(level)
            let name = String(cString: ck_isa_name())
            if seen.insert(name).inserted { out.append((level, name)) }
        }
        ck_set_isa_limit(Int32(CK_ISA_BEST))
        return out
    }

    // MARK: data

    private func randomFloats(_ n: Int, _ rng: inout SplitMix64, scale: Float = 1) -> [Float] {
        (0..<n).map { i in
            let v = Float.random(in: -1...1, using: &rng) * scale
            return i % 61 == 7 ? v * 6 : v // a few outliers, as activations have
        }
    }

    private func bytes(of x: [Float]) -> [UInt8] { x.withUnsafeBytes { Array($0) } }

    /// A weight row: random quants, finite random scales in a realistic range.
    private func randomWeightRow(_ t: Int32, n: Int, _ rng: inout SplitMix64) -> [UInt8] {
        switch t {
        case KType.f32: return bytes(of: randomFloats(n, &rng))
        case KType.f16:
            return (0..<n).flatMap { _ -> [UInt8] in
                let h = KernelReference.halfBits(Float.random(in: -2...2, using: &rng))
                return [UInt8(h & 0xFF), UInt8(h >> 8)]
            }
        case KType.bf16:
            return (0..<n).flatMap { _ -> [UInt8] in
                let h = UInt16(Float.random(in: -2...2, using: &rng).bitPattern >> 16)
                return [UInt8(h & 0xFF), UInt8(h >> 8)]
            }
        default: break
        }
        var b = (0..<KType.rowBytes(t, n)).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let (bs, bb) = KType.layout(t)
        func scale(_ o: Int, _ lo: Float, _ hi: Float, signed: Bool) {
            var v = Float.random(in: lo...hi, using: &rng)
            if signed && Bool.random(using: &rng) { v = -v }
            KernelReference.put16(&b, o, KernelReference.halfBits(v))
        }
        for blk in 0..<(n / bs) {
            let o = blk * bb
            switch t {
            case KType.q4_0, KType.q5_0, KType.q8_0: scale(o, 0.001, 0.01, signed: true)
            case KType.q4_1, KType.q5_1: scale(o, 0.001, 0.01, signed: false); scale(o + 2, 0.01, 0.1, signed: true)
            case KType.q4_K, KType.q5_K: scale(o, 0.0002, 0.002, signed: false); scale(o + 2, 0.0002, 0.002, signed: false)
            case KType.q6_K: scale(o + 208, 0.0002, 0.002, signed: true)
            default: fatalError()
            }
        }
        return b
    }

    /// An activation row in `t` (a dot type): random floats, quantized by the kernels.
    private func activationRow(_ t: Int32, n: Int, _ rng: inout SplitMix64) -> [UInt8] {
        let x = randomFloats(n, &rng)
        if t == KType.f32 { return bytes(of: x) }
        return quantize(t, x)
    }

    private func quantize(_ t: Int32, _ x: [Float]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(ck_row_size(t, Int64(x.count))))
        ck_quantize_row(t, x, &out, Int64(x.count))
        return out
    }

    private func dequantize(_ t: Int32, _ b: [UInt8], n: Int) -> [Float] {
        var y = [Float](repeating: .nan, count: n)
        ck_dequantize_row(t, b, &y, Int64(n))
        return y
    }

    /// Row lengths to test: one block, several, an odd count; odd lengths for float types.
    private func lengths(_ t: Int32) -> [Int] {
        switch KType.layout(t).block {
        case 1: return [1, 7, 33, 64, 100]
        case 32: return [32, 96, 224, 256]
        default: return [256, 512, 768]
        }
    }

    /// `rows` weight rows (stride `ws` bytes) and `M` activation rows (stride `as`) packed
    /// with a few bytes of padding, so strides are honored and nothing is aligned by luck.
    private struct Problem {
        let type: Int32, n: Int, rows: Int, M: Int
        let ws: Int, aStride: Int
        var w: [UInt8], a: [UInt8]
        var wRows: [[UInt8]], aRows: [[UInt8]]
    }

    private func problem(_ t: Int32, n: Int, rows: Int, M: Int, seed: UInt64) -> Problem {
        var rng = SplitMix64(seed: seed)
        let at = KType.dotType(t)
        let ws = KType.rowBytes(t, n) + 6, aStride = KType.rowBytes(at, n) + 10
        let wRows = (0..<rows).map { _ in randomWeightRow(t, n: n, &rng) }
        let aRows = (0..<M).map { _ in activationRow(at, n: n, &rng) }
        var w = [UInt8](repeating: 0xEE, count: ws * rows), a = [UInt8](repeating: 0xEE, count: aStride * M)
        for (r, row) in wRows.enumerated() { w.replaceSubrange((r * ws)..<(r * ws + row.count), with: row) }
        for (m, row) in aRows.enumerated() { a.replaceSubrange((m * aStride)..<(m * aStride + row.count), with: row) }
        return Problem(type: t, n: n, rows: rows, M: M, ws: ws, aStride: aStride, w: w, a: a, wRows: wRows, aRows: aRows)
    }

    private func matmul(_ p: Problem, r0: Int, r1: Int, M: Int? = nil, ldy: Int) -> [Float] {
        let M = M ?? p.M
        var y = [Float](repeating: .nan, count: M * ldy)
        p.w.withUnsafeBytes { w in
            p.a.withUnsafeBytes { a in
                ck_matmul(p.type, Int64(p.n), w.baseAddress, p.ws, Int64(r0), Int64(r1), a.baseAddress, p.aStride,
                          Int64(M), &y, Int64(ldy))
            }
        }
        return y
    }

    /// Relative tolerance, against the sum of the terms' magnitudes (so cancellation does not
    /// make it meaningless): float accumulation of integer block sums.
    private let tolerance = 2e-5

    private func assertClose(_ got: Float, _ ref: (value: Double, magnitude: Double), _ what: @autoclosure () -> String,
                             file: StaticString = #filePath, line: UInt = #line) {
        let err = abs(Double(got) - ref.value)
        XCTAssert(got.isFinite && err <= tolerance * ref.magnitude + 1e-6,
                  "\(what()): got \(got), reference \(ref.value) (error \(err), magnitude \(ref.magnitude))",
                  file: file, line: line)
    }

    /// y (M rows of ldy) against the reference on rows r0..<r1, and untouched (NaN) elsewhere.
    private func assertMatmul(_ y: [Float], _ ref: [[(value: Double, magnitude: Double)]], M: Int, ldy: Int, r0: Int, r1: Int,
                              _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        for m in 0..<M {
            for r in 0..<ldy {
                let v = y[m * ldy + r]
                if r >= r0 && r < r1 {
                    assertClose(v, ref[m][r], "\(what) rows \(r0)..<\(r1): y[\(m)][\(r)]", file: file, line: line)
                } else {
                    XCTAssert(v.isNaN, "\(what): wrote y[\(m)][\(r)] outside \(r0)..<\(r1)", file: file, line: line)
                }
            }
        }
    }

    // MARK: tests

    func testCPUFeaturesAndTypeFacts() {
        let f = ck_cpu_features()
        let names = isaLevels().map(\.name)
        print("kernel ISA levels: \(names), features 0x\(String(f, radix: 16))")
        XCTAssertEqual(names.first, "scalar")
        #if arch(x86_64)
        if f & 1 != 0 { XCTAssert(names.contains("avx2")) }
        if f & 2 != 0 && f & 4 != 0 { XCTAssert(names.contains("avx512-vnni")) }
        if f & Int32(CK_CPU_AMX_INT8) != 0 { XCTAssert(names.contains("avx512-amx")) }
        #endif
        for t in KType.weights + [KType.q8_1, KType.q8_K] {
            XCTAssertEqual(ck_type_supported(t), 1, KType.name(t))
            let (bs, bb) = KType.layout(t)
            XCTAssertEqual(ck_block_size(t), Int64(bs))
            XCTAssertEqual(ck_row_size(t, Int64(bs * 8)), 8 * bb, KType.name(t))
        }
        for t in KType.weights { XCTAssertEqual(ck_vec_dot_type(t), KType.dotType(t), KType.name(t)) }
        XCTAssertEqual(ck_type_supported(16), 0) // IQ2_XXS
        XCTAssertEqual(ck_row_size(16, 256), 0)
    }

    func testDequantizeMatchesReference() {
        var rng = SplitMix64(seed: 1)
        for t in KType.weights + [KType.q8_1, KType.q8_K] {
            for n in lengths(t) {
                let row: [UInt8]
                switch t {
                case KType.q8_1: row = quantize(t, randomFloats(n, &rng))
                case KType.q8_K: row = quantize(t, randomFloats(n, &rng))
                default: row = randomWeightRow(t, n: n, &rng)
                }
                let got = dequantize(t, row, n: n), want = KernelReference.dequantize(t, row, n: n)
                let bad = (0..<n).filter { got[$0] != want[$0] }
                XCTAssert(bad.isEmpty, "\(KType.name(t)) n=\(n): \(bad.count) mismatches, first at \(bad.first ?? -1): " +
                          "\(bad.first.map { "\(got[$0]) vs \(want[$0])" } ?? "")")
            }
        }
    }

    func testVecDotMatchesReferenceAtEveryISALevel() {
        for (level, name) in isaLevels() {
            ck_set_isa_limit(level)
            for t in KType.weights {
                for (k, n) in lengths(t).enumerated() {
                    let p = problem(t, n: n, rows: 1, M: 1, seed: UInt64(100 * Int(t) + k))
                    let got = p.wRows[0].withUnsafeBytes { w in
                        p.aRows[0].withUnsafeBytes { a in ck_vec_dot(t, Int64(n), w.baseAddress, a.baseAddress) }
                    }
                    assertClose(got, KernelReference.dot(t, n: n, w: p.wRows[0], a: p.aRows[0]),
                                "\(name) \(KType.name(t)) n=\(n)")
                }
            }
        }
    }

    func testMatmulShapesAndRowRanges() {
        let rows = 13
        for (level, name) in isaLevels() {
            ck_set_isa_limit(level)
            for t in KType.weights {
                let n = lengths(t)[1]
                for M in [1, 3, 4, 5, 17, 37] { // 37: several tile passes and a remainder
                    let p = problem(t, n: n, rows: rows, M: M, seed: UInt64(7 * M + 1000 * Int(t)))
                    let ref = (0..<M).map { m in
                        (0..<rows).map { r in KernelReference.dot(t, n: n, w: p.wRows[r], a: p.aRows[m]) }
                    }
                    for (r0, r1) in [(0, rows), (3, 10), (5, 6), (12, 13), (1, 8)] {
                        let ldy = rows + 3
                        let y = matmul(p, r0: r0, r1: r1, ldy: ldy)
                        assertMatmul(y, ref, M: M, ldy: ldy, r0: r0, r1: r1, "\(name) \(KType.name(t)) M=\(M)")
                    }
                }
            }
        }
    }

    /// Batched decode shapes: 2-17 activation rows (the small-batch paths, which take 8 rows
    /// per pass and 16 blocks per step) on rows long enough for several steps plus a partial
    /// one, and row ranges that are not multiples of 4.
    func testMatmulFewActivationRows() {
        let rows = 11
        for (level, name) in isaLevels() where level > 0 {
            ck_set_isa_limit(level)
            for t in KType.weights {
                let bs = KType.layout(t).block
                // 16 blocks exactly, 35 blocks (two groups of 16 and 3), one block
                let ns = bs == 1 ? [1000] : bs == 32 ? [512, 1120, 32] : [256, 1280]
                for (k, n) in ns.enumerated() {
                    let p = problem(t, n: n, rows: rows, M: 17, seed: UInt64(31 * k + 1000 * Int(t)))
                    let ref = (0..<17).map { m in
                        (0..<rows).map { r in KernelReference.dot(t, n: n, w: p.wRows[r], a: p.aRows[m]) }
                    }
                    for M in [2, 3, 7, 8, 9, 16, 17] {
                        for (r0, r1) in [(0, rows), (1, 10), (6, 7)] {
                            let ldy = rows + 1
                            let y = matmul(p, r0: r0, r1: r1, M: M, ldy: ldy)
                            assertMatmul(y, ref, M: M, ldy: ldy, r0: r0, r1: r1, "\(name) \(KType.name(t)) n=\(n) M=\(M)")
                        }
                    }
                }
            }
        }
    }

    /// More activation rows than one pass keeps in L2 (the kernels repack them a chunk at a
    /// time): rows of 2048 (64 blocks of 32, 8 super-blocks of 256), 110 activation rows; Q4_0's
    /// prefill kernel (gemm_avx512.c) takes 1 MiB chunks, so it also gets rows of 16384 (48
    /// activation rows a chunk: three chunks).
    func testMatmulActivationRowsInSeveralChunks() {
        let rows = 6, M = 110
        for (t, n) in KType.weights.map({ ($0, 2048) }) + [(KType.q4_0, 16384)] {
            let p = problem(t, n: n, rows: rows, M: M, seed: 555 + UInt64(t))
            let y = matmul(p, r0: 1, r1: rows, ldy: rows)
            for m in stride(from: 0, to: M, by: 7) + [M - 1] {
                for r in 1..<rows {
                    assertClose(y[m * rows + r], KernelReference.dot(t, n: n, w: p.wRows[r], a: p.aRows[m]),
                                "\(KType.name(t)) M=\(M): y[\(m)][\(r)]")
                }
                XCTAssert(y[m * rows].isNaN, "\(KType.name(t)): wrote y[\(m)][0] outside 1..<\(rows)")
            }
        }
    }

    /// Prefill shapes of the AMX kernels (gemm_amx.c: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K from 16
    /// activation rows), at every level: a K-chunk of 4096 values and a part of one (4256
    /// values; 4352 for the K types, 17 super-blocks), 37 weight rows (two 16-row
    /// tiles and 5) in ranges that start inside a tile, and 16, 33 and 530 activation rows (a
    /// whole tile; two and a row; two packing passes of 512).
    func testMatmulPrefillTiles() {
        let rows = 37
        for t in [KType.q4_0, KType.q4_1, KType.q5_0, KType.q5_1, KType.q8_0, KType.q4_K, KType.q5_K, KType.q6_K] {
            let n = KType.layout(t).block == 32 ? 4256 : 4352
            let p = problem(t, n: n, rows: rows, M: 530, seed: 808 + UInt64(t))
            let ref = (0..<530).map { m in (0..<rows).map { r in KernelReference.dot(t, n: n, w: p.wRows[r], a: p.aRows[m]) } }
            for (level, name) in isaLevels() where level > 0 {
                ck_set_isa_limit(level)
                for M in [16, 33, 530] {
                    for (r0, r1) in [(0, rows), (5, 30)] {
                        let ldy = rows + 2
                        let y = matmul(p, r0: r0, r1: r1, M: M, ldy: ldy)
                        assertMatmul(y, ref, M: M, ldy: ldy, r0: r0, r1: r1, "\(name) \(KType.name(t)) M=\(M)")
                    }
                }
            }
        }
    }

    func testISALevelsAgree() {
        let levels = isaLevels()
        for t in KType.weights {
            let n = lengths(t).last!
            let p = problem(t, n: n, rows: 9, M: 6, seed: 42 + UInt64(t))
            let results = levels.map { level -> [Float] in
                ck_set_isa_limit(level.level)
                return matmul(p, r0: 0, r1: 9, ldy: 9)
            }
            for m in 0..<6 {
                for r in 0..<9 {
                    let ref = KernelReference.dot(t, n: n, w: p.wRows[r], a: p.aRows[m])
                    let vals = results.map { Double($0[m * 9 + r]) }
                    let spread = vals.max()! - vals.min()!
                    XCTAssert(spread <= tolerance * ref.magnitude + 1e-6,
                              "\(KType.name(t)) y[\(m)][\(r)]: levels \(levels.map(\.name)) give \(vals)")
                }
            }
        }
    }

    func testActivationQuantizersMatchReferenceAndRoundTrip() {
        var rng = SplitMix64(seed: 5)
        for t in [KType.q8_0, KType.q8_1, KType.q8_K] {
            let n = 1024
            var x = randomFloats(n, &rng)
            for i in 256..<288 { x[i] = 0 } // an all-zero block
            let want = KernelReference.quantize(t, x)
            for (level, name) in isaLevels() {
                ck_set_isa_limit(level)
                let q = quantize(t, x)
                XCTAssertEqual(q, want, "\(name) \(KType.name(t)): bytes differ from ggml's reference rounding")
                // round trip: within half a quantization step, plus (Q8_0/Q8_1) up to 127 times
                // the rounding of the scale to f16
                let y = dequantize(t, q, n: n)
                let bs = KType.layout(t).block
                let slack: Float = t == KType.q8_K ? 0.001 : 127 * 0x1p-11
                for blk in 0..<(n / bs) {
                    let amax = x[(blk * bs)..<(blk * bs + bs)].map { abs($0) }.max()!
                    for i in (blk * bs)..<(blk * bs + bs) {
                        XCTAssertLessThanOrEqual(abs(x[i] - y[i]), amax / 127 * (0.5 + slack) + 1e-7,
                                                 "\(name) \(KType.name(t)) element \(i)")
                    }
                }
            }
        }
    }

    /// Ties: Q8_0/Q8_1 round half away from zero (roundf), Q8_K half to even (nearest_int).
    func testActivationRoundingTies() {
        var x = [Float](repeating: 0, count: 256)
        x[0] = 127 // d = 1 for Q8_0 and Q8_K (which scales by -127/max, so signs flip)
        let ties: [Float] = [2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 3.5, 126.5]
        for (i, v) in ties.enumerated() { x[1 + i] = v }
        for (level, name) in isaLevels() {
            ck_set_isa_limit(level)
            let q0 = quantize(KType.q8_0, x).map { Int8(bitPattern: $0) }
            XCTAssertEqual(Array(q0[3..<11]), [3, -3, 1, -1, 2, -2, 4, 127], "\(name) Q8_0")
            let qk = quantize(KType.q8_K, x).map { Int8(bitPattern: $0) }
            XCTAssertEqual(Array(qk[5..<13]), [-2, 2, 0, 0, -2, 2, -4, -126], "\(name) Q8_K")
        }
    }

    func testWeightQuantizersMatchReference() {
        var rng = SplitMix64(seed: 9)
        for t in [KType.q4_0, KType.q4_1, KType.q5_0, KType.q5_1, KType.q8_0] {
            var x = randomFloats(2048, &rng, scale: 0.05)
            for i in 64..<96 { x[i] = 0 }
            for i in 96..<128 { x[i] = 0.25 } // constant block
            XCTAssertEqual(quantize(t, x), KernelReference.quantize(t, x), KType.name(t))
        }
    }

    /// Bytes from the team's gguf_write.py (quant_q8_0 / quant_q4_0, which round like
    /// ggml's reference) for 128 values from a fixed xorshift32 sequence.
    func testWeightQuantizersMatchGGUFWriteBytes() {
        var s: UInt32 = 2_463_534_242
        let x: [Float] = (0..<128).map { _ in
            s ^= s << 13; s ^= s >> 17; s ^= s << 5
            return (Float(s >> 8) * 0x1p-24 * 2 - 1) * 0.37
        }
        let q8 = "dd19aa15fbf85395d0a8ac1ec43c2d65f515d5e35e547d45c58534c6121a87f3dc7ff219d2cbf2b390522b6cceccf0fcf2b0d320a8edc7f34e8a0ca67feb9bd38ea5852ef51963989337d7e1f93656aee14f8f44eecf6874d2bf816a7d20ec3c11dcaac79441cb19699e1f6e7f67e9408cc900cc92496d6e8c643e6e5326b7916827c42f335159ee"
        let q4 = "d1a9bda72839034fcbfe5dc67c64f592a907e6a9eb9bc99d3ff375e10b9be9b8f9edfb56e929fef1514b05f6f8ab7dc3966d314c17c5c0a9f12e46113062d9f41f6bc85b5f332191"
        func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02x", $0) }.joined() }
        XCTAssertEqual(hex(quantize(KType.q8_0, x)), q8)
        XCTAssertEqual(hex(quantize(KType.q4_0, x)), q4)
    }

    /// The Q8_0 and Q4_0 copies of stories260K were made from its F32 tensors by the
    /// quantizers of gguf_write.py; quantizing the F32 tensors here must give the same bytes.
    func testStories260KQuantizedTensorsReproduced() throws {
        let f32 = try GGUFFile(path: try TestData.path("stories260K.gguf"))
        for (file, t) in [("stories260K-q8_0.gguf", KType.q8_0), ("stories260K-q4_0.gguf", KType.q4_0)] {
            let qf = try GGUFFile(path: try TestData.path(file))
            var checked = 0
            for info in f32.tensors where info.dims.count == 2 && info.dims[0] % 32 == 0 {
                guard let qi = qf.tensor(info.name), qi.type.rawValue == UInt32(t) else { continue }
                let n = info.elementCount
                let x = Array(UnsafeBufferPointer(start: f32.data(of: info).assumingMemoryBound(to: Float.self), count: n))
                let want = Array(UnsafeRawBufferPointer(start: qf.data(of: qi), count: qi.byteCount))
                XCTAssertEqual(quantize(t, x), want, "\(file) \(info.name)")
                checked += 1
            }
            XCTAssertGreaterThan(checked, 10, file)
        }
    }

    func testKQuantWeightQuantizersRoundTrip() {
        var rng = SplitMix64(seed: 11)
        let x = (0..<1024).map { _ in Float.random(in: -1...1, using: &rng) * Float.random(in: 0.01...0.1, using: &rng) }
        let rms = (x.reduce(Float(0)) { $0 + $1 * $1 } / Float(x.count)).squareRoot()
        for (t, limit) in [(KType.q4_K, Float(0.12)), (KType.q5_K, 0.06), (KType.q6_K, 0.03)] {
            let q = quantize(t, x)
            XCTAssertEqual(dequantize(t, q, n: x.count), KernelReference.dequantize(t, q, n: x.count))
            let y = dequantize(t, q, n: x.count)
            var se: Float = 0
            for i in 0..<x.count { se += (x[i] - y[i]) * (x[i] - y[i]) }
            let err = (se / Float(x.count)).squareRoot()
            XCTAssertLessThan(err / rms, limit, "\(KType.name(t)) relative RMS error")
        }
        // all-zero input stays zero
        for t in [KType.q4_K, KType.q5_K, KType.q6_K] {
            XCTAssertEqual(dequantize(t, quantize(t, [Float](repeating: 0, count: 256)), n: 256), [Float](repeating: 0, count: 256))
        }
    }

    func testHalfAndBFloat16Conversions() {
        // every finite half converts to float exactly and back unchanged
        let all = (0...UInt16.max).filter { ($0 & 0x7C00) != 0x7C00 }
        for (level, name) in isaLevels() {
            ck_set_isa_limit(level)
            var f = [Float](repeating: 0, count: all.count)
            ck_f16_to_f32(all, &f, Int64(all.count))
            XCTAssert(zip(all, f).allSatisfy { KernelReference.half($0) == $1 }, "\(name) f16 -> f32")
            var back = [UInt16](repeating: 0, count: all.count)
            ck_f32_to_f16(f, &back, Int64(all.count))
            XCTAssertEqual(back, all, "\(name) f16 round trip")
            // rounding: random floats across the half range, subnormals and overflow included
            var rng = SplitMix64(seed: 3)
            let x: [Float] = (0..<3001).map { i in
                let e = Float(Int.random(in: -30...17, using: &rng))
                return Float.random(in: -1...1, using: &rng) * pow(2, e) + (i == 0 ? 65519.99 : 0)
            }
            var h = [UInt16](repeating: 0, count: x.count)
            ck_f32_to_f16(x, &h, Int64(x.count))
            let bad = (0..<x.count).filter { h[$0] != KernelReference.halfBits(x[$0]) }
            XCTAssert(bad.isEmpty, "\(name) f32 -> f16 rounding: \(bad.prefix(3).map { x[$0] })")
        }
        // BF16 weights quantize by rounding to nearest even
        let x: [Float] = [1.0, Float(bitPattern: 0x3F80_8000), Float(bitPattern: 0x3F81_8000), Float(bitPattern: 0x3F80_8001), -3.14159]
        let b = quantize(KType.bf16, x)
        let hb = (0..<x.count).map { UInt16(b[2 * $0]) | UInt16(b[2 * $0 + 1]) << 8 }
        XCTAssertEqual(hb, [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC049])
    }

    func testF32Helpers() {
        var rng = SplitMix64(seed: 21)
        for (level, name) in isaLevels() {
            ck_set_isa_limit(level)
            for n in [1, 7, 33, 100, 1000] {
                let x = randomFloats(n, &rng), w = randomFloats(n, &rng)
                let msg = "\(name) n=\(n)"
                // dot
                let dot = zip(x, w).reduce(0.0) { $0 + Double($1.0) * Double($1.1) }
                let mag = zip(x, w).reduce(0.0) { $0 + abs(Double($1.0) * Double($1.1)) }
                XCTAssertEqual(Double(ck_dot_f32(x, w, Int64(n))), dot, accuracy: 1e-5 * mag, msg)
                // axpy
                var y = w
                ck_axpy_f32(0.75, x, &y, Int64(n))
                for i in 0..<n { XCTAssertEqual(y[i], w[i] + 0.75 * x[i], accuracy: 1e-6 * max(1, abs(y[i])), msg) }
                // add
                ck_add_f32(x, w, &y, Int64(n))
                XCTAssertEqual(y, zip(x, w).map { $0 + $1 }, msg)
                // rms norm, with and without weights
                let ss = x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(n)
                let scale = 1 / (ss + 1e-5).squareRoot()
                ck_rms_norm(x, w, &y, Int64(n), 1e-5)
                for i in 0..<n { XCTAssertEqual(Double(y[i]), Double(x[i]) * scale * Double(w[i]), accuracy: 1e-5 * max(1, abs(Double(y[i]))), msg) }
                ck_rms_norm(x, nil, &y, Int64(n), 1e-5)
                for i in 0..<n { XCTAssertEqual(Double(y[i]), Double(x[i]) * scale, accuracy: 1e-5 * max(1, abs(Double(y[i]))), msg) }
                // swiglu, including large |gate|
                var g = x.map { $0 * 12 }
                if n > 3 { g[1] = -100; g[2] = 100; g[3] = -87.5 }
                ck_swiglu(g, w, &y, Int64(n))
                for i in 0..<n {
                    let gd = Double(g[i]), want = gd / (1 + exp(-gd)) * Double(w[i])
                    XCTAssertEqual(Double(y[i]), want, accuracy: 2e-6 * max(1, abs(want)), "\(msg) swiglu(\(g[i]))")
                }
                // gpt-oss's clamped SwiGLU (ggml's swiglu_oai): gates above the limit and ups
                // outside ±limit are clamped (the 12× gates and 8× ups cross 7 often), α = 1.702
                let u = w.map { $0 * 8 }
                ck_swiglu_clamped(g, u, &y, Int64(n), 1.702, 7)
                var clamped = 0
                for i in 0..<n {
                    let gd = min(Double(g[i]), 7), ud = min(max(Double(u[i]), -7), 7)
                    if Double(g[i]) > 7 || abs(Double(u[i])) > 7 { clamped += 1 }
                    let want = gd / (1 + exp(-1.702 * gd)) * (ud + 1)
                    XCTAssertEqual(Double(y[i]), want, accuracy: 2e-6 * max(1, abs(want)), "\(msg) swiglu_clamped(\(g[i]), \(u[i]))")
                }
                if n > 3 { XCTAssertGreaterThan(clamped, 0, "\(msg): no value reached the clamp") }
                // geglu: tanh-approximated GELU (ggml_gelu's formula), the same gates
                ck_geglu(g, w, &y, Int64(n))
                for i in 0..<n {
                    let gd = Double(g[i])
                    let want = 0.5 * gd * (1 + tanh(0.7978845608028654 * gd * (1 + 0.044715 * gd * gd))) * Double(w[i])
                    XCTAssertEqual(Double(y[i]), want, accuracy: 2e-6 * max(1, abs(want)), "\(msg) geglu(\(g[i]))")
                }
                // in place over the gate (as the forward pass calls it)
                var gp = g
                gp.withUnsafeMutableBufferPointer { ck_geglu($0.baseAddress, w, $0.baseAddress, Int64(n)) }
                XCTAssertEqual(gp, y, "\(msg) geglu in place")
                // softmax, with a wide range of logits
                var s = x.map { $0 * 40 }
                if n > 2 { s[1] = -1e4 }
                let m = Double(s.max()!)
                let e = s.map { exp(Double($0) - m) }, total = e.reduce(0, +)
                ck_softmax(&s, Int64(n))
                for i in 0..<n { XCTAssertEqual(Double(s[i]), e[i] / total, accuracy: 2e-6 * max(1e-3, e[i] / total) + 1e-9, msg) }
                XCTAssertEqual(Double(s.reduce(0, +)), 1, accuracy: 1e-5, msg)
            }
        }
    }

    /// Throughput of ck_matmul (prints numbers; no timed assertions). M=1 is decode: GB/s of
    /// weights read, with the matrix cache-resident (best of 30) and streamed from memory (one
    /// pass over 256 MB of copies, on 1 and on 2 threads splitting the rows). M=32 is
    /// prefill-like: GOP/s (2 ops per weight and activation row), one thread.
    func testZZKernelThroughputReport() {
        let n = 2048, rows = 5632, poolBytes = 256 << 20
        var pool = [UInt8](repeating: 0, count: poolBytes)
        for t in [KType.q4_0, KType.q8_0, KType.q4_K, KType.q6_K, KType.f16] {
            let at = KType.dotType(t)
            var rng = SplitMix64(seed: 77)
            let rb = KType.rowBytes(t, n), ab = KType.rowBytes(at, n)
            let matrixBytes = rb * rows, copies = max(1, poolBytes / matrixBytes)
            // 64 distinct rows, repeated: the content does not matter for speed
            let distinct = (0..<64).map { _ in quantize(t, randomFloats(n, &rng, scale: 0.05)) }
            pool.withUnsafeMutableBytes { p in
                for r in 0..<(rows * copies) {
                    distinct[r % 64].withUnsafeBytes { (p.baseAddress! + r * rb).copyMemory(from: $0.baseAddress!, byteCount: rb) }
                }
            }
            let a = (0..<32).flatMap { _ in activationRow(at, n: n, &rng) }
            var y = [Float](repeating: 0, count: 32 * rows)

            func seconds(_ body: () -> Void) -> Double {
                let t0 = DispatchTime.now().uptimeNanoseconds
                body()
                return Double(DispatchTime.now().uptimeNanoseconds - t0) * 1e-9
            }
            var hot = Double.infinity, cold1 = Double.infinity, cold2 = Double.infinity, m32 = Double.infinity
            pool.withUnsafeBytes { wp in
                a.withUnsafeBytes { ap in
                    y.withUnsafeMutableBufferPointer { yp in
                        let (w, act, out) = (wp.baseAddress!, ap.baseAddress!, yp.baseAddress!)
                        func run(_ copy: Int, _ r0: Int, _ r1: Int, _ M: Int) {
                            ck_matmul(t, Int64(n), w + copy * matrixBytes, rb, Int64(r0), Int64(r1), act, ab, Int64(M), out, Int64(rows))
                        }
                        for _ in 0..<30 { hot = min(hot, seconds { run(0, 0, rows, 1) }) }
                        for _ in 0..<2 {
                            cold1 = min(cold1, seconds { for c in 0..<copies { run(c, 0, rows, 1) } })
                            cold2 = min(cold2, seconds {
                                DispatchQueue.concurrentPerform(iterations: 2) { k in
                                    for c in 0..<copies { run(c, k * rows / 2, (k + 1) * rows / 2, 1) }
                                }
                            })
                        }
                        for _ in 0..<5 { m32 = min(m32, seconds { run(0, 0, rows, 32) }) }
                    }
                }
            }
            let gb = Double(matrixBytes) / 1e9, total = gb * Double(copies)
            print(String(format: "kernel throughput %@ [%@] %dx%d: M=1 %.1f GB/s cached, %.1f GB/s from memory, %.1f GB/s on 2 threads; M=32 %.1f GOP/s",
                         KType.name(t), String(cString: ck_isa_name()), rows, n, gb / hot, total / cold1, total / cold2,
                         2.0 * Double(n * rows * 32) / m32 / 1e9))
            // the numbers mean nothing if the results are wrong: check a few outputs
            for (m, r) in [(31, 0), (0, rows - 1), (17, 4000)] {
                let wrow = distinct[r % 64], arow = Array(a[(m * ab)..<((m + 1) * ab)])
                assertClose(y[m * rows + r], KernelReference.dot(t, n: n, w: wrow, a: arow), "\(KType.name(t)) benchmark y[\(m)][\(r)]")
            }
        }
    }
}
