import chalk from "chalk";
import { Command } from "commander";
import { createInterface } from "node:readline";
import { type ChatMessage, ChatTemplate } from "../../src/chat/template";
import type { Generation } from "../../src/engine/engine";
import { loadEngine } from "../load";
import {
  addCommandHelpEnv, addEngineOptions, addModelOption, chosenModel, requireModelPath, addSamplingOptions, addSpeculationOptions, type EngineFlags, opt, parseIntArg, type SamplingFlags,
  samplingRequest,
} from "../options";
import { action, CliError } from "../ui";

interface ChatFlags extends EngineFlags, SamplingFlags {
  model?: string;
  system?: string;
  nPredict: number;
}

const HELP = `commands:
  /help            this help
  /system TEXT     set the system prompt (and start over)
  /clear           forget the conversation
  /bye             quit (also Ctrl-D)
end a line with \\ to continue the message on the next line; Ctrl-C stops a reply`;

export function chatCommand(): Command {
  const cmd = new Command("chat")
    .description("chat with a model in the terminal (also reads piped stdin, one message per line)")
    .argument("[model]", "GGUF file or stored model name (default: the embedded stories260K)")
    .addOption(opt("--system <text>", "system prompt"))
    .addOption(opt("-n, --n-predict <n>", "most tokens per reply").default(512).argParser(parseIntArg("--n-predict", 1, 1 << 24)));
  addModelOption(cmd);
  addEngineOptions(cmd);
  addSpeculationOptions(cmd);
  addSamplingOptions(cmd);
  cmd.action(action((model: string | undefined, flags: ChatFlags) => runChat(requireModelPath(chosenModel(cmd, model, flags.model)), flags)));
  return addCommandHelpEnv(cmd);
}

async function runChat(modelPath: string, flags: ChatFlags) {
  const interactive = process.stdin.isTTY === true;
  const loaded = await loadEngine(modelPath, flags);
  const { model, engine } = loaded;
  const info = model.info();
  const piece = (id: number | null) => (id === null ? "" : new TextDecoder().decode(model.pieceBytes(id)));
  const template = ChatTemplate.forModel(info.metadata, { bosToken: piece(info.tokenizer?.bos ?? null), eosToken: piece(info.tokenizer?.eos ?? null) });
  const sampling = samplingRequest(flags);
  let system = flags.system;
  let messages: ChatMessage[] = [];
  let current: Generation | null = null;

  const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: interactive, prompt: chalk.green("> ") });
  // Ctrl-C: stop the reply being written; at the prompt, just say how to leave.
  const onInterrupt = () => {
    if (current) current.cancel();
    else if (interactive) {
      process.stdout.write(chalk.dim("\n(/bye or Ctrl-D to quit)\n"));
      rl.prompt();
    }
  };
  rl.on("SIGINT", onInterrupt);
  process.on("SIGINT", onInterrupt);

  if (interactive) {
    process.stdout.write(chalk.dim(`${template.isFallback ? "no chat template in this model: using a plain transcript format. " : ""}/help for commands\n`));
    rl.prompt();
  }

  let pending = "";
  try {
    for await (const line of rl) {
      if (line.endsWith("\\")) {
        pending += line.slice(0, -1) + "\n";
        continue;
      }
      const input = (pending + line).trim();
      pending = "";
      if (!input) {
        if (interactive) rl.prompt();
        continue;
      }
      if (input.startsWith("/")) {
        const [command, ...rest] = input.split(/\s+/);
        if (command === "/bye" || command === "/exit" || command === "/quit") break;
        if (command === "/help") console.log(HELP);
        else if (command === "/clear") {
          messages = [];
          console.log(chalk.dim("(conversation cleared)"));
        } else if (command === "/system") {
          system = rest.join(" ") || undefined;
          messages = [];
          console.log(chalk.dim(system ? "(system prompt set; conversation restarted)" : "(system prompt removed)"));
        } else console.log(chalk.red(`unknown command ${command}: /help lists them`));
        if (interactive) rl.prompt();
        continue;
      }

      messages.push({ role: "user", content: input });
      const all: ChatMessage[] = system ? [{ role: "system", content: system }, ...messages] : messages;
      const rendered = template.render(all);
      let tokens = Array.from(model.tokenize(rendered, { addSpecial: true, parseSpecial: true }));
      // templates that write the BOS text themselves would otherwise get it twice
      const bos = info.tokenizer?.bos;
      if (bos !== null && bos !== undefined && tokens[0] === bos && tokens[1] === bos) tokens = tokens.slice(1);

      current = engine.submit({ promptTokens: tokens, maxTokens: flags.nPredict, ...sampling, stop: template.isFallback ? ["\nUser:"] : undefined });
      let reply = "";
      for await (const chunk of current) {
        reply += chunk.text;
        process.stdout.write(chunk.text);
      }
      const finish = await current.finished;
      current = null;
      process.stdout.write("\n");
      if (finish.reason === "error") throw new CliError(finish.message ?? "generation failed");
      if (finish.reason === "cancelled") process.stdout.write(chalk.dim("(stopped)\n"));
      if (interactive) {
        const u = finish.usage;
        const tps = u.generation_ms > 0 && u.completion_tokens > 1 ? ((u.completion_tokens - 1) / u.generation_ms) * 1000 : 0;
        process.stdout.write(chalk.dim(`[${u.completion_tokens} tokens, ${tps.toFixed(1)} t/s, ${u.cached_tokens}/${u.prompt_tokens} prompt tokens reused]\n`));
      }
      messages.push({ role: "assistant", content: reply.trim() }); // templates trim too
      if (interactive) rl.prompt();
    }
  } finally {
    process.off("SIGINT", onInterrupt);
    rl.close();
    loaded.close();
  }
}
