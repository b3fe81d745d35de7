// Templates that know nothing of tools: the tools go into a system message (genericToolPrompt)
// and the answer is {"tool_calls": [{"name": …, "arguments": …}]} (or {"tool_call": {…}}).
import type { Tool, ToolFormat } from "./format";
import { STD_KEYS } from "./format";
import { callArray, callObject, closing } from "./parse";
import { skipWs } from "../json-scan";

export const generic: ToolFormat = {
  family: "generic",
  detects: () => true, // the last resort: registry.ts tries it last
  call: (name, args, q) => `${q(`{"name": "${name}", "arguments": `)} ${args} ${q("}")}`,
  message: (_call, many, q) => `${q('{"tool_calls": [')} ${many(", ")} ${q("]}")}`,
  openers: (names) => [{
    marker: "{",
    atStart: true,
    body: (t, a, _i, f) => {
      // {"tool_calls": [...]} or {"tool_call": {...}}
      let j = skipWs(t, a + 1);
      for (const [key, many] of [['"tool_calls"', true], ['"tool_call"', false]] as const) {
        const have = t.slice(j, j + key.length);
        if (!key.startsWith(have)) continue;
        if (have.length < key.length) return f ? { kind: "text" } : { kind: "undecided" };
        j = skipWs(t, j + key.length);
        if (j >= t.length) return f ? { kind: "text" } : { kind: "undecided" };
        if (t[j] !== ":") return { kind: "text" };
        const r = many ? callArray(t, j + 1, STD_KEYS, names, f) : callObject(t, j + 1, STD_KEYS, names, f);
        return closing(r, t, "}", f);
      }
      return { kind: "text" };
    },
  }],
};

/** For templates that know nothing of tools: a system message that describes them and the answer format. */
export function genericToolPrompt(tools: Tool[]): string {
  const list = JSON.stringify(tools.map((t) => t.function), null, 2);
  return (
    `You can call these tools (the JSON Schema of each one's arguments is under "parameters"):\n${list}\n\n` +
    `To call tools, answer with only this JSON and nothing else: {"tool_calls": [{"name": <tool name>, "arguments": <arguments object>}]}. ` +
    "Otherwise answer normally."
  );
}
