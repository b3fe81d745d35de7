// Every engine option, once (as llama.cpp's common/arg.cpp defines its options): its field in
// EngineOptions, its key in velo_engine_create's JSON, its type and the bounds a user may give,
// and, where users set it, its CLI flag, help and the commands that take it. One name per
// option: the field is the flag's camelCase and the key its snake_case (the library's Swift
// field too), held so by tests/engine-flags.test.ts. Derived from this table: the JSON the
// library reads (engineOptionsJSON), the CLI's engine flags, their VELO_* variables and what
// they set (cli/options.ts), docs/flags.md (scripts/flags-doc.ts). The library's own reader
// (swift/Sources/VeloCore/CAPI/EngineExports.swift) describes itself through
// velo_engine_options_schema, and tests/engine-options.test.ts holds the two to the same keys,
// types and bounds.
import type { EngineOptions } from "./engine";

export type EngineCommand = "generate" | "chat" | "serve" | "bench" | "embed";

export interface EngineOptionSpec {
  name: keyof EngineOptions;
  /** The key in velo_engine_create's JSON. */
  key: string;
  type: "int" | "bool" | "choice";
  /** Ints in bytes: the flag takes a size (8G, 512M; a bare number is MiB). */
  unit?: "bytes";
  /** Bounds a user may give (ints). The library's lower bound may be below (0: its default). */
  min?: number;
  max?: number;
  choices?: readonly string[];
  /** The CLI flag (commander's syntax) and the commands that take it; none: options that the
   * commands set themselves (bench's sizes, serve's batch_auto) or that library callers give. */
  flag?: string;
  commands?: readonly EngineCommand[];
  help?: string;
  /** What the CLI shows as the default, where the flag has one. */
  cliDefault?: string | number;
}

/** KV cache storage types (llama.cpp's names). */
export const kvCacheTypes = ["f32", "f16", "q8_0", "q4_0"] as const;

const MIB = 2 ** 20;
const RUN: readonly EngineCommand[] = ["generate", "chat", "serve", "bench", "embed"];
const DECODE: readonly EngineCommand[] = ["generate", "chat", "serve", "bench"];

export const engineOptionTable: readonly EngineOptionSpec[] = [
  { name: "threads", key: "threads", type: "int", min: 1, max: 1024, flag: "-t, --threads <n>", commands: RUN, help: "CPU threads (default: all cores)" },
  {
    name: "ctxSize", key: "ctx_size", type: "int", min: 2, max: 1 << 20, flag: "-c, --ctx-size <n>", commands: RUN,
    help: "context size per sequence (default: the model's trained context, shortened to what fits the device)",
  },
  {
    name: "maxBatchSize", key: "max_batch_size", type: "int", min: 1, max: 1024, flag: "--max-batch-size <n>", commands: ["serve"], cliDefault: 8,
    help: "sequences decoded together (default 8, fewer if they do not fit at the context)",
  },
  { name: "batchAuto", key: "batch_auto", type: "bool" },
  {
    name: "memoryBudget", key: "memory_budget", type: "int", unit: "bytes", min: MIB, max: 2 ** 44, flag: "--memory-budget <size>", commands: RUN,
    help: "memory the model may use on its device, e.g. 8G or 512M (a bare number is MiB): GPU memory, or RAM on the CPU (default: what the device has free)",
  },
  { name: "batchTokens", key: "batch_tokens", type: "int", min: 1, max: 1 << 16 },
  { name: "kvPages", key: "kv_pages", type: "int", min: 1, max: 1 << 24 },
  {
    name: "kvMemory", key: "kv_memory", type: "int", unit: "bytes", min: MIB, max: 2 ** 44, flag: "--kv-memory <size>", commands: ["serve"],
    help: "KV cache budget, e.g. 4G (a bare number is MiB; default: max-batch-size full contexts)",
  },
  {
    name: "cacheTypeK", key: "cache_type_k", type: "choice", choices: kvCacheTypes, flag: "--cache-type-k <type>", commands: RUN, cliDefault: "f16",
    help: "how keys are stored in the KV cache: f32, f16, q8_0 or q4_0",
  },
  {
    name: "cacheTypeV", key: "cache_type_v", type: "choice", choices: kvCacheTypes, flag: "--cache-type-v <type>", commands: RUN, cliDefault: "f16",
    help: "how values are stored in the KV cache: f32, f16, q8_0 or q4_0",
  },
  { name: "pageSize", key: "page_size", type: "int", min: 1, max: 4096, flag: "--page-size <n>", commands: RUN, help: "tokens per KV cache page (default: 16)" },
  { name: "prefixCache", key: "prefix_cache", type: "bool", flag: "--no-prefix-cache", commands: RUN, help: "do not reuse KV pages of earlier prompts" },
  { name: "profile", key: "profile", type: "bool", flag: "--profile", commands: ["bench"], help: "also report where the time went, by kind of op" },
  {
    name: "spec", key: "spec", type: "choice", choices: ["off", "ngram", "draft"], flag: "--spec <mode>", commands: DECODE,
    help: "speculative decoding: off, ngram (prompt lookup) or draft (default: draft with --draft, else off)",
  },
  { name: "draftMax", key: "draft_max", type: "int", min: 1, max: 16, flag: "--draft-max <n>", commands: DECODE, cliDefault: 8, help: "most tokens guessed per step" },
  {
    name: "specAdapt", key: "spec_adapt", type: "bool", flag: "--no-spec-adapt", commands: DECODE,
    help: "always guess --draft-max tokens (no adaptation, no switching off)",
  },
  {
    name: "backend", key: "backend", type: "choice", choices: ["auto", "cpu", "vulkan", "metal"], flag: "--backend <name>", commands: RUN, cliDefault: "auto",
    help: "where the model runs: auto (Metal on macOS, else a Vulkan GPU if there is one, else the CPU), cpu, vulkan or metal",
  },
  { name: "device", key: "device", type: "int", min: 0, max: 1024, flag: "--device <n>", commands: RUN, help: "which GPU of the backend, counted from 0 (default: the first real GPU)" },
];

/**
 * The engine options as the library reads them (velo_engine_create's JSON): every key is here
 * even when its value is undefined (JSON.stringify leaves those out), so Object.keys of
 * engineOptionsJSON({}) is every key this side can send.
 */
export function engineOptionsJSON(opts: EngineOptions): Record<string, unknown> {
  return Object.fromEntries(engineOptionTable.map((s) => [s.key, opts[s.name]]));
}
