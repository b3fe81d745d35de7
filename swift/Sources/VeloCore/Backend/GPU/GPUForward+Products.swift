#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// GPUForward's products: the matmuls (matvec, the 8-bit decode kernels, the tensor-core tiles
/// and split-K), the gated FFN, the experts and the logits.
extension GPUForward {
    func matmul(_ src: Activation, _ pairs: [(WeightMatrix, Activation)]) {
        if pairs.count == 3, pairs[0].1 == .q, pairs[1].1 == .k, pairs[2].1 == .v, let m = qkvWeights[pairs[0].0.data],
           m.k == pairs[1].0.data, m.v == pairs[2].0.data {
            // the concatenated weight: its rows land as Q|K|V rows, the three views
            let q = pairs[0].0, rows = config.qDim + 2 * config.kvDim
            let w = WeightMatrix(name: q.name, type: q.type, data: q.data, rows: rows, cols: q.cols, rowBytes: q.rowBytes)
            multiply(w, act(src), rows: n, xStride: stride(src), into: act(.q), yStride: stride(.q), op: .matmul, weight: GPUBinding(m.buffer),
                     ropeNext: true)
            return
        }
        if q8Out != nil, n == 1, pairs.count == 1, pairs[0].1 == .xn, pairs[0].0.rows == config.dim {
            // a decode token's O or down product waits for the residual's add and norm
            flushQKV()
            flushResidual()
            pendingResidual = (pairs[0].0, src, pairs[0].1)
            return
        }
        products(src, pairs)
    }

    /// Each weight times src's rows, into its activation.
    func products(_ src: Activation, _ pairs: [(WeightMatrix, Activation)]) {
        for (w, dst) in pairs {
            // an activation of its own buffer takes the product's rows as they are (Gemma 4's
            // dense MLP output waits in .attn, model-width rows: FeedForward.mixed)
            if [.attn, .gate, .up].contains(dst) { setRowWidth(dst, w.rows) }
            multiply(w, act(src), rows: n, xStride: stride(src), into: act(dst), yStride: stride(dst), op: .matmul)
        }
    }

    /// A decode token's O or down product joined with the residual's add and the next norm
    /// (matvec_dot_q8out_T, residual mode): `residual` += W·src, and the norm's 8-bit input for
    /// the next product, which applies the norm's 1/rms itself. `out`'s floats are not written.
    func residualProduct(_ w: WeightMatrix, _ src: Activation, residual: Activation, norm: WeightVector, out: Activation) {
        quantizeQ8(act(src), q8!, rows: 1, xStride: stride(src), k: w.cols, op: .matmul)
        precondition(!q8Scaled && w.rows == config.dim)
        let input = q8Buffers(q8Set), outSet = 1 - q8Set, output = q8Buffers(outSet)
        dispatch(GPUKernels.matvecDotQ8Out(w.type, glu: false, scaled: false),
                 [GPUBinding(weights[w.data]!), GPUBinding(input.values), GPUBinding(input.scales), act(residual), GPUBinding(vectors[norm.name]!),
                  GPUBinding(output.values), GPUBinding(output.scales), GPUBinding(q8Out!.sums)],
                 GPUParams.ProductQ8Out(k: UInt32(w.cols), rowBytes: UInt32(w.rowBytes), act: 0, eps: config.normEps), (w.rows / 32, 1, 1), .matmul)
        holdQ8(rowsKey(act(out), rows: 1, xStride: stride(out), k: config.dim), set: outSet, scaled: true)
    }

    /// x16, when this pass's rows of `width` values (whole f16vec4s, so to_f16's rows are the
    /// values themselves) go to tensor-core products and a kernel may write their float16 copy.
    func f16Copy(width: Int) -> GPUBuffer? {
        guard GPUKernels.f16OutFused, f16Inputs, n > matvecMaxRows, width % 4 == 0, let x16, x16.size >= n * width * 2 else { return nil }
        return x16
    }

