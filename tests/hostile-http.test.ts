// Hostile HTTP (issue 19, item 2): over a thousand generated malformed or adversarial requests
// against a real `velo serve`: wrong types, out-of-range numbers, deep nesting, invalid UTF-8,
// lone surrogates, huge strings and arrays, unknown fields, hostile grammars and schemas, wrong
// methods and paths, then bodies cut off mid-stream, slow bodies and pipelined garbage over raw
// sockets. Each HTTP answer is a 4xx in the OpenAI shape (Anthropic's on /v1/messages), never a
// 5xx; the server stays up and a greedy request afterwards returns the same text as before.
// The figures go to bench/RELIABILITY.md (HOSTILE_REPORT=1 prints them).
import { afterAll, beforeAll, expect, test } from "bun:test";
import { testData } from "./helpers/paths";
import { type Running, startServer } from "./helpers/server";

const MODEL = "stories260K";
let server: Running;

beforeAll(async () => {
  server = await startServer([testData("stories260K.gguf"), "--ctx-size", "256", "--max-body", "1", "--idle-timeout", "3", "--max-batch-size", "4", "--max-queue", "256"]);
});
afterAll(() => server?.proc.kill());

/** A deterministic PRNG (mulberry32): the same requests every run. */
function rng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(19);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;

interface Case {
  what: string;
  method?: string;
  path: string;
  body?: string | Uint8Array;
  headers?: Record<string, string>;
}

const enc = new TextEncoder();
const json = (v: unknown) => JSON.stringify(v);
const user = [{ role: "user", content: "Once upon a time" }];
// valid bodies of each route; every case below breaks one thing
const base: Record<string, Record<string, unknown>> = {
  "/v1/chat/completions": { model: MODEL, messages: user, max_tokens: 1 },
  "/v1/completions": { model: MODEL, prompt: "Once", max_tokens: 1 },
  "/v1/responses": { model: MODEL, input: "Once", max_output_tokens: 1 },
  "/v1/messages": { model: MODEL, messages: user, max_tokens: 1 },
  "/v1/messages/count_tokens": { model: MODEL, messages: user },
  "/tokenize": { content: "Once" },
  "/detokenize": { tokens: [1, 2] },
};
const routes = Object.keys(base);

