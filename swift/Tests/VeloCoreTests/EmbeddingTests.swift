import XCTest
@testable import VeloCore

/// Embedding pooling (`Pooling`, `EmbeddingPool`): llama.cpp's pooling_type values, the rows
/// each pooling takes, and the normalised vector. The vectors themselves are checked against
/// llama.cpp's in tests/embeddings.test.ts.
final class EmbeddingTests: XCTestCase {
    func testPoolingTypes() throws {
        XCTAssertEqual(try Pooling(ggufType: nil), .last)
        XCTAssertEqual(try Pooling(ggufType: 0), .last)
        XCTAssertEqual(try Pooling(ggufType: 1), .mean)
        XCTAssertEqual(try Pooling(ggufType: 2), .cls)
        XCTAssertEqual(try Pooling(ggufType: 3), .last)
        XCTAssertThrowsError(try Pooling(ggufType: 4)) { XCTAssertTrue("\($0)".contains("rank")) }
        XCTAssertThrowsError(try Pooling(ggufType: 9))
    }

    func testWantedPositions() {
        let count = 5
        XCTAssertEqual((0..<count).filter { Pooling.mean.wants(position: $0, count: count) }, [0, 1, 2, 3, 4])
        XCTAssertEqual((0..<count).filter { Pooling.cls.wants(position: $0, count: count) }, [0])
        XCTAssertEqual((0..<count).filter { Pooling.last.wants(position: $0, count: count) }, [4])
    }

    func testMeanIsNormalised() {
        let pool = EmbeddingPool(pooling: .mean, dim: 2)
        for row: [Float] in [[1, 0], [3, 4], [2, 2]] { row.withUnsafeBufferPointer { pool.add($0.baseAddress!) } }
        // mean (2, 2) → (1/√2, 1/√2)
        let v = pool.vector
        XCTAssertEqual(v[0], Float(0.5).squareRoot(), accuracy: 1e-7)
        XCTAssertEqual(v[1], Float(0.5).squareRoot(), accuracy: 1e-7)
        // a preempted sequence starts over
        pool.reset()
        [Float(0), -2].withUnsafeBufferPointer { pool.add($0.baseAddress!) }
        XCTAssertEqual(pool.vector, [0, -1])
    }

    func testZeroStaysZero() {
        let pool = EmbeddingPool(pooling: .last, dim: 3)
        [Float](repeating: 0, count: 3).withUnsafeBufferPointer { pool.add($0.baseAddress!) }
        XCTAssertEqual(pool.vector, [0, 0, 0])
    }
}
