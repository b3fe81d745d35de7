import chalk from "chalk";
import { Command } from "commander";
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { type ChatMessage, ChatTemplate } from "../../src/chat/template";
import type { Generation } from "../../src/engine/engine";
import { loadEngine } from "../load";
import {
  addCommandHelpEnv, addEngineOptions, addModelOption, chosenModel, requireModelPath, addSamplingOptions, addSpeculationOptions, type EngineFlags, opt, parseFloatArg, parseIntArg, type SamplingFlags,
  samplingRequest,
} from "../options";
import { action } from "../ui";

interface ChatFlags extends EngineFlags, SamplingFlags {
  model?: string;
  system?: string;
  nPredict: number;
  historyFile?: string;
  history: boolean;
}

const HELP = `commands:
  /help              this help
  /system TEXT       set the system prompt (and start over)
  /set               show the sampling settings
  /set NAME VALUE    change one: temp, top-k, top-p, min-p, repeat-penalty, repeat-last-n,
                     presence-penalty, frequency-penalty, seed, n-predict
  /save FILE         write the conversation (system prompt, turns, settings) as JSON
  /load FILE         continue a saved conversation
  /clear             forget the conversation
  /bye               quit (also Ctrl-D)
"""                  on a line of its own, or before the text: a multi-line message, up to the next """
end a line with \\ to continue the message on the next line; Ctrl-C stops a reply
when the conversation outgrows the context, the oldest turns are dropped (the system prompt stays)`;

/** The settings /set changes: flag name → request field, parser. */
const SETTINGS: Record<string, { key: keyof ReturnType<typeof samplingRequest> | "maxTokens"; parse: (v: string) => number }> = {
  temp: { key: "temperature", parse: parseFloatArg("temp", 0, 100) },
  temperature: { key: "temperature", parse: parseFloatArg("temp", 0, 100) },
  "top-k": { key: "topK", parse: parseIntArg("top-k", 0) },
  "top-p": { key: "topP", parse: parseFloatArg("top-p", 0, 1) },
  "min-p": { key: "minP", parse: parseFloatArg("min-p", 0, 1) },
  "repeat-penalty": { key: "repeatPenalty", parse: parseFloatArg("repeat-penalty", 0.01, 100) },
  "repeat-last-n": { key: "penaltyWindow", parse: parseIntArg("repeat-last-n", -1) },
  "presence-penalty": { key: "presencePenalty", parse: parseFloatArg("presence-penalty", -2, 2) },
  "frequency-penalty": { key: "frequencyPenalty", parse: parseFloatArg("frequency-penalty", -2, 2) },
  seed: { key: "seed", parse: parseIntArg("seed", 0, 2 ** 53 - 1) },
  "n-predict": { key: "maxTokens", parse: parseIntArg("n-predict", 1, 1 << 24) },
};

export function defaultHistoryFile(): string {
  const state = process.env.XDG_STATE_HOME || join(homedir(), ".local", "state");
  return join(state, "velo", "chat_history");
}

export function chatCommand(): Command {
  const cmd = new Command("chat")
    .description("chat with a model in the terminal (also reads piped stdin, one message per line)")
    .argument("[model]", "GGUF file or stored model name (default: the embedded stories260K)")
    .addOption(opt("--system <text>", "system prompt"))
    .addOption(opt("-n, --n-predict <n>", "most tokens per reply").default(512).argParser(parseIntArg("--n-predict", 1, 1 << 24)))
    .addOption(opt("--history-file <path>", "where typed lines are kept for the arrow keys (default: ~/.local/state/velo/chat_history)"))
    .addOption(opt("--no-history", "neither read nor write the history file"));
  addModelOption(cmd);
  addEngineOptions(cmd);
  addSpeculationOptions(cmd);
  addSamplingOptions(cmd);
  cmd.action(action((model: string | undefined, flags: ChatFlags) => runChat(requireModelPath(chosenModel(cmd, model, flags.model)), flags)));
  return addCommandHelpEnv(cmd);
}

const HISTORY_MAX = 1000;

function readHistory(file: string): string[] {
  try {
    // readline wants the newest first
    return readFileSync(file, "utf8").split("\n").filter((l) => l.length > 0).slice(-HISTORY_MAX).reverse();
  } catch {
    return [];
  }
}

interface SavedChat {
  velo_chat: 1;
  model?: string;
  system?: string;
  messages: ChatMessage[];
  settings?: Record<string, number>;
}

