/// GPUForward's attention: RoPE, the K/V pages' stores, and attention over the pages (the
/// tiled prefill kernels, or decode's split-K kernels and what merges their splits), or, for a
/// prompt on VK_NV_cooperative_matrix2, over a contiguous copy of its sequence's keys.
extension GPUForward {
    func rope(_ a: Activation, heads: Int, headDim: Int, rope r: Int) {
        let c = config
        dispatch(GPUKernels.rope, [act(a), tokpos, GPUBinding(ropeFreqs[r])],
                 GPUParams.Rope(rows: UInt32(n), heads: UInt32(heads), headDim: UInt32(headDim), ropeDim: UInt32(ropeDim(r)),
                                neox: c.ropeStyle == .neox ? 1 : 0, magnitude: c.ropes[r].magnitude, rowStride: UInt32(stride(a))),
                 (n, heads, 1), .rope)
    }

    /// The buffer holding a layer's K/V, and the (pageStride, layerOff) parameters that find
    /// its planes in it (32-bit words).
    private func kvBinding(_ layer: Int) -> GPUBinding { GPUBinding(kvPlaces[layer].buffer) }
    private func kvPlace(_ layer: Int) -> (pageStride: UInt32, layerOff: UInt32) {
        (UInt32(kvPlaces[layer].pageStride), UInt32(kvPlaces[layer].layerOff))
    }
    /// Values each rotary embedding turns in a head (`config.ropes[r]`: Gemma 4's sliding and
    /// global layers turn different spans).
    private func ropeDim(_ r: Int) -> Int { config.ropes[r].freqs.count * 2 }

    func storeKV(layer: Int, kvDim rowWidth: Int) {
        let kvDim = kvLayout.kvDim(layer: layer), ps = kv.pageSize
        precondition(rowWidth == kvDim, "K/V rows of \(rowWidth) in pages of \(kvDim) for layer \(layer)")
        dispatch(kvStoreKernel, [act(.k), act(.v), kvBinding(layer), tokpos, tokpt, pagetab],
                 GPUParams.KVStore(n: UInt32(n), kvDim: UInt32(kvDim), pageSize: UInt32(ps), pageStride: UInt32(kvPlaces[layer].pageStride),
                                   layerOff: UInt32(kvPlaces[layer].layerOff), kvStride: UInt32(stride(.k))),
                 (n, (kvDim + 63) / 64, 1), .attention)
    }

    /// Split-K attention: keys in splits of `chunk` (from the longest context of the batch),
    /// one workgroup per (token, KV head, split), then the combine kernel merges the splits
    /// (a single split writes the output directly).
    func ropeAndStoreKV(layer: Int, _ s: HeadShape, rope r: Int) {
        let c = config, ps = kv.pageSize, heads = s.heads, kvHeads = s.kvHeads, kvDim = kvLayout.kvDim(layer: layer)
        precondition(s.kvDim == kvDim, "K/V rows of \(s.kvDim) in pages of \(kvDim) for layer \(layer)")
        if let p = pendingQKV, let kvType = ropeJoin, s == c.uniformHeads, ropeDim(r) == c.ropeDim, p.w.rows == c.qDim + 2 * kvDim,
           p.biases.isEmpty || p.biases.count == 3 {
            pendingQKV = nil
            // S: the sums of squares a scaled input's 1/rms comes from, B the layer's Q|K|V
            // biases (any buffer where unused)
            let bias = p.biases.first.map { qkvBiases[$0.1.name]!.buffer }
            dispatch(GPUKernels.matvecDotRope(p.w.type, kv: kvType, scaled: p.scaled, neox: c.ropeStyle == .neox, bias: bias != nil),
                     p.buffers + [kvBinding(layer), tokpos, tokpt, pagetab, GPUBinding(ropeFreqs[r]), GPUBinding(q8Out?.sums ?? attnScratch),
                                  GPUBinding(bias ?? attnScratch)],
                     GPUParams.ProductRopeKV(product: p.params, qDim: UInt32(c.qDim), kvDim: UInt32(kvDim), headDim: UInt32(c.headDim), ropeDim: UInt32(c.ropeDim),
                                             magnitude: c.ropes[r].magnitude, pageSize: UInt32(ps), pageStride: kvPlace(layer).pageStride,
                                             layerOff: kvPlace(layer).layerOff, eps: c.normEps),
                     (p.w.rows / 2, 1, 1), .matmul) // a rotary pair a group
            return
        }
        dispatch(ropeStoreKernel, [act(.q), act(.k), act(.v), kvBinding(layer), tokpos, tokpt, pagetab, GPUBinding(ropeFreqs[r])],
                 GPUParams.RopeStore(n: UInt32(n), heads: UInt32(heads), kvHeads: UInt32(kvHeads), headDim: UInt32(s.headDim), ropeDim: UInt32(ropeDim(r)),
                                     neox: c.ropeStyle == .neox ? 1 : 0, magnitude: c.ropes[r].magnitude, kvDim: UInt32(kvDim), pageSize: UInt32(ps),
                                     pageStride: UInt32(kvPlaces[layer].pageStride), layerOff: UInt32(kvPlaces[layer].layerOff),
                                     qStride: UInt32(stride(.q)), kvStride: UInt32(stride(.k))),
                 (n, heads + kvHeads, 1), .rope)
    }

