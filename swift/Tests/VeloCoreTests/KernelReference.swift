import Foundation

/// Plain, scalar Swift references for the C kernels (CKernels), written from ggml's published
/// block layouts (ggml-common.h) and reference code (ggml-quants.c). Slow and obvious on
/// purpose: every value is decoded field by field, and dot products are summed in Double.
enum KType {
    static let f32: Int32 = 0, f16: Int32 = 1, q4_0: Int32 = 2, q4_1: Int32 = 3
    static let q5_0: Int32 = 6, q5_1: Int32 = 7, q8_0: Int32 = 8, q8_1: Int32 = 9
    static let q4_K: Int32 = 12, q5_K: Int32 = 13, q6_K: Int32 = 14, q8_K: Int32 = 15, bf16: Int32 = 30

    static let weights: [Int32] = [f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K]

    static func name(_ t: Int32) -> String {
        [0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
         12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 30: "BF16"][t] ?? "type \(t)"
    }

    /// Elements per block and bytes per block (ggml-common.h).
    static func layout(_ t: Int32) -> (block: Int, bytes: Int) {
        switch t {
        case f32: return (1, 4)
        case f16, bf16: return (1, 2)
        case q4_0: return (32, 18)
        case q4_1: return (32, 20)
        case q5_0: return (32, 22)
        case q5_1: return (32, 24)
        case q8_0: return (32, 34)
        case q8_1: return (32, 36)
        case q4_K: return (256, 144)
        case q5_K: return (256, 176)
        case q6_K: return (256, 210)
        case q8_K: return (256, 292)
        default: fatalError("unknown type \(t)")
        }
    }

    static func rowBytes(_ t: Int32, _ n: Int) -> Int { n / layout(t).block * layout(t).bytes }

    /// Activation format of a weight type (llama.cpp's vec_dot_type, with F32 for float weights).
    static func dotType(_ t: Int32) -> Int32 {
        switch t {
        case q4_0, q5_0, q8_0: return q8_0
        case q4_1, q5_1: return q8_1
        case q4_K, q5_K, q6_K: return q8_K
        default: return f32
        }
    }
}

/// Deterministic generator for test data (SplitMix64).
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

enum KernelReference {
    // MARK: scalar formats

    /// IEEE binary16 -> Float, exactly.
    static func half(_ h: UInt16) -> Float {
        let sign: Float = h & 0x8000 != 0 ? -1 : 1
        let e = Int((h >> 10) & 0x1F), m = Int(h & 0x3FF)
        if e == 0x1F { return m == 0 ? sign * .infinity : .nan }
        if e == 0 { return sign * Float(m) * 0x1p-24 }
        return sign * Float(1024 + m) * Float(sign: .plus, exponent: e - 25, significand: 1)
    }

    /// Float -> IEEE binary16, round to nearest even (finite inputs; overflow -> inf).
    static func halfBits(_ f: Float) -> UInt16 {
        let sign: UInt16 = f.sign == .minus ? 0x8000 : 0
        let a = Double(abs(f))
        if a >= 65520 { return sign | 0x7C00 }
        if a == 0 { return sign }
        // quantum of the binade (at least the subnormal quantum 2^-24), then round the count
        var e = max(Int(floor(log2(a))), -14)
        if Double(sign: .plus, exponent: e, significand: 1) > a { e -= 1 } // guard log2 rounding
        if Double(sign: .plus, exponent: e + 1, significand: 1) <= a { e += 1 }
        e = max(e, -14)
        var q = (a / Double(sign: .plus, exponent: e - 10, significand: 1)).rounded(.toNearestOrEven)
        if q >= 2048 { q = 1024; e += 1 }
        if e > 15 { return sign | 0x7C00 }
        if q < 1024 { return sign | UInt16(q) } // subnormal (e == -14)
        return sign | UInt16(e + 15) << 10 | (UInt16(q) - 1024)
    }

    static func bf16(_ h: UInt16) -> Float { Float(bitPattern: UInt32(h) << 16) }

