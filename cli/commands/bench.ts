import { Command } from "commander";
import Table from "cli-table3";
import type { Engine, EngineStats } from "../../src/engine/engine";
import { loadEngine } from "../load";
import { addCommandHelpEnv, addEngineOptions, addModelOption, chosenModel, requireModelPath, addSpeculationOptions, opt, parseIntArg, type SpeculationFlags } from "../options";
import { action, spinner } from "../ui";

interface BenchFlags extends SpeculationFlags {
  model?: string;
  nDepth: number;
  threads?: number;
  ctxSize?: number;
  nPrompt: number;
  nGen: number;
  repetitions: number;
  maxBatchSize?: number;
  profile?: boolean;
  json?: boolean;
}

export interface BatchResult {
  batch: number;
  pp: number;
  tg: number;
  /** Wall time until every sequence had its first token, and aggregate prefill t/s. */
  t_pp_s: number;
  s_pp_tps: number;
  /** Decode phase: aggregate and per-sequence t/s. */
  t_tg_s: number;
  s_tg_tps: number;
  s_tg_per_seq_tps: number;
  ttft_avg_ms: number;
  kv_pages_peak: number;
}

/**
 * Continuous batching throughput (the layout of llama-batched-bench): B sequences submitted
 * together, each with a pp-token prompt and tg generated tokens.
 */
export async function runBatchBench(engine: Engine, vocab: number, bos: number | null, batch: number, pp: number, tg: number): Promise<BatchResult> {
  const t0 = performance.now();
  let firstAll = 0;
  let peak = 0;
  const firsts: number[] = [];
  const gens = Array.from({ length: batch }, (_, i) =>
    engine.submit({ promptTokens: benchTokens(pp, vocab, bos, 12345 + i), maxTokens: tg, temperature: 0, ignoreEos: true }),
  );
  const sampler = setInterval(() => (peak = Math.max(peak, engine.stats().kv_pages_used!)), 20);
  const done = await Promise.all(
    gens.map(async (g) => {
      let first = 0;
      for await (const c of g) if (!first && c.tokens.length) first = performance.now();
      firsts.push(first - t0);
      return g.finished;
    }),
  );
  clearInterval(sampler);
  const t1 = performance.now();
  firstAll = Math.max(...firsts);
  for (const f of done) if (f.reason === "error") throw new Error(f.message ?? "benchmark request failed");
  const tTg = (t1 - t0 - firstAll) / 1000;
  return {
    batch, pp, tg,
    t_pp_s: firstAll / 1000,
    s_pp_tps: (batch * pp) / (firstAll / 1000),
    t_tg_s: tTg,
    s_tg_tps: (batch * (tg - 1)) / tTg,
    s_tg_per_seq_tps: (tg - 1) / tTg,
    ttft_avg_ms: done.reduce((a, f) => a + f.usage.ttft_ms, 0) / batch,
    kv_pages_peak: peak,
  };
}

export interface BenchResult {
  test: string;
  n: number;
  samples_tps: number[];
  avg_tps: number;
  stddev_tps: number;
}

/**
 * A test's warm-up: it pages in the weights and brings a GPU's clocks up. Once is not enough
 * after a long idle: an H200 that sat at 345 MHz while a process compiled its kernels (~30 s)
 * ran the next three 11 ms prefills at a quarter of their speed (bench/RESULTS.md). So the
 * warm-up repeats for at least `minMs`.
 */
export async function warmUp(run: () => Promise<unknown>, minMs = 1000): Promise<void> {
  const until = performance.now() + minMs;
  do await run();
  while (performance.now() < until);
}

/** Prompt tokens for a benchmark: a fixed pseudo-random walk over ordinary (non-special) ids. */
export function benchTokens(n: number, vocab: number, bos: number | null, seed = 12345): number[] {
  const out: number[] = bos === null ? [] : [bos];
  let x = seed;
  while (out.length < n) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    out.push(300 + (x % Math.max(1, vocab - 600)));
  }
  return out.slice(0, n);
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const stddev = (xs: number[]) => {
  if (xs.length < 2) return 0;
  const m = mean(xs);
  return Math.sqrt(xs.reduce((a, b) => a + (b - m) ** 2, 0) / (xs.length - 1));
};

