import CKernels

/// One forward pass worth of tokens, possibly from several sequences: each token carries its
/// sequence and position; K/V are written to and read from that sequence's pages.
public struct ForwardBatch {
    public var tokens: [Int32] = []
    public var positions: [Int] = []
    /// Index into `tables` for each token.
    public var sequence: [Int] = []
    /// Block tables of the sequences in this batch, already holding room for every position.
    public var tables: [BlockTable] = []
    /// Each sequence's recurrent-state slot (models with DeltaNet layers), beside `tables`.
    public var stateSlots: [Int] = []
    /// Recurrent states copied from the prefix cache's checkpoints into slots before the pass
    /// (sequences resuming a cached prefix), and from slots into checkpoints after it (a prompt
    /// computed up to a page boundary the cache indexes).
    var stateLoads: [(checkpoint: Int, slot: Int)] = []
    var stateSaves: [(slot: Int, checkpoint: Int)] = []
    /// Batch rows whose logits are wanted, in output order.
    public var logitRows: [Int] = []
    /// Batch rows whose final-norm hidden states are wanted (embeddings), in output order.
    public var hiddenRows: [Int] = []
    /// Whether the caller reads the logit rows themselves (false: only their argmaxes, which a
    /// backend that has `ForwardOps.argmaxes` then need not bring to host memory).
    public var hostLogits = true
    /// Whether the caller would use each logit row's argmax (`ForwardOps.argmaxes`).
    public var argmaxes = false

    public init() {}
    public var count: Int { tokens.count }
}

/// Scratch buffers for a forward pass of up to `maxTokens` tokens, allocated once.
final class Workspace {
    let maxTokens: Int
    let x, xn, q, k, v, attn, gate, up: UnsafeMutablePointer<Float>
    let logits: UnsafeMutablePointer<Float>
    /// The expert FFN's buffers (nil: a dense model).
    let experts: ExpertScratch?
    /// Each sequence slot's recurrent state and the DeltaNet layers' buffers (nil: no such layers).
    let deltaNet: DeltaNetScratch?
    /// Quantized activations (the largest row format, for the widest input).
    let quant: UnsafeMutableRawPointer
    let quantStride: Int
    /// Per-thread attention scores (one context's worth each).
    let scores: UnsafeMutablePointer<Float>
    let scoreStride: Int

    init(config c: ModelConfig, maxTokens: Int, maxLogitRows: Int, maxContext: Int, threads: Int, sequences: Int = 1, checkpoints: Int = 0) {
        self.maxTokens = maxTokens
        func buf(_ n: Int) -> UnsafeMutablePointer<Float> {
            let p = UnsafeMutablePointer<Float>.allocate(capacity: max(n, 1))
            p.initialize(repeating: 0, count: max(n, 1))
            return p
        }
        x = buf(maxTokens * c.dim)
        xn = buf(maxTokens * c.dim)
        q = buf(maxTokens * c.qDim)
        k = buf(maxTokens * c.kvDim)
        v = buf(maxTokens * c.kvDim)
        attn = buf(maxTokens * c.qDim)
        gate = buf(maxTokens * c.hiddenWidth)
        up = buf(maxTokens * c.hiddenWidth)
        logits = buf(maxLogitRows * c.vocabSize)
        experts = ExpertScratch(c, maxTokens: maxTokens)
        deltaNet = DeltaNetScratch(c, maxTokens: maxTokens, sequences: sequences, checkpoints: checkpoints)
        let widest = max(c.dim, c.qDim, c.hiddenWidth, c.deltaNet?.valueDim ?? 0, c.mla?.qLora ?? 0)
        // F32 activations are the largest format: 4 bytes per element, plus block headroom.
        quantStride = (widest * 4 + 63) / 64 * 64
        quant = .allocate(byteCount: quantStride * maxTokens, alignment: 64)
        scoreStride = (maxContext + 15) / 16 * 16
        scores = buf(scoreStride * threads * c.maxGroup)
    }

    /// Bytes a workspace of these sizes takes (the fit check, before one is made).
    static func bytes(config c: ModelConfig, maxTokens: Int, maxLogitRows: Int, maxContext: Int, threads: Int, sequences: Int = 1, checkpoints: Int = 0) -> Int {
        let widest = max(c.dim, c.qDim, c.hiddenWidth, c.deltaNet?.valueDim ?? 0, c.mla?.qLora ?? 0)
        let floats = maxTokens * (2 * c.dim + 2 * c.qDim + 2 * c.kvDim + 2 * c.hiddenWidth) + maxLogitRows * c.vocabSize
            + (maxContext + 15) / 16 * 16 * threads * c.maxGroup + ExpertScratch.floats(c, maxTokens: maxTokens)
            + DeltaNetScratch.floats(c, maxTokens: maxTokens, sequences: sequences, checkpoints: checkpoints)
        return floats * 4 + (widest * 4 + 63) / 64 * 64 * maxTokens
    }

