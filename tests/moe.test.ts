// Mixture-of-experts models against llama.cpp: Mixtral (`llama` with experts: 8 experts, 2 per
// token, renormalised weights), Qwen3-MoE (16 experts, 4 per token, renormalised, Q/K norms) and
// Qwen2-MoE (12 experts, 4 per token, weights not renormalised, a sigmoid-gated shared expert,
// Q/K/V biases), random-weight files of test shapes written by src/gguf/synth.ts as llama.cpp's
// converter lays them out (stacked ffn_{gate,up,down}_exps, an F32 ffn_gate_inp router). As
// tests/architectures.test.ts: three prompts of 5, 20 and 40 random tokens, 24 greedy tokens
// each, the same tokens and top-10 logits within the tolerance at every step.
//
// Tolerances (rtol, as tests/architectures.test.ts):
// - f32: 2e-4. Measured, CPU: at most 2.6e-6 (mixtral), 2.4e-6 (qwen3moe), 2.4e-6 (qwen2moe);
//   Vulkan (lavapipe): 7.4e-6, 3.3e-6, 3.1e-6; all 72 steps compared, every token the same.
//   Mixtral's weights left unnormalised, or Qwen2-MoE's shared expert without its sigmoid gate,
//   change the first or second greedy token of every prompt, on both backends (logits off by
//   up to 0.73 and 0.90).
// - q8_0 / q4_0 on the CPU: 0.05, the dense models' bound (both engines quantize activations to
//   Q8_0 before each product). Measured: 0.046 (mixtral q8_0), 1e-6 (qwen3moe q8_0), 0.016
//   (qwen3moe q4_0), 0.058 (qwen2moe q8_0, top logits above 3). The router stays F32 in every
//   file, as llama-quantize leaves it.
// - q8_0 / q4_0 on the GPU: 0.08, as the dense models', but on `test-all` files, where every
//   token goes to every expert (3 of 3 for Mixtral, 4 of 4 for the Qwens). The GPU's products
//   do not round activations as llama.cpp's CPU does, which moves these unit-scale models'
//   logits by up to ~0.2 (dense models too); a top-k choice turns such a move into a different
//   expert wherever two are near-tied, and a different expert into a jump of 0.3–0.7 in the
//   logits (measured on the `test` files: 6 to 55 of 72 steps comparable). Without a choice the
//   output follows its input smoothly: measured 0.11 (mixtral), 0.10 (qwen3moe q8_0), 0.030
//   (qwen3moe q4_0), 0.11 (qwen2moe). The choice itself is checked exactly by the f32 files.
//   (Mixtral's `test-all` has 3 experts: with 4, its logits were near-ties too often for a third
//   of the steps to be compared.)
// The GPU routes on the device (moe_route) and runs one expert-indexed product per stacked
// tensor (matvec_id_T for decode, matmul_id_T's per-expert tiles for prefill); a prompt of 300
// tokens gives each expert about 75 rows, more than one tile of 64 (the kernels themselves, every
// weight type, experts with no rows: GPUKernelTests.testMoERoute, testExpertProductsEveryType).
//
// Beyond the comparison: batched decoding with the prefix cache on gives each sequence the
// tokens it gets alone, and speculative decoding with a dense draft is exact.
import { describe, expect, test } from "bun:test";
import { randomPrompts, runVelo, type Tolerance } from "../bench/llamacpp/reference";
import { Engine } from "../src/engine/engine";
import { Model } from "../src/engine/model";
import { checkAgainstLlamaCpp, expectBatchedAsAlone, GPU_SLOW, gpuBackend, N_GEN, PROMPTS, SLOW } from "./helpers/llamacpp-check";
import { synthModel } from "./helpers/synth-models";

type Arch = "mixtral" | "qwen3moe" | "qwen2moe" | "llama";
interface Case { arch: Arch; type: "f32" | "q8_0" | "q4_0"; shape?: "test" | "test-all" }

const CASES: Case[] = [
  ...(["mixtral", "qwen3moe", "qwen2moe"] as const).flatMap((arch): Case[] => [{ arch, type: "f32" }, { arch, type: "q8_0" }]),
  { arch: "qwen3moe", type: "q4_0" },
];
// quantized weights on the GPU: every expert on every token (see the header)
const GPU_CASES: Case[] = [
  ...CASES.filter((c) => c.type === "f32"),
  ...(["mixtral", "qwen3moe", "qwen2moe"] as const).map((arch): Case => ({ arch, type: "q8_0", shape: "test-all" })),
  { arch: "qwen3moe", type: "q4_0", shape: "test-all" },
];
const name = (c: Case) => `${c.arch} ${c.type}${c.shape === "test-all" ? ", every expert on every token" : ""}`;

const tolerance = (c: Case, gpu: boolean): Tolerance => ({ rtol: c.type === "f32" ? 2e-4 : gpu ? 0.08 : 0.05 });

const modelFile = (arch: Arch, type: string, shape = "test") => synthModel(arch, type, shape);

async function check(c: Case, backend: "cpu" | "vulkan" | "metal") {
  await checkAgainstLlamaCpp(modelFile(c.arch, c.type, c.shape), name(c), { ctx: 512, tol: tolerance(c, backend !== "cpu"), backend });
}

describe("mixture-of-experts models against llama.cpp, CPU backend", () => {
  for (const c of CASES) test(name(c), () => check(c, "cpu"), SLOW);
});

describe(`mixture-of-experts models against llama.cpp, ${gpuBackend} backend`, () => {
  for (const c of GPU_CASES) test(name(c), () => check(c, gpuBackend), GPU_SLOW);
});

describe(`a long prompt against llama.cpp, ${gpuBackend} backend: many rows an expert`, () => {
  const long = randomPrompts([300], 32000, 2);
  for (const arch of ["mixtral", "qwen3moe"] as const) {
    test(`${arch} f32, 300 tokens`, () =>
      checkAgainstLlamaCpp(modelFile(arch, "f32"), `${arch} f32, 300 tokens`, { ctx: 512, tol: { rtol: 2e-4 }, backend: gpuBackend, prompts: long }), GPU_SLOW);
  }
});

describe("mixture-of-experts models in the engine", () => {
  // each sequence's greedy tokens alone, then the three prompts in one batch, then the longest
  // again, its prompt now served by the prefix cache
  test("batched decoding and the prefix cache give each sequence its own tokens", () => expectBatchedAsAlone(modelFile("qwen2moe", "q8_0")), SLOW);

  test("speculative decoding with a dense draft is exact", async () => {
    const file = modelFile("mixtral", "q8_0");
    const run = async (spec: boolean) => {
      const m = Model.open(file);
      const d = spec ? Model.open(modelFile("llama", "q8_0")) : undefined;
      try {
        const e = Engine.create(m, { ctxSize: 512, threads: 2, backend: "cpu", ...(spec ? { spec: "draft", specAdapt: false, draftMax: 4 } as const : {}) }, d);
        try {
          const r = await e.submit({ promptTokens: PROMPTS[1]!, maxTokens: 48, temperature: 0, ignoreEos: true }).collect();
          return { tokens: r.tokens, drafted: r.finish.usage.drafted_tokens };
        } finally {
          e.close();
        }
      } finally {
        m.close();
        d?.close();
      }
    };
    const plain = await run(false), spec = await run(true);
    expect(spec.drafted).toBeGreaterThan(0);
    expect(spec.tokens).toEqual(plain.tokens);
  }, SLOW);
});
