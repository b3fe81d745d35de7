// What every tool-call format's parser is built from: the content collector, call objects and
// lists of them in JSON, optional closing markers, and the loop that finds each format's markers
// in the output (collect). Each format (one file beside this one) says which markers open its
// calls and what follows them.
//
// The parser is prefix-consistent: for any prefix p of a text t, parse(p).content is a prefix of
// parse(t).content and each call of parse(p) has the name and a prefix of the arguments of the
// same call of parse(t). Streaming sends the differences between successive parses, so the
// reassembled stream equals the non-streamed answer by construction.
import { type Member, scanObject, skipWs } from "../json-scan";

export interface ParsedCall {
  name: string;
  /** The raw JSON text of the arguments (a prefix of it while incomplete). */
  arguments: string;
}
export interface ParsedOutput {
  content: string;
  calls: ParsedCall[];
}

/**
 * Content with whitespace trimmed at the start, at the end and around tool calls, decided from
 * the text so far: trailing whitespace waits until something else follows it.
 */
export class Collector {
  content = "";
  calls: ParsedCall[] = [];
  /** Where in `content` each call sits (content before it is content[0, offset)). */
  offsets: number[] = [];
  #ws = "";
  #boundary = true;

  text(s: string) {
    if (this.#boundary) {
      s = s.replace(/^\s+/, "");
      if (!s) return;
      this.#boundary = false;
    }
    const m = /\s*$/.exec(s)!;
    const body = s.slice(0, m.index);
    if (body) {
      this.content += this.#ws + body;
      this.#ws = "";
    }
    this.#ws += m[0];
  }

  call(c?: ParsedCall) {
    this.#ws = "";
    this.#boundary = true;
    if (c) {
      this.calls.push(c);
      this.offsets.push(this.content.length);
    }
  }

  get result(): ParsedOutput {
    return { content: this.content, calls: this.calls };
  }
}

/**
 * What follows a marker: calls (end: where the text goes on, null when they run to its end),
 * "undecided" (more text is needed; only before the end), or not a call (the marker is text).
 */
export type BodyResult = { kind: "calls"; calls: ParsedCall[]; end: number | null } | { kind: "undecided" } | { kind: "text" };

export interface CallKeys {
  name: string[];
  args: string[];
  /** Other keys a call object may have. */
  extra: string[];
}

/** One call object at `i` (after whitespace): committed once its name is a tool's and its arguments have begun. */
export function callObject(t: string, i: number, keys: CallKeys, names: Set<string>, final: boolean): BodyResult {
  i = skipWs(t, i);
  if (i >= t.length) return final ? { kind: "text" } : { kind: "undecided" };
  if (t[i] !== "{") return { kind: "text" };
  let name: string | null = null;
  let args: Member | null = null;
  let bad = false;
  const r = scanObject(t, i, () => {});
  for (const m of r.members ?? []) {
    if (keys.name.includes(m.key)) {
      if (m.valueEnd === null) break;
      try {
        const v = JSON.parse(t.slice(m.valueStart, m.valueEnd));
        if (typeof v !== "string" || !names.has(v)) bad = true;
        else name = v;
      } catch {
        bad = true;
      }
    } else if (keys.args.includes(m.key)) {
      args ??= m;
    } else if (!keys.extra.includes(m.key) && name === null) {
      bad = true;
    }
    if (bad) break;
  }
  const committed = !bad && name !== null && (args !== null || r.kind === "complete");
  if (!committed) {
    if (bad || r.kind === "invalid" || final) return { kind: "text" };
    return { kind: "undecided" };
  }
  const a = args as Member | null;
  const argText = a === null ? "{}" : t.slice(a.valueStart, a.valueEnd ?? t.length);
  const call = { name: name!, arguments: argText };
  if (r.kind === "complete") return { kind: "calls", calls: [call], end: r.end };
  // the call object is unfinished: it runs to the end, or ends where it went wrong
  if (r.kind === "invalid" && a?.valueEnd != null) return { kind: "calls", calls: [call], end: a.valueEnd };
  return { kind: "calls", calls: [call], end: null };
}

