import XCTest
@testable import VeloCore

/// matvec_dot_q8out_T: a decode token's product that writes the next product's 8-bit input
/// itself, in both modes, against float64 products and quantize_q8's own blocks.
extension GPUKernelTests {
    func testMatvecDotQ8Out() throws {
        guard GPUKernels.integerDot(try device()) else { throw XCTSkip("no 8-bit integer dot products on this device") }
        let eps: Float = 1e-5
        for type in [GGMLType.q4_0, .q8_0, .q4_K, .q6_K] {
            for k in ([GGMLType.q4_K, .q6_K].contains(type) ? [256, 768] : [96, 512]) {
                let nb = k / 32
                let x = random(k)
                let (xq, xd) = try q8Buffers(try upload(x), k: k, m: 1)
                let what = "\(type.name) K=\(k)"

                // residual mode: H += W·x; the blocks of H·nw, and each block's sum of squares of H
                let n = 96
                let w = weights(type, rows: n, cols: k)
                let (prod, _, tolDot) = products(w.values, x, n: n, k: k, m: 1)
                let h0 = random(n, scale: 2), nw = random(n)
                let hb = try upload(h0), sums = try upload([Float](repeating: .nan, count: n / 32))
                let out = (values: try upload([UInt8](repeating: 0xAB, count: n)), scales: try upload([UInt8](repeating: 0xAB, count: n / 32 * 8)))
                try run(GPUKernels.matvecDotQ8Out(type, glu: false, scaled: false),
                        [try upload(w.bytes), xq, xd, hb, try upload(nw), out.values, out.scales, sums],
                        [UInt32(k), UInt32(w.rowBytes), 0, eps.bitPattern], (n / 32, 1, 1))
                let h = try read(hb, n)
                assertClose(h, (0..<n).map { Double(h0[$0]) + prod[$0] }, tolerance: tolDot.map { $0 + 1e-6 }, "q8out residual " + what)
                // the blocks are exactly quantize_q8's of the kernel's own H·nw (float products)
                let want8 = try quantizeQ8(try upload((0..<n).map { h[$0] * nw[$0] }), k: n, m: 1)
                XCTAssertEqual(try readBytes(out.values, n), want8.values, "q8out residual values " + what)
                XCTAssertEqual(try readBytes(out.scales, n / 32 * 8), want8.scales, "q8out residual scales " + what)
                let ss = (0..<(n / 32)).map { b in (0..<32).reduce(0.0) { $0 + Double(h[b * 32 + $1]) * Double(h[b * 32 + $1]) } }
                assertClose(try read(sums, n / 32), ss, tolerance: ss.map { $0 * 1e-5 }, "q8out residual sums of squares " + what)

                // GLU mode: gate/up pairs (row 2o gate o, 2o + 1 up o) to act(gate)·up and its
                // blocks; scaled, every product times 1/sqrt(sum(S)/K + eps) first
                let pairs = 64
                let g = weights(type, rows: 2 * pairs, cols: k)
                let (gp, _, gtol) = products(g.values, x, n: 2 * pairs, k: k, m: 1)
                let s = (0..<nb).map { _ in Float.random(in: 0.5...40, using: &rng) }
                let sc = 1 / (s.reduce(0.0) { $0 + Double($1) } / Double(k) + Double(eps)).squareRoot()
                for (scaled, act) in [(false, UInt32(1)), (true, UInt32(1)), (true, UInt32(2))] {
                    let f = scaled ? sc : 1
                    let yb = try upload([Float](repeating: .nan, count: pairs))
                    let o = (values: try upload([UInt8](repeating: 0xAB, count: pairs)), scales: try upload([UInt8](repeating: 0xAB, count: pairs / 32 * 8)))
                    let sb = try upload(s)
                    try run(GPUKernels.matvecDotQ8Out(type, glu: true, scaled: scaled),
                            [try upload(g.bytes), xq, xd, yb, sb, o.values, o.scales, sb],
                            [UInt32(k), UInt32(g.rowBytes), act, eps.bitPattern], (pairs / 32, 1, 1))
                    let want = (0..<pairs).map { Self.gluAct(f * gp[2 * $0], act) * f * gp[2 * $0 + 1] }
                    let tol = (0..<pairs).map { i -> Double in
                        let gv = f * gp[2 * i], u = f * gp[2 * i + 1], dg = f * gtol[2 * i], du = f * gtol[2 * i + 1]
                        return 1.2 * dg * (abs(u) + du) + abs(Self.gluAct(gv, act)) * du + abs(want[i]) * 1e-5 + 1e-6 + Self.geluSlack(gv, u, act)
                    }
                    let y = try read(yb, pairs)
                    let gwhat = "q8out glu scaled=\(scaled) act=\(act) " + what
                    assertClose(y, want, tolerance: tol, gwhat)
                    let y8 = try quantizeQ8(try upload(y), k: pairs, m: 1)
                    XCTAssertEqual(try readBytes(o.values, pairs), y8.values, gwhat + " values")
                    XCTAssertEqual(try readBytes(o.scales, pairs / 32 * 8), y8.scales, gwhat + " scales")
                    XCTAssertEqual(try read(sb, nb), s, gwhat + ": S changed")
                }
            }
        }
    }
}
