/// GPT-2's reversible byte ↔ character mapping: vocabularies of byte-level BPE spell every
/// byte as a printable character (space is "Ġ", newline "Ċ").
enum ByteLevel {
    /// Code point that stands for each byte.
    static let codepointOfByte: [UInt32] = {
        var map = [UInt32](repeating: 0, count: 256)
        var printable = Set<Int>()
        printable.formUnion(0x21...0x7E)
        printable.formUnion(0xA1...0xAC)
        printable.formUnion(0xAE...0xFF)
        var extra: UInt32 = 0
        for b in 0..<256 {
            if printable.contains(b) {
                map[b] = UInt32(b)
            } else {
                map[b] = 256 + extra
                extra += 1
            }
        }
        return map
    }()

    /// Inverse of `codepointOfByte` (-1 for code points outside the alphabet).
    static let byteOfCodepoint: [Int16] = {
        var inverse = [Int16](repeating: -1, count: 324)
        for (b, cp) in codepointOfByte.enumerated() {
            inverse[Int(cp)] = Int16(b)
        }
        return inverse
    }()

    /// The raw bytes a vocabulary string spells, or nil when it holds a character outside the
    /// alphabet (such a token can never be produced by byte-level merges).
    static func decode<C: Collection>(_ text: C) -> [UInt8]? where C.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        return decode(text, into: &out) ? out : nil
    }

    /// Appends the raw bytes `text` spells to `out`; false if a character is outside the alphabet.
    static func decode<C: Collection>(_ text: C, into out: inout [UInt8]) -> Bool where C.Element == UInt8 {
        var it = text.makeIterator()
        while let b = it.next() {
            var cp = UInt32(b)
            if b >= 0x80 {
                // The alphabet stops at U+0143: only (well-formed) two-byte sequences can be in it.
                guard b & 0xE0 == 0xC0, let b1 = it.next(), b1 & 0xC0 == 0x80 else { return false }
                cp = (UInt32(b & 0x1F) << 6) | UInt32(b1 & 0x3F)
                guard cp >= 0x80 else { return false }
            }
            guard cp < UInt32(byteOfCodepoint.count), byteOfCodepoint[Int(cp)] >= 0 else { return false }
            out.append(UInt8(byteOfCodepoint[Int(cp)]))
        }
        return true
    }

    /// Like `decode`, but keeps characters outside the alphabet as their own UTF-8 (for display).
    static func decodeLenient(_ text: [UInt8]) -> [UInt8] {
        if let raw = decode(text) { return raw }
        var cps: [UInt32] = []
        var offsets: [Int32] = []
        text.withUnsafeBufferPointer { UTF8Decoding.decode($0, codepoints: &cps, offsets: &offsets) }
        var out: [UInt8] = []
        for (i, cp) in cps.enumerated() {
            if cp < UInt32(byteOfCodepoint.count), byteOfCodepoint[Int(cp)] >= 0 {
                out.append(UInt8(byteOfCodepoint[Int(cp)]))
            } else {
                out.append(contentsOf: text[Int(offsets[i])..<Int(offsets[i + 1])])
            }
        }
        return out
    }
}

/// Byte-level BPE (`tokenizer.ggml.model` = "gpt2"): the text is cut into words by the
/// pre-tokenizer, and each word's bytes are merged pairwise, lowest merge rank first.
///
/// Everything works on raw bytes: tokens are looked up by the bytes they spell rather than
/// by their GPT-2 characters, which is the same thing (the mapping is a bijection) without
/// re-encoding every word.
///
/// Without `byteLevel` (Gemma 4's "gemma4" model, SentencePiece-style BPE): token texts are
/// the UTF-8 they spell (spaces as ▁, which the caller substitutes), a word starts as its
/// characters rather than its bytes, and what is left outside the vocabulary is spelled with
/// the "<0xNN>" byte tokens, as llama.cpp's tokenizer does for it.
struct BytePairEncoder {
    /// Raw bytes → id, for the tokens whose text lies in the byte alphabet.
    let tokens: ByteStringTable
    /// Symbol id of each single byte. Ids at or past `vocabSize` name strings outside the
    /// vocabulary (a byte without a token, a merge whose result is not a token).
    let byteSymbols: [Int32]
    /// (left id << 32 | right id) → (rank << 32 | merged id).
    let merges: IntegerPairTable
    let vocabSize: Int32
    /// llama3-style: a word that is itself a token is taken whole, without merging.
    let ignoreMerges: Bool
    let preTokenizer: PreTokenizer
    let byteLevel: Bool
    /// Character mode: every symbol a merge names (tokens and the strings outside the
    /// vocabulary that merges pass through) → its id.
    private let symbols: ByteStringTable?

