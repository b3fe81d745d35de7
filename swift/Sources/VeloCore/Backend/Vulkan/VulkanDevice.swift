#if canImport(CVulkan)
import CVulkan
import CShaders
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The Vulkan implementation of `GPUDevice`: one device and compute queue, one memory
/// sub-allocator, pipelines cached by kernel and constants, and one command buffer per step
/// whose dispatches bind their buffers with push descriptors; a timeline semaphore says when
/// a step is done.
final class VulkanDevice: GPUDevice {
    let api = "vulkan"
    let name: String
    let isSoftware: Bool
    let stagesReadback: Bool
    let maxBindingBytes: Int
    let bindingAlignment: Int
    /// Tensor cores through VK_KHR_cooperative_matrix (matmul_coop_T), see createDevice.
    let cooperativeMatrix: Bool
    /// NVIDIA's VK_NV_cooperative_matrix2 (matmul_cm2_T: workgroup-scope matrices, tensor
    /// addressing, block loads with a decode callback), see createDevice; only where asked for
    /// (GPUKernels.cm2Wanted).
    let cooperativeMatrix2: Bool
    /// VELO_GPU_PIPELINE_STATS (any value): print each pipeline's compiler statistics (registers,
    /// shared memory…) to stderr where the driver has VK_KHR_pipeline_executable_properties.
    static let pipelineStatsWanted = getenv("VELO_GPU_PIPELINE_STATS") != nil
    private let pipelineStats: Bool
    /// Packed 4x8-bit integer dot products (VK_KHR_shader_integer_dot_product: matvec_dot_T).
    let integerDot: Bool
    /// Invocations a subgroup in compute shaders (0 where the driver does not say).
    let subgroupSize: Int
    /// The most invocations a compute workgroup may have (along x).
    let maxWorkgroupThreads: Int
    /// VK_EXT_memory_budget: the driver says how much of a heap this process may still use.
    private let memoryBudgetExt: Bool
    private let instance: VkInstance
    private let physical: VkPhysicalDevice
    private let device: VkDevice
    private let queue: VkQueue
    private let memory_: VulkanMemory
    private let commandPool: VkCommandPool
    /// A step is recorded into these in turn: each is submitted once it holds `chunkLimit`
    /// dispatches, so the GPU starts on the first layers while the host records the rest. The
    /// first chunk of a step is small (the GPU idles until it arrives), later ones double up to
    /// `chunkDispatches` (each submission costs host time).
    private let commandBuffers: [VkCommandBuffer]
    private var current = 0
    private var commandBuffer: VkCommandBuffer { commandBuffers[current] }
    private var dispatchesInChunk = 0
    private var chunkLimit = firstChunkDispatches
    private static let firstChunkDispatches = 8
    private static let chunkDispatches = 64
    private static let commandBufferCount = 16
    /// Timeline value each command buffer's last submission signals (reuse waits for it).
    private var submittedValue: [UInt64]
    private let timeline: VkSemaphore
    private var timelineValue: UInt64 = 0
    private var pipelines: [PipelineKey: VulkanPipeline] = [:]
    /// Parameter blocks of the step being recorded, one aligned slot per dispatch.
    private let params: VulkanBuffer
    private var paramsUsed = 0
    private let paramsAlign: Int
    private var staging: VulkanBuffer?
    // per-kernel timing (profiling only)
    private var queryPool: VkQueryPool?
    private let timestampPeriod: Double
    /// Each timed dispatch's op, kernel and grid (the profiler's label is made only when it reads
    /// them: this runs for every dispatch).
    private var timedOps: [(op: Profiler.Op, kernel: String, groups: (Int, Int, Int))] = []
    private static let maxTimedDispatches = 4096
    private var recording = false
    private static let maxBindings = 16
    private let infoScratch = UnsafeMutablePointer<VkDescriptorBufferInfo>.allocate(capacity: VulkanDevice.maxBindings)
    private let writeScratch: UnsafeMutablePointer<VkWriteDescriptorSet> = {
        let w = UnsafeMutablePointer<VkWriteDescriptorSet>.allocate(capacity: VulkanDevice.maxBindings)
        var proto = VkWriteDescriptorSet()
        proto.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
        proto.descriptorCount = 1
        w.initialize(repeating: proto, count: VulkanDevice.maxBindings)
        return w
    }()

    /// Every Vulkan device with a compute queue, in the loader's order.
    static func list() throws -> [(name: String, software: Bool)] {
        let inst = try createInstance()
        defer { vkDestroyInstance(inst, nil) }
        return try physicalDevices(inst).map { p in
            var props = VkPhysicalDeviceProperties()
            vkGetPhysicalDeviceProperties(p, &props)
            return (cString(props.deviceName), props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU)
        }
    }

