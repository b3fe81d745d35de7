// Writes docs/flags.md from the commands' own option definitions (cli/commands/*.ts), so the
// flag reference cannot drift from what the CLI takes: tests/docs.test.ts checks the file
// equals this output. Regenerate with: scripts/bun scripts/flags-doc.ts > docs/flags.md
import type { Command, Option } from "commander";
import { benchCommand } from "../cli/commands/bench";
import { chatCommand } from "../cli/commands/chat";
import { embedCommand } from "../cli/commands/embed";
import { generateCommand } from "../cli/commands/generate";
import { lsCommand } from "../cli/commands/ls";
import { pullCommand } from "../cli/commands/pull";
import { rmCommand } from "../cli/commands/rm";
import { serveCommand } from "../cli/commands/serve";
import { tokenizeCommand } from "../cli/commands/tokenize";

const commands: Command[] = [generateCommand(), chatCommand(), serveCommand(), benchCommand(), tokenizeCommand(), embedCommand(), pullCommand(), lsCommand(), rmCommand()];

/** Variables read outside commander's options. */
const ENV_ONLY: [string, string, string, string][] = [
  ["`VELO_MODELS`", "`~/.cache/velo/models`", "pull, ls, rm, every model argument", "the model store"],
  ["`VELO_HF_ENDPOINT`, `HF_ENDPOINT`", "`https://huggingface.co`", "pull", "the hub (a mirror, or the tests' local hub)"],
  ["`HF_TOKEN`", "", "pull", "access token for gated and private repositories (sent to the hub, never to the CDN it redirects to)"],
  ["`VELO_ROOT`", "`/var/cache/velo/trixie`", "make, ./velo", "the Debian 13 build root on older Linux systems"],
  ["`VK_DRIVER_FILES`", "lavapipe in `make test`", "all that run a model", "which Vulkan driver the loader uses"],
  ["`NO_COLOR`", "", "all", "no colours, even on a terminal"],
];

const cell = (s: string) => s.replace(/\|/g, "\\|");
const shown = (v: unknown) => (v === undefined || v === false ? "" : `\`${Array.isArray(v) ? v.join(" ") : String(v)}\``);

export function flagsDoc(): string {
  // one row per flag: the commands that take it, its default in each (when they differ)
  const rows = new Map<string, { o: Option; uses: { cmd: string; o: Option }[] }>();
  for (const c of commands) {
    for (const o of c.options) {
      const r = rows.get(o.flags) ?? { o, uses: [] };
      r.uses.push({ cmd: c.name(), o });
      rows.set(o.flags, r);
    }
  }
  const lines = [
    "# Every flag",
    "",
    "<!-- written by scripts/flags-doc.ts from the commands' definitions; tests/docs.test.ts checks it -->",
    "",
    "Every flag, the `VELO_*` variable that sets it, its default and the commands that take it",
    "(`velo COMMAND --help` says the same):",
    "",
    "| flag | environment | default | commands | what it does |",
    "|---|---|---|---|---|",
  ];
  for (const { o, uses } of rows.values()) {
    const defaults = [...new Set(uses.map((u) => shown(u.o.defaultValue)))];
    let def = defaults[0]!;
    if (defaults.length > 1) {
      const first = shown(uses[0]!.o.defaultValue);
      const others = uses.filter((u) => shown(u.o.defaultValue) !== first).map((u) => `${u.cmd}: ${shown(u.o.defaultValue) || "none"}`);
      def = `${first || "none"} (${others.join(", ")})`;
    }
    const choices = o.argChoices ? ` (${o.argChoices.join(", ")})` : "";
    lines.push(`| \`${cell(o.flags)}\` | ${o.envVar ? `\`${o.envVar}\`` : ""} | ${cell(def)} | ${uses.map((u) => u.cmd).join(", ")} | ${cell(o.description)}${choices} |`);
  }
  for (const [env, def, cmds, what] of ENV_ONLY) lines.push(`| (environment only) | ${env} | ${def} | ${cmds} | ${what} |`);
  return lines.join("\n") + "\n";
}

if (import.meta.main) process.stdout.write(flagsDoc());
