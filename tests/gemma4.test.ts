// Gemma 4 (text) against llama.cpp: random-weight files of its layout (src/gguf/synth.ts --arch
// gemma4) run through llama.cpp (bench/llamacpp/reference.mjs) and Velo on the CPU: the same
// greedy tokens over 24 steps of three prompts and the top-10 logits within the tolerance
// (tests/helpers/llamacpp-check.ts). Shape `test` is E2B's layout: sliding heads of 32 and
// global heads of 64 with their own K/V head counts, "proportional" RoPE on the global layers
// (rope_freqs), the last 3 layers reading earlier layers' K/V and twice as wide in their MLPs,
// per-layer embeddings, layer output scales. `test-kv` is 31B's: no per-layer embeddings, no
// shared K/V, and global layers without a V projection (V is K's product). `test-moe` is
// 26B-A4B's: in every layer a dense MLP beside 8 GELU experts (2 a token), the router reading
// rmsnorm(x)/√dim · ffn_gate_inp.scale, each expert's output times its ffn_down_exps.scale.
// `test-wide` is `test` with global K/V rows twice as wide as the sliding ones (E2B's 512 and
// 256), so the KV pages hold layers of two widths.
//
// Tolerances: f32 3e-3. llama.cpp's CPU GELU reads a float16 table (tests/architectures.test.ts,
// Gemma); Velo's exact GELU lands 1.2e-3 (test), 1.7e-3 (test-kv) and 2.1e-3 (test-wide) from it (measured
// 2026-12-03; 3-4x less when Velo's GELU emulated the table). Each feature left out or misread
// (window, sliding RoPE base, rope_freqs, output scales) changes the greedy tokens. q8_0 0.1:
// both engines quantize each product's input to Q8_0; measured 0.056 and 0.085, as far as
// llama.cpp's own logits on the q8_0 file are from those on its weights in F32 (0.03-0.09:
// bench/dequantize-f32.ts, then bench/quant-noise.ts), while on that F32 copy the engines
// agree within 1.8e-3. (The writer's Q/K norm gains of d^-1/4 matter here: with gains of 1,
// Gemma 4's unscaled scores make attention near one-hot and the Q8_0 rounding swings it by up
// to 0.3 in both engines.) test-moe in f32 only (measured 1.7e-3): in Q8_0 the rounding of the
// router's input picks other experts now and then, in llama.cpp against its own F32 copy as in
// Velo, so the top-10 lists themselves part (Velo against llama.cpp on that F32 copy: 1.5e-3);
// Q8_0 expert products are checked in tests/moe.test.ts.
//
// On the GPU (Vulkan: lavapipe here; the same kernels for Metal) every shape runs too: each
// layer's own head shape through the attention kernels, the pages' layers of two widths, V's
// norm against a gain of ones, per_layer_inputs and per_layer_gate for the per-layer
// embeddings, scale for the output scales; for test-moe the router's own norm and scale, and
// moe_route's per-expert factors (ffn_down_exps.scale) in the weights. Measured 2026-12-03:
// test 1.3e-3, test-kv 1.7e-3, test-wide 2.1e-3, test-moe 1.7e-3 (f32), test q8_0 0.061, as
// on the CPU.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { runTokenizerReference } from "../bench/llamacpp/reference";
import { Engine } from "../src/engine/engine";
import { Model } from "../src/engine/model";
import { checkAgainstLlamaCpp, expectBatchedAsAlone, GPU_SLOW, gpuBackend, SLOW } from "./helpers/llamacpp-check";
import { testData } from "./helpers/paths";
import { synthModel } from "./helpers/synth-models";

describe("gemma4 against llama.cpp, CPU backend", () => {
  for (const shape of ["test", "test-kv", "test-moe", "test-wide"]) {
    for (const type of shape === "test-moe" || shape === "test-wide" ? (["f32"] as const) : (["f32", "q8_0"] as const)) {
      test(`${shape} ${type}`, () => checkAgainstLlamaCpp(synthModel("gemma4", type, shape), `gemma4 ${shape} ${type}`, { ctx: 512, tol: { rtol: type === "f32" ? 3e-3 : 0.1 }, backend: "cpu" }), SLOW);
    }
  }
});

