import { Command } from "commander";
import { ErrorCode, VeloError } from "../../src/engine/errors";
import { loadEngine } from "../load";
import {
  addCommandHelpEnv, addEngineOptions, addModelOption, type EngineFlags, modelAndText, opt, readTextInput,
} from "../options";
import { action, CliError } from "../ui";

interface EmbedFlags extends EngineFlags {
  model?: string;
  file?: string;
  lines?: boolean;
  json?: boolean;
}

export function embedCommand(): Command {
  const cmd = new Command("embed")
    .description("print the embedding of a text (pooled as the model says, L2-normalised), as POST /v1/embeddings computes it")
    .argument("[model]", "GGUF file or stored model name (default: the embedded stories260K; a lone argument that names no model is the text)")
    .argument("[text]", "text to embed (else --file or stdin)")
    .addOption(opt("-f, --file <path>", "read the text from a file"))
    .addOption(opt("--lines", "embed each non-empty line as its own input (batched together)"))
    .addOption(opt("--json", "print JSON: the vectors, their length, the pooling and the token count"));
  addModelOption(cmd);
  addEngineOptions(cmd);
  cmd.action(
    action(async (first: string | undefined, second: string | undefined, flags: EmbedFlags) => {
      const { model: modelPath, text: textArg } = modelAndText(cmd, first, second, flags.model);
      const text = await readTextInput(textArg, flags.file);
      const texts = flags.lines ? text.split(/\r?\n/).filter((l) => l.trim() !== "") : [text.replace(/\r?\n$/, "")];
      if (texts.length === 0 || texts.some((t) => t === "")) throw new CliError("nothing to embed: the text is empty", 2);
      const loaded = await loadEngine(modelPath, flags);
      try {
        const { model, engine } = loaded;
        const inputs = texts.map((t) => Array.from(model.tokenize(t, { addSpecial: true, parseSpecial: false })));
        let result;
        try {
          result = await engine.embed(inputs);
        } catch (e) {
          // too long for the context, a model without embeddings: the user's to fix
          if (e instanceof VeloError && e.code !== ErrorCode.internal) throw new CliError(e.message, 2);
          throw e;
        }
        const stats = engine.stats();
        if (flags.json) {
          console.log(JSON.stringify({
            model: modelPath, pooling: stats.pooling, dimensions: stats.embedding_length, prompt_tokens: result.promptTokens,
            embeddings: result.vectors.map((v) => Array.from(v)),
          }));
        } else {
          for (const v of result.vectors) console.log(Array.from(v, (x) => x.toPrecision(6)).join(" "));
        }
      } finally {
        loaded.close();
      }
    }),
  );
  return addCommandHelpEnv(cmd);
}
