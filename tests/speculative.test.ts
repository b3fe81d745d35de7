// Speculative decoding: exact under greedy decoding (draft model and prompt lookup), the
// target's distribution unchanged under sampling (chi-square), acceptance reported, and a
// draft with another vocabulary refused.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { Engine, type EngineOptions } from "../src/engine/engine";
import { Model } from "../src/engine/model";
import { runCli } from "./helpers/cli";
import { testData } from "./helpers/paths";

const golden = JSON.parse(readFileSync(testData("golden/greedy_golden.json"), "utf8"));
const story = golden.stories260K.cases[0];

async function withSpec<T>(opts: EngineOptions, draftFile: string | null, body: (e: Engine) => Promise<T>): Promise<T> {
  const m = Model.open(testData("stories260K.gguf"));
  const d = draftFile ? Model.open(testData(draftFile)) : undefined;
  const e = Engine.create(m, { ctxSize: 512, ...opts }, d);
  try {
    return await body(e);
  } finally {
    e.close();
    m.close();
    d?.close();
  }
}

const greedy = (e: Engine, n: number) => e.submit({ promptTokens: story.prompt_ids_with_bos, maxTokens: n, temperature: 0, ignoreEos: true }).collect();

describe("greedy speculation is exact", () => {
  test("plain reference", async () => {
    const r = await withSpec({}, null, (e) => greedy(e, 48));
    expect(r.tokens).toEqual(story.greedy_ids);
  });

  const cases: [string, EngineOptions, string | null][] = [
    ["Q8_0 draft, k = 8", { spec: "draft", specAdapt: false }, "stories260K-q8_0.gguf"],
    ["Q4_0 draft, k = 8", { spec: "draft", specAdapt: false }, "stories260K-q4_0.gguf"],
    ["Q4_0 draft, k = 3", { spec: "draft", specAdapt: false, draftMax: 3 }, "stories260K-q4_0.gguf"],
    ["Q8_0 draft, adaptive", { spec: "draft" }, "stories260K-q8_0.gguf"],
    ["prompt lookup (ngram)", { spec: "ngram", specAdapt: false }, null],
  ];
  for (const [name, opts, draft] of cases) {
    test(name, async () => {
      const plain = await withSpec({}, null, (e) => greedy(e, 160));
      const spec = await withSpec(opts, draft, async (e) => ({ r: await greedy(e, 160), stats: e.stats() }));
      expect(spec.r.tokens).toEqual(plain.tokens);
      expect(spec.r.text).toBe(plain.text);
      expect(spec.stats.speculation!.drafted).toBeGreaterThan(0);
      expect(spec.r.finish.usage.drafted_tokens).toBe(spec.stats.speculation!.drafted);
    });
  }

  test("long generations stay exact and complete (the draft's pages share the pool)", async () => {
    const long = (opts: EngineOptions, draft: string | null) =>
      withSpec({ ctxSize: 1100, ...opts }, draft, (e) => e.submit({ prompt: "Once upon a time", maxTokens: 1024, temperature: 0, ignoreEos: true }).collect());
    const plain = await long({}, null);
    expect(plain.tokens.length).toBe(1024);
    const spec = await long({ spec: "draft", specAdapt: false }, "stories260K-q8_0.gguf");
    expect(spec.finish.reason).toBe("length");
    expect(spec.tokens).toEqual(plain.tokens);
    // a pool with room for the target alone: the draft gives its pages back instead
    const tight = await long({ spec: "draft", specAdapt: false, kvPages: 69 }, "stories260K-q8_0.gguf");
    expect(tight.tokens).toEqual(plain.tokens);
  });

  test("several sequences speculating in one batch stay exact", async () => {
    const prompts = ["Once upon a time", "The cat sat", "Lily and Ben", "One day, a big dog"];
    const run = (opts: EngineOptions, draft: string | null) =>
      withSpec({ ...opts, maxBatchSize: 4 }, draft, (e) =>
        Promise.all(prompts.map((p) => e.submit({ prompt: p, maxTokens: 64, temperature: 0, ignoreEos: true }).collect().then((r) => r.tokens))));
    expect(await run({ spec: "draft", specAdapt: false }, "stories260K-q4_0.gguf")).toEqual(await run({}, null));
  });
});

describe("acceptance", () => {
  test("close to llama.cpp's for the stories260K pair (it accepted 113 and 104 guesses over 128 tokens)", async () => {
    const acc: Record<string, { drafted: number; accepted: number }> = {};
    for (const draft of ["stories260K-q8_0.gguf", "stories260K-q4_0.gguf"]) {
      acc[draft] = await withSpec({ spec: "draft", specAdapt: false, draftMax: 8 }, draft, async (e) => {
        await greedy(e, 128);
        return e.stats().speculation!;
      });
    }
    const q8 = acc["stories260K-q8_0.gguf"]!, q4 = acc["stories260K-q4_0.gguf"]!;
    expect(q8.accepted / q8.drafted).toBeGreaterThan(0.9);
    expect(q4.accepted / q4.drafted).toBeLessThan(q8.accepted / q8.drafted);
    // kept guesses, the count that does not depend on how eagerly one drafts after a miss
    expect(Math.abs(q8.accepted - 113)).toBeLessThanOrEqual(8);
    expect(Math.abs(q4.accepted - 104)).toBeLessThanOrEqual(15);
  });

  test("a draft with a different vocabulary is refused", async () => {
    const m = Model.open(testData("stories260K.gguf"));
    const d = Model.open(testData("tiny-random-llama3-bpe.gguf"));
    expect(() => Engine.create(m, { spec: "draft" }, d)).toThrow(/vocabulary/);
    expect(() => Engine.create(m, { spec: "draft" })).toThrow(/needs a draft model/);
    d.close();
    m.close();
  });
});

