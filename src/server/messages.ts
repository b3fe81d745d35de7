// POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the chat
// pipeline. system and the messages' content blocks (text, tool_use, tool_result) become chat
// messages, Anthropic's tools and tool_choice chat's, output_config.format a JSON schema; the
// output (text and tool calls, parsed as on chat) becomes text and tool_use blocks, streamed
// with Anthropic's event types. Errors have Anthropic's shape (the route table says so).
import { randomBytes } from "node:crypto";
import { z } from "zod";
import type { ToolCallDelta } from "../chat/tools";
import type { ChoiceDelta } from "./choices";
import type { Finish } from "../engine/engine";
import { ApiError, anthropicType, badRequest } from "./errors";
import { type ChatRequest, jsonObject, name64 } from "./schemas";
import { deadlineError, parseBody } from "./request";
import { type SseWriter, sseResponse } from "./sse";
import type { VeloServer } from "./server";

const block = z.object({ type: z.string() }).loose();
const content = z.union([z.string(), z.array(block)]);

const tool = z.object({
  type: z.string().optional().nullable(),
  name: name64,
  description: z.string().optional().nullable(),
  input_schema: jsonObject,
  strict: z.boolean().optional().nullable(),
}).loose();

const toolChoice = z.discriminatedUnion("type", [
  z.object({ type: z.literal("auto"), disable_parallel_tool_use: z.boolean().optional().nullable() }).strict(),
  z.object({ type: z.literal("any"), disable_parallel_tool_use: z.boolean().optional().nullable() }).strict(),
  z.object({ type: z.literal("tool"), name: z.string().min(1), disable_parallel_tool_use: z.boolean().optional().nullable() }).strict(),
  z.object({ type: z.literal("none") }).strict(),
]);

const outputConfig = z.object({
  format: z.object({ type: z.literal("json_schema"), schema: jsonObject }).strict().optional().nullable(),
  effort: z.null().optional(),
}).strict();

const conversation = {
  model: z.string().min(1),
  messages: z.array(z.object({ role: z.enum(["user", "assistant", "system"]), content }).strict()).min(1),
  system: content.optional().nullable(),
  tools: z.array(z.object({ name: z.string() }).loose()).max(128).optional().nullable(),
  tool_choice: toolChoice.optional().nullable(),
  output_config: outputConfig.optional().nullable(),
};

export const messagesRequest = z.object({
  ...conversation,
  max_tokens: z.number().int().min(1),
  stop_sequences: z.array(z.string()).max(16).optional().nullable(),
  stream: z.boolean().optional().nullable(),
  temperature: z.number().min(0).max(1).optional().nullable(),
  top_p: z.number().min(0).max(1).optional().nullable(),
  top_k: z.number().int().min(0).optional().nullable(),
}).strict();
export type MessagesRequest = z.infer<typeof messagesRequest>;

export const countTokensRequest = z.object(conversation).strict();

type ChatMessage = ChatRequest["messages"][number];
type ChatToolCall = NonNullable<ChatMessage["tool_calls"]>[number];

/** The text of text blocks (or a string); other blocks are a 400 naming their place. */
function blocksText(c: z.infer<typeof content>, where: string): string {
  if (typeof c === "string") return c;
  return c.map((b, j) => {
    if (b.type !== "text" || typeof b.text !== "string") throw badRequest(`${where}[${j}]: content of type '${b.type}' is not supported here (text only)`, `${where}[${j}].type`);
    return b.text;
  }).join("");
}

/** Anthropic messages as chat messages: tool_use blocks become tool calls, tool_result blocks tool messages. */
export function chatMessages(system: MessagesRequest["system"], messages: MessagesRequest["messages"]): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (system != null) out.push({ role: "system", content: blocksText(system, "system") });
  messages.forEach((m, i) => {
    const where = `messages[${i}].content`;
    if (m.role === "system") {
      out.push({ role: "system", content: blocksText(m.content, where) });
      return;
    }
    if (typeof m.content === "string") {
      out.push({ role: m.role, content: m.content });
      return;
    }
    let text = "";
    const calls: ChatToolCall[] = [];
    m.content.forEach((b, j) => {
      const at = `${where}[${j}]`;
      if (b.type === "text") {
        if (typeof b.text !== "string") throw badRequest(`${at}.text: a text block needs its text`, `${at}.text`);
        text += b.text;
      } else if (b.type === "tool_use" && m.role === "assistant") {
        if (typeof b.id !== "string" || typeof b.name !== "string" || typeof b.input !== "object" || b.input === null) throw badRequest(`${at}: a tool_use block needs id, name and an input object`, at);
        calls.push({ id: b.id, type: "function", function: { name: b.name, arguments: JSON.stringify(b.input) } });
      } else if (b.type === "tool_result" && m.role === "user") {
        if (typeof b.tool_use_id !== "string") throw badRequest(`${at}.tool_use_id: a tool_result block needs tool_use_id`, `${at}.tool_use_id`);
        const c = b.content == null ? "" : blocksText(content.parse(b.content), `${at}.content`);
        out.push({ role: "tool", tool_call_id: b.tool_use_id, content: b.is_error === true ? `Error: ${c}` : c });
      } else if ((b.type === "thinking" || b.type === "redacted_thinking") && m.role === "assistant") {
        // earlier turns' thinking: the models served here have none to continue
      } else {
        throw badRequest(`${at}: ${m.role} content of type '${b.type}' is not supported (text, tool_use in assistant turns, tool_result in user turns)`, `${at}.type`);
      }
    });
    if (m.role === "assistant") {
      if (text || calls.length) out.push(calls.length ? { role: "assistant", content: text || null, tool_calls: calls } : { role: "assistant", content: text });
    } else if (text) {
      out.push({ role: "user", content: text });
    }
  });
  return out;
}

