import type { Pointer } from "bun:ffi";
import { appendFileSync } from "node:fs";
import { cstr, lib } from "../ffi/library";
import { check, ErrorCode, VeloError } from "./errors";
import type { Model } from "./model";
import { engineOptionsJSON, kvCacheTypes } from "./options";

export { engineOptionsJSON, kvCacheTypes };
/** KV cache storage types (llama.cpp's names). */
export type KVCacheType = (typeof kvCacheTypes)[number];

/** Engine settings; each is described once, in ./options.ts (its JSON key, bounds, flag). */
export interface EngineOptions {
  threads?: number;
  /** Positions per sequence; absent or 0: the model's trained context, shortened to fit the device. */
  ctxSize?: number;
  maxBatchSize?: number;
  /** maxBatchSize is only a default: the engine may lower it (after the context) to fit the device. */
  batchAuto?: boolean;
  /** Pretend the device (GPU memory, or RAM for the CPU) has this many bytes free (default: ask it). */
  memoryBudget?: number;
  batchTokens?: number;
  kvPages?: number;
  /** KV budget in bytes (used when kvPages is not given). */
  kvMemory?: number;
  /** How K and V are stored in the KV pages (llama.cpp's --cache-type-k/-v; default f16). */
  cacheTypeK?: KVCacheType;
  cacheTypeV?: KVCacheType;
  pageSize?: number;
  /** Reuse KV pages of earlier requests' common prefixes (default true). */
  prefixCache?: boolean;
  /** Time every kind of op; reported as stats().profile_ms. */
  profile?: boolean;
  /** Speculative decoding: guesses from a draft model or from the context (prompt lookup). */
  spec?: "off" | "ngram" | "draft";
  /** Most guesses per step (default 8). */
  draftMax?: number;
  /** Adapt the number of guesses and switch off when it does not pay (default true). */
  specAdapt?: boolean;
  /** Where forward passes run (default auto: Metal on macOS, a Vulkan GPU, else the CPU). */
  backend?: "auto" | "cpu" | "vulkan" | "metal";
  /** Which GPU of the backend. */
  device?: number;
}

/** One engine option as the library reads it. */
export interface LibraryOptionSchema {
  key: string;
  type: "int" | "bool" | "string";
  min?: number;
  max?: number;
  choices?: string[];
}

/** Scheduler counters and gauges (velo_engine_stats). */
export interface SpeculationStats {
  drafted: number;
  accepted: number;
  acceptance: number;
  acceptance_by_position: number[];
  steps: number;
  paused_steps: number;
}
/** GPU time by kernel and grid ("matmul_coop_T_q4_0 32x4x1"), slowest first; with `profile` on a GPU backend. */
export type KernelTimes = Record<string, { ms: number; count: number }>;
/** What the engine holds in memory on its device, worked out before loading (stats().memory). */
export interface MemoryPlan {
  backend: string;
  device: string;
  weights_bytes: number;
  kv_bytes: number;
  scratch_bytes: number;
  needed_bytes: number;
  free_bytes: number;
  total_bytes: number;
  budget_bytes: number;
  context_size: number;
  max_batch_size: number;
  kv_pages: number;
  kv_types: string;
  /** What was changed from the request to fit ("context 131072 → 16384 to fit"). */
  notes: string[];
  /** "weights 4.2 GiB + KV 2.0 GiB (f16, 8 × 4096) + scratch 0.3 GiB on <device>" */
  summary: string;
}
/** Constrained decoding's counters (stats().grammar): tokens chosen under a grammar, those the
 * fast path took, masks computed, their time, and the per-token overhead's percentiles. */
export interface GrammarStats {
  tokens: number; fast_path: number; masks_computed: number; mask_ms: number; choice_ms: number;
  overhead_us_p50: number; overhead_us_p90: number; overhead_us_p99: number; overhead_us_mean: number;
}
export type EngineStats = Record<string, number> & {
  memory?: MemoryPlan; profile_ms?: Record<string, number> | null; kernel_ms?: KernelTimes | null;
  speculation?: SpeculationStats | null; grammar?: GrammarStats;
};

export interface SamplingOptions {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repeatPenalty?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  penaltyWindow?: number;
  seed?: number;
}

