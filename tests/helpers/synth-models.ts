// Random-weight models written by src/gguf/synth.ts once into the temporary folder, under a
// name that changes with synth.ts (so an edited writer never serves a stale file), shared by the
// tests that compare architectures with llama.cpp.
import { existsSync, mkdirSync, readFileSync, renameSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { synthesize } from "../../src/gguf/synth";
import { repoRoot } from "./paths";

const synthKey = Bun.hash(readFileSync(join(repoRoot, "src/gguf/synth.ts"))).toString(16).slice(0, 12);
const modelDir = join(tmpdir(), `velo-arch-models-${synthKey}`);

/** The path of `arch`'s `shape` model in weight type `type`, written on first use. */
export function synthModel(arch: string, type: string, shape = "test"): string {
  const file = join(modelDir, `${arch}-${shape}-${type}.gguf`);
  if (!existsSync(file)) {
    mkdirSync(modelDir, { recursive: true });
    const part = `${file}.${process.pid}.part`;
    synthesize({ out: part, arch, shape, type });
    renameSync(part, file);
  }
  return file;
}
