import Foundation
import XCTest
@testable import VeloCore

/// The GBNF grammar engine: parsing and its errors, byte-level matching of UTF-8, repetition
/// bounds, and token masks against a brute-force check of every token of a real vocabulary.
final class GrammarTests: XCTestCase {
    private func matcher(_ gbnf: String) throws -> GrammarMatcher { try GrammarMatcher(try Grammar(gbnf: gbnf)) }

    /// Whether `text` is a complete sentence of the grammar.
    private func accepts(_ gbnf: String, _ text: String) throws -> Bool {
        let m = try matcher(gbnf)
        return m.accept(Array(text.utf8)) && m.isComplete
    }

    /// Whether `text` can begin a sentence of the grammar.
    private func prefix(_ gbnf: String, _ text: String) throws -> Bool {
        try matcher(gbnf).accept(Array(text.utf8))
    }

    func testLiteralsClassesAndRepetition() throws {
        let g = #"""
        root ::= "{" ws pair ("," ws pair)* "}"   # a comment
        pair ::= [a-z]+ ":" ws [0-9]{1,3}
        ws   ::= [ \t\n]?
        """#
        XCTAssertTrue(try accepts(g, "{a:1}"))
        XCTAssertTrue(try accepts(g, "{ ab: 123, c:4}"))
        XCTAssertFalse(try accepts(g, "{a:1234}"), "{1,3} allows at most three digits")
        XCTAssertFalse(try accepts(g, "{A:1}"))
        XCTAssertFalse(try accepts(g, "{a:1"), "incomplete")
        XCTAssertTrue(try prefix(g, "{a:1"))
        XCTAssertFalse(try prefix(g, "{a::"))
        XCTAssertFalse(try accepts(g, "{a:1}  "))
    }

    func testAlternativesOnNextLineAndGroups() throws {
        let g = """
        root ::= "a" | "b"
          | ( "c"
            "d" )
        """
        for s in ["a", "b", "cd"] { XCTAssertTrue(try accepts(g, s), s) }
        for s in ["c", "ab", ""] { XCTAssertFalse(try accepts(g, s), s) }
    }

    func testRepetitionBounds() throws {
        let g = #"root ::= "x"{2,4} "y"{3} "z"{1,}"#
        XCTAssertTrue(try accepts(g, "xxyyyz"))
        XCTAssertTrue(try accepts(g, "xxxxyyyzzz"))
        XCTAssertFalse(try accepts(g, "xyyyz"))
        XCTAssertFalse(try accepts(g, "xxxxxyyyz"))
        XCTAssertFalse(try accepts(g, "xxyyz"))
        XCTAssertFalse(try accepts(g, "xxyyy"))
        // a repeated literal repeats as a whole
        XCTAssertTrue(try accepts(#"root ::= "ab"*"#, "ababab"))
        XCTAssertFalse(try accepts(#"root ::= "ab"*"#, "aba"))
    }

    func testUTF8ClassesEscapesAndAnyCharacter() throws {
        let g = #"root ::= [^"\\\x00-\x1f]* "\"" [α-ω]+ "\u00e9" ."#
        XCTAssertTrue(try accepts(g, "héllo 🦙\"αβγé🦙"))
        XCTAssertTrue(try accepts(g, "\"ωé!"))
        XCTAssertFalse(try accepts(g, "a\nb\"αé!"), "control characters are excluded")
        XCTAssertFalse(try accepts(g, "\"aé!"), "a is not in α-ω")
        // a character may end mid-token: its bytes are accepted one at a time
        let m = try matcher(#"root ::= "é" "x""#)
        XCTAssertTrue(m.accept([0xC3]))
        XCTAssertFalse(m.isComplete)
        XCTAssertFalse(m.accept([0xA8]), "è shares é's first byte but not its second")
        XCTAssertTrue(m.accept([0xA9, 0x78]))
        XCTAssertTrue(m.isComplete)
        XCTAssertTrue(m.onlyEnd)
    }

    func testUTF8RangesSplitAtEncodingBoundaries() {
        // every code point of a range that crosses 1-, 2-, 3- and 4-byte encodings is covered exactly
        let runs = GBNFParser.utf8Runs(0x70, 0x10010)
        var covered = 0
        for run in runs { covered += run.reduce(1) { $0 * (Int($1.1) - Int($1.0) + 1) } }
        XCTAssertEqual(covered, 0x10010 - 0x70 + 1)
        for cp: UInt32 in [0x70, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10010] {
            let bytes = GBNFParser.utf8(cp)
            XCTAssertEqual(runs.filter { $0.count == bytes.count && zip($0, bytes).allSatisfy { $0.0 <= $1 && $1 <= $0.1 } }.count, 1, "U+\(String(cp, radix: 16))")
        }
    }

    func testErrorsSayWhatAndWhere() {
        let cases: [(String, String)] = [
            ("root ::= foo", "'foo' is used but never defined"),
            ("a ::= \"x\"", "no 'root' rule"),
            ("root ::= root \"a\"", "left-recursive"),
            ("root ::= x \"a\"\nx ::= \"\" | root", "left-recursive"),
            ("root ::= \"abc", "unterminated string"),
            ("root ::= [a-", "unterminated character class"),
            ("root ::= \"a\"{3,1}", "maximum below its minimum"),
            ("root ::= \"a\"{200000}", "too large"),
            ("root ::= (\"a\"", "expected ')'"),
            ("root = \"a\"", "expected ::="),
            ("root ::= \"a\"\nroot ::= \"b\"", "defined twice"),
            ("root ::= \"\\q\"", "unknown escape"),
        ]
        for (g, message) in cases {
            XCTAssertThrowsError(try Grammar(gbnf: g), g) { e in
                XCTAssertTrue("\(e)".contains(message), "\(g): \(e)")
            }
        }
        // deep nesting is refused, not a stack overflow
        let deep = "root ::= " + String(repeating: "(", count: 5000) + "\"a\"" + String(repeating: ")", count: 5000)
        XCTAssertThrowsError(try Grammar(gbnf: deep))
    }

    func testExponentialAmbiguityIsRefused() throws {
        // each "a" can be any of 2 rules: 2^n parses at once
        var g = "root ::= x0\n"
        for i in 0..<16 { g += "x\(i) ::= (\"a\" | [a]) x\(i + 1)\n" }
        g += "x16 ::= \"\"\n"
        // the parses are identical stacks after a byte and are merged, so this stays small
        XCTAssertTrue(try accepts(g, String(repeating: "a", count: 16)))
    }

    /// The mask of each state equals, token by token, whether the matcher accepts the token's
    /// bytes, over the whole stories260K vocabulary.
    func testMaskMatchesBruteForce() throws {
        let file = try ModelFile(path: try TestData.path("stories260K.gguf"))
        let tok = try file.requireTokenizer()
        let trie = TokenTrie(tokenizer: tok)
        let m = try matcher(#"root ::= "Once" (" " [a-z]+ ("," | "."))* " The end.""#)
        var checked = 0
        for step in Array("Once upon, a. time, there.".utf8).map({ [$0] }) + [[]] {
            let bits = m.mask(trie)
            for t in 0..<tok.vocabSize {
                let b = trie.bytes[t]
                let want = !b.isEmpty && !m.after(b).isEmpty
                XCTAssertEqual(bits[t >> 6] >> UInt64(t & 63) & 1 != 0, want, "token \(t) \(String(decoding: b, as: UTF8.self))")
                if want { checked += 1 }
            }
            if !step.isEmpty { XCTAssertTrue(m.accept(step)) }
        }
        XCTAssertGreaterThan(checked, 50, "the states allow many tokens")
        // a repeated state comes from the cache, equal to a fresh computation
        let again = try matcher(#"root ::= "Once" (" " [a-z]+ ("," | "."))* " The end.""#)
        XCTAssertTrue(again.accept(Array("Once upon".utf8)))
        let cached = again.mask(trie)
        again.grammar.maskCache.removeAll()
        XCTAssertEqual(cached, again.mask(trie))
    }

}
