import { Command } from "commander";
import Table from "cli-table3";
import type { Engine } from "../../src/engine/engine";
import { loadEngine } from "../load";
import { addCommandHelpEnv, addEngineOptions, opt, parseIntArg } from "../options";
import { action } from "../ui";

interface BenchFlags {
  threads?: number;
  ctxSize?: number;
  nPrompt: number;
  nGen: number;
  repetitions: number;
  json?: boolean;
}

export interface BenchResult {
  test: string;
  n: number;
  samples_tps: number[];
  avg_tps: number;
  stddev_tps: number;
}

/** Prompt tokens for a benchmark: a fixed pseudo-random walk over ordinary (non-special) ids. */
export function benchTokens(n: number, vocab: number, bos: number | null): number[] {
  const out: number[] = bos === null ? [] : [bos];
  let x = 12345;
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

export async function runBench(engine: Engine, vocab: number, bos: number | null, f: Pick<BenchFlags, "nPrompt" | "nGen" | "repetitions">): Promise<BenchResult[]> {
  const results: BenchResult[] = [];
  if (f.nPrompt > 0) {
    const prompt = benchTokens(f.nPrompt, vocab, bos);
    await timeRun(engine, prompt, 1); // warm-up: page in the weights
    const samples: number[] = [];
    for (let i = 0; i < f.repetitions; i++) {
      const { usage } = await timeRun(engine, prompt, 1);
      samples.push((f.nPrompt / usage.prompt_ms) * 1000);
    }
    results.push({ test: `pp${f.nPrompt}`, n: f.nPrompt, samples_tps: samples, avg_tps: mean(samples), stddev_tps: stddev(samples) });
  }
  if (f.nGen > 0) {
    const prompt = benchTokens(1, vocab, bos);
    await timeRun(engine, prompt, Math.min(8, f.nGen));
    const samples: number[] = [];
    for (let i = 0; i < f.repetitions; i++) {
      const { usage } = await timeRun(engine, prompt, f.nGen);
      // every generated token is one decode step: the first comes from the 1-token prompt
      samples.push((usage.completion_tokens / (usage.prompt_ms + usage.generation_ms)) * 1000);
    }
    results.push({ test: `tg${f.nGen}`, n: f.nGen, samples_tps: samples, avg_tps: mean(samples), stddev_tps: stddev(samples) });
  }
  return results;
}

export function benchCommand(): Command {
  const cmd = new Command("bench")
    .description("measure prompt processing (ppN) and generation (tgN) speed, like llama-bench")
    .argument("<model>", "GGUF model file")
    .addOption(opt("-p, --n-prompt <n>", "prompt tokens for the pp test (0 = skip)").default(512).argParser(parseIntArg("--n-prompt", 0, 1 << 20)))
    .addOption(opt("-n, --n-gen <n>", "tokens for the tg test (0 = skip)").default(128).argParser(parseIntArg("--n-gen", 0, 1 << 20)))
    .addOption(opt("-r, --repetitions <n>", "repetitions of each test").default(5).argParser(parseIntArg("--repetitions", 1, 1000)))
    .addOption(opt("--json", "print the results as JSON"));
  addEngineOptions(cmd);
  cmd.action(
    action(async (modelPath: string, flags: BenchFlags) => {
      const ctx = flags.ctxSize ?? Math.max(flags.nPrompt + 2, flags.nGen + 2, 64);
      const { model, engine } = loadEngine(modelPath, { ...flags, ctxSize: ctx }, { batchTokens: Math.max(512, flags.nPrompt) });
      try {
        const info = model.info();
        const results = await runBench(engine, info.tokenizer?.vocab_size ?? 256, info.tokenizer?.bos ?? null, flags);
        const stats = engine.stats();
        const meta = {
          model: info.name ?? modelPath, path: modelPath, size_bytes: info.tensor_bytes, params: info.parameter_count,
          types: info.tensor_types, backend: "CPU", threads: stats.threads,
        };
        if (flags.json) {
          console.log(JSON.stringify({ ...meta, results }, null, 2));
          return;
        }
        const table = new Table({ head: ["model", "size", "params", "backend", "threads", "test", "t/s"], style: { head: process.stdout.isTTY ? ["cyan"] : [] } });
        for (const r of results) {
          table.push([
            meta.model, `${(info.tensor_bytes / 2 ** 20).toFixed(2)} MiB`, formatParams(info.parameter_count), meta.backend,
            meta.threads, r.test, `${r.avg_tps.toFixed(2)} ± ${r.stddev_tps.toFixed(2)}`,
          ]);
        }
        console.log(table.toString());
      } finally {
        engine.close();
        model.close();
      }
    }),
  );
  return addCommandHelpEnv(cmd);
}

function formatParams(n: number): string {
  return n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : `${(n / 1e3).toFixed(2)} K`;
}
