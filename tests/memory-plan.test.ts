// The fit check before load: stats().memory (weights + KV + scratch on the device), the
// model's trained context by default, defaults that shrink to fit (context, then batch) and
// say so, refusals with the numbers, and the plan on the CLI (--memory-budget, --json).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Engine, type EngineOptions } from "../src/engine/engine";
import { Model } from "../src/engine/model";
import { synthesize } from "../src/gguf/synth";
import { runCli } from "./helpers/cli";
import { repoRoot, testData } from "./helpers/paths";

let dir = "";
let long = ""; // a random Gemma 3 of test shape, trained (its metadata says) at 131072 positions
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "velo-plan-"));
  long = join(dir, "gemma3.gguf");
  synthesize({ out: long, arch: "gemma3", shape: "test", type: "f32", seed: 3 });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function withEngine<T>(path: string, opts: EngineOptions, body: (e: Engine) => T): T {
  const m = Model.open(path);
  try {
    const e = Engine.create(m, opts);
    try {
      return body(e);
    } finally {
      e.close();
    }
  } finally {
    m.close();
  }
}

const MiB = 1 << 20;

describe("the memory plan", () => {
  test("counts weights, KV and scratch on the device it runs on (CPU and Vulkan)", () => {
    for (const backend of ["cpu", "vulkan"] as const) {
      withEngine(testData("stories260K.gguf"), { backend, maxBatchSize: 3, threads: 2 }, (e) => {
        const s = e.stats();
        const p = s.memory!;
        expect(p.backend).toBe(backend);
        expect(p.device).toBe(backend === "cpu" ? `CPU (${s.device})` : (s.device as unknown as string));
        expect(p.context_size).toBe(2048); // the model's (metadata) context, as nothing was asked
        expect(s.context_size).toBe(2048);
        expect(p.max_batch_size).toBe(3);
        expect(p.kv_pages).toBe(s.kv_pages_total);
        expect(p.kv_bytes).toBe(s.kv_pages_total * s.kv_bytes_per_page);
        expect(p.weights_bytes).toBeGreaterThan(0.9 * MiB);
        expect(p.scratch_bytes).toBeGreaterThan(0);
        expect(p.needed_bytes).toBe(p.weights_bytes + p.kv_bytes + p.scratch_bytes);
        expect(p.needed_bytes).toBeLessThanOrEqual(p.budget_bytes);
        expect(p.kv_types).toBe("f16");
        expect(p.notes).toEqual([]);
        expect(p.summary).toMatch(/^weights 1\.1 MiB \+ KV 3\.8 MiB \(f16, 3 × 2048\) \+ scratch [\d.]+ [KM]iB on /);
        expect(p.summary.endsWith(` on ${p.device}`)).toBe(true);
      });
    }
  });

  test("the model's trained context by default, shortened to fit and said so", () => {
    withEngine(long, { threads: 2 }, (e) => {
      expect(e.stats().context_size).toBe(131072);
      expect(e.stats().memory!.notes).toEqual([]);
    });
    withEngine(long, { threads: 2, memoryBudget: 160 * 2 ** 20 }, (e) => {
      const p = e.stats().memory!;
      expect(p.context_size).toBeLessThan(131072);
      expect(p.context_size).toBeGreaterThanOrEqual(4096);
      expect(p.context_size % 256).toBe(0);
      expect(p.notes).toEqual([`context 131072 → ${p.context_size} to fit`]);
      expect(p.needed_bytes).toBeLessThanOrEqual(160 * MiB);
      expect(e.stats().context_size).toBe(p.context_size);
    });
  });

  test("then a default batch shrinks; an explicit one is kept or refused with the numbers", () => {
    // 6 layers of 2 KV heads of 64 in f16: 3 KiB a position; at 4096 positions 12 MiB a sequence
    withEngine(long, { threads: 2, maxBatchSize: 8, batchAuto: true, memoryBudget: 80 * 2 ** 20 }, (e) => {
      const p = e.stats().memory!;
      expect(p.context_size).toBe(4096);
      expect(p.max_batch_size).toBeGreaterThan(1);
      expect(p.max_batch_size).toBeLessThan(8);
      expect(p.notes).toEqual([`context 131072 → 4096 to fit`, `batch 8 → ${p.max_batch_size} to fit`]);
      expect(e.stats().max_batch_size).toBe(p.max_batch_size);
    });
    // the batch asked for by name stays; the context goes below 4096 instead
    withEngine(long, { threads: 2, maxBatchSize: 8, memoryBudget: 80 * 2 ** 20 }, (e) => {
      const p = e.stats().memory!;
      expect(p.max_batch_size).toBe(8);
      expect(p.context_size).toBeLessThan(4096);
      expect(p.notes).toEqual([`context 131072 → ${p.context_size} to fit`]);
    });
    const m = Model.open(long);
    try {
      expect(() => Engine.create(m, { threads: 2, ctxSize: 65536, maxBatchSize: 8, memoryBudget: 80 * 2 ** 20 })).toThrow(
        /^not enough memory on CPU \(.*\): weights [\d.]+ MiB \+ KV 1\.5 GiB \(f16, 8 × 65536\) \+ scratch [\d.]+ MiB = [\d.]+ GiB, but 80\.0 MiB is usable .* Lower --ctx-size or --max-batch-size, or store K\/V in fewer bits/,
      );
      expect(() => Engine.create(m, { threads: 2, memoryBudget: 1 * 2 ** 20 })).toThrow(/The weights alone do not fit/);
      // q8_0 K/V fit where f16 does not
      withEngine(long, { threads: 2, ctxSize: 16384, memoryBudget: 80 * 2 ** 20, cacheTypeK: "q8_0", cacheTypeV: "q8_0" }, (e) => {
        expect(e.stats().memory!.summary).toMatch(/KV [\d.]+ MiB \(q8_0, 1 × 16384\)/);
      });
      expect(() => Engine.create(m, { threads: 2, ctxSize: 16384, memoryBudget: 50 * 2 ** 20, cacheTypeK: "f16", cacheTypeV: "f16" })).toThrow(/not enough memory/);
    } finally {
      m.close();
    }
  });
});