// values of the wrong type or out of range, per field (every one invalid for that field)
const WRONG_TYPES = [123, -1, 1.5, true, "str", [], {}, [[]], [1, "a"], { a: 1 }];
const bad: Record<string, unknown[]> = {
  model: [123, "", true, [], {}, null, "no-such-model"],
  messages: ["hi", 123, [], [{}], [{ role: "user" }], [{ role: "nobody", content: "x" }], [{ role: "user", content: 5 }], [{ role: "user", content: [{ type: "image", x: 1 }] }],
    [{ role: "tool", content: "x" }], [{ role: "user", content: "x", tool_calls: [] }], [{ role: "assistant", content: null }], [null], [[]], [{ role: "user", content: "x", extra: 1 }]],
  max_tokens: [0, -1, 1.5, 99999999999, 1e300, -1e300, "1", true, [], {}, 257, 2 ** 53],
  max_completion_tokens: [0, -5, 2.5, 99999999999, "big"],
  temperature: [-0.1, 2.01, 1e308, "hot", [], true],
  top_p: [-1, 1.5, "x", {}],
  top_k: [-1, 0.5, 1e20, "k"],
  min_p: [-0.5, 2, "p"],
  seed: [1.5, 1e300, -1e300, "s", []],
  n: [0, 17, 1e9, -1, 1.5, "2"],
  stop: [123, [1], Array(17).fill("x"), { a: 1 }, [[]]],
  presence_penalty: [-3, 3, 1e9, "p"],
  frequency_penalty: [-2.5, 99, "f"],
  repeat_penalty: [0, -1, 101, "r"],
  stream: ["yes", 1, {}],
  stream_options: ["x", { include_usage: "y" }, { bogus: true }],
  logit_bias: ["x", { abc: 1 }, { "1": 1000 }, { "99999999999": 1 }, { "-1": 1 }, { "1": "a" }, [1]],
  logprobs: ["x", 5, {}],
  top_logprobs: [21, -1, 2.5],
  response_format: ["json", { type: "nope" }, { type: "json_schema" }, { type: "json_schema", json_schema: { name: "bad name!" } }, { type: "json_schema", json_schema: { name: "a", schema: 5 } }, { type: "text", extra: 1 }],
  tools: ["x", [{}], [{ type: "function" }], [{ type: "function", function: { name: "bad name" } }], [{ type: "code_interpreter" }], Array(129).fill({ type: "function", function: { name: "f" } })],
  tool_choice: ["sometimes", { type: "function" }, { type: "function", function: { name: "missing" } }, 5],
  grammar: [5, "root ::= (((", "root ::= x", "", "root ::= [", "root ::= \"unterminated", "foo ::= \"a\"", "root ::= " + "(".repeat(5000) + '"a"' + ")".repeat(5000),
    "root ::= a\na ::= b\nb ::= a", "root ::= [\\x{110000}]", "root ::= \"\\u{d800}\"", "root ::= \"a\"{99999999999}", "root ::= \"a\"{5,2}"],
  json_schema: [5, "schema", { type: "nonsense" }, { $ref: "#/definitions/missing" }, { type: "string", pattern: "(" }, { type: "integer", minimum: 5, maximum: 1 },
    { type: "array", minItems: 5, maxItems: 1 }, { enum: [] }, { allOf: [{ type: "string" }, { type: "integer" }] }, { type: "string", minLength: 99999999999 }, { type: "array", minItems: 1e12, items: {} }],
  prompt: [123, [], [[1]], ["a", "b"], [-1], [1.5], [99999999999], { text: "x" }, null, true],
  content: [123, null, [], {}, true],
  tokens: ["1,2", [-1], [1.5], [99999999999], [[1]], null, {}],
  add_special: ["yes", 1],
  input: [123, null, true, [{ type: "message", role: "nobody", content: "x" }], [{ type: "nonsense" }]],
  max_output_tokens: [0, -1, 99999999999, "x"],
  system: [123, [{ type: "image" }]],
};
const fieldsOf: Record<string, string[]> = {
  "/v1/chat/completions": ["model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "n", "stop", "presence_penalty", "frequency_penalty",
    "repeat_penalty", "stream", "stream_options", "logit_bias", "logprobs", "top_logprobs", "response_format", "tools", "tool_choice", "grammar", "json_schema"],
  "/v1/completions": ["model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "n", "stop", "logit_bias", "top_logprobs", "grammar", "json_schema", "stream"],
  "/v1/responses": ["model", "input", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice", "stream"],
  "/v1/messages": ["model", "messages", "max_tokens", "temperature", "top_p", "top_k", "stream", "system", "tools"],
  "/v1/messages/count_tokens": ["model", "messages", "system", "tools"],
  "/tokenize": ["content", "add_special"],
  "/detokenize": ["tokens"],
};

function nest(depth: number, kind: "array" | "object"): string {
  return kind === "array" ? "[".repeat(depth) + "]".repeat(depth) : '{"a":'.repeat(depth) + "1" + "}".repeat(depth);
}

function cases(): Case[] {
  const out: Case[] = [];
  const post = (what: string, path: string, body: string | Uint8Array, headers?: Record<string, string>) => out.push({ what, path, body, headers });
  // 1. every field of every route given wrong types and out-of-range values
  for (const path of routes) {
    for (const field of fieldsOf[path]!) {
      // the no-such-model check comes after the schema: for routes without model it is unknown
      const values = [...(bad[field] ?? []), ...WRONG_TYPES.filter(() => rand() < 0.3)];
      for (const v of values) {
        if (v === null && !["model", "messages", "prompt", "content", "tokens", "input"].includes(field)) continue;
        // some wrong-type picks are right for that field (a string content, an object schema, …)
        if (!(bad[field] ?? []).includes(v) && isValidFor(field, v)) continue;
        post(`${path} ${field}=${json(v)?.slice(0, 40)}`, path, json({ ...base[path], [field]: v }));
      }
    }
  }
  // 2. unknown fields, at the top and inside messages
  for (const path of routes) {
    for (let i = 0; i < 12; i++) {
      const name = pick(["bogus", "__proto__x", "constructor_", "maxTokens", "temprature", "model ", "", "\u0000", "émoji😀", "a".repeat(2000)]) + (i % 3 ? i : "");
      post(`${path} unknown ${name.slice(0, 20)}`, path, json({ ...base[path], [name]: pick([1, "x", null, {}, []]) }));
    }
  }
  for (const path of ["/v1/chat/completions", "/v1/messages"]) {
    post(`${path} unknown field in a message`, path, json({ ...base[path], messages: [{ role: "user", content: "x", bogus: 1 }] }));
  }
  // 3. deep nesting in every spot that takes objects
  for (const path of routes) {
    for (const depth of [65, 100, 1000, 20000]) {
      for (const kind of ["array", "object"] as const) {
        post(`${path} nested ${kind} ${depth} at the top`, path, nest(depth, kind));
        const field = path === "/tokenize" ? "content" : path === "/detokenize" ? "tokens" : "metadata";
        post(`${path} nested ${kind} ${depth} in ${field}`, path, json(base[path]).replace(/}$/, `,"${field}":${nest(depth, kind)}}`));
      }
    }
  }
  for (const depth of [70, 500]) {
    let schema: unknown = { type: "string" };
    for (let i = 0; i < depth; i++) schema = { type: "object", properties: { a: schema } };
    post(`json_schema nested ${depth}`, "/v1/chat/completions", json({ ...base["/v1/chat/completions"], json_schema: schema }));
    post(`tool parameters nested ${depth}`, "/v1/chat/completions", json({ ...base["/v1/chat/completions"], tools: [{ type: "function", function: { name: "f", parameters: schema } }] }));
  }
  // 4. invalid UTF-8 inside string values
  const badBytes = [[0xff], [0xfe, 0xff], [0xc0, 0x80], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xc3], [0xe2, 0x82], [0x80], [0xf8, 0x88, 0x80, 0x80, 0x80]];
  for (const path of routes) {
    for (const b of badBytes) {
      const text = json(base[path]);
      const at = text.indexOf('"', text.indexOf(":") + 1) + 1 || 2; // inside the first string value
      post(`${path} invalid UTF-8 ${b.map((x) => x.toString(16)).join(" ")}`, path, new Uint8Array([...enc.encode(text.slice(0, at)), ...b, ...enc.encode(text.slice(at))]));
    }
  }
  // 5. lone surrogates (valid JSON escapes, no UTF-8 form)
  for (const path of routes) {
    for (const s of ["\\ud800", "\\udfff", "a\\udc00b", "\\ud83d", "\\ude00\\ud83d", "x\\ud800\\ud800"]) {
      const text = json(base[path]);
      const at = text.indexOf('"', text.indexOf(":") + 1) + 1;
      if (path === "/detokenize") post(`${path} lone surrogate key ${s}`, path, `{"tok${s}ens":[1]}`);
      else post(`${path} lone surrogate ${s}`, path, text.slice(0, at) + s + text.slice(at));
    }
  }
  // 6. huge strings and arrays: over the 1 MiB body limit (413), and within it but past the context
  for (const path of routes) {
    post(`${path} 2 MB string`, path, json({ ...base[path], model: "m".repeat(2_000_000) }));
    post(`${path} 300k-element array`, path, json({ ...base[path], stop: Array(300_000).fill(1) }));
  }
  post("prompt past the context", "/v1/completions", json({ ...base["/v1/completions"], prompt: "Once upon a time ".repeat(20000) }));
  post("message past the context", "/v1/chat/completions", json({ ...base["/v1/chat/completions"], messages: [{ role: "user", content: "word ".repeat(100000) }] }));
  post("many messages past the context", "/v1/chat/completions", json({ ...base["/v1/chat/completions"], messages: Array(5000).fill({ role: "user", content: "hi" }) }));
  post("many prompt tokens", "/v1/completions", json({ ...base["/v1/completions"], prompt: Array(50000).fill(1) }));
  post("huge detokenize ids", "/detokenize", json({ tokens: Array(1000).fill(2 ** 31) }));
  post("128 tools past the context", "/v1/chat/completions", json({ ...base["/v1/chat/completions"], tools: Array.from({ length: 128 }, (_, i) => ({ type: "function", function: { name: `f${i}`, description: "d".repeat(2000) } })) }));
  post("huge logit_bias out of vocabulary", "/v1/chat/completions", json({ ...base["/v1/chat/completions"], logit_bias: Object.fromEntries(Array.from({ length: 20000 }, (_, i) => [String(100000 + i), 1])) }));
  // 7. bodies that are not a JSON object, or not JSON at all
  const notJson = ["", " ", "null", "1", '"s"', "[]", "true", "{", '{"a":1', "{'a':1}", '{"a":1,}', "NaN", '{"max_tokens":NaN}', '{"a":Infinity}', "\u0000", '{"model":"x"}{"model":"y"}', "<xml/>", "a=1&b=2", "\ufeff{}", '{"__proto__":{"admin":true}}'];
  for (const path of routes) {
    for (const b of notJson) post(`${path} body ${json(b)}`, path, b);
    post(`${path} no Content-Type`, path, json(base[path]), { "Content-Type": "" });
    post(`${path} text/plain`, path, json(base[path]), { "Content-Type": "text/plain" });
    post(`${path} form`, path, "a=1", { "Content-Type": "application/x-www-form-urlencoded" });
  }
  // 8. wrong methods and paths
  for (const path of [...routes, "/health", "/metrics", "/v1/models"]) {
    for (const method of ["PUT", "PATCH", "DELETE", "GET", "POST"]) {
      const ok = (base[path] && method === "POST") || (["/health", "/metrics", "/v1/models"].includes(path) && method === "GET");
      if (!ok) out.push({ what: `${method} ${path}`, method, path, body: method === "GET" ? undefined : "{}" });
    }
  }
  for (const path of ["/", "/v1", "/v1/", "/v2/chat/completions", "/v1/chat/completions/", "/v1//chat/completions", "/V1/CHAT/COMPLETIONS", "/%2e%2e/etc/passwd",
    "/v1/responses/%ZZ", "/v1/responses/" + "a".repeat(5000), "/v1/responses/a/b", "/v1/responses/resp_nope", "/v1/chat/completions%00", "/v1/modelz?x=" + "%".repeat(100), "/" + "x/".repeat(500)]) {
    out.push({ what: `GET ${path.slice(0, 40)}`, method: "GET", path });
    out.push({ what: `POST ${path.slice(0, 40)}`, path, body: "{}" });
  }
  // 9. random junk: random bytes and random JSON values
  for (let i = 0; i < 80; i++) {
    const n = Math.floor(rand() * 300);
    post(`random bytes ${i}`, pick(routes), Uint8Array.from({ length: n }, () => Math.floor(rand() * 256)));
  }
  for (let i = 0; i < 80; i++) post(`random JSON ${i}`, pick(routes), json(randomValue(3)));
  return out;
}

