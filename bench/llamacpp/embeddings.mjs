#!/usr/bin/env node
// llama.cpp's embeddings of given token inputs: the reference Velo's embeddings are compared
// with (tests/embeddings.test.ts). Prebuilt CPU llama.cpp through node-llama-cpp's embedding
// context (install with bench/setup-llamacpp.sh).
//
//   node bench/llamacpp/embeddings.mjs MODEL.gguf --input 1,2,3 [--input ...] [--ctx 512] [-t 2]
//
// Each input is token ids; node-llama-cpp adds BOS and EOS only where the model says to and they
// are missing, so inputs that already carry them are used as given. One embedding context, its
// sequence cleared before each input. The vector is what llama.cpp returns, not normalised:
// llama_get_embeddings_seq (pooled as the model's pooling_type says), or, for a model without
// one (pooling none), the last token's hidden state (llama_get_embeddings_ith(-1)); both are
// the final-norm hidden states, before the output projection. Printed on stdout as JSON:
//   { runner, llama_cpp_version, model, n_embd, results: [ { input: [...], vector: [...] } ] }
import { parseArgs } from "node:util";
import { loadReference, runnerName } from "./llama.mjs";

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    input: { type: "string", multiple: true, default: [] },
    ctx: { type: "string", default: "512" },
    threads: { type: "string", short: "t", default: "2" },
    verbose: { type: "boolean", short: "v", default: false },
  },
});
if (positionals.length !== 1 || opt.input.length === 0) {
  console.error("usage: node bench/llamacpp/embeddings.mjs MODEL.gguf --input 1,2,3 [--input ...] [--ctx 512] [-t 2]");
  process.exit(2);
}
const ctxSize = Number(opt.ctx);
const threads = Number(opt.threads);
if (!Number.isInteger(ctxSize) || ctxSize < 16) throw new Error(`--ctx must be an integer ≥ 16, got ${opt.ctx}`);
if (!Number.isInteger(threads) || threads < 1) throw new Error(`--threads must be an integer ≥ 1, got ${opt.threads}`);
const inputs = opt.input.map((p) => {
  const ids = p.split(",").map((s) => Number(s.trim()));
  if (ids.some((t) => !Number.isInteger(t) || t < 0)) throw new Error(`--input must be comma-separated token ids, got ${p}`);
  return ids;
});

const { llama, model } = await loadReference(positionals[0], { threads, verbose: opt.verbose });
// the whole input in one batch: llama.cpp pools over one ubatch
const longest = Math.max(...inputs.map((i) => i.length)) + 2;
const context = await model.createEmbeddingContext({ contextSize: ctxSize, batchSize: longest, threads });
const results = [];
for (const input of inputs) {
  const e = await context.getEmbeddingFor(input.slice());
  if (e.vector.length === 0 || e.vector.some((x) => !Number.isFinite(x))) throw new Error(`llama.cpp returned no finite embedding for ${input}`);
  results.push({ input, vector: Array.from(e.vector) });
}
await context.dispose();

console.log(JSON.stringify({
  runner: runnerName(),
  llama_cpp_version: llama.llamaCppRelease.release,
  model: positionals[0],
  n_embd: model.embeddingVectorSize,
  results,
}));
await model.dispose();
await llama.dispose();
