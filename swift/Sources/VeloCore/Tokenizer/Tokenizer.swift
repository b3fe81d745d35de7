/// Text ↔ token ids for a model, built from the `tokenizer.ggml.*` metadata of its GGUF file
/// alone and behaving like llama.cpp's tokenizer (the test vectors of llama.cpp pass).
///
/// Supported `tokenizer.ggml.model` values: "llama" (SentencePiece), "gpt2" (byte-level BPE,
/// with the pre-tokenizers `PreTokenizer.configuration(for:)` knows), "gemma4" (BPE over
/// characters with SentencePiece's space markers and byte tokens) and "bert" (WordPiece).
/// Immutable after init, so one instance may serve several threads.
public final class Tokenizer: @unchecked Sendable {
    public let vocabSize: Int
    public let bos: Int32?
    public let eos: Int32?
    public let addBOS: Bool
    public let addEOS: Bool
    public let modelName: String
    public let preName: String
    /// SentencePiece's rule: text after the start or a special token gets a leading space.
    public let addSpacePrefix: Bool
    /// Whether decoding tidies spaces before punctuation (" ," → ","), as llama.cpp does for most BPE models.
    public let cleanSpaces: Bool

    private enum Model {
        case sentencePiece(SentencePiece)
        case bytePair(BytePairEncoder)
        case wordPiece(WordPiece)
    }

    private let model: Model
    private let texts: [[UInt8]]
    private let attributes: [TokenAttributes]
    /// What each token renders as (llama_token_to_piece with special = true).
    private let pieces: [[UInt8]]
    private let endOfGeneration: Set<Int32>
    private let specials: SpecialTokenSplitter
    /// WordPiece closes a sequence with the separator token ([SEP]).
    private let separator: Int32?
    private let addSeparator: Bool

