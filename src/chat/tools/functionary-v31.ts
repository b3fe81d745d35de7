// Functionary v3.1 (Llama 3.1 based): <function=name>{arguments}</function>
import type { ToolFormat } from "./format";
import { closing, rawArguments } from "./parse";

export const functionaryV31: ToolFormat = {
  family: "functionary-v3.1",
  detects: (s) => s.includes("<function="),
  call: (name, args, q) => `${q(`<function=${name}>`)} ${args} ${q("</function>")}`,
  message: (_call, many) => many(""),
  openers: (names) => [{
    marker: "<function=",
    body: (t, _a, i, f) => {
      const m = /^[A-Za-z0-9_.-]*/.exec(t.slice(i))!;
      const end = i + m[0].length;
      if (end >= t.length) return f ? { kind: "text" } : { kind: "undecided" };
      if (t[end] !== ">" || !names.has(m[0])) return { kind: "text" };
      return closing(rawArguments(t, end + 1, m[0], f), t, "</function>", f);
    },
  }],
};
