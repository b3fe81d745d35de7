// Fuzz harness for chat-template rendering (src/chat/template.ts), run by Jazzer.js (libFuzzer's
// engine on Node, coverage-guided through its instrumentation of this bundle, @huggingface/jinja
// included). fuzz/run.sh bundles it to fuzz/.build/template.js.
//
// Two attack surfaces, chosen by the first byte:
// - hostile messages (what any client sends) through each real template of tests/data/
//   templates: roles, content, names, tool calls with arbitrary arguments and ids, tools;
// - a hostile template (what a GGUF file carries) rendering a plain conversation.
// The contract: a string, or an Error whose message says the template did not parse or render
// (the server turns it into a 400). Anything else escaping (a TypeError from our own code, a
// stack overflow, a non-Error throw) is a finding, and so is a hang (libFuzzer's -timeout).
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { FuzzedDataProvider } from "@jazzer.js/core";
import { type ChatMessage, ChatTemplate, type Role } from "../src/chat/template";
import type { Tool } from "../src/chat/tools";

// fuzz/run.sh says where (VELO_TEMPLATES); else beside this file's folder (bun's bundle keeps
// the source file's __dirname, fuzz/)
const dir = process.env.VELO_TEMPLATES ?? join(process.env.VELO_TEST_DATA ?? join(__dirname, "..", "tests", "data"), "templates");
const templates = readdirSync(dir).filter((f) => f.endsWith(".jinja")).sort()
  .map((f) => new ChatTemplate(readFileSync(join(dir, f), "utf8"), { bosToken: "<s>", eosToken: "</s>" }));
const roles: Role[] = ["system", "user", "assistant", "tool"];
const controls = ["<|eot_id|>", "<|im_start|>system", "[INST]", "{{", "{%", "<tool_call>", "[TOOL_CALLS]", "\u0000", "\ud800"];

function text(d: FuzzedDataProvider, max: number): string {
  // splice a control-token spelling in now and then: the template must carry it as text
  const s = d.consumeString(d.consumeIntegralInRange(0, max), "utf-8");
  return d.consumeBoolean() ? s + d.pickValue(controls) + s : s;
}

function messages(d: FuzzedDataProvider): ChatMessage[] {
  const out: ChatMessage[] = [];
  const n = d.consumeIntegralInRange(0, 8);
  for (let i = 0; i < n; i++) {
    const m: ChatMessage = { role: d.pickValue(roles), content: d.consumeBoolean() ? text(d, 64) : null };
    if (d.consumeBoolean()) m.name = text(d, 8);
    if (m.role === "tool") m.tool_call_id = text(d, 12);
    if (m.role === "assistant" && d.consumeBoolean()) {
      m.tool_calls = Array.from({ length: d.consumeIntegralInRange(1, 3) }, () => ({
        id: text(d, 12), type: "function" as const, function: { name: text(d, 12), arguments: text(d, 48) },
      }));
    }
    out.push(m);
  }
  return out;
}

function tools(d: FuzzedDataProvider): Tool[] | undefined {
  if (!d.consumeBoolean()) return undefined;
  return Array.from({ length: d.consumeIntegralInRange(1, 3) }, () => ({
    type: "function" as const,
    function: { name: text(d, 12), description: text(d, 24), parameters: { type: "object", properties: { [text(d, 8)]: { type: "string" } } } },
  }));
}

function expected(e: unknown): boolean {
  return e instanceof Error && /^the chat template (does not parse|failed to render)/.test(e.message);
}

export function fuzz(data: Buffer): void {
  const d = new FuzzedDataProvider(data);
  try {
    if (d.consumeIntegralInRange(0, 3) > 0) {
      const t = templates[d.consumeIntegralInRange(0, templates.length - 1)]!;
      t.render(messages(d), d.consumeBoolean(), { tools: tools(d) });
    } else {
      const t = new ChatTemplate(d.consumeString(d.consumeIntegralInRange(0, 2048), "utf-8"));
      t.render([{ role: "system", content: "s" }, { role: "user", content: "u" }, { role: "assistant", content: "a" }], true);
    }
  } catch (e) {
    if (!expected(e)) throw e;
  }
}
