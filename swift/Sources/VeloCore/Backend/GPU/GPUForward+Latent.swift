/// GPUForward's multi-head latent attention (MLA.swift, as CPUForward's latentQKV and
/// latentOutput): the query and latent products, the latent's norm, copy_rows moving the parts
/// into the [RoPE part, latent] rows of Q, K and V, each head's attn_k_b and attn_v_b product.
/// Attention itself reads only the latent of each V row (GPUForward.valueRange).
struct GPULatentBuffers {
    /// `maxTokens` rows each: the query product, q_a's, kv_a's, the normed latent, and one
    /// head's gathered input and its product.
    let q, qa, kva, latent, gin, gout: GPUBuffer
    /// A decode step's head products at once (`decodeRows` tokens × heads): the heads as the
    /// experts of matvec_id's routing (moe_route's sections, written by the host: pair
    /// h·n + t reads row t·heads + h of its input, head h's rows), and their outputs.
    let routing, heads: GPUBuffer
    let cap: Int

    static func widths(_ c: ModelConfig) -> [Int] {
        let s = c.mla!, g = max(s.nope, s.kvLora, s.vHead)
        return [c.heads * s.queryHead, max(s.qLora, 1), s.rowWidth, s.kvLora, g, g]
    }

    init(device: GPUDevice, config c: ModelConfig, maxTokens: Int, decodeRows: Int) throws {
        let w = Self.widths(c), s = c.mla!
        func make(_ i: Int, _ label: String) throws -> GPUBuffer { try device.makeBuffer(bytes: maxTokens * w[i] * 4, memory: .device, label: label) }
        (q, qa, kva, latent, gin, gout) = (try make(0, "MLA query products"), try make(1, "MLA q_a products"), try make(2, "MLA kv_a products"),
                                           try make(3, "MLA latents"), try make(4, "MLA head inputs"), try make(5, "MLA head products"))
        cap = MoEBuffers.cap(pairs: decodeRows * c.heads, alignment: device.bindingAlignment)
        routing = try device.makeBuffer(bytes: (5 * cap + 2 * c.heads) * 4, memory: .upload, label: "MLA head routing")
        heads = try device.makeBuffer(bytes: decodeRows * c.heads * max(s.kvLora, s.vHead) * 4, memory: .device, label: "MLA head outputs")
    }

    static func bytes(config c: ModelConfig, maxTokens: Int, decodeRows: Int) -> Int {
        guard let s = c.mla else { return 0 }
        return maxTokens * widths(c).reduce(0, +) * 4 + (5 * decodeRows * c.heads + 2 * c.heads) * 4 + 1024 + decodeRows * c.heads * max(s.kvLora, s.vHead) * 4
    }

    /// The routing of a decode step of `tokens` tokens: pair h·tokens + t is head h's row of token t.
    func writeRouting(tokens n: Int, heads: Int) {
        let r = routing.contents!.assumingMemoryBound(to: UInt32.self)
        for h in 0..<heads {
            for t in 0..<n {
                r[h * n + t] = UInt32(t * heads + h)            // rows: the input row
                r[3 * cap + h * n + t] = UInt32(h)              // ids: the head
            }
            r[5 * cap + 2 * h] = UInt32(h * n)                  // experts: first row, rows
            r[5 * cap + 2 * h + 1] = UInt32(n)
        }
    }

    func params(_ s: GPUForward.ExpertStack) -> GPUParams.Routing {
        GPUParams.Routing(expertWords: UInt32(s.expertBytes / 2), gather: 1, rowsOff: 0, idsOff: UInt32(3 * cap), expertsOff: UInt32(5 * cap))
    }
}

extension GPUForward {
    /// What attention's output holds of each V head: its values from `offset`, `count` of them
    /// (MLA: the latent after the RoPE part; else the whole head).
    func valueRange(_ s: HeadShape) -> (offset: Int, count: Int) {
        config.mla.map { ($0.rope, $0.kvLora) } ?? (0, s.headDim)
    }

    /// Y's rows (a, b) = X's, `width` values each (copy_rows), for a < a.count, b < b.count.
    func copyRows(_ x: GPUBinding, _ xa: Int, _ xb: Int, _ xOff: Int, into y: GPUBinding, _ ya: Int, _ yb: Int, _ yOff: Int,
                  width: Int, rows: (a: Int, b: Int)) {
        dispatch(GPUKernels.copyRows, [x, y],
                 GPUParams.CopyRows(width: UInt32(width), xA: UInt32(xa), xB: UInt32(xb), xOff: UInt32(xOff), yA: UInt32(ya), yB: UInt32(yb), yOff: UInt32(yOff)),
                 ((width + 63) / 64, rows.b, rows.a), .other)
    }

    /// The heads' weights as one stack, for a decode step (else nil: a head at a time).
    private func headStack(_ w: [WeightMatrix]) -> ExpertStack? { n <= matvecMaxRows ? expertStacks[w[0].data] : nil }

