/// Splits text into the words that byte-level BPE merges within, reproducing the regex list
/// llama.cpp applies for each `tokenizer.ggml.pre` value with hand-written scanners.
///
/// llama.cpp runs the regexes one after the other: each one cuts every piece left by the
/// previous one into its matches and the stretches between matches. The two big patterns
/// (GPT-2's and Llama 3's) are scanned the way llama.cpp's own custom splitters do; the small
/// ones (`\p{N}`, `[0-9][0-9][0-9]`, character-class runs) are scanned as `std::regex` would.
/// Character classes follow llama.cpp's conventions: `\s` is Unicode White_Space, and
/// categories come from the general category.
struct PreTokenizer {
    enum Pass {
        /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
        case gpt2
        /// Llama 3's pattern; `maxDigits` is 3 for `\p{N}{1,3}`, 1 for Qwen 2's `\p{N}`.
        case llama3(maxDigits: Int)
        /// `[class]+`, or `\s?[class]+` when `optionalSpace`.
        case run(CharacterClass, optionalSpace: Bool)
        /// `[class]`: each character of the class on its own.
        case single(CharacterClass)
        /// `[0-9][0-9][0-9]`
        case digitTriples
        /// `\s+$`
        case trailingWhitespace
    }

    enum CharacterClass {
        case letter                // \p{L}
        case number                // \p{N}
        case punctuation           // \p{P}
        case falconPunctuation     // [\p{P}\$\+<=>\^~\|`]
        case defaultPunctuation    // [\p{P}\$\+<=>\^~\|]
        case newline               // [\r\n]
        case lineFeed              // [\n]
        case deepseekCasedLetter   // DeepSeek LLM's explicit list of cased letters
        case deepseekPunctuation   // [!-/:-~！-／：-～‘-‟　-。]
        case cjk                   // [一-龥ࠀ-一가-퟿]
        case poroWord              // [^(\s|.,!?…。，、।۔،)]

        @inline(__always)
        func contains(_ cp: UInt32, _ flags: CodepointFlags) -> Bool {
            // llama.cpp's regexes see every whitespace character as whitespace only (non-ASCII
            // ones are rewritten to \v first), so no class but [\r\n] contains any.
            if flags.isWhitespace && self != .newline { return false }
            switch self {
            case .letter: return flags.isLetter
            case .number: return flags.isNumber
            case .punctuation: return flags.isPunctuation
            case .falconPunctuation: return flags.isPunctuation || Self.isFalconSymbol(cp) || cp == 0x60
            case .defaultPunctuation: return flags.isPunctuation || Self.isFalconSymbol(cp)
            case .newline: return cp == 0x0A || cp == 0x0D
            case .lineFeed: return cp == 0x0A
            case .deepseekCasedLetter: return Self.inRanges(cp, Self.deepseekCasedLetters)
            case .deepseekPunctuation: return Self.inRanges(cp, Self.deepseekPunctuationRanges)
            case .cjk: return (cp >= 0x0800 && cp <= 0x9FA5) || (cp >= 0xAC00 && cp <= 0xD7FF)
            case .poroWord: return !Self.poroBreaks.contains(cp)
            }
        }

        /// `$ + < = > ^ ~ |`
        private static func isFalconSymbol(_ cp: UInt32) -> Bool {
            cp == 0x24 || cp == 0x2B || (cp >= 0x3C && cp <= 0x3E) || cp == 0x5E || cp == 0x7E || cp == 0x7C
        }

        private static let poroBreaks: Set<UInt32> = [
            0x28, 0x29, 0x7C, 0x2E, 0x2C, 0x21, 0x3F, 0x2026, 0x3002, 0xFF0C, 0x3001, 0x0964, 0x06D4, 0x060C,
        ]

