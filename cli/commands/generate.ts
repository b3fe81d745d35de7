import { chalkStderr } from "chalk";
import { Command } from "commander";
import { loadEngine } from "../load";
import { ErrorCode, VeloError } from "../../src/engine/errors";
import {
  addCommandHelpEnv, addEngineOptions, addModelOption, modelAndText, addGrammarOptions, addSamplingOptions, addSpeculationOptions, type EngineFlags, type GrammarFlags, grammarFromFlags,
  opt, parseIntArg, readTextInput, type SamplingFlags, samplingRequest,
} from "../options";
import { action, CliError } from "../ui";

interface GenerateFlags extends EngineFlags, SamplingFlags, GrammarFlags {
  model?: string;
  file?: string;
  nPredict: number;
  stop?: string[];
  ignoreEos?: boolean;
  json?: boolean;
  bos: boolean;
  parseSpecial?: boolean;
}

export function generateCommand(): Command {
  const cmd = new Command("generate")
    .description("continue a prompt, streaming the text to stdout")
    .argument("[model]", "GGUF file or stored model name (default: the embedded stories260K; a lone argument that names no model is the prompt)")
    .argument("[prompt]", "prompt text (else --file or stdin)")
    .addOption(opt("-f, --file <path>", "read the prompt from a file"))
    .addOption(opt("-n, --n-predict <n>", "most tokens to generate").default(128).argParser(parseIntArg("--n-predict", 0, 1 << 24)))
    .addOption(opt("--stop <text...>", "stop when this text appears (repeatable)"))
    .addOption(opt("--ignore-eos", "keep generating past end-of-sequence tokens"))
    .addOption(opt("--no-bos", "do not add the BOS token"))
    .addOption(opt("--parse-special", "recognise special-token text in the prompt"))
    .addOption(opt("--json", "print one JSON document: prompt and output ids, text, timings"));
  addModelOption(cmd);
  addEngineOptions(cmd);
  addSpeculationOptions(cmd);
  addSamplingOptions(cmd);
  addGrammarOptions(cmd);
  cmd.action(
    action(async (first: string | undefined, second: string | undefined, flags: GenerateFlags) => {
      // `velo generate "Once upon a time"`: one argument that names no model is the prompt
      const { model: modelPath, text: promptArg } = modelAndText(cmd, first, second, flags.model);
      const grammar = grammarFromFlags(flags);
      const prompt = await readTextInput(promptArg, flags.file, "prompt");
      const loaded = await loadEngine(modelPath, flags);
      const { model, engine, loadMs } = loaded;
      try {
        const promptTokens = model.tokenize(prompt, { addSpecial: flags.bos, parseSpecial: flags.parseSpecial === true });
        let gen;
        try {
          gen = engine.submit({
            promptTokens,
            maxTokens: flags.nPredict,
            stop: flags.stop,
            ignoreEos: flags.ignoreEos,
            grammar,
            ...samplingRequest(flags),
          });
        } catch (e) {
          // a grammar that does not compile is a usage error
          if (e instanceof VeloError && e.code === ErrorCode.invalidArgument) throw new CliError(e.message, 2);
          throw e;
        }
        // Ctrl-C stops the generation (what was produced is kept), not the process.
        const onInt = () => gen.cancel();
        process.on("SIGINT", onInt);
        const tokens: number[] = [];
        let text = "";
        try {
          for await (const chunk of gen) {
            tokens.push(...chunk.tokens);
            text += chunk.text;
            if (!flags.json && chunk.text) process.stdout.write(chunk.text);
          }
        } finally {
          process.off("SIGINT", onInt);
        }
        const finish = await gen.finished;
        if (finish.reason === "error") throw new CliError(finish.message ?? "generation failed");
        const u = finish.usage;
        const timings = {
          load_ms: round(loadMs),
          prompt_ms: round(u.prompt_ms),
          prompt_tokens_per_s: round(u.prompt_ms > 0 ? ((u.prompt_tokens - u.cached_tokens) / u.prompt_ms) * 1000 : 0),
          generation_ms: round(u.generation_ms),
          generation_tokens_per_s: round(u.generation_ms > 0 && u.completion_tokens > 1 ? ((u.completion_tokens - 1) / u.generation_ms) * 1000 : 0),
          ttft_ms: round(u.ttft_ms),
        };
        const spec = engine.stats().speculation;
        const speculation = spec
          ? { drafted: u.drafted_tokens, accepted: u.accepted_tokens, acceptance: u.drafted_tokens ? u.accepted_tokens / u.drafted_tokens : 0, acceptance_by_position: spec.acceptance_by_position }
          : null;
        if (flags.json) {
          console.log(JSON.stringify({
            model: modelPath, prompt, prompt_tokens: Array.from(promptTokens), tokens, text,
            finish_reason: finish.reason, usage: { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens }, timings, speculation,
            memory: engine.stats().memory,
          }));
        } else {
          process.stdout.write("\n");
          if (process.stderr.isTTY) {
            process.stderr.write(chalkStderr.dim(
              `prompt ${u.prompt_tokens} tokens ${timings.prompt_tokens_per_s} t/s · generated ${u.completion_tokens} tokens ${timings.generation_tokens_per_s} t/s · first token ${timings.ttft_ms} ms · ${finish.reason}` +
                (speculation ? ` · speculation ${speculation.accepted}/${speculation.drafted} accepted` : "") + "\n"));
          }
        }
      } finally {
        loaded.close();
      }
    }),
  );
  return addCommandHelpEnv(cmd);
}

function round(x: number): number {
  return Math.round(x * 100) / 100;
}
