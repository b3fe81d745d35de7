// synth-check.ts — a GPU backend against the CPU backend end to end, on models the project writes
// itself, so it needs nothing outside this repository (the macOS workflow runs it: the team's
// reference models in ../shared are not available there).
//
// Writes a small SentencePiece vocabulary (byte tokens and a few pieces) with src/gguf/writer.ts,
// then one random-weight model per weight type with src/gguf/synth.ts (the stories15M shape over
// that vocabulary), and runs four prompts of 1 to 40 tokens at once on each backend: greedy,
// 12 tokens each, the top 64 logits of every step. Compared while a sequence's tokens agree:
// the top logits, as max |GPU − CPU| over the CPU's top 64 relative to their range. Float weights
// multiply float activations on both backends (tolerance 1e-3); for quantized weights the CPU
// rounds activations to 8-bit blocks and the GPU does not (bench/gpu/coopmat-check.ts), so the
// tolerance there (0.1) only catches kernels that are wrong, not imprecise. Kernel-level
// accuracy is GPUKernelTests' job.
//   bun scripts/synth-check.ts --backend metal|vulkan [--types f32,f16,q8_0,q4_0,q4_k]
//   bun scripts/synth-check.ts --backend cpu      (the CPU alone: the models load and generate)
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { Engine, type EngineOptions } from "../src/engine/engine";
import { Model } from "../src/engine/model";
import { meta, writeGGUF } from "../src/gguf/writer";

const { values } = parseArgs({
  options: {
    backend: { type: "string", default: process.platform === "darwin" ? "metal" : "vulkan" },
    types: { type: "string", default: "f32,f16,q8_0,q4_0,q4_k" },
    keep: { type: "boolean", default: false },
  },
});
const backend = values.backend as EngineOptions["backend"];
const repo = resolve(import.meta.dir, "..");
const TOP = 64, GEN = 12;

/** A SentencePiece ("llama") vocabulary: <unk>, <s>, </s>, the 256 byte tokens, and word pieces. */
function writeVocabulary(path: string): number {
  const pieces = ["▁", ..."abcdefghijklmnopqrstuvwxyz".split("").map((c) => "▁" + c), ..."abcdefghijklmnopqrstuvwxyz".split(""),
    "▁the", "▁and", "▁was", "▁to", "▁Once", "▁upon", "▁time", "▁there", "▁little", "▁girl", "▁named", "▁Lily"];
  const tokens = ["<unk>", "<s>", "</s>", ...Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`), ...pieces];
  const types = tokens.map((_, i) => (i === 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1)); // unknown, control, byte, normal
  const scores = tokens.map((t, i) => (i < 259 ? 0 : -i + t.length * 10)); // longer pieces win merges
  writeGGUF(path, {
    metadata: [
      ["general.architecture", meta.str("llama")],
      ["general.name", meta.str("velo synth-check vocabulary")],
      ["tokenizer.ggml.model", meta.str("llama")],
      ["tokenizer.ggml.tokens", meta.arr("string", tokens)],
      ["tokenizer.ggml.scores", meta.arr("f32", scores)],
      ["tokenizer.ggml.token_type", meta.arr("i32", types)],
      ["tokenizer.ggml.bos_token_id", meta.u32(1)],
      ["tokenizer.ggml.eos_token_id", meta.u32(2)],
      ["tokenizer.ggml.unknown_token_id", meta.u32(0)],
      ["tokenizer.ggml.add_bos_token", meta.bool(true)],
      ["tokenizer.ggml.add_eos_token", meta.bool(false)],
    ],
    tensors: [],
  });
  return tokens.length;
}

type Step = { token: number; top: [number, number][] };

async function run(file: string, opts: EngineOptions, prompts: number[][]): Promise<{ device: string; steps: Step[][] }> {
  const m = Model.open(file);
  const e = Engine.create(m, opts);
  try {
    const steps = await Promise.all(prompts.map(async (p) => {
      const out: Step[] = [];
      for await (const c of e.submit({ promptTokens: p, maxTokens: GEN, temperature: 0, ignoreEos: true, topLogits: TOP })) {
        c.tokens.forEach((t, i) => out.push({ token: t, top: i === c.tokens.length - 1 ? c.top_logits ?? [] : [] }));
      }
      return out;
    }));
    return { device: String((e.stats() as unknown as { device?: string }).device ?? opts.backend), steps };
  } finally {
    e.close();
    m.close();
  }
}

const dir = mkdtempSync(join(tmpdir(), "velo-synth-check-"));
let failed = 0;
try {
  const vocab = join(dir, "vocab.gguf");
  const nVocab = writeVocabulary(vocab);
  // deterministic prompts inside the vocabulary: 40, 23, 5 and 1 tokens (prefill tiles, the
  // 1-, 2- and 4-row decode products as sequences finish at different steps)
  const prompts = [40, 23, 5, 1].map((n, s) => [1, ...Array.from({ length: n - 1 }, (_, i) => 3 + ((i * 37 + s * 101) % (nVocab - 3)))]);
  const common = { ctxSize: 128, maxBatchSize: 4, batchTokens: 64 } satisfies EngineOptions;
  for (const type of values.types!.split(",")) {
    const file = join(dir, `tiny-${type}.gguf`);
    const w = Bun.spawnSync([process.execPath, join(repo, "src/gguf/synth.ts"), file, "--shape", "tiny", "--type", type, "--vocab", vocab, "--seed", "7"], { stderr: "inherit", stdout: "ignore" });
    if (w.exitCode !== 0) throw new Error(`synth.ts failed for ${type} (${w.exitCode})`);
    const cpu = await run(file, { ...common, backend: "cpu", threads: 2 }, prompts);
    if (backend === "cpu") {
      const ok = cpu.steps.every((s) => s.length === GEN && s.every((x) => x.top.length > 0 && x.top.every(([, v]) => Number.isFinite(v))));
      console.log(`${type}: cpu: ${prompts.length} sequences of ${GEN} tokens, logits finite: ${ok ? "yes" : "NO"}`);
      if (!ok) failed++;
      continue;
    }
    const gpu = await run(file, { ...common, backend }, prompts);
    const tol = ["f32", "f16", "bf16"].includes(type) ? 1e-3 : 0.1;
    let worst = 0, compared = 0, agreeing = 0;
    for (const [i, cs] of cpu.steps.entries()) {
      const gs = gpu.steps[i]!;
      for (let t = 0; t < cs.length && t < gs.length; t++) {
        const ref = cs[t]!.top, got = new Map(gs[t]!.top);
        const range = ref[0]![1] - ref[ref.length - 1]![1];
        for (const [id, v] of ref) {
          const g = got.get(id);
          // an id in the CPU's top 64 but not the GPU's is at most the GPU's 64th logit away
          const d = g === undefined ? Math.abs(v - gs[t]!.top[gs[t]!.top.length - 1]![1]) : Math.abs(g - v);
          worst = Math.max(worst, d / range);
        }
        compared++;
        if (cs[t]!.token !== gs[t]!.token) break; // later steps continue different texts
        agreeing++;
      }
    }
    const ok = worst <= tol && compared >= prompts.length;
    console.log(`${type}: ${backend} (${gpu.device}) against cpu: ${compared} steps compared, greedy tokens agree in ${agreeing}; `
      + `max |Δlogit| ${(worst).toExponential(2)} of the top-${TOP} range (tolerance ${tol}) ${ok ? "ok" : "FAIL"}`);
    if (!ok) failed++;
  }
} finally {
  if (values.keep) console.log(`models kept in ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
}
if (failed) {
  console.error(`synth-check: ${failed} model(s) failed`);
  process.exit(1);
}
