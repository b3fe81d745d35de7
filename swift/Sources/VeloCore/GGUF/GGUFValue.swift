/// GGUF metadata value types (gguf.h `gguf_type`).
public enum GGUFValueType: UInt32, Sendable {
    case uint8 = 0, int8 = 1, uint16 = 2, int16 = 3, uint32 = 4, int32 = 5
    case float32 = 6, bool = 7, string = 8, array = 9, uint64 = 10, int64 = 11, float64 = 12

    public var name: String {
        switch self {
        case .uint8: "u8"
        case .int8: "i8"
        case .uint16: "u16"
        case .int16: "i16"
        case .uint32: "u32"
        case .int32: "i32"
        case .float32: "f32"
        case .bool: "bool"
        case .string: "string"
        case .array: "array"
        case .uint64: "u64"
        case .int64: "i64"
        case .float64: "f64"
        }
    }

    /// Encoded size of one value, or nil for variable-size types (string, array).
    var fixedSize: Int? {
        switch self {
        case .uint8, .int8, .bool: 1
        case .uint16, .int16: 2
        case .uint32, .int32, .float32: 4
        case .uint64, .int64, .float64: 8
        case .string, .array: nil
        }
    }
}

/// One metadata value. Strings keep their raw bytes: vocabularies may hold bytes that are
/// not valid UTF-8, and the tokenizer needs them exactly.
public indirect enum GGUFValue: Sendable {
    case uint8(UInt8), int8(Int8), uint16(UInt16), int16(Int16)
    case uint32(UInt32), int32(Int32), uint64(UInt64), int64(Int64)
    case float32(Float), float64(Double), bool(Bool)
    case string([UInt8])
    case array(GGUFValueType, [GGUFValue])

    public var type: GGUFValueType {
        switch self {
        case .uint8: .uint8
        case .int8: .int8
        case .uint16: .uint16
        case .int16: .int16
        case .uint32: .uint32
        case .int32: .int32
        case .uint64: .uint64
        case .int64: .int64
        case .float32: .float32
        case .float64: .float64
        case .bool: .bool
        case .string: .string
        case .array: .array
        }
    }

    /// Any integer type as Int (nil if it does not fit or is not an integer).
    public var int: Int? {
        switch self {
        case .uint8(let v): Int(v)
        case .int8(let v): Int(v)
        case .uint16(let v): Int(v)
        case .int16(let v): Int(v)
        case .uint32(let v): Int(v)
        case .int32(let v): Int(v)
        case .uint64(let v): v <= UInt64(Int.max) ? Int(v) : nil
        case .int64(let v): Int(v)
        default: nil
        }
    }

    public var double: Double? {
        switch self {
        case .float32(let v): Double(v)
        case .float64(let v): v
        default: int.map(Double.init)
        }
    }

    public var bool: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    public var string: String? {
        if case .string(let b) = self { return String(decoding: b, as: UTF8.self) }
        return nil
    }

    public var bytes: [UInt8]? {
        if case .string(let b) = self { return b }
        return nil
    }

    public var array: [GGUFValue]? {
        if case .array(_, let a) = self { return a }
        return nil
    }
}
