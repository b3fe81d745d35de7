/// GBNF, llama.cpp's grammar format, parsed into `GrammarBuilder` rules:
///
///     root   ::= "{" ws pair ("," ws pair)* "}"     # comments run to the end of the line
///     pair   ::= [a-z]+ ":" ws [0-9]{1,3}
///     ws     ::= [ \t\n]?
///
/// Literals with escapes (\n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), character classes
/// ([a-z], [^"\\]), `.` for any character, groups, and the repetitions * + ? {m} {m,} {m,n}.
/// A rule ends at the end of its line unless a group is open or the next line starts with `|`.
/// Characters become their UTF-8 bytes; classes become alternatives of byte-range runs.
struct GBNFParser {
    private let s: [UInt8]
    private var i = 0
    private var b = GrammarBuilder()
    /// Deepest group nesting accepted (the parser recurses on groups).
    private static let maxDepth = 256
    private var depth = 0

    private init(_ text: String) { s = Array(text.utf8) }

    static func parse(_ text: String) throws -> GrammarBuilder {
        var p = GBNFParser(text)
        try p.grammar()
        return p.b
    }

    private func error(_ what: String) -> VeloError {
        // line and column of the position, for the message
        var line = 1, col = 1
        for c in s[..<min(i, s.count)] { if c == 10 { line += 1; col = 1 } else { col += 1 } }
        return VeloError(.invalidArgument, "grammar: \(what) at line \(line), column \(col)")
    }

    private var atEnd: Bool { i >= s.count }
    private var cur: UInt8 { i < s.count ? s[i] : 0 }

    /// Skips spaces, tabs and comments; newlines too when `newlines`.
    private mutating func space(newlines: Bool) {
        while i < s.count {
            let c = s[i]
            if c == 32 || c == 9 || (newlines && (c == 10 || c == 13)) {
                i += 1
            } else if c == 35 { // '#'
                while i < s.count && s[i] != 10 && s[i] != 13 { i += 1 }
            } else {
                break
            }
        }
    }

    private static func isNameByte(_ c: UInt8) -> Bool {
        (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57) || c == 45 || c == 95
    }

    private mutating func name() throws -> String {
        let start = i
        while i < s.count && Self.isNameByte(s[i]) { i += 1 }
        guard i > start else { throw error("expected a rule name") }
        return String(decoding: s[start..<i], as: UTF8.self)
    }

    private mutating func grammar() throws {
        space(newlines: true)
        while !atEnd {
            let n = try name()
            space(newlines: false)
            guard s[i...].starts(with: Array("::=".utf8)) else { throw error("expected ::= after '\(n)'") }
            i += 3
            space(newlines: true)
            let id = b.ruleID(n)
            if b.rules[id] != nil { throw error("rule '\(n)' is defined twice") }
            try b.define(id, try alternatives(nested: false))
            guard atEnd || cur == 10 || cur == 13 else { throw error("unexpected '\(String(UnicodeScalar(cur)))'") }
            space(newlines: true)
        }
    }

    private mutating func alternatives(nested: Bool) throws -> [[GrammarBuilder.Item]] {
        var alts = [try sequence(nested: nested)]
        while true {
            let save = i
            space(newlines: true)
            guard cur == 124 else { i = save; break } // '|', possibly on the next line
            i += 1
            space(newlines: true)
            alts.append(try sequence(nested: nested))
        }
        return alts
    }

    private mutating func sequence(nested: Bool) throws -> [GrammarBuilder.Item] {
        var seq: [GrammarBuilder.Item] = []
        while !atEnd {
            let c = cur
            var last: [GrammarBuilder.Item]
            if c == 34 { // '"'
                i += 1
                last = []
                while true {
                    guard !atEnd, cur != 10 else { throw error("unterminated string") }
                    if cur == 34 { i += 1; break }
                    let cp = try char()
                    last += Self.utf8(cp).map { .bytes(.range($0, $0)) }
                }
                if last.isEmpty { space(newlines: nested); continue }
                // a repetition applies to the whole literal
                if last.count > 1, [42, 43, 63, 123].contains(cur) { last = [.rule(try b.anonymous("lit", [last]))] }
            } else if c == 91 { // '['
                last = [try charClass()]
            } else if c == 46 { // '.'
                i += 1
                last = [try classRule([(0, 0x10FFFF)])]
            } else if c == 40 { // '('
                i += 1
                depth += 1
                guard depth <= Self.maxDepth else { throw error("groups nested too deeply") }
                space(newlines: true)
                let alts = try alternatives(nested: true)
                space(newlines: true)
                guard cur == 41 else { throw error("expected ')'") }
                i += 1
                depth -= 1
                last = [.rule(try b.anonymous("group", alts))]
            } else if Self.isNameByte(c) {
                last = [.rule(b.ruleID(try name()))]
            } else {
                break
            }
            space(newlines: nested)
            // repetition of the last item
            if let r = try repetition() {
                guard last.count == 1 else { throw error("nothing to repeat") }
                seq += try repeated(last[0], min: r.min, max: r.max)
                space(newlines: nested)
            } else {
                seq += last
            }
        }
        return seq
    }

