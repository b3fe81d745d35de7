// Tokenizers through the C ABI (llama.cpp's vectors, round trips) and `velo tokenize`.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Model } from "../src/engine/model";
import { runCli } from "./helpers/cli";
import { testData } from "./helpers/paths";

/** llama.cpp's vector format: strings split by a marker line, one line of ids per string. */
function loadVectors(inp: string, out: string): { text: string; ids: number[] }[] {
  const texts = readFileSync(testData(inp), "utf8").split("\n__ggml_vocab_test__\n");
  if (texts.at(-1) === "") texts.pop();
  const lines = readFileSync(testData(out), "utf8").split("\n");
  return texts.map((text, i) => ({
    text,
    ids: lines[i]!.trim() === "" ? [] : lines[i]!.trim().split(/\s+/).map(Number),
  }));
}

const suites: [string, string, boolean][] = [
  // vocabulary, vectors (without .inp/.out), parse special
  ["vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-llama-spm.gguf", false],
  ["vocab/ggml-vocab-phi-3.gguf", "vocab/ggml-vocab-phi-3.gguf", false],
  ["vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-gpt-2.gguf", false],
  ["vocab/ggml-vocab-deepseek-coder.gguf", "vocab/ggml-vocab-deepseek-coder.gguf", false],
  ["vocab/ggml-vocab-deepseek-llm.gguf", "vocab/ggml-vocab-deepseek-llm.gguf", false],
  ["vocab/ggml-vocab-falcon.gguf", "vocab/ggml-vocab-falcon.gguf", false],
  ["vocab/ggml-vocab-mpt.gguf", "vocab/ggml-vocab-mpt.gguf", false],
  ["vocab/ggml-vocab-refact.gguf", "vocab/ggml-vocab-refact.gguf", false],
  ["vocab/ggml-vocab-starcoder.gguf", "vocab/ggml-vocab-starcoder.gguf", false],
  ["vocab/ggml-vocab-bert-bge.gguf", "vocab/ggml-vocab-bert-bge.gguf", false],
  ["vocab/reconstructed/ggml-vocab-llama3-bpe.reconstructed.gguf", "vocab/ggml-vocab-llama-bpe.gguf", false],
  ["vocab/ggml-vocab-llama-spm.gguf", "vocab/newer-ggml-org/ggml-vocab-tinyllama.gguf", true],
];

describe("llama.cpp tokenizer vectors through the C ABI", () => {
  for (const [vocab, vectors, parseSpecial] of suites) {
    test(`${vectors.split("/").at(-1)}${parseSpecial ? " (parse special)" : ""}`, () => {
      const model = Model.open(testData(vocab));
      try {
        const cases = loadVectors(`${vectors}.inp`, `${vectors}.out`);
        expect(cases.length).toBeGreaterThan(10);
        const wrong = cases.filter((c) => {
          const got = Array.from(model.tokenize(c.text, { addSpecial: false, parseSpecial }));
          return got.join(" ") !== c.ids.join(" ");
        });
        expect(wrong.map((c) => c.text)).toEqual([]);
        // detokenizing our ids gives what detokenizing the expected ids gives
        for (const c of cases) {
          const ours = model.detokenize(model.tokenize(c.text, { addSpecial: false, parseSpecial }));
          expect(ours).toBe(model.detokenize(c.ids));
        }
      } finally {
        model.close();
      }
    });
  }
});

