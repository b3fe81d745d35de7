// POST /v1/messages and /v1/messages/count_tokens with the official @anthropic-ai/sdk client
// (messages.create, streamed and not, and the messages.stream helper): system and content
// blocks, stop_sequences, the SSE event sequence, a tool round trip (tool_use / tool_result),
// output_config.format, token counting, x-api-key, and Anthropic-shaped errors.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import Ajv2020 from "ajv/dist/2020";
import { type StreamDelta, ToolStream } from "../src/chat/tools";
import { BlockBuilder } from "../src/server/messages";
import { testData } from "./helpers/paths";
import { type Running, startServer } from "./helpers/server";

const MODEL = "tiny-random-llama3-bpe";
const KEY = "sk-local-test";
let server: Running;
let client: Anthropic;

beforeAll(async () => {
  server = await startServer([testData(`${MODEL}.gguf`), "--ctx-size", "4096", "--max-batch-size", "4", "--api-key", KEY]);
  client = new Anthropic({ baseURL: server.url, apiKey: KEY, maxRetries: 0 });
});
afterAll(() => server?.proc.kill());

// temperature, top_p and top_k are Anthropic API fields the pinned SDK no longer declares
type Params = Anthropic.MessageCreateParamsNonStreaming & { temperature?: number; top_k?: number };
const create = (p: Params) => client.messages.create(p as Anthropic.MessageCreateParamsNonStreaming);
const textOf = (m: Anthropic.Message) => m.content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("");

const weather: Anthropic.Tool = {
  name: "get_weather",
  description: "Current weather of a city",
  input_schema: {
    type: "object",
    properties: { city: { type: "string", minLength: 1, maxLength: 12 }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
    required: ["city", "unit"],
    additionalProperties: false,
  },
};
const ajv = new Ajv2020({ strict: false });
const validWeather = ajv.compile(weather.input_schema);

/** Raw stream events, checked against the order Anthropic sends them in. */
async function readEvents(stream: AsyncIterable<Anthropic.RawMessageStreamEvent>) {
  const events: Anthropic.RawMessageStreamEvent[] = [];
  for await (const e of stream) events.push(e);
  expect(events[0]!.type).toBe("message_start");
  expect(events.at(-2)!.type).toBe("message_delta");
  expect(events.at(-1)!.type).toBe("message_stop");
  let open: number | null = null;
  let next = 0;
  for (const e of events.slice(1, -2)) {
    if (e.type === "content_block_start") {
      expect(open).toBeNull();
      expect(e.index).toBe(next++);
      open = e.index;
    } else if (e.type === "content_block_delta") {
      expect(e.index).toBe(open!);
    } else if (e.type === "content_block_stop") {
      expect(e.index).toBe(open!);
      open = null;
    } else {
      throw new Error(`unexpected ${e.type}`);
    }
  }
  expect(open).toBeNull();
  return events;
}

describe("text", () => {
  test("non-streamed, raw stream events and the stream helper agree", async () => {
    const params: Params = { model: MODEL, max_tokens: 16, system: "You tell stories.", messages: [{ role: "user", content: "Tell me a story." }], temperature: 0 };
    const m = await create(params);
    expect(m.type).toBe("message");
    expect(m.role).toBe("assistant");
    expect(m.id).toMatch(/^msg_/);
    expect(m.model).toBe(MODEL);
    expect(m.stop_reason).toBe("max_tokens");
    expect(m.stop_sequence).toBeNull();
    expect(m.content.map((b) => b.type)).toEqual(["text"]);
    expect(m.usage.output_tokens).toBe(16);
    expect(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0)).toBeGreaterThan(10);

    const events = await readEvents(await client.messages.create({ ...params, stream: true } as Anthropic.MessageCreateParamsStreaming));
    const text = events.flatMap((e) => (e.type === "content_block_delta" && e.delta.type === "text_delta" ? [e.delta.text] : [])).join("");
    expect(text).toBe(textOf(m));
    const delta = events.at(-2) as Anthropic.RawMessageDeltaEvent;
    expect(delta.delta.stop_reason).toBe("max_tokens");
    expect(delta.usage.output_tokens).toBe(16);

    const final = await client.messages.stream(params as Anthropic.MessageStreamParams).finalMessage();
    expect(textOf(final)).toBe(textOf(m));
    expect(final.stop_reason).toBe("max_tokens");
  }, 60_000);

  test("stop_sequences end the text before the first one; stop_reason and stop_sequence say which", async () => {
    const params: Params = { model: MODEL, max_tokens: 24, messages: [{ role: "user", content: "Hi" }], temperature: 0 };
    const full = textOf(await create(params));
    const stop = full.slice(10, 14);
    const m = await create({ ...params, stop_sequences: ["never-there", stop] });
    expect(textOf(m)).toBe(full.slice(0, full.indexOf(stop)));
    expect(m.stop_reason).toBe("stop_sequence");
    expect(m.stop_sequence).toBe(stop);
    const s = await client.messages.stream({ ...params, stop_sequences: [stop] } as Anthropic.MessageStreamParams).finalMessage();
    expect(s.stop_reason).toBe("stop_sequence");
    expect(s.stop_sequence).toBe(stop);
  }, 60_000);

  test("content blocks, several turns and a system message of blocks reach the prompt; count_tokens agrees", async () => {
    const short = await create({ model: MODEL, max_tokens: 1, messages: [{ role: "user", content: "Hi" }] });
    const messages: Anthropic.MessageParam[] = [
      { role: "user", content: [{ type: "text", text: "Hi" }, { type: "text", text: " there" }] },
      { role: "assistant", content: [{ type: "text", text: "Hello!" }] },
      { role: "user", content: "How are you?" },
    ];
    const system: Anthropic.TextBlockParam[] = [{ type: "text", text: "Be brief." }];
    const long = await create({ model: MODEL, max_tokens: 1, system, messages });
    const total = (u: Anthropic.Usage) => u.input_tokens + (u.cache_read_input_tokens ?? 0);
    expect(total(long.usage)).toBeGreaterThan(total(short.usage) + 8);
    const counted = await client.messages.countTokens({ model: MODEL, system, messages });
    expect(counted.input_tokens).toBe(total(long.usage));
  }, 60_000);

  test("count_tokens counts a prompt longer than the context (clients trim by it); generating from it is a 400", async () => {
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "Once upon a time ".repeat(1500) }];
    const counted = await client.messages.countTokens({ model: MODEL, messages });
    expect(counted.input_tokens).toBeGreaterThan(4096);
    const err = await create({ model: MODEL, max_tokens: 1, messages }).catch((e) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
  }, 60_000);
});

