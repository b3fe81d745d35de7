// POST /v1/embeddings with the official openai client against `velo serve`, `velo embed`, and
// Engine.embed, on the CPU and on the GPU backend (lavapipe under `make test`). The vectors are
// checked against llama.cpp's on the same GGUF (node-llama-cpp's embedding context:
// bench/llamacpp/embeddings.mjs), on the same token ids:
// - a random-weight qwen3 with pooling_type 3, last token (Qwen3-Embedding's), written by
//   src/gguf/synth.ts;
// - stories260K, a llama with no pooling_type: Velo pools its last token, as node-llama-cpp does
//   for such a model (llama.cpp's own server refuses pooling "none" on /v1/embeddings);
// - the qwen3 with pooling_type 1, mean, in chunks of 8 tokens and more inputs than the batch
//   (Engine.embed, where the step's token budget can be set).
// llama.cpp returns the pooled vector unnormalised; Velo's is L2-normalised (as llama.cpp's server
// does by default), so the reference is normalised here and compared element by element. Both
// keep the KV cache in float32 (with f16, llama.cpp also rounds each query to f16 in Q·K, and the
// two differ by up to 6.5e-4 per element on these models).
// Tolerances: cosine ≥ 0.9999 and max |velo − llama.cpp| ≤ 1e-5 per element (elements here are
// about 0.1). Measured: cosine ≥ 0.99999999 and max 2.6e-7 on the CPU, 3.2e-7 on lavapipe.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, renameSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { type EmbeddingReference, runEmbeddingReference } from "../bench/llamacpp/reference";
import { Engine } from "../src/engine/engine";
import { ErrorCode, VeloError } from "../src/engine/errors";
import { Model } from "../src/engine/model";
import { synthesize } from "../src/gguf/synth";
import { runCli } from "./helpers/cli";
import { testData } from "./helpers/paths";
import { postJson, type Running, startServer } from "./helpers/server";

const gpuBackend = process.platform === "darwin" ? "metal" : "vulkan";
const COSINE = 0.9999;
const MAX_ABS = 1e-5;
const F32_KV = ["--cache-type-k", "f32", "--cache-type-v", "f32"];
// llama.cpp and lavapipe on a 2-core machine
const SLOW = 300_000;

// synthesized once per synth.ts version into the temporary folder
const synthKey = Bun.hash(readFileSync(join(import.meta.dir, "..", "src", "gguf", "synth.ts"))).toString(16).slice(0, 12);
function qwen3(pooling: number): string {
  const dir = join(tmpdir(), `velo-embedding-models-${synthKey}`);
  const file = join(dir, `qwen3-test-f32-pooling${pooling}.gguf`);
  if (!existsSync(file)) {
    mkdirSync(dir, { recursive: true });
    const part = `${file}.${process.pid}.part`;
    synthesize({ out: part, arch: "qwen3", shape: "test", type: "f32", pooling });
    renameSync(part, file);
  }
  return file;
}

const TEXTS = [
  "Hello world",
  "The quick brown fox jumps over the lazy dog, again and again, until it is too tired to jump any more and lies down.",
  "a",
  "Embeddings map a text to a point in space; nearby points mean similar texts.",
];

/** Texts as the server tokenizes them (BOS/EOS as the model says, special-token text kept as text). */
function tokenize(file: string, texts: string[]): number[][] {
  const m = Model.open(file);
  try {
    return texts.map((t) => Array.from(m.tokenize(t, { addSpecial: true, parseSpecial: false })));
  } finally {
    m.close();
  }
}

const references = new Map<string, Promise<EmbeddingReference>>();
function reference(file: string, inputs: number[][]): Promise<EmbeddingReference> {
  const key = `${file}:${JSON.stringify(inputs)}`;
  if (!references.has(key)) references.set(key, runEmbeddingReference(file, inputs, { ctx: 512, threads: 2 }));
  return references.get(key)!;
}

/** Velo's vector against llama.cpp's raw one: the cosine, and the largest element difference once llama.cpp's is normalised. */
function compare(got: ArrayLike<number>, ref: number[]): { cosine: number; maxAbs: number; norm: number } {
  expect(got.length).toBe(ref.length);
  const refNorm = Math.hypot(...ref);
  let dot = 0, maxAbs = 0, sq = 0;
  for (let i = 0; i < ref.length; i++) {
    dot += got[i]! * (ref[i]! / refNorm);
    sq += got[i]! * got[i]!;
    maxAbs = Math.max(maxAbs, Math.abs(got[i]! - ref[i]! / refNorm));
  }
  const norm = Math.sqrt(sq);
  return { cosine: dot / norm, maxAbs, norm };
}

