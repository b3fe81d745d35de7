// Velo's OpenAI-compatible HTTP server: one route table, every handler failing closed with
// OpenAI-shaped errors, SSE streaming, cancellation on client disconnect, a bounded queue.
import type { Server } from "bun";
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { existsSync } from "node:fs";
import { InjectionError, tokenizeChat } from "../chat/prompt";
import { type ChatMessage, ChatTemplate } from "../chat/template";
import { alwaysParsed, type Tool, toolCallRoot, type ToolFamily } from "../chat/tools";
import { Engine, type EngineOptions, type Finish, type GenerateRequest, type Generation } from "../engine/engine";
import { ErrorCode, VeloError } from "../engine/errors";
import { Model } from "../engine/model";
import { jsonObjectGrammar, jsonSchemaToGrammar, SchemaConverter, SchemaError } from "../grammar/json-schema";
import { type ChatLogprob, type ChoiceDelta, ChoiceState, FanIn, type LegacyLogprobs, mergeLegacy, type Piece } from "./choices";
import { ApiError, badRequest, notFound, toApiError } from "./errors";
import { createEmbeddings } from "./embeddings";
import { countMessageTokens, createMessage } from "./messages";
import { createResponse, ResponseStore } from "./responses";
import { Metrics } from "./metrics";
import { deadlineError, keepBody, LIMIT_DEFAULTS, parseBody, readBody } from "./request";
import { sseResponse } from "./sse";
import {
  type ChatRequest, chatRequest, type CompletionRequest, completionRequest, detokenizeRequest, savePrefixRequest, tokenizeRequest,
} from "./schemas";

export interface ServerOptions {
  modelPath: string;
  /** Draft model of speculative decoding. */
  draftPath?: string;
  /** The id clients use in "model" (default: the file name without .gguf). */
  modelId?: string;
  host?: string;
  port?: number;
  apiKey?: string;
  engine?: EngineOptions;
  /** Requests allowed to wait beyond the running batch before new ones get 503. */
  maxQueue?: number;
  /** A saved prefix (e.g. a long system prompt) loaded at start; POST /prefix-cache/save writes it. */
  prefixCacheFile?: string;
  /** Sampling defaults (llama.cpp's) for fields a request leaves out. */
  defaults?: Partial<GenerateRequest>;
  /** A Jinja chat template to use instead of the model's own (its text). */
  chatTemplate?: string;
  /** Largest request body in bytes (default 8 MiB); larger ones get 413. */
  maxBodyBytes?: number;
  /** Seconds a generation may run before it is cancelled (504, or an error event); 0: none (default 600). */
  requestTimeoutS?: number;
  /** Seconds a connection may stay silent (slow bodies, idle keep-alive); 0: none (default 60, at most 255). */
  idleTimeoutS?: number;
  /** Browser origins allowed by CORS ("*" for any); none (the default): no CORS headers, no preflight. */
  corsOrigins?: string[];
  /** Check every tensor's values for NaN and infinity before the engine starts (--check-tensors). */
  checkTensors?: boolean;
}

type Handler = (req: Request, ctx: VeloServer, param: string) => Promise<Response> | Response;
interface Route {
  method: "GET" | "POST" | "DELETE";
  /** A path; a last segment ":id" matches any one segment (passed to the handler). */
  path: string;
  handler: Handler;
  /** Reachable without the API key. */
  open?: boolean;
  /** Errors in Anthropic's shape ({"type": "error", "error": {type, message}}). */
  anthropic?: boolean;
}

const routes: Route[] = [
  { method: "GET", path: "/health", handler: (_r, s) => s.health(), open: true },
  { method: "GET", path: "/metrics", handler: (_r, s) => s.metricsResponse() },
  { method: "GET", path: "/v1/models", handler: (_r, s) => s.models() },
  { method: "POST", path: "/v1/chat/completions", handler: (r, s) => s.chat(r) },
  { method: "POST", path: "/v1/completions", handler: (r, s) => s.completions(r) },
  { method: "POST", path: "/v1/responses", handler: (r, s) => createResponse(s, r) },
  { method: "GET", path: "/v1/responses/:id", handler: (_r, s, id) => s.responses.retrieve(id) },
  { method: "DELETE", path: "/v1/responses/:id", handler: (_r, s, id) => s.responses.remove(id) },
  { method: "POST", path: "/v1/messages", handler: (r, s) => createMessage(s, r), anthropic: true },
  { method: "POST", path: "/v1/messages/count_tokens", handler: (r, s) => countMessageTokens(s, r), anthropic: true },
  { method: "POST", path: "/v1/embeddings", handler: (r, s) => createEmbeddings(s, r) },
  { method: "POST", path: "/tokenize", handler: (r, s) => s.tokenize(r) },
  { method: "POST", path: "/detokenize", handler: (r, s) => s.detokenize(r) },
  { method: "POST", path: "/prefix-cache/save", handler: (r, s) => s.savePrefix(r) },
];
// llama-server also serves these without the /v1 prefix (clients whose base URL lacks it)
for (const path of ["/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/embeddings"]) {
  routes.push({ ...routes.find((r) => r.path === path)!, path: path.slice("/v1".length) });
}

