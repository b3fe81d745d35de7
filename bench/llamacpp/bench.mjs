#!/usr/bin/env node
// llama.cpp reference numbers for Velo's benchmarks, measured the way llama-bench does, through
// node-llama-cpp's prebuilt CPU build (no compiler, no network at run time).
//
//   node bench/llamacpp/bench.mjs MODEL.gguf [-t 2] [-p 512] [-n 128] [-r 3] [--parallel N]
//                                 [-b 512] [--flash-attn off|on|auto] [--no-warmup] [--verbose]
//
// One sequence (the default), like llama-bench:
//   pp<P>: P random prompt tokens evaluated at once into an empty KV cache (tokens/s);
//   tg<N>: N tokens decoded one at a time from an empty KV cache, each the greedy choice
//          after the previous one (tokens/s).
// --parallel S (S > 1), like llama-batched-bench: S sequences in one context each get a P-token
//   prompt (pp<P>xS: aggregate prompt tokens/s), then decode N tokens each in lockstep, one
//   llama_decode call per step holding one token of every sequence (tg<N>xS: aggregate new
//   tokens/s).
// Each test starts with an untimed warm-up round (the whole prompt and one decoded token, as
// llama-bench does; it also pages the weights in), then runs -r times. Clearing the KV cache and
// making the tokens happen outside the timed regions. Prints JSON on stdout, progress on stderr.
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const { values: opt, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    threads: { type: "string", short: "t", default: "2" },
    "n-prompt": { type: "string", short: "p", default: "512" },
    "n-gen": { type: "string", short: "n", default: "128" },
    repetitions: { type: "string", short: "r", default: "3" },
    parallel: { type: "string", default: "1" },
    // llama-bench's n_ubatch default; node-llama-cpp makes n_batch = n_ubatch = this.
    batch: { type: "string", short: "b", default: "512" },
    "flash-attn": { type: "string", default: "off" },
    "no-warmup": { type: "boolean", default: false },
    seed: { type: "string", default: "42" },
    verbose: { type: "boolean", short: "v", default: false },
  },
});
if (positionals.length !== 1) {
  console.error("usage: node bench/llamacpp/bench.mjs MODEL.gguf [-t 2] [-p 512] [-n 128] [-r 3] [--parallel N] [-b 512] [--flash-attn off|on|auto]");
  process.exit(2);
}
const modelPath = positionals[0];
const int = (name, min) => {
  const v = Number(opt[name]);
  if (!Number.isInteger(v) || v < min) throw new Error(`--${name} must be an integer ≥ ${min}, got ${opt[name]}`);
  return v;
};
const threads = int("threads", 1);
const nPrompt = int("n-prompt", 0);
const nGen = int("n-gen", 0);
const reps = int("repetitions", 1);
const nSeq = int("parallel", 1);
const batch = int("batch", 1);
const flashAttn = { off: false, on: true, auto: "auto" }[opt["flash-attn"]];
if (flashAttn === undefined) throw new Error(`--flash-attn must be off, on or auto, got ${opt["flash-attn"]}`);

const log = (msg) => process.stderr.write(msg + "\n");
const now = () => process.hrtime.bigint();
const secondsSince = (t0) => Number(now() - t0) / 1e9;

// Deterministic random tokens (mulberry32), like llama-bench's rand() % n_vocab.
let rngState = Number(opt.seed) >>> 0;
function random() {
  rngState = (rngState + 0x6d2b79f5) >>> 0;
  let z = rngState;
  z = Math.imul(z ^ (z >>> 15), z | 1);
  z ^= z + Math.imul(z ^ (z >>> 7), z | 61);
  return ((z ^ (z >>> 14)) >>> 0) / 4294967296;
}

