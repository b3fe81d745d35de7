// JSON Schema → GBNF (src/grammar/json-schema.ts) without a model: every text drawn at random
// from the grammar must validate under the schema (ajv), documents that validate must be in the
// grammar's language where the converter promises it, and documents that do not must be out.
// The engine's constrained decoding of the same grammars is tested in structured-output.test.ts.
import { describe, expect, test } from "bun:test";
import Ajv from "ajv";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { decimalRange, intRange, jsonObjectGrammar, jsonSchemaToGrammar, SchemaError } from "../src/grammar/json-schema";
import { Gbnf, rng } from "./helpers/gbnf";

const ajv2020 = new Ajv2020({ strict: false, allErrors: true });
const ajv07 = new Ajv({ strict: false, allErrors: true });
addFormats(ajv2020);
addFormats(ajv07);

function validator(schema: object) {
  return ("$schema" in schema && String(schema.$schema).includes("draft-07") ? ajv07 : ajv2020).compile(schema);
}

/** Draws `n` texts from the schema's grammar and checks each against the schema. */
function checkSamples(schema: object, n = 300, seed = 1) {
  const grammar = jsonSchemaToGrammar(schema);
  const g = new Gbnf(grammar);
  const validate = validator(schema);
  const r = rng(seed);
  const seen = new Set<string>();
  for (let i = 0; i < n; i++) {
    const text = g.sample(r);
    let doc: unknown;
    try {
      doc = JSON.parse(text);
    } catch {
      throw new Error(`not JSON: ${text}\n${grammar}`);
    }
    if (!validate(doc)) throw new Error(`invalid: ${text}\n${JSON.stringify(validate.errors)}\n${grammar}`);
    seen.add(text);
  }
  return { g, seen };
}

const pretty = (v: unknown) => JSON.stringify(v, null, 2);