        private static func inRanges(_ cp: UInt32, _ ranges: [ClosedRange<UInt32>]) -> Bool {
            var lo = 0, hi = ranges.count
            while lo < hi {
                let mid = (lo + hi) / 2
                if cp > ranges[mid].upperBound {
                    lo = mid + 1
                } else if cp < ranges[mid].lowerBound {
                    hi = mid
                } else {
                    return true
                }
            }
            return false
        }

        private static let deepseekPunctuationRanges: [ClosedRange<UInt32>] = [
            0x21...0x2F, 0x3A...0x7E, 0x2018...0x201F, 0x3000...0x3002, 0xFF01...0xFF0F, 0xFF1A...0xFF5E,
        ]

        /// The cased letters (Lu, Ll, Lt) DeepSeek LLM's tokenizer lists, as code point ranges.
        private static let deepseekCasedLetters: [ClosedRange<UInt32>] = [
            0x41...0x5A, 0x61...0x7A, 0xB5...0xB5, 0xC0...0xD6, 0xD8...0xF6, 0xF8...0x1BA, 0x1BC...0x1BF,
            0x1C4...0x293, 0x295...0x2AF, 0x370...0x373, 0x376...0x377, 0x37B...0x37D, 0x37F...0x37F,
            0x386...0x386, 0x388...0x38A, 0x38C...0x38C, 0x38E...0x3A1, 0x3A3...0x3F5, 0x3F7...0x481,
            0x48A...0x52F, 0x531...0x556, 0x10A0...0x10C5, 0x13A0...0x13F5, 0x13F8...0x13FD,
            0x1C90...0x1CBA, 0x1CBD...0x1CBF, 0x1D00...0x1D2B, 0x1D6B...0x1D77, 0x1D79...0x1D9A,
            0x1E00...0x1F15, 0x1F18...0x1F1D, 0x1F20...0x1F45, 0x1F48...0x1F4D, 0x1F50...0x1F57,
            0x1F59...0x1F59, 0x1F5B...0x1F5B, 0x1F5D...0x1F5D, 0x1F5F...0x1F7D, 0x1F80...0x1FB4,
            0x1FB6...0x1FBC, 0x1FBE...0x1FBE, 0x1FC2...0x1FC4, 0x1FC6...0x1FCC, 0x1FD0...0x1FD3,
            0x1FD6...0x1FDB, 0x1FE0...0x1FEC, 0x1FF2...0x1FF4, 0x1FF6...0x1FFC, 0x2102...0x2102,
            0x2107...0x2107, 0x210A...0x2113, 0x2115...0x2115, 0x2119...0x211D, 0x2124...0x2124,
            0x2126...0x2126, 0x2128...0x2128, 0x212A...0x212D, 0x212F...0x2134, 0x2139...0x2139,
            0x213C...0x213F, 0x2145...0x2149, 0x214E...0x214E, 0x2183...0x2184, 0x2C00...0x2C7B,
            0x2C7E...0x2CE4, 0x2CEB...0x2CEE, 0x2CF2...0x2CF3, 0xA640...0xA66D, 0xA680...0xA69B,
            0xA722...0xA76F, 0xA771...0xA787, 0xA78B...0xA78E, 0xAB70...0xABBF, 0xFB00...0xFB06,
            0xFB13...0xFB17, 0xFF21...0xFF3A, 0xFF41...0xFF5A, 0x10400...0x1044F, 0x104B0...0x104D3,
            0x104D8...0x104FB, 0x10C80...0x10CB2, 0x10CC0...0x10CF2, 0x118A0...0x118DF, 0x1E900...0x1E943,
        ]
    }

    let passes: [Pass]

    /// Settings llama.cpp ties to a `tokenizer.ggml.pre` value.
    struct Configuration {
        let preTokenizer: PreTokenizer
        var cleanSpaces = true
        var ignoreMerges = false
        var addBOS = false
    }