/** Upper tail of the chi-square distribution (Wilson–Hilferty normal approximation). */
function chiSquareZ(x: number, df: number): number {
  return (Math.cbrt(x / df) - (1 - 2 / (9 * df))) / Math.sqrt(2 / (9 * df));
}

describe("sampled speculation keeps the target's distribution", () => {
  // Homogeneity of the second and third tokens over 6000 seeded runs with and without speculation,
  // at a high temperature so guesses are often refused and the residual draw matters.
  // The Q4_0 draft checks the general rule with a real q (a deliberately wrong rule, accepting
  // with 1.5 p/q, made it fail with z = 4.6); prompt lookup checks the one-hot q path.
  const runs = 6000;
  const prompt = "the cat and the dog and the cat and the dog and the";
  // disjoint seeds: the same seed would make the two samples correlated, not independent
  async function sample(opts: EngineOptions, draft: string | null, firstSeed: number) {
    return withSpec({ ...opts, maxBatchSize: 16 }, draft, async (e) => {
      const outs = await Promise.all(Array.from({ length: runs }, (_, seed) =>
        e.submit({ prompt, maxTokens: 3, temperature: 2.5, topK: 0, topP: 1, minP: 0, seed: firstSeed + seed, ignoreEos: true }).collect()));
      // the second and third tokens: the ones verification produced
      return { second: outs.map((o) => String(o.tokens[1])), third: outs.map((o) => String(o.tokens[2])), stats: e.stats() };
    });
  }
  function chiSquare(x: string[], y: string[]): { chi: number; df: number } {
    const count = (xs: string[]) => xs.reduce((m, v) => m.set(v, (m.get(v) ?? 0) + 1), new Map<string, number>());
    const a = count(x), b = count(y);
    const keys = [...new Set([...a.keys(), ...b.keys()])];
    // categories seen at least 10 times overall; the rest pooled
    const rows = keys.filter((k) => (a.get(k) ?? 0) + (b.get(k) ?? 0) >= 10).map((k) => [a.get(k) ?? 0, b.get(k) ?? 0]);
    const other = [x.length - rows.reduce((s, r) => s + r[0]!, 0), y.length - rows.reduce((s, r) => s + r[1]!, 0)];
    if (other[0]! + other[1]! >= 10) rows.push(other);
    let chi = 0;
    for (const [u, v] of rows) {
      const e = (u! + v!) / 2; // equal sample sizes
      chi += ((u! - e) ** 2 + (v! - e) ** 2) / e;
    }
    return { chi, df: rows.length - 1 };
  }

  for (const [name, opts, draft] of [
    ["prompt lookup", { spec: "ngram", specAdapt: false, draftMax: 4 }, null],
    ["Q4_0 draft", { spec: "draft", specAdapt: false, draftMax: 4 }, "stories260K-q4_0.gguf"],
  ] as [string, EngineOptions, string | null][]) {
    test(name, async () => {
      const plain = await sample({}, null, 0);
      const spec = await sample(opts, draft, 1_000_000);
      expect(spec.stats.speculation!.drafted).toBeGreaterThan(runs / 4); // later tokens really came from verification
      expect(spec.stats.speculation!.accepted).toBeLessThan(spec.stats.speculation!.drafted); // and rejections happened
      for (const which of ["second", "third"] as const) {
        const { chi, df } = chiSquare(plain[which], spec[which]);
        expect(df).toBeGreaterThan(5);
        expect(chiSquareZ(chi, df)).toBeLessThan(3.29); // p > 0.0005 for each of the two tests
      }
    }, 120_000);
  }
});

describe("the CLI shows acceptance", () => {
  test("velo generate --draft --json", async () => {
    const r = await runCli(["generate", testData("stories260K.gguf"), story.prompt, "--temp", "0", "-n", "48", "--ignore-eos", "--draft", testData("stories260K-q8_0.gguf"), "--json"]);
    expect(r.code).toBe(0);
    const j = JSON.parse(r.stdout);
    expect(j.tokens).toEqual(story.greedy_ids);
    expect(j.speculation.drafted).toBeGreaterThan(0);
    expect(j.speculation.acceptance).toBeGreaterThan(0.5);
    expect(j.speculation.acceptance_by_position.length).toBeGreaterThan(0);
  });

  test("a draft with another vocabulary is a clear error", async () => {
    const r = await runCli(["generate", testData("stories260K.gguf"), "hi", "--draft", testData("tiny-random-llama3-bpe.gguf")]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/velo: error: .*vocabulary/);
  });
});
