import Foundation
import VeloCore
import XCTest

/// Tokenizers against llama.cpp's tokenizer test vectors (tests/data/vocab), plus
/// round trips, special tokens, BOS handling and malformed metadata.
final class TokenizerTests: XCTestCase {

    // MARK: llama.cpp test vectors (no BOS, no special-token parsing)

    func testLlamaSPMVectors() throws { try checkVectors("ggml-vocab-llama-spm.gguf") }
    func testPhi3Vectors() throws { try checkVectors("ggml-vocab-phi-3.gguf") }
    func testGPT2Vectors() throws { try checkVectors("ggml-vocab-gpt-2.gguf") }
    func testDeepSeekCoderVectors() throws { try checkVectors("ggml-vocab-deepseek-coder.gguf") }
    func testDeepSeekLLMVectors() throws { try checkVectors("ggml-vocab-deepseek-llm.gguf") }
    func testFalconVectors() throws { try checkVectors("ggml-vocab-falcon.gguf") }
    func testMPTVectors() throws { try checkVectors("ggml-vocab-mpt.gguf") }
    func testRefactVectors() throws { try checkVectors("ggml-vocab-refact.gguf") }
    func testStarcoderVectors() throws { try checkVectors("ggml-vocab-starcoder.gguf") }
    func testBertBGEVectors() throws { try checkVectors("ggml-vocab-bert-bge.gguf") }
    func testLlama3Vectors() throws {
        try checkVectors("reconstructed/ggml-vocab-llama3-bpe.reconstructed.gguf", vectors: "ggml-vocab-llama-bpe.gguf")
    }
    /// historical/: DBRX is the only vocabulary there with vectors (smollm and tekken have
    /// vectors but no vocabulary; gpt2 and stablelm have a vocabulary but no vectors, and are
    /// covered by the round-trip test).
    func testDBRXVectors() throws { try checkVectors("historical/ggml-vocab-dbrx.fixed.gguf") }

    /// Special-token parsing with the llama-spm vocabulary: parse_special on, no BOS.
    func testTinyLlamaSpecialTokenVectors() throws {
        try checkVectors("ggml-vocab-llama-spm.gguf", vectors: "newer-ggml-org/ggml-vocab-tinyllama.gguf", parseSpecial: true)
        let tok = try tokenizer("ggml-vocab-llama-spm.gguf")
        XCTAssertEqual(tok.encode("abc</s> def ghi", addSpecial: false, parseSpecial: true), [25638, 2, 29871, 822, 330, 2918])
    }

    // MARK: round trips

    /// decode(encode(s)) gives s back for every vector string, for every vocabulary that is
    /// lossless. SentencePiece's leading space (added by encode, removed by decode) cancels out.
    /// Byte-level BPE is exact except where llama.cpp's decoder tidies spaces (" ," → ","),
    /// which `cleanSpaces` says it does; the expected text gets the same tidying.
    /// WordPiece is left out: it lowercases, strips accents and drops whitespace.
    func testRoundTrips() throws {
        let strings = try vectorStrings("ggml-vocab-llama-spm.gguf")
            + ["", "\u{0}", "a\u{0}b", "\u{FEFF}x", "x\u{301}", "\u{10FFFF}", "👩‍👩‍👧‍👦", "ＡＢＣ１２３", "\r\n\r\n", "\u{3000}\u{A0}\u{85}"]
        let vocabularies = [
            "ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf", "ggml-vocab-baichuan.gguf",
            "ggml-vocab-gpt-2.gguf", "ggml-vocab-deepseek-coder.gguf", "ggml-vocab-deepseek-llm.gguf",
            "ggml-vocab-falcon.gguf", "ggml-vocab-mpt.gguf", "ggml-vocab-refact.gguf", "ggml-vocab-starcoder.gguf",
            "ggml-vocab-gpt-neox.gguf", "reconstructed/ggml-vocab-llama3-bpe.reconstructed.gguf",
            "historical/ggml-vocab-dbrx.fixed.gguf", "historical/ggml-vocab-gpt2.gguf", "historical/ggml-vocab-stablelm.gguf",
        ]
        for name in vocabularies {
            let tok = try tokenizer(name)
            var failures: [String] = []
            for s in strings {
                let ids = tok.encode(s, addSpecial: false, parseSpecial: false)
                let back = try tok.decode(ids)
                let expected = tok.cleanSpaces ? Tokenizer.cleanUpTokenizationSpaces(Array(s.utf8)) : Array(s.utf8)
                if back != expected {
                    failures.append("\(show(s)) → \(ids) → \(show(String(decoding: back, as: UTF8.self)))")
                }
            }
            XCTAssert(failures.isEmpty, "\(name): \(failures.count) strings do not round-trip:\n" + failures.prefix(5).joined(separator: "\n"))
        }
    }

