#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What the GPU forward pass needs of a GPU API. Vulkan (Linux, Windows) and Metal (Apple
/// Silicon) implement it the same way: buffers, pipelines made from the kernels in `shaders/`,
/// and one command buffer per step in which every dispatch binds its buffers and a small
/// parameter block, with each dispatch ordered after the one before.
protocol GPUDevice: AnyObject {
    /// The API it runs through, as the stats and the backend option name it: "vulkan", "metal".
    var api: String { get }
    /// The device, as its driver names it.
    var name: String { get }
    /// A CPU implementation of the API (lavapipe): correct, and slow.
    var isSoftware: Bool { get }
    /// Largest byte range one storage-buffer binding may cover.
    var maxBindingBytes: Int { get }
    /// What a storage-buffer binding's byte offset must be a multiple of (at least 16: kernels
    /// read vec4s).
    var bindingAlignment: Int { get }
    /// Whether the tensor-core matmul kernels (matmul_coop_T, Vulkan's cooperative matrices:
    /// 16x16x16 float16 products accumulated in float32) run on this device.
    var cooperativeMatrix: Bool { get }
    /// Whether host-read (`.readback`) buffers sit across a bus from the GPU (a discrete card),
    /// so that kernels writing many scattered pieces into them are better given device memory
    /// and a `copy` of the bytes the host reads.
    var stagesReadback: Bool { get }
    /// Whether pipelines take any specialization constant. Metal's functions take constant 0
    /// (threads per group) and otherwise one baked function per shape (MetalDevice.functionName),
    /// so kernels specialised only for speed keep their defaults there.
    var specializes: Bool { get }
    /// The device's memory as the engine's fit check sees it (`MemoryPlan`): bytes it may still
    /// allocate now (a driver's budget where there is one) and the size of its memory.
    var memory: (free: Int, total: Int) { get }

    func makeBuffer(bytes: Int, memory: GPUMemory, label: String) throws -> GPUBuffer
    /// Writes `bytes` bytes into a buffer from `offset`, made by `fill(p, at, count)`: it writes
    /// bytes `at ..< at + count` of them at `p` (straight into the buffer where it is mapped,
    /// else into a staging buffer a chunk at a time, so no copy of the whole is ever made on the
    /// host); waits.
    func upload(_ dst: GPUBuffer, offset: Int, bytes: Int, fill: (UnsafeMutableRawPointer, Int, Int) throws -> Void) throws
    /// Copies a buffer's bytes to host memory; waits.
    func download(_ src: GPUBuffer, offset: Int, into dst: UnsafeMutableRawPointer, bytes: Int) throws
    /// The compute pipeline of kernel `name` (see shaders/README.md) with `buffers` storage
    /// buffers and specialization constants 0, 1, … set to `constants`; cached.
    func pipeline(_ name: String, buffers: Int, constants: [UInt32]) throws -> GPUPipeline
    /// Builds these pipelines into the cache ahead of `pipeline`, on several threads where the
    /// device can; each one's error, or nil, in order.
    func prepare(_ pipelines: [PipelineKey]) -> [Error?]
    /// Starts building these pipelines off the calling thread, for kernels whose first build is
    /// slow (no driver cache yet) and which have a fallback meanwhile; `adopt` takes them.
    func prepareInBackground(_ pipelines: [PipelineKey]) -> PendingPipelines
    /// Once every build of `pending` has ended: puts the built pipelines in the cache and gives
    /// each one's error, or nil, in order. Before that, nil. Call it where `pipeline` is called.
    func adopt(_ pending: PendingPipelines) -> [Error?]?

    /// Starts recording a step.
    func begin() throws
    /// Records one dispatch; it runs after every dispatch recorded before it and sees its writes.
    func dispatch(_ pipeline: GPUPipeline, _ buffers: [GPUBinding], params: [UInt32], groups: (Int, Int, Int), op: Profiler.Op)
    /// Records a copy of `src`'s range into `dst`'s (the smaller of the two sizes); it runs
    /// after every dispatch recorded before it, and the dispatches after it see its writes.
    func copy(_ src: GPUBinding, to dst: GPUBinding, op: Profiler.Op)
    /// Submits the step and waits for it; adds per-kernel GPU time to `profiler` when it is on.
    func commit(profiler: Profiler?) throws
}

enum GPUMemory {
    /// GPU memory the host never touches (weights, activations, K/V).
    case device
    /// Host-written each step (token ids, positions, page tables).
    case upload
    /// Host-read each step (logits).
    case readback
}

