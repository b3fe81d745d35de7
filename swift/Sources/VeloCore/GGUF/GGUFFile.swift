/// A parsed GGUF file (v2/v3): metadata, tensor table and the mapped tensor data.
///
/// Parsing validates everything before anything is used: every count, length and offset is
/// checked against the bytes that are really there, so a corrupt or truncated file yields a
/// `VeloError(.invalidFile)` that names what is wrong and where, never a crash.
public final class GGUFFile: @unchecked Sendable {
    public struct TensorInfo: Sendable {
        public let name: String
        /// ggml order: dims[0] is the contiguous (row) dimension.
        public let dims: [Int]
        public let type: GGMLType
        /// Offset from the start of the data section.
        public let offset: Int
        public let byteCount: Int
        public var elementCount: Int { dims.reduce(1, *) }
    }

    public let file: MappedFile
    public let version: UInt32
    public let metadata: [String: GGUFValue]
    /// Keys in file order (for stable listings).
    public let metadataKeys: [String]
    public let tensors: [TensorInfo]
    public let tensorIndex: [String: Int]
    public let alignment: Int
    /// Absolute file offset where tensor data begins.
    public let dataOffset: Int

    public static let magic: UInt32 = 0x4655_4747 // "GGUF" little-endian
    static let maxDims = 4
    static let maxArrayNesting = 8

    public convenience init(path: String) throws {
        try self.init(file: MappedFile(path: path))
    }

