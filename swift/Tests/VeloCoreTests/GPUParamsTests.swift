import Foundation
import XCTest
@testable import VeloCore

/// The typed kernel parameters (`GPUParams`) against the shaders themselves: each struct's
/// fields are its shader's `uniform Params` fields, in order and by name (each variant of the
/// block the shader has is one of its structs, and each struct one of its variants), and its
/// words are its fields in that order. A field added to a shader and not to its struct, or two
/// fields swapped, fails here without a GPU.
final class GPUParamsTests: XCTestCase {
    /// <repo>/shaders, from this file's place (<repo>/swift/Tests/VeloCoreTests/).
    private let shaders = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../../shaders").standardized

    private let families: [(shader: String, params: [KernelParams])] = [
        ("add.comp", [GPUParams.Add()]), ("add_bias.comp", [GPUParams.AddBias()]), ("rms_norm.comp", [GPUParams.RMSNorm()]),
        ("add_rms_norm.comp", [GPUParams.AddRMSNorm()]), ("add_rms_norm_q8.comp", [GPUParams.AddRMSNorm()]),
        ("argmax_rows.comp", [GPUParams.ArgmaxRows()]), ("get_rows.comp", [GPUParams.GetRows()]), ("quantize_q8.comp", [GPUParams.QuantizeQ8()]),
        ("to_f16.comp", [GPUParams.ToF16()]), ("sum_splits.comp", [GPUParams.SumSplits()]), ("swiglu.comp", [GPUParams.SwiGLU()]),
        ("swiglu_pairs.comp", [GPUParams.GLU()]), ("softcap.comp", [GPUParams.Softcap()]), ("rope.comp", [GPUParams.Rope()]),
        ("kv_store.comp", [GPUParams.KVStore()]), ("rope_store.comp", [GPUParams.RopeStore()]), ("moe_route.comp", [GPUParams.MoERoute()]),
        ("moe_combine.comp", [GPUParams.MoECombine()]),
        ("matvec.comp", [GPUParams.Product(), GPUParams.ExpertProduct()]),
        ("matvec_dot.comp", [GPUParams.Product(), GPUParams.ExpertProduct(), GPUParams.ProductRopeKV()]),
        ("matvec_dot_batch.comp", [GPUParams.Product()]), ("matvec_dot_q8out.comp", [GPUParams.ProductQ8Out()]),
        ("matmul.comp", [GPUParams.Tiles(), GPUParams.ExpertProduct()]),
        ("matmul_coop.comp", [GPUParams.CoopProduct(), GPUParams.CoopExpertProduct()]), ("matmul_cm2.comp", [GPUParams.CoopProduct()]),
        ("matmul_coop_batch.comp", [GPUParams.CoopBatchProduct()]),
        ("attention.comp", [GPUParams.Attention(), GPUParams.AttentionX16()]),
        ("attention_tiled.comp", [GPUParams.AttentionTiles()]), ("attention_coop.comp", [GPUParams.AttentionTiles()]),
        ("attention_cm2.comp", [GPUParams.AttentionCM2()]), ("attention_combine.comp", [GPUParams.AttentionCombine()]),
        ("kv_gather.comp", [GPUParams.KVGather()]),
        ("add_bias_id.comp", [GPUParams.AddBiasID()]), ("deltanet_conv.comp", [GPUParams.DeltaNetConv()]),
        ("deltanet_recur.comp", [GPUParams.DeltaNetRecur()]), ("split_query.comp", [GPUParams.GatedQuery()]),
        ("sigmoid_gate.comp", [GPUParams.GatedQuery()]),
        ("copy_rows.comp", [GPUParams.CopyRows()]), ("scale.comp", [GPUParams.Scale()]), ("per_layer_inputs.comp", [GPUParams.PerLayerInputs()]),
        ("per_layer_gate.comp", [GPUParams.PerLayerGate()]),
    ]

    /// A struct's fields, lowercased, a nested parameter struct's in its place.
    private func fields(_ params: Any) -> [String] {
        Mirror(reflecting: params).children.flatMap { child -> [String] in
            child.value is KernelParams ? fields(child.value) : [child.label!.lowercased()]
        }
    }

