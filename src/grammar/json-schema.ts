// JSON Schema → GBNF, for constrained decoding (response_format json_schema, tool arguments).
// `pattern` goes through ./regex.ts.
//
// The grammar's language is a subset of the JSON documents the schema accepts: every output it
// lets through validates. It fails closed: a keyword that would change which documents are valid
// and that is not implemented here (`not`, `if`/`then`, `uniqueItems`, …) is an error naming it,
// never ignored. Annotations (title, description, examples, …) and keywords JSON Schema does not
// define are ignored, as the specification says. Whitespace between tokens is bounded (one space,
// or a newline and at most 20 spaces or tabs), so a model cannot stall in it; numbers have at
// most 16 digits before and after the point.
import { charClass, GrammarLimitError, type GrammarLimits, literal, RuleSet } from "./gbnf";
import { patternToGbnf, RegexError } from "./regex";

export type JsonSchema = boolean | { [key: string]: unknown };

/** A schema that cannot be turned into a grammar; `path` points into the schema (#/properties/x). */
export class SchemaError extends Error {
  constructor(
    readonly reason: string,
    readonly path: string,
  ) {
    super(path && path !== "#" ? `${reason} (at ${path.length > 120 ? `…${path.slice(-120)}` : path})` : reason);
    this.name = "SchemaError";
  }
}

export interface SchemaLimits extends GrammarLimits {
  /** Largest minItems/maxItems/minLength/maxLength (each becomes that many grammar items). */
  maxRepeat: number;
  /** Sum of all those counts over the schema. */
  maxTotalRepeat: number;
  /** Deepest nesting of subschemas. */
  maxDepth: number;
  /** Most subschemas visited (references count each time they are expanded). */
  maxNodes: number;
  /** Most values of one enum. */
  maxEnum: number;
  /** Wall-clock budget of one conversion. */
  timeoutMs: number;
}

export const SCHEMA_LIMITS: SchemaLimits = {
  maxRules: 20_000,
  maxChars: 2_000_000,
  maxRepeat: 2048,
  maxTotalRepeat: 50_000,
  maxDepth: 64,
  maxNodes: 20_000,
  maxEnum: 2000,
  timeoutMs: 2000,
};

/** Keywords that never change which documents are valid. */
const ANNOTATIONS = new Set([
  "title", "description", "$comment", "examples", "default", "deprecated", "readOnly", "writeOnly", "$schema", "$defs", "definitions",
  "contentMediaType", "contentEncoding", "contentSchema", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "$id",
]);

/** Keywords of the specification this converter does not implement (an error when present). */
const UNSUPPORTED: Record<string, string> = {
  not: "'not' is not supported",
  if: "'if'/'then'/'else' are not supported",
  then: "'if'/'then'/'else' are not supported",
  else: "'if'/'then'/'else' are not supported",
  patternProperties: "'patternProperties' is not supported",
  propertyNames: "'propertyNames' is not supported",
  dependentRequired: "'dependentRequired' is not supported",
  dependentSchemas: "'dependentSchemas' is not supported",
  dependencies: "'dependencies' is not supported",
  contains: "'contains' is not supported",
  minContains: "'minContains' is not supported",
  maxContains: "'maxContains' is not supported",
  unevaluatedItems: "'unevaluatedItems' is not supported",
  $dynamicRef: "'$dynamicRef' is not supported",
  $recursiveRef: "'$recursiveRef' is not supported",
};

const OBJECT_KEYS = ["properties", "required", "additionalProperties", "minProperties", "maxProperties", "unevaluatedProperties"];
const ARRAY_KEYS = ["items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"];
const STRING_KEYS = ["minLength", "maxLength", "format", "pattern"];
const NUMBER_KEYS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"];
const TYPES = ["null", "boolean", "object", "array", "string", "number", "integer"] as const;
type TypeName = (typeof TYPES)[number];

/** String formats with a grammar, as ajv-formats checks them ("full" mode). */
export const SUPPORTED_FORMATS = ["date", "time", "date-time", "uuid", "email", "ipv4"];

/** Most digits of an unbounded integer (values stay exact doubles). */
const MAX_INT_DIGITS = 15;

type Obj = { [key: string]: unknown };
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

interface Doc {
  root: unknown;
  prefix: string;
  /** Rule names of $ref targets (JSON pointers), defined or being defined. */
  refs: Map<string, string>;
}

interface Ctx {
  doc: Doc;
  /** References entered since the last character the grammar must consume (cycle check). */
  pending: ReadonlySet<string>;
  depth: number;
}

/** JSON canonical form (sorted keys), to compare enum values. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (isObj(v)) return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`;
  return JSON.stringify(v);
}

function jsonType(v: unknown): TypeName {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v as TypeName;
}

function escapePointer(s: string): string {
  return s.replace(/~/g, "~0").replace(/\//g, "~1");
}

/**
 * Converts JSON Schemas into rules of one grammar. Several schemas (one per tool) can share a
 * converter: each gets its own rule prefix and its own $ref namespace.
 */
export class SchemaConverter {
  readonly rules: RuleSet;
  readonly limits: SchemaLimits;
  #nodes = 0;
  #repeat = 0;
  #deadline = 0;
  #prim = new Map<string, string>();

  constructor(limits: Partial<SchemaLimits> = {}) {
    this.limits = { ...SCHEMA_LIMITS, ...limits };
    this.rules = new RuleSet(this.limits);
  }

  /** The name of a rule matching documents valid under `schema` (no surrounding whitespace). */
  convert(schema: unknown, prefix = "root"): string {
    this.#deadline = performance.now() + this.limits.timeoutMs;
    const doc: Doc = { root: schema, prefix, refs: new Map() };
    try {
      return this.#asRule(this.#visit(schema, "#", prefix, { doc, pending: new Set(), depth: 0 }), prefix);
    } catch (e) {
      if (e instanceof GrammarLimitError) throw new SchemaError(`the schema is too large for a grammar: ${e.message}`, "#");
      if (e instanceof RangeError) throw new SchemaError("the schema nests too deeply", "#");
      throw e;
    }
  }

  /** A rule matching any JSON object (response_format json_object). */
  anyObject(): string {
    this.#anyValue();
    return this.#prim.get("object")!;
  }

  // ---- primitives ----