    public init(gguf: GGUFFile) throws {
        let meta = MetadataReader(gguf: gguf)
        let modelName = try meta.requiredString("tokenizer.ggml.model")
        let preName = meta.string("tokenizer.ggml.pre") ?? "default"
        // Gemma 4's BPE: over characters, spaces as ▁, not byte-level
        let gemma4 = modelName == "gemma4"

        enum Kind { case sentencePiece, bytePair(PreTokenizer.Configuration), wordPiece }
        let kind: Kind
        switch modelName {
        case "llama":
            kind = .sentencePiece
        case "gpt2":
            guard let config = PreTokenizer.configuration(for: preName) else {
                throw VeloError(.unsupported, "\(meta.path): pre-tokenizer '\(preName)' (tokenizer.ggml.pre) is not supported")
            }
            kind = .bytePair(config)
        case "gemma4":
            kind = .bytePair(PreTokenizer.configuration(for: "gemma4")!)
        case "bert":
            kind = .wordPiece
        default:
            throw VeloError(.unsupported, "\(meta.path): tokenizer model '\(modelName)' is not supported (llama, gpt2, gemma4 and bert are)")
        }

        // The vocabulary. Token ids are positions in tokenizer.ggml.tokens.
        var texts = try meta.stringArray("tokenizer.ggml.tokens")
        let n = texts.count
        guard n > 0 else { throw VeloError(.invalidFile, "\(meta.path): tokenizer.ggml.tokens is empty") }
        guard n < Int(Int32.max) / 2 else { throw VeloError(.invalidFile, "\(meta.path): vocabulary of \(n) tokens is too large") }
        for i in 0..<n where texts[i].isEmpty {
            texts[i] = Array("[EMPTY_\(i)]".utf8)   // llama.cpp's name for empty tokens
        }
        let scores = try meta.floatArray("tokenizer.ggml.scores", count: n) ?? [Float](repeating: 0, count: n)
        var attributes = try meta.intArray("tokenizer.ggml.token_type", count: n)?.map(TokenAttributes.init(tokenType:))
            ?? [TokenAttributes](repeating: .normal, count: n)
        let literal = ByteStringTable(texts.enumerated().map { ($0.element, Int32($0.offset)) })
        if literal.count != n, let dup = (0..<n).first(where: { literal.lookup(texts[$0]) != Int32($0) }) {
            throw VeloError(.invalidFile, "\(meta.path): duplicate token '\(String(decoding: texts[dup], as: UTF8.self))' (ids \(literal.lookup(texts[dup])) and \(dup))")
        }

        // Special ids and flags: llama.cpp's defaults for the model type, then the metadata.
        var defaults = SpecialDefaults()
        switch kind {
        case .sentencePiece:
            defaults = SpecialDefaults(bos: 1, eos: 2, unknown: 0, addBOS: true, addSpacePrefix: true)
        case .wordPiece:
            defaults = SpecialDefaults(bos: 101, unknown: 100, separator: 102, addBOS: true, addSeparator: true, cleanSpaces: true)
        case .bytePair(let config):
            let chatGLM = preName == "glm4" || preName == "chatglm-bpe"
            defaults = SpecialDefaults(bos: chatGLM || gemma4 ? nil : 11, eos: gemma4 ? nil : 11, addBOS: config.addBOS, cleanSpaces: config.cleanSpaces)
        }
        let bos = try meta.tokenID("tokenizer.ggml.bos_token_id", default: defaults.bos, count: n, strict: true)
        let eos = try meta.tokenID("tokenizer.ggml.eos_token_id", default: defaults.eos, count: n, strict: true)
        let unknown = try meta.tokenID("tokenizer.ggml.unknown_token_id", default: defaults.unknown, count: n)
        let separator = try meta.tokenID("tokenizer.ggml.seperator_token_id", default: defaults.separator, count: n)
        // (llama.cpp adds Gemma 4's BOS whatever the file says)
        let addBOS = gemma4 || (meta.bool("tokenizer.ggml.add_bos_token") ?? defaults.addBOS)
        let addEOS = meta.bool("tokenizer.ggml.add_eos_token") ?? defaults.addEOS
        let addSeparator = meta.bool("tokenizer.ggml.add_sep_token") ?? defaults.addSeparator
        if addBOS && bos == nil {
            throw VeloError(.invalidFile, "\(meta.path): tokenizer.ggml.add_bos_token is set but there is no BOS token")
        }
        if addEOS && eos == nil {
            throw VeloError(.invalidFile, "\(meta.path): tokenizer.ggml.add_eos_token is set but there is no EOS token")
        }
        if case .wordPiece = kind, addSeparator && separator == nil {
            throw VeloError(.invalidFile, "\(meta.path): the WordPiece vocabulary has no separator token")
        }

        let eog = try Self.endOfGenerationTokens(meta: meta, literal: literal, count: n, eos: eos, attributes: &attributes)

        // Phi-3's added tokens swallow the whitespace after them (llama.cpp keys this on the name).
        let name = (meta.string("general.name") ?? "").lowercased()
        if name.contains("phi-3") || name.contains("phi3") {
            for id in 0..<n where !attributes[id].isDisjoint(with: [.control, .userDefined, .unknown]) {
                attributes[id].insert(.rstrip)
            }
            for (text, strip) in [("</s>", true), ("<unk>", false), ("<s>", false), ("<|endoftext|>", false)] {
                let id = literal.lookup(Array(text.utf8))
                guard id >= 0 else { continue }
                if strip { attributes[Int(id)].insert(.rstrip) } else { attributes[Int(id)].remove(.rstrip) }
            }
        }

        switch kind {
        case .sentencePiece:
            model = .sentencePiece(SentencePiece(pieces: literal, texts: texts, scores: scores, unknown: unknown))
        case .wordPiece:
            let lowercase = meta.bool("tokenizer.ggml.normalizer.lowercase") ?? true
            let stripAccents = meta.bool("tokenizer.ggml.normalizer.strip_accents") ?? lowercase
            model = .wordPiece(WordPiece(pieces: literal, unknown: unknown, lowercase: lowercase, stripAccents: stripAccents))
        case .bytePair(let config):
            let merges = try meta.stringArray("tokenizer.ggml.merges")
            model = .bytePair(BytePairEncoder(texts: texts, mergeList: merges, ignoreMerges: config.ignoreMerges,
                                              preTokenizer: config.preTokenizer, byteLevel: !gemma4))
        }
        let byteLevel: Bool
        if case .bytePair = kind { byteLevel = !gemma4 } else { byteLevel = false }

        self.vocabSize = n
        self.bos = bos
        self.eos = eos
        self.addBOS = addBOS
        self.addEOS = addEOS
        self.modelName = modelName
        self.preName = preName
        self.addSpacePrefix = meta.bool("tokenizer.ggml.add_space_prefix") ?? defaults.addSpacePrefix
        self.cleanSpaces = defaults.cleanSpaces
        self.texts = texts
        self.attributes = attributes
        self.pieces = (0..<n).map { Self.render(texts[$0], attributes[$0], byteLevel: byteLevel) }
        self.endOfGeneration = eog
        self.specials = SpecialTokenSplitter(texts: texts, attributes: attributes)
        self.separator = separator
        if case .wordPiece = kind { self.addSeparator = addSeparator } else { self.addSeparator = false }
    }

