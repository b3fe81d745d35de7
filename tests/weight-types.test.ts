// Every weight type of the K-quant and IQ4 families, F16, and the 32-value types Q4_1, Q5_0 and
// Q5_1 (Q4_0 and Q8_0: tests/architectures.test.ts), against llama.cpp and against a float64
// reference, on the CPU and on the GPU backend (lavapipe under `make test`).
//
// The models: src/gguf/synth.ts's llama `test256` shape (256 wide, FFN 512, 3 layers, 4 heads of
// 64, 2 KV heads, the llama-spm vocabulary) with --pure, so that every 2-D weight (token_embd,
// the attention and FFN matrices, output) is of the type under test; the 128-wide shapes of
// tests/architectures.test.ts fall back to 32-value types on every row shorter than a 256-value
// block. The first test reads each file's tensor table and checks exactly that. Prompts and
// greedy runs as tests/architectures.test.ts: 5, 20 and 40 random token ids, 24 tokens each, the
// tokens equal and the top-10 logits, measured from each side's top logit, within
// rtol·max(1, |top logit|) (bench/llamacpp/reference.ts: compareRuns); top logits here are
// 3.7-8.1. The KV caches are float32 on both engines (llama.cpp: reference.mjs's default).
//
// Four comparisons per type:
// 1. Velo's CPU backend against llama.cpp (prebuilt CPU build, node-llama-cpp). For the
//    quantized types both engines round each product's input to 8-bit blocks (Q8_K for the
//    K-quants and IQ4_XS, Q8_0 for IQ4_NL) and then agree to ~1e-6, until a difference of
//    1e-7 upstream (attention's summation order, say) rounds one activation the other way:
//    from there the logits move by a few hundredths, chaotically. rtol 0.04; measured: at most
//    0.018 of the top logit (Q3_K, 0.095 absolute), Q6_K 1.4e-6 (no such flip happened).
//    F16: both take float activations (see 2.); rtol 2e-4, measured 6.9e-6 absolute.
// 2. A float64 forward pass (tests/helpers/f64-llama.ts: ggml's dequantization, written apart
//    from Velo's kernels and shaders) that rounds the activations as llama.cpp's CPU backend
//    does, against llama.cpp: it checks the reference itself. Measured: within 1.4e-6 of
//    llama.cpp on every step before such a flip, at most 0.018 of the top logit after one
//    (IQ4_XS, 0.12 absolute); rtol 0.04 as in 1. (For F16 weights the prebuilt llama.cpp
//    lands 4e-6 from float activations and 4.8e-3 from activations rounded to f16, so the
//    reference takes float ones: rtol 2e-4.)
// 3. Velo's GPU backend against the same float64 pass with float activations, as Velo's GPU
//    products take them: no rounding to flip, so a tight tolerance. rtol 1e-4; measured at
//    most 1.2e-5 absolute (Q5_K). Q4_K, Q5_K and Q6_K decode through 8-bit activations on Vulkan
//    (GPU_DOT_TYPES): for them this runs with those products off, in a process of its own. Against llama.cpp the GPU is as far off as float activations
//    are from 8-bit ones, up to 0.31 on these unit-scale logits, which would hide a real bug.
// 4. Velo's GPU backend against llama.cpp, coarsely: rtol 0.08 (measured at most 0.053 of the
//    top logit, Q2_K; 0.31 absolute). The runs part at near-ties early (11 of 72 steps
//    compared for Q4_K), so here no share of compared steps is required.
// A differing token is accepted only at a near-tie of the first run's top two logits (within
// the tolerance), and the steps after it are not compared; in 1-3 at least a third of all
// steps must have been compared (measured: 32/72 at the least, Q2_K and Q4_K on the CPU).
//
// Shown able to fail (mutations not kept): Velo reading files with one sub-block scale per block
// taken from its neighbour (Q4_K, Q2_K, Q6_K; IQ4_XS's high scale bits dropped; F16: 1/256 of the
// signs flipped) fails 1, 3 and 4 for each, and still fails all three when only blk.1.attn_v's
// 128 Q4_K blocks are touched; every Q4_K block's f16 scale one ulp up (0.1 %) fails 3 (0.053
// against 5e-4) and 1 (10/72 steps compared) but passes 4; the reference's own Q4_K high-nibble
// scale or IQ4_XS scale offset wrong fails 2 and 3; the non---pure mixes fail the type test. The
// reference's Q4_1 min left off half of each block, or Q5_1's fifth bit flipped, fails 2 and 3.
import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, renameSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  compareRuns, describeComparison, type PromptRun, randomPrompts, type ReferenceRun, runReference, runVelo, type Tolerance,
} from "../bench/llamacpp/reference";
import type { EngineOptions } from "../src/engine/engine";
import { readGGUFTensorTable } from "../src/gguf/reader";
import { synthesize } from "../src/gguf/synth";
import { GGMLTypeId, type GGMLTypeName } from "../src/gguf/writer";
import { type Activations, F64Llama } from "./helpers/f64-llama";
import { repoRoot } from "./helpers/paths";

