/// GPUForward's Gemma 4 pieces: per-layer embeddings (PerLayerEmbeddings.swift, as
/// CPUForward's perLayerInputs and perLayerEmbedding) and the layers' output scales.
struct GPUPerLayerBuffers {
    /// `maxTokens` rows each: the per-layer inputs (layers × width a row), the token table's
    /// rows they mix in, one layer's gated slice (width a row) and its projection (model width).
    let inputs, tokens, gated, out: GPUBuffer

    init(device: GPUDevice, config c: ModelConfig, maxTokens: Int) throws {
        let w = c.perLayerWidth, all = c.layers * w
        inputs = try device.makeBuffer(bytes: maxTokens * all * 4, memory: .device, label: "per-layer inputs")
        tokens = try device.makeBuffer(bytes: maxTokens * all * 4, memory: .device, label: "per-layer token rows")
        gated = try device.makeBuffer(bytes: maxTokens * w * 4, memory: .device, label: "per-layer gated slice")
        out = try device.makeBuffer(bytes: maxTokens * c.dim * 4, memory: .device, label: "per-layer projection")
    }

    static func bytes(config c: ModelConfig, maxTokens: Int) -> Int {
        c.perLayerWidth == 0 ? 0 : maxTokens * (2 * c.layers * c.perLayerWidth + c.perLayerWidth + c.dim) * 4
    }
}

extension GPUForward {
    func scale(_ a: Activation, by s: Float) {
        precondition(stride(a) == config.dim, "a scale over rows of \(stride(a)) floats")
        let count = n * config.dim
        dispatch(GPUKernels.scale, [act(a)], GPUParams.Scale(count: UInt32(count), s: s), (min((count + 255) / 256, 65535), 1, 1), .other)
    }

    func perLayerInputs(_ p: PerLayerEmbeddings) {
        let b = perLayer!, c = config, all = c.layers * p.width
        multiply(p.modelProj, act(.x), rows: n, xStride: stride(.x), into: GPUBinding(b.inputs), yStride: all, op: .matmul)
        dispatch(GPUKernels.getRows(p.tokens.type), [GPUBinding(weights[p.tokens.data]!), input(sections.tokens, maxTokens), GPUBinding(b.tokens)],
                 GPUParams.GetRows(k: UInt32(all), rowBytes: UInt32(p.tokens.rowBytes), n: UInt32(n), scale: Float(p.width).squareRoot()), (n, 1, 1), .embed)
        dispatch(GPUKernels.perLayerInputs, [GPUBinding(b.inputs), GPUBinding(b.tokens), GPUBinding(vectors[p.projNorm.name]!)],
                 GPUParams.PerLayerInputs(width: UInt32(p.width), layers: UInt32(c.layers), eps: c.normEps,
                                          projScale: 1 / Float(c.dim).squareRoot(), mix: 1 / Float(2).squareRoot()),
                 (c.layers, n, 1), .embed)
    }

    func perLayerEmbedding(layer: Int, _ pb: PerLayerBlock) {
        let b = perLayer!, c = config, w = pb.gate.rows, d = c.dim
        multiply(pb.gate, act(.x), rows: n, xStride: stride(.x), into: GPUBinding(b.gated), yStride: w, op: .matmul)
        dispatch(GPUKernels.perLayerGate, [GPUBinding(b.gated), GPUBinding(b.inputs)],
                 GPUParams.PerLayerGate(width: UInt32(w), rows: UInt32(n), iStride: UInt32(c.layers * w), iOff: UInt32(layer * w)),
                 ((w + 255) / 256, n, 1), .mlpActivation)
        multiply(pb.proj, GPUBinding(b.gated), rows: n, xStride: w, into: GPUBinding(b.out), yStride: d, op: .matmul)
        normRows(GPUBinding(b.out), xStride: d, width: d, rows: n, gain: pb.postNorm, into: GPUBinding(b.out), yStride: d)
        dispatch(GPUKernels.add, [act(.x), GPUBinding(b.out)], GPUParams.Add(count: UInt32(n * d)), ((n * d + 255) / 256, 1, 1), .other)
    }
}
