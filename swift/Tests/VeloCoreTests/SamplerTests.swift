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
}
