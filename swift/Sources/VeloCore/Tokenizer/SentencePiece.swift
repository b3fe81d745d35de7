/// SentencePiece BPE (`tokenizer.ggml.model` = "llama"), as llama.cpp runs it: start from one
/// symbol per UTF-8 character, repeatedly merge the adjacent pair whose concatenation is the
/// vocabulary piece with the highest score (leftmost on ties), and spell whatever is left
/// outside the vocabulary with byte tokens (<0xNN>).
struct SentencePiece {
    /// Token text (with ▁ for spaces) → id.
    let pieces: ByteStringTable
    let scores: [Float]
    /// Token of each byte for the fallback: <0xNN>, else the one-character token, else -1.
    let byteTokens: [Int32]
    let unknown: Int32?
    /// Every pair of neighbouring characters found inside some token. Where the text has a
    /// pair that is not in here, no merge can ever cross, so the text is cut there and the
    /// parts are tokenized separately — the same result, with small merge queues.
    private let innerPairs: IntegerPairTable

    /// Texts longer than this are cut into independent parts at the first safe place after it.
    private static let partLength = 2048

    init(pieces: ByteStringTable, texts: [[UInt8]], scores: [Float], unknown: Int32?) {
        self.pieces = pieces
        self.scores = scores
        self.unknown = unknown
        let hex = Array("0123456789ABCDEF".utf8)
        byteTokens = (0..<256).map { b -> Int32 in
            let name: [UInt8] = Array("<0x".utf8) + [hex[b >> 4], hex[b & 15], UInt8(ascii: ">")]
            let id = pieces.lookup(name)
            return id >= 0 ? id : pieces.lookup([UInt8(b)])
        }

        let totalLength = texts.reduce(0) { $0 + $1.count }
        let pairs = IntegerPairTable(capacity: totalLength)
        for text in texts {
            text.withUnsafeBufferPointer { t in
                var previous: UInt32?
                var i = 0
                while i < t.count {
                    let len = min(UTF8Decoding.sequenceLength(t[i]), t.count - i)
                    let symbol = Self.packSymbol(t.baseAddress! + i, len)
                    if let previous { pairs.insertIfAbsent(Self.pairKey(previous, symbol), 0) }
                    previous = symbol
                    i += len
                }
            }
        }
        innerPairs = pairs
    }

    /// A character's bytes as one number (distinct characters may share one: then a cut is
    /// merely not made, which is always safe).
    @inline(__always)
    private static func packSymbol(_ p: UnsafePointer<UInt8>, _ len: Int) -> UInt32 {
        var v: UInt32 = 0
        for k in 0..<len { v |= UInt32(p[k]) << (8 * UInt32(k)) }
        return v
    }

    @inline(__always)
    private static func pairKey(_ a: UInt32, _ b: UInt32) -> UInt64 {
        let key = UInt64(a) << 32 | UInt64(b)
        return key == .max ? .max - 1 : key   // the table reserves .max
    }

    /// A pair of neighbouring symbols whose concatenation is a piece.
    struct Candidate: MergeCandidate {
        let score: Float
        let left: Int32
        let right: Int32
        let size: Int32

        // Best score first; on a tie, the leftmost pair.
        static func precedes(_ a: Candidate, _ b: Candidate) -> Bool {
            a.score > b.score || (a.score == b.score && a.left < b.left)
        }
    }

    /// Buffers reused from one part of the text to the next.
    private struct Scratch {
        var start: [Int32] = []
        var length: [Int32] = []
        var prev: [Int32] = []
        var next: [Int32] = []
        var queue = MergeQueue<Candidate>()
    }