    /// quantize_q8 of `rows` rows of X into q8, unless it holds them already.
    func quantizeQ8(_ x: GPUBinding, _ q8: (values: GPUBuffer, scales: GPUBuffer), rows: Int, xStride: Int, k: Int, op: Profiler.Op) {
        let key = rowsKey(x, rows: rows, xStride: xStride, k: k)
        if q8Source.map({ $0 != key }) ?? true {
            dispatch(GPUKernels.quantizeQ8, [x, GPUBinding(q8.values), GPUBinding(q8.scales)],
                     GPUParams.QuantizeQ8(k: UInt32(k), m: UInt32(rows), xStride: UInt32(xStride)), GPUKernels.quantizeQ8Groups(k: k, m: rows), op)
            holdQ8(key)
        }
    }

    /// Y = W · X over `rows` activation rows: the matrix×vector kernel for decode-sized batches
    /// (each weight read once for all rows), the tiled one for prefill.
    /// `glu` (decode only, an interleaved pair's weight as `weight`): Y = silu(gate·X) * (up·X),
    /// w.rows counting the interleaved rows.
    func multiply(_ w: WeightMatrix, _ x: GPUBinding, rows: Int, xStride: Int, into y: GPUBinding, yStride: Int, op: Profiler.Op,
                  weight: GPUBinding? = nil, glu: ModelConfig.FFNActivation? = nil, ropeNext: Bool = false) {
        precondition(glu == nil || rows <= matvecMaxRows)
        let params = GPUParams.Product(k: UInt32(w.cols), n: UInt32(w.rows), m: UInt32(rows), rowBytes: UInt32(w.rowBytes), xStride: UInt32(xStride),
                                       yStride: UInt32(yStride), glu: UInt32(glu?.rawValue ?? 0))
        let wb = weight ?? GPUBinding(weights[w.data]!)
        if rows <= matvecMaxRows, let q8, GPUKernels.dotTypes.contains(w.type), op != .output || GPUKernels.outputDot {
            // activations to 8 bits once per input (the Q, K and V products share it), then
            // integer dot products with the weight blocks (not the logits': GPUKernels.outputDot)
            quantizeQ8(x, q8, rows: rows, xStride: xStride, k: w.cols, op: op)
            let input = q8Buffers(q8Set), scaled = q8Scaled
            let buffers = [wb, GPUBinding(input.values), GPUBinding(input.scales), y]
            if ropeNext && rows == 1 && ropeJoin != nil {
                flushQKV()
                pendingQKV = (w, buffers, params, GPUKernels.matvecGroups(n: w.rows, m: 1, dot: true), scaled, []) // for ropeAndStoreKV
            } else if let glu, rows == 1, let o = q8Out, w.rows % 64 == 0 {
                // gate/up writing down's 8-bit input itself (matvec_dot_q8out_T, GLU mode), and Y
                let outSet = 1 - q8Set, output = q8Buffers(outSet)
                dispatch(GPUKernels.matvecDotQ8Out(w.type, glu: true, scaled: scaled),
                         buffers + [GPUBinding(o.sums), GPUBinding(output.values), GPUBinding(output.scales), GPUBinding(o.sums)],
                         GPUParams.ProductQ8Out(k: UInt32(w.cols), rowBytes: UInt32(w.rowBytes), act: UInt32(glu.rawValue), eps: config.normEps), (w.rows / 64, 1, 1), op)
                holdQ8(rowsKey(y, rows: 1, xStride: yStride, k: w.rows / 2), set: outSet)
                return
            } else if scaled {
                preconditionFailure("a product on 8-bit input still waiting for the norm's 1/rms (GPUKernels.q8OutModel let in a layer it does not cover)")
            } else if dotBatch && GPUKernels.dotBatchTakes(rows: rows) {
                dispatch(GPUKernels.matvecDotBatch(w.type, rows: rows), buffers, params, GPUKernels.matvecDotBatchGroups(n: w.rows, m: rows), op)
            } else {
                dispatch(GPUKernels.matvecDot(w.type, rows: rows, n: w.rows, glu: glu != nil), buffers, params,
                         GPUKernels.matvecGroups(n: w.rows, m: rows, dot: true, glu: glu != nil), op)
            }
            if q8Source?.buffer == ObjectIdentifier(y.buffer) { q8Source = nil } // Y overwrote them
        } else if rows <= matvecMaxRows || w.rows <= GPUKernels.matvecAnyRows {
            let k = GPUKernels.matvec(w.type, rows: rows, n: w.rows, glu: glu != nil)
            dispatch(k, [wb, x, y], params, GPUKernels.matvecGroups(n: w.rows, m: rows, glu: glu != nil), op)
        } else if GPUKernels.useCoop(device, w.type), f16Inputs, let x16 {
            // activations to float16 once per input (Q|K|V, gate/up, O and down each have one)
            let kp = GPUKernels.f16Row(w.cols)
            let key = rowsKey(x, rows: rows, xStride: xStride, k: w.cols)
            if x16Source.map({ $0 != key }) ?? true {
                dispatch(GPUKernels.toF16, [x, GPUBinding(x16)], GPUParams.ToF16(k: UInt32(w.cols), m: UInt32(rows), xStride: UInt32(xStride), kp: UInt32(kp)),
                         GPUKernels.toF16Groups(k: w.cols, m: rows), op)
                x16Source = key
            }
            // one split (every unit) unless split-K below
            var coop = GPUParams.CoopProduct(k: params.k, n: params.n, m: params.m, rowBytes: params.rowBytes, xStride: UInt32(kp), yStride: params.yStride,
                                             splitUnits: UInt32.max, plane: 0)
            // the kernel, its grid along N and M, its splits of K and the units (16 values) of each
            let cm2 = self.cm2.contains(w.type) && GPUKernels.useCM2(w.type, rows: rows)
            passUsed = (passUsed.sums || (cm2 && f16Sums.contains(w.type)), true)
            let kernel: GPUKernels.Kernel, g: (Int, Int, Int), splits: Int, splitUnits: Int
            let batchKernel = !cm2 && GPUKernels.useCoopBatch(w.type, rows: rows, k: w.cols)
            if batchKernel {
                let plan = GPUKernels.coopBatchPlan(n: w.rows, k: w.cols, rows: rows, type: w.type)
                (kernel, g) = (GPUKernels.matmulCoopBatch(w.type, rows: rows, n: w.rows, k: w.cols), (plan.groups, plan.rowGroups, 1))
                (splits, splitUnits) = (plan.splits, plan.splitUnits)
            } else {
                kernel = cm2 ? GPUKernels.matmulCM2(w.type, f16Sums: f16Sums.contains(w.type)) : GPUKernels.matmulCoop(w.type, rows: rows)
                g = cm2 ? GPUKernels.matmulCM2Groups(n: w.rows, m: rows) : GPUKernels.matmulCoopGroups(n: w.rows, m: rows)
                splits = GPUKernels.coopSplits(n: w.rows, m: rows, k: w.cols, type: w.type,
                                           tile: cm2 ? (GPUKernels.cm2Shape.tw, GPUKernels.cm2Shape.tx) : nil)
                splitUnits = GPUKernels.coopSplitUnits(k: w.cols, splits: splits, multiple: cm2 ? max(4, w.type.blockSize / 16) : 4)
            }
            if splits > 1, let scratch = gluScratch, y.buffer !== scratch, splits * rows * w.rows * 4 <= scratch.size {
                // split-K: each split's plane of the scratch, then their sum into Y
                let plane = rows * w.rows
                (coop.yStride, coop.splitUnits, coop.plane) = (UInt32(w.rows), UInt32(splitUnits), UInt32(plane))
                let planes = GPUBinding(scratch)
                if batchKernel, GPUKernels.coopBatchSumsSplits, let done = splitDone, g.0 * g.1 <= GPUKernels.coopBatchCounters {
                    // the last split of each tile adds the planes itself
                    dispatch(kernel, [wb, GPUBinding(x16), planes, y, GPUBinding(done)],
                             GPUParams.CoopBatchProduct(product: coop, outStride: UInt32(yStride), splits: UInt32(splits)), (g.0, g.1, splits), op)
                } else {
                    if batchKernel {
                        dispatch(kernel, [wb, GPUBinding(x16), planes, planes, GPUBinding(splitDone!)],
                                 GPUParams.CoopBatchProduct(product: coop, outStride: UInt32(w.rows), splits: 1), (g.0, g.1, splits), op)
                    } else {
                        dispatch(kernel, [wb, GPUBinding(x16), planes], coop, (g.0, g.1, splits), op)
                    }
                    dispatch(GPUKernels.sumSplits, [planes, y],
                             GPUParams.SumSplits(n: UInt32(w.rows), m: UInt32(rows), yStride: UInt32(yStride), splits: UInt32(splits), plane: UInt32(plane)),
                             (min((plane + 255) / 256, 65535), 1, 1), op)
                }
            } else {
                if batchKernel {
                    dispatch(kernel, [wb, GPUBinding(x16), y, y, GPUBinding(splitDone!)], GPUParams.CoopBatchProduct(product: coop, outStride: UInt32(yStride), splits: 1), g, op)
                } else {
                    dispatch(kernel, [wb, GPUBinding(x16), y], coop, g, op)
                }
            }
            if x16Source?.buffer == ObjectIdentifier(y.buffer) { x16Source = nil } // Y overwrote them
        } else {
            let tiles = GPUParams.Tiles(k: params.k, n: params.n, m: params.m, rowBytes: params.rowBytes, xStride: params.xStride, yStride: params.yStride)
            dispatch(GPUKernels.matmul(w.type), [wb, x, y], tiles, GPUKernels.matmulGroups(n: w.rows, m: rows), op)
        }
    }

