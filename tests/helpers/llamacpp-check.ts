// Velo against llama.cpp on a synthesized model, the check tests/architectures.test.ts and
// tests/moe.test.ts share: three prompts of 5, 20 and 40 random token ids, 24 greedy tokens each,
// the same tokens and the top-10 logits within a tolerance at every step (compareRuns), with
// at least a third of all steps compared (near-ties end a prompt's comparison early).
import { expect } from "bun:test";
import { compareRuns, describeComparison, randomPrompts, type ReferenceRun, runReference, runVelo, type Tolerance } from "../../bench/llamacpp/reference";
import { Engine } from "../../src/engine/engine";
import { Model } from "../../src/engine/model";

export const N_GEN = 24;
export const TOP = 10;
// token ids below 32000: inside the llama-spm vocabulary (and Phi-3's 32064)
export const PROMPTS = randomPrompts([5, 20, 40], 32000, 1);
// a 2-core machine, llama.cpp and Velo each on 2 threads (measured: 2-65 s a case while a build ran)
export const SLOW = 300_000;
// lavapipe runs every kernel on the CPU, and builds every pipeline first: generous limits
export const GPU_SLOW = 600_000;
export const gpuBackend = process.platform === "darwin" ? "metal" : "vulkan";

// llama.cpp's run of each file, context and prompts, shared by the CPU and the GPU tests
const references = new Map<string, Promise<ReferenceRun>>();
function reference(file: string, ctx: number, prompts: number[][]): Promise<ReferenceRun> {
  const key = `${file}-${ctx}-${Bun.hash(JSON.stringify(prompts))}`;
  // runReference installs node-llama-cpp first (bench/setup-llamacpp.sh) when it is missing
  if (!references.has(key)) references.set(key, runReference(file, prompts, { nGen: N_GEN, top: TOP, ctx, threads: 2 }));
  return references.get(key)!;
}

/** Throws, with where the two part, unless Velo on `backend` matches llama.cpp on `file`
 * (on PROMPTS unless `prompts` are given). */
export async function checkAgainstLlamaCpp(file: string, what: string,
  opts: { ctx: number; tol: Tolerance; backend: "cpu" | "vulkan" | "metal"; prompts?: number[][] }) {
  const prompts = opts.prompts ?? PROMPTS;
  const ref = await reference(file, opts.ctx, prompts);
  // the reference itself: every prompt decoded, every logit finite
  expect(ref.results.map((r) => r.tokens.length)).toEqual(prompts.map(() => N_GEN));
  expect(ref.results.every((r) => r.steps.every((s) => s.top.length === TOP && s.top.every(([, v]) => Number.isFinite(v))))).toBe(true);
  // Velo gets the context llama.cpp really had (padded to a multiple of 256), and its KV cache
  // in float32 as the reference keeps it (Velo's default is f16)
  const got = await runVelo(file, prompts, { nGen: N_GEN, top: TOP, ctx: ref.n_ctx, threads: 2, backend: opts.backend, engine: { cacheTypeK: "f32", cacheTypeV: "f32" } });
  const cmp = compareRuns(ref.results, got, opts.tol);
  if (!cmp.ok || cmp.compared * 3 < cmp.total) {
    throw new Error(`${what} on ${opts.backend} against llama.cpp:\n${describeComparison(cmp, opts.tol)}`);
  }
}

/** Each of PROMPTS' greedy tokens alone (on `backend`, the CPU unless given), then the three in
 * one batch, then the longest again, its prompt now served by the prefix cache: the same tokens
 * every time. */
export async function expectBatchedAsAlone(file: string, backend: "cpu" | "vulkan" | "metal" = "cpu") {
  const alone = await runVelo(file, PROMPTS, { nGen: N_GEN, top: 1, ctx: 512, threads: 2, backend });
  const m = Model.open(file);
  try {
    const e = Engine.create(m, { ctxSize: 512, threads: 2, backend, maxBatchSize: 4, prefixCache: true });
    try {
      const greedy = (p: number[]) => e.submit({ promptTokens: p, maxTokens: N_GEN, temperature: 0, ignoreEos: true }).collect();
      const batched = await Promise.all(PROMPTS.map(greedy));
      expect(batched.map((r) => r.tokens)).toEqual(alone.map((r) => r.tokens));
      const again = await greedy(PROMPTS[2]!);
      expect(again.finish.usage.cached_tokens).toBeGreaterThan(0);
      expect(again.tokens).toEqual(alone[2]!.tokens);
    } finally {
      e.close();
    }
  } finally {
    m.close();
  }
}
