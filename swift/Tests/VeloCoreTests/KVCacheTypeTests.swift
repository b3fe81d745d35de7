import CKernels
import Foundation
import XCTest
@testable import VeloCore

/// KV cache types (f32, f16, q8_0, q4_0 for K and V separately): the CPU store and typed
/// attention against float64 references, and every GPU K/V kernel variant (kv_store,
/// rope_store, split-K attention + combine, tiled attention) against the CPU on the same pages.
final class KVCacheTypeTests: XCTestCase {
    struct RNG {
        var s: UInt64
        mutating func next() -> Float {
            s = s &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Float(Int64(bitPattern: s >> 11) % 2000) / 1000 - 1
        }
        mutating func row(_ n: Int, scale: Float = 1) -> [Float] { (0..<n).map { _ in next() * scale } }
    }

    static let pairs: [(KVCacheType, KVCacheType)] = KVCacheType.allCases.flatMap { k in KVCacheType.allCases.map { (k, $0) } }

    /// What a row becomes once stored in `type`: f16 rounding, or ggml's blocks over the row
    /// padded with zeros to whole blocks.
    func roundTrip(_ x: [Float], _ type: KVCacheType) -> [Float] {
        switch type {
        case .f32: return x
        case .f16:
            var h = [UInt16](repeating: 0, count: x.count), y = [Float](repeating: 0, count: x.count)
            ck_f32_to_f16(x, &h, Int64(x.count))
            ck_f16_to_f32(h, &y, Int64(x.count))
            return y
        case .q8_0, .q4_0:
            let n = (x.count + 31) / 32 * 32
            let padded = x + [Float](repeating: 0, count: n - x.count)
            var blocks = [UInt8](repeating: 0, count: Int(ck_row_size(type.ggml, Int64(n))))
            var y = [Float](repeating: 0, count: n)
            ck_quantize_row(type.ggml, padded, &blocks, Int64(n))
            ck_dequantize_row(type.ggml, blocks, &y, Int64(n))
            return Array(y[..<x.count])
        }
    }

    func testLayoutSizes() {
        // bytes per (page, layer) plane: 16 slots of a 1024-wide row (an 8B's K or V)
        XCTAssertEqual(KVCacheType.f32.planeBytes(pageSize: 16, kvDim: 1024), 65536)
        XCTAssertEqual(KVCacheType.f16.planeBytes(pageSize: 16, kvDim: 1024), 32768)
        XCTAssertEqual(KVCacheType.q8_0.planeBytes(pageSize: 16, kvDim: 1024), 16 * 32 * 34)
        XCTAssertEqual(KVCacheType.q4_0.planeBytes(pageSize: 16, kvDim: 1024), 16 * 32 * 18)
        // rows of a width that is no multiple of 32 take whole blocks; planes whole words
        XCTAssertEqual(KVCacheType.q8_0.rowBytes(40), 68)
        XCTAssertEqual(KVCacheType.q4_0.planeBytes(pageSize: 3, kvDim: 8), 56) // 3 × 18 = 54 → 56
        XCTAssertEqual(KVCacheType.f16.planeBytes(pageSize: 3, kvDim: 5), 32)  // 30 → 32
        let l = KVLayout(pageSize: 16, layers: 32, kvDim: 1024, typeK: .q8_0, typeV: .f16)
        XCTAssertEqual(l.pageBytes, 32 * (16 * 32 * 34 + 32768))
        XCTAssertEqual(l.typeLabel, "q8_0/f16")
        XCTAssertEqual(KVLayout(pageSize: 16, layers: 32, kvDim: 1024, typeK: .f16, typeV: .f16).bytesPerToken, 131072)
    }

    /// Stored rows read back as the type rounds them, every slot of odd page sizes and widths.
    func testStoreLoadRoundTrip() {
        var rng = RNG(s: 7)
        for type in KVCacheType.allCases {
            for (ps, kvDim) in [(16, 32), (5, 40), (16, 128), (3, 8), (7, 100)] {
                for key in [1, 0] {
                    var plane = [UInt8](repeating: 0xAB, count: type.planeBytes(pageSize: ps, kvDim: kvDim))
                    let rows = (0..<ps).map { _ in rng.row(kvDim, scale: 3) }
                    for (s, r) in rows.enumerated() { ck_kv_store(type.ggml, Int32(key), &plane, Int64(ps), Int64(kvDim), Int64(s), r) }
                    for (s, r) in rows.enumerated() {
                        var y = [Float](repeating: .nan, count: kvDim)
                        ck_kv_load(type.ggml, Int32(key), plane, Int64(ps), Int64(kvDim), Int64(s), &y)
                        XCTAssertEqual(y, roundTrip(r, type), "\(type) ps \(ps) kvDim \(kvDim) key \(key) slot \(s)")
                    }
                }
            }
        }
    }