    func glu(_ a: ModelConfig.FFNActivation, width: Int) {
        let count = n * width
        dispatch(GPUKernels.swiglu, [act(.gate), act(.up)], GPUParams.SwiGLU(count: UInt32(count), act: UInt32(a.rawValue)), ((count + 255) / 256, 1, 1), .mlpActivation)
    }

    /// One matvec in GLU mode for decode; for prefill the interleaved product into gluScratch,
    /// then swiglu_pairs. Pairs not uploaded interleaved take the two products and swiglu.
    func gatedUp(_ src: Activation, gate: WeightMatrix, up: WeightMatrix, _ a: ModelConfig.FFNActivation) {
        // the hidden rows are this MLP's width (the down product reads them so)
        setRowWidth(.gate, gate.rows)
        setRowWidth(.up, gate.rows)
        guard let wb = gatedWeights[gate.data] else {
            matmul(src, [(gate, .gate), (up, .up)])
            glu(a, width: gate.rows)
            return
        }
        let ffn = gate.rows
        let pair = WeightMatrix(name: gate.name, type: gate.type, data: gate.data, rows: 2 * ffn, cols: gate.cols, rowBytes: gate.rowBytes)
        let x = act(src), xStride = stride(src)
        if n <= matvecMaxRows {
            multiply(pair, x, rows: n, xStride: xStride, into: act(.gate), yStride: ffn, op: .matmul, weight: GPUBinding(wb), glu: a)
        } else {
            let s = GPUBinding(gluScratch!)
            multiply(pair, x, rows: n, xStride: xStride, into: s, yStride: 2 * ffn, op: .matmul, weight: GPUBinding(wb))
            let count = n * ffn
            if let x16 = f16Copy(width: ffn) {
                // with to_f16's copy for the down product
                dispatch(GPUKernels.swigluPairsF16, [s, act(.gate), GPUBinding(x16)], GPUParams.GLU(count: UInt32(count), act: UInt32(a.rawValue)),
                         (min((count / 2 + 255) / 256, 65535), 1, 1), .mlpActivation)
                x16Source = rowsKey(act(.gate), rows: n, xStride: ffn, k: ffn)
            } else {
                dispatch(GPUKernels.swigluPairs, [s, act(.gate)], GPUParams.GLU(count: UInt32(count), act: UInt32(a.rawValue)), (min((count + 255) / 256, 65535), 1, 1), .mlpActivation)
            }
        }
    }

