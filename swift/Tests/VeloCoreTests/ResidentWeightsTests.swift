import Foundation
import XCTest
@testable import VeloCore
#if canImport(Glibc)
import Glibc
#endif

/// MappedFile.makeResident: the CPU backend's weights moved from the file mapping into anonymous
/// memory at the same addresses, bytes unchanged.
final class ResidentWeightsTests: XCTestCase {
    func testSameBytesAtTheSameAddresses() throws {
        // a file across several 2 MiB pages, its last page partly past the end
        let path = NSTemporaryDirectory() + "velo-resident-\(getpid()).bin"
        var rng = SystemRandomNumberGenerator()
        try Data((0..<(5 << 20) + 123).map { _ in UInt8.random(in: 0...255, using: &rng) }).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let file = try MappedFile(path: path)
        guard let base = file.base else { return XCTFail("empty file") }
        let before = [UInt8](UnsafeRawBufferPointer(start: base, count: file.size))
        #if os(Linux)
        XCTAssertTrue(mappingNames(of: base).contains(path), "the file's own mapping first")
        #endif
        file.makeResident()
        file.makeResident() // a second call changes nothing
        XCTAssertEqual(file.base, base)
        XCTAssertEqual([UInt8](UnsafeRawBufferPointer(start: base, count: file.size)), before)
        #if os(Linux)
        XCTAssertFalse(mappingNames(of: base).contains(path), "still the file's mapping: not moved")
        #endif
    }

    #if os(Linux)
    /// The path names in /proc/self/maps of the mappings that hold `p`.
    private func mappingNames(of p: UnsafeRawPointer) -> [String] {
        guard let maps = try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8) else { return [] }
        let a = UInt(bitPattern: p)
        return maps.split(separator: "\n").compactMap { line in
            let f = line.split(separator: " ", omittingEmptySubsequences: true)
            let r = f[0].split(separator: "-").compactMap { UInt($0, radix: 16) }
            guard r.count == 2, r[0] <= a, a < r[1] else { return nil }
            return f.count > 5 ? String(f[5]) : ""
        }
    }
    #endif
}
