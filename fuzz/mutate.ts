// mutate.ts — whole GGUF files with 8-byte fields overwritten (header, metadata, tensor table
// and tensor data alike), each run as a user runs it: `velo generate` greedy and sampled, and
// every fifth one under `velo serve` with two requests. What must hold for every mutant:
// - generate exits 0, or 1 with a `velo: error:` line: never a signal, a trap or a hang;
// - serve either refuses the file at start (exit 1, with the reason) or answers each request
//   with 200 or an error body (a 500 names non-finite logits), and still answers /health after.
// A failing mutant is kept in fuzz/.build/mutants/ with its seed and offsets; copy it into
// fuzz/regressions/mutate/ once fixed (each file there is replayed first, every run).
//
//   bun fuzz/mutate.ts [--count N] [--seed S] [--model FILE]
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  options: {
    count: { type: "string", default: "40" },
    seed: { type: "string", default: "1" },
    model: { type: "string", default: join(import.meta.dir, "..", "tests", "data", "stories260K.gguf") },
  },
});
const repo = join(import.meta.dir, "..");
const out = join(import.meta.dir, ".build", "mutants");
mkdirSync(out, { recursive: true });
const original = readFileSync(values.model);

// xorshift64*: the same mutants for the same seed
let state = BigInt(values.seed) * 0x9e3779b97f4a7c15n + 1n;
function next(): number {
  state ^= state >> 12n;
  state ^= (state << 25n) & 0xffffffffffffffffn;
  state ^= state >> 27n;
  return Number(((state * 0x2545f4914f6cdd1dn) & 0xffffffffffffffffn) >> 11n) / 2 ** 53;
}

// What an 8-byte field becomes: values that break counts, lengths, offsets, types and floats.
const SPECIAL: bigint[] = [0n, 1n, 0xffffffffffffffffn, 0x7fffffffffffffffn, 0x8000000000000000n, 0xffffffffn, 0x100000000n,
  0x7fc000007fc00000n /* two float NaNs */, 0x7f8000007f800000n /* two +inf */, 0x7e007e007e007e00n /* four f16 NaNs */, 0x7c007c007c007c00n];
function mutant(): { bytes: Buffer; edits: string[] } {
  const bytes = Buffer.from(original);
  const edits: string[] = [];
  const n = 1 + Math.floor(next() * 3);
  for (let i = 0; i < n; i++) {
    // half the edits in the first 64 KiB (header, metadata, tensor table), half anywhere
    const span = next() < 0.5 ? Math.min(65536, bytes.length) : bytes.length;
    const at = Math.floor(next() * (span - 8)) & ~3;
    const v = next() < 0.6 ? SPECIAL[Math.floor(next() * SPECIAL.length)]! : BigInt(Math.floor(next() * 2 ** 32)) << 32n | BigInt(Math.floor(next() * 2 ** 32));
    bytes.writeBigUInt64LE(v, at);
    edits.push(`${at}=0x${v.toString(16)}`);
  }
  return { bytes, edits };
}

const cli = [process.execPath, join(repo, "cli", "index.ts")];
const env = { ...process.env, NO_COLOR: "1", VELO_BACKEND: process.env.VELO_BACKEND ?? "cpu" };

async function run(args: string[], ms: number): Promise<{ code: number | null; signal: string | null; stderr: string; timedOut: boolean }> {
  const p = Bun.spawn([...cli, ...args], { stdout: "ignore", stderr: "pipe", env });
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    p.kill(9);
  }, ms);
  const stderr = await new Response(p.stderr).text();
  await p.exited;
  clearTimeout(timer);
  return { code: p.exitCode, signal: p.signalCode, stderr, timedOut };
}

/** How the runs ended: "ran" (exit 0), or the first words of the error. */
const endings = new Map<string, number>();
function tally(r: Awaited<ReturnType<typeof run>>): void {
  const m = r.stderr.match(/velo: error: (?:\S+\.gguf: )?(.*)/)?.[1];
  const e = r.code === 0 ? "ran" : m ? m.replace(/'[^']*'/g, "'…'").replace(/\d+/g, "N").slice(0, 56) : `exit ${r.code ?? r.signal}`;
  endings.set(e, (endings.get(e) ?? 0) + 1);
}

