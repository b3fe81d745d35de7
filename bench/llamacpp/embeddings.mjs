#!/usr/bin/env node
// llama.cpp's embeddings of given token inputs: the reference Velo's embeddings are compared
// with (tests/embeddings.test.ts). Prebuilt CPU llama.cpp through node-llama-cpp's embedding
// context (install with bench/setup-llamacpp.sh).
//
//   node bench/llamacpp/embeddings.mjs MODEL.gguf --input 1,2,3 [--input ...] [--ctx 512] [-t 2] [--kv f32|f16]
//
// Each input is token ids, used as given (BOS/EOS included if the model wants them). What
// node-llama-cpp's LlamaEmbeddingContext.getEmbeddingFor does, on a context made here so that
// the KV cache can be float32 as Velo's is in the comparison (--kv, f32 by default; llama.cpp's
// own default, f16, also rounds each query to f16 in the Q·K product, which moves these small
// models' vectors by up to 1e-3) and flash attention is off (it rounds Q on the CPU too): an
// embedding context (node-llama-cpp's `_embeddings`, pinned version), its sequence cleared
// before each input, the input evaluated without sampling, and the vector read as
// getEmbeddingFor reads it. That vector is what llama.cpp returns, not normalised:
// llama_get_embeddings_seq (pooled as the model's pooling_type says), or, for a model without
// one (pooling none), the last token's hidden state (llama_get_embeddings_ith(-1)); both are
// the final-norm hidden states, before the output projection. Printed on stdout as JSON:
//   { runner, llama_cpp_version, model, n_embd, kv_type, results: [ { input: [...], vector: [...] } ] }
import { parseArgs } from "node:util";
import { loadReference, runnerName } from "./llama.mjs";

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    input: { type: "string", multiple: true, default: [] },
    ctx: { type: "string", default: "512" },
    threads: { type: "string", short: "t", default: "2" },
    kv: { type: "string", default: "f32" },
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
const kvType = { f32: "F32", f16: "F16" }[opt.kv];
if (!kvType) throw new Error(`--kv must be f32 or f16, got ${opt.kv}`);
const inputs = opt.input.map((p) => {
  const ids = p.split(",").map((s) => Number(s.trim()));
  if (ids.some((t) => !Number.isInteger(t) || t < 0)) throw new Error(`--input must be comma-separated token ids, got ${p}`);
  return ids;
});

const { llama, model } = await loadReference(positionals[0], { threads, verbose: opt.verbose });
// the whole input in one batch: llama.cpp pools over one ubatch
const longest = Math.max(...inputs.map((i) => i.length)) + 2;
const context = await model.createContext({
  contextSize: ctxSize,
  batchSize: longest,
  threads: { ideal: threads, min: threads },
  flashAttention: false,
  experimentalKvCacheKeyType: kvType,
  experimentalKvCacheValueType: kvType,
  _embeddings: true,
});
const seq = context.getSequence();
const results = [];
for (const input of inputs) {
  if (input.length >= context.contextSize) throw new Error(`an input of ${input.length} tokens does not fit the context of ${context.contextSize}`);
  await seq.eraseContextTokenRanges([{ start: 0, end: seq.nextTokenIndex }]);
  for await (const _ of seq.evaluate(input, { _noSampling: true })) break;
  const vector = Array.from(context._ctx.getEmbedding(input.length));
  if (vector.length === 0 || vector.some((x) => !Number.isFinite(x))) throw new Error(`llama.cpp returned no finite embedding for ${input}`);
  results.push({ input, vector });
}
await context.dispose();

console.log(JSON.stringify({
  runner: runnerName(),
  llama_cpp_version: llama.llamaCppRelease.release,
  model: positionals[0],
  n_embd: model.embeddingVectorSize,
  kv_type: opt.kv,
  results,
}));
await model.dispose();
await llama.dispose();
