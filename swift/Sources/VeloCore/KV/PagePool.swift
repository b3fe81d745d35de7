/// Fixed-size KV pages, allocated once from a budget. A page holds `pageSize` token slots of
/// K and V for every layer. Pages are reference-counted so that sequences (and later the
/// prefix cache) can share them; a page returns to the free list when its count drops to 0.
public final class PagePool: @unchecked Sendable {
    public let pageSize: Int
    public let pageCount: Int
    public let layers: Int
    public let kvDim: Int
    /// Floats per (page, layer, K or V) plane.
    let planeFloats: Int
    /// The pages in host memory; nil when they live on a GPU (`gpu`).
    let storage: UnsafeMutablePointer<Float>!
    var gpu: (device: GPUDevice, pages: GPUKVPages)?
    private var refcounts: [Int32]
    private var freeList: [Int32]

    public init(pageCount: Int, pageSize: Int, layers: Int, kvDim: Int, hostStorage: Bool = true) throws {
        guard pageCount > 0, pageSize > 0 else { throw VeloError(.invalidArgument, "the KV pool needs at least one page") }
        self.pageSize = pageSize
        self.pageCount = pageCount
        self.layers = layers
        self.kvDim = kvDim
        planeFloats = pageSize * kvDim
        let total = pageCount * layers * 2 * planeFloats
        if hostStorage {
            storage = .allocate(capacity: total)
            storage.initialize(repeating: 0, count: total)
        } else {
            storage = nil
        }
        refcounts = [Int32](repeating: 0, count: pageCount)
        freeList = (0..<Int32(pageCount)).reversed()
    }

    deinit { storage?.deallocate() }

    public static func bytesPerPage(pageSize: Int, layers: Int, kvDim: Int) -> Int {
        pageSize * layers * 2 * kvDim * MemoryLayout<Float>.size
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
    var pageBytes: Int { layers * 2 * planeFloats * 4 }

    /// Copies a whole page out (prefix files), from host or GPU memory.
    func readPage(_ page: Int32, into dst: UnsafeMutableRawPointer) throws {
        if let gpu {
            try gpu.device.download(gpu.pages.buffer, offset: Int(page) * pageBytes, into: dst, bytes: pageBytes)
        } else {
            dst.copyMemory(from: slot(page, layer: 0, plane: 0, index: 0), byteCount: pageBytes)
        }
    }

    /// Copies a whole page in (prefix files).
    func writePage(_ page: Int32, from src: UnsafeRawPointer) throws {
        if let gpu {
            try gpu.device.upload(gpu.pages.buffer, offset: Int(page) * pageBytes, from: src, bytes: pageBytes)
        } else {
            UnsafeMutableRawPointer(slot(page, layer: 0, plane: 0, index: 0)).copyMemory(from: src, byteCount: pageBytes)
        }
    }

    /// The pool's own layout (the target model's).
    public var view: KVView { try! KVView(pool: self, layers: layers, kvDim: kvDim) }

    /// K (plane 0) or V (plane 1) of one token slot of one layer.
    @inline(__always)
    func slot(_ page: Int32, layer: Int, plane: Int, index: Int) -> UnsafeMutablePointer<Float> {
        storage + ((Int(page) * layers + layer) * 2 + plane) * planeFloats + index * kvDim
    }
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
/// own layout; a smaller draft model (speculative decoding) lays its K/V into the same pages,
/// so both share one pool and one budget.
public struct KVView {
    public let pool: PagePool
    public let layers: Int
    public let kvDim: Int

    init(pool: PagePool, layers: Int, kvDim: Int) throws {
        guard layers * kvDim <= pool.layers * pool.kvDim else {
            throw VeloError(.invalidArgument, "a model with \(layers) layers of \(kvDim) K/V values does not fit the KV pages (\(pool.layers) × \(pool.kvDim))")
        }
        self.pool = pool
        self.layers = layers
        self.kvDim = kvDim
    }

    public var pageSize: Int { pool.pageSize }

    /// K (plane 0) or V (plane 1) of one token slot of one layer.
    @inline(__always)
    func slot(_ page: Int32, layer: Int, plane: Int, index: Int) -> UnsafeMutablePointer<Float> {
        pool.storage + Int(page) * pool.layers * 2 * pool.planeFloats + (layer * 2 + plane) * pageSize * kvDim + index * kvDim
    }
}
