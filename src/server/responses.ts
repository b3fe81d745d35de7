// POST /v1/responses: OpenAI's Responses API over the chat pipeline. The input (a string, or
// message, function_call and function_call_output items) becomes chat messages, instructions a
// system message, function tools and text.format what chat's tools and response_format are; the
// output (text and tool calls, parsed as on chat) becomes output items, streamed with the
// Responses event types. Responses are kept in memory, within a bound, for previous_response_id
// and GET/DELETE /v1/responses/{id}.
import { randomBytes } from "node:crypto";
import { z } from "zod";
import type { ToolCallDelta } from "../chat/tools";
import type { ChoiceDelta, ChoiceState, FanIn } from "./choices";
import type { Finish, Generation } from "../engine/engine";
import { ApiError, badRequest, notFound } from "./errors";
import { type ChatRequest, jsonObject, name64 } from "./schemas";
import { deadlineError, parseBody } from "./request";
import { sseResponse } from "./sse";
import type { VeloServer } from "./server";

// ---- the request ----

const part = z.object({ type: z.string() }).loose();
const item = z.object({ type: z.string().optional() }).loose();

const functionTool = z.object({
  type: z.literal("function"),
  name: name64,
  description: z.string().optional().nullable(),
  parameters: jsonObject.optional().nullable(),
  strict: z.boolean().optional().nullable(),
}).loose();

const textFormat = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text") }).strict(),
  z.object({ type: z.literal("json_object") }).strict(),
  z.object({
    type: z.literal("json_schema"),
    name: name64,
    schema: z.union([jsonObject, z.boolean()]),
    description: z.string().optional().nullable(),
    strict: z.boolean().optional().nullable(),
  }).strict(),
]);

export const responsesRequest = z.object({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(item)]).optional().nullable(),
  instructions: z.string().optional().nullable(),
  max_output_tokens: z.number().int().min(1).optional().nullable(),
  temperature: z.number().min(0).max(2).optional().nullable(),
  top_p: z.number().min(0).max(1).optional().nullable(),
  top_k: z.number().int().min(0).optional().nullable(),
  min_p: z.number().min(0).max(1).optional().nullable(),
  seed: z.number().int().optional().nullable(),
  stream: z.boolean().optional().nullable(),
  tools: z.array(z.object({ type: z.string() }).loose()).max(128).optional().nullable(),
  tool_choice: z.union([
    z.enum(["none", "auto", "required"]),
    z.object({ type: z.string(), name: z.string().optional() }).loose(),
  ]).optional().nullable(),
  parallel_tool_calls: z.boolean().optional().nullable(),
  text: z.object({
    format: textFormat.optional().nullable(),
    verbosity: z.enum(["low", "medium", "high"]).optional().nullable(),
  }).strict().optional().nullable(),
  previous_response_id: z.string().optional().nullable(),
  store: z.boolean().optional().nullable(),
  metadata: z.record(z.string(), z.string()).optional().nullable(),
}).strict();
export type ResponsesRequest = z.infer<typeof responsesRequest>;

type ChatMessage = ChatRequest["messages"][number];
type ChatToolCall = NonNullable<ChatMessage["tool_calls"]>[number];

/** The text of a content list: text parts only (anything else is a 400 naming its place). */
function partsText(content: unknown, where: string, allowed: string[]): string {
  if (typeof content === "string") return content;
  const parts = z.array(part).safeParse(content);
  if (!parts.success) throw badRequest(`${where}: must be a string or a list of content parts`, where);
  return parts.data.map((p, j) => {
    if (!allowed.includes(p.type)) throw badRequest(`${where}[${j}]: content of type '${p.type}' is not supported (text only: ${allowed.join(", ")})`, `${where}[${j}].type`);
    const text = p.type === "refusal" ? p.refusal : p.text;
    if (typeof text !== "string") throw badRequest(`${where}[${j}]: a ${p.type} part needs its text`, `${where}[${j}]`);
    return text;
  }).join("");
}

const messageItem = z.object({
  role: z.enum(["user", "assistant", "system", "developer"]),
  content: z.unknown(),
}).loose();
const callItem = z.object({ call_id: z.string().min(1), name: z.string().min(1), arguments: z.string() }).loose();
const outputItem = z.object({ call_id: z.string().min(1), output: z.unknown() }).loose();