/** A list of call objects; `open` is true when the "[" is already consumed. */
export function callArray(t: string, i: number, keys: CallKeys, names: Set<string>, final: boolean, open = false): BodyResult {
  if (!open) {
    i = skipWs(t, i);
    if (i >= t.length) return final ? { kind: "text" } : { kind: "undecided" };
    if (t[i] !== "[") return { kind: "text" };
    i++;
  }
  const calls: ParsedCall[] = [];
  let j = i;
  for (;;) {
    j = skipWs(t, j);
    if (j >= t.length) {
      if (!calls.length) return final ? { kind: "text" } : { kind: "undecided" };
      return { kind: "calls", calls, end: final ? j : null };
    }
    if (t[j] === "]" && calls.length) return { kind: "calls", calls, end: j + 1 };
    const r = callObject(t, j, keys, names, final);
    if (r.kind !== "calls") {
      if (!calls.length) return r;
      if (r.kind === "undecided") return { kind: "calls", calls, end: null };
      return { kind: "calls", calls, end: j };
    }
    calls.push(...r.calls);
    if (r.end === null) return { kind: "calls", calls, end: null };
    j = skipWs(t, r.end);
    if (j >= t.length) return { kind: "calls", calls, end: final ? j : null };
    if (t[j] === ",") j++;
    else if (t[j] === "]") return { kind: "calls", calls, end: j + 1 };
    else return { kind: "calls", calls, end: j };
  }
}

/** Skips `s` at i (after whitespace) if present; null while the text ends inside a prefix of it. */
export function expect(t: string, i: number, s: string, final: boolean): number | null {
  const j = skipWs(t, i);
  if (t.startsWith(s, j)) return j + s.length;
  const rest = t.slice(j);
  if (!final && rest.length < s.length && s.startsWith(rest)) return null;
  return i;
}

/** After calls that ended at `end`, an optional closing marker. */
export function closing(r: BodyResult, t: string, close: string, final: boolean): BodyResult {
  if (r.kind !== "calls" || r.end === null || !close) return r;
  const e = expect(t, r.end, close, final);
  return { ...r, end: e };
}

export interface Opener {
  marker: string;
  /** Only where nothing but whitespace comes before it. */
  atStart?: boolean;
  /** Parses what follows; `at` is where the marker starts, `after` where it ends. */
  body(t: string, at: number, after: number, final: boolean): BodyResult;
}

/** Arguments that are the JSON value at i (Functionary: right after the function's name). */
export function rawArguments(t: string, i: number, name: string, final: boolean): BodyResult {
  const j = skipWs(t, i);
  if (j >= t.length) return final ? { kind: "calls", calls: [{ name, arguments: "{}" }], end: j } : { kind: "undecided" };
  if (t[j] !== "{") return { kind: "text" };
  const r = scanObject(t, j, () => {});
  if (r.kind === "complete") return { kind: "calls", calls: [{ name, arguments: t.slice(j, r.end) }], end: r.end };
  return { kind: "calls", calls: [{ name, arguments: t.slice(j) }], end: null };
}

/** Content and calls of `text`, calls found at the markers of `ops` (with where each sits). */
export function collect(ops: Opener[], text: string, final: boolean): Collector {
  const out = new Collector();
  let pos = 0;
  for (;;) {
    // the earliest marker from pos
    let best: { op: Opener; at: number } | null = null;
    for (const op of ops) {
      let at: number;
      if (op.atStart) {
        at = skipWs(text, pos);
        if (pos !== 0 || !text.startsWith(op.marker, at)) continue;
      } else {
        at = text.indexOf(op.marker, pos);
        if (at < 0) continue;
      }
      if (!best || at < best.at) best = { op, at };
    }
    if (!best) {
      let rest = text.slice(pos);
      if (!final) rest = rest.slice(0, rest.length - heldBack(rest, ops.filter((o) => !o.atStart).map((o) => o.marker)));
      out.text(rest);
      break;
    }
    out.text(text.slice(pos, best.at));
    const r = best.op.body(text, best.at, best.at + best.op.marker.length, final);
    if (r.kind === "undecided") break; // wait for more text
    if (r.kind === "text") {
      out.text(best.op.marker);
      pos = best.at + best.op.marker.length;
      continue;
    }
    if (!r.calls.length) out.call();
    for (const c of r.calls) out.call(c);
    if (r.end === null) break;
    pos = r.end;
  }
  return out;
}

/** How many characters at the end of `s` could begin a marker. */
export function heldBack(s: string, markers: string[]): number {
  let n = 0;
  for (const m of markers) {
    for (let k = Math.min(m.length - 1, s.length); k > n; k--) {
      if (s.endsWith(m.slice(0, k))) {
        n = k;
        break;
      }
    }
  }
  return n;
}
