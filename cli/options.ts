// Option groups shared by commands. Every option can also come from a VELO_* environment
// variable (named after the long flag: --ctx-size → VELO_CTX_SIZE).
import { type Command, Option } from "commander";
import { existsSync, readFileSync } from "node:fs";
import { jsonSchemaToGrammar, SchemaError } from "../src/grammar/json-schema";
import { looksLikeModel, resolveModel } from "./models";
import type { EngineOptions, KVCacheType } from "../src/engine/engine";
import { type EngineCommand, type EngineOptionSpec, engineOptionTable } from "../src/engine/options";
import { CliError } from "./ui";

export function envName(flag: string): string {
  return "VELO_" + flag.replace(/^--/, "").replace(/-/g, "_").toUpperCase();
}

/** An option whose default comes from its VELO_* variable. */
export function opt(flags: string, description: string): Option {
  const long = flags.split(/[ ,|]+/).find((f) => f.startsWith("--"))!;
  return new Option(flags, description).env(envName(long));
}

export function parseIntArg(name: string, min: number, max = Number.MAX_SAFE_INTEGER) {
  return (value: string): number => {
    if (!/^-?\d+$/.test(value.trim())) throw new CliError(`${name} must be an integer, got '${value}'`, 2);
    const n = Number(value);
    if (n < min || n > max) throw new CliError(`${name} must be between ${min} and ${max}, got ${n}`, 2);
    return n;
  };
}

const SIZE_UNITS: Record<string, number> = { "": 2 ** 20, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 };

/** A size in bytes: 8G, 512M, 1.5g, 64K (binary units, an optional trailing B or iB); a bare number is MiB. */
export function parseSizeArg(name: string, min: number, max = Number.MAX_SAFE_INTEGER) {
  return (value: string): number => {
    const m = /^(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?$/i.exec(value.trim());
    if (!m) throw new CliError(`${name} must be a size such as 8G, 512M or 4096 (MiB), got '${value}'`, 2);
    const n = Math.round(Number(m[1]) * SIZE_UNITS[m[2]!.toLowerCase()]!);
    if (n < min || n > max) throw new CliError(`${name} must be between ${min / 2 ** 20} MiB and ${max / 2 ** 40} TiB, got '${value}'`, 2);
    return n;
  };
}

export function parseFloatArg(name: string, min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === "" || !Number.isFinite(n)) throw new CliError(`${name} must be a number, got '${value}'`, 2);
    if (n < min || n > max) throw new CliError(`${name} must be between ${min} and ${max}, got ${n}`, 2);
    return n;
  };
}

/** The model file to open: a path, a stored name (velo pull), or the embedded default (cli/models.ts). */
export function requireModelPath(path: string | undefined): string {
  return resolveModel(path);
}

/** -m/--model (VELO_MODEL): the model, as a path or a stored name; a positional model also works. */
export function addModelOption(cmd: Command): Command {
  return cmd.addOption(opt("-m, --model <model>", "GGUF file or stored model name (default: the embedded models/stories260K.gguf)"));
}

/** The model a command was given: positional or --model (not both; VELO_MODEL yields to a positional). */
export function chosenModel(cmd: Command, positional: string | undefined, option: string | undefined): string | undefined {
  if (positional !== undefined && option !== undefined) {
    if (cmd.getOptionValueSource("model") === "env") return positional;
    throw new CliError("give the model either as an argument or with --model, not both", 2);
  }
  return positional ?? option;
}

/**
 * `COMMAND [model] [text]`: the model and the text argument, where one argument that names no
 * model (or comes with --model) is the text (`velo generate "Once upon a time"`).
 */
export function modelAndText(cmd: Command, first: string | undefined, second: string | undefined, option: string | undefined): { model: string; text: string | undefined } {
  let [modelArg, textArg] = [first, second];
  if (second === undefined && first !== undefined && (option !== undefined || !looksLikeModel(first))) [modelArg, textArg] = [undefined, first];
  return { model: requireModelPath(chosenModel(cmd, modelArg, option)), text: textArg };
}