    /// ck_attention_kv for every (K type, V type) at every ISA level against softmax(QK^T)V in
    /// float64 over the stored (rounded) keys and values; sliding-window starts and softcaps.
    func testCPUAttentionAllTypes() {
        // sink: each query head's softmax also takes a logit with no value (gpt-oss)
        let shapes: [(ps: Int, hd: Int, kvHeads: Int, group: Int, n: Int, softcap: Float, start: Int, sink: Bool)] = [
            (16, 8, 4, 2, 37, 0, 0, false), (16, 64, 2, 4, 300, 0, 0, false), (16, 128, 1, 4, 70, 30, 20, false), (5, 40, 2, 3, 23, 0, 7, false),
            (8, 16, 2, 1, 50, 0, 0, false),
            // GQA groups of 7 (Qwen2.5-7B), past 8 (two passes of the grouped AVX-512 kernel) and
            // head sizes that end in half a 32-wide V block
            (16, 128, 2, 7, 45, 0, 0, false), (16, 32, 1, 9, 33, 0, 5, false), (16, 48, 2, 5, 40, 0, 0, false),
            // sinks: gpt-oss's heads (64, groups of 8), with a window, and a short row where the sink dominates
            (16, 64, 2, 8, 40, 0, 0, true), (16, 64, 1, 8, 200, 0, 72, true), (5, 40, 2, 3, 3, 0, 0, true),
        ]
        for (tk, tv) in Self.pairs {
            for sh in shapes {
                var rng = RNG(s: UInt64(sh.hd * 31 + sh.n))
                let kvDim = sh.kvHeads * sh.hd, pages = (sh.n + sh.ps - 1) / sh.ps
                let kpb = tk.planeBytes(pageSize: sh.ps, kvDim: kvDim), vpb = tv.planeBytes(pageSize: sh.ps, kvDim: kvDim)
                let kmem = UnsafeMutableRawPointer.allocate(byteCount: kpb * pages, alignment: 64)
                let vmem = UnsafeMutableRawPointer.allocate(byteCount: vpb * pages, alignment: 64)
                defer { kmem.deallocate(); vmem.deallocate() }
                var keys: [[Float]] = [], values: [[Float]] = []
                for j in 0..<sh.n {
                    let k = rng.row(kvDim), v = rng.row(kvDim)
                    ck_kv_store(tk.ggml, 1, kmem + (j / sh.ps) * kpb, Int64(sh.ps), Int64(kvDim), Int64(j % sh.ps), k)
                    ck_kv_store(tv.ggml, 0, vmem + (j / sh.ps) * vpb, Int64(sh.ps), Int64(kvDim), Int64(j % sh.ps), v)
                    keys.append(roundTrip(k, tk))
                    values.append(roundTrip(v, tv))
                }
                let kp: [UnsafeRawPointer?] = (0..<pages).map { UnsafeRawPointer(kmem + $0 * kpb) }
                let vp: [UnsafeRawPointer?] = (0..<pages).map { UnsafeRawPointer(vmem + $0 * vpb) }
                let scale = 1 / Float(sh.hd).squareRoot()
                for kvh in 0..<sh.kvHeads {
                    let q = rng.row(sh.group * sh.hd)
                    let sinks: [Float]? = sh.sink ? rng.row(sh.group).map { $0 * 3 } : nil
                    var want = [Double](repeating: 0, count: sh.group * sh.hd)
                    for g in 0..<sh.group {
                        let s = (sh.start..<sh.n).map { j -> Double in
                            let x = (0..<sh.hd).reduce(0.0) { $0 + Double(q[g * sh.hd + $1]) * Double(keys[j][kvh * sh.hd + $1]) } * Double(scale)
                            return sh.softcap > 0 ? Double(sh.softcap) * tanh(x / Double(sh.softcap)) : x
                        }
                        let sink = sinks.map { Double($0[g]) }
                        let m = max(s.max()!, sink ?? -.infinity), e = s.map { exp($0 - m) }, z = e.reduce(0, +) + (sink.map { exp($0 - m) } ?? 0)
                        for d in 0..<sh.hd {
                            want[g * sh.hd + d] = (sh.start..<sh.n).reduce(0.0) { $0 + e[$1 - sh.start] / z * Double(values[$1][kvh * sh.hd + d]) }
                        }
                    }
                    for level in Int32(CK_ISA_SCALAR)...Int32(CK_ISA_BEST) {
                        ck_set_isa_limit(level)
                        var out = [Float](repeating: .nan, count: sh.group * sh.hd)
                        var scores = [Float](repeating: .nan, count: sh.group * sh.n)
                        let run = { (sp: UnsafePointer<Float>?) in
                            ck_attention_kv(q, Int64(sh.group), Int64(sh.hd), tk.ggml, kp, tv.ggml, vp, Int64(sh.ps), Int64(kvDim), Int64(kvh * sh.hd),
                                            Int64(sh.n), scale, sh.softcap, sp, Int64(sh.start), &out, &scores)
                        }
                        if let sinks { sinks.withUnsafeBufferPointer { run($0.baseAddress) } } else { run(nil) }
                        let err = zip(out, want).map { abs(Double($0) - $1) / (abs($1) + 1e-2) }.max()!
                        XCTAssertLessThan(err, 1e-4, "K \(tk) V \(tv) \(sh) kv head \(kvh) isa \(level)")
                    }
                    ck_set_isa_limit(Int32(CK_ISA_BEST))
                }
            }
        }
    }

    // MARK: GPU

