// Chat prompts from the model's own `tokenizer.chat_template`, rendered with
// @huggingface/jinja; a plain transcript format when a model has no template. Tools go into the
// template's context as Hugging Face's apply_chat_template passes them.
import { Template } from "@huggingface/jinja";
import { detectFamily, genericToolPrompt, type Tool, type ToolCall, type ToolFamily } from "./tools";

export type Role = "system" | "user" | "assistant" | "tool";

export interface ChatMessage {
  role: Role;
  content: string | null;
  name?: string;
  /** An assistant turn's tool calls (arguments as JSON text, as the OpenAI API carries them). */
  tool_calls?: ToolCall[];
  /** A tool turn: the call it answers. */
  tool_call_id?: string;
}

export interface RenderOptions {
  /** Tools the model may call (rendered by the template, or described in a system message). */
  tools?: Tool[];
}

export interface TemplateContext {
  bosToken?: string;
  eosToken?: string;
}

/** Used for models without a chat template (e.g. base models such as stories260K). */
export const FALLBACK_TEMPLATE =
  "{% for message in messages %}" +
  "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n" +
  "{% elif message['role'] == 'user' %}User: {{ message['content'] }}\n" +
  "{% else %}Assistant: {{ message['content'] }}\n{% endif %}" +
  "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}";

/**
 * Rewrites two Python-Jinja habits @huggingface/jinja does not share: `x|trim` of an undefined
 * value (Python renders ""), and tuples in list literals (`[("a", "b")]`, unpacked in for loops).
 */
