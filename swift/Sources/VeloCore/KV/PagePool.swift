import CKernels
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How K or V values are stored in the KV pages (llama.cpp's `--cache-type-k/-v` names).
/// f32 and f16 keep every value; q8_0 and q4_0 are ggml's 32-value blocks (an f16 scale and
/// 8- or 4-bit values) over each slot's row of K or V.
public enum KVCacheType: String, Sendable, CaseIterable {
    case f32, f16, q8_0, q4_0

    /// The ggml type id (CKernels' CK_TYPE_*).
    var ggml: Int32 {
        switch self {
        case .f32: return 0
        case .f16: return 1
        case .q8_0: return 8
        case .q4_0: return 2
        }
    }

    init?(ggml: Int32) {
        guard let t = Self.allCases.first(where: { $0.ggml == ggml }) else { return nil }
        self = t
    }

    var quantized: Bool { self == .q8_0 || self == .q4_0 }

    /// Bytes of one slot's row of `kvDim` values (quantized rows: whole blocks of 32).
    func rowBytes(_ kvDim: Int) -> Int { Int(ck_kv_row_bytes(Int32(ggml), Int64(kvDim))) }

    /// Bytes of one (page, layer) plane of K or V: `pageSize` rows, padded to 4 bytes.
    func planeBytes(pageSize: Int, kvDim: Int) -> Int { Int(ck_kv_plane_bytes(Int32(ggml), Int64(pageSize), Int64(kvDim))) }

    static func parse(_ s: String, what: String) throws -> KVCacheType {
        guard let t = KVCacheType(rawValue: s.lowercased()) else {
            throw VeloError(.invalidArgument, "\(what) must be one of \(allCases.map(\.rawValue).joined(separator: ", ")) (got '\(s)')")
        }
        return t
    }
}

/// Where K and V of one layer sit inside a page, and of what types (the pool's layout, or a
/// draft model's inside the same pages): layer l's K plane at `offset(layer: l)`, its V plane
/// `kPlaneBytes(layer: l)` after it. Layers are `kvDim` values a row, or each its own width
/// (`layerDims`: Gemma 4's sliding layers keep half its global layers' K/V).
public struct KVLayout: Sendable, Equatable {
    public let pageSize: Int
    public let layers: Int
    /// The widest layer's K/V values a row.
    public let kvDim: Int
    public let typeK: KVCacheType
    public let typeV: KVCacheType
    /// Each layer's K/V values a row where layers differ (empty: `kvDim` for all).
    public let layerDims: [Int]
    /// Each layer's start in a page, and the page's end.
    private let offsets: [Int]

    public init(pageSize: Int, layers: Int, kvDim: Int, typeK: KVCacheType = .f32, typeV: KVCacheType = .f32, layerDims: [Int] = []) {
        precondition(layerDims.isEmpty || (layerDims.count == layers && layerDims.max() == kvDim), "layer widths \(layerDims) for \(layers) layers of at most \(kvDim)")
        self.pageSize = pageSize
        self.layers = layers
        self.kvDim = kvDim
        self.typeK = typeK
        self.typeV = typeV
        self.layerDims = layerDims
        var at = 0, offsets = [0]
        for l in 0..<layers {
            let d = layerDims.isEmpty ? kvDim : layerDims[l]
            at += typeK.planeBytes(pageSize: pageSize, kvDim: d) + typeV.planeBytes(pageSize: pageSize, kvDim: d)
            offsets.append(at)
        }
        self.offsets = offsets
    }

    /// The widest layer's planes (every layer's, unless `layerDims`).
    public var kPlaneBytes: Int { typeK.planeBytes(pageSize: pageSize, kvDim: kvDim) }
    public var vPlaneBytes: Int { typeV.planeBytes(pageSize: pageSize, kvDim: kvDim) }
    /// Bytes of one layer's K and V in a page (a multiple of 4), for the widest layer.
    public var layerBytes: Int { kPlaneBytes + vPlaneBytes }
    /// Bytes of one page: every layer's K and V.
    public var pageBytes: Int { offsets[layers] }
    /// Where layer `l`'s K plane starts in a page, and its bytes (the V plane follows it).
    @inline(__always) func offset(layer l: Int) -> Int { offsets[l] }
    @inline(__always) func kPlaneBytes(layer l: Int) -> Int {
        layerDims.isEmpty ? kPlaneBytes : typeK.planeBytes(pageSize: pageSize, kvDim: layerDims[l])
    }
    /// Bytes of layer `l`'s K and V in a page, and the K/V values a row it holds.
    func layerBytes(layer l: Int) -> Int { offsets[l + 1] - offsets[l] }
    func kvDim(layer l: Int) -> Int { layerDims.isEmpty ? kvDim : layerDims[l] }
    /// Bytes one token position costs (every layer's K and V, the page's share).
    public var bytesPerToken: Double { Double(pageBytes) / Double(pageSize) }
    /// "f16" when K and V share a type, else "q8_0/f16" (K/V).
    public var typeLabel: String { typeK == typeV ? typeK.rawValue : "\(typeK.rawValue)/\(typeV.rawValue)" }
}

/// Fixed-size KV pages, allocated once from a budget. A page holds `pageSize` token slots of
/// K and V for every layer, in the types of `layout`. Pages are reference-counted so that
/// sequences (and later the prefix cache) can share them; a page returns to the free list when
/// its count drops to 0.
public final class PagePool: @unchecked Sendable {
    public let pageSize: Int
    public let pageCount: Int
    public let layers: Int
    public let kvDim: Int
    public let layout: KVLayout
    public var typeK: KVCacheType { layout.typeK }
    public var typeV: KVCacheType { layout.typeV }
    /// The pages in host memory; nil when they live on a GPU (`gpu`). Zero pages from the OS,
    /// touched (backed) only as they are written.
    let storage: UnsafeMutableRawPointer!
    var gpu: (device: GPUDevice, pages: GPUKVPages)?
    private var refcounts: [Int32]
    private var freeList: [Int32]

    public init(pageCount: Int, pageSize: Int, layers: Int, kvDim: Int, typeK: KVCacheType = .f32, typeV: KVCacheType = .f32,
                layerDims: [Int] = [], hostStorage: Bool = true) throws {
        guard pageCount > 0, pageSize > 0 else { throw VeloError(.invalidArgument, "the KV pool needs at least one page") }
        self.pageSize = pageSize
        self.pageCount = pageCount
        self.layers = layers
        self.kvDim = kvDim
        layout = KVLayout(pageSize: pageSize, layers: layers, kvDim: kvDim, typeK: typeK, typeV: typeV, layerDims: layerDims)
        if hostStorage {
            let total = pageCount * layout.pageBytes
            // calloc: large blocks come zeroed from the OS and are backed only when written
            guard let p = calloc(max(total, 1), 1) else {
                throw VeloError(.outOfMemory, "cannot allocate the KV cache (\(total >> 20) MiB)")
            }
            storage = p
        } else {
            storage = nil
        }
        refcounts = [Int32](repeating: 0, count: pageCount)
        freeList = (0..<Int32(pageCount)).reversed()
    }

    deinit { free(storage) }

    /// Bytes of one page of a model's K and V in these types.
    public static func bytesPerPage(pageSize: Int, layers: Int, kvDim: Int, typeK: KVCacheType = .f32, typeV: KVCacheType = .f32,
                                    layerDims: [Int] = []) -> Int {
        KVLayout(pageSize: pageSize, layers: layers, kvDim: kvDim, typeK: typeK, typeV: typeV, layerDims: layerDims).pageBytes
    }

    public var freePages: Int { freeList.count }
    public var usedPages: Int { pageCount - freeList.count }

    public func allocate() -> Int32? {
        guard let p = freeList.popLast() else { return nil }
        refcounts[Int(p)] = 1
        return p
    }

    public func retain(_ page: Int32) {
        precondition(refcounts[Int(page)] > 0, "retain of a free page")
        refcounts[Int(page)] += 1
    }

    public func release(_ page: Int32) {
        precondition(refcounts[Int(page)] > 0, "release of a free page")
        refcounts[Int(page)] -= 1
        if refcounts[Int(page)] == 0 { freeList.append(page) }
    }

    public func refcount(_ page: Int32) -> Int32 { refcounts[Int(page)] }

    /// Bytes of one page (every layer's K and V).
    var pageBytes: Int { layout.pageBytes }

    /// Copies a whole page out (prefix files), from host or GPU memory, in the layout above
    /// (layer by layer, K plane then V plane).
    func readPage(_ page: Int32, into dst: UnsafeMutableRawPointer) throws {
        if let gpu {
            try gpu.pages.readPage(page, device: gpu.device, into: dst)
        } else {
            dst.copyMemory(from: storage + Int(page) * pageBytes, byteCount: pageBytes)
        }
    }

    /// Copies a whole page in (prefix files).
    func writePage(_ page: Int32, from src: UnsafeRawPointer) throws {
        if let gpu {
            try gpu.pages.writePage(page, device: gpu.device, from: src)
        } else {
            (storage + Int(page) * pageBytes).copyMemory(from: src, byteCount: pageBytes)
        }
    }

    /// The pool's own layout (the target model's).
    public var view: KVView { try! KVView(pool: self, layers: layers, kvDim: kvDim, layerDims: layout.layerDims) }
}

/// The pages of one sequence, in position order, and how many positions are filled.
public struct BlockTable: Sendable {
    public var pages: [Int32] = []
    public var length = 0

    public init() {}

    /// Makes room for `count` more positions; false (nothing changed) if the pool runs dry.
    public mutating func reserve(_ count: Int, in pool: PagePool) -> Bool {
        let needed = (length + count + pool.pageSize - 1) / pool.pageSize - pages.count
        guard needed > 0 else { return true }
        guard pool.freePages >= needed else { return false }
        for _ in 0..<needed { pages.append(pool.allocate()!) }
        return true
    }

    public mutating func releaseAll(to pool: PagePool) {
        for p in pages { pool.release(p) }
        pages.removeAll()
        length = 0
    }

    /// Keeps the first `n` positions (drops pages past them).
    public mutating func truncate(to n: Int, in pool: PagePool) {
        let keep = (n + pool.pageSize - 1) / pool.pageSize
        while pages.count > keep { pool.release(pages.removeLast()) }
        length = min(length, n)
    }
}

/// How one model lays out its K/V inside the pool's pages. The target model uses the pool's
/// own layout; a smaller draft model (speculative decoding) lays its K/V into the same pages
/// (in the pool's types), so both share one pool and one budget.
public struct KVView {
    public let pool: PagePool
    public let layers: Int
    public let kvDim: Int
    public let layout: KVLayout

    init(pool: PagePool, layers: Int, kvDim: Int, layerDims: [Int] = []) throws {
        let l = KVLayout(pageSize: pool.pageSize, layers: layers, kvDim: kvDim, typeK: pool.typeK, typeV: pool.typeV, layerDims: layerDims)
        guard l.pageBytes <= pool.pageBytes else {
            throw VeloError(.invalidArgument, "a model with \(layers) layers of \(kvDim) K/V values does not fit the KV pages (\(pool.layers) × \(pool.kvDim))")
        }
        self.pool = pool
        self.layers = layers
        self.kvDim = kvDim
        layout = l
    }

    public var pageSize: Int { pool.pageSize }
    public var typeK: KVCacheType { layout.typeK }
    public var typeV: KVCacheType { layout.typeV }

    /// K (plane 0) or V (plane 1) of one layer of a page (host memory).
    @inline(__always)
    func plane(_ page: Int32, layer: Int, plane: Int) -> UnsafeMutableRawPointer {
        pool.storage + Int(page) * pool.pageBytes + layout.offset(layer: layer) + plane * layout.kPlaneBytes(layer: layer)
    }
}