    /// The router's product, then moe_route (each token's experts and weights, the pairs grouped
    /// by expert, all on the device: no wait), one expert-indexed product per stacked tensor
    /// (gate and up read each pair's token row from the layer's input, down the pairs' hidden
    /// rows), SwiGLU over all the pairs, and moe_combine's weighted sum into dst.
    func experts(_ src: Activation, _ l: ExpertLayer, routedBy router: Activation, into dst: Activation) {
        let c = config, e = c.experts!, m = moe!, d = c.dim, h = e.ffnDim
        let x = act(src), xs = stride(src)
        if let scale = l.routerScale {
            // Gemma 4's router reads rmsnorm(its rows) · scale (the expert outputs' buffer is
            // free until the down product)
            normRows(act(router), xStride: stride(router), width: d, rows: n, gain: scale, into: GPUBinding(m.output), yStride: d)
            multiply(l.router, GPUBinding(m.output), rows: n, xStride: d, into: GPUBinding(m.router), yStride: e.count, op: .matmul)
        } else {
            precondition(router == src, "a router reading other rows than its experts without a router scale")
            multiply(l.router, x, rows: n, xStride: xs, into: GPUBinding(m.router), yStride: e.count, op: .matmul)
        }
        let b = l.biases
        if let b { addBias(GPUBinding(m.router), b.router, rows: n, stride: e.count) }
        // (Gemma 4's per-expert output factors, or DeepSeek's scale of every weight, go into the
        // weights; any buffer where unused)
        let factors = l.downScale.map { GPUBinding(vectors[$0.name]!) } ?? weightsScale.map { GPUBinding($0) }
        let bias = l.selectionBias.map { GPUBinding(vectors[$0.name]!) }
        dispatch(GPUKernels.moeRoute, [GPUBinding(m.router), GPUBinding(m.routing), factors ?? GPUBinding(m.router), bias ?? GPUBinding(m.router)],
                 GPUParams.MoERoute(tokens: UInt32(n), experts: UInt32(e.count), used: UInt32(e.used), normalize: e.normalizeWeights ? 1 : 0, cap: UInt32(m.cap),
                                    softmaxChosen: e.gating == .softmaxChosen ? 1 : 0, scaled: factors == nil ? 0 : 1, sigmoid: e.gating == .sigmoid ? 1 : 0,
                                    biased: bias == nil ? 0 : 1, groups: UInt32(e.groups?.count ?? 0), groupsUsed: UInt32(e.groups?.used ?? 0)),
                 (1, 1, 1), .other)
        let pairs = n * e.used, gate = expertStacks[l.gate[0].data]!
        if gate.expert.rows == h {
            // gate and up apart (always so where they have biases: each pair's expert's, before the GLU)
            expertProduct(gate, x, xStride: xs, gather: true, into: GPUBinding(m.gate), yStride: h)
            expertProduct(expertStacks[l.up[0].data]!, x, xStride: xs, gather: true, into: GPUBinding(m.up), yStride: h)
            if let b {
                expertBias(GPUBinding(m.gate), b.gate, width: h)
                expertBias(GPUBinding(m.up), b.up, width: h)
            }
            swiglu(GPUBinding(m.gate), GPUBinding(m.up), count: pairs * h, e.glu)
        } else if n <= matvecMaxRows {
            // interleaved: SwiGLU in the product's GLU mode
            expertProduct(gate, x, xStride: xs, gather: true, into: GPUBinding(m.gate), yStride: h, glu: .silu)
        } else {
            // interleaved products (2·ffn a pair, in `up`), then swiglu_pairs
            expertProduct(gate, x, xStride: xs, gather: true, into: GPUBinding(m.up), yStride: 2 * h)
            let count = pairs * h
            dispatch(GPUKernels.swigluPairs, [GPUBinding(m.up), GPUBinding(m.gate)], GPUParams.GLU(count: UInt32(count), act: UInt32(ModelConfig.FFNActivation.silu.rawValue)),
                     (min((count + 255) / 256, 65535), 1, 1), .mlpActivation)
        }
        expertProduct(expertStacks[l.down[0].data]!, GPUBinding(m.gate), xStride: h, gather: false, into: GPUBinding(m.output), yStride: d)
        if let b { expertBias(GPUBinding(m.output), b.down, width: d) }
        var shared = (out: GPUBinding(m.output), gate: GPUBinding(m.output))
        if let sh = l.shared, let out = m.shared {
            let w = e.sharedFFNDim
            multiply(sh.gate, x, rows: n, xStride: xs, into: act(.gate), yStride: w, op: .matmul)
            multiply(sh.up, x, rows: n, xStride: xs, into: act(.up), yStride: w, op: .matmul)
            swiglu(act(.gate), act(.up), count: n * w)
            multiply(sh.down, act(.gate), rows: n, xStride: w, into: GPUBinding(out), yStride: d, op: .matmul)
            // (ungated: DeepSeek's shared experts, added as they are)
            shared = (GPUBinding(out), sh.gateInput.map { GPUBinding(vectors[$0.name]!) } ?? GPUBinding(out))
        }
        let sharedMode: UInt32 = l.shared.map { $0.gateInput == nil ? 2 : 1 } ?? 0
        dispatch(GPUKernels.moeCombine,
                 [act(dst), GPUBinding(m.output), m.section(.slot), m.section(.weight), shared.out, shared.gate],
                 GPUParams.MoECombine(width: UInt32(d), used: UInt32(e.used), sharedExpert: sharedMode, yStride: UInt32(stride(dst)), tokens: UInt32(n)),
                 GPUKernels.moeCombineGroups(tokens: n, width: d, shared: l.shared != nil), .other)
    }

