import CKernels

extension ModelFile {
    /// Checks that every tensor's values are numbers, as llama.cpp's `--check-tensors` does: each
    /// row dequantized (block scales included) and tested for NaN and infinity. A damaged file
    /// (a corrupted download, a broken fine-tune) is then refused at load with the tensor named,
    /// instead of answering with NaN logits. One pass over the weights: seconds for an 8B model.
    public func checkTensors() throws {
        for info in gguf.tensors where info.elementCount > 0 {
            let n = info.dims[0]
            let rows = info.elementCount / n
            let rowBytes = info.byteCount / rows
            var row = [Float](repeating: 0, count: n)
            let base = gguf.data(of: info)
            for r in 0..<rows {
                let bad: Int? = try row.withUnsafeMutableBufferPointer { y in
                    guard ck_dequantize_row(Int32(info.type.rawValue), base + r * rowBytes, y.baseAddress, Int64(n)) != 0 else {
                        throw VeloError(.unsupported, "tensor \(info.name): Velo cannot read \(info.type) values, so cannot check them")
                    }
                    return ck_all_finite_f32(y.baseAddress, Int64(n)) != 0 ? nil : y.firstIndex { !$0.isFinite }
                }
                if let j = bad {
                    throw VeloError(.invalidFile, "tensor \(info.name) (\(info.type)) holds \(row[j].isNaN ? "a NaN" : "an infinity") "
                        + "at row \(r), column \(j): the file is damaged (a corrupted download or a broken fine-tune)")
                }
            }
        }
    }
}