/** Response input items as chat messages (calls join the assistant turn before them). */
export function inputMessages(input: ResponsesRequest["input"]): ChatMessage[] {
  if (input == null) return [];
  if (typeof input === "string") return [{ role: "user", content: input }];
  const out: ChatMessage[] = [];
  input.forEach((raw, i) => {
    const where = `input[${i}]`;
    const type = raw.type ?? "message";
    const check = <T extends z.ZodTypeAny>(schema: T): z.infer<T> => {
      const r = schema.safeParse(raw);
      if (!r.success) {
        const issue = r.error.issues[0]!;
        throw badRequest(`${where}.${issue.path.join(".")}: ${issue.message}`, `${where}.${issue.path.join(".")}`);
      }
      return r.data;
    };
    if (type === "message") {
      const m = check(messageItem);
      const allowed = m.role === "assistant" ? ["output_text", "refusal", "input_text"] : ["input_text", "output_text"];
      const content = partsText(m.content, `${where}.content`, allowed);
      out.push({ role: m.role === "developer" ? "system" : m.role, content });
    } else if (type === "function_call") {
      const c = check(callItem);
      const call: ChatToolCall = { id: c.call_id, type: "function", function: { name: c.name, arguments: c.arguments } };
      const last = out.at(-1);
      if (last?.role === "assistant") (last.tool_calls ??= []).push(call);
      else out.push({ role: "assistant", content: null, tool_calls: [call] });
    } else if (type === "function_call_output") {
      const o = check(outputItem);
      out.push({ role: "tool", tool_call_id: o.call_id, content: partsText(o.output, `${where}.output`, ["input_text", "output_text"]) });
    } else {
      throw badRequest(`${where}: input items of type '${type}' are not supported (message, function_call and function_call_output are)`, `${where}.type`);
    }
  });
  return out;
}

// ---- the store ----

interface Stored {
  /** The conversation to this response's end, without instructions (they are not carried over). */
  messages: ChatMessage[];
  response: ResponseObject;
  size: number;
}

/** Responses kept in memory for previous_response_id: the newest `maxCount`, at most `maxBytes` of JSON. */
export class ResponseStore {
  readonly #map = new Map<string, Stored>();
  #bytes = 0;

  constructor(
    readonly maxCount = 256,
    readonly maxBytes = 64 << 20,
  ) {}

  put(id: string, messages: ChatMessage[], response: ResponseObject): void {
    const size = JSON.stringify(messages).length + JSON.stringify(response).length;
    if (size > this.maxBytes) return;
    this.#map.set(id, { messages, response, size });
    this.#bytes += size;
    for (const [k, v] of this.#map) {
      if (this.#map.size <= this.maxCount && this.#bytes <= this.maxBytes) break;
      this.#map.delete(k);
      this.#bytes -= v.size;
    }
  }

  get(id: string): Stored | undefined {
    return this.#map.get(id);
  }

  get size(): number {
    return this.#map.size;
  }

  retrieve(id: string): Response {
    const s = this.#map.get(id);
    if (!s) throw notFound(`no stored response '${id}' (responses are kept in memory, the newest ${this.maxCount})`);
    return Response.json(s.response);
  }

  remove(id: string): Response {
    const s = this.#map.get(id);
    if (!s) throw notFound(`no stored response '${id}'`);
    this.#map.delete(id);
    this.#bytes -= s.size;
    return Response.json({ id, object: "response", deleted: true });
  }
}

// ---- the output ----

interface OutputText {
  type: "output_text";
  text: string;
  annotations: never[];
  logprobs: never[];
}
type OutputItem =
  | { id: string; type: "message"; status: string; role: "assistant"; content: OutputText[] }
  | { id: string; type: "function_call"; status: string; call_id: string; name: string; arguments: string };
type ResponseObject = Record<string, unknown> & { id: string; output: OutputItem[]; status: string };
type Event = Record<string, unknown> & { type: string };

const newId = (prefix: string) => `${prefix}_${randomBytes(16).toString("hex")}`;

/**
 * Output items built from a choice's deltas, and the stream events that build them: text goes
 * into a message item, each tool call into a function_call item, in the order they come.
 */
export class OutputBuilder {
  readonly items: OutputItem[] = [];
  #open: OutputItem | null = null;
  /** Tool-call index → its item. */
  readonly #calls = new Map<number, OutputItem & { type: "function_call" }>();

  push(d: ChoiceDelta): Event[] {
    const events: Event[] = [];
    for (const p of d.parts) {
      if ("content" in p) this.#text(p.content, events);
      else this.#call(p.call, events);
    }
    return events;
  }

