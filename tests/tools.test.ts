// Tool calling: the call syntax of each template family (detection, rendering with tools, the
// forcing grammar, parsing, streaming deltas), then round trips through a real server with the
// official openai client, the model's output forced through the grammar (tool_choice required).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Ajv2020 from "ajv/dist/2020";
import OpenAI from "openai";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ChatTemplate } from "../src/chat/template";
import { detectFamily, parseToolOutput, type Tool, toolCallGrammar, type ToolFamily, ToolStream } from "../src/chat/tools";
import { Gbnf, rng } from "./helpers/gbnf";
import { dataDir, testData } from "./helpers/paths";
import { startServer, type Running } from "./helpers/server";

const templates: Record<string, ToolFamily> = {
  "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
  "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3",
  "meta-llama-Llama-3.3-70B-Instruct.jinja": "llama3",
  "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": "hermes",
  "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "hermes",
  "Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
  "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
  "meetkai-functionary-medium-v3.1.jinja": "functionary-v3.1",
  "meetkai-functionary-medium-v3.2.jinja": "functionary-v3.2",
  "fireworks-ai-llama-3-firefunction-v2.jinja": "firefunction",
  "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "command-r7b",
  "CohereForAI-c4ai-command-r-plus-tool_use.jinja": "command-r-plus",
  "google-gemma-2-2b-it.jinja": "generic",
  "microsoft-Phi-3.5-mini-instruct.jinja": "generic",
};
const templateText = (f: string) => readFileSync(join(dataDir, "templates", f), "utf8");

const weather: Tool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Current weather of a city",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", description: "City name", minLength: 1, maxLength: 12 },
        unit: { type: "string", description: "Unit", enum: ["celsius", "fahrenheit"] },
        days: { type: "integer", description: "Days ahead", minimum: 0, maximum: 7 },
      },
      required: ["city", "unit"],
      additionalProperties: false,
    },
  },
};
const add: Tool = {
  type: "function",
  function: {
    name: "add",
    description: "Adds two numbers",
    parameters: { type: "object", properties: { a: { type: "number", description: "first", minimum: -100, maximum: 100 }, b: { type: "number", description: "second", minimum: -100, maximum: 100 } }, required: ["a", "b"] },
  },
};
const tools = [weather, add];
const names = tools.map((t) => t.function.name);
const ajv = new Ajv2020({ strict: false });
const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters!)]));

/** Checks calls against the tools' schemas. */
function expectValidCalls(calls: { name: string; arguments: string }[]) {
  expect(calls.length).toBeGreaterThan(0);
  for (const c of calls) {
    expect(names).toContain(c.name);
    const args = JSON.parse(c.arguments);
    if (!validators[c.name]!(args)) throw new Error(`${c.name}(${c.arguments}): ${JSON.stringify(validators[c.name]!.errors)}`);
  }
}

/** Streams `text` in pieces and reassembles content and calls as a client would. */
function streamed(family: ToolFamily, text: string, cut: (i: number) => number) {
  const s = new ToolStream(family, names);
  let content = "";
  const calls: { name: string; arguments: string }[] = [];
  const take = (d: ReturnType<ToolStream["push"]>) => {
    // parts hold the same content and deltas, in output order
    expect(d.parts.flatMap((p) => ("content" in p ? [p.content] : [])).join("")).toBe(d.content);
    expect(d.parts.flatMap((p) => ("call" in p ? [p.call] : []))).toEqual(d.toolCalls);
    content += d.content;
    for (const t of d.toolCalls) {
      if (t.id) {
        expect(calls[t.index]).toBeUndefined(); // the header comes once, first
        calls[t.index] = { name: t.function.name!, arguments: "" };
      }
      calls[t.index]!.arguments += t.function.arguments;
    }
  };
  for (let i = 0; i < text.length; ) {
    const n = Math.max(1, cut(i));
    take(s.push(text.slice(i, i + n)));
    i += n;
  }
  take(s.finish());
  return { content, calls };
}