    func device() throws -> GPUDevice { try TestGPU.device() }
    func upload(_ bytes: UnsafeRawBufferPointer) throws -> GPUBuffer {
        let d = try device()
        let b = try d.makeBuffer(bytes: max(bytes.count, 16), memory: .device, label: "test")
        if bytes.count > 0 { try d.upload(b, offset: 0, from: bytes.baseAddress!, bytes: bytes.count) }
        return b
    }
    func upload<T>(_ a: [T]) throws -> GPUBuffer { try a.withUnsafeBytes { try upload($0) } }
    func read<T: Numeric>(_ b: GPUBuffer, _ count: Int, as: T.Type) throws -> [T] {
        var out = [T](repeating: 0, count: count)
        try out.withUnsafeMutableBytes { try device().download(b, offset: 0, into: $0.baseAddress!, bytes: $0.count) }
        return out
    }
    func run(_ k: GPUKernels.Kernel, _ buffers: [GPUBinding], _ params: [UInt32], _ groups: (Int, Int, Int)) throws {
        let d = try device()
        let p = try d.pipeline(k.name, buffers: k.buffers, constants: k.constants)
        try d.begin()
        d.dispatch(p, buffers, params: params, groups: groups, op: .other)
        try d.commit(profiler: nil)
    }

    /// A two-layer pool's bytes on the host (layer 1 is the one under test), sequences' pages
    /// shuffled, and the values each position holds once stored.
    struct Pages {
        let layout: KVLayout
        var bytes: [UInt8]
        let pageLists: [[Int32]]
        var keys: [[[Float]]]   // [seq][pos] rounded as stored
        var values: [[[Float]]]
        var layerOffBytes: Int { layout.layerBytes }
        var pageStrideWords: Int { layout.pageBytes / 4 }
        var pagetab: [Int32] { pageLists.flatMap { $0 } }
        func planeOffset(_ page: Int32, v: Bool) -> Int { Int(page) * layout.pageBytes + layerOffBytes + (v ? layout.kPlaneBytes : 0) }
    }

    func makePages(_ tk: KVCacheType, _ tv: KVCacheType, ps: Int, kvDim: Int, lengths: [Int], rng: inout RNG) -> Pages {
        let layout = KVLayout(pageSize: ps, layers: 2, kvDim: kvDim, typeK: tk, typeV: tv)
        let counts = lengths.map { ($0 + ps - 1) / ps }
        let total = counts.reduce(0, +) + 2
        var perm = Array(0..<total)
        for i in stride(from: total - 1, to: 0, by: -1) { perm.swapAt(i, Int(rng.next() * 1000 + 1000) % (i + 1)) }
        var lists: [[Int32]] = [], next = 0
        for c in counts { lists.append(perm[next..<(next + c)].map { Int32($0) }); next += c }
        var p = Pages(layout: layout, bytes: [UInt8](repeating: 0, count: total * layout.pageBytes), pageLists: lists,
                      keys: lengths.map { [[Float]](repeating: [], count: $0) }, values: lengths.map { [[Float]](repeating: [], count: $0) })
        for (s, len) in lengths.enumerated() {
            for j in 0..<len {
                let k = rng.row(kvDim), v = rng.row(kvDim)
                let page = lists[s][j / ps]
                let ko = p.planeOffset(page, v: false), vo = p.planeOffset(page, v: true)
                p.bytes.withUnsafeMutableBytes { b in
                    ck_kv_store(tk.ggml, 1, b.baseAddress! + ko, Int64(ps), Int64(kvDim), Int64(j % ps), k)
                    ck_kv_store(tv.ggml, 0, b.baseAddress! + vo, Int64(ps), Int64(kvDim), Int64(j % ps), v)
                }
                p.keys[s][j] = roundTrip(k, tk)
                p.values[s][j] = roundTrip(v, tv)
            }
        }
        return p
    }

    func load(_ p: Pages, seq: Int, page: Int, v: Bool, slot: Int, kvDim: Int, from bytes: [UInt8]) -> [Float] {
        var y = [Float](repeating: 0, count: kvDim)
        let type = v ? p.layout.typeV : p.layout.typeK
        bytes.withUnsafeBytes { b in
            ck_kv_load(type.ggml, v ? 0 : 1, b.baseAddress! + p.planeOffset(p.pageLists[seq][page], v: v), Int64(p.layout.pageSize), Int64(kvDim), Int64(slot), &y)
        }
        return y
    }

    /// Values a GPU stored, read back on the CPU, against what the CPU stores for the same
    /// floats: f32 and f16 exactly; quantized blocks within one step (the device's division may
    /// round a value the other way) with scales within an f16 ulp.
    func assertStored(_ got: [Float], _ x: [Float], _ type: KVCacheType, _ what: String) {
        let want = roundTrip(x, type)
        switch type {
        case .f32, .f16:
            XCTAssertEqual(got, want, what)
        case .q8_0, .q4_0:
            for b in stride(from: 0, to: x.count, by: 32) {
                let blk = b..<min(b + 32, x.count)
                let amax = blk.map { abs(x[$0]) }.max()!
                let step = Double(amax) / (type == .q8_0 ? 127 : 8) * 1.002
                let bad = blk.filter { abs(Double(got[$0]) - Double(want[$0])) > step + 1e-6 }
                XCTAssert(bad.isEmpty, "\(what): block at \(b): \(bad.prefix(3).map { (got[$0], want[$0]) })")
            }
        }
    }