    public init(file: MappedFile) throws {
        self.file = file
        guard let base = file.base, file.size > 0 else {
            throw VeloError.invalidFile("\(file.path): empty file, not a GGUF model")
        }
        var r = ByteReader(base: base, size: file.size, path: file.path)

        let magic = try r.u32("magic")
        guard magic == GGUFFile.magic else {
            throw VeloError.invalidFile("\(file.path): not a GGUF file (bad magic at offset 0)")
        }
        let version = try r.u32("version")
        if version == 1 {
            throw VeloError.unsupported("\(file.path): GGUF version 1 is not supported (only v2 and v3)")
        }
        guard version == 2 || version == 3 else {
            if version.byteSwapped == 2 || version.byteSwapped == 3 {
                throw VeloError.unsupported("\(file.path): big-endian GGUF files are not supported")
            }
            throw VeloError.invalidFile("\(file.path): unknown GGUF version \(version) at offset 4")
        }
        self.version = version

        let tensorCount = try r.count("tensor count", minBytesEach: 8 + 4 + 8 + 4 + 8)
        let kvCount = try r.count("metadata count", minBytesEach: 8 + 4 + 1)

        var metadata: [String: GGUFValue] = [:]
        metadata.reserveCapacity(kvCount)
        var keys: [String] = []
        keys.reserveCapacity(kvCount)
        for i in 0..<kvCount {
            let at = r.pos
            let key = try r.string("key of metadata entry \(i)")
            let keyString = String(decoding: key, as: UTF8.self)
            guard !keyString.isEmpty else {
                throw VeloError.invalidFile("\(file.path): metadata entry \(i) has an empty key (offset \(at))")
            }
            let typeAt = r.pos
            let rawType = try r.u32("type of '\(keyString)'")
            guard let type = GGUFValueType(rawValue: rawType) else {
                throw VeloError.invalidFile("\(file.path): metadata '\(keyString)' has unknown value type \(rawType) (offset \(typeAt))")
            }
            let value = try r.value(type, what: "'\(keyString)'", depth: 0)
            if metadata.updateValue(value, forKey: keyString) != nil {
                throw VeloError.invalidFile("\(file.path): duplicate metadata key '\(keyString)' (offset \(at))")
            }
            keys.append(keyString)
        }
        self.metadata = metadata
        self.metadataKeys = keys

        var alignment = 32
        if let a = metadata["general.alignment"] {
            guard case .uint32(let v) = a, v > 0, v & (v - 1) == 0 else {
                throw VeloError.invalidFile("\(file.path): general.alignment must be a power-of-two u32")
            }
            alignment = Int(v)
        }
        self.alignment = alignment

        struct RawTensor { let name: String; let dims: [Int]; let type: GGMLType; let offset: Int; let bytes: Int }
        var raw: [RawTensor] = []
        raw.reserveCapacity(tensorCount)
        var index: [String: Int] = [:]
        for i in 0..<tensorCount {
            let at = r.pos
            let nameBytes = try r.string("name of tensor \(i)")
            let name = String(decoding: nameBytes, as: UTF8.self)
            let nDims = try r.u32("dimension count of tensor '\(name)'")
            guard nDims >= 1, nDims <= UInt32(GGUFFile.maxDims) else {
                throw VeloError.invalidFile("\(file.path): tensor '\(name)' has \(nDims) dimensions (1 to \(GGUFFile.maxDims) allowed; offset \(at))")
            }
            var dims: [Int] = []
            var elements = 1
            for d in 0..<Int(nDims) {
                let v = try r.u64("dimension \(d) of tensor '\(name)'")
                guard v >= 1, v <= UInt64(Int32.max) * 64 else {
                    throw VeloError.invalidFile("\(file.path): tensor '\(name)' has an invalid dimension \(v)")
                }
                let (m, o) = elements.multipliedReportingOverflow(by: Int(v))
                guard !o, m <= Int(Int64(1) << 48) else {
                    throw VeloError.invalidFile("\(file.path): tensor '\(name)' element count overflows")
                }
                elements = m
                dims.append(Int(v))
            }
            let typeAt = r.pos
            let rawType = try r.u32("type of tensor '\(name)'")
            guard let type = GGMLType(rawValue: rawType) else {
                throw VeloError.invalidFile("\(file.path): tensor '\(name)' has unknown ggml type \(rawType) (offset \(typeAt))")
            }
            guard dims[0] % type.blockSize == 0 else {
                throw VeloError.invalidFile("\(file.path): tensor '\(name)' row length \(dims[0]) is not a multiple of the \(type.name) block size \(type.blockSize)")
            }
            let offsetRaw = try r.u64("data offset of tensor '\(name)'")
            guard offsetRaw <= UInt64(Int.max / 2) else {
                throw VeloError.invalidFile("\(file.path): tensor '\(name)' has an absurd data offset \(offsetRaw)")
            }
            let offset = Int(offsetRaw)
            guard offset % alignment == 0 else {
                throw VeloError.invalidFile("\(file.path): tensor '\(name)' data offset \(offset) is not aligned to \(alignment)")
            }
            let bytes = elements / type.blockSize * type.bytesPerBlock
            if index.updateValue(i, forKey: name) != nil {
                throw VeloError.invalidFile("\(file.path): duplicate tensor name '\(name)' (offset \(at))")
            }
            raw.append(RawTensor(name: name, dims: dims, type: type, offset: offset, bytes: bytes))
        }

        // Tensor data starts at the next multiple of the alignment.
        let dataOffset = (r.pos + alignment - 1) / alignment * alignment
        if tensorCount > 0 && dataOffset > file.size {
            throw VeloError.invalidFile("\(file.path): truncated before the tensor data section (needs offset \(dataOffset), file has \(file.size) bytes)")
        }
        self.dataOffset = dataOffset
        let dataSize = file.size - min(dataOffset, file.size)
        for t in raw {
            let (end, o) = t.offset.addingReportingOverflow(t.bytes)
            guard !o, end <= dataSize else {
                throw VeloError.invalidFile("\(file.path): tensor '\(t.name)' data (\(t.bytes) bytes at data offset \(t.offset)) lies past the end of the file (\(dataSize) data bytes)")
            }
        }
        self.tensors = raw.map { TensorInfo(name: $0.name, dims: $0.dims, type: $0.type, offset: $0.offset, byteCount: $0.bytes) }
        self.tensorIndex = index
    }

    public func tensor(_ name: String) -> TensorInfo? {
        tensorIndex[name].map { tensors[$0] }
    }

    /// Pointer to a tensor's bytes inside the mapping.
    public func data(of t: TensorInfo) -> UnsafeRawPointer {
        file.base! + dataOffset + t.offset
    }

    // MARK: typed metadata access

    public subscript(key: String) -> GGUFValue? { metadata[key] }

    public func string(_ key: String) -> String? { metadata[key]?.string }
    public func int(_ key: String) -> Int? { metadata[key]?.int }
    public func double(_ key: String) -> Double? { metadata[key]?.double }
    public func bool(_ key: String) -> Bool? { metadata[key]?.bool }