    init(index: Int?, allowSoftware: Bool) throws {
        let instance = try Self.createInstance()
        self.instance = instance
        let all: [VkPhysicalDevice]
        do { all = try Self.physicalDevices(instance) } catch { vkDestroyInstance(instance, nil); throw error }
        var choice: VkPhysicalDevice?
        func type(_ p: VkPhysicalDevice) -> VkPhysicalDeviceType {
            var props = VkPhysicalDeviceProperties()
            vkGetPhysicalDeviceProperties(p, &props)
            return props.deviceType
        }
        if let index {
            guard index >= 0 && index < all.count else {
                vkDestroyInstance(instance, nil)
                throw VeloError(.invalidArgument, "no Vulkan device \(index): this machine has \(all.count) (0…\(max(all.count - 1, 0)))")
            }
            choice = all[index]
        } else {
            let order = [VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU, VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU]
                + (allowSoftware ? [VK_PHYSICAL_DEVICE_TYPE_CPU] : [])
            for t in order where choice == nil { choice = all.first { type($0) == t } }
        }
        guard let physical = choice else {
            vkDestroyInstance(instance, nil)
            throw VeloError(.unsupported, all.isEmpty ? "no Vulkan device found" : "no Vulkan GPU found (only a software renderer; pass --backend vulkan to use it)")
        }
        self.physical = physical
        var props = VkPhysicalDeviceProperties()
        vkGetPhysicalDeviceProperties(physical, &props)
        name = cString(props.deviceName)
        isSoftware = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU
        // VELO_GPU_STAGE_READBACK (any value): the discrete card's path elsewhere (tests on lavapipe)
        stagesReadback = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU || getenv("VELO_GPU_STAGE_READBACK") != nil
        maxBindingBytes = Int(props.limits.maxStorageBufferRange)
        maxWorkgroupThreads = Int(min(props.limits.maxComputeWorkGroupInvocations, props.limits.maxComputeWorkGroupSize.0))
        bindingAlignment = max(16, Int(props.limits.minStorageBufferOffsetAlignment))
        paramsAlign = max(Int(props.limits.minUniformBufferOffsetAlignment), 16)
        timestampPeriod = Double(props.limits.timestampPeriod)
        guard props.apiVersion >= Self.apiVersion else {
            vkDestroyInstance(instance, nil)
            throw VeloError(.unsupported, "\(name) supports Vulkan \(props.apiVersion >> 22).\((props.apiVersion >> 12) & 0x3ff); Velo needs 1.2")
        }
        do {
            let (device, family, timestamps, coop, cm2, stats) = try Self.createDevice(physical, name: name)
            self.device = device
            pipelineStats = stats
            cooperativeMatrix = coop
            cooperativeMatrix2 = cm2
            integerDot = Self.integerDotSupported(physical)
            let sub = Self.subgroupProperties(physical)
            subgroupSize = sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT.rawValue != 0 ? Int(sub.subgroupSize) : 0
            memoryBudgetExt = Self.hasExtension(physical, "VK_EXT_memory_budget")
            var q: VkQueue?
            vkGetDeviceQueue(device, family, 0, &q)
            queue = q!
            var pci = VkCommandPoolCreateInfo()
            pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO
            pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT.rawValue
            pci.queueFamilyIndex = family
            var pool: VkCommandPool?
            try vkCheck(vkCreateCommandPool(device, &pci, nil, &pool), "vkCreateCommandPool")
            let commandPool = pool!
            self.commandPool = commandPool
            var cai = VkCommandBufferAllocateInfo()
            cai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO
            cai.commandPool = commandPool
            cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY
            cai.commandBufferCount = UInt32(Self.commandBufferCount)
            var cbs = [VkCommandBuffer?](repeating: nil, count: Self.commandBufferCount)
            try vkCheck(vkAllocateCommandBuffers(device, &cai, &cbs), "vkAllocateCommandBuffers")
            commandBuffers = cbs.map { $0! }
            submittedValue = [UInt64](repeating: 0, count: Self.commandBufferCount)
            var typeInfo = VkSemaphoreTypeCreateInfo()
            typeInfo.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO
            typeInfo.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE
            typeInfo.initialValue = 0
            var sem: VkSemaphore?
            try withUnsafePointer(to: &typeInfo) { ti in
                var sci = VkSemaphoreCreateInfo()
                sci.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO
                sci.pNext = UnsafeRawPointer(ti)
                try vkCheck(vkCreateSemaphore(device, &sci, nil, &sem), "vkCreateSemaphore")
            }
            timeline = sem!
            let memory = VulkanMemory(device: device, physical: physical)
            self.memory_ = memory
            params = try memory.buffer(bytes: 4 << 20, memory: .upload,
                                       usage: VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT.rawValue)
            if timestamps {
                var qpi = VkQueryPoolCreateInfo()
                qpi.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO
                qpi.queryType = VK_QUERY_TYPE_TIMESTAMP
                qpi.queryCount = UInt32(2 * Self.maxTimedDispatches)
                var qp: VkQueryPool?
                if vkCreateQueryPool(device, &qpi, nil, &qp) == VK_SUCCESS { queryPool = qp }
            }
        } catch {
            vkDestroyInstance(instance, nil)
            throw error
        }
    }

    deinit {
        _ = vkDeviceWaitIdle(device)
        infoScratch.deallocate()
        writeScratch.deallocate()
        pipelines.values.forEach { $0.destroy(device) }
        if let queryPool { vkDestroyQueryPool(device, queryPool, nil) }
        staging = nil
        memory_.destroy()
        vkDestroySemaphore(device, timeline, nil)
        vkDestroyCommandPool(device, commandPool, nil)
        vkDestroyDevice(device, nil)
        vkDestroyInstance(instance, nil)
    }

    // MARK: set-up

    static let apiVersion: UInt32 = (1 << 22) | (2 << 12)
    /// With matmul_cm2_T asked for, the instance asks for 1.3, so that devices that have it may
    /// run SPIR-V 1.6 (the kernel's extension needs it); 1.2 devices still run everything else.
    static let cm2APIVersion: UInt32 = (1 << 22) | (3 << 12)

    private static func createInstance() throws -> VkInstance {
        if velo_vk_load() != 0 { throw VeloError(.unsupported, String(cString: velo_vk_error())) }
        var app = VkApplicationInfo()
        app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO
        app.apiVersion = GPUKernels.cm2Wanted ? cm2APIVersion : apiVersion
        var inst: VkInstance?
        let r: VkResult = "velo".withCString { n in
            app.pApplicationName = n
            app.pEngineName = n
            return withUnsafePointer(to: &app) { pa in
                var ci = VkInstanceCreateInfo()
                ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO
                ci.pApplicationInfo = pa
                return vkCreateInstance(&ci, nil, &inst)
            }
        }
        guard r == VK_SUCCESS, let inst else { throw VeloError(.unsupported, "Vulkan: vkCreateInstance failed (\(r.rawValue)); is a Vulkan driver installed?") }
        _ = velo_vk_load_instance(inst)
        return inst
    }

