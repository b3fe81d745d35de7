import CKernels
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A Gated DeltaNet layer's shape (Qwen3.5, Qwen3-Next: `{arch}.ssm.*`): `kHeads` query/key
/// heads and `vHeads` value heads, all `state` wide; value head h reads key head h % kHeads
/// (Qwen3.5's converter stores the value heads tiled, as ggml broadcasts) or, `groupedValues`,
/// h / (vHeads / kHeads) (Qwen3-Next: each key head's value heads together, llama.cpp's repeat
/// interleave); a causal convolution of `conv` taps over the Q|K|V channels.
public struct DeltaNetShape: Sendable, Equatable {
    public var kHeads: Int
    public var vHeads: Int
    public var state: Int
    public var conv: Int
    /// Which layers are DeltaNet layers (the others attend).
    public var layers: [Bool]
    public var groupedValues = false
    /// The inputs as one grouped product (`DeltaNetLayer.Inputs.grouped`, Qwen3-Next's ssm_in).
    public var fusedInputs = false

    /// The key head value head `h` reads.
    func keyHead(_ h: Int) -> Int { groupedValues ? h / (vHeads / kHeads) : h % kHeads }

    var keyDim: Int { kHeads * state }
    var valueDim: Int { vHeads * state }
    /// Q, K and V channels, convolved together.
    var convDim: Int { 2 * keyDim + valueDim }
    /// Floats of one sequence's state in one layer: the convolution's last conv - 1 inputs, then
    /// each value head's state × state matrix.
    var stateFloats: Int { (conv - 1) * convDim + vHeads * state * state }
    var count: Int { layers.filter { $0 }.count }
    /// Floats of one sequence's whole state (every DeltaNet layer's): a slot, or a checkpoint.
    var slotFloats: Int { count * stateFloats }

    /// How many states the prefix cache may keep (each the state after a cached prefix): two a
    /// running sequence and two more, none without the cache.
    static func checkpoints(_ c: ModelConfig, sequences: Int, prefixCache: Bool) -> Int {
        c.deltaNet != nil && prefixCache ? 2 * sequences + 2 : 0
    }
}

/// One DeltaNet layer's weights, as llama.cpp's qwen35 and qwen3next loaders name them.
struct DeltaNetLayer {
    /// The input projections: attn_qkv (the Q|K|V channels before the convolution) and
    /// attn_gate (z, the output gate), or Qwen3-Next's older files' ssm_in, both in one whose
    /// rows come a key head at a time (its q, its k, its value heads' v, their z).
    enum Inputs {
        case apart(qkv: WeightMatrix, gate: WeightMatrix)
        case grouped(qkvz: WeightMatrix)
    }
    /// ssm_beta and ssm_alpha (per value head, the write strength and the decay's input), or
    /// Qwen3-Next's ssm_ba, a key head's value heads' betas then their alphas.
    enum Rates {
        case apart(beta: WeightMatrix, alpha: WeightMatrix)
        case grouped(WeightMatrix)
    }
    let inputs: Inputs
    let rates: Rates
    let out: WeightMatrix
    /// ssm_conv1d: `conv` taps per channel, channel-major.
    let convWeight: WeightVector
    /// ssm_dt.bias, ssm_a (-exp(A_log)): the decay is exp(softplus(alpha + dt) · a).
    let dtBias, a: WeightVector
    /// ssm_norm: the gated RMSNorm of each value head's output.
    let norm: WeightVector
    /// This layer's place among the DeltaNet layers (its state's index).
    let index: Int

    init(_ w: WeightLoader, prefix p: String, _ c: ModelConfig, _ d: DeltaNetShape, index: Int) throws {
        if d.fusedInputs {
            inputs = .grouped(qkvz: try w.matrix(p + "ssm_in.weight", rows: d.convDim + d.valueDim, cols: c.dim))
        } else {
            inputs = .apart(qkv: try w.matrix(p + "attn_qkv.weight", rows: d.convDim, cols: c.dim),
                            gate: try w.matrix(p + "attn_gate.weight", rows: d.valueDim, cols: c.dim))
        }
        if w.gguf.tensor(p + "ssm_ba.weight") != nil {
            rates = .grouped(try w.matrix(p + "ssm_ba.weight", rows: 2 * d.vHeads, cols: c.dim))
        } else {
            rates = .apart(beta: try w.matrix(p + "ssm_beta.weight", rows: d.vHeads, cols: c.dim),
                           alpha: try w.matrix(p + "ssm_alpha.weight", rows: d.vHeads, cols: c.dim))
        }
        out = try w.matrix(p + "ssm_out.weight", rows: c.dim, cols: d.valueDim)
        convWeight = try w.vector(p + "ssm_conv1d.weight", count: d.conv * d.convDim)
        dtBias = try w.vector(p + "ssm_dt.bias", count: d.vHeads)
        a = try w.vector(p + "ssm_a", count: d.vHeads)
        norm = try w.vector(p + "ssm_norm.weight", count: d.state)
        self.index = index
    }