    /// kv_store and rope_store variants write what the CPU's ck_kv_store writes, into the layer
    /// and slots the page table names, leaving every other byte alone.
    func testGPUStores() throws {
        _ = try device()
        var rng = RNG(s: 99)
        for (tk, tv) in Self.pairs {
            for (ps, heads, kvHeads, hd) in [(16, 4, 2, 16), (5, 3, 1, 40), (16, 8, 4, 8)] {
                let kvDim = kvHeads * hd
                let lengths = [19, 7]
                let pages = makePages(tk, tv, ps: ps, kvDim: kvDim, lengths: lengths, rng: &rng)
                // the last 3 and 2 positions come through the kernel
                var tokpos: [Int32] = [], tokpt: [Int32] = [], seqOf: [Int] = []
                for (s, len) in lengths.enumerated() {
                    for j in (len - (s == 0 ? 3 : 2))..<len {
                        tokpos.append(Int32(j)); tokpt.append(s == 0 ? 0 : Int32(pages.pageLists[0].count)); seqOf.append(s)
                    }
                }
                let n = tokpos.count
                let kIn = rng.row(n * kvDim), vIn = rng.row(n * kvDim)
                let before = pages.bytes
                let posB = try upload(tokpos), ptB = try upload(tokpt), tabB = try upload(pages.pagetab)
                let what = "K \(tk) V \(tv) ps \(ps) kvDim \(kvDim)"
                // kv_store
                let kvB = try upload(pages.bytes)
                try run(GPUKernels.kvVariant(GPUKernels.kvStore, k: tk, v: tv),
                        [GPUBinding(try upload(kIn)), GPUBinding(try upload(vIn)), GPUBinding(kvB), GPUBinding(posB), GPUBinding(ptB), GPUBinding(tabB)],
                        [UInt32(n), UInt32(kvDim), UInt32(ps), UInt32(pages.pageStrideWords), UInt32(pages.layerOffBytes / 4), UInt32(kvDim)],
                        (n, (kvDim + 63) / 64, 1))
                let after: [UInt8] = try read(kvB, pages.bytes.count, as: UInt8.self)
                var touched = Set<Int>()
                for t in 0..<n {
                    let s = seqOf[t], j = Int(tokpos[t])
                    let k = load(pages, seq: s, page: j / ps, v: false, slot: j % ps, kvDim: kvDim, from: after)
                    let v = load(pages, seq: s, page: j / ps, v: true, slot: j % ps, kvDim: kvDim, from: after)
                    assertStored(k, Array(kIn[t * kvDim..<(t + 1) * kvDim]), tk, "kv_store K " + what)
                    assertStored(v, Array(vIn[t * kvDim..<(t + 1) * kvDim]), tv, "kv_store V " + what)
                    touched.insert(s * 1000 + j)
                }
                // every position not written keeps its values
                for (s, len) in lengths.enumerated() {
                    for j in 0..<len where !touched.contains(s * 1000 + j) {
                        XCTAssertEqual(load(pages, seq: s, page: j / ps, v: false, slot: j % ps, kvDim: kvDim, from: after),
                                       load(pages, seq: s, page: j / ps, v: false, slot: j % ps, kvDim: kvDim, from: before), "kv_store kept K " + what)
                        XCTAssertEqual(load(pages, seq: s, page: j / ps, v: true, slot: j % ps, kvDim: kvDim, from: after),
                                       load(pages, seq: s, page: j / ps, v: true, slot: j % ps, kvDim: kvDim, from: before), "kv_store kept V " + what)
                    }
                }
                // layer 0 untouched
                for page in 0..<(pages.bytes.count / pages.layout.pageBytes) {
                    let r = page * pages.layout.pageBytes..<(page * pages.layout.pageBytes + pages.layerOffBytes)
                    XCTAssertEqual(Array(after[r]), Array(before[r]), "kv_store wrote outside its layer: " + what)
                }
                // rope_store: the typed variant stores what the f32 one computes (rotated K, V)
                let ropeDim = hd / 2 // partial rotary: dimensions past it are copied
                var freqs: [Float] = (0..<(ropeDim / 2)).map { Float(pow(10000.0, -2.0 * Double($0) / Double(ropeDim))) }
                freqs = freqs.map { $0 * 1.5 }
                let qStride = heads * hd + 2 * kvDim
                var qkv = [Float](repeating: 0, count: n * qStride)
                for t in 0..<n {
                    for i in 0..<(heads * hd) { qkv[t * qStride + i] = rng.next() }
                    for i in 0..<kvDim { qkv[t * qStride + heads * hd + i] = kIn[t * kvDim + i]; qkv[t * qStride + heads * hd + kvDim + i] = vIn[t * kvDim + i] }
                }
                let freqB = try upload(freqs)
                for neox: UInt32 in [0, 1] {
                    let f32Layout = KVLayout(pageSize: ps, layers: 2, kvDim: kvDim)
                    func ropeStore(_ k: KVCacheType, _ v: KVCacheType, _ p: Pages) throws -> [UInt8] {
                        let qkvB = try upload(qkv), kvB = try upload(p.bytes)
                        try run(GPUKernels.kvVariant(GPUKernels.ropeStore, k: k, v: v),
                                [GPUBinding(qkvB), GPUBinding(qkvB, offset: heads * hd * 4), GPUBinding(qkvB, offset: (heads * hd + kvDim) * 4), GPUBinding(kvB),
                                 GPUBinding(posB), GPUBinding(ptB), GPUBinding(try upload(p.pagetab)), GPUBinding(freqB)],
                                [UInt32(n), UInt32(heads), UInt32(kvHeads), UInt32(hd), UInt32(ropeDim), neox, Float(1).bitPattern, UInt32(kvDim), UInt32(ps),
                                 UInt32(p.pageStrideWords), UInt32(p.layerOffBytes / 4), UInt32(qStride), UInt32(qStride)],
                                (n, heads + kvHeads, 1))
                        return try read(kvB, p.bytes.count, as: UInt8.self)
                    }
                    // the same page lists in both pools (makePages shuffles: reuse pages' lists)
                    let f32Same = Pages(layout: f32Layout, bytes: [UInt8](repeating: 0, count: pages.bytes.count / pages.layout.pageBytes * f32Layout.pageBytes),
                                        pageLists: pages.pageLists, keys: [], values: [])
                    let refBytes = try ropeStore(.f32, .f32, f32Same)
                    let gotBytes = try ropeStore(tk, tv, pages)
                    for t in 0..<n {
                        let s = seqOf[t], j = Int(tokpos[t])
                        let kRef = load(f32Same, seq: s, page: j / ps, v: false, slot: j % ps, kvDim: kvDim, from: refBytes)
                        let vRef = load(f32Same, seq: s, page: j / ps, v: true, slot: j % ps, kvDim: kvDim, from: refBytes)
                        XCTAssertEqual(vRef, Array(vIn[t * kvDim..<(t + 1) * kvDim]))
                        assertStored(load(pages, seq: s, page: j / ps, v: false, slot: j % ps, kvDim: kvDim, from: gotBytes), kRef, tk, "rope_store K neox \(neox) " + what)
                        assertStored(load(pages, seq: s, page: j / ps, v: true, slot: j % ps, kvDim: kvDim, from: gotBytes), vRef, tv, "rope_store V neox \(neox) " + what)
                    }
                }
            }
        }
    }

