/// Incremental detokenizer: turns token pieces into text that only ever contains whole
/// UTF-8 characters, and holds back text that might be the start of a stop string, so a
/// stop string never leaks into the output.
public struct TextStream: Sendable {
    let stops: [[UInt8]]
    /// Bytes that do not yet form complete characters.
    private var partial: [UInt8] = []
    /// Complete text not yet emitted (could begin a stop string).
    private var held: [UInt8] = []
    public private(set) var stopped = false

    public init(stops: [String]) {
        self.stops = stops.filter { !$0.isEmpty }.map { Array($0.utf8) }
    }

    /// Adds a token's bytes; returns the text that is now safe to emit. After a stop string
    /// is seen, `stopped` is true and the text before it is the last thing returned.
    public mutating func push(_ bytes: [UInt8]) -> String {
        guard !stopped else { return "" }
        partial += bytes
        let cut = TextStream.completePrefix(partial)
        held += partial[..<cut]
        partial.removeFirst(cut)
        if let at = firstStop() {
            stopped = true
            let out = String(decoding: held[..<at], as: UTF8.self)
            held.removeAll()
            partial.removeAll()
            return out
        }
        let keep = heldBack()
        let out = String(decoding: held[..<(held.count - keep)], as: UTF8.self)
        held.removeFirst(held.count - keep)
        return out
    }

    /// Everything still held (at the end of generation). Incomplete bytes become U+FFFD.
    public mutating func flush() -> String {
        guard !stopped else { return "" }
        let out = String(decoding: held + partial, as: UTF8.self)
        held.removeAll()
        partial.removeAll()
        return out
    }

    /// Length of the longest prefix made of complete UTF-8 sequences (invalid bytes count as
    /// complete: they will decode to U+FFFD rather than stall the stream).
    static func completePrefix(_ b: [UInt8]) -> Int {
        var i = b.count
        // look back at most 3 bytes for the start of an unfinished sequence
        var back = 0
        while back < 3, i - back - 1 >= 0 {
            let c = b[i - back - 1]
            if c & 0xC0 == 0x80 { back += 1; continue } // continuation byte
            let need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1
            if c >= 0xF8 { return i }                     // invalid lead byte: emit as is
            if need > back + 1 { i -= back + 1 }         // sequence not finished yet
            return i
        }
        return i
    }

    private func firstStop() -> Int? {
        var best: Int?
        for s in stops where s.count <= held.count {
            for start in 0...(held.count - s.count) where held[start] == s[0] {
                if held[start..<start + s.count].elementsEqual(s) {
                    if best == nil || start < best! { best = start }
                    break
                }
            }
        }
        return best
    }

    /// How many trailing held bytes could still grow into a stop string.
    private func heldBack() -> Int {
        var keep = 0
        for s in stops {
            let maxLen = min(s.count - 1, held.count)
            if maxLen <= keep { continue }
            for len in stride(from: maxLen, to: keep, by: -1) where held.suffix(len).elementsEqual(s.prefix(len)) {
                keep = len
                break
            }
        }
        return keep
    }
}
