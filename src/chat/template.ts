// Chat prompts from the model's own `tokenizer.chat_template`, rendered with
// @huggingface/jinja; a plain transcript format when a model has no template.
import { Template } from "@huggingface/jinja";

export type Role = "system" | "user" | "assistant" | "tool";

export interface ChatMessage {
  role: Role;
  content: string;
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

export class ChatTemplate {
  readonly #template: Template;

  constructor(
    readonly source: string,
    readonly context: TemplateContext = {},
  ) {
    try {
      this.#template = new Template(source);
    } catch (e) {
      throw new Error(`the chat template does not parse: ${(e as Error).message}`);
    }
  }

  static forModel(metadata: Record<string, unknown>, context: TemplateContext): ChatTemplate {
    const src = metadata["tokenizer.chat_template"];
    return new ChatTemplate(typeof src === "string" && src.trim() ? src : FALLBACK_TEMPLATE, context);
  }

  get isFallback(): boolean {
    return this.source === FALLBACK_TEMPLATE;
  }

  render(messages: ChatMessage[], addGenerationPrompt = true): string {
    try {
      return this.#render(messages, addGenerationPrompt);
    } catch (e) {
      // Some templates (Gemma's) refuse a system role: fold it into the first user turn, as
      // those models' own chat formats do.
      const system = messages.filter((m) => m.role === "system");
      const firstUser = messages.findIndex((m) => m.role === "user");
      if (system.length && firstUser >= 0 && /system/i.test((e as Error).message)) {
        const rest = messages.filter((m) => m.role !== "system");
        const i = rest.findIndex((m) => m.role === "user");
        rest[i] = { role: "user", content: `${system.map((m) => m.content).join("\n\n")}\n\n${rest[i]!.content}` };
        try {
          return this.#render(rest, addGenerationPrompt);
        } catch {
          // report the original problem below
        }
      }
      throw new Error(`the chat template failed to render: ${(e as Error).message}`);
    }
  }

  #render(messages: ChatMessage[], addGenerationPrompt: boolean): string {
    return this.#template.render({
      messages,
      add_generation_prompt: addGenerationPrompt,
      bos_token: this.context.bosToken ?? "",
      eos_token: this.context.eosToken ?? "",
    });
  }
}
