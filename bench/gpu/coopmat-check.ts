// The tensor-core prefill kernels (matmul_coop_T with attention_coop) and the portable ones
// (matmul_T, attention_tiled; both with 8-bit decode products) against the GPU's float32 path
// (VELO_GPU_NO_COOPMAT=1 VELO_GPU_NO_DOT=1: no float16 or 8-bit rounding of activations, which
// matches a float64 numpy forward pass to ~1e-5), for machines with cooperative matrices
// (lavapipe has none). A 100-token prefill on each model in each mode, each in its own
// process; the CPU backend is shown too. Compares the top 1000 logits of the prefill's last row
// (max abs difference, relative to their range) and the greedy continuation.
//
// Why not the CPU as the reference: it rounds every product's activations to 8-bit blocks
// (as llama.cpp's CPU backend does), and random-weight models amplify that rounding layer by
// layer; on a 1.1B Q8_0 model the CPU sits 6.4e-2 of the range from a float64 numpy pass while
// the GPU's float32 path sits 1.2e-5 from it (bench/gpu/numpy-check.ts).
// attention_coop is also compared alone, against attention_tiled under the same products; and
// attention_cm2 (the cm2 mode's prefill attention, one sequence) against attention_coop under
// the cm2 products.
// With --llama PATH (bench/gpu/llama-logits.cpp, packed by pack-llamacpp.sh), llama.cpp's own
// GPU logits for the same prompt are one more row: the reference's rounding beside Velo's.
//   bun bench/gpu/coopmat-check.ts [--tokens N] [--ctx N] [--cache-type-k T] [--cache-type-v T] [--page-size N] [--llama PATH] MODEL.gguf...
//   bun bench/gpu/coopmat-check.ts --attention-only [--tokens N] [--ctx N] MODEL.gguf...   (attention_cm2 against attention_coop alone)
import { unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { parseArgs } from "node:util";
import { Engine, type KVCacheType } from "../../src/engine/engine";
import { Model } from "../../src/engine/model";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    child: { type: "boolean", default: false }, cpu: { type: "boolean", default: false }, tokens: { type: "string", default: "100" }, gen: { type: "string", default: "24" },
    // the KV cache every mode runs with (attention_coop reads each type; page sizes that are not
    // multiples of 8 take its general loads)
    "cache-type-k": { type: "string" }, "cache-type-v": { type: "string" }, "page-size": { type: "string" }, ctx: { type: "string", default: "512" },
    llama: { type: "string" },
    // only attention_cm2 against attention_coop (two runs a model, for big models and head sizes)
    "attention-only": { type: "boolean", default: false },
  },
});
const CACHE = ["--cache-type-k", "--cache-type-v", "--page-size"].flatMap((o) => {
  const v = values[o.slice(2) as "cache-type-k"];
  return v ? [o, v] : [];
});
const PROMPT = Number(values.tokens), GEN = Number(values.gen), TOP = 1000;

type Run = { device: string; prompt: number[]; tokens: number[]; top: [number, number][]; promptMs: number };

async function child(file: string): Promise<Run> {
  const m = Model.open(file);
  const e = Engine.create(m, {
    backend: values.cpu ? "cpu" : "vulkan", ctxSize: Number(values.ctx),
    cacheTypeK: values["cache-type-k"] as KVCacheType | undefined, cacheTypeV: values["cache-type-v"] as KVCacheType | undefined,
    pageSize: values["page-size"] ? Number(values["page-size"]) : undefined,
  });
  try {
    e.waitForKernels(); // each mode's own kernels, not those standing in while they build
    // a fixed pseudo-random prompt (ids 100 .. 30099: inside every vocabulary here)
    let s = 12345;
    const prompt = Array.from({ length: PROMPT }, () => ((s = (s * 1103515245 + 12345) >>> 0) % 30000) + 100);
    prompt[0] = 1;
    const g = e.submit({ promptTokens: prompt, maxTokens: GEN, temperature: 0, ignoreEos: true, topLogits: TOP });
    const tokens: number[] = [];
    let top: [number, number][] = [];
    for await (const c of g) {
      if (!tokens.length && c.top_logits) top = c.top_logits;
      tokens.push(...c.tokens);
    }
    const fin = await g.finished;
    return { device: String((e.stats() as unknown as { device: string }).device), prompt, tokens, top, promptMs: fin.usage.prompt_ms };
  } finally {
    e.close();
    m.close();
  }
}

if (values.child) {
  console.log(JSON.stringify(await child(positionals[0]!)));
  process.exit(0);
}