async function timeRun(engine: Engine, promptTokens: number[], maxTokens: number) {
  const t0 = performance.now();
  const r = await engine.submit({ promptTokens, maxTokens, temperature: 0, ignoreEos: true }).collect();
  const wall = performance.now() - t0;
  if (r.finish.reason === "error") throw new Error(r.finish.message ?? "benchmark request failed");
  return { wall, usage: r.finish.usage };
}

export async function runBench(engine: Engine, vocab: number, bos: number | null, f: Pick<BenchFlags, "nPrompt" | "nGen" | "repetitions"> & { nDepth?: number },
  report: (step: string) => void = () => {}): Promise<BenchResult[]> {
  const results: BenchResult[] = [];
  const depth = f.nDepth ?? 0;
  // llama-bench's -d: each test runs after `depth` tokens already in the context (their prefill
  // not timed). Those tokens are computed once and then come from the prefix cache.
  const prefix = depth > 0 ? benchTokens(depth, vocab, bos) : [];
  const at = depth > 0 ? ` @ d${depth}` : "";
  // nothing is timed on a kernel that stands in while another is still being built
  report("waiting for GPU kernels to build");
  engine.waitForKernels();
  if (depth > 0) {
    report(`depth: ${depth} tokens of context`);
    await timeRun(engine, prefix, 1);
  }
  if (f.nPrompt > 0) {
    // every repetition its own tokens after the prefix, so none of them is cached
    const prompt = (i: number) => (depth > 0 ? [...prefix, ...benchTokens(f.nPrompt, vocab, null, 777 + i)] : benchTokens(f.nPrompt, vocab, bos));
    report(`pp${f.nPrompt}${at}: warm-up`);
    await warmUp(() => timeRun(engine, prompt(-1), 1));
    engine.resetProfile();
    const samples: number[] = [];
    for (let i = 0; i < f.repetitions; i++) {
      report(`pp${f.nPrompt}${at}: repetition ${i + 1}/${f.repetitions}`);
      const { usage } = await timeRun(engine, prompt(i), 1);
      samples.push(((usage.prompt_tokens - usage.cached_tokens) / usage.prompt_ms) * 1000);
    }
    results.push({ test: `pp${f.nPrompt}${at}`, n: f.nPrompt, samples_tps: samples, avg_tps: mean(samples), stddev_tps: stddev(samples) });
  }
  if (f.nGen > 0) {
    const prompt = depth > 0 ? [...prefix, ...benchTokens(1, vocab, null, 999)] : benchTokens(1, vocab, bos);
    report(`tg${f.nGen}${at}: warm-up`);
    await warmUp(() => timeRun(engine, prompt, Math.min(8, f.nGen)));
    if (f.nPrompt === 0) engine.resetProfile();
    const samples: number[] = [];
    for (let i = 0; i < f.repetitions; i++) {
      report(`tg${f.nGen}${at}: repetition ${i + 1}/${f.repetitions}`);
      const { usage } = await timeRun(engine, prompt, f.nGen);
      // without depth every generated token is one decode step, the first from the 1-token
      // prompt; at depth the first comes with the prompt's prefill and is left out
      samples.push(depth > 0
        ? ((usage.completion_tokens - 1) / usage.generation_ms) * 1000
        : (usage.completion_tokens / (usage.prompt_ms + usage.generation_ms)) * 1000);
    }
    results.push({ test: `tg${f.nGen}${at}`, n: f.nGen, samples_tps: samples, avg_tps: mean(samples), stddev_tps: stddev(samples) });
  }
  return results;
}