    /// attention (split-K, with and without attention_combine) and attention_tiled for every
    /// (K type, V type), against ck_attention_kv on the same page bytes.
    func testGPUAttentionAllTypes() throws {
        let dev = try device()
        var rng = RNG(s: 5)
        let coop = GPUKernels.useCoop(dev)
        for (tk, tv) in Self.pairs {
            // f16 (the staged decode build's type): heads of 64, 128 and 256 over several tiles
            // and splits, a window starting inside an 8-key run, a softcap
            let f16Cases: [(Int, Int, Int, Int, [Int], Float, Int)] = tk == .f16 && tv == .f16
                ? [(16, 32, 8, 128, [700, 90], 0, 0), (8, 8, 2, 128, [400, 33], 0, 77), (16, 4, 2, 256, [300, 40], 1.5, 0), (16, 16, 2, 64, [600, 20], 0, 0)] : []
            for (ps, heads, kvHeads, hd, lengths, softcap, window) in [(16, 4, 2, 16, [45, 9], Float(0), 0), (16, 8, 2, 64, [70, 33], 0, 40),
                                                                       (5, 3, 1, 40, [23, 4], 20, 0), (16, 8, 4, 8, [37, 6], 0, 0)] + f16Cases {
                let kvDim = kvHeads * hd
                let pages = makePages(tk, tv, ps: ps, kvDim: kvDim, lengths: lengths, rng: &rng)
                // queries: the last 5 and 3 positions of the two sequences
                var tokpos: [Int32] = [], tokpt: [Int32] = [], seqOf: [Int] = []
                for (s, len) in lengths.enumerated() {
                    for j in (len - (s == 0 ? 5 : 3))..<len { tokpos.append(Int32(j)); tokpt.append(s == 0 ? 0 : Int32(pages.pageLists[0].count)); seqOf.append(s) }
                }
                let n = tokpos.count
                let q = rng.row(n * heads * hd)
                let scale = 1 / Float(hd).squareRoot()
                // the CPU on the same bytes
                var want = [Float](repeating: 0, count: n * heads * hd)
                let g = heads / kvHeads
                pages.bytes.withUnsafeBytes { b in
                    for t in 0..<n {
                        let s = seqOf[t], len = Int(tokpos[t]) + 1
                        let first = window > 0 && len > window ? len - window : 0
                        let kp: [UnsafeRawPointer?] = pages.pageLists[s].map { UnsafeRawPointer(b.baseAddress! + pages.planeOffset($0, v: false)) }
                        let vp: [UnsafeRawPointer?] = pages.pageLists[s].map { UnsafeRawPointer(b.baseAddress! + pages.planeOffset($0, v: true)) }
                        var scores = [Float](repeating: 0, count: g * len)
                        for kvh in 0..<kvHeads {
                            let qs = Array(q[(t * heads + kvh * g) * hd..<(t * heads + (kvh + 1) * g) * hd])
                            var out = [Float](repeating: 0, count: g * hd)
                            ck_attention_kv(qs, Int64(g), Int64(hd), tk.ggml, kp, tv.ggml, vp, Int64(ps), Int64(kvDim), Int64(kvh * hd), Int64(len),
                                            scale, softcap, nil, Int64(first), &out, &scores)
                            for i in 0..<(g * hd) { want[(t * heads + kvh * g) * hd + i] = out[i] }
                        }
                    }
                }
                let what = "K \(tk) V \(tv) ps \(ps) heads \(heads)/\(kvHeads) hd \(hd) softcap \(softcap) window \(window)"
                let qB = try upload(q), kvB = try upload(pages.bytes), posB = try upload(tokpos), ptB = try upload(tokpt), tabB = try upload(pages.pagetab)
                let mask: [UInt32] = [softcap.bitPattern, UInt32(window), 0, 0, 0] // no sinks (GPUKernelTests checks them), the whole head
                let none = try upload([Float(0)]) // the sinks binding
                func check(_ got: [Float], _ label: String) {
                    let err = zip(got, want).map { abs($0 - $1) / (abs($1) + 1e-2) }.max()!
                    XCTAssertLessThan(err, 2e-4, "\(label) \(what)")
                }
                let maxLen = lengths.max()!
                for (chunk, splits) in [(maxLen, 1), (32, (maxLen + 31) / 32)] {
                    let out = try upload([Float](repeating: .nan, count: n * heads * hd))
                    let part = try upload([Float](repeating: .nan, count: n * heads * splits * (hd + 2)))
                    try run(GPUKernels.kvVariant(GPUKernels.attention, k: tk, v: tv), [qB, kvB, out, posB, ptB, tabB, part, none].map { GPUBinding($0) },
                            [UInt32(n), UInt32(heads), UInt32(kvHeads), UInt32(hd), UInt32(kvDim), UInt32(ps), UInt32(pages.pageStrideWords),
                             UInt32(pages.layerOffBytes / 4), scale.bitPattern, UInt32(chunk), UInt32(splits), UInt32(heads * hd)] + mask,
                            (n, kvHeads, splits))
                    if splits > 1 {
                        try run(GPUKernels.attentionCombine, [part, out, posB, none].map { GPUBinding($0) },
                                [UInt32(n), UInt32(heads), UInt32(hd), UInt32(chunk), UInt32(splits), 0], GPUKernels.attentionCombineGroups(n: n, heads: heads, headDim: hd))
                    }
                    check(try read(out, n * heads * hd, as: Float.self), "attention splits \(splits)")
                    if splits == 1 && hd % 32 == 0 && GPUKernels.integerDot(dev) {
                        // the build that also writes 8-bit blocks (decode over short contexts): the same floats
                        let out8 = try upload([Float](repeating: .nan, count: n * heads * hd))
                        let sizes = GPUKernels.q8Bytes(k: heads * hd, m: n)
                        let xq = try upload([UInt8](repeating: 0, count: sizes.values)), xd = try upload([UInt8](repeating: 0, count: sizes.scales))
                        try run(GPUKernels.kvVariant(GPUKernels.attentionQ8, k: tk, v: tv), [qB, kvB, out8, posB, ptB, tabB, part, xq, xd, try upload([UInt32](repeating: 0, count: n * kvHeads)), none].map { GPUBinding($0) },
                                [UInt32(n), UInt32(heads), UInt32(kvHeads), UInt32(hd), UInt32(kvDim), UInt32(ps), UInt32(pages.pageStrideWords),
                                 UInt32(pages.layerOffBytes / 4), scale.bitPattern, UInt32(chunk), UInt32(splits), UInt32(heads * hd)] + mask,
                                (n, kvHeads, splits))
                        XCTAssertEqual(try read(out8, n * heads * hd, as: Float.self), try read(out, n * heads * hd, as: Float.self), "attention_q8 \(what)")
                        XCTAssertNotEqual(try read(xd, sizes.scales / 4, as: Float.self), [Float](repeating: 0, count: sizes.scales / 4), "attention_q8 \(what) wrote its blocks")
                    }
                }
                // the staged build, where the pages suit it: the host's plan, a split a tile, one split
                let staged = GPUKernels.attentionStagedFits(k: tk, v: tv, pageSize: ps, kvDim: kvDim, headDim: hd,
                                                            places: [(pages.pageStrideWords, pages.layerOffBytes / 4)])
                XCTAssertEqual(staged, tk == .f16 && tv == .f16 && ps % 8 == 0, "staged fits: \(what)")
                if staged {
                    let tile = GPUKernels.attentionStagedTile(headDim: hd)
                    let plan = GPUKernels.attentionStagedSplits(keys: maxLen, n: n, kvHeads: kvHeads, headDim: hd, maxTokens: 16, maxContext: 4096)
                    for (chunk, splits) in [plan, (tile, (maxLen + tile - 1) / tile), (maxLen, 1)] {
                        let out = try upload([Float](repeating: .nan, count: n * heads * hd))
                        let part = try upload([Float](repeating: .nan, count: n * heads * splits * (hd + 2)))
                        let params = [UInt32(n), UInt32(heads), UInt32(kvHeads), UInt32(hd), UInt32(kvDim), UInt32(ps), UInt32(pages.pageStrideWords),
                                      UInt32(pages.layerOffBytes / 4), scale.bitPattern, UInt32(chunk), UInt32(splits), UInt32(heads * hd)] + mask
                        try run(GPUKernels.attentionStaged, [qB, kvB, out, posB, ptB, tabB, part, none].map { GPUBinding($0) }, params, (n, kvHeads, splits))
                        if splits > 1 {
                            try run(GPUKernels.attentionCombine, [part, out, posB, none].map { GPUBinding($0) },
                                    [UInt32(n), UInt32(heads), UInt32(hd), UInt32(chunk), UInt32(splits), 0], GPUKernels.attentionCombineGroups(n: n, heads: heads, headDim: hd))
                        }
                        let got = try read(out, n * heads * hd, as: Float.self)
                        check(got, "attention_staged chunk \(chunk) splits \(splits)")
                        if splits <= GPUKernels.attentionJoinMaxSplits && hd % 32 == 0 && GPUKernels.integerDot(dev) {
                            // the 8-bit build, merging its splits itself
                            let out8 = try upload([Float](repeating: .nan, count: n * heads * hd))
                            let sizes = GPUKernels.q8Bytes(k: heads * hd, m: n)
                            let xq = try upload([UInt8](repeating: 0, count: sizes.values)), xd = try upload([UInt8](repeating: 0, count: sizes.scales))
                            try run(GPUKernels.attentionQ8Staged, [qB, kvB, out8, posB, ptB, tabB, part, xq, xd, try upload([UInt32](repeating: 0, count: n * kvHeads)), none].map { GPUBinding($0) },
                                    params, (n, kvHeads, splits))
                            check(try read(out8, n * heads * hd, as: Float.self), "attention_q8_staged chunk \(chunk) splits \(splits)")
                            XCTAssertNotEqual(try read(xd, sizes.scales / 4, as: Float.self), [Float](repeating: 0, count: sizes.scales / 4), "attention_q8_staged \(what) wrote its blocks")
                        }
                    }
                }
                let blocks = GPUKernels.attentionQueryBlocks(sequence: seqOf, group: g)
                var tiled = GPUKernels.attentionTiledFits(heads: heads, kvHeads: kvHeads, headDim: hd) ? [(GPUKernels.attentionTiled, blocks)] : []
                if coop && hd % 16 == 0 && !tiled.isEmpty { tiled.append((GPUKernels.attentionCoop, GPUKernels.attentionQueryBlocks(sequence: seqOf, group: g, rows: GPUKernels.attentionCoopRows))) }
                for (kernel, blocks) in tiled {
                    // whole, and in key splits of 32 merged by attention_combine
                    for (chunk, splits) in [(maxLen, 1), (32, (maxLen + 31) / 32)] {
                        let out = try upload([Float](repeating: .nan, count: n * heads * hd))
                        let part = try upload([Float](repeating: .nan, count: n * heads * splits * (hd + 2)))
                        try run(GPUKernels.kvVariant(kernel, k: tk, v: tv), [qB, kvB, out, posB, ptB, tabB, try upload(blocks), part, none].map { GPUBinding($0) },
                                [UInt32(heads), UInt32(kvHeads), UInt32(hd), UInt32(kvDim), UInt32(ps), UInt32(pages.pageStrideWords),
                                 UInt32(pages.layerOffBytes / 4), scale.bitPattern, UInt32(heads * hd), softcap.bitPattern, UInt32(window), UInt32(chunk), UInt32(splits), 0],
                                (blocks.count / 2, kvHeads, splits))
                        if splits > 1 {
                            try run(GPUKernels.attentionCombine, [part, out, posB, none].map { GPUBinding($0) },
                                    [UInt32(n), UInt32(heads), UInt32(hd), UInt32(chunk), UInt32(splits), 0], GPUKernels.attentionCombineGroups(n: n, heads: heads, headDim: hd))
                        }
                        let got = try read(out, n * heads * hd, as: Float.self)
                        if kernel.name == GPUKernels.attentionCoop.name {
                            // float16 products: K, V and Q rounded to halves
                            let err = zip(got, want).map { abs($0 - $1) }.max()!
                            XCTAssertLessThan(err, 1e-2, "attention_coop \(what) splits \(splits)")
                        } else {
                            check(got, "\(kernel.name) splits \(splits)")
                        }
                    }
                }
            }
        }
    }
}