export interface GenerateRequest extends SamplingOptions {
  prompt?: string;
  promptTokens?: ArrayLike<number>;
  /** Add BOS/EOS to a text prompt as the model says (default true). */
  addSpecial?: boolean;
  parseSpecial?: boolean;
  maxTokens?: number;
  stop?: string[];
  ignoreEos?: boolean;
  /** Report the k largest raw logits with every token. */
  topLogits?: number;
  /** GBNF the output must follow (llama.cpp's grammar format; root rule `root`). */
  grammar?: string;
  /** Report each token's log-probability and this many most likely alternatives (0–20). */
  logprobs?: number;
  /** Added to these tokens' logits before sampling: {"token id": bias}, -100 bans a token. */
  logitBias?: Record<string, number>;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  ttft_ms: number;
  prompt_ms: number;
  generation_ms: number;
  /** Speculative decoding: guesses made and kept for this request. */
  drafted_tokens: number;
  accepted_tokens: number;
}

export type FinishReason = "stop" | "length" | "cancelled" | "error";

/** What Engine.embed returns: one vector per input, in order, and the tokens they took. */
export interface Embeddings {
  /** Pooled as the model says (stats().pooling), L2-normalised, stats().embedding_length long. */
  vectors: Float32Array[];
  promptTokens: number;
}

export interface Finish {
  reason: FinishReason;
  message: string | null;
  usage: Usage;
}

export interface Chunk {
  tokens: number[];
  text: string;
  /** [token id, logit] pairs, most likely first (when requested). */
  top_logits?: [number, number][];
  /** The token's log-probability (when logprobs were requested). */
  logprob?: number;
  /** [token id, log-probability] pairs, most likely first (when logprobs were requested). */
  top_logprobs?: [number, number][];
}

type RawEvent = { id: number; tokens: number[]; text: string; top_logits?: [number, number][]; logprob?: number; top_logprobs?: [number, number][] } | { id: number; finish: FinishReason; message: string | null; usage: Usage };

const decoder = new TextDecoder();

/** One request in flight: iterate it for text chunks; `finished` resolves at the end. */
export class Generation implements AsyncIterable<Chunk> {
  readonly finished: Promise<Finish>;
  #queue: Chunk[] = [];
  #done = false;
  #notify: (() => void) | null = null;
  #resolve!: (f: Finish) => void;