describe("tools", () => {
  const ask: Anthropic.MessageParam[] = [{ role: "user", content: "What is the weather in Paris?" }];

  test("a forced call (tool_choice any), streamed and not, and its tool_result sent back", async () => {
    for (const seed of [1, 2]) {
      // the same output for the same request: sampling at temperature 0
      const params: Params = { model: MODEL, max_tokens: 300, messages: ask, tools: [weather], tool_choice: { type: "any" }, temperature: 0, top_k: 40 + seed };
      const m = await create(params);
      expect(m.stop_reason).toBe("tool_use");
      const uses = m.content.filter((b) => b.type === "tool_use");
      expect(uses.length).toBe(1);
      const use = uses[0]!;
      expect(use.name).toBe("get_weather");
      expect(validWeather(use.input)).toBe(true);

      const events = await readEvents(await client.messages.create({ ...params, stream: true } as Anthropic.MessageCreateParamsStreaming));
      const start = events.find((e) => e.type === "content_block_start")!;
      expect(start.content_block).toMatchObject({ type: "tool_use", name: "get_weather", input: {} });
      const json = events.flatMap((e) => (e.type === "content_block_delta" && e.delta.type === "input_json_delta" ? [e.delta.partial_json] : [])).join("");
      expect(JSON.parse(json)).toEqual(use.input);
      const final = await client.messages.stream(params as Anthropic.MessageStreamParams).finalMessage();
      expect(final.content.find((b) => b.type === "tool_use")!.input).toEqual(use.input);

      // the call and its result back through the template
      const next = await create({
        model: MODEL,
        max_tokens: 8,
        tools: [weather],
        messages: [...ask, { role: "assistant", content: m.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "sunny, 21 degrees" }, { type: "text", text: "Thanks." }] }],
      });
      expect(["end_turn", "max_tokens", "tool_use"]).toContain(next.stop_reason!);
      expect(next.usage.input_tokens + (next.usage.cache_read_input_tokens ?? 0)).toBeGreaterThan(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0));
    }
  }, 180_000);

  test("a named tool, tool_choice none, and server tools refused", async () => {
    const named = await create({ model: MODEL, max_tokens: 300, messages: ask, tools: [weather], tool_choice: { type: "tool", name: "get_weather" } });
    expect(named.content.map((b) => b.type)).toEqual(["tool_use"]);
    const none = await create({ model: MODEL, max_tokens: 6, messages: ask, tools: [weather], tool_choice: { type: "none" } });
    expect(none.content.every((b) => b.type === "text")).toBe(true);
    const err = await create({ model: MODEL, max_tokens: 6, messages: ask, tools: [{ type: "web_search_20250305", name: "web_search" } as unknown as Anthropic.Tool] }).catch((e) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(err.message).toMatch(/tools of type 'web_search_20250305' are not supported/);
  }, 120_000);
});

