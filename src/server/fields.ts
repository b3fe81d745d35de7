// The field policy: every request field of every endpoint and what the server does with it.
//
//   implemented  the zod schema of the endpoint checks it and the handler honours it
//   ignored      accepted (its type checked) and dropped: it does not change what a local model
//                computes (billing tiers, storage on OpenAI's side, caching hints, end-user ids)
//   unsupported  would change the output and is not implemented: a 400 naming the field, unless
//                the value is null or one that changes nothing (`noop`, e.g. modalities ["text"])
//
// A field in no row is unknown: the endpoint's strict schema refuses it with
// "unrecognized request argument", so typos are caught. Fields marked `origin: "llama.cpp"`
// (or "velo") are extensions, not OpenAI's or Anthropic's. tests/fields.test.ts walks this table
// against a running server and against the field lists of the pinned openai and
// @anthropic-ai/sdk packages.
import { z } from "zod";
import { ApiError } from "./errors";

export type Endpoint = "chat.completions" | "completions" | "responses" | "embeddings" | "messages" | "messages.count_tokens";

export type Rule =
  | { treatment: "implemented"; origin?: "llama.cpp" | "velo" | "anthropic-api" }
  | { treatment: "ignored"; why: string; schema: z.ZodType; example: unknown }
  | { treatment: "unsupported"; why: string; example: unknown; noop?: (v: unknown) => boolean };

const implemented: Rule = { treatment: "implemented" };
const llamaCpp: Rule = { treatment: "implemented", origin: "llama.cpp" };
const ignored = (why: string, schema: z.ZodType, example: unknown): Rule => ({ treatment: "ignored", why, schema: schema.nullable().optional(), example });
const unsupported = (why: string, example: unknown, noop?: (v: unknown) => boolean): Rule => ({ treatment: "unsupported", why, example, noop });

const str = z.string();
const obj = z.record(z.string(), z.unknown());
const empty = (v: unknown) => (Array.isArray(v) && v.length === 0) || (typeof v === "object" && v !== null && Object.keys(v).length === 0);
const isFalse = (v: unknown) => v === false;

// accepted everywhere OpenAI has them: they do not change a local model's output
const openAiIgnored = {
  service_tier: ignored("a local server has one tier", str, "auto"),
  store: ignored("nothing is stored on OpenAI's side", z.boolean(), true),
  metadata: ignored("tags for OpenAI's dashboard", z.record(z.string(), z.string()), { run: "1" }),
  user: ignored("an end-user id for abuse monitoring", str, "user-1"),
  safety_identifier: ignored("an end-user id for abuse monitoring", str, "user-1"),
  prompt_cache_key: ignored("prefixes are cached automatically (the KV prefix cache), whatever the key", str, "key-1"),
  prompt_cache_retention: ignored("cache lifetime on OpenAI's side", str, "24h"),
  prompt_cache_options: ignored("cache breakpoints on OpenAI's side", obj, { mode: "implicit" }),
} satisfies Record<string, Rule>;

const sampling = {
  model: implemented,
  temperature: implemented,
  top_p: implemented,
  seed: implemented,
  stop: implemented,
  presence_penalty: implemented,
  frequency_penalty: implemented,
  logit_bias: implemented,
  n: implemented,
  max_tokens: implemented,
  stream: implemented,
  stream_options: implemented,
  // llama.cpp's extensions
  top_k: llamaCpp,
  min_p: llamaCpp,
  repeat_penalty: llamaCpp,
  grammar: llamaCpp,
  json_schema: llamaCpp,
} satisfies Record<string, Rule>;

