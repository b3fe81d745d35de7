/// Engine settings (from the CLI / server flags).
public struct EngineOptions: Sendable {
    public var threads = max(1, cpuCount())
    /// Most positions one sequence may hold (prompt + output); 0: the model's trained context,
    /// shortened to what fits the device (`MemoryPlan`).
    public var contextSize = 0
    /// Most sequences decoding at once.
    public var maxBatchSize = 1
    /// maxBatchSize is a default the engine may lower (after the context) to fit the device.
    public var batchAuto = false
    /// Pretend the device (GPU memory, or RAM for the CPU) has this many bytes free (0: ask it).
    public var memoryBudget = 0
    /// Most tokens in one forward pass (prefill chunks are cut to fit).
    public var batchTokens = 512
    public var pageSize = 16
    /// KV pages in the pool; 0 = from kvMemory, or enough for maxBatchSize full contexts.
    public var kvPages = 0
    /// KV budget in bytes (used when kvPages is 0).
    public var kvMemory = 0
    /// How K and V are stored in the pages (llama.cpp's --cache-type-k / --cache-type-v).
    public var cacheTypeK = KVCacheType.f16
    public var cacheTypeV = KVCacheType.f16
    /// Keep finished sequences' full KV pages in the radix prefix cache for reuse.
    public var prefixCache = true
    /// Time every kind of op (reported in the stats).
    public var profile = false
    public var spec = SpeculationOptions()
    /// Where forward passes run: the CPU, or a GPU through Vulkan or Metal.
    public var backend = BackendChoice.auto
    /// Which GPU of the backend (nil: the first real one).
    public var device: Int?

    public init() {}
}