const SAMPLING_DEFAULTS: Partial<GenerateRequest> = { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05 };

/** An output format asked for: GBNF, a JSON Schema, or any JSON object. */
type Format =
  | { kind: "gbnf"; gbnf: string; param: string }
  | { kind: "schema"; schema: unknown; param: string }
  | { kind: "object"; param: string };

/** What to run for a completion request and how to report it. */
export interface Plan {
  kind: "chat" | "text";
  tokens: number[];
  maxTokens: number | undefined;
  grammar: string | undefined;
  /** The request field the grammar came from (for errors). */
  grammarParam: string | null;
  /** Alternatives per token (0-20); null: no logprobs. */
  logprobs: number | null;
  /** Parse tool calls of this family out of the output. */
  tools: { family: ToolFamily; names: string[] } | null;
}

export class VeloServer {
  state: "loading" | "ready" | "failed" = "loading";
  loadError: string | null = null;
  model!: Model;
  draft?: Model;
  engine!: Engine;
  template!: ChatTemplate;
  readonly metrics = new Metrics();
  readonly modelId: string;
  readonly created = Math.floor(Date.now() / 1000);
  server: Server<unknown> | null = null;
  prefixTokensLoaded = 0;
  readonly #apiKeyHash: Buffer | null;
  readonly #pieces = new Map<number, Piece>();
  /** Responses kept for previous_response_id (/v1/responses). */
  readonly responses = new ResponseStore();

  constructor(readonly options: ServerOptions) {
    this.modelId = options.modelId ?? options.modelPath.split("/").at(-1)!.replace(/\.gguf$/i, "");
    this.#apiKeyHash = options.apiKey ? sha256(options.apiKey) : null;
  }

  /** Listens first (so /health answers 503 while loading), then loads the model. */
  start(): Server<unknown> {
    this.server = Bun.serve({
      hostname: this.options.host ?? "127.0.0.1",
      port: this.options.port ?? 8080,
      // slow or silent clients are dropped; generations switch it off for their request (launch)
      // and run under the request deadline instead
      idleTimeout: Math.min(255, this.options.idleTimeoutS ?? LIMIT_DEFAULTS.idleTimeoutS),
      // ours (413, OpenAI-shaped) cuts first: Bun's own limit only backs it up
      maxRequestBodySize: this.maxBodyBytes * 2 + (1 << 20),
      fetch: (req) => this.handle(req),
    });
    return this.server;
  }

  load(): void {
    try {
      this.model = Model.open(this.options.modelPath);
      if (this.options.checkTensors) this.model.checkTensors();
      const info = this.model.info();
      const piece = (id: number | null | undefined) => (id == null ? "" : new TextDecoder().decode(this.model.pieceBytes(id)));
      const ctx = { bosToken: piece(info.tokenizer?.bos), eosToken: piece(info.tokenizer?.eos) };
      this.template = this.options.chatTemplate !== undefined ? new ChatTemplate(this.options.chatTemplate, ctx) : ChatTemplate.forModel(info.metadata, ctx);
      if (this.options.draftPath) this.draft = Model.open(this.options.draftPath);
      if (this.options.checkTensors) this.draft?.checkTensors();
      this.engine = Engine.create(this.model, { ...this.options.engine }, this.draft);
      const file = this.options.prefixCacheFile;
      if (file && existsSync(file)) this.prefixTokensLoaded = this.engine.loadPrefix(file);
      this.state = "ready";
    } catch (e) {
      this.state = "failed";
      this.loadError = (e as Error).message;
      throw e;
    }
  }

  async stop(): Promise<void> {
    await this.server?.stop(true);
    if (this.state === "ready") {
      this.engine.close();
      this.model.close();
      this.draft?.close();
    }
  }

  get contextSize(): number {
    return this.engine.stats().context_size!;
  }

  get maxBodyBytes(): number {
    return this.options.maxBodyBytes ?? LIMIT_DEFAULTS.maxBodyBytes;
  }