    /// The field names of every variant of each `uniform Params { … }` block in a shader
    /// (comments dropped, names lowercased without underscores): a block with an `#if…#endif`
    /// section of fields is two variants, without and with them. Two openings under `#if` /
    /// `#else` (other bindings) are one block.
    private func blocks(_ shader: String) throws -> Set<[String]> {
        let text = try String(contentsOf: shaders.appendingPathComponent(shader), encoding: .utf8)
        var out: Set<[String]> = []
        var rest = Substring(text)
        while let open = rest.range(of: "uniform Params {") {
            guard let close = rest[open.upperBound...].firstIndex(of: "}") else { break }
            var body = rest[open.upperBound..<close]
            if let last = body.range(of: "uniform Params {", options: .backwards) { body = body[last.upperBound...] }
            var plain: [String] = [], full: [String] = [], optional = false
            for line in body.split(separator: "\n") {
                let code = (line.range(of: "//").map { line[..<$0.lowerBound] } ?? line).trimmingCharacters(in: .whitespaces)
                if code.hasPrefix("#if") { optional = true; continue }
                if code.hasPrefix("#endif") { optional = false; continue }
                if code.hasPrefix("#") { continue }
                for decl in code.split(separator: ";") {
                    let words = decl.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "\t" }).map(String.init)
                    guard let type = words.first else { continue }
                    XCTAssert(["uint", "float", "int"].contains(type), "\(shader): a \(type) field (GPUParams holds 32-bit scalars only)")
                    let names = words.dropFirst().map { $0.lowercased().replacingOccurrences(of: "_", with: "") }
                    full += names
                    if !optional { plain += names }
                }
            }
            out.insert(plain)
            out.insert(full)
            rest = rest[close...]
        }
        return out
    }

    func testEachStructIsItsShadersBlock() throws {
        for (shader, structs) in families {
            let found = try blocks(shader), mine = Set(structs.map { fields($0) })
            XCTAssertFalse(found.isEmpty, "\(shader) has no Params block")
            for b in found where !mine.contains(b) { XCTFail("\(shader): no struct for its block \(b) (structs: \(structs.map { type(of: $0) }))") }
            for p in structs where !found.contains(fields(p)) { XCTFail("\(shader): \(type(of: p))'s fields \(fields(p)) are none of its blocks \(found)") }
        }
    }

    func testWordsAreTheFieldsInOrder() {
        let p = GPUParams.RopeStore(n: 1, heads: 2, kvHeads: 3, headDim: 4, ropeDim: 5, neox: 6, magnitude: 1.5, kvDim: 8, pageSize: 9,
                                    pageStride: 10, layerOff: 11, qStride: 12, kvStride: 13)
        XCTAssertEqual(p.words, [1, 2, 3, 4, 5, 6, Float(1.5).bitPattern, 8, 9, 10, 11, 12, 13])
        for (shader, structs) in families {
            for params in structs {
                XCTAssertEqual(params.words.count, fields(params).count, "\(shader): \(type(of: params)) is not all 32-bit scalars")
            }
        }
        // a nested struct's words come first, in the block's order
        let x = GPUParams.AttentionX16(attention: GPUParams.Attention(n: 1, heads: 2, kvHeads: 3, headDim: 4, kvDim: 5, pageSize: 6, pageStride: 7, layerOff: 8,
                                                                      scale: 0.5, chunk: 10, splits: 11, qStride: 12, softcap: 2, window: 14, sinks: 1,
                                                                      vOff: 16, vDim: 17),
                                       x16Stride: 15)
        XCTAssertEqual(x.words, [1, 2, 3, 4, 5, 6, 7, 8, Float(0.5).bitPattern, 10, 11, 12, Float(2).bitPattern, 14, 1, 16, 17, 15])
        XCTAssertEqual(GPUParams.Softcap(count: 7, cap: 30).words, [7, Float(30).bitPattern])
    }
}