    private static func physicalDevices(_ inst: VkInstance) throws -> [VkPhysicalDevice] {
        var n: UInt32 = 0
        try vkCheck(vkEnumeratePhysicalDevices(inst, &n, nil), "vkEnumeratePhysicalDevices")
        var list = [VkPhysicalDevice?](repeating: nil, count: Int(n))
        try vkCheck(vkEnumeratePhysicalDevices(inst, &n, &list), "vkEnumeratePhysicalDevices")
        return list.prefix(Int(n)).compactMap { $0 }.filter { computeFamily($0) != nil }
    }

    private static func computeFamily(_ p: VkPhysicalDevice) -> (index: UInt32, timestamps: Bool)? {
        var n: UInt32 = 0
        vkGetPhysicalDeviceQueueFamilyProperties(p, &n, nil)
        var fams = [VkQueueFamilyProperties](repeating: VkQueueFamilyProperties(), count: Int(n))
        vkGetPhysicalDeviceQueueFamilyProperties(p, &n, &fams)
        // a compute-only family first: it is the one meant for compute work
        let compute = VK_QUEUE_COMPUTE_BIT.rawValue, graphics = VK_QUEUE_GRAPHICS_BIT.rawValue
        let i = fams.firstIndex { $0.queueFlags & compute != 0 && $0.queueFlags & graphics == 0 }
            ?? fams.firstIndex { $0.queueFlags & compute != 0 }
        return i.map { (UInt32($0), fams[$0].timestampValidBits > 0) }
    }