function spawn(file: string, mode: "exact" | "portable" | "coopmat" | "coopfloat" | "tiledattn" | "cm2" | "cm2f32" | "cm2coopattn" | "cpu"): Run {
  const env = { ...process.env } as Record<string, string>;
  delete env.VELO_GPU_NO_COOPMAT;
  delete env.VELO_GPU_NO_DOT;
  delete env.VELO_GPU_NO_COOP_ATTN;
  delete env.VELO_GPU_NO_CM2_ATTN;
  // matmul_coop_T unless this is the cm2 mode, which takes matmul_cm2_T for every product
  env.VELO_GPU_CM2 = "off";
  if (mode === "tiledattn") env.VELO_GPU_NO_COOP_ATTN = "1";
  const shape = process.env.VELO_GPU_CM2; // a tile shape to check, if one is set
  // the cm2 modes take attention_cm2 (one sequence's prefill); cm2coopattn is cm2 with
  // attention_coop instead
  if (mode === "cm2" || mode === "cm2f32" || mode === "cm2coopattn") {
    Object.assign(env, { VELO_GPU_CM2: shape && shape !== "off" ? shape : "on", VELO_GPU_CM2_MIN_ROWS: "1" });
  }
  if (mode === "cm2coopattn") env.VELO_GPU_NO_CM2_ATTN = "1";
  if (mode === "cm2f32") env.VELO_GPU_CM2_ACC = "f32"; // cm2's float32 sums (its default sums in float16)
  if (mode === "exact") Object.assign(env, { VELO_GPU_NO_COOPMAT: "1", VELO_GPU_NO_DOT: "1" });
  if (mode === "portable") env.VELO_GPU_NO_COOPMAT = "1";
  // the tensor-core path with float activations in the matvec products (the logits row's
  // output product; decode's): what the 8-bit activations alone add
  if (mode === "coopfloat") env.VELO_GPU_NO_DOT = "1";
  const args = ["--child", "--tokens", String(PROMPT), "--gen", String(GEN), "--ctx", values.ctx!, ...CACHE, ...(mode === "cpu" ? ["--cpu"] : []), file];
  const r = Bun.spawnSync([process.execPath, process.argv[1]!, ...args], { env, stderr: "inherit" });
  if (r.exitCode !== 0) throw new Error(`child failed (${r.exitCode})`);
  const lines = r.stdout.toString().trim().split("\n");
  return JSON.parse(lines[lines.length - 1]!) as Run;
}

/** llama.cpp's top logits after the same prompt (llama-logits), or why there are none. */
function llamaRun(file: string, prompt: number[]): { top: [number, number][]; devices: string } | string {
  const ids = `${tmpdir()}/coopmat-check-ids-${process.pid}.txt`;
  writeFileSync(ids, prompt.join(" "));
  const r = Bun.spawnSync([values.llama!, file, ids, String(TOP)], { stderr: "pipe" });
  unlinkSync(ids);
  const err = r.stderr.toString();
  if (r.exitCode !== 0) return `llama-logits failed (${r.exitCode}): ${err.trim().split("\n").slice(-3).join(" | ")}`;
  const devices = [...err.matchAll(/llama-logits: device (.*)/g)].map((m) => m[1]).join(", ");
  return { top: (JSON.parse(r.stdout.toString()) as { top: [number, number][] }).top, devices };
}

/** How far `run`'s top logits and greedy tokens are from the reference's. */
function compare(ref: Run, run: Run) {
  const got = new Map(run.top);
  let maxDiff = 0, shared = 0, bitwise = true;
  for (const [id, v] of ref.top) {
    const w = got.get(id);
    if (w === undefined) continue;
    shared++;
    if (w !== v) bitwise = false;
    maxDiff = Math.max(maxDiff, Math.abs(w - v));
  }
  const vals = ref.top.map((t) => t[1]);
  const range = Math.max(...vals) - Math.min(...vals);
  let agree = 0;
  while (agree < ref.tokens.length && ref.tokens[agree] === run.tokens[agree]) agree++;
  const same = agree === ref.tokens.length && ref.tokens.length === run.tokens.length;
  return { maxDiff, range, rel: maxDiff / (range || 1), shared, bitwise, agree, same };
}

// attention_cm2 reads f16 pages whose 8-key runs sit at 16-byte boundaries; other caches keep attention_coop
const cm2AttnCache = [values["cache-type-k"], values["cache-type-v"]].every((t) => (t ?? "f16") === "f16")
  && Number(values["page-size"] ?? 16) % 8 === 0;
const logitsOnly = (r: ReturnType<typeof compare>) =>
  `max |Δlogit| ${r.maxDiff.toExponential(3)} (relative ${r.rel.toExponential(3)}; ${r.shared} ids in both top lists)`;