function randomValue(depth: number): unknown {
  const r = rand();
  if (depth === 0 || r < 0.3) return pick([0, -1, 1e308, "", "x", "<|eot_id|>", null, true, 2 ** 53 + 1, "\u0000"]);
  if (r < 0.6) return Array.from({ length: Math.floor(rand() * 4) }, () => randomValue(depth - 1));
  return Object.fromEntries(Array.from({ length: Math.floor(rand() * 4) }, () => [pick(["model", "messages", "prompt", "max_tokens", "content", "tokens", "x"]), randomValue(depth - 1)]));
}

/** Whether a wrong-type pick happens to be valid for the field (skipped: the case must be bad). */
function isValidFor(field: string, v: unknown): boolean {
  const t = Array.isArray(v) ? "array" : v === null ? "null" : typeof v;
  const ok: Record<string, string[]> = { model: ["string"], content: ["string"], grammar: ["string"], json_schema: ["object", "boolean"], stop: ["string"], stream: ["boolean"], logprobs: ["boolean", "number"],
    add_special: ["boolean"], input: ["string"], system: ["string"], messages: [], response_format: [], tools: [], prompt: ["string"], stream_options: ["object"], logit_bias: ["object"] };
  if (field === "stop" && Array.isArray(v) && v.length === 0) return true;
  if (["temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty"].includes(field) && typeof v === "number") return true;
  if (["seed", "top_k"].includes(field) && Number.isInteger(v)) return true;
  if (field === "repeat_penalty" && typeof v === "number" && v >= 0.01 && v <= 100) return true;
  if (field === "system" && Array.isArray(v) && v.length === 0) return true;
  if (field === "tools" && Array.isArray(v) && v.length === 0) return true;
  if (field === "stream_options" && t === "object" && Object.keys(v as object).length === 0) return true;
  if (field === "logit_bias" && t === "object" && Object.keys(v as object).length === 0) return true;
  if (["max_tokens", "max_completion_tokens", "max_output_tokens", "n"].includes(field) && Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 16) return true;
  if (["max_tokens", "max_completion_tokens", "max_output_tokens"].includes(field) && Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 256) return true;
  return (ok[field] ?? []).includes(t);
}

