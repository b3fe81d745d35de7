// `velo serve` end to end: a real server process driven by the official openai client.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { readFileSync } from "node:fs";
import { VeloClient } from "../src/client/client";
import { testData } from "./helpers/paths";
import { type Running, startServer } from "./helpers/server";

const golden = JSON.parse(readFileSync(testData("golden/greedy_golden.json"), "utf8"));
const story = golden.stories260K.cases[0];
let server: Running;
let openai: OpenAI;
const MODEL = "stories260K";

beforeAll(async () => {
  server = await startServer([testData("stories260K.gguf"), "--max-batch-size", "8", "--ctx-size", "256", "--max-queue", "64"]);
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(() => server?.proc.kill());

async function metrics(): Promise<Record<string, number>> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const line of text.split("\n")) {
    const m = line.match(/^(velo_[a-z_]+) ([\d.e+-]+)$/);
    if (m) out[m[1]!] = Number(m[2]);
  }
  return out;
}

describe("OpenAI API with the official client", () => {
  test("health and models", async () => {
    expect(await (await fetch(`${server.url}/health`)).json()).toEqual({ status: "ok" });
    const models = await openai.models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL]);
  });

  test("the routes llama-server also serves without /v1: the same answers", async () => {
    const bare = new OpenAI({ baseURL: server.url, apiKey: "unused", maxRetries: 0 });
    expect((await bare.models.list()).data.map((m) => m.id)).toEqual([MODEL]);
    const r = await bare.completions.create({ model: MODEL, prompt: story.prompt, max_tokens: 48, temperature: 0 });
    expect(r.choices[0]!.text).toBe(story.greedy_text);
    const chat = { model: MODEL, messages: [{ role: "user" as const, content: "Hi" }], max_tokens: 8, temperature: 0 };
    expect((await bare.chat.completions.create(chat)).choices[0]!.message.content).toBe((await openai.chat.completions.create(chat)).choices[0]!.message.content);
    const e = await bare.embeddings.create({ model: MODEL, input: "Once upon a time" });
    expect(e.data[0]!.embedding).toEqual((await openai.embeddings.create({ model: MODEL, input: "Once upon a time" })).data[0]!.embedding);
  });

  test("text completion matches the golden greedy output", async () => {
    const r = await openai.completions.create({ model: MODEL, prompt: story.prompt, max_tokens: 48, temperature: 0 });
    expect(r.choices[0]!.text).toBe(story.greedy_text);
    expect(r.choices[0]!.finish_reason).toBe("length");
    expect(r.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 48, total_tokens: 53 });
    expect(r.id).toMatch(/^cmpl-/);
    expect(r.object).toBe("text_completion");
  });

  test("chat completion, non-streamed and streamed, agree", async () => {
    const messages = [{ role: "user" as const, content: "Tell me a story about a cat." }];
    const plain = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 24, temperature: 0 });
    expect(plain.object).toBe("chat.completion");
    expect(plain.choices[0]!.message.role).toBe("assistant");
    expect(plain.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(plain.usage!.completion_tokens).toBeLessThanOrEqual(24);
    expect(plain.usage!.prompt_tokens).toBeGreaterThan(5);
    expect(typeof plain.created).toBe("number");
    expect(plain.model).toBe(MODEL);

    const stream = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    let first = true;
    for await (const chunk of stream) {
      if (first) expect(chunk.choices[0]!.delta.role).toBe("assistant");
      first = false;
      for (const c of chunk.choices) {
        text += c.delta.content ?? "";
        finish = c.finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(plain.choices[0]!.message.content!);
    expect(finish).toBe(plain.choices[0]!.finish_reason);
    expect(usage).toMatchObject({ prompt_tokens: plain.usage!.prompt_tokens, completion_tokens: plain.usage!.completion_tokens });
  });

  test("stop strings (string or list) end the text before them", async () => {
    const a = await openai.completions.create({ model: MODEL, prompt: story.prompt, max_tokens: 48, temperature: 0, stop: "Lily" });
    expect(a.choices[0]!.text).toBe(story.greedy_text.slice(0, story.greedy_text.indexOf("Lily")));
    expect(a.choices[0]!.finish_reason).toBe("stop");
    const b = await openai.completions.create({ model: MODEL, prompt: story.prompt, max_tokens: 48, temperature: 0, stop: ["park", "girl"] });
    expect(b.choices[0]!.text).toBe(story.greedy_text.slice(0, story.greedy_text.indexOf("girl")));
  });

  test("max_completion_tokens and seeds", async () => {
    const messages = [{ role: "user" as const, content: "Hi" }];
    const r = await openai.chat.completions.create({ model: MODEL, messages, max_completion_tokens: 3, temperature: 0 });
    expect(r.usage!.completion_tokens).toBe(3);
    expect(r.choices[0]!.finish_reason).toBe("length");
    const s1 = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 20, temperature: 1, seed: 7 });
    const s2 = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 20, temperature: 1, seed: 7 });
    expect(s1.choices[0]!.message.content).toBe(s2.choices[0]!.message.content);
  });
});