/** Reads the text input of a command: an argument, --file, or piped stdin (exactly one). */
export async function readTextInput(arg: string | undefined, file: string | undefined, what = "text"): Promise<string> {
  if (arg !== undefined && file !== undefined) throw new CliError(`give the ${what} either as an argument or with --file, not both`, 2);
  if (arg !== undefined) return arg;
  if (file !== undefined) {
    if (!existsSync(file)) throw new CliError(`file not found: ${file}`);
    return await Bun.file(file).text();
  }
  if (process.stdin.isTTY) throw new CliError(`no ${what}: pass it as an argument, with --file, or on stdin`, 2);
  return await Bun.stdin.text();
}

export function addCommandHelpEnv(cmd: Command): Command {
  return cmd.addHelpText("after", "\nEvery option can also be set with a VELO_* environment variable (e.g. --ctx-size → VELO_CTX_SIZE).");
}

/** The CLI flag of an engine option (its table entry: src/engine/options.ts). */
function engineFlag(spec: EngineOptionSpec): Option {
  const o = opt(spec.flag!, spec.help ?? "");
  const long = spec.flag!.split(/[ ,|]+/).find((f) => f.startsWith("--"))!;
  if (spec.type === "int") o.argParser(spec.unit === "bytes" ? parseSizeArg(long, spec.min ?? 0, spec.max) : parseIntArg(long, spec.min ?? 0, spec.max));
  if (spec.type === "choice") o.choices([...spec.choices!]);
  if (spec.cliDefault !== undefined) o.default(spec.cliDefault);
  return o;
}

/** The engine options' flags that `cmd` takes (every table entry naming the command), and --check-tensors. */
export function addEngineOptions(cmd: Command): Command {
  for (const spec of engineOptionTable) {
    if (spec.flag && spec.commands?.includes(cmd.name() as EngineCommand)) cmd.addOption(engineFlag(spec));
  }
  return cmd.addOption(opt("--check-tensors", "check every tensor's values for NaN and infinity at load (one read of the file), as llama.cpp's --check-tensors"));
}

/** --draft: the draft model of speculative decoding (the --spec flags are engine options). */
export function addSpeculationOptions(cmd: Command): Command {
  return cmd.addOption(opt("--draft <model>", "speculative decoding with this draft model (same vocabulary)"));
}

export interface SpeculationFlags {
  draft?: string;
  spec?: "off" | "ngram" | "draft";
  draftMax?: number;
  specAdapt?: boolean;
}

export interface EngineFlags extends SpeculationFlags {
  memoryBudget?: number;
  threads?: number;
  backend?: "auto" | "cpu" | "vulkan" | "metal";
  device?: number;
  ctxSize?: number;
  prefixCache?: boolean;
  pageSize?: number;
  checkTensors?: boolean;
  cacheTypeK?: KVCacheType;
  cacheTypeV?: KVCacheType;
  maxBatchSize?: number;
  kvMemory?: number;
  profile?: boolean;
}

/**
 * The engine options the engine flags set, for every command that starts an engine
 * (cli/load.ts, serve): each table entry's flag read by the attribute name commander gives it,
 * so that no command accepts a flag and drops it. The speculation mode defaults to draft when
 * a draft model is given.
 */
export function engineOptions(f: EngineFlags): EngineOptions {
  const flags = f as Record<string, unknown>;
  const o: Record<string, unknown> = {};
  // the table's names are commander's attribute names (tests/engine-flags.test.ts)
  for (const spec of engineOptionTable) if (spec.flag) o[spec.name] = flags[spec.name];
  o.spec = f.spec ?? (f.draft ? "draft" : "off");
  return o as EngineOptions;
}

