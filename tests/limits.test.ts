// The server's limits (issue 19, item 5): max_tokens against the context, prompt length, body
// size, JSON depth, the request deadline, the idle timeout, CORS and the API key on every route.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { testData } from "./helpers/paths";
import { type Running, startServer } from "./helpers/server";

const MODEL = "stories260K";
const KEY = "sekret";
let plain: Running; // defaults, no key
let strict: Running; // small limits, a key, CORS for one origin

beforeAll(async () => {
  [plain, strict] = await Promise.all([
    startServer([testData("stories260K.gguf"), "--ctx-size", "256"]),
    startServer([testData("stories260K.gguf"), "--ctx-size", "2048", "--max-body", "1", "--request-timeout", "1", "--idle-timeout", "2",
      "--api-key", KEY, "--cors", "http://app.example", "--max-batch-size", "16"]),
  ]);
});
afterAll(() => {
  plain?.proc.kill();
  strict?.proc.kill();
});

const auth = { Authorization: `Bearer ${KEY}` };
async function post(s: Running, path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${s.url}${path}`, { method: "POST", headers: { "Content-Type": "application/json", ...headers }, body: typeof body === "string" ? body : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: text.startsWith("{") ? JSON.parse(text) : null };
}
const chat = (extra: object) => ({ model: MODEL, messages: [{ role: "user", content: "Once upon a time" }], ...extra });

function expectError(r: { status: number; body: any }, status: number, param?: string | null) {
  expect(r.status).toBe(status);
  expect(typeof r.body.error.message).toBe("string");
  expect(typeof r.body.error.type).toBe("string");
  if (param !== undefined) expect(r.body.error.param).toBe(param);
}

describe("max_tokens and the context", () => {
  test("a huge max_tokens is a 400 naming the field, on every generating route", async () => {
    for (const stream of [false, true]) {
      expectError(await post(plain, "/v1/chat/completions", chat({ max_tokens: 99999999999, stream })), 400, "max_tokens");
      expectError(await post(plain, "/v1/chat/completions", chat({ max_completion_tokens: 99999999999, stream })), 400, "max_completion_tokens");
      expectError(await post(plain, "/v1/completions", { model: MODEL, prompt: "hi", max_tokens: 99999999999, stream }), 400, "max_tokens");
    }
    expect((await post(plain, "/v1/responses", { model: MODEL, input: "hi", max_output_tokens: 99999999999 })).status).toBe(400);
    const m = await post(plain, "/v1/messages", { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 99999999999 });
    expect(m.status).toBe(400);
    expect(m.body.type).toBe("error");
    // more than the context is refused; past the room the prompt leaves is clamped
    expectError(await post(plain, "/v1/chat/completions", chat({ max_tokens: 257 })), 400, "max_tokens");
    const r = await post(plain, "/v1/completions", { model: MODEL, prompt: "Once upon a time", max_tokens: 256, temperature: 0 });
    expect(r.status).toBe(200);
    expect(r.body.usage.total_tokens).toBeLessThanOrEqual(256);
  });

  test("a prompt longer than the context is a 400, never truncated", async () => {
    const long = "Once upon a time ".repeat(200);
    expectError(await post(plain, "/v1/completions", { model: MODEL, prompt: long }), 400, "prompt");
    expectError(await post(plain, "/v1/chat/completions", chat({ messages: [{ role: "user", content: long }] })), 400, "messages");
    expect((await post(plain, "/v1/completions", { model: MODEL, prompt: long })).body.error.code).toBe("context_length_exceeded");
  });
});

describe("bodies", () => {
  test("a body over --max-body is a 413, declared or chunked", async () => {
    const big = JSON.stringify({ model: MODEL, prompt: "a".repeat(1_100_000) });
    const r = await post(strict, "/v1/completions", big, auth);
    expectError(r, 413);
    expect(r.body.error.code).toBe("request_too_large");
    // no Content-Length: the limit holds while reading
    const chunks = new ReadableStream<Uint8Array>({
      start(c) {
        const enc = new TextEncoder().encode(big);
        for (let i = 0; i < enc.length; i += 65536) c.enqueue(enc.subarray(i, i + 65536));
        c.close();
      },
    });
    const res = await fetch(`${strict.url}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json", ...auth }, body: chunks });
    expect(res.status).toBe(413);
    expect((await res.json()).error.code).toBe("request_too_large");
  });

  test("invalid UTF-8 and deep nesting are 400s", async () => {
    const bad = new Uint8Array([...new TextEncoder().encode(`{"model":"${MODEL}","prompt":"`), 0xff, 0xfe, 0x22, 0x7d]);
    const res = await fetch(`${plain.url}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" }, body: bad });
    expect(res.status).toBe(400);
    const deep = '{"type":"object","properties":{"a":'.repeat(200) + "{}" + "}}".repeat(200);
    expectError(await post(plain, "/v1/chat/completions", `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"json_schema":${deep}}`), 400);
    expectError(await post(plain, "/v1/chat/completions", "[".repeat(100000) + "]".repeat(100000)), 400);
    // a lone surrogate has no UTF-8 form
    expectError(await post(plain, "/v1/completions", `{"model":"${MODEL}","prompt":"a\\ud800b"}`), 400);
    expect((await post(plain, "/v1/completions", `{"model":"${MODEL}","prompt":"a\\ud83d\\ude00b","max_tokens":1}`)).status).toBe(200);
  });
});

describe("time limits", () => {
  test("a generation past --request-timeout is cut off: 504, or an error event when streamed", async () => {
    const body = { model: MODEL, prompt: "Once", max_tokens: 2000, n: 16, temperature: 0 };
    const t0 = performance.now();
    const r = await post(strict, "/v1/completions", body, auth);
    expectError(r, 504);
    expect(r.body.error.code).toBe("request_timeout");
    expect(performance.now() - t0).toBeLessThan(30_000);
    const s = await post(strict, "/v1/completions", { ...body, stream: true }, auth);
    expect(s.status).toBe(200);
    expect(s.text).toContain("--request-timeout");
    expect(s.text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    // nothing left running (cancellation lands at the next step)
    let m = "";
    for (let i = 0; i < 50; i++) {
      m = await (await fetch(`${strict.url}/metrics`, { headers: auth })).text();
      if (/^velo_running_sequences 0$/m.test(m) && /^velo_queue_depth 0$/m.test(m)) break;
      await Bun.sleep(100);
    }
    expect(m).toMatch(/^velo_running_sequences 0$/m);
    expect(m).toMatch(/^velo_queue_depth 0$/m);
  }, 60_000);

  test("a silent connection is closed after --idle-timeout; a long generation is not", async () => {
    const url = new URL(strict.url);
    const closed = await new Promise<number>((resolve) => {
      const t0 = performance.now();
      void Bun.connect({
        hostname: url.hostname,
        port: Number(url.port),
        socket: {
          open(sock) {
            sock.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nAuthorization: Bearer ${KEY}\r\n\r\n{"model"`);
          },
          data() {},
          close() {
            resolve(performance.now() - t0);
          },
          error() {
            resolve(performance.now() - t0);
          },
        },
      });
      setTimeout(() => resolve(-1), 40_000);
    });
    expect(closed).toBeGreaterThan(1000);
    expect(closed).toBeLessThan(40_000);
    // a non-streamed generation sends nothing for longer than the idle timeout and still completes
    const idle = await startServer([testData("stories260K.gguf"), "--ctx-size", "2048", "--idle-timeout", "1", "--request-timeout", "0", "--max-batch-size", "16"]);
    try {
      const r = await post(idle, "/v1/completions", { model: MODEL, prompt: "Once", max_tokens: 400, n: 16, temperature: 0 });
      expect(r.status).toBe(200);
      expect(r.body.usage.completion_tokens).toBe(16 * 400);
    } finally {
      idle.proc.kill();
    }
  }, 60_000);
});