    // MARK: byte access

    static func u16(_ b: [UInt8], _ o: Int) -> UInt16 { UInt16(b[o]) | UInt16(b[o + 1]) << 8 }
    static func u32(_ b: [UInt8], _ o: Int) -> UInt32 {
        UInt32(b[o]) | UInt32(b[o + 1]) << 8 | UInt32(b[o + 2]) << 16 | UInt32(b[o + 3]) << 24
    }
    static func i8(_ b: [UInt8], _ o: Int) -> Int { Int(Int8(bitPattern: b[o])) }
    static func i16(_ b: [UInt8], _ o: Int) -> Int { Int(Int16(bitPattern: u16(b, o))) }
    static func f16(_ b: [UInt8], _ o: Int) -> Float { half(u16(b, o)) }
    static func f32(_ b: [UInt8], _ o: Int) -> Float { Float(bitPattern: u32(b, o)) }

    /// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block
    /// (`s` = offset of the 12 scale bytes).
    static func scaleMin(_ b: [UInt8], _ s: Int, _ j: Int) -> (Int, Int) {
        if j < 4 { return (Int(b[s + j] & 63), Int(b[s + j + 4] & 63)) }
        let sc = Int(b[s + j + 4] & 0xF) | Int(b[s + j - 4] >> 6) << 4
        let mn = Int(b[s + j + 4] >> 4) | Int(b[s + j] >> 6) << 4
        return (sc, mn)
    }

    // MARK: dequantization

    /// The 32 stored quants (before any offset) of a Q4_0/Q4_1/Q5_0/Q5_1 block at `o`:
    /// element j < 16 is the low nibble of qs[j], element j+16 its high nibble; Q5 types add
    /// bit j of qh as bit 4.
    static func quants32(_ t: Int32, _ b: [UInt8], _ o: Int) -> [Int] {
        let hasMin = t == KType.q4_1 || t == KType.q5_1
        let five = t == KType.q5_0 || t == KType.q5_1
        let qh: UInt32 = five ? u32(b, o + (hasMin ? 4 : 2)) : 0
        let qs = o + (hasMin ? 4 : 2) + (five ? 4 : 0)
        return (0..<32).map { j in
            let byte = b[qs + j % 16]
            return Int(j < 16 ? byte & 0xF : byte >> 4) | Int((qh >> UInt32(j)) & 1) << 4
        }
    }

