// Loading's first phase: the model file brought into the page cache by touching one byte a page
// of a mapping (cli/load.ts touchPages), a piece of the file mapped at a time.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { touchPages } from "../cli/load";

const dir = mkdtempSync(join(tmpdir(), "velo-preread-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// a file whose size is no multiple of a page or a piece, bytes that differ page to page
const size = 10 * 2 ** 20 + 1234;
const bytes = new Uint8Array(size);
for (let i = 0; i < size; i++) bytes[i] = (i * 2654435761) >>> 24;
const file = join(dir, "model.bin");
writeFileSync(file, bytes);
// what one byte a 4 KiB page adds up to
let expected = 0;
for (let i = 0; i < size; i += 4096) expected += bytes[i]!;

describe("touchPages", () => {
  test("reads one byte of every page, across pieces mapped at their own offsets", () => {
    for (const piece of [3 * 2 ** 20, 2 ** 30]) {
      const seen: number[] = [];
      expect(touchPages(file, (b) => seen.push(b), piece)).toBe(expected);
      // progress only grows, and ends at the file's size
      for (let i = 1; i < seen.length; i++) expect(seen[i]!).toBeGreaterThan(seen[i - 1]!);
      expect(seen.at(-1)).toBe(size);
    }
  });

  test("an empty file touches nothing", () => {
    const empty = join(dir, "empty.bin");
    writeFileSync(empty, new Uint8Array(0));
    expect(touchPages(empty)).toBe(0);
  });
});