/** The request as a chat request (what /v1/chat/completions would have been sent). */
function chatRequest(body: z.infer<typeof countTokensRequest> & Partial<MessagesRequest>): ChatRequest {
  const tools = (body.tools ?? []).map((raw, i) => {
    const type = (raw as { type?: unknown }).type;
    if (type != null && type !== "custom") throw badRequest(`tools[${i}]: tools of type '${String(type)}' are not supported (client tools with an input_schema only)`, `tools[${i}].type`);
    const r = tool.safeParse(raw);
    if (!r.success) throw badRequest(`tools[${i}].${r.error.issues[0]!.path.join(".")}: ${r.error.issues[0]!.message}`, `tools[${i}]`);
    const t = r.data;
    return { type: "function" as const, function: { name: t.name, description: t.description, parameters: t.input_schema, strict: t.strict } };
  });
  const tc = body.tool_choice;
  const choice: ChatRequest["tool_choice"] = tc == null ? undefined
    : tc.type === "auto" ? "auto"
    : tc.type === "any" ? "required"
    : tc.type === "none" ? "none"
    : { type: "function", function: { name: tc.name } };
  const parallel = tc && "disable_parallel_tool_use" in tc && tc.disable_parallel_tool_use ? false : undefined;
  const schema = body.output_config?.format?.schema;
  return {
    model: body.model,
    messages: chatMessages(body.system, body.messages),
    max_tokens: body.max_tokens,
    stop: body.stop_sequences ?? undefined,
    temperature: body.temperature,
    top_p: body.top_p,
    top_k: body.top_k,
    tools: tools.length ? tools : undefined,
    tool_choice: choice,
    parallel_tool_calls: parallel,
    response_format: schema ? { type: "json_schema", json_schema: { name: "output", schema } } : undefined,
  };
}

// ---- output ----

type Block = { type: "text"; text: string } | { type: "tool_use"; id: string; name: string; input: unknown; json: string };
type Event = Record<string, unknown> & { type: string };

/** Content blocks built from a choice's deltas, in order, and the stream events that build them. */
export class BlockBuilder {
  readonly blocks: Block[] = [];
  #open: Block | null = null;
  readonly #calls = new Map<number, Block & { type: "tool_use" }>();

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
    if (this.#open?.type !== "text") {
      events.push(...this.close());
      this.#open = { type: "text", text: "" };
      this.blocks.push(this.#open);
      events.push({ type: "content_block_start", index: this.blocks.length - 1, content_block: { type: "text", text: "" } });
    }
    (this.#open as { text: string }).text += content;
    events.push({ type: "content_block_delta", index: this.blocks.length - 1, delta: { type: "text_delta", text: content } });
  }

  #call(t: ToolCallDelta, events: Event[]): void {
    if (t.id) {
      events.push(...this.close());
      const b = { type: "tool_use" as const, id: t.id, name: t.function.name!, input: {}, json: "" };
      this.#calls.set(t.index, b);
      this.blocks.push(b);
      this.#open = b;
      events.push({ type: "content_block_start", index: this.blocks.length - 1, content_block: { type: "tool_use", id: b.id, name: b.name, input: {} } });
    }
    const b = this.#calls.get(t.index)!;
    if (t.function.arguments) {
      b.json += t.function.arguments;
      events.push({ type: "content_block_delta", index: this.blocks.indexOf(b), delta: { type: "input_json_delta", partial_json: t.function.arguments } });
    }
  }

  close(): Event[] {
    const b = this.#open;
    if (!b) return [];
    this.#open = null;
    if (b.type === "tool_use") {
      try {
        b.input = JSON.parse(b.json || "{}");
      } catch {
        b.input = {}; // cut short by max_tokens (stop_reason says so)
      }
    }
    return [{ type: "content_block_stop", index: this.blocks.indexOf(b) }];
  }

