/// Weight rows interleaved as the GPU keeps gated-MLP pairs: block after block, and in each
/// block row j is row j / S of source j % S (S sources of `rows` rows each: gate, up). Made a
/// byte range at a time, straight into an upload's staging memory (`GPUDevice.upload(fill:)`),
/// so no interleaved copy of a whole pair is made on the host.
struct InterleavedRows {
    /// Each block's sources, in the order their rows alternate (the same count in every block).
    let blocks: [[UnsafeRawPointer]]
    let rows: Int
    let rowBytes: Int

    init(blocks: [[UnsafeRawPointer]], rows: Int, rowBytes: Int) {
        precondition(!blocks.isEmpty && blocks.allSatisfy { !$0.isEmpty && $0.count == blocks[0].count }, "blocks of one source count")
        (self.blocks, self.rows, self.rowBytes) = (blocks, rows, rowBytes)
    }

    var blockBytes: Int { blocks[0].count * rows * rowBytes }
    var bytes: Int { blocks.count * blockBytes }

    /// Writes bytes `at ..< at + count` of the interleaved layout at `p`.
    func write(into p: UnsafeMutableRawPointer, at: Int, count: Int) {
        let s = blocks[0].count, bb = blockBytes
        var pos = at
        let end = at + count
        while pos < end {
            let b = pos / bb, within = pos % bb, j = within / rowBytes, off = within % rowBytes
            let n = min(rowBytes - off, end - pos)
            (p + (pos - at)).copyMemory(from: blocks[b][j % s] + (j / s) * rowBytes + off, byteCount: n)
            pos += n
        }
    }
}