    func attention(layer: Int, _ a: AttentionParams) {
        // the output's rows are the layer's heads × their values (the O product reads them so)
        setRowWidth(.attn, a.shape.heads * valueRange(a.shape).count)
        if attentionTokens > 0 { pagedAttention(layer: layer, a, n: attentionTokens) }
        guard let step = cm2AttentionStep, let cm2 = cm2Attention else { return }
        // GPUKernels.attentionCM2Model leaves out models with a window or soft cap on any layer
        precondition(a.window == 0 && a.softcap == 0 && a.sinks == nil, "attention_cm2 on a layer with a window, soft cap or sinks")
        let c = config, bc = GPUKernels.attentionCM2Shape.bc, br = GPUKernels.attentionCM2Shape.br // (one head shape: attentionCM2Model)
        // the run's sequence's keys of this layer into one contiguous copy, then attention over it
        let padded = (step.keys + bc - 1) / bc * bc
        dispatch(GPUKernels.kvGather, [kvBinding(layer), GPUBinding(cm2.copy), pagetab],
                 GPUParams.KVGather(kvDim: UInt32(kvDim), headDim: UInt32(c.headDim), pageSize: UInt32(kv.pageSize), pageStride: kvPlace(layer).pageStride,
                                    layerOff: kvPlace(layer).layerOff, keys: UInt32(step.keys), padded: UInt32(padded), cap: UInt32(cm2.cap), pt: UInt32(step.pt)),
                 GPUKernels.kvGatherGroups(padded: padded, kvDim: kvDim), .attention)
        let end = step.first + step.count
        dispatch(cm2.kernel, [act(.q), GPUBinding(cm2.copy), act(.attn), tokpos, GPUBinding(attnScratch)],
                 GPUParams.AttentionCM2(first: UInt32(step.first), end: UInt32(end), heads: UInt32(c.heads), kvHeads: UInt32(c.kvHeads), kvDim: UInt32(kvDim),
                                        qStride: UInt32(stride(.q)), cap: UInt32(cm2.cap), scale: a.scale, chunk: UInt32(step.chunk), splits: UInt32(step.splits)),
                 ((step.count + br - 1) / br, c.heads, step.splits), .attention)
        if step.splits > 1 {
            // only a run that is the whole step is split (begin): every token's partials are its
            dispatch(GPUKernels.attentionCombine, [GPUBinding(attnScratch), act(.attn), tokpos, GPUBinding(attnScratch)],
                     GPUParams.AttentionCombine(n: UInt32(end), heads: UInt32(c.heads), headDim: UInt32(c.headDim), chunk: UInt32(step.chunk), splits: UInt32(step.splits)),
                     GPUKernels.attentionCombineGroups(n: end, heads: c.heads, headDim: c.headDim), .attention)
        }
    }

