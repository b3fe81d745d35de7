#if canImport(Metal)
import Metal
import Foundation

/// The Metal implementation of `GPUDevice`, mirroring `VulkanDevice`: the same kernels
/// (translated from the SPIR-V by spirv-cross into `velo.metallib`), shared-storage buffers
/// (Apple Silicon has one memory), pipelines cached by kernel and constants, and one command
/// buffer per step with a serial compute encoder, so each dispatch sees the writes of the
/// ones before it. Buffer N of a kernel is `[[buffer(N)]]`; its parameter block is set with
/// `setBytes` at the index after its buffers.
final class MetalDevice: GPUDevice {
    let api = "metal"
    let name: String
    let isSoftware = false
    /// One memory: kernels write readback buffers in place.
    let stagesReadback = false
    let specializes = false
    /// matmul_coop_T is Vulkan-only (no MSL translation of cooperative matrices).
    let cooperativeMatrix = false
    let maxBindingBytes: Int
    /// Metal asks a device-buffer offset to suit the type read through it (vec4 at most).
    let bindingAlignment = 16
    private let device: MTLDevice
    private let queue: MTLCommandQueue
    private let library: MTLLibrary
    private var pipelines: [PipelineKey: MetalPipeline] = [:]
    private var commandBuffer: MTLCommandBuffer?
    private var encoder: MTLComputeCommandEncoder?

    init(index: Int?) throws {
        let all = MTLCopyAllDevices()
        let chosen: MTLDevice?
        if let index {
            guard index >= 0 && index < all.count else {
                throw VeloError(.invalidArgument, "no Metal device \(index): this Mac has \(all.count)")
            }
            chosen = all[index]
        } else {
            chosen = MTLCreateSystemDefaultDevice()
        }
        guard let device = chosen, let queue = device.makeCommandQueue() else {
            throw VeloError(.unsupported, "no Metal device")
        }
        self.device = device
        self.queue = queue
        name = device.name
        maxBindingBytes = device.maxBufferLength
        library = try Self.loadLibrary(device)
    }

    /// velo.metallib: beside the library (VELO_METALLIB overrides).
    private static func loadLibrary(_ device: MTLDevice) throws -> MTLLibrary {
        var candidates: [String] = []
        if let env = ProcessInfo.processInfo.environment["VELO_METALLIB"] { candidates.append(env) }
        var info = Dl_info()
        if dladdr(#dsohandle, &info) != 0, let f = info.dli_fname {
            let dir = (String(cString: f) as NSString).deletingLastPathComponent
            candidates.append(dir + "/velo.metallib")
        }
        for path in candidates where FileManager.default.fileExists(atPath: path) {
            return try device.makeLibrary(URL: URL(fileURLWithPath: path))
        }
        throw VeloError(.unsupported, "velo.metallib not found (looked in: \(candidates.joined(separator: ", "))); build it with `make metallib`")
    }

    /// What Metal recommends one process keep resident on this GPU, less what is allocated now.
    var memory: (free: Int, total: Int) {
        let total = Int(device.recommendedMaxWorkingSetSize)
        return (max(0, total - device.currentAllocatedSize), total)
    }

    func makeBuffer(bytes: Int, memory: GPUMemory, label: String) throws -> GPUBuffer {
        guard let b = device.makeBuffer(length: max(bytes, 16), options: .storageModeShared) else {
            throw VeloError(.outOfMemory, "\(name): cannot allocate \(label) (\(bytes >> 20) MiB)")
        }
        b.label = label
        return MetalBuffer(b)
    }

    func upload(_ dst: GPUBuffer, offset: Int, bytes: Int, fill: (UnsafeMutableRawPointer, Int, Int) throws -> Void) throws {
        try fill(dst.contents! + offset, 0, bytes)
    }

    func download(_ src: GPUBuffer, offset: Int, into dst: UnsafeMutableRawPointer, bytes: Int) throws {
        dst.copyMemory(from: src.contents! + offset, byteCount: bytes)
    }

    /// The metallib function of a kernel and its constants. Only constant 0 (threads per group)
    /// is a Metal function constant: the others size threadgroup arrays, which spirv-cross
    /// emits as preprocessor macros (SPIRV_CROSS_CONSTANT_ID_n) that `setConstantValue` never
    /// reaches, so the Makefile builds one function per shape the host uses, named
    /// `<kernel>_s<constant 1>x<constant 2>…` (matvec_q4_0_s1x4, matmul_q4_0_s64x64);
    /// shaders/README.md, "Metal".
    static func functionName(_ kernel: String, constants: [UInt32]) -> String {
        constants.count <= 1 ? kernel : kernel + "_s" + constants.dropFirst().map { String($0) }.joined(separator: "x")
    }

    /// Kernels whose dispatch does not depend on their thread count (one workgroup per row, any
    /// workgroup size; shaders/README.md): they may run with fewer threads than asked when a
    /// pipeline allows fewer (the 1024 the host asks for the norms).
    static let anyThreadCount: Set<String> = ["rms_norm", "add_rms_norm"]

