import { Command } from "commander";
import { Model } from "../../src/engine/model";
import { addCommandHelpEnv, opt, readTextInput, requireModelPath } from "../options";
import { action } from "../ui";

interface TokenizeFlags {
  model?: string;
  file?: string;
  pieces?: boolean;
  json?: boolean;
  count?: boolean;
  bos: boolean;
  parseSpecial?: boolean;
}

/** Shows a token's bytes readably: valid UTF-8 as text, anything else as <0xNN>. */
export function showPiece(bytes: Uint8Array): string {
  const strict = new TextDecoder("utf-8", { fatal: true });
  try {
    return strict.decode(bytes);
  } catch {
    return Array.from(bytes, (b) => (b < 0x80 ? String.fromCharCode(b) : `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`)).join("");
  }
}

export function tokenizeCommand(): Command {
  const cmd = new Command("tokenize")
    .description("turn text into token ids with a model's tokenizer")
    .argument("[text]", "text to tokenize (else --file or stdin)")
    .addOption(opt("-m, --model <path>", "GGUF model or vocabulary file"))
    .addOption(opt("-f, --file <path>", "read the text from a file"))
    .addOption(opt("--pieces", "print each token with its text"))
    .addOption(opt("--json", "print JSON: ids, pieces and count"))
    .addOption(opt("--count", "print only the number of tokens"))
    .addOption(opt("--no-bos", "do not add BOS/EOS tokens"))
    .addOption(opt("--parse-special", "recognise special-token text such as </s> in the input"))
    .action(
      action(async (text: string | undefined, flags: TokenizeFlags) => {
        const path = requireModelPath(flags.model);
        const input = await readTextInput(text, flags.file);
        const model = Model.open(path);
        try {
          const ids = model.tokenize(input, { addSpecial: flags.bos, parseSpecial: flags.parseSpecial === true });
          if (flags.json) {
            const pieces = Array.from(ids, (id) => showPiece(model.pieceBytes(id)));
            console.log(JSON.stringify({ model: path, count: ids.length, ids: Array.from(ids), pieces }));
          } else if (flags.count) {
            console.log(ids.length);
          } else if (flags.pieces) {
            const width = Math.max(...Array.from(ids, (id) => String(id).length), 1);
            for (const id of ids) console.log(`${String(id).padStart(width)}  ${JSON.stringify(showPiece(model.pieceBytes(id)))}`);
          } else {
            console.log(Array.from(ids).join(" "));
          }
        } finally {
          model.close();
        }
      }),
    );
  return addCommandHelpEnv(cmd);
}
