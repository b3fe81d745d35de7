/// An opened GGUF model: the mapped file, its tokenizer and a description of it.
/// Vocabulary-only files (no tensors) open too: they are enough to tokenize.
public final class ModelFile: @unchecked Sendable {
    public let gguf: GGUFFile
    public let path: String
    /// nil (with `tokenizerError` set) when the file has no usable tokenizer.
    public let tokenizer: Tokenizer?
    public let tokenizerError: VeloError?

    public init(path: String) throws {
        self.path = path
        gguf = try GGUFFile(path: path)
        if gguf["tokenizer.ggml.model"] == nil {
            tokenizer = nil
            tokenizerError = VeloError(.unsupported, "\(path) has no tokenizer (no tokenizer.ggml.model metadata)")
        } else {
            do {
                tokenizer = try Tokenizer(gguf: gguf)
                tokenizerError = nil
            } catch let e as VeloError {
                throw VeloError(e.code, "\(path): \(e.message)")
            }
        }
    }

    public func requireTokenizer() throws -> Tokenizer {
        if let tokenizer { return tokenizer }
        throw tokenizerError ?? VeloError(.unsupported, "\(path) has no tokenizer")
    }

    public var parameterCount: Int { gguf.tensors.reduce(0) { $0 + $1.elementCount } }

    /// Everything `velo_model_info` reports. Long arrays (vocabularies, merges) are
    /// summarised by type and length so the document stays small.
    public func infoJSON(maxArrayItems: Int = 16) -> JSON {
        var meta: [(String, JSON)] = []
        for key in gguf.metadataKeys {
            guard let v = gguf.metadata[key] else { continue }
            meta.append((key, ModelFile.json(v, maxArrayItems: maxArrayItems)))
        }
        var typeCounts: [String: Int] = [:]
        for t in gguf.tensors { typeCounts[t.type.name, default: 0] += 1 }
        let tensors = gguf.tensors.map { t in
            JSON.object([
                ("name", .string(t.name)), ("type", .string(t.type.name)),
                ("dims", .array(t.dims.map { .int($0) })),
                ("offset", .int(t.offset)), ("bytes", .int(t.byteCount)),
            ])
        }
        var tok: JSON = .null
        if let t = tokenizer {
            tok = .object([
                ("model", .string(t.modelName)), ("pre", .string(t.preName)),
                ("vocab_size", .int(t.vocabSize)),
                ("bos", t.bos.map { .int(Int($0)) } ?? .null), ("eos", t.eos.map { .int(Int($0)) } ?? .null),
                ("add_bos", .bool(t.addBOS)), ("add_eos", .bool(t.addEOS)),
            ])
        }
        return .object([
            ("path", .string(path)),
            ("file_size", .int(gguf.file.size)),
            ("gguf_version", .int(Int(gguf.version))),
            ("architecture", gguf.architecture.map { .string($0) } ?? .null),
            ("name", gguf.string("general.name").map { .string($0) } ?? .null),
            ("tensor_count", .int(gguf.tensors.count)),
            ("parameter_count", .int(parameterCount)),
            ("tensor_bytes", .int(gguf.tensors.reduce(0) { $0 + $1.byteCount })),
            ("tensor_types", .object(typeCounts.sorted { $0.key < $1.key }.map { ($0.key, .int($0.value)) })),
            ("alignment", .int(gguf.alignment)),
            ("data_offset", .int(gguf.dataOffset)),
            ("tokenizer", tok),
            ("metadata", .object(meta)),
            ("tensors", .array(tensors)),
        ])
    }

    static func json(_ v: GGUFValue, maxArrayItems: Int) -> JSON {
        switch v {
        case .uint8(let x): return .int(Int(x))
        case .int8(let x): return .int(Int(x))
        case .uint16(let x): return .int(Int(x))
        case .int16(let x): return .int(Int(x))
        case .uint32(let x): return .int(Int(x))
        case .int32(let x): return .int(Int(x))
        case .uint64(let x): return .number(Double(x))
        case .int64(let x): return .number(Double(x))
        case .float32(let x): return .number(Double(x))
        case .float64(let x): return .number(x)
        case .bool(let b): return .bool(b)
        case .string(let b): return .string(String(decoding: b, as: UTF8.self))
        case .array(let type, let items):
            if items.count > maxArrayItems {
                return .object([("type", .string("array")), ("element_type", .string(type.name)), ("count", .int(items.count))])
            }
            return .array(items.map { json($0, maxArrayItems: maxArrayItems) })
        }
    }
}