function expectClose(got: ArrayLike<number>[], ref: EmbeddingReference, what: string) {
  expect(got.length).toBe(ref.results.length);
  got.forEach((v, i) => {
    const c = compare(v, ref.results[i]!.vector);
    const label = `${what}, input ${i} (${ref.results[i]!.input.length} tokens)`;
    // normalised, pooled as llama.cpp pools, and element by element the same
    expect({ label, norm: Math.abs(c.norm - 1) < 1e-5 }).toEqual({ label, norm: true });
    expect({ label, cosine: c.cosine >= COSINE }).toEqual({ label, cosine: true });
    expect({ label, maxAbs: c.maxAbs <= MAX_ABS, value: c.maxAbs <= MAX_ABS ? 0 : c.maxAbs }).toEqual({ label, maxAbs: true, value: 0 });
  });
}

async function metrics(url: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const line of text.split("\n")) {
    const m = line.match(/^(velo_[a-z_]+) ([\d.e+-]+)$/);
    if (m) out[m[1]!] = Number(m[2]);
  }
  return out;
}

const client = (s: Running) => new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "unused", maxRetries: 0 });

const CASES = [
  { name: "qwen3, pooling_type last", file: () => qwen3(3), id: "qwen3-embed" },
  { name: "stories260K (llama), no pooling_type: last token", file: () => testData("stories260K.gguf"), id: "stories260K" },
];

for (const backend of ["cpu", gpuBackend] as const) {
  describe(`against llama.cpp through velo serve, ${backend} backend`, () => {
    for (const c of CASES) {
      test(c.name, async () => {
        const file = c.file();
        const inputs = tokenize(file, TEXTS);
        const refP = reference(file, inputs);
        const server = await startServer([file, "--alias", c.id, "--ctx-size", "512", "--max-batch-size", "4", "--backend", backend, "-t", "2", ...F32_KV]);
        try {
          const openai = client(server);
          const r = await openai.embeddings.create({ model: c.id, input: TEXTS, encoding_format: "float" });
          expect(r.object).toBe("list");
          expect(r.model).toBe(c.id);
          expect(r.data.map((d) => [d.object, d.index])).toEqual(TEXTS.map((_, i) => ["embedding", i]));
          const total = inputs.reduce((a, i) => a + i.length, 0);
          expect(r.usage).toEqual({ prompt_tokens: total, total_tokens: total });
          expectClose(r.data.map((d) => d.embedding), await refP, `${c.name} on ${backend}`);
          // token-id input gives the same vectors (the text path is only the tokenizer); the
          // prefix cache now holds the inputs' full pages, so only their tails are computed, in
          // smaller products (measured: 8.5e-6 apart on lavapipe, 0 on the CPU)
          const byIds = await openai.embeddings.create({ model: c.id, input: inputs, encoding_format: "float" });
          byIds.data.forEach((d, i) => expect(compare(d.embedding, r.data[i]!.embedding).maxAbs).toBeLessThan(5e-5));
          // nothing is left holding pages
          const m = await metrics(server.url);
          expect(m.velo_kv_pages_used).toBe(0);
          expect(m.velo_running_sequences).toBe(0);
        } finally {
          server.proc.kill();
        }
      }, SLOW);
    }

    test("qwen3, pooling_type mean: chunked prompts, more inputs than the batch, batched steps", async () => {
      const file = qwen3(1);
      const texts = [...TEXTS, "one more", "and the last of seven inputs, a little longer than most of the others"];
      const inputs = tokenize(file, texts);
      const refP = reference(file, inputs);
      const m = Model.open(file);
      try {
        // 8-token steps: the longer inputs are pooled over several forward passes
        const e = Engine.create(m, { ctxSize: 512, maxBatchSize: 3, batchTokens: 8, threads: 2, backend, prefixCache: false, cacheTypeK: "f32", cacheTypeV: "f32" });
        try {
          expect(e.stats().pooling as unknown).toBe("mean");
          const r = await e.embed(inputs);
          expect(r.promptTokens).toBe(inputs.reduce((a, i) => a + i.length, 0));
          expectClose(r.vectors, await refP, `mean pooling on ${backend}`);
          const stats = e.stats();
          // inputs share steps: fewer forward passes than one input at a time would take
          expect(stats.steps).toBeLessThan(inputs.reduce((a, i) => a + Math.ceil(i.length / 8), 0));
          expect(stats.kv_pages_used).toBe(0);
          // one at a time, the same vectors
          const single = await e.embed(inputs, { window: 1 });
          single.vectors.forEach((v, i) => expect(compare(v, Array.from(r.vectors[i]!)).maxAbs).toBeLessThan(1e-5));
        } finally {
          e.close();
        }
      } finally {
        m.close();
      }
    }, SLOW);
  });
}