export function benchCommand(): Command {
  const cmd = new Command("bench")
    .description("measure prompt processing (ppN) and generation (tgN) speed, like llama-bench")
    .argument("[model]", "GGUF file or stored model name (default: the embedded stories260K)")
    .addOption(opt("-p, --n-prompt <n>", "prompt tokens for the pp test (0 = skip)").default(512).argParser(parseIntArg("--n-prompt", 0, 1 << 20)))
    .addOption(opt("-n, --n-gen <n>", "tokens for the tg test (0 = skip)").default(128).argParser(parseIntArg("--n-gen", 0, 1 << 20)))
    .addOption(opt("-r, --repetitions <n>", "repetitions of each test").default(5).argParser(parseIntArg("--repetitions", 1, 1000)))
    .addOption(opt("-d, --n-depth <n>", "run each test after this many tokens of context, as llama-bench -d (their prefill is not timed)").default(0).argParser(parseIntArg("--n-depth", 0, 1 << 20)))
    .addOption(opt("--max-batch-size <n>", "batched decoding: 1, 2, 4 … n concurrent sequences (prompt -p, generation -n)").argParser(parseIntArg("--max-batch-size", 1, 1024)))
    .addOption(opt("--json", "print the results as JSON"));
  addModelOption(cmd);
  addEngineOptions(cmd);
  addSpeculationOptions(cmd);
  cmd.action(
    action(async (modelArg: string | undefined, flags: BenchFlags) => {
      const modelPath = requireModelPath(chosenModel(cmd, modelArg, flags.model));
      if (flags.maxBatchSize) return batchBench(modelPath, flags);
      const ctx = flags.ctxSize ?? flags.nDepth + Math.max(flags.nPrompt + 2, flags.nGen + 2, 64);
      // at depth the prefix cache holds the depth's tokens (each test's own are never reused)
      const loaded = await loadEngine(modelPath, { ...flags, ctxSize: ctx }, { batchTokens: Math.max(512, flags.nPrompt), profile: flags.profile, prefixCache: flags.nDepth > 0 });
      const { model, engine } = loaded;
      try {
        const info = model.info();
        const step = stepReporter();
        const results = await runBench(engine, info.tokenizer?.vocab_size ?? 256, info.tokenizer?.bos ?? null, flags, step.report).finally(step.done);
        const stats = engine.stats();
        const meta = {
          model: info.name ?? modelPath, path: modelPath, size_bytes: info.tensor_bytes, params: info.parameter_count,
          types: info.tensor_types, backend: backendLabel(stats), threads: stats.threads,
        };
        const profile = stats.profile_ms ?? undefined;
        const kernels = stats.kernel_ms ?? undefined;
        const speculation = stats.speculation ?? undefined;
        if (flags.json) {
          console.log(JSON.stringify({ ...meta, results, profile_ms: profile, kernel_ms: kernels, speculation, memory: stats.memory }, null, 2));
          return;
        }
        const table = new Table({ head: ["model", "size", "params", "backend", "threads", "test", "t/s"], style: process.stdout.isTTY ? { head: ["cyan"] } : { head: [], border: [] } });
        for (const r of results) {
          table.push([
            meta.model, `${(info.tensor_bytes / 2 ** 20).toFixed(2)} MiB`, formatParams(info.parameter_count), meta.backend,
            meta.threads, r.test, `${r.avg_tps.toFixed(2)} ± ${r.stddev_tps.toFixed(2)}`,
          ]);
        }
        console.log(table.toString());
        if (speculation) {
          console.log(`speculation (${stats.speculation_mode}): ${speculation.accepted}/${speculation.drafted} guesses accepted (${(speculation.acceptance * 100).toFixed(1)} %), by position ` +
            speculation.acceptance_by_position.map((a) => `${(a * 100).toFixed(0)}%`).join(" ") + `; ${speculation.paused_steps} sequence-steps paused`);
        }
        printProfile(stats, "the measured runs (after the first warm-up)");
      } finally {
        loaded.close();
      }
    }),
  );
  return addCommandHelpEnv(cmd);
}