  async handle(req: Request): Promise<Response> {
    const path = new URL(req.url).pathname;
    const matches = routes.flatMap((r) => {
      let param: string | null = null;
      try {
        param = matchPath(r.path, path);
      } catch {
        // a malformed %-escape in an id matches nothing
      }
      return param === null ? [] : [{ route: r, param }];
    });
    const origin = this.corsOrigin(req);
    if (req.method === "OPTIONS" && origin !== null && matches.length) return this.preflight(req, origin, matches.map((m) => m.route.method));
    let res: Response;
    try {
      const open = matches.length > 0 && matches.every((m) => m.route.open);
      // the key guards every route but /health, unknown paths included (no probing without it)
      if (!open) this.authorize(req);
      if (!matches.length) throw notFound(`no such endpoint: ${req.method} ${path}`);
      const match = matches.find((m) => m.route.method === req.method);
      if (!match) throw new ApiError(405, `${req.method} is not allowed on ${path}`, "invalid_request_error", null, "method_not_allowed", { Allow: matches.map((m) => m.route.method).join(", ") });
      const route = match.route;
      if (!route.open && this.state !== "ready") {
        throw new ApiError(503, this.state === "loading" ? "the model is still loading" : `the model failed to load: ${this.loadError}`, "server_error", null, "model_not_ready", { "Retry-After": "1" });
      }
      if (route.method === "POST") {
        keepBody(req, await readBody(req, this.maxBodyBytes));
        // the idle timeout guards reading the request; checking and tokenizing a large body may
        // take longer without a byte on the wire, and a generation runs under --request-timeout
        this.server?.timeout(req, 0);
      }
      res = await route.handler(req, this, match.param);
    } catch (e) {
      const err = toApiError(e);
      res = matches[0]?.route.anthropic ? err.toAnthropicResponse() : err.toResponse();
    }
    if (origin !== null) {
      res.headers.set("Access-Control-Allow-Origin", origin);
      res.headers.append("Vary", "Origin");
    }
    this.metrics.countRequest(matches.length ? matches[0]!.route.path : "other", res.status);
    return res;
  }

  /** The Access-Control-Allow-Origin value for a request from an allowed browser origin, else null. */
  corsOrigin(req: Request): string | null {
    const allowed = this.options.corsOrigins;
    const origin = req.headers.get("origin");
    if (!allowed?.length || origin === null) return null;
    if (allowed.includes("*")) return "*";
    return allowed.includes(origin) ? origin : null;
  }

  /** A CORS preflight (OPTIONS) from an allowed origin. */
  preflight(req: Request, origin: string, methods: string[]): Response {
    return new Response(null, {
      status: 204,
      headers: {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Methods": [...new Set([...methods, "OPTIONS"])].join(", "),
        // SDKs add their own headers (x-stainless-*, anthropic-version): the ones asked for
        "Access-Control-Allow-Headers": req.headers.get("access-control-request-headers") ?? "Authorization, Content-Type, x-api-key",
        "Access-Control-Max-Age": "600",
        Vary: "Origin",
      },
    });
  }