/** synth.ts --type, and the ggml type every 2-D weight of the --pure file must have. */
const TYPES: [string, GGMLTypeName][] = [
  ["q2_k", "Q2_K"], ["q3_k", "Q3_K"], ["iq4_nl", "IQ4_NL"], ["iq4_xs", "IQ4_XS"],
  ["q4_k", "Q4_K"], ["q5_k", "Q5_K"], ["q6_k", "Q6_K"], ["f16", "F16"],
  ["q4_1", "Q4_1"], ["q5_0", "Q5_0"], ["q5_1", "Q5_1"],
];
const SHAPE = "test256";

const N_GEN = 24;
const TOP = 10;
const PROMPTS = randomPrompts([5, 20, 40], 32000, 1);
const CTX = 512;
// Velo's KV cache in float32 like llama.cpp's here (engines whose default is f16 take the option)
const VELO_ENGINE = { cacheTypeK: "f32", cacheTypeV: "f32" } as Partial<EngineOptions>;
// a 2-core machine shared with builds and other test runs: llama.cpp took 9-25 s a file, Velo's
// CPU 0.2-10 s, the float64 pass 2-9 s, lavapipe 7-15 s (pipelines built first), the whole file
// 4.3 min; at a load average of 13 (another whole test suite beside it) a llama.cpp run passed
// 300 s and the file took 14 min: generous limits
const SLOW = 900_000;
const GPU_SLOW = 900_000;
const gpuBackend = process.platform === "darwin" ? "metal" : "vulkan";

function tolerance(type: GGMLTypeName, what: "llama.cpp" | "reference" | "gpu-float" | "gpu-llama.cpp"): Tolerance {
  if (what === "gpu-float") return { rtol: 1e-4 };
  if (what === "gpu-llama.cpp") return { rtol: 0.08 };
  return { rtol: type === "F16" ? 2e-4 : 0.04 };
}

// Models are cached between runs in the temporary folder, under a name that changes with synth.ts.
const synthKey = Bun.hash(readFileSync(join(repoRoot, "src/gguf/synth.ts"))).toString(16).slice(0, 12);
const modelDir = join(tmpdir(), `velo-weight-type-models-${synthKey}`);

function modelFile(type: string): string {
  const file = join(modelDir, `llama-${SHAPE}-${type}-pure.gguf`);
  if (!existsSync(file)) {
    mkdirSync(modelDir, { recursive: true });
    const part = `${file}.${process.pid}.part`;
    synthesize({ out: part, arch: "llama", shape: SHAPE, type, pure: true });
    renameSync(part, file);
  }
  return file;
}

