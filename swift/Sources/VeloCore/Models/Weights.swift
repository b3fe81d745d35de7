import CKernels

/// A 2-D weight inside the mapped file: `rows` rows of `cols` elements of `type`.
/// y = W·x multiplies each row with the activation vector.
public struct WeightMatrix: @unchecked Sendable {
    public let name: String
    public let type: GGMLType
    public let data: UnsafeRawPointer
    public let rows: Int
    public let cols: Int
    public let rowBytes: Int

    /// The activation format this weight multiplies with (quantized once per input).
    public var activationType: Int32 { ck_vec_dot_type(Int32(type.rawValue)) }

    /// Rows start..<start+count as a weight of their own (a view: a fused tensor's parts).
    func rows(_ start: Int, _ count: Int) -> WeightMatrix {
        precondition(start >= 0 && start + count <= rows)
        return WeightMatrix(name: "\(name)[\(start)..<\(start + count)]", type: type, data: data + start * rowBytes,
                            rows: count, cols: cols, rowBytes: rowBytes)
    }
}

/// A 1-D float vector (norm weights, biases), converted to F32 once at load.
public struct WeightVector: Sendable {
    public let name: String
    public let values: [Float]
}

/// Looks tensors up by name with shape and type checks, so a malformed model fails at load
/// with a message naming the tensor, never inside a kernel. It remembers what was taken: a
/// tensor no architecture code asked for means a quirk Velo would silently ignore.
final class WeightLoader {
    let gguf: GGUFFile
    private var used = Set<String>()

    init(gguf: GGUFFile) { self.gguf = gguf }

    /// Counts blk.N.* for N >= `first` as known though not run (the prediction heads after a
    /// model's blocks).
    func skipBlocks(from first: Int) {
        for t in gguf.tensors where t.name.hasPrefix("blk.") {
            if let n = Int(t.name.dropFirst(4).prefix(while: \.isNumber)), n >= first { used.insert(t.name) }
        }
    }

    /// Counts these tensors as known though not run (where present): the K/V projections of
    /// Gemma 4's layers that read an earlier layer's K/V.
    func skip(_ names: [String]) { used.formUnion(names.filter { gguf.tensor($0) != nil }) }

    /// Throws, naming them, if the file holds tensors that were never loaded.
    func checkAllUsed() throws {
        let unused = gguf.tensors.map(\.name).filter { !used.contains($0) }
        guard unused.isEmpty else {
            let list = unused.prefix(5).joined(separator: ", ") + (unused.count > 5 ? " and \(unused.count - 5) more" : "")
            throw VeloError(.unsupported, "\(gguf.file.path): tensors Velo does not know how to use for \(gguf.architecture ?? "this architecture"): \(list)")
        }
    }

    func matrix(_ name: String, rows: Int, cols: Int) throws -> WeightMatrix {
        guard let t = gguf.tensor(name) else {
            throw VeloError(.invalidFile, "\(gguf.file.path): tensor '\(name)' is missing")
        }
        used.insert(name)
        guard t.dims.count == 2, t.dims[0] == cols, t.dims[1] == rows else {
            throw VeloError(.invalidFile, "\(gguf.file.path): tensor '\(name)' has shape \(t.dims), expected [\(cols), \(rows)]")
        }
        guard ck_type_supported(Int32(t.type.rawValue)) != 0 else {
            throw VeloError(.unsupported, "\(gguf.file.path): tensor '\(name)' has type \(t.type.name), which Velo cannot compute with yet")
        }
        return WeightMatrix(name: name, type: t.type, data: gguf.data(of: t), rows: rows, cols: cols,
                            rowBytes: t.byteCount / rows)
    }

    /// A stacked 3-D tensor of `count` matrices of `rows` × `cols` (llama.cpp's `ffn_*_exps`), as
    /// one view per matrix.
    func experts(_ name: String, count: Int, rows: Int, cols: Int) throws -> [WeightMatrix] {
        guard let t = gguf.tensor(name) else {
            throw VeloError(.invalidFile, "\(gguf.file.path): tensor '\(name)' is missing")
        }
        used.insert(name)
        guard t.dims == [cols, rows, count] else {
            throw VeloError(.invalidFile, "\(gguf.file.path): tensor '\(name)' has shape \(t.dims), expected [\(cols), \(rows), \(count)]")
        }
        guard ck_type_supported(Int32(t.type.rawValue)) != 0 else {
            throw VeloError(.unsupported, "\(gguf.file.path): tensor '\(name)' has type \(t.type.name), which Velo cannot compute with yet")
        }
        let all = WeightMatrix(name: name, type: t.type, data: gguf.data(of: t), rows: rows * count, cols: cols,
                               rowBytes: t.byteCount / (rows * count))
        return (0..<count).map { all.rows($0 * rows, rows) }
    }

    func optionalMatrix(_ name: String, rows: Int, cols: Int) throws -> WeightMatrix? {
        gguf.tensor(name) == nil ? nil : try matrix(name, rows: rows, cols: cols)
    }

    func vector(_ name: String, count: Int) throws -> WeightVector {
        guard let t = gguf.tensor(name) else {
            throw VeloError(.invalidFile, "\(gguf.file.path): tensor '\(name)' is missing")
        }
        used.insert(name)
        guard t.elementCount == count else {
            throw VeloError(.invalidFile, "\(gguf.file.path): tensor '\(name)' has \(t.elementCount) elements, expected \(count)")
        }
        guard ck_type_supported(Int32(t.type.rawValue)) != 0 else {
            throw VeloError(.unsupported, "\(gguf.file.path): tensor '\(name)' has unsupported type \(t.type.name)")
        }
        var values = [Float](repeating: 0, count: count)
        values.withUnsafeMutableBufferPointer { ck_dequantize_row(Int32(t.type.rawValue), gguf.data(of: t), $0.baseAddress, Int64(count)) }
        return WeightVector(name: name, values: values)
    }

    func optionalVector(_ name: String, count: Int) throws -> WeightVector? {
        gguf.tensor(name) == nil ? nil : try vector(name, count: count)
    }
}