export const FIELDS: Record<Endpoint, Record<string, Rule>> = {
  "chat.completions": {
    ...sampling,
    messages: implemented,
    max_completion_tokens: implemented,
    logprobs: implemented,
    top_logprobs: implemented,
    response_format: implemented,
    tools: implemented,
    tool_choice: implemented,
    parallel_tool_calls: implemented,
    ...openAiIgnored,
    prediction: ignored("predicted outputs only make OpenAI faster; the output is the same", obj, { type: "content", content: "x" }),
    audio: unsupported("audio output", { voice: "alloy", format: "wav" }),
    modalities: unsupported("output other than text", ["text", "audio"], (v) => Array.isArray(v) && v.every((m) => m === "text")),
    functions: unsupported("the deprecated functions API; use tools", [{ name: "f" }], empty),
    function_call: unsupported("the deprecated functions API; use tool_choice", "auto", (v) => v === "none"),
    reasoning_effort: unsupported("reasoning effort", "high"),
    verbosity: unsupported("verbosity control", "low"),
    web_search_options: unsupported("web search", {}),
    moderation: unsupported("moderation of input and output", { model: "omni-moderation-latest" }),
  },
  completions: {
    ...sampling,
    prompt: implemented,
    logprobs: implemented,
    response_format: llamaCpp, // as on chat
    echo: unsupported("echoing the prompt", true, isFalse),
    suffix: unsupported("insertion after a suffix", "}", (v) => v === ""),
    best_of: unsupported("best_of above 1", 3, (v) => v === 1),
    user: openAiIgnored.user,
    // not OpenAI's for completions, accepted as on chat
    metadata: openAiIgnored.metadata,
    store: openAiIgnored.store,
  },
  responses: {
    model: implemented,
    input: implemented,
    instructions: implemented,
    max_output_tokens: implemented,
    temperature: implemented,
    top_p: implemented,
    stream: implemented,
    tools: implemented,
    tool_choice: implemented,
    parallel_tool_calls: implemented,
    text: implemented,
    previous_response_id: implemented,
    store: implemented, // whether previous_response_id can name this response later
    metadata: implemented, // returned with the response
    // velo/llama.cpp sampling extensions, as on chat
    seed: { treatment: "implemented", origin: "velo" },
    top_k: llamaCpp,
    min_p: llamaCpp,
    service_tier: openAiIgnored.service_tier,
    user: openAiIgnored.user,
    safety_identifier: openAiIgnored.safety_identifier,
    prompt_cache_key: openAiIgnored.prompt_cache_key,
    prompt_cache_retention: openAiIgnored.prompt_cache_retention,
    prompt_cache_options: openAiIgnored.prompt_cache_options,
    stream_options: ignored("obfuscation padding of stream events", obj, { include_obfuscation: false }),
    max_tool_calls: ignored("it bounds built-in tools, and there are none here", z.number().int(), 5),
    truncation: unsupported("dropping input that does not fit (the prompt must fit the context)", "auto", (v) => v === "disabled"),
    include: unsupported("extra output (reasoning content, logprobs, tool sources)", ["reasoning.encrypted_content"], empty),
    top_logprobs: unsupported("logprobs on this endpoint (use /v1/chat/completions)", 3, (v) => v === 0),
    reasoning: unsupported("reasoning effort and summaries", { effort: "high" }, empty),
    background: unsupported("background responses", true, isFalse),
    conversation: unsupported("stored conversations (use previous_response_id)", "conv_1"),
    prompt: unsupported("stored prompt templates", { id: "pmpt_1" }),
    context_management: unsupported("server-side compaction", [{ type: "compaction" }], empty),
    moderation: unsupported("moderation of input and output", { model: "omni-moderation-latest" }),
    image: unsupported("image generation", { size: "auto" }),
    access_programs: unsupported("access programs", ["program"], empty),
  },
  embeddings: {
    model: implemented,
    input: implemented,
    encoding_format: implemented,
    dimensions: implemented, // refused unless it is the model's own size
    user: openAiIgnored.user,
  },
  messages: {
    model: implemented,
    messages: implemented,
    max_tokens: implemented,
    system: implemented,
    stop_sequences: implemented,
    stream: implemented,
    tools: implemented,
    tool_choice: implemented,
    output_config: implemented, // format: a JSON schema; effort is refused
    // in Anthropic's API (the pinned SDK no longer declares them)
    temperature: { treatment: "implemented", origin: "anthropic-api" },
    top_p: { treatment: "implemented", origin: "anthropic-api" },
    top_k: { treatment: "implemented", origin: "anthropic-api" },
    metadata: ignored("an end-user id for abuse monitoring", obj, { user_id: "u-1" }),
    service_tier: ignored("a local server has one tier", str, "auto"),
    cache_control: ignored("prefixes are cached automatically (the KV prefix cache)", obj, { type: "ephemeral" }),
    inference_geo: ignored("where the model runs: here", str, "us"),
    speed: ignored("a local server has one speed", str, "fast"),
    diagnostics: ignored("Anthropic's request diagnostics", obj, {}),
    user_profile_id: ignored("an account setting on Anthropic's side", str, "p-1"),
    workspace_id: ignored("an account setting on Anthropic's side", str, "w-1"),
    thinking: unsupported("extended thinking", { type: "enabled", budget_tokens: 1024 }, (v) => (v as { type?: string })?.type === "disabled"),
    container: unsupported("code execution containers", "container_1"),
    mcp_servers: unsupported("MCP servers", [{ type: "url", url: "http://127.0.0.1:1", name: "x" }], empty),
    context_management: unsupported("server-side context editing", { edits: [{ type: "clear_tool_uses_20250919" }] }),
  },
  "messages.count_tokens": {
    model: implemented,
    messages: implemented,
    system: implemented,
    tools: implemented,
    tool_choice: implemented,
    output_config: implemented,
    cache_control: ignored("prefixes are cached automatically (the KV prefix cache)", obj, { type: "ephemeral" }),
    speed: ignored("a local server has one speed", str, "fast"),
    user_profile_id: ignored("an account setting on Anthropic's side", str, "p-1"),
    workspace_id: ignored("an account setting on Anthropic's side", str, "w-1"),
    thinking: unsupported("extended thinking", { type: "enabled", budget_tokens: 1024 }, (v) => (v as { type?: string })?.type === "disabled"),
    context_management: unsupported("server-side context editing", { edits: [{ type: "clear_tool_uses_20250919" }] }),
    mcp_servers: unsupported("MCP servers", [{ type: "url", url: "http://127.0.0.1:1", name: "x" }], empty),
  },
};

/**
 * Applies the policy to a parsed JSON body: unsupported fields with a value that matters are a
 * 400 naming the field; ignored fields are type-checked and removed, as are unsupported fields
 * with a value that changes nothing. What is left goes to the endpoint's strict schema.
 */
export function applyFieldPolicy(endpoint: Endpoint, body: unknown): unknown {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return body;
  const rules = FIELDS[endpoint];
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(body)) {
    const rule = Object.hasOwn(rules, key) ? rules[key] : undefined;
    if (!rule || rule.treatment === "implemented") {
      out[key] = value;
      continue;
    }
    if (rule.treatment === "unsupported") {
      if (value === null || value === undefined || rule.noop?.(value)) continue;
      throw new ApiError(400, `${key} is not supported by this server: ${rule.why}`, "invalid_request_error", key, "unsupported_parameter");
    }
    const r = rule.schema.safeParse(value);
    if (!r.success) throw new ApiError(400, `${key}: ${r.error.issues[0]?.message ?? "invalid value"}`, "invalid_request_error", key, null);
  }
  return out;
}

/** The fields the endpoint's zod schema must check (implemented ones). */
export function implementedFields(endpoint: Endpoint): string[] {
  return Object.entries(FIELDS[endpoint]).filter(([, r]) => r.treatment === "implemented").map(([k]) => k);
}
