import Foundation
import XCTest
@testable import VeloCore

/// The tests' reference data in the repository, `tests/data` (its README says where each file
/// comes from), or `$VELO_TEST_DATA`, a copy of the same layout. A missing file fails the test.
enum TestData {
    /// This file is <repo>/swift/Tests/VeloCoreTests/TestData.swift.
    static let dir: String = {
        if let env = ProcessInfo.processInfo.environment["VELO_TEST_DATA"], !env.isEmpty { return env }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../../tests/data")
            .standardized.path
    }()

    static func path(_ relative: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let path = dir + "/" + relative
        guard FileManager.default.fileExists(atPath: path) else {
            XCTFail("test data missing: \(path) (tests/data is part of the repository: is the clone complete?)", file: file, line: line)
            throw VeloError(.io, "missing \(path)")
        }
        return path
    }
}