    private static func createDevice(_ p: VkPhysicalDevice, name: String) throws -> (VkDevice, UInt32, Bool, Bool, Bool, Bool) {
        guard let (family, timestamps) = computeFamily(p) else { throw VeloError(.unsupported, "\(name) has no compute queue") }
        var extCount: UInt32 = 0
        _ = vkEnumerateDeviceExtensionProperties(p, nil, &extCount, nil)
        var exts = [VkExtensionProperties](repeating: VkExtensionProperties(), count: Int(extCount))
        _ = vkEnumerateDeviceExtensionProperties(p, nil, &extCount, &exts)
        let extNames = Set(exts.map { cString($0.extensionName) })
        let coopExt = extNames.contains("VK_KHR_cooperative_matrix")
        var devProps = VkPhysicalDeviceProperties()
        vkGetPhysicalDeviceProperties(p, &devProps)
        let cm2Ext = GPUKernels.cm2Wanted && coopExt && extNames.contains("VK_NV_cooperative_matrix2") && devProps.apiVersion >= cm2APIVersion
        // VK_NV_cooperative_matrix2's features, queried after the KHR one's and enabled the same way
        let cm2f = UnsafeMutablePointer<VkPhysicalDeviceCooperativeMatrix2FeaturesNV>.allocate(capacity: 2)
        defer { cm2f.deallocate() }
        for i in 0..<2 {
            (cm2f + i).initialize(to: VkPhysicalDeviceCooperativeMatrix2FeaturesNV())
            cm2f[i].sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV
        }
        let stats = pipelineStatsWanted && extNames.contains("VK_KHR_pipeline_executable_properties")
        // features the kernels need (16-bit storage and integers, timeline semaphores) and
        // extensions (push descriptors)
        var v11 = VkPhysicalDeviceVulkan11Features()
        v11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES
        var v12 = VkPhysicalDeviceVulkan12Features()
        v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES
        var vcm = VkPhysicalDeviceCooperativeMatrixFeaturesKHR()
        vcm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR
        var f2 = VkPhysicalDeviceFeatures2()
        f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2
        withUnsafeMutablePointer(to: &v11) { p11 in
            withUnsafeMutablePointer(to: &v12) { p12 in
                withUnsafeMutablePointer(to: &vcm) { pcm in
                    p11.pointee.pNext = UnsafeMutableRawPointer(p12)
                    if coopExt { p12.pointee.pNext = UnsafeMutableRawPointer(pcm) }
                    if cm2Ext { pcm.pointee.pNext = UnsafeMutableRawPointer(cm2f) }
                    f2.pNext = UnsafeMutableRawPointer(p11)
                    vkGetPhysicalDeviceFeatures2(p, &f2)
                    p11.pointee.pNext = nil
                    p12.pointee.pNext = nil
                    pcm.pointee.pNext = nil
                }
            }
        }
        var missing: [String] = []
        if v11.storageBuffer16BitAccess == 0 { missing.append("16-bit storage") }
        if f2.features.shaderInt16 == 0 { missing.append("16-bit integers") }
        if v12.timelineSemaphore == 0 { missing.append("timeline semaphores") }
        if !extNames.contains("VK_KHR_push_descriptor") { missing.append("VK_KHR_push_descriptor") }
        guard missing.isEmpty else {
            throw VeloError(.unsupported, "\(name) lacks what Velo's kernels need: \(missing.joined(separator: ", "))")
        }
        // optional tensor-core path (matmul_coop_T): the extension and feature, a subgroup-scope
        // 16x16x16 float16 x float16 -> float32 shape, fp16 arithmetic, the Vulkan memory model
        // (the kernel's SPIR-V declares it), subgroups of 32 (its warp layout) and 48 KiB of
        // shared memory
        let coop = coopExt && vcm.cooperativeMatrix != 0 && v12.shaderFloat16 != 0 && v12.vulkanMemoryModel != 0
            && coopMatrixShape(p) && coopLimits(p)
        // optional second tensor-core path (matmul_cm2_T): on top of the first, the extension's
        // workgroup scope, flexible sizes, tensor addressing and block loads, and buffer device
        // addresses (its decode callback takes a block by reference)
        let q = cm2f[0]
        let cm2 = coop && cm2Ext && q.cooperativeMatrixWorkgroupScope != 0 && q.cooperativeMatrixFlexibleDimensions != 0
            && q.cooperativeMatrixTensorAddressing != 0 && q.cooperativeMatrixBlockLoads != 0 && v12.bufferDeviceAddress != 0
        if cm2 {
            cm2f[1].cooperativeMatrixWorkgroupScope = 1
            cm2f[1].cooperativeMatrixFlexibleDimensions = 1
            cm2f[1].cooperativeMatrixTensorAddressing = 1
            cm2f[1].cooperativeMatrixBlockLoads = 1
        }
        // enable exactly what is used (and the optional 8-bit/fp16 paths when present)
        var e11 = VkPhysicalDeviceVulkan11Features()
        e11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES
        e11.storageBuffer16BitAccess = 1
        e11.uniformAndStorageBuffer16BitAccess = v11.uniformAndStorageBuffer16BitAccess
        var e12 = VkPhysicalDeviceVulkan12Features()
        e12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES
        e12.timelineSemaphore = 1
        e12.storageBuffer8BitAccess = v12.storageBuffer8BitAccess
        e12.shaderInt8 = v12.shaderInt8
        e12.shaderFloat16 = v12.shaderFloat16
        if coop { e12.vulkanMemoryModel = 1 }
        if cm2 { e12.bufferDeviceAddress = 1 }
        var ecm = VkPhysicalDeviceCooperativeMatrixFeaturesKHR()
        ecm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR
        ecm.cooperativeMatrix = 1
        // optional integer dot products (matvec_dot_T), chained after e12 or ecm
        let dot = integerDotSupported(p)
        let edot = UnsafeMutablePointer<VkPhysicalDeviceShaderIntegerDotProductFeatures>.allocate(capacity: 1)
        defer { edot.deallocate() }
        edot.initialize(to: VkPhysicalDeviceShaderIntegerDotProductFeatures())
        edot.pointee.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES
        edot.pointee.shaderIntegerDotProduct = 1
        if dot {
            e12.pNext = UnsafeMutableRawPointer(edot)
            ecm.pNext = UnsafeMutableRawPointer(edot)
        }
        if cm2 {
            cm2f[1].pNext = ecm.pNext
            ecm.pNext = UnsafeMutableRawPointer(cm2f + 1)
        }
        var ef = VkPhysicalDeviceFeatures2()
        ef.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2
        let estats = UnsafeMutablePointer<VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR>.allocate(capacity: 1)
        defer { estats.deallocate() }
        estats.initialize(to: VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR())
        estats.pointee.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR
        estats.pointee.pipelineExecutableInfo = 1
        ef.features.shaderInt16 = 1
        ef.features.shaderInt64 = f2.features.shaderInt64
        var prio: Float = 1
        var device: VkDevice?
        let pushExt = Array("VK_KHR_push_descriptor".utf8CString), coopMatExt = Array("VK_KHR_cooperative_matrix".utf8CString)
        let dotExt = Array("VK_KHR_shader_integer_dot_product".utf8CString)
        let statsExt = Array("VK_KHR_pipeline_executable_properties".utf8CString)
        let cm2Name = Array("VK_NV_cooperative_matrix2".utf8CString)
        let r: VkResult = withUnsafeMutablePointer(to: &e11) { p11 in
            withUnsafeMutablePointer(to: &e12) { p12 in
                withUnsafeMutablePointer(to: &ecm) { pcm in
                    withUnsafeMutablePointer(to: &ef) { pf in
                        p11.pointee.pNext = UnsafeMutableRawPointer(p12)
                        if coop { p12.pointee.pNext = UnsafeMutableRawPointer(pcm) }
                        pf.pointee.pNext = UnsafeMutableRawPointer(p11)
                        if stats {
                            estats.pointee.pNext = UnsafeMutableRawPointer(p11)
                            pf.pointee.pNext = UnsafeMutableRawPointer(estats)
                        }
                        return withUnsafePointer(to: &prio) { pp in
                            var qci = VkDeviceQueueCreateInfo()
                            qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO
                            qci.queueFamilyIndex = family
                            qci.queueCount = 1
                            qci.pQueuePriorities = pp
                            return withUnsafePointer(to: &qci) { pq in
                                pushExt.withUnsafeBufferPointer { e1 in
                                    coopMatExt.withUnsafeBufferPointer { e2 in dotExt.withUnsafeBufferPointer { e3 in statsExt.withUnsafeBufferPointer { e4 in
                                      cm2Name.withUnsafeBufferPointer { e5 in
                                        let names: [UnsafePointer<CChar>?] = [e1.baseAddress] + (coop ? [e2.baseAddress] : [])
                                            + (dot ? [e3.baseAddress] : []) + (stats ? [e4.baseAddress] : []) + (cm2 ? [e5.baseAddress] : [])
                                        return names.withUnsafeBufferPointer { pe in
                                            var dci = VkDeviceCreateInfo()
                                            dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO
                                            dci.pNext = UnsafeRawPointer(pf)
                                            dci.queueCreateInfoCount = 1
                                            dci.pQueueCreateInfos = pq
                                            dci.enabledExtensionCount = UInt32(names.count)
                                            dci.ppEnabledExtensionNames = pe.baseAddress
                                            return vkCreateDevice(p, &dci, nil, &device)
                                        }
                                      }
                                    } } }
                                }
                            }
                        }
                    }
                }
            }
        }
        guard r == VK_SUCCESS, let device else { throw VeloError(.unsupported, "\(name): vkCreateDevice failed (\(r.rawValue))") }
        if velo_vk_load_device(device) != 0 {
            throw VeloError(.unsupported, "\(name): \(String(cString: velo_vk_error()))")
        }
        return (device, family, timestamps, coop, cm2, stats)
    }

    private static func hasExtension(_ p: VkPhysicalDevice, _ name: String) -> Bool {
        var n: UInt32 = 0
        _ = vkEnumerateDeviceExtensionProperties(p, nil, &n, nil)
        var exts = [VkExtensionProperties](repeating: VkExtensionProperties(), count: Int(n))
        _ = vkEnumerateDeviceExtensionProperties(p, nil, &n, &exts)
        return exts.prefix(Int(n)).contains { cString($0.extensionName) == name }
    }