    deinit {
        for p in [x, xn, q, k, v, attn, gate, up, logits, scores] { p.deallocate() }
        experts?.deallocate()
        deltaNet?.deallocate()
        quant.deallocate()
    }
}

/// The shared pieces every architecture is built from: norms, matmuls over quantized
/// weights, RoPE, paged attention, the gated MLP. All run on the CPU thread pool.
struct TransformerOps {
    let config: ModelConfig
    let pool: ThreadPool
    let profiler: Profiler

    /// Quantizes `rows` rows of `n` floats into the activation format `type`.
    func quantize(_ src: UnsafePointer<Float>, rows: Int, n: Int, type: Int32, into ws: Workspace) {
        profiler.measure(.quantize) { quantizeRows(src, rows: rows, n: n, type: type, into: ws) }
    }

    private func quantizeRows(_ src: UnsafePointer<Float>, rows: Int, n: Int, type: Int32, into ws: Workspace) {
        let stride = ws.quantStride
        let dst = ws.quant
        if rows == 1 {
            ck_quantize_row(type, src, dst, Int64(n))
            return
        }
        pool.run(work: rows * n) { ith, nth in
            for r in ThreadPool.share(rows, ith, nth) {
                ck_quantize_row(type, src + r * n, dst + r * stride, Int64(n))
            }
        }
    }

    /// out_i = W_i · x for several weights sharing one input (e.g. Q, K and V), `rows` inputs.
    /// The input is quantized once per activation format.
    func matmul(_ x: UnsafePointer<Float>, rows: Int, _ pairs: [(WeightMatrix, UnsafeMutablePointer<Float>)], ws: Workspace) {
        var start = 0
        while start < pairs.count {
            // group consecutive weights with the same activation format
            let type = pairs[start].0.activationType
            var end = start + 1
            while end < pairs.count, pairs[end].0.activationType == type { end += 1 }
            let group = Array(pairs[start..<end])
            quantize(x, rows: rows, n: group[0].0.cols, type: type, into: ws)
            let a = UnsafeRawPointer(ws.quant)
            let aStride = ws.quantStride
            let work = group.reduce(0) { $0 + $1.0.rows * $1.0.cols } * rows
            profiler.measure(.matmul) {
                pool.run(work: work) { ith, nth in
                    for (w, out) in group {
                        let share = ThreadPool.share(w.rows, ith, nth, align: 16)
                        if share.isEmpty { continue }
                        ck_matmul(Int32(w.type.rawValue), Int64(w.cols), w.data, w.rowBytes, Int64(share.lowerBound), Int64(share.upperBound),
                                  a, aStride, Int64(rows), out, Int64(w.rows))
                    }
                }
            }
            start = end
        }
    }

    func rmsNorm(_ x: UnsafePointer<Float>, _ w: WeightVector?, rows: Int, n: Int, into y: UnsafeMutablePointer<Float>) {
        profiler.measure(.norm) {
            (w?.values ?? [Float](repeating: 1, count: n)).withUnsafeBufferPointer { wp in
                for r in 0..<rows {
                    ck_rms_norm(x + r * n, wp.baseAddress, y + r * n, Int64(n), config.normEps)
                }
            }
        }
    }

    /// cos/sin (times the rope's magnitude) of every rotary pair at every row's position,
    /// computed once per forward pass and shared by all layers: [rows × ropeDim/2] each.
    func ropeTable(_ rope: Rope, positions: [Int]) -> (cos: [Float], sin: [Float]) {
        let half = rope.freqs.count
        var cosv = [Float](repeating: 0, count: positions.count * half)
        var sinv = cosv
        for (r, pos) in positions.enumerated() {
            for i in 0..<half {
                let theta = Double(pos) * Double(rope.freqs[i])
                cosv[r * half + i] = Float(cos(theta)) * rope.magnitude
                sinv[r * half + i] = Float(sin(theta)) * rope.magnitude
            }
        }
        return (cosv, sinv)
    }