    /// Y row h·n + t = head h's weight · X row t·heads + h (xStride apart), every head at once:
    /// matvec_dot_id_T on 8-bit rows where the type has it, else matvec_id_T.
    private func headProduct(_ s: ExpertStack, _ x: GPUBinding, xStride: Int, into y: GPUBinding, yStride: Int) {
        let b = latent!, w = s.expert, pairs = n * config.heads
        let params = GPUParams.ExpertProduct(product: GPUParams.Product(k: UInt32(w.cols), n: UInt32(w.rows), m: UInt32(pairs), rowBytes: UInt32(w.rowBytes),
                                                                        xStride: UInt32(xStride), yStride: UInt32(yStride)),
                                             routing: b.params(s))
        if let q8, GPUKernels.dotTypes.contains(w.type) {
            quantizeQ8(x, q8, rows: pairs, xStride: xStride, k: w.cols, op: .matmul)
            dispatch(GPUKernels.matvecDotID(w.type, k: w.cols), [GPUBinding(s.buffer), GPUBinding(q8.values), GPUBinding(q8.scales), y, GPUBinding(b.routing)],
                     params, GPUKernels.matvecDotIDGroups(n: w.rows, k: w.cols, pairs: pairs), .matmul)
        } else {
            dispatch(GPUKernels.matvecID(w.type), [GPUBinding(s.buffer), x, y, GPUBinding(b.routing)], params,
                     GPUKernels.matvecIDGroups(n: w.rows, pairs: pairs), .matmul)
        }
    }

    func latentQKV(_ src: Activation, _ l: MLALayer) {
        let s = config.mla!, b = latent!, heads = config.heads, qh = s.queryHead, row = s.rowWidth
        let x = act(src), xs = stride(src), qRow = heads * qh
        switch l.query {
        case let .direct(wq):
            multiply(wq, x, rows: n, xStride: xs, into: GPUBinding(b.q), yStride: qRow, op: .matmul)
        case let .lowRank(a, norm, wb):
            multiply(a, x, rows: n, xStride: xs, into: GPUBinding(b.qa), yStride: s.qLora, op: .matmul)
            normRows(GPUBinding(b.qa), xStride: s.qLora, width: s.qLora, rows: n, gain: norm, into: GPUBinding(b.qa), yStride: s.qLora)
            multiply(wb, GPUBinding(b.qa), rows: n, xStride: s.qLora, into: GPUBinding(b.q), yStride: qRow, op: .matmul)
        }
        multiply(l.kvA, x, rows: n, xStride: xs, into: GPUBinding(b.kva), yStride: row, op: .matmul)
        // kv_a's row is [latent, RoPE part]; K's and V's [RoPE part, normed latent]
        normRows(GPUBinding(b.kva), xStride: row, width: s.kvLora, rows: n, gain: l.kvANorm, into: GPUBinding(b.latent), yStride: s.kvLora)
        for dst in [Activation.k, .v] {
            copyRows(GPUBinding(b.kva), row, 0, s.kvLora, into: act(dst), stride(dst), 0, 0, width: s.rope, rows: (n, 1))
            copyRows(GPUBinding(b.latent), s.kvLora, 0, 0, into: act(dst), stride(dst), 0, s.rope, width: s.kvLora, rows: (n, 1))
        }
        // each head's query: its RoPE part, then q_nope through its attn_k_b into latent space
        copyRows(GPUBinding(b.q), qRow, qh, s.nope, into: act(.q), stride(.q), row, 0, width: s.rope, rows: (n, heads))
        if let stack = headStack(l.kB) {
            // a decode step: every head's product in one dispatch, its rows head-major
            headProduct(stack, GPUBinding(b.q), xStride: qh, into: GPUBinding(b.heads), yStride: s.kvLora)
            copyRows(GPUBinding(b.heads), s.kvLora, n * s.kvLora, 0, into: act(.q), stride(.q), row, s.rope, width: s.kvLora, rows: (n, heads))
            return
        }
        for h in 0..<heads {
            copyRows(GPUBinding(b.q), qRow, 0, h * qh, into: GPUBinding(b.gin), s.nope, 0, 0, width: s.nope, rows: (n, 1))
            multiply(l.kB[h], GPUBinding(b.gin), rows: n, xStride: s.nope, into: GPUBinding(b.gout), yStride: s.kvLora, op: .matmul)
            copyRows(GPUBinding(b.gout), s.kvLora, 0, 0, into: act(.q), stride(.q), 0, h * row + s.rope, width: s.kvLora, rows: (n, 1))
        }
    }

    func latentOutput(_ l: MLALayer, into dst: Activation) {
        let s = config.mla!, b = latent!, heads = config.heads
        // attention's rows hold each head's latent (valueRange), kvLora values a head
        if let stack = headStack(l.vB) {
            headProduct(stack, act(.attn), xStride: s.kvLora, into: GPUBinding(b.heads), yStride: s.vHead)
            copyRows(GPUBinding(b.heads), s.vHead, n * s.vHead, 0, into: act(dst), stride(dst), s.vHead, 0, width: s.vHead, rows: (n, heads))
            return
        }
        for h in 0..<heads {
            copyRows(act(.attn), stride(.attn), 0, h * s.kvLora, into: GPUBinding(b.gin), s.kvLora, 0, 0, width: s.kvLora, rows: (n, 1))
            multiply(l.vB[h], GPUBinding(b.gin), rows: n, xStride: s.kvLora, into: GPUBinding(b.gout), yStride: s.vHead, op: .matmul)
            copyRows(GPUBinding(b.gout), s.vHead, 0, 0, into: act(dst), stride(dst), 0, h * s.vHead, width: s.vHead, rows: (n, 1))
        }
    }
}
