// What a tool-call format is: one module per family (llama3.ts, hermes.ts, …) implements this,
// and registry.ts lists them in the order detection tries them. A new family is one file plus
// a registry line.
import type { Collector, Opener } from "./parse";

export interface ToolFunction {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;
  strict?: boolean | null;
}
export interface Tool {
  type: "function";
  function: ToolFunction;
}
export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}
export type ToolChoice = "none" | "auto" | "required" | { type: "function"; function: { name: string } };

export type ToolFamily =
  | "llama3"
  | "hermes"
  | "mistral"
  | "functionary-v3.1"
  | "functionary-v3.2"
  | "firefunction"
  | "command-r7b"
  | "command-r-plus"
  | "generic";

export interface ToolFormat {
  family: ToolFamily;
  /** Whether a chat template's text teaches its model this syntax. */
  detects(source: string): boolean;
  /** GBNF of one call of `name` whose arguments are the rule `args` (`q` quotes a literal). */
  call(name: string, args: string, q: (s: string) => string): string;
  /** GBNF of a message's calls: `many(sep)` is one call, or several separated by `sep` when parallel. */
  message(call: string, many: (sep: string) => string, q: (s: string) => string): string;
  /** The markers that open calls in the output, and how what follows each is read. */
  openers(names: Set<string>): Opener[];
  /** A parser of its own instead of markers (Functionary v3.2's `>>>` segments). */
  parse?(text: string, final: boolean, names: Set<string>): Collector;
  /** Whether its output needs parsing even without tools (the prompt opens a segment). */
  alwaysParsed?: boolean;
  /** Call ids as its template demands them (default: OpenAI-like `call_…`). */
  callId?(pick: (n: number) => string): string;
}

/** The usual call object's keys: {"name": …, "arguments": …}. */
export const STD_KEYS = { name: ["name"], args: ["arguments"], extra: ["id", "type"] };