    /// The configuration for a `tokenizer.ggml.pre` value (nil: not supported).
    static func configuration(for name: String) -> Configuration? {
        let gpt2 = PreTokenizer(passes: [.gpt2])
        let llama3 = PreTokenizer(passes: [.llama3(maxDigits: 3)])
        let qwen2 = PreTokenizer(passes: [.llama3(maxDigits: 1)])
        let starcoder = PreTokenizer(passes: [.single(.number), .gpt2])
        let poro = PreTokenizer(passes: [.run(.poroWord, optionalSpace: true)])
        switch name {
        case "default":
            return Configuration(preTokenizer: PreTokenizer(passes: [
                .run(.defaultPunctuation, optionalSpace: false), .gpt2, .run(.number, optionalSpace: false), .digitTriples,
            ]))
        case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano":
            return Configuration(preTokenizer: llama3, ignoreMerges: true, addBOS: true)
        case "dbrx", "smaug-bpe", "glm4", "chatglm-bpe":
            return Configuration(preTokenizer: llama3)
        case "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open", "grok-2":
            return Configuration(preTokenizer: qwen2, cleanSpaces: false)
        case "stablelm2", "megrez":
            return Configuration(preTokenizer: qwen2)
        case "deepseek-llm":
            return Configuration(preTokenizer: PreTokenizer(passes: [
                .single(.newline), .run(.deepseekCasedLetter, optionalSpace: true),
                .run(.deepseekPunctuation, optionalSpace: true), .trailingWhitespace, .run(.cjk, optionalSpace: false),
                .run(.number, optionalSpace: false),
            ]), cleanSpaces: false)
        case "deepseek-coder":
            return Configuration(preTokenizer: PreTokenizer(passes: [
                .single(.newline), .run(.letter, optionalSpace: true), .run(.punctuation, optionalSpace: true),
                .run(.cjk, optionalSpace: false), .single(.number),
            ]), cleanSpaces: false)
        case "falcon":
            return Configuration(preTokenizer: PreTokenizer(passes: [
                .run(.falconPunctuation, optionalSpace: false), .gpt2, .digitTriples,
            ]))
        case "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
             "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "exaone4", "mpt", "olmo", "jais":
            return Configuration(preTokenizer: gpt2)
        case "trillion", "granite-docling":
            return Configuration(preTokenizer: gpt2, cleanSpaces: false)
        case "starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2":
            return Configuration(preTokenizer: starcoder)
        case "command-r", "smollm":
            return Configuration(preTokenizer: starcoder, cleanSpaces: false)
        case "bloom", "gpt3-finnish":
            return Configuration(preTokenizer: poro)
        case "poro-chat":
            return Configuration(preTokenizer: poro, cleanSpaces: false)
        case "gemma4":
            // `[^\n]+|[\n]+` over text whose spaces are already ▁ (Tokenizer)
            return Configuration(preTokenizer: PreTokenizer(passes: [.run(.lineFeed, optionalSpace: false)]), addBOS: true)
        case "viking":
            return Configuration(preTokenizer: PreTokenizer(passes: [
                .run(.poroWord, optionalSpace: true), .single(.number),
            ]), cleanSpaces: false)
        default:
            return nil
        }
    }

    /// Cuts `codepoints` into words: `words` receives the end index of each word, in order.
    func split(codepoints: [UInt32], flags: [UInt8], into words: inout [Int32], scratch: inout [Int32]) {
        words.removeAll(keepingCapacity: true)
        guard !codepoints.isEmpty else { return }
        words.append(Int32(codepoints.count))
        codepoints.withUnsafeBufferPointer { cps in
            flags.withUnsafeBufferPointer { fl in
                let text = Text(cps: cps, flags: fl)
                for pass in passes {
                    // The previous pass's words become the pieces this pass cuts further.
                    swap(&words, &scratch)
                    var cut = Cutter()
                    swap(&cut.out, &words)
                    cut.out.removeAll(keepingCapacity: true)
                    var begin = 0
                    for end in scratch {
                        cut.last = begin
                        text.apply(pass, begin, Int(end), &cut)
                        begin = Int(end)
                    }
                    swap(&cut.out, &words)
                }
            }
        }
    }