  #space(): string {
    return this.rules.add("space", `( " " | "\\n" [ \\t]{0,20} )?`);
  }

  #sep(): string {
    const s = this.#space();
    return `${s} "," ${s}`;
  }

  #char(): string {
    // one JSON string character: unescaped (not ", \ or a control), or an escape; \u escapes
    // of UTF-16 surrogates are left out so that every char is one code point (minLength)
    return this.rules.add("char", `[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] | "u" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )`);
  }

  #string(): string {
    return this.rules.add("string", `"\\"" ${this.#char()}* "\\""`);
  }

  #integral(): string {
    return this.rules.add("integral-part", `"0" | [1-9] [0-9]{0,${MAX_INT_DIGITS}}`);
  }

  #number(): string {
    return this.rules.add("number", `"-"? ${this.#integral()} ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?`);
  }

  #integer(): string {
    return this.rules.add("integer", `"-"? ${this.#integral()}`);
  }

  #boolean(): string {
    return this.rules.add("boolean", `"true" | "false"`);
  }

  /** value, object and array of any JSON (recursive). */
  #anyValue(): string {
    const known = this.#prim.get("value");
    if (known) return known;
    const value = this.rules.reserve("value");
    const object = this.rules.reserve("object");
    const array = this.rules.reserve("array");
    this.#prim.set("value", value).set("object", object).set("array", array);
    const sp = this.#space(), sep = this.#sep(), str = this.#string();
    const member = this.rules.add("member", `${str} ${sp} ":" ${sp} ${value}`);
    this.rules.define(object, `"{" ${sp} ( ${member} ( ${sep} ${member} )* ${sp} )? "}"`);
    this.rules.define(array, `"[" ${sp} ( ${value} ( ${sep} ${value} )* ${sp} )? "]"`);
    this.rules.define(value, `${object} | ${array} | ${str} | ${this.#number()} | ${this.#boolean()} | "null"`);
    return value;
  }

  // ---- the walk ----

  #asRule(expr: string, hint: string): string {
    return /^[A-Za-z0-9-]+$/.test(expr) ? expr : this.rules.add(hint, expr);
  }

  #check(path: string, ctx: Ctx) {
    if (++this.#nodes > this.limits.maxNodes) throw new SchemaError(`the schema has more than ${this.limits.maxNodes} subschemas (counting each use of a reference)`, path);
    if (ctx.depth > this.limits.maxDepth) throw new SchemaError(`the schema nests deeper than ${this.limits.maxDepth} levels`, path);
    if ((this.#nodes & 63) === 0 && performance.now() > this.#deadline) throw new SchemaError(`converting the schema took longer than ${this.limits.timeoutMs} ms`, path);
  }

  #countRepeat(n: number, path: string) {
    this.#repeat += n;
    if (this.#repeat > this.limits.maxTotalRepeat) throw new SchemaError(`the schema's length and item counts add up to more than ${this.limits.maxTotalRepeat}`, path);
  }

  /** A GBNF expression (one sequence item) for `schema`. */
  #visit(schema: unknown, path: string, hint: string, ctx: Ctx): string {
    this.#check(path, ctx);
    if (schema === true) return this.#anyValue();
    if (schema === false) throw new SchemaError("the schema is false: no value is allowed", path);
    if (!isObj(schema)) throw new SchemaError("a schema must be an object or a boolean", path);
    const s = schema;
    const inner: Ctx = { ...ctx, depth: ctx.depth + 1 };

    for (const key of Object.keys(s)) {
      if (key in UNSUPPORTED && !(key === "if" && !("then" in s) && !("else" in s))) throw new SchemaError(UNSUPPORTED[key]!, `${path}/${escapePointer(key)}`);
    }
    if ("$id" in s && path !== "#") throw new SchemaError("'$id' inside a schema is not supported (references resolve against the document root)", path);

    if ("$ref" in s) {
      const rest = this.#languageKeys(s, ["$ref"]);
      if (rest.length === 0) return this.#ref(s.$ref, path, ctx);
      // $ref beside other keywords: both apply (2019-09 and later)
      const others = Object.fromEntries(Object.entries(s).filter(([k]) => k !== "$ref"));
      return this.#visit({ allOf: [{ $ref: s.$ref }, others] }, path, hint, inner);
    }
    if ("allOf" in s) {
      const parts = s.allOf;
      if (!Array.isArray(parts) || parts.length === 0) throw new SchemaError("allOf must be a non-empty array of schemas", `${path}/allOf`);
      const rest = Object.fromEntries(Object.entries(s).filter(([k]) => k !== "allOf"));
      let merged: JsonSchema = rest;
      parts.forEach((p, i) => (merged = this.#merge(merged, p, `${path}/allOf/${i}`, ctx.doc, 0)));
      return this.#visit(merged, path, hint, inner);
    }
    if ("anyOf" in s || "oneOf" in s) {
      if ("anyOf" in s && "oneOf" in s) throw new SchemaError("anyOf together with oneOf in one schema is not supported", path);
      const key = "anyOf" in s ? "anyOf" : "oneOf";
      const branches = s[key];
      if (!Array.isArray(branches) || branches.length === 0) throw new SchemaError(`${key} must be a non-empty array of schemas`, `${path}/${key}`);
      const rest = Object.fromEntries(Object.entries(s).filter(([k]) => k !== key));
      const withRest = this.#languageKeys(rest, []).length === 0
        ? branches
        : branches.map((b, i) => this.#merge(rest, b, `${path}/${key}/${i}`, ctx.doc, 0));
      if (key === "oneOf") this.#checkExclusive(withRest, `${path}/oneOf`, ctx.doc);
      const alts = withRest.map((b, i) => this.#visit(b, `${path}/${key}/${i}`, `${hint}-${i}`, inner));
      return alts.length === 1 ? alts[0]! : this.rules.add(hint, alts.join(" | "));
    }
    if ("enum" in s || "const" in s) return this.#enum(s, path, hint);

    const types = this.#types(s, path);
    if (types === null) return this.#anyValue();
    const alts = types.map((t) => this.#typed(t, s, path, types.length > 1 ? `${hint}-${t}` : hint, inner));
    return alts.length === 1 ? alts[0]! : this.rules.add(hint, alts.join(" | "));
  }

  /** Keywords of `s` that constrain values (not annotations, not unknown), besides `except`. */
  #languageKeys(s: Obj, except: string[]): string[] {
    const known = new Set([...OBJECT_KEYS, ...ARRAY_KEYS, ...STRING_KEYS, ...NUMBER_KEYS, "type", "enum", "const", "$ref", "allOf", "anyOf", "oneOf", ...Object.keys(UNSUPPORTED)]);
    return Object.keys(s).filter((k) => known.has(k) && !except.includes(k));
  }

  /** The types a schema allows, or null for any value. */
  #types(s: Obj, path: string): TypeName[] | null {
    if ("type" in s) {
      const t = s.type;
      const list = Array.isArray(t) ? t : [t];
      if (list.length === 0) throw new SchemaError("type must not be an empty list", `${path}/type`);
      for (const x of list) if (!TYPES.includes(x as TypeName)) throw new SchemaError(`unknown type ${JSON.stringify(x)}`, `${path}/type`);
      const set = [...new Set(list as TypeName[])];
      // number already covers integer
      return set.includes("number") ? set.filter((x) => x !== "integer") : set;
    }
    const has = (keys: string[]) => keys.some((k) => k in s);
    const out: TypeName[] = [];
    if (has(OBJECT_KEYS)) out.push("object");
    if (has(ARRAY_KEYS)) out.push("array");
    if (has(STRING_KEYS)) out.push("string");
    if (has(NUMBER_KEYS)) out.push("number");
    return out.length ? out : null;
  }

  #typed(t: TypeName, s: Obj, path: string, hint: string, ctx: Ctx): string {
    switch (t) {
      case "null":
        return `"null"`;
      case "boolean":
        return this.#boolean();
      case "string":
        return this.#stringSchema(s, path, hint);
      case "integer":
        return this.#numeric(s, path, hint, true);
      case "number":
        return this.#numeric(s, path, hint, false);
      case "array":
        return this.#array(s, path, hint, ctx);
      case "object":
        return this.#object(s, path, hint, ctx);
    }
  }

  // ---- $ref ----

  #resolve(ref: unknown, path: string, doc: Doc): { pointer: string; target: unknown } {
    if (typeof ref !== "string") throw new SchemaError("$ref must be a string", `${path}/$ref`);
    if (!ref.startsWith("#")) throw new SchemaError(`only local references (#/...) are supported, not '${ref}'`, `${path}/$ref`);
    if (ref !== "#" && !ref.startsWith("#/")) throw new SchemaError(`only JSON-pointer references (#/...) are supported, not '${ref}'`, `${path}/$ref`);
    let target: unknown = doc.root;
    const parts = ref === "#" ? [] : ref.slice(2).split("/");
    for (const raw of parts) {
      let part: string;
      try {
        part = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
      } catch {
        throw new SchemaError(`the reference '${ref}' is not a valid JSON pointer`, `${path}/$ref`);
      }
      if (Array.isArray(target) && /^\d+$/.test(part) && Number(part) < target.length) target = target[Number(part)];
      else if (isObj(target) && Object.hasOwn(target, part)) target = target[part];
      else throw new SchemaError(`the reference '${ref}' points to nothing`, `${path}/$ref`);
    }
    return { pointer: ref, target };
  }

  #ref(ref: unknown, path: string, ctx: Ctx): string {
    const { pointer, target } = this.#resolve(ref, path, ctx.doc);
    if (ctx.pending.has(pointer)) throw new SchemaError(`the reference '${pointer}' refers to itself without any value in between (a cycle)`, `${path}/$ref`);
    const known = ctx.doc.refs.get(pointer);
    if (known) return known;
    const tail = pointer.split("/").at(-1) || "root";
    const name = this.rules.reserve(`${ctx.doc.prefix}-${tail}`);
    ctx.doc.refs.set(pointer, name);
    const pending = new Set(ctx.pending).add(pointer);
    const body = this.#visit(target, pointer, name, { doc: ctx.doc, pending, depth: ctx.depth + 1 });
    this.rules.define(name, body);
    return name;
  }

  /** `s` with $ref and allOf resolved at the top (for merging and analysis). */
  #deref(s: unknown, path: string, doc: Doc, hops: number): JsonSchema {
    if (hops > 32) throw new SchemaError("the references and allOf here nest more than 32 deep or form a cycle", path);
    if (!isObj(s)) {
      if (typeof s === "boolean") return s;
      throw new SchemaError("a schema must be an object or a boolean", path);
    }
    if ("$ref" in s) {
      const { target } = this.#resolve(s.$ref, path, doc);
      const rest = Object.fromEntries(Object.entries(s).filter(([k]) => k !== "$ref"));
      const t = this.#deref(target, path, doc, hops + 1);
      return this.#languageKeys(rest, []).length ? this.#merge(t, rest, path, doc, hops + 1) : t;
    }
    if ("allOf" in s && Array.isArray(s.allOf)) {
      let merged: JsonSchema = Object.fromEntries(Object.entries(s).filter(([k]) => k !== "allOf"));
      s.allOf.forEach((p, i) => (merged = this.#merge(merged, p, `${path}/allOf/${i}`, doc, hops + 1)));
      return merged;
    }
    return s;
  }

  // ---- allOf ----

  /** One schema that accepts what both accept, or an error when that is not expressible here. */
  #merge(a0: unknown, b0: unknown, path: string, doc: Doc, hops: number): JsonSchema {
    this.#check(path, { doc, pending: new Set(), depth: 0 });
    const a = this.#deref(a0, path, doc, hops + 1);
    const b = this.#deref(b0, path, doc, hops + 1);
    if (a === false || b === false) throw new SchemaError("allOf with a false schema allows no value", path);
    if (a === true) return b;
    if (b === true) return a;
    if (("anyOf" in a || "oneOf" in a) && ("anyOf" in b || "oneOf" in b)) throw new SchemaError("allOf of two schemas that both have anyOf/oneOf is not supported", path);
    const out: Obj = { ...a };
    for (const [k, vb] of Object.entries(b)) {
      if (!(k in a)) {
        out[k] = vb;
        continue;
      }
      const va = a[k];
      if (ANNOTATIONS.has(k) || canonical(va) === canonical(vb)) continue;
      switch (k) {
        case "type": {
          const ta = new Set<string>(Array.isArray(va) ? (va as string[]) : [va as string]);
          const tb = new Set<string>(Array.isArray(vb) ? (vb as string[]) : [vb as string]);
          const both = [...ta].filter((t) => tb.has(t) || (t === "integer" && tb.has("number")));
          for (const t of tb) if (t === "integer" && ta.has("number") && !both.includes("integer")) both.push("integer");
          if (both.length === 0) throw new SchemaError(`allOf: the types ${JSON.stringify(va)} and ${JSON.stringify(vb)} have no value in common`, path);
          out.type = both.length === 1 ? both[0] : both;
          break;
        }
        case "required":
          out.required = [...new Set([...(va as string[]), ...(vb as string[])])];
          break;
        case "minLength": case "minItems": case "minProperties": case "minimum":
          out[k] = Math.max(va as number, vb as number);
          break;
        case "maxLength": case "maxItems": case "maxProperties": case "maximum":
          out[k] = Math.min(va as number, vb as number);
          break;
        case "exclusiveMinimum":
          if (typeof va !== "number" || typeof vb !== "number") throw new SchemaError("allOf: boolean exclusiveMinimum (draft 4) cannot be combined", path);
          out[k] = Math.max(va, vb);
          break;
        case "exclusiveMaximum":
          if (typeof va !== "number" || typeof vb !== "number") throw new SchemaError("allOf: boolean exclusiveMaximum (draft 4) cannot be combined", path);
          out[k] = Math.min(va, vb);
          break;
        case "enum": case "const": {
          const la = k === "enum" ? (va as unknown[]) : [va];
          const lb = new Set((k === "enum" ? (vb as unknown[]) : [vb]).map(canonical));
          const both = la.filter((v) => lb.has(canonical(v)));
          if (both.length === 0) throw new SchemaError(`allOf: the ${k} values have nothing in common`, path);
          if (k === "enum") out.enum = both;
          else throw new SchemaError("allOf: two different const values", path);
          break;
        }
        case "properties": case "additionalProperties":
          break; // below
        case "unevaluatedProperties":
          throw new SchemaError("unevaluatedProperties inside allOf is not supported", path);
        default:
          throw new SchemaError(`allOf: cannot combine two different '${k}'`, path);
      }
    }
    if ("properties" in a || "properties" in b || "additionalProperties" in a || "additionalProperties" in b) {
      const pa = (isObj(a.properties) ? a.properties : {}) as Obj;
      const pb = (isObj(b.properties) ? b.properties : {}) as Obj;
      const required = new Set((out.required as string[] | undefined) ?? []);
      const props: Obj = {};
      for (const key of new Set([...Object.keys(pa), ...Object.keys(pb)])) {
        const parts: unknown[] = [];
        let allowed = true;
        for (const [p, x] of [[pa, a], [pb, b]] as const) {
          if (Object.hasOwn(p, key)) parts.push(p[key]);
          else if (x.additionalProperties === false) allowed = false;
          else if (x.additionalProperties !== undefined && x.additionalProperties !== true) parts.push(x.additionalProperties);
        }
        if (!allowed) {
          if (required.has(key)) throw new SchemaError(`allOf: '${key}' is required but one part allows no such property`, path);
          continue;
        }
        props[key] = parts.length === 0 ? true : parts.length === 1 ? parts[0] : { allOf: parts };
      }
      if (Object.keys(props).length || "properties" in a || "properties" in b) out.properties = props;
      const xa = a.additionalProperties, xb = b.additionalProperties;
      if (xa === false || xb === false) out.additionalProperties = false;
      else if (xa === undefined || xa === true) out.additionalProperties = xb;
      else if (xb === undefined || xb === true) out.additionalProperties = xa;
      else out.additionalProperties = { allOf: [xa, xb] };
      if (out.additionalProperties === undefined) delete out.additionalProperties;
    }
    return out;
  }

  // ---- oneOf ----

  /** Throws unless no document can be valid under two branches (oneOf needs exactly one). */
  #checkExclusive(branches: unknown[], path: string, doc: Doc) {
    const ds = branches.map((b, i) => this.#deref(b, `${path}/${i}`, doc, 0));
    for (let i = 0; i < ds.length; i++) {
      for (let j = i + 1; j < ds.length; j++) {
        if (!this.#exclusive(ds[i]!, ds[j]!, doc) || !this.#exclusive(ds[j]!, ds[i]!, doc)) {
          throw new SchemaError(`oneOf: branches ${i} and ${j} may both match one value, which oneOf forbids; use anyOf, or tell them apart (different types, const/enum values, or a required property the other does not allow)`, path);
        }
      }
    }
  }

  /** The JSON types a (dereferenced) schema can produce; integer counts as number. */
  #possibleTypes(s: JsonSchema, doc: Doc): Set<string> {
    const all = new Set(["null", "boolean", "object", "array", "string", "number"]);
    if (s === true) return all;
    if (s === false) return new Set();
    if ("const" in s || "enum" in s) {
      const vals = "enum" in s && Array.isArray(s.enum) ? s.enum : [s.const];
      return new Set(vals.map((v) => (jsonType(v) === "integer" ? "number" : jsonType(v))));
    }
    for (const key of ["anyOf", "oneOf"]) {
      if (Array.isArray(s[key])) {
        const out = new Set<string>();
        for (const b of s[key] as unknown[]) for (const t of this.#possibleTypes(this.#deref(b, "#", doc, 0), doc)) out.add(t);
        return out;
      }
    }
    const t = this.#types(s, "#");
    return t ? new Set(t.map((x) => (x === "integer" ? "number" : x))) : all;
  }

  /** True when no document produced for `a` is valid under `b`. */
  #exclusive(a: JsonSchema, b: JsonSchema, doc: Doc): boolean {
    const ta = this.#possibleTypes(a, doc), tb = this.#possibleTypes(b, doc);
    const common = [...ta].filter((t) => tb.has(t));
    if (common.length === 0) return true;
    const values = (s: JsonSchema) => (isObj(s) && ("const" in s || "enum" in s) ? ("enum" in s && Array.isArray(s.enum) ? s.enum : [s.const]) : null);
    const va = values(a), vb = values(b);
    if (va && vb) {
      const set = new Set(vb.map(canonical));
      return va.every((v) => !set.has(canonical(v)));
    }
    if (common.length !== 1 || common[0] !== "object" || !isObj(a) || !isObj(b)) return false;
    const propsA = (isObj(a.properties) ? a.properties : {}) as Obj;
    const propsB = (isObj(b.properties) ? b.properties : {}) as Obj;
    const reqA = new Set(Array.isArray(a.required) ? (a.required as string[]) : []);
    const reqB = new Set(Array.isArray(b.required) ? (b.required as string[]) : []);
    // a's documents have every required key of a: b rejects a key it does not allow
    for (const k of reqA) if (propsB[k] === false || (b.additionalProperties === false && !Object.hasOwn(propsB, k))) return true;
    // b needs a key that a's grammar never writes (a writes only its declared properties unless it allows more)
    const aWritesExtra = !("properties" in a) || (a.additionalProperties !== undefined && a.additionalProperties !== false);
    for (const k of reqB) if (!aWritesExtra && !Object.hasOwn(propsA, k)) return true;
    // a discriminator: a required property with const/enum values b never allows
    for (const k of reqA) {
      if (!Object.hasOwn(propsB, k)) continue;
      const da = this.#deref(propsA[k], "#", doc, 0), db = this.#deref(propsB[k], "#", doc, 0);
      const xa = values(da), xb = values(db);
      if (xa && xb) {
        const set = new Set(xb.map(canonical));
        if (xa.every((v) => !set.has(canonical(v)))) return true;
      }
    }
    return false;
  }

  // ---- enum / const ----

  #enum(s: Obj, path: string, hint: string): string {
    let values: unknown[];
    if ("enum" in s) {
      if (!Array.isArray(s.enum) || s.enum.length === 0) throw new SchemaError("enum must be a non-empty array", `${path}/enum`);
      values = s.enum;
      if ("const" in s) values = values.filter((v) => canonical(v) === canonical(s.const));
    } else {
      values = [s.const];
    }
    if (values.length > this.limits.maxEnum) throw new SchemaError(`enum has more than ${this.limits.maxEnum} values`, `${path}/enum`);
    const seen = new Set<string>();
    const kept: unknown[] = [];
    for (const v of values) {
      const c = canonical(v);
      if (seen.has(c)) continue;
      seen.add(c);
      if (this.#allows(s, v, path)) kept.push(v);
    }
    if (kept.length === 0) throw new SchemaError("no value of enum/const is allowed by the rest of the schema", path);
    const alts = kept.map((v) => this.#valueLiteral(v));
    return alts.length === 1 ? alts[0]! : this.rules.add(hint, alts.join(" | "));
  }

  /** Exactly the JSON value `v`, with the same bounded whitespace as elsewhere inside arrays and objects. */
  #valueLiteral(v: unknown): string {
    const sp = () => this.#space();
    if (Array.isArray(v)) {
      if (!v.length) return `"[" ${sp()} "]"`;
      return `"[" ${sp()} ${v.map((x) => this.#valueLiteral(x)).join(` ${this.#sep()} `)} ${sp()} "]"`;
    }
    if (isObj(v)) {
      const keys = Object.keys(v);
      if (!keys.length) return `"{" ${sp()} "}"`;
      const members = keys.map((k) => `${literal(JSON.stringify(k))} ${sp()} ":" ${sp()} ${this.#valueLiteral(v[k])}`);
      return `"{" ${sp()} ${members.join(` ${this.#sep()} `)} ${sp()} "}"`;
    }
    return literal(JSON.stringify(v));
  }

  /** Whether `v` passes the keywords beside enum/const (those that can be checked here). */
  #allows(s: Obj, v: unknown, path: string): boolean {
    for (const k of this.#languageKeys(s, ["enum", "const"])) {
      if (!["type", ...STRING_KEYS.filter((x) => x !== "pattern" && x !== "format"), ...NUMBER_KEYS.filter((x) => x !== "multipleOf"), ...OBJECT_KEYS, ...ARRAY_KEYS].includes(k)) {
        throw new SchemaError(`'${k}' beside enum/const is not supported`, path);
      }
    }
    const t = jsonType(v);
    const types = this.#types(s, path);
    if ("type" in s && types && !types.includes(t) && !(t === "integer" && types.includes("number")) && !(t === "number" && types.includes("integer") && Number.isInteger(v))) return false;
    if (typeof v === "string") {
      const n = [...v].length;
      if (typeof s.minLength === "number" && n < s.minLength) return false;
      if (typeof s.maxLength === "number" && n > s.maxLength) return false;
    }
    if (typeof v === "number") {
      const b = this.#bounds(s, path);
      if (v < b.lo || (v === b.lo && b.loExcl) || v > b.hi || (v === b.hi && b.hiExcl)) return false;
    }
    if (Array.isArray(v) || isObj(v)) {
      const structural = [...OBJECT_KEYS, ...ARRAY_KEYS].filter((k) => k in s);
      if (structural.length) throw new SchemaError(`'${structural[0]}' beside an enum/const of arrays or objects is not supported`, path);
    }
    return true;
  }

  // ---- strings ----

  #stringSchema(s: Obj, path: string, hint: string): string {
    if ("pattern" in s) {
      const p = s.pattern;
      if (typeof p !== "string") throw new SchemaError("pattern must be a string", `${path}/pattern`);
      const others = ["format", "minLength", "maxLength"].filter((k) => k in s);
      if (others.length) throw new SchemaError(`'pattern' together with '${others[0]}' is not supported`, path);
      try {
        new RegExp(p, "u");
      } catch (e) {
        throw new SchemaError(`pattern is not a valid regular expression: ${(e as Error).message}`, `${path}/pattern`);
      }
      let body: string;
      try {
        body = patternToGbnf(p, this.#char(), { maxRepeat: this.limits.maxRepeat, countRepeat: (n) => this.#countRepeat(n, `${path}/pattern`) });
      } catch (e) {
        if (e instanceof RegexError) throw new SchemaError(`pattern: ${e.message}`, `${path}/pattern`);
        throw e;
      }
      return this.rules.add(hint, `"\\"" ${body} "\\""`);
    }
    if ("format" in s) {
      const f = s.format;
      if (typeof f !== "string") throw new SchemaError("format must be a string", `${path}/format`);
      if (!SUPPORTED_FORMATS.includes(f)) throw new SchemaError(`string format '${f}' is not supported (supported: ${SUPPORTED_FORMATS.join(", ")})`, `${path}/format`);
      if ("minLength" in s || "maxLength" in s) throw new SchemaError("minLength/maxLength together with format is not supported", path);
      return this.rules.add(`${f}-string`, `"\\"" ${this.#format(f)} "\\""`);
    }
    const min = this.#count(s, "minLength", path, 0);
    const max = this.#count(s, "maxLength", path, Infinity);
    if (min > max) throw new SchemaError(`minLength ${min} is above maxLength ${max}`, path);
    if (min === 0 && max === Infinity) return this.#string();
    return this.rules.add(hint, `"\\"" ${this.#char()}${repeat(min, max)} "\\""`);
  }

  /** A non-negative integer keyword within the repetition limit. */
  #count(s: Obj, key: string, path: string, dflt: number): number {
    if (!(key in s)) return dflt;
    const v = s[key];
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new SchemaError(`${key} must be a non-negative integer`, `${path}/${key}`);
    if (v > this.limits.maxRepeat && !(key.startsWith("max") && v >= Number.MAX_SAFE_INTEGER)) {
      throw new SchemaError(`${key} ${v} is above the limit of ${this.limits.maxRepeat} for constrained decoding`, `${path}/${key}`);
    }
    if (v >= Number.MAX_SAFE_INTEGER) return Infinity;
    this.#countRepeat(v, `${path}/${key}`);
    return v;
  }

  #format(f: string): string {
    const r = this.rules;
    const hex = "[0-9a-fA-F]";
    switch (f) {
      case "date": {
        const d31 = `"0" [1-9] | [12] [0-9] | "3" [01]`;
        const leap = r.add("leap-year", `[0-9]{2} ( "0" [48] | [2468] [048] | [13579] [26] ) | ( [02468] [048] | [13579] [26] ) "00"`);
        return r.add("date", `[0-9]{4} "-" ( ( "0" [13578] | "1" [02] ) "-" ( ${d31} ) | ( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | "02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | ${leap} "-02-29"`);
      }
      case "time": {
        const hh = `( [01] [0-9] | "2" [0-3] )`;
        return r.add("time", `${hh} ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? ( "Z" | [+-] ${hh} ":" [0-5] [0-9] )`);
      }
      case "date-time":
        return r.add("date-time", `${this.#format("date")} "T" ${this.#format("time")}`);
      case "uuid":
        return r.add("uuid", `${hex}{8} "-" ${hex}{4} "-" ${hex}{4} "-" ${hex}{4} "-" ${hex}{12}`);
      case "email": {
        const atom = r.add("email-atom", `[a-zA-Z0-9!#$%&'*+/=?^_\`{|}~\\x2D]+`);
        const label = r.add("email-label", `[a-zA-Z0-9]+ ( "-"+ [a-zA-Z0-9]+ )*`);
        return r.add("email", `${atom} ( "." ${atom} )* "@" ${label} ( "." ${label} )+`);
      }
      case "ipv4": {
        const octet = r.add("ipv4-octet", `"25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9]`);
        return r.add("ipv4", `${octet} "." ${octet} "." ${octet} "." ${octet}`);
      }
    }
    throw new Error(`no grammar for format ${f}`);
  }

  // ---- numbers ----

  /** minimum/maximum and the exclusive forms (draft 4 booleans too) as one interval. */
  #bounds(s: Obj, path: string): { lo: number; loExcl: boolean; hi: number; hiExcl: boolean } {
    let lo = -Infinity, hi = Infinity, loExcl = false, hiExcl = false;
    const num = (k: string) => {
      const v = s[k];
      if (typeof v !== "number" || !Number.isFinite(v)) throw new SchemaError(`${k} must be a number`, `${path}/${k}`);
      return v;
    };
    if ("minimum" in s) lo = num("minimum");
    if ("maximum" in s) hi = num("maximum");
    if ("exclusiveMinimum" in s) {
      if (s.exclusiveMinimum === true) loExcl = true;
      else if (s.exclusiveMinimum !== false) {
        const v = num("exclusiveMinimum");
        if (v >= lo) [lo, loExcl] = [v, true];
      }
    }
    if ("exclusiveMaximum" in s) {
      if (s.exclusiveMaximum === true) hiExcl = true;
      else if (s.exclusiveMaximum !== false) {
        const v = num("exclusiveMaximum");
        if (v <= hi) [hi, hiExcl] = [v, true];
      }
    }
    return { lo, loExcl, hi, hiExcl };
  }

  #numeric(s: Obj, path: string, hint: string, integer: boolean): string {
    if ("multipleOf" in s) {
      const m = s.multipleOf;
      if (!(integer && m === 1)) throw new SchemaError("'multipleOf' is not supported", `${path}/multipleOf`);
    }
    const b = this.#bounds(s, path);
    const limit = 10 ** MAX_INT_DIGITS - 1;
    for (const v of [b.lo, b.hi]) {
      if (Number.isFinite(v) && Math.abs(v) > limit) throw new SchemaError(`bounds beyond ±${limit} are not supported`, path);
    }
    if (integer) {
      let lo = b.lo === -Infinity ? -limit : b.loExcl ? Math.floor(b.lo) + 1 : Math.ceil(b.lo);
      let hi = b.hi === Infinity ? limit : b.hiExcl ? Math.ceil(b.hi) - 1 : Math.floor(b.hi);
      if (lo > hi) throw new SchemaError("no integer lies between the minimum and the maximum", path);
      if (b.lo === -Infinity && b.hi === Infinity) return this.#integer();
      lo = Math.max(lo, -limit);
      hi = Math.min(hi, limit);
      return this.rules.add(hint, intRange(lo, hi));
    }
    if (b.lo === -Infinity && b.hi === Infinity) return this.#number();
    for (const v of [b.lo, b.hi]) {
      if (Number.isFinite(v) && !Number.isInteger(v)) throw new SchemaError("number bounds that are not integers are not supported (integer bounds are)", path);
    }
    if (b.lo > b.hi || (b.lo === b.hi && (b.loExcl || b.hiExcl))) throw new SchemaError("no number lies between the minimum and the maximum", path);
    return this.rules.add(hint, decimalRange(b.lo, b.loExcl, b.hi, b.hiExcl));
  }

  // ---- arrays ----

  #array(s: Obj, path: string, hint: string, ctx: Ctx): string {
    let prefix: unknown[] = [];
    let rest: unknown = true;
    let restPath = `${path}/items`;
    if (Array.isArray(s.prefixItems)) {
      prefix = s.prefixItems;
      if ("items" in s) rest = s.items;
    } else if (Array.isArray(s.items)) {
      // draft 4-7 tuples
      prefix = s.items;
      if ("additionalItems" in s) [rest, restPath] = [s.additionalItems, `${path}/additionalItems`];
    } else if ("items" in s) {
      rest = s.items;
    }
    if ("prefixItems" in s && !Array.isArray(s.prefixItems)) throw new SchemaError("prefixItems must be an array", `${path}/prefixItems`);
    const min = this.#count(s, "minItems", path, 0);
    let max = this.#count(s, "maxItems", path, Infinity);
    const firstFalse = prefix.findIndex((p) => p === false);
    if (firstFalse >= 0) max = Math.min(max, firstFalse);
    if (rest === false) max = Math.min(max, prefix.length);
    if (min > max) throw new SchemaError(`the array needs at least ${min} items but allows at most ${max}`, path);
    if (s.uniqueItems === true && max > 1) throw new SchemaError("'uniqueItems' is not supported (unless maxItems is at most 1)", `${path}/uniqueItems`);

    const sp = this.#space(), sep = this.#sep();
    const inner: Ctx = { ...ctx, pending: new Set() }; // "[" comes first
    const elems = prefix.slice(0, Math.min(prefix.length, max)).map((p, i) => this.#visit(p, `${path}/prefixItems/${i}`, `${hint}-${i}`, inner));
    const restRule = max > prefix.length ? this.#visit(rest, restPath, `${hint}-item`, inner) : "";

    // elements from position i ≥ 1 on, each after a separator
    const from = (i: number): string => {
      if (i >= max) return "";
      if (i < elems.length) {
        const next = from(i + 1);
        const seq = `${sep} ${elems[i]}${next ? ` ${next}` : ""}`;
        return i < min ? seq : this.rules.add(`${hint}-from-${i}`, `( ${seq} )?`);
      }
      return `( ${sep} ${restRule} )${repeat(Math.max(0, min - i), max - i)}`;
    };
    if (max === 0) return `"[" ${sp} "]"`;
    // the first element, then the others
    const next = from(1);
    const body = `${elems.length ? elems[0] : restRule}${next ? ` ${next}` : ""}`;
    return this.rules.add(hint, min > 0 ? `"[" ${sp} ${body} ${sp} "]"` : `"[" ${sp} ( ${body} ${sp} )? "]"`);
  }

  // ---- objects ----

  #object(s: Obj, path: string, hint: string, ctx: Ctx): string {
    if ("properties" in s && !isObj(s.properties)) throw new SchemaError("properties must be an object", `${path}/properties`);
    if ("required" in s && (!Array.isArray(s.required) || s.required.some((r) => typeof r !== "string"))) throw new SchemaError("required must be an array of strings", `${path}/required`);
    const props = (s.properties ?? {}) as Obj;
    const required = [...new Set((s.required ?? []) as string[])];
    let additional: unknown = s.additionalProperties;
    if (additional === undefined && "unevaluatedProperties" in s) {
      if (s.unevaluatedProperties !== false && s.unevaluatedProperties !== true) throw new SchemaError("unevaluatedProperties other than true/false is not supported", path);
      additional = s.unevaluatedProperties;
    }
    // absent: no extra properties when properties are listed (a valid subset); any object otherwise
    if (additional === undefined) additional = !("properties" in s);
    if (additional !== false && additional !== true && !isObj(additional)) throw new SchemaError("additionalProperties must be a boolean or a schema", `${path}/additionalProperties`);

    const names = Object.keys(props);
    const req: string[] = [];
    for (const k of names) if (required.includes(k)) req.push(k);
    for (const k of required) {
      if (Object.hasOwn(props, k)) {
        if (props[k] === false) throw new SchemaError(`'${k}' is required but its schema is false`, path);
        continue;
      }
      if (additional === false) throw new SchemaError(`'${k}' is required but not allowed (not in properties, and additionalProperties is false)`, path);
      req.push(k);
    }
    const opt = names.filter((k) => !required.includes(k) && props[k] !== false);
    const minP = "minProperties" in s ? (s.minProperties as number) : 0;
    if (minP > req.length) throw new SchemaError(`'minProperties' above the number of required properties is not supported`, `${path}/minProperties`);
    if ("maxProperties" in s) {
      const most = additional === false ? req.length + opt.length : Infinity;
      if ((s.maxProperties as number) < most) throw new SchemaError(`'maxProperties' below the number of properties the object may have is not supported`, `${path}/maxProperties`);
    }

    const sp = this.#space(), sep = this.#sep();
    const inner: Ctx = { ...ctx, pending: new Set() }; // "{" comes first
    const kv = (k: string, schema: unknown, sub: string) => {
      const value = this.#visit(schema, sub, `${hint}-${k}`, inner);
      return this.rules.add(`${hint}-${k}-kv`, `${literal(JSON.stringify(k))} ${sp} ":" ${sp} ${value}`);
    };
    const propPath = (k: string) => `${path}/properties/${escapePointer(k)}`;
    const reqKv = req.map((k) => (Object.hasOwn(props, k) ? kv(k, props[k], propPath(k)) : kv(k, additional === true ? true : additional, `${path}/additionalProperties`)));
    const optKv = opt.map((k) => kv(k, props[k], propPath(k)));
    let addKv = "";
    if (additional !== false) {
      const value = this.#visit(additional, `${path}/additionalProperties`, `${hint}-additional`, inner);
      addKv = this.rules.add(`${hint}-additional-kv`, `${this.#keyExcept([...names, ...req], hint)} ${sp} ":" ${sp} ${value}`);
    }
    const addTail = addKv ? `( ${sep} ${addKv} )*` : "";

    let members: string;
    if (reqKv.length) {
      members = [reqKv.join(` ${sep} `), ...optKv.map((o) => `( ${sep} ${o} )?`), addTail].filter(Boolean).join(" ");
      return this.rules.add(hint, `"{" ${sp} ${members} ${sp} "}"`);
    }
    // no required property: any in-order selection of the optional ones, then extras
    if (!optKv.length && !addKv) return `"{" ${sp} "}"`;
    const tails: string[] = new Array(optKv.length + 1).fill("");
    tails[optKv.length] = addTail ? this.rules.add(`${hint}-rest`, addTail) : "";
    for (let i = optKv.length - 1; i >= 1; i--) {
      const body = [`( ${sep} ${optKv[i]} )?`, tails[i + 1]].filter(Boolean).join(" ");
      tails[i] = this.rules.add(`${hint}-rest-${i}`, body);
    }
    const alts = optKv.map((o, i) => [o, tails[i + 1]].filter(Boolean).join(" "));
    if (addKv) alts.push([addKv, tails[optKv.length]].filter(Boolean).join(" "));
    members = this.rules.add(`${hint}-members`, alts.join(" | "));
    return this.rules.add(hint, `"{" ${sp} ( ${members} ${sp} )? "}"`);
  }

  /** A JSON string key (without escapes) that is none of `keys`. */
  #keyExcept(keys: string[], hint: string): string {
    const plain = (extra: string) => charClass(['"', "\\", [0, 0x1f], "\u007f", ...(extra ? [extra] : [])], true);
    if (keys.length === 0) return this.rules.add("plain-key", `"\\"" ${plain("")}* "\\""`);
    // a trie of the keys: at each node, end (unless a key ends there), leave the trie, or go on
    interface Node { next: Map<string, Node>; end: boolean }
    const root: Node = { next: new Map(), end: false };
    for (const k of keys) {
      let n = root;
      for (const ch of k) {
        if (!n.next.has(ch)) n.next.set(ch, { next: new Map(), end: false });
        n = n.next.get(ch)!;
      }
      n.end = true;
    }
    const any = this.rules.add("plain-chars", `${plain("")}*`);
    const walk = (n: Node, depth: number): string => {
      const alts: string[] = [];
      if (!n.end) alts.push(`"\\""`);
      const chars = [...n.next.keys()];
      alts.push(`${plain(chars.join(""))} ${any} "\\""`);
      for (const [ch, child] of n.next) alts.push(`${literal(ch)} ${walk(child, depth + 1)}`);
      return this.rules.add(`${hint}-key-${depth}`, alts.join(" | "));
    };
    return this.rules.add(`${hint}-key`, `"\\"" ${walk(root, 0)}`);
  }
}

