// Command R+: Action:\n```json\n[{"tool_name": …, "parameters": …}]\n```
import type { ToolFormat } from "./format";
import { type CallKeys, callArray, closing, expect } from "./parse";

export const commandRPlus: ToolFormat = {
  family: "command-r-plus",
  detects: (s) => s.includes("Action:") && s.includes("tool_name"),
  call: (name, args, q) => `${q(`{\n        "tool_name": "${name}",\n        "parameters": `)} ${args} ${q("\n    }")}`,
  message: (_call, many, q) => `${q("Action:\n```json\n[\n    ")} ${many(",\n    ")} ${q("\n]```")}`,
  openers: (names) => {
    const keys: CallKeys = { name: ["tool_name"], args: ["parameters"], extra: [] };
    return [{
      marker: "Action:",
      body: (t, _a, i, f) => {
        let j = expect(t, i, "```json", f);
        if (j === null) return { kind: "undecided" };
        if (j === i) {
          j = expect(t, i, "```", f);
          if (j === null) return { kind: "undecided" };
        }
        return closing(callArray(t, j, keys, names, f), t, "```", f);
      },
    }];
  },
};
