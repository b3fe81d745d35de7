import { existsSync } from "node:fs";
import { join, resolve } from "node:path";

export const repoRoot = resolve(import.meta.dir, "..", "..");
/** The team's shared models and reference data (read-only), beside the checkout. */
export const sharedDir = process.env.VELO_SHARED ?? resolve(repoRoot, "..", "shared");
export const modelsDir = join(sharedDir, "models");

export function sharedModel(rel: string): string {
  const p = join(modelsDir, rel);
  if (!existsSync(p)) throw new Error(`missing reference file ${p}: the shared folder must sit beside the checkout (or set VELO_SHARED)`);
  return p;
}