    /// The largest device-local heap: its budget less its use where the driver has
    /// VK_EXT_memory_budget, else its size less what this device allocated.
    var memory: (free: Int, total: Int) {
        var budget = VkPhysicalDeviceMemoryBudgetPropertiesEXT()
        budget.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT
        var props = VkPhysicalDeviceMemoryProperties2()
        props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2
        withUnsafeMutablePointer(to: &budget) { pb in
            if memoryBudgetExt { props.pNext = UnsafeMutableRawPointer(pb) }
            vkGetPhysicalDeviceMemoryProperties2(physical, &props)
            props.pNext = nil
        }
        let mp = props.memoryProperties
        let heaps = withUnsafeBytes(of: mp.memoryHeaps) { Array($0.bindMemory(to: VkMemoryHeap.self).prefix(Int(mp.memoryHeapCount))) }
        let local = VK_MEMORY_HEAP_DEVICE_LOCAL_BIT.rawValue
        guard let i = heaps.indices.filter({ heaps[$0].flags & local != 0 }).max(by: { heaps[$0].size < heaps[$1].size })
                ?? heaps.indices.max(by: { heaps[$0].size < heaps[$1].size }) else { return (0, 0) }
        let total = Int(heaps[i].size)
        if memoryBudgetExt {
            let b = withUnsafeBytes(of: budget.heapBudget) { Array($0.bindMemory(to: VkDeviceSize.self)) }[i]
            let u = withUnsafeBytes(of: budget.heapUsage) { Array($0.bindMemory(to: VkDeviceSize.self)) }[i]
            if b > 0 { return (max(0, Int(b) - Int(u)), total) }
        }
        return (max(0, total - memoryAllocated), total)
    }

    /// Bytes of device memory this device has allocated (its sub-allocator's blocks).
    var memoryAllocated: Int { memory_.allocatedBytes }

    /// Whether the device has VK_KHR_shader_integer_dot_product with its feature on.
    private static func integerDotSupported(_ p: VkPhysicalDevice) -> Bool {
        var n: UInt32 = 0
        _ = vkEnumerateDeviceExtensionProperties(p, nil, &n, nil)
        var exts = [VkExtensionProperties](repeating: VkExtensionProperties(), count: Int(n))
        _ = vkEnumerateDeviceExtensionProperties(p, nil, &n, &exts)
        guard exts.prefix(Int(n)).contains(where: { cString($0.extensionName) == "VK_KHR_shader_integer_dot_product" }) else { return false }
        var fd = VkPhysicalDeviceShaderIntegerDotProductFeatures()
        fd.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES
        var f2 = VkPhysicalDeviceFeatures2()
        f2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2
        withUnsafeMutablePointer(to: &fd) { pd in
            f2.pNext = UnsafeMutableRawPointer(pd)
            vkGetPhysicalDeviceFeatures2(p, &f2)
        }
        return fd.shaderIntegerDotProduct != 0
    }

    /// Whether the device multiplies 16x16 by 16x16 float16 matrices into float32 at subgroup
    /// scope (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR; false where the loader or
    /// driver lacks the query).
    private static func coopMatrixShape(_ p: VkPhysicalDevice) -> Bool {
        guard let query = vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR else { return false }
        var n: UInt32 = 0
        guard query(p, &n, nil) == VK_SUCCESS, n > 0 else { return false }
        var proto = VkCooperativeMatrixPropertiesKHR()
        proto.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR
        var list = [VkCooperativeMatrixPropertiesKHR](repeating: proto, count: Int(n))
        let r = query(p, &n, &list)
        guard r == VK_SUCCESS || r == VK_INCOMPLETE else { return false }
        let f16 = VK_COMPONENT_TYPE_FLOAT16_KHR, f32 = VK_COMPONENT_TYPE_FLOAT32_KHR
        return list.prefix(Int(n)).contains {
            $0.MSize == 16 && $0.NSize == 16 && $0.KSize == 16 && $0.AType == f16 && $0.BType == f16
                && $0.CType == f32 && $0.ResultType == f32 && $0.saturatingAccumulation == 0 && $0.scope == VK_SCOPE_SUBGROUP_KHR
        }
    }

    /// matmul_coop_T's layout: subgroups of 32 invocations (in compute shaders), workgroups of
    /// 512 and 48 KiB of shared memory.
    private static func coopLimits(_ p: VkPhysicalDevice) -> Bool {
        var props = VkPhysicalDeviceProperties()
        vkGetPhysicalDeviceProperties(p, &props)
        let sub = subgroupProperties(p)
        return sub.subgroupSize == 32 && sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT.rawValue != 0
            && props.limits.maxComputeSharedMemorySize >= 49152
            && props.limits.maxComputeWorkGroupInvocations >= 512 && props.limits.maxComputeWorkGroupSize.0 >= 512
    }

    private static func subgroupProperties(_ p: VkPhysicalDevice) -> VkPhysicalDeviceSubgroupProperties {
        var sub = VkPhysicalDeviceSubgroupProperties()
        sub.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES
        var props = VkPhysicalDeviceProperties2()
        props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2
        withUnsafeMutablePointer(to: &sub) { ps in
            props.pNext = UnsafeMutableRawPointer(ps)
            vkGetPhysicalDeviceProperties2(p, &props)
            props.pNext = nil
        }
        return sub
    }

    // MARK: buffers

    func makeBuffer(bytes: Int, memory kind: GPUMemory, label: String) throws -> GPUBuffer {
        let usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT.rawValue | VK_BUFFER_USAGE_TRANSFER_SRC_BIT.rawValue
            | VK_BUFFER_USAGE_TRANSFER_DST_BIT.rawValue
        do {
            return try memory_.buffer(bytes: bytes, memory: kind, usage: usage)
        } catch let e as VeloError {
            throw VeloError(e.code, "\(name): cannot allocate \(label) (\(bytes >> 20) MiB): \(e.message)")
        }
    }

