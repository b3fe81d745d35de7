@_spi(_Unicode) import Swift

/// The character classes the pre-tokenizer regexes talk about (`\p{L}`, `\p{N}`, `\s` …),
/// one bit each, as llama.cpp's Unicode tables define them: the general category plus
/// Unicode's White_Space property.
struct CodepointFlags: OptionSet {
    let rawValue: UInt8

    static let number = CodepointFlags(rawValue: 1 << 0)       // \p{N}
    static let letter = CodepointFlags(rawValue: 1 << 1)       // \p{L}
    static let separator = CodepointFlags(rawValue: 1 << 2)    // \p{Z}
    static let mark = CodepointFlags(rawValue: 1 << 3)         // \p{M}
    static let punctuation = CodepointFlags(rawValue: 1 << 4)  // \p{P}
    static let symbol = CodepointFlags(rawValue: 1 << 5)       // \p{S}
    static let control = CodepointFlags(rawValue: 1 << 6)      // \p{C}, unassigned included
    static let whitespace = CodepointFlags(rawValue: 1 << 7)   // \s

    @inline(__always) var isNumber: Bool { rawValue & Self.number.rawValue != 0 }
    @inline(__always) var isLetter: Bool { rawValue & Self.letter.rawValue != 0 }
    @inline(__always) var isWhitespace: Bool { rawValue & Self.whitespace.rawValue != 0 }
    @inline(__always) var isPunctuation: Bool { rawValue & Self.punctuation.rawValue != 0 }
    @inline(__always) var isSymbol: Bool { rawValue & Self.symbol.rawValue != 0 }
    @inline(__always) var isMark: Bool { rawValue & Self.mark.rawValue != 0 }
    @inline(__always) var isControl: Bool { rawValue & Self.control.rawValue != 0 }
}

enum UnicodeCategories {
    /// Flags of every Basic Multilingual Plane code point, computed once: the pre-tokenizers
    /// ask for a flag per character, and the stdlib's property lookup is too slow for that.
    private static let bmp: [UInt8] = (0..<0x10000).map { computeFlags(UInt32($0)).rawValue }

    @inline(__always)
    static func flags(_ cp: UInt32) -> CodepointFlags {
        if cp < 0x10000 {
            return bmp.withUnsafeBufferPointer { CodepointFlags(rawValue: $0[Int(cp)]) }
        }
        return computeFlags(cp)
    }

    static func computeFlags(_ cp: UInt32) -> CodepointFlags {
        guard let scalar = Unicode.Scalar(cp) else { return .control } // surrogates
        var flags: CodepointFlags
        switch scalar.properties.generalCategory {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter:
            flags = .letter
        case .nonspacingMark, .spacingMark, .enclosingMark:
            flags = .mark
        case .decimalNumber, .letterNumber, .otherNumber:
            flags = .number
        case .connectorPunctuation, .dashPunctuation, .openPunctuation, .closePunctuation,
             .initialPunctuation, .finalPunctuation, .otherPunctuation:
            flags = .punctuation
        case .mathSymbol, .currencySymbol, .modifierSymbol, .otherSymbol:
            flags = .symbol
        case .spaceSeparator, .lineSeparator, .paragraphSeparator:
            flags = .separator
        case .control, .format, .surrogate, .privateUse, .unassigned:
            flags = .control
        @unknown default:
            flags = .control
        }
        if scalar.properties.isWhitespace {
            flags.insert(.whitespace)
        }
        return flags
    }

    /// Simple lowercase mapping: the first scalar of the full mapping, as llama.cpp's table has it.
    static func lowercase(_ cp: UInt32) -> UInt32 {
        if cp < 0x80 {
            return (cp >= 0x41 && cp <= 0x5A) ? cp + 0x20 : cp
        }
        guard let scalar = Unicode.Scalar(cp),
              let first = scalar.properties.lowercaseMapping.unicodeScalars.first else { return cp }
        return first.value
    }

    /// First scalar of the canonical decomposition (é → e): what BERT's accent stripping keeps
    /// before it drops the combining marks.
    static func decompositionBase(_ cp: UInt32) -> UInt32 {
        guard cp >= 0xC0, let scalar = Unicode.Scalar(cp) else { return cp }
        if #available(macOS 13.0, iOS 16.0, watchOS 9.0, tvOS 16.0, *) {
            var decomposition = String(scalar)._nfd.makeIterator()
            return decomposition.next()?.value ?? cp
        }
        return cp
    }
}

/// UTF-8 helpers that never trap: malformed input decodes to U+FFFD one byte at a time.
enum UTF8Decoding {
    /// Length of the sequence a lead byte announces (1 for stray continuation bytes).
    @inline(__always)
    static func sequenceLength(_ lead: UInt8) -> Int {
        switch lead >> 4 {
        case 0xC, 0xD: return 2
        case 0xE: return 3
        case 0xF: return 4
        default: return 1
        }
    }

    /// Decodes `bytes` into code points and the byte offset where each starts
    /// (`offsets` has one extra entry: the total length).
    static func decode(_ bytes: UnsafeBufferPointer<UInt8>, codepoints: inout [UInt32], offsets: inout [Int32]) {
        codepoints.removeAll(keepingCapacity: true)
        offsets.removeAll(keepingCapacity: true)
        codepoints.reserveCapacity(bytes.count)
        offsets.reserveCapacity(bytes.count + 1)
        let n = bytes.count
        var i = 0
        while i < n {
            offsets.append(Int32(i))
            let b0 = bytes[i]
            if b0 < 0x80 {
                codepoints.append(UInt32(b0))
                i += 1
                continue
            }
            let len = sequenceLength(b0)
            var cp: UInt32 = 0xFFFD
            var used = 1
            if len > 1 && i + len <= n && b0 < 0xF8 {
                var value = UInt32(b0) & (0xFF >> (len + 1))
                var ok = true
                for k in 1..<len {
                    let b = bytes[i + k]
                    if b & 0xC0 != 0x80 { ok = false; break }
                    value = (value << 6) | UInt32(b & 0x3F)
                }
                if ok {
                    cp = value
                    used = len
                }
            }
            codepoints.append(cp)
            i += used
        }
        offsets.append(Int32(n))
    }

    static func encode(_ cp: UInt32, into out: inout [UInt8]) {
        switch cp {
        case 0..<0x80:
            out.append(UInt8(cp))
        case 0x80..<0x800:
            out.append(0xC0 | UInt8(cp >> 6))
            out.append(0x80 | UInt8(cp & 0x3F))
        case 0x800..<0x10000:
            out.append(0xE0 | UInt8(cp >> 12))
            out.append(0x80 | UInt8((cp >> 6) & 0x3F))
            out.append(0x80 | UInt8(cp & 0x3F))
        default:
            out.append(0xF0 | UInt8((cp >> 18) & 0x07))
            out.append(0x80 | UInt8((cp >> 12) & 0x3F))
            out.append(0x80 | UInt8((cp >> 6) & 0x3F))
            out.append(0x80 | UInt8(cp & 0x3F))
        }
    }
}