const show = (r: ReturnType<typeof compare>) => `${logitsOnly(r)}, greedy ${r.same ? "identical" : `DIFFERS after ${r.agree}`}`;
let failures = 0;
if (values["attention-only"]) {
  for (const file of positionals) {
    const cm2 = spawn(file, "cm2"), ka = compare(spawn(file, "cm2coopattn"), cm2);
    const ok = ka.agree > 0 && ka.rel < 5e-3 && !ka.bitwise;
    if (!ok) failures++;
    console.log(`${file.split("/").pop()} on ${cm2.device}: attention_cm2 against attention_coop (cm2 products, ${PROMPT} tokens): ` +
      `${show(ka)}${ka.bitwise ? "; BITWISE EQUAL: attention_cm2 not taken?" : ""}: ${ok ? "OK" : "FAIL"}`);
  }
  process.exit(failures ? 1 : 0);
}
for (const file of positionals) {
  const exact = spawn(file, "exact"), cpu = spawn(file, "cpu"), portable = spawn(file, "portable");
  const coop = spawn(file, "coopmat"), cm2 = spawn(file, "cm2"), cm2f32 = spawn(file, "cm2f32"), tiledAttn = spawn(file, "tiledattn");
  const coopFloat = spawn(file, "coopfloat"), cm2CoopAttn = spawn(file, "cm2coopattn");
  const c = compare(exact, coop), p = compare(exact, portable), cp = compare(portable, coop), cc = compare(exact, cpu);
  // matmul_cm2_T for every product (prefill's default from 64 rows; float16 sums unless cm2f32) where the device has VK_NV_cooperative_matrix2;
  // elsewhere it is the coopmat path again
  const k = compare(exact, cm2), ck = compare(cm2, coop), k32 = compare(exact, cm2f32);
  // attention_coop alone: the same tensor-core products with attention_tiled instead
  // (VELO_GPU_NO_COOP_ATTN), so the two differ only in attention's float16 rounding
  const a = compare(tiledAttn, coop);
  // attention_cm2 alone: cm2 against cm2 with attention_coop (bitwise equal where the device
  // has no VK_NV_cooperative_matrix2, as cm2 and coopmat are then)
  const ka = compare(cm2CoopAttn, cm2);
  // the prefill's logits close and its greedy token the same; later tokens may part on
  // rounding in models this sensitive (see the top of this file), so they are only shown
  const good = (r: ReturnType<typeof compare>) => r.agree > 0 && r.rel < 0.02 && r.shared >= TOP * 0.9;
  const ok = good(c) && good(k) && good(k32) && !cp.bitwise && a.agree > 0 && a.rel < 5e-3 && !a.bitwise
    && ka.agree > 0 && ka.rel < 5e-3 && (!ka.bitwise || ck.bitwise || !cm2AttnCache);
  if (!ok) failures++;
  // llama.cpp's logits are shown, not judged: they say how far the reference's own rounding goes
  const ll = values.llama ? llamaRun(file, exact.prompt) : undefined;
  const llLine = ll === undefined ? ""
    : typeof ll === "string" ? `  llama.cpp: ${ll}\n`
    : `  llama.cpp (flash attention on; ${ll.devices}): ${logitsOnly(compare(exact, { ...exact, tokens: [], top: ll.top }))}\n`;
  console.log(
    `${file.split("/").pop()} on ${coop.device}, against the GPU's float32 path (top-${TOP} range ${c.range.toFixed(3)}, ${exact.tokens.length} tokens):\n` +
      `  coopmat:  ${show(c)}${cp.bitwise ? "; BITWISE EQUAL to portable: coopmat path not taken?" : ""}\n` +
      `  attention_coop against attention_tiled (both with tensor-core products): ${show(a)}${a.bitwise ? "; BITWISE EQUAL: attention_coop not taken?" : ""}\n` +
      `  cm2:      ${show(k)}${ck.bitwise ? " (bitwise equal to coopmat: no VK_NV_cooperative_matrix2 here)" : ""}\n` +
      `  cm2, float32 sums: ${show(k32)}\n` +
      `  attention_cm2 against attention_coop (both with cm2 products): ${show(ka)}${ka.bitwise && !ck.bitwise ? (cm2AttnCache ? "; BITWISE EQUAL: attention_cm2 not taken?" : " (this cache keeps attention_coop)") : ""}\n` +
      `  coopmat, float activations in the matvec products (VELO_GPU_NO_DOT): ${show(compare(exact, coopFloat))}\n` +
      `  portable: ${show(p)}\n` +
      `  cpu:      ${show(cc)}\n` +
      llLine +
      `  prefill ${portable.promptMs.toFixed(1)} ms portable, ${coop.promptMs.toFixed(1)} ms coopmat, ${tiledAttn.promptMs.toFixed(1)} ms coopmat with attention_tiled, ${cm2.promptMs.toFixed(1)} ms cm2 (first request of a process): ${ok ? "OK" : "FAIL"}`,
  );
}
process.exit(failures ? 1 : 0);
