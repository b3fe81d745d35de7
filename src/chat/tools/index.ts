// Tool calling: which call syntax a chat template teaches its model, a grammar that forces a
// well-formed call in that syntax (tool_choice required or a named function), and a parser that
// turns the model's output into content and tool calls, also while it is still arriving. Each
// syntax is one module of this folder behind the ToolFormat interface (format.ts), listed in
// registry.ts; the parsing pieces they share are in parse.ts.
import { literal } from "../../grammar/gbnf";
import { SchemaConverter, SchemaError } from "../../grammar/json-schema";
import type { Tool, ToolCall, ToolFamily, ToolFunction } from "./format";
import { type Collector, collect, type ParsedOutput } from "./parse";
import { format, formats } from "./registry";

export type { Tool, ToolCall, ToolChoice, ToolFamily, ToolFunction } from "./format";
export type { ParsedCall, ParsedOutput } from "./parse";
export { genericToolPrompt } from "./generic";

/** The call syntax a template's model was trained on, from the template's text. */
export function detectFamily(source: string): ToolFamily {
  return formats.find((f) => f.detects(source))!.family;
}

/** Families whose generation prompt or answers need parsing even without tools. */
export function alwaysParsed(family: ToolFamily): boolean {
  return format(family).alwaysParsed === true;
}

/** Tool call ids: OpenAI-like, or as the family's template demands (Mistral: 9 letters and digits). */
export function newCallId(family: ToolFamily): string {
  const abc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const pick = (n: number) => Array.from(crypto.getRandomValues(new Uint8Array(n)), (b) => abc[b % abc.length]).join("");
  return format(family).callId?.(pick) ?? `call_${pick(24)}`;
}

// ---- grammar for a forced call ----

/** The JSON Schema of a tool's arguments, which must describe an object. */
function argumentSchema(f: ToolFunction): Record<string, unknown> {
  const p = f.parameters;
  if (p === undefined || p === null || Object.keys(p).length === 0) return { type: "object", properties: {} };
  if (p.type === undefined) return { ...p, type: "object" };
  if (p.type !== "object") throw new SchemaError(`the parameters of '${f.name}' must be an object schema`, "#");
  return p;
}

/**
 * The root expression of a grammar (rules in `c`) that admits only tool calls of `tools` in the
 * family's syntax; several calls when `parallel`. Invalid parameter schemas throw SchemaError
 * naming the tool.
 */
export function toolCallRoot(c: SchemaConverter, family: ToolFamily, tools: Tool[], parallel: boolean): string {
  const f = format(family);
  const perTool = tools.map((t, i) => {
    let args: string;
    try {
      args = c.convert(argumentSchema(t.function), `fn${i}-${t.function.name}`);
    } catch (e) {
      if (e instanceof SchemaError) throw new SchemaError(`tool '${t.function.name}': ${e.reason}`, e.path);
      throw e;
    }
    return f.call(t.function.name, args, literal);
  });
  const call = c.rules.add("tool-call", perTool.join(" | "));
  return f.message(call, (sep) => (parallel ? `${call} ( ${literal(sep)} ${call} )*` : call), literal);
}

/** GBNF that admits only tool calls (see toolCallRoot). */
export function toolCallGrammar(family: ToolFamily, tools: Tool[], parallel: boolean): string {
  const c = new SchemaConverter();
  return c.rules.toString(toolCallRoot(c, family, tools, parallel));
}

// ---- parsing ----

/** Splits model output into content and tool calls (parse.ts says how, and what stays consistent while it grows). */
export function parseToolOutput(family: ToolFamily, text: string, final: boolean, toolNames: Iterable<string>): ParsedOutput {
  return collectCalls(family, text, final, toolNames).result;
}

/** parseToolOutput, with where each call sits in the content. */
function collectCalls(family: ToolFamily, text: string, final: boolean, toolNames: Iterable<string>): Collector {
  const names = new Set(toolNames);
  const f = format(family);
  return f.parse ? f.parse(text, final, names) : collect(f.openers(names), text, final);
}

// ---- streaming ----

/** An OpenAI tool-call delta: the first one of a call carries id, type and name. */
export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: "function";
  function: { name?: string; arguments: string };
}

/** Content and calls in the order they appear in the output. */
export type StreamPart = { content: string } | { call: ToolCallDelta };

/**
 * What a piece of output adds: the content and the tool-call deltas (as chat streams them), and
 * both in output order (`parts`: text before, between and after calls, for APIs whose output
 * items keep that order).
 */
export interface StreamDelta {
  content: string;
  toolCalls: ToolCallDelta[];
  parts: StreamPart[];
}

/** Turns growing output into content and tool-call deltas (the differences between parses). */
export class ToolStream {
  #text = "";
  #content = "";
  #calls: { id: string; name: string; arguments: string }[] = [];

  constructor(
    readonly family: ToolFamily,
    readonly names: string[],
  ) {}

  /** Adds text; returns what to send. */
  push(text: string): StreamDelta {
    this.#text += text;
    return this.#diff(collectCalls(this.family, this.#text, false, this.names));
  }

  /** At the end of the output: the rest. */
  finish(): StreamDelta {
    return this.#diff(collectCalls(this.family, this.#text, true, this.names));
  }

  get calls(): ToolCall[] {
    return this.#calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
  }

  get content(): string {
    return this.#content;
  }

  #diff(p: Collector): StreamDelta {
    // prefix-consistency makes these slices exact; guard anyway so nothing is sent twice
    const sent = this.#content.length;
    const fresh = p.content.startsWith(this.#content);
    const content = fresh ? p.content.slice(sent) : "";
    this.#content += content;
    const toolCalls: ToolCallDelta[] = [];
    const parts: StreamPart[] = [];
    // new content goes before, between and after the new calls, where each call sits
    let pos = sent;
    const textTo = (end: number) => {
      if (fresh && end > pos) parts.push({ content: p.content.slice(pos, end) });
      pos = Math.max(pos, end);
    };
    p.calls.forEach((c, index) => {
      const known = this.#calls[index];
      let d: ToolCallDelta | null = null;
      if (!known) {
        const id = newCallId(this.family);
        this.#calls.push({ id, name: c.name, arguments: c.arguments });
        d = { index, id, type: "function", function: { name: c.name, arguments: c.arguments } };
        textTo(p.offsets[index]!);
      } else if (c.arguments.length > known.arguments.length && c.arguments.startsWith(known.arguments)) {
        d = { index, function: { arguments: c.arguments.slice(known.arguments.length) } };
        known.arguments = c.arguments;
      }
      if (d) {
        toolCalls.push(d);
        parts.push({ call: d });
      }
    });
    textTo(p.content.length);
    return { content, toolCalls, parts };
  }
}