/** What is wrong with how `velo generate` ended, or null. */
function generateVerdict(r: Awaited<ReturnType<typeof run>>): string | null {
  tally(r);
  if (r.timedOut) return "hung (killed after 60 s)";
  if (r.signal) return `killed by ${r.signal}: ${r.stderr.slice(-300)}`;
  if (r.code === 0) return null;
  if (r.code === 1 && /velo: error: /.test(r.stderr)) return null;
  return `exit ${r.code}: ${r.stderr.slice(-300)}`;
}

async function serveVerdict(file: string): Promise<string | null> {
  const p = Bun.spawn([...cli, "serve", file, "--port", "0", "--ctx-size", "256", "--max-batch-size", "2"], { stdout: "ignore", stderr: "pipe", env });
  const reader = (p.stderr as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  let seen = "";
  const deadline = Date.now() + 60_000;
  try {
    while (Date.now() < deadline) {
      const { value, done } = await Promise.race([reader.read(), Bun.sleep(deadline - Date.now()).then(() => ({ value: undefined, done: true }))]);
      if (done) {
        await p.exited;
        if (p.signalCode) return `serve killed by ${p.signalCode} at start: ${seen.slice(-300)}`;
        return p.exitCode === 1 && /velo: error: /.test(seen) ? null : `serve ended at start with ${p.exitCode}: ${seen.slice(-300)}`;
      }
      seen += dec.decode(value);
      const m = seen.match(/on (http:\/\/[\d.]+:\d+)/);
      if (!m) continue;
      for (const temperature of [0, 1]) {
        const res = await fetch(`${m[1]}/v1/completions`, {
          method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ model: file.split("/").at(-1)!.replace(/\.gguf$/, ""), prompt: "Once upon a time", max_tokens: 8, temperature, seed: 1 }),
          signal: AbortSignal.timeout(30_000),
        }).catch((e: Error) => e);
        if (res instanceof Error) return `request failed: ${res.message} (${p.signalCode ?? p.exitCode ?? "running"})`;
        const body = (await res.json().catch(() => null)) as { error?: { message?: string } } | null;
        if (res.status !== 200 && !(res.status === 500 && body?.error?.message)) return `answered ${res.status}: ${JSON.stringify(body).slice(0, 200)}`;
      }
      const health = await fetch(`${m[1]}/health`).then((r) => r.status, () => 0);
      return health === 200 ? null : `/health ${health} after the requests (${p.signalCode ?? p.exitCode ?? "running"})`;
    }
    return "serve hung at start (60 s)";
  } finally {
    p.kill(9);
    await p.exited;
  }
}

async function check(file: string, serve: boolean): Promise<string[]> {
  const problems: string[] = [];
  for (const temp of ["0", "0.8"]) {
    const v = generateVerdict(await run(["generate", file, "Once upon a time", "-n", "8", "--temp", temp, "-c", "256", "--seed", "1"], 60_000));
    if (v) problems.push(`generate --temp ${temp}: ${v}`);
  }
  if (serve) {
    const v = await serveVerdict(file);
    if (v) problems.push(`serve: ${v}`);
  }
  return problems;
}

let failed = 0;
const regressions = join(import.meta.dir, "regressions", "mutate");
if (existsSync(regressions)) {
  for (const f of readdirSync(regressions).filter((f) => f.endsWith(".gguf"))) {
    const problems = await check(join(regressions, f), true);
    if (problems.length) {
      failed++;
      console.log(`mutate: regression ${f} FAILED\n  ${problems.join("\n  ")}`);
    }
  }
}
const count = Number(values.count);
for (let i = 0; i < count; i++) {
  const { bytes, edits } = mutant();
  const file = join(out, `m${values.seed}-${i}.gguf`);
  writeFileSync(file, bytes);
  const problems = await check(file, i % 5 === 0);
  if (problems.length) {
    failed++;
    renameSync(file, join(out, `FAILED-m${values.seed}-${i}.gguf`));
    console.log(`mutate: mutant ${i} (seed ${values.seed}; ${edits.join(" ")}) FAILED\n  ${problems.join("\n  ")}`);
  } else {
    rmSync(file);
  }
}
if (process.env.VELO_MUTATE_REPORT) for (const [e, n] of [...endings].sort((a, b) => b[1] - a[1])) console.log(`  ${String(n).padStart(4)}  ${e}`);
console.log(`mutate: ${count} mutants of ${values.model.split("/").at(-1)} (seed ${values.seed}), ${failed} failed`);
process.exit(failed ? 1 : 0);
