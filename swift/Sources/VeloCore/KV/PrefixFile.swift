#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Saving a cached prefix's KV pages to a file and loading them back. The file is tagged with
/// a fingerprint of the model file, so a prefix is never loaded into another model.
///
/// Layout (little-endian): "VELOKV02", u64 model tag, u32 page size, u32 layers, u32 KV dim,
/// u32 K type, u32 V type (ggml type ids: 0 f32, 1 f16, 8 q8_0, 2 q4_0), u32 pages,
/// i32 tokens[pages × page size], then every page's bytes as the pool stores them (layer by
/// layer, K plane then V plane; `KVLayout`). Files of the first format ("VELOKV01": no types,
/// f32 pages) still load into an engine whose KV cache is f32.
enum PrefixFile {
    static let magic = Array("VELOKV02".utf8)
    static let magicV1 = Array("VELOKV01".utf8)

    /// FNV-1a over the file size, the whole GGUF header (metadata and tensor table) and 256
    /// evenly spaced 4 KiB samples of the tensor data: cheap even for multi-GB files, and any
    /// change of architecture, tokenizer, shapes or a re-quantization changes it.
    static func modelTag(_ gguf: GGUFFile) throws -> UInt64 {
        var h: UInt64 = 0xCBF2_9CE4_8422_2325
        func mix(_ p: UnsafeRawPointer, _ n: Int) {
            let b = p.assumingMemoryBound(to: UInt8.self)
            for i in 0..<n { h = (h ^ UInt64(b[i])) &* 0x100_0000_01B3 }
        }
        var size = UInt64(gguf.file.size)
        withUnsafeBytes(of: &size) { mix($0.baseAddress!, 8) }
        guard let base = gguf.file.base else { throw VeloError(.invalidFile, "empty model file") }
        mix(base, min(gguf.dataOffset, gguf.file.size))
        let data = gguf.file.size - gguf.dataOffset
        if data > 0 {
            let chunk = min(4096, data)
            for i in 0..<256 {
                let at = gguf.dataOffset + (data - chunk) / 255 * i
                mix(base + at, chunk)
            }
        }
        return h
    }

    static func save(_ tokens: [Int32], scheduler: Scheduler, modelTag: UInt64, path: String) throws -> Int {
        guard let cache = scheduler.cache else { throw VeloError(.invalidArgument, "the prefix cache is turned off") }
        try refuseRecurrent(cache)
        let pool = scheduler.kv
        let nodes = cache.path(for: tokens)
        guard !nodes.isEmpty else {
            throw VeloError(.invalidArgument, "no page of that prefix is cached (prefixes shorter than \(pool.pageSize) tokens cannot be saved)")
        }
        var out: [UInt8] = magic
        func put<T: FixedWidthInteger>(_ v: T) { withUnsafeBytes(of: v.littleEndian) { out += $0 } }
        put(modelTag)
        put(UInt32(pool.pageSize)); put(UInt32(pool.layers)); put(UInt32(pool.kvDim))
        put(UInt32(pool.typeK.ggml)); put(UInt32(pool.typeV.ggml)); put(UInt32(nodes.count))
        for n in nodes { for t in n.tokens { put(t) } }
        var page = [UInt8](repeating: 0, count: pool.pageBytes)
        for n in nodes {
            try page.withUnsafeMutableBytes { try pool.readPage(n.page, into: $0.baseAddress!) }
            out += page
        }
        try writeFile(path, out)
        return nodes.count * pool.pageSize
    }

    /// A prefix file holds K/V pages only: without the state after them, a model with a
    /// recurrent state could not resume there.
    private static func refuseRecurrent(_ cache: RadixCache) throws {
        guard cache.stateCapacity == 0 else {
            throw VeloError(.unsupported, "prefix files do not hold a recurrent state yet, which this model (Gated DeltaNet layers) needs to resume a prefix")
        }
    }