    /// * + ? {m} {m,} {m,n} at the cursor (min, max; max nil: unbounded).
    private mutating func repetition() throws -> (min: Int, max: Int?)? {
        switch cur {
        case 42: i += 1; return (0, nil)
        case 43: i += 1; return (1, nil)
        case 63: i += 1; return (0, 1)
        case 123:
            i += 1
            space(newlines: false)
            let lo = try number()
            space(newlines: false)
            var hi: Int? = lo
            if cur == 44 {
                i += 1
                space(newlines: false)
                hi = cur == 125 ? nil : try number()
                space(newlines: false)
            }
            guard cur == 125 else { throw error("expected '}'") }
            i += 1
            if let hi, hi < lo { throw error("repetition {\(lo),\(hi)} has its maximum below its minimum") }
            return (lo, hi)
        default: return nil
        }
    }

    private mutating func number() throws -> Int {
        let start = i
        while i < s.count && s[i] >= 48 && s[i] <= 57 && i - start < 7 { i += 1 }
        guard i > start, let n = Int(String(decoding: s[start..<i], as: UTF8.self)) else { throw error("expected a number") }
        return n
    }

    /// x repeated min...max times, as llama.cpp expands it: the required copies, then nested
    /// optionals (x (x (x)?)?)? or a right-recursive star (no stack growth while matching).
    private mutating func repeated(_ x: GrammarBuilder.Item, min: Int, max: Int?) throws -> [GrammarBuilder.Item] {
        guard min + (max ?? 0) <= 100_000 else { throw error("repetition count too large") }
        var out = [GrammarBuilder.Item](repeating: x, count: min)
        if let max {
            guard max > min else { return out }
            var tail: Int? = nil
            for _ in 0..<(max - min) {
                let seq: [GrammarBuilder.Item] = tail.map { [x, .rule($0)] } ?? [x]
                tail = try b.anonymous("opt", [seq, []])
            }
            out.append(.rule(tail!))
        } else {
            let id = b.ruleID("star-\(b.names.count)")
            try b.define(id, [[x, .rule(id)], []])
            out.append(.rule(id))
        }
        return out
    }

    /// One character of a literal or class (escapes decoded), as a code point.
    private mutating func char() throws -> UInt32 {
        guard !atEnd else { throw error("unexpected end") }
        if cur == 92 { // '\'
            i += 1
            let e = cur
            i += 1
            switch e {
            case 110: return 10
            case 114: return 13
            case 116: return 9
            case 48: return 0
            case 92, 34, 91, 93, 45, 94, 39: return UInt32(e)
            case 120: return try hex(2)
            case 117: return try hex(4)
            case 85: return try hex(8)
            default: i -= 1; throw error("unknown escape '\\\(String(UnicodeScalar(e)))'")
            }
        }
        // one UTF-8 encoded character of the grammar text
        let lead = cur
        let n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4
        guard i + n <= s.count else { throw error("truncated UTF-8") }
        var cp = UInt32(n == 1 ? lead : n == 2 ? lead & 0x1F : n == 3 ? lead & 0x0F : lead & 0x07)
        for k in 1..<n { cp = cp << 6 | UInt32(s[i + k] & 0x3F) }
        i += n
        return cp
    }

    private mutating func hex(_ n: Int) throws -> UInt32 {
        var v: UInt32 = 0
        for _ in 0..<n {
            let c = cur
            let d: UInt32
            switch c {
            case 48...57: d = UInt32(c - 48)
            case 97...102: d = UInt32(c - 87)
            case 65...70: d = UInt32(c - 55)
            default: throw error("expected \(n) hexadecimal digits")
            }
            v = v << 4 | d
            i += 1
        }
        guard v <= 0x10FFFF else { throw error("code point out of range") }
        return v
    }