  get content() {
    return this.blocks.map((b) => (b.type === "text" ? { type: "text", text: b.text } : { type: "tool_use", id: b.id, name: b.name, input: b.input }));
  }
}

/** Which stop sequence ended the output, from the text of all generated tokens (null: the model ended it). */
function matchedStop(server: VeloServer, tokens: number[], stops: string[] | null | undefined): string | null {
  if (!stops?.length || !tokens.length) return null;
  const full = server.model.detokenize(tokens);
  let best: { at: number; s: string } | null = null;
  for (const s of stops) {
    const at = s ? full.indexOf(s) : -1;
    if (at >= 0 && (!best || at < best.at)) best = { at, s };
  }
  return best?.s ?? null;
}

function stopReason(f: Finish, hasCalls: boolean, stop: string | null): string {
  if (f.reason === "length") return "max_tokens";
  if (hasCalls) return "tool_use";
  return stop !== null ? "stop_sequence" : "end_turn";
}

function messageUsage(f: Finish) {
  const u = f.usage;
  // Anthropic counts tokens read from the cache apart from input_tokens
  return { input_tokens: u.prompt_tokens - u.cached_tokens, output_tokens: u.completion_tokens, cache_creation_input_tokens: 0, cache_read_input_tokens: u.cached_tokens };
}

// ---- handlers ----

export async function countMessageTokens(server: VeloServer, req: Request): Promise<Response> {
  const body = await parseBody(req, countTokensRequest, "messages.count_tokens");
  const plan = server.planChat(chatRequest(body), { format: "output_config.format", maxTokens: "max_tokens", countOnly: true });
  return Response.json({ input_tokens: plan.tokens.length });
}

export async function createMessage(server: VeloServer, req: Request): Promise<Response> {
  const body = await parseBody(req, messagesRequest, "messages");
  const chat = chatRequest(body);
  const plan = server.planChat(chat, { format: "output_config.format", maxTokens: "max_tokens" });
  const { fan, states, gens } = server.launch(req, chat, plan, 1);
  const state = states[0]!;
  const id = `msg_${randomBytes(12).toString("hex")}`;
  const builder = new BlockBuilder();
  const tokens: number[] = [];
  const message = (f: Finish | null) => {
    const stop = f ? matchedStop(server, tokens, body.stop_sequences) : null;
    return {
      id,
      type: "message",
      role: "assistant",
      model: server.modelId,
      content: f ? builder.content : [],
      stop_reason: f ? stopReason(f, state.toolCalls.length > 0, stop) : null,
      stop_sequence: f && f.reason === "stop" && !state.toolCalls.length ? stop : null,
      usage: f ? messageUsage(f) : { input_tokens: plan.tokens.length, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    };
  };

  if (!body.stream) {
    let last = 0;
    for await (const e of fan) {
      if ("chunk" in e) {
        last = server.observeTokens(e.chunk.tokens.length, last);
        tokens.push(...e.chunk.tokens);
        builder.push(state.push(e.chunk));
      } else {
        server.observeFinish(e.finish);
        builder.push(state.end(e.finish));
        builder.close();
      }
    }
    if (fan.deadline) throw deadlineError(fan.deadline.message);
    if (state.finish!.reason === "error") throw new ApiError(500, state.finish!.message ?? "generation failed", "server_error", null, "generation_failed");
    return Response.json(message(state.finish));
  }

  const send = (w: SseWriter, e: Event) => w.event(e.type, e);
  return sseResponse(gens, async (w) => {
    send(w, { type: "message_start", message: message(null) });
    send(w, { type: "ping" });
    let last = 0;
    for await (const e of fan) {
      w.active();
      if ("chunk" in e) {
        last = server.observeTokens(e.chunk.tokens.length, last);
        tokens.push(...e.chunk.tokens);
        for (const ev of builder.push(state.push(e.chunk))) send(w, ev);
        continue;
      }
      server.observeFinish(e.finish);
      const rest = state.end(e.finish);
      if (e.finish.reason === "cancelled") return; // the client is gone
      if (e.finish.reason === "error") {
        send(w, { type: "error", error: { type: anthropicType(500), message: e.finish.message ?? "generation failed" } });
        return;
      }
      for (const ev of builder.push(rest)) send(w, ev);
      for (const ev of builder.close()) send(w, ev);
      const m = message(e.finish);
      send(w, { type: "message_delta", delta: { stop_reason: m.stop_reason, stop_sequence: m.stop_sequence }, usage: m.usage });
      send(w, { type: "message_stop" });
    }
  }, (w) => send(w, { type: "ping" }));
}
