// Speculative decoding, end to end: decode speed with and without speculation, acceptance
// (overall and by draft position), and the cost of verifying k+1 tokens relative to one
// decode step.
//
//   scripts/bun bench/speculative.ts TARGET.gguf [--draft DRAFT.gguf] [--spec draft|ngram]
//       [--prompt TEXT] [-n 128] [--runs 3] [-t 2] [--draft-max 8] [--backend auto|cpu|vulkan|metal]
//
// Each configuration runs --runs times after a warm-up, in alternating rounds; speed-ups are
// medians of per-round ratios to plain decoding. "adaptive" is
// the default engine behaviour; "fixed k" always guesses --draft-max tokens.
import { parseArgs } from "node:util";
import { Engine, type EngineOptions } from "../src/engine/engine";
import { Model } from "../src/engine/model";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    draft: { type: "string" },
    spec: { type: "string", default: "draft" },
    prompt: { type: "string", default: "Once upon a time" },
    "n-gen": { type: "string", short: "n", default: "128" },
    runs: { type: "string", default: "3" },
    threads: { type: "string", short: "t", default: "2" },
    "draft-max": { type: "string", default: "8" },
    backend: { type: "string", default: "auto" },
  },
});
const target = positionals[0];
if (!target) {
  console.error("usage: bench/speculative.ts TARGET.gguf [--draft DRAFT.gguf] [--spec draft|ngram] [options]");
  process.exit(2);
}
const n = Number(values["n-gen"]), runs = Number(values.runs), threads = Number(values.threads), k = Number(values["draft-max"]);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const model = Model.open(target);
const draft = values.draft ? Model.open(values.draft) : undefined;
const spec = values.spec as "draft" | "ngram";
const backend = values.backend as EngineOptions["backend"];

// The three configurations run in alternating rounds (plain, adaptive, fixed k, plain, …) on
// engines that stay up, so machine drift hits them alike; speed-ups are medians of per-round
// ratios.
async function compare(configs: { opts: EngineOptions; useDraft: boolean }[]) {
  const engines = configs.map((c) =>
    Engine.create(model, { threads, backend, ctxSize: n + 256, prefixCache: false, ...c.opts }, c.useDraft ? draft : undefined));
  const run = (e: Engine) => e.submit({ prompt: values.prompt, maxTokens: n, temperature: 0, ignoreEos: true }).collect();
  for (const e of engines) await run(e); // warm-up
  const tps: number[][] = configs.map(() => []);
  const texts: string[] = configs.map(() => "");
  for (let i = 0; i < runs; i++) {
    for (const [j, e] of engines.entries()) {
      const r = await run(e);
      const u = r.finish.usage;
      tps[j]!.push(((u.completion_tokens - 1) / u.generation_ms) * 1000);
      texts[j] = r.text;
    }
  }
  const out = engines.map((e, j) => ({
    tps: median(tps[j]!), samples: tps[j]!, text: texts[j]!, spec: e.stats().speculation ?? null,
    speedup: median(tps[j]!.map((t, i) => t / tps[0]![i]!)),
  }));
  for (const e of engines) e.close();
  return out;
}

const [plain, adaptive, fixed] = (await compare([
  { opts: {}, useDraft: false },
  { opts: { spec, draftMax: k }, useDraft: spec === "draft" },
  { opts: { spec, draftMax: k, specAdapt: false }, useDraft: spec === "draft" },
]))!;

// verification cost: one forward over k+1 tokens vs one decode step (prefill of k+1 tokens at
// the start of a context vs the tokens/s of decoding; attention is negligible at these lengths)
const engine = Engine.create(model, { threads, backend, ctxSize: 512, prefixCache: false });
const vocab = model.info().tokenizer?.vocab_size ?? 256;
const ids = (m: number) => Array.from({ length: m }, (_, i) => 300 + ((i * 7919) % Math.max(1, vocab - 600)));
const fwd = async (m: number) => {
  const times: number[] = [];
  for (let i = 0; i < runs + 1; i++) times.push((await engine.submit({ promptTokens: ids(m), maxTokens: 1, temperature: 0 }).collect()).finish.usage.prompt_ms);
  return median(times.slice(1));
};
const one = await fwd(1);
const verifyCost: Record<string, number> = {};
for (const m of [2, 3, 5, k + 1]) verifyCost[`k=${m - 1}`] = (await fwd(m)) / one;
engine.close();

console.log(JSON.stringify({
  target, draft: values.draft ?? null, speculation: spec, n_gen: n, runs, threads, backend,
  same_text: plain!.text === adaptive!.text && plain!.text === fixed!.text,
  plain_tps: plain!.tps,
  adaptive: { tps: adaptive!.tps, speedup: adaptive!.speedup, ...adaptive!.spec },
  fixed_k: { k, tps: fixed!.tps, speedup: fixed!.speedup, ...fixed!.spec },
  verify_cost_vs_one_decode_step: verifyCost,
}, null, 2));
draft?.close();
model.close();
