#if canImport(CVulkan)
import CVulkan
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A storage (or uniform) buffer bound into a block of the sub-allocator.
final class VulkanBuffer: GPUBuffer {
    let buffer: VkBuffer
    let size: Int
    let contents: UnsafeMutableRawPointer?
    init(buffer: VkBuffer, size: Int, contents: UnsafeMutableRawPointer?) {
        self.buffer = buffer
        self.size = size
        self.contents = contents
    }
}

/// The memory sub-allocator: large blocks per memory type, carved into buffers in order.
/// Buffers live as long as the device (weights, activations, K/V are allocated once).
final class VulkanMemory {
    private let device: VkDevice
    private let props: VkPhysicalDeviceMemoryProperties
    private var blocks: [(memory: VkDeviceMemory, type: UInt32, size: Int, used: Int, mapped: UnsafeMutableRawPointer?)] = []
    private var buffers: [VkBuffer] = []
    static let blockBytes = 256 << 20
    /// Bytes of all blocks (device and host memory alike).
    var allocatedBytes: Int { blocks.reduce(0) { $0 + $1.size } }

    init(device: VkDevice, physical: VkPhysicalDevice) {
        self.device = device
        var p = VkPhysicalDeviceMemoryProperties()
        vkGetPhysicalDeviceMemoryProperties(physical, &p)
        props = p
    }

    func buffer(bytes: Int, memory kind: GPUMemory, usage: UInt32) throws -> VulkanBuffer {
        let size = max(bytes, 16)
        var bci = VkBufferCreateInfo()
        bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO
        bci.size = VkDeviceSize(size)
        bci.usage = usage
        bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE
        var buf: VkBuffer?
        try vkCheck(vkCreateBuffer(device, &bci, nil, &buf), "vkCreateBuffer")
        var req = VkMemoryRequirements()
        vkGetBufferMemoryRequirements(device, buf, &req)
        // the best memory type first; a smaller heap that is full (GPU memory the host can map)
        // falls back to the next
        var lastError: Error = VeloError(.unsupported, "no suitable memory type")
        for type in memoryTypes(bits: req.memoryTypeBits, kind: kind) {
            do {
                let (memory, offset, mapped) = try place(bytes: Int(req.size), alignment: Int(req.alignment), type: type,
                                                         map: kind != .device, blockBytes: kind == .device ? Self.blockBytes : 16 << 20)
                try vkCheck(vkBindBufferMemory(device, buf, memory, VkDeviceSize(offset)), "vkBindBufferMemory")
                buffers.append(buf!)
                return VulkanBuffer(buffer: buf!, size: size, contents: mapped.map { $0 + offset })
            } catch {
                lastError = error
            }
        }
        vkDestroyBuffer(device, buf, nil)
        throw lastError
    }

    /// Memory types for a kind of buffer, best first: (flags wanted, flags unwanted).
    private func memoryTypes(bits: UInt32, kind: GPUMemory) -> [UInt32] {
        let local = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT.rawValue, visible = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT.rawValue
        let coherent = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT.rawValue, cached = VK_MEMORY_PROPERTY_HOST_CACHED_BIT.rawValue
        let ranks: [(want: UInt32, avoid: UInt32)]
        switch kind {
        // weights and activations: GPU memory the host cannot map (keep mappable GPU memory free)
        case .device: ranks = [(local, visible), (local, 0), (0, 0)]
        // step inputs and parameters: GPU memory the host writes into (read by every dispatch,
        // so not across the bus), else host memory
        case .upload: ranks = [(local | visible | coherent, 0), (visible | coherent, 0)]
        // logits: cached host memory (uncached reads of 0.5 MiB cost milliseconds)
        case .readback: ranks = [(visible | coherent | cached, 0), (visible | coherent, 0)]
        }
        let types = withUnsafeBytes(of: props.memoryTypes) { Array($0.bindMemory(to: VkMemoryType.self)) }
        var out: [UInt32] = []
        for r in ranks {
            for i in 0..<Int(props.memoryTypeCount) where bits & (1 << UInt32(i)) != 0
                && types[i].propertyFlags & r.want == r.want && types[i].propertyFlags & r.avoid == 0 && !out.contains(UInt32(i)) {
                out.append(UInt32(i))
            }
        }
        return out
    }

    private func place(bytes: Int, alignment: Int, type: UInt32, map: Bool, blockBytes: Int) throws -> (VkDeviceMemory, Int, UnsafeMutableRawPointer?) {
        // a block serves one kind: mapped (host-visible) or not, even where both share a type
        for i in blocks.indices where blocks[i].type == type && (blocks[i].mapped != nil) == map {
            let start = (blocks[i].used + alignment - 1) / alignment * alignment
            if start + bytes <= blocks[i].size {
                blocks[i].used = start + bytes
                return (blocks[i].memory, start, blocks[i].mapped)
            }
        }
        let size = max(bytes, blockBytes)
        var ai = VkMemoryAllocateInfo()
        ai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO
        ai.allocationSize = VkDeviceSize(size)
        ai.memoryTypeIndex = type
        var mem: VkDeviceMemory?
        let r = vkAllocateMemory(device, &ai, nil, &mem)
        guard r == VK_SUCCESS, let mem else {
            throw VeloError(.outOfMemory, r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? "out of GPU memory" : "vkAllocateMemory failed (\(r.rawValue))")
        }
        var mapped: UnsafeMutableRawPointer?
        if map { try vkCheck(vkMapMemory(device, mem, 0, VkDeviceSize(size), 0, &mapped), "vkMapMemory") }
        blocks.append((mem, type, size, bytes, mapped))
        return (mem, 0, mapped)
    }

    func destroy() {
        for b in buffers { vkDestroyBuffer(device, b, nil) }
        for b in blocks {
            if b.mapped != nil { vkUnmapMemory(device, b.memory) }
            vkFreeMemory(device, b.memory, nil)
        }
        buffers.removeAll()
        blocks.removeAll()
    }
}
#endif
