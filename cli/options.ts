// Option groups shared by commands. Every option can also come from a VELO_* environment
// variable (named after the long flag: --ctx-size → VELO_CTX_SIZE).
import { type Command, Option } from "commander";
import { existsSync, readFileSync } from "node:fs";
import { jsonSchemaToGrammar, SchemaError } from "../src/grammar/json-schema";
import { looksLikeModel, resolveModel } from "./models";
import { type EngineOptions, type KVCacheType, kvCacheTypes } from "../src/engine/engine";
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

/** Engine settings every model-running command shares. */
export function addEngineOptions(cmd: Command): Command {
  cmd
    .addOption(opt("-t, --threads <n>", "CPU threads (default: all cores)").argParser(parseIntArg("--threads", 1, 1024)))
    .addOption(opt("-c, --ctx-size <n>", "context size per sequence (default: the model's trained context, shortened to what fits the device)").argParser(parseIntArg("--ctx-size", 2, 1 << 20)))
    .addOption(opt("--no-prefix-cache", "do not reuse KV pages of earlier prompts"))
    .addOption(opt("--page-size <n>", "tokens per KV cache page (default: 16)").argParser(parseIntArg("--page-size", 1, 4096)))
    .addOption(opt("--check-tensors", "check every tensor's values for NaN and infinity at load (one read of the file), as llama.cpp's --check-tensors"));
  addCacheTypeOptions(cmd);
  addMemoryBudgetOption(cmd);
  return addBackendOptions(cmd);
}

/** --memory-budget: how much of the device the engine may plan for. */
export function addMemoryBudgetOption(cmd: Command): Command {
  return cmd.addOption(opt("--memory-budget <MiB>", "memory the model may use on its device: GPU memory, or RAM on the CPU (default: what the device has free)")
    .argParser(parseIntArg("--memory-budget", 1, 1 << 24)));
}

/** --cache-type-k / --cache-type-v (llama.cpp's names): how K and V are stored in the KV cache. */
export function addCacheTypeOptions(cmd: Command): Command {
  return cmd
    .addOption(opt("--cache-type-k <type>", "how keys are stored in the KV cache: f32, f16, q8_0 or q4_0").choices([...kvCacheTypes]).default("f16"))
    .addOption(opt("--cache-type-v <type>", "how values are stored in the KV cache: f32, f16, q8_0 or q4_0").choices([...kvCacheTypes]).default("f16"));
}

export interface CacheTypeFlags {
  cacheTypeK?: KVCacheType;
  cacheTypeV?: KVCacheType;
}

/** --backend and --device (every command that runs a model). */
export function addBackendOptions(cmd: Command): Command {
  return cmd
    .addOption(opt("--backend <name>", "where the model runs: auto (Metal on macOS, else a Vulkan GPU if there is one, else the CPU), cpu, vulkan or metal")
      .choices(["auto", "cpu", "vulkan", "metal"]).default("auto"))
    .addOption(opt("--device <n>", "which GPU of the backend, counted from 0 (default: the first real GPU)").argParser(parseIntArg("--device", 0, 1024)));
}

/** Speculative decoding flags (generate, chat, serve, bench). */
export function addSpeculationOptions(cmd: Command): Command {
  return cmd
    .addOption(opt("--draft <model>", "speculative decoding with this draft model (same vocabulary)"))
    .addOption(opt("--spec <mode>", "speculative decoding: off, ngram (prompt lookup) or draft").choices(["off", "ngram", "draft"]))
    .addOption(opt("--draft-max <n>", "most tokens guessed per step").default(8).argParser(parseIntArg("--draft-max", 1, 16)))
    .addOption(opt("--no-spec-adapt", "always guess --draft-max tokens (no adaptation, no switching off)"));
}

export interface SpeculationFlags {
  draft?: string;
  spec?: "off" | "ngram" | "draft";
  draftMax?: number;
  specAdapt?: boolean;
}

export interface EngineFlags extends SpeculationFlags, CacheTypeFlags {
  memoryBudget?: number;
  threads?: number;
  backend?: "auto" | "cpu" | "vulkan" | "metal";
  device?: number;
  ctxSize?: number;
  prefixCache?: boolean;
  pageSize?: number;
  checkTensors?: boolean;
}

/**
 * The engine options the shared engine flags set, for every command that starts an engine
 * (cli/load.ts, serve): one place, so that no command accepts a flag and drops it.
 */
export function engineOptions(f: EngineFlags): EngineOptions {
  return {
    threads: f.threads,
    backend: f.backend,
    device: f.device,
    // absent: the model's trained context, shortened to what fits the device
    ctxSize: f.ctxSize,
    prefixCache: f.prefixCache,
    pageSize: f.pageSize,
    memoryBudgetMb: f.memoryBudget,
    cacheTypeK: f.cacheTypeK,
    cacheTypeV: f.cacheTypeV,
    speculation: f.spec ?? (f.draft ? "draft" : "off"),
    draftMax: f.draftMax,
    draftAdaptive: f.specAdapt,
  };
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