// Each run once, shared by the tests that need it.
const memo = new Map<string, Promise<unknown>>();
function once<T>(key: string, f: () => Promise<T>): Promise<T> {
  if (!memo.has(key)) memo.set(key, f());
  return memo.get(key)! as Promise<T>;
}
const llamaCpp = (type: string) =>
  once(`llama.cpp ${type}`, async () => {
    // runReference installs node-llama-cpp first (bench/setup-llamacpp.sh) when it is missing
    const ref: ReferenceRun = await runReference(modelFile(type), PROMPTS, { nGen: N_GEN, top: TOP, ctx: CTX, threads: 2 });
    // the reference itself: every prompt decoded, every logit finite
    expect(ref.results.map((r) => r.tokens.length)).toEqual(PROMPTS.map(() => N_GEN));
    expect(ref.results.every((r) => r.steps.every((s) => s.top.length === TOP && s.top.every(([, v]) => Number.isFinite(v))))).toBe(true);
    expect(ref.n_ctx).toBe(CTX);
    return ref.results;
  });
const float64 = (type: string, activations: Activations) =>
  once(`f64 ${type} ${activations}`, async () => new F64Llama(modelFile(type)).run(PROMPTS, { nGen: N_GEN, top: TOP, activations }));
const velo = (type: string, backend: "cpu" | "vulkan" | "metal") =>
  once(`velo ${type} ${backend}`, () => runVelo(modelFile(type), PROMPTS, { nGen: N_GEN, top: TOP, ctx: CTX, threads: 2, backend, engine: VELO_ENGINE }));
