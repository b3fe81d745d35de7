// Velo's OpenAI-compatible HTTP server: one route table, every handler failing closed with
// OpenAI-shaped errors, SSE streaming, cancellation on client disconnect, a bounded queue.
import type { Server } from "bun";
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { existsSync } from "node:fs";
import type { z } from "zod";
import { type ChatMessage, ChatTemplate } from "../chat/template";
import { Engine, type EngineOptions, type Finish, type GenerateRequest, type Generation } from "../engine/engine";
import { Model } from "../engine/model";
import { ApiError, badRequest, notFound, toApiError } from "./errors";
import { Metrics } from "./metrics";
import {
  type ChatRequest, chatRequest, type CompletionRequest, completionRequest, describeIssue, detokenizeRequest, savePrefixRequest, tokenizeRequest,
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
}

type Handler = (req: Request, ctx: VeloServer) => Promise<Response> | Response;
interface Route {
  method: "GET" | "POST";
  path: string;
  handler: Handler;
  /** Reachable without the API key. */
  open?: boolean;
}

const routes: Route[] = [
  { method: "GET", path: "/health", handler: (_r, s) => s.health(), open: true },
  { method: "GET", path: "/metrics", handler: (_r, s) => s.metricsResponse() },
  { method: "GET", path: "/v1/models", handler: (_r, s) => s.models() },
  { method: "POST", path: "/v1/chat/completions", handler: (r, s) => s.chat(r) },
  { method: "POST", path: "/v1/completions", handler: (r, s) => s.completions(r) },
  { method: "POST", path: "/tokenize", handler: (r, s) => s.tokenize(r) },
  { method: "POST", path: "/detokenize", handler: (r, s) => s.detokenize(r) },
  { method: "POST", path: "/prefix-cache/save", handler: (r, s) => s.savePrefix(r) },
];

