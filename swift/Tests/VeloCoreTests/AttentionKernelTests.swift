import CKernels
import XCTest

/// ck_attention (paged, transposed K pages) against a plain softmax(QK^T)V reference, at every
/// ISA level, for page sizes and head sizes that take each code path.
final class AttentionKernelTests: XCTestCase {
    func reference(q: [Float], heads: Int, hd: Int, keys: [[Float]], values: [[Float]], scale: Float) -> [Float] {
        var out = [Float](repeating: 0, count: heads * hd)
        for g in 0..<heads {
            let s = keys.map { k in Double((0..<hd).reduce(Float(0)) { $0 + q[g * hd + $1] * k[$1] } * scale) }
            let m = s.max()!
            let e = s.map { exp($0 - m) }
            let z = e.reduce(0, +)
            for (j, v) in values.enumerated() {
                for d in 0..<hd { out[g * hd + d] += Float(e[j] / z) * v[d] }
            }
        }
        return out
    }

    func check(pageSize: Int, hd: Int, kvHeads: Int, group: Int, n: Int) {
        var rng = UInt64(0x1234_5678) &+ UInt64(pageSize * 131 + hd * 7 + n)
        func rand() -> Float {
            rng = rng &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Float(Int64(bitPattern: rng >> 11) % 2000) / 1000 - 1
        }
        let kvDim = kvHeads * hd
        let pages = (n + pageSize - 1) / pageSize
        // page storage: K transposed [kvDim][slot], V [slot][kvDim]
        var kStore = [[Float]](repeating: [Float](repeating: .nan, count: kvDim * pageSize), count: pages)
        var vStore = kStore
        var keys = [[[Float]]](repeating: [], count: kvHeads), values = keys
        for j in 0..<n {
            let k = (0..<kvDim).map { _ in rand() }, v = (0..<kvDim).map { _ in rand() }
            for d in 0..<kvDim {
                kStore[j / pageSize][d * pageSize + j % pageSize] = k[d]
                vStore[j / pageSize][(j % pageSize) * kvDim + d] = v[d]
            }
            for h in 0..<kvHeads {
                keys[h].append(Array(k[h * hd..<(h + 1) * hd]))
                values[h].append(Array(v[h * hd..<(h + 1) * hd]))
            }
        }
        let scale = 1 / Float(hd).squareRoot()
        for level in Int32(0)...2 {
            ck_set_isa_limit(level)
            for kvh in 0..<kvHeads {
                let q = (0..<group * hd).map { _ in rand() }
                let want = reference(q: q, heads: group, hd: hd, keys: keys[kvh], values: values[kvh], scale: scale)
                var out = [Float](repeating: 0, count: group * hd)
                var scores = [Float](repeating: 0, count: group * n)
                kStore.withPointers { kp in
                    vStore.withPointers { vp in
                        ck_attention(q, Int64(group), Int64(hd), kp, vp, Int64(pageSize), Int64(kvDim), Int64(kvh * hd), Int64(n), scale, 0, 0, &out, &scores)
                    }
                }
                for i in 0..<out.count where abs(out[i] - want[i]) > 1e-4 {
                    XCTFail("level \(level) page \(pageSize) hd \(hd) n \(n) kvh \(kvh): out[\(i)] = \(out[i]), want \(want[i])")
                    break
                }
            }
        }
        ck_set_isa_limit(2)
    }

    func testPathsAndShapes() {
        for (ps, hd) in [(16, 64), (16, 16), (8, 8), (16, 8), (4, 12), (5, 16)] {
            for n in [1, 3, ps, ps + 1, 3 * ps + 5] {
                check(pageSize: ps, hd: hd, kvHeads: 2, group: 3, n: n)
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