    /// What llama.cpp assumes for a model type before reading the metadata.
    private struct SpecialDefaults {
        var bos: Int32?
        var eos: Int32?
        var unknown: Int32?
        var separator: Int32?
        var addBOS = false
        var addEOS = false
        var addSeparator = false
        var addSpacePrefix = false
        var cleanSpaces = false
    }

    /// The tokens that end generation: EOS, EOT, EOM, FIM padding/repo/file separators, and
    /// every token whose text llama.cpp knows as such. Like llama.cpp, tokens found by their
    /// text become control tokens whatever their declared type.
    private static func endOfGenerationTokens(meta: MetadataReader, literal: ByteStringTable, count n: Int, eos: Int32?,
                                              attributes: inout [TokenAttributes]) throws -> Set<Int32> {
        func id(_ text: String) -> Int32? {
            let id = literal.lookup(Array(text.utf8))
            return id >= 0 ? id : nil
        }
        func firstPresent(_ candidates: [String]) -> Int32? {
            candidates.lazy.compactMap(id).first
        }
        func markControl(_ id: Int32) { attributes[Int(id)].insert(.control) }

        var eot = try meta.tokenID("tokenizer.ggml.eot_token_id", count: n)
        var eom = try meta.tokenID("tokenizer.ggml.eom_token_id", count: n)
        if eot == nil, let found = firstPresent(SpecialTexts.endOfTurn) { eot = found; markControl(found) }
        if eom == nil, let found = id("<|eom_id|>") { eom = found; markControl(found) }

        var eog = Set<Int32>()
        let fim = [("tokenizer.ggml.fim_pad_token_id", SpecialTexts.fimPad),
                   ("tokenizer.ggml.fim_rep_token_id", SpecialTexts.fimRepo),
                   ("tokenizer.ggml.fim_sep_token_id", SpecialTexts.fimSep)]
        for (key, candidates) in fim {
            if let given = try meta.tokenID(key, count: n) {
                eog.insert(given)
            } else if let found = firstPresent(candidates) {
                eog.insert(found)
                markControl(found)
            }
        }
        for candidates in [SpecialTexts.fimPrefix, SpecialTexts.fimSuffix, SpecialTexts.fimMiddle] {
            if let found = firstPresent(candidates) { markControl(found) }
        }
        for text in SpecialTexts.endOfGeneration {
            if let found = id(text) {
                eog.insert(found)
                markControl(found)
            }
        }
        for text in SpecialTexts.alwaysRendered {
            if let found = id(text) { attributes[Int(found)] = .userDefined }
        }
        eog.formUnion([eos, eot, eom].compactMap { $0 })

        // gpt-oss and solar-open: "<|end|>" ends a message there, not the generation.
        if let end = id("<|end|>"),
           (id("<|return|>") != nil && id("<|call|>") != nil) || (id("<|calls|>") != nil && id("<|flush|>") != nil) {
            eog.remove(end)
            attributes[Int(end)] = .userDefined
        }
        // Gemma 4: "</s>" is ordinary text there.
        if id("<|tool_response>") != nil, let s = id("</s>") {
            eog.remove(s)
            attributes[Int(s)] = .normal
        }
        return eog
    }

    // MARK: encoding

    /// Token ids for `text`. `addSpecial` adds BOS/EOS as the model asks (addBOS/addEOS);
    /// `parseSpecial` lets control-token text in the input (e.g. "</s>", "<|eot_id|>") stand
    /// for those tokens. User-defined tokens are always recognised.
    public func encode(_ text: String, addSpecial: Bool, parseSpecial: Bool) -> [Int32] {
        var text = text
        return text.withUTF8 { encode(bytes: $0, addSpecial: addSpecial, parseSpecial: parseSpecial) }
    }