/** Sampling flags, named as llama.cpp names them. */
export function addSamplingOptions(cmd: Command): Command {
  return cmd
    .addOption(opt("--temp <t>", "temperature; 0 = greedy").default(0.8).argParser(parseFloatArg("--temp", 0, 100)))
    .addOption(opt("--top-k <k>", "keep the k most likely tokens; 0 = off").default(40).argParser(parseIntArg("--top-k", 0)))
    .addOption(opt("--top-p <p>", "nucleus sampling; 1 = off").default(0.95).argParser(parseFloatArg("--top-p", 0, 1)))
    .addOption(opt("--min-p <p>", "drop tokens below p × the top probability; 0 = off").default(0.05).argParser(parseFloatArg("--min-p", 0, 1)))
    .addOption(opt("--repeat-penalty <x>", "penalise repeated tokens; 1 = off").default(1).argParser(parseFloatArg("--repeat-penalty", 0.01, 100)))
    .addOption(opt("--repeat-last-n <n>", "tokens the penalties look back over; -1 = all").default(64).argParser(parseIntArg("--repeat-last-n", -1)))
    .addOption(opt("--presence-penalty <x>", "presence penalty").default(0).argParser(parseFloatArg("--presence-penalty", -2, 2)))
    .addOption(opt("--frequency-penalty <x>", "frequency penalty").default(0).argParser(parseFloatArg("--frequency-penalty", -2, 2)))
    .addOption(opt("-s, --seed <n>", "random seed (default: random)").argParser(parseIntArg("--seed", 0, 2 ** 53 - 1)));
}

export interface SamplingFlags {
  temp: number;
  topK: number;
  topP: number;
  minP: number;
  repeatPenalty: number;
  repeatLastN: number;
  presencePenalty: number;
  frequencyPenalty: number;
  seed?: number;
}

export function samplingRequest(f: SamplingFlags) {
  return {
    temperature: f.temp,
    topK: f.topK,
    topP: f.topP,
    minP: f.minP,
    repeatPenalty: f.repeatPenalty,
    penaltyWindow: f.repeatLastN,
    presencePenalty: f.presencePenalty,
    frequencyPenalty: f.frequencyPenalty,
    seed: f.seed ?? Math.floor(Math.random() * 2 ** 32),
  };
}

/** Constrained output: a JSON Schema or a GBNF grammar (generate). */
export function addGrammarOptions(cmd: Command): Command {
  return cmd
    .addOption(opt("--json-schema <schema>", "constrain the output to JSON valid under this JSON Schema (a file, or the schema itself)").conflicts("grammar"))
    .addOption(opt("--grammar <file>", "constrain the output to this GBNF grammar (llama.cpp's format, root rule 'root')"));
}

export interface GrammarFlags {
  jsonSchema?: string;
  grammar?: string;
}

/** The GBNF the flags ask for, if any. */
export function grammarFromFlags(f: GrammarFlags): string | undefined {
  if (f.grammar !== undefined) {
    if (!existsSync(f.grammar)) throw new CliError(`grammar file not found: ${f.grammar}`);
    return readFileSync(f.grammar, "utf8");
  }
  if (f.jsonSchema === undefined) return undefined;
  const arg = f.jsonSchema.trim();
  let text: string;
  if (/^[{[]/.test(arg) || arg === "true") {
    text = arg;
  } else {
    if (!existsSync(arg)) throw new CliError(`--json-schema: no such file, and not JSON: ${arg}`, 2);
    text = readFileSync(arg, "utf8");
  }
  let schema: unknown;
  try {
    schema = JSON.parse(text);
  } catch (e) {
    throw new CliError(`--json-schema: not valid JSON: ${(e as Error).message}`, 2);
  }
  try {
    return jsonSchemaToGrammar(schema);
  } catch (e) {
    if (e instanceof SchemaError) throw new CliError(`--json-schema: ${e.message}`, 2);
    throw e;
  }
}
