// Mistral (Nemo and later v3 templates): [TOOL_CALLS][{"name": …, "arguments": …, "id": "<9 chars>"}, …]
import type { ToolFormat } from "./format";
import { STD_KEYS } from "./format";
import { callArray } from "./parse";

export const mistral: ToolFormat = {
  family: "mistral",
  detects: (s) => s.includes("[TOOL_CALLS]"),
  call: (name, args, q) => `${q(`{"name": "${name}", "arguments": `)} ${args} ${q(`, "id": "`)} [a-zA-Z0-9]{9} ${q(`"}`)}`,
  message: (_call, many, q) => `${q("[TOOL_CALLS][")} ${many(", ")} ${q("]")}`,
  openers: (names) => [{ marker: "[TOOL_CALLS]", body: (t, _a, i, f) => callArray(t, i, STD_KEYS, names, f) }],
  // the template refuses ids that are not 9 letters and digits
  callId: (pick) => pick(9),
};
