import CKernels
import XCTest

/// ck_attention (paged, transposed K pages) against a plain softmax(QK^T)V reference, at every
/// ISA level, for page sizes and head sizes that take each code path.
final class AttentionKernelTests: XCTestCase {
    /// softmax over keys start..<keys.count of the scores s_j = scale·q·k_j (softcapped to
    /// cap·tanh(s/cap) when softcap > 0), times V, in Double.
    func reference(q: [Float], heads: Int, hd: Int, keys: [[Float]], values: [[Float]], scale: Float,
                   softcap: Float = 0, start: Int = 0) -> [Float] {
        var out = [Float](repeating: 0, count: heads * hd)
        for g in 0..<heads {
            let s = keys[start...].map { k -> Double in
                let x = (0..<hd).reduce(0.0) { $0 + Double(q[g * hd + $1]) * Double(k[$1]) } * Double(scale)
                return softcap > 0 ? Double(softcap) * tanh(x / Double(softcap)) : x
            }
            let m = s.max()!
            let e = s.map { exp($0 - m) }
            let z = e.reduce(0, +)
            for (j, v) in values[start...].enumerated() {
                for d in 0..<hd { out[g * hd + d] += Float(e[j] / z) * v[d] }
            }
        }
        return out
    }

    /// `softcap` > 0 caps the scores; keys before `start` (a sliding window's edge) must not
    /// count: their V rows are 1000s and their K rows 200 times a query (scores in the hundreds),
    /// so any weight on them, or a maximum taken over them, shows.
    func check(pageSize: Int, hd: Int, kvHeads: Int, group: Int, n: Int, scale: Float? = nil, softcap: Float = 0, start: Int = 0) {
        var rng = UInt64(0x1234_5678) &+ UInt64(pageSize * 131 + hd * 7 + n)
        func rand() -> Float {
            rng = rng &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Float(Int64(bitPattern: rng >> 11) % 2000) / 1000 - 1
        }
        let kvDim = kvHeads * hd
        let pages = (n + pageSize - 1) / pageSize
        let queries = (0..<kvHeads).map { _ in (0..<group * hd).map { _ in rand() } }
        // page storage: K transposed [kvDim][slot], V [slot][kvDim]
        var kStore = [[Float]](repeating: [Float](repeating: .nan, count: kvDim * pageSize), count: pages)
        var vStore = kStore
        var keys = [[[Float]]](repeating: [], count: kvHeads), values = keys
        for j in 0..<n {
            var k = (0..<kvDim).map { _ in rand() }, v = (0..<kvDim).map { _ in rand() }
            if j < start {
                k = (0..<kvDim).map { 200 * queries[$0 / hd][$0 % hd] }
                v = [Float](repeating: 1000, count: kvDim)
            }
            for d in 0..<kvDim {
                kStore[j / pageSize][d * pageSize + j % pageSize] = k[d]
                vStore[j / pageSize][(j % pageSize) * kvDim + d] = v[d]
            }
            for h in 0..<kvHeads {
                keys[h].append(Array(k[h * hd..<(h + 1) * hd]))
                values[h].append(Array(v[h * hd..<(h + 1) * hd]))
            }
        }
        let scale = scale ?? 1 / Float(hd).squareRoot()
        let what = "page \(pageSize) hd \(hd) n \(n) softcap \(softcap) start \(start)"
        let wants = (0..<kvHeads).map { kvh in
            reference(q: queries[kvh], heads: group, hd: hd, keys: keys[kvh], values: values[kvh], scale: scale, softcap: softcap, start: start)
        }
        if softcap > 0 && n - start > 1 {
            // the cap must matter here, or the check could not fail (with one key it cannot)
            let plain = reference(q: queries[0], heads: group, hd: hd, keys: keys[0], values: values[0], scale: scale, start: start)
            XCTAssertGreaterThan(zip(plain, wants[0]).map { abs($0 - $1) }.max()!, 1e-2, "softcap has no effect: " + what)
        }
        for level in Int32(0)...2 {
            ck_set_isa_limit(level)
            for kvh in 0..<kvHeads {
                let want = wants[kvh]
                var out = [Float](repeating: .nan, count: group * hd)
                var scores = [Float](repeating: .nan, count: group * n)
                kStore.withPointers { kp in
                    vStore.withPointers { vp in
                        ck_attention(queries[kvh], Int64(group), Int64(hd), kp, vp, Int64(pageSize), Int64(kvDim), Int64(kvh * hd), Int64(n),
                                     scale, softcap, nil, Int64(start), &out, &scores)
                    }
                }
                for i in 0..<out.count where !(abs(out[i] - want[i]) <= 1e-4) {
                    XCTFail("level \(level) \(what) kvh \(kvh): out[\(i)] = \(out[i]), want \(want[i])")
                    break
                }
            }
        }
        ck_set_isa_limit(Int32(CK_ISA_BEST))
    }

    func testPathsAndShapes() {
        for (ps, hd) in [(16, 64), (16, 16), (8, 8), (16, 8), (4, 12), (5, 16)] {
            for n in [1, 3, ps, ps + 1, 3 * ps + 5] {
                check(pageSize: ps, hd: hd, kvHeads: 2, group: 3, n: n)
            }
        }
    }

    /// Softcapped scores (Gemma 2) and sliding windows (keys from `start`), on every path: a
    /// window starting inside the first page, on a page edge, past whole pages, at the last key.
    func testSoftcapAndWindow() {
        for (ps, hd) in [(16, 64), (16, 16), (8, 8), (16, 8), (4, 12), (5, 16)] {
            for n in [3, ps + 1, 3 * ps + 5] {
                let starts = Set([0, 1, ps - 1, ps, 2 * ps + 1, n / 2, n - 1].filter { $0 >= 0 && $0 < n }).sorted()
                for start in starts {
                    for softcap: Float in [0, 1] where softcap > 0 || start > 0 {
                        // scores of about ±1 and more, so that a cap of 1 bends them
                        check(pageSize: ps, hd: hd, kvHeads: 2, group: 3, n: n, scale: 3 / Float(hd).squareRoot(), softcap: softcap, start: start)
                    }
                }
            }
        }
    }
}

private extension Array where Element == [Float] {
    /// Base pointers of every inner array, valid inside `body`.
    func withPointers<R>(_ body: (UnsafePointer<UnsafePointer<Float>?>) -> R) -> R {
        let bufs = map { row -> UnsafeMutablePointer<Float> in
            let p = UnsafeMutablePointer<Float>.allocate(capacity: row.count)
            p.initialize(from: row, count: row.count)
            return p
        }
        defer { bufs.forEach { $0.deallocate() } }
        let ptrs = bufs.map { UnsafePointer($0) as UnsafePointer<Float>? }
        return ptrs.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
