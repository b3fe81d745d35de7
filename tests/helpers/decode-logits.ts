// Each step's top logits of one greedy continuation, as JSON on stdout (a fresh process per run:
// the engine reads some switches from its environment).
//   bun tests/helpers/decode-logits.ts MODEL BACKEND '[1,2,3]' N_TOKENS [TOP] ['{"cacheTypeK":"f16"}']
import { withEngine } from "./engine";

const [file, backend, promptJson, n, top, optionsJson] = process.argv.slice(2);
const options = { ctxSize: 256, backend: backend as "cpu" | "vulkan", threads: 2, ...JSON.parse(optionsJson ?? "{}") };
const steps = await withEngine(file!, options, async (engine) => {
  const out: { token: number; top: [number, number][] }[] = [];
  const g = engine.submit({ promptTokens: JSON.parse(promptJson!), maxTokens: Number(n), temperature: 0, ignoreEos: true, topLogits: Number(top ?? 8) });
  for await (const c of g) out.push({ token: c.tokens[0]!, top: c.top_logits ?? [] });
  return out;
});
console.log(JSON.stringify(steps));