    /// `encode` for UTF-8 bytes (malformed sequences are tokenized as they are, byte by byte).
    public func encode(bytes: UnsafeBufferPointer<UInt8>, addSpecial: Bool, parseSpecial: Bool) -> [Int32] {
        var out: [Int32] = []
        out.reserveCapacity(bytes.count / 3 + 2)
        if addSpecial && addBOS, let bos { out.append(bos) }

        var afterSpecial = true   // SentencePiece: the start counts as "after a special token"
        var scratch = BytePairEncoder.Scratch()
        for fragment in specials.split(bytes, parseSpecial: parseSpecial) {
            switch fragment {
            case .token(let id):
                out.append(id)
                afterSpecial = true
            case .text(let range):
                for (k, slice) in Self.slices(of: range, in: bytes).enumerated() {
                    let text = UnsafeBufferPointer(rebasing: bytes[slice])
                    switch model {
                    case .sentencePiece(let spm):
                        spm.encode(text, prefixSpace: addSpacePrefix && afterSpecial && k == 0, into: &out)
                    case .bytePair(let bpe) where !bpe.byteLevel:
                        // spaces as ▁ before the merges (llama.cpp's escape_whitespaces)
                        let escaped = Self.spaceMarked(text)
                        escaped.withUnsafeBufferPointer { bpe.encode($0, into: &out, scratch: &scratch) }
                    case .bytePair(let bpe):
                        bpe.encode(text, into: &out, scratch: &scratch)
                    case .wordPiece(let wpm):
                        wpm.encode(text, into: &out)
                    }
                }
                afterSpecial = false
            }
        }

        if addSpecial && addSeparator, let separator { out.append(separator) }
        if addSpecial && addEOS, let eos { out.append(eos) }
        return out
    }

    // MARK: decoding

    /// The bytes of the text for `tokens` (llama_detokenize). Control and unknown tokens render
    /// as nothing unless `renderSpecial`; `removeSpecial` drops a leading BOS and a trailing EOS
    /// where the model adds them. The result may end inside a UTF-8 sequence.
    public func decode(_ tokens: [Int32], removeSpecial: Bool = false, renderSpecial: Bool = false) throws -> [UInt8] {
        for t in tokens where t < 0 || Int(t) >= vocabSize {
            throw VeloError(.invalidArgument, "token id \(t) is outside the vocabulary (0..<\(vocabSize))")
        }
        var list = tokens[...]
        var stripSpace = addSpacePrefix
        if removeSpecial && addBOS, let first = list.first, first == bos {
            list = list.dropFirst()
            stripSpace = false
        }
        if removeSpecial && addEOS, let last = list.last, last == eos {
            list = list.dropLast()
        }

        var out: [UInt8] = []
        for t in list {
            let id = Int(t)
            if renderSpecial || attributes[id].isDisjoint(with: [.control, .unknown]) {
                let piece = pieces[id]
                if stripSpace && piece.first == 0x20 {
                    out.append(contentsOf: piece.dropFirst())
                } else {
                    out.append(contentsOf: piece)
                }
            }
            stripSpace = false
        }
        if cleanSpaces { Self.cleanUpSpaces(&out) }
        return out
    }

    /// One token's rendered bytes (llama_token_to_piece with special = true), for listings.
    public func piece(_ token: Int32) throws -> [UInt8] {
        guard token >= 0 && Int(token) < vocabSize else {
            throw VeloError(.invalidArgument, "token id \(token) is outside the vocabulary (0..<\(vocabSize))")
        }
        return pieces[Int(token)]
    }

    /// The token's text as the vocabulary stores it (▁ for spaces in SentencePiece, Ġ in BPE).
    public func tokenText(_ token: Int32) -> [UInt8]? {
        guard token >= 0 && Int(token) < vocabSize else { return nil }
        return texts[Int(token)]
    }

    /// True for EOS, EOT, EOM and other end-of-generation tokens (<|eot_id|>, <|im_end|>, …).
    public func isEndOfGeneration(_ token: Int32) -> Bool {
        endOfGeneration.contains(token)
    }

    /// True for control tokens (BOS, EOS, chat markers), which decode to nothing by default.
    public func isControl(_ token: Int32) -> Bool {
        guard token >= 0 && Int(token) < vocabSize else { return false }
        return attributes[Int(token)].contains(.control)
    }