const SAMPLING_DEFAULTS: Partial<GenerateRequest> = { temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05 };

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

  constructor(readonly options: ServerOptions) {
    this.modelId = options.modelId ?? options.modelPath.split("/").at(-1)!.replace(/\.gguf$/i, "");
    this.#apiKeyHash = options.apiKey ? sha256(options.apiKey) : null;
  }

  /** Listens first (so /health answers 503 while loading), then loads the model. */
  start(): Server<unknown> {
    this.server = Bun.serve({
      hostname: this.options.host ?? "127.0.0.1",
      port: this.options.port ?? 8080,
      idleTimeout: 0, // long generations stream for minutes
      fetch: (req) => this.handle(req),
    });
    return this.server;
  }

  load(): void {
    try {
      this.model = Model.open(this.options.modelPath);
      const info = this.model.info();
      const piece = (id: number | null | undefined) => (id == null ? "" : new TextDecoder().decode(this.model.pieceBytes(id)));
      this.template = ChatTemplate.forModel(info.metadata, { bosToken: piece(info.tokenizer?.bos), eosToken: piece(info.tokenizer?.eos) });
      if (this.options.draftPath) this.draft = Model.open(this.options.draftPath);
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

  async handle(req: Request): Promise<Response> {
    const path = new URL(req.url).pathname;
    const matches = routes.filter((r) => r.path === path);
    let res: Response;
    try {
      if (!matches.length) throw notFound(`no such endpoint: ${req.method} ${path}`);
      const route = matches.find((r) => r.method === req.method);
      if (!route) throw new ApiError(405, `${req.method} is not allowed on ${path}`, "invalid_request_error", null, "method_not_allowed", { Allow: matches.map((m) => m.method).join(", ") });
      if (!route.open) this.authorize(req);
      if (!route.open && this.state !== "ready") {
        throw new ApiError(503, this.state === "loading" ? "the model is still loading" : `the model failed to load: ${this.loadError}`, "server_error", null, "model_not_ready", { "Retry-After": "1" });
      }
      res = await route.handler(req, this);
    } catch (e) {
      res = toApiError(e).toResponse();
    }
    this.metrics.countRequest(matches.length ? path : "other", res.status);
    return res;
  }

  authorize(req: Request): void {
    if (!this.#apiKeyHash) return;
    const header = req.headers.get("authorization") ?? "";
    const token = header.startsWith("Bearer ") ? header.slice(7) : "";
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
      tokens = this.promptTokens(this.template.render(messages, false), "messages");
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
    const body = await parseBody(req, chatRequest);
    this.checkCommon(body);
    const messages: ChatMessage[] = body.messages.map((m) => ({
      role: m.role === "developer" ? "system" : m.role,
      content: typeof m.content === "string" ? m.content : (m.content ?? []).map((p) => p.text).join(""),
    }));
    let prompt: string;
    try {
      prompt = this.template.render(messages);
    } catch (e) {
      throw badRequest((e as Error).message, "messages");
    }
    const tokens = this.promptTokens(prompt, "messages");
    const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? undefined;
    return this.respond(req, body, tokens, maxTokens, "chat");
  }

  async completions(req: Request): Promise<Response> {
    const body = await parseBody(req, completionRequest);
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
    return this.respond(req, body, tokens, body.max_tokens ?? 16, "text");
  }

  checkCommon(body: { model: string; n?: number | null }): void {
    if (body.model !== this.modelId) throw notFound(`the model '${body.model}' does not exist; this server serves '${this.modelId}'`, "model_not_found");
    if ((body.n ?? 1) !== 1) throw badRequest("n > 1 is not supported yet", "n");
  }

  promptTokens(text: string, param: string): number[] {
    const tokens = Array.from(this.model.tokenize(text, { addSpecial: true, parseSpecial: true }));
    const bos = this.model.info().tokenizer?.bos;
    // templates that write the BOS text themselves would otherwise get it twice
    if (bos != null && tokens[0] === bos && tokens[1] === bos) tokens.shift();
    this.checkLength(tokens.length, param);
    return tokens;
  }

  checkLength(n: number, param: string): void {
    const ctx = this.contextSize;
    if (n === 0) throw badRequest("the prompt is empty", param);
    if (n >= ctx) {
      throw badRequest(`this model's context is ${ctx} tokens and the prompt has ${n} (room is needed for at least one generated token)`, param, "context_length_exceeded");
    }
  }

  submit(body: ChatRequest | CompletionRequest, tokens: number[], maxTokens: number | undefined): Generation {
    const limit = this.options.engine?.maxBatchSize ?? 1;
    const queue = this.options.maxQueue ?? 64;
    if (this.engine.inFlight >= limit + queue) {
      throw new ApiError(503, `the server is busy (${this.engine.inFlight} requests in flight); retry shortly`, "server_error", null, "server_busy", { "Retry-After": "1" });
    }
    const d = { ...SAMPLING_DEFAULTS, ...this.options.defaults };
    const gen = this.engine.submit({
      promptTokens: tokens,
      maxTokens: maxTokens ?? 1 << 24,
      temperature: body.temperature ?? d.temperature,
      topK: body.top_k ?? d.topK,
      topP: body.top_p ?? d.topP,
      minP: body.min_p ?? d.minP,
      repeatPenalty: body.repeat_penalty ?? undefined,
      presencePenalty: body.presence_penalty ?? undefined,
      frequencyPenalty: body.frequency_penalty ?? undefined,
      seed: body.seed ?? Math.floor(Math.random() * 2 ** 32),
      stop: body.stop == null ? undefined : typeof body.stop === "string" ? [body.stop] : body.stop,
    });
    this.metrics.promptTokens += tokens.length;
    return gen;
  }

  async respond(req: Request, body: ChatRequest | CompletionRequest, tokens: number[], maxTokens: number | undefined, kind: "chat" | "text"): Promise<Response> {
    const gen = this.submit(body, tokens, maxTokens);
    // a client that goes away cancels its request and frees its pages
    req.signal.addEventListener("abort", () => gen.cancel(), { once: true });
    const id = `${kind === "chat" ? "chatcmpl" : "cmpl"}-${randomBytes(12).toString("hex")}`;
    const created = Math.floor(Date.now() / 1000);
    const base = { id, object: kind === "chat" ? "chat.completion" : "text_completion", created, model: this.modelId };
    if (body.stream) return this.stream(gen, base, kind, body.stream_options?.include_usage === true);

    let text = "";
    let last = 0;
    for await (const chunk of gen) {
      text += chunk.text;
      last = this.observeTokens(chunk.tokens.length, last);
    }
    const finish = await gen.finished;
    this.observeFinish(finish);
    if (finish.reason === "error") throw new ApiError(500, finish.message ?? "generation failed", "server_error", null, "generation_failed");
    const reason = finishReason(finish);
    const choice =
      kind === "chat"
        ? { index: 0, message: { role: "assistant", content: text, refusal: null }, logprobs: null, finish_reason: reason }
        : { index: 0, text, logprobs: null, finish_reason: reason };
    return Response.json({ ...base, choices: [choice], usage: usage(finish) });
  }

  stream(gen: Generation, base: { id: string; object: string; created: number; model: string }, kind: "chat" | "text", includeUsage: boolean): Response {
    const enc = new TextEncoder();
    const object = kind === "chat" ? "chat.completion.chunk" : "text_completion";
    const frame = (data: unknown) => enc.encode(`data: ${JSON.stringify(data)}\n\n`);
    const choice = (text: string | null, reason: string | null) =>
      kind === "chat"
        ? { index: 0, delta: text === null ? {} : { content: text }, logprobs: null, finish_reason: reason }
        : { index: 0, text: text ?? "", logprobs: null, finish_reason: reason };
    const stream = new ReadableStream<Uint8Array>({
      start: async (controller) => {
        // comments keep proxies and clients from timing out during a long prefill
        const keepAlive = setInterval(() => controller.enqueue(enc.encode(": keep-alive\n\n")), 5000);
        let last = 0;
        try {
          if (kind === "chat") {
            controller.enqueue(frame({ ...base, object, choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }] }));
          }
          for await (const chunk of gen) {
            clearInterval(keepAlive);
            last = this.observeTokens(chunk.tokens.length, last);
            if (chunk.text) controller.enqueue(frame({ ...base, object, choices: [choice(chunk.text, null)] }));
          }
          const finish = await gen.finished;
          this.observeFinish(finish);
          if (finish.reason === "cancelled") return; // the client is gone
          if (finish.reason === "error") {
            controller.enqueue(frame({ error: { message: finish.message, type: "server_error", param: null, code: "generation_failed" } }));
          } else {
            controller.enqueue(frame({ ...base, object, choices: [choice(null, finishReason(finish))], ...(includeUsage ? { usage: null } : {}) }));
            if (includeUsage) controller.enqueue(frame({ ...base, object, choices: [], usage: usage(finish) }));
          }
          controller.enqueue(enc.encode("data: [DONE]\n\n"));
        } catch {
          gen.cancel();
        } finally {
          clearInterval(keepAlive);
          try {
            controller.close();
          } catch {
            // already closed by a disconnect
          }
        }
      },
      cancel: () => gen.cancel(),
    });
    return new Response(stream, { headers: { "Content-Type": "text/event-stream", "Cache-Control": "no-cache", Connection: "keep-alive" } });
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

function finishReason(f: Finish): "stop" | "length" {
  return f.reason === "length" ? "length" : "stop";
}

function usage(f: Finish) {
  const u = f.usage;
  return {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens,
    total_tokens: u.prompt_tokens + u.completion_tokens,
    prompt_tokens_details: { cached_tokens: u.cached_tokens },
  };
}

function sha256(s: string): Buffer {
  return createHash("sha256").update(s).digest();
}

async function parseBody<T extends z.ZodTypeAny>(req: Request, schema: T): Promise<z.infer<T>> {
  const type = req.headers.get("content-type") ?? "";
  if (!type.includes("application/json")) throw badRequest("the request body must be JSON (Content-Type: application/json)");
  let raw: unknown;
  try {
    raw = JSON.parse(await req.text());
  } catch (e) {
    throw badRequest(`the request body is not valid JSON: ${(e as Error).message}`);
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const { message, param } = describeIssue(parsed.error);
    throw badRequest(message, param);
  }
  return parsed.data;
}