    /// Attention over the pages for the step's first `n` tokens: the tiled prefill kernels, or
    /// decode's split-K kernels and what merges their splits.
    private func pagedAttention(layer: Int, _ a: AttentionParams, n: Int) {
        let s = a.shape, ps = kv.pageSize, kvDim = kvLayout.kvDim(layer: layer)
        // each head's output: `values.count` of its V head's values (MLA: the latent alone), `out` a row
        let values = valueRange(s), out = s.heads * values.count
        let (chunk, splits) = attentionPlan, place = kvPlace(layer)
        // the layer's sinks: every kernel's last buffer (any buffer, flag 0, where it has none)
        let sink = a.sinks.map { GPUBinding(vectors[$0.name]!) } ?? GPUBinding(attnScratch), sinks: UInt32 = a.sinks == nil ? 0 : 1
        let combineGroups = GPUKernels.attentionCombineGroups(n: n, heads: s.heads, headDim: values.count)
        let combine = GPUParams.AttentionCombine(n: UInt32(n), heads: UInt32(s.heads), headDim: UInt32(values.count), chunk: UInt32(chunk), splits: UInt32(splits), sinks: sinks)
        if tiledBlocks > 0 {
            precondition(values.count == s.headDim, "tiled attention over part of the values")
            dispatch(coopAttention ? attentionCoopKernel : attentionTiledKernel,
                     [act(.q), kvBinding(layer), act(.attn), tokpos, tokpt, pagetab, input(sections.blocks, 2 * maxTokens), GPUBinding(attnScratch), sink],
                     GPUParams.AttentionTiles(heads: UInt32(s.heads), kvHeads: UInt32(s.kvHeads), headDim: UInt32(s.headDim), kvDim: UInt32(kvDim),
                                              pageSize: UInt32(ps), pageStride: place.pageStride, layerOff: place.layerOff, scale: a.scale,
                                              qStride: UInt32(stride(.q)), softcap: a.softcap, window: UInt32(a.window), chunk: UInt32(chunk), splits: UInt32(splits),
                                              sinks: sinks),
                     (tiledBlocks, s.kvHeads, splits), .attention)
            if splits > 1 {
                dispatch(GPUKernels.attentionCombine, [GPUBinding(attnScratch), act(.attn), tokpos, sink], combine, combineGroups, .attention)
            }
            return
        }
        // the output as 8-bit blocks too, for the O product's matvec_dot: by the attention
        // kernel itself (a single split, or the last of a few), else by the combine
        // (not for MLA's latents: copy_rows reads them next)
        let q8Out = q8 != nil && cm2AttentionStep == nil && n <= matvecMaxRows && s.headDim % 32 == 0 && config.mla == nil
            && s.headDim <= GPUKernels.attentionCombineQ8MaxHeadDim && s.qDim <= q8Width
        var buffers = [act(.q), kvBinding(layer), act(.attn), tokpos, tokpt, pagetab, GPUBinding(attnScratch)]
        let params = GPUParams.Attention(n: UInt32(n), heads: UInt32(s.heads), kvHeads: UInt32(s.kvHeads), headDim: UInt32(s.headDim), kvDim: UInt32(kvDim),
                                         pageSize: UInt32(ps), pageStride: place.pageStride, layerOff: place.layerOff, scale: a.scale, chunk: UInt32(chunk),
                                         splits: UInt32(splits), qStride: UInt32(stride(.q)), softcap: a.softcap, window: UInt32(a.window), sinks: sinks,
                                         vOff: UInt32(values.offset), vDim: UInt32(values.count))
        let kernels = stagedStep ? attentionStagedKernels! : (plain: attentionKernel, q8: attentionQ8Kernel)
        var kernel = kernels.plain
        // which copy of the output the kernel also writes, merging its splits itself
        var joined: (q8: Bool, x16: Bool) = (false, false)
        let x16Row = GPUKernels.f16Row(out)
        if splits <= GPUKernels.attentionJoinMaxSplits, q8Out, let q8, let done = attnDone {
            buffers += [GPUBinding(q8.values), GPUBinding(q8.scales), GPUBinding(done)]
            kernel = kernels.q8
            joined.q8 = true
        } else if splits <= GPUKernels.attentionJoinMaxSplits, cm2AttentionStep == nil, !GPUKernels.attentionX16Disabled, !stagedStep, config.mla == nil, n > matvecMaxRows, n <= GPUKernels.attentionJoinRows,
                  f16Inputs, let x16, x16.size >= n * x16Row * 2, let done = attnDone {
            // a decode batch whose O product runs on tensor cores: its float16 input written here
            buffers += [GPUBinding(x16), GPUBinding(done)]
            kernel = attentionX16Kernel
            joined.x16 = true
        }
        buffers.append(sink)
        if joined.x16 {
            dispatch(kernel, buffers, GPUParams.AttentionX16(attention: params, x16Stride: UInt32(x16Row)), (n, s.kvHeads, splits), .attention)
        } else {
            dispatch(kernel, buffers, params, (n, s.kvHeads, splits), .attention)
        }
        if joined.q8 { holdQ8(rowsKey(act(.attn), rows: n, xStride: stride(.attn), k: out)) }
        if joined.x16 { x16Source = rowsKey(act(.attn), rows: n, xStride: stride(.attn), k: out) }
        guard splits > 1 && !joined.q8 && !joined.x16 else { return }
        if let q8, q8Out {
            // the output also as 8-bit blocks, for the O product's matvec_dot
            dispatch(GPUKernels.attentionCombineQ8, [GPUBinding(attnScratch), act(.attn), tokpos, GPUBinding(q8.values), GPUBinding(q8.scales), sink],
                     combine, combineGroups, .attention)
            holdQ8(rowsKey(act(.attn), rows: n, xStride: stride(.attn), k: out))
        } else {
            dispatch(GPUKernels.attentionCombine, [GPUBinding(attnScratch), act(.attn), tokpos, sink], combine, combineGroups, .attention)
        }
    }
}
