import Foundation
import XCTest
@testable import VeloCore

/// The fit check before load (MemoryPlanner, Engine.plan): what a plan counts, how defaults
/// shrink (context, then batch), refusals with the numbers, and `auto` leaving a GPU that
/// cannot hold the model for the CPU.
final class MemoryPlanTests: XCTestCase {

    /// A GPU with a given amount of free memory that runs nothing (the planner only asks it
    /// about memory and features).
    final class FakeGPU: GPUDevice {
        let api = "fake"
        let name = "Fake GPU"
        let isSoftware = false
        let maxBindingBytes = 1 << 30
        let bindingAlignment = 16
        let cooperativeMatrix = false
        let stagesReadback = false
        let memory: (free: Int, total: Int)
        init(free: Int) { memory = (free, free) }
        func makeBuffer(bytes: Int, memory: GPUMemory, label: String) throws -> GPUBuffer { throw VeloError(.unsupported, "fake") }
        func upload(_ dst: GPUBuffer, offset: Int, bytes: Int, fill: (UnsafeMutableRawPointer, Int, Int) throws -> Void) throws {}
        func download(_ src: GPUBuffer, offset: Int, into dst: UnsafeMutableRawPointer, bytes: Int) throws {}
        func pipeline(_ name: String, buffers: Int, constants: [UInt32]) throws -> GPUPipeline { throw VeloError(.unsupported, "fake") }
        func begin() throws {}
        func dispatch(_ pipeline: GPUPipeline, _ buffers: [GPUBinding], params: [UInt32], groups: (Int, Int, Int), op: Profiler.Op) {}
        func copy(_ src: GPUBinding, to dst: GPUBinding, op: Profiler.Op) {}
        func commit(profiler: Profiler?) throws {}
    }

    func model() throws -> LanguageModel {
        try loadLanguageModel(try ModelFile(path: try TestData.path("stories260K.gguf")), contextSize: 2048)
    }

    func options(ctx: Int = 0, batch: Int = 1, auto: Bool = false, budget: Int = 0) -> EngineOptions {
        var o = EngineOptions()
        o.contextSize = ctx
        o.maxBatchSize = batch
        o.batchAuto = auto
        o.memoryBudget = budget
        o.threads = 2
        return o
    }

    func testWhatAPlanCounts() throws {
        let m = try model()
        let (plan, _) = MemoryPlanner(model: m, draft: nil, options: options(batch: 4)).plan(gpu: nil)
        let p = try XCTUnwrap(plan)
        // stories260K: trained at (metadata) 2048 positions; 5 layers of 32-wide K and V in f16
        XCTAssertEqual(p.contextSize, 2048)
        XCTAssertEqual(p.maxBatchSize, 4)
        XCTAssertEqual(p.kvPages, 4 * 2048 / 16)
        XCTAssertEqual(p.kvBytes, p.kvPages * 16 * 5 * 2 * 32 * 2)
        XCTAssertEqual(p.weightsBytes, MemoryPlanner.weightBytes(m))
        XCTAssertGreaterThan(p.weightsBytes, 900_000) // the 1 MB file, nearly all weights
        XCTAssertGreaterThan(p.scratchBytes, 0)
        XCTAssertTrue(p.notes.isEmpty)
        XCTAssert(p.summary.hasPrefix("weights 1.1 MiB + KV 5.0 MiB (f16, 4 × 2048) + scratch "), p.summary)
        XCTAssert(p.summary.hasSuffix(" on " + p.device), p.summary)
        // the GPU's scratch is what GPUForward allocates
        let (g, _) = MemoryPlanner(model: m, draft: nil, options: options(batch: 4)).plan(gpu: FakeGPU(free: 1 << 34))
        XCTAssertEqual(try XCTUnwrap(g).device, "Fake GPU")
    }

