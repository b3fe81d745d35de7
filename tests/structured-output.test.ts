// Constrained decoding end to end: response_format (json_object, json_schema), llama.cpp's
// grammar and json_schema fields, through a real server and the official openai client, and
// `velo generate --json-schema/--grammar`. Random-weight and tiny models write garbage, so valid
// output over many seeds shows the grammar at work.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import OpenAI from "openai";
import { mkdtempSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Model } from "../src/engine/model";
import { jsonObjectGrammar } from "../src/grammar/json-schema";
import { runCli } from "./helpers/cli";
import { Gbnf } from "./helpers/gbnf";
import { testData } from "./helpers/paths";
import { postJson, type Running, startServer } from "./helpers/server";

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

const person = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    born: { type: "string", format: "date" },
    kind: { oneOf: [{ const: "cat" }, { const: "dog" }] },
    score: { type: "number", minimum: 0, maximum: 1 },
    tags: { type: "array", items: { enum: ["red", "green", "blue"] }, maxItems: 3 },
    nick: { type: ["string", "null"], maxLength: 6 },
    home: {
      type: "object",
      properties: { city: { type: "string", maxLength: 10 }, floor: { type: "integer", minimum: -2, maximum: 30 } },
      required: ["city"],
      additionalProperties: false,
    },
  },
  required: ["name", "age", "born", "kind"],
  additionalProperties: false,
};
const validPerson = ajv.compile(person);

function expectValid(text: string) {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new Error(`not JSON: ${text}`);
  }
  if (!validPerson(doc)) throw new Error(`invalid: ${text}\n${JSON.stringify(validPerson.errors)}`);
}

let stories: Running;
let openai: OpenAI;
const MODEL = "stories260K";