async function runChat(modelPath: string, flags: ChatFlags) {
  const interactive = process.stdin.isTTY === true;
  const loaded = await loadEngine(modelPath, flags);
  const { model, engine } = loaded;
  const info = model.info();
  const piece = (id: number | null) => (id === null ? "" : new TextDecoder().decode(model.pieceBytes(id)));
  const template = ChatTemplate.forModel(info.metadata, { bosToken: piece(info.tokenizer?.bos ?? null), eosToken: piece(info.tokenizer?.eos ?? null) });
  const sampling: Record<string, number> = { ...samplingRequest(flags), maxTokens: flags.nPredict };
  const contextSize = engine.stats().context_size;
  let system = flags.system;
  let messages: ChatMessage[] = [];
  let current: Generation | null = null;
  let failed = false;

  const historyFile = flags.history && interactive ? (flags.historyFile ?? defaultHistoryFile()) : undefined;
  const rl = createInterface({
    input: process.stdin, output: process.stdout, terminal: interactive, prompt: chalk.green("> "),
    ...(historyFile ? { history: readHistory(historyFile), historySize: HISTORY_MAX, removeHistoryDuplicates: true } : {}),
  });
  const remember = (line: string) => {
    if (!historyFile || !line.trim()) return;
    try {
      mkdirSync(dirname(historyFile), { recursive: true });
      appendFileSync(historyFile, line.replace(/\n/g, " ") + "\n");
    } catch {
      // a history that cannot be written is not worth stopping the chat for
    }
  };
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
  const note = (text: string) => console.log(chalk.dim(`(${text})`));
  const problem = (text: string) => {
    // the session goes on; a script still learns that something failed from the exit status
    process.stderr.write(chalk.red(`velo: error: ${text}`) + "\n");
    failed = true;
  };

  if (interactive) {
    process.stdout.write(chalk.dim(`${template.isFallback ? "no chat template in this model: using a plain transcript format. " : ""}/help for commands\n`));
    rl.prompt();
  }

  /** The prompt's tokens for these turns. */
  const promptTokens = (turns: ChatMessage[]) => {
    const all: ChatMessage[] = system ? [{ role: "system", content: system }, ...turns] : turns;
    let tokens = Array.from(model.tokenize(template.render(all), { addSpecial: true, parseSpecial: true }));
    // templates that write the BOS text themselves would otherwise get it twice
    const bos = info.tokenizer?.bos;
    if (bos !== null && bos !== undefined && tokens[0] === bos && tokens[1] === bos) tokens = tokens.slice(1);
    return tokens;
  };

  const command = (input: string) => {
    const [name, ...rest] = input.split(/\s+/);
    const arg = input.slice(name!.length).trim();
    switch (name) {
      case "/help":
        console.log(HELP);
        break;
      case "/clear":
        messages = [];
        note("conversation cleared");
        break;
      case "/system":
        system = arg || undefined;
        messages = [];
        note(system ? "system prompt set; conversation restarted" : "system prompt removed");
        break;
      case "/set": {
        if (rest.length === 0) {
          console.log(Object.entries(SETTINGS).filter(([k]) => k !== "temperature").map(([k, v]) => `${k} ${sampling[v.key]}`).join("\n"));
          break;
        }
        const setting = SETTINGS[rest[0]!];
        if (!setting || rest.length !== 2) {
          problem(`usage: /set NAME VALUE, NAME one of ${Object.keys(SETTINGS).filter((k) => k !== "temperature").join(", ")}`);
          break;
        }
        try {
          sampling[setting.key] = setting.parse(rest[1]!);
          note(`${rest[0]} = ${sampling[setting.key]}`);
        } catch (e) {
          problem((e as Error).message);
        }
        break;
      }
      case "/save": {
        if (!arg) return problem("usage: /save FILE");
        const saved: SavedChat = { velo_chat: 1, model: modelPath, system, messages, settings: sampling };
        try {
          writeFileSync(arg, JSON.stringify(saved, null, 2) + "\n");
          note(`saved ${messages.length} messages to ${arg}`);
        } catch (e) {
          problem(`cannot write ${arg}: ${(e as Error).message}`);
        }
        break;
      }
      case "/load": {
        if (!arg) return problem("usage: /load FILE");
        if (!existsSync(arg)) return problem(`file not found: ${arg}`);
        try {
          const saved = JSON.parse(readFileSync(arg, "utf8")) as SavedChat;
          const ok = Array.isArray(saved.messages) && saved.messages.every((m) => ["user", "assistant", "system"].includes(m?.role) && typeof m.content === "string");
          if (!ok) return problem(`${arg} is not a saved chat (no messages list of {role, content})`);
          system = typeof saved.system === "string" ? saved.system : undefined;
          messages = saved.messages.filter((m) => m.role !== "system");
          for (const [k, v] of Object.entries(saved.settings ?? {})) if (k in sampling && typeof v === "number") sampling[k] = v;
          note(`loaded ${messages.length} messages from ${arg}${system ? " (with its system prompt)" : ""}`);
        } catch (e) {
          problem(`cannot read ${arg}: ${(e as Error).message}`);
        }
        break;
      }
      default:
        console.log(chalk.red(`unknown command ${name}: /help lists them`));
    }
  };

  let pending = "";
  let block: string[] | null = null; // inside """ … """
  try {
    for await (const line of rl) {
      let input: string;
      if (block) {
        const end = line.trimEnd().endsWith('"""');
        block.push(end ? line.trimEnd().slice(0, -3) : line);
        if (!end) continue;
        input = block.join("\n").trim();
        block = null;
      } else if (line.trimStart().startsWith('"""')) {
        const rest = line.trimStart().slice(3);
        if (rest.trimEnd().endsWith('"""') && rest.trim().length >= 3) {
          input = rest.trimEnd().slice(0, -3).trim();
        } else {
          block = [rest];
          continue;
        }
      } else if (line.endsWith("\\")) {
        pending += line.slice(0, -1) + "\n";
        continue;
      } else {
        input = (pending + line).trim();
        pending = "";
      }
      if (!input) {
        if (interactive) rl.prompt();
        continue;
      }
      remember(input);
      if (input.startsWith("/")) {
        const name = input.split(/\s+/)[0];
        if (name === "/bye" || name === "/exit" || name === "/quit") break;
        command(input);
        if (interactive) rl.prompt();
        continue;
      }

      messages.push({ role: "user", content: input });
      // Keep the prompt and room for a reply within the context: drop the oldest turns first.
      const room = Math.min(sampling.maxTokens!, Math.floor(contextSize / 2));
      let tokens = promptTokens(messages);
      let dropped = 0;
      while (tokens.length + room > contextSize && messages.length > 1) {
        // a turn is a user message and the reply to it
        const cut = messages.length > 2 && messages[1]!.role === "assistant" ? 2 : 1;
        messages = messages.slice(cut);
        dropped += cut;
        tokens = promptTokens(messages);
      }
      if (dropped > 0) note(`context full: dropped the oldest ${dropped} message${dropped > 1 ? "s" : ""}${system ? ", kept the system prompt" : ""}`);
      if (tokens.length >= contextSize) {
        messages.pop();
        problem(`this message needs ${tokens.length} tokens, more than the context size ${contextSize} holds (-c/--ctx-size); it was not sent`);
        if (interactive) rl.prompt();
        continue;
      }

      const { maxTokens, ...request } = sampling;
      current = engine.submit({ promptTokens: tokens, ...request, maxTokens: Math.min(maxTokens!, contextSize - tokens.length), stop: template.isFallback ? ["\nUser:"] : undefined });
      let reply = "";
      for await (const chunk of current) {
        reply += chunk.text;
        process.stdout.write(chunk.text);
      }
      const finish = await current.finished;
      current = null;
      process.stdout.write("\n");
      if (finish.reason === "error") {
        messages.pop();
        problem(finish.message ?? "generation failed");
        if (interactive) rl.prompt();
        continue;
      }
      if (finish.reason === "cancelled") process.stdout.write(chalk.dim("(stopped)\n"));
      if (interactive) {
        const u = finish.usage;
        const tps = u.generation_ms > 0 && u.completion_tokens > 1 ? ((u.completion_tokens - 1) / u.generation_ms) * 1000 : 0;
        process.stdout.write(chalk.dim(`[${u.completion_tokens} tokens, ${tps.toFixed(1)} t/s, ${u.cached_tokens}/${u.prompt_tokens} prompt tokens reused]\n`));
      }
      messages.push({ role: "assistant", content: reply.trim() }); // templates trim too
      if (interactive) rl.prompt();
    }
    if (block) problem('the input ended inside a """ block; that message was not sent');
  } finally {
    process.off("SIGINT", onInterrupt);
    rl.close();
    loaded.close();
  }
  if (failed) process.exitCode = 1;
}
