import Foundation
import XCTest
@testable import VeloCore

/// The typed kernel parameters (`GPUParams`) against the shaders themselves: each struct's
/// fields are its shader's `uniform Params` fields, in order and by name (every variant of the
/// block the shader has), and its words are its fields in that order. A field added to a shader
/// and not to its struct, or two fields swapped, fails here without a GPU.
final class GPUParamsTests: XCTestCase {
    /// <repo>/shaders, from this file's place (<repo>/swift/Tests/VeloCoreTests/).
    private let shaders = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../../shaders").standardized

    private let families: [(shader: String, params: KernelParams)] = [
        ("add.comp", GPUParams.Add()), ("add_bias.comp", GPUParams.AddBias()), ("rms_norm.comp", GPUParams.RMSNorm()),
        ("add_rms_norm.comp", GPUParams.AddRMSNorm()), ("add_rms_norm_q8.comp", GPUParams.AddRMSNorm()),
        ("argmax_rows.comp", GPUParams.ArgmaxRows()), ("get_rows.comp", GPUParams.GetRows()), ("quantize_q8.comp", GPUParams.QuantizeQ8()),
        ("to_f16.comp", GPUParams.ToF16()), ("sum_splits.comp", GPUParams.SumSplits()), ("swiglu.comp", GPUParams.GLU()),
        ("swiglu_pairs.comp", GPUParams.GLU()), ("softcap.comp", GPUParams.Softcap()), ("rope.comp", GPUParams.Rope()),
        ("kv_store.comp", GPUParams.KVStore()), ("rope_store.comp", GPUParams.RopeStore()), ("moe_route.comp", GPUParams.MoERoute()),
        ("moe_combine.comp", GPUParams.MoECombine()),
    ]

    /// The field names of every `uniform Params { … }` block in a shader, one list per block
    /// (comments and preprocessor lines dropped, names lowercased without underscores).
    private func blocks(_ shader: String) throws -> [[String]] {
        let text = try String(contentsOf: shaders.appendingPathComponent(shader), encoding: .utf8)
        var out: [[String]] = []
        var rest = Substring(text)
        while let open = rest.range(of: "uniform Params {") {
            guard let close = rest[open.upperBound...].firstIndex(of: "}") else { break }
            let body = rest[open.upperBound..<close].split(separator: "\n").map { line -> Substring in
                let code = line.range(of: "//").map { line[..<$0.lowerBound] } ?? line
                return code.trimmingCharacters(in: .whitespaces).hasPrefix("#") ? "" : code
            }.joined(separator: " ")
            var names: [String] = []
            for decl in body.split(separator: ";") {
                let words = decl.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "\t" }).map(String.init)
                guard let type = words.first else { continue }
                XCTAssert(["uint", "float", "int"].contains(type), "\(shader): a \(type) field (GPUParams holds 32-bit scalars only)")
                names += words.dropFirst().map { $0.lowercased().replacingOccurrences(of: "_", with: "") }
            }
            out.append(names)
            rest = rest[close...]
        }
        return out
    }

    func testEachStructIsItsShadersBlock() throws {
        for (shader, params) in families {
            let fields = Mirror(reflecting: params).children.map { $0.label!.lowercased() }
            let found = try blocks(shader)
            XCTAssertFalse(found.isEmpty, "\(shader) has no Params block")
            for b in found { XCTAssertEqual(fields, b, "\(shader): \(type(of: params))'s fields against the shader's") }
        }
    }

    func testWordsAreTheFieldsInOrder() {
        let p = GPUParams.RopeStore(n: 1, heads: 2, kvHeads: 3, headDim: 4, ropeDim: 5, neox: 6, magnitude: 1.5, kvDim: 8, pageSize: 9,
                                    pageStride: 10, layerOff: 11, qStride: 12, kvStride: 13)
        XCTAssertEqual(p.words, [1, 2, 3, 4, 5, 6, Float(1.5).bitPattern, 8, 9, 10, 11, 12, 13])
        for (shader, params) in families {
            let mirrored = Mirror(reflecting: params).children.count
            XCTAssertEqual(params.words.count, mirrored, "\(shader): \(type(of: params)) is not all 32-bit scalars")
        }
        XCTAssertEqual(GPUParams.Softcap(count: 7, cap: 30).words, [7, Float(30).bitPattern])
    }
}
