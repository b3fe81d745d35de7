import XCTest
@testable import VeloCore

final class SamplerTests: XCTestCase {
    /// The plain loop: the first index of the largest value.
    func scalarArgmax(_ v: UnsafePointer<Float>, _ n: Int) -> Int32 {
        var best = 0
        for i in 1..<max(n, 1) where v[i] > v[best] { best = i }
        return Int32(best)
    }

    /// The vectorised argmax against the plain loop: odd lengths, ties (first index wins),
    /// the maximum in the tail, and all-equal or infinite values.
    func testArgmaxMatchesScalarLoop() {
        var rng = SystemRandomNumberGenerator()
        for n in [1, 2, 15, 16, 17, 31, 32, 33, 1000, 32_000, 128_257] {
            var v = (0..<n).map { _ in Float(Int.random(in: -50...50, using: &rng)) } // many ties
            v.withUnsafeBufferPointer { XCTAssertEqual(Sampler.argmax($0.baseAddress!, n), scalarArgmax($0.baseAddress!, n), "n=\(n)") }
            v[n - 1] = 1000 // in the tail
            v.withUnsafeBufferPointer { XCTAssertEqual(Sampler.argmax($0.baseAddress!, n), Int32(n - 1)) }
            v = [Float](repeating: -.infinity, count: n)
            v.withUnsafeBufferPointer { XCTAssertEqual(Sampler.argmax($0.baseAddress!, n), 0) }
            v = [Float](repeating: 3, count: n)
            v[n / 2] = .infinity
            v.withUnsafeBufferPointer { XCTAssertEqual(Sampler.argmax($0.baseAddress!, n), Int32(n / 2)) }
        }
    }

    /// Indices by value, descending, ties to the lower index.
    func ranked(_ ids: [Int], _ v: [Float]) -> [Int] {
        ids.sorted { (a: Int, b: Int) -> Bool in v[a] > v[b] || (v[a] == v[b] && a < b) }
    }

    /// The masked top-k scan against sorting every allowed value: ties (lower id first), a
    /// partial last mask word, fewer allowed tokens than k, none allowed, and NaNs left out.
    func testTopKMatchesSortOfAllowedValues() {
        var rng = SystemRandomNumberGenerator()
        for n in [1, 7, 64, 65, 1000, 128_256] {
            for k in [1, 3, 40, 64] {
                var v = (0..<n).map { _ in Float(Int.random(in: -30...30, using: &rng)) }
                if n > 10 { v[5] = .nan }
                for density in [0.0, 0.001, 0.3, 1.0] {
                    var bits = [UInt64](repeating: 0, count: (n + 63) / 64)
                    for i in 0..<n where Double.random(in: 0..<1, using: &rng) < density { bits[i >> 6] |= 1 << UInt64(i & 63) }
                    let allowed: [Int] = (0..<n).filter { (i: Int) -> Bool in (bits[i >> 6] >> UInt64(i & 63)) & 1 == 1 && !v[i].isNaN }
                    let expected: [Int32] = ranked(allowed, v).prefix(k).map { Int32($0) }
                    let got = v.withUnsafeBufferPointer { vp in
                        bits.withUnsafeBufferPointer { Sampler.topCandidates(vp.baseAddress!, vocab: n, k: min(k, n), allowed: $0.baseAddress!) }
                    }
                    XCTAssertEqual(got.map(\.id), Array(expected), "n=\(n) k=\(k) density=\(density)")
                    XCTAssertEqual(got.map(\.logit), expected.map { v[Int($0)] })
                }
                if k < n {
                    let all = v.withUnsafeBufferPointer { Sampler.topCandidates($0.baseAddress!, vocab: n, k: k) }
                    let ref = ranked((0..<n).filter { !v[$0].isNaN }, v).prefix(k)
                    XCTAssertEqual(all.map(\.id), ref.map { Int32($0) }, "unmasked n=\(n) k=\(k)")
                }
            }
        }
    }
}
