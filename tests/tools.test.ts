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
import { modelsDir, sharedModel } from "./helpers/paths";
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
const templateText = (f: string) => readFileSync(join(modelsDir, "templates", f), "utf8");

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
    const bad: Tool = { type: "function", function: { name: "search", parameters: { type: "object", properties: { q: { type: "string", pattern: "^a" } } } } };
    expect(() => toolCallGrammar("hermes", [bad], false)).toThrow(/tool 'search': 'pattern'/);
    const notObject: Tool = { type: "function", function: { name: "f", parameters: { type: "string" } } };
    expect(() => toolCallGrammar("hermes", [notObject], false)).toThrow(/must be an object schema/);
  });
});
