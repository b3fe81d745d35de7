import XCTest
@testable import VeloCore

/// Multi-head latent attention's GPU pieces against float64 references: attention over rows of
/// 576 (MLA's [RoPE part, latent]) whose values are the 512 after the RoPE part (vOff, vDim),
/// one split and several merged by attention_combine; and copy_rows' two-level layouts.
extension GPUKernelTests {
    func testAttentionOverPartOfTheValues() throws {
        let (heads, hd, vOff, vd, pageSize) = (5, 576, 64, 512, 16)
        for keys in [3, 45] {
            let pages = (keys + pageSize - 1) / pageSize, pageStride = 2 * pageSize * hd
            var kvHost = [Float](repeating: 0, count: pages * pageStride)
            let rows = (0..<keys).map { _ in random(hd) }
            for j in 0..<keys {
                let base = (j / pageSize) * pageStride, slot = j % pageSize
                for d in 0..<hd {
                    kvHost[base + d * pageSize + slot] = rows[j][d]             // K plane: [dim][key]
                    kvHost[base + pageSize * hd + slot * hd + d] = rows[j][d]   // V plane: [key][dim], the same row
                }
            }
            // one decode token at the last position, its heads' queries in a row of qStride
            let qStride = heads * hd + 8, q = random(qStride), scale = 1 / Float(hd).squareRoot()
            var want: [Double] = []
            for h in 0..<heads {
                let s = rows.map { r in (0..<hd).reduce(0.0) { $0 + Double(q[h * hd + $1]) * Double(r[$1]) } * Double(scale) }
                let m = s.max()!, e = s.map { exp($0 - m) }, z = e.reduce(0, +)
                want += (0..<vd).map { d in (0..<keys).reduce(0.0) { $0 + e[$1] / z * Double(rows[$1][vOff + d]) } }
            }
            for (chunk, splits) in [(keys, 1), (16, (keys + 15) / 16)] {
                let out = try upload([Float](repeating: .nan, count: heads * vd))
                let part = try upload([Float](repeating: .nan, count: heads * splits * (vd + 2)))
                let pos = try upload([Int32(keys - 1)]), pt = try upload([Int32(0)]), tab = try upload((0..<pages).map { Int32($0) })
                let p = GPUParams.Attention(n: 1, heads: UInt32(heads), kvHeads: 1, headDim: UInt32(hd), kvDim: UInt32(hd), pageSize: UInt32(pageSize),
                                            pageStride: UInt32(pageStride), layerOff: 0, scale: scale, chunk: UInt32(chunk), splits: UInt32(splits),
                                            qStride: UInt32(qStride), vOff: UInt32(vOff), vDim: UInt32(vd))
                try run(GPUKernels.attention, [try upload(q), try upload(kvHost), out, pos, pt, tab, part, try upload([Float(0)])], p.words, (1, 1, splits))
                if splits > 1 {
                    try run(GPUKernels.attentionCombine, [part, out, pos, try upload([Float(0)])],
                            GPUParams.AttentionCombine(n: 1, heads: UInt32(heads), headDim: UInt32(vd), chunk: UInt32(chunk), splits: UInt32(splits)).words,
                            GPUKernels.attentionCombineGroups(n: 1, heads: heads, headDim: vd))
                }
                assertClose(try read(out, heads * vd), want, tolerance: want.map { abs($0) * 1e-4 + 1e-5 }, "MLA attention keys=\(keys) splits=\(splits)")
            }
        }
    }

    func testCopyRows() throws {
        let (a, b, width) = (3, 4, 70)
        let x = random(1000), y0 = random(1200)
        let yB = try upload(y0)
        let (xa, xb, xOff, ya, yb, yOff) = (300, 71, 5, 390, 90, 11)
        try run(GPUKernels.copyRows, [try upload(x), yB],
                GPUParams.CopyRows(width: UInt32(width), xA: UInt32(xa), xB: UInt32(xb), xOff: UInt32(xOff), yA: UInt32(ya), yB: UInt32(yb), yOff: UInt32(yOff)).words,
                ((width + 63) / 64, b, a))
        var want = y0.map(Double.init)
        for i in 0..<a { for k in 0..<b { for j in 0..<width { want[i * ya + k * yb + yOff + j] = Double(x[i * xa + k * xb + xOff + j]) } } }
        assertClose(try read(yB, 1200), want, tolerance: want.map { _ in 0 }, "copy_rows")
    }
}
