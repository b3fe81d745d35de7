#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The KV pages in GPU memory, in as many buffers as the pool needs (each within what one
/// binding may cover): each buffer holds a run of consecutive layers of every page, page-major, each
/// page's part in `PagePool`'s layout (layer by layer, K plane then V plane; shaders/README.md).
/// A dispatch touches one layer, so it binds the one buffer that holds it; the pool's size is
/// bounded by device memory only. With one buffer this is exactly the host pool's layout.
final class GPUKVPages {
    struct Group {
        let buffer: GPUBuffer
        let firstLayer: Int
        let layers: Int
        /// Bytes of one page's part in this buffer.
        let pageBytes: Int
    }
    /// Where one layer of a model lives: its buffer, 32-bit words from a page to the next in it,
    /// and words from a page's start in it to the layer's K plane.
    struct Place {
        let buffer: GPUBuffer
        let pageStride: Int
        let layerOff: Int
    }
    let groups: [Group]
    let pageSize: Int
    let layout: KVLayout
    let pageCount: Int

    /// Most bytes one KV buffer may take: what a binding may cover, below 4 GiB (the kernels
    /// index 16-bit halves with 32-bit integers). VELO_GPU_KV_BUFFER_BYTES lowers it (tests of
    /// pools that span several buffers).
    static func bufferLimit(_ device: GPUDevice) -> Int {
        var limit = min(device.maxBindingBytes, (1 << 32) - 256)
        if let e = getenv("VELO_GPU_KV_BUFFER_BYTES"), let v = Int(String(cString: e)), v > 0 { limit = min(limit, v) }
        return limit
    }

    init(device: GPUDevice, pool: PagePool) throws {
        pageSize = pool.pageSize
        layout = pool.layout
        pageCount = pool.pageCount
        let limit = Self.bufferLimit(device)
        // as many consecutive layers a buffer as fit (layers may differ in width: Gemma 4's)
        var groups: [Group] = []
        var first = 0
        while first < layout.layers {
            var bytes = 0, n = 0
            while first + n < layout.layers && pageCount * (bytes + layout.layerBytes(layer: first + n)) <= limit {
                bytes += layout.layerBytes(layer: first + n)
                n += 1
            }
            guard n > 0 else {
                let one = layout.layerBytes(layer: first)
                throw VeloError(.invalidArgument, "one layer of the KV cache (\(pageCount) pages of \(one) bytes: \((pageCount * one) >> 20) MiB) is larger than one GPU buffer may be on \(device.name) (\(limit >> 20) MiB): lower --ctx-size or --max-batch-size, or use --cache-type-k/--cache-type-v q8_0")
            }
            let split = groups.count > 0 || first + n < layout.layers
            let b = try device.makeBuffer(bytes: pageCount * bytes, memory: .device, label: split ? "KV cache (layers \(first)-\(first + n - 1))" : "KV cache")
            groups.append(Group(buffer: b, firstLayer: first, layers: n, pageBytes: bytes))
            first += n
        }
        self.groups = groups
    }

    /// Where each layer of a model laid out as `view` lives. The pool's own layout maps layer l
    /// to the buffer that holds it; a draft model (speculative decoding: other layers, other
    /// widths, the same pages) has its layers packed in order into each buffer's part of a page.
    func places(for view: KVLayout) throws -> [Place] {
        precondition(view.typeK == layout.typeK && view.typeV == layout.typeV && view.pageSize == pageSize)
        var out: [Place] = []
        var g = 0, used = 0
        for l in 0..<view.layers {
            let bytes = view.layerBytes(layer: l)
            while g < groups.count && used + bytes > groups[g].pageBytes { g += 1; used = 0 }
            guard g < groups.count else {
                throw VeloError(.invalidArgument, "a model with \(view.layers) layers of \(view.kvDim) K/V values does not fit the KV pages (\(layout.layers) × \(layout.kvDim))")
            }
            out.append(Place(buffer: groups[g].buffer, pageStride: groups[g].pageBytes / 4, layerOff: used / 4))
            used += bytes
        }
        return out
    }

    /// A whole page in `PagePool`'s layout (prefix files): each buffer's part in turn.
    func readPage(_ page: Int32, device: GPUDevice, into dst: UnsafeMutableRawPointer) throws {
        for g in groups {
            try device.download(g.buffer, offset: Int(page) * g.pageBytes, into: dst + layout.offset(layer: g.firstLayer), bytes: g.pageBytes)
        }
    }

    func writePage(_ page: Int32, device: GPUDevice, from src: UnsafeRawPointer) throws {
        for g in groups {
            try device.upload(g.buffer, offset: Int(page) * g.pageBytes, from: src + layout.offset(layer: g.firstLayer), bytes: g.pageBytes)
        }
    }
}