    func testDefaultsShrinkContextThenBatch() throws {
        let m = try model()
        let full = MemoryPlanner(model: m, draft: nil, options: options(batch: 8)).estimate(ctx: 2048, batch: 8, gpu: nil)
        let perSeq = full.kvBytes / 8
        // room for three sequences at 2048: the batch (a default) shrinks to 3
        let budget = full.weightsBytes + full.scratchBytes + 3 * perSeq + perSeq / 2
        let (p, _) = MemoryPlanner(model: m, draft: nil, options: options(batch: 8, auto: true, budget: budget)).plan(gpu: nil)
        XCTAssertEqual(p?.maxBatchSize, 3)
        XCTAssertEqual(p?.contextSize, 2048)
        XCTAssertEqual(p?.notes, ["batch 8 → 3 to fit"])
        // an explicit batch does not shrink; an open context goes below the model's own then
        let (q, _) = MemoryPlanner(model: m, draft: nil, options: options(batch: 8, budget: budget)).plan(gpu: nil)
        XCTAssertEqual(q?.maxBatchSize, 8)
        XCTAssertEqual(q?.contextSize, 768) // 3.5 × 2048 / 8 = 896, in steps of 256, scratch aside
        XCTAssertEqual(q?.notes, ["context 2048 → 768 to fit"])
        // nothing open, nothing fits: refused with the numbers
        let (r, smallest) = MemoryPlanner(model: m, draft: nil, options: options(ctx: 2048, batch: 8, budget: budget)).plan(gpu: nil)
        XCTAssertNil(r)
        let msg = MemoryPlanner.refusal(smallest, gpu: false)
        XCTAssert(msg.contains("KV 10.0 MiB (f16, 8 × 2048)"), msg)
        XCTAssert(msg.contains("Lower --ctx-size or --max-batch-size"), msg)
        // weights that do not fit at all
        let (w, tiny) = MemoryPlanner(model: m, draft: nil, options: options(budget: 100_000)).plan(gpu: nil)
        XCTAssertNil(w)
        XCTAssert(MemoryPlanner.refusal(tiny, gpu: true).contains("The weights alone do not fit: use --backend cpu"))
    }

    func testAutoLeavesAGPUThatCannotHoldTheModel() throws {
        let m = try model()
        var o = options(batch: 2, auto: true)
        o.backend = .auto
        var gpu: GPUDevice? = FakeGPU(free: 520 << 20) // all of it the 2 % + 512 MiB reserve
        let plan = try Engine.plan(&o, model: m, draft: nil, gpu: &gpu)
        XCTAssertNil(gpu)
        XCTAssert(plan.device.hasPrefix("CPU"), plan.device)
        XCTAssert(plan.notes.first?.hasPrefix("the GPU cannot hold the model, so it runs on the CPU (not enough memory on Fake GPU") == true, "\(plan.notes)")
        XCTAssertEqual(o.contextSize, 2048)
        XCTAssertEqual(o.kvPages, plan.kvPages)
        // a GPU asked for by name is not left: the error names the numbers
        var o2 = options(batch: 2)
        o2.backend = .vulkan
        var gpu2: GPUDevice? = FakeGPU(free: 520 << 20)
        XCTAssertThrowsError(try Engine.plan(&o2, model: m, draft: nil, gpu: &gpu2)) { e in
            let msg = (e as? VeloError)?.message ?? ""
            XCTAssert(msg.hasPrefix("not enough memory on Fake GPU: weights 1.1 MiB + KV"), msg)
            XCTAssert(msg.contains("use --backend cpu"), msg)
        }
        // a GPU with room keeps the model
        var o3 = options(batch: 2)
        o3.backend = .auto
        var gpu3: GPUDevice? = FakeGPU(free: 4 << 30)
        let p3 = try Engine.plan(&o3, model: m, draft: nil, gpu: &gpu3)
        XCTAssertNotNil(gpu3)
        XCTAssertEqual(p3.device, "Fake GPU")
        XCTAssertTrue(p3.notes.isEmpty)
    }

    func testLargest() {
        XCTAssertEqual(MemoryPlanner.largest(100, 1000, step: 256) { $0 <= 600 }, 512)
        XCTAssertEqual(MemoryPlanner.largest(100, 1000, step: 256) { $0 <= 1000 }, 1000)
        XCTAssertEqual(MemoryPlanner.largest(100, 1000, step: 256) { $0 <= 200 }, 100)
        XCTAssertNil(MemoryPlanner.largest(100, 1000, step: 256) { $0 < 100 })
        XCTAssertEqual(MemoryPlanner.largest(1, 7, step: 1) { $0 <= 3 }, 3)
    }
}