    func testCleanUpTokenizationSpaces() {
        func clean(_ s: String) -> String { String(decoding: Tokenizer.cleanUpTokenizationSpaces(Array(s.utf8)), as: UTF8.self) }
        XCTAssertEqual(clean("Hello , world !"), "Hello, world!")
        XCTAssertEqual(clean("a ' b"), "a'b")
        XCTAssertEqual(clean("it 's we 're I 'd"), "it's we're I 'd")
        XCTAssertEqual(clean(""), "")
    }

    // MARK: special tokens, BOS/EOS, decoding

    func testBOSWithStories260K() throws {
        let tok = try Tokenizer(gguf: GGUFFile(path: try TestData.path("stories260K.gguf")))
        XCTAssertEqual(tok.modelName, "llama")
        XCTAssertTrue(tok.addBOS)
        XCTAssertEqual(tok.bos, 1)
        XCTAssertEqual(tok.eos, 2)
        XCTAssertEqual(tok.encode("Once upon a time", addSpecial: true, parseSpecial: false), [1, 403, 407, 261, 378])
        XCTAssertEqual(tok.encode("", addSpecial: true, parseSpecial: false), [1])
        XCTAssertEqual(tok.encode("", addSpecial: false, parseSpecial: false), [])
        XCTAssertTrue(tok.isEndOfGeneration(2))
        XCTAssertFalse(tok.isEndOfGeneration(1))
    }