    var matrices: [WeightMatrix] {
        let i: [WeightMatrix], r: [WeightMatrix]
        switch inputs {
        case let .apart(qkv, gate): i = [qkv, gate]
        case let .grouped(qkvz): i = [qkvz]
        }
        switch rates {
        case let .apart(beta, alpha): r = [beta, alpha]
        case let .grouped(ba): r = [ba]
        }
        return i + r + [out]
    }
    var vectors: [WeightVector] { [convWeight, dtBias, a, norm] }

    /// Whether beta and alpha come in ssm_ba's grouped rows (possible beside apart inputs).
    var groupedRates: Bool {
        if case .grouped = rates { return true }
        return false
    }
}

/// The CPU's DeltaNet buffers: every sequence slot's recurrent state (`DeltaNetShape.stateFloats`
/// per DeltaNet layer, in float32), the prefix cache's checkpoints of states, and one pass's
/// projections.
struct DeltaNetScratch {
    let shape: DeltaNetShape
    /// [slot][layer][stateFloats]
    let states: UnsafeMutablePointer<Float>
    let sequences: Int
    /// [checkpoint][layer][stateFloats]
    let checkpoints: UnsafeMutablePointer<Float>
    let checkpointCount: Int
    /// One pass's rows: the Q|K|V channels (convolved in place), z, beta, alpha, the output
    /// (first the grouped projections' rows: `out` holds maxTokens × (convDim + valueDim) where
    /// the inputs are fused, `beta` maxTokens × 2·vHeads).
    let qkv, z, beta, alpha, out: UnsafeMutablePointer<Float>

    init?(_ c: ModelConfig, maxTokens: Int, sequences: Int, checkpoints: Int) {
        guard let d = c.deltaNet else { return nil }
        shape = d
        self.sequences = sequences
        checkpointCount = checkpoints
        func buf(_ n: Int) -> UnsafeMutablePointer<Float> {
            let p = UnsafeMutablePointer<Float>.allocate(capacity: max(n, 1))
            p.initialize(repeating: 0, count: max(n, 1))
            return p
        }
        states = buf(sequences * d.slotFloats)
        self.checkpoints = buf(checkpoints * d.slotFloats)
        qkv = buf(maxTokens * d.convDim)
        z = buf(maxTokens * d.valueDim)
        beta = buf(maxTokens * 2 * d.vHeads)
        alpha = buf(maxTokens * d.vHeads)
        out = buf(maxTokens * (d.valueDim + (d.fusedInputs ? d.convDim : 0)))
    }

    static func floats(_ c: ModelConfig, maxTokens: Int, sequences: Int, checkpoints: Int) -> Int {
        guard let d = c.deltaNet else { return 0 }
        return (sequences + checkpoints) * d.slotFloats + maxTokens * (d.convDim + 2 * d.valueDim + 3 * d.vHeads + (d.fusedInputs ? d.convDim : 0))
    }

    /// Slot `slot`'s state in DeltaNet layer `layer`.
    func state(slot: Int, layer: Int) -> UnsafeMutablePointer<Float> {
        precondition(slot >= 0 && slot < sequences, "state slot \(slot) of \(sequences)")
        return states + (slot * shape.count + layer) * shape.stateFloats
    }

    /// Copies a slot's whole state into a checkpoint (`save`) or back (`load`): the batch's
    /// `stateSaves` after its pass, its `stateLoads` before.
    func save(slot: Int, to checkpoint: Int) {
        precondition(slot >= 0 && slot < sequences && checkpoint >= 0 && checkpoint < checkpointCount, "state slot \(slot), checkpoint \(checkpoint)")
        (checkpoints + checkpoint * shape.slotFloats).update(from: states + slot * shape.slotFloats, count: shape.slotFloats)
    }

    func load(_ checkpoint: Int, into slot: Int) {
        precondition(slot >= 0 && slot < sequences && checkpoint >= 0 && checkpoint < checkpointCount, "state slot \(slot), checkpoint \(checkpoint)")
        (states + slot * shape.slotFloats).update(from: checkpoints + checkpoint * shape.slotFloats, count: shape.slotFloats)
    }

    func deallocate() {
        for p in [states, checkpoints, qkv, z, beta, alpha, out] { p.deallocate() }
    }
}