/// A GPU KV pool that spans several buffers (VELO_GPU_KV_BUFFER_BYTES forces small ones): the
/// same greedy tokens as one buffer and as the CPU, with a draft model packed into the same
/// pages, and prefix files whose pages read and write across the buffers.
final class KVPoolBuffersTests: XCTestCase {

    func greedy(_ engine: Engine, _ prompt: [Int32], _ n: Int) throws -> [Int32] {
        var req = GenerationRequest(prompt: prompt)
        req.maxTokens = n
        req.sampling.temperature = 0
        req.ignoreEOS = true
        let id = try engine.submit(req)
        var out: [Int32] = []
        while true {
            _ = engine.wait(timeoutMs: 1000)
            for e in engine.poll() {
                switch e {
                case .tokens(let i, let t, _, _, _) where i == id: out += t
                case .finished(let i, let reason, let message, _) where i == id:
                    XCTAssertNotEqual(reason, .error, message ?? "")
                    return out
                default: break
                }
            }
        }
    }

    static let gpu = TestGPU.backend

    func engine(_ backend: BackendChoice, bufferBytes: Int?, draft: Bool = false, types: (KVCacheType, KVCacheType) = (.f16, .f16)) throws -> Engine {
        if backend != .cpu { try TestGPU.require() }
        if let bufferBytes { setenv("VELO_GPU_KV_BUFFER_BYTES", String(bufferBytes), 1) } else { unsetenv("VELO_GPU_KV_BUFFER_BYTES") }
        defer { unsetenv("VELO_GPU_KV_BUFFER_BYTES") }
        var o = EngineOptions()
        o.backend = backend
        o.contextSize = 256
        o.threads = 2
        (o.cacheTypeK, o.cacheTypeV) = types
        if draft {
            o.spec.mode = .draft
            o.spec.adapt = false
            o.spec.draftMax = 4
        }
        let file = try ModelFile(path: try TestData.path("stories260K.gguf"))
        return try Engine(file: file, options: o, draft: draft ? try ModelFile(path: try TestData.path("stories260K-q8_0.gguf")) : nil)
    }