const llama = await getLlama({
  gpu: false,
  build: "never", // use the prebuilt binary; never try to compile or download
  maxThreads: threads,
  logLevel: opt.verbose ? LlamaLogLevel.info : LlamaLogLevel.error,
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const md = model.fileInfo.metadata;
const nVocab = md[md.general?.architecture]?.vocab_size ?? md.tokenizer?.ggml?.tokens?.length;
if (!nVocab) throw new Error(`${modelPath}: cannot tell the vocabulary size`);
const randomToken = () => Math.floor(random() * nVocab);
const bos = model.tokens.shouldPrependBosToken ? model.tokens.bos : null;
/** A prompt of random tokens, starting with BOS where the model wants one (as llama-bench does). */
const randomPrompt = (n) => Array.from({ length: n }, (_, i) => (i === 0 && bos != null ? bos : randomToken()));

const context = await model.createContext({
  sequences: nSeq,
  contextSize: nPrompt + nGen + 1, // per sequence; llama.cpp pads it up
  batchSize: Math.max(nSeq, Math.min(batch, nPrompt * nSeq)),
  threads: { ideal: threads, min: threads }, // exactly this many, for prompt and decode alike
  flashAttention: flashAttn,
});
const seqs = Array.from({ length: nSeq }, () => context.getSequence());

/**
 * One round: clear the sequences, evaluate a `promptLen`-token prompt in each (timed together),
 * then decode `genLen` tokens in each (timed together). Returns tokens/s of each timed phase.
 */
async function round(promptLen, genLen) {
  await Promise.all(seqs.map((s) => s.clearHistory()));
  const prompts = seqs.map(() => randomPrompt(promptLen));
  let pp = null, tg = null;
  if (promptLen > 0) {
    const t0 = now();
    await Promise.all(seqs.map((s, i) => s.evaluateWithoutGeneratingNewTokens(prompts[i])));
    pp = (promptLen * nSeq) / secondsSince(t0);
  }
  if (genLen > 0) {
    // Decoding starts from BOS on an empty cache (llama-bench) or from a random next token.
    let next = seqs.map(() => (promptLen === 0 && bos != null ? bos : randomToken()));
    const greedy = { generateNext: { token: true, options: { temperature: 0 } } };
    const t0 = now();
    for (let step = 0; step < genLen; step++) {
      // All sequences queue their token in the same tick, so node-llama-cpp puts them into one
      // llama_decode call; waiting for all of them keeps the steps in lockstep (free-running
      // generators drift apart and split the batch).
      const outs = await Promise.all(seqs.map((s, i) => s.controlledEvaluate([[next[i], greedy]])));
      next = outs.map((o) => o[0].next.token);
    }
    tg = (genLen * nSeq) / secondsSince(t0);
  }
  return { pp, tg };
}

function summary(test, samples) {
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  // Sample standard deviation, as llama-bench reports it.
  const sd = samples.length > 1 ? Math.sqrt(samples.reduce((a, x) => a + (x - mean) ** 2, 0) / (samples.length - 1)) : 0;
  const round2 = (x) => Math.round(x * 100) / 100;
  return { test, ...(nSeq > 1 && { sequences: nSeq }), avg_tps: round2(mean), stddev_tps: round2(sd), samples_tps: samples.map(round2) };
}

// The tests to run, each a round shape and the phases it reports.
const suffix = nSeq > 1 ? `x${nSeq}` : "";
const tests = nSeq > 1
  ? [{ prompt: nPrompt, gen: nGen, report: [nPrompt > 0 && ["pp", `pp${nPrompt}${suffix}`], nGen > 0 && ["tg", `tg${nGen}${suffix}`]].filter(Boolean) }]
  : [
      nPrompt > 0 && { prompt: nPrompt, gen: 0, report: [["pp", `pp${nPrompt}`]] },
      nGen > 0 && { prompt: 0, gen: nGen, report: [["tg", `tg${nGen}`]] },
    ].filter(Boolean);

const results = [];
for (const t of tests) {
  if (!opt["no-warmup"]) await round(t.prompt, Math.min(t.gen, 1));
  const samples = Object.fromEntries(t.report.map(([phase]) => [phase, []]));
  for (let r = 0; r < reps; r++) {
    const res = await round(t.prompt, t.gen);
    for (const [phase, name] of t.report) {
      samples[phase].push(res[phase]);
      log(`${name}: ${res[phase].toFixed(2)} t/s (${r + 1}/${reps})`);
    }
  }
  for (const [phase, name] of t.report) results.push(summary(name, samples[phase]));
}

const nlcVersion = JSON.parse(readFileSync(new URL("node_modules/node-llama-cpp/package.json", import.meta.url), "utf8")).version;
const out = {
  runner: `node-llama-cpp ${nlcVersion}`,
  llama_cpp_version: llama.llamaCppRelease.release,
  system_info: llama.systemInfo,
  model: modelPath,
  model_type: model.typeDescription,
  model_size: model.size,
  threads,
  batch_size: context.batchSize,
  flash_attn: opt["flash-attn"],
  sequences: nSeq,
  results,
};
await context.dispose();
await model.dispose();
await llama.dispose();
console.log(JSON.stringify(out, null, 2));