extension TransformerOps {
    /// y = the DeltaNet block of `rows` rows of x (y may be x), as llama.cpp's qwen35 graph:
    /// Q|K|V = causal conv (with the sequence's last inputs) of attn_qkv · x, then SiLU; Q and K
    /// L2-normalised per head; per value head the state S decays by exp(softplus(alpha·x + dt)·a),
    /// takes the delta rule's write of v against what S recalls for k, with strength
    /// sigmoid(beta·x), and gives o = Sᵀq / √state; o is RMS-normed per head, times SiLU(z),
    /// then ssm_out. A sequence whose first row here is position 0 starts from a zero state.
    func deltaNet(_ x: UnsafePointer<Float>, rows n: Int, _ l: DeltaNetLayer, batch: ForwardBatch, into y: UnsafeMutablePointer<Float>, ws: Workspace) {
        let s = ws.deltaNet!, d = s.shape
        project(x, rows: n, l, d, s, ws: ws)
        // each sequence's rows, in order (a batch keeps a sequence's tokens in position order)
        var rowsOf = [[Int]](repeating: [], count: batch.tables.count)
        for t in 0..<n { rowsOf[batch.sequence[t]].append(t) }
        let eps = config.normEps
        profiler.measure(.other) {
            for (seq, rows) in rowsOf.enumerated() where !rows.isEmpty {
                let st = s.state(slot: batch.stateSlots[seq], layer: l.index)
                if batch.positions[rows[0]] == 0 { st.update(repeating: 0, count: d.stateFloats) }
                convolve(rows, l, d, state: st, s)
                for t in rows {
                    let q = s.qkv + t * d.convDim, k = q + d.keyDim
                    for h in 0..<d.kHeads {
                        l2Normalize(q + h * d.state, d.state, eps)
                        l2Normalize(k + h * d.state, d.state, eps)
                    }
                    for h in 0..<d.vHeads {
                        s.beta[t * d.vHeads + h] = 1 / (1 + expf(-s.beta[t * d.vHeads + h]))
                        let u = s.alpha[t * d.vHeads + h] + l.dtBias.values[h]
                        s.alpha[t * d.vHeads + h] = (u > 20 ? u : log1pf(expf(u))) * l.a.values[h] // ggml's softplus
                    }
                }
            }
        }
        // the recurrence: each (sequence, value head) its own, its rows in order
        let items = rowsOf.enumerated().flatMap { seq, rows in rows.isEmpty ? [] : (0..<d.vHeads).map { (seq, $0) } }
        profiler.measure(.attention) {
            pool.run(work: n * d.vHeads * d.state * d.state * 4) { ith, nth in
                let delta = UnsafeMutablePointer<Float>.allocate(capacity: d.state)
                defer { delta.deallocate() }
                for i in ThreadPool.share(items.count, ith, nth) {
                    let (seq, h) = items[i]
                    let st = s.state(slot: batch.stateSlots[seq], layer: l.index)
                    recur(rowsOf[seq], head: h, d, state: st + (d.conv - 1) * d.convDim + h * d.state * d.state, s, delta: delta)
                }
            }
        }
        profiler.measure(.norm) {
            l.norm.values.withUnsafeBufferPointer { w in
                for t in 0..<n {
                    for h in 0..<d.vHeads {
                        let o = s.out + t * d.valueDim + h * d.state, z = s.z + t * d.valueDim + h * d.state
                        ck_rms_norm(o, w.baseAddress, o, Int64(d.state), eps)
                        for j in 0..<d.state { o[j] *= z[j] / (1 + expf(-z[j])) }
                    }
                }
            }
        }
        matmul(s.out, rows: n, [(l.out, y)], ws: ws)
    }