const cases: { name: string; schema: object; valid?: unknown[]; invalid?: unknown[] }[] = [
  {
    name: "object with required, optional and typed properties",
    schema: {
      type: "object",
      properties: {
        name: { type: "string", minLength: 1, maxLength: 12 },
        age: { type: "integer", minimum: 0, maximum: 150 },
        score: { type: "number" },
        admin: { type: "boolean" },
        nick: { type: ["string", "null"] },
      },
      required: ["name", "age"],
      additionalProperties: false,
    },
    valid: [{ name: "Ann", age: 33 }, { name: "Bo", age: 0, score: -1.5e3, admin: true, nick: null }, { name: "日本", age: 150, nick: "x" }],
    invalid: [{ age: 3 }, { name: "", age: 3 }, { name: "A", age: 151 }, { name: "A", age: 3, extra: 1 }, { name: "A", age: 1.5 }],
  },
  {
    name: "only optional properties, in any subset",
    schema: { type: "object", properties: { a: { const: 1 }, b: { const: 2 }, c: { const: 3 } } },
    valid: [{}, { a: 1 }, { b: 2 }, { c: 3 }, { a: 1, c: 3 }, { a: 1, b: 2, c: 3 }],
    invalid: [{ a: 2 }, { a: 1, b: 3 }],
  },
  {
    name: "additionalProperties as a schema, declared keys kept apart",
    schema: { type: "object", properties: { id: { type: "integer", minimum: 1, maximum: 9 } }, required: ["id"], additionalProperties: { type: "string", maxLength: 3 } },
    valid: [{ id: 1 }, { id: 2, x: "ab" }, { id: 3, idx: "", i: "abc" }],
    invalid: [{ id: 1, x: 3 }, { id: 1, id2: "toolong" }],
  },
  {
    name: "additionalProperties true",
    schema: { type: "object", properties: { a: { type: "integer", minimum: 0, maximum: 5 } }, additionalProperties: true },
    valid: [{}, { a: 1, b: [1, { c: null }] }, { b: "x" }],
    invalid: [{ a: 6 }],
  },
  {
    name: "type object without properties: any object",
    schema: { type: "object" },
    valid: [{}, { a: { b: [1, 2, "x"] } }],
    invalid: [[], "x"],
  },
  {
    name: "arrays: items, minItems, maxItems",
    schema: { type: "array", items: { type: "integer", minimum: -5, maximum: 5 }, minItems: 2, maxItems: 4 },
    valid: [[1, 2], [-5, 0, 5, 3]],
    invalid: [[1], [1, 2, 3, 4, 5], [1, 6]],
  },
  {
    name: "tuples: prefixItems with items false",
    schema: { type: "array", prefixItems: [{ type: "string", format: "date" }, { enum: ["x", 2, null] }], items: false, minItems: 1 },
    valid: [["2024-02-29"], ["1999-12-31", "x"], ["2000-01-01", null]],
    invalid: [[], ["2023-02-29"], ["2024-13-01"], ["2024-01-01", "y"], ["2024-01-01", 2, 3]],
  },
  {
    name: "tuples, draft-07 items array with additionalItems",
    schema: { $schema: "http://json-schema.org/draft-07/schema#", type: "array", items: [{ type: "boolean" }], additionalItems: { type: "null" }, maxItems: 3 },
    valid: [[], [true], [false, null, null]],
    invalid: [[null], [true, true]],
  },
  {
    name: "string formats",
    schema: {
      type: "object",
      properties: {
        d: { type: "string", format: "date" },
        t: { type: "string", format: "time" },
        dt: { type: "string", format: "date-time" },
        u: { type: "string", format: "uuid" },
        e: { type: "string", format: "email" },
        ip: { type: "string", format: "ipv4" },
      },
      required: ["d", "t", "dt", "u", "e", "ip"],
    },
    valid: [{ d: "2000-02-29", t: "23:59:59.123Z", dt: "1970-01-01T00:00:00+05:30", u: "123e4567-e89b-12d3-a456-426614174000", e: "a.b+c@ex-ample.co.uk", ip: "192.168.0.255" }],
    invalid: [
      { d: "1900-02-29", t: "00:00:00Z", dt: "1970-01-01T00:00:00Z", u: "123e4567-e89b-12d3-a456-426614174000", e: "a@b.c", ip: "1.1.1.1" },
      { d: "2000-01-01", t: "24:00:00Z", dt: "1970-01-01T00:00:00Z", u: "123e4567-e89b-12d3-a456-426614174000", e: "a@b.c", ip: "1.1.1.1" },
      { d: "2000-01-01", t: "00:00:00Z", dt: "1970-01-01T00:00:00Z", u: "123e4567-e89b-12d3-a456-426614174000", e: "a@b.c", ip: "256.1.1.1" },
    ],
  },
  {
    name: "enum and const of every JSON type",
    schema: { type: "object", properties: { e: { enum: ["a\"b", "ü\n", 1, 2.5, true, null, [1, "x"], { k: "v" }] }, c: { const: "fixed" } }, required: ["e", "c"] },
    valid: [{ e: "a\"b", c: "fixed" }, { e: { k: "v" }, c: "fixed" }, { e: [1, "x"], c: "fixed" }],
    invalid: [{ e: "ab", c: "fixed" }, { e: 1, c: "other" }],
  },
  {
    name: "anyOf with siblings and a type list",
    schema: { type: "object", properties: { v: { anyOf: [{ type: "string", maxLength: 2 }, { type: "integer", minimum: 10, maximum: 12 }, { type: "null" }] } }, required: ["v"] },
    valid: [{ v: "ab" }, { v: 11 }, { v: null }],
    invalid: [{ v: "abc" }, { v: 9 }, { v: true }],
  },
  {
    name: "oneOf of tagged objects",
    schema: {
      oneOf: [
        { type: "object", properties: { kind: { const: "circle" }, r: { type: "number", minimum: 0 } }, required: ["kind", "r"], additionalProperties: false },
        { type: "object", properties: { kind: { const: "square" }, side: { type: "integer", minimum: 1, maximum: 100 } }, required: ["kind", "side"], additionalProperties: false },
      ],
    },
    valid: [{ kind: "circle", r: 2.5 }, { kind: "square", side: 3 }],
    invalid: [{ kind: "circle", side: 3 }, { kind: "square", r: 1 }],
  },
  {
    name: "allOf of objects merges properties and required",
    schema: {
      allOf: [
        { type: "object", properties: { a: { type: "integer", minimum: 0, maximum: 9 } }, required: ["a"] },
        { properties: { b: { type: "string", maxLength: 4 } }, required: ["b"] },
        { properties: { a: { maximum: 5 } } },
      ],
    },
    valid: [{ a: 5, b: "x" }],
    invalid: [{ a: 6, b: "x" }, { a: 1 }],
  },
  {
    name: "$ref and $defs, recursive",
    schema: {
      $defs: { node: { type: "object", properties: { value: { type: "integer", minimum: 0, maximum: 99 }, children: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 2 } }, required: ["value"], additionalProperties: false } },
      $ref: "#/$defs/node",
    },
    valid: [{ value: 1 }, { value: 2, children: [{ value: 3, children: [] }, { value: 4, children: [{ value: 5 }] }] }],
    invalid: [{ value: 1, children: [{}] }, { value: 1, children: [{ value: 1 }, { value: 2 }, { value: 3 }] }],
  },
  {
    name: "draft-07 definitions and a root self-reference",
    schema: { $schema: "http://json-schema.org/draft-07/schema#", definitions: { leaf: { type: "string", maxLength: 3 } }, type: "array", maxItems: 3, items: { anyOf: [{ $ref: "#/definitions/leaf" }, { $ref: "#" }] } },
    valid: [[], ["ab", [], ["x", ["y"]]]],
    invalid: [[1], ["abcd"]],
  },
  {
    name: "integer ranges with exclusive bounds, negative and wide",
    schema: { type: "array", prefixItems: [{ type: "integer", exclusiveMinimum: -1000, exclusiveMaximum: -7 }, { type: "integer", minimum: -3, maximum: 12345 }, { type: "integer", minimum: 100 }, { type: "integer", maximum: -20 }], items: false, minItems: 4 },
    valid: [[-999, -3, 100, -20], [-8, 12345, 999999999, -21], [-500, 0, 101, -1000000]],
    invalid: [[-1000, 0, 100, -20], [-7, 0, 100, -20], [-8, 12346, 100, -20], [-8, 0, 99, -20], [-8, 0, 100, -19]],
  },
  {
    name: "number ranges with integer bounds",
    schema: { type: "array", prefixItems: [{ type: "number", minimum: 0, maximum: 1 }, { type: "number", exclusiveMinimum: -2, exclusiveMaximum: 3 }, { type: "number", minimum: 10 }], items: false, minItems: 3 },
    valid: [[0, -1.99, 10], [1, 2.999, 10.5], [0.5, 0, 1e6]],
    invalid: [[1.01, 0, 10], [0, -2, 10], [0, 3, 10], [0, 0, 9.99], [-0.1, 0, 10]],
  },
  {
    name: "strings with length bounds and escapes",
    schema: { type: "array", items: { type: "string", minLength: 2, maxLength: 3 }, maxItems: 3 },
    valid: [["ab", "a\"c", "\\n\t", "😀é"]].map((a) => a.slice(0, 3)),
    invalid: [["a"], ["abcd"]],
  },
];