    /// Y = each routed pair's expert times its activation row, over all the pairs of the step
    /// in one dispatch: matvec_id_T for decode-sized batches (a workgroup per pair and few
    /// rows, reading only the chosen experts' weights; matvec_dot_id_T on 8-bit activations
    /// where the device and the type have integer dot products), matmul_id_T's tiles per
    /// expert above.
    /// `gather`: row i of X is pair i's token's row (else X has a row per pair). `glu` (decode,
    /// an interleaved gate/up stack): Y = act(gate·X) * (up·X), as matvec_T's GLU mode.
    private func expertProduct(_ s: ExpertStack, _ x: GPUBinding, xStride: Int, gather: Bool, into y: GPUBinding, yStride: Int,
                               glu: ModelConfig.FFNActivation? = nil) {
        let w = s.expert, e = config.experts!, m = moe!
        precondition(glu == nil || n <= matvecMaxRows)
        let routing = m.routing(expertWords: s.expertBytes / 2, gather: gather)
        var params = GPUParams.ExpertProduct(product: GPUParams.Product(k: UInt32(w.cols), n: UInt32(w.rows), m: UInt32(n * e.used), rowBytes: UInt32(w.rowBytes),
                                                                        xStride: UInt32(xStride), yStride: UInt32(yStride), glu: UInt32(glu?.rawValue ?? 0)),
                                             routing: routing)
        let buffers = [GPUBinding(s.buffer), x, y, GPUBinding(m.routing)]
        if n <= matvecMaxRows, let q8, GPUKernels.dotTypes.contains(w.type) {
            // 8-bit activations (the layer's input rows, or the pairs' hidden rows) and integer
            // dot products, as matvec_dot_T
            quantizeQ8(x, q8, rows: gather ? n : n * e.used, xStride: xStride, k: w.cols, op: .matmul)
            dispatch(GPUKernels.matvecDotID(w.type, k: w.cols), [GPUBinding(s.buffer), GPUBinding(q8.values), GPUBinding(q8.scales), y, GPUBinding(m.routing)],
                     params, GPUKernels.matvecDotIDGroups(n: w.rows, k: w.cols, pairs: n * e.used), .matmul)
            if q8Source?.buffer == ObjectIdentifier(y.buffer) { q8Source = nil } // Y overwrote them
        } else if n <= matvecMaxRows {
            dispatch(GPUKernels.matvecID(w.type), buffers, params, GPUKernels.matvecIDGroups(n: w.rows, pairs: n * e.used), .matmul)
        } else if GPUKernels.useCoop(device, w.type), f16Inputs, let x16 {
            passUsed.inputs = true
            // tensor cores: the input rows (tokens, or pairs for down) to float16 once, then
            // tiles as tall as an expert's rows on average
            let xRows = gather ? n : n * e.used, kp = GPUKernels.f16Row(w.cols)
            let key = rowsKey(x, rows: xRows, xStride: xStride, k: w.cols)
            if x16Source.map({ $0 != key }) ?? true {
                dispatch(GPUKernels.toF16, [x, GPUBinding(x16)], GPUParams.ToF16(k: UInt32(w.cols), m: UInt32(xRows), xStride: UInt32(xStride), kp: UInt32(kp)),
                         GPUKernels.toF16Groups(k: w.cols, m: xRows), .matmul)
                x16Source = key
            }
            let perExpert = (n * e.used + e.count - 1) / e.count
            let p = GPUParams.CoopExpertProduct(product: GPUParams.CoopProduct(k: UInt32(w.cols), n: UInt32(w.rows), m: UInt32(n), rowBytes: UInt32(w.rowBytes),
                                                                               xStride: UInt32(kp), yStride: UInt32(yStride), splitUnits: UInt32.max, plane: 0),
                                                routing: routing)
            dispatch(GPUKernels.matmulCoopID(w.type, rows: perExpert), [GPUBinding(s.buffer), GPUBinding(x16), y, GPUBinding(m.routing)], p,
                     GPUKernels.matmulCoopIDGroups(n: w.rows, rows: perExpert, tokens: n, experts: e.count), .matmul)
            if x16Source?.buffer == ObjectIdentifier(y.buffer) { x16Source = nil } // Y overwrote them
        } else {
            params.product.m = UInt32(n) // the most rows one expert can have
            dispatch(GPUKernels.matmulID(w.type), buffers, params, GPUKernels.matmulIDGroups(n: w.rows, tokens: n, experts: e.count), .matmul)
        }
    }