    /// Element values of a row, with ggml's float arithmetic; `parts` is the magnitude of the
    /// element's terms (|d*q| + |min|), used to scale comparison tolerances.
    static func decode(_ t: Int32, _ b: [UInt8], n: Int) -> (values: [Float], parts: [Float]) {
        var y = [Float](repeating: 0, count: n), p = [Float](repeating: 0, count: n)
        let (bs, bb) = KType.layout(t)
        for blk in 0..<(n / bs) {
            let o = blk * bb, e = blk * bs
            switch t {
            case KType.f32: y[e] = f32(b, o)
            case KType.f16: y[e] = f16(b, o)
            case KType.bf16: y[e] = bf16(u16(b, o))
            case KType.q4_0, KType.q4_1, KType.q5_0, KType.q5_1:
                let d = f16(b, o), q = quants32(t, b, o)
                let hasMin = t == KType.q4_1 || t == KType.q5_1
                let m = hasMin ? f16(b, o + 2) : 0
                for j in 0..<32 {
                    if hasMin {
                        y[e + j] = Float(q[j]) * d + m
                        p[e + j] = abs(Float(q[j]) * d) + abs(m)
                    } else {
                        y[e + j] = Float(q[j] - (t == KType.q5_0 ? 16 : 8)) * d
                    }
                }
            case KType.q8_0, KType.q8_1:
                let d = f16(b, o), qs = o + (t == KType.q8_0 ? 2 : 4)
                for j in 0..<32 { y[e + j] = Float(i8(b, qs + j)) * d }
            case KType.q8_K:
                let d = f32(b, o)
                for j in 0..<256 { y[e + j] = d * Float(i8(b, o + 4 + j)) }
            case KType.q4_K, KType.q5_K:
                let d = f16(b, o), dmin = f16(b, o + 2)
                let five = t == KType.q5_K
                let qs = o + (five ? 48 : 16)
                for c in 0..<4 {
                    for half in 0..<2 {
                        let (sc, mn) = scaleMin(b, o + 4, 2 * c + half)
                        let d1 = d * Float(sc), m1 = dmin * Float(mn)
                        for l in 0..<32 {
                            let byte = b[qs + 32 * c + l]
                            var q = Int(half == 0 ? byte & 0xF : byte >> 4)
                            if five { q |= Int((b[o + 16 + l] >> UInt8(2 * c + half)) & 1) << 4 }
                            let idx = e + 64 * c + 32 * half + l
                            y[idx] = d1 * Float(q) - m1
                            p[idx] = abs(d1 * Float(q)) + abs(m1)
                        }
                    }
                }
            case KType.q6_K:
                // ql[128] qh[64] scales[16] d; value v of half h: low 4 bits from ql, high 2 from qh
                let d = f16(b, o + 208)
                for v in 0..<256 {
                    let h = v / 128, r = v % 128, l = r % 32, quarter = r / 32
                    let qlByte = b[o + 64 * h + l + (quarter % 2) * 32]
                    let lo = Int(quarter < 2 ? qlByte & 0xF : qlByte >> 4)
                    let hi = Int((b[o + 128 + 32 * h + l] >> UInt8(2 * quarter)) & 3)
                    let sc = i8(b, o + 192 + v / 16)
                    y[e + v] = d * Float(sc) * Float((lo | hi << 4) - 32)
                }
            default: fatalError("decode: unsupported type \(t)")
            }
        }
        for i in 0..<n where p[i] == 0 { p[i] = abs(y[i]) }
        return (y, p)
    }

    static func dequantize(_ t: Int32, _ b: [UInt8], n: Int) -> [Float] { decode(t, b, n: n).values }

    // MARK: dot product

    /// The dot product of a weight row and an activation row (in the weight's dot type), in
    /// Double, and the sum of the magnitudes of its terms. For Q4_1/Q5_1 the min term uses
    /// the activation block's stored s (= d*sum(q), rounded to f16), as llama.cpp does.
    static func dot(_ wt: Int32, n: Int, w: [UInt8], a: [UInt8]) -> (value: Double, magnitude: Double) {
        let at = KType.dotType(wt)
        let (wv, wp) = decode(wt, w, n: n)
        let av = at == KType.f32 ? (0..<n).map { f32(a, 4 * $0) } : dequantize(at, a, n: n)
        var sum = 0.0, mag = 0.0
        if wt == KType.q4_1 || wt == KType.q5_1 {
            let wb = KType.layout(wt).bytes
            for blk in 0..<(n / 32) {
                let (d, m) = (Double(f16(w, blk * wb)), Double(f16(w, blk * wb + 2)))
                let (da, s) = (Double(f16(a, blk * 36)), Double(f16(a, blk * 36 + 2)))
                let q = quants32(wt, w, blk * wb)
                for j in 0..<32 {
                    sum += d * Double(q[j]) * da * Double(i8(a, blk * 36 + 4 + j))
                    mag += abs(Double(wp[32 * blk + j]) * Double(av[32 * blk + j]))
                }
                sum += m * s
                mag += abs(m * s)
            }
            return (sum, mag)
        }
        for i in 0..<n {
            sum += Double(wv[i]) * Double(av[i])
            mag += abs(Double(wp[i]) * Double(av[i]))
        }
        return (sum, mag)
    }

    // MARK: quantizers (ggml's quantize_row_*_ref)

    static func put16(_ b: inout [UInt8], _ o: Int, _ v: UInt16) { b[o] = UInt8(v & 0xFF); b[o + 1] = UInt8(v >> 8) }

