/// ggml tensor element types as stored in GGUF files: id, name, and block layout.
/// Ids follow ggml.h; ids that ggml retired (4, 5, 31–33, 36–38) are unknown here.
public enum GGMLType: UInt32, CaseIterable, Sendable {
    case f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3
    case q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9
    case q2_K = 10, q3_K = 11, q4_K = 12, q5_K = 13, q6_K = 14, q8_K = 15
    case iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20
    case iq3_s = 21, iq2_s = 22, iq4_xs = 23
    case i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30
    case tq1_0 = 34, tq2_0 = 35, mxfp4 = 39

    public var name: String {
        switch self {
        case .f32: "F32"
        case .f16: "F16"
        case .q4_0: "Q4_0"
        case .q4_1: "Q4_1"
        case .q5_0: "Q5_0"
        case .q5_1: "Q5_1"
        case .q8_0: "Q8_0"
        case .q8_1: "Q8_1"
        case .q2_K: "Q2_K"
        case .q3_K: "Q3_K"
        case .q4_K: "Q4_K"
        case .q5_K: "Q5_K"
        case .q6_K: "Q6_K"
        case .q8_K: "Q8_K"
        case .iq2_xxs: "IQ2_XXS"
        case .iq2_xs: "IQ2_XS"
        case .iq3_xxs: "IQ3_XXS"
        case .iq1_s: "IQ1_S"
        case .iq4_nl: "IQ4_NL"
        case .iq3_s: "IQ3_S"
        case .iq2_s: "IQ2_S"
        case .iq4_xs: "IQ4_XS"
        case .i8: "I8"
        case .i16: "I16"
        case .i32: "I32"
        case .i64: "I64"
        case .f64: "F64"
        case .iq1_m: "IQ1_M"
        case .bf16: "BF16"
        case .tq1_0: "TQ1_0"
        case .tq2_0: "TQ2_0"
        case .mxfp4: "MXFP4"
        }
    }

    /// Elements per block.
    public var blockSize: Int {
        switch self {
        case .f32, .f16, .bf16, .i8, .i16, .i32, .i64, .f64: 1
        case .q4_0, .q4_1, .q5_0, .q5_1, .q8_0, .q8_1, .iq4_nl, .mxfp4: 32
        default: 256
        }
    }

    /// Bytes per block.
    public var bytesPerBlock: Int {
        switch self {
        case .f32: 4
        case .f16, .bf16: 2
        case .i8: 1
        case .i16: 2
        case .i32: 4
        case .i64, .f64: 8
        case .q4_0: 18
        case .q4_1: 20
        case .q5_0: 22
        case .q5_1: 24
        case .q8_0: 34
        case .q8_1: 36
        case .q2_K: 84
        case .q3_K: 110
        case .q4_K: 144
        case .q5_K: 176
        case .q6_K: 210
        case .q8_K: 292
        case .iq2_xxs: 66
        case .iq2_xs: 74
        case .iq3_xxs: 98
        case .iq1_s: 50
        case .iq4_nl: 18
        case .iq3_s: 110
        case .iq2_s: 82
        case .iq4_xs: 136
        case .iq1_m: 56
        case .tq1_0: 54
        case .tq2_0: 66
        case .mxfp4: 17
        }
    }
}
