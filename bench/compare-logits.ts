// Velo against llama.cpp on one GGUF: greedy tokens and raw logits, prompt by prompt, and where
// they part. Exit code 0 when they agree, 1 when they do not, 2 on bad arguments.
//
//   node_modules/bun/bin/bun.exe bench/compare-logits.ts MODEL.gguf [--prompts 1,2,3;4,5,6] [-n 24]
//       [--top 10] [--ctx 512] [-t 2] [--backend cpu|vulkan|metal] [--rtol 1e-3] [--kv f32|f16]
//       [--lengths 5,20,40] [--seed 1] [--json]
//
// Prompts are token ids (';' between prompts); without --prompts, random ones of --lengths
// tokens. llama.cpp (prebuilt CPU build through node-llama-cpp: bench/llamacpp/reference.mjs,
// installed by bench/setup-llamacpp.sh when missing) and Velo (its engine API, in this process)
// each decode greedily from a fresh state. Reported per prompt: the first step where the tokens
// differ, and at every step up to it the largest difference of the top-k logits measured from
// each side's top logit (logit_i − logit_top: invariant to a shift of all logits). They agree
// when the tokens are equal and every difference is within rtol·max(1, |top logit|); a differing
// token is accepted only on a near-tie of llama.cpp's (its top two within that tolerance).
// Both KV caches are float32 here (Velo's default is f16) unless --kv f16.
// Velo's library is loaded in this process: on a Linux host that needs the build root, run it
// there: scripts/toolchain.sh run node_modules/bun/bin/bun.exe bench/compare-logits.ts ...
import { parseArgs } from "node:util";
import { compareRuns, describeComparison, randomPrompts, runReference, runVelo } from "./llamacpp/reference";
import { Model } from "../src/engine/model";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    prompts: { type: "string" },
    lengths: { type: "string", default: "5,20,40" },
    seed: { type: "string", default: "1" },
    "n-gen": { type: "string", short: "n", default: "24" },
    top: { type: "string", default: "10" },
    ctx: { type: "string", default: "512" },
    threads: { type: "string", short: "t", default: "2" },
    backend: { type: "string", default: "cpu" },
    rtol: { type: "string", default: "1e-3" },
    kv: { type: "string", default: "f32" },
    json: { type: "boolean", default: false },
  },
});

function usage(msg?: string): never {
  if (msg) console.error(`compare-logits: ${msg}`);
  console.error("usage: bun bench/compare-logits.ts MODEL.gguf [--prompts 1,2,3;4,5] [-n 24] [--top 10] [--ctx 512] [-t 2] [--backend cpu|vulkan|metal] [--rtol 1e-3] [--kv f32|f16] [--lengths 5,20,40] [--seed 1] [--json]");
  process.exit(2);
}
const int = (name: keyof typeof values, min: number) => {
  const v = Number(values[name]);
  if (!Number.isInteger(v) || v < min) usage(`--${name} must be an integer ≥ ${min}, got ${values[name]}`);
  return v;
};
if (positionals.length !== 1) usage();
const model = positionals[0]!;
const nGen = int("n-gen", 1), top = int("top", 2), ctx = int("ctx", 16), threads = int("threads", 1), seed = int("seed", 0);
const rtol = Number(values.rtol);
if (!(rtol > 0)) usage(`--rtol must be a positive number, got ${values.rtol}`);
const backend = values.backend as "cpu" | "vulkan" | "metal";
if (!["cpu", "vulkan", "metal"].includes(backend)) usage(`--backend must be cpu, vulkan or metal, got ${values.backend}`);
const kv = values.kv as "f32" | "f16";
if (kv !== "f32" && kv !== "f16") usage(`--kv must be f32 or f16, got ${values.kv}`);

let prompts: number[][];
if (values.prompts) {
  prompts = values.prompts.split(";").map((p) => p.split(",").map((t) => Number(t.trim())));
  if (prompts.some((p) => p.length === 0 || p.some((t) => !Number.isInteger(t) || t < 0))) usage("--prompts must be token ids: 1,2,3;4,5,6");
} else {
  const m = Model.open(model);
  const nVocab = m.info().tokenizer?.vocab_size;
  m.close();
  if (!nVocab) usage(`${model} has no vocabulary: give --prompts`);
  const lengths = values.lengths!.split(",").map(Number);
  if (lengths.some((n) => !Number.isInteger(n) || n < 1)) usage(`--lengths must be positive integers, got ${values.lengths}`);
  prompts = randomPrompts(lengths, nVocab, seed);
}

const ref = await runReference(model, prompts, { nGen, top, ctx, threads, kv });
// Velo gets the context llama.cpp really had (it pads to a multiple of 256): Phi-3 picks its
// LongRoPE factors by the context size.
// Velo's KV cache in the same type as llama.cpp's (Velo's own default is f16)
const got = await runVelo(model, prompts, { nGen, top, ctx: ref.n_ctx, threads, backend, engine: { cacheTypeK: kv, cacheTypeV: kv } });
const tol = { rtol };
const cmp = compareRuns(ref.results, got, tol);
if (values.json) {
  // Infinity (top-k lists that differ) as a string: JSON has no Infinity
  const doc = { model, backend, llama_cpp: `${ref.runner}, llama.cpp ${ref.llama_cpp_version}`, n_ctx: ref.n_ctx, kv, rtol, comparison: cmp, reference: ref.results, velo: got };
  console.log(JSON.stringify(doc, (_, v) => (v === Infinity ? "Infinity" : v), 2));
} else {
  console.log(`${model}: Velo (${backend}) against llama.cpp (${ref.runner}, CPU, KV ${kv}, n_ctx ${ref.n_ctx}), ${prompts.length} prompts, ${nGen} tokens each`);
  console.log(describeComparison(cmp, tol));
}
process.exit(cmp.ok ? 0 : 1);
