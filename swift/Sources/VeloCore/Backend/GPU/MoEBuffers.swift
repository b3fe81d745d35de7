/// A mixture-of-experts model's GPU buffers, `maxTokens` tokens' worth: the router's logits,
/// moe_route's output (sections of `cap` words: each pair-in-expert-order's token, each token's
/// pairs' rows and weights, each row's expert, a scratch, each expert's first row and count;
/// shaders/moe_route.comp), the experts' hidden and output rows, and the shared expert's output.
struct MoEBuffers {
    let router, routing, gate, up, output: GPUBuffer
    let shared: GPUBuffer?
    /// Words of each section of `routing`: the pairs, aligned so each may start a binding.
    let cap: Int
    enum Section: Int { case rows, slot, weight, ids, scratch, experts }

    init(device: GPUDevice, config c: ModelConfig, maxTokens: Int) throws {
        let e = c.experts!, pairs = maxTokens * e.used
        guard e.count <= GPUKernels.moeRouteMaxExperts else {
            throw VeloError(.unsupported, "\(e.count) experts: the GPU's routing takes at most \(GPUKernels.moeRouteMaxExperts)")
        }
        cap = Self.cap(pairs: pairs, alignment: device.bindingAlignment)
        router = try device.makeBuffer(bytes: maxTokens * e.count * 4, memory: .device, label: "router logits")
        routing = try device.makeBuffer(bytes: (5 * cap + 2 * e.count) * 4, memory: .device, label: "expert routing")
        gate = try device.makeBuffer(bytes: pairs * e.ffnDim * 4, memory: .device, label: "expert gate products")
        up = try device.makeBuffer(bytes: pairs * 2 * e.ffnDim * 4, memory: .device, label: "expert up (or interleaved gate/up) products")
        output = try device.makeBuffer(bytes: pairs * c.dim * 4, memory: .device, label: "expert outputs")
        shared = e.sharedFFNDim > 0 ? try device.makeBuffer(bytes: maxTokens * c.dim * 4, memory: .device, label: "shared expert outputs") : nil
    }

    static func cap(pairs: Int, alignment: Int) -> Int { (pairs * 4 + alignment - 1) / alignment * alignment / 4 }

    /// One section of `routing` as a binding.
    func section(_ s: Section) -> GPUBinding { GPUBinding(routing, offset: s.rawValue * cap * 4, size: cap * 4) }
    /// The expert-indexed kernels' routing parameters: the word offsets of the rows, ids and
    /// experts sections, with a stack's expert size (words) and whether X is gathered.
    func routing(expertWords: Int, gather: Bool) -> GPUParams.Routing {
        GPUParams.Routing(expertWords: UInt32(expertWords), gather: gather ? 1 : 0, rowsOff: UInt32(Section.rows.rawValue * cap),
                          idsOff: UInt32(Section.ids.rawValue * cap), expertsOff: UInt32(Section.experts.rawValue * cap))
    }

    static func bytes(config c: ModelConfig, maxTokens: Int) -> Int {
        guard let e = c.experts else { return 0 }
        let pairs = maxTokens * e.used
        return 4 * (maxTokens * e.count + 5 * pairs + 2 * e.count + pairs * (c.dim + 3 * e.ffnDim) + (e.sharedFFNDim > 0 ? maxTokens * c.dim : 0)) + 2048
    }
}