    private mutating func charClass() throws -> GrammarBuilder.Item {
        i += 1 // '['
        var negated = false
        if cur == 94 { negated = true; i += 1 }
        var ranges: [(UInt32, UInt32)] = []
        while cur != 93 {
            guard !atEnd else { throw error("unterminated character class") }
            let lo = try char()
            var hi = lo
            if cur == 45, i + 1 < s.count, s[i + 1] != 93 { // '-' not before ']'
                i += 1
                hi = try char()
                guard hi >= lo else { throw error("character range is backwards") }
            }
            ranges.append((lo, hi))
        }
        i += 1
        if negated { ranges = Self.complement(ranges) }
        return try classRule(ranges)
    }

    /// Code point ranges as one item: a byte set when every character is one byte, else a rule
    /// whose alternatives are the UTF-8 byte-range runs.
    private mutating func classRule(_ ranges: [(UInt32, UInt32)]) throws -> GrammarBuilder.Item {
        var single = ByteSet()
        var multi: [[GrammarBuilder.Item]] = []
        for (lo, hi) in ranges {
            for run in Self.utf8Runs(lo, hi) {
                if run.count == 1 { single.insert(run[0].0, run[0].1) } else { multi.append(run.map { .bytes(.range($0.0, $0.1)) }) }
            }
        }
        if multi.isEmpty { return .bytes(single) }
        if single != ByteSet() { multi.insert([.bytes(single)], at: 0) }
        return .rule(try b.anonymous("class", multi))
    }

    static func complement(_ ranges: [(UInt32, UInt32)]) -> [(UInt32, UInt32)] {
        let sorted = ranges.sorted { $0.0 < $1.0 }
        var out: [(UInt32, UInt32)] = []
        var next: UInt32 = 0
        for (lo, hi) in sorted {
            if lo > next { out.append((next, lo - 1)) }
            next = max(next, hi &+ 1)
        }
        if next <= 0x10FFFF { out.append((next, 0x10FFFF)) }
        return out
    }

    static func utf8(_ cp: UInt32) -> [UInt8] {
        switch cp {
        case 0..<0x80: return [UInt8(cp)]
        case 0x80..<0x800: return [UInt8(0xC0 | cp >> 6), UInt8(0x80 | cp & 0x3F)]
        case 0x800..<0x10000: return [UInt8(0xE0 | cp >> 12), UInt8(0x80 | cp >> 6 & 0x3F), UInt8(0x80 | cp & 0x3F)]
        default: return [UInt8(0xF0 | cp >> 18), UInt8(0x80 | cp >> 12 & 0x3F), UInt8(0x80 | cp >> 6 & 0x3F), UInt8(0x80 | cp & 0x3F)]
        }
    }

    /// The UTF-8 encodings of code points lo...hi as runs of byte ranges (each run a sequence
    /// of ranges, one per byte): split where the encoded length changes, then wherever a
    /// continuation byte's range would not be full.
    static func utf8Runs(_ lo: UInt32, _ hi: UInt32) -> [[(UInt8, UInt8)]] {
        let limits: [UInt32] = [0x7F, 0x7FF, 0xFFFF, 0x10FFFF]
        var out: [[(UInt8, UInt8)]] = []
        var a = lo
        for lim in limits where a <= hi {
            if a > lim { continue }
            let b = min(hi, lim)
            split(a, b, into: &out)
            a = b + 1
        }
        return out
    }

    private static func split(_ lo: UInt32, _ hi: UInt32, into out: inout [[(UInt8, UInt8)]]) {
        let n = utf8(lo).count
        if n == 1 { out.append([(UInt8(lo), UInt8(hi))]); return }
        // continuation bytes below the lead: bits per level
        for level in 1..<n {
            let m = UInt32(1) << UInt32(6 * level) - 1
            if lo & ~m != hi & ~m {
                if lo & m != 0 { split(lo, lo | m, into: &out); split((lo | m) + 1, hi, into: &out); return }
                if hi & m != m { split(lo, (hi & ~m) - 1, into: &out); split(hi & ~m, hi, into: &out); return }
            }
        }
        let a = utf8(lo), b = utf8(hi)
        out.append(zip(a, b).map { ($0, $1) })
    }
}