    /// Tokenizes `text`, appending to `out`. Spaces become ▁ first; `prefixSpace` adds one in
    /// front (SentencePiece's "add dummy prefix", applied at the start and after special tokens).
    func encode(_ raw: UnsafeBufferPointer<UInt8>, prefixSpace: Bool, into out: inout [Int32]) {
        let marker: [UInt8] = [0xE2, 0x96, 0x81]   // ▁ U+2581
        var escaped: [UInt8] = []
        escaped.reserveCapacity(raw.count + 3)
        if prefixSpace { escaped.append(contentsOf: marker) }
        for b in raw {
            if b == 0x20 { escaped.append(contentsOf: marker) } else { escaped.append(b) }
        }
        escaped.withUnsafeBufferPointer { encodeEscaped($0, into: &out) }
    }

    private func encodeEscaped(_ text: UnsafeBufferPointer<UInt8>, into out: inout [Int32]) {
        guard let base = text.baseAddress, text.count > 0 else { return }
        let n = text.count
        var scratch = Scratch()
        var partStart = 0
        var i = 0
        var previous: UInt32 = 0
        while i < n {
            let len = min(UTF8Decoding.sequenceLength(text[i]), n - i)
            let symbol = Self.packSymbol(base + i, len)
            if i - partStart >= Self.partLength && innerPairs.lookup(Self.pairKey(previous, symbol)) == nil {
                encodePart(base + partStart, i - partStart, into: &out, scratch: &scratch)
                partStart = i
            }
            previous = symbol
            i += len
        }
        encodePart(base + partStart, n - partStart, into: &out, scratch: &scratch)
    }

    private func encodePart(_ text: UnsafePointer<UInt8>, _ n: Int, into out: inout [Int32], scratch s: inout Scratch) {
        guard n > 0 else { return }
        // Symbols form a doubly linked list over the text; a merged-away symbol has length 0.
        s.start.removeAll(keepingCapacity: true)
        s.length.removeAll(keepingCapacity: true)
        var offset = 0
        while offset < n {
            let len = min(UTF8Decoding.sequenceLength(text[offset]), n - offset)
            s.start.append(Int32(offset))
            s.length.append(Int32(len))
            offset += len
        }
        let count = s.start.count
        s.prev.removeAll(keepingCapacity: true)
        s.next.removeAll(keepingCapacity: true)
        for i in 0..<count {
            s.prev.append(Int32(i) - 1)
            s.next.append(i + 1 < count ? Int32(i + 1) : -1)
        }

        s.queue.removeAll()
        for i in 1..<max(count, 1) {
            consider(Int32(i - 1), Int32(i), text, &s)
        }
        while let c = s.queue.pop() {
            let l = Int(c.left), r = Int(c.right)
            // Stale: one side was merged into something else since this pair was queued.
            guard s.length[l] > 0, s.length[r] > 0, s.length[l] + s.length[r] == c.size else { continue }
            s.length[l] += s.length[r]
            s.length[r] = 0
            let after = s.next[r]
            s.next[l] = after
            if after >= 0 { s.prev[Int(after)] = c.left }
            consider(s.prev[l], c.left, text, &s)
            consider(c.left, after, text, &s)
        }

        var i: Int32 = 0
        while i >= 0 {
            let start = Int(s.start[Int(i)]), len = Int(s.length[Int(i)])
            let id = pieces.lookup(text + start, len)
            if id >= 0 {
                out.append(id)
            } else {
                // Only single characters can miss: every merge produced a known piece.
                for k in start..<(start + len) {
                    let b = byteTokens[Int(text[k])]
                    if b >= 0 {
                        out.append(b)
                    } else if let unknown {
                        out.append(unknown)
                    }
                }
            }
            i = s.next[Int(i)]
        }
    }

    @inline(__always)
    private func consider(_ left: Int32, _ right: Int32, _ text: UnsafePointer<UInt8>, _ s: inout Scratch) {
        guard left >= 0, right >= 0 else { return }
        let size = s.length[Int(left)] + s.length[Int(right)]
        let id = pieces.lookup(text + Int(s.start[Int(left)]), Int(size))
        guard id >= 0 else { return }
        s.queue.push(Candidate(score: scores[Int(id)], left: left, right: right, size: size))
    }
}