    /// Unmapped buffers fill the staging buffer's halves in turn: the copy of one half runs
    /// while the host fills the other, and a half is refilled once its copy is done.
    func upload(_ dst: GPUBuffer, offset: Int, bytes: Int, fill: (UnsafeMutableRawPointer, Int, Int) throws -> Void) throws {
        let dst = dst as! VulkanBuffer
        if let p = dst.contents {
            try fill(p + offset, 0, bytes)
            return
        }
        precondition(!recording, "upload while a step is being recorded")
        let stage = try stagingBuffer(), half = stage.size / 2
        var copied: [UInt64] = [0, 0] // timeline value of each half's last copy
        var done = 0, h = 0
        do {
            while done < bytes {
                let n = min(half, bytes - done)
                try wait(copied[h])
                try fill(stage.contents! + h * half, done, n)
                current = (current + 1) % commandBuffers.count
                try beginCommandBuffer()
                var region = VkBufferCopy(srcOffset: VkDeviceSize(h * half), dstOffset: VkDeviceSize(offset + done), size: VkDeviceSize(n))
                vkCmdCopyBuffer(commandBuffer, stage.buffer, dst.buffer, 1, &region)
                try submit()
                copied[h] = timelineValue
                done += n
                h ^= 1
            }
        } catch {
            // no copy of this upload may still read the staging buffer when the next one fills it
            try? wait(timelineValue)
            throw error
        }
        try wait(timelineValue)
    }

    func download(_ src: GPUBuffer, offset: Int, into dst: UnsafeMutableRawPointer, bytes: Int) throws {
        let src = src as! VulkanBuffer
        if let p = src.contents {
            dst.copyMemory(from: p + offset, byteCount: bytes)
            return
        }
        var done = 0
        let chunk = try stagingBuffer().size
        while done < bytes {
            let n = min(chunk, bytes - done)
            try oneShot { cb in
                var region = VkBufferCopy(srcOffset: VkDeviceSize(offset + done), dstOffset: 0, size: VkDeviceSize(n))
                vkCmdCopyBuffer(cb, src.buffer, self.staging!.buffer, 1, &region)
            }
            (dst + done).copyMemory(from: staging!.contents!, byteCount: n)
            done += n
        }
    }

    private func stagingBuffer() throws -> VulkanBuffer {
        if let staging { return staging }
        let b = try memory_.buffer(bytes: 64 << 20, memory: .upload,
                                  usage: VK_BUFFER_USAGE_TRANSFER_SRC_BIT.rawValue | VK_BUFFER_USAGE_TRANSFER_DST_BIT.rawValue)
        staging = b
        return b
    }

    /// Records, submits and waits for a command buffer outside the step.
    private func oneShot(_ record: (VkCommandBuffer) -> Void) throws {
        precondition(!recording, "transfer while a step is being recorded")
        try beginCommandBuffer()
        record(commandBuffer)
        try submit()
        try wait(timelineValue)
    }

    // MARK: pipelines

    func pipeline(_ kernel: String, buffers: Int, constants: [UInt32]) throws -> GPUPipeline {
        let key = PipelineKey(name: kernel, buffers: buffers, constants: constants)
        if let p = pipelines[key] { return p }
        let p = try build(key)
        pipelines[key] = p
        return p
    }

    private func build(_ key: PipelineKey) throws -> VulkanPipeline {
        var words = 0
        guard let spirv = velo_shader_spirv(key.name, &words) else {
            throw VeloError(.internalError, "no GPU kernel named \(key.name)")
        }
        return try VulkanPipeline(device: device, spirv: spirv, words: words, buffers: key.buffers, constants: key.constants, name: key.name,
                                  captureStats: pipelineStats)
    }

    /// The driver compiles each pipeline on the calling thread, and a model's first load asks
    /// for dozens (a 1.1B on an H200: ~30 s on one thread, until the driver's disk cache has
    /// them), so they are built on up to 8 threads; Vulkan lets pipelines be created
    /// concurrently (no pipeline cache object is shared).
    func prepare(_ keys: [PipelineKey]) -> [Error?] {
        var todo: [PipelineKey] = [], seen = Set<PipelineKey>()
        for k in keys where pipelines[k] == nil && seen.insert(k).inserted { todo.append(k) }
        var failed: [PipelineKey: Error] = [:]
        for (k, r) in zip(todo, buildAll(todo)) {
            switch r {
            case .success(let p): pipelines[k] = p
            case .failure(let e): failed[k] = e
            }
        }
        return keys.map { failed[$0] }
    }

    /// Builds on a thread of its own (which holds the device until it ends; on the caller's
    /// if none starts). The cache is read here and written only by `adopt`, on the caller's
    /// thread.
    func prepareInBackground(_ keys: [PipelineKey]) -> PendingPipelines {
        let pending = PendingPipelines(keys, owner: self)
        let have = keys.map { pipelines[$0] }
        var seen = Set<PipelineKey>()
        let todo = zip(keys, have).filter { $0.1 == nil && seen.insert($0.0).inserted }.map(\.0)
        let work = {
            let built = Dictionary(uniqueKeysWithValues: zip(todo, self.buildAll(todo)))
            pending.finish(zip(keys, have).map { k, p in p.map { .success($0) } ?? built[k]!.map { $0 as GPUPipeline } })
        }
        if !detachThread(work) { work() }
        return pending
    }

    func adopt(_ pending: PendingPipelines) -> [Error?]? {
        guard let results = pending.results else { return nil }
        return zip(pending.keys, results).map { k, r in
            switch r {
            case .success(let p):
                if pipelines[k] == nil { pipelines[k] = (p as! VulkanPipeline) }
                return nil
            case .failure(let e): return e
            }
        }
    }

