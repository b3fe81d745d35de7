// The radix prefix cache: reuse of whole KV pages across requests, outputs that never change
// because of it (evictions included), and saving/loading a prefix to a file.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { withEngine } from "./helpers/engine";
import { testData } from "./helpers/paths";

const golden = JSON.parse(readFileSync(testData("golden/greedy_golden.json"), "utf8"));
const dir = mkdtempSync(join(tmpdir(), "velo-prefix-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));


describe("prefix cache", () => {
  test("a follow-up request reuses the cached full pages and gives the same tokens", async () => {
    await withEngine("stories260K.gguf", { ctxSize: 256 }, async (engine) => {
      const c = golden.stories260K!.cases[0]!;
      const first = await engine.submit({ promptTokens: c.prompt_ids_with_bos, maxTokens: 30, temperature: 0, ignoreEos: true }).collect();
      expect(first.finish.usage.cached_tokens).toBe(0);
      const second = await engine.submit({ promptTokens: [...c.prompt_ids_with_bos, ...first.tokens], maxTokens: 18, temperature: 0, ignoreEos: true }).collect();
      // 5 + 29 tokens were computed: two whole 16-token pages are shared, the rest recomputed
      expect(second.finish.usage.cached_tokens).toBe(32);
      expect([...first.tokens, ...second.tokens]).toEqual(c.greedy_ids);
      const stats = engine.stats();
      expect(stats.kv_pages_used).toBe(0); // no sequence holds pages; the cache keeps them
      expect(stats.kv_pages_cached).toBeGreaterThan(0);
      expect(stats.prefix_cache_hits).toBe(1);
    });
  });

  test("outputs never change because of the cache, even after evictions", async () => {
    // longer than a 16-token page, with shared beginnings, so whole pages can be reused
    const story = "Once upon a time there was a little girl named Lily. She loved to play outside in the park.";
    const prompts = [story, story + " One day", "The little dog wanted to play with the ball in the garden all day long.", story];
    const run = async (prefixCache: boolean, kvPages?: number) =>
      withEngine("stories260K.gguf", { ctxSize: 128, prefixCache, kvPages }, async (engine) => {
        const out: number[][] = [];
        for (let round = 0; round < 3; round++) {
          for (const p of prompts) out.push((await engine.submit({ prompt: p, maxTokens: 40, temperature: 0, ignoreEos: true }).collect()).tokens);
        }
        return { out, stats: engine.stats() };
      });
    const plain = await run(false);
    const cached = await run(true);
    const tight = await run(true, 6); // 6 pages, 5 needed per request: the cache must keep evicting
    expect(cached.out).toEqual(plain.out);
    expect(tight.out).toEqual(plain.out);
    expect(cached.stats.prefix_cache_hits).toBeGreaterThan(0);
    expect(tight.stats.prefix_cache_evictions).toBeGreaterThan(0);
    expect(plain.stats.prefix_cache_hits).toBe(0);
  });
});


describe("prefix files", () => {
  const story = "Once upon a time there was a little girl named Lily. She loved to play outside in the park. One day she saw a big red ball.";

  test("a saved prefix loads into a new engine and is reused, outputs unchanged", async () => {
    const file = join(dir, "story.kv");
    const { want, tokens } = await withEngine("stories260K.gguf", { ctxSize: 256 }, async (engine, model) => {
      const tokens = Array.from(model.tokenize(story));
      const want = (await engine.submit({ promptTokens: tokens, maxTokens: 20, temperature: 0, ignoreEos: true }).collect()).tokens;
      const saved = engine.savePrefix(tokens, file);
      expect(saved).toBe(Math.floor(tokens.length / 16) * 16);
      return { want, tokens };
    });
    await withEngine("stories260K.gguf", { ctxSize: 256 }, async (engine) => {
      expect(engine.loadPrefix(file)).toBe(Math.floor(tokens.length / 16) * 16);
      const r = await engine.submit({ promptTokens: tokens, maxTokens: 20, temperature: 0, ignoreEos: true }).collect();
      expect(r.finish.usage.cached_tokens).toBe(Math.floor(tokens.length / 16) * 16);
      expect(r.tokens).toEqual(want);
    });
  });

  test("a prefix never loads into another model, and corrupt files are refused", async () => {
    const file = join(dir, "story2.kv");
    await withEngine("stories260K.gguf", { ctxSize: 256 }, async (engine, model) => {
      const tokens = Array.from(model.tokenize(story));
      await engine.submit({ promptTokens: tokens, maxTokens: 1, temperature: 0 }).collect();
      engine.savePrefix(tokens, file);
      expect(() => engine.savePrefix([1, 2, 3], join(dir, "none.kv"))).toThrow(/no page of that prefix is cached/);
    });
    await withEngine("stories260K-q8_0.gguf", { ctxSize: 256 }, async (engine) => {
      expect(() => engine.loadPrefix(file)).toThrow(/different model file/);
    });
    await withEngine("stories260K.gguf", { ctxSize: 256 }, async (engine) => {
      const bytes = readFileSync(file);
      writeFileSync(join(dir, "cut.kv"), bytes.subarray(0, bytes.length - 100));
      expect(() => engine.loadPrefix(join(dir, "cut.kv"))).toThrow(/does not match|truncated/);
      writeFileSync(join(dir, "junk.kv"), "not a prefix file at all, just some text padding it out");
      expect(() => engine.loadPrefix(join(dir, "junk.kv"))).toThrow(/not a Velo prefix file/);
      expect(() => engine.loadPrefix(join(dir, "missing.kv"))).toThrow(/cannot open/);
    });
  });
});
