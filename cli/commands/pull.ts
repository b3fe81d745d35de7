import { Command } from "commander";
import { storeDir } from "../models";
import { addCommandHelpEnv, opt, parseIntArg } from "../options";
import { formatBytes } from "../progress";
import { pull } from "../pull";
import { action } from "../ui";

interface PullFlags {
  name?: string;
  force?: boolean;
  retries: number;
}

export function pullCommand(): Command {
  const cmd = new Command("pull")
    .description("download a GGUF model into the model store (resumable, checked against the hub's SHA-256)")
    .argument("<model>", "hf:OWNER/REPO[:QUANT], hf:OWNER/REPO/FILE.gguf, or an http(s) URL of a .gguf file")
    .addOption(opt("--name <name>", "store it under this name (default: the file name without .gguf)"))
    .addOption(opt("--force", "download again even if it is stored"))
    .addOption(opt("--retries <n>", "times a dropped download is resumed before giving up").default(3).argParser(parseIntArg("--retries", 0, 100)))
    .addHelpText("after", `
The store is $VELO_MODELS, else ~/.cache/velo/models (now: ${storeDir()}). Without QUANT, a
repository's only GGUF, or its Q4_K_M one, is chosen. A gated or private repository needs
HF_TOKEN. VELO_HF_ENDPOINT (or HF_ENDPOINT) points at another hub or a mirror. An interrupted
pull (Ctrl-C, a lost connection) resumes where it stopped when run again.
Every command then takes the stored name (or the spec) wherever it takes a model file.`)
    .action(
      action(async (spec: string, flags: PullFlags) => {
        const ac = new AbortController();
        const onInt = () => ac.abort();
        process.on("SIGINT", onInt);
        try {
          const m = await pull(spec, { name: flags.name, force: flags.force, retries: flags.retries, signal: ac.signal });
          console.log(m.name);
          process.stderr.write(`stored ${m.name} (${formatBytes(m.size)}, sha256 ${m.sha256?.slice(0, 12)}…): velo generate -m ${m.name} "…"\n`);
        } catch (e) {
          if (ac.signal.aborted) {
            process.stderr.write(`\ninterrupted: the partial download is kept in ${storeDir()}; run velo pull ${spec} again to resume\n`);
            process.exitCode = 130;
            return;
          }
          throw e;
        } finally {
          process.off("SIGINT", onInt);
        }
      }),
    );
  return addCommandHelpEnv(cmd);
}