protocol GPUBuffer: AnyObject {
    var size: Int { get }
    /// Mapped host address (upload and readback buffers), nil for device memory.
    var contents: UnsafeMutableRawPointer? { get }
}

protocol GPUPipeline: AnyObject {}

/// What a device caches a pipeline by (no string formatting per dispatch).
struct PipelineKey: Hashable {
    let name: String
    let buffers: Int
    let constants: [UInt32]
}

/// Pipelines a background thread builds (`GPUDevice.prepareInBackground`).
final class PendingPipelines {
    let keys: [PipelineKey]
    private let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var built: [Result<GPUPipeline, Error>]?
    /// The device they are built on, released after them (a pipeline never adopted is
    /// destroyed through its device).
    private let owner: AnyObject

    init(_ keys: [PipelineKey], owner: AnyObject) {
        self.keys = keys
        self.owner = owner
        pthread_mutex_init(lock, nil)
    }
    deinit {
        built = nil
        pthread_mutex_destroy(lock)
        lock.deallocate()
    }

    func finish(_ results: [Result<GPUPipeline, Error>]) {
        pthread_mutex_lock(lock)
        built = results
        pthread_mutex_unlock(lock)
    }
    /// Every build's result once all have ended; nil before.
    var results: [Result<GPUPipeline, Error>]? {
        pthread_mutex_lock(lock)
        defer { pthread_mutex_unlock(lock) }
        return built
    }
    var isDone: Bool { results != nil }
}

/// A byte range of a buffer bound to one kernel binding.
struct GPUBinding {
    let buffer: GPUBuffer
    let offset: Int
    let size: Int

    init(_ buffer: GPUBuffer, offset: Int = 0, size: Int? = nil) {
        self.buffer = buffer
        self.offset = offset
        self.size = size ?? (buffer.size - offset)
    }
}

/// Which GPU API, and which device of it, the engine runs on.
public enum BackendChoice: String, Sendable, CaseIterable {
    case auto, cpu, vulkan, metal
}

/// Opens the GPU device for a backend choice; nil means the CPU. `auto` takes Metal on macOS
/// and a real (not software) Vulkan GPU elsewhere; a software Vulkan device (lavapipe) only
/// when Vulkan is asked for by name.
func openGPUDevice(_ choice: BackendChoice, index: Int?) throws -> GPUDevice? {
    switch choice {
    case .cpu:
        return nil
    case .metal:
        #if canImport(Metal)
        return try MetalDevice(index: index)
        #else
        throw VeloError(.unsupported, "the Metal backend exists only on macOS; use --backend vulkan or cpu")
        #endif
    case .vulkan:
        #if canImport(CVulkan)
        return try VulkanDevice(index: index, allowSoftware: true)
        #else
        throw VeloError(.unsupported, "this build of Velo has no Vulkan backend")
        #endif
    case .auto:
        #if canImport(Metal)
        return try? MetalDevice(index: index)
        #elseif canImport(CVulkan)
        if index != nil { return try VulkanDevice(index: index, allowSoftware: false) }
        return try? VulkanDevice(index: nil, allowSoftware: false)
        #else
        return nil
        #endif
    }
}

extension GPUDevice {
    var specializes: Bool { true }

    /// Copies host memory into a buffer; waits.
    func upload(_ dst: GPUBuffer, offset: Int, from src: UnsafeRawPointer, bytes: Int) throws {
        try upload(dst, offset: offset, bytes: bytes) { p, at, count in p.copyMemory(from: src + at, byteCount: count) }
    }

    func prepare(_ pipelines: [PipelineKey]) -> [Error?] {
        pipelines.map { k in
            do { _ = try pipeline(k.name, buffers: k.buffers, constants: k.constants); return nil } catch { return error }
        }
    }

    /// Built now, into the cache (Metal: its library is compiled ahead, so no build is slow).
    func prepareInBackground(_ pipelines: [PipelineKey]) -> PendingPipelines {
        let p = PendingPipelines(pipelines, owner: self)
        p.finish(pipelines.map { k in Result { try pipeline(k.name, buffers: k.buffers, constants: k.constants) } })
        return p
    }

    func adopt(_ pending: PendingPipelines) -> [Error?]? {
        pending.results?.map { r in
            if case .failure(let e) = r { return e }
            return nil
        }
    }
}
