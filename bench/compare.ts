// Velo and llama.cpp side by side on the same GGUF files, in the same run.
//
//   node_modules/bun/bin/bun.exe bench/compare.ts [--arch llama] [--shape 1b] [--types q4_0,q8_0,q4_k]
//       [-p 512] [-n 128] [-r 3] [--rounds 2] [--threads 2] [--dir /tmp/velo-bench]
//
// Models are random-weight GGUFs of a real shape written by src/gguf/synth.ts (cached in
// --dir): --arch llama (1b, 3b, 8b), llama31 (8b), qwen2 (7b), qwen3 (8b), gemma2 (9b),
// gemma3 (1b), phi3 (mini), mixtral (8x7b), qwen3moe (30b_a3b, and 30b_a3b_12l: its first 12
// of 48 layers), qwen2moe (a2.7b). Each round runs Velo's `velo bench --json` and then llama.cpp's runner
// (bench/llamacpp/bench.mjs, prebuilt CPU llama.cpp via node-llama-cpp) on one model, so the
// two see the same machine state; rounds alternate and every sample of every round is pooled.
// Both tools warm up first. Reported: medians of the pooled samples, and Velo / llama.cpp.
// Runs on the host's Bun: `./velo` enters the build root by itself where it has to.
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { synthesize } from "../src/gguf/synth";

const { values } = parseArgs({
  options: {
    arch: { type: "string", default: "llama" },
    shape: { type: "string", default: "1b" },
    types: { type: "string", default: "q4_0,q8_0,q4_k" },
    "n-prompt": { type: "string", short: "p", default: "512" },
    "n-gen": { type: "string", short: "n", default: "128" },
    repetitions: { type: "string", short: "r", default: "3" },
    rounds: { type: "string", default: "2" },
    threads: { type: "string", short: "t", default: "2" },
    dir: { type: "string", default: "/tmp/velo-bench" },
    out: { type: "string", default: "bench/out" },
  },
});

const repo = resolve(import.meta.dir, "..");
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

interface Result {
  test: string;
  samples_tps: number[];
}

async function run(cmd: string[]): Promise<{ results: Result[] }> {
  const p = Bun.spawn(cmd, { cwd: repo, stdout: "pipe", stderr: "pipe", env: { ...process.env, NO_COLOR: "1" } });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`${cmd.join(" ")} failed (${code}): ${err.trim().split("\n").at(-1)}`);
  return JSON.parse(out);
}

mkdirSync(values.dir!, { recursive: true });
mkdirSync(join(repo, values.out!), { recursive: true });
const proc = Bun.spawnSync([join(repo, "bench/setup-llamacpp.sh")], { stdout: "inherit", stderr: "inherit" });
if (proc.exitCode !== 0) throw new Error("could not install the llama.cpp runner");

const p = values["n-prompt"]!, n = values["n-gen"]!, r = values.repetitions!, t = values.threads!;
const rows: string[] = [];
const raw: Record<string, unknown> = {};
for (const type of values.types!.split(",")) {
  const arch = values.arch!;
  const model = join(values.dir!, `${arch === "llama" ? "" : arch + "-"}${values.shape}-${type}.gguf`);
  if (!existsSync(model)) {
    console.error(`synthesizing ${model}`);
    synthesize({ out: model, arch, shape: values.shape!, type });
  }
  const samples: Record<string, { velo: number[]; llama: number[] }> = {};
  for (let round = 0; round < Number(values.rounds); round++) {
    console.error(`${type}: round ${round + 1}: velo`);
    const velo = await run([join(repo, "velo"), "bench", model, "-p", p, "-n", n, "-r", r, "-t", t, "--json"]);
    console.error(`${type}: round ${round + 1}: llama.cpp`);
    const llama = await run(["node", join(repo, "bench/llamacpp/bench.mjs"), model, "-t", t, "-p", p, "-n", n, "-r", r]);
    for (const [who, res] of [["velo", velo], ["llama", llama]] as const) {
      for (const x of res.results) {
        samples[x.test] ??= { velo: [], llama: [] };
        samples[x.test]![who].push(...x.samples_tps);
      }
    }
  }
  raw[type] = samples;
  for (const [test, s] of Object.entries(samples)) {
    const v = median(s.velo), l = median(s.llama);
    rows.push(`| ${values.arch === "llama" ? "" : values.arch + " "}${values.shape} ${type.toUpperCase()} | ${test} | ${v.toFixed(2)} | ${l.toFixed(2)} | ${(v / l).toFixed(2)}× |`);
  }
}

const cpu = cpus()[0]?.model ?? "unknown CPU";
const report = [
  `Machine: ${cpu}, ${cpus().length} cores; ${t} threads; ${new Date().toISOString().slice(0, 10)}.`,
  `Command: \`bun bench/compare.ts --arch ${values.arch} --shape ${values.shape} --types ${values.types} -p ${p} -n ${n} -r ${r} --rounds ${values.rounds} -t ${t}\``,
  "",
  "| model | test | Velo t/s (median) | llama.cpp t/s (median) | Velo / llama.cpp |",
  "|---|---|---|---|---|",
  ...rows,
].join("\n");
writeFileSync(join(repo, values.out!, `compare-${values.arch === "llama" ? "" : values.arch + "-"}${values.shape}.json`), JSON.stringify(raw, null, 2));
console.log(report);