describe("the CLI", () => {
  test("generate says what it shortened and --json carries the plan; bench --json too", async () => {
    const r = await runCli(["generate", long, "hello", "-n", "4", "--temp", "0", "--json", "--memory-budget", "160", "-t", "2"]);
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.memory.notes).toHaveLength(1);
    expect(out.memory.notes[0]).toMatch(/^context 131072 → \d+ to fit$/);
    expect(r.stderr).toContain(`velo: ${out.memory.notes[0]}`);
    expect(out.memory.summary).toMatch(/^weights .* \+ KV .* \(f16, 1 × \d+\) \+ scratch .* on CPU \(/);
    // -c: an explicit context that does not fit is an error with the numbers, not a shrink
    const bad = await runCli(["generate", long, "hello", "-n", "4", "--memory-budget", "160", "-c", "131072", "-t", "2"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/velo: error: not enough memory on CPU .*\(f16, 1 × 131072\)/);
    const b = await runCli(["bench", testData("stories260K.gguf"), "-p", "16", "-n", "4", "-r", "1", "--json", "-t", "2", "--cache-type-k", "q8_0"]);
    expect(b.code).toBe(0);
    const bj = JSON.parse(b.stdout);
    expect(bj.memory.kv_types).toBe("q8_0/f16");
    expect(bj.memory.summary).toMatch(/\(q8_0\/f16, 1 × \d+\)/);
  });
});

/** Starts `velo serve`, returns its stderr up to the "serving … on http://" line, and stops it. */
async function serveBanner(args: string[], env: Record<string, string> = {}): Promise<{ text: string; code: number | null }> {
  const proc = Bun.spawn([process.execPath, join(repoRoot, "cli", "index.ts"), "serve", ...args, "--port", "0"], {
    stdout: "ignore", stderr: "pipe", env: { ...process.env, NO_COLOR: "1", ...env },
  });
  const reader = (proc.stderr as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  let text = "";
  while (!/on http:\/\/[\d.]+:\d+/.test(text)) {
    const { value, done } = await reader.read();
    if (done) return { text, code: await proc.exited };
    text += dec.decode(value);
  }
  proc.kill();
  await proc.exited;
  return { text, code: null };
}

describe("serve", () => {
  test("-c / --ctx-size / VELO_CTX_SIZE; by default the model's context, the plan in its banner", async () => {
    const model = testData("stories260K.gguf");
    const plain = await serveBanner([model, "-t", "2"]);
    expect(plain.text).toMatch(/^weights 1\.1 MiB \+ KV 10\.0 MiB \(f16, 8 × 2048\) \+ scratch [\d.]+ MiB on CPU \(/m);
    expect(plain.text).toMatch(/velo serving .* \(batch 8, context 2048, /);
    const c = await serveBanner([model, "-t", "2", "-c", "512", "--cache-type-v", "q8_0"]);
    expect(c.text).toMatch(/\(f16\/q8_0, 8 × 512\)/);
    expect(c.text).toMatch(/batch 8, context 512, /);
    const env = await serveBanner([model, "-t", "2", "--ctx-size", "300"], { VELO_CTX_SIZE: "999" });
    expect(env.text).toMatch(/context 300, /); // the flag over the variable
    const envOnly = await serveBanner([model, "-t", "2"], { VELO_CTX_SIZE: "384" });
    expect(envOnly.text).toMatch(/context 384, /);
    // one name per thing: the old --context-len is gone
    const old = await runCli(["serve", model, "--context-len", "256"]);
    expect(old.code).not.toBe(0);
    expect(old.stderr).toContain("unknown option '--context-len'");
    expect((await runCli(["serve", "--help"])).stdout).not.toContain("--context-len");
  });

  test("a default batch shrinks to fit and says so; an explicit one that cannot fit is refused", async () => {
    const shrunk = await serveBanner([long, "-t", "2", "--memory-budget", "80"]);
    expect(shrunk.text).toContain("velo: context 131072 → 4096 to fit");
    expect(shrunk.text).toMatch(/velo: batch 8 → \d to fit/);
    const refused = await serveBanner([long, "-t", "2", "--memory-budget", "80", "--max-batch-size", "8", "-c", "8192"]);
    expect(refused.code).toBe(1);
    expect(refused.text).toMatch(/velo: error: not enough memory on CPU .*\(f16, 8 × 8192\)/);
  });
});