// The same with the GPU's 8-bit-activation products off (VELO_GPU_NO_DOT, read once a process:
// so in a process of its own): what test 3 compares for the types that decode through them.
const veloFloat = (type: string, backend: "vulkan" | "metal") =>
  once(`velo ${type} ${backend} float`, async () => {
    const opts = { nGen: N_GEN, top: TOP, ctx: CTX, threads: 2, backend, engine: VELO_ENGINE };
    const p = Bun.spawn([process.execPath, join(import.meta.dir, "helpers/run-velo.ts"), modelFile(type), JSON.stringify(PROMPTS), JSON.stringify(opts)],
      { env: { ...process.env, VELO_GPU_NO_DOT: "1" }, stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    if (code !== 0) throw new Error(err);
    return JSON.parse(out) as PromptRun[];
  });
// Weight types whose decode products take 8-bit activations on the GPU (GPUKernels.dotTypes, on
// devices with integer dot products): test 3 runs them with those products off; test 4 and the
// kernel tests (GPUKernelTests) cover the 8-bit path.
const GPU_DOT_TYPES = new Set(["q4_k", "q5_k", "q6_k", "q4_1", "q5_0", "q5_1"]);

function expectAgree(label: string, ref: PromptRun[], got: PromptRun[], tol: Tolerance, minShare: number) {
  const cmp = compareRuns(ref, got, tol);
  if (!cmp.ok || cmp.compared < minShare * cmp.total) {
    throw new Error(`${label}:\n${describeComparison(cmp, tol)}${cmp.ok ? `\nonly ${cmp.compared}/${cmp.total} steps compared` : ""}`);
  }
}

describe(`weight types: ${SHAPE} --pure files`, () => {
  for (const [type, ggml] of TYPES) {
    test(`${type}: every 2-D weight is ${ggml}`, () => {
      const { tensors } = readGGUFTensorTable(modelFile(type));
      const matrices = tensors.filter((t) => t.dims.length === 2);
      // token_embd, output, and per layer q, k, v, attn_output, gate, up, down
      expect(matrices.map((t) => t.name).sort()).toEqual(
        ["token_embd.weight", "output.weight", ...[0, 1, 2].flatMap((l) => ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"].map((n) => `blk.${l}.${n}.weight`))].sort(),
      );
      expect(matrices.filter((t) => t.type !== GGMLTypeId[ggml]).map((t) => t.name)).toEqual([]);
      // rows of 256 and 512 (ffn_down): whole 256-value blocks of every type
      expect(new Set(matrices.map((t) => t.dims[0]))).toEqual(new Set([256, 512]));
      // norms stay F32, as the converter writes every 1-D tensor
      expect(tensors.filter((t) => t.dims.length === 1 && t.type !== GGMLTypeId.F32).map((t) => t.name)).toEqual([]);
    }, SLOW);
  }
});

/**
 * How llama.cpp's CPU build treats F16 weights on this machine. On AVX-512 machines its sgemm
 * takes float activations: the float64 pass lands within 2e-4 (measured 5e-6). On AVX2-only ones
 * (an AMD EPYC, 2026-12-02) it rounds them to float16 (ggml's vec_dot_type), which moves the
 * logits by up to 5.2e-3 of the top one; the float64 pass with that rounding ("ggml-f16") lands
 * within 1.9e-3, the rest of that path (measured, not emulated) stays unexplained: rtol 3e-3 there.
 */
const F16_ROUNDED_RTOL = 3e-3;
const f16Rounding = () =>
  once("f16 rounding", async () => {
    const ref = await llamaCpp("f16");
    if (compareRuns(ref, await float64("f16", "ggml"), tolerance("F16", "reference")).ok) return "ggml" as const;
    if (compareRuns(ref, await float64("f16", "ggml-f16"), { rtol: F16_ROUNDED_RTOL }).ok) return "ggml-f16" as const;
    throw new Error("llama.cpp's F16 products match neither float activations nor activations rounded to f16");
  });

describe("weight types against llama.cpp, CPU backend", () => {
  for (const [type, ggml] of TYPES) {
    test(`${type}: Velo's CPU backend against llama.cpp`, async () => {
      const cpu = await velo(type, "cpu");
      if (type === "f16" && (await f16Rounding()) === "ggml-f16") {
        // Velo's F16 products take float activations: against the float64 pass that does too,
        // tightly, and against llama.cpp within what its rounding to f16 moves (4.8e-3 measured)
        expectAgree("f16 on the CPU against the float64 reference (float activations)", await float64(type, "float"), cpu, tolerance(ggml, "llama.cpp"), 1 / 3);
        expectAgree("f16 on the CPU against llama.cpp (activations rounded to f16 there)", await llamaCpp(type), cpu, { rtol: 0.01 }, 1 / 3);
        return;
      }
      expectAgree(`${type} on the CPU against llama.cpp`, await llamaCpp(type), cpu, tolerance(ggml, "llama.cpp"), 1 / 3);
    }, SLOW);
    test(`${type}: the float64 reference (llama.cpp's activation rounding) against llama.cpp`, async () => {
      const mode = type === "f16" ? await f16Rounding() : "ggml";
      const tol = mode === "ggml-f16" ? { rtol: F16_ROUNDED_RTOL } : tolerance(ggml, "reference");
      expectAgree(`${type}: the float64 reference (${mode}) against llama.cpp`, await llamaCpp(type), await float64(type, mode), tol, 1 / 3);
    }, SLOW);
  }
});

describe(`weight types, ${gpuBackend} backend`, () => {
  for (const [type, ggml] of TYPES) {
    test(`${type}: Velo's ${gpuBackend} backend against the float64 reference (float activations)`, async () => {
      const got = GPU_DOT_TYPES.has(type) && gpuBackend === "vulkan" ? await veloFloat(type, gpuBackend) : await velo(type, gpuBackend);
      expectAgree(`${type} on ${gpuBackend} against the float64 reference`, await float64(type, "float"), got, tolerance(ggml, "gpu-float"), 1 / 3);
    }, GPU_SLOW);
    test(`${type}: Velo's ${gpuBackend} backend against llama.cpp (coarse)`, async () => {
      expectAgree(`${type} on ${gpuBackend} against llama.cpp`, await llamaCpp(type), await velo(type, gpuBackend), tolerance(ggml, "gpu-llama.cpp"), 0);
    }, GPU_SLOW);
  }
});