  #text(content: string, events: Event[]): void {
    if (!content) return;
    let m = this.#open;
    if (m?.type !== "message") {
      events.push(...this.#close("completed"));
      m = { id: newId("msg"), type: "message", status: "in_progress", role: "assistant", content: [] };
      events.push(this.#add(m));
      const partAdded: OutputText = { type: "output_text", text: "", annotations: [], logprobs: [] };
      m.content.push({ ...partAdded });
      events.push({ type: "response.content_part.added", item_id: m.id, output_index: this.items.length - 1, content_index: 0, part: partAdded });
    }
    m.content[0]!.text += content;
    events.push({ type: "response.output_text.delta", item_id: m.id, output_index: this.items.length - 1, content_index: 0, delta: content, logprobs: [] });
  }

  #call(t: ToolCallDelta, events: Event[]): void {
    if (t.id) {
      events.push(...this.#close("completed"));
      const c = { id: newId("fc"), type: "function_call" as const, status: "in_progress", call_id: t.id, name: t.function.name!, arguments: "" };
      this.#calls.set(t.index, c);
      events.push(this.#add(c));
    }
    const c = this.#calls.get(t.index)!;
    if (t.function.arguments) {
      c.arguments += t.function.arguments;
      events.push({ type: "response.function_call_arguments.delta", item_id: c.id, output_index: this.items.indexOf(c), delta: t.function.arguments });
    }
  }

  /** Closes the open item: completed, or incomplete when the output was cut short. */
  finish(status: "completed" | "incomplete"): Event[] {
    return this.#close(status);
  }

  #add(it: OutputItem): Event {
    this.items.push(it);
    this.#open = it;
    return { type: "response.output_item.added", output_index: this.items.length - 1, item: structuredClone(it) };
  }

  #close(status: string): Event[] {
    const it = this.#open;
    if (!it) return [];
    this.#open = null;
    it.status = status;
    const output_index = this.items.indexOf(it);
    const events: Event[] = [];
    if (it.type === "message") {
      const p = it.content[0]!;
      events.push({ type: "response.output_text.done", item_id: it.id, output_index, content_index: 0, text: p.text, logprobs: [] });
      events.push({ type: "response.content_part.done", item_id: it.id, output_index, content_index: 0, part: structuredClone(p) });
    } else {
      events.push({ type: "response.function_call_arguments.done", item_id: it.id, output_index, name: it.name, arguments: it.arguments });
    }
    events.push({ type: "response.output_item.done", output_index, item: structuredClone(it) });
    return events;
  }
}

/** The assistant turn of output items, for the stored conversation. */
function outputMessages(items: OutputItem[]): ChatMessage[] {
  const text = items.flatMap((i) => (i.type === "message" ? [i.content[0]!.text] : [])).join("");
  const calls: ChatToolCall[] = items.flatMap((i) => (i.type === "function_call" ? [{ id: i.call_id, type: "function" as const, function: { name: i.name, arguments: i.arguments } }] : []));
  if (!text && !calls.length) return [{ role: "assistant", content: "" }];
  return [calls.length ? { role: "assistant", content: text || null, tool_calls: calls } : { role: "assistant", content: text }];
}

// ---- the handler ----

export async function createResponse(server: VeloServer, req: Request): Promise<Response> {
  const body = await parseBody(req, responsesRequest, "responses");
  if (body.text?.verbosity != null && body.text.verbosity !== "medium") throw badRequest("text.verbosity is not supported by this server: verbosity control", "text.verbosity", "unsupported_parameter");

  // the conversation: a stored response's, then this input
  let history: ChatMessage[] = [];
  if (body.previous_response_id != null) {
    const prev = server.responses.get(body.previous_response_id);
    if (!prev) {
      throw badRequest(`previous_response_id '${body.previous_response_id}' is not stored here (responses are kept in memory, the newest ${server.responses.maxCount}, until the server restarts; store: false keeps none)`, "previous_response_id", "previous_response_not_found");
    }
    history = prev.messages;
  }
  const input = inputMessages(body.input);
  if (!history.length && !input.length) throw badRequest("input is empty", "input");
  const conversation = [...history, ...input];
  const messages: ChatMessage[] = body.instructions ? [{ role: "system", content: body.instructions }, ...conversation] : conversation;

  // tools and tool_choice in chat's shape
  const tools = (body.tools ?? []).map((t, i) => {
    if (t.type !== "function") throw badRequest(`tools[${i}]: tools of type '${t.type}' are not supported (function tools only)`, `tools[${i}].type`);
    const r = functionTool.safeParse(t);
    if (!r.success) throw badRequest(`tools[${i}].${r.error.issues[0]!.path.join(".")}: ${r.error.issues[0]!.message}`, `tools[${i}]`);
    return { type: "function" as const, function: { name: r.data.name, description: r.data.description, parameters: r.data.parameters, strict: r.data.strict } };
  });
  let toolChoice: ChatRequest["tool_choice"];
  const tc = body.tool_choice;
  if (typeof tc === "object" && tc !== null) {
    if (tc.type !== "function" || !tc.name) throw badRequest(`tool_choice of type '${tc.type}' is not supported (none, auto, required or {"type": "function", "name": …})`, "tool_choice");
    toolChoice = { type: "function", function: { name: tc.name } };
  } else {
    toolChoice = tc;
  }
  const format = body.text?.format;
  const chat: ChatRequest = {
    model: body.model,
    messages,
    max_completion_tokens: body.max_output_tokens,
    temperature: body.temperature,
    top_p: body.top_p,
    top_k: body.top_k,
    min_p: body.min_p,
    seed: body.seed,
    tools: tools.length ? tools : undefined,
    tool_choice: toolChoice,
    parallel_tool_calls: body.parallel_tool_calls,
    response_format: format == null || format.type === "text" ? undefined
      : format.type === "json_object" ? { type: "json_object" }
      : { type: "json_schema", json_schema: { name: format.name, schema: format.schema, strict: format.strict } },
  };
  const plan = server.planChat(chat, { format: "text.format", maxTokens: "max_output_tokens" });
  const { fan, states, gens } = server.launch(req, chat, plan, 1);

  const id = newId("resp");
  const createdAt = Math.floor(Date.now() / 1000);
  const store = body.store !== false;
  const responseObject = (status: string, items: OutputItem[], finish: Finish | null, error: { code: string; message: string } | null = null): ResponseObject => ({
    id,
    object: "response",
    created_at: createdAt,
    status,
    background: false,
    completed_at: status === "completed" ? Math.floor(Date.now() / 1000) : null,
    error,
    incomplete_details: status === "incomplete" ? { reason: "max_output_tokens" } : null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    max_tool_calls: null,
    metadata: body.metadata ?? {},
    model: server.modelId,
    output: items,
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    reasoning: { effort: null, summary: null },
    service_tier: "default",
    store,
    temperature: body.temperature ?? null,
    text: { format: format ?? { type: "text" }, verbosity: "medium" },
    tool_choice: body.tool_choice ?? "auto",
    tools: body.tools ?? [],
    top_logprobs: 0,
    top_p: body.top_p ?? null,
    truncation: "disabled",
    usage: finish ? responseUsage(finish) : null,
    user: null,
  });
  const remember = (r: ResponseObject) => {
    if (store && r.status !== "failed") server.responses.put(id, [...conversation, ...outputMessages(r.output)], r);
  };

  const builder = new OutputBuilder();
  const state = states[0]!;
  if (!body.stream) {
    // the same builder as streaming, so both give the same items in the same order
    let last = 0;
    for await (const e of fan) {
      if ("chunk" in e) {
        last = server.observeTokens(e.chunk.tokens.length, last);
        builder.push(state.push(e.chunk));
      } else {
        server.observeFinish(e.finish);
        builder.push(state.end(e.finish));
      }
    }
    if (fan.deadline) throw deadlineError(fan.deadline.message);
    if (state.finish!.reason === "error") throw new ApiError(500, state.finish!.message ?? "generation failed", "server_error", null, "generation_failed");
    const status = state.finish!.reason === "length" ? "incomplete" : "completed";
    builder.finish(status);
    const r = responseObject(status, builder.items, state.finish);
    remember(r);
    return Response.json(r);
  }
  return streamResponse(server, fan, state, gens, builder, responseObject, remember);
}

function responseUsage(f: Finish) {
  const u = f.usage;
  return {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: u.cached_tokens },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: u.prompt_tokens + u.completion_tokens,
  };
}

