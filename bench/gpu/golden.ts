// Greedy outputs of the golden models on a GPU backend against the CPU backend and against
// llama.cpp's (../shared/models/golden), for machines where the test suite cannot run (the
// H100 has no Swift toolchain): bun bench/gpu/golden.ts [--backend vulkan]
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Engine, type EngineOptions } from "../../src/engine/engine";
import { Model } from "../../src/engine/model";

const { values } = parseArgs({ options: { backend: { type: "string", default: "vulkan" } } });
const models = process.env.VELO_TEST_DATA ?? join(import.meta.dir, "..", "..", "tests", "data");
const golden = JSON.parse(readFileSync(join(models, "golden", "greedy_golden.json"), "utf8")) as Record<
  string, { file: string; cases: { prompt_ids_with_bos: number[]; greedy_ids: number[] }[] }>;

async function greedy(file: string, opts: EngineOptions, prompt: number[], n: number) {
  const m = Model.open(join(models, file));
  const e = Engine.create(m, { ctxSize: 256, ...opts });
  try {
    e.waitForKernels();
    const r = await e.submit({ promptTokens: prompt, maxTokens: n, temperature: 0, ignoreEos: true }).collect();
    return { tokens: r.tokens, device: String((e.stats() as unknown as { device: string }).device) };
  } finally {
    e.close();
    m.close();
  }
}

let failures = 0;
for (const [name, g] of Object.entries(golden)) {
  if (!Array.isArray(g?.cases)) continue; // notes and the speculation record, not a model
  if (!existsSync(join(models, g.file))) {
    // bench/gpu/pack.sh leaves the larger files out (the 64 MiB a device call carries)
    console.log(`${name}: not packed (${g.file}), not checked`);
    continue;
  }
  try {
    for (const c of g.cases) {
      const gpu = await greedy(g.file, { backend: values.backend as EngineOptions["backend"] }, c.prompt_ids_with_bos, c.greedy_ids.length);
      const cpu = await greedy(g.file, { backend: "cpu" }, c.prompt_ids_with_bos, c.greedy_ids.length);
      const same = JSON.stringify(gpu.tokens) === JSON.stringify(cpu.tokens), golden = JSON.stringify(gpu.tokens) === JSON.stringify(c.greedy_ids);
      if (!same || !golden) failures++;
      console.log(`${name} on ${gpu.device}: ${same ? "identical to CPU" : "DIFFERS from CPU"}, ${golden ? "identical to llama.cpp" : "DIFFERS from llama.cpp"}`);
    }
  } catch (e) {
    failures++;
    console.log(`${name}: FAILED (${(e as Error).message})`);
  }
}
process.exit(failures ? 1 : 0);