    /// `texts[id]` is each token's vocabulary text; `mergeList` the `tokenizer.ggml.merges` strings.
    init(texts: [[UInt8]], mergeList: [[UInt8]], ignoreMerges: Bool, preTokenizer: PreTokenizer, byteLevel: Bool = true) {
        func decode<C: Collection>(_ text: C, into out: inout [UInt8]) -> Bool where C.Element == UInt8 {
            if byteLevel { return ByteLevel.decode(text, into: &out) }
            out.append(contentsOf: text)
            return true
        }
        var entries: [(key: [UInt8], value: Int32)] = []
        entries.reserveCapacity(texts.count)
        for (id, text) in texts.enumerated() {
            var raw: [UInt8] = []
            if decode(text, into: &raw) {
                entries.append((raw, Int32(id)))
            }
        }
        let tokens = ByteStringTable(entries)
        let vocabSize = Int32(texts.count)

        var virtual: [[UInt8]: Int32] = [:]
        func symbol(_ raw: [UInt8]) -> Int32 {
            let id = tokens.lookup(raw)
            if id >= 0 { return id }
            if let v = virtual[raw] { return v }
            let v = vocabSize + Int32(virtual.count)
            virtual[raw] = v
            return v
        }

        // bytes: their own symbols (byte level), or the "<0xNN>" tokens that spell them
        let hex = Array("0123456789ABCDEF".utf8)
        byteSymbols = byteLevel ? (0..<256).map { symbol([UInt8($0)]) } : (0..<256).map { b in
            let id = tokens.lookup(Array("<0x".utf8) + [hex[b >> 4], hex[b & 15], UInt8(ascii: ">")])
            return id >= 0 ? id : Int32.max
        }

        let merges = IntegerPairTable(capacity: mergeList.count)
        var left: [UInt8] = [], right: [UInt8] = []
        for (rank, merge) in mergeList.enumerated() {
            // "left right": split at the first space after the first byte (a literal space is
            // never part of the alphabet, so it can only be the separator).
            guard merge.count >= 3, let space = merge[1...].firstIndex(of: UInt8(ascii: " ")) else { continue }
            left.removeAll(keepingCapacity: true)
            right.removeAll(keepingCapacity: true)
            guard decode(merge[..<space], into: &left), decode(merge[(space + 1)...], into: &right),
                  !right.isEmpty else { continue }
            let l = symbol(left), r = symbol(right)
            left.append(contentsOf: right)
            let value = UInt64(UInt32(rank)) << 32 | UInt64(UInt32(symbol(left)))
            merges.insertIfAbsent(UInt64(UInt32(l)) << 32 | UInt64(UInt32(r)), value)
        }

        self.tokens = tokens
        self.merges = merges
        self.vocabSize = vocabSize
        self.ignoreMerges = ignoreMerges
        self.preTokenizer = preTokenizer
        self.byteLevel = byteLevel
        self.symbols = byteLevel ? nil : ByteStringTable(entries + virtual.map { ($0.key, $0.value) })
    }

    /// Reusable buffers for one `encode` call.
    struct Scratch {
        var codepoints: [UInt32] = []
        var offsets: [Int32] = []
        var flags: [UInt8] = []
        var words: [Int32] = []
        var passBuffer: [Int32] = []
        var ids: [Int32] = []
        var start: [Int32] = []
        var length: [Int32] = []
        var prev: [Int32] = []
        var next: [Int32] = []
        var queue = MergeQueue<Candidate>()
    }

    struct Candidate: MergeCandidate {
        let rank: UInt32
        let left: Int32
        let right: Int32
        let leftID: Int32
        let rightID: Int32

        // Lowest rank first; on a tie, the leftmost pair.
        static func precedes(_ a: Candidate, _ b: Candidate) -> Bool {
            a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
        }
    }

