// Scanning JSON that may still be arriving: where a value ends, whether it can still become
// valid, and the members of an object with their raw value spans. Tool-call parsers use it to
// stream a call's arguments while the model writes them.

/** complete: the value ends at `end`; partial: valid so far, the text ran out; invalid. */
export type Scan = { kind: "complete"; end: number } | { kind: "partial" } | { kind: "invalid" };

const WS = new Set([" ", "\t", "\n", "\r"]);

export function skipWs(t: string, i: number): number {
  while (i < t.length && WS.has(t[i]!)) i++;
  return i;
}

const MAX_DEPTH = 512;

/** Scans the JSON value starting at `i` (no leading whitespace skipped). */
export function scanValue(t: string, i: number, depth = 0): Scan {
  if (depth > MAX_DEPTH) return { kind: "invalid" };
  if (i >= t.length) return { kind: "partial" };
  const c = t[i]!;
  if (c === '"') return scanString(t, i);
  if (c === "{") {
    const r = scanObject(t, i, () => {}, depth);
    return r.kind === "complete" ? { kind: "complete", end: r.end } : r;
  }
  if (c === "[") {
    let j = skipWs(t, i + 1);
    if (j >= t.length) return { kind: "partial" };
    if (t[j] === "]") return { kind: "complete", end: j + 1 };
    for (;;) {
      const v = scanValue(t, j, depth + 1);
      if (v.kind !== "complete") return v;
      j = skipWs(t, v.end);
      if (j >= t.length) return { kind: "partial" };
      if (t[j] === "]") return { kind: "complete", end: j + 1 };
      if (t[j] !== ",") return { kind: "invalid" };
      j = skipWs(t, j + 1);
    }
  }
  if (c === "-" || (c >= "0" && c <= "9")) return scanNumber(t, i);
  for (const lit of ["true", "false", "null"]) {
    if (c === lit[0]) {
      const have = t.slice(i, i + lit.length);
      if (!lit.startsWith(have)) return { kind: "invalid" };
      if (have.length < lit.length) return { kind: "partial" };
      return { kind: "complete", end: i + lit.length };
    }
  }
  return { kind: "invalid" };
}

export function scanString(t: string, i: number): Scan {
  if (t[i] !== '"') return { kind: "invalid" };
  let j = i + 1;
  while (j < t.length) {
    const c = t[j]!;
    if (c === '"') return { kind: "complete", end: j + 1 };
    if (c < " ") return { kind: "invalid" };
    if (c === "\\") {
      if (j + 1 >= t.length) return { kind: "partial" };
      const e = t[j + 1]!;
      if (e === "u") {
        const h = t.slice(j + 2, j + 6);
        if (!/^[0-9a-fA-F]*$/.test(h)) return { kind: "invalid" };
        if (h.length < 4) return { kind: "partial" };
        j += 6;
        continue;
      }
      if (!'"\\/bfnrt'.includes(e)) return { kind: "invalid" };
      j += 2;
      continue;
    }
    j++;
  }
  return { kind: "partial" };
}

function scanNumber(t: string, i: number): Scan {
  const m = /^-?(0|[1-9][0-9]*)?(\.[0-9]*)?([eE][+-]?[0-9]*)?/.exec(t.slice(i, i + 400))!;
  const s = m[0];
  const end = i + s.length;
  if (end >= t.length) return /^-?(0|[1-9][0-9]*)?(\.[0-9]*)?([eE][+-]?[0-9]*)?$/.test(s) ? { kind: "partial" } : { kind: "invalid" };
  if (!/^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$/.test(s)) return { kind: "invalid" };
  return { kind: "complete", end };
}

/** One member of an object being scanned; valueEnd null while the value is incomplete. */
export interface Member {
  key: string;
  valueStart: number;
  valueEnd: number | null;
}

/**
 * Scans an object at `i`, calling `onMember` for each member whose key is complete and whose
 * value has started (again as the value completes). Stops at the first problem.
 */
export function scanObject(t: string, i: number, onMember: (m: Member) => void, depth = 0): Scan & { members?: Member[] } {
  if (t[i] !== "{") return { kind: "invalid" };
  const members: Member[] = [];
  let j = skipWs(t, i + 1);
  if (j >= t.length) return { kind: "partial", members };
  if (t[j] === "}") return { kind: "complete", end: j + 1, members };
  for (;;) {
    const k = scanString(t, j);
    if (k.kind !== "complete") return { ...k, members };
    let key: string;
    try {
      key = JSON.parse(t.slice(j, k.end)) as string;
    } catch {
      return { kind: "invalid", members };
    }
    j = skipWs(t, k.end);
    if (j >= t.length) return { kind: "partial", members };
    if (t[j] !== ":") return { kind: "invalid", members };
    j = skipWs(t, j + 1);
    if (j >= t.length) return { kind: "partial", members };
    const m: Member = { key, valueStart: j, valueEnd: null };
    members.push(m);
    const v = scanValue(t, j, depth + 1);
    if (v.kind === "invalid") return { kind: "invalid", members };
    if (v.kind === "partial") {
      onMember(m);
      return { kind: "partial", members };
    }
    m.valueEnd = v.end;
    onMember(m);
    j = skipWs(t, v.end);
    if (j >= t.length) return { kind: "partial", members };
    if (t[j] === "}") return { kind: "complete", end: j + 1, members };
    if (t[j] !== ",") return { kind: "invalid", members };
    j = skipWs(t, j + 1);
    if (j >= t.length) return { kind: "partial", members };
  }
}
