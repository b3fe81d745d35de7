// Chat templates (real models' Jinja templates through @huggingface/jinja) and `velo chat`
// driven through piped stdin, as a script would.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ChatTemplate, FALLBACK_TEMPLATE } from "../src/chat/template";
import { Model } from "../src/engine/model";
import { runCli } from "./helpers/cli";
import { dataDir, testData } from "./helpers/paths";

const messages = [
  { role: "system" as const, content: "You are terse." },
  { role: "user" as const, content: "Hi there" },
  { role: "assistant" as const, content: "Hello." },
  { role: "user" as const, content: "Tell me a story" },
];

describe("chat templates", () => {
  // Tool-calling templates (Hermes/Command-R tool_use, Functionary, FireFunction) need a `tools`
  // list to render; Velo does not do tool calling yet, so they are left out here.
  test("every shared chat (non tool-calling) template renders a conversation", () => {
    const dir = join(dataDir, "templates");
    const files = readdirSync(dir).filter((f) => f.endsWith(".jinja") && !/tool_use|functionary|firefunction/.test(f));
    expect(files.length).toBeGreaterThanOrEqual(10);
    for (const f of files) {
      const t = new ChatTemplate(readFileSync(join(dir, f), "utf8"), { bosToken: "<s>", eosToken: "</s>" });
      const out = t.render(messages);
      expect(out).toContain("Tell me a story");
      expect(out).toContain("Hi there");
    }
  });

  // the templates of the architectures Velo loads besides Llama: each turn in its own markers,
  // ending with the assistant's opening
  const formats: [string, RegExp, string][] = [
    ["Qwen-Qwen2.5-7B-Instruct.jinja", /<\|im_start\|>system\nYou are terse\.<\|im_end\|>\n<\|im_start\|>user\nHi there<\|im_end\|>/, "<|im_start|>assistant\n"],
    // Gemma refuses a system role: it is folded into the first user turn
    ["google-gemma-2-2b-it.jinja", /^<bos><start_of_turn>user\nYou are terse\.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello\.<end_of_turn>/, "<start_of_turn>model\n"],
    ["microsoft-Phi-3.5-mini-instruct.jinja", /<\|system\|>\nYou are terse\.<\|end\|>\n<\|user\|>\nHi there<\|end\|>\n<\|assistant\|>\nHello\.<\|end\|>/, "<|assistant|>\n"],
    // the 2026 families' own templates (as llama.cpp's models/templates keeps them): gpt-oss's
    // Harmony (its system header with today's date, the system prompt as the developer's
    // instructions, answers in the final channel), Qwen3.5's (the generation prompt opens its
    // thinking), Gemma 4's (an empty thought channel opens the model's turn)
    ["openai-gpt-oss-120b.jinja", /^<\|start\|>system<\|message\|>You are ChatGPT, a large language model trained by OpenAI\.\nKnowledge cutoff: 2024-06\nCurrent date: \d{4}-\d\d-\d\d\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final\. Channel must be included for every message\.<\|end\|><\|start\|>developer<\|message\|># Instructions\n\nYou are terse\.\n\n<\|end\|><\|start\|>user<\|message\|>Hi there<\|end\|><\|start\|>assistant<\|channel\|>final<\|message\|>Hello\.<\|end\|>/, "<|start|>assistant"],
    ["Qwen3.5-4B.jinja", /^<\|im_start\|>system\nYou are terse\.<\|im_end\|>\n<\|im_start\|>user\nHi there<\|im_end\|>\n<\|im_start\|>assistant\nHello\.<\|im_end\|>/, "<|im_start|>assistant\n<think>\n"],
    ["google-gemma-4-31B-it.jinja", /^<bos><\|turn>system\nYou are terse\.<turn\|>\n<\|turn>user\nHi there<turn\|>\n<\|turn>model\nHello\.<turn\|>/, "<|turn>model\n<|channel>thought\n<channel|>"],
  ];
  for (const [file, turns, opening] of formats) {
    test(`${file.replace(/\.jinja$/, "")}'s format`, () => {
      const t = new ChatTemplate(readFileSync(join(dataDir, "templates", file), "utf8"), { bosToken: "<bos>", eosToken: "<eos>" });
      const out = t.render(messages);
      expect(out).toMatch(turns);
      expect(out.endsWith(opening)).toBe(true);
      expect(t.render(messages, false).endsWith(opening)).toBe(false);
    });
  }

  test("Llama 3.2's template from the model file", () => {
    const m = Model.open(testData("tiny-random-llama3-bpe.gguf"));
    const t = ChatTemplate.forModel(m.info().metadata, { bosToken: "<|begin_of_text|>", eosToken: "<|eot_id|>" });
    expect(t.isFallback).toBe(false);
    const out = t.render([{ role: "user", content: "Hello" }]);
    expect(out.startsWith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>")).toBe(true);
    expect(out.endsWith("<|start_header_id|>assistant<|end_header_id|>\n\n")).toBe(true);
    const ids = Array.from(m.tokenize(out, { addSpecial: false, parseSpecial: true }));
    expect(ids[0]).toBe(128000);
    expect(ids).toContain(128009); // <|eot_id|> parsed as one special token
    m.close();
  });

  test("models without a template use the plain transcript", () => {
    const t = ChatTemplate.forModel({}, {});
    expect(t.source).toBe(FALLBACK_TEMPLATE);
    expect(t.render([{ role: "user", content: "Hi" }])).toBe("User: Hi\nAssistant:");
  });

  test("a broken template is a clear error", () => {
    expect(() => new ChatTemplate("{% for x in %}")).toThrow(/chat template does not parse/);
  });
});

describe("velo chat with piped stdin", () => {
  test("answers each line, keeps the conversation, handles commands", async () => {
    const input = ["Once upon a time", "/help", "What happened next?", "/bye", "never read"].join("\n") + "\n";
    const r = await runCli(["chat", testData("stories260K.gguf"), "--temp", "0", "-n", "16", "-c", "512"], { stdin: input });
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    const out = r.stdout;
    expect(out).toContain("/system TEXT"); // the help text
    const replies = out.split("commands:")[0]!.trim();
    expect(replies.length).toBeGreaterThan(10);
    expect(out).not.toContain("never read");
  });

  test("multi-line messages and /clear", async () => {
    const input = "Once upon \\\na time\n/clear\n/system Be nice\nHello\n";
    const r = await runCli(["chat", testData("stories260K.gguf"), "--temp", "0", "-n", "8", "-c", "512"], { stdin: input });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("(conversation cleared)");
    expect(r.stdout).toContain("(system prompt set; conversation restarted)");
  });

  test('""" blocks, /set, /save and /load', async () => {
    const dir = mkdtempSync(join(tmpdir(), "velo-chat-"));
    const file = join(dir, "conv.json");
    const input = ['"""Once upon a time', "there was a dog", '"""', "/set temp 0.25", "/set top-k 7", "/set", "/set warmth 3", `/save ${file}`, "/bye"].join("\n") + "\n";
    const r = await runCli(["chat", testData("stories260K.gguf"), "--temp", "0", "-n", "8", "-c", "512"], { stdin: input });
    expect(r.stdout).toContain("(temp = 0.25)");
    expect(r.stdout).toMatch(/^top-k 7$/m);
    expect(r.stderr).toMatch(/velo: error: usage: \/set NAME VALUE/);
    expect(r.code).toBe(1); // the bad /set, reported; the session went on
    const saved = JSON.parse(readFileSync(file, "utf8"));
    expect(saved.messages.length).toBe(2);
    expect(saved.messages[0]).toEqual({ role: "user", content: "Once upon a time\nthere was a dog" });
    expect(saved.messages[1].role).toBe("assistant");
    expect(saved.settings).toMatchObject({ temperature: 0.25, topK: 7 });
    const back = await runCli(["chat", testData("stories260K.gguf"), "-n", "4", "-c", "512"], { stdin: `/load ${file}\n/set\n/save ${file}.2\n` });
    expect(back.code).toBe(0);
    expect(back.stdout).toContain(`(loaded 2 messages from ${file})`);
    expect(back.stdout).toMatch(/^temp 0.25$/m);
    expect(JSON.parse(readFileSync(`${file}.2`, "utf8")).messages).toEqual(saved.messages);
    const bad = await runCli(["chat", testData("stories260K.gguf"), "-c", "512"], { stdin: `/load ${join(dir, "none.json")}\n` });
    expect(bad.stderr).toMatch(/velo: error: file not found/);
    rmSync(dir, { recursive: true, force: true });
  });

  test("a conversation that outgrows the context drops its oldest turns, keeps the system prompt, and goes on", async () => {
    const lines = ["Once upon a time there was a little girl named Lily", "She liked to play with her ball in the park", "One day she met a big dog", "The dog was very friendly and happy", "They played all day long"];
    const r = await runCli(["chat", testData("stories260K.gguf"), "--temp", "0", "-n", "16", "-c", "64", "--system", "Tell a story"], { stdin: lines.join("\n") + "\n" });
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    expect(r.stdout).toMatch(/\(context full: dropped the oldest \d+ messages?, kept the system prompt\)/);
  });

  test("a prompt that outgrows the context is an error, not a truncation", async () => {
    const r = await runCli(["chat", testData("stories260K.gguf"), "-c", "16"], { stdin: "Once upon a time there was a little girl named Lily who liked to play\n" });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/velo: error: .*context size 16/);
  });
});