    /// s.qkv, s.z, s.beta, s.alpha of `rows` rows of x: the products, and Qwen3-Next's grouped
    /// ones sorted into those (llama.cpp's views of ssm_in and ssm_ba, per key head).
    private func project(_ x: UnsafePointer<Float>, rows n: Int, _ l: DeltaNetLayer, _ d: DeltaNetShape, _ s: DeltaNetScratch, ws: Workspace) {
        var pairs: [(WeightMatrix, UnsafeMutablePointer<Float>)] = []
        switch l.inputs {
        case let .apart(qkv, gate): pairs += [(qkv, s.qkv), (gate, s.z)]
        case let .grouped(qkvz): pairs.append((qkvz, s.out))
        }
        switch l.rates {
        case let .apart(beta, alpha): pairs += [(beta, s.beta), (alpha, s.alpha)]
        case let .grouped(ba): pairs.append((ba, s.beta)) // rows of 2·vHeads, sorted below
        }
        matmul(x, rows: n, pairs, ws: ws)
        let r = d.vHeads / d.kHeads, hk = d.state, hv = r * d.state
        profiler.measure(.other) {
            if case let .grouped(qkvz) = l.inputs {
                // per key head g: q (hk), k (hk), its value heads' v (hv), then their z (hv)
                let width = qkvz.rows, group = 2 * hk + 2 * hv
                for t in 0..<n {
                    let src = s.out + t * width, qkv = s.qkv + t * d.convDim, z = s.z + t * d.valueDim
                    for g in 0..<d.kHeads {
                        let b = src + g * group
                        (qkv + g * hk).update(from: b, count: hk)
                        (qkv + d.keyDim + g * hk).update(from: b + hk, count: hk)
                        (qkv + 2 * d.keyDim + g * hv).update(from: b + 2 * hk, count: hv)
                        (z + g * hv).update(from: b + 2 * hk + hv, count: hv)
                    }
                }
            }
            if case .grouped = l.rates {
                // per key head g: its value heads' betas (r), then their alphas (r); row t's
                // betas land before row t's own products (t·vHeads <= 2t·vHeads), so each row is
                // read out first
                var row = [Float](repeating: 0, count: 2 * d.vHeads)
                for t in 0..<n {
                    row.withUnsafeMutableBufferPointer { $0.baseAddress!.update(from: s.beta + t * 2 * d.vHeads, count: 2 * d.vHeads) }
                    for g in 0..<d.kHeads {
                        for i in 0..<r {
                            s.beta[t * d.vHeads + g * r + i] = row[g * 2 * r + i]
                            s.alpha[t * d.vHeads + g * r + i] = row[g * 2 * r + r + i]
                        }
                    }
                }
            }
        }
    }

    /// The causal convolution of `rows`' Q|K|V channels in place (ggml_ssm_conv: tap k of channel
    /// c multiplies the input k - (conv - 1) steps back, the earliest from `state`), then SiLU;
    /// `state` keeps the last conv - 1 inputs.
    private func convolve(_ rows: [Int], _ l: DeltaNetLayer, _ d: DeltaNetShape, state: UnsafeMutablePointer<Float>, _ s: DeltaNetScratch) {
        let taps = d.conv, cd = d.convDim
        // the window: the state's conv - 1 inputs, then this row's
        var window = [Float](repeating: 0, count: taps * cd)
        window.withUnsafeMutableBufferPointer { win in
            let wp = win.baseAddress!
            wp.update(from: state, count: (taps - 1) * cd)
            l.convWeight.values.withUnsafeBufferPointer { w in
                for t in rows {
                    let x = s.qkv + t * cd
                    (wp + (taps - 1) * cd).update(from: x, count: cd)
                    for c in 0..<cd {
                        var sum: Float = 0
                        for k in 0..<taps { sum += wp[k * cd + c] * w[c * taps + k] }
                        x[c] = sum / (1 + expf(-sum))
                    }
                    wp.update(from: wp + cd, count: (taps - 1) * cd) // slide by one input
                }
            }
            state.update(from: wp, count: (taps - 1) * cd)
        }
    }

    /// One value head's delta rule over `rows` (ggml_gated_delta_net, its float order): the state
    /// is stored transposed, m[j][i] = S[i][j], so each row j is contiguous.
    private func recur(_ rows: [Int], head h: Int, _ d: DeltaNetShape, state m: UnsafeMutablePointer<Float>, _ s: DeltaNetScratch,
                       delta: UnsafeMutablePointer<Float>) {
        let n = d.state, kh = d.keyHead(h), scale = 1 / Float(n).squareRoot()
        for t in rows {
            let q = s.qkv + t * d.convDim + kh * n, k = q + d.keyDim, v = s.qkv + t * d.convDim + 2 * d.keyDim + h * n
            let decay = expf(s.alpha[t * d.vHeads + h]), beta = s.beta[t * d.vHeads + h]
            for i in 0..<n * n { m[i] *= decay }
            for j in 0..<n { delta[j] = (v[j] - ck_dot_f32(m + j * n, k, Int64(n))) * beta }
            for j in 0..<n { ck_axpy_f32(delta[j], k, m + j * n, Int64(n)) }
            let o = s.out + t * d.valueDim + h * n
            for j in 0..<n { o[j] = ck_dot_f32(m + j * n, q, Int64(n)) * scale }
        }
    }

    /// x / √(Σx² + eps), as llama.cpp's build_gdn_l2_norm (an RMSNorm of eps/n, over √n).
    private func l2Normalize(_ x: UnsafeMutablePointer<Float>, _ n: Int, _ eps: Float) {
        var ss: Float = 0
        for i in 0..<n { ss += x[i] * x[i] }
        let r = 1 / (ss / Float(n) + eps / Float(n)).squareRoot() / Float(n).squareRoot()
        for i in 0..<n { x[i] *= r }
    }
}
