// A small GBNF reader for tests only: it parses the grammars Velo writes (llama.cpp's syntax),
// tells whether a text is in the grammar's language, and draws random texts from it. The engine
// has its own (Swift) implementation; this one lets the converter be checked without a model.

type Item = { kind: "chars"; ranges: [number, number][]; negated: boolean } | { kind: "rule"; name: string };
type Alt = Item[];

export class Gbnf {
  readonly rules = new Map<string, Alt[]>();
  #anon = 0;

  constructor(readonly text: string) {
    new Parser(text, this).parse();
    for (const [name, alts] of this.rules) {
      for (const alt of alts) for (const it of alt) if (it.kind === "rule" && !this.rules.has(it.name)) throw new Error(`rule '${it.name}' (used in '${name}') is not defined`);
    }
    if (!this.rules.has("root")) throw new Error("no root rule");
  }

  /** @internal */
  anon(alts: Alt[]): Item {
    const name = `_anon${this.#anon++}`;
    this.rules.set(name, alts);
    return { kind: "rule", name };
  }

  // ---- membership (llama.cpp-style stacks of positions) ----

  /** Whether the whole of `text` is in the language. */
  matches(text: string): boolean {
    let stacks = this.#expand([{ alt: [{ kind: "rule", name: "root" }], pos: 0, next: null }]);
    for (const ch of text) {
      const c = ch.codePointAt(0)!;
      const next: Stack[] = [];
      for (const s of stacks) {
        if (!s) continue;
        const it = s.alt[s.pos]!;
        if (it.kind === "chars" && inClass(it, c)) next.push({ alt: s.alt, pos: s.pos + 1, next: s.next });
      }
      stacks = this.#expand(next);
      if (!stacks.length) return false;
    }
    return stacks.some((s) => s === null);
  }

  /** Whether `text` can be continued into the language (a prefix of some text of it). */
  isPrefix(text: string): boolean {
    let stacks = this.#expand([{ alt: [{ kind: "rule", name: "root" }], pos: 0, next: null }]);
    for (const ch of text) {
      const c = ch.codePointAt(0)!;
      const next: Stack[] = [];
      for (const s of stacks) {
        if (s && s.alt[s.pos]!.kind === "chars" && inClass(s.alt[s.pos] as Extract<Item, { kind: "chars" }>, c)) next.push({ alt: s.alt, pos: s.pos + 1, next: s.next });
      }
      stacks = this.#expand(next);
      if (!stacks.length) return false;
    }
    return true;
  }

  /** Stacks whose top is a character class (null: the text may end here). */
  #expand(todo: Stack[]): Stack[] {
    const out: Stack[] = [];
    const seen = new Set<string>();
    const work = [...todo];
    let steps = 0;
    while (work.length) {
      if (++steps > 200_000) throw new Error("grammar expansion runs away (left recursion?)");
      const s = work.pop()!;
      if (s === null) {
        if (!seen.has("END")) {
          seen.add("END");
          out.push(null);
        }
        continue;
      }
      if (s.pos >= s.alt.length) {
        work.push(s.next);
        continue;
      }
      const it = s.alt[s.pos]!;
      if (it.kind === "chars") {
        const k = key(s);
        if (!seen.has(k)) {
          seen.add(k);
          out.push(s);
        }
        continue;
      }
      const ret: Stack = { alt: s.alt, pos: s.pos + 1, next: s.next };
      for (const alt of this.rules.get(it.name)!) work.push({ alt, pos: 0, next: ret });
    }
    return out;
  }

  // ---- sampling ----

  /** A random text of the language; deep recursion is cut short along the cheapest way out. */
  sample(rand: () => number, maxDepth = 40): string {
    const cost = this.#costs();
    let out = "";
    let budget = 20_000;
    const walk = (name: string, depth: number) => {
      if (--budget < 0) throw new Error("sample too long");
      const alts = this.rules.get(name)!;
      let alt: Alt;
      if (depth > maxDepth) {
        alt = alts.reduce((a, b) => (altCost(a, cost) <= altCost(b, cost) ? a : b));
      } else {
        // an empty alternative (the end of a * or ?) is taken half the time
        const empty = alts.find((a) => a.length === 0);
        alt = empty && rand() < 0.5 ? empty : alts[Math.floor(rand() * alts.length)]!;
      }
      for (const it of alt) {
        if (it.kind === "rule") walk(it.name, depth + 1);
        else out += String.fromCodePoint(pick(it, rand));
      }
    };
    walk("root", 0);
    return out;
  }

  /** Fewest characters each rule can produce. */
  #costs(): Map<string, number> {
    const cost = new Map<string, number>();
    for (const n of this.rules.keys()) cost.set(n, Infinity);
    for (let changed = true; changed; ) {
      changed = false;
      for (const [n, alts] of this.rules) {
        const c = Math.min(...alts.map((a) => altCost(a, cost)));
        if (c < cost.get(n)!) {
          cost.set(n, c);
          changed = true;
        }
      }
    }
    return cost;
  }
}

