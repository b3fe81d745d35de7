// POST /v1/embeddings: one vector per input (a string, strings, token ids, or lists of them),
// pooled as the model's GGUF says and L2-normalised by the engine (Engine.embed), as float
// arrays or base64 (little-endian float32, as OpenAI sends). Texts are tokenized with the
// model's BOS/EOS and without reading special-token text (a document's "</s>" stays text);
// token inputs are used as given.
import { ErrorCode, VeloError } from "../engine/errors";
import { ApiError, badRequest } from "./errors";
import { embeddingsRequest } from "./schemas";
import { deadlineError, LIMIT_DEFAULTS, parseBody } from "./request";
import type { VeloServer } from "./server";

export async function createEmbeddings(s: VeloServer, req: Request): Promise<Response> {
  const body = await parseBody(req, embeddingsRequest, "embeddings");
  const stats = s.engine.stats();
  const dim = Number(stats.embedding_length);
  if (stats.pooling == null) {
    throw badRequest(`${s.modelId} gives no embeddings: its pooling type (${s.model.info().architecture}.pooling_type) is one Velo does not run`, "model", "model_not_supported");
  }
  if (body.dimensions != null && body.dimensions !== dim) {
    throw badRequest(`dimensions: this model's embeddings have ${dim} dimensions, and shortening them is not supported`, "dimensions", "unsupported_parameter");
  }
  const raw = body.input;
  const texts = typeof raw === "string" ? [raw] : raw.length > 0 && typeof raw[0] === "string" ? (raw as string[]) : null;
  const inputs: number[][] = texts
    ? texts.map((t) => Array.from(s.model.tokenize(t, { addSpecial: true, parseSpecial: false })))
    : raw.length > 0 && typeof raw[0] === "number" ? [raw as number[]] : (raw as number[][]);
  if (inputs.length === 0) throw badRequest("input is empty: give a string, strings, or token ids", "input");
  const ctx = s.contextSize;
  inputs.forEach((ids, i) => {
    const which = inputs.length > 1 ? `input[${i}]` : "input";
    if (ids.length === 0 || texts?.[i] === "") throw badRequest(`${which} is empty`, "input");
    if (ids.length > ctx) throw badRequest(`${which} has ${ids.length} tokens, more than this model's context of ${ctx}`, "input", "context_length_exceeded");
  });
  s.checkCapacity(1);

  // a client that goes away, or the deadline, cancels what is in flight
  const abort = new AbortController();
  const onClose = () => abort.abort();
  req.signal.addEventListener("abort", onClose, { once: true });
  const seconds = s.options.requestTimeoutS ?? LIMIT_DEFAULTS.requestTimeoutS;
  let late = false;
  const timer = seconds > 0 ? setTimeout(() => {
    late = true;
    abort.abort();
  }, seconds * 1000) : undefined;
  let result;
  try {
    result = await s.engine.embed(inputs, { signal: abort.signal });
  } catch (e) {
    if (late) throw deadlineError(`the request ran past its deadline of ${seconds} s (--request-timeout)`);
    if (e instanceof VeloError && e.code === ErrorCode.unsupported) throw badRequest(e.message, "model", "model_not_supported");
    if (e instanceof VeloError && (e.code === ErrorCode.invalidArgument || e.code === ErrorCode.contextOverflow)) throw badRequest(e.message, "input");
    throw new ApiError(500, `embedding failed: ${(e as Error).message}`, "server_error", null, "embedding_failed");
  } finally {
    clearTimeout(timer);
    req.signal.removeEventListener("abort", onClose);
  }
  s.metrics.promptTokens += result.promptTokens;
  const base64 = body.encoding_format === "base64";
  const data = result.vectors.map((v, index) => ({
    object: "embedding",
    index,
    // the float32 bytes as they lie in memory: little-endian on every platform Velo runs on
    embedding: base64 ? Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64") : Array.from(v),
  }));
  return Response.json({ object: "list", data, model: s.modelId, usage: { prompt_tokens: result.promptTokens, total_tokens: result.promptTokens } });
}
