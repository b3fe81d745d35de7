// Tokenizer throughput (MB/s) for SentencePiece and byte-level BPE vocabularies.
//   scripts/bun bench/tokenizer.ts [--mb 1] [--runs 5]
// Text: llama.cpp's tokenizer test strings plus this repository's README, repeated to the
// requested size (English prose, code, whitespace runs, CJK, emoji).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Model } from "../src/engine/model";
import { dataDir, repoRoot } from "../tests/helpers/paths";

const { values } = parseArgs({ options: { mb: { type: "string", default: "1" }, runs: { type: "string", default: "5" } } });
const targetBytes = Math.round(Number(values.mb) * 1024 * 1024);
const runs = Number(values.runs);

const seed =
  readFileSync(join(repoRoot, "README.md"), "utf8") + "\n" +
  readFileSync(join(dataDir, "vocab/ggml-vocab-llama-spm.gguf.inp"), "utf8").replaceAll("__ggml_vocab_test__", "");
let text = "";
while (Buffer.byteLength(text) < targetBytes) text += seed;
const bytes = Buffer.byteLength(text);

const vocabs = [
  ["SPM (llama-spm)", "vocab/ggml-vocab-llama-spm.gguf"],
  ["BPE (llama3)", "vocab/reconstructed/ggml-vocab-llama3-bpe.reconstructed.gguf"],
  ["BPE (gpt-2)", "vocab/ggml-vocab-gpt-2.gguf"],
] as const;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rows: { tokenizer: string; mb: number; tokens: number; median_ms: number; mb_per_s: number }[] = [];
for (const [name, path] of vocabs) {
  const m = Model.open(join(dataDir, path));
  const tokens = m.tokenize(text, { addSpecial: false }).length; // warm-up
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    m.tokenize(text, { addSpecial: false });
    times.push(performance.now() - t0);
  }
  m.close();
  const ms = median(times);
  rows.push({ tokenizer: name, mb: bytes / 1048576, tokens, median_ms: ms, mb_per_s: bytes / 1048576 / (ms / 1000) });
}
console.log(`text: ${(bytes / 1048576).toFixed(2)} MB, ${runs} runs after a warm-up, median`);
for (const r of rows) {
  console.log(`${r.tokenizer.padEnd(18)} ${String(r.tokens).padStart(8)} tokens  ${r.median_ms.toFixed(1).padStart(8)} ms  ${r.mb_per_s.toFixed(2).padStart(7)} MB/s`);
}
