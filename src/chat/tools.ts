// Tool calling: which call syntax a chat template teaches its model, a grammar that forces a
// well-formed call in that syntax (tool_choice required or a named function), and a parser that
// turns the model's output into content and tool calls, also while it is still arriving.
//
// The parser is prefix-consistent: for any prefix p of a text t, parse(p).content is a prefix of
// parse(t).content and each call of parse(p) has the name and a prefix of the arguments of the
// same call of parse(t). Streaming sends the differences between successive parses, so the
// reassembled stream equals the non-streamed answer by construction.
import { literal } from "../grammar/gbnf";
import { SchemaConverter, SchemaError } from "../grammar/json-schema";
import { type Member, scanObject, skipWs } from "./json-scan";

export interface ToolFunction {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
  strict?: boolean | null;
}
export interface Tool {
  type: "function";
  function: ToolFunction;
}
export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}
export type ToolChoice = "none" | "auto" | "required" | { type: "function"; function: { name: string } };

export type ToolFamily =
  | "llama3"
  | "hermes"
  | "mistral"
  | "functionary-v3.1"
  | "functionary-v3.2"
  | "firefunction"
  | "command-r7b"
  | "command-r-plus"
  | "generic";

/** The call syntax a template's model was trained on, from the template's text. */
export function detectFamily(source: string): ToolFamily {
  if (source.includes("[TOOL_CALLS]")) return "mistral";
  if (source.includes("<tool_call>")) return "hermes";
  if (source.includes(">>>all") || /'>>>' \+/.test(source)) return "functionary-v3.2";
  if (source.includes("<function=")) return "functionary-v3.1";
  if (source.includes("functools[")) return "firefunction";
  if (source.includes("<|START_ACTION|>")) return "command-r7b";
  if (source.includes("Action:") && source.includes("tool_name")) return "command-r-plus";
  if (source.includes("<|start_header_id|>") && source.includes('"parameters"')) return "llama3";
  return "generic";
}

/** Families whose generation prompt or answers need parsing even without tools. */
export function alwaysParsed(family: ToolFamily): boolean {
  return family === "functionary-v3.2";
}

