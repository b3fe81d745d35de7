// A typed client for Velo's HTTP API. Streams are async iterators of parsed SSE events.

export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

export interface ChatMessageParam {
  role: "system" | "user" | "assistant" | "tool";
  content: string | null;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
}

export interface Tool {
  type: "function";
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean };
}

export interface SamplingParams {
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  seed?: number;
  stop?: string | string[];
  presence_penalty?: number;
  frequency_penalty?: number;
  /** {"token id": -100..100} */
  logit_bias?: Record<string, number>;
  n?: number;
  response_format?: { type: "text" } | { type: "json_object" } | { type: "json_schema"; json_schema: { name: string; schema?: unknown; strict?: boolean } };
  /** GBNF (llama.cpp's field). */
  grammar?: string;
  /** A JSON Schema (llama.cpp's field). */
  json_schema?: unknown;
  /** Chat: true; completions: the number of alternatives (0-20). */
  logprobs?: boolean | number;
  top_logprobs?: number;
  tools?: Tool[];
  tool_choice?: "none" | "auto" | "required" | { type: "function"; function: { name: string } };
  parallel_tool_calls?: boolean;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number };
}

export interface ChatCompletion {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: { index: number; message: { role: "assistant"; content: string | null; tool_calls?: ToolCall[] }; finish_reason: "stop" | "length" | "tool_calls"; logprobs: unknown }[];
  usage: Usage;
}

export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: {
    index: number;
    delta: { role?: string; content?: string; tool_calls?: { index: number; id?: string; type?: "function"; function: { name?: string; arguments: string } }[] };
    finish_reason: "stop" | "length" | "tool_calls" | null;
  }[];
  usage?: Usage | null;
}

export interface Completion {
  id: string;
  object: "text_completion";
  choices: { index: number; text: string; finish_reason: "stop" | "length"; logprobs: unknown }[];
  usage: Usage;
}

/** An error answered by the server, with OpenAI's fields. */
export class VeloApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string | null,
    readonly code: string | null,
    readonly param: string | null,
  ) {
    super(message);
  }
}

export class VeloClient {
  constructor(
    readonly baseUrl = "http://127.0.0.1:8080",
    readonly apiKey?: string,
  ) {}

  async health(): Promise<{ status: string }> {
    const res = await fetch(`${this.baseUrl}/health`);
    return (await res.json()) as { status: string };
  }

  async models(): Promise<{ id: string }[]> {
    return ((await this.request("GET", "/v1/models")) as { data: { id: string }[] }).data;
  }

  async chat(model: string, messages: ChatMessageParam[], params: SamplingParams = {}, signal?: AbortSignal): Promise<ChatCompletion> {
    return (await this.request("POST", "/v1/chat/completions", { model, messages, ...params }, signal)) as ChatCompletion;
  }

  /** Streams chat chunks; the last one carries usage. Abort the signal to cancel. */
  async *chatStream(model: string, messages: ChatMessageParam[], params: SamplingParams = {}, signal?: AbortSignal): AsyncGenerator<ChatCompletionChunk> {
    const body = { model, messages, ...params, stream: true, stream_options: { include_usage: true } };
    yield* this.sse<ChatCompletionChunk>("/v1/chat/completions", body, signal);
  }

  async complete(model: string, prompt: string, params: SamplingParams = {}, signal?: AbortSignal): Promise<Completion> {
    return (await this.request("POST", "/v1/completions", { model, prompt, ...params }, signal)) as Completion;
  }

  async tokenize(content: string, opts: { add_special?: boolean; parse_special?: boolean } = {}): Promise<number[]> {
    return ((await this.request("POST", "/tokenize", { content, ...opts })) as { tokens: number[] }).tokens;
  }

  async detokenize(tokens: number[]): Promise<string> {
    return ((await this.request("POST", "/detokenize", { tokens })) as { content: string }).content;
  }

  private headers(): Record<string, string> {
    const h: Record<string, string> = { "Content-Type": "application/json" };
    if (this.apiKey) h.Authorization = `Bearer ${this.apiKey}`;
    return h;
  }

  private async request(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<unknown> {
    const res = await fetch(`${this.baseUrl}${path}`, { method, headers: this.headers(), body: body === undefined ? undefined : JSON.stringify(body), signal });
    if (!res.ok) throw await apiError(res);
    return res.json();
  }

  private async *sse<T>(path: string, body: unknown, signal?: AbortSignal): AsyncGenerator<T> {
    const res = await fetch(`${this.baseUrl}${path}`, { method: "POST", headers: this.headers(), body: JSON.stringify(body), signal });
    if (!res.ok || !res.body) throw await apiError(res);
    const decoder = new TextDecoder();
    let buffer = "";
    for await (const part of res.body) {
      buffer += decoder.decode(part, { stream: true });
      let end: number;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue; // comments (keep-alives) and other fields
          const data = line.slice(6);
          if (data === "[DONE]") return;
          const parsed = JSON.parse(data);
          if (parsed.error) throw new VeloApiError(500, parsed.error.message, parsed.error.type, parsed.error.code, parsed.error.param);
          yield parsed as T;
        }
      }
    }
  }
}

async function apiError(res: Response): Promise<VeloApiError> {
  try {
    const { error } = (await res.json()) as { error: { message: string; type: string; code: string; param: string } };
    return new VeloApiError(res.status, error.message, error.type, error.code, error.param);
  } catch {
    return new VeloApiError(res.status, `HTTP ${res.status}`, null, null, null);
  }
}
