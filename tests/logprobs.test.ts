// logprobs (chat: OpenAI's content entries; completions: the legacy shape), streamed and not,
// logit_bias and n > 1, through a real server and the official openai client.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { testData } from "./helpers/paths";
import { postJson, type Running, startServer } from "./helpers/server";

let server: Running;
let openai: OpenAI;
const MODEL = "stories260K";
const messages = [{ role: "user" as const, content: "Tell me a story about a dog." }];

beforeAll(async () => {
  server = await startServer([testData("stories260K.gguf"), "--max-batch-size", "8", "--ctx-size", "512"]);
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(() => server?.proc.kill());

async function metric(name: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} ([\\d.e+-]+)$`, "m"));
  return Number(m?.[1] ?? NaN);
}

type Entry = OpenAI.ChatCompletionTokenLogprob;

/** Shape and normalisation of chat logprob entries. */
function checkEntries(entries: Entry[], k: number) {
  for (const e of entries) {
    expect(e.logprob).toBeLessThanOrEqual(0);
    expect(e.top_logprobs.length).toBeLessThanOrEqual(k);
    let mass = 0;
    for (let i = 0; i < e.top_logprobs.length; i++) {
      const t = e.top_logprobs[i]!;
      expect(t.logprob).toBeLessThanOrEqual(0);
      if (i > 0) expect(t.logprob).toBeLessThanOrEqual(e.top_logprobs[i - 1]!.logprob);
      expect(Buffer.from(t.bytes!).toString("utf8")).toBe(t.token);
      mass += Math.exp(t.logprob);
    }
    expect(mass).toBeLessThanOrEqual(1 + 1e-5);
    // the chosen token's logprob is its entry among the alternatives, when it is among them
    const same = e.top_logprobs.find((t) => t.token === e.token);
    if (same) expect(same.logprob).toBeCloseTo(e.logprob, 5);
    else if (e.top_logprobs.length === k) expect(e.logprob).toBeLessThanOrEqual(e.top_logprobs.at(-1)!.logprob + 1e-6);
  }
}

describe("chat logprobs", () => {
  test("greedy: one entry per token, the chosen token is the most likely", async () => {
    const r = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 24, temperature: 0, logprobs: true, top_logprobs: 5 });
    const c = r.choices[0]!;
    const entries = c.logprobs!.content!;
    expect(entries.length).toBe(r.usage!.completion_tokens);
    expect(entries.map((e) => e.token).join("")).toBe(c.message.content!);
    checkEntries(entries, 5);
    for (const e of entries) {
      expect(e.top_logprobs.length).toBe(5);
      expect(e.top_logprobs[0]!.token).toBe(e.token);
      expect(e.top_logprobs[0]!.logprob).toBeCloseTo(e.logprob, 6);
    }
  }, 60_000);

  test("sampled with top_logprobs 20: normalised, consistent; 0 gives just the chosen token", async () => {
    // top_k and min_p are Velo's (and llama.cpp's) extensions: off, to sample from everything
    const params = { model: MODEL, messages, max_tokens: 40, temperature: 1, top_k: 0, top_p: 1, min_p: 0, seed: 3, logprobs: true, top_logprobs: 20 };
    const r = await openai.chat.completions.create(params as OpenAI.ChatCompletionCreateParamsNonStreaming);
    checkEntries(r.choices[0]!.logprobs!.content!, 20);
    const z = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 8, temperature: 0, logprobs: true });
    for (const e of z.choices[0]!.logprobs!.content!) expect(e.top_logprobs).toEqual([]);
    const none = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 4, temperature: 0 });
    expect(none.choices[0]!.logprobs).toBeNull();
  }, 60_000);

  test("under a grammar the alternatives are the allowed tokens, and their probabilities sum to 1", async () => {
    const r = await postJson(`${server.url}/v1/chat/completions`, { model: MODEL, messages, grammar: "root ::= [0-9]{6}", max_tokens: 10, temperature: 1, seed: 2, logprobs: true, top_logprobs: 20 });
    expect(r.status).toBe(200);
    expect(r.body.choices[0].message.content).toMatch(/^[0-9]{6}$/);
    const entries = r.body.choices[0].logprobs.content as Entry[];
    checkEntries(entries, 20);
    for (const e of entries) {
      for (const t of e.top_logprobs) expect(t.token).toMatch(/^[0-9]+$/);
      // stories260K has fewer than 20 tokens made of digits only: all of them are listed
      const mass = e.top_logprobs.reduce((s, t) => s + Math.exp(t.logprob), 0);
      expect(mass).toBeCloseTo(1, 3);
    }
  }, 60_000);

  test("streamed logprobs reassemble to the non-streamed ones", async () => {
    const params = { model: MODEL, messages, max_tokens: 30, temperature: 1, seed: 11, logprobs: true, top_logprobs: 3 };
    const plain = await openai.chat.completions.create(params);
    const entries: Entry[] = [];
    let text = "";
    for await (const chunk of await openai.chat.completions.create({ ...params, stream: true })) {
      const c = chunk.choices[0];
      if (!c) continue;
      text += c.delta.content ?? "";
      entries.push(...(c.logprobs?.content ?? []));
    }
    expect(text).toBe(plain.choices[0]!.message.content!);
    expect(entries).toEqual(plain.choices[0]!.logprobs!.content!);
  }, 60_000);
});

describe("completions logprobs (legacy shape)", () => {
  test("tokens, token_logprobs, top_logprobs, text_offset", async () => {
    const r = await openai.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 20, temperature: 0, logprobs: 3 });
    const c = r.choices[0]!;
    const lp = c.logprobs!;
    expect(lp.tokens!.length).toBe(r.usage!.completion_tokens);
    expect(lp.tokens!.join("")).toBe(c.text);
    expect(lp.token_logprobs!.length).toBe(lp.tokens!.length);
    let offset = 0;
    lp.tokens!.forEach((t, i) => {
      expect(lp.text_offset![i]).toBe(offset);
      offset += t.length;
      const top = lp.top_logprobs![i]!;
      expect(Object.keys(top).length).toBeLessThanOrEqual(3);
      // greedy: the chosen token is the first and likeliest alternative
      expect(Object.keys(top)[0]).toBe(t);
      expect(top[t]).toBeCloseTo(lp.token_logprobs![i]!, 6);
      expect(Object.values(top).reduce((s, x) => s + Math.exp(x), 0)).toBeLessThanOrEqual(1 + 1e-5);
    });
  }, 60_000);

  test("streamed: each frame carries its tokens' logprobs", async () => {
    const params = { model: MODEL, prompt: "The dog", max_tokens: 16, temperature: 1, seed: 5, logprobs: 2 };
    const plain = await openai.completions.create(params);
    const tokens: string[] = [];
    const offsets: number[] = [];
    for await (const chunk of await openai.completions.create({ ...params, stream: true })) {
      const lp = chunk.choices[0]?.logprobs;
      if (lp) {
        tokens.push(...lp.tokens!);
        offsets.push(...lp.text_offset!);
      }
    }
    expect(tokens).toEqual(plain.choices[0]!.logprobs!.tokens!);
    expect(offsets).toEqual(plain.choices[0]!.logprobs!.text_offset!);
  }, 60_000);
});

describe("logit_bias", () => {
  test("-100 bans a token; +100 makes it the only choice", async () => {
    const greedy = await openai.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 8, temperature: 0, logprobs: 1 });
    const first = greedy.choices[0]!.logprobs!.tokens![0]!;
    const ids = (await postJson(`${server.url}/tokenize`, { content: `x${first}`, with_pieces: true })).body.tokens as { id: number; piece: string }[];
    const id = ids.find((t) => t.piece === first)!.id;
    const banned = await openai.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 8, temperature: 0, logprobs: 1, logit_bias: { [id]: -100 } });
    expect(banned.choices[0]!.logprobs!.tokens).not.toContain(first);
    const forced = await openai.completions.create({ model: MODEL, prompt: "Once upon a time", max_tokens: 6, temperature: 1, seed: 1, logprobs: 1, logit_bias: { [id]: 100 } });
    expect(forced.choices[0]!.logprobs!.tokens).toEqual(Array(6).fill(first));
    for (const lp of forced.choices[0]!.logprobs!.token_logprobs!) expect(lp).toBeGreaterThan(-1e-3);
  }, 60_000);

  test("bad biases are 400s", async () => {
    for (const logit_bias of [{ "99999": 1 }, { "5": 101 }, { abc: 1 }]) {
      const r = await postJson(`${server.url}/v1/completions`, { model: MODEL, prompt: "x", logit_bias });
      expect(r.status).toBe(400);
      expect(r.body.error.param).toMatch(/^logit_bias/);
    }
  }, 60_000);
});

describe("n > 1", () => {
  test("choices are indexed, seeded apart, and share the prompt through the prefix cache", async () => {
    const prompt = "Once upon a time there was a little dog named Max who loved to run in the park with his friends every day.";
    const before = await metric("velo_cached_prompt_tokens_total");
    const r = await openai.completions.create({ model: MODEL, prompt, max_tokens: 16, temperature: 1, seed: 42, n: 4 });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    expect(new Set(r.choices.map((c) => c.text)).size).toBeGreaterThan(1);
    expect(r.usage!.completion_tokens).toBe(64);
    // choices 1..3 start from the first one's cached prompt pages
    const after = await metric("velo_cached_prompt_tokens_total");
    expect(after - before).toBeGreaterThanOrEqual(3 * 16);
    // greedy choices are all the same
    const g = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 12, temperature: 0, n: 3 });
    expect(new Set(g.choices.map((c) => c.message.content)).size).toBe(1);
  }, 60_000);

  test("streamed: every choice's frames carry its index and each choice finishes", async () => {
    const texts = ["", "", ""];
    const finished = [false, false, false];
    for await (const chunk of await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 10, temperature: 1, seed: 9, n: 3, stream: true, logprobs: true })) {
      for (const c of chunk.choices) {
        texts[c.index] += c.delta.content ?? "";
        if (c.finish_reason) finished[c.index] = true;
      }
    }
    expect(finished).toEqual([true, true, true]);
    const plain = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 10, temperature: 1, seed: 9, n: 3 });
    expect(texts).toEqual(plain.choices.map((c) => c.message.content!));
  }, 60_000);
});

describe("validation", () => {
  test("out-of-range and inconsistent logprobs requests are 400s", async () => {
    const chat = (extra: object) => postJson(`${server.url}/v1/chat/completions`, { model: MODEL, messages, max_tokens: 2, ...extra });
    let r = await chat({ logprobs: true, top_logprobs: 21 });
    expect(r.status).toBe(400);
    expect(r.body.error.param).toBe("top_logprobs");
    r = await chat({ top_logprobs: 2 });
    expect(r.status).toBe(400);
    expect(r.body.error.message).toMatch(/needs logprobs/);
    r = await postJson(`${server.url}/v1/completions`, { model: MODEL, prompt: "x", logprobs: 21 });
    expect(r.status).toBe(400);
    r = await chat({ n: 0 });
    expect(r.status).toBe(400);
  }, 60_000);
});
