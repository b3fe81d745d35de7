import CKernels
import XCTest
@testable import VeloCore

/// Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4: the C kernels (dequantization, quantizers, dot products
/// and matmul at every ISA level) against plain Swift references written from ggml's block
/// layouts (ggml-common.h, ggml-quants.c), and the GPU kernels (get_rows, matvec, matmul) against
/// the CPU (MXFP4 has none yet: gpt-oss runs on the CPU).
/// Helpers shared with KernelTests / GPUKernelTests: SplitMix64, KernelReference, KType.
final class NewQuantTypeTests: XCTestCase {
    override func tearDown() {
        ck_set_isa_limit(Int32(CK_ISA_BEST))
        super.tearDown()
    }

    // MARK: reference

    static let q2_K: Int32 = 10, q3_K: Int32 = 11, iq4_nl: Int32 = 20, iq4_xs: Int32 = 23, mxfp4: Int32 = 39
    static let types: [Int32] = [q2_K, q3_K, iq4_nl, iq4_xs, mxfp4]
    /// The types with GPU kernels.
    static let gpuTypes: [Int32] = [q2_K, q3_K, iq4_nl, iq4_xs, mxfp4]
    /// ggml's kvalues_mxfp4: the E2M1 values doubled.
    static let fp4Levels: [Float] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]
    /// ggml's kvalues_iq4nl.
    static let levels: [Int] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]

    static func name(_ t: Int32) -> String { [10: "Q2_K", 11: "Q3_K", 20: "IQ4_NL", 23: "IQ4_XS", 39: "MXFP4"][t] ?? KType.name(t) }

    static func layout(_ t: Int32) -> (block: Int, bytes: Int) {
        switch t {
        case q2_K: return (256, 84)
        case q3_K: return (256, 110)
        case iq4_nl: return (32, 18)
        case iq4_xs: return (256, 136)
        case mxfp4: return (32, 17)
        default: return KType.layout(t)
        }
    }

    static func rowBytes(_ t: Int32, _ n: Int) -> Int { n / layout(t).block * layout(t).bytes }

    /// llama.cpp's vec_dot_type: Q8_0 for IQ4_NL and MXFP4, Q8_K for the others.
    static func dotType(_ t: Int32) -> Int32 { t == iq4_nl || t == mxfp4 ? KType.q8_0 : KType.q8_K }

    typealias R = KernelReference

    /// Element values with ggml's float arithmetic (dequantize_row_*), and the magnitude of each
    /// element's terms (|scale·q| + |min|) for tolerances. Written value by value from the
    /// layouts, not from the C code's loops.
    static func decode(_ t: Int32, _ b: [UInt8], n: Int) -> (values: [Float], parts: [Float]) {
        var y = [Float](repeating: 0, count: n), p = [Float](repeating: 0, count: n)
        let (bs, bb) = layout(t)
        for blk in 0..<(n / bs) {
            let o = blk * bb, e = blk * bs
            switch t {
            case q2_K:
                // scales[16] qs[64] d dmin; value v: h = v/128, shift 2((v%128)/32), byte qs[32h + v%32]
                let d = R.f16(b, o + 80), dmin = R.f16(b, o + 82)
                for v in 0..<256 {
                    let q = Int(b[o + 16 + 32 * (v / 128) + v % 32] >> UInt8(2 * ((v % 128) / 32))) & 3
                    let sc = b[o + v / 16]
                    let dl = d * Float(sc & 0xF), ml = dmin * Float(sc >> 4)
                    y[e + v] = dl * Float(q) - ml
                    p[e + v] = abs(dl * Float(q)) + abs(ml)
                }
            case q3_K:
                // hmask[32] qs[64] scales[12] d; the 16 scales unpacked as ggml does, with 32-bit words
                let d = R.f16(b, o + 108)
                let a0 = R.u32(b, o + 96), a1 = R.u32(b, o + 100), tmp = R.u32(b, o + 104)
                let (m1, m2): (UInt32, UInt32) = (0x0303_0303, 0x0F0F_0F0F)
                let words = [(a0 & m2) | (((tmp >> 0) & m1) << 4), (a1 & m2) | (((tmp >> 2) & m1) << 4),
                             ((a0 >> 4) & m2) | (((tmp >> 4) & m1) << 4), ((a1 >> 4) & m2) | (((tmp >> 6) & m1) << 4)]
                let scales = (0..<16).map { j in Int(Int8(bitPattern: UInt8((words[j / 4] >> (8 * UInt32(j % 4))) & 0xFF))) }
                for v in 0..<256 {
                    let low = Int(b[o + 32 + 32 * (v / 128) + v % 32] >> UInt8(2 * ((v % 128) / 32))) & 3
                    let high = Int(b[o + v % 32] >> UInt8(v / 32)) & 1
                    let dl = d * Float(scales[v / 16] - 32)
                    y[e + v] = dl * Float(low - (high == 1 ? 0 : 4))
                }
            case iq4_nl:
                let d = R.f16(b, o)
                for j in 0..<32 {
                    let byte = b[o + 2 + j % 16]
                    y[e + j] = d * Float(levels[Int(j < 16 ? byte & 0xF : byte >> 4)])
                }
            case iq4_xs:
                // d scales_h scales_l[4] qs[128]; scale pairs as ggml's dot product reads them
                let d = R.f16(b, o)
                var h = R.u16(b, o + 2)
                for pair in 0..<4 {
                    let sl = b[o + 4 + pair]
                    let ls = [Int(sl & 0xF) | Int((h << 4) & 0x30), Int(sl >> 4) | Int((h << 2) & 0x30)]
                    h >>= 4
                    for k in 0..<2 {
                        let ib = 2 * pair + k, dl = d * Float(ls[k] - 32)
                        for j in 0..<32 {
                            let byte = b[o + 8 + 16 * ib + j % 16]
                            y[e + 32 * ib + j] = dl * Float(levels[Int(j < 16 ? byte & 0xF : byte >> 4)])
                        }
                    }
                }
            case mxfp4:
                // e qs[16]: 2^(e-127) times the E2M1 value, which is half the level
                let d = Float(sign: .plus, exponent: Int(b[o]) - 128, significand: 1)
                for j in 0..<32 {
                    let byte = b[o + 1 + j % 16]
                    y[e + j] = d * fp4Levels[Int(j < 16 ? byte & 0xF : byte >> 4)]
                }
            default: fatalError("decode: \(t)")
            }
        }
        for i in 0..<n where p[i] == 0 { p[i] = abs(y[i]) }
        return (y, p)
    }

    /// Weight row · activation row (in the weight's dot type) in Double, and the sum of the
    /// magnitudes of its terms.
    static func dot(_ t: Int32, n: Int, w: [UInt8], a: [UInt8]) -> (value: Double, magnitude: Double) {
        let (wv, wp) = decode(t, w, n: n)
        let av = R.dequantize(dotType(t), a, n: n)
        var sum = 0.0, mag = 0.0
        for i in 0..<n {
            sum += Double(wv[i]) * Double(av[i])
            mag += abs(Double(wp[i]) * Double(av[i]))
        }
        return (sum, mag)
    }

    // MARK: data

    var rng = SplitMix64(seed: 2024)

    func randomFloats(_ n: Int, scale: Float = 1) -> [Float] {
        (0..<n).map { i in
            let v = Float.random(in: -1...1, using: &rng) * scale
            return i % 61 == 7 ? v * 6 : v
        }
    }

    /// Random quants and packed scales, f16 super-block scales in a realistic range.
    func randomRow(_ t: Int32, n: Int) -> [UInt8] {
        var b = (0..<Self.rowBytes(t, n)).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let (bs, bb) = Self.layout(t)
        func scale(_ o: Int, _ lo: Float, _ hi: Float, signed: Bool) {
            var v = Float.random(in: lo...hi, using: &rng)
            if signed && Bool.random(using: &rng) { v = -v }
            R.put16(&b, o, R.halfBits(v))
        }
        for blk in 0..<(n / bs) {
            let o = blk * bb
            switch t {
            case Self.q2_K: scale(o + 80, 0.0005, 0.005, signed: false); scale(o + 82, 0.0005, 0.005, signed: false)
            case Self.q3_K: scale(o + 108, 0.0002, 0.002, signed: true)
            case Self.iq4_nl: scale(o, 0.0001, 0.001, signed: true)
            case Self.iq4_xs: scale(o, 0.00001, 0.0001, signed: true)
            case Self.mxfp4: b[o] = UInt8.random(in: 115...122, using: &rng) // 2^-13 .. 2^-6
            default: fatalError()
            }
        }
        return b
    }

    func quantize(_ t: Int32, _ x: [Float]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(ck_row_size(t, Int64(x.count))))
        ck_quantize_row(t, x, &out, Int64(x.count))
        return out
    }

    func dequantize(_ t: Int32, _ b: [UInt8], n: Int) -> [Float] {
        var y = [Float](repeating: .nan, count: n)
        ck_dequantize_row(t, b, &y, Int64(n))
        return y
    }

    /// (4352: past the AMX kernels' K-chunk of 4096 values)
    func lengths(_ t: Int32) -> [Int] { Self.layout(t).block == 32 ? [32, 96, 224, 256, 2880] : [256, 512, 768, 4352] }

    func isaLevels() -> [(level: Int32, name: String)] {
        var seen = Set<String>(), out: [(Int32, String)] = []
        for level in Int32(CK_ISA_SCALAR)...Int32(CK_ISA_BEST) {
            ck_set_isa_limit(level)
            let name = String(cString: ck_isa_name())
            if seen.insert(name).inserted { out.append((level, name)) }
        }
        ck_set_isa_limit(Int32(CK_ISA_BEST))
        return out
    }

    let tolerance = 2e-5

    func assertClose(_ got: Float, _ ref: (value: Double, magnitude: Double), _ what: @autoclosure () -> String,
                     file: StaticString = #filePath, line: UInt = #line) {
        let err = abs(Double(got) - ref.value)
        XCTAssert(got.isFinite && err <= tolerance * ref.magnitude + 1e-6,
                  "\(what()): got \(got), reference \(ref.value) (error \(err), magnitude \(ref.magnitude))", file: file, line: line)
    }

    // MARK: CPU

    func testTypeFacts() {
        for t in Self.types {
            let (bs, bb) = Self.layout(t), g = GGMLType(rawValue: UInt32(t))!
            XCTAssertEqual(ck_type_supported(t), 1, Self.name(t))
            XCTAssertEqual(ck_block_size(t), Int64(bs), Self.name(t))
            XCTAssertEqual(ck_row_size(t, Int64(bs * 8)), 8 * bb, Self.name(t))
            XCTAssertEqual(ck_vec_dot_type(t), Self.dotType(t), Self.name(t))
            XCTAssertEqual(g.name, Self.name(t))
            XCTAssertEqual(g.blockSize, bs)
            XCTAssertEqual(g.bytesPerBlock, bb)
            guard Self.gpuTypes.contains(t) else {
                XCTAssertFalse(GPUKernels.weightTypes.contains(g), Self.name(t))
                continue
            }
            XCTAssert(GPUKernels.weightTypes.contains(g), Self.name(t))
            XCTAssertEqual(GPUKernels.suffix(g), Self.name(t).lowercased())
            XCTAssertFalse(GPUKernels.coopTypes.contains(g), "\(Self.name(t)): matmul_coop unchecked")
        }
    }

    /// One hand-worked block per type, values from the layouts in ggml-common.h.
    func testHandWorkedBlocks() {
        func h(_ v: Float) -> UInt16 { R.halfBits(v) }
        // Q2_K: d 1, dmin 0.5; sub-block 5 (values 80..95: bits 4-5 of qs[16..31]) has scale 3, min 2;
        // value 83 has q = 2: 3·2 − 0.5·2 = 5, its neighbours q = 0: −1; every other sub-block 0
        var q2 = [UInt8](repeating: 0, count: 84)
        R.put16(&q2, 80, h(1)); R.put16(&q2, 82, h(0.5))
        q2[5] = 0x23
        q2[16 + 16 + 3] = 2 << 4
        var want2 = [Float](repeating: 0, count: 256)
        for v in 80..<96 { want2[v] = -1 }
        want2[83] = 5
        XCTAssertEqual(dequantize(Self.q2_K, q2, n: 256), want2, "Q2_K")
        // Q3_K: d 1; scale 13 = (scales[5] >> 4) | ((scales[9] >> 2·3) & 3) << 4 = 5 | 2 << 4 = 37 → 5;
        // all others 0 → −32. Quants with every bit 0 are −4 (high bit clear); value 210 (h 1,
        // shift 4 of qs[32 + 18], high bit 6 of hmask[18]) is 3
        var q3 = [UInt8](repeating: 0, count: 110)
        R.put16(&q3, 108, h(1))
        q3[96 + 5] = 0x50; q3[96 + 9] = 0x80
        q3[32 + 32 + 18] = 3 << 4
        q3[18] = 1 << 6
        var want3 = [Float](repeating: 128, count: 256)
        for v in 208..<224 { want3[v] = -20 }
        want3[210] = 15
        XCTAssertEqual(dequantize(Self.q3_K, q3, n: 256), want3, "Q3_K")
        // IQ4_NL: d 0.5; nibbles 0 are −127; qs[3] = 0xF0 makes value 19 the level 113
        var nl = [UInt8](repeating: 0, count: 18)
        R.put16(&nl, 0, h(0.5))
        nl[2 + 3] = 0xF0
        var wantNL = [Float](repeating: -63.5, count: 32)
        wantNL[19] = 56.5
        XCTAssertEqual(dequantize(Self.iq4_nl, nl, n: 32), wantNL, "IQ4_NL")
        // IQ4_XS: d 0.25; sub-block 3: low nibble 7 (high nibble of scales_l[1]), top bits 2 (bits
        // 6-7 of scales_h) → 39 − 32 = 7, dl 1.75; the others 0 − 32, dl −8. Nibbles 8 are the
        // level 1; qs[48 + 2] low nibble 15 makes value 98 the level 113
        var xs = [UInt8](repeating: 0x88, count: 136)
        R.put16(&xs, 0, h(0.25)); R.put16(&xs, 2, 2 << 6)
        xs[4] = 0; xs[5] = 0x70; xs[6] = 0; xs[7] = 0
        xs[8 + 48 + 2] = 0x8F
        var wantXS = [Float](repeating: -8, count: 256)
        for v in 96..<128 { wantXS[v] = 1.75 }
        wantXS[98] = 1.75 * 113
        XCTAssertEqual(dequantize(Self.iq4_xs, xs, n: 256), wantXS, "IQ4_XS")
        // MXFP4: e 130 (2^3, so a level counts 4); nibbles 0 are 0; qs[2] = 0x7F makes value 2 the
        // level -12 (low nibble 15: -48) and value 18 the level 12 (high nibble 7: 48); e 0 and 1,
        // the subnormal scales, too
        var fp4 = [UInt8](repeating: 0, count: 17)
        fp4[0] = 130
        fp4[1 + 2] = 0x7F
        var wantFP4 = [Float](repeating: 0, count: 32)
        wantFP4[2] = -48; wantFP4[18] = 48
        XCTAssertEqual(dequantize(Self.mxfp4, fp4, n: 32), wantFP4, "MXFP4")
        fp4[0] = 0
        XCTAssertEqual(dequantize(Self.mxfp4, fp4, n: 32)[2], -12 * Float(sign: .plus, exponent: -128, significand: 1), "MXFP4 e 0")
        fp4[0] = 1
        XCTAssertEqual(dequantize(Self.mxfp4, fp4, n: 32)[18], 12 * Float(sign: .plus, exponent: -127, significand: 1), "MXFP4 e 1")
        // and the references agree with the hand-worked values
        XCTAssertEqual(Self.decode(Self.q2_K, q2, n: 256).values, want2)
        XCTAssertEqual(Self.decode(Self.q3_K, q3, n: 256).values, want3)
        XCTAssertEqual(Self.decode(Self.iq4_nl, nl, n: 32).values, wantNL)
        XCTAssertEqual(Self.decode(Self.iq4_xs, xs, n: 256).values, wantXS)
        fp4[0] = 130
        XCTAssertEqual(Self.decode(Self.mxfp4, fp4, n: 32).values, wantFP4)
    }

    func testDequantizeMatchesReference() {
        for t in Self.types {
            for n in lengths(t) {
                for _ in 0..<4 {
                    let row = randomRow(t, n: n)
                    let got = dequantize(t, row, n: n), want = Self.decode(t, row, n: n).values
                    let bad = (0..<n).filter { got[$0].bitPattern != want[$0].bitPattern }
                    XCTAssert(bad.isEmpty, "\(Self.name(t)) n=\(n): \(bad.count) mismatches, first at \(bad.first ?? -1): " +
                              "\(bad.first.map { "\(got[$0]) vs \(want[$0])" } ?? "")")
                }
            }
        }
    }

    /// ck_matmul (and ck_vec_dot) against the Double reference: row ranges, strides with
    /// padding, outputs outside the range untouched, at every ISA level; 5 activation rows, and
    /// 20 (prefill's kernels: the AMX tiles of Q2_K, Q3_K, IQ4_NL and IQ4_XS).
    func testMatmulMatchesReferenceAtEveryISALevel() {
        let rows = 13
        for t in Self.types {
            let at = Self.dotType(t)
            for n in lengths(t) {
                for M in [5, 20] {
                    let ws = Self.rowBytes(t, n) + 6, aStride = KType.rowBytes(at, n) + 10
                    let wRows = (0..<rows).map { _ in randomRow(t, n: n) }
                    let aRows = (0..<M).map { _ in quantize(at, randomFloats(n)) }
                    var w = [UInt8](repeating: 0xEE, count: ws * rows), a = [UInt8](repeating: 0xEE, count: aStride * M)
                    for (r, row) in wRows.enumerated() { w.replaceSubrange((r * ws)..<(r * ws + row.count), with: row) }
                    for (m, row) in aRows.enumerated() { a.replaceSubrange((m * aStride)..<(m * aStride + row.count), with: row) }
                    let ref = (0..<M).map { m in (0..<rows).map { r in Self.dot(t, n: n, w: wRows[r], a: aRows[m]) } }
                    for (level, isa) in isaLevels() {
                        ck_set_isa_limit(level)
                        let one = wRows[0].withUnsafeBytes { wp in aRows[0].withUnsafeBytes { ap in ck_vec_dot(t, Int64(n), wp.baseAddress, ap.baseAddress) } }
                        assertClose(one, ref[0][0], "\(isa) \(Self.name(t)) n=\(n) vec_dot")
                        for (r0, r1) in [(0, rows), (3, 10), (12, 13)] {
                            let ldy = rows + 2
                            var y = [Float](repeating: .nan, count: M * ldy)
                            w.withUnsafeBytes { wp in
                                a.withUnsafeBytes { ap in
                                    ck_matmul(t, Int64(n), wp.baseAddress, ws, Int64(r0), Int64(r1), ap.baseAddress, aStride, Int64(M), &y, Int64(ldy))
                                }
                            }
                            for m in 0..<M {
                                for r in 0..<ldy {
                                    if r >= r0 && r < r1 {
                                        assertClose(y[m * ldy + r], ref[m][r], "\(isa) \(Self.name(t)) n=\(n) M=\(M) rows \(r0)..<\(r1) y[\(m)][\(r)]")
                                    } else {
                                        XCTAssert(y[m * ldy + r].isNaN, "\(isa) \(Self.name(t)): wrote y[\(m)][\(r)] outside \(r0)..<\(r1)")
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The quantizers (a simple fit, not ggml's search) give blocks the reference decodes to
    /// values near the input; zero rows stay zero.
    func testQuantizersRoundTrip() {
        let x = (0..<1024).map { _ in Float.random(in: -1...1, using: &rng) * Float.random(in: 0.01...0.1, using: &rng) }
        let rms = (x.reduce(Float(0)) { $0 + $1 * $1 } / Float(x.count)).squareRoot()
        for (t, limit) in [(Self.q2_K, Float(0.45)), (Self.q3_K, 0.25), (Self.iq4_nl, 0.12), (Self.iq4_xs, 0.12), (Self.mxfp4, 0.2)] {
            let q = quantize(t, x)
            let y = dequantize(t, q, n: x.count)
            XCTAssertEqual(y, Self.decode(t, q, n: x.count).values, Self.name(t))
            var se: Float = 0
            for i in 0..<x.count { se += (x[i] - y[i]) * (x[i] - y[i]) }
            let err = (se / Float(x.count)).squareRoot() / rms
            print("\(Self.name(t)) quantizer relative RMS error \(err)")
            XCTAssertLessThan(err, limit, "\(Self.name(t)) relative RMS error")
            let zero = [Float](repeating: 0, count: 256)
            XCTAssert(dequantize(t, quantize(t, zero), n: 256).allSatisfy { $0 == 0 }, "\(Self.name(t)) zeros")
        }
    }

    // MARK: GPU (Vulkan on lavapipe here, Metal on macOS)

    func device() throws -> GPUDevice { try TestGPU.device() }

    func upload(_ bytes: UnsafeRawBufferPointer) throws -> GPUBuffer {
        let d = try device()
        let b = try d.makeBuffer(bytes: max(bytes.count, 16), memory: .device, label: "test")
        if bytes.count > 0 { try d.upload(b, offset: 0, from: bytes.baseAddress!, bytes: bytes.count) }
        return b
    }
    func upload<T>(_ a: [T]) throws -> GPUBuffer { try a.withUnsafeBytes { try upload($0) } }

    func read(_ b: GPUBuffer, _ count: Int) throws -> [Float] {
        var out = [Float](repeating: 0, count: count)
        try out.withUnsafeMutableBytes { try device().download(b, offset: 0, into: $0.baseAddress!, bytes: $0.count) }
        return out
    }

    func run(_ k: GPUKernels.Kernel, _ buffers: [GPUBuffer], _ params: [UInt32], _ groups: (Int, Int, Int)) throws {
        let d = try device()
        let p = try d.pipeline(k.name, buffers: k.buffers, constants: k.constants)
        try d.begin()
        d.dispatch(p, buffers.map { GPUBinding($0) }, params: params, groups: groups, op: .other)
        try d.commit(profiler: nil)
    }

    func assertClose(_ got: [Float], _ want: [Double], tolerance: [Double], _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        var bad = 0
        for i in want.indices where !(abs(Double(got[i]) - want[i]) <= tolerance[i]) {
            if bad < 5 { XCTFail("\(what): [\(i)] = \(got[i]), expected \(want[i]) ± \(tolerance[i])", file: file, line: line) }
            bad += 1
        }
        if bad > 5 { XCTFail("\(what): \(bad) values off in all", file: file, line: line) }
    }

    /// Random rows (the quantizer's blocks for half of them, random bytes for the rest) and the
    /// CPU's dequantized values.
    func gpuWeights(_ t: Int32, rows: Int, cols: Int) -> (bytes: [UInt8], rowBytes: Int, values: [Float]) {
        let rb = Self.rowBytes(t, cols)
        var bytes: [UInt8] = []
        for r in 0..<rows { bytes += r % 2 == 0 ? randomRow(t, n: cols) : quantize(t, randomFloats(cols, scale: 0.05)) }
        var values = [Float](repeating: 0, count: rows * cols)
        bytes.withUnsafeBytes { b in
            values.withUnsafeMutableBufferPointer { v in
                for r in 0..<rows { ck_dequantize_row(t, b.baseAddress! + r * rb, v.baseAddress! + r * cols, Int64(cols)) }
            }
        }
        return (bytes, rb, values)
    }

    /// get_rows_T dequantizes as the CPU does (no fused multiply-adds).
    func testGPUGetRows() throws {
        for t in Self.gpuTypes {
            let type = GGMLType(rawValue: UInt32(t))!
            for k in Self.layout(t).block == 32 ? [64, 256] : [256, 512] {
                let w = gpuWeights(t, rows: 11, cols: k)
                let tokens: [Int32] = [3, 0, 10, 3, 7]
                let out = try upload([Float](repeating: .nan, count: tokens.count * k))
                try run(GPUKernels.getRows(type), [try upload(w.bytes), try upload(tokens), out],
                        [UInt32(k), UInt32(w.rowBytes), UInt32(tokens.count), Float(1).bitPattern], (tokens.count, 1, 1))
                let want = tokens.flatMap { tok in (0..<k).map { Double(w.values[Int(tok) * k + $0]) } }
                let got = try read(out, tokens.count * k)
                assertClose(got, want, tolerance: want.map { abs($0) * 1e-6 + 1e-7 }, "get_rows \(type.name) K=\(k)")
                let exact = zip(got, want).filter { Double($0) == $1 }.count
                XCTAssertEqual(exact, want.count, "get_rows \(type.name) K=\(k): values not bit-exact")
            }
        }
    }

    /// matvec_T (1 and 4 activation rows per group) and matmul_T against float64 products of
    /// the dequantized weights.
    func testGPUMatvecAndMatmul() throws {
        for t in Self.gpuTypes {
            let type = GGMLType(rawValue: UInt32(t))!
            // (MXFP4: rows of an even number of its 17-byte blocks, as GPUForward.lacking requires)
            for k in Self.layout(t).block == 32 ? (t == Self.mxfp4 ? [128, 512] : [96, 512]) : [512, 768] {
                for (n, ms) in [(5, [1, 3, 9, 17]), (37, [2, 16, 70])] {
                    let w = gpuWeights(t, rows: n, cols: k)
                    let wb = try upload(w.bytes)
                    for m in ms {
                        let x = randomFloats(m * k)
                        var want = [Double](repeating: 0, count: m * n), tol = want
                        for i in 0..<m {
                            for r in 0..<n {
                                var s = 0.0, a = 0.0
                                for j in 0..<k {
                                    let p = Double(w.values[r * k + j]) * Double(x[i * k + j])
                                    s += p
                                    a += abs(p)
                                }
                                want[i * n + r] = s
                                tol[i * n + r] = 1e-4 * a + 1e-5
                            }
                        }
                        let xb = try upload(x)
                        let params = [UInt32(k), UInt32(n), UInt32(m), UInt32(w.rowBytes), UInt32(k), UInt32(n), 0]
                        let what = "\(type.name) N=\(n) M=\(m) K=\(k)"
                        if m <= GPUKernels.matvecMaxRows {
                            let yb = try upload([Float](repeating: .nan, count: m * n))
                            try run(GPUKernels.matvec(type, rows: m, n: n), [wb, xb, yb], params, GPUKernels.matvecGroups(n: n, m: m))
                            assertClose(try read(yb, m * n), want, tolerance: tol, "matvec " + what)
                        }
                        let k4 = GPUKernels.Kernel(name: "matvec_" + GPUKernels.suffix(type), buffers: 3,
                                                   constants: [GPUKernels.matvecLocal, 4, UInt32(GPUKernels.matvecRowsPerGroup)])
                        let y4 = try upload([Float](repeating: .nan, count: m * n))
                        try run(k4, [wb, xb, y4], params, ((n + GPUKernels.matvecRowsPerGroup - 1) / GPUKernels.matvecRowsPerGroup, (m + 3) / 4, 1))
                        assertClose(try read(y4, m * n), want, tolerance: tol, "matvec/4 " + what)
                        let yb = try upload([Float](repeating: .nan, count: m * n))
                        try run(GPUKernels.matmul(type), [wb, xb, yb], params, GPUKernels.matmulGroups(n: n, m: m))
                        assertClose(try read(yb, m * n), want, tolerance: tol, "matmul " + what)
                    }
                }
            }
        }
    }
}
