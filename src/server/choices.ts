// The choices of one completion request: n generations merged into one event stream, and each
// choice's output turned into what the API sends (content, tool-call deltas, logprobs).
import type { StreamPart, ToolFamily, ToolCallDelta } from "../chat/tools";
import { ToolStream } from "../chat/tools";
import type { Chunk, Finish, Generation } from "../engine/engine";

export type ChoiceEvent = { index: number; chunk: Chunk } | { index: number; finish: Finish };

/** Events of several generations in arrival order, each tagged with its choice index. */
export class FanIn implements AsyncIterable<ChoiceEvent> {
  #queue: ChoiceEvent[] = [];
  #wake: (() => void) | null = null;
  #open: number;
  #unfinished: number;
  /** Set when the request ran past its deadline: its cancelled choices end as errors saying so. */
  deadline: { message: string } | null = null;
  /** Runs once every choice has ended. */
  onEnd: (() => void) | null = null;

  constructor(n: number) {
    this.#open = n;
    this.#unfinished = n;
  }

  /** Forwards a generation's events; `onStart` runs once its prompt is done (first event). */
  add(index: number, gen: Generation, onStart?: () => void): void {
    void (async () => {
      let started = false;
      const start = () => {
        if (!started) onStart?.();
        started = true;
      };
      for await (const chunk of gen) {
        start();
        this.#push({ index, chunk });
      }
      let finish = await gen.finished;
      if (this.deadline && finish.reason === "cancelled") finish = { ...finish, reason: "error", message: this.deadline.message };
      start();
      this.#push({ index, finish });
    })();
  }

  /** A choice that could not be started. */
  fail(index: number, message: string): void {
    const usage = { prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0, ttft_ms: 0, prompt_ms: 0, generation_ms: 0, drafted_tokens: 0, accepted_tokens: 0 };
    this.#push({ index, finish: { reason: "error", message, usage } });
  }

  #push(e: ChoiceEvent) {
    // when the last choice ends, whether or not anyone still reads (a stream whose client left
    // stops reading): the deadline timer must not keep the request alive
    if ("finish" in e && --this.#unfinished === 0) this.onEnd?.();
    this.#queue.push(e);
    this.#wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ChoiceEvent> {
    while (this.#open > 0) {
      if (!this.#queue.length) {
        await new Promise<void>((r) => (this.#wake = r));
        this.#wake = null;
        continue;
      }
      const e = this.#queue.shift()!;
      if ("finish" in e) this.#open--;
      yield e;
    }
  }
}

export interface Piece {
  text: string;
  bytes: number[];
}

/** OpenAI chat logprobs: one entry per token. */
export interface ChatLogprob {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

/** OpenAI's legacy completions logprobs. */
export interface LegacyLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[] | null;
  text_offset: number[];
}

/** What one engine chunk adds to a choice. */
export interface ChoiceDelta {
  content: string;
  toolCalls: ToolCallDelta[];
  /** content and toolCalls in output order. */
  parts: StreamPart[];
  chat: ChatLogprob[];
  legacy: LegacyLogprobs | null;
}

export interface ChoiceOptions {
  /** Alternatives per token (0-20); null: no logprobs. */
  logprobs: number | null;
  /** Parse tool calls out of the output. */
  tools: { family: ToolFamily; names: string[] } | null;
  piece(id: number): Piece;
}

/** A finite number for JSON (-inf, for a token ruled out, as OpenAI's -9999). */
const finite = (x: number | null | undefined) => (x == null || !Number.isFinite(x) ? -9999 : x);

/** One choice's output so far. */
export class ChoiceState {
  text = "";
  finish: Finish | null = null;
  readonly chatLogprobs: ChatLogprob[] = [];
  readonly legacy: LegacyLogprobs;
  readonly #tools: ToolStream | null;
  #decoder = new TextDecoder();
  #offset = 0;

  constructor(readonly opts: ChoiceOptions) {
    this.#tools = opts.tools ? new ToolStream(opts.tools.family, opts.tools.names) : null;
    this.legacy = { tokens: [], token_logprobs: [], top_logprobs: opts.logprobs ? [] : null, text_offset: [] };
  }

  push(chunk: Chunk): ChoiceDelta {
    this.text += chunk.text;
    const d = this.#tools ? this.#tools.push(chunk.text) : { content: chunk.text, toolCalls: [], parts: chunk.text ? [{ content: chunk.text }] : [] };
    return { ...d, ...this.#logprobs(chunk) };
  }

  end(finish: Finish): ChoiceDelta {
    this.finish = finish;
    const d = this.#tools ? this.#tools.finish() : { content: "", toolCalls: [], parts: [] };
    return { ...d, chat: [], legacy: null };
  }

  get toolCalls() {
    return this.#tools?.calls ?? [];
  }

  /** The content without tool calls (all of the text when tools are not parsed). */
  get content(): string {
    return this.#tools ? this.#tools.content : this.text;
  }

  #logprobs(chunk: Chunk): { chat: ChatLogprob[]; legacy: LegacyLogprobs | null } {
    if (this.opts.logprobs === null || chunk.logprob === undefined || !chunk.tokens.length) return { chat: [], legacy: null };
    const id = chunk.tokens[0]!;
    const p = this.opts.piece(id);
    const top = (chunk.top_logprobs ?? []).filter((t) => t[1] !== null && Number.isFinite(t[1]));
    const entry: ChatLogprob = {
      token: p.text,
      logprob: finite(chunk.logprob),
      bytes: p.bytes,
      top_logprobs: top.map(([t, lp]) => {
        const q = this.opts.piece(t);
        return { token: q.text, logprob: lp, bytes: q.bytes };
      }),
    };
    this.chatLogprobs.push(entry);
    const offset = this.#offset;
    this.#offset += this.#decoder.decode(new Uint8Array(p.bytes), { stream: true }).length;
    const legacy: LegacyLogprobs = {
      tokens: [p.text],
      token_logprobs: [entry.logprob],
      top_logprobs: this.opts.logprobs ? [legacyTop(entry.top_logprobs)] : null,
      text_offset: [offset],
    };
    this.legacy.tokens.push(...legacy.tokens);
    this.legacy.token_logprobs.push(...legacy.token_logprobs);
    this.legacy.top_logprobs?.push(...legacy.top_logprobs!);
    this.legacy.text_offset.push(offset);
    return { chat: [entry], legacy };
  }
}

/** {token text: logprob}, most likely first; of tokens with the same text the likelier one. */
function legacyTop(top: { token: string; logprob: number }[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const t of top) if (!(t.token in out)) out[t.token] = t.logprob;
  return out;
}

/** Merges legacy logprobs of several chunks (for one streamed frame). */
export function mergeLegacy(parts: LegacyLogprobs[]): LegacyLogprobs | null {
  if (!parts.length) return null;
  return {
    tokens: parts.flatMap((p) => p.tokens),
    token_logprobs: parts.flatMap((p) => p.token_logprobs),
    top_logprobs: parts[0]!.top_logprobs ? parts.flatMap((p) => p.top_logprobs ?? []) : null,
    text_offset: parts.flatMap((p) => p.text_offset),
  };
}