  constructor(
    readonly id: number,
    private readonly engine: Engine,
  ) {
    this.finished = new Promise((r) => (this.#resolve = r));
  }

  /** @internal */
  deliver(e: RawEvent) {
    if ("finish" in e) {
      this.#done = true;
      this.#resolve({ reason: e.finish, message: e.message, usage: e.usage });
    } else {
      this.#queue.push({ tokens: e.tokens, text: e.text, top_logits: e.top_logits, logprob: e.logprob, top_logprobs: e.top_logprobs });
    }
    this.#notify?.();
  }

  cancel(): void {
    if (!this.#done) this.engine.cancel(this.id);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Chunk> {
    while (true) {
      if (this.#queue.length) {
        yield this.#queue.shift()!;
        continue;
      }
      if (this.#done) return;
      await new Promise<void>((r) => (this.#notify = r));
      this.#notify = null;
    }
  }

  /** All text and tokens, then the finish. */
  async collect(): Promise<{ text: string; tokens: number[]; finish: Finish }> {
    let text = "";
    const tokens: number[] = [];
    for await (const c of this) {
      text += c.text;
      tokens.push(...c.tokens);
    }
    return { text, tokens, finish: await this.finished };
  }
}

/**
 * The engine thread of one model. Requests are submitted without blocking; a polling loop
 * (every millisecond while anything is in flight) hands events to their generations.
 */
export class Engine {
  #handle: Pointer | null;
  #active = new Map<number, Generation>();
  #pumping = false;
  #buf = new Uint8Array(1 << 16);

  private constructor(
    handle: Pointer,
    readonly model: Model,
  ) {
    this.#handle = handle;
  }

  /** `draft`: the draft model of speculative decoding (same vocabulary as `model`). */
  static create(model: Model, opts: EngineOptions = {}, draft?: Model): Engine {
    const json = JSON.stringify(engineOptionsJSON(opts));
    // what crosses the C ABI, one line per engine, for tests/engine-flags.test.ts
    const log = process.env.VELO_ENGINE_OPTIONS_LOG;
    if (log) appendFileSync(log, json + "\n");
    const out = new BigUint64Array(1);
    check(lib().velo_engine_create(model.handle, draft ? draft.handle : null, cstr(json), out));
    return new Engine(Number(out[0]) as Pointer, model);
  }

  /** How the library reads engine options (velo_engine_options_schema): each key, its type, bounds and choices. */
  static optionsSchema(): LibraryOptionSchema[] {
    const buf = new Uint8Array(16384);
    const out = new BigInt64Array(1);
    check(lib().velo_engine_options_schema(buf, buf.length, out));
    return JSON.parse(decoder.decode(buf.subarray(0, Number(out[0]))));
  }

  get handle(): Pointer {
    if (this.#handle === null) throw new Error("engine is closed");
    return this.#handle;
  }

  submit(req: GenerateRequest): Generation {
    const json = JSON.stringify({
      prompt: req.prompt,
      prompt_tokens: req.promptTokens ? Array.from(req.promptTokens) : undefined,
      add_special: req.addSpecial,
      parse_special: req.parseSpecial,
      max_tokens: req.maxTokens,
      temperature: req.temperature,
      top_k: req.topK,
      top_p: req.topP,
      min_p: req.minP,
      repeat_penalty: req.repeatPenalty,
      presence_penalty: req.presencePenalty,
      frequency_penalty: req.frequencyPenalty,
      penalty_window: req.penaltyWindow,
      seed: req.seed,
      stop: req.stop,
      ignore_eos: req.ignoreEos,
      top_logits: req.topLogits,
      grammar: req.grammar,
      logprobs: req.logprobs,
      logit_bias: req.logitBias,
    });
    const out = new BigInt64Array(1);
    check(lib().velo_engine_submit(this.handle, cstr(json), out));
    const g = new Generation(Number(out[0]), this);
    this.#active.set(g.id, g);
    this.#pump();
    return g;
  }

  cancel(id: number): void {
    if (this.#handle !== null) check(lib().velo_engine_cancel(this.#handle, id));
  }

  stats(): EngineStats {
    const out = new BigInt64Array(1);
    let buf = new Uint8Array(8192);
    let status = lib().velo_engine_stats(this.handle, buf, buf.length, out);
    if (status === ErrorCode.bufferTooSmall) {
      // profiles and the memory plan can outgrow the first buffer: the call says how much it needs
      buf = new Uint8Array(Number(out[0]) + 1024);
      status = lib().velo_engine_stats(this.handle, buf, buf.length, out);
    }
    check(status);
    return JSON.parse(decoder.decode(buf.subarray(0, Number(out[0]))));
  }

  /**
   * Waits until the kernels the engine builds in the background after its load are in use (a
   * GPU driver's first build of some takes seconds; requests meanwhile run on others).
   * Benchmarks call it before timing anything.
   */
  waitForKernels(): void {
    check(lib().velo_engine_wait_kernels(this.handle));
  }

  /** Clears stats().profile_ms, kernel_ms and the grammar's overhead percentiles (after a benchmark's warm-up). */
  resetProfile(): void {
    check(lib().velo_engine_reset_profile(this.handle));
  }

  /**
   * Embeddings of token inputs (used as given: no BOS or EOS is added). They go through the
   * engine's step loop, batched together and with generations; at most `window` are in flight
   * at once (default: twice the engine's batch), so a long list neither floods the queue nor
   * holds it. Bad inputs (empty, longer than the context, outside the vocabulary) throw
   * before any is submitted; `signal` cancels the rest. Rejects on the first that fails.
   */
  async embed(inputs: ArrayLike<number>[], opts: { signal?: AbortSignal; window?: number } = {}): Promise<Embeddings> {
    const stats = this.stats();
    const dim = Number(stats.embedding_length);
    const ctx = Number(stats.context_size);
    inputs.forEach((ids, i) => {
      if (ids.length === 0) throw new VeloError(ErrorCode.invalidArgument, `input ${i} is empty`);
      if (ids.length > ctx) throw new VeloError(ErrorCode.contextOverflow, `input ${i} has ${ids.length} tokens, more than the context size ${ctx}`);
    });
    const window = Math.max(1, opts.window ?? 2 * Number(stats.max_batch_size));
    const vectors = new Array<Float32Array>(inputs.length);
    const flight = new Set<Generation>();
    let promptTokens = 0;
    let next = 0;
    const submit = (i: number): Promise<void> => {
      const ids = Int32Array.from(inputs[i]!);
      const out = new BigInt64Array(1);
      check(lib().velo_engine_submit_embedding(this.handle, ids, ids.length, out));
      const g = new Generation(Number(out[0]), this);
      this.#active.set(g.id, g);
      flight.add(g);
      this.#pump();
      return g.finished.then((f) => {
        flight.delete(g);
        if (f.reason !== "stop") throw new VeloError(f.reason === "cancelled" ? ErrorCode.invalidArgument : ErrorCode.internal, f.message ?? `the embedding of input ${i} was ${f.reason}`);
        const v = new Float32Array(dim);
        const len = new BigInt64Array(1);
        check(lib().velo_engine_take_embedding(this.handle, g.id, v, dim, len));
        vectors[i] = v;
        promptTokens += f.usage.prompt_tokens;
      });
    };
    const cancelAll = () => {
      for (const g of flight) g.cancel();
    };
    opts.signal?.addEventListener("abort", cancelAll, { once: true });
    let stopped = false;
    // each lane submits its next input when its last one is done; the first failure stops all
    const lane = async (): Promise<void> => {
      try {
        while (next < inputs.length && !stopped) {
          if (opts.signal?.aborted) throw new VeloError(ErrorCode.invalidArgument, "cancelled");
          await submit(next++);
        }
      } catch (e) {
        stopped = true;
        cancelAll();
        throw e;
      }
    };
    try {
      await Promise.all(Array.from({ length: Math.min(window, inputs.length) }, lane));
    } finally {
      opts.signal?.removeEventListener("abort", cancelAll);
    }
    return { vectors, promptTokens };
  }

  /** Saves the KV pages of the longest cached prefix of `tokens`; returns the tokens saved. */
  savePrefix(tokens: ArrayLike<number>, path: string): number {
    const ids = Int32Array.from(tokens);
    const out = new BigInt64Array(1);
    check(lib().velo_engine_save_prefix(this.handle, ids, ids.length, cstr(path), out));
    return Number(out[0]);
  }

  /** Loads a prefix file saved from this same model file into the cache; returns its tokens. */
  loadPrefix(path: string): number {
    const out = new BigInt64Array(1);
    check(lib().velo_engine_load_prefix(this.handle, cstr(path), out));
    return Number(out[0]);
  }

  get inFlight(): number {
    return this.#active.size;
  }

  /** Drains ready events once; returns how many were delivered. */
  pollOnce(): number {
    const out = new BigInt64Array(1);
    let status = lib().velo_engine_poll(this.handle, this.#buf, this.#buf.length, out);
    if (status === ErrorCode.bufferTooSmall) {
      this.#buf = new Uint8Array(Number(out[0]) * 2);
      status = lib().velo_engine_poll(this.handle, this.#buf, this.#buf.length, out);
    }
    check(status);
    const n = Number(out[0]);
    if (n === 0) return 0;
    const lines = decoder.decode(this.#buf.subarray(0, n)).split("\n");
    let count = 0;
    for (const line of lines) {
      if (!line) continue;
      const e = JSON.parse(line) as RawEvent;
      const g = this.#active.get(e.id);
      if (!g) continue;
      g.deliver(e);
      if ("finish" in e) this.#active.delete(e.id);
      count++;
    }
    return count;
  }

  async #pump() {
    if (this.#pumping) return;
    this.#pumping = true;
    try {
      while (this.#active.size > 0 && this.#handle !== null) {
        if (this.pollOnce() === 0) await Bun.sleep(1);
      }
    } finally {
      this.#pumping = false;
    }
  }

  /** Cancels whatever is in flight and stops the engine thread. */
  close(): void {
    if (this.#handle === null) return;
    const h = this.#handle;
    check(lib().velo_engine_destroy(h));
    this.#handle = null;
    const usage: Usage = { prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0, ttft_ms: 0, prompt_ms: 0, generation_ms: 0, drafted_tokens: 0, accepted_tokens: 0 };
    for (const g of this.#active.values()) g.deliver({ id: g.id, finish: "cancelled", message: "engine closed", usage });
    this.#active.clear();
  }
}
