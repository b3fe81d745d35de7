// Which model file a command runs: a path, a name in the model store (velo pull / ls / rm), or,
// when none is given, the default embedded in the repository (models/stories260K.gguf).
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { CliError } from "./ui";

/** The demo model that ships in the repository, used when no model is given. */
export const DEFAULT_MODEL = resolve(import.meta.dir, "..", "models", "stories260K.gguf");

/** The model store: $VELO_MODELS, else ~/.cache/velo/models (XDG_CACHE_HOME respected). */
export function storeDir(): string {
  if (process.env.VELO_MODELS) return resolve(process.env.VELO_MODELS);
  const cache = process.env.XDG_CACHE_HOME || join(homedir(), ".cache");
  return join(cache, "velo", "models");
}

/** What `velo pull` records beside each stored file (NAME.gguf.json). */
export interface StoredModel {
  name: string;
  file: string;
  path: string;
  size: number;
  source?: string;
  spec?: string;
  url?: string;
  sha256?: string;
  pulled_at?: string;
}

/** The models in the store, by name. */
export function storedModels(dir = storeDir()): StoredModel[] {
  if (!existsSync(dir)) return [];
  const out: StoredModel[] = [];
  for (const file of readdirSync(dir).sort()) {
    if (!file.toLowerCase().endsWith(".gguf")) continue;
    const path = join(dir, file);
    let st;
    try {
      st = statSync(path);
    } catch {
      continue;
    }
    if (!st.isFile()) continue;
    let meta: Partial<StoredModel> = {};
    try {
      meta = JSON.parse(readFileSync(path + ".json", "utf8"));
    } catch {
      // a file copied into the store by hand: no record, still usable
    }
    out.push({ ...meta, name: file.replace(/\.gguf$/i, ""), file, path, size: st.size });
  }
  return out;
}

/** A stored model by its name, its file name, or the hf:/URL spec it was pulled with. */
export function findStored(name: string, dir = storeDir()): StoredModel | undefined {
  const all = storedModels(dir);
  const key = name.replace(/^hf\.co\//, "hf:");
  return (
    all.find((m) => m.name === key || m.file === key) ??
    all.find((m) => m.spec !== undefined && (m.spec === key || m.spec.toLowerCase() === key.toLowerCase())) ??
    all.find((m) => m.url !== undefined && m.url === key)
  );
}

/**
 * The model file a command runs. No model: the embedded default. A path that exists: itself
 * (it must be a regular file). Otherwise a stored name; else the error names both places.
 */
export function resolveModel(arg: string | undefined, what = "model"): string {
  if (arg === undefined || arg === "") {
    if (!existsSync(DEFAULT_MODEL)) throw new CliError(`no ${what} given, and the embedded default ${DEFAULT_MODEL} is missing: pass a GGUF file or a stored name (velo pull)`, 2);
    return DEFAULT_MODEL;
  }
  if (existsSync(arg)) {
    if (!statSync(arg).isFile()) throw new CliError(`model path is not a file: ${arg}`);
    return arg;
  }
  const stored = findStored(arg);
  if (stored) return stored.path;
  if (/^(hf:|https?:\/\/)/.test(arg)) throw new CliError(`${arg} is not in the model store (${storeDir()}): run velo pull ${arg} first`);
  throw new CliError(`model file not found: ${arg} (no such file, and no stored model of that name: velo ls lists them)`);
}

/** Whether an argument names a model: a .gguf path, a file that starts with GGUF, a stored name or spec. */
export function looksLikeModel(arg: string): boolean {
  if (/\.gguf$/i.test(arg) || /^hf:/.test(arg)) return true;
  if (existsSync(arg)) {
    try {
      if (!statSync(arg).isFile()) return false;
      const fd = openSync(arg, "r");
      const head = Buffer.alloc(4);
      readSync(fd, head, 0, 4, 0);
      closeSync(fd);
      return head.toString("latin1") === "GGUF";
    } catch {
      return false;
    }
  }
  return findStored(arg) !== undefined;
}
