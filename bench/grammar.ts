// Constrained decoding's cost: decode speed with a JSON grammar against the same decode without
// one, on the same engine, in the same run, and what the grammar's token choice costs per token.
//
//   node_modules/bun/bin/bun.exe bench/grammar.ts [MODEL.gguf] [-n 128] [-r 5] [--backend cpu|vulkan]
//
// Default model: ../shared/models/tiny-random-llama3-bpe.gguf (Llama 3's 128,256-token
// vocabulary on a tiny network: a step is mostly sampling, the hardest case for a grammar's
// overhead). Requests alternate (plain, constrained) with fixed seeds at temperature 1, so
// both see the same machine state; each mode's figure is the median of its repetitions after
// a warm-up. The engine's grammar stats give the time spent choosing constrained tokens
// (fast-path checks, masks, the choice) and the time of masks walked from the trie (the rest
// come from the per-state cache).
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { Engine } from "../src/engine/engine";
import { Model } from "../src/engine/model";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    "n-gen": { type: "string", short: "n", default: "128" },
    repetitions: { type: "string", short: "r", default: "5" },
    backend: { type: "string", default: "cpu" },
    json: { type: "boolean", default: false },
  },
});
const data = process.env.VELO_TEST_DATA ?? resolve(import.meta.dir, "..", "tests", "data");
const path = positionals[0] ?? `${data}/tiny-random-llama3-bpe.gguf`;
const n = Number(values["n-gen"]), reps = Number(values.repetitions);

// A typical API response schema (a list of records with strings, integers, an enum and a
// boolean), written as the GBNF a JSON-schema converter produces for it; at least four
// records, so that a random-weight model writes the whole n tokens inside the structure.
const GRAMMAR = String.raw`root ::= "{" ws "\"results\"" ws ":" ws "[" ws item (ws "," ws item){3,} ws "]" ws "}"
item ::= "{" ws "\"id\"" ws ":" ws integer ws "," ws "\"title\"" ws ":" ws string ws "," ws "\"status\"" ws ":" ws status ws "," ws "\"done\"" ws ":" ws ("true" | "false") ws "}"
status ::= "\"open\"" | "\"closed\"" | "\"pending\""
integer ::= "-"? ([0-9] | [1-9] [0-9]{1,15})
string ::= "\"" ([^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))* "\""
ws ::= [ \t\n]{0,4}`;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

const model = Model.open(path);
const engine = Engine.create(model, { ctxSize: 2048, threads: 2, backend: values.backend as "cpu" | "vulkan" });
const prompt = "Return the open issues as JSON:";
async function run(seed: number, grammar?: string) {
  const r = await engine.submit({ prompt, maxTokens: n, temperature: 1, seed, ignoreEos: true, grammar }).collect();
  const u = r.finish.usage;
  return { tps: (u.completion_tokens - 1) / (u.generation_ms / 1000), tokens: u.completion_tokens, text: r.text };
}

await run(0);
await run(0, GRAMMAR); // builds the vocabulary trie once
engine.resetProfile(); // the overhead percentiles count from here
const before = engine.stats().grammar!;
const plain: number[] = [], constrained: number[] = [];
let sample = "";
for (let i = 1; i <= reps; i++) {
  plain.push((await run(i)).tps);
  const c = await run(i, GRAMMAR);
  constrained.push(c.tps);
  sample ||= c.text;
}
const after = engine.stats().grammar!;
const tokens = after.tokens - before.tokens, masks = after.masks_computed - before.masks_computed;
const result = {
  model: path, backend: engine.stats().backend, n_gen: n, repetitions: reps,
  plain_tps: median(plain), constrained_tps: median(constrained),
  ratio: median(constrained) / median(plain),
  choice_us_per_token: (1000 * (after.choice_ms - before.choice_ms)) / tokens,
  fast_path_share: (after.fast_path - before.fast_path) / tokens,
  masks_walked: masks,
  mask_walk_us: masks ? (1000 * (after.mask_ms - before.mask_ms)) / masks : 0,
  // what the grammar adds per token beyond the choice a plain decode makes (the tokens of these
  // runs, up to the latest 4096)
  overhead_us: { p50: after.overhead_us_p50, p90: after.overhead_us_p90, p99: after.overhead_us_p99, mean: after.overhead_us_mean },
  vocab: model.info().tokenizer?.vocab_size,
};
engine.close();
model.close();
if (values.json) {
  console.log(JSON.stringify(result, null, 2));
} else {
  console.log(`${result.model} (${result.vocab} tokens, ${result.backend}), tg${n}, median of ${reps}`);
  console.log(`  plain        ${result.plain_tps.toFixed(1)} t/s`);
  console.log(`  constrained  ${result.constrained_tps.toFixed(1)} t/s   (${result.ratio.toFixed(3)}x)`);
  console.log(`  choosing a constrained token: ${result.choice_us_per_token.toFixed(1)} µs mean; the unconstrained choice kept ${(100 * result.fast_path_share).toFixed(0)} %`);
  const o = result.overhead_us;
  console.log(`  grammar overhead per token (beyond the plain choice): p50 ${o.p50.toFixed(1)} µs, p90 ${o.p90.toFixed(1)}, p99 ${o.p99.toFixed(1)}, mean ${o.mean.toFixed(1)}`);
  console.log(`  masks walked from the trie: ${masks}, ${result.mask_walk_us.toFixed(0)} µs each (the rest from the cache)`);
  console.log(`  sample: ${JSON.stringify(sample.slice(0, 160))}`);
}
