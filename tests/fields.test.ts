// The field policy (src/server/fields.ts): the table walked against a running server (ignored
// fields accepted and type-checked, unsupported ones a 400 naming them, implemented ones checked
// by the endpoint's schema), and checked for completeness against the request types of the
// pinned openai and @anthropic-ai/sdk packages.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { z } from "zod";
import { countTokensRequest, messagesRequest } from "../src/server/messages";
import { type Endpoint, FIELDS, implementedFields } from "../src/server/fields";
import { responsesRequest } from "../src/server/responses";
import { chatRequest, completionRequest, embeddingsRequest } from "../src/server/schemas";
import { repoRoot, testData } from "./helpers/paths";
import { postJson, type Running, startServer } from "./helpers/server";

const MODEL = "stories260K";
const endpoints: Record<Endpoint, { path: string; base: Record<string, unknown>; schema: z.ZodObject }> = {
  "chat.completions": { path: "/v1/chat/completions", base: { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }, schema: chatRequest },
  completions: { path: "/v1/completions", base: { model: MODEL, prompt: "Once", max_tokens: 2 }, schema: completionRequest },
  responses: { path: "/v1/responses", base: { model: MODEL, input: "hi", max_output_tokens: 2 }, schema: responsesRequest },
  embeddings: { path: "/v1/embeddings", base: { model: MODEL, input: "hi" }, schema: embeddingsRequest },
  messages: { path: "/v1/messages", base: { model: MODEL, max_tokens: 2, messages: [{ role: "user", content: "hi" }] }, schema: messagesRequest },
  "messages.count_tokens": { path: "/v1/messages/count_tokens", base: { model: MODEL, messages: [{ role: "user", content: "hi" }] }, schema: countTokensRequest },
};

/** Top-level fields of an interface in a .d.ts file (the SDKs' request types). */
function declaredFields(file: string, name: string): string[] {
  const s = readFileSync(file, "utf8");
  const start = s.indexOf(`export interface ${name} `);
  if (start < 0) throw new Error(`${name} not found in ${file}`);
  let i = s.indexOf("{", start);
  let depth = 0;
  const fields: string[] = [];
  let line = "";
  for (; i < s.length; i++) {
    const c = s[i]!;
    if (c === "\n") {
      const m = depth === 1 ? /^\s{4}(\w+)\??:/.exec(line) : null;
      if (m) fields.push(m[1]!);
      line = "";
      continue;
    }
    if (c === "{") depth++;
    if (c === "}" && --depth === 0) break;
    if (depth === 1 || c === "{") line += c;
  }
  return fields;
}

const openaiDir = join(repoRoot, "node_modules", "openai", "resources");
const anthropicDir = join(repoRoot, "node_modules", "@anthropic-ai", "sdk", "resources");
const declared: [Endpoint, string, string][] = [
  ["chat.completions", join(openaiDir, "chat", "completions", "completions.d.ts"), "ChatCompletionCreateParamsBase"],
  ["completions", join(openaiDir, "completions.d.ts"), "CompletionCreateParamsBase"],
  ["responses", join(openaiDir, "responses", "responses.d.ts"), "ResponseCreateParamsBase"],
  ["embeddings", join(openaiDir, "embeddings.d.ts"), "EmbeddingCreateParams"],
  ["messages", join(anthropicDir, "messages", "messages.d.ts"), "MessageCreateParamsBase"],
  ["messages.count_tokens", join(anthropicDir, "messages", "messages.d.ts"), "MessageCountTokensParams"],
];

describe("the table", () => {
  test("names every request field the pinned openai and @anthropic-ai/sdk packages declare", () => {
    for (const [endpoint, file, name] of declared) {
      const fields = declaredFields(file, name);
      expect(fields.length).toBeGreaterThan(4);
      const missing = fields.filter((f) => !(f in FIELDS[endpoint]));
      expect({ endpoint, missing }).toEqual({ endpoint, missing: [] });
    }
  });

  test("implemented fields are exactly those the endpoint's schema checks", () => {
    for (const [endpoint, { schema }] of Object.entries(endpoints) as [Endpoint, (typeof endpoints)[Endpoint]][]) {
      expect({ endpoint, fields: Object.keys(schema.shape).sort() }).toEqual({ endpoint, fields: implementedFields(endpoint).sort() });
    }
  });

  test("the fields the issue names are accepted on chat", () => {
    for (const f of ["service_tier", "store", "metadata", "user", "prompt_cache_key", "safety_identifier"]) expect(FIELDS["chat.completions"][f]!.treatment).toBe("ignored");
    expect(FIELDS["chat.completions"].parallel_tool_calls!.treatment).toBe("implemented");
  });
});

describe("walking the table against a server", () => {
  let server: Running;
  beforeAll(async () => {
    server = await startServer([testData("stories260K.gguf"), "--ctx-size", "256", "--max-batch-size", "4"]);
  });
  afterAll(() => server?.proc.kill());

  /** POSTs and returns the status, the error message and its param (either API's shape). */
  async function post(endpoint: Endpoint, extra: Record<string, unknown>) {
    const { status, body } = await postJson(`${server.url}${endpoints[endpoint].path}`, { ...endpoints[endpoint].base, ...extra });
    return { status, message: (body?.error?.message ?? "") as string, param: (body?.error?.param ?? null) as string | null };
  }

  for (const endpoint of Object.keys(endpoints) as Endpoint[]) {
    test(endpoint, async () => {
      const base = await post(endpoint, {});
      expect(base.status).toBe(200);
      const anthropic = endpoint.startsWith("messages");
      for (const [field, rule] of Object.entries(FIELDS[endpoint])) {
        if (rule.treatment === "implemented") continue;
        if (rule.treatment === "ignored") {
          const ok = await post(endpoint, { [field]: rule.example });
          expect({ field, status: ok.status, message: ok.message }).toEqual({ field, status: base.status, message: base.message });
          const nul = await post(endpoint, { [field]: null });
          expect({ field, status: nul.status }).toEqual({ field, status: base.status });
          const bad = await post(endpoint, { [field]: typeof rule.example === "string" ? 12345 : "not-this" });
          expect({ field, status: bad.status }).toEqual({ field, status: 400 });
          expect(bad.message.startsWith(`${field}:`)).toBe(true);
        } else {
          const no = await post(endpoint, { [field]: rule.example });
          expect({ field, status: no.status }).toEqual({ field, status: 400 });
          expect(no.message).toBe(`${field} is not supported by this server: ${rule.why}`);
          if (!anthropic) expect(no.param).toBe(field);
          const nul = await post(endpoint, { [field]: null });
          expect({ field, status: nul.status }).toEqual({ field, status: base.status });
        }
      }
      // a field in no row is a typo
      const typo = await post(endpoint, { temprature: 0.5 });
      expect(typo.status).toBe(400);
      expect(typo.message).toMatch(/unrecognized request argument: temprature/);
    }, 120_000);
  }

  test("values that change nothing pass: modalities [text], echo false, best_of 1, truncation disabled, thinking disabled", async () => {
    expect((await post("chat.completions", { modalities: ["text"], stream_options: { include_usage: true, include_obfuscation: false } })).status).toBe(200);
    expect((await post("completions", { echo: false, best_of: 1, suffix: "" })).status).toBe(200);
    expect((await post("completions", { echo: true })).param).toBe("echo");
    expect((await post("responses", { truncation: "disabled", include: [], background: false })).status).toBe(200);
    expect((await post("messages", { thinking: { type: "disabled" } })).status).toBe(200);
  }, 60_000);
});