/** Repetition suffix for {min,max}. */
function repeat(min: number, max: number): string {
  if (min === 0 && max === Infinity) return "*";
  if (min === 1 && max === Infinity) return "+";
  if (min === 0 && max === 1) return "?";
  if (max === Infinity) return `{${min},}`;
  if (min === max) return min === 1 ? "" : `{${min}}`;
  return `{${min},${max}}`;
}

// ---- integer and decimal ranges ----

/** Digit strings of one length L from x to y (both L digits, x ≤ y), as a GBNF sequence. */
function sameLength(x: string, y: string): string {
  if (x === y) return literal(x);
  const n = x.length;
  if (n === 1) return x === "0" && y === "9" ? "[0-9]" : `[${x}-${y}]`;
  const lowRest = /^0*$/.test(x.slice(1)), highRest = /^9*$/.test(y.slice(1));
  const d1 = Number(x[0]), d2 = Number(y[0]);
  const any = (k: number) => (k === 1 ? "[0-9]" : `[0-9]{${k}}`);
  const digits = (a: number, b: number) => (a === b ? `"${a}"` : a === 0 && b === 9 ? "[0-9]" : `[${a}-${b}]`);
  if (d1 === d2) return `"${x[0]}" ${sameLength(x.slice(1), y.slice(1))}`;
  const alts: string[] = [];
  const midLo = lowRest ? d1 : d1 + 1, midHi = highRest ? d2 : d2 - 1;
  if (!lowRest) alts.push(`"${d1}" ${sameLength(x.slice(1), "9".repeat(n - 1))}`);
  if (midLo <= midHi) alts.push(`${digits(midLo, midHi)} ${any(n - 1)}`);
  if (!highRest) alts.push(`"${d2}" ${sameLength("0".repeat(n - 1), y.slice(1))}`);
  return alts.length === 1 ? alts[0]! : `( ${alts.join(" | ")} )`;
}

