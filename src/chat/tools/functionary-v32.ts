// Functionary v3.2: the output is `>>>recipient\n` segments (the prompt ends with the first
// `>>>`): `all` for text, a tool's name for a call whose arguments follow as JSON.
import type { ToolFormat } from "./format";
import { Collector, expect, heldBack, rawArguments } from "./parse";

export const functionaryV32: ToolFormat = {
  family: "functionary-v3.2",
  detects: (s) => s.includes(">>>all") || /'>>>' \+/.test(s),
  call: (name, args, q) => `${q(`${name}\n`)} ${args}`,
  message: (_call, many) => many(">>>"),
  openers: () => [],
  parse: (text, final, names) => parseSegments(text, final, names),
  alwaysParsed: true,
};

/** Functionary v3.2: `>>>recipient\n` segments (the prompt ends with the first `>>>`). */
function parseSegments(t: string, final: boolean, names: Set<string>): Collector {
  const out = new Collector();
  let pos = 0;
  for (;;) {
    const nl = t.indexOf("\n", pos);
    if (nl < 0) {
      // the recipient line is not finished
      if (final) out.text(t.slice(pos));
      break;
    }
    const recipient = t.slice(pos, nl).trim();
    if (names.has(recipient)) {
      const r = rawArguments(t, nl + 1, recipient, final);
      if (r.kind === "undecided") break;
      if (r.kind === "calls") {
        for (const c of r.calls) out.call(c);
        if (r.end === null) break;
        const e = expect(t, r.end, ">>>", final);
        if (e === null) break;
        if (e === r.end) {
          // text after the call that does not start another segment
          out.text(t.slice(r.end));
          break;
        }
        pos = e;
        continue;
      }
    }
    // content: after "all\n", or the whole segment when the recipient is not a tool
    const start = recipient === "all" ? nl + 1 : pos;
    const next = t.indexOf(">>>", start);
    if (next < 0) {
      let rest = t.slice(start);
      if (!final) rest = rest.slice(0, rest.length - heldBack(rest, [">>>"]));
      out.text(rest);
      break;
    }
    out.text(t.slice(start, next));
    out.call(); // a segment boundary
    pos = next + 3;
  }
  return out;
}
