// FireFunction v2: functools[{"name": …, "arguments": …}, …]
import type { ToolFormat } from "./format";
import { STD_KEYS } from "./format";
import { callArray } from "./parse";

export const firefunction: ToolFormat = {
  family: "firefunction",
  detects: (s) => s.includes("functools["),
  call: (name, args, q) => `${q(`{"name": "${name}", "arguments": `)} ${args} ${q("}")}`,
  message: (_call, many, q) => `${q("functools[")} ${many(", ")} ${q("]")}`,
  openers: (names) => [{ marker: "functools[", body: (t, _a, i, f) => callArray(t, i, STD_KEYS, names, f, true) }],
};
