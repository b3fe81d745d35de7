import Table from "cli-table3";
import { Command } from "commander";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { DEFAULT_MODEL, storedModels, storeDir } from "../models";
import { addCommandHelpEnv, opt } from "../options";
import { formatBytes } from "../progress";
import { action } from "../ui";

/** Partial downloads in the store (NAME.gguf.part), with how far they got. */
function partials(dir: string) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).filter((f) => f.endsWith(".gguf.part")).map((f) => {
    let meta: { size?: number; source?: string } = {};
    try {
      meta = JSON.parse(readFileSync(join(dir, f + ".json"), "utf8"));
    } catch {}
    return { name: f.replace(/\.gguf\.part$/, ""), have: statSync(join(dir, f)).size, size: meta.size, source: meta.source };
  });
}

export function lsCommand(): Command {
  const cmd = new Command("ls")
    .alias("list")
    .description("list the models in the store (velo pull puts them there)")
    .addOption(opt("--json", "print JSON"))
    .action(
      action((flags: { json?: boolean }) => {
        const dir = storeDir();
        const models = storedModels(dir);
        const parts = partials(dir);
        if (flags.json) {
          console.log(JSON.stringify({ store: dir, default: DEFAULT_MODEL, models, partial: parts }, null, 2));
          return;
        }
        const style = process.stdout.isTTY ? { head: ["cyan"] } : { head: [], border: [] };
        const table = new Table({ head: ["name", "size", "source", "pulled"], style });
        for (const m of models) table.push([m.name, formatBytes(m.size), m.source ?? "(copied in)", m.pulled_at?.slice(0, 16).replace("T", " ") ?? ""]);
        for (const p of parts) table.push([p.name, `${formatBytes(p.have)}${p.size ? ` of ${formatBytes(p.size)}` : ""}`, p.source ?? "", "partial: pull again to resume"]);
        if (models.length + parts.length > 0) console.log(table.toString());
        else console.log(`no models in ${dir} yet: velo pull hf:OWNER/REPO[:QUANT] downloads one`);
        console.error(`store: ${dir}; without a model, commands use ${DEFAULT_MODEL}`);
      }),
    );
  return addCommandHelpEnv(cmd);
}