    /// The prompts and continuations of golden/greedy_golden.json (ids from llama.cpp runs):
    /// prompts encode to the recorded ids (with BOS), and the continuation ids render as the
    /// recorded text.
    func testGoldenPrompts() throws {
        let data = try readFile(try TestData.path("golden/greedy_golden.json"))
        let root = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(data)) as? [String: Any])
        var checked = 0
        for (model, entry) in root.sorted(by: { $0.key < $1.key }) {
            guard let entry = entry as? [String: Any], let file = entry["file"] as? String,
                  let cases = entry["cases"] as? [[String: Any]] else { continue }
            let tok = try Tokenizer(gguf: GGUFFile(path: try TestData.path(file)))
            for c in cases {
                let prompt = try XCTUnwrap(c["prompt"] as? String)
                let ids = try XCTUnwrap(c["prompt_ids_with_bos"] as? [Int]).map(Int32.init)
                XCTAssertEqual(tok.encode(prompt, addSpecial: true, parseSpecial: false), ids, "\(model): \(prompt)")
                let greedy = try XCTUnwrap(c["greedy_ids"] as? [Int]).map(Int32.init)
                let rendered = try greedy.flatMap { try tok.piece($0) }
                XCTAssertEqual(text(rendered), c["greedy_text"] as? String, "\(model): continuation of \(prompt)")
                checked += 1
            }
        }
        XCTAssertGreaterThanOrEqual(checked, 5)
    }

    func testSentencePieceDecoding() throws {
        let tok = try tokenizer("ggml-vocab-llama-spm.gguf")
        let hello = tok.encode("Hello world", addSpecial: true, parseSpecial: false)
        XCTAssertEqual(hello, [1, 15043, 3186])
        // As llama_detokenize: the BOS renders as nothing and uses up the leading-space removal.
        XCTAssertEqual(text(try tok.decode(hello)), " Hello world")
        XCTAssertEqual(text(try tok.decode(Array(hello.dropFirst()))), "Hello world")
        XCTAssertEqual(text(try tok.decode(hello, renderSpecial: true)), "<s> Hello world")
        XCTAssertEqual(text(try tok.decode(hello + [2], removeSpecial: true, renderSpecial: true)), " Hello world</s>")
        // Byte fallback: "▁" and the emoji's four bytes (F0 9F 9A 80 → <0xF0> …); a prefix
        // decodes to the raw bytes, even when they are not valid UTF-8 on their own.
        let rocket = tok.encode("🚀", addSpecial: false, parseSpecial: false)
        XCTAssertEqual(rocket, [29871, 243, 162, 157, 131])
        XCTAssertEqual(try tok.decode(rocket), Array("🚀".utf8))
        XCTAssertEqual(try tok.decode(Array(rocket.prefix(3))), [0xF0, 0x9F])
        XCTAssertEqual(try tok.piece(13), [0x0A])
        XCTAssertEqual(text(try tok.piece(15043)), " Hello")
        XCTAssertEqual(text(try tok.piece(2)), "</s>")
    }

    func testLlama3SpecialTokens() throws {
        let tok = try tokenizer("reconstructed/ggml-vocab-llama3-bpe.reconstructed.gguf")
        XCTAssertEqual(tok.modelName, "gpt2")
        XCTAssertEqual(tok.preName, "llama-bpe")
        XCTAssertEqual(tok.bos, 128000)
        XCTAssertEqual(tok.eos, 128009)
        let chat = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        let parsed = tok.encode(chat, addSpecial: true, parseSpecial: true)
        XCTAssertEqual(parsed.first, 128000)
        XCTAssertEqual(parsed[1], 128006)
        XCTAssertEqual(parsed.last, 128009)
        XCTAssertTrue(parsed.contains(128007))
        let literal = tok.encode(chat, addSpecial: false, parseSpecial: false)
        XCTAssertFalse(literal.contains { $0 >= 128000 })
        XCTAssertEqual(try tok.decode(literal), Array(chat.utf8))
        XCTAssertEqual(try tok.decode(parsed, renderSpecial: true), Array(("<|begin_of_text|>" + chat).utf8))
        XCTAssertEqual(text(try tok.decode(parsed)), "user\n\nHi")
        XCTAssertTrue(tok.isEndOfGeneration(128009))   // <|eot_id|>
        XCTAssertTrue(tok.isEndOfGeneration(128001))   // <|end_of_text|>
        XCTAssertTrue(tok.isEndOfGeneration(128008))   // <|eom_id|>
        XCTAssertFalse(tok.isEndOfGeneration(128000))
        XCTAssertTrue(tok.isControl(128006))
    }

    /// User-defined tokens split out even without special-token parsing (MPT's runs of spaces,
    /// DeepSeek's single characters); control tokens only with it.
    func testUserDefinedTokensAlwaysSplit() throws {
        let mpt = try tokenizer("ggml-vocab-mpt.gguf")
        let spaces = mpt.encode("a" + String(repeating: " ", count: 30) + "b", addSpecial: false, parseSpecial: false)
        XCTAssertTrue(spaces.contains(50254), "\(spaces)")   // the 24-space token
        XCTAssertEqual(mpt.encode("<|endoftext|>", addSpecial: false, parseSpecial: true), [0])
        XCTAssertNotEqual(mpt.encode("<|endoftext|>", addSpecial: false, parseSpecial: false), [0])
    }

    func testWordPieceBasics() throws {
        let tok = try tokenizer("ggml-vocab-bert-bge.gguf")
        XCTAssertEqual(tok.modelName, "bert")
        let ids = tok.encode("Hello World!", addSpecial: true, parseSpecial: false)
        XCTAssertEqual(ids.first, 101)   // [CLS]
        XCTAssertEqual(ids.last, 102)    // [SEP]
        XCTAssertEqual(text(try tok.decode(ids)), " hello world!")
    }

    func testBadTokenIDs() throws {
        let tok = try tokenizer("ggml-vocab-gpt-2.gguf")
        XCTAssertThrowsError(try tok.decode([1, 50257])) { XCTAssertEqual(($0 as? VeloError)?.code, .invalidArgument) }
        XCTAssertThrowsError(try tok.decode([-1])) { XCTAssertEqual(($0 as? VeloError)?.code, .invalidArgument) }
        XCTAssertThrowsError(try tok.piece(50257)) { XCTAssertEqual(($0 as? VeloError)?.code, .invalidArgument) }
        XCTAssertEqual(try tok.decode([]), [])
    }

    /// Malformed UTF-8 and odd input never trap.
    func testOddInputNeverCrashes() throws {
        let inputs: [[UInt8]] = [[0xFF], [0xC3], [0xE2, 0x96], [0x80, 0x80, 0x41], [0xF0, 0x9F, 0x98], [0xED, 0xA0, 0x80],
                                 [0xF8, 0x88, 0x80, 0x80, 0x80], Array(String(repeating: "\u{301}", count: 50).utf8), []]
        for name in ["ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-bert-bge.gguf",
                     "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-falcon.gguf", "ggml-vocab-starcoder.gguf"] {
            let tok = try tokenizer(name)
            for input in inputs {
                let ids = input.withUnsafeBufferPointer { tok.encode(bytes: $0, addSpecial: true, parseSpecial: true) }
                XCTAssertTrue(ids.allSatisfy { $0 >= 0 && Int($0) < tok.vocabSize }, "\(name) \(input): \(ids)")
                _ = try tok.decode(ids, removeSpecial: true, renderSpecial: true)
            }
        }
    }

    // MARK: malformed metadata

    func testUnknownTokenizerModelIsUnsupported() throws {
        let path = try writeGGUF([("tokenizer.ggml.model", .string("sentencepiece-9000")), ("tokenizer.ggml.tokens", .strings(["a", "b"]))])
        XCTAssertThrowsError(try Tokenizer(gguf: GGUFFile(path: path))) { error in
            XCTAssertEqual((error as? VeloError)?.code, .unsupported)
            XCTAssertTrue("\(error)".contains("sentencepiece-9000"), "\(error)")
        }
    }

    func testUnknownPreTokenizerIsUnsupported() throws {
        let path = try writeGGUF([("tokenizer.ggml.model", .string("gpt2")), ("tokenizer.ggml.pre", .string("mystery")),
                                  ("tokenizer.ggml.tokens", .strings(["a", "b", "ab"])), ("tokenizer.ggml.merges", .strings(["a b"]))])
        XCTAssertThrowsError(try Tokenizer(gguf: GGUFFile(path: path))) { error in
            XCTAssertEqual((error as? VeloError)?.code, .unsupported)
            XCTAssertTrue("\(error)".contains("mystery"), "\(error)")
        }
    }

    func testInconsistentMetadataIsInvalid() throws {
        let cases: [[(String, Value)]] = [
            // Fewer scores than tokens.
            [("tokenizer.ggml.model", .string("llama")), ("tokenizer.ggml.tokens", .strings(["<unk>", "<s>", "</s>"])),
             ("tokenizer.ggml.scores", .floats([0, 0]))],
            // More token types than tokens.
            [("tokenizer.ggml.model", .string("llama")), ("tokenizer.ggml.tokens", .strings(["<unk>", "<s>", "</s>"])),
             ("tokenizer.ggml.token_type", .ints([2, 3, 3, 1]))],
            // BOS outside the vocabulary.
            [("tokenizer.ggml.model", .string("llama")), ("tokenizer.ggml.tokens", .strings(["<unk>", "<s>", "</s>"])),
             ("tokenizer.ggml.bos_token_id", .u32(7))],
            // No token list.
            [("tokenizer.ggml.model", .string("llama"))],
            // BPE without merges.
            [("tokenizer.ggml.model", .string("gpt2")), ("tokenizer.ggml.tokens", .strings(["a", "b"]))],
            // The same token twice.
            [("tokenizer.ggml.model", .string("llama")), ("tokenizer.ggml.tokens", .strings(["<unk>", "<s>", "<s>"]))],
        ]
        for (i, kvs) in cases.enumerated() {
            let path = try writeGGUF(kvs)
            XCTAssertThrowsError(try Tokenizer(gguf: GGUFFile(path: path)), "case \(i)") { error in
                XCTAssertEqual((error as? VeloError)?.code, .invalidFile, "case \(i): \(error)")
            }
        }
    }

    func testTinyHandMadeVocabulary() throws {
        let path = try writeGGUF([
            ("tokenizer.ggml.model", .string("gpt2")), ("tokenizer.ggml.pre", .string("gpt-2")),
            ("tokenizer.ggml.tokens", .strings(["a", "b", "ab", "Ġ", "Ġab"])),
            ("tokenizer.ggml.merges", .strings(["a b", "Ġ ab"])),
        ])
        let tok = try Tokenizer(gguf: GGUFFile(path: path))
        XCTAssertEqual(tok.vocabSize, 5)
        XCTAssertFalse(tok.addBOS)
        XCTAssertEqual(tok.encode("ab ab ba", addSpecial: true, parseSpecial: false), [2, 4, 3, 1, 0])
        XCTAssertEqual(text(try tok.decode([2, 4])), "ab ab")
    }

    // MARK: throughput (a report, not a timing assertion)

    /// Prints the tokenization speed of ~1 MB of mixed text for SentencePiece and byte-level
    /// BPE (release builds; debug builds use 64 KB and their figure means little); asserts only
    /// that the text survives the round trip.
    func testZZThroughputReport() throws {
        let seed = try vectorStrings("ggml-vocab-llama-spm.gguf").joined(separator: "\n")
            + "\nThe quick brown fox jumps over the lazy dog. It's 3:14 pm; let x = foo(bar, 42) + baz[i] * 3.5;\n"
        let size = _isDebugAssertConfiguration() ? 64 << 10 : 1 << 20
        var text = ""
        while text.utf8.count < size { text += seed }
        for name in ["ggml-vocab-llama-spm.gguf", "reconstructed/ggml-vocab-llama3-bpe.reconstructed.gguf"] {
            let tok = try tokenizer(name)
            var ids: [Int32] = []
            let clock = ContinuousClock()
            let elapsed = clock.measure { ids = tok.encode(text, addSpecial: false, parseSpecial: false) }
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
            let rate = Double(text.utf8.count) / 1_048_576 / seconds
            print("tokenizer throughput: \(name): \(text.utf8.count) bytes → \(ids.count) tokens in "
                  + "\(Int(seconds * 1000)) ms (\(Double(Int(rate * 10)) / 10) MB/s)")
            let back = try tok.decode(ids)
            XCTAssertEqual(back, tok.cleanSpaces ? Tokenizer.cleanUpTokenizationSpaces(Array(text.utf8)) : Array(text.utf8))
        }
    }

    // MARK: helpers

    private func checkVectors(_ vocab: String, vectors: String? = nil, parseSpecial: Bool = false) throws {
        let tok = try tokenizer(vocab)
        let strings = try vectorStrings(vectors ?? vocab)
        let expected = try expectedIDs(vectors ?? vocab)
        XCTAssertEqual(strings.count, expected.count, "\(vectors ?? vocab): .inp and .out disagree on the number of cases")
        var failures: [String] = []
        for (s, want) in zip(strings, expected) {
            let got = tok.encode(s, addSpecial: false, parseSpecial: parseSpecial)
            if got != want {
                failures.append("\(show(s))\n    expected \(want)\n    got      \(got)")
            }
        }
        XCTAssert(failures.isEmpty, "\(vocab): \(failures.count) of \(strings.count) vectors fail:\n" + failures.prefix(6).joined(separator: "\n"))
    }

    /// Vocabularies load once per test run (the big ones take a while in debug builds).
    nonisolated(unsafe) private static var loaded: [String: Tokenizer] = [:]

    private func tokenizer(_ vocab: String) throws -> Tokenizer {
        if let tok = Self.loaded[vocab] { return tok }
        let tok = try Tokenizer(gguf: GGUFFile(path: try TestData.path("vocab/" + vocab)))
        Self.loaded[vocab] = tok
        return tok
    }

    /// The test strings of `X.gguf.inp`: each followed by "\n__ggml_vocab_test__\n".
    private func vectorStrings(_ vocab: String) throws -> [String] {
        let bytes = try readFile(try TestData.path("vocab/\(vocab).inp"))
        let separator = Array("\n__ggml_vocab_test__\n".utf8)
        var strings: [String] = []
        var start = 0
        var i = 0
        while i + separator.count <= bytes.count {
            if bytes[i..<(i + separator.count)].elementsEqual(separator) {
                strings.append(String(decoding: bytes[start..<i], as: UTF8.self))
                i += separator.count
                start = i
            } else {
                i += 1
            }
        }
        if start < bytes.count { strings.append(String(decoding: bytes[start...], as: UTF8.self)) }
        return strings
    }

    /// The expected ids of `X.gguf.out`: one line per string.
    private func expectedIDs(_ vocab: String) throws -> [[Int32]] {
        let bytes = try readFile(try TestData.path("vocab/\(vocab).out"))
        var lines = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        if lines.last?.isEmpty == true { lines.removeLast() }
        return lines.map { line in
            line.split(separator: UInt8(ascii: " ")).map { Int32(String(decoding: $0, as: UTF8.self))! }
        }
    }


    private func readFile(_ path: String) throws -> [UInt8] {
        guard let data = FileManager.default.contents(atPath: path) else { throw VeloError(.io, "cannot read \(path)") }
        return [UInt8](data)
    }

    private func show(_ s: String) -> String {
        let escaped = s.unicodeScalars.map { $0.isASCII && $0.value >= 0x20 ? String($0) : "\\u{\(String($0.value, radix: 16))}" }.joined()
        return "\"" + (escaped.count > 80 ? String(escaped.prefix(80)) + "…" : escaped) + "\""
    }

    private func text(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    // A minimal GGUF v3 writer for hand-made vocabularies.

    private enum Value {
        case string(String), strings([String]), floats([Float]), ints([Int32]), u32(UInt32)
    }

    private func writeGGUF(_ kvs: [(String, Value)]) throws -> String {
        var out: [UInt8] = Array("GGUF".utf8)
        func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) } }
        func u64(_ v: UInt64) { withUnsafeBytes(of: v.littleEndian) { out.append(contentsOf: $0) } }
        func str(_ s: String) { u64(UInt64(s.utf8.count)); out.append(contentsOf: s.utf8) }
        u32(3)
        u64(0)
        u64(UInt64(kvs.count))
        for (key, value) in kvs {
            str(key)
            switch value {
            case .string(let s): u32(8); str(s)
            case .u32(let v): u32(4); u32(v)
            case .strings(let a): u32(9); u32(8); u64(UInt64(a.count)); a.forEach(str)
            case .floats(let a): u32(9); u32(6); u64(UInt64(a.count)); a.forEach { u32($0.bitPattern) }
            case .ints(let a): u32(9); u32(5); u64(UInt64(a.count)); a.forEach { u32(UInt32(bitPattern: $0)) }
            }
        }
        let path = NSTemporaryDirectory() + "velo-tok-\(UUID().uuidString).gguf"
        guard FileManager.default.createFile(atPath: path, contents: Data(out)) else { throw VeloError(.io, "cannot write \(path)") }
        addTeardownBlock { try? FileManager.default.removeItem(atPath: path) }
        return path
    }
}
