// Hermes (NousResearch) and Qwen 2.5: <tool_call>{"name": …, "arguments": …}</tool_call>, one per call.
import type { ToolFormat } from "./format";
import { STD_KEYS } from "./format";
import { callObject, closing } from "./parse";

export const hermes: ToolFormat = {
  family: "hermes",
  detects: (s) => s.includes("<tool_call>"),
  call: (name, args, q) => `${q(`<tool_call>\n{"name": "${name}", "arguments": `)} ${args} ${q("}\n</tool_call>")}`,
  message: (_call, many) => many("\n"),
  openers: (names) => [{ marker: "<tool_call>", body: (t, _a, i, f) => closing(callObject(t, i, STD_KEYS, names, f), t, "</tool_call>", f) }],
};