describe("errors fail closed with OpenAI-shaped bodies", () => {
  async function post(path: string, body: string, headers: Record<string, string> = { "Content-Type": "application/json" }) {
    const res = await fetch(`${server.url}${path}`, { method: "POST", body, headers });
    return { status: res.status, body: (await res.json()) as { error: { message: string; type: string; param: string | null; code: string | null } } };
  }
  const chat = (extra: object) => JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }], ...extra });

  test("malformed JSON, bad and unknown fields → 400", async () => {
    const bad = await post("/v1/chat/completions", "{not json");
    expect(bad.status).toBe(400);
    expect(bad.body.error.type).toBe("invalid_request_error");
    expect(bad.body.error.message).toMatch(/not valid JSON/);
    const temp = await post("/v1/chat/completions", chat({ temperature: 5 }));
    expect(temp.status).toBe(400);
    expect(temp.body.error.param).toBe("temperature");
    const unknown = await post("/v1/chat/completions", chat({ temprature: 0.5 }));
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.message).toMatch(/unrecognized request argument.*temprature/);
    const n = await post("/v1/chat/completions", chat({ n: 17 }));
    expect(n.status).toBe(400);
    expect(n.body.error.param).toBe("n");
    const noMessages = await post("/v1/chat/completions", JSON.stringify({ model: MODEL, messages: [] }));
    expect(noMessages.status).toBe(400);
    const notJson = await post("/v1/chat/completions", chat({}), { "Content-Type": "text/plain" });
    expect(notJson.status).toBe(400);
  });

  test("the official client sees the same errors", async () => {
    const err = await openai.chat.completions.create({ model: "gpt-4", messages: [{ role: "user", content: "hi" }] }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect(err.code).toBe("model_not_found");
    const long = "once upon a time ".repeat(200);
    const tooLong = await openai.completions.create({ model: MODEL, prompt: long }).catch((e) => e);
    expect(tooLong).toBeInstanceOf(OpenAI.BadRequestError);
    expect(tooLong.code).toBe("context_length_exceeded");
  });

  test("unknown paths 404, wrong methods 405", async () => {
    expect((await fetch(`${server.url}/v2/nothing`)).status).toBe(404);
    const r = await fetch(`${server.url}/v1/chat/completions`);
    expect(r.status).toBe(405);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("method_not_allowed");
  });

  test("tokenize and detokenize", async () => {
    const client = new VeloClient(server.url);
    expect(await client.tokenize("Once upon a time", { add_special: true })).toEqual([1, 403, 407, 261, 378]);
    expect(await client.detokenize([403, 407, 261, 378])).toBe("Once upon a time");
    const bad = await post("/detokenize", JSON.stringify({ tokens: [999999] }));
    expect(bad.status).toBe(400);
  });
});