    static func load(_ path: String, scheduler: Scheduler, modelTag: UInt64) throws -> Int {
        guard let cache = scheduler.cache else { throw VeloError(.invalidArgument, "the prefix cache is turned off") }
        try refuseRecurrent(cache)
        let pool = scheduler.kv
        let file = try MappedFile(path: path)
        guard let base = file.base, file.size >= 32 else { throw VeloError(.invalidFile, "\(path): not a Velo prefix file (too short)") }
        var at = 0
        func get<T: FixedWidthInteger>(_: T.Type) throws -> T {
            guard at + MemoryLayout<T>.size <= file.size else { throw VeloError(.invalidFile, "\(path): truncated at byte \(at)") }
            defer { at += MemoryLayout<T>.size }
            return T(littleEndian: base.loadUnaligned(fromByteOffset: at, as: T.self))
        }
        let head = Array(UnsafeRawBufferPointer(start: base, count: 8))
        guard head == magic || head == magicV1 else {
            throw VeloError(.invalidFile, "\(path): not a Velo prefix file (bad magic)")
        }
        at = 8
        guard try get(UInt64.self) == modelTag else {
            throw VeloError(.invalidArgument, "\(path) was saved from a different model file; it cannot be loaded into this one")
        }
        let ps = Int(try get(UInt32.self)), layers = Int(try get(UInt32.self)), kvDim = Int(try get(UInt32.self))
        var typeK = KVCacheType.f32, typeV = KVCacheType.f32
        if head == magic {
            let k = try get(UInt32.self), v = try get(UInt32.self)
            guard let tk = KVCacheType(ggml: Int32(truncatingIfNeeded: k)), let tv = KVCacheType(ggml: Int32(truncatingIfNeeded: v)) else {
                throw VeloError(.invalidFile, "\(path): unknown KV cache types \(k)/\(v)")
            }
            (typeK, typeV) = (tk, tv)
        }
        let count = Int(try get(UInt32.self))
        let headerBytes = at
        guard typeK == pool.typeK && typeV == pool.typeV else {
            throw VeloError(.invalidArgument, "\(path) holds a KV cache of K \(typeK.rawValue) / V \(typeV.rawValue); this engine's is K \(pool.typeK.rawValue) / V \(pool.typeV.rawValue): start it with --cache-type-k \(typeK.rawValue) --cache-type-v \(typeV.rawValue) to load it")
        }
        guard ps == pool.pageSize, layers == pool.layers, kvDim == pool.kvDim else {
            throw VeloError(.invalidArgument, "\(path): page layout \(ps)/\(layers)/\(kvDim) differs from this engine's \(pool.pageSize)/\(pool.layers)/\(pool.kvDim)")
        }
        let pageBytes = pool.pageBytes
        guard count > 0, file.size == headerBytes + count * ps * 4 + count * pageBytes else {
            throw VeloError(.invalidFile, "\(path): size \(file.size) does not match \(count) pages")
        }
        var tokens: [Int32] = []
        for _ in 0..<(count * ps) { tokens.append(try get(Int32.self)) }
        var table = BlockTable()
        while !table.reserve(count * ps, in: pool) {
            guard cache.evict(count) > 0 else { throw VeloError(.outOfMemory, "the KV pool has no room for \(count) pages") }
        }
        for (i, page) in table.pages.enumerated() {
            let src = base + headerBytes + count * ps * 4 + i * pageBytes
            try pool.writePage(page, from: src)
        }
        cache.insert(tokens, pages: table.pages)
        table.releaseAll(to: pool) // the tree keeps what it indexed
        return tokens.count
    }

    static func writeFile(_ path: String, _ bytes: [UInt8]) throws {
        let tmp = path + ".tmp"
        guard let f = fopen(tmp, "wb") else { throw VeloError(.io, "cannot write \(tmp): \(String(cString: strerror(errno)))") }
        let n = bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, f) }
        let closed = fclose(f)
        guard n == bytes.count, closed == 0, rename(tmp, path) == 0 else {
            unlink(tmp)
            throw VeloError(.io, "cannot write \(path)")
        }
    }
}