/** Canonical decimal strings of the integers a..b (0 ≤ a ≤ b). */
function nonNegativeRange(a: number, b: number): string[] {
  const alts: string[] = [];
  for (let len = String(a).length; len <= String(b).length; len++) {
    const lo = Math.max(a, len === 1 ? 0 : 10 ** (len - 1));
    const hi = Math.min(b, 10 ** len - 1);
    if (lo <= hi) alts.push(sameLength(String(lo), String(hi)));
  }
  return alts;
}

/** GBNF alternatives for the integers lo..hi in canonical decimal form. */
export function intRange(lo: number, hi: number): string {
  const alts: string[] = [];
  if (lo < 0) {
    const neg = nonNegativeRange(Math.max(1, -hi), -lo);
    alts.push(`"-" ${neg.length === 1 ? neg[0] : `( ${neg.join(" | ")} )`}`);
  }
  if (hi >= 0) alts.push(...nonNegativeRange(Math.max(0, lo), hi));
  return alts.join(" | ");
}

/** Decimals (no exponent) x with |x| from a to b (0 ≤ a ≤ b, integers, b may be Infinity). */
function magnitudes(a: number, aExcl: boolean, b: number, bExcl: boolean): string[] {
  const limit = 10 ** MAX_INT_DIGITS - 1;
  const frac = `( "." [0-9]{1,15} )?`;
  const zeros = `( "." "0"{1,15} )?`;
  const nonzero = `"." [0-9]{0,14} [1-9]`;
  const alts: string[] = [];
  if (a === b) return aExcl || bExcl ? [] : [`${literal(String(a))} ${zeros}`];
  if (aExcl) alts.push(`${literal(String(a))} ${nonzero}`);
  const lo = aExcl ? a + 1 : a;
  const hi = b === Infinity ? limit : b - 1;
  if (lo <= hi) alts.push(`( ${nonNegativeRange(lo, hi).join(" | ")} ) ${frac}`);
  if (b !== Infinity && !bExcl) alts.push(`${literal(String(b))} ${zeros}`);
  return alts;
}

