// Command R7B: <|START_ACTION|>[{"tool_call_id": "0", "tool_name": …, "parameters": …}]<|END_ACTION|>,
// with its thinking between <|START_THINKING|> and <|END_THINKING|> (skipped) and the answer
// between <|START_RESPONSE|> and <|END_RESPONSE|>.
import type { ToolFormat } from "./format";
import { type BodyResult, type CallKeys, callArray, closing } from "./parse";

export const commandR7b: ToolFormat = {
  family: "command-r7b",
  detects: (s) => s.includes("<|START_ACTION|>"),
  call: (name, args, q) => `${q(`{"tool_call_id": "`)} [0-9]{1,3} ${q(`", "tool_name": "${name}", "parameters": `)} ${args} ${q("}")}`,
  message: (_call, many, q) => `${q("<|START_ACTION|>[\n    ")} ${many(",\n    ")} ${q("\n]<|END_ACTION|>")}`,
  openers: (names) => {
    const keys: CallKeys = { name: ["tool_name"], args: ["parameters"], extra: ["tool_call_id"] };
    const skipTo = (close: string) => (t: string, _a: number, i: number): BodyResult => {
      const e = t.indexOf(close, i);
      return { kind: "calls", calls: [], end: e < 0 ? null : e + close.length };
    };
    return [
      { marker: "<|START_ACTION|>", body: (t, _a, i, f) => closing(callArray(t, i, keys, names, f), t, "<|END_ACTION|>", f) },
      { marker: "<|START_THINKING|>", body: skipTo("<|END_THINKING|>") },
      { marker: "<|START_RESPONSE|>", body: (_t, _a, i) => ({ kind: "calls", calls: [], end: i }) },
      { marker: "<|END_RESPONSE|>", body: (_t, _a, i) => ({ kind: "calls", calls: [], end: i }) },
    ];
  },
};