    /// Rotary embedding in place on `heads` heads of each row.
    func rope(_ x: UnsafeMutablePointer<Float>, rows: Int, heads: Int, headDim hd: Int, table: (cos: [Float], sin: [Float])) {
        let half = rows > 0 ? table.cos.count / rows : 0
        let neox = config.ropeStyle == .neox
        profiler.measure(.rope) {
        table.cos.withUnsafeBufferPointer { cp in
            table.sin.withUnsafeBufferPointer { sp in
                for r in 0..<rows {
                    let c = cp.baseAddress! + r * half, s = sp.baseAddress! + r * half
                    for h in 0..<heads {
                        let v = x + (r * heads + h) * hd
                        if neox {
                            for i in 0..<half {
                                let a = v[i], b = v[i + half]
                                v[i] = a * c[i] - b * s[i]
                                v[i + half] = a * s[i] + b * c[i]
                            }
                        } else {
                            for i in 0..<half {
                                let a = v[2 * i], b = v[2 * i + 1]
                                v[2 * i] = a * c[i] - b * s[i]
                                v[2 * i + 1] = a * s[i] + b * c[i]
                            }
                        }
                    }
                }
            }
        }
        }
    }

    /// Writes each token's K and V into its sequence's page slot for this layer, in the pool's
    /// types (ck_kv_store: f32/f16 K transposed, [dim][slot] within the page, for the attention
    /// kernel; V and quantized K by slot).
    func storeKV(_ batch: ForwardBatch, layer: Int, kvDim: Int, kv: KVView, ws: Workspace) {
        let ps = kv.pageSize
        let tk = kv.typeK.ggml, tv = kv.typeV.ggml
        for t in 0..<batch.count {
            let table = batch.tables[batch.sequence[t]]
            let pos = batch.positions[t]
            let page = table.pages[pos / ps]
            let slot = pos % ps
            ck_kv_store(tk, 1, kv.plane(page, layer: layer, plane: 0), Int64(ps), Int64(kvDim), Int64(slot), ws.k + t * kvDim)
            ck_kv_store(tv, 0, kv.plane(page, layer: layer, plane: 1), Int64(ps), Int64(kvDim), Int64(slot), ws.v + t * kvDim)
        }
    }

    /// Causal attention of every token over its own sequence's positions 0...pos, reading
    /// K/V through the block table. Work is split over (token, KV head) pairs; the query heads
    /// of a GQA group are done together so each K/V row is read once for all of them.
    func attention(_ batch: ForwardBatch, layer: Int, _ p: AttentionParams, kv: KVView, ws: Workspace) {
        let c = p.shape
        let hd = c.headDim, group = c.group, ps = kv.pageSize
        let tk = kv.typeK.ggml, tv = kv.typeV.ggml
        // page base pointers of every sequence for this layer (K plane 0, V plane 1)
        let kPages = batch.tables.map { t in t.pages.map { UnsafeRawPointer(kv.plane($0, layer: layer, plane: 0)) as UnsafeRawPointer? } }
        let vPages = batch.tables.map { t in t.pages.map { UnsafeRawPointer(kv.plane($0, layer: layer, plane: 1)) as UnsafeRawPointer? } }
        let items = batch.count * c.kvHeads
        let work = batch.positions.reduce(0) { $0 + $1 + 1 } * c.heads * hd * 2
        let sinks = p.sinks?.values ?? []
        profiler.measure(.attention) {
        sinks.withUnsafeBufferPointer { sp in
            pool.run(work: work) { ith, nth in
                let scores = ws.scores + ith * ws.scoreStride * group
                for item in ThreadPool.share(items, ith, nth) {
                    let t = item / c.kvHeads, kvh = item % c.kvHeads
                    let seq = batch.sequence[t]
                    let q = ws.q + t * c.qDim + kvh * group * hd
                    let out = ws.attn + t * c.qDim + kvh * group * hd
                    // a sliding window starts at whole pages: skip the ones before it
                    let pos = batch.positions[t], first = p.firstKey(pos), skip = first / ps
                    // the sinks of this KV head's query heads
                    let sink = sp.isEmpty ? nil : sp.baseAddress! + kvh * group
                    kPages[seq].withUnsafeBufferPointer { kp in
                        vPages[seq].withUnsafeBufferPointer { vp in
                            ck_attention_kv(q, Int64(group), Int64(hd), tk, kp.baseAddress! + skip, tv, vp.baseAddress! + skip, Int64(ps), Int64(c.kvDim),
                                            Int64(kvh * hd), Int64(pos + 1 - skip * ps), p.scale, p.softcap, sink, Int64(first - skip * ps), out, scores)
                        }
                    }
                }
            }
        }
        }
    }

    func addInPlace(_ x: UnsafeMutablePointer<Float>, _ y: UnsafePointer<Float>, count: Int) {
        ck_add_f32(x, y, x, Int64(count))
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