/** Decimals x with lo ≤ x ≤ hi (or < when exclusive); lo and hi integers or infinite. */
export function decimalRange(lo: number, loExcl: boolean, hi: number, hiExcl: boolean): string {
  const alts: string[] = [];
  if (lo < 0) {
    // negative values: magnitudes from max(0, -hi) (exclusive when hi ≥ 0: -0 is not negative) to -lo
    const from = hi >= 0 ? 0 : -hi;
    const neg = magnitudes(from, hi >= 0 ? true : hiExcl, -lo, loExcl);
    if (neg.length) alts.push(`"-" ( ${neg.join(" | ")} )`);
  }
  if (hi >= 0) alts.push(...magnitudes(Math.max(0, lo), lo >= 0 ? loExcl : false, hi, hiExcl));
  return alts.join(" | ");
}

/** GBNF whose language is JSON documents valid under `schema` (root rule `root`). */
export function jsonSchemaToGrammar(schema: unknown, limits: Partial<SchemaLimits> = {}): string {
  const c = new SchemaConverter(limits);
  return c.rules.toString(c.convert(schema, "root"));
}

/** GBNF of any JSON object (response_format json_object). */
export function jsonObjectGrammar(): string {
  const c = new SchemaConverter();
  return c.rules.toString(c.anyObject());
}