describe("families", () => {
  test("each shared template's call syntax is recognised", () => {
    for (const [file, family] of Object.entries(templates)) expect({ file, family: detectFamily(templateText(file)) }).toEqual({ file, family });
  });

  test("every tool-calling template renders tools, earlier calls and tool results", () => {
    const conversation = [
      { role: "system" as const, content: "Be brief." },
      { role: "user" as const, content: "Weather in Paris?" },
      { role: "assistant" as const, content: null, tool_calls: [{ id: "call_abc123", type: "function" as const, function: { name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' } }] },
      { role: "tool" as const, tool_call_id: "call_abc123", content: '{"temp": 21}' },
      { role: "assistant" as const, content: "It is 21 degrees." },
      { role: "user" as const, content: "And tomorrow?" },
    ];
    for (const file of Object.keys(templates)) {
      const t = new ChatTemplate(templateText(file), { bosToken: "<s>", eosToken: "</s>" });
      const out = t.render(conversation, true, { tools });
      expect({ file, tools: out.includes("get_weather") && out.includes("add") }).toEqual({ file, tools: true });
      expect({ file, result: out.includes("21") }).toEqual({ file, result: true });
      expect({ file, turn: out.includes("And tomorrow?") }).toEqual({ file, turn: true });
      // the earlier call's arguments appear as JSON, never as a quoted string or [object Map]
      expect({ file, args: /"city": ?"Paris"/.test(out) && !out.includes("[object") }).toEqual({ file, args: true });
    }
  });

  test("arguments go to each template as it expects them", () => {
    const objects = Object.keys(templates).filter((f) => new ChatTemplate(templateText(f)).argumentsAsObject);
    expect(objects).toContain("Qwen-Qwen2.5-7B-Instruct.jinja");
    expect(objects).toContain("meta-llama-Llama-3.2-3B-Instruct.jinja");
    expect(objects).not.toContain("meetkai-functionary-medium-v3.1.jinja");
    expect(objects).not.toContain("fireworks-ai-llama-3-firefunction-v2.jinja");
  });

  test("Mistral's 9-character call ids are made from any id, the same for a call and its result", () => {
    const t = new ChatTemplate(templateText("mistralai-Mistral-Nemo-Instruct-2407.jinja"));
    const out = t.render([
      { role: "user", content: "Weather?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_0123456789abcdef", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo","unit":"celsius"}' } }] },
      { role: "tool", tool_call_id: "call_0123456789abcdef", content: "cold" },
      { role: "assistant", content: "Cold." },
      { role: "user", content: "Thanks" },
    ], true, { tools });
    const ids = [...out.matchAll(/"(?:id|call_id)": "([^"]*)"/g)].map((m) => m[1]);
    expect(ids.length).toBe(2);
    expect(ids[0]).toMatch(/^[A-Za-z0-9]{9}$/);
    expect(ids[1]).toBe(ids[0]);
  });

  test("templates without tool syntax get the tools in a system message", () => {
    const t = new ChatTemplate(templateText("microsoft-Phi-3.5-mini-instruct.jinja"));
    const out = t.render([{ role: "user", content: "Hi" }], true, { tools });
    expect(out).toContain('"get_weather"');
    expect(out).toContain('{"tool_calls": [');
  });
});

// what each family's models write (llama.cpp's test corpus has the same shapes)
const outputs: [ToolFamily, string, string, { name: string; arguments: string }[]][] = [
  ["hermes", 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', "Sure.", [{ name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' }, { name: "add", arguments: '{"a": 1, "b": 2}' }]],
  ["llama3", '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}', "", [{ name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' }]],
  ["llama3", '<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}; {"name": "add", "parameters": {"a": 3, "b": 4}}', "", [{ name: "add", arguments: '{"a": 1, "b": 2}' }, { name: "add", arguments: '{"a": 3, "b": 4}' }]],
  ["llama3", '{"answer": 42} is plain JSON', '{"answer": 42} is plain JSON', []],
  ["mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}, "id": "abcdefghi"}, {"name": "add", "arguments": {"a": 1, "b": 2}}]', "", [{ name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' }, { name: "add", arguments: '{"a": 1, "b": 2}' }]],
  ["functionary-v3.1", 'Let me check.<function=get_weather>{"city": "Paris", "unit": "celsius"}</function><function=add>{"a":1,"b":2}</function>', "Let me check.", [{ name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' }, { name: "add", arguments: '{"a":1,"b":2}' }]],
  ["functionary-v3.2", 'all\nLet me check.>>>get_weather\n{"city": "Paris", "unit": "celsius"}>>>add\n{"a": 1, "b": 2}', "Let me check.", [{ name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' }, { name: "add", arguments: '{"a": 1, "b": 2}' }]],
  ["functionary-v3.2", "all\nJust text.", "Just text.", []],
  ["firefunction", ' functools[{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]', "", [{ name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' }]],
  ["command-r7b", '<|START_THINKING|>I will look it up.<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}\n]<|END_ACTION|>', "", [{ name: "get_weather", arguments: '{"city": "Paris", "unit": "celsius"}' }]],
  ["command-r-plus", 'Action:\n```json\n[\n    {\n        "tool_name": "add",\n        "parameters": {"a": 1, "b": 2}\n    }\n]```', "", [{ name: "add", arguments: '{"a": 1, "b": 2}' }]],
  ["generic", '{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}', "", [{ name: "add", arguments: '{"a": 1, "b": 2}' }]],
  ["generic", 'Hello {"tool_calls": []}', 'Hello {"tool_calls": []}', []],
  // not calls: an unknown function, or a call cut short before its arguments
  ["hermes", 'text <tool_call>{"name": "nope", "arguments": {}}</tool_call> more', 'text <tool_call>{"name": "nope", "arguments": {}}</tool_call> more', []],
  ["hermes", 'cut <tool_call>{"name": "add"', 'cut <tool_call>{"name": "add"', []],
  // a call cut short inside its arguments is still a call (finish_reason length tells why)
  ["hermes", 'cut <tool_call>{"name": "add", "arguments": {"a": 1', "cut", [{ name: "add", arguments: '{"a": 1' }]],
];

describe("parsing", () => {
  test("each family's output becomes content and calls", () => {
    for (const [family, text, content, calls] of outputs) {
      expect({ family, text, parsed: parseToolOutput(family, text, true, names) }).toEqual({ family, text, parsed: { content, calls } });
    }
  });

  test("streamed deltas, in any split, reassemble to the parsed output", () => {
    const r = rng(3);
    for (const [family, text, content, calls] of outputs) {
      for (const cut of [() => 1, () => 3, () => 1 + Math.floor(r() * 12), () => text.length]) {
        expect({ family, text, out: streamed(family, text, cut) }).toEqual({ family, text, out: { content, calls } });
      }
    }
  });

  test("content that might begin a call is held back until it is known not to", () => {
    const s = new ToolStream("hermes", names);
    expect(s.push("Hello <tool").content).toBe("Hello");
    expect(s.push("box> there").content).toBe(" <toolbox> there");
  });
});

describe("forcing grammars", () => {
  test("every text of each family's grammar parses back into valid calls", () => {
    const families = [...new Set(Object.values(templates))];
    for (const family of families) {
      for (const parallel of [false, true]) {
        const g = new Gbnf(toolCallGrammar(family, tools, parallel));
        const r = rng(11);
        for (let i = 0; i < 40; i++) {
          const text = g.sample(r);
          const parsed = parseToolOutput(family, text, true, names);
          expect({ family, text, content: parsed.content }).toEqual({ family, text, content: "" });
          expectValidCalls(parsed.calls);
          if (!parallel || family === "llama3") expect(parsed.calls.length).toBe(1);
        }
      }
    }
  });

  test("a named function's grammar calls only that function", () => {
    const g = new Gbnf(toolCallGrammar("hermes", [add], false));
    const r = rng(5);
    for (let i = 0; i < 20; i++) expect(parseToolOutput("hermes", g.sample(r), true, names).calls.map((c) => c.name)).toEqual(["add"]);
  });

  test("unsupported parameter schemas are errors naming the tool", () => {
    const bad: Tool = { type: "function", function: { name: "search", parameters: { type: "object", properties: { q: { type: "string", pattern: "^(?!a)" } } } } };
    expect(() => toolCallGrammar("hermes", [bad], false)).toThrow(/tool 'search': pattern: lookahead/);
    const notObject: Tool = { type: "function", function: { name: "f", parameters: { type: "string" } } };
    expect(() => toolCallGrammar("hermes", [notObject], false)).toThrow(/must be an object schema/);
  });
});

// ---- end to end ----

type Message = OpenAI.ChatCompletionMessageParam;
const ask: Message[] = [{ role: "user", content: "What is the weather in Paris, and what is 2 + 3?" }];
const MODEL = "tiny-random-llama3-bpe";

/** Reads a streamed chat completion as a client does, checking OpenAI's delta shapes. */
async function readStream(stream: AsyncIterable<OpenAI.ChatCompletionChunk>) {
  let content = "";
  let finish: string | null = null;
  const calls: { id: string; name: string; arguments: string }[] = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      content += c.delta.content ?? "";
      finish = c.finish_reason ?? finish;
      for (const t of c.delta.tool_calls ?? []) {
        if (t.id) {
          // the first delta of a call: index, id, type, name, empty arguments
          expect(t.type).toBe("function");
          expect(t.function?.arguments).toBe("");
          expect(calls[t.index]).toBeUndefined();
          calls[t.index] = { id: t.id, name: t.function!.name!, arguments: "" };
        } else {
          expect(t.function?.name).toBeUndefined();
          calls[t.index]!.arguments += t.function?.arguments ?? "";
        }
      }
    }
  }
  return { content, finish, calls };
}

// one shared template per family, run on a random-weight Llama 3 model
const families: [string, string][] = [
  ["llama3 (Llama 3.2, the model's own)", ""],
  ["llama3 (Llama 3.1)", "meta-llama-Llama-3.1-8B-Instruct.jinja"],
  ["hermes (Hermes 3)", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"],
  ["hermes (Qwen 2.5)", "Qwen-Qwen2.5-7B-Instruct.jinja"],
  ["mistral (Nemo)", "mistralai-Mistral-Nemo-Instruct-2407.jinja"],
  ["functionary v3.1", "meetkai-functionary-medium-v3.1.jinja"],
  ["functionary v3.2", "meetkai-functionary-medium-v3.2.jinja"],
  ["firefunction v2", "fireworks-ai-llama-3-firefunction-v2.jinja"],
  ["command-r7b", "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja"],
  ["command-r-plus", "CohereForAI-c4ai-command-r-plus-tool_use.jinja"],
  ["generic (Phi 3.5)", "microsoft-Phi-3.5-mini-instruct.jinja"],
];

describe("tool round trips with the openai client, per template family", () => {
  for (const [label, file] of families) {
    test(label, async () => {
      const args = [testData(`${MODEL}.gguf`), "--ctx-size", "4096", "--max-batch-size", "4"];
      if (file) args.push("--chat-template-file", join(dataDir, "templates", file));
      const s = await startServer(args);
      try {
        const openai = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "x", maxRetries: 0 });
        const params = { model: MODEL, messages: ask, tools, tool_choice: "required" as const, parallel_tool_calls: false, temperature: 1, max_tokens: 400 };
        for (const seed of [1, 2, 3]) {
          const r = await openai.chat.completions.create({ ...params, seed });
          const choice = r.choices[0]!;
          expect(choice.finish_reason).toBe("tool_calls");
          expect(choice.message.content).toBeNull();
          const calls = choice.message.tool_calls!.map((c) => (c.type === "function" ? c : null)!);
          expect(calls.length).toBe(1);
          expect(calls[0]!.id).toMatch(file.includes("Mistral") ? /^[A-Za-z0-9]{9}$/ : /^call_/);
          expectValidCalls(calls.map((c) => c.function));

          // the same seed streamed: the deltas reassemble to the same call
          const st = await readStream(await openai.chat.completions.create({ ...params, seed, stream: true }));
          expect(st.finish).toBe("tool_calls");
          expect(st.content).toBe("");
          expect(st.calls.map((c) => ({ name: c.name, arguments: c.arguments }))).toEqual(calls.map((c) => c.function));

          // the call and its result go back through the template
          const next = await openai.chat.completions.create({
            model: MODEL,
            messages: [...ask, choice.message as Message, { role: "tool", tool_call_id: calls[0]!.id, content: '{"result": "sunny, 21 degrees"}' }],
            tools,
            tool_choice: "auto",
            max_tokens: 8,
            seed,
          });
          expect(next.choices[0]!.finish_reason).toMatch(/^(stop|length|tool_calls)$/);
          for (const c of next.choices[0]!.message.tool_calls ?? []) expect(names).toContain(c.type === "function" ? c.function.name : "");
        }

        // a named function: that one, once
        const named = await openai.chat.completions.create({ ...params, parallel_tool_calls: true, tool_choice: { type: "function", function: { name: "add" } }, seed: 9 });
        expect(named.choices[0]!.message.tool_calls!.map((c) => (c.type === "function" ? c.function.name : ""))).toEqual(["add"]);
        expectValidCalls(named.choices[0]!.message.tool_calls!.map((c) => (c.type === "function" ? c.function : { name: "", arguments: "" })));

        // tool_choice none: plain text, no calls parsed
        const none = await openai.chat.completions.create({ model: MODEL, messages: ask, tools, tool_choice: "none", max_tokens: 12, seed: 1 });
        expect(none.choices[0]!.message.tool_calls).toBeUndefined();
        expect(typeof none.choices[0]!.message.content).toBe("string");
      } finally {
        s.proc.kill();
      }
    }, 240_000);
  }
});

describe("parallel calls and the tools API's errors", () => {
  let s: Running;
  let openai: OpenAI;
  beforeAll(async () => {
    s = await startServer([testData(`${MODEL}.gguf`), "--ctx-size", "4096", "--max-batch-size", "4", "--chat-template-file", join(dataDir, "templates", "Qwen-Qwen2.5-7B-Instruct.jinja")]);
    openai = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "x", maxRetries: 0 });
  });
  afterAll(() => s?.proc.kill());

  test("parallel calls, streamed and not, agree; every finished call is valid", async () => {
    for (const seed of [4, 5]) {
      const params = { model: MODEL, messages: ask, tools, tool_choice: "required" as const, temperature: 1, max_tokens: 300, seed };
      const r = await openai.chat.completions.create(params);
      const calls = r.choices[0]!.message.tool_calls!.map((c) => (c.type === "function" ? c.function : { name: "", arguments: "" }));
      expect(calls.length).toBeGreaterThan(0);
      // a call cut short by max_tokens can only be the last one
      const finished = r.choices[0]!.finish_reason === "length" ? calls.slice(0, -1) : calls;
      if (finished.length) expectValidCalls(finished);
      const st = await readStream(await openai.chat.completions.create({ ...params, stream: true }));
      expect(st.calls.map((c) => ({ name: c.name, arguments: c.arguments }))).toEqual(calls);
      expect(new Set(st.calls.map((c) => c.id)).size).toBe(st.calls.length);
    }
  }, 120_000);

  test("tool_choice auto on a random model: whatever it writes is answered well-formed", async () => {
    for (const seed of [1, 2]) {
      const r = await openai.chat.completions.create({ model: MODEL, messages: ask, tools, temperature: 1, max_tokens: 24, seed });
      const m = r.choices[0]!.message;
      expect(typeof m.content === "string" || (m.tool_calls?.length ?? 0) > 0).toBe(true);
    }
  }, 60_000);

  test("tool_choice auto with a response format: a call or an answer in that format", async () => {
    const schema = { type: "object", properties: { answer: { type: "integer", minimum: 0, maximum: 9 } }, required: ["answer"], additionalProperties: false };
    for (const seed of [1, 2, 3, 4]) {
      const r = await openai.chat.completions.create({ model: MODEL, messages: ask, tools, parallel_tool_calls: false, response_format: { type: "json_schema", json_schema: { name: "a", schema } }, temperature: 1, max_tokens: 300, seed });
      const m = r.choices[0]!.message;
      if (m.tool_calls?.length) expectValidCalls(m.tool_calls.map((c) => (c.type === "function" ? c.function : { name: "", arguments: "" })));
      else expect(ajv.validate(schema, JSON.parse(m.content!))).toBe(true);
    }
  }, 120_000);

  test("bad tool requests are 400s with the reason", async () => {
    const err = (p: object) => openai.chat.completions.create({ model: MODEL, messages: ask, max_tokens: 4, ...p } as OpenAI.ChatCompletionCreateParamsNonStreaming).then(() => null, (e) => e);
    let e = await err({ tool_choice: "required" });
    expect(e).toBeInstanceOf(OpenAI.BadRequestError);
    expect(e.message).toMatch(/tool_choice needs tools/);
    e = await err({ tools, tool_choice: { type: "function", function: { name: "nope" } } });
    expect(e.message).toMatch(/'nope', which is not among the tools/);
    e = await err({ tools: [{ type: "function", function: { name: "bad name!" } }] });
    expect(e).toBeInstanceOf(OpenAI.BadRequestError);
    e = await err({ tools: [{ type: "function", function: { name: "search", parameters: { type: "object", properties: { q: { not: { type: "null" } } } } } }], tool_choice: "required" });
    expect(e.message).toMatch(/tool 'search': 'not' is not supported/);
    expect(e.param).toBe("tools");
    e = await err({ messages: [...ask, { role: "tool", content: "x" }] });
    expect(e.message).toMatch(/tool_call_id/);
    e = await err({ tools, tool_choice: "required", grammar: 'root ::= "x"' });
    expect(e.message).toMatch(/cannot be combined with tools/);
  }, 60_000);
});
