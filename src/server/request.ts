// A request's body: read under the size limit, parsed through the field policy and the
// endpoint's schema, bounded in depth; the limits' defaults and the timeout error. Every API
// handler (server.ts, responses.ts, messages.ts, embeddings.ts) imports these from here, not
// from the server, so no module imports one that imports it.
import type { z } from "zod";
import { ApiError, badRequest } from "./errors";
import { applyFieldPolicy, type Endpoint } from "./fields";
import { describeIssue } from "./schemas";

export const LIMIT_DEFAULTS = { maxBodyBytes: 8 << 20, requestTimeoutS: 600, idleTimeoutS: 60 } as const;
/** Deepest JSON nesting a request body may have (schemas and tool parameters included). */
export const MAX_JSON_DEPTH = 64;
/** Request bodies read by handle() under the size limit, for parseBody. */
const bodies = new WeakMap<Request, string>();

/** Keeps a body read by the server (readBody) for parseBody. */
export function keepBody(req: Request, text: string): void {
  bodies.set(req, text);
}

/** A JSON body through the field policy (fields.ts) and the endpoint's strict schema. */
export async function parseBody<T extends z.ZodTypeAny>(req: Request, schema: T, endpoint?: Endpoint): Promise<z.infer<T>> {
  const type = req.headers.get("content-type") ?? "";
  if (!type.includes("application/json")) throw badRequest("the request body must be JSON (Content-Type: application/json)");
  let raw: unknown;
  try {
    raw = JSON.parse(bodies.get(req) ?? (await req.text()));
  } catch (e) {
    throw badRequest(`the request body is not valid JSON: ${(e as Error).message}`);
  }
  // schemas, tools and templates walk what they are given recursively: bound the depth first;
  // a lone surrogate (a "\ud800" escape) has no UTF-8 form to tokenize
  const problem = jsonProblem(raw);
  if (problem) throw badRequest(problem.message, problem.param);
  const parsed = schema.safeParse(endpoint ? applyFieldPolicy(endpoint, raw) : raw);
  if (!parsed.success) {
    const { message, param } = describeIssue(parsed.error);
    throw badRequest(message, param);
  }
  return parsed.data;
}

/** A generation cut off by --request-timeout. */
export function deadlineError(message: string): ApiError {
  return new ApiError(504, message, "server_error", null, "request_timeout");
}

/**
 * What makes a parsed body unusable whatever its schema: nesting deeper than MAX_JSON_DEPTH or a
 * string (value or key) with a lone UTF-16 surrogate. Iterative: the value may be deeper than the stack.
 */
export function jsonProblem(v: unknown): { message: string; param: string | null } | null {
  interface Entry { value: unknown; depth: number; parent: Entry | null; key: string }
  // the field to blame: down to its schema ("…schema", "…parameters", "json_schema") if in one
  const param = (e: Entry | null): string | null => {
    const path: string[] = [];
    for (; e?.parent; e = e.parent) path.unshift(e.key);
    const last = path.findLastIndex((k) => k === "schema" || k === "parameters" || k === "json_schema");
    return path.length ? path.slice(0, last >= 0 ? last + 1 : 1).join(".") : null;
  };
  const lone = (e: Entry) => ({ message: "the request body has a string with a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape)", param: param(e) });
  const stack: Entry[] = [{ value: v, depth: 1, parent: null, key: "" }];
  while (stack.length) {
    const e = stack.pop()!;
    const x = e.value;
    if (typeof x === "string") {
      if (!x.isWellFormed()) return lone(e);
      continue;
    }
    if (x === null || typeof x !== "object") continue;
    if (e.depth > MAX_JSON_DEPTH) return { message: `the request body nests deeper than ${MAX_JSON_DEPTH} levels`, param: param(e) };
    if (Array.isArray(x)) {
      x.forEach((c, i) => stack.push({ value: c, depth: e.depth + 1, parent: e, key: String(i) }));
    } else {
      for (const [k, c] of Object.entries(x)) {
        if (!k.isWellFormed()) return lone(e);
        stack.push({ value: c, depth: e.depth + 1, parent: e, key: k });
      }
    }
  }
  return null;
}

/** A request body as text: at most `limit` bytes (else 413) of valid UTF-8 (else 400). */
export async function readBody(req: Request, limit: number): Promise<string> {
  const tooLarge = () => new ApiError(413, `the request body is larger than ${limit} bytes (--max-body)`, "invalid_request_error", null, "request_too_large");
  const declared = Number(req.headers.get("content-length") ?? 0);
  if (declared > limit) throw tooLarge();
  if (!req.body) return "";
  const parts: Uint8Array[] = [];
  let size = 0;
  const reader = req.body.getReader();
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > limit) {
        void reader.cancel().catch(() => {});
        throw tooLarge();
      }
      parts.push(value);
    }
  } catch (e) {
    if (e instanceof ApiError) throw e;
    throw badRequest(`the request body could not be read: ${(e as Error).message}`, null, "body_unreadable");
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(Buffer.concat(parts));
  } catch {
    throw badRequest("the request body is not valid UTF-8");
  }
}
