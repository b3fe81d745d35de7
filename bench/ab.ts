// Two builds of Velo side by side: `velo bench --json` from checkout A and from checkout B in
// alternating rounds (so the machine's drift touches both alike), the median of each test's
// rounds, and B ÷ A. For a change that must not cost speed (a refactor), or one that should win.
//
//   scripts/bun bench/ab.ts --a /tmp/velo-old [--a-lib /tmp/libVelo-old.so] --b . [--rounds 5] -- \
//     MODEL --max-batch-size 16 -p 64 -n 128 -r 3
//
// Everything after `--` goes to `velo bench` (which does its own warm-up and repetitions); a
// library path (VELO_LIB) may replace a checkout's own build. --json prints the figures as data.
import { spawnSync } from "node:child_process";
import { join, resolve } from "node:path";

const argv = process.argv.slice(2);
const cut = argv.indexOf("--");
if (cut < 0) throw new Error("usage: bench/ab.ts --a DIR [--a-lib LIB] --b DIR [--b-lib LIB] [--rounds N] [--json] -- BENCH ARGS");
const own = argv.slice(0, cut), benchArgs = argv.slice(cut + 1);
const flag = (name: string) => {
  const i = own.indexOf(name);
  return i >= 0 ? own[i + 1] : undefined;
};
const sides = (["a", "b"] as const).map((s) => ({ name: s.toUpperCase(), dir: resolve(flag(`--${s}`) ?? "."), lib: flag(`--${s}-lib`) }));
const rounds = Number(flag("--rounds") ?? 5);

/** One test's figures from one run: prompt and generation tokens per second. */
type Figures = Map<string, { pp: number; tg: number }>;

function run(side: (typeof sides)[number]): Figures {
  const env = { ...process.env, ...(side.lib ? { VELO_LIB: resolve(side.lib) } : {}) };
  const r = spawnSync(join(side.dir, "velo"), ["bench", "--json", ...benchArgs], { env, encoding: "utf8", maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`velo bench (${side.name}: ${side.dir}) failed: ${r.stderr}`);
  const out = JSON.parse(r.stdout) as { results: Record<string, number | string>[] };
  const figures: Figures = new Map();
  for (const x of out.results) {
    // batched runs give per-batch aggregates; plain runs one figure per test (pp512, tg128)
    if (typeof x.batch === "number") figures.set(`batch ${x.batch}`, { pp: x.s_pp_tps as number, tg: x.s_tg_tps as number });
    else figures.set(String(x.test), { pp: x.avg_tps as number, tg: x.avg_tps as number });
  }
  return figures;
}

const samples = sides.map(() => new Map<string, { pp: number[]; tg: number[] }>());
for (let i = 0; i < rounds; i++) {
  // A then B, then B then A: neither always runs on the warmer machine
  const order = i % 2 === 0 ? [0, 1] : [1, 0];
  for (const k of order) {
    for (const [test, f] of run(sides[k]!)) {
      const s = samples[k]!.get(test) ?? { pp: [], tg: [] };
      s.pp.push(f.pp);
      s.tg.push(f.tg);
      samples[k]!.set(test, s);
    }
  }
  process.stderr.write(`round ${i + 1}/${rounds} done\n`);
}

const median = (xs: number[]) => {
  const s = [...xs].sort((p, q) => p - q);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const rows = [...samples[0]!.keys()].map((test) => {
  const a = samples[0]!.get(test)!, b = samples[1]!.get(test)!;
  const [ppA, ppB, tgA, tgB] = [median(a.pp), median(b.pp), median(a.tg), median(b.tg)];
  return { test, pp_a: ppA, pp_b: ppB, pp_ratio: ppB / ppA, tg_a: tgA, tg_b: tgB, tg_ratio: tgB / tgA };
});
if (own.includes("--json")) {
  console.log(JSON.stringify({ a: sides[0], b: sides[1], rounds, bench: benchArgs, rows }, null, 2));
} else {
  console.log(`A: ${sides[0]!.dir}${sides[0]!.lib ? ` (${sides[0]!.lib})` : ""}\nB: ${sides[1]!.dir}${sides[1]!.lib ? ` (${sides[1]!.lib})` : ""}\n` +
    `velo bench ${benchArgs.join(" ")}; medians of ${rounds} alternating rounds (t/s)\n`);
  console.log("| test | pp A | pp B | B/A | tg A | tg B | B/A |\n|---|---:|---:|---:|---:|---:|---:|");
  for (const r of rows) {
    console.log(`| ${r.test} | ${r.pp_a.toFixed(1)} | ${r.pp_b.toFixed(1)} | ${r.pp_ratio.toFixed(3)} | ${r.tg_a.toFixed(1)} | ${r.tg_b.toFixed(1)} | ${r.tg_ratio.toFixed(3)} |`);
  }
}