function streamResponse(
  server: VeloServer,
  fan: FanIn,
  state: ChoiceState,
  gens: Generation[],
  builder: OutputBuilder,
  responseObject: (status: string, items: OutputItem[], finish: Finish | null, error?: { code: string; message: string } | null) => ResponseObject,
  remember: (r: ResponseObject) => void,
): Response {
  let seq = 0;
  return sseResponse(gens, async (w) => {
    const send = (e: Event) => w.event(e.type, { ...e, sequence_number: seq++ });
    send({ type: "response.created", response: responseObject("in_progress", [], null) });
    send({ type: "response.in_progress", response: responseObject("in_progress", [], null) });
    let last = 0;
    for await (const e of fan) {
      w.active();
      if ("chunk" in e) {
        last = server.observeTokens(e.chunk.tokens.length, last);
        for (const ev of builder.push(state.push(e.chunk))) send(ev);
        continue;
      }
      server.observeFinish(e.finish);
      const rest = state.end(e.finish);
      if (e.finish.reason === "cancelled") return; // the client is gone
      if (e.finish.reason === "error") {
        const error = { code: "server_error", message: e.finish.message ?? "generation failed" };
        send({ type: "response.failed", response: responseObject("failed", builder.items, e.finish, error) });
        return;
      }
      for (const ev of builder.push(rest)) send(ev);
      const status = e.finish.reason === "length" ? "incomplete" : "completed";
      for (const ev of builder.finish(status)) send(ev);
      const r = responseObject(status, builder.items, e.finish);
      remember(r);
      send({ type: status === "completed" ? "response.completed" : "response.incomplete", response: r });
    }
  });
}