    static func quantize(_ t: Int32, _ x: [Float]) -> [UInt8] {
        let n = x.count
        var out = [UInt8](repeating: 0, count: KType.rowBytes(t, n))
        let (bs, bb) = KType.layout(t)
        for blk in 0..<(n / bs) {
            let v = Array(x[(blk * bs)..<(blk * bs + bs)]), o = blk * bb
            switch t {
            case KType.q8_0, KType.q8_1:
                let amax = v.map { abs($0) }.max()!
                let d = amax / 127, id: Float = d != 0 ? 1 / d : 0
                let q = v.map { Int(($0 * id).rounded()) } // roundf: half away from zero
                put16(&out, o, halfBits(d))
                let qs = o + (t == KType.q8_0 ? 2 : 4)
                for j in 0..<32 { out[qs + j] = UInt8(bitPattern: Int8(q[j])) }
                if t == KType.q8_1 { put16(&out, o + 2, halfBits(Float(q.reduce(0, +)) * d)) }
            case KType.q8_K:
                var amax: Float = 0, max: Float = 0
                for e in v where abs(e) > amax { amax = abs(e); max = e }
                if amax == 0 { continue }
                let iscale = -127 / max
                let q = v.map { min(127, Int((iscale * $0).rounded(.toNearestOrEven))) }
                let d = 1 / iscale
                for k in 0..<4 { out[o + k] = UInt8((d.bitPattern >> (8 * UInt32(k))) & 0xFF) }
                for j in 0..<256 { out[o + 4 + j] = UInt8(bitPattern: Int8(q[j])) }
                for g in 0..<16 {
                    put16(&out, o + 260 + 2 * g, UInt16(bitPattern: Int16(q[(16 * g)..<(16 * g + 16)].reduce(0, +))))
                }
            case KType.q4_0, KType.q5_0:
                var amax: Float = 0, max: Float = 0
                for e in v where amax < abs(e) { amax = abs(e); max = e }
                let five = t == KType.q5_0
                let d = max / (five ? -16 : -8), id: Float = d != 0 ? 1 / d : 0
                let q = v.map { Swift.min(five ? 31 : 15, Int($0 * id + (five ? 16.5 : 8.5))) } // C cast truncates
                put16(&out, o, halfBits(d))
                var qh: UInt32 = 0
                for j in 0..<16 {
                    out[o + (five ? 6 : 2) + j] = UInt8(q[j] & 0xF) | UInt8(q[j + 16] & 0xF) << 4
                    qh |= UInt32(q[j] >> 4) << UInt32(j) | UInt32(q[j + 16] >> 4) << UInt32(j + 16)
                }
                if five { for k in 0..<4 { out[o + 2 + k] = UInt8((qh >> (8 * UInt32(k))) & 0xFF) } }
            case KType.q4_1, KType.q5_1:
                let lo = v.min()!, hi = v.max()!
                let five = t == KType.q5_1
                let d = (hi - lo) / (five ? 31 : 15), id: Float = d != 0 ? 1 / d : 0
                let q = v.map { five ? Int(UInt8(($0 - lo) * id + 0.5)) : Swift.min(15, Int(($0 - lo) * id + 0.5)) }
                put16(&out, o, halfBits(d))
                put16(&out, o + 2, halfBits(lo))
                var qh: UInt32 = 0
                for j in 0..<16 {
                    out[o + (five ? 8 : 4) + j] = UInt8(q[j] & 0xF) | UInt8(q[j + 16] & 0xF) << 4
                    qh |= UInt32((q[j] >> 4) & 1) << UInt32(j) | UInt32((q[j + 16] >> 4) & 1) << UInt32(j + 16)
                }
                if five { for k in 0..<4 { out[o + 4 + k] = UInt8((qh >> (8 * UInt32(k))) & 0xFF) } }
            default: fatalError("quantize: unsupported type \(t)")
            }
        }
        return out
    }
}
