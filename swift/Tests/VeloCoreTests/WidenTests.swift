import Foundation
import XCTest
@testable import VeloCore

/// A forward pass whose float16 path overflowed runs again (`ForwardOps.widen`,
/// `LanguageModel.run`). The GPU side (the norms' flag) is in GPUKernelTests; the re-run on
/// tensor cores needs a device with them (bench/gpu/h100.sh overflow).
final class WidenTests: XCTestCase {
    /// Records every op of each pass; `widen` answers true `overflows` times.
    final class RecordingOps: ForwardOps {
        var passes: [[String]] = []
        var overflows: Int
        var widened = 0
        private let logits = UnsafeMutablePointer<Float>.allocate(capacity: 1)
        init(overflows: Int) { self.overflows = overflows }
        deinit { logits.deallocate() }

        private func op(_ s: String) { passes[passes.count - 1].append(s) }
        func begin(_ batch: ForwardBatch) throws { passes.append(["begin \(batch.tokens)"]) }
        func embed(_ table: WeightMatrix, scale: Float) { op("embed") }
        func rmsNorm(_ src: Activation, _ w: WeightVector, into dst: Activation) { op("norm \(w.name)") }
        func headNorm(_ a: Activation, _ w: WeightVector?, heads: Int, headDim: Int) { op("head norm") }
        func matmul(_ src: Activation, _ pairs: [(WeightMatrix, Activation)]) { op("matmul " + pairs.map(\.0.name).joined(separator: ",")) }
        func addBias(_ a: Activation, _ b: WeightVector) { op("bias") }
        func rope(_ a: Activation, heads: Int, headDim: Int, rope: Int) { op("rope") }
        func storeKV(layer: Int, kvDim: Int) { op("kv \(layer)") }
        func attention(layer: Int, _ p: AttentionParams) { op("attention \(layer)") }
        func add(_ dst: Activation, _ src: Activation) { op("add") }
        func glu(_ act: ModelConfig.FFNActivation, width: Int) { op("glu") }
        func hidden(norm: WeightVector) { op("hidden") }
        func experts(_ src: Activation, _ layer: ExpertLayer, routedBy router: Activation, into dst: Activation) { op("experts") }
        func deltaNet(_ src: Activation, _ layer: DeltaNetLayer, into dst: Activation) { op("deltanet") }
        func gatedQuery(_ src: Activation, _ w: WeightMatrix) { op("gated query") }
        func gateAttention() { op("gate") }
        func scale(_ a: Activation, by s: Float) { op("scale") }
        func latentQKV(_ src: Activation, _ layer: MLALayer) { op("latent qkv") }
        func latentOutput(_ layer: MLALayer, into dst: Activation) { op("latent output") }
        func perLayerInputs(_ p: PerLayerEmbeddings) { op("per-layer inputs") }
        func perLayerEmbedding(layer: Int, _ b: PerLayerBlock) { op("per-layer \(layer)") }
        func logits(norm: WeightVector, output: WeightMatrix, softcap: Float) { op("logits") }
        func finish() throws -> UnsafeMutablePointer<Float> { op("finish"); return logits }
        var hiddenStates: UnsafePointer<Float> { UnsafePointer(logits) }
        func widen() -> Bool {
            guard widened < overflows else { return false }
            widened += 1
            return true
        }
    }

    func testPassRunsAgainAfterEachWidening() throws {
        let model = try loadLanguageModel(try ModelFile(path: try TestData.path("stories260K.gguf")), contextSize: 2048)
        var batch = ForwardBatch()
        batch.tokens = [1, 2, 3]
        batch.positions = [0, 1, 2]
        batch.sequence = [0, 0, 0]
        for overflows in 0...2 {
            let ops = RecordingOps(overflows: overflows)
            _ = try model.run(batch, on: ops)
            XCTAssertEqual(ops.passes.count, overflows + 1, "\(overflows) widenings")
            XCTAssertEqual(ops.widened, overflows)
            XCTAssert(ops.passes.allSatisfy { $0 == ops.passes[0] }, "a re-run differs from the first pass")
            XCTAssertEqual(ops.passes[0].first, "begin [1, 2, 3]")
            XCTAssertEqual(ops.passes[0].last, "finish")
            XCTAssertGreaterThan(ops.passes[0].filter { $0.hasPrefix("attention") }.count, 0)
        }
    }
}
