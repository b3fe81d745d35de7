// Greedy continuations of several prompts decoded together in one engine, as JSON on stdout:
// for tests that need a fresh process (the engine reads some switches from its environment).
//   bun tests/helpers/batched-greedy.ts MODEL BACKEND N_TOKENS '[[1,2,3],[1,4]]'
import { withEngine } from "./engine";

const [file, backend, n, promptsJson] = process.argv.slice(2);
const prompts = JSON.parse(promptsJson!) as number[][];
const tokens = await withEngine(file!, { ctxSize: 128, backend: backend as "cpu" | "vulkan", threads: 2, maxBatchSize: prompts.length }, async (engine) =>
  (await Promise.all(prompts.map((p) => engine.submit({ promptTokens: p, maxTokens: Number(n), temperature: 0, ignoreEos: true }).collect()))).map((r) => r.tokens));
console.log(JSON.stringify(tokens));