    private func buildAll(_ todo: [PipelineKey]) -> [Result<VulkanPipeline, Error>] {
        var built = [Result<VulkanPipeline, Error>?](repeating: nil, count: todo.count)
        if !todo.isEmpty {
            let pool = ThreadPool(threads: min(todo.count, cpuCount(), 8))
            built.withUnsafeMutableBufferPointer { out in
                let out = out // each thread writes only its own indices
                pool.run { ith, nth in
                    for i in Swift.stride(from: ith, to: todo.count, by: nth) {
                        out[i] = Result { try self.build(todo[i]) }
                    }
                }
            }
        }
        return built.map { $0! }
    }

    // MARK: recording a step

    func begin() throws {
        try beginCommandBuffer()
        recording = true
        paramsUsed = 0
        timedOps.removeAll(keepingCapacity: true)
        dispatchesInChunk = 0
        chunkLimit = Self.firstChunkDispatches
        if let queryPool { vkCmdResetQueryPool(commandBuffer, queryPool, 0, UInt32(2 * Self.maxTimedDispatches)) }
    }

    func dispatch(_ pipeline: GPUPipeline, _ buffers: [GPUBinding], params values: [UInt32], groups: (Int, Int, Int), op: Profiler.Op) {
        precondition(recording, "dispatch outside begin()/commit()")
        let p = pipeline as! VulkanPipeline
        precondition(buffers.count == p.buffers, "\(p.name): \(buffers.count) buffers bound, \(p.buffers) expected")
        guard groups.0 > 0 && groups.1 > 0 && groups.2 > 0 else { return }
        // the parameter block: 32-bit words, std140 scalars, in this step's ring
        let bytes = max(values.count * 4, 16)
        precondition(paramsUsed + bytes <= params.size, "too many dispatches in one step")
        let off = paramsUsed
        values.withUnsafeBytes { (params.contents! + off).copyMemory(from: $0.baseAddress!, byteCount: values.count * 4) }
        paramsUsed += (bytes + paramsAlign - 1) / paramsAlign * paramsAlign
        vkCmdBindPipeline(commandBuffer, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline)
        // descriptors written in place (no allocation per dispatch: a step records hundreds)
        precondition(buffers.count < Self.maxBindings, "too many buffers for one dispatch")
        for (i, b) in buffers.enumerated() {
            infoScratch[i] = VkDescriptorBufferInfo(buffer: (b.buffer as! VulkanBuffer).buffer, offset: VkDeviceSize(b.offset), range: VkDeviceSize(b.size))
        }
        let count = buffers.count + 1
        infoScratch[buffers.count] = VkDescriptorBufferInfo(buffer: params.buffer, offset: VkDeviceSize(off), range: VkDeviceSize(bytes))
        for i in 0..<count {
            writeScratch[i].dstBinding = UInt32(i)
            writeScratch[i].descriptorType = i == count - 1 ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            writeScratch[i].pBufferInfo = UnsafePointer(infoScratch + i)
        }
        vkCmdPushDescriptorSetKHR(commandBuffer, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, UInt32(count), writeScratch)
        timed(op, p.name, groups) { vkCmdDispatch($0, UInt32(groups.0), UInt32(groups.1), UInt32(groups.2)) }
        // each dispatch sees the writes of the ones before it
        memoryBarrier(access: (VK_ACCESS_SHADER_WRITE_BIT.rawValue, VK_ACCESS_SHADER_READ_BIT.rawValue | VK_ACCESS_SHADER_WRITE_BIT.rawValue),
                      stages: (VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT.rawValue, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT.rawValue))
        // barriers order work across command buffers of one queue in submission order
        dispatchesInChunk += 1
        if dispatchesInChunk >= chunkLimit {
            dispatchesInChunk = 0
            chunkLimit = min(2 * chunkLimit, Self.chunkDispatches)
            do {
                try submit()
                current = (current + 1) % commandBuffers.count
                try beginCommandBuffer()
            } catch {
                chunkError = error
            }
        }
    }

    func copy(_ src: GPUBinding, to dst: GPUBinding, op: Profiler.Op) {
        precondition(recording, "copy outside begin()/commit()")
        let bytes = min(src.size, dst.size)
        guard bytes > 0 else { return }
        // after the kernels that wrote the source; before any that read or overwrite either buffer
        memoryBarrier(access: (VK_ACCESS_SHADER_WRITE_BIT.rawValue, VK_ACCESS_TRANSFER_READ_BIT.rawValue | VK_ACCESS_TRANSFER_WRITE_BIT.rawValue),
                      stages: (VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT.rawValue, VK_PIPELINE_STAGE_TRANSFER_BIT.rawValue))
        var region = VkBufferCopy(srcOffset: VkDeviceSize(src.offset), dstOffset: VkDeviceSize(dst.offset), size: VkDeviceSize(bytes))
        timed(op, "copy", (1, 1, 1)) { vkCmdCopyBuffer($0, (src.buffer as! VulkanBuffer).buffer, (dst.buffer as! VulkanBuffer).buffer, 1, &region) }
        memoryBarrier(access: (VK_ACCESS_TRANSFER_WRITE_BIT.rawValue,
                               VK_ACCESS_SHADER_READ_BIT.rawValue | VK_ACCESS_SHADER_WRITE_BIT.rawValue | VK_ACCESS_HOST_READ_BIT.rawValue),
                      stages: (VK_PIPELINE_STAGE_TRANSFER_BIT.rawValue, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT.rawValue | VK_PIPELINE_STAGE_HOST_BIT.rawValue))
    }
    /// Orders what `stages.0` wrote (`access.0`) before what `stages.1` reads or writes (`access.1`).
    private func memoryBarrier(access: (UInt32, UInt32), stages: (UInt32, UInt32)) {
        var b = VkMemoryBarrier()
        b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER
        b.srcAccessMask = access.0
        b.dstAccessMask = access.1
        vkCmdPipelineBarrier(commandBuffer, stages.0, stages.1, 0, 1, &b, 0, nil, 0, nil)
    }