describe("concurrency", () => {
  test("eight concurrent greedy requests give exactly what each gives alone", async () => {
    const prompts = ["Once upon a time", "The cat", "Tom had a big", "One day, Lily", "The sun was", "A little bird", "Sam and Max", "There was a"];
    const ask = (p: string) => openai.completions.create({ model: MODEL, prompt: p, max_tokens: 40, temperature: 0 }).then((r) => r.choices[0]!.text);
    const alone: string[] = [];
    for (const p of prompts) alone.push(await ask(p));
    const together = await Promise.all(prompts.map(ask));
    expect(together).toEqual(alone);
  });

  test("1000 streams aborted mid-flight leave no pages in use and nothing running", async () => {
    const client = new VeloClient(server.url);
    let aborted = 0;
    const one = async () => {
      const ac = new AbortController();
      try {
        for await (const chunk of client.chatStream(MODEL, [{ role: "user", content: "Tell me a long story" }], { max_tokens: 200, temperature: 0.8 }, ac.signal)) {
          if (chunk.choices[0]?.delta.content) {
            ac.abort();
            aborted++;
          }
        }
      } catch {
        // the abort surfaces as an error in the reader
      }
    };
    const concurrency = 32;
    let started = 0;
    await Promise.all(Array.from({ length: concurrency }, async () => {
      while (started < 1000) {
        started++;
        await one();
      }
    }));
    expect(aborted).toBeGreaterThan(900);
    let m = await metrics();
    for (let i = 0; i < 100 && (m.velo_running_sequences! > 0 || m.velo_kv_pages_used! > 0); i++) {
      await Bun.sleep(50);
      m = await metrics();
    }
    expect(m.velo_running_sequences).toBe(0);
    expect(m.velo_kv_pages_used).toBe(0);
    expect(m.velo_queue_depth).toBe(0);
  }, 300_000);
});

describe("API key", () => {
  test("requests need the key; health does not", async () => {
    const s = await startServer([testData("stories260K.gguf"), "--api-key", "sekret", "--ctx-size", "128"]);
    try {
      expect((await fetch(`${s.url}/health`)).status).toBe(200);
      const denied = await fetch(`${s.url}/v1/models`);
      expect(denied.status).toBe(401);
      const wrong = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "nope", maxRetries: 0 });
      expect(await wrong.models.list().catch((e) => e)).toBeInstanceOf(OpenAI.AuthenticationError);
      const right = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "sekret", maxRetries: 0 });
      expect((await right.models.list()).data[0]!.id).toBe(MODEL);
    } finally {
      s.proc.kill();
    }
  });
});

describe("prefix cache over HTTP", () => {
  test("repeated prompts report cached tokens; a saved system prompt survives a restart", async () => {
    const dir = await import("node:fs").then((fs) => fs.mkdtempSync("/tmp/velo-srv-"));
    const file = `${dir}/system.kv`;
    const system = "You are a storyteller. You tell short happy stories about children, animals and parks, with simple words that small children understand.";
    const ask = (client: OpenAI) =>
      client.chat.completions.create({ model: MODEL, messages: [{ role: "system", content: system }, { role: "user", content: "A story please" }], max_tokens: 8, temperature: 0 });
    const a = await startServer([testData("stories260K.gguf"), "--ctx-size", "256", "--prefix-cache-file", file]);
    let first: OpenAI.ChatCompletion;
    try {
      const client = new OpenAI({ baseURL: `${a.url}/v1`, apiKey: "x", maxRetries: 0 });
      first = await ask(client);
      const again = await ask(client);
      expect(again.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
      expect(again.choices[0]!.message.content).toBe(first.choices[0]!.message.content);
      const saved = await fetch(`${a.url}/prefix-cache/save`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ messages: [{ role: "system", content: system }] }) });
      expect(saved.status).toBe(200);
      expect(((await saved.json()) as { tokens_saved: number }).tokens_saved).toBeGreaterThan(0);
    } finally {
      a.proc.kill();
    }
    const b = await startServer([testData("stories260K.gguf"), "--ctx-size", "256", "--prefix-cache-file", file]);
    try {
      const r = await ask(new OpenAI({ baseURL: `${b.url}/v1`, apiKey: "x", maxRetries: 0 }));
      expect(r.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0); // from the file
      expect(r.choices[0]!.message.content).toBe(first.choices[0]!.message.content);
    } finally {
      b.proc.kill();
    }
  });
});
