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
        let inode = mappingInode(of: base)
        XCTAssertNotNil(inode, "no mapping holds the file's bytes in /proc/self/maps")
        XCTAssertNotEqual(inode, 0, "the file's own mapping first")
        #endif
        file.makeResident()
        file.makeResident() // a second call changes nothing
        XCTAssertEqual(file.base, base)
        XCTAssertEqual([UInt8](UnsafeRawBufferPointer(start: base, count: file.size)), before)
        #if os(Linux)
        XCTAssertEqual(mappingInode(of: base), 0, "still the file's mapping: not moved")
        #endif
    }

    #if os(Linux)
    /// The inode of the mapping that holds `p`, from /proc/self/maps (0: anonymous memory; the
    /// path shown there depends on the root and TMPDIR the tests run under, the inode does not).
    /// Read line by line with stdio: procfs files report a size of 0.
    private func mappingInode(of p: UnsafeRawPointer) -> Int? {
        guard let f = fopen("/proc/self/maps", "r") else { return nil }
        defer { fclose(f) }
        let a = UInt(bitPattern: p)
        var line: UnsafeMutablePointer<CChar>?
        var cap = 0
        defer { free(line) }
        while getline(&line, &cap, f) > 0, let line {
            let fields = String(cString: line).split(separator: " ", omittingEmptySubsequences: true)
            let r = fields[0].split(separator: "-").compactMap { UInt($0, radix: 16) }
            if r.count == 2, r[0] <= a, a < r[1], fields.count > 4 { return Int(fields[4]) }
        }
        return nil
    }
    #endif
}