describe("JSON Schema → GBNF: samples of the grammar validate", () => {
  for (const c of cases) {
    test(c.name, () => {
      const { g } = checkSamples(c.schema);
      const validate = validator(c.schema);
      for (const v of c.valid ?? []) {
        expect(validate(v)).toBe(true);
        expect({ doc: v, matches: g.matches(JSON.stringify(v)) }).toEqual({ doc: v, matches: true });
        expect({ doc: v, pretty: g.matches(pretty(v)) }).toEqual({ doc: v, pretty: true });
      }
      for (const v of c.invalid ?? []) {
        expect(validate(v)).toBe(false);
        expect({ doc: v, matches: g.matches(JSON.stringify(v)) }).toEqual({ doc: v, matches: false });
      }
    });
  }

  test("json_object: any object, and only objects", () => {
    const g = new Gbnf(jsonObjectGrammar());
    const r = rng(7);
    for (let i = 0; i < 300; i++) {
      const doc = JSON.parse(g.sample(r));
      expect(typeof doc === "object" && doc !== null && !Array.isArray(doc)).toBe(true);
    }
    for (const ok of [{}, { a: [1, { b: null }], "\u00e9": "\\\"" }]) expect(g.matches(JSON.stringify(ok))).toBe(true);
    for (const bad of ["[]", "1", '"x"', "{", '{"a":}', "{} "]) expect(g.matches(bad)).toBe(false);
  });

  test("whitespace is bounded: no endless run of spaces", () => {
    const g = new Gbnf(jsonSchemaToGrammar({ type: "object", properties: { a: { type: "integer" } } }));
    expect(g.matches('{ "a" : 1 }')).toBe(true);
    expect(g.matches(`{\n${" ".repeat(20)}"a": 1\n}`)).toBe(true);
    expect(g.isPrefix(`{\n${" ".repeat(21)}`)).toBe(false);
    expect(g.isPrefix("{  ")).toBe(false);
    expect(g.isPrefix("{ \n")).toBe(false);
    // nothing may follow the closing brace
    expect(g.matches('{"a": 1} ')).toBe(false);
  });

  test("integer ranges are exact", () => {
    for (const [lo, hi] of [[0, 0], [-1, 1], [7, 13], [-120, -3], [-45, 1234], [99, 1001], [0, 999999]] as const) {
      const g = new Gbnf(`root ::= ${intRange(lo, hi)}\n`);
      for (let v = lo - 30; v <= hi + 30; v += v > lo + 30 && v < hi - 30 ? Math.ceil((hi - lo) / 500) : 1) {
        expect({ v, in: g.matches(String(v)) }).toEqual({ v, in: v >= lo && v <= hi });
      }
      expect(g.matches("01")).toBe(false);
      expect(g.matches("-0")).toBe(false);
    }
  });

  test("decimal ranges are exact at their bounds", () => {
    const g = new Gbnf(`root ::= ${decimalRange(-2, true, 3, false)}\n`);
    for (const [t, ok] of [["-2", false], ["-1.999", true], ["-0.5", true], ["0", true], ["3", true], ["3.0", true], ["3.01", false], ["2.99", true], ["-2.0", false]] as const) {
      expect({ t, ok: g.matches(t) }).toEqual({ t, ok });
    }
  });
});

