// Every tool-call format, in the order detectFamily tries them (the first whose marker the
// template has wins; generic, which matches any template, last). A new family: its file, and a
// line here.
import { commandRPlus } from "./command-r-plus";
import { commandR7b } from "./command-r7b";
import { firefunction } from "./firefunction";
import type { ToolFamily, ToolFormat } from "./format";
import { functionaryV31 } from "./functionary-v31";
import { functionaryV32 } from "./functionary-v32";
import { generic } from "./generic";
import { hermes } from "./hermes";
import { llama3 } from "./llama3";
import { mistral } from "./mistral";

export const formats: readonly ToolFormat[] = [mistral, hermes, functionaryV32, functionaryV31, firefunction, commandR7b, commandRPlus, llama3, generic];

export function format(family: ToolFamily): ToolFormat {
  return formats.find((f) => f.family === family)!;
}
