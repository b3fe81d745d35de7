// Greedy continuations of several prompts decoded together in one engine, as JSON on stdout:
// for tests that need a fresh process (the engine reads some switches from its environment).
//   bun tests/helpers/batched-greedy.ts MODEL BACKEND N_TOKENS '[[1,2,3],[1,4]]' ['{"ctxSize":256}']
// (the last argument: engine options over the defaults here)
import { withEngine } from "./engine";

const [file, backend, n, promptsJson, optionsJson] = process.argv.slice(2);
const prompts = JSON.parse(promptsJson!) as number[][];
const options = { ctxSize: 128, backend: backend as "cpu" | "vulkan", threads: 2, maxBatchSize: prompts.length, ...JSON.parse(optionsJson ?? "{}") };
const tokens = await withEngine(file!, options, async (engine) =>
  (await Promise.all(prompts.map((p) => engine.submit({ promptTokens: p, maxTokens: Number(n), temperature: 0, ignoreEos: true }).collect()))).map((r) => r.tokens));
console.log(JSON.stringify(tokens));
