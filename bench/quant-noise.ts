// What a quantized file's activations cost, beside how far Velo is from llama.cpp: both engines
// on QUANT.gguf and on EXACT.gguf (the same weights in F32, e.g. bench/dequantize-f32.ts), step
// by step, the largest difference of the top-10 logits (each side's measured from its top).
//   scripts/toolchain.sh run node_modules/bun/bin/bun.exe bench/quant-noise.ts QUANT.gguf EXACT.gguf [-n 6] [-t 2]
import { parseArgs } from "node:util";
import { compareRuns, randomPrompts, runReference, runVelo, type PromptRun } from "./llamacpp/reference";
import { Model } from "../src/engine/model";

const { values, positionals } = parseArgs({ allowPositionals: true, options: { "n-gen": { type: "string", short: "n", default: "6" }, threads: { type: "string", short: "t", default: "2" } } });
if (positionals.length !== 2) {
  console.error("usage: bun bench/quant-noise.ts QUANT.gguf EXACT.gguf [-n 6] [-t 2]");
  process.exit(2);
}
const [quant, exact] = positionals as [string, string];
const m = Model.open(quant);
const nVocab = m.info().tokenizer?.vocab_size ?? 0;
m.close();
const prompts = randomPrompts([5, 20, 40], nVocab, 1);
const o = { nGen: Number(values["n-gen"]), top: 10, ctx: 512, threads: Number(values.threads) };
const engine = { cacheTypeK: "f32", cacheTypeV: "f32" } as const;
const lq = await runReference(quant, prompts, { ...o, kv: "f32" }), le = await runReference(exact, prompts, { ...o, kv: "f32" });
const vq = await runVelo(quant, prompts, { ...o, ctx: lq.n_ctx, engine }), ve = await runVelo(exact, prompts, { ...o, ctx: lq.n_ctx, engine });
const row = (label: string, a: PromptRun[], b: PromptRun[]) =>
  console.log(`${label.padEnd(34)} ${compareRuns(a, b, { rtol: 1e-3 }).prompts.map((p) => p.steps.map((s) => s.maxRelDiff.toExponential(1)).join(" ")).join(" | ")}`);
console.log(`per step, prompts of 5 | 20 | 40 tokens, ${o.nGen} greedy steps each`);
row("llama.cpp: quantized vs exact", lq.results, le.results);
row("Velo: quantized vs exact", vq, ve);
row("exact: Velo vs llama.cpp", le.results, ve);
row("quantized: Velo vs llama.cpp", lq.results, vq);
