import XCTest
@testable import VeloCore

/// Weights' way onto the GPU: uploads made a chunk at a time by the caller (`upload(fill:)`,
/// through the staging buffer's two halves where the buffer is not mapped) and gated-MLP pairs
/// interleaved a byte range at a time (`InterleavedRows`).
final class GPUUploadTests: XCTestCase {
    func device() throws -> GPUDevice { try TestGPU.device() }

    /// Any byte range of the interleaved layout equals the same range of the rows copied one by
    /// one (ranges that start and end inside rows, and cross rows and blocks).
    func testInterleavedRowsByRange() {
        var rng = SystemRandomNumberGenerator()
        for (blockCount, rows, rowBytes) in [(1, 7, 18), (3, 5, 34), (4, 1, 2304)] {
            // each block's gate and up rows, in memory of their own
            let sources = (0..<blockCount).map { _ in (0..<2).map { _ -> UnsafeMutableRawPointer in
                let p = UnsafeMutableRawPointer.allocate(byteCount: rows * rowBytes, alignment: 16)
                for i in 0..<rows * rowBytes { p.storeBytes(of: UInt8.random(in: 0...255, using: &rng), toByteOffset: i, as: UInt8.self) }
                return p
            } }
            defer { sources.joined().forEach { $0.deallocate() } }
            var expected: [UInt8] = []
            for block in sources {
                for r in 0..<rows { for s in block { expected += UnsafeRawBufferPointer(start: s + r * rowBytes, count: rowBytes) } }
            }
            let layout = InterleavedRows(blocks: sources.map { $0.map { UnsafeRawPointer($0) } }, rows: rows, rowBytes: rowBytes)
            XCTAssertEqual(layout.bytes, expected.count)
            for chunk in [1, 5, rowBytes, rowBytes + 3, 2 * rows * rowBytes + 1, expected.count] {
                var out = [UInt8](repeating: 0, count: expected.count)
                out.withUnsafeMutableBytes { p in
                    var at = 0
                    while at < expected.count {
                        let n = min(chunk, expected.count - at)
                        layout.write(into: p.baseAddress! + at, at: at, count: n)
                        at += n
                    }
                }
                XCTAssertEqual(out, expected, "blocks \(blockCount), rows \(rows), row bytes \(rowBytes), chunks of \(chunk)")
            }
        }
    }

    /// An upload larger than the staging buffer: the fill is asked for consecutive ranges that
    /// cover the upload once, and the buffer holds exactly those bytes at the offset, the bytes
    /// before it untouched.
    func testUploadFilledInChunks() throws {
        let d = try device()
        let bytes = 80 << 20, offset = 4096
        let b = try d.makeBuffer(bytes: offset + bytes, memory: .device, label: "upload test")
        let head = [UInt8](repeating: 0xA5, count: offset)
        try head.withUnsafeBytes { try d.upload(b, offset: 0, from: $0.baseAddress!, bytes: offset) }
        var ranges: [(Int, Int)] = []
        // byte i of the upload: a hash of i (a pattern whose period divides the staging
        // half's size would hide a half copied from the wrong place)
        func value(_ i: Int) -> UInt8 { UInt8(truncatingIfNeeded: (UInt64(i) &* 0x9E37_79B9_7F4A_7C15) >> 32) }
        try d.upload(b, offset: offset, bytes: bytes) { p, at, count in
            ranges.append((at, count))
            let out = p.assumingMemoryBound(to: UInt8.self)
            for i in 0..<count { out[i] = value(at + i) }
        }
        var next = 0
        for (at, count) in ranges {
            XCTAssertEqual(at, next, "ranges in order, none skipped or repeated")
            XCTAssertGreaterThan(count, 0)
            next = at + count
        }
        XCTAssertEqual(next, bytes)
        var back = [UInt8](repeating: 0, count: offset + bytes)
        try back.withUnsafeMutableBytes { try d.download(b, offset: 0, into: $0.baseAddress!, bytes: $0.count) }
        XCTAssertEqual(Array(back[0..<offset]), head)
        var mismatches = 0
        for i in 0..<bytes where back[offset + i] != value(i) { mismatches += 1 }
        XCTAssertEqual(mismatches, 0)
    }

    /// A fill that fails part-way: the upload throws that error, and the device still uploads
    /// correctly afterwards.
    func testUploadFillErrorPropagates() throws {
        let d = try device()
        let bytes = 70 << 20
        let b = try d.makeBuffer(bytes: bytes, memory: .device, label: "upload test")
        struct Refused: Error {}
        XCTAssertThrowsError(try d.upload(b, offset: 0, bytes: bytes) { _, at, _ in if at > 0 { throw Refused() } }) {
            XCTAssert($0 is Refused, "\($0)")
        }
        let values = (0..<1000).map { Float($0) * 0.5 }
        try values.withUnsafeBytes { try d.upload(b, offset: 0, from: $0.baseAddress!, bytes: $0.count) }
        var back = [Float](repeating: 0, count: values.count)
        try back.withUnsafeMutableBytes { try d.download(b, offset: 0, into: $0.baseAddress!, bytes: $0.count) }
        XCTAssertEqual(back, values)
    }
}
