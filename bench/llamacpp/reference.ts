// Velo against llama.cpp on the same GGUF and the same token prompts: greedy tokens and raw
// top-k logits of both, and where they part. Used by bench/compare-logits.ts (the command) and
// tests/architectures.test.ts. llama.cpp runs through bench/llamacpp/reference.mjs (prebuilt CPU
// llama.cpp via node-llama-cpp, under Node); Velo through its TypeScript engine API, in-process.
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { Engine, type EngineOptions } from "../../src/engine/engine";
import { Model } from "../../src/engine/model";

const here = resolve(import.meta.dir);
const repo = resolve(here, "..", "..");

/** One step of a greedy run: the k largest raw logits, [token id, logit], largest first. */
export interface Step {
  top: [number, number][];
}

/** One prompt's greedy run: steps[i] holds the logits that chose tokens[i]. */
export interface PromptRun {
  prompt: number[];
  tokens: number[];
  steps: Step[];
}

/** What reference.mjs prints. */
export interface ReferenceRun {
  runner: string;
  llama_cpp_version: string;
  model: string;
  model_type: string;
  /** The context llama.cpp really has (padded to a multiple of 256). */
  n_ctx: number;
  kv_type: string;
  threads: number;
  results: PromptRun[];
}

export interface RunOptions {
  /** Tokens generated per prompt (default 24). */
  nGen?: number;
  /** Logits reported per step (default 10). */
  top?: number;
  /** Context size (default 512). */
  ctx?: number;
  threads?: number;
}

/**
 * Installs node-llama-cpp (bench/setup-llamacpp.sh, which needs the npm registry) when
 * bench/llamacpp/node_modules lacks it. Throws when that fails.
 */
export function ensureLlamaCpp(): void {
  if (existsSync(join(here, "node_modules", "node-llama-cpp", "package.json"))) return;
  const p = Bun.spawnSync([join(repo, "bench", "setup-llamacpp.sh")], { stdout: "inherit", stderr: "inherit" });
  if (p.exitCode !== 0) throw new Error("bench/setup-llamacpp.sh failed: cannot install llama.cpp's runner (node-llama-cpp)");
}

/** llama.cpp's greedy runs of `prompts` (a fresh context each), through reference.mjs. */
export async function runReference(model: string, prompts: number[][], opts: RunOptions & { kv?: "f32" | "f16" } = {}): Promise<ReferenceRun> {
  ensureLlamaCpp();
  const args = [
    join(here, "reference.mjs"), model,
    "-n", String(opts.nGen ?? 24), "--top", String(opts.top ?? 10), "--ctx", String(opts.ctx ?? 512),
    "-t", String(opts.threads ?? 2), "--kv", opts.kv ?? "f32",
    ...prompts.flatMap((p) => ["--prompt", p.join(",")]),
  ];
  // under the running Bun (node-llama-cpp loads there as under Node, with identical results), so
  // no Node is needed where the tests run (the Linux build root has none)
  const proc = Bun.spawn([process.execPath, ...args], { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) throw new Error(`llama.cpp reference failed on ${model} (exit ${code}): ${err.trim().split("\n").slice(-3).join(" | ")}`);
  return JSON.parse(out) as ReferenceRun;
}

/** llama.cpp's tokens of each text (no BOS/EOS, special-token text as text) and its text back for them, through tokenize.mjs. */
export async function runTokenizerReference(model: string, texts: string[]): Promise<{ ids: number[]; text: string }[]> {
  ensureLlamaCpp();
  const proc = Bun.spawn([process.execPath, join(here, "tokenize.mjs"), model], { stdin: new Blob([JSON.stringify(texts)]), stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) throw new Error(`llama.cpp tokenizer failed on ${model} (exit ${code}): ${err.trim().split("\n").slice(-3).join(" | ")}`);
  return JSON.parse(out) as { ids: number[]; text: string }[];
}

/** What embeddings.mjs prints: llama.cpp's raw (not normalised) embedding of each input. */
export interface EmbeddingReference {
  runner: string;
  llama_cpp_version: string;
  n_embd: number;
  kv_type: string;
  results: { input: number[]; vector: number[] }[];
}

/** llama.cpp's embeddings of token inputs (one embedding context), through embeddings.mjs. */
export async function runEmbeddingReference(model: string, inputs: number[][], opts: { ctx?: number; threads?: number; kv?: "f32" | "f16" } = {}): Promise<EmbeddingReference> {
  ensureLlamaCpp();
  const args = [join(here, "embeddings.mjs"), model, "--ctx", String(opts.ctx ?? 512), "-t", String(opts.threads ?? 2), "--kv", opts.kv ?? "f32",
    ...inputs.flatMap((i) => ["--input", i.join(",")])];
  const proc = Bun.spawn([process.execPath, ...args], { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) throw new Error(`llama.cpp embeddings failed on ${model} (exit ${code}): ${err.trim().split("\n").slice(-3).join(" | ")}`);
  return JSON.parse(out) as EmbeddingReference;
}

/**
 * Velo's greedy runs of `prompts` on one engine (prefix cache off, so nothing is shared between
 * them). `engine`: further engine options (e.g. the KV cache's types).
 */
export async function runVelo(model: string, prompts: number[][], opts: RunOptions & { backend?: EngineOptions["backend"]; engine?: Partial<EngineOptions> } = {}): Promise<PromptRun[]> {
  const m = Model.open(model);
  try {
    const engine = Engine.create(m, { ...opts.engine, ctxSize: opts.ctx ?? 512, threads: opts.threads ?? 2, backend: opts.backend ?? "cpu", prefixCache: false, spec: "off" });
    try {
      const runs: PromptRun[] = [];
      for (const prompt of prompts) {
        const gen = engine.submit({ promptTokens: prompt, maxTokens: opts.nGen ?? 24, temperature: 0, ignoreEos: true, topLogits: opts.top ?? 10 });
        const run: PromptRun = { prompt, tokens: [], steps: [] };
        for await (const chunk of gen) {
          if (chunk.tokens.length === 0) continue;
          if (chunk.tokens.length !== 1 || !chunk.top_logits) throw new Error(`Velo sent ${chunk.tokens.length} tokens in one chunk ${chunk.top_logits ? "" : "without top logits"}`);
          run.tokens.push(chunk.tokens[0]!);
          run.steps.push({ top: chunk.top_logits });
        }
        const fin = await gen.finished;
        if (fin.reason === "error") throw new Error(`Velo: ${fin.message}`);
        runs.push(run);
      }
      return runs;
    } finally {
      engine.close();
    }
  } finally {
    m.close();
  }
}

/** Deterministic random prompts (mulberry32) of the given lengths, ids in [0, nVocab). */
export function randomPrompts(lengths: number[], nVocab: number, seed = 1): number[][] {
  let state = seed >>> 0;
  const random = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 15), z | 1);
    z ^= z + Math.imul(z ^ (z >>> 7), z | 61);
    return ((z ^ (z >>> 14)) >>> 0) / 4294967296;
  };
  return lengths.map((n) => Array.from({ length: n }, () => Math.floor(random() * nVocab)));
}