    private func swiglu(_ gate: GPUBinding, _ up: GPUBinding, count: Int, _ glu: Experts.GLU = .swiglu) {
        var p = GPUParams.SwiGLU(count: UInt32(count), act: UInt32(ModelConfig.FFNActivation.silu.rawValue))
        switch glu {
        case .swiglu: break
        case .geglu: p.act = UInt32(ModelConfig.FFNActivation.geluTanh.rawValue)
        case let .swigluClamped(alpha, limit): (p.act, p.alpha, p.limit) = (3, alpha, limit)
        }
        dispatch(GPUKernels.swiglu, [gate, up], p, (min((count + 255) / 256, 65535), 1, 1), .mlpActivation)
    }

    /// Each routed pair's expert's bias (`b` stacks them, `width` each) on the expert-ordered rows of `y`.
    private func expertBias(_ y: GPUBinding, _ b: WeightVector, width: Int) {
        let rows = n * config.experts!.used
        dispatch(GPUKernels.addBiasID, [y, GPUBinding(vectors[b.name]!), GPUBinding(moe!.routing)],
                 GPUParams.AddBiasID(n: UInt32(width), rows: UInt32(rows), stride: UInt32(width), idsOff: UInt32(MoEBuffers.Section.ids.rawValue * moe!.cap)),
                 ((width + 255) / 256, rows, 1), .other)
    }