async function batchBench(modelPath: string, flags: BenchFlags) {
  const maxB = flags.maxBatchSize!;
  const pp = flags.nPrompt, tg = Math.max(2, flags.nGen);
  const ctx = flags.ctxSize ?? pp + tg + 16;
  const loaded = await loadEngine(modelPath, { ...flags, ctxSize: ctx }, { maxBatchSize: maxB, batchTokens: Math.max(512, maxB), prefixCache: false, profile: flags.profile });
  const { model, engine } = loaded;
  try {
    const info = model.info();
    const vocab = info.tokenizer?.vocab_size ?? 256, bos = info.tokenizer?.bos ?? null;
    const step = stepReporter();
    const results: BatchResult[] = [];
    try {
      step.report("waiting for GPU kernels to build");
      engine.waitForKernels();
      step.report("warm-up");
      await warmUp(() => runBatchBench(engine, vocab, bos, 1, Math.min(pp, 32), 4));
      const sizes: number[] = [];
      for (let b = 1; b <= maxB; b *= 2) sizes.push(b);
      if (sizes.at(-1) !== maxB) sizes.push(maxB);
      for (const b of sizes) {
        // the profile describes the largest batch alone (the smaller ones would blur it)
        if (b === maxB) engine.resetProfile();
        step.report(`B=${b}: ${b} × (pp${pp} + tg${tg})`);
        results.push(await runBatchBench(engine, vocab, bos, b, pp, tg));
      }
    } finally {
      step.done();
    }
    if (flags.json) {
      const stats = engine.stats();
      console.log(JSON.stringify({ model: info.name ?? modelPath, path: modelPath, backend: backendLabel(stats), threads: stats.threads, results, profile_batch: flags.profile ? maxB : undefined, profile_ms: stats.profile_ms ?? undefined, kernel_ms: stats.kernel_ms ?? undefined, memory: stats.memory }, null, 2));
      return;
    }
    const table = new Table({ head: ["B", "PP", "TG", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "per seq t/s", "TTFT ms", "KV pages"], style: process.stdout.isTTY ? { head: ["cyan"] } : { head: [], border: [] } });
    for (const r of results) {
      table.push([r.batch, r.pp, r.tg, r.t_pp_s.toFixed(2), r.s_pp_tps.toFixed(1), r.t_tg_s.toFixed(2), r.s_tg_tps.toFixed(1), r.s_tg_per_seq_tps.toFixed(1), r.ttft_avg_ms.toFixed(0), r.kv_pages_peak]);
    }
    console.log(table.toString());
    console.log(`backend: ${backendLabel(engine.stats())}`);
    printProfile(engine.stats(), `the B=${maxB} run`);
  } finally {
    loaded.close();
  }
}

/** The profile's tables (--profile): time by kind of op, then the slowest GPU kernels. */
function printProfile(stats: EngineStats, over: string) {
  const style = process.stdout.isTTY ? { head: ["cyan"] } : { head: [], border: [] };
  const profile = stats.profile_ms;
  if (profile) {
    const total = Object.values(profile).reduce((a, b) => a + b, 0);
    const t = new Table({ head: ["op", "ms", "share"], style });
    for (const [op, ms] of Object.entries(profile).sort((a, b) => b[1] - a[1])) t.push([op, ms.toFixed(1), `${((ms / total) * 100).toFixed(1)} %`]);
    console.log(`time by op over ${over}:\n${t.toString()}`);
  }
  const kernels = stats.kernel_ms;
  if (kernels && Object.keys(kernels).length > 0) {
    const t = new Table({ head: ["kernel and grid", "ms", "dispatches", "µs each"], style });
    for (const [k, v] of Object.entries(kernels).slice(0, 20)) t.push([k, v.ms.toFixed(1), v.count, ((v.ms * 1000) / v.count).toFixed(1)]);
    console.log(`slowest GPU kernels over ${over}:\n${t.toString()}`);
  }
}

/**
 * Which test is running: a spinner with the step and the elapsed time on a terminal, one line per
 * test (not per repetition) otherwise.
 */
function stepReporter() {
  const t0 = performance.now();
  const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(1)} s`;
  let current = "";
  let lastTest = "";
  const spin = spinner("bench").start();
  const tick = process.stderr.isTTY ? setInterval(() => (spin.text = `bench ${current} · ${elapsed()}`), 200) : undefined;
  return {
    report(step: string) {
      current = step;
      spin.text = `bench ${step} · ${elapsed()}`;
      const test = step.split(":")[0]!;
      if (!process.stderr.isTTY && test !== lastTest) process.stderr.write(`bench: running ${test} (${elapsed()} so far)\n`);
      lastTest = test;
    },
    done() {
      if (tick) clearInterval(tick);
      spin.stop();
    },
  };
}

function formatParams(n: number): string {
  return n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : `${(n / 1e3).toFixed(2)} K`;
}

/** "CPU (avx512-vnni)" or "vulkan: NVIDIA H100 80GB HBM3". */
function backendLabel(stats: object): string {
  const s = stats as { backend?: string; device?: string };
  return s.backend === "cpu" || !s.backend ? `CPU (${s.device ?? "?"})` : `${s.backend}: ${s.device}`;
}