    // MARK: helpers

    /// The tokenizers index text with 32-bit offsets; text beyond this size (256 MiB without a
    /// special token) is tokenized in slices cut at character boundaries.
    private static let maxSliceLength = 1 << 28

    private static func slices(of range: Range<Int>, in bytes: UnsafeBufferPointer<UInt8>) -> [Range<Int>] {
        guard range.count > maxSliceLength else { return [range] }
        var result: [Range<Int>] = []
        var start = range.lowerBound
        while range.upperBound - start > maxSliceLength {
            var cut = start + maxSliceLength
            while cut > start + 1 && bytes[cut] & 0xC0 == 0x80 { cut -= 1 }   // not inside a character
            result.append(start..<cut)
            start = cut
        }
        result.append(start..<range.upperBound)
        return result
    }

    /// llama_token_to_piece (special = true) for one token.
    private static func render(_ text: [UInt8], _ attr: TokenAttributes, byteLevel: Bool) -> [UInt8] {
        if !attr.isDisjoint(with: [.control, .unknown, .userDefined]) { return text }
        if attr.contains(.normal) {
            return byteLevel ? ByteLevel.decodeLenient(text) : replacingSpaceMarkers(text)
        }
        if attr.contains(.byte) {
            return [byteValue(text)]
        }
        return []
    }

    /// Spaces as "▁" (U+2581).
    private static func spaceMarked(_ text: UnsafeBufferPointer<UInt8>) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(text.count + text.count / 4)
        for b in text {
            if b == 0x20 { out.append(contentsOf: [0xE2, 0x96, 0x81]) } else { out.append(b) }
        }
        return out
    }

    /// "▁" (U+2581) back to spaces.
    private static func replacingSpaceMarkers(_ text: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        var i = 0
        while i < text.count {
            if i + 2 < text.count && text[i] == 0xE2 && text[i + 1] == 0x96 && text[i + 2] == 0x81 {
                out.append(0x20)
                i += 3
            } else {
                out.append(text[i])
                i += 1
            }
        }
        return out
    }

    /// The byte a "<0xNN>" token stands for.
    private static func byteValue(_ text: [UInt8]) -> UInt8 {
        func hex(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: return c - 0x30
            case 0x41...0x46: return c - 0x41 + 10
            case 0x61...0x66: return c - 0x61 + 10
            default: return nil
            }
        }
        guard text.count >= 5, let hi = hex(text[3]) else { return 0 }
        guard let lo = hex(text[4]) else { return hi }
        return hi << 4 | lo
    }

    /// What decoding does to text when `cleanSpaces` is set: llama.cpp's
    /// clean_up_tokenization_spaces (" ," → ",", " 's" → "'s", " ' " → "'").
    public static func cleanUpTokenizationSpaces(_ text: [UInt8]) -> [UInt8] {
        var text = text
        cleanUpSpaces(&text)
        return text
    }

    /// llama.cpp's clean-up, pass for pass (in place, as it reads back what it wrote).
    static func cleanUpSpaces(_ text: inout [UInt8]) {
        let space = UInt8(ascii: " "), quote = UInt8(ascii: "'")
        // " ?", " !", " .", " ," lose their space.
        var total = text.count
        var count = total > 0 ? 1 : 0
        for i in stride(from: 1, to: total, by: 1) {
            let x = text[i]
            if text[i - 1] == space && (x == UInt8(ascii: "?") || x == UInt8(ascii: "!") || x == UInt8(ascii: ".") || x == UInt8(ascii: ",")) {
                count -= 1
            }
            text[count] = x
            count += 1
        }
        // " ' " becomes "'".
        total = count
        count = total > 0 ? 1 : 0
        var i = 1
        while i < total {
            let x = text[i]
            if x == quote && i + 1 < total && text[i - 1] == space && text[i + 1] == space {
                count -= 1
                i += 1
                text[i] = 0
            }
            text[count] = x
            count += 1
            i += 1
        }
        // " 's", " 'm", " 're", " 've" lose their space.
        total = count
        count = total > 0 ? 1 : 0
        for i in stride(from: 1, to: total, by: 1) {
            let x = text[i]
            if text[i - 1] == space && x == quote && i + 1 < total {
                let x1 = text[i + 1]
                if x1 == UInt8(ascii: "s") || x1 == UInt8(ascii: "m") {
                    count -= 1
                } else if i + 2 < total {
                    let x2 = text[i + 2]
                    if (x1 == UInt8(ascii: "r") && x2 == UInt8(ascii: "e")) || (x1 == UInt8(ascii: "v") && x2 == UInt8(ascii: "e")) {
                        count -= 1
                    }
                }
            }
            text[count] = x
            count += 1
        }
        text.removeSubrange(count...)
    }
}

