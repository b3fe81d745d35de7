// Continuations of several prompts decoded together in one engine, as JSON on stdout: for tests
// that need a fresh process (the engine reads some switches from its environment).
//   bun tests/helpers/batched-greedy.ts MODEL BACKEND N_TOKENS '[[1,2,3],[1,4]]' ['{"ctxSize":256}'] ['[{}, {"logprobs":2}]']
// (the fifth argument: engine options over the defaults here; the sixth: each request's settings
// over greedy decoding). Prints the tokens of each, or with requests given, each one's tokens
// and, where it asked for them, the log-probabilities of its tokens and each step's top logits
// (`topLogits`).
import { withEngine } from "./engine";

const [file, backend, n, promptsJson, optionsJson, requestsJson] = process.argv.slice(2);
const prompts = JSON.parse(promptsJson!) as number[][];
const requests = requestsJson ? (JSON.parse(requestsJson) as Record<string, unknown>[]) : undefined;
const options = { ctxSize: 128, backend: backend as "cpu" | "vulkan", threads: 2, maxBatchSize: prompts.length, ...JSON.parse(optionsJson ?? "{}") };
const results = await withEngine(file!, options, async (engine) =>
  Promise.all(prompts.map(async (p, i) => {
    const g = engine.submit({ promptTokens: p, maxTokens: Number(n), temperature: 0, ignoreEos: true, ...requests?.[i] });
    const tokens: number[] = [], logprobs: number[] = [], tops: [number, number][][] = [];
    for await (const c of g) {
      tokens.push(...c.tokens);
      if (c.logprob !== undefined) logprobs.push(c.logprob);
      if (c.top_logits) tops.push(c.top_logits);
    }
    return requests ? { tokens, logprobs, tops } : tokens;
  })));
console.log(JSON.stringify(results));
