/// WordPiece (`tokenizer.ggml.model` = "bert"). The GGUF vocabulary marks word starts with ▁
/// (the converter turned "##ing" into "ing" and "play" into "▁play"), so each word is matched
/// as "▁word", greedily by the longest known prefix; a word that cannot be spelled entirely
/// becomes the unknown token.
struct WordPiece {
    let pieces: ByteStringTable
    let unknown: Int32?
    let lowercase: Bool
    let stripAccents: Bool

    func encode(_ text: UnsafeBufferPointer<UInt8>, into out: inout [Int32]) {
        for word in words(text) {
            let before = out.count
            word.withUnsafeBufferPointer { w in
                let n = w.count
                var i = 0
                while i < n {
                    var j = min(n, i + pieces.maxKeyLength)
                    var found: Int32 = -1
                    while j > i {
                        found = pieces.lookup(w.baseAddress! + i, j - i)
                        if found >= 0 { break }
                        j -= 1
                    }
                    guard found >= 0 else {
                        out.removeSubrange(before...)
                        return
                    }
                    out.append(found)
                    i = j
                }
            }
            if out.count == before, let unknown {
                out.append(unknown)
            }
        }
    }

    /// BERT's basic tokenizer: split at whitespace, drop control characters, lowercase and
    /// strip accents, and make each punctuation mark and CJK ideograph a word of its own.
    /// Every word comes back with the ▁ prefix.
    private func words(_ text: UnsafeBufferPointer<UInt8>) -> [[UInt8]] {
        var cps: [UInt32] = []
        var offsets: [Int32] = []
        UTF8Decoding.decode(text, codepoints: &cps, offsets: &offsets)

        let marker: [UInt8] = [0xE2, 0x96, 0x81]   // ▁
        var words: [[UInt8]] = []
        var current = marker
        func finish() {
            if current.count > marker.count { words.append(current) }
            current = marker
        }
        for original in cps {
            let cp = stripAccents ? UnicodeCategories.decompositionBase(original) : original
            let flags = UnicodeCategories.flags(cp)
            if flags.isWhitespace {
                finish()
                continue
            }
            if cp == 0 || cp == 0xFFFD || flags.isControl { continue }
            if stripAccents && flags.isMark { continue }
            let c = lowercase ? UnicodeCategories.lowercase(cp) : cp
            if flags.isPunctuation || (cp < 0x7F && flags.isSymbol) || Self.isCJKIdeograph(cp) {
                finish()
                UTF8Decoding.encode(c, into: &current)
                finish()
            } else {
                UTF8Decoding.encode(c, into: &current)
            }
        }
        finish()
        return words
    }

    /// The CJK blocks BERT isolates (the ranges of Google's reference implementation).
    private static func isCJKIdeograph(_ cp: UInt32) -> Bool {
        (0x4E00...0x9FFF).contains(cp) || (0x3400...0x4DBF).contains(cp) || (0x20000...0x2A6DF).contains(cp)
            || (0x2A700...0x2B73F).contains(cp) || (0x2B740...0x2B81F).contains(cp) || (0x2B920...0x2CEAF).contains(cp)
            || (0xF900...0xFAFF).contains(cp) || (0x2F800...0x2FA1F).contains(cp)
    }
}
