// The only module that touches bun:ffi. The library is opened on first use, so commands
// that never need the engine (--help, --version) start without it.
import { dlopen, FFIType, suffix } from "bun:ffi";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";

const { i32, i64, u32, ptr, cstring } = FFIType;

const symbols = {
  velo_abi_version: { args: [], returns: i32 },
  velo_version: { args: [], returns: cstring },
  velo_last_error: { args: [], returns: cstring },
  velo_model_open: { args: [cstring, ptr], returns: i32 },
  velo_model_close: { args: [ptr], returns: i32 },
  velo_model_info: { args: [ptr, ptr, i64, ptr], returns: i32 },
  velo_model_check_tensors: { args: [ptr], returns: i32 },
  velo_tokenize: { args: [ptr, ptr, i64, u32, ptr, i64, ptr], returns: i32 },
  velo_detokenize: { args: [ptr, ptr, i64, u32, ptr, i64, ptr], returns: i32 },
  velo_token_piece: { args: [ptr, i32, ptr, i64, ptr], returns: i32 },
  velo_engine_create: { args: [ptr, ptr, cstring, ptr], returns: i32 },
  velo_engine_destroy: { args: [ptr], returns: i32 },
  velo_engine_submit: { args: [ptr, cstring, ptr], returns: i32 },
  velo_engine_cancel: { args: [ptr, i64], returns: i32 },
  velo_engine_poll: { args: [ptr, ptr, i64, ptr], returns: i32 },
  velo_engine_wait: { args: [ptr, i32], returns: i32 },
  velo_engine_stats: { args: [ptr, ptr, i64, ptr], returns: i32 },
  velo_engine_reset_profile: { args: [ptr], returns: i32 },
  velo_engine_wait_kernels: { args: [ptr], returns: i32 },
  velo_engine_save_prefix: { args: [ptr, ptr, i64, cstring, ptr], returns: i32 },
  velo_engine_load_prefix: { args: [ptr, cstring, ptr], returns: i32 },
  velo_engine_options_schema: { args: [ptr, i64, ptr], returns: i32 },
  velo_engine_submit_embedding: { args: [ptr, ptr, i64, ptr], returns: i32 },
  velo_engine_take_embedding: { args: [ptr, i64, ptr, i64, ptr], returns: i32 },
} as const;

/** Must match velo_abi_version() in swift/Sources/VeloCore/CAPI/Exports.swift. */
export const ABI_VERSION = 3;

export type VeloSymbols = ReturnType<typeof dlopen<typeof symbols>>["symbols"];

const repoRoot = resolve(import.meta.dir, "..", "..");

/** Where the library is looked for: $VELO_LIB, else the release build of this checkout. */
export function libraryPath(): string {
  return process.env.VELO_LIB ?? join(repoRoot, ".build", "release", `libVelo.${suffix}`);
}

let loaded: VeloSymbols | undefined;

export function lib(): VeloSymbols {
  if (loaded) return loaded;
  const path = libraryPath();
  if (!existsSync(path)) {
    throw new Error(`the Velo engine library is not built (${path} is missing): run 'make' first`);
  }
  const handle = dlopen(path, symbols);
  const abi = handle.symbols.velo_abi_version();
  if (abi !== ABI_VERSION) {
    throw new Error(`${path} has C ABI version ${abi}, this CLI needs ${ABI_VERSION}: rebuild with 'make'`);
  }
  loaded = handle.symbols;
  return loaded;
}

/** C string argument (NUL-terminated UTF-8). */
export function cstr(s: string): Buffer {
  return Buffer.from(s + "\0", "utf8");
}