    func kvBuffers(_ e: Engine) -> Int { e.statsJSON["kv_buffers"]?.intValue ?? -1 }

    func testPoolAcrossBuffers() throws {
        let prompt: [Int32] = [1, 403, 407, 261, 378]
        for types in [(KVCacheType.f16, KVCacheType.f16), (.q8_0, .f32)] {
            let cpu = try engine(.cpu, bufferBytes: nil, types: types)
            let want = try greedy(cpu, prompt, 40)
            cpu.shutdown()
            let one = try engine(Self.gpu, bufferBytes: nil, types: types)
            XCTAssertEqual(kvBuffers(one), 1)
            XCTAssertEqual(try greedy(one, prompt, 40), want, "one buffer \(types)")
            // 5 layers, 16 pages of a layer of at most 2 × 16 × 32 × 4 bytes: two layers a buffer
            let layerBytes = 16 * KVLayout(pageSize: 16, layers: 5, kvDim: 32, typeK: types.0, typeV: types.1).layerBytes
            let split = try engine(Self.gpu, bufferBytes: 2 * layerBytes + 100, types: types)
            XCTAssertEqual(kvBuffers(split), 3)
            XCTAssertEqual(try greedy(split, prompt, 40), want, "three buffers \(types)")
            // a prefix saved from three buffers loads into one and into the CPU (and back)
            let path = NSTemporaryDirectory() + "velo-kv-split-\(types.0)-\(types.1).prefix"
            defer { unlink(path) }
            let long = prompt + want
            _ = try greedy(split, long, 1)
            XCTAssertEqual(try split.savePrefix(long, to: path), 32)
            for target in [one, try engine(.cpu, bufferBytes: nil, types: types), try engine(Self.gpu, bufferBytes: layerBytes, types: types)] {
                XCTAssertEqual(try target.loadPrefix(from: path), 32)
                XCTAssertEqual(try greedy(target, long, 8), try greedy(split, long, 8), "prefix across buffers \(types)")
                target.shutdown()
            }
            split.shutdown()
        }
        // a draft model's K/V packed into the same pages across buffers: speculation stays exact
        let plain = try engine(Self.gpu, bufferBytes: nil)
        let want = try greedy(plain, prompt, 60)
        plain.shutdown()
        let layerBytes = 16 * KVLayout(pageSize: 16, layers: 5, kvDim: 32, typeK: .f16, typeV: .f16).layerBytes
        // the draft's share of pages makes more pages than 16: let each buffer hold 2 layers of them
        let spec = try engine(Self.gpu, bufferBytes: 2 * layerBytes * 2 + 100, draft: true)
        XCTAssertGreaterThan(kvBuffers(spec), 1)
        XCTAssertEqual(try greedy(spec, prompt, 60), want, "draft speculation across buffers")
        spec.shutdown()
    }
}