/** The error shape of a route: OpenAI's, or Anthropic's on /v1/messages. */
function wellShaped(path: string, body: any): boolean {
  if (path.startsWith("/v1/messages")) {
    return body?.type === "error" && typeof body.error?.type === "string" && typeof body.error?.message === "string";
  }
  return typeof body?.error?.message === "string" && typeof body.error.type === "string" && "param" in body.error && "code" in body.error;
}

async function greedy(): Promise<string> {
  const res = await fetch(`${server.url}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" }, body: json({ model: MODEL, prompt: "Once upon a time", max_tokens: 32, temperature: 0 }) });
  expect(res.status).toBe(200);
  return (await res.json()).choices[0].text;
}

/** What came back on a raw socket: the bytes, and whether the server closed it (not we). */
interface RawResult {
  text: string;
  serverClosed: boolean;
}

/** Writes chunks to a raw socket (with pauses), then collects what comes back until close or `waitMs`. */
async function raw(chunks: (string | Uint8Array)[], opts: { pauseMs?: number; waitMs?: number; closeAfter?: boolean } = {}): Promise<RawResult> {
  const url = new URL(server.url);
  let text = "";
  let ours = false;
  let serverClosed = false;
  let done!: () => void;
  const closed = new Promise<void>((r) => (done = r));
  const sock = await Bun.connect({
    hostname: url.hostname,
    port: Number(url.port),
    socket: {
      data(_s, d) {
        text += new TextDecoder().decode(d);
      },
      close() {
        if (!ours) serverClosed = true;
        done();
      },
      error() {
        done();
      },
    },
  });
  for (const c of chunks) {
    sock.write(c);
    if (opts.pauseMs) await Bun.sleep(opts.pauseMs);
  }
  if (opts.closeAfter) {
    ours = true;
    sock.end();
  }
  await Promise.race([closed, Bun.sleep(opts.waitMs ?? 1000)]);
  ours = true;
  sock.end();
  return { text, serverClosed };
}

test("1000+ hostile requests: every answer a well-shaped 4xx, the server up, greedy text unchanged", async () => {
  const before = await greedy();
  const all = cases();
  expect(all.length).toBeGreaterThanOrEqual(1000);
  const byStatus = new Map<number, number>();
  const failures: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < all.length) {
      const c = all[next++]!;
      const headers: Record<string, string> = { "Content-Type": "application/json", ...c.headers };
      if (headers["Content-Type"] === "") delete headers["Content-Type"];
      let status = 0;
      let body: any = null;
      try {
        const res = await fetch(`${server.url}${c.path}`, { method: c.method ?? "POST", headers, body: c.body as BodyInit | undefined });
        status = res.status;
        const text = await res.text();
        try {
          body = JSON.parse(text);
        } catch {
          body = text;
        }
      } catch (e) {
        failures.push(`${c.what}: ${(e as Error).message}`);
        continue;
      }
      byStatus.set(status, (byStatus.get(status) ?? 0) + 1);
      if (status < 400 || status >= 500 || !wellShaped(c.path, body)) failures.push(`${c.what}: ${status} ${json(body).slice(0, 200)}`);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  if (process.env.HOSTILE_REPORT) console.log(`http cases ${all.length}`, JSON.stringify(Object.fromEntries(byStatus)));
  expect(failures).toEqual([]);

  // raw sockets: cut bodies, slow bodies, pipelined garbage, broken HTTP. Each case says what
  // must come back: "answer" a status line (a 4xx, or 505 for a request line without HTTP/1.x,
  // which Bun's parser sends before Velo sees anything); "close" the server hanging up by
  // itself within the idle timeout (3 s here) on a body that never completes, where no answer
  // is possible; "survive" a client that hangs up mid-body (nothing can come back to it: the
  // health and greedy checks after this show the server unharmed).
  type Expect = "answer" | "close" | "survive";
  const valid = json(base["/v1/chat/completions"]);
  const head = (len: number | string, extra = "") => `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\n${extra}\r\n`;
  const rawCases: { what: string; expect: Expect; chunks: (string | Uint8Array)[]; opts?: Parameters<typeof raw>[1] }[] = [];
  for (let cut = 1; cut < valid.length; cut += 7) rawCases.push({ what: `body cut at ${cut}, held open`, expect: "close", chunks: [head(valid.length), valid.slice(0, cut)], opts: { waitMs: 6000 } });
  for (const cut of [1, 20, valid.length - 1]) rawCases.push({ what: `body cut at ${cut}, client gone`, expect: "survive", chunks: [head(valid.length), valid.slice(0, cut)], opts: { closeAfter: true, waitMs: 300 } });
  rawCases.push({ what: "chunked body cut", expect: "close", chunks: [`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n${valid.slice(0, 16)}\r\n`], opts: { waitMs: 6000 } });
  rawCases.push({ what: "slow body (a byte each 5 ms)", expect: "answer", chunks: [head(json({ model: MODEL, prompt: "x", max_tokens: 0 }).length), ...json({ model: MODEL, prompt: "x", max_tokens: 0 }).split("")], opts: { pauseMs: 5, waitMs: 2000 } });
  rawCases.push({ what: "pipelined bad requests then garbage", expect: "answer", chunks: [head(2) + "{}" + head(3) + "nul" + "GARBAGE\r\n\r\n"], opts: { waitMs: 1000 } });
  for (const g of ["GARBAGE\r\n\r\n", "\x00\x01\x02\r\n\r\n", "GET / HTTP/9.9\r\n\r\n", "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n", "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
    "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{}", "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\nzz\r\n",
    "POST /v1/chat/completions HTTP/1.1\r\nX: " + "a".repeat(100_000) + "\r\n\r\n", "GET /health HTTP/1.1\r\n" + "X-A: b\r\n".repeat(500) + "\r\n", "POST\r\n\r\n", "\r\n\r\n\r\n", "GET /health HTTP/1.1\nHost: x\n\n"]) {
    rawCases.push({ what: `garbage ${json(g.slice(0, 30))}`, expect: "answer", chunks: [g], opts: { waitMs: 500 } });
  }
  for (let i = 0; i < 20; i++) rawCases.push({ what: `random bytes ${i}`, expect: "answer", chunks: [Uint8Array.from({ length: 64 + Math.floor(rand() * 512) }, () => Math.floor(rand() * 256))], opts: { waitMs: 300 } });
  const rawResults: RawResult[] = [];
  for (let i = 0; i < rawCases.length; i += 8) {
    rawResults.push(...(await Promise.all(rawCases.slice(i, i + 8).map((c) => raw(c.chunks, c.opts)))));
  }
  const rawFailures: string[] = [];
  rawCases.forEach((c, i) => {
    const r = rawResults[i]!;
    const statuses = [...r.text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
    for (const s of statuses) byStatus.set(s, (byStatus.get(s) ?? 0) + 1);
    if (statuses.some((s) => s < 400 || (s >= 500 && s !== 505))) rawFailures.push(`${c.what}: ${statuses.join(", ")}`);
    if (c.expect === "answer" && !r.text.startsWith("HTTP/1.1 4") && !r.text.startsWith("HTTP/1.1 505")) rawFailures.push(`${c.what}: no answer (${json(r.text.slice(0, 40))})`);
    if (c.expect === "close" && !r.serverClosed) rawFailures.push(`${c.what}: the server held the connection open past its idle timeout`);
  });
  if (process.env.HOSTILE_REPORT) console.log(`raw cases ${rawCases.length}`, JSON.stringify(Object.fromEntries(byStatus)));
  expect(rawFailures).toEqual([]);
  expect(rawCases.filter((c) => c.expect === "answer").length).toBeGreaterThanOrEqual(34);
  // the slow body arrived whole and was answered (max_tokens 0 is a 400)
  expect(rawResults[rawCases.findIndex((c) => c.what.startsWith("slow body"))]!.text).toMatch(/^HTTP\/1\.1 400/);

  // still up, nothing stuck, the same greedy text
  expect(server.proc.exitCode).toBeNull();
  expect((await fetch(`${server.url}/health`)).status).toBe(200);
  expect(await greedy()).toBe(before);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  expect(metrics).toMatch(/^velo_running_sequences 0$/m);
  expect(metrics).toMatch(/^velo_queue_depth 0$/m);
  expect(metrics).toMatch(/^velo_kv_pages_used 0$/m);
}, 120_000);