describe("the endpoint", () => {
  let server: Running;
  let openai: OpenAI;
  const MODEL = "qwen3-embed";
  const url = () => `${server.url}/v1/embeddings`;
  beforeAll(async () => {
    server = await startServer([qwen3(3), "--alias", MODEL, "--ctx-size", "64", "--max-batch-size", "4", "-t", "2"]);
    openai = client(server);
  });
  afterAll(() => server?.proc.kill());

  test("a single string, base64 (little-endian float32) equal to the floats", async () => {
    const floats = await openai.embeddings.create({ model: MODEL, input: "Hello world", encoding_format: "float" });
    expect(floats.data.length).toBe(1);
    expect(floats.data[0]!.embedding.length).toBe(128);
    // the raw response: base64 of the float32 bytes (the openai client decodes it itself)
    const raw = await postJson(url(), { model: MODEL, input: "Hello world", encoding_format: "base64" });
    expect(raw.status).toBe(200);
    const bytes = Buffer.from(raw.body.data[0].embedding, "base64");
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const decoded = Array.from({ length: bytes.byteLength / 4 }, (_, i) => view.getFloat32(i * 4, true));
    expect(decoded).toEqual(floats.data[0]!.embedding.map((x) => Math.fround(x)));
    // the openai client asks for base64 by default and decodes it
    const viaClient = await openai.embeddings.create({ model: MODEL, input: "Hello world" });
    expect(Array.from(viaClient.data[0]!.embedding)).toEqual(decoded);
  });

  test("dimensions: the model's own size is accepted, any other is a 400 naming the field", async () => {
    expect((await postJson(url(), { model: MODEL, input: "hi", dimensions: 128 })).status).toBe(200);
    const r = await postJson(url(), { model: MODEL, input: "hi", dimensions: 64 });
    expect(r.status).toBe(400);
    expect(r.body.error.param).toBe("dimensions");
    expect(r.body.error.message).toMatch(/128 dimensions/);
  });

  test("bad inputs are 400s naming input: empty, too long for the context, outside the vocabulary", async () => {
    const cases: [unknown, RegExp][] = [
      ["", /input is empty/],
      [[], /input is empty/],
      [["hi", ""], /input\[1\] is empty/],
      [[[1, 2], []], /input\[1\] is empty/],
      ["word ".repeat(100), /more than this model's context of 64/],
      [[Array.from({ length: 65 }, () => 5)], /65 tokens, more than this model's context of 64/],
      [[1, 2, 999999], /outside the vocabulary/],
    ];
    for (const [input, message] of cases) {
      const r = await postJson(url(), { model: MODEL, input });
      expect({ input, status: r.status, param: r.body.error?.param }).toEqual({ input, status: 400, param: "input" });
      expect(r.body.error.message).toMatch(message);
    }
    // exactly the context fits (no room is needed for generated tokens)
    expect((await postJson(url(), { model: MODEL, input: [Array.from({ length: 64 }, () => 5)] })).status).toBe(200);
    // the official client sees an OpenAI-shaped error
    const err = await openai.embeddings.create({ model: MODEL, input: "" }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect(err.param).toBe("input");
  });

  test("a repeated input reuses cached pages and gives the same vector; no pages are left held", async () => {
    const text = "a text long enough to fill a few pages of sixteen tokens each, so that the prefix cache keeps some";
    const before = await metrics(server.url);
    const a = await openai.embeddings.create({ model: MODEL, input: text, encoding_format: "float" });
    const b = await openai.embeddings.create({ model: MODEL, input: text, encoding_format: "float" });
    const after = await metrics(server.url);
    expect(after.velo_prefix_cache_hits_total).toBeGreaterThan(before.velo_prefix_cache_hits_total!);
    expect(compare(b.data[0]!.embedding, a.data[0]!.embedding).maxAbs).toBeLessThan(1e-5);
    expect(after.velo_kv_pages_used).toBe(0);
  });

  test("a client that goes away cancels its inputs and frees their pages", async () => {
    // 2000 inputs of about 50 tokens: seconds of work, wherever this runs
    const many = Array.from({ length: 2000 }, (_, i) => `input number ${i}: ${"with some more words to embed ".repeat(8)}`);
    const abort = new AbortController();
    const pending = fetch(url(), { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ model: MODEL, input: many }), signal: abort.signal }).catch((e) => e);
    await Bun.sleep(300);
    abort.abort();
    // it was still running when the client went away (else fetch would have given a Response)
    expect(((await pending) as Error).name).toBe("AbortError");
    let m = await metrics(server.url);
    for (let i = 0; i < 100 && (m.velo_running_sequences !== 0 || m.velo_kv_pages_used !== 0 || m.velo_queue_depth !== 0); i++) {
      await Bun.sleep(50);
      m = await metrics(server.url);
    }
    expect([m.velo_running_sequences, m.velo_queue_depth, m.velo_kv_pages_used]).toEqual([0, 0, 0]);
    // and the server goes on
    expect((await postJson(url(), { model: MODEL, input: "still here" })).status).toBe(200);
  }, 60_000);
});

test("a reranker (pooling_type rank) gives no embeddings: a 400 naming the model", async () => {
  const server = await startServer([qwen3(4), "--alias", "reranker", "--ctx-size", "64", "-t", "2"]);
  try {
    const r = await postJson(`${server.url}/v1/embeddings`, { model: "reranker", input: "hi" });
    expect(r.status).toBe(400);
    expect(r.body.error.param).toBe("model");
    expect(r.body.error.message).toMatch(/rank/);
  } finally {
    server.proc.kill();
  }
}, 60_000);

describe("velo embed", () => {
  test("--json: the vectors the server gives; --lines: one input per line", async () => {
    const file = testData("stories260K.gguf");
    const one = await runCli(["embed", file, "Once upon a time", "--json", "-c", "256", "-t", "2", ...F32_KV]);
    expect(one.code).toBe(0);
    const doc = JSON.parse(one.stdout);
    expect(doc.pooling).toBe("last");
    expect(doc.dimensions).toBe(64);
    expect(doc.embeddings.length).toBe(1);
    expect(doc.prompt_tokens).toBe(tokenize(file, ["Once upon a time"])[0]!.length);
    const ref = await reference(file, tokenize(file, ["Once upon a time"]));
    expectClose(doc.embeddings, ref, "velo embed");

    const lines = await runCli(["embed", file, "--lines", "--json", "-c", "256", "-t", "2", ...F32_KV], { stdin: "Once upon a time\n\nthere was a cat\n" });
    expect(lines.code).toBe(0);
    const two = JSON.parse(lines.stdout);
    expect(two.embeddings.length).toBe(2);
    expect(compare(two.embeddings[0], doc.embeddings[0]).maxAbs).toBeLessThan(1e-6);

    // plain output: one line of numbers per input
    const plain = await runCli(["embed", file, "Once upon a time", "-c", "256", "-t", "2"]);
    expect(plain.code).toBe(0);
    expect(plain.stdout.trim().split(/\s+/).length).toBe(64);
  }, SLOW);

  test("an input longer than the context is a usage error (exit 2)", async () => {
    const r = await runCli(["embed", testData("stories260K.gguf"), "word ".repeat(100), "-c", "16", "-t", "2"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/more than the context size 16/);
  }, 60_000);
});

test("Engine.embed refuses bad inputs before submitting any", async () => {
  const m = Model.open(testData("stories260K.gguf"));
  const e = Engine.create(m, { ctxSize: 32, threads: 2, backend: "cpu" });
  try {
    const err = (p: Promise<unknown>) => p.then(() => null, (x) => x as VeloError);
    expect((await err(e.embed([[1, 2], []])))?.code).toBe(ErrorCode.invalidArgument);
    expect((await err(e.embed([Array.from({ length: 33 }, () => 5)])))?.code).toBe(ErrorCode.contextOverflow);
    expect(e.inFlight).toBe(0);
    expect(e.stats().kv_pages_used).toBe(0);
  } finally {
    e.close();
    m.close();
  }
});