describe("structured output", () => {
  test("output_config.format json_schema: valid JSON over seeds", async () => {
    const schema = { type: "object", properties: { name: { type: "string", maxLength: 10 }, age: { type: "integer", minimum: 0, maximum: 120 } }, required: ["name", "age"], additionalProperties: false };
    for (const k of [5, 6, 7]) {
      const m = await create({ model: MODEL, max_tokens: 200, messages: [{ role: "user", content: "A person" }], output_config: { format: { type: "json_schema", schema } }, temperature: 1, top_k: k });
      expect(m.stop_reason).toBe("end_turn");
      expect(ajv.validate(schema, JSON.parse(textOf(m)))).toBe(true);
    }
  }, 120_000);
});

describe("errors and auth", () => {
  test("errors have Anthropic's shape and the SDK's error classes", async () => {
    const res = await fetch(`${server.url}/v1/messages`, { method: "POST", headers: { "Content-Type": "application/json", "x-api-key": KEY }, body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "x" }] }) });
    expect(res.status).toBe(400);
    const body = await res.json();
    expect(body.type).toBe("error");
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.message).toMatch(/max_tokens/);

    let e = await create({ model: "claude-none", max_tokens: 4, messages: [{ role: "user", content: "x" }] }).catch((x) => x);
    expect(e).toBeInstanceOf(Anthropic.NotFoundError);
    e = await create({ model: MODEL, max_tokens: 4, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AA==" } }] }] }).catch((x) => x);
    expect(e).toBeInstanceOf(Anthropic.BadRequestError);
    expect(e.message).toMatch(/content of type 'image' is not supported/);
    e = await create({ model: MODEL, max_tokens: 4, messages: [{ role: "user", content: "x" }], thinking: { type: "enabled", budget_tokens: 1024 } }).catch((x) => x);
    expect(e.message).toMatch(/thinking is not supported by this server/);
    e = await create({ model: MODEL, max_tokens: 4, messages: [{ role: "user", content: "x" }], tool_choice: { type: "any" } }).catch((x) => x);
    expect(e.message).toMatch(/tool_choice needs tools/);
    // (the SDK itself refuses a limit this large without streaming: the raw request)
    const big = await fetch(`${server.url}/v1/messages`, { method: "POST", headers: { "Content-Type": "application/json", "x-api-key": KEY }, body: JSON.stringify({ model: MODEL, max_tokens: 99_999_999, messages: [{ role: "user", content: "x" }] }) });
    expect(big.status).toBe(400);
    const bigBody = await big.json();
    expect(bigBody.error.message).toMatch(/max_tokens/);
    expect(bigBody.error.message).not.toMatch(/max_completion_tokens/);
  }, 60_000);

  test("x-api-key is checked", async () => {
    const wrong = new Anthropic({ baseURL: server.url, apiKey: "wrong", maxRetries: 0 });
    const e = await wrong.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: "user", content: "x" }] }).catch((x) => x);
    expect(e).toBeInstanceOf(Anthropic.AuthenticationError);
    const body = (e as InstanceType<typeof Anthropic.APIError>).error as { type: string; error: { type: string } };
    expect(body.error.type).toBe("authentication_error");
  }, 30_000);
});

describe("content blocks from text and calls in any order", () => {
  test("text, a call, then text: three blocks, events in order, whatever the split", () => {
    const text = 'Sure.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\nDone.';
    for (const step of [1, 4, text.length]) {
      const tools = new ToolStream("hermes", ["add"]);
      const b = new BlockBuilder();
      const events: { type: string; index?: number }[] = [];
      const feed = (d: StreamDelta) => events.push(...b.push({ ...d, chat: [], legacy: null }));
      for (let i = 0; i < text.length; i += step) feed(tools.push(text.slice(i, i + step)));
      feed(tools.finish());
      events.push(...b.close());
      expect(b.content.map((c) => ({ ...c, id: undefined }))).toEqual([
        { type: "text", text: "Sure.", id: undefined },
        { type: "tool_use", name: "add", input: { a: 1, b: 2 }, id: undefined },
        { type: "text", text: "Done.", id: undefined },
      ]);
      const order = events.filter((e) => e.type !== "content_block_delta").map((e) => `${e.type}:${e.index}`);
      expect(order).toEqual(["content_block_start:0", "content_block_stop:0", "content_block_start:1", "content_block_stop:1", "content_block_start:2", "content_block_stop:2"]);
    }
  });
});
