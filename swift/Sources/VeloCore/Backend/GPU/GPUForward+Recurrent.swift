/// GPUForward's hybrid layers (Qwen3.5, Qwen3-Next): the Gated DeltaNet blocks over each
/// sequence's recurrent state, which lives on the GPU (a slot per running sequence, the prefix
/// cache's checkpoints beside them, copied by the batch's stateLoads and stateSaves), and the
/// gated attention's query split and output gate.
struct GPURecurrentBuffers {
    let shape: DeltaNetShape
    /// [slot][DeltaNet layer][stateFloats], as the CPU's DeltaNetScratch, but each head's S
    /// row-major (deltanet_recur: the transpose of the CPU's).
    let states: GPUBuffer
    /// [checkpoint][DeltaNet layer][stateFloats] (nil without the prefix cache).
    let checkpoints: GPUBuffer?
    /// One pass's rows: the input products (Q|K|V before the convolution, or Qwen3-Next's
    /// grouped ssm_in), z, beta (or ssm_ba's both), alpha, the convolved Q|K|V, the output.
    let input, z, beta, alpha, qkv, out: GPUBuffer
    /// The gated attention's query products (2·qDim a row: each head's query, then its gate).
    let gatedQuery: GPUBuffer

    init(device: GPUDevice, config c: ModelConfig, maxTokens: Int, sequences: Int, checkpoints: Int) throws {
        let d = c.deltaNet!
        shape = d
        func buffer(_ floats: Int, _ label: String) throws -> GPUBuffer {
            try device.makeBuffer(bytes: max(floats, 4) * 4, memory: .device, label: label)
        }
        let slotBytes = d.slotFloats * 4
        guard sequences * slotBytes <= device.maxBindingBytes else {
            throw VeloError(.unsupported, "the recurrent states of \(sequences) sequences (\((sequences * slotBytes) >> 20) MiB) are more than one GPU buffer binding may be on \(device.name): lower --max-batch-size")
        }
        states = try buffer(sequences * d.slotFloats, "recurrent states")
        self.checkpoints = checkpoints > 0 ? try buffer(checkpoints * d.slotFloats, "recurrent state checkpoints") : nil
        let f = Self.rowFloats(d)
        input = try buffer(maxTokens * f.input, "DeltaNet input products")
        z = try buffer(d.fusedInputs ? 1 : maxTokens * d.valueDim, "DeltaNet output gates")
        beta = try buffer(maxTokens * 2 * d.vHeads, "DeltaNet betas")
        alpha = try buffer(maxTokens * d.vHeads, "DeltaNet alphas")
        qkv = try buffer(maxTokens * d.convDim, "DeltaNet Q|K|V")
        out = try buffer(maxTokens * d.valueDim, "DeltaNet outputs")
        gatedQuery = try buffer(maxTokens * 2 * c.qDim, "gated query products")
    }

    private static func rowFloats(_ d: DeltaNetShape) -> (input: Int, perRow: Int) {
        let input = d.convDim + (d.fusedInputs ? d.valueDim : 0)
        return (input, input + (d.fusedInputs ? 0 : d.valueDim) + 3 * d.vHeads + d.convDim + d.valueDim)
    }

    /// Bytes `init` allocates (the memory plan's share of them).
    static func bytes(config c: ModelConfig, maxTokens: Int, sequences: Int, checkpoints: Int) -> Int {
        guard let d = c.deltaNet else { return 0 }
        return ((sequences + checkpoints) * d.slotFloats + maxTokens * (rowFloats(d).perRow + 2 * c.qDim)) * 4
    }
}