/**
 * How far apart two logits may be: rtol·max(1, |top logit|) for differences measured relative to
 * each side's top logit (logit_i − logit_top), which a constant shift of all logits leaves alone.
 */
export interface Tolerance {
  rtol: number;
}

export const allowed = (tol: Tolerance, topLogit: number) => tol.rtol * Math.max(1, Math.abs(topLogit));

export interface StepComparison {
  step: number;
  /** max over the reference's top-k ids of |(got_i − got_top) − (ref_i − ref_top)|; Infinity when an id is missing on one side well inside the other's top-k. */
  maxRelDiff: number;
  /** max |got_i − ref_i| over the ids both report (information: not judged). */
  maxAbsDiff: number;
  /** the reference's top-1 minus top-2 logit */
  refGap: number;
  allowed: number;
}

export interface PromptComparison {
  prompt: number[];
  /** First step whose greedy tokens differ (null: all equal). */
  firstDiff: number | null;
  /** The first difference fell on a near-tie of llama.cpp's (top-2 gap within the tolerance): accepted, and the rest not compared. */
  nearTie: boolean;
  /** Steps whose logits were compared: all of them up to the first differing token (included: both saw the same context). */
  compared: number;
  total: number;
  steps: StepComparison[];
  ok: boolean;
  /** Why not ok. */
  problems: string[];
}

export interface Comparison {
  prompts: PromptComparison[];
  ok: boolean;
  compared: number;
  total: number;
  maxRelDiff: number;
  maxAbsDiff: number;
}

function compareStep(step: number, ref: Step, got: Step, tol: Tolerance): StepComparison {
  const r = ref.top, g = got.top;
  const rTop = r[0]![1], gTop = g[0]![1];
  const rLast = r.at(-1)![1], gLast = g.at(-1)![1];
  const lim = allowed(tol, rTop);
  const gMap = new Map(g), rMap = new Map(r);
  let maxRel = 0, maxAbs = 0;
  for (const [id, rv] of r) {
    const gv = gMap.get(id);
    if (gv === undefined) {
      // fell out of Velo's top-k: fine only at the edge of llama.cpp's (within the tolerance of its k-th)
      if (rv - rLast > lim) maxRel = Infinity;
      continue;
    }
    maxRel = Math.max(maxRel, Math.abs((gv - gTop) - (rv - rTop)));
    maxAbs = Math.max(maxAbs, Math.abs(gv - rv));
  }
  for (const [id, gv] of g) {
    if (!rMap.has(id) && gv - gLast > lim) maxRel = Infinity; // well inside Velo's top-k, outside llama.cpp's
  }
  return { step, maxRelDiff: maxRel, maxAbsDiff: maxAbs, refGap: r.length > 1 ? rTop - r[1]![1] : Infinity, allowed: lim };
}

