// Writing GBNF (llama.cpp's grammar format, which the engine compiles): quoted literals,
// character classes and a rule set with unique names. Only syntax both llama.cpp and Velo's
// parser read: names of letters, digits and '-', one rule per line, \xHH escapes.

/** Thrown when a grammar would exceed the limits below. */
export class GrammarLimitError extends Error {}

function hex2(c: number): string {
  return "\\x" + c.toString(16).toUpperCase().padStart(2, "0");
}

/** A GBNF string literal matching exactly `s`. */
export function literal(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (c < 0x20 || c === 0x7f) out += hex2(c);
    else out += ch;
  }
  return out + '"';
}

/** One character inside [...]: ASCII punctuation that classes treat specially, and controls, as \xHH. */
export function classChar(ch: string): string {
  const c = ch.codePointAt(0)!;
  if (c < 0x20 || c === 0x7f || "\\]^-[\"".includes(ch)) return hex2(c);
  return ch;
}

/** A class of the given characters and [lo, hi] code-point ranges; `negated` for [^...]. */
export function charClass(items: (string | [number, number])[], negated = false): string {
  let body = "";
  for (const it of items) {
    if (typeof it === "string") {
      for (const ch of it) body += classChar(ch);
    } else {
      const [lo, hi] = it;
      body += lo === hi ? classChar(String.fromCodePoint(lo)) : `${classChar(String.fromCodePoint(lo))}-${classChar(String.fromCodePoint(hi))}`;
    }
  }
  return `[${negated ? "^" : ""}${body}]`;
}

/** A rule name from free text: letters, digits and single '-'. */
export function ruleName(hint: string): string {
  const s = hint.replace(/[^A-Za-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 48).replace(/-+$/, "");
  return s || "r";
}

export interface GrammarLimits {
  /** Most rules in one grammar. */
  maxRules: number;
  /** Most characters of GBNF text. */
  maxChars: number;
}

export const DEFAULT_LIMITS: GrammarLimits = { maxRules: 20_000, maxChars: 2_000_000 };

/** Rules by name, written out root first. Equal bodies added under one hint share a rule. */
export class RuleSet {
  readonly rules = new Map<string, string>();
  #byBody = new Map<string, string>();
  #chars = 0;

  constructor(readonly limits: GrammarLimits = DEFAULT_LIMITS) {
    this.rules.set("root", ""); // written by toString
  }

  /** Reserves a fresh name for a rule defined later with `define` (recursive rules). */
  reserve(hint: string): string {
    const base = ruleName(hint);
    let name = base;
    for (let i = 2; this.rules.has(name); i++) name = `${base}-${i}`;
    if (this.rules.size >= this.limits.maxRules) throw new GrammarLimitError(`the grammar would have more than ${this.limits.maxRules} rules`);
    this.rules.set(name, "");
    return name;
  }

  define(name: string, body: string): string {
    this.#chars += name.length + body.length + 6;
    if (this.#chars > this.limits.maxChars) throw new GrammarLimitError(`the grammar would be larger than ${this.limits.maxChars} characters`);
    this.rules.set(name, body);
    return name;
  }

  /** A rule with this body (an existing one with the same hint and body if any). */
  add(hint: string, body: string): string {
    const key = `${ruleName(hint)}\u0000${body}`;
    const known = this.#byBody.get(key);
    if (known) return known;
    const name = this.define(this.reserve(hint), body);
    this.#byBody.set(key, name);
    return name;
  }

  /** GBNF text whose rule `root` is `rootBody`. */
  toString(rootBody: string): string {
    const lines = [`root ::= ${rootBody}`];
    for (const [name, body] of this.rules) if (name !== "root") lines.push(`${name} ::= ${body}`);
    return lines.join("\n") + "\n";
  }
}
