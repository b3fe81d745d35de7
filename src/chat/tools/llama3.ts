// Llama 3.1-3.3: {"name": …, "parameters": …} as the whole message (one call per message), or
// after <|python_tag|>, several separated by ';'.
import type { ToolFormat } from "./format";
import { type BodyResult, type CallKeys, callObject, type ParsedCall } from "./parse";
import { skipWs } from "../json-scan";

export const llama3: ToolFormat = {
  family: "llama3",
  detects: (s) => s.includes("<|start_header_id|>") && s.includes('"parameters"'),
  call: (name, args, q) => `${q(`{"name": "${name}", "parameters": `)} ${args} ${q("}")}`,
  message: (call) => call, // one call per message in Llama 3.x
  openers: (names) => {
    const keys: CallKeys = { name: ["name"], args: ["parameters", "arguments"], extra: ["type"] };
    // several calls may be separated by ';'
    const seq = (t: string, i: number, f: boolean): BodyResult => {
      const calls: ParsedCall[] = [];
      for (;;) {
        const r = callObject(t, i, keys, names, f);
        if (r.kind !== "calls") return calls.length ? { kind: "calls", calls, end: r.kind === "undecided" ? null : i } : r;
        calls.push(...r.calls);
        if (r.end === null) return { kind: "calls", calls, end: null };
        const j = skipWs(t, r.end);
        if (t[j] !== ";") return { kind: "calls", calls, end: r.end };
        i = j + 1;
      }
    };
    return [
      { marker: "<|python_tag|>", body: (t, _a, i, f) => seq(t, i, f) },
      { marker: "<|eom_id|>", body: (_t, _a, i) => ({ kind: "calls", calls: [], end: i }) },
      { marker: "{", atStart: true, body: (t, a, _i, f) => seq(t, a, f) },
    ];
  },
};
