import CKernels

/// The forward passes an engine runs, made for the device the memory plan chose: the target
/// model's and the draft model's (speculative decoding), each behind `ForwardOps` (the CPU's
/// kernels, or one GPU implementation over Vulkan or Metal), and what they run on, as the
/// backend names itself. The step never asks which backend it has.
struct ModelRunners {
    let target: ForwardOps
    let draft: (model: LanguageModel, ops: ForwardOps)?
    /// "cpu", or the GPU's API ("vulkan", "metal").
    let backend: String
    /// The CPU's instruction set, or the GPU as its driver names it.
    let device: String
    let threads: Int

    /// `gpu`: the device (nil: the CPU); on a GPU the pool's pages move there. `logitRows`: the
    /// target's most logit rows in one pass (a decode row and its guesses per sequence).
    static func make(model: LanguageModel, draft: LanguageModel?, kv: PagePool, gpu: GPUDevice?, options o: EngineOptions,
                     logitRows: Int, profiler: Profiler) throws -> ModelRunners {
        let (maxTokens, ctx, seqs) = (o.batchTokens, o.contextSize, o.maxBatchSize)
        func checkpoints(_ m: LanguageModel) -> Int { DeltaNetShape.checkpoints(m.config, sequences: seqs, prefixCache: o.prefixCache) }
        if let gpu {
            let pages = try GPUKVPages(device: gpu, pool: kv)
            kv.gpu = (gpu, pages)
            func runner(_ m: LanguageModel, logitRows: Int) throws -> ForwardOps {
                try GPUForward(device: gpu, model: m, kv: pages, layers: m.config.kvLayers, kvDim: m.config.kvDim, maxTokens: maxTokens,
                               maxLogitRows: logitRows, maxSequences: seqs, maxContext: ctx,
                               checkpoints: checkpoints(m), profiler: profiler)
            }
            return ModelRunners(target: try runner(model, logitRows: logitRows), draft: try draft.map { ($0, try runner($0, logitRows: seqs)) },
                                backend: gpu.api, device: gpu.name, threads: 1)
        }
        let pool = ThreadPool(threads: o.threads)
        func runner(_ m: LanguageModel, kv view: KVView, logitRows: Int) -> ForwardOps {
            let mc = m.config
            return CPUForward(config: mc, ops: TransformerOps(config: mc, pool: pool, profiler: profiler),
                              ws: Workspace(config: mc, maxTokens: maxTokens, maxLogitRows: logitRows, maxContext: ctx, threads: pool.size,
                                            sequences: seqs, checkpoints: checkpoints(m)),
                              kv: view)
        }
        return ModelRunners(target: runner(model, kv: kv.view, logitRows: logitRows),
                            draft: try draft.map { d in (d, runner(d, kv: try KVView(pool: kv, layers: d.config.kvLayers, kvDim: d.config.kvDim, layerDims: d.config.kvLayerDims), logitRows: seqs)) },
                            backend: "cpu", device: ck_isa_name().map { String(cString: $0) } ?? "cpu", threads: pool.size)
    }
}
