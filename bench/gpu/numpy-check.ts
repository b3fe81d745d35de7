// How far each backend's prefill logits are from a float64 numpy forward pass
// (bench/gpu/numpy_logits.py over ../shared/tools/ref_llama.py) on one model: the CPU backend,
// the GPU's float32 path (VELO_GPU_NO_COOPMAT=1 VELO_GPU_NO_DOT=1) and the GPU's default
// path, each in its own process (coopmat-check.ts's child mode, same 100-token prompt).
// Prints max |Δlogit| over numpy's top 1000, relative to their range. Needs python3 with numpy,
// and memory for the dequantized weights in float64 (~9 GB for a 1.1B model).
//   bun bench/gpu/numpy-check.ts MODEL.gguf [--gpu-only]
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

const { values, positionals } = parseArgs({ allowPositionals: true, options: { "gpu-only": { type: "boolean", default: false } } });
if (positionals.length !== 1) {
  console.error("usage: bun bench/gpu/numpy-check.ts MODEL.gguf [--gpu-only]");
  process.exit(2);
}
const file = positionals[0]!;
type Run = { device: string; prompt: number[]; top: [number, number][] };

function run(label: string, args: string[], env: Record<string, string>): [string, Run] {
  const e = { ...process.env, ...env } as Record<string, string>;
  const r = Bun.spawnSync([process.execPath, join(import.meta.dir, "coopmat-check.ts"), "--child", "--gen", "1", ...args, file], { env: e, stderr: "inherit" });
  if (r.exitCode !== 0) throw new Error(`${label} run failed (${r.exitCode})`);
  const lines = r.stdout.toString().trim().split("\n");
  return [label, JSON.parse(lines[lines.length - 1]!) as Run];
}

const runs = [
  ...(values["gpu-only"] ? [] : [run("cpu", ["--cpu"], {})]),
  run("gpu float32", [], { VELO_GPU_NO_COOPMAT: "1", VELO_GPU_NO_DOT: "1" }),
  run("gpu default", [], {}),
];
const dir = mkdtempSync(join(tmpdir(), "velo-numpy-"));
writeFileSync(join(dir, "prompt.json"), JSON.stringify({ prompt: runs[0]![1].prompt }));
const py = Bun.spawnSync(["python3", join(import.meta.dir, "numpy_logits.py"), file, join(dir, "prompt.json"), join(dir, "ref.npy")], { stderr: "inherit" });
if (py.exitCode !== 0) throw new Error(`numpy_logits.py failed (${py.exitCode})`);
// ref.npy: a 1-D float64 array after numpy's 128-byte (v1) or longer header
const raw = readFileSync(join(dir, "ref.npy"));
const headerLen = raw.readUInt16LE(8) + 10;
const ref = new Float64Array(raw.buffer.slice(raw.byteOffset + headerLen, raw.byteOffset + raw.length));
const top = Array.from(ref.keys()).sort((a, b) => ref[b]! - ref[a]!).slice(0, 1000);
const range = ref[top[0]!]! - ref[top[top.length - 1]!]!;
console.log(`${file.split("/").pop()} (${runs[runs.length - 1]![1].device}), against numpy float64 (top-1000 range ${range.toFixed(3)}):`);
for (const [label, r] of runs) {
  const got = new Map(r.top);
  let max = 0, shared = 0;
  for (const id of top) {
    const v = got.get(id);
    if (v === undefined) continue;
    shared++;
    max = Math.max(max, Math.abs(v - ref[id]!));
  }
  console.log(`  ${label.padEnd(12)} max |Δlogit| ${max.toExponential(3)} (relative ${(max / range).toExponential(3)}; ${shared} of numpy's top 1000 in its list), argmax ${r.top[0]![0] === top[0] ? "same" : "DIFFERS"}`);
}