describe("CORS and the API key", () => {
  test("CORS is off by default: no headers, no preflight", async () => {
    const pre = await fetch(`${plain.url}/v1/chat/completions`, { method: "OPTIONS", headers: { Origin: "http://app.example", "Access-Control-Request-Method": "POST" } });
    expect(pre.status).toBe(405);
    expect(pre.headers.get("access-control-allow-origin")).toBeNull();
    const r = await fetch(`${plain.url}/v1/models`, { headers: { Origin: "http://app.example" } });
    expect(r.headers.get("access-control-allow-origin")).toBeNull();
  });

  test("--cors answers the preflight of its origin and marks responses", async () => {
    const pre = await fetch(`${strict.url}/v1/chat/completions`, {
      method: "OPTIONS",
      headers: { Origin: "http://app.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os" },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers.get("access-control-allow-origin")).toBe("http://app.example");
    expect(pre.headers.get("access-control-allow-methods")).toContain("POST");
    expect(pre.headers.get("access-control-allow-headers")).toContain("x-stainless-os");
    const r = await fetch(`${strict.url}/v1/models`, { headers: { Origin: "http://app.example", ...auth } });
    expect(r.status).toBe(200);
    expect(r.headers.get("access-control-allow-origin")).toBe("http://app.example");
    // errors carry it too (the browser could not read them otherwise)
    const denied = await fetch(`${strict.url}/v1/models`, { headers: { Origin: "http://app.example" } });
    expect(denied.status).toBe(401);
    expect(denied.headers.get("access-control-allow-origin")).toBe("http://app.example");
    const other = await fetch(`${strict.url}/v1/models`, { headers: { Origin: "http://evil.example", ...auth } });
    expect(other.headers.get("access-control-allow-origin")).toBeNull();
  });

  test("the API key guards every route but /health", async () => {
    expect((await fetch(`${strict.url}/health`)).status).toBe(200);
    for (const [method, path] of [["GET", "/metrics"], ["GET", "/v1/models"], ["POST", "/tokenize"], ["POST", "/detokenize"], ["POST", "/v1/chat/completions"],
      ["POST", "/v1/completions"], ["POST", "/v1/responses"], ["GET", "/v1/responses/resp_1"], ["DELETE", "/v1/responses/resp_1"], ["POST", "/v1/messages"],
      ["POST", "/v1/messages/count_tokens"], ["POST", "/v1/embeddings"], ["POST", "/prefix-cache/save"], ["GET", "/no/such/path"], ["PUT", "/v1/models"]] as const) {
      const r = await fetch(`${strict.url}${path}`, { method, headers: { "Content-Type": "application/json" }, body: method === "POST" ? "{}" : undefined });
      expect([method, path, r.status]).toEqual([method, path, 401]);
    }
    const ok = await fetch(`${strict.url}/tokenize`, { method: "POST", headers: { "Content-Type": "application/json", ...auth }, body: JSON.stringify({ content: "hi" }) });
    expect(ok.status).toBe(200);
  });
});