    func pipeline(_ kernel: String, buffers: Int, constants: [UInt32]) throws -> GPUPipeline {
        let key = PipelineKey(name: kernel, buffers: buffers, constants: constants)
        if let p = pipelines[key] { return p }
        guard let asked = constants.first, asked > 0 else {
            throw VeloError(.internalError, "\(kernel): no thread count (constant 0), which Metal needs at dispatch")
        }
        let fname = Self.functionName(kernel, constants: constants)
        guard library.functionNames.contains(fname) else {
            throw VeloError(.unsupported, "velo.metallib has no \(fname) (\(kernel) with constants \(constants.dropFirst().map { String($0) }.joined(separator: ", "))): "
                + "the Metal build has one function per shape the host uses (Makefile, METAL_MATVEC_* and METAL_MATMUL_*); rebuild it with `make metallib`, or drop VELO_GPU_MATVEC")
        }
        func make(threads: Int) throws -> MTLComputePipelineState {
            let values = MTLFunctionConstantValues()
            var v = UInt32(threads)
            values.setConstantValue(&v, type: .uint, index: 0)
            return try device.makeComputePipelineState(function: try library.makeFunction(name: fname, constantValues: values))
        }
        var threads = Int(asked)
        var state = try make(threads: threads)
        // A pipeline may allow fewer threads per group than the device (registers, threadgroup
        // memory); dispatching more fails. Not exercised here: no Mac has run this yet.
        if threads > state.maxTotalThreadsPerThreadgroup {
            let limit = state.maxTotalThreadsPerThreadgroup
            guard Self.anyThreadCount.contains(kernel) else {
                throw VeloError(.unsupported, "\(name): \(fname) takes at most \(limit) threads per threadgroup, and its dispatch assumes \(threads)")
            }
            threads = 1 << (Int.bitWidth - 1 - limit.leadingZeroBitCount) // the largest power of two within the limit
            state = try make(threads: threads)
            guard threads <= state.maxTotalThreadsPerThreadgroup else {
                throw VeloError(.unsupported, "\(name): \(fname) takes at most \(state.maxTotalThreadsPerThreadgroup) threads per threadgroup, fewer than \(threads)")
            }
        }
        let p = MetalPipeline(state: state, buffers: buffers, threads: threads, name: fname)
        pipelines[key] = p
        return p
    }

    func begin() throws {
        guard let cb = queue.makeCommandBuffer(), let enc = cb.makeComputeCommandEncoder(dispatchType: .serial) else {
            throw VeloError(.internalError, "\(name): cannot make a command buffer")
        }
        commandBuffer = cb
        encoder = enc
    }

    func dispatch(_ pipeline: GPUPipeline, _ buffers: [GPUBinding], params: [UInt32], groups: (Int, Int, Int), op: Profiler.Op) {
        let p = pipeline as! MetalPipeline
        precondition(buffers.count == p.buffers, "\(p.name): \(buffers.count) buffers bound, \(p.buffers) expected")
        guard let enc = encoder, groups.0 > 0 && groups.1 > 0 && groups.2 > 0 else { return }
        enc.setComputePipelineState(p.state)
        for (i, b) in buffers.enumerated() {
            enc.setBuffer((b.buffer as! MetalBuffer).buffer, offset: b.offset, index: i)
        }
        var words = params
        if words.count < 4 { words += [UInt32](repeating: 0, count: 4 - words.count) }
        words.withUnsafeBytes { enc.setBytes($0.baseAddress!, length: $0.count, index: buffers.count) }
        enc.dispatchThreadgroups(MTLSize(width: groups.0, height: groups.1, depth: groups.2),
                                 threadsPerThreadgroup: MTLSize(width: p.threads, height: 1, depth: 1))
    }

    func copy(_ src: GPUBinding, to dst: GPUBinding, op: Profiler.Op) {
        // a blit between two compute passes of the step's command buffer keeps the order
        let bytes = min(src.size, dst.size)
        guard let cb = commandBuffer, let enc = encoder, bytes > 0 else { return }
        enc.endEncoding()
        if let blit = cb.makeBlitCommandEncoder() {
            blit.copy(from: (src.buffer as! MetalBuffer).buffer, sourceOffset: src.offset, to: (dst.buffer as! MetalBuffer).buffer,
                      destinationOffset: dst.offset, size: bytes)
            blit.endEncoding()
        }
        encoder = cb.makeComputeCommandEncoder(dispatchType: .serial)
    }

    func commit(profiler: Profiler?) throws {
        guard let cb = commandBuffer, let enc = encoder else { throw VeloError(.internalError, "commit without begin()") }
        enc.endEncoding()
        cb.commit()
        cb.waitUntilCompleted()
        commandBuffer = nil
        encoder = nil
        if let error = cb.error { throw VeloError(.internalError, "\(name): \(error.localizedDescription)") }
        // Metal reports the GPU time of the whole step, not of each kernel
        if let profiler, profiler.enabled, cb.gpuEndTime > cb.gpuStartTime {
            profiler.add(.other, nanos: UInt64((cb.gpuEndTime - cb.gpuStartTime) * 1e9))
        }
    }
}

final class MetalBuffer: GPUBuffer {
    let buffer: MTLBuffer
    init(_ buffer: MTLBuffer) { self.buffer = buffer }
    var size: Int { buffer.length }
    var contents: UnsafeMutableRawPointer? { buffer.contents() }
}

final class MetalPipeline: GPUPipeline {
    let state: MTLComputePipelineState
    let buffers: Int
    let threads: Int
    let name: String
    init(state: MTLComputePipelineState, buffers: Int, threads: Int, name: String) {
        self.state = state
        self.buffers = buffers
        self.threads = threads
        self.name = name
    }
}
#endif