/**
 * Compares `got` (Velo) with `ref` (llama.cpp), prompt by prompt. Greedy tokens must match, and
 * at every step up to the first differing token the logits must agree within `tol`. A differing
 * token is accepted only where llama.cpp's own top two logits are within the tolerance of each
 * other (a near-tie: either engine may pick either); the steps after it are not compared, as
 * the two runs no longer see the same context.
 */
export function compareRuns(ref: PromptRun[], got: PromptRun[], tol: Tolerance): Comparison {
  if (ref.length !== got.length) throw new Error(`${ref.length} reference prompts, ${got.length} compared`);
  const prompts = ref.map((r, i): PromptComparison => {
    const g = got[i]!;
    const problems: string[] = [];
    const total = r.steps.length;
    if (g.steps.length !== total) problems.push(`${g.steps.length} steps instead of ${total}`);
    const steps: StepComparison[] = [];
    let firstDiff: number | null = null, nearTie = false;
    for (let s = 0; s < Math.min(total, g.steps.length); s++) {
      const c = compareStep(s, r.steps[s]!, g.steps[s]!, tol);
      steps.push(c);
      if (c.maxRelDiff === Infinity) problems.push(`step ${s}: the top-${r.steps[s]!.top.length} lists differ: a token well inside one side's is missing from the other's`);
      else if (c.maxRelDiff > c.allowed) problems.push(`step ${s}: logits differ by ${c.maxRelDiff.toPrecision(3)} (allowed ${c.allowed.toPrecision(3)})`);
      if (r.tokens[s] !== g.tokens[s]) {
        firstDiff = s;
        nearTie = c.refGap <= c.allowed;
        if (!nearTie) problems.push(`step ${s}: token ${g.tokens[s]} instead of ${r.tokens[s]} (llama.cpp's top-2 gap ${c.refGap.toPrecision(3)} > ${c.allowed.toPrecision(3)})`);
        break;
      }
    }
    return { prompt: r.prompt, firstDiff, nearTie, compared: steps.length, total, steps, ok: problems.length === 0, problems };
  });
  const all = prompts.flatMap((p) => p.steps);
  return {
    prompts,
    ok: prompts.every((p) => p.ok),
    compared: all.length,
    total: prompts.reduce((n, p) => n + p.total, 0),
    maxRelDiff: Math.max(0, ...all.map((s) => s.maxRelDiff)),
    maxAbsDiff: Math.max(0, ...all.map((s) => s.maxAbsDiff)),
  };
}

/** A few lines for people: per prompt, where the runs part and the largest differences. */
export function describeComparison(c: Comparison, tol: Tolerance): string {
  const lines = c.prompts.map((p, i) => {
    const worst = p.steps.reduce((w, s) => (s.maxRelDiff > w.maxRelDiff ? s : w), p.steps[0] ?? { step: 0, maxRelDiff: 0, maxAbsDiff: 0, refGap: 0, allowed: 0 });
    const where = p.firstDiff === null
      ? `all ${p.total} tokens equal`
      : `first differing token at step ${p.firstDiff}${p.nearTie ? " (a near-tie of llama.cpp's: accepted)" : ""}`;
    const head = `prompt ${i} (${p.prompt.length} tokens): ${p.ok ? "ok" : "DIFFERS"}: ${where}; ${p.compared}/${p.total} steps compared; max logit difference ${worst.maxRelDiff.toPrecision(3)} at step ${worst.step} (relative to the top logit; allowed ${worst.allowed.toPrecision(3)})`;
    const perStep = `  per step: ${p.steps.map((s) => s.maxRelDiff.toExponential(1)).join(" ")}`;
    return [head, perStep, ...p.problems.slice(0, 5).map((x) => `  ${x}`)].join("\n");
  });
  lines.push(`${c.ok ? "agree" : "DISAGREE"}: ${c.compared}/${c.total} steps compared, max logit difference ${c.maxRelDiff.toPrecision(3)} relative to the top logit (rtol ${tol.rtol}), max absolute ${c.maxAbsDiff.toPrecision(3)}`);
  return lines.join("\n");
}