/// GPU pages whose layers differ in width (Gemma 4's sliding and global layers): buffers take
/// consecutive layers while they fit, each layer's place is its own width's, and a page read
/// and written across the buffers is the host pool's layout.
final class KVPagesOfTwoWidthsTests: XCTestCase {
    func testLayersOfTwoWidthsAcrossBuffers() throws {
        let device = try TestGPU.device()
        let pool = try PagePool(pageCount: 4, pageSize: 16, layers: 3, kvDim: 128, layerDims: [64, 64, 128], hostStorage: false)
        let l = pool.layout
        XCTAssertEqual((0..<3).map { l.layerBytes(layer: $0) }, [2 * 16 * 64 * 4, 2 * 16 * 64 * 4, 2 * 16 * 128 * 4])
        // room for the two narrow layers of every page, not for a third layer
        setenv("VELO_GPU_KV_BUFFER_BYTES", String(4 * (l.layerBytes(layer: 0) + l.layerBytes(layer: 1)) + 100), 1)
        defer { unsetenv("VELO_GPU_KV_BUFFER_BYTES") }
        let pages = try GPUKVPages(device: device, pool: pool)
        XCTAssertEqual(pages.groups.map(\.layers), [2, 1])
        let places = try pages.places(for: l)
        XCTAssertEqual(places.map(\.layerOff), [0, l.layerBytes(layer: 0) / 4, 0])
        XCTAssertEqual(places.map(\.pageStride), [2 * l.layerBytes(layer: 0) / 4, 2 * l.layerBytes(layer: 0) / 4, l.layerBytes(layer: 2) / 4])
        XCTAssert(places[2].buffer === pages.groups[1].buffer)
        // a page in the host layout goes out and comes back whole, and layer 2 sits alone in the second buffer
        var page = [UInt8](repeating: 0, count: l.pageBytes)
        for i in page.indices { page[i] = UInt8(truncatingIfNeeded: i &* 131 &+ 7) }
        try page.withUnsafeBytes { try pages.writePage(2, device: device, from: $0.baseAddress!) }
        var back = [UInt8](repeating: 0, count: l.pageBytes)
        try back.withUnsafeMutableBytes { try pages.readPage(2, device: device, into: $0.baseAddress!) }
        XCTAssertEqual(back, page)
        let third = l.layerBytes(layer: 2)
        var alone = [UInt8](repeating: 0, count: third)
        try alone.withUnsafeMutableBytes { try device.download(pages.groups[1].buffer, offset: 2 * third, into: $0.baseAddress!, bytes: third) }
        XCTAssertEqual(alone, Array(page[l.offset(layer: 2)...]))
    }
}