/** Tool call ids: OpenAI-like, or 9 letters and digits where the template demands it (Mistral). */
export function newCallId(family: ToolFamily): string {
  const abc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const pick = (n: number) => Array.from(crypto.getRandomValues(new Uint8Array(n)), (b) => abc[b % abc.length]).join("");
  return family === "mistral" ? pick(9) : `call_${pick(24)}`;
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
  const q = (s: string) => literal(s);
  const perTool = tools.map((t, i) => {
    let args: string;
    try {
      args = c.convert(argumentSchema(t.function), `fn${i}-${t.function.name}`);
    } catch (e) {
      if (e instanceof SchemaError) throw new SchemaError(`tool '${t.function.name}': ${e.reason}`, e.path);
      throw e;
    }
    const name = t.function.name;
    switch (family) {
      case "llama3":
        return `${q(`{"name": "${name}", "parameters": `)} ${args} ${q("}")}`;
      case "hermes":
        return `${q(`<tool_call>\n{"name": "${name}", "arguments": `)} ${args} ${q("}\n</tool_call>")}`;
      case "mistral":
        return `${q(`{"name": "${name}", "arguments": `)} ${args} ${q(`, "id": "`)} [a-zA-Z0-9]{9} ${q(`"}`)}`;
      case "functionary-v3.1":
        return `${q(`<function=${name}>`)} ${args} ${q("</function>")}`;
      case "functionary-v3.2":
        return `${q(`${name}\n`)} ${args}`;
      case "firefunction":
      case "generic":
        return `${q(`{"name": "${name}", "arguments": `)} ${args} ${q("}")}`;
      case "command-r7b":
        return `${q(`{"tool_call_id": "`)} [0-9]{1,3} ${q(`", "tool_name": "${name}", "parameters": `)} ${args} ${q("}")}`;
      case "command-r-plus":
        return `${q(`{\n        "tool_name": "${name}",\n        "parameters": `)} ${args} ${q("\n    }")}`;
    }
  });
  const call = c.rules.add("tool-call", perTool.join(" | "));
  const many = (sep: string) => (parallel ? `${call} ( ${q(sep)} ${call} )*` : call);
  switch (family) {
    case "llama3":
      return call; // one call per message in Llama 3.x
    case "hermes":
      return many("\n");
    case "mistral":
      return `${q("[TOOL_CALLS][")} ${many(", ")} ${q("]")}`;
    case "functionary-v3.1":
      return many("");
    case "functionary-v3.2":
      return many(">>>");
    case "firefunction":
      return `${q("functools[")} ${many(", ")} ${q("]")}`;
    case "command-r7b":
      return `${q("<|START_ACTION|>[\n    ")} ${many(",\n    ")} ${q("\n]<|END_ACTION|>")}`;
    case "command-r-plus":
      return `${q("Action:\n```json\n[\n    ")} ${many(",\n    ")} ${q("\n]```")}`;
    case "generic":
      return `${q('{"tool_calls": [')} ${many(", ")} ${q("]}")}`;
  }
}

/** GBNF that admits only tool calls (see toolCallRoot). */
export function toolCallGrammar(family: ToolFamily, tools: Tool[], parallel: boolean): string {
  const c = new SchemaConverter();
  return c.rules.toString(toolCallRoot(c, family, tools, parallel));
}

/** For templates that know nothing of tools: a system message that describes them and the answer format. */
export function genericToolPrompt(tools: Tool[]): string {
  const list = JSON.stringify(tools.map((t) => t.function), null, 2);
  return (
    `You can call these tools (the JSON Schema of each one's arguments is under "parameters"):\n${list}\n\n` +
    `To call tools, answer with only this JSON and nothing else: {"tool_calls": [{"name": <tool name>, "arguments": <arguments object>}]}. ` +
    "Otherwise answer normally."
  );
}

// ---- parsing ----

export interface ParsedCall {
  name: string;
  /** The raw JSON text of the arguments (a prefix of it while incomplete). */
  arguments: string;
}
export interface ParsedOutput {
  content: string;
  calls: ParsedCall[];
}

/**
 * Content with whitespace trimmed at the start, at the end and around tool calls, decided from
 * the text so far: trailing whitespace waits until something else follows it.
 */
class Collector {
  content = "";
  calls: ParsedCall[] = [];
  /** Where in `content` each call sits (content before it is content[0, offset)). */
  offsets: number[] = [];
  #ws = "";
  #boundary = true;

  text(s: string) {
    if (this.#boundary) {
      s = s.replace(/^\s+/, "");
      if (!s) return;
      this.#boundary = false;
    }
    const m = /\s*$/.exec(s)!;
    const body = s.slice(0, m.index);
    if (body) {
      this.content += this.#ws + body;
      this.#ws = "";
    }
    this.#ws += m[0];
  }

  call(c?: ParsedCall) {
    this.#ws = "";
    this.#boundary = true;
    if (c) {
      this.calls.push(c);
      this.offsets.push(this.content.length);
    }
  }

  get result(): ParsedOutput {
    return { content: this.content, calls: this.calls };
  }
}

/**
 * What follows a marker: calls (end: where the text goes on, null when they run to its end),
 * "undecided" (more text is needed; only before the end), or not a call (the marker is text).
 */
type BodyResult = { kind: "calls"; calls: ParsedCall[]; end: number | null } | { kind: "undecided" } | { kind: "text" };

interface CallKeys {
  name: string[];
  args: string[];
  /** Other keys a call object may have. */
  extra: string[];
}

/** One call object at `i` (after whitespace): committed once its name is a tool's and its arguments have begun. */
function callObject(t: string, i: number, keys: CallKeys, names: Set<string>, final: boolean): BodyResult {
  i = skipWs(t, i);
  if (i >= t.length) return final ? { kind: "text" } : { kind: "undecided" };
  if (t[i] !== "{") return { kind: "text" };
  let name: string | null = null;
  let args: Member | null = null;
  let bad = false;
  const r = scanObject(t, i, () => {});
  for (const m of r.members ?? []) {
    if (keys.name.includes(m.key)) {
      if (m.valueEnd === null) break;
      try {
        const v = JSON.parse(t.slice(m.valueStart, m.valueEnd));
        if (typeof v !== "string" || !names.has(v)) bad = true;
        else name = v;
      } catch {
        bad = true;
      }
    } else if (keys.args.includes(m.key)) {
      args ??= m;
    } else if (!keys.extra.includes(m.key) && name === null) {
      bad = true;
    }
    if (bad) break;
  }
  const committed = !bad && name !== null && (args !== null || r.kind === "complete");
  if (!committed) {
    if (bad || r.kind === "invalid" || final) return { kind: "text" };
    return { kind: "undecided" };
  }
  const a = args as Member | null;
  const argText = a === null ? "{}" : t.slice(a.valueStart, a.valueEnd ?? t.length);
  const call = { name: name!, arguments: argText };
  if (r.kind === "complete") return { kind: "calls", calls: [call], end: r.end };
  // the call object is unfinished: it runs to the end, or ends where it went wrong
  if (r.kind === "invalid" && a?.valueEnd != null) return { kind: "calls", calls: [call], end: a.valueEnd };
  return { kind: "calls", calls: [call], end: null };
}

/** A list of call objects; `open` is true when the "[" is already consumed. */
function callArray(t: string, i: number, keys: CallKeys, names: Set<string>, final: boolean, open = false): BodyResult {
  if (!open) {
    i = skipWs(t, i);
    if (i >= t.length) return final ? { kind: "text" } : { kind: "undecided" };
    if (t[i] !== "[") return { kind: "text" };
    i++;
  }
  const calls: ParsedCall[] = [];
  let j = i;
  for (;;) {
    j = skipWs(t, j);
    if (j >= t.length) {
      if (!calls.length) return final ? { kind: "text" } : { kind: "undecided" };
      return { kind: "calls", calls, end: final ? j : null };
    }
    if (t[j] === "]" && calls.length) return { kind: "calls", calls, end: j + 1 };
    const r = callObject(t, j, keys, names, final);
    if (r.kind !== "calls") {
      if (!calls.length) return r;
      if (r.kind === "undecided") return { kind: "calls", calls, end: null };
      return { kind: "calls", calls, end: j };
    }
    calls.push(...r.calls);
    if (r.end === null) return { kind: "calls", calls, end: null };
    j = skipWs(t, r.end);
    if (j >= t.length) return { kind: "calls", calls, end: final ? j : null };
    if (t[j] === ",") j++;
    else if (t[j] === "]") return { kind: "calls", calls, end: j + 1 };
    else return { kind: "calls", calls, end: j };
  }
}

/** Skips `s` at i (after whitespace) if present; null while the text ends inside a prefix of it. */
function expect(t: string, i: number, s: string, final: boolean): number | null {
  const j = skipWs(t, i);
  if (t.startsWith(s, j)) return j + s.length;
  const rest = t.slice(j);
  if (!final && rest.length < s.length && s.startsWith(rest)) return null;
  return i;
}

/** After calls that ended at `end`, an optional closing marker. */
function closing(r: BodyResult, t: string, close: string, final: boolean): BodyResult {
  if (r.kind !== "calls" || r.end === null || !close) return r;
  const e = expect(t, r.end, close, final);
  return { ...r, end: e };
}

interface Opener {
  marker: string;
  /** Only where nothing but whitespace comes before it. */
  atStart?: boolean;
  /** Parses what follows; `at` is where the marker starts, `after` where it ends. */
  body(t: string, at: number, after: number, final: boolean): BodyResult;
}

function openers(family: ToolFamily, names: Set<string>): Opener[] {
  const std: CallKeys = { name: ["name"], args: ["arguments"], extra: ["id", "type"] };
  switch (family) {
    case "hermes":
      return [{ marker: "<tool_call>", body: (t, _a, i, f) => closing(callObject(t, i, std, names, f), t, "</tool_call>", f) }];
    case "llama3": {
      const keys: CallKeys = { name: ["name"], args: ["parameters", "arguments"], extra: ["type"] };
      // several calls may be separated by ';'
      const seq = (t: string, i: number, f: boolean): BodyResult => {
        const calls: ParsedCall[] = [];
        for (;;) {
          const r = callObject(t, i, keys, names, f);
          if (r.kind !== "calls") return calls.length ? { kind: "calls", calls, end: r.kind === "undecided" ? null : i } : r;
          calls.push(...r.calls);
          if (r.end === null) return { kind: "calls", calls, end: null };
          const j = skipWs(t, r.end);
          if (t[j] !== ";") return { kind: "calls", calls, end: r.end };
          i = j + 1;
        }
      };
      return [
        { marker: "<|python_tag|>", body: (t, _a, i, f) => seq(t, i, f) },
        { marker: "<|eom_id|>", body: (_t, _a, i) => ({ kind: "calls", calls: [], end: i }) },
        { marker: "{", atStart: true, body: (t, a, _i, f) => seq(t, a, f) },
      ];
    }
    case "mistral":
      return [{ marker: "[TOOL_CALLS]", body: (t, _a, i, f) => callArray(t, i, std, names, f) }];
    case "firefunction":
      return [{ marker: "functools[", body: (t, _a, i, f) => callArray(t, i, std, names, f, true) }];
    case "functionary-v3.1":
      return [{
        marker: "<function=",
        body: (t, _a, i, f) => {
          const m = /^[A-Za-z0-9_.-]*/.exec(t.slice(i))!;
          const end = i + m[0].length;
          if (end >= t.length) return f ? { kind: "text" } : { kind: "undecided" };
          if (t[end] !== ">" || !names.has(m[0])) return { kind: "text" };
          return closing(rawArguments(t, end + 1, m[0], f), t, "</function>", f);
        },
      }];
    case "command-r7b": {
      const keys: CallKeys = { name: ["tool_name"], args: ["parameters"], extra: ["tool_call_id"] };
      const skipTo = (close: string) => (t: string, _a: number, i: number): BodyResult => {
        const e = t.indexOf(close, i);
        return { kind: "calls", calls: [], end: e < 0 ? null : e + close.length };
      };
      return [
        { marker: "<|START_ACTION|>", body: (t, _a, i, f) => closing(callArray(t, i, keys, names, f), t, "<|END_ACTION|>", f) },
        { marker: "<|START_THINKING|>", body: skipTo("<|END_THINKING|>") },
        { marker: "<|START_RESPONSE|>", body: (_t, _a, i) => ({ kind: "calls", calls: [], end: i }) },
        { marker: "<|END_RESPONSE|>", body: (_t, _a, i) => ({ kind: "calls", calls: [], end: i }) },
      ];
    }
    case "command-r-plus": {
      const keys: CallKeys = { name: ["tool_name"], args: ["parameters"], extra: [] };
      return [{
        marker: "Action:",
        body: (t, _a, i, f) => {
          let j = expect(t, i, "```json", f);
          if (j === null) return { kind: "undecided" };
          if (j === i) {
            j = expect(t, i, "```", f);
            if (j === null) return { kind: "undecided" };
          }
          return closing(callArray(t, j, keys, names, f), t, "```", f);
        },
      }];
    }
    case "generic":
      return [{
        marker: "{",
        atStart: true,
        body: (t, a, _i, f) => {
          // {"tool_calls": [...]} or {"tool_call": {...}}
          let j = skipWs(t, a + 1);
          for (const [key, many] of [['"tool_calls"', true], ['"tool_call"', false]] as const) {
            const have = t.slice(j, j + key.length);
            if (!key.startsWith(have)) continue;
            if (have.length < key.length) return f ? { kind: "text" } : { kind: "undecided" };
            j = skipWs(t, j + key.length);
            if (j >= t.length) return f ? { kind: "text" } : { kind: "undecided" };
            if (t[j] !== ":") return { kind: "text" };
            const r = many ? callArray(t, j + 1, std, names, f) : callObject(t, j + 1, std, names, f);
            return closing(r, t, "}", f);
          }
          return { kind: "text" };
        },
      }];
    case "functionary-v3.2":
      return [];
  }
}

/** Functionary v3.1: arguments are the JSON value right after `<function=name>`. */
function rawArguments(t: string, i: number, name: string, final: boolean): BodyResult {
  const j = skipWs(t, i);
  if (j >= t.length) return final ? { kind: "calls", calls: [{ name, arguments: "{}" }], end: j } : { kind: "undecided" };
  if (t[j] !== "{") return { kind: "text" };
  const r = scanObject(t, j, () => {});
  if (r.kind === "complete") return { kind: "calls", calls: [{ name, arguments: t.slice(j, r.end) }], end: r.end };
  return { kind: "calls", calls: [{ name, arguments: t.slice(j) }], end: null };
}

/** Splits model output into content and tool calls (see the file comment). */
export function parseToolOutput(family: ToolFamily, text: string, final: boolean, toolNames: Iterable<string>): ParsedOutput {
  return collect(family, text, final, toolNames).result;
}

/** parseToolOutput, with where each call sits in the content. */
function collect(family: ToolFamily, text: string, final: boolean, toolNames: Iterable<string>): Collector {
  const names = new Set(toolNames);
  if (family === "functionary-v3.2") return parseFunctionaryV32(text, final, names);
  const ops = openers(family, names);
  const out = new Collector();
  let pos = 0;
  for (;;) {
    // the earliest marker from pos
    let best: { op: Opener; at: number } | null = null;
    for (const op of ops) {
      let at: number;
      if (op.atStart) {
        at = skipWs(text, pos);
        if (pos !== 0 || !text.startsWith(op.marker, at)) continue;
      } else {
        at = text.indexOf(op.marker, pos);
        if (at < 0) continue;
      }
      if (!best || at < best.at) best = { op, at };
    }
    if (!best) {
      let rest = text.slice(pos);
      if (!final) rest = rest.slice(0, rest.length - heldBack(rest, ops.filter((o) => !o.atStart).map((o) => o.marker)));
      out.text(rest);
      break;
    }
    out.text(text.slice(pos, best.at));
    const r = best.op.body(text, best.at, best.at + best.op.marker.length, final);
    if (r.kind === "undecided") break; // wait for more text
    if (r.kind === "text") {
      out.text(best.op.marker);
      pos = best.at + best.op.marker.length;
      continue;
    }
    if (!r.calls.length) out.call();
    for (const c of r.calls) out.call(c);
    if (r.end === null) break;
    pos = r.end;
  }
  return out;
}

/** How many characters at the end of `s` could begin a marker. */
function heldBack(s: string, markers: string[]): number {
  let n = 0;
  for (const m of markers) {
    for (let k = Math.min(m.length - 1, s.length); k > n; k--) {
      if (s.endsWith(m.slice(0, k))) {
        n = k;
        break;
      }
    }
  }
  return n;
}

/** Functionary v3.2: `>>>recipient\n` segments (the prompt ends with the first `>>>`). */
function parseFunctionaryV32(t: string, final: boolean, names: Set<string>): Collector {
  const out = new Collector();
  let pos = 0;
  for (;;) {
    const nl = t.indexOf("\n", pos);
    if (nl < 0) {
      // the recipient line is not finished
      if (final) out.text(t.slice(pos));
      break;
    }
    const recipient = t.slice(pos, nl).trim();
    if (names.has(recipient)) {
      const r = rawArguments(t, nl + 1, recipient, final);
      if (r.kind === "undecided") break;
      if (r.kind === "calls") {
        for (const c of r.calls) out.call(c);
        if (r.end === null) break;
        const e = expect(t, r.end, ">>>", final);
        if (e === null) break;
        if (e === r.end) {
          // text after the call that does not start another segment
          out.text(t.slice(r.end));
          break;
        }
        pos = e;
        continue;
      }
    }
    // content: after "all\n", or the whole segment when the recipient is not a tool
    const start = recipient === "all" ? nl + 1 : pos;
    const next = t.indexOf(">>>", start);
    if (next < 0) {
      let rest = t.slice(start);
      if (!final) rest = rest.slice(0, rest.length - heldBack(rest, [">>>"]));
      out.text(rest);
      break;
    }
    out.text(t.slice(start, next));
    out.call(); // a segment boundary
    pos = next + 3;
  }
  return out;
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
    return this.#diff(collect(this.family, this.#text, false, this.names));
  }

  /** At the end of the output: the rest. */
  finish(): StreamDelta {
    return this.#diff(collect(this.family, this.#text, true, this.names));
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