/// Token texts llama.cpp recognises by name.
private enum SpecialTexts {
    static let endOfTurn = ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                            "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"]
    static let endOfGeneration = ["<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                                  "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                                  "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                                  "<｜end▁of▁sentence｜>", "[e~["]
    static let fimPrefix = ["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                            "<|code_prefix|>", "<|prefix|>"]
    static let fimSuffix = ["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                            "<|code_suffix|>", "<|suffix|>"]
    static let fimMiddle = ["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                            "<|code_middle|>", "<|middle|>"]
    static let fimPad = ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"]
    static let fimRepo = ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"]
    static let fimSep = ["<|file_sep|>"]
    /// gpt-oss's message markers, which llama.cpp always renders.
    static let alwaysRendered = ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"]
}

/// Typed access to `tokenizer.*` metadata with errors that name the key.
private struct MetadataReader {
    let gguf: GGUFFile

    var path: String { gguf.file.path }

    func string(_ key: String) -> String? { gguf.metadata[key]?.string }
    func bool(_ key: String) -> Bool? { gguf.metadata[key]?.bool }
    func int(_ key: String) -> Int? { gguf.metadata[key]?.int }

    func requiredString(_ key: String) throws -> String {
        guard let value = gguf.metadata[key] else {
            throw VeloError(.invalidFile, "\(path): missing \(key)")
        }
        guard let s = value.string else {
            throw VeloError(.invalidFile, "\(path): \(key) must be a string, not \(value.type.name)")
        }
        return s
    }

    func stringArray(_ key: String) throws -> [[UInt8]] {
        guard let value = gguf.metadata[key] else {
            throw VeloError(.invalidFile, "\(path): missing \(key)")
        }
        guard case .array(.string, let items) = value else {
            throw VeloError(.invalidFile, "\(path): \(key) must be an array of strings")
        }
        return items.map { $0.bytes ?? [] }
    }

    /// A token id: `fallback` when absent or "none" (-1); an id outside the vocabulary is an
    /// error when `strict`, else ignored. A fallback outside the vocabulary means no token.
    func tokenID(_ key: String, default fallback: Int32? = nil, count n: Int, strict: Bool = false) throws -> Int32? {
        let fallback = fallback.flatMap { $0 < n ? $0 : nil }
        guard let raw = int(key), raw != -1, raw != Int(UInt32.max) else { return fallback }
        guard raw >= 0 && raw < n else {
            if strict { throw VeloError(.invalidFile, "\(path): \(key) = \(raw) is outside the vocabulary of \(n) tokens") }
            return fallback
        }
        return Int32(raw)
    }

    /// A per-token float array (nil when absent); its length must match the vocabulary.
    func floatArray(_ key: String, count: Int) throws -> [Float]? {
        guard let items = try array(key, count: count) else { return nil }
        return try items.map {
            guard let d = $0.double else { throw VeloError(.invalidFile, "\(path): \(key) must hold numbers") }
            return Float(d)
        }
    }

    /// A per-token integer array (nil when absent); its length must match the vocabulary.
    func intArray(_ key: String, count: Int) throws -> [Int]? {
        guard let items = try array(key, count: count) else { return nil }
        return try items.map {
            guard let i = $0.int else { throw VeloError(.invalidFile, "\(path): \(key) must hold integers") }
            return i
        }
    }

    private func array(_ key: String, count: Int) throws -> [GGUFValue]? {
        guard let value = gguf.metadata[key] else { return nil }
        guard let items = value.array else {
            throw VeloError(.invalidFile, "\(path): \(key) must be an array")
        }
        guard items.count == count else {
            throw VeloError(.invalidFile, "\(path): \(key) has \(items.count) entries for \(count) tokens")
        }
        return items
    }
}