type Stack = { alt: Alt; pos: number; next: Stack } | null;

const altIds = new WeakMap<Alt, number>();
let nextAltId = 0;
function key(s: Stack): string {
  let k = "";
  for (let x = s; x; x = x.next) {
    let id = altIds.get(x.alt);
    if (id === undefined) altIds.set(x.alt, (id = nextAltId++));
    k += `${id}:${x.pos},`;
  }
  return k;
}

function altCost(a: Alt, cost: Map<string, number>): number {
  let c = 0;
  for (const it of a) c += it.kind === "chars" ? 1 : cost.get(it.name)!;
  return c;
}

function inClass(it: Extract<Item, { kind: "chars" }>, c: number): boolean {
  const hit = it.ranges.some(([lo, hi]) => c >= lo && c <= hi);
  return it.negated ? !hit : hit;
}

// characters a negated class may yield: ASCII, some Latin, CJK, an emoji, escapes' letters
const POOL = [..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 !#$%&'()*+,-./:;<=>?@[]^_`{|}~\"\\\n\t", "é", "ß", "日", "本", "😀", "\u0001", "\u007f"].map((c) => c.codePointAt(0)!);

function pick(it: Extract<Item, { kind: "chars" }>, rand: () => number): number {
  if (!it.negated) {
    const total = it.ranges.reduce((n, [lo, hi]) => n + hi - lo + 1, 0);
    let k = Math.floor(rand() * total);
    for (const [lo, hi] of it.ranges) {
      if (k <= hi - lo) return lo + k;
      k -= hi - lo + 1;
    }
  }
  const ok = POOL.filter((c) => inClass(it, c));
  if (!ok.length) throw new Error("no sample character for a class");
  return ok[Math.floor(rand() * ok.length)]!;
}

class Parser {
  i = 0;
  constructor(
    readonly s: string,
    readonly g: Gbnf,
  ) {}

  err(what: string): Error {
    return new Error(`GBNF: ${what} at offset ${this.i}: ${JSON.stringify(this.s.slice(this.i, this.i + 30))}`);
  }

  space(newlines: boolean) {
    while (this.i < this.s.length) {
      const c = this.s[this.i]!;
      if (c === " " || c === "\t" || (newlines && (c === "\n" || c === "\r"))) this.i++;
      else if (c === "#") while (this.i < this.s.length && this.s[this.i] !== "\n") this.i++;
      else break;
    }
  }

  name(): string {
    const m = /^[A-Za-z0-9_-]+/.exec(this.s.slice(this.i));
    if (!m) throw this.err("expected a name");
    this.i += m[0].length;
    return m[0];
  }

  parse() {
    this.space(true);
    while (this.i < this.s.length) {
      const n = this.name();
      this.space(false);
      if (!this.s.startsWith("::=", this.i)) throw this.err("expected ::=");
      this.i += 3;
      this.space(true);
      if (this.g.rules.has(n)) throw this.err(`rule ${n} defined twice`);
      this.g.rules.set(n, this.alternatives(false));
      this.space(true);
    }
  }

  alternatives(nested: boolean): Alt[] {
    const alts = [this.sequence(nested)];
    for (;;) {
      const save = this.i;
      this.space(true);
      if (this.s[this.i] !== "|") {
        this.i = save;
        break;
      }
      this.i++;
      this.space(true);
      alts.push(this.sequence(nested));
    }
    return alts;
  }

  sequence(nested: boolean): Alt {
    const seq: Alt = [];
    while (this.i < this.s.length) {
      const c = this.s[this.i]!;
      let last: Item[];
      if (c === '"') {
        this.i++;
        last = [];
        while (this.s[this.i] !== '"') {
          if (this.i >= this.s.length || this.s[this.i] === "\n") throw this.err("unterminated literal");
          const cp = this.char();
          last.push({ kind: "chars", ranges: [[cp, cp]], negated: false });
        }
        this.i++;
        if (last.length > 1 && "*+?{".includes(this.s[this.i] ?? "")) last = [this.g.anon([last])];
        if (!last.length) {
          this.space(nested);
          continue;
        }
      } else if (c === "[") {
        last = [this.charClass()];
      } else if (c === ".") {
        this.i++;
        last = [{ kind: "chars", ranges: [[0, 0x10ffff]], negated: false }];
      } else if (c === "(") {
        this.i++;
        this.space(true);
        const alts = this.alternatives(true);
        this.space(true);
        if (this.s[this.i] !== ")") throw this.err("expected )");
        this.i++;
        last = [this.g.anon(alts)];
      } else if (/[A-Za-z0-9_-]/.test(c)) {
        last = [{ kind: "rule", name: this.name() }];
      } else {
        break;
      }
      this.space(nested);
      const r = this.repetition();
      if (r) {
        if (last.length !== 1) throw this.err("nothing to repeat");
        seq.push(...this.repeated(last[0]!, r[0], r[1]));
        this.space(nested);
      } else {
        seq.push(...last);
      }
    }
    return seq;
  }

  repetition(): [number, number] | null {
    const c = this.s[this.i];
    if (c === "*") return this.i++, [0, Infinity];
    if (c === "+") return this.i++, [1, Infinity];
    if (c === "?") return this.i++, [0, 1];
    if (c !== "{") return null;
    const m = /^\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}/.exec(this.s.slice(this.i));
    if (!m) throw this.err("bad repetition");
    this.i += m[0].length;
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : m[3] === "" ? Infinity : Number(m[3]);
    if (hi < lo) throw this.err("max below min");
    return [lo, hi];
  }

  repeated(x: Item, lo: number, hi: number): Item[] {
    const out: Item[] = Array(lo).fill(x);
    if (hi === Infinity) {
      const name = `_star${this.g.rules.size}`;
      this.g.rules.set(name, [[x, { kind: "rule", name }], []]);
      out.push({ kind: "rule", name });
    } else if (hi > lo) {
      let tail: Item | null = null;
      for (let k = 0; k < hi - lo; k++) tail = this.g.anon([tail ? [x, tail] : [x], []]);
      out.push(tail!);
    }
    return out;
  }

  char(): number {
    const c = this.s[this.i]!;
    if (c !== "\\") {
      const cp = this.s.codePointAt(this.i)!;
      this.i += cp > 0xffff ? 2 : 1;
      return cp;
    }
    const e = this.s[this.i + 1]!;
    this.i += 2;
    const simple: Record<string, number> = { n: 10, r: 13, t: 9, "0": 0, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45, "^": 94, "'": 39 };
    if (e in simple) return simple[e]!;
    const len = e === "x" ? 2 : e === "u" ? 4 : e === "U" ? 8 : 0;
    if (!len) throw this.err(`unknown escape \\${e}`);
    const h = this.s.slice(this.i, this.i + len);
    if (!/^[0-9a-fA-F]+$/.test(h) || h.length !== len) throw this.err("bad hex escape");
    this.i += len;
    return parseInt(h, 16);
  }

  charClass(): Item {
    this.i++;
    let negated = false;
    if (this.s[this.i] === "^") {
      negated = true;
      this.i++;
    }
    const ranges: [number, number][] = [];
    while (this.s[this.i] !== "]") {
      if (this.i >= this.s.length) throw this.err("unterminated class");
      const lo = this.char();
      if (this.s[this.i] === "-" && this.s[this.i + 1] !== "]") {
        this.i++;
        const hi = this.char();
        if (hi < lo) throw this.err("reversed range");
        ranges.push([lo, hi]);
      } else {
        ranges.push([lo, lo]);
      }
    }
    this.i++;
    return { kind: "chars", ranges, negated };
  }
}

/** A seeded generator (mulberry32) for reproducible samples. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
