import { Command } from "commander";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { findStored, storeDir } from "../models";
import { addCommandHelpEnv } from "../options";
import { formatBytes } from "../progress";
import { action, CliError } from "../ui";

export function rmCommand(): Command {
  const cmd = new Command("rm")
    .description("remove models from the store (also a partial download)")
    .argument("<name...>", "stored names (velo ls lists them)")
    .action(
      action((names: string[]) => {
        const dir = storeDir();
        const missing: string[] = [];
        for (const name of names) {
          const m = findStored(name, dir);
          const part = join(dir, `${m?.name ?? name.replace(/\.gguf$/i, "")}.gguf.part`);
          if (!m && !existsSync(part)) {
            missing.push(name);
            continue;
          }
          if (m) for (const p of [m.path, m.path + ".json"]) rmSync(p, { force: true });
          for (const p of [part, part + ".json"]) rmSync(p, { force: true });
          console.log(`removed ${m?.name ?? name}${m ? ` (${formatBytes(m.size)})` : " (partial download)"}`);
        }
        if (missing.length) throw new CliError(`not in the store (${dir}): ${missing.join(", ")}; velo ls lists what is`);
      }),
    );
  return addCommandHelpEnv(cmd);
}
