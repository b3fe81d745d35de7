// JSON Schema `pattern` (an ECMAScript regular expression, unanchored unless it says ^ or $)
// → a GBNF expression for the content of a JSON string whose value matches it. Supported:
// literals and escapes, classes (ranges, negation, \d \w \s and their negations), `.`, groups
// (capturing, non-capturing, named), alternation, * + ? {n} {n,} {n,m} (lazy forms too), and ^ / $
// at the start / end of a top-level alternative. Anything else (lookaround, backreferences,
// \b, \p{...}, anchors elsewhere) is an error, never ignored.
import { charClass, literal } from "./gbnf";

export class RegexError extends Error {}

type Ranges = [number, number][];
type Node =
  | { kind: "set"; ranges: Ranges }
  | { kind: "seq"; items: Node[] }
  | { kind: "alt"; alts: Node[] }
  | { kind: "repeat"; node: Node; min: number; max: number }
  | { kind: "start" }
  | { kind: "end" };

const MAX_CP = 0x10ffff;

function normalize(r: Ranges): Ranges {
  const s = [...r].sort((a, b) => a[0] - b[0]);
  const out: Ranges = [];
  for (const [lo, hi] of s) {
    const last = out.at(-1);
    if (last && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else out.push([lo, hi]);
  }
  return out;
}

function complement(r: Ranges): Ranges {
  const out: Ranges = [];
  let next = 0;
  for (const [lo, hi] of normalize(r)) {
    if (lo > next) out.push([next, lo - 1]);
    next = hi + 1;
  }
  if (next <= MAX_CP) out.push([next, MAX_CP]);
  return out;
}

function intersect(a: Ranges, b: Ranges): Ranges {
  const out: Ranges = [];
  for (const [lo1, hi1] of normalize(a)) {
    for (const [lo2, hi2] of normalize(b)) {
      const lo = Math.max(lo1, lo2), hi = Math.min(hi1, hi2);
      if (lo <= hi) out.push([lo, hi]);
    }
  }
  return normalize(out);
}

const DIGIT: Ranges = [[48, 57]];
const WORD: Ranges = [[48, 57], [65, 90], [95, 95], [97, 122]];
const SPACE: Ranges = normalize([[9, 13], [32, 32], [0xa0, 0xa0], [0x1680, 0x1680], [0x2000, 0x200a], [0x2028, 0x2029], [0x202f, 0x202f], [0x205f, 0x205f], [0x3000, 0x3000], [0xfeff, 0xfeff]]);
const LINE_TERMINATORS: Ranges = [[10, 10], [13, 13], [0x2028, 0x2029]];
/** What a JSON string may hold raw: not '"', '\\', controls, nor UTF-16 surrogates (not UTF-8). */
const RAW: Ranges = complement([[0, 0x1f], [34, 34], [92, 92], [0xd800, 0xdfff]]);

class Parser {
  i = 0;
  groups = 0;
  constructor(readonly s: string) {}

  fail(what: string): never {
    throw new RegexError(`${what} at offset ${this.i} of the pattern`);
  }

  get cur(): string | undefined {
    return this.s[this.i];
  }

  parse(): Node {
    const n = this.alternation(0);
    if (this.i < this.s.length) this.fail(`unexpected '${this.cur}'`);
    return n;
  }

  alternation(depth: number): Node {
    if (depth > 100) this.fail("groups nested too deeply");
    const alts = [this.sequence(depth)];
    while (this.cur === "|") {
      this.i++;
      alts.push(this.sequence(depth));
    }
    return alts.length === 1 ? alts[0]! : { kind: "alt", alts };
  }

  sequence(depth: number): Node {
    const items: Node[] = [];
    while (this.i < this.s.length && this.cur !== "|" && this.cur !== ")") {
      const atom = this.atom(depth);
      items.push(this.quantified(atom));
    }
    return { kind: "seq", items };
  }

  quantified(atom: Node): Node {
    const c = this.cur;
    let min: number, max: number;
    if (c === "*") [min, max] = [0, Infinity];
    else if (c === "+") [min, max] = [1, Infinity];
    else if (c === "?") [min, max] = [0, 1];
    else if (c === "{") {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(this.s.slice(this.i));
      if (!m) this.fail("a lone '{' (escape it as \\{)");
      min = Number(m[1]);
      max = m[2] === undefined ? min : m[3] === "" ? Infinity : Number(m[3]);
      if (max < min) this.fail("a repetition {n,m} with m below n");
      this.i += m[0].length - 1;
    } else return atom;
    this.i++;
    if (this.cur === "?") this.i++; // lazy: the same language
    if (atom.kind === "start" || atom.kind === "end") this.fail("a quantified anchor");
    if ("*+?{".includes(this.cur ?? "")) this.fail("a quantifier after a quantifier");
    return this.quantified({ kind: "repeat", node: atom, min, max });
  }

  atom(depth: number): Node {
    const c = this.cur!;
    if (c === "(") {
      this.i++;
      if (this.s.startsWith("?:", this.i)) this.i += 2;
      else if (/^\?<[A-Za-z_$][\w$]*>/.test(this.s.slice(this.i))) this.i = this.s.indexOf(">", this.i) + 1;
      else if (this.cur === "?") this.fail("lookahead, lookbehind and other (?...) groups are not supported");
      else this.groups++;
      const n = this.alternation(depth + 1);
      if (this.cur !== ")") this.fail("a missing ')'");
      this.i++;
      return n;
    }
    if (c === "[") return { kind: "set", ranges: this.charClass() };
    if (c === ".") {
      this.i++;
      return { kind: "set", ranges: complement(LINE_TERMINATORS) };
    }
    if (c === "^") {
      this.i++;
      return { kind: "start" };
    }
    if (c === "$") {
      this.i++;
      return { kind: "end" };
    }
    if ("*+?{".includes(c)) this.fail(`nothing to repeat before '${c}'`);
    if (c === ")" || c === "]" || c === "}") this.fail(`a lone '${c}'`);
    if (c === "\\") return { kind: "set", ranges: this.escape(false) };
    const cp = this.s.codePointAt(this.i)!;
    this.i += cp > 0xffff ? 2 : 1;
    return { kind: "set", ranges: [[cp, cp]] };
  }

  /** After a backslash (at the cursor): the characters it stands for. */
  escape(inClass: boolean): Ranges {
    this.i++;
    const e = this.cur;
    if (e === undefined) this.fail("a trailing backslash");
    this.i++;
    switch (e) {
      case "d": return DIGIT;
      case "D": return complement(DIGIT);
      case "w": return WORD;
      case "W": return complement(WORD);
      case "s": return SPACE;
      case "S": return complement(SPACE);
      case "t": return [[9, 9]];
      case "n": return [[10, 10]];
      case "r": return [[13, 13]];
      case "f": return [[12, 12]];
      case "v": return [[11, 11]];
      case "0":
        if (/[0-9]/.test(this.cur ?? "")) this.fail("octal escapes are not supported");
        return [[0, 0]];
      case "b":
        if (inClass) return [[8, 8]];
        return this.fail("word boundaries (\\b) are not supported");
      case "B": return this.fail("word boundaries (\\B) are not supported");
      case "x": {
        const h = /^[0-9a-fA-F]{2}/.exec(this.s.slice(this.i));
        if (!h) this.fail("\\x needs two hexadecimal digits");
        this.i += 2;
        const cp = parseInt(h[0], 16);
        return [[cp, cp]];
      }
      case "u": {
        let m = /^\{([0-9a-fA-F]{1,6})\}/.exec(this.s.slice(this.i));
        if (!m) m = /^([0-9a-fA-F]{4})/.exec(this.s.slice(this.i));
        if (!m) this.fail("\\u needs four hexadecimal digits or {...}");
        this.i += m[0].length;
        const cp = parseInt(m[1]!, 16);
        if (cp > MAX_CP) this.fail("a code point beyond U+10FFFF");
        return [[cp, cp]];
      }
      case "c": return this.fail("control escapes (\\c) are not supported");
      case "p": case "P": return this.fail("Unicode property escapes (\\p{...}) are not supported");
      case "k": return this.fail("backreferences are not supported");
      default:
        if (/[1-9]/.test(e)) this.fail("backreferences are not supported");
        if (/[A-Za-z]/.test(e)) this.fail(`unknown escape \\${e}`);
        this.i--;
        {
          const cp = this.s.codePointAt(this.i)!;
          this.i += cp > 0xffff ? 2 : 1;
          return [[cp, cp]];
        }
    }
  }

  charClass(): Ranges {
    this.i++; // [
    let negated = false;
    if (this.cur === "^") {
      negated = true;
      this.i++;
    }
    const out: Ranges = [];
    const single = (): Ranges => {
      if (this.cur === "\\") return this.escape(true);
      const cp = this.s.codePointAt(this.i)!;
      this.i += cp > 0xffff ? 2 : 1;
      return [[cp, cp]];
    };
    while (this.cur !== "]") {
      if (this.i >= this.s.length) this.fail("a missing ']'");
      const lo = single();
      if (this.cur === "-" && this.s[this.i + 1] !== "]" && this.i + 1 < this.s.length) {
        this.i++;
        const hi = single();
        if (lo.length !== 1 || hi.length !== 1 || lo[0]![0] !== lo[0]![1] || hi[0]![0] !== hi[0]![1]) this.fail("a range between classes");
        if (hi[0]![0] < lo[0]![0]) this.fail("a range out of order");
        out.push([lo[0]![0], hi[0]![0]]);
      } else {
        out.push(...lo);
      }
    }
    this.i++;
    const r = normalize(out);
    return negated ? complement(r) : r;
  }
}

const ESCAPES: Record<number, string> = { 8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r", 34: '\\"', 92: "\\\\" };

/** GBNF for one character of `ranges`, written as JSON string content. */
function setToGbnf(ranges: Ranges): string {
  const r = normalize(ranges.filter(([lo, hi]) => lo <= hi));
  const raw = intersect(r, RAW);
  const alts: string[] = [];
  if (raw.length) {
    // whichever of [..] and [^..] is shorter
    const neg = complement(raw);
    alts.push(neg.length < raw.length ? charClass(neg, true) : charClass(raw));
  }
  // characters JSON must escape
  for (const [lo, hi] of intersect(r, [[0, 0x1f], [34, 34], [92, 92]])) {
    for (let c = lo; c <= hi; c++) alts.push(literal(ESCAPES[c] ?? `\\u${c.toString(16).padStart(4, "0")}`));
  }
  if (!alts.length) throw new RegexError("a character class that matches nothing a JSON string can hold");
  return alts.length === 1 ? alts[0]! : `( ${alts.join(" | ")} )`;
}

export interface RegexLimits {
  maxRepeat: number;
  countRepeat(n: number): void;
}

function toGbnf(n: Node, lim: RegexLimits): string {
  switch (n.kind) {
    case "set":
      return setToGbnf(n.ranges);
    case "seq": {
      const parts = n.items.map((x) => toGbnf(x, lim)).filter(Boolean);
      return parts.length === 0 ? "" : parts.length === 1 ? parts[0]! : `( ${parts.join(" ")} )`;
    }
    case "alt": {
      const parts = n.alts.map((x) => toGbnf(x, lim));
      // an empty alternative: the group is optional
      const nonEmpty = parts.filter(Boolean);
      if (!nonEmpty.length) return "";
      const g = `( ${nonEmpty.join(" | ")} )`;
      return nonEmpty.length < parts.length ? `${g}?` : g;
    }
    case "repeat": {
      const inner = toGbnf(n.node, lim);
      if (!inner || n.max === 0) return "";
      for (const v of [n.min, n.max]) if (Number.isFinite(v) && v > lim.maxRepeat) throw new RegexError(`a repetition count of ${v} is above the limit of ${lim.maxRepeat}`);
      lim.countRepeat(Number.isFinite(n.max) ? n.max : n.min);
      const x = /^[[("]/.test(inner) && balancedSingle(inner) ? inner : `( ${inner} )`;
      if (n.min === 0 && n.max === Infinity) return `${x}*`;
      if (n.min === 1 && n.max === Infinity) return `${x}+`;
      if (n.min === 0 && n.max === 1) return `${x}?`;
      if (n.max === Infinity) return `${x}{${n.min},}`;
      if (n.min === n.max) return n.min === 1 ? x : `${x}{${n.min}}`;
      return `${x}{${n.min},${n.max}}`;
    }
    case "start":
    case "end":
      throw new RegexError("^ and $ are only supported at the start and end of the pattern");
  }
}

/** Whether a GBNF expression is one item (a class, a group or a literal) that can take a quantifier. */
function balancedSingle(e: string): boolean {
  if (e.startsWith("(")) {
    let depth = 0;
    let inLit = false;
    let inClass = false;
    for (let i = 0; i < e.length; i++) {
      const c = e[i]!;
      if (c === "\\") {
        i++;
        continue;
      }
      if (inLit) {
        if (c === '"') inLit = false;
        continue;
      }
      if (inClass) {
        if (c === "]") inClass = false;
        continue;
      }
      if (c === '"') inLit = true;
      else if (c === "[") inClass = true;
      else if (c === "(") depth++;
      else if (c === ")" && --depth === 0 && i !== e.length - 1) return false;
    }
    return true;
  }
  if (e.startsWith("[")) return /^\[(\\.|[^\]\\])*\]$/.test(e);
  if (e.startsWith('"')) return /^"(\\.|[^"\\])*"$/.test(e);
  return false;
}

/**
 * GBNF for the content (between the quotes) of JSON strings whose value `pattern` matches;
 * `anyChar` is a rule for any JSON string character (for the unanchored ends).
 */
export function patternToGbnf(pattern: string, anyChar: string, lim: RegexLimits): string {
  const ast = new Parser(pattern).parse();
  const alts = ast.kind === "alt" ? ast.alts : [ast];
  const out = alts.map((a) => {
    const items = a.kind === "seq" ? [...a.items] : [a];
    const anchoredStart = items[0]?.kind === "start";
    if (anchoredStart) items.shift();
    const anchoredEnd = items.at(-1)?.kind === "end";
    if (anchoredEnd) items.pop();
    const body = toGbnf({ kind: "seq", items }, lim);
    return [anchoredStart ? "" : `${anyChar}*`, body, anchoredEnd ? "" : `${anyChar}*`].filter(Boolean).join(" ");
  });
  const nonEmpty = out.map((x) => x || '""');
  return nonEmpty.length === 1 ? nonEmpty[0]! : `( ${nonEmpty.join(" | ")} )`;
}