describe("pattern: regular expressions", () => {
  // [pattern, strings that match, strings that do not]
  const patterns: [string, string[], string[]][] = [
    ["^[a-z]+$", ["a", "hello"], ["", "Hello", "a1"]],
    ["^\\d{3}-\\d{4}$", ["555-1234"], ["5551234", "55-1234", "555-12345"]],
    ["^(cat|dog)s?$", ["cat", "dogs"], ["cats!", "bird", ""]],
    ["^[A-Z][a-z]*( [A-Z][a-z]*)*$", ["Ada", "Ada Lovelace"], ["ada", "Ada  Lovelace", "Ada "]],
    ["^\\w+@\\w+\\.(com|org)$", ["a@b.com", "x_1@y2.org"], ["a@b.net", "@b.com"]],
    ["^[^\"\\\\]{2,4}$", ["ab", "a b"], ["a", "abcde", 'a"b']],
    ["^(?:0x)?[0-9a-fA-F]{1,8}$", ["0xFF", "dead"], ["0x", "xyz"]],
    ["^\\s*\\S+\\s*$", ["  word ", "x"], ["two words", ""]],
    ["^.{0,3}$", ["", "a\"\\", "日本"], ["abcd", "a\nb"]],
    ["^(?<year>\\d{4})-(0[1-9]|1[0-2])$", ["2024-01", "1999-12"], ["2024-13", "24-01"]],
    ["^[\\u0041-\\u0043\\t]+$", ["ABC", "A\tB"], ["D", " "]],
    ["ab+c", ["abc", "xxabbbcyy"], ["ac", "a b c"]],
    ["^start|end$", ["start here", "the end"], ["no", "ends"]],
    ["^a\\.b\\/c\\?$", ["a.b/c?"], ["axb/c?"]],
    ["^$", [""], ["a"]],
  ];
  for (const [pattern, yes, no] of patterns) {
    test(pattern, () => {
      const schema = { type: "string", pattern };
      checkSamples(schema, 150);
      const g = new Gbnf(jsonSchemaToGrammar(schema));
      const re = new RegExp(pattern, "u");
      for (const v of yes) {
        expect(re.test(v)).toBe(true);
        expect({ v, in: g.matches(JSON.stringify(v)) }).toEqual({ v, in: true });
      }
      for (const v of no) {
        expect(re.test(v)).toBe(false);
        expect({ v, in: g.matches(JSON.stringify(v)) }).toEqual({ v, in: false });
      }
    });
  }

  test("unsupported regular expressions are errors naming the construct", () => {
    const fails = (pattern: string, message: RegExp) => expect(() => jsonSchemaToGrammar({ type: "string", pattern })).toThrow(message);
    fails("^(?=a)b$", /lookahead/);
    fails("^(a)\\1$", /backreferences/);
    fails("\\bword\\b", /word boundaries/);
    fails("^\\p{L}+$", /property escapes/);
    fails("a^b", /only supported at the start and end/);
    fails("^a{5000}$", /above the limit/);
    fails("^[b-a]$", /not a valid regular expression/);
    expect(() => jsonSchemaToGrammar({ type: "string", pattern: "^a+$", maxLength: 3 })).toThrow(/together with 'maxLength'/);
  });
});