beforeAll(async () => {
  stories = await startServer([testData("stories260K.gguf"), "--max-batch-size", "8", "--ctx-size", "512"]);
  openai = new OpenAI({ baseURL: `${stories.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(() => stories?.proc.kill());

const messages = [{ role: "user" as const, content: "Tell me about a person." }];
const jsonSchemaFormat = { type: "json_schema" as const, json_schema: { name: "person", schema: person, strict: true } };

describe("json_schema: valid output over many seeds", () => {
  test("stories260K, 32 seeds (n = 4 per request), temperature 1", async () => {
    const texts: string[] = [];
    await Promise.all(Array.from({ length: 8 }, async (_, k) => {
      const params = { model: MODEL, messages, response_format: jsonSchemaFormat, n: 4, seed: 100 + k * 4, temperature: 1, top_k: 0, max_tokens: 400 };
      const r = await openai.chat.completions.create(params as OpenAI.ChatCompletionCreateParamsNonStreaming);
      expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
      for (const c of r.choices) {
        expect(c.finish_reason).toBe("stop");
        texts.push(c.message.content!);
      }
    }));
    for (const t of texts) expectValid(t);
    expect(new Set(texts).size).toBeGreaterThan(24); // different seeds, different documents
  }, 180_000);

  test("streamed output equals the non-streamed output of the same seed", async () => {
    for (const seed of [7, 8]) {
      const plain = await openai.chat.completions.create({ model: MODEL, messages, response_format: jsonSchemaFormat, seed, temperature: 1, max_tokens: 400 });
      let text = "";
      for await (const chunk of await openai.chat.completions.create({ model: MODEL, messages, response_format: jsonSchemaFormat, seed, temperature: 1, max_tokens: 400, stream: true })) {
        text += chunk.choices[0]?.delta.content ?? "";
      }
      expect(text).toBe(plain.choices[0]!.message.content!);
      expectValid(text);
    }
  }, 60_000);

  test("a random-weight Llama 3 (128k-token vocabulary), 8 seeds", async () => {
    const s = await startServer([testData("tiny-random-llama3-bpe.gguf"), "--max-batch-size", "4", "--ctx-size", "1024"]);
    try {
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "x", maxRetries: 0 });
      for (const seed of [1, 5]) {
        const r = await client.chat.completions.create({ model: "tiny-random-llama3-bpe", messages, response_format: jsonSchemaFormat, n: 4, seed, temperature: 1, max_tokens: 400 });
        for (const c of r.choices) {
          expect(c.finish_reason).toBe("stop");
          expectValid(c.message.content!);
        }
      }
    } finally {
      s.proc.kill();
    }
  }, 180_000);

  test("patterns (regular expressions) hold in generated strings", async () => {
    const schema = { type: "object", properties: { code: { type: "string", pattern: "^[A-Z][a-z]{2,5}-\\d{3}$" }, tag: { type: "string", pattern: "^#(red|green|blue)$" } }, required: ["code", "tag"], additionalProperties: false };
    const validate = ajv.compile(schema);
    for (const seed of [1, 2, 3]) {
      const r = await openai.chat.completions.create({ model: MODEL, messages, response_format: { type: "json_schema", json_schema: { name: "c", schema } }, n: 4, seed, temperature: 1, max_tokens: 200 });
      for (const c of r.choices) expect({ text: c.message.content, valid: validate(JSON.parse(c.message.content!)) }).toEqual({ text: c.message.content, valid: true });
    }
  }, 60_000);

  test("llama.cpp's json_schema field and the completions endpoint", async () => {
    const a = await postJson(`${stories.url}/v1/completions`, { model: MODEL, prompt: "Once upon a time", json_schema: person, seed: 3, temperature: 1, max_tokens: 400 });
    expect(a.status).toBe(200);
    expectValid(a.body.choices[0].text);
    const b = await openai.completions.create({ model: MODEL, prompt: "Once upon a time", seed: 4, temperature: 1, max_tokens: 400, response_format: jsonSchemaFormat } as OpenAI.CompletionCreateParamsNonStreaming);
    expectValid(b.choices[0]!.text);
    const c = await postJson(`${stories.url}/v1/chat/completions`, { model: MODEL, messages, response_format: { type: "json_object", schema: person }, seed: 5, max_tokens: 400 });
    expectValid(c.body.choices[0].message.content);
  }, 60_000);
});

describe("json_object and GBNF", () => {
  test("json_object: every streamed prefix can still become an object, finished ones are objects", async () => {
    const g = new Gbnf(jsonObjectGrammar());
    let finished = 0;
    // stories260K would go on adding members for ever: logit_bias bans every token with a comma
    // and favours '"' and '}', so that objects close
    const m = Model.open(testData("stories260K.gguf"));
    const logit_bias: Record<string, number> = {};
    for (let id = 0; id < m.info().tokenizer!.vocab_size; id++) {
      const piece = new TextDecoder().decode(m.pieceBytes(id));
      if (piece.includes(",")) logit_bias[id] = -100;
      else if (piece === '"' || piece === "}") logit_bias[id] = 6;
    }
    m.close();
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      let text = "";
      let reason: string | null = null;
      for await (const chunk of await openai.chat.completions.create({ model: MODEL, messages, response_format: { type: "json_object" }, logit_bias, seed, temperature: 1, max_tokens: 200, stream: true })) {
        text += chunk.choices[0]?.delta.content ?? "";
        reason = chunk.choices[0]?.finish_reason ?? reason;
        expect({ seed, text, prefix: g.isPrefix(text) }).toEqual({ seed, text, prefix: true });
      }
      if (reason === "stop") {
        finished++;
        const doc = JSON.parse(text);
        expect(typeof doc === "object" && doc !== null && !Array.isArray(doc)).toBe(true);
      }
    }
    expect(finished).toBeGreaterThanOrEqual(3);
  }, 120_000);

  test("a GBNF grammar (llama.cpp's grammar field), chat and completions", async () => {
    const grammar = 'root ::= ("yes" | "no") "!" [0-9]{2}';
    const seen = new Set<string>();
    for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
      const r = await postJson(`${stories.url}/v1/chat/completions`, { model: MODEL, messages, grammar, seed, temperature: 1.5, max_tokens: 50 });
      expect(r.status).toBe(200);
      const text = r.body.choices[0].message.content as string;
      expect(text).toMatch(/^(yes|no)![0-9]{2}$/);
      expect(r.body.choices[0].finish_reason).toBe("stop");
      seen.add(text);
      const c = await postJson(`${stories.url}/v1/completions`, { model: MODEL, prompt: "Once", grammar, seed, temperature: 1.5, max_tokens: 50 });
      expect(c.body.choices[0].text).toMatch(/^(yes|no)![0-9]{2}$/);
    }
    expect(seen.size).toBeGreaterThan(2);
  }, 60_000);
});

describe("schemas and grammars that cannot be used are 400s with the reason", () => {
  const bad = async (format: object, param: string, message: RegExp) => {
    const e = await openai.chat.completions.create({ model: MODEL, messages, max_tokens: 4, ...format } as OpenAI.ChatCompletionCreateParamsNonStreaming).then(() => null, (x) => x);
    expect(e).toBeInstanceOf(OpenAI.BadRequestError);
    expect(e.param).toBe(param);
    expect(e.message).toMatch(message);
    return e;
  };
  const schema = (s: unknown) => ({ response_format: { type: "json_schema", json_schema: { name: "x", schema: s } } });
  const P = "response_format.json_schema.schema";

  test("unsupported keywords, formats, references", async () => {
    const e = await bad(schema({ type: "object", properties: { id: { type: "string", pattern: "^(?=x)[a-z]+$" } } }), P, /pattern: lookahead.*#\/properties\/id\/pattern/);
    expect(e.code).toBe("invalid_json_schema");
    await bad(schema({ type: "string", format: "uri" }), P, /format 'uri' is not supported/);
    await bad(schema({ not: { type: "null" } }), P, /'not' is not supported/);
    await bad(schema({ $ref: "#/$defs/missing" }), P, /points to nothing/);
    await bad(schema({ $ref: "https://example.com/s.json" }), P, /only local references/);
  }, 30_000);

  test("hostile schemas", async () => {
    await bad(schema({ type: "array", minItems: 1e9 }), P, /above the limit/);
    await bad(schema({ $ref: "#" }), P, /cycle/);
    let deep: object = { type: "string" };
    for (let i = 0; i < 300; i++) deep = { type: "object", properties: { a: deep }, required: ["a"] };
    await bad(schema(deep), P, /nests deeper/);
    await bad({ json_schema: { type: "integer", minimum: 3, maximum: 2 } }, "json_schema", /no integer/);
  }, 30_000);

  test("grammars that do not compile, and conflicting formats", async () => {
    const e = await bad({ grammar: "root ::= missing" }, "grammar", /missing/);
    expect(e.code).toBe("invalid_grammar");
    await bad({ grammar: 'root ::= "unterminated' }, "grammar", /unterminated/);
    await bad({ grammar: "root ::= x\nx ::= x \"a\"" }, "grammar", /recurs/i);
    await bad({ grammar: 'root ::= "a"', response_format: { type: "json_object" } }, "response_format", /only one of/);
    const c = await postJson(`${stories.url}/v1/completions`, { model: MODEL, prompt: "x", grammar: "root ::= [" });
    expect(c.status).toBe(400);
    expect(c.body.error.param).toBe("grammar");
    const r = await postJson(`${stories.url}/v1/chat/completions`, { model: MODEL, messages, response_format: { type: "xml" } });
    expect(r.status).toBe(400);
  }, 30_000);
});

describe("velo generate --json-schema / --grammar", () => {
  const dir = mkdtempSync("/tmp/velo-grammar-");
  const model = () => testData("stories260K.gguf");

  test("a schema given inline or as a file constrains the output", async () => {
    const small = { type: "object", properties: { n: { type: "integer", minimum: 1, maximum: 5 }, ok: { type: "boolean" } }, required: ["n", "ok"], additionalProperties: false };
    const file = join(dir, "schema.json");
    writeFileSync(file, JSON.stringify(small));
    for (const arg of [JSON.stringify(small), file]) {
      for (const seed of ["1", "2", "3"]) {
        const r = await runCli(["generate", model(), "Once upon a time", "--json-schema", arg, "-s", seed, "--json", "-n", "100"]);
        expect(r.code).toBe(0);
        const out = JSON.parse(r.stdout);
        expect(out.finish_reason).toBe("stop");
        expect(ajv.validate(small, JSON.parse(out.text))).toBe(true);
      }
    }
  }, 60_000);

  test("a GBNF grammar file", async () => {
    const file = join(dir, "answer.gbnf");
    writeFileSync(file, 'root ::= "The answer is " [0-9] "."\n');
    const r = await runCli(["generate", model(), "Once upon a time", "--grammar", file, "-s", "4"]);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toMatch(/^The answer is [0-9]\.$/);
  }, 30_000);

  test("bad schemas and grammars are usage errors", async () => {
    let r = await runCli(["generate", model(), "x", "--json-schema", '{"type": "string", "not": {"const": "a"}}']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--json-schema: 'not' is not supported/);
    r = await runCli(["generate", model(), "x", "--json-schema", "{not json"]);
    expect(r.code).toBe(2);
    const file = join(dir, "bad.gbnf");
    writeFileSync(file, "root ::= nowhere\n");
    r = await runCli(["generate", model(), "x", "--grammar", file]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/nowhere/);
    r = await runCli(["generate", model(), "x", "--grammar", file, "--json-schema", "{}"]);
    expect(r.code).not.toBe(0);
  }, 30_000);
});