    /// The text being split, with accessors that read as "nothing" past a piece's end.
    private struct Text {
        let cps: UnsafeBufferPointer<UInt32>
        let flags: UnsafeBufferPointer<UInt8>

        @inline(__always) func flags(_ i: Int, _ end: Int) -> CodepointFlags {
            i < end ? CodepointFlags(rawValue: flags[i]) : CodepointFlags(rawValue: 0)
        }

        @inline(__always) func cp(_ i: Int, _ end: Int) -> UInt32 {
            i < end ? cps[i] : UInt32.max
        }

        func apply(_ pass: Pass, _ begin: Int, _ end: Int, _ cut: inout Cutter) {
            switch pass {
            case .gpt2:
                gpt2(begin, end, &cut)
            case .llama3(let maxDigits):
                llama3(begin, end, maxDigits, &cut)
            case .run(let cls, let optionalSpace):
                matches(begin, end, &cut) { pos in
                    var p = pos
                    if optionalSpace && flags(p, end).isWhitespace && p + 1 < end
                        && cls.contains(cps[p + 1], flags(p + 1, end)) {
                        p += 1
                    }
                    guard p < end, cls.contains(cps[p], flags(p, end)) else { return nil }
                    p += 1
                    while p < end && cls.contains(cps[p], flags(p, end)) { p += 1 }
                    return p
                }
            case .single(let cls):
                matches(begin, end, &cut) { pos in cls.contains(cps[pos], flags(pos, end)) ? pos + 1 : nil }
            case .digitTriples:
                matches(begin, end, &cut) { pos in
                    guard pos + 3 <= end else { return nil }
                    for k in pos..<(pos + 3) where !(cps[k] >= 0x30 && cps[k] <= 0x39) { return nil }
                    return pos + 3
                }
            case .trailingWhitespace:
                var t = end
                while t > begin && flags(t - 1, end).isWhitespace { t -= 1 }
                cut.take(t)
                cut.take(end)
            }
        }

        /// std::regex_iterator over one piece: each match and each gap between matches become
        /// words. `match(pos)` returns the end of the match starting at `pos`, if any.
        @inline(__always)
        private func matches(_ begin: Int, _ end: Int, _ cut: inout Cutter, _ match: (Int) -> Int?) {
            var pos = begin
            while pos < end {
                if let m = match(pos), m > pos {
                    cut.take(pos)
                    cut.take(m)
                    pos = m
                } else {
                    pos += 1
                }
            }
            cut.take(end)
        }

        // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
        private func gpt2(_ begin: Int, _ end: Int, _ cut: inout Cutter) {
            var pos = begin
            while pos < end {
                let c = cps[pos]
                let f = CodepointFlags(rawValue: flags[pos])

                if c == 0x27 && pos + 1 < end {   // '
                    let c1 = cps[pos + 1]
                    if c1 == 0x73 || c1 == 0x74 || c1 == 0x6D || c1 == 0x64 {   // s t m d
                        pos += 2
                        cut.take(pos)
                        continue
                    }
                    if pos + 2 < end {
                        let c2 = cps[pos + 2]
                        if (c1 == 0x72 && c2 == 0x65) || (c1 == 0x76 && c2 == 0x65) || (c1 == 0x6C && c2 == 0x6C) {   // re ve ll
                            pos += 3
                            cut.take(pos)
                            continue
                        }
                    }
                }

                // An optional leading space joins the letters, digits or symbols after it.
                let lead = c == 0x20 ? flags(pos + 1, end) : f
                if lead.isLetter || lead.isNumber {
                    let isLetter = lead.isLetter
                    if c == 0x20 { pos += 1 }
                    while isLetter ? flags(pos, end).isLetter : flags(pos, end).isNumber { pos += 1 }
                    cut.take(pos)
                    continue
                }
                if Self.isOther(lead) {
                    if c == 0x20 { pos += 1 }
                    while Self.isOther(flags(pos, end)) { pos += 1 }
                    cut.take(pos)
                    continue
                }

                var spaces = 0
                while flags(pos + spaces, end).isWhitespace { spaces += 1 }
                if spaces > 1 && pos + spaces < end {
                    pos += spaces - 1   // \s+(?!\S): leave the last space to the next word
                } else if spaces > 0 {
                    pos += spaces
                } else {
                    pos += 1
                }
                cut.take(pos)
            }
        }

        // Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
        private func llama3(_ begin: Int, _ end: Int, _ maxDigits: Int, _ cut: inout Cutter) {
            var pos = begin
            while pos < end {
                let c = cps[pos]
                let f = CodepointFlags(rawValue: flags[pos])

                if c == 0x27 && pos + 1 < end {
                    let c1 = Self.asciiLower(cps[pos + 1])
                    if c1 == 0x73 || c1 == 0x74 || c1 == 0x6D || c1 == 0x64 {
                        pos += 2
                        cut.take(pos)
                        continue
                    }
                    if pos + 2 < end {
                        let c2 = Self.asciiLower(cps[pos + 2])
                        if (c1 == 0x72 && c2 == 0x65) || (c1 == 0x76 && c2 == 0x65) || (c1 == 0x6C && c2 == 0x6C) {
                            pos += 3
                            cut.take(pos)
                            continue
                        }
                    }
                }

                // [^\r\n\p{L}\p{N}]?\p{L}+
                if !(c == 0x0D || c == 0x0A || f.isNumber) && (f.isLetter || flags(pos + 1, end).isLetter) {
                    pos += 1
                    while flags(pos, end).isLetter { pos += 1 }
                    cut.take(pos)
                    continue
                }

                // \p{N}{1,maxDigits}
                if f.isNumber {
                    var groupStart = pos
                    while flags(pos, end).isNumber {
                        pos += 1
                        if pos - groupStart >= maxDigits {
                            cut.take(pos)
                            groupStart = pos
                        }
                    }
                    cut.take(pos)
                    continue
                }

                // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
                let lead = c == 0x20 ? flags(pos + 1, end) : f
                if !(lead.isWhitespace || lead.isLetter || lead.isNumber) {
                    if c == 0x20 { pos += 1 }
                    while Self.isOther(flags(pos, end)) { pos += 1 }
                    while cp(pos, end) == 0x0D || cp(pos, end) == 0x0A { pos += 1 }
                    cut.take(pos)
                    continue
                }

                var spaces = 0
                var afterLastNewline = -1
                while flags(pos + spaces, end).isWhitespace {
                    let w = cps[pos + spaces]
                    if w == 0x0D || w == 0x0A { afterLastNewline = pos + spaces + 1 }
                    spaces += 1
                }
                if afterLastNewline >= 0 {
                    pos = afterLastNewline             // \s*[\r\n]+
                } else if spaces > 1 && pos + spaces < end {
                    pos += spaces - 1                  // \s+(?!\S)
                } else if spaces > 0 {
                    pos += spaces                      // \s+
                } else {
                    pos += 1
                }
                cut.take(pos)
            }
        }

        /// `[^\s\p{L}\p{N}]`, for a character inside the piece.
        @inline(__always)
        private static func isOther(_ f: CodepointFlags) -> Bool {
            f.rawValue != 0 && !(f.isWhitespace || f.isLetter || f.isNumber)
        }

        @inline(__always)
        private static func asciiLower(_ c: UInt32) -> UInt32 {
            (c >= 0x41 && c <= 0x5A) ? c + 0x20 : c
        }
    }

    /// Collects word ends, ignoring empty words.
    private struct Cutter {
        var out: [Int32] = []
        var last = 0

        @inline(__always)
        mutating func take(_ end: Int) {
            if end > last {
                out.append(Int32(end))
                last = end
            }
        }
    }
}
