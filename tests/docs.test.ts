// The docs hold to the code: docs/flags.md is what scripts/flags-doc.ts writes from the
// commands' definitions, and every relative link of README.md and docs/ names a file that exists.
import { expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { flagsDoc } from "../scripts/flags-doc";
import { repoRoot } from "./helpers/paths";

test("docs/flags.md is written from the commands' options (scripts/bun scripts/flags-doc.ts > docs/flags.md)", () => {
  expect(readFileSync(join(repoRoot, "docs", "flags.md"), "utf8")).toBe(flagsDoc());
});

test("every relative link of README.md and docs/*.md names an existing file", () => {
  const files = ["README.md", ...readdirSync(join(repoRoot, "docs")).filter((f) => f.endsWith(".md")).map((f) => join("docs", f))];
  const broken: string[] = [];
  for (const f of files) {
    for (const m of readFileSync(join(repoRoot, f), "utf8").matchAll(/\]\(([^)#\s]+)(#[^)]*)?\)/g)) {
      const target = m[1]!;
      if (/^[a-z]+:/.test(target)) continue; // a URL
      if (!existsSync(join(repoRoot, dirname(f), target))) broken.push(`${f}: ${target}`);
    }
  }
  expect(broken).toEqual([]);
});