extension GPUForward {
    func deltaNet(_ src: Activation, _ l: DeltaNetLayer, into dst: Activation) {
        let r = recurrent!, d = r.shape, x = act(src), xs = stride(src)
        func product(_ w: WeightMatrix, _ y: GPUBuffer, _ width: Int) {
            multiply(w, x, rows: n, xStride: xs, into: GPUBinding(y), yStride: width, op: .matmul)
        }
        switch l.inputs {
        case let .apart(qkv, gate):
            product(qkv, r.input, d.convDim)
            product(gate, r.z, d.valueDim)
        case let .grouped(qkvz):
            product(qkvz, r.input, qkvz.rows)
        }
        switch l.rates {
        case let .apart(beta, alpha):
            product(beta, r.beta, d.vHeads)
            product(alpha, r.alpha, d.vHeads)
        case let .grouped(ba):
            product(ba, r.beta, 2 * d.vHeads)
        }
        // an input row: Q|K|V, or ssm_in's Q|K|V and z (which deltanet_recur then reads there)
        let grouped = d.fusedInputs, inStride = grouped ? d.convDim + d.valueDim : d.convDim
        let ratesGrouped = l.groupedRates, layerOff = l.index * d.stateFloats, hv = d.vHeads / d.kHeads * d.state
        let seqs = input(sections.dnseq, 4 * batch.tables.count), rows = input(sections.dnrows, n)
        dispatch(GPUKernels.deltaNetConv,
                 [GPUBinding(r.input), GPUBinding(vectors[l.convWeight.name]!), GPUBinding(r.states), GPUBinding(r.qkv), seqs, rows],
                 GPUParams.DeltaNetConv(convDim: UInt32(d.convDim), taps: UInt32(d.conv), inStride: UInt32(inStride),
                                        slotFloats: UInt32(d.slotFloats), layerOff: UInt32(layerOff), grouped: grouped ? 1 : 0,
                                        keyDim: UInt32(d.keyDim), hk: UInt32(d.state), hv: UInt32(hv)),
                 ((d.convDim + 63) / 64, batch.tables.count, 1), .other)
        dispatch(GPUKernels.deltaNetRecur,
                 [GPUBinding(r.qkv), GPUBinding(grouped ? r.input : r.z), GPUBinding(r.beta), GPUBinding(ratesGrouped ? r.beta : r.alpha), GPUBinding(r.states),
                  seqs, rows, GPUBinding(r.out), GPUBinding(vectors[l.dtBias.name]!), GPUBinding(vectors[l.a.name]!), GPUBinding(vectors[l.norm.name]!)],
                 GPUParams.DeltaNetRecur(n: UInt32(d.state), kHeads: UInt32(d.kHeads), vHeads: UInt32(d.vHeads), convDim: UInt32(d.convDim),
                                         slotFloats: UInt32(d.slotFloats), layerOff: UInt32(layerOff + (d.conv - 1) * d.convDim),
                                         grouped: grouped ? 1 : 0, groupedRates: ratesGrouped ? 1 : 0, groupedValues: d.groupedValues ? 1 : 0,
                                         zStride: UInt32(grouped ? inStride : d.valueDim),
                                         betaStride: UInt32(ratesGrouped ? 2 * d.vHeads : d.vHeads), alphaStride: UInt32(ratesGrouped ? 2 * d.vHeads : d.vHeads),
                                         eps: config.normEps),
                 (d.vHeads, batch.tables.count, 1), .attention)
        multiply(l.out, GPUBinding(r.out), rows: n, xStride: d.valueDim, into: act(dst), yStride: stride(dst), op: .matmul)
    }

    func gatedQuery(_ src: Activation, _ w: WeightMatrix) {
        let r = recurrent!, c = config
        multiply(w, act(src), rows: n, xStride: stride(src), into: GPUBinding(r.gatedQuery), yStride: 2 * c.qDim, op: .matmul)
        dispatch(GPUKernels.splitQuery, [GPUBinding(r.gatedQuery), act(.q)],
                 GPUParams.GatedQuery(qDim: UInt32(c.qDim), headDim: UInt32(c.headDim), rows: UInt32(n), stride: UInt32(stride(.q))),
                 ((c.qDim + 255) / 256, n, 1), .other)
    }

    func gateAttention() {
        let c = config
        dispatch(GPUKernels.sigmoidGate, [act(.attn), GPUBinding(recurrent!.gatedQuery)],
                 GPUParams.GatedQuery(qDim: UInt32(c.qDim), headDim: UInt32(c.headDim), rows: UInt32(n), stride: UInt32(stride(.attn))),
                 ((c.qDim + 255) / 256, n, 1), .other)
    }

    /// The DeltaNet kernels' sequence table (first index into the row list, rows, state slot,
    /// 1 where the first row is position 0) and row list (each sequence's rows in order).
    func recurrentInputs(_ b: ForwardBatch) -> (seqs: [Int32], rows: [Int32]) {
        var rowsOf = [[Int32]](repeating: [], count: b.tables.count)
        for t in 0..<b.count { rowsOf[b.sequence[t]].append(Int32(t)) }
        var seqs: [Int32] = [], rows: [Int32] = []
        for (s, r) in rowsOf.enumerated() {
            seqs += [Int32(rows.count), Int32(r.count), Int32(b.stateSlots[s]), r.first.map { b.positions[Int($0)] == 0 ? 1 : 0 } ?? 0]
            rows += r
        }
        return (seqs, rows)
    }

    /// Each batch sequence's slot copied into `backup` (at its place among the batch's
    /// sequences), or back from it (`restore`).
    func backUpStates(_ b: ForwardBatch, _ backup: GPUBuffer, restore: Bool) {
        let states = recurrent!.states, bytes = recurrent!.shape.slotFloats * 4
        for (i, slot) in b.stateSlots.enumerated() {
            let live = GPUBinding(states, offset: slot * bytes, size: bytes), saved = GPUBinding(backup, offset: i * bytes, size: bytes)
            if restore { device.copy(saved, to: live, op: .other) } else { device.copy(live, to: saved, op: .other) }
        }
    }

    /// The batch's state copies: checkpoints into slots before the pass (`loads`), slots into
    /// checkpoints after it.
    func copyStates(_ b: ForwardBatch, loads: Bool) {
        guard let r = recurrent else { return }
        let bytes = r.shape.slotFloats * 4
        func slot(_ i: Int) -> GPUBinding { GPUBinding(r.states, offset: i * bytes, size: bytes) }
        func checkpoint(_ i: Int) -> GPUBinding { GPUBinding(r.checkpoints!, offset: i * bytes, size: bytes) }
        if loads {
            for (c, s) in b.stateLoads { device.copy(checkpoint(c), to: slot(s), op: .other) }
        } else {
            for (s, c) in b.stateSaves { device.copy(slot(s), to: checkpoint(c), op: .other) }
        }
    }
}
