// tests/data is complete and unchanged: every file its MANIFEST.sha256 lists, with that hash
// (a clone without Git LFS or with a cut download would otherwise fail in confusing ways), and
// nothing in the tests reads the team's folder beside the checkout.
import { expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { dataDir, repoRoot } from "./helpers/paths";

test("tests/data matches its manifest", () => {
  const lines = readFileSync(join(dataDir, "MANIFEST.sha256"), "utf8").trim().split("\n");
  expect(lines.length).toBeGreaterThan(60);
  const listed = new Set<string>();
  const bad: string[] = [];
  for (const line of lines) {
    const [hash, path] = line.split(/\s+/) as [string, string];
    listed.add(path.replace(/^\.\//, ""));
    const got = new Bun.CryptoHasher("sha256").update(readFileSync(join(dataDir, path))).digest("hex");
    if (got !== hash) bad.push(path);
  }
  expect(bad).toEqual([]);
  const walk = (d: string): string[] => readdirSync(d).flatMap((f) => (statSync(join(d, f)).isDirectory() ? walk(join(d, f)) : [relative(dataDir, join(d, f))]));
  const unlisted = walk(dataDir).filter((f) => f !== "MANIFEST.sha256" && f !== "README.md" && !listed.has(f));
  expect(unlisted).toEqual([]);
});

test("no test reads ../shared or VELO_SHARED", () => {
  const offenders: string[] = [];
  for (const dir of ["tests", "swift/Tests", "fuzz"]) {
    const walk = (d: string): string[] => readdirSync(d).flatMap((f) => {
      const p = join(d, f);
      if (f === "data" || f === ".build" || f === "regressions" || f === "corpus") return [];
      return statSync(p).isDirectory() ? walk(p) : [p];
    });
    for (const f of walk(join(repoRoot, dir))) {
      if (f.endsWith("test-data.test.ts")) continue;
      if (/\.\.\/shared\b|VELO_SHARED/.test(readFileSync(f, "utf8"))) offenders.push(relative(repoRoot, f));
    }
  }
  expect(offenders).toEqual([]);
});