    func logits(norm w: WeightVector, output: WeightMatrix, softcap: Float) {
        let rows = batch.logitRows.count
        guard rows > 0 else { return }
        norm(.x, w, rows: rows, selection: input(sections.rowsel, maxLogitRows), into: act(.xn))
        // On a discrete card the logits are made in device memory when the tiled matmul writes
        // them (its 16 x 16 tile stores would cross the bus in 64-byte pieces: 8B, 64 rows, 11 ms
        // a step on an H100; one copy moves the rows at the bus's speed) or when only their
        // argmaxes are read; matvec otherwise writes whole rows straight to host memory.
        let staged = rows > matvecMaxRows || batch.argmaxes ? logitsStaging : nil
        let target = GPUBinding(staged ?? logitsBuffer)
        multiply(output, act(.xn), rows: rows, xStride: config.dim, into: target, yStride: config.vocabSize, op: .output)
        let count = rows * config.vocabSize
        if softcap > 0 {
            dispatch(GPUKernels.softcap, [target], GPUParams.Softcap(count: UInt32(count), cap: softcap), (min((count + 255) / 256, 65535), 1, 1), .output)
        }
        if batch.argmaxes {
            dispatch(GPUKernels.argmaxRows, [target, GPUBinding(argmaxBuffer)], GPUParams.ArgmaxRows(n: UInt32(config.vocabSize), stride: UInt32(config.vocabSize)), (rows, 1, 1), .output)
            argmaxesMade = true
        }
        if let staged, batch.hostLogits { device.copy(GPUBinding(staged, size: count * 4), to: GPUBinding(logitsBuffer), op: .output) }
    }
}
