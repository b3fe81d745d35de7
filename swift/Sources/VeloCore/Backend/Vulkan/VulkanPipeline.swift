#if canImport(CVulkan)
import CVulkan
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A compute pipeline and its push-descriptor layout: `buffers` storage buffers, then the
/// parameter uniform block.
final class VulkanPipeline: GPUPipeline {
    let pipeline: VkPipeline
    let layout: VkPipelineLayout
    let setLayout: VkDescriptorSetLayout
    let buffers: Int
    let name: String

    init(device: VkDevice, spirv: UnsafePointer<UInt32>, words: Int, buffers: Int, constants: [UInt32], name: String,
         captureStats: Bool = false) throws {
        self.buffers = buffers
        self.name = name
        var bindings = (0...buffers).map { i in
            var b = VkDescriptorSetLayoutBinding()
            b.binding = UInt32(i)
            b.descriptorType = i == buffers ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            b.descriptorCount = 1
            b.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT.rawValue
            return b
        }
        var dsl = VkDescriptorSetLayoutCreateInfo()
        dsl.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO
        dsl.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR.rawValue
        dsl.bindingCount = UInt32(bindings.count)
        var sl: VkDescriptorSetLayout?
        try bindings.withUnsafeMutableBufferPointer { bp in
            dsl.pBindings = UnsafePointer(bp.baseAddress)
            try vkCheck(vkCreateDescriptorSetLayout(device, &dsl, nil, &sl), "vkCreateDescriptorSetLayout")
        }
        setLayout = sl!
        var pli = VkPipelineLayoutCreateInfo()
        pli.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO
        pli.setLayoutCount = 1
        var pl: VkPipelineLayout?
        try withUnsafePointer(to: &sl) { psl in
            pli.pSetLayouts = psl
            try vkCheck(vkCreatePipelineLayout(device, &pli, nil, &pl), "vkCreatePipelineLayout")
        }
        let layout = pl!
        self.layout = layout
        var smci = VkShaderModuleCreateInfo()
        smci.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO
        smci.codeSize = words * 4
        smci.pCode = spirv
        var module: VkShaderModule?
        try vkCheck(vkCreateShaderModule(device, &smci, nil, &module), "vkCreateShaderModule(\(name))")
        defer { vkDestroyShaderModule(device, module, nil) }
        var entries = constants.indices.map { i in
            VkSpecializationMapEntry(constantID: UInt32(i), offset: UInt32(i * 4), size: 4)
        }
        var values = constants
        var pipe: VkPipeline?
        let r: VkResult = entries.withUnsafeMutableBufferPointer { ep in
            values.withUnsafeMutableBytes { vp in
                var spec = VkSpecializationInfo(mapEntryCount: UInt32(ep.count), pMapEntries: UnsafePointer(ep.baseAddress),
                                                dataSize: vp.count, pData: UnsafeRawPointer(vp.baseAddress))
                return "main".withCString { entry in
                    withUnsafePointer(to: &spec) { ps in
                        var stage = VkPipelineShaderStageCreateInfo()
                        stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO
                        stage.stage = VK_SHADER_STAGE_COMPUTE_BIT
                        stage.module = module
                        stage.pName = entry
                        stage.pSpecializationInfo = constants.isEmpty ? nil : ps
                        var ci = VkComputePipelineCreateInfo()
                        ci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO
                        if captureStats { ci.flags = VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR.rawValue }
                        ci.stage = stage
                        ci.layout = layout
                        return vkCreateComputePipelines(device, nil, 1, &ci, nil, &pipe)
                    }
                }
            }
        }
        try vkCheck(r, "vkCreateComputePipelines(\(name))")
        pipeline = pipe!
        if captureStats { Self.printStatistics(device: device, pipeline: pipe!, name: name, constants: constants) }
    }

    /// The driver's statistics of each executable of a pipeline (registers, shared memory…),
    /// one line on stderr.
    private static func printStatistics(device: VkDevice, pipeline: VkPipeline, name: String, constants: [UInt32]) {
        guard let getExecs = vkGetPipelineExecutablePropertiesKHR, let getStats = vkGetPipelineExecutableStatisticsKHR else { return }
        var info = VkPipelineInfoKHR()
        info.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR
        info.pipeline = pipeline
        var n: UInt32 = 0
        guard getExecs(device, &info, &n, nil) == VK_SUCCESS else { return }
        for i in 0..<n {
            var ei = VkPipelineExecutableInfoKHR()
            ei.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR
            ei.pipeline = pipeline
            ei.executableIndex = i
            var count: UInt32 = 0
            guard getStats(device, &ei, &count, nil) == VK_SUCCESS else { continue }
            var proto = VkPipelineExecutableStatisticKHR()
            proto.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR
            var list = [VkPipelineExecutableStatisticKHR](repeating: proto, count: Int(count))
            guard getStats(device, &ei, &count, &list) == VK_SUCCESS else { continue }
            let fields = list.prefix(Int(count)).map { st -> String in
                let v: String
                switch st.format {
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: v = st.value.b32 != 0 ? "true" : "false"
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: v = String(st.value.i64)
                case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: v = String(st.value.u64)
                default: v = String(st.value.f64)
                }
                return "\(cString(st.name))=\(v)"
            }
            fputs("pipeline \(name) \(constants): \(fields.joined(separator: ", "))\n", stderr)
        }
    }

    func destroy(_ device: VkDevice) {
        vkDestroyPipeline(device, pipeline, nil)
        vkDestroyPipelineLayout(device, layout, nil)
        vkDestroyDescriptorSetLayout(device, setLayout, nil)
    }
}
#endif
