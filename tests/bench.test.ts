// `velo bench`: llama-bench-style results as JSON, and the profile it reports measuring only
// the runs after the warm-up (the engine's resetProfile).
import { describe, expect, test } from "bun:test";
import { warmUp } from "../cli/commands/bench";
import { runCli } from "./helpers/cli";
import { withEngine } from "./helpers/engine";
import { testData } from "./helpers/paths";

describe("velo bench", () => {
  test("pp and tg results with a profile of the measured runs", async () => {
    const r = await runCli(["bench", testData("stories260K.gguf"), "-p", "16", "-n", "8", "-r", "2", "--threads", "2", "--profile", "--json"]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.results.map((x: { test: string }) => x.test)).toEqual(["pp16", "tg8"]);
    for (const x of j.results) {
      expect(x.samples_tps).toHaveLength(2);
      expect(x.avg_tps).toBeGreaterThan(0);
    }
    // the CPU backend times its products and whole steps
    expect(j.profile_ms.matmul).toBeGreaterThan(0);
    expect(j.profile_ms.step).toBeGreaterThan(0);
  });

  test("batched decode: every size up to the largest, the profile of the largest alone", async () => {
    const r = await runCli(["bench", testData("stories260K.gguf"), "--max-batch-size", "3", "-p", "8", "-n", "6", "--threads", "2", "--profile", "--json"]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.results.map((x: { batch: number }) => x.batch)).toEqual([1, 2, 3]);
    expect(j.profile_batch).toBe(3);
    // the steps profiled fit inside the B=3 run's wall time (sizes 1 and 2 came before it)
    const last = j.results.at(-1);
    expect(j.profile_ms.step).toBeGreaterThan(0);
    expect(j.profile_ms.step).toBeLessThanOrEqual((last.t_pp_s + last.t_tg_s) * 1000);
  });

  test("a warm-up repeats for its minimum time, and runs once when that is longer", async () => {
    let n = 0;
    await warmUp(async () => { n++; await Bun.sleep(5); }, 60);
    expect(n).toBeGreaterThan(3);
    n = 0;
    await warmUp(async () => { n++; await Bun.sleep(80); }, 60);
    expect(n).toBe(1);
  });

  test("resetProfile clears what the engine measured", async () => {
    await withEngine("stories260K.gguf", { ctxSize: 64, threads: 2, profile: true }, async (engine) => {
      await engine.submit({ promptTokens: [1, 2, 3, 4], maxTokens: 4, temperature: 0, ignoreEos: true }).collect();
      expect(engine.stats().profile_ms!.matmul).toBeGreaterThan(0);
      engine.resetProfile();
      const after = engine.stats().profile_ms!;
      expect(Object.values(after).every((v) => v === 0)).toBe(true);
      await engine.submit({ promptTokens: [1, 2, 3], maxTokens: 2, temperature: 0, ignoreEos: true }).collect();
      expect(engine.stats().profile_ms!.matmul).toBeGreaterThan(0);
    });
  });

  test("an engine without profiling reports none", async () => {
    await withEngine("stories260K.gguf", { ctxSize: 64, threads: 2 }, async (engine) => {
      engine.resetProfile();
      expect(engine.stats().profile_ms ?? null).toBeNull();
    });
  });
});