describe(`gemma4 against llama.cpp, ${gpuBackend} backend`, () => {
  for (const [shape, type] of [["test", "f32"], ["test-kv", "f32"], ["test-wide", "f32"], ["test-moe", "f32"], ["test", "q8_0"]] as const) {
    test(`${shape} ${type}`, () => checkAgainstLlamaCpp(synthModel("gemma4", type, shape), `gemma4 ${shape} ${type} ${gpuBackend}`, { ctx: 512, tol: { rtol: type === "f32" ? 3e-3 : 0.1 }, backend: gpuBackend }), GPU_SLOW);
  }
});

describe("gemma4's tokenizer (BPE over characters, ▁ for spaces, byte tokens)", () => {
  test("gives llama.cpp's tokens and text back on llama.cpp's SentencePiece test strings", async () => {
    const file = synthModel("gemma4", "q8_0");
    const texts = readFileSync(testData("vocab/ggml-vocab-llama-spm.gguf.inp"), "utf8").split("\n__ggml_vocab_test__\n").filter((t) => t !== "");
    texts.push("emoji 🦙 ok", "line one\nline two\n\n\nend", "\n", "\n\n", " \n ", "héllo 世界");
    const reference = await runTokenizerReference(file, texts);
    const m = Model.open(file);
    try {
      const wrong = texts.filter((t, i) => Array.from(m.tokenize(t, { addSpecial: false, parseSpecial: false })).join(" ") !== reference[i]!.ids.join(" "));
      expect(wrong).toEqual([]);
      expect(texts.filter((t, i) => m.detokenize(reference[i]!.ids) !== reference[i]!.text)).toEqual([]);
      // BOS first, as llama.cpp adds Gemma 4's whatever the file says
      expect(Array.from(m.tokenize("Hello", { addSpecial: true, parseSpecial: false }))[0]).toBe(1);
    } finally {
      m.close();
    }
  }, SLOW);
});

describe("gemma4 in the engine", () => {
  test.each(["test", "test-moe", "test-wide"])("%s: batched decoding and the prefix cache give each sequence its own tokens", (shape) => expectBatchedAsAlone(synthModel("gemma4", "f32", shape)), SLOW);
  test.each(["test", "test-moe", "test-wide"])(`%s on ${gpuBackend}: batched decoding and the prefix cache give each sequence its own tokens`, (shape) => expectBatchedAsAlone(synthModel("gemma4", "f32", shape), gpuBackend), GPU_SLOW);

  test("the layers that read an earlier layer's K/V keep none: 3 layers of K/V pages for 6 layers", () => {
    const m = Model.open(synthModel("gemma4", "f32"));
    try {
      const e = Engine.create(m, { ctxSize: 256, backend: "cpu", cacheTypeK: "f32", cacheTypeV: "f32" });
      try {
        // 3 own layers × (K + V) × the widest layer's 64 K/V values (2 heads of 32 sliding, 1 of 64
        // global; llama.cpp: the same 3 × 2 × 64 here)
        const st = e.stats();
        expect(st.kv_bytes_per_page / st.page_size).toBe(3 * 2 * 64 * 4);
      } finally {
        e.close();
      }
    } finally {
      m.close();
    }
  });

  test("layers of different K/V widths take their own width in the pages, not the widest", () => {
    const m = Model.open(synthModel("gemma4", "f32", "test-wide"));
    try {
      const e = Engine.create(m, { ctxSize: 256, backend: "cpu", cacheTypeK: "f32", cacheTypeV: "f32" });
      try {
        // layers 0 and 1 slide (2 K/V heads of 32), layer 2 is global (2 of 64): (64 + 64 + 128) × (K + V),
        // as llama.cpp sizes them (3 × 2 × 128 if every row took the widest)
        const st = e.stats();
        expect(st.kv_bytes_per_page / st.page_size).toBe((64 + 64 + 128) * 2 * 4);
      } finally {
        e.close();
      }
    } finally {
      m.close();
    }
  });

});
