// CPU decode as a fraction of the machine's read bandwidth (issue 21's CPU goal), for Velo and
// llama.cpp, measured together.
//
//   scripts/bun bench/cpu/decode-bandwidth.ts MODEL.gguf [MODEL.gguf ...] [--rounds 3] [-n 64] [-t 2]
//       [--probe-mib 2048] [--no-llamacpp] [--lib A.so,B.so]
//
// A decode step reads every weight once, except the token-embedding table (one row of it),
// unless the output projection is tied to it. The bytes a token reads come from the file's own
// tensor table. This shared VM's bandwidth drifts by ±25 % within minutes. So each decode run
// is placed between two probe runs (bench/cpu/bandwidth.c, the same thread count), and each run's
// fraction uses the mean of the probes on either side of it. Rounds alternate the tools, and the
// report gives each tool's median fraction. The probe reads one anonymous buffer with 32-byte
// loads: a floor on what the machine can read, not its ceiling, so fractions can pass 100 %.
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { readGGUFTensorTable } from "../../src/gguf/reader";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    rounds: { type: "string", default: "3" },
    "n-gen": { type: "string", short: "n", default: "64" },
    threads: { type: "string", short: "t", default: "2" },
    "probe-mib": { type: "string", default: "2048" },
    "no-llamacpp": { type: "boolean", default: false },
    // engine libraries to compare (VELO_LIB), each its own row: --lib /tmp/base.so,.build/release/libVelo.so
    lib: { type: "string" },
    out: { type: "string", default: "bench/out" },
  },
});
if (positionals.length === 0) {
  console.error("usage: scripts/bun bench/cpu/decode-bandwidth.ts MODEL.gguf [...] [--rounds 3] [-n 64] [-t 2] [--no-llamacpp]");
  process.exit(2);
}

const repo = resolve(import.meta.dir, "../..");
const t = values.threads!, n = values["n-gen"]!;
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** Bytes one decode step reads: every tensor but the token embeddings (kept when tied). */
function decodeBytes(path: string): number {
  const table = readGGUFTensorTable(path);
  const size = Bun.file(path).size;
  const byOffset = [...table.tensors].sort((a, b) => a.offset - b.offset);
  const tied = !table.tensors.some((x) => x.name === "output.weight");
  let bytes = 0;
  byOffset.forEach((x, i) => {
    const end = i + 1 < byOffset.length ? byOffset[i + 1]!.offset : size;
    if (x.name !== "token_embd.weight" || tied) bytes += end - x.offset;
  });
  return bytes;
}

// the probe, built once (bench/cpu/bandwidth.sh builds it in the build root where needed)
execFileSync(join(repo, "bench/cpu/bandwidth.sh"), ["64", "1", "1"], { stdio: ["ignore", "ignore", "inherit"] });
const probe = (): number => {
  const out = execFileSync(join(repo, "bench/out/bandwidth"), [values["probe-mib"]!, t, "3"], { encoding: "utf8" });
  return JSON.parse(out).median_gbs as number;
};

const veloCmd = (m: string) => [join(repo, "velo"), "bench", m, "--backend", "cpu", "-p", "0", "-n", n, "-r", "1", "-t", t, "--json"];
const tools: { name: string; cmd: (model: string) => string[]; env?: Record<string, string> }[] = values.lib
  ? values.lib.split(",").map((lib) => ({ name: `velo (${lib})`, cmd: veloCmd, env: { VELO_LIB: resolve(lib) } }))
  : [{ name: "velo", cmd: veloCmd }];
if (!values["no-llamacpp"]) {
  const setup = spawnSync(join(repo, "bench/setup-llamacpp.sh"), { stdio: "inherit" });
  if (setup.status !== 0) throw new Error("could not install the llama.cpp runner (or pass --no-llamacpp)");
  tools.push({ name: "llama.cpp", cmd: (m) => ["node", join(repo, "bench/llamacpp/bench.mjs"), m, "-t", t, "-p", "0", "-n", n, "-r", "1"] });
}

function tokensPerSecond(cmd: string[], env: Record<string, string> = {}): number {
  const p = spawnSync(cmd[0]!, cmd.slice(1), { cwd: repo, encoding: "utf8", env: { ...process.env, ...env, NO_COLOR: "1" } });
  if (p.status !== 0) throw new Error(`${cmd.join(" ")} failed (${p.status}): ${p.stderr.trim().split("\n").at(-1)}`);
  const tg = (JSON.parse(p.stdout).results as { test: string; samples_tps: number[] }[]).find((r) => r.test.startsWith("tg"));
  if (!tg) throw new Error(`${cmd.join(" ")}: no tg result`);
  return median(tg.samples_tps);
}

const rows: string[] = [];
const raw: Record<string, unknown> = {};
for (const model of positionals) {
  const bytes = decodeBytes(model);
  const samples: Record<string, { tps: number; gbs: number; probe: number; fraction: number }[]> = {};
  let before = probe();
  for (let round = 0; round < Number(values.rounds); round++) {
    for (const tool of round % 2 ? [...tools].reverse() : tools) {
      console.error(`${basename(model)}: round ${round + 1}: ${tool.name}`);
      const tps = tokensPerSecond(tool.cmd(model), tool.env);
      const after = probe();
      const bw = (before + after) / 2, gbs = (tps * bytes) / 1e9;
      (samples[tool.name] ??= []).push({ tps, gbs, probe: bw, fraction: gbs / bw });
      before = after;
    }
  }
  raw[model] = { bytes, samples };
  for (const tool of tools) {
    const s = samples[tool.name]!;
    const f = s.map((x) => x.fraction);
    rows.push(
      `| ${basename(model)} | ${(bytes / 1e9).toFixed(3)} | ${tool.name} | ${median(s.map((x) => x.tps)).toFixed(2)} | ` +
        `${median(s.map((x) => x.probe)).toFixed(2)} | **${(100 * median(f)).toFixed(1)} %** (${f.map((x) => (100 * x).toFixed(0)).join(", ")}) |`,
    );
  }
}

mkdirSync(join(repo, values.out!), { recursive: true });
writeFileSync(join(repo, values.out!, "decode-bandwidth.json"), JSON.stringify(raw, null, 2));
console.log(
  [
    `Command: \`scripts/bun bench/cpu/decode-bandwidth.ts ${positionals.map((m) => basename(m)).join(" ")} --rounds ${values.rounds} -n ${n} -t ${t}\`; ${new Date().toISOString()}`,
    "",
    "| model | GB read a token | tool | tg t/s (median) | probe GB/s (median) | decode ÷ probe: median (each run) |",
    "|---|---|---|---|---|---|",
    ...rows,
  ].join("\n"),
);