    /// `general.architecture`, the prefix of the model's hyper-parameter keys.
    public var architecture: String? { string("general.architecture") }
}

/// Bounds-checked little-endian reader over the mapping.
struct ByteReader {
    let base: UnsafeRawPointer
    let size: Int
    let path: String
    var pos = 0

    init(base: UnsafeRawPointer, size: Int, path: String) {
        self.base = base
        self.size = size
        self.path = path
    }

    var remaining: Int { size - pos }

    func truncated(_ what: String, need: Int) -> VeloError {
        VeloError.invalidFile("\(path): truncated while reading \(what) at offset \(pos) (needs \(need) bytes, \(remaining) left)")
    }

    mutating func take<T: FixedWidthInteger>(_: T.Type, _ what: String) throws -> T {
        let n = MemoryLayout<T>.size
        guard remaining >= n else { throw truncated(what, need: n) }
        let v = base.loadUnaligned(fromByteOffset: pos, as: T.self)
        pos += n
        return T(littleEndian: v)
    }

    mutating func u32(_ what: String) throws -> UInt32 { try take(UInt32.self, what) }
    mutating func u64(_ what: String) throws -> UInt64 { try take(UInt64.self, what) }

    /// A u64 count of items, each at least `minBytesEach` bytes long: rejects counts that
    /// could not possibly fit in the rest of the file before anything is allocated.
    mutating func count(_ what: String, minBytesEach: Int) throws -> Int {
        let at = pos
        let n = try u64(what)
        guard n <= UInt64(remaining / max(minBytesEach, 1)) else {
            throw VeloError.invalidFile("\(path): \(what) \(n) at offset \(at) is impossible for a file of \(size) bytes")
        }
        return Int(n)
    }

    mutating func string(_ what: String) throws -> [UInt8] {
        let at = pos
        let n = try u64("length of \(what)")
        guard n <= UInt64(remaining) else {
            throw VeloError.invalidFile("\(path): length \(n) of \(what) at offset \(at) runs past the end of the file (\(remaining) bytes left)")
        }
        let len = Int(n)
        let bytes = [UInt8](UnsafeRawBufferPointer(start: base + pos, count: len))
        pos += len
        return bytes
    }

    mutating func value(_ type: GGUFValueType, what: String, depth: Int) throws -> GGUFValue {
        switch type {
        case .uint8: return .uint8(try take(UInt8.self, what))
        case .int8: return .int8(try take(Int8.self, what))
        case .uint16: return .uint16(try take(UInt16.self, what))
        case .int16: return .int16(try take(Int16.self, what))
        case .uint32: return .uint32(try take(UInt32.self, what))
        case .int32: return .int32(try take(Int32.self, what))
        case .uint64: return .uint64(try take(UInt64.self, what))
        case .int64: return .int64(try take(Int64.self, what))
        case .float32: return .float32(Float(bitPattern: try take(UInt32.self, what)))
        case .float64: return .float64(Double(bitPattern: try take(UInt64.self, what)))
        case .bool:
            let at = pos
            let b = try take(UInt8.self, what)
            guard b <= 1 else {
                throw VeloError.invalidFile("\(path): \(what) is a bool with value \(b) at offset \(at)")
            }
            return .bool(b == 1)
        case .string:
            return .string(try string(what))
        case .array:
            guard depth < GGUFFile.maxArrayNesting else {
                throw VeloError.invalidFile("\(path): \(what) nests arrays deeper than \(GGUFFile.maxArrayNesting) levels")
            }
            let typeAt = pos
            let rawType = try u32("element type of \(what)")
            guard let elementType = GGUFValueType(rawValue: rawType) else {
                throw VeloError.invalidFile("\(path): \(what) is an array of unknown type \(rawType) (offset \(typeAt))")
            }
            let n = try count("element count of \(what)", minBytesEach: elementType.fixedSize ?? (elementType == .string ? 8 : 12))
            var items: [GGUFValue] = []
            items.reserveCapacity(n)
            for _ in 0..<n {
                items.append(try value(elementType, what: what, depth: depth + 1))
            }
            return .array(elementType, items)
        }
    }
}