    /// Pre-tokenizes `text` and appends the tokens of each word to `out`.
    func encode(_ text: UnsafeBufferPointer<UInt8>, into out: inout [Int32], scratch s: inout Scratch) {
        guard text.count > 0, let base = text.baseAddress else { return }
        UTF8Decoding.decode(text, codepoints: &s.codepoints, offsets: &s.offsets)
        s.flags.removeAll(keepingCapacity: true)
        s.flags.reserveCapacity(s.codepoints.count)
        for cp in s.codepoints {
            s.flags.append(UnicodeCategories.flags(cp).rawValue)
        }
        preTokenizer.split(codepoints: s.codepoints, flags: s.flags, into: &s.words, scratch: &s.passBuffer)

        var begin = 0
        for end in s.words {
            let from = Int(s.offsets[begin]), to = Int(s.offsets[Int(end)])
            encodeWord(base + from, to - from, into: &out, scratch: &s)
            begin = Int(end)
        }
    }

    private func encodeWord(_ word: UnsafePointer<UInt8>, _ n: Int, into out: inout [Int32], scratch s: inout Scratch) {
        guard n > 0 else { return }
        // (character mode: llama.cpp takes a word of newlines whole when it is a token)
        if n == 1 || ignoreMerges || (!byteLevel && (0..<n).allSatisfy { word[$0] == 0x0A }) {
            let id = tokens.lookup(word, n)
            if id >= 0 {
                out.append(id)
                return
            }
        }

        s.ids.removeAll(keepingCapacity: true)
        s.start.removeAll(keepingCapacity: true)
        s.length.removeAll(keepingCapacity: true)
        s.prev.removeAll(keepingCapacity: true)
        s.next.removeAll(keepingCapacity: true)
        if let symbols {
            // characters (a malformed byte is one of its own); one outside every merge and the
            // vocabulary gets an id that merges nothing
            var i = 0
            while i < n {
                let lead = word[i]
                let len = min(n - i, lead < 0x80 ? 1 : lead >> 5 == 0x6 ? 2 : lead >> 4 == 0xE ? 3 : lead >> 3 == 0x1E ? 4 : 1)
                let id = symbols.lookup(word + i, len)
                s.ids.append(id >= 0 ? id : Int32.max)
                s.start.append(Int32(i))
                s.length.append(Int32(len))
                s.prev.append(Int32(s.ids.count) - 2)
                s.next.append(Int32(s.ids.count))
                i += len
            }
            s.next[s.next.count - 1] = -1
        } else {
            for i in 0..<n {
                s.ids.append(byteSymbols[Int(word[i])])
                s.start.append(Int32(i))
                s.length.append(1)
                s.prev.append(Int32(i) - 1)
                s.next.append(i + 1 < n ? Int32(i + 1) : -1)
            }
        }

        s.queue.removeAll()
        for i in stride(from: 1, to: s.ids.count, by: 1) {
            consider(Int32(i - 1), Int32(i), &s)
        }
        while let c = s.queue.pop() {
            let l = Int(c.left), r = Int(c.right)
            // Stale: either side changed since this pair was queued.
            guard s.length[l] > 0, s.length[r] > 0, s.ids[l] == c.leftID, s.ids[r] == c.rightID,
                  let merged = merges.lookup(UInt64(UInt32(c.leftID)) << 32 | UInt64(UInt32(c.rightID))) else { continue }
            s.ids[l] = Int32(truncatingIfNeeded: merged)
            s.length[l] += s.length[r]
            s.length[r] = 0
            s.ids[r] = -1
            let after = s.next[r]
            s.next[l] = after
            if after >= 0 { s.prev[Int(after)] = c.left }
            consider(s.prev[l], c.left, &s)
            consider(c.left, after, &s)
        }

        var i: Int32 = 0
        while i >= 0 {
            let id = s.ids[Int(i)]
            if id < vocabSize {
                out.append(id)
            } else {
                // Not a token (only with vocabularies that lack some byte or merge result):
                // spell it with the byte tokens that exist.
                let from = Int(s.start[Int(i)])
                for k in from..<(from + Int(s.length[Int(i)])) where byteSymbols[Int(word[k])] < vocabSize {
                    out.append(byteSymbols[Int(word[k])])
                }
            }
            i = s.next[Int(i)]
        }
    }

    @inline(__always)
    private func consider(_ left: Int32, _ right: Int32, _ s: inout Scratch) {
        guard left >= 0, right >= 0 else { return }
        let l = s.ids[Int(left)], r = s.ids[Int(right)]
        guard let merged = merges.lookup(UInt64(UInt32(l)) << 32 | UInt64(UInt32(r))) else { return }
        s.queue.push(Candidate(rank: UInt32(merged >> 32), left: left, right: right, leftID: l, rightID: r))
    }
}
