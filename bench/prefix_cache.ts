// Prefix cache benchmarks.
//
//   scripts/bun bench/prefix_cache.ts ttft MODEL.gguf [--prefix 2048] [--suffix 32] [--runs 3] [-t 2] [--backend auto|cpu|vulkan|metal]
//     Time to first token for a long shared prefix plus a short suffix: cold (nothing cached,
//     the cache is off) vs cached (the prefix was served before). Medians over --runs, each
//     with a different suffix. A model with a recurrent state (Qwen3.5) resumes only where its
//     state was saved: the second request with the prefix saves it where the two part, so the
//     prefix is served twice before the timed runs.
//
//   scripts/bun bench/prefix_cache.ts waste MODEL.gguf [--requests 64] [--batch 8] [--seed 1]
//     KV waste over a mixed concurrent workload (prompts 16–2048 tokens, outputs 16–512),
//     sampled every few milliseconds: reserved-but-unused token slots / reserved slots, for
//     Velo's 16-token pages beside what a contiguous per-sequence allocation of the full
//     context (llama.cpp's slots) would reserve for the same sequences at the same moments.
import { parseArgs } from "node:util";
import { Engine } from "../src/engine/engine";
import { Model } from "../src/engine/model";
import { benchTokens } from "../cli/commands/bench";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    prefix: { type: "string", default: "2048" },
    suffix: { type: "string", default: "32" },
    runs: { type: "string", default: "3" },
    requests: { type: "string", default: "64" },
    batch: { type: "string", default: "8" },
    seed: { type: "string", default: "1" },
    threads: { type: "string", short: "t", default: "2" },
    backend: { type: "string", default: "auto" },
  },
});
const [mode, path] = positionals;
if (!path || (mode !== "ttft" && mode !== "waste")) {
  console.error("usage: bench/prefix_cache.ts ttft|waste MODEL.gguf [options]");
  process.exit(2);
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const model = Model.open(path);
const info = model.info();
const vocab = info.tokenizer?.vocab_size ?? 256, bos = info.tokenizer?.bos ?? null;
const threads = Number(values.threads);
const backend = values.backend as "auto" | "cpu" | "vulkan" | "metal";

if (mode === "ttft") {
  const P = Number(values.prefix), S = Number(values.suffix), runs = Number(values.runs);
  const prefix = benchTokens(P, vocab, bos, 7);
  const prompt = (i: number) => [...prefix, ...benchTokens(S + 1, vocab, null, 1000 + i).slice(0, S)];
  const ttft = async (engine: Engine, tokens: number[]) => {
    const r = await engine.submit({ promptTokens: tokens, maxTokens: 1, temperature: 0 }).collect();
    return { ms: r.finish.usage.ttft_ms, cached: r.finish.usage.cached_tokens };
  };
  const ctxSize = P + S + 8;
  const cold = Engine.create(model, { threads, ctxSize, prefixCache: false, backend });
  await ttft(cold, benchTokens(64, vocab, bos, 3)); // warm-up: page in the weights
  const coldMs: number[] = [];
  for (let i = 0; i < runs; i++) coldMs.push((await ttft(cold, prompt(i))).ms);
  cold.close();
  const warm = Engine.create(model, { threads, ctxSize, prefixCache: true, backend });
  // serves the prefix (twice: see above): it is cached from now on
  for (const i of [98, 99]) await ttft(warm, prompt(i));
  const cachedMs: number[] = [];
  let cachedTokens = 0;
  for (let i = 0; i < runs; i++) {
    const r = await ttft(warm, prompt(i));
    cachedMs.push(r.ms);
    cachedTokens = r.cached;
  }
  warm.close();
  const c = median(coldMs), h = median(cachedMs);
  console.log(JSON.stringify({ model: info.name ?? path, prefix: P, suffix: S, runs, cold_ttft_ms: c, cached_ttft_ms: h, speedup: c / h, cached_tokens: cachedTokens, cold_samples: coldMs, cached_samples: cachedMs }, null, 2));
} else {
  const N = Number(values.requests), B = Number(values.batch);
  let x = Number(values.seed);
  const rand = (lo: number, hi: number) => {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    return lo + (x % (hi - lo + 1));
  };
  const ctx = 2048 + 512 + 8;
  const jobs = Array.from({ length: N }, (_, i) => ({ prompt: benchTokens(rand(16, 2048), vocab, bos, 500 + i), out: rand(16, 512) }));
  const engine = Engine.create(model, { threads, ctxSize: ctx, maxBatchSize: B, prefixCache: false });
  let reserved = 0, used = 0, contiguous = 0, samples = 0;
  const timer = setInterval(() => {
    const s = engine.stats();
    if (!s.running) return;
    reserved += s.kv_reserved_slots!;
    used += s.kv_used_slots!;
    contiguous += s.running! * ctx; // a slot of the full context per running sequence
    samples++;
  }, 5);
  const t0 = performance.now();
  await Promise.all(jobs.map((j) => engine.submit({ promptTokens: j.prompt, maxTokens: j.out, temperature: 0, ignoreEos: true }).collect()));
  clearInterval(timer);
  const seconds = (performance.now() - t0) / 1000;
  engine.close();
  console.log(JSON.stringify({
    model: info.name ?? path, requests: N, max_batch: B, page_size: 16, context: ctx, samples, seconds,
    kv_waste_paged: (reserved - used) / reserved,
    kv_waste_contiguous: (contiguous - used) / contiguous,
  }, null, 2));
}
model.close();