function adapt(source: string): string {
  return source
    .replace(/\|\s*trim\b/g, '|default("")|trim')
    .replace(/(?<=[[,]\s*)\(\s*("[^"\n]*"|'[^'\n]*')\s*,\s*("[^"\n]*"|'[^'\n]*')\s*\)/g, "[$1, $2]");
}

export class ChatTemplate {
  readonly #template: Template;
  readonly family: ToolFamily;
  #argumentsAsObject: boolean | undefined;

  constructor(
    readonly source: string,
    readonly context: TemplateContext = {},
  ) {
    try {
      this.#template = new Template(adapt(source));
    } catch (e) {
      throw new Error(`the chat template does not parse: ${(e as Error).message}`);
    }
    this.family = detectFamily(source);
  }

  static forModel(metadata: Record<string, unknown>, context: TemplateContext): ChatTemplate {
    const src = metadata["tokenizer.chat_template"];
    return new ChatTemplate(typeof src === "string" && src.trim() ? src : FALLBACK_TEMPLATE, context);
  }

  get isFallback(): boolean {
    return this.source === FALLBACK_TEMPLATE;
  }

  render(messages: ChatMessage[], addGenerationPrompt = true, opts: RenderOptions = {}): string {
    const tools = opts.tools?.length ? opts.tools : undefined;
    if (this.family === "generic") messages = genericMessages(messages, tools);
    try {
      return this.#render(messages, addGenerationPrompt, this.family === "generic" ? undefined : tools);
    } catch (e) {
      // Some templates (Gemma's) refuse a system role: fold it into the first user turn, as
      // those models' own chat formats do.
      const system = messages.filter((m) => m.role === "system");
      const firstUser = messages.findIndex((m) => m.role === "user");
      if (system.length && firstUser >= 0 && /system/i.test((e as Error).message)) {
        const rest = messages.filter((m) => m.role !== "system");
        const i = rest.findIndex((m) => m.role === "user");
        rest[i] = { role: "user", content: `${system.map((m) => m.content ?? "").join("\n\n")}\n\n${rest[i]!.content ?? ""}` };
        try {
          return this.#render(rest, addGenerationPrompt, this.family === "generic" ? undefined : tools);
        } catch {
          // report the original problem below
        }
      }
      throw new Error(`the chat template failed to render: ${(e as Error).message}`);
    }
  }

  #render(messages: ChatMessage[], addGenerationPrompt: boolean, tools: Tool[] | undefined, asObject?: boolean): string {
    const objects = asObject ?? this.argumentsAsObject;
    const ids = this.#idMap();
    const prepared = messages.map((m) => {
      const out: Record<string, unknown> = { role: m.role, content: m.content ?? "" };
      if (m.name !== undefined) out.name = m.name;
      if (m.tool_call_id !== undefined) out.tool_call_id = ids(m.tool_call_id);
      if (m.tool_calls?.length) {
        out.tool_calls = m.tool_calls.map((c) => ({
          id: ids(c.id),
          type: "function",
          function: { name: c.function.name, arguments: objects ? parseArguments(c.function.arguments) : c.function.arguments },
        }));
      }
      return out;
    });
    const ctx: Record<string, unknown> = {
      messages: prepared,
      add_generation_prompt: addGenerationPrompt,
      bos_token: this.context.bosToken ?? "",
      eos_token: this.context.eosToken ?? "",
    };
    const withTools = (list: Tool[]) => {
      // FireFunction v2 reads functions and datetime (llama.cpp passes them too)
      const functions = list.length ? JSON.stringify(list.map((t) => t.function), null, 2) : "";
      return this.#template.render({ ...ctx, tools: list, functions, datetime: new Date().toUTCString().slice(5, 16) });
    };
    if (tools) return withTools(tools);
    try {
      return this.#template.render(ctx);
    } catch (e) {
      // tool-use templates (Hermes, Functionary, Command-R) need a tools list even when empty
      try {
        return withTools([]);
      } catch {
        throw e;
      }
    }
  }

  /**
   * Whether the template wants a call's arguments as an object (it applies tojson, as Llama 3.x,
   * Qwen 2.5 and Mistral do) or as the JSON text (it concatenates them, as Functionary does):
   * found by rendering a probe conversation both ways.
   */
  get argumentsAsObject(): boolean {
    if (this.#argumentsAsObject !== undefined) return this.#argumentsAsObject;
    const call: ToolCall = { id: "call00001", type: "function", function: { name: "probe_tool", arguments: '{"probe_arg": "probe_value"}' } };
    const tool: Tool = { type: "function", function: { name: "probe_tool", description: "probe", parameters: { type: "object", properties: { probe_arg: { type: "string", description: "probe" } } } } };
    const probe: ChatMessage[] = [
      { role: "user", content: "probe" },
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", tool_call_id: "call00001", content: "probe_result" },
      { role: "assistant", content: "done" },
      { role: "user", content: "again" },
    ];
    let result = true;
    try {
      const out = this.#render(probe, true, [tool], true);
      // the value, not the key (the key is in the tool's schema too)
      result = out.includes('"probe_value"') && !out.includes('\\"probe_value');
    } catch {
      result = false;
    }
    this.#argumentsAsObject = result;
    return result;
  }

  /** Call ids as the template accepts them (Mistral's must be 9 letters or digits). */
  #idMap(): (id: string) => string {
    if (!/length\s*!=\s*9/.test(this.source)) return (id) => id;
    const abc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    return (id) => {
      if (/^[A-Za-z0-9]{9}$/.test(id)) return id;
      let h = 2166136261;
      for (const ch of id) h = Math.imul(h ^ ch.codePointAt(0)!, 16777619) >>> 0;
      let out = "";
      for (let i = 0; i < 9; i++) {
        out += abc[h % abc.length];
        h = Math.imul(h ^ (i + 1), 2654435761) >>> 0;
      }
      return out;
    };
  }
}

/** Arguments as an object for templates that serialize them (left as text when not JSON). */
function parseArguments(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

/**
 * For templates without tool syntax: the tools described in the system message, earlier calls
 * written as the JSON the model is asked for, tool results as user turns.
 */
function genericMessages(messages: ChatMessage[], tools: Tool[] | undefined): ChatMessage[] {
  const out: ChatMessage[] = messages.map((m) => {
    if (m.role === "assistant" && m.tool_calls?.length) {
      const calls = JSON.stringify({ tool_calls: m.tool_calls.map((c) => ({ name: c.function.name, arguments: parseArguments(c.function.arguments) })) });
      return { role: "assistant", content: m.content ? `${m.content}\n${calls}` : calls };
    }
    if (m.role === "tool") {
      return { role: "user", content: JSON.stringify({ tool_response: { tool_call_id: m.tool_call_id, name: m.name, content: m.content ?? "" } }) };
    }
    return m;
  });
  if (!tools) return out;
  const prompt = genericToolPrompt(tools);
  if (out[0]?.role === "system") return [{ role: "system", content: `${out[0].content ?? ""}\n\n${prompt}` }, ...out.slice(1)];
  return [{ role: "system", content: prompt }, ...out];
}
