#!/usr/bin/env node
// llama.cpp's tokens for given texts, and its text back for them: the reference that a
// tokenizer without llama.cpp test vectors (Gemma 4's "gemma4") is compared with
// (tests/gemma4.test.ts). Prebuilt CPU llama.cpp through node-llama-cpp.
//
//   node bench/llamacpp/tokenize.mjs MODEL.gguf < texts.json     (a JSON array of strings)
//
// Prints a JSON array, one { ids, text } a string: ids without BOS/EOS and with special-token
// text left as text (llama_tokenize with add_special and parse_special false), text the ids
// detokenized.
import { readFileSync } from "node:fs";
import { loadReference } from "./llama.mjs";

if (process.argv.length !== 3) {
  console.error("usage: node bench/llamacpp/tokenize.mjs MODEL.gguf < texts.json");
  process.exit(2);
}
const texts = JSON.parse(readFileSync(0, "utf8"));
if (!Array.isArray(texts) || texts.some((t) => typeof t !== "string")) throw new Error("stdin must be a JSON array of strings");
const { llama, model } = await loadReference(process.argv[2], { threads: 1, verbose: false, vocabOnly: true });
const out = texts.map((t) => {
  const ids = Array.from(model.tokenize(t, false));
  return { ids, text: model.detokenize(ids) };
});
process.stdout.write(JSON.stringify(out) + "\n");
await model.dispose();
await llama.dispose();
