#!/usr/bin/env node
// llama.cpp's greedy tokens and raw logits for given prompts: the reference that Velo's forward
// pass is compared with (bench/compare-logits.ts, tests/architectures.test.ts). Prebuilt CPU
// llama.cpp through node-llama-cpp (install with bench/setup-llamacpp.sh).
//
//   node bench/llamacpp/reference.mjs MODEL.gguf --prompt 1,2,3 [--prompt ...] [-n 24] [--top 10]
//                                     [--ctx 512] [-t 2] [--kv f32|f16] [--verbose]
//
// For each prompt (token ids, used as given: no BOS is added), a fresh context: the prompt is
// evaluated in one batch, then n tokens are decoded one at a time, each the argmax of the logits
// (llama.cpp's greedy sampler: the first of equal maxima). Printed on stdout as JSON:
//   { runner, llama_cpp_version, model, n_ctx, kv_type, threads, results: [
//       { prompt: [...], tokens: [t1..tn], steps: [ { top: [[id, logit], ...] }, ... ] } ] }
// steps[i] holds the top-k logits that chose tokens[i]: steps[0] those at the last prompt
// position, steps[i] those after tokens[i-1]. The logits are llama.cpp's raw output row
// (llama_get_logits_ith), before any sampling: node-llama-cpp's controlledEvaluate returns
// them with `logits: { filter: { includeTop: k } }`, and with temperature 0 its sampler chain is
// the greedy sampler alone, which reads the logits without changing them.
//
// n_ctx is the context llama.cpp really has: it pads every context to a multiple of 256 (this
// matters to Phi-3, which takes the long LongRoPE factors when n_ctx > the original context).
// --kv: the KV cache type; f32 by default (Velo keeps its KV cache in float32; llama.cpp's own
// default, f16, rounds every key and value). Flash attention is off (llama.cpp's CPU flash
// attention rounds Q to f16).
import { parseArgs } from "node:util";
import { loadReference, runnerName } from "./llama.mjs";

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    prompt: { type: "string", multiple: true, default: [] },
    "n-gen": { type: "string", short: "n", default: "24" },
    top: { type: "string", default: "10" },
    ctx: { type: "string", default: "512" },
    threads: { type: "string", short: "t", default: "2" },
    kv: { type: "string", default: "f32" },
    verbose: { type: "boolean", short: "v", default: false },
  },
});
if (positionals.length !== 1 || opt.prompt.length === 0) {
  console.error("usage: node bench/llamacpp/reference.mjs MODEL.gguf --prompt 1,2,3 [--prompt ...] [-n 24] [--top 10] [--ctx 512] [-t 2] [--kv f32|f16]");
  process.exit(2);
}
const int = (name, min) => {
  const v = Number(opt[name]);
  if (!Number.isInteger(v) || v < min) throw new Error(`--${name} must be an integer ≥ ${min}, got ${opt[name]}`);
  return v;
};
const nGen = int("n-gen", 1);
const top = int("top", 1);
const ctxSize = int("ctx", 16);
const threads = int("threads", 1);
const kvType = { f32: "F32", f16: "F16" }[opt.kv];
if (!kvType) throw new Error(`--kv must be f32 or f16, got ${opt.kv}`);
const prompts = opt.prompt.map((p) => {
  const ids = p.split(",").map((s) => Number(s.trim()));
  if (ids.length === 0 || ids.some((t) => !Number.isInteger(t) || t < 0)) throw new Error(`--prompt must be comma-separated token ids, got ${p}`);
  return ids;
});
for (const p of prompts) {
  if (p.length + nGen > ctxSize) throw new Error(`a prompt of ${p.length} tokens and ${nGen} generated ones do not fit --ctx ${ctxSize}`);
}

const { llama, model } = await loadReference(positionals[0], { threads, verbose: opt.verbose });
const nVocab = model.tokens.nTokens ?? model.fileInsights?.vocabularySize;
for (const p of prompts) {
  const bad = p.find((t) => nVocab != null && t >= nVocab);
  if (bad != null) throw new Error(`token ${bad} is outside the vocabulary (${nVocab})`);
}

const greedy = { generateNext: { token: true, logits: { filter: { tokens: [], includeTop: top } }, options: { temperature: 0 } } };
const entries = (out) => {
  const next = out.next;
  if (next?.logits == null || next.token == null) throw new Error("llama.cpp returned no logits");
  const topk = [...next.logits.entries()].slice(0, top).map(([id, logit]) => [id, logit]);
  if (topk.some(([, logit]) => !Number.isFinite(logit))) throw new Error(`llama.cpp produced non-finite logits: ${JSON.stringify(topk.slice(0, 3))}`);
  // the greedy token must be the first of the top logits (ties: the lower id, as both engines pick)
  if (topk[0][0] !== next.token && topk[0][1] !== next.logits.get(next.token)) {
    throw new Error(`sampled token ${next.token} is not the top logit ${topk[0][0]}`);
  }
  return { token: next.token, top: topk };
};

const results = [];
let nCtx = null;
for (const prompt of prompts) {
  // a fresh context (and so a fresh KV cache) for every prompt
  const context = await model.createContext({
    contextSize: ctxSize,
    batchSize: Math.max(prompt.length, 1),
    threads: { ideal: threads, min: threads },
    flashAttention: false,
    experimentalKvCacheKeyType: kvType,
    experimentalKvCacheValueType: kvType,
  });
  nCtx = context.contextSize;
  const seq = context.getSequence();
  const tokens = [];
  const steps = [];
  let out = await seq.controlledEvaluate([...prompt.slice(0, -1), [prompt.at(-1), greedy]]);
  let step = entries(out.at(-1));
  for (let i = 0; ; i++) {
    tokens.push(step.token);
    steps.push({ top: step.top });
    if (i === nGen - 1) break;
    out = await seq.controlledEvaluate([[step.token, greedy]]);
    step = entries(out[0]);
  }
  results.push({ prompt, tokens, steps });
  await context.dispose();
}

const doc = {
  runner: runnerName(),
  llama_cpp_version: llama.llamaCppRelease.release,
  model: positionals[0],
  model_type: model.typeDescription,
  // llama.cpp pads the context to a multiple of 256 (llama_context: n_ctx = GGML_PAD(n_ctx, 256))
  n_ctx: Math.ceil(nCtx / 256) * 256,
  kv_type: opt.kv,
  threads,
  results,
};
await model.dispose();
await llama.dispose();
console.log(JSON.stringify(doc));