describe("JSON Schema → GBNF fails closed", () => {
  const fails = (schema: unknown, message: RegExp) => {
    let err: unknown;
    const t0 = performance.now();
    try {
      jsonSchemaToGrammar(schema);
    } catch (e) {
      err = e;
    }
    expect(performance.now() - t0).toBeLessThan(3000);
    expect(err).toBeInstanceOf(SchemaError);
    expect((err as Error).message).toMatch(message);
  };

  test("unsupported keywords that change the language are named", () => {
    fails({ type: "string", pattern: "^(?!a)" }, /pattern: lookahead.*at #\/pattern/);
    fails({ not: { type: "null" } }, /'not'/);
    fails({ type: "object", if: { required: ["a"] }, then: { required: ["b"] } }, /'if'\/'then'/);
    fails({ type: "array", uniqueItems: true }, /uniqueItems/);
    fails({ type: "array", contains: { const: 1 } }, /contains/);
    fails({ type: "object", patternProperties: { "^x": {} } }, /patternProperties/);
    fails({ type: "integer", multipleOf: 3 }, /multipleOf/);
    fails({ type: "number", minimum: 0.5 }, /not integers/);
    fails({ type: "string", format: "uri" }, /format 'uri' is not supported/);
    fails({ type: "object", properties: { a: { type: "string", pattern: "(?<=x)" } } }, /#\/properties\/a\/pattern/);
    fails({ type: "object", minProperties: 2 }, /minProperties/);
  });

  test("contradictions and bad references", () => {
    fails(false, /false/);
    fails({ type: "integer", minimum: 5, maximum: 4 }, /no integer/);
    fails({ type: "array", minItems: 3, maxItems: 2 }, /at least 3/);
    fails({ type: "object", properties: {}, required: ["x"], additionalProperties: false }, /'x' is required/);
    fails({ $ref: "#/$defs/missing" }, /points to nothing/);
    fails({ $ref: "https://example.com/schema.json" }, /only local references/);
    fails({ allOf: [{ type: "string" }, { type: "integer" }] }, /no value in common/);
    fails({ oneOf: [{ type: "integer" }, { type: "number" }] }, /oneOf: branches 0 and 1/);
    fails({ type: "bogus" }, /unknown type/);
  });

  test("hostile inputs get clear errors, quickly", () => {
    fails({ type: "array", minItems: 1e9 }, /minItems 1000000000 is above the limit/);
    fails({ type: "string", maxLength: 1e6 }, /maxLength 1000000 is above the limit/);
    // cycles without progress
    fails({ $ref: "#" }, /cycle/);
    fails({ $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" }, /cycle/);
    fails({ anyOf: [{ $ref: "#" }, { type: "null" }] }, /cycle/);
    fails({ allOf: [{ $ref: "#" }] }, /cycle/);
    // deep nesting
    let deep: object = { type: "integer" };
    for (let i = 0; i < 200; i++) deep = { type: "array", items: deep };
    fails(deep, /nests deeper than 64/);
    // exponential expansion through references, cut by the budget
    const defs: Record<string, unknown> = { d0: { type: "integer" } };
    for (let i = 1; i < 40; i++) defs[`d${i}`] = { allOf: [{ $ref: `#/$defs/d${i - 1}` }, { $ref: `#/$defs/d${i - 1}` }] };
    fails({ $defs: defs, $ref: "#/$defs/d39" }, /more than|took longer/);
    // many repeated counts
    const props: Record<string, unknown> = {};
    for (let i = 0; i < 100; i++) props[`p${i}`] = { type: "string", maxLength: 2000 };
    fails({ type: "object", properties: props }, /add up to more than/);
    fails({ enum: Array.from({ length: 5000 }, (_, i) => i) }, /more than 2000 values/);
  });

  test("recursion through a value is fine", () => {
    const g = new Gbnf(jsonSchemaToGrammar({ $defs: { list: { anyOf: [{ type: "null" }, { type: "object", properties: { next: { $ref: "#/$defs/list" } }, required: ["next"] }] } }, $ref: "#/$defs/list" }));
    expect(g.matches('{"next":{"next":null}}')).toBe(true);
    expect(g.matches('{"next":{}}')).toBe(false);
  });
});