  authorize(req: Request): void {
    if (!this.#apiKeyHash) return;
    const header = req.headers.get("authorization") ?? "";
    // OpenAI clients send a bearer token, Anthropic's x-api-key
    const token = header.startsWith("Bearer ") ? header.slice(7) : (req.headers.get("x-api-key") ?? "");
    // compare fixed-length digests so neither length nor content leaks through timing
    if (!timingSafeEqual(sha256(token), this.#apiKeyHash)) {
      throw new ApiError(401, "invalid or missing API key", "invalid_request_error", null, "invalid_api_key", { "WWW-Authenticate": "Bearer" });
    }
  }

  health(): Response {
    if (this.state === "ready") return Response.json({ status: "ok" });
    return Response.json({ status: this.state === "loading" ? "loading" : "error", error: this.loadError }, { status: 503, headers: { "Retry-After": "1" } });
  }

  metricsResponse(): Response {
    return new Response(this.metrics.render(this.engine.stats()), { headers: { "Content-Type": "text/plain; version=0.0.4" } });
  }

  models(): Response {
    return Response.json({ object: "list", data: [{ id: this.modelId, object: "model", created: this.created, owned_by: "velo" }] });
  }

  async tokenize(req: Request): Promise<Response> {
    const body = await parseBody(req, tokenizeRequest);
    const ids = Array.from(this.model.tokenize(body.content, { addSpecial: body.add_special ?? false, parseSpecial: body.parse_special ?? true }));
    if (!body.with_pieces) return Response.json({ tokens: ids });
    const dec = new TextDecoder();
    return Response.json({ tokens: ids.map((id) => ({ id, piece: dec.decode(this.model.pieceBytes(id)) })) });
  }

  async detokenize(req: Request): Promise<Response> {
    const body = await parseBody(req, detokenizeRequest);
    const vocab = this.model.info().tokenizer?.vocab_size ?? 0;
    const bad = body.tokens.find((t) => t >= vocab);
    if (bad !== undefined) throw badRequest(`token ${bad} is outside the vocabulary (${vocab} tokens)`, "tokens");
    return Response.json({ content: this.model.detokenize(body.tokens) });
  }

  /** Computes (if needed) and saves the KV of a prompt prefix to --prefix-cache-file. */
  async savePrefix(req: Request): Promise<Response> {
    const file = this.options.prefixCacheFile;
    if (!file) throw badRequest("the server was started without --prefix-cache-file", null, "prefix_cache_file_unset");
    const body = await parseBody(req, savePrefixRequest);
    let tokens: number[];
    if (body.messages) {
      const messages = body.messages.map((m) => ({ role: m.role === "developer" ? ("system" as const) : m.role, content: m.content }));
      tokens = this.chatTokens((ms) => this.template.render(ms, false), messages, "messages");
    } else if (body.prompt !== undefined) {
      tokens = this.promptTokens(body.prompt, "prompt");
    } else {
      throw badRequest("give prompt or messages", null);
    }
    // one pass over the prompt puts its pages into the cache
    const r = await this.engine.submit({ promptTokens: tokens, maxTokens: 1, temperature: 0 }).collect();
    if (r.finish.reason === "error") throw badRequest(r.finish.message ?? "could not compute the prefix");
    try {
      return Response.json({ file, tokens_saved: this.engine.savePrefix(tokens, file), prompt_tokens: tokens.length });
    } catch (e) {
      throw badRequest((e as Error).message, null, "prefix_not_saved");
    }
  }

  async chat(req: Request): Promise<Response> {
    const body = await parseBody(req, chatRequest, "chat.completions");
    return this.respond(req, body, this.planChat(body));
  }

  /**
   * What to run for a chat request (also what /v1/responses and /v1/messages become):
   * the prompt through the template with the tools, the grammar of a forced call or format.
   * `names` are the request's own names of the format and token-limit fields, for errors
   * (/v1/responses says text.format and max_output_tokens). `countOnly`: the prompt may be
   * longer than the context (/v1/messages/count_tokens: a count is how clients learn to trim).
   */
  planChat(body: ChatRequest, names: { format?: string; maxTokens?: string; countOnly?: boolean } = {}): Plan {
    const formatParam = names.format ?? "response_format";
    this.checkCommon(body);
    if (body.top_logprobs != null && body.logprobs !== true) throw badRequest("top_logprobs needs logprobs: true", "top_logprobs");
    const messages: ChatMessage[] = body.messages.map((m) => {
      const out: ChatMessage = {
        role: m.role === "developer" ? "system" : m.role,
        content: m.content == null ? null : typeof m.content === "string" ? m.content : m.content.map((p) => p.text).join(""),
      };
      if (m.name !== undefined) out.name = m.name;
      if (m.tool_calls?.length) out.tool_calls = m.tool_calls;
      if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
      return out;
    });

    // tools: rendered into the prompt unless tool_choice is none; a call is forced by a grammar
    // for required or a named function
    const tools: Tool[] = (body.tools ?? []).map((t) => {
      // only the keys given (templates print what they find)
      const f: Tool["function"] = { name: t.function.name };
      if (t.function.description != null) f.description = t.function.description;
      if (t.function.parameters != null) f.parameters = t.function.parameters;
      return { type: "function", function: f };
    });
    const choice = body.tool_choice ?? (tools.length ? "auto" : "none");
    if (body.tool_choice && body.tool_choice !== "none" && !tools.length) throw badRequest("tool_choice needs tools", "tool_choice");
    let forced: Tool[] | null = null;
    if (typeof choice === "object") {
      const t = tools.find((x) => x.function.name === choice.function.name);
      if (!t) throw badRequest(`tool_choice names '${choice.function.name}', which is not among the tools`, "tool_choice");
      forced = [t];
    } else if (choice === "required") {
      forced = tools;
    }
    const useTools = tools.length > 0 && choice !== "none";
    const family = this.template.family;

    const render = (ms: ChatMessage[]) => {
      try {
        return this.template.render(ms, true, { tools: useTools ? tools : undefined });
      } catch (e) {
        throw badRequest((e as Error).message, "messages");
      }
    };
    const tokens = this.chatTokens(render, messages, "messages", !names.countOnly);

    const format = this.formatConstraint(body, formatParam);
    let grammar: string | undefined;
    if (forced || (useTools && format)) {
      if (format?.kind === "gbnf") throw badRequest("a GBNF grammar cannot be combined with tools; use tool_choice none", format.param);
      if (forced && format) throw badRequest(`${format.param} cannot be combined with tool_choice ${typeof choice === "string" ? choice : "naming a function"}`, format.param);
      const c = new SchemaConverter();
      try {
        // a named function is called once; parallel_tool_calls false allows one call
        const parallel = (forced === null || forced === tools) && body.parallel_tool_calls !== false;
        const calls = toolCallRoot(c, family, forced ?? tools, parallel);
        // tool_choice auto with a response format: a call or an answer in that format
        const root = format ? `${calls} | ${format.kind === "schema" ? c.convert(format.schema, "answer") : c.anyObject()}` : calls;
        grammar = c.rules.toString(root);
      } catch (e) {
        if (e instanceof SchemaError) throw badRequest(`invalid tool parameters: ${e.message}`, "tools", "invalid_json_schema");
        throw e;
      }
    } else if (format) {
      grammar = this.formatGrammar(format);
    }

    const parse = useTools || alwaysParsed(family);
    return {
      kind: "chat",
      tokens,
      maxTokens: this.maxTokens(body.max_completion_tokens ?? body.max_tokens ?? undefined, tokens.length,
        names.maxTokens ?? (body.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens")),
      grammar,
      grammarParam: forced ? "tools" : (format?.param ?? null),
      logprobs: body.logprobs ? (body.top_logprobs ?? 0) : null,
      tools: parse ? { family, names: useTools ? tools.map((t) => t.function.name) : [] } : null,
    };
  }

  async completions(req: Request): Promise<Response> {
    const body = await parseBody(req, completionRequest, "completions");
    this.checkCommon(body);
    let tokens: number[];
    if (typeof body.prompt === "string" || typeof body.prompt[0] === "string") {
      tokens = this.promptTokens(typeof body.prompt === "string" ? body.prompt : (body.prompt[0] as string), "prompt");
    } else {
      tokens = body.prompt as number[];
      const vocab = this.model.info().tokenizer?.vocab_size ?? 0;
      if (tokens.some((t) => t >= vocab)) throw badRequest(`prompt tokens must be below the vocabulary size ${vocab}`, "prompt");
      this.checkLength(tokens.length, "prompt");
    }
    const format = this.formatConstraint(body);
    return this.respond(req, body, {
      kind: "text",
      tokens,
      maxTokens: this.maxTokens(body.max_tokens ?? 16, tokens.length, "max_tokens"),
      grammar: format ? this.formatGrammar(format) : undefined,
      grammarParam: format?.param ?? null,
      logprobs: body.logprobs ?? null,
      tools: null,
    });
  }

  checkCommon(body: ChatRequest | CompletionRequest): void {
    if (body.model !== this.modelId) throw notFound(`the model '${body.model}' does not exist; this server serves '${this.modelId}'`, "model_not_found");
    if (body.logit_bias) {
      const vocab = this.model.info().tokenizer?.vocab_size ?? 0;
      const bad = Object.keys(body.logit_bias).find((k) => Number(k) >= vocab);
      if (bad !== undefined) throw badRequest(`logit_bias: token ${bad} is outside the vocabulary (${vocab} tokens)`, "logit_bias");
    }
  }

  /** The output format a request asks for: OpenAI's response_format, llama.cpp's grammar or json_schema (one of them). */
  formatConstraint(body: ChatRequest | CompletionRequest, rfParam = "response_format"): Format | null {
    const given: Format[] = [];
    if (body.grammar != null) given.push({ kind: "gbnf", gbnf: body.grammar, param: "grammar" });
    if (body.json_schema != null) given.push({ kind: "schema", schema: body.json_schema, param: "json_schema" });
    const rf = body.response_format;
    if (rf && rf.type === "json_object") given.push(rf.schema ? { kind: "schema", schema: rf.schema, param: rfParam } : { kind: "object", param: rfParam });
    if (rf && rf.type === "json_schema") {
      const s = rf.json_schema.schema;
      given.push(s == null ? { kind: "object", param: rfParam } : { kind: "schema", schema: s, param: rfParam });
    }
    if (given.length > 1) throw badRequest(`give only one of grammar, json_schema and response_format (got ${given.map((g) => g.param).join(" and ")})`, given[1]!.param);
    return given[0] ?? null;
  }

  formatGrammar(f: Format): string {
    if (f.kind === "gbnf") return f.gbnf;
    if (f.kind === "object") return jsonObjectGrammar();
    try {
      return jsonSchemaToGrammar(f.schema);
    } catch (e) {
      if (e instanceof SchemaError) throw badRequest(`invalid JSON Schema: ${e.message}`, schemaParam(f.param), "invalid_json_schema");
      throw e;
    }
  }

  promptTokens(text: string, param: string): number[] {
    const tokens = Array.from(this.model.tokenize(text, { addSpecial: true, parseSpecial: true }));
    const bos = this.model.info().tokenizer?.bos;
    // templates that write the BOS text themselves would otherwise get it twice
    if (bos != null && tokens[0] === bos && tokens[1] === bos) tokens.shift();
    this.checkLength(tokens.length, param);
    return tokens;
  }

  /**
   * Tokens of a rendered chat prompt: the template's markup may become control tokens, the
   * messages' own text never does (src/chat/prompt.ts).
   */
  chatTokens<M extends ChatMessage>(render: (messages: M[]) => string, messages: M[], param: string, checkLength = true): number[] {
    let tokens: number[];
    try {
      tokens = tokenizeChat(this.model, render, messages, this.model.info().tokenizer?.bos);
    } catch (e) {
      if (e instanceof InjectionError) throw badRequest(e.message, param, "control_token_in_message");
      throw e;
    }
    if (checkLength) this.checkLength(tokens.length, param);
    return tokens;
  }

  checkLength(n: number, param: string): void {
    const ctx = this.contextSize;
    if (n === 0) throw badRequest("the prompt is empty", param);
    if (n >= ctx) {
      throw badRequest(`this model's context is ${ctx} tokens and the prompt has ${n} (room is needed for at least one generated token)`, param, "context_length_exceeded");
    }
  }

  /**
   * Tokens a request may generate: what it asks for, clamped to the room its prompt leaves in
   * the context (it then stops with finish_reason "length"); more than the whole context is a 400.
   */
  maxTokens(asked: number | undefined, promptTokens: number, param: string): number {
    const ctx = this.contextSize;
    if (asked !== undefined && asked > ctx) {
      throw badRequest(`${param} is ${asked}, more than this model's context of ${ctx} tokens (prompt included)`, param, "max_tokens_too_large");
    }
    return Math.min(asked ?? ctx, ctx - promptTokens);
  }

  /** Room for `n` more requests in the batch and the queue, else 503. */
  checkCapacity(n: number): void {
    const limit = this.options.engine?.maxBatchSize ?? 1;
    const queue = this.options.maxQueue ?? 64;
    if (this.engine.inFlight + n > limit + queue) {
      throw new ApiError(503, `the server is busy (${this.engine.inFlight} requests in flight); retry shortly`, "server_error", null, "server_busy", { "Retry-After": "1" });
    }
  }

  /** Starts choice `index` of a request (seeds differ between choices). */
  submit(body: ChatRequest | CompletionRequest, plan: Plan, index: number): Generation {
    const d = { ...SAMPLING_DEFAULTS, ...this.options.defaults };
    let gen: Generation;
    try {
      gen = this.engine.submit({
        promptTokens: plan.tokens,
        maxTokens: plan.maxTokens ?? 1 << 24,
        temperature: body.temperature ?? d.temperature,
        topK: body.top_k ?? d.topK,
        topP: body.top_p ?? d.topP,
        minP: body.min_p ?? d.minP,
        repeatPenalty: body.repeat_penalty ?? undefined,
        presencePenalty: body.presence_penalty ?? undefined,
        frequencyPenalty: body.frequency_penalty ?? undefined,
        seed: body.seed != null ? body.seed + index : Math.floor(Math.random() * 2 ** 32),
        stop: body.stop == null ? undefined : typeof body.stop === "string" ? [body.stop] : body.stop,
        grammar: plan.grammar,
        logprobs: plan.logprobs ?? undefined,
        logitBias: body.logit_bias ?? undefined,
      });
    } catch (e) {
      // the engine checks what it is given: a grammar that does not compile is the client's error
      if (e instanceof VeloError && e.code === ErrorCode.invalidArgument) {
        const param = /^grammar/.test(e.message) ? plan.grammarParam : /^logit_bias/.test(e.message) ? "logit_bias" : null;
        throw badRequest(e.message, param, param === plan.grammarParam && param ? "invalid_grammar" : null);
      }
      throw e;
    }
    this.metrics.promptTokens += plan.tokens.length;
    return gen;
  }

  async respond(req: Request, body: ChatRequest | CompletionRequest, plan: Plan): Promise<Response> {
    const n = body.n ?? 1;
    const { fan, states, gens } = this.launch(req, body, plan, n);
    const id = `${plan.kind === "chat" ? "chatcmpl" : "cmpl"}-${randomBytes(12).toString("hex")}`;
    const created = Math.floor(Date.now() / 1000);
    const base = { id, object: plan.kind === "chat" ? "chat.completion" : "text_completion", created, model: this.modelId };
    if (body.stream) return this.stream(fan, states, gens, base, plan.kind, body.stream_options?.include_usage === true);

    await this.drain(fan, states);
    const choices = states.map((s, index) => {
      const reason = finishReason(s.finish!, s.toolCalls.length > 0);
      if (plan.kind === "text") {
        return { index, text: s.text, logprobs: plan.logprobs === null ? null : s.legacy, finish_reason: reason };
      }
      const calls = s.toolCalls;
      const message = calls.length
        ? { role: "assistant", content: s.content || null, tool_calls: calls, refusal: null }
        : { role: "assistant", content: s.content, refusal: null };
      return { index, message, logprobs: plan.logprobs === null ? null : { content: s.chatLogprobs, refusal: null }, finish_reason: reason };
    });
    return Response.json({ ...base, choices, usage: usage(states.map((s) => s.finish!)) });
  }

  /** Starts n choices of a plan; a client that goes away cancels them. */
  launch(req: Request, body: ChatRequest | CompletionRequest, plan: Plan, n: number): { fan: FanIn; states: ChoiceState[]; gens: Generation[] } {
    this.checkCapacity(n);
    const gens: Generation[] = [];
    let aborted = false;
    const fan = new FanIn(n);
    // the first choice now (its errors are this request's); the others once its prompt is in
    // the prefix cache, so that they reuse its KV pages instead of computing the prompt again
    let primed!: () => void;
    const ready = new Promise<void>((r) => (primed = r));
    const first = this.submit(body, plan, 0);
    gens.push(first);
    fan.add(0, first, primed);
    if (n > 1) {
      void ready.then(() => {
        for (let i = 1; i < n; i++) {
          if (aborted) {
            fan.fail(i, "cancelled");
            continue;
          }
          try {
            const g = this.submit(body, plan, i);
            gens.push(g);
            fan.add(i, g);
          } catch (e) {
            fan.fail(i, (e as Error).message);
          }
        }
      });
    }
    // the idle timeout guarded reading the request (handle); the deadline guards the generation
    const seconds = this.options.requestTimeoutS ?? LIMIT_DEFAULTS.requestTimeoutS;
    if (seconds > 0) {
      const timer = setTimeout(() => {
        fan.deadline = { message: `the request ran past its deadline of ${seconds} s (--request-timeout)` };
        aborted = true;
        for (const g of gens) g.cancel();
      }, seconds * 1000);
      fan.onEnd = () => clearTimeout(timer);
    }
    // a client that goes away cancels its request and frees its pages
    req.signal.addEventListener("abort", () => {
      aborted = true;
      for (const g of gens) g.cancel();
    }, { once: true });

    const piece = (id: number) => this.piece(id);
    const states = Array.from({ length: n }, () => new ChoiceState({ logprobs: plan.logprobs, tools: plan.tools, piece }));
    return { fan, states, gens };
  }

  /** Runs the choices to their end (non-streamed answers); a failed one is a 500. */
  async drain(fan: FanIn, states: ChoiceState[]): Promise<void> {
    const lasts = new Array<number>(states.length).fill(0);
    for await (const e of fan) {
      const s = states[e.index]!;
      if ("chunk" in e) {
        lasts[e.index] = this.observeTokens(e.chunk.tokens.length, lasts[e.index]!);
        s.push(e.chunk);
      } else {
        this.observeFinish(e.finish);
        s.end(e.finish);
      }
    }
    if (fan.deadline) throw deadlineError(fan.deadline.message);
    const failed = states.find((s) => s.finish!.reason === "error");
    if (failed) throw new ApiError(500, failed.finish!.message ?? "generation failed", "server_error", null, "generation_failed");
  }


  stream(fan: FanIn, states: ChoiceState[], gens: Generation[], base: { id: string; object: string; created: number; model: string }, kind: "chat" | "text", includeUsage: boolean): Response {
    const object = kind === "chat" ? "chat.completion.chunk" : "text_completion";
    const wantLogprobs = states[0]!.opts.logprobs !== null;
    return sseResponse(gens, async (w) => {
      const frame = (choices: unknown[], extra: object = {}) => w.data({ ...base, object, choices, ...extra });
      const lasts = new Array<number>(states.length).fill(0);
      // logprobs of tokens whose text has not been sent yet go with the next frame of their choice
      const pendingChat: ChatLogprob[][] = states.map(() => []);
      const pendingLegacy: LegacyLogprobs[][] = states.map(() => []);
      const logprobsOf = (i: number) => {
        if (!wantLogprobs) return null;
        if (kind === "chat") {
          const content = pendingChat[i]!.splice(0);
          return content.length ? { content, refusal: null } : null;
        }
        return mergeLegacy(pendingLegacy[i]!.splice(0));
      };
      const send = (i: number, d: ChoiceDelta, reason: string | null) => {
        pendingChat[i]!.push(...d.chat);
        if (d.legacy) pendingLegacy[i]!.push(d.legacy);
        if (kind === "text") {
          if (d.content || reason || (d.legacy && pendingLegacy[i]!.length)) frame([{ index: i, text: d.content, logprobs: logprobsOf(i), finish_reason: reason }]);
          return;
        }
        if (d.content) frame([{ index: i, delta: { content: d.content }, logprobs: logprobsOf(i), finish_reason: null }]);
        // one tool-call delta per frame, as OpenAI sends them
        for (const t of d.toolCalls) {
          if (t.id) {
            frame([{ index: i, delta: { tool_calls: [{ index: t.index, id: t.id, type: "function", function: { name: t.function.name, arguments: "" } }] }, logprobs: logprobsOf(i), finish_reason: null }]);
            if (!t.function.arguments) continue;
          }
          frame([{ index: i, delta: { tool_calls: [{ index: t.index, function: { arguments: t.function.arguments } }] }, logprobs: logprobsOf(i), finish_reason: null }]);
        }
        const rest = logprobsOf(i);
        if (rest && !reason) frame([{ index: i, delta: {}, logprobs: rest, finish_reason: null }]);
        if (reason) frame([{ index: i, delta: {}, logprobs: rest, finish_reason: reason }]);
      };
      if (kind === "chat") {
        for (let i = 0; i < states.length; i++) frame([{ index: i, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
      }
      let error: string | null = null;
      let cancelled = false;
      for await (const e of fan) {
        w.active();
        const s = states[e.index]!;
        if ("chunk" in e) {
          lasts[e.index] = this.observeTokens(e.chunk.tokens.length, lasts[e.index]!);
          const d = s.push(e.chunk);
          // text-less tokens wait for the next frame (their logprobs are kept)
          send(e.index, d, null);
          continue;
        }
        this.observeFinish(e.finish);
        const d = s.end(e.finish);
        if (e.finish.reason === "cancelled") cancelled = true;
        else if (e.finish.reason === "error") error ??= e.finish.message ?? "generation failed";
        else send(e.index, d, finishReason(e.finish, s.toolCalls.length > 0));
      }
      if (cancelled) return; // the client is gone
      if (error) {
        w.data({ error: { message: error, type: "server_error", param: null, code: "generation_failed" } });
      } else if (includeUsage) {
        frame([], { usage: usage(states.map((s) => s.finish!)) });
      }
      w.write("data: [DONE]\n\n");
    });
  }

  /** A token's text and bytes (cached: logprobs name up to 21 tokens per generated token). */
  piece(id: number): Piece {
    let p = this.#pieces.get(id);
    if (!p) {
      const bytes = Array.from(this.model.pieceBytes(id));
      p = { text: new TextDecoder().decode(new Uint8Array(bytes)), bytes };
      this.#pieces.set(id, p);
    }
    return p;
  }

  observeTokens(n: number, last: number): number {
    if (n === 0) return last;
    const now = performance.now();
    if (last > 0) this.metrics.interToken.observe((now - last) / 1000 / n);
    this.metrics.generatedTokens += n;
    return now;
  }

  observeFinish(f: Finish): void {
    if (f.usage.completion_tokens > 0) this.metrics.ttft.observe(f.usage.ttft_ms / 1000);
    this.metrics.cachedTokens += f.usage.cached_tokens;
  }
}

export function finishReason(f: Finish, toolCalls = false): "stop" | "length" | "tool_calls" {
  if (f.reason === "length") return "length";
  return toolCalls ? "tool_calls" : "stop";
}

/** Usage of all choices: the prompt once (as the first choice saw it), every choice's completion. */
export function usage(finishes: Finish[]) {
  const first = finishes[0]!.usage;
  const completion = finishes.reduce((n, f) => n + f.usage.completion_tokens, 0);
  return {
    prompt_tokens: first.prompt_tokens,
    completion_tokens: completion,
    total_tokens: first.prompt_tokens + completion,
    prompt_tokens_details: { cached_tokens: first.cached_tokens },
  };
}

function sha256(s: string): Buffer {
  return createHash("sha256").update(s).digest();
}

/** Where the schema of a format field is (for errors). */
function schemaParam(param: string): string {
  if (param === "response_format") return "response_format.json_schema.schema";
  return param === "text.format" || param === "output_config.format" ? `${param}.schema` : param;
}

/** `pattern`'s last segment ":id" matches one segment: its value, "" for an exact match, null for none. */
function matchPath(pattern: string, path: string): string | null {
  if (!pattern.endsWith("/:id")) return pattern === path ? "" : null;
  const base = pattern.slice(0, -3);
  const rest = path.startsWith(base) ? path.slice(base.length) : "";
  return rest && !rest.includes("/") ? decodeURIComponent(rest) : null;
}