    /// Records `command` between two timestamps when the profiler is on (and has room).
    private func timed(_ op: Profiler.Op, _ name: String, _ groups: (Int, Int, Int), _ command: (VkCommandBuffer?) -> Void) {
        let on = queryPool != nil && timedOps.count < Self.maxTimedDispatches
        if on { vkCmdWriteTimestamp(commandBuffer, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queryPool, UInt32(2 * timedOps.count)) }
        command(commandBuffer)
        if on {
            vkCmdWriteTimestamp(commandBuffer, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queryPool, UInt32(2 * timedOps.count + 1))
            timedOps.append((op, name, groups))
        }
    }

    /// A submission that failed mid-step; commit() reports it.
    private var chunkError: Error?

    func commit(profiler: Profiler?) throws {
        precondition(recording, "commit without begin()")
        recording = false
        // make the step's writes visible to the host (logits in mapped memory)
        memoryBarrier(access: (VK_ACCESS_SHADER_WRITE_BIT.rawValue, VK_ACCESS_HOST_READ_BIT.rawValue),
                      stages: (VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT.rawValue, VK_PIPELINE_STAGE_HOST_BIT.rawValue))
        try submit()
        try wait(timelineValue)
        if let e = chunkError {
            chunkError = nil
            throw e
        }
        if let profiler, profiler.enabled, let queryPool, !timedOps.isEmpty {
            var stamps = [UInt64](repeating: 0, count: 2 * timedOps.count)
            let r = vkGetQueryPoolResults(device, queryPool, 0, UInt32(stamps.count), stamps.count * 8, &stamps, 8,
                                          VK_QUERY_RESULT_64_BIT.rawValue | VK_QUERY_RESULT_WAIT_BIT.rawValue)
            if r == VK_SUCCESS {
                for (i, t) in timedOps.enumerated() where stamps[2 * i + 1] >= stamps[2 * i] {
                    let ns = UInt64(Double(stamps[2 * i + 1] - stamps[2 * i]) * timestampPeriod)
                    profiler.add(t.op, nanos: ns)
                    profiler.addKernel("\(t.kernel) \(t.groups.0)x\(t.groups.1)x\(t.groups.2)", nanos: ns)
                }
            }
        }
    }

    private func beginCommandBuffer() throws {
        // a command buffer is reused only once its last submission is done
        try wait(submittedValue[current])
        try vkCheck(vkResetCommandBuffer(commandBuffer, 0), "vkResetCommandBuffer")
        var bi = VkCommandBufferBeginInfo()
        bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
        bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT.rawValue
        try vkCheck(vkBeginCommandBuffer(commandBuffer, &bi), "vkBeginCommandBuffer")
    }

    private func submit() throws {
        try vkCheck(vkEndCommandBuffer(commandBuffer), "vkEndCommandBuffer")
        timelineValue += 1
        submittedValue[current] = timelineValue
        var signal = timelineValue
        var cb: VkCommandBuffer? = commandBuffer
        var sem: VkSemaphore? = timeline
        var tsi = VkTimelineSemaphoreSubmitInfo()
        tsi.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO
        tsi.signalSemaphoreValueCount = 1
        let r: VkResult = withUnsafePointer(to: &signal) { ps in
            tsi.pSignalSemaphoreValues = ps
            return withUnsafePointer(to: &tsi) { pt in
                withUnsafePointer(to: &cb) { pcb in
                    withUnsafePointer(to: &sem) { psem in
                        var si = VkSubmitInfo()
                        si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO
                        si.pNext = UnsafeRawPointer(pt)
                        si.commandBufferCount = 1
                        si.pCommandBuffers = pcb
                        si.signalSemaphoreCount = 1
                        si.pSignalSemaphores = psem
                        return vkQueueSubmit(queue, 1, &si, nil)
                    }
                }
            }
        }
        try vkCheck(r, "vkQueueSubmit")
    }

    /// How long a wait polls the step's timeline semaphore before it sleeps in the driver. A
    /// decode step ends within it, and the driver's wake-up is a few % of one: 8B / 1.1B Q4_0
    /// tg128 on an H200, 280.6 / 571.7 t/s sleeping, 290.0 / 595.2 polling (bench/RESULTS.md).
    /// It costs a CPU core while the GPU works, so a software device (lavapipe, whose own
    /// threads need the cores) never polls; VELO_GPU_SLEEP (any value) turns it off.
    static let pollNanos: UInt64 = getenv("VELO_GPU_SLEEP") != nil ? 0 : 20_000_000

    /// Waits until the timeline reaches `value` (0: nothing to wait for).
    private func wait(_ value: UInt64) throws {
        guard value > 0 else { return }
        if Self.pollNanos > 0 && !isSoftware {
            let start = nowNanos()
            var done: UInt64 = 0
            repeat {
                try vkCheck(vkGetSemaphoreCounterValue(device, timeline, &done), "vkGetSemaphoreCounterValue")
                if done >= value { return }
            } while nowNanos() - start < Self.pollNanos
        }
        var sem: VkSemaphore? = timeline
        var wait = value
        let w: VkResult = withUnsafePointer(to: &sem) { psem in
            withUnsafePointer(to: &wait) { pw in
                var wi = VkSemaphoreWaitInfo()
                wi.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO
                wi.semaphoreCount = 1
                wi.pSemaphores = psem
                wi.pValues = pw
                // a step never takes minutes: past that the device is hung, not busy
                return vkWaitSemaphores(device, &wi, 300_000_000_000)
            }
        }
        if w == VK_TIMEOUT { throw VeloError(.internalError, "\(name): a GPU step did not finish in 5 minutes") }
        try vkCheck(w, "vkWaitSemaphores")
    }
}

@inline(__always)
func vkCheck(_ r: VkResult, _ what: String) throws {
    if r != VK_SUCCESS {
        throw VeloError(r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ? .outOfMemory : .internalError,
                        "Vulkan: \(what) failed (VkResult \(r.rawValue))")
    }
}

/// A fixed C char array (imported as a tuple) as a String.
func cString<T>(_ t: T) -> String {
    withUnsafeBytes(of: t) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
}
#endif
