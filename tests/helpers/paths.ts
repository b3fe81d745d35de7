import { existsSync } from "node:fs";
import { join, resolve } from "node:path";

export const repoRoot = resolve(import.meta.dir, "..", "..");
/** The tests' reference data, in the repository (tests/data/README.md says where each file
 * comes from); VELO_TEST_DATA points at another copy of the same layout. */
export const dataDir = process.env.VELO_TEST_DATA ?? join(repoRoot, "tests", "data");

export function testData(rel: string): string {
  const p = join(dataDir, rel);
  if (!existsSync(p)) throw new Error(`missing test data ${p} (tests/data is part of the repository: is the clone complete?)`);
  return p;
}