describe("velo tokenize", () => {
  const stories = testData("stories260K.gguf");
  const dir = mkdtempSync(join(tmpdir(), "velo-tok-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test("prints ids with BOS", async () => {
    const r = await runCli(["tokenize", "--model", stories, "Once upon a time"]);
    expect(r.stderr).toBe("");
    expect(r.stdout).toBe("1 403 407 261 378\n");
    expect(r.code).toBe(0);
  });

  test("--no-bos, --count, --json, --pieces", async () => {
    expect((await runCli(["tokenize", "-m", stories, "--no-bos", "Once upon a time"])).stdout).toBe("403 407 261 378\n");
    expect((await runCli(["tokenize", "-m", stories, "--count", "Once upon a time"])).stdout).toBe("5\n");
    const json = JSON.parse((await runCli(["tokenize", "-m", stories, "--json", "Once upon"])).stdout);
    expect(json.ids).toEqual([1, 403, 407]);
    expect(json.count).toBe(3);
    expect(json.pieces[1]).toBe(" Once");
    const pieces = (await runCli(["tokenize", "-m", stories, "--pieces", "Once"])).stdout.trimEnd().split("\n");
    expect(pieces).toEqual(['  1  "<s>"', '403  " Once"']);
  });

  test("text from --file, stdin and VELO_MODEL", async () => {
    const f = join(dir, "t.txt");
    writeFileSync(f, "Once upon a time");
    expect((await runCli(["tokenize", "-m", stories, "--file", f])).stdout).toBe("1 403 407 261 378\n");
    expect((await runCli(["tokenize", "-m", stories], { stdin: "Once upon a time" })).stdout).toBe("1 403 407 261 378\n");
    expect((await runCli(["tokenize", "Once upon a time"], { env: { VELO_MODEL: stories } })).stdout).toBe("1 403 407 261 378\n");
  });

  test("no model: the embedded default (models/stories260K.gguf)", async () => {
    expect((await runCli(["tokenize", "Once upon a time"])).stdout).toBe("1 403 407 261 378\n");
  });

  test("--parse-special recognises control tokens", async () => {
    const spm = testData("vocab/ggml-vocab-llama-spm.gguf");
    const on = await runCli(["tokenize", "-m", spm, "--no-bos", "--parse-special", "abc</s> def ghi"]);
    expect(on.stdout).toBe("25638 2 29871 822 330 2918\n");
    const off = await runCli(["tokenize", "-m", spm, "--no-bos", "abc</s> def ghi"]);
    expect(off.stdout.split(" ")).not.toContain("2");
  });

  test("a vocabulary-only GGUF is enough", async () => {
    const r = await runCli(["tokenize", "-m", testData("vocab/ggml-vocab-gpt-2.gguf"), "Hello world"]);
    expect(r.stdout).toBe("15496 995\n");
  });

  test("bad input: one red line and a non-zero exit", async () => {
    const cases: [string[], RegExp][] = [
      [["tokenize", "-m", "no-such-stored-model", "x"], /no stored model of that name/],
      [["tokenize", "-m", join(dir, "missing.gguf"), "x"], /model file not found/],
      [["tokenize", "-m", dir, "x"], /not a file/],
      [["tokenize", "-m", stories, "--file", join(dir, "none.txt")], /file not found/],
      [["tokenize", "-m", stories, "--file", join(dir, "t.txt"), "x"], /either as an argument or with --file/],
      [["tokenize", "-m", testData("golden/greedy_golden.json"), "x"], /not a GGUF file/],
      [["tokenize", "--bogus"], /unknown option '--bogus'/],
      [["frobnicate"], /unknown command 'frobnicate'/],
    ];
    for (const [args, msg] of cases) {
      const r = await runCli(args);
      expect(r.code).not.toBe(0);
      expect(r.stdout).toBe("");
      const lines = r.stderr.trim().split("\n");
      expect(lines.length).toBe(1);
      expect(lines[0]).toMatch(/^velo: error: /);
      expect(lines[0]).toMatch(msg);
    }
  });

  test("--help and --version", async () => {
    const v = await runCli(["--version"]);
    expect(v.stdout.trim()).toMatch(/^velo \d+\.\d+\.\d+$/);
    expect(v.code).toBe(0);
    const h = await runCli(["tokenize", "--help"]);
    expect(h.stdout).toContain("--parse-special");
    expect(h.code).toBe(0);
  });
});

describe("round trips", () => {
  test("detokenize(tokenize(text)) gives the text back (SPM and BPE)", () => {
    const texts = ["Hello world", " leading space", "multiple   spaces\n\nand newlines\t", "ümlaut 日本語 🦙.cpp", ""];
    for (const vocab of ["vocab/ggml-vocab-llama-spm.gguf", "vocab/reconstructed/ggml-vocab-llama3-bpe.reconstructed.gguf", "vocab/ggml-vocab-gpt-2.gguf"]) {
      const m = Model.open(testData(vocab));
      for (const t of texts) expect(m.detokenize(m.tokenize(t, { addSpecial: false }))).toBe(t);
      m.close();
    }
  });

  test("bad token ids are errors", () => {
    const m = Model.open(testData("stories260K.gguf"));
    expect(() => m.detokenize([1, 99999])).toThrow(/99999/);
    expect(() => m.pieceBytes(-1)).toThrow();
    m.close();
  });
});
