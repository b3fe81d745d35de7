// Every engine flag of every command reaches the engine: each command runs once with all of its
// engine flags set to values other than their defaults, and the options it hands the library
// (VELO_ENGINE_OPTIONS_LOG: Engine.create's JSON, one line per engine) must carry each of them.
// A command that accepts such a flag and drops it (serve's --page-size did) fails here, and so
// does a new engine flag this table does not know.
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { benchCommand } from "../cli/commands/bench";
import { chatCommand } from "../cli/commands/chat";
import { embedCommand } from "../cli/commands/embed";
import { generateCommand } from "../cli/commands/generate";
import { serveCommand } from "../cli/commands/serve";
import { Option } from "commander";
import { parseSizeArg } from "../cli/options";
import { engineOptionTable } from "../src/engine/options";
import { runCli } from "./helpers/cli";
import { testData } from "./helpers/paths";

/** Each engine flag: its arguments, and the key and value the library must receive. */
const FLAGS: Record<string, { args: string[]; key: string; value: unknown }> = {
  threads: { args: ["--threads", "1"], key: "threads", value: 1 },
  ctxSize: { args: ["--ctx-size", "96"], key: "ctx_size", value: 96 },
  prefixCache: { args: ["--no-prefix-cache"], key: "prefix_cache", value: false },
  pageSize: { args: ["--page-size", "32"], key: "page_size", value: 32 },
  cacheTypeK: { args: ["--cache-type-k", "q8_0"], key: "cache_type_k", value: "q8_0" },
  cacheTypeV: { args: ["--cache-type-v", "q4_0"], key: "cache_type_v", value: "q4_0" },
  memoryBudget: { args: ["--memory-budget", "3000"], key: "memory_budget", value: 3000 * 2 ** 20 },
  backend: { args: ["--backend", "cpu"], key: "backend", value: "cpu" },
  spec: { args: ["--spec", "ngram"], key: "spec", value: "ngram" },
  draftMax: { args: ["--draft-max", "3"], key: "draft_max", value: 3 },
  specAdapt: { args: ["--no-spec-adapt"], key: "spec_adapt", value: false },
  // serve's batch; bench's --max-batch-size is its sweep's largest batch, which its engine gets
  maxBatchSize: { args: ["--max-batch-size", "2"], key: "max_batch_size", value: 2 },
  kvMemory: { args: ["--kv-memory", "2M"], key: "kv_memory", value: 2 * 2 ** 20 },
  profile: { args: ["--profile"], key: "profile", value: true },
};
// flags that reach the engine by other ways than its options: checked elsewhere
const ELSEWHERE: Record<string, string> = {
  device: "a GPU index (tests/gpu.test.ts: --device 99 is refused)",
  draft: "the draft model file (tests/speculative.test.ts)",
  checkTensors: "a check before the engine starts (tests/non-finite.test.ts)",
  model: "the model file itself",
  prefixCacheFile: "a saved prefix loaded at start (tests/prefix_cache.test.ts)",
};
const ENGINE_FLAGS = new Set([...Object.keys(FLAGS), ...Object.keys(ELSEWHERE)]);

const dir = mkdtempSync(join(tmpdir(), "velo-flags-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const stories = testData("stories260K.gguf");

// how each command is run: its own arguments besides the engine flags
const commands = {
  generate: { make: generateCommand, args: [stories, "Once", "-n", "2"], stdin: undefined },
  chat: { make: chatCommand, args: [stories, "-n", "2", "--no-history"], stdin: "Hi\n" },
  bench: { make: benchCommand, args: [stories, "-p", "4", "-n", "2", "-r", "1"], stdin: undefined },
  embed: { make: embedCommand, args: [stories, "Once"], stdin: undefined },
  serve: { make: serveCommand, args: [stories, "--port", "0"], stdin: undefined },
};

for (const [name, c] of Object.entries(commands)) {
  test(`velo ${name}: every engine flag it takes reaches the engine`, async () => {
    const taken = c.make().options.map((o) => o.attributeName()).filter((a) => ENGINE_FLAGS.has(a) || /^(ctx|cache|page|prefix|spec|draft|memory|backend|thread|maxBatch|kv|profile|batch)/i.test(a));
    const unknown = taken.filter((a) => !ENGINE_FLAGS.has(a));
    expect(unknown).toEqual([]); // a new engine flag: add it to FLAGS (or ELSEWHERE, saying where it is checked)
    const flags = taken.filter((a) => a in FLAGS);
    expect(flags.length).toBeGreaterThanOrEqual(8);
    const log = join(dir, `${name}.jsonl`);
    const args = [name, ...c.args, ...flags.flatMap((a) => FLAGS[a]!.args)];
    const env = { VELO_ENGINE_OPTIONS_LOG: log };
    if (name === "serve") {
      const proc = Bun.spawn([process.execPath, join(import.meta.dir, "..", "cli", "index.ts"), ...args], { stdout: "ignore", stderr: "pipe", env: { ...process.env, ...env, NO_COLOR: "1" } });
      const reader = (proc.stderr as ReadableStream<Uint8Array>).getReader();
      let seen = "";
      while (!/velo serving/.test(seen)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`serve exited: ${seen}`);
        seen += new TextDecoder().decode(value);
      }
      // what the running engine reports, too
      const url = seen.match(/on (http:\/\/[\d.]+:\d+)/)![1]!;
      const metrics = await (await fetch(`${url}/metrics`)).text();
      expect(metrics).toMatch(/^velo_kv_page_size 32$/m);
      proc.kill();
      await proc.exited;
    } else {
      const r = await runCli(args, { stdin: c.stdin, env });
      expect({ code: r.code, stderr: r.stderr.split("\n").filter((l) => l.startsWith("velo: error")) }).toEqual({ code: 0, stderr: [] });
    }
    const sent = readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(sent.length).toBeGreaterThanOrEqual(1);
    const got = Object.fromEntries(flags.map((a) => [FLAGS[a]!.key, sent[0]![FLAGS[a]!.key]]));
    const want = Object.fromEntries(flags.map((a) => [FLAGS[a]!.key, FLAGS[a]!.value]));
    expect(got).toEqual(want);
  }, 60_000);
}

test("one name per option: the field is its flag's camelCase, the JSON key the field's snake_case", () => {
  for (const spec of engineOptionTable) {
    expect({ field: spec.name, key: spec.key }).toEqual({ field: spec.name, key: spec.name.replace(/[A-Z]/g, (c) => "_" + c.toLowerCase()) });
    if (!spec.flag) continue;
    const attr: string = new Option(spec.flag).attributeName();
    expect({ flag: spec.flag, field: spec.name as string }).toEqual({ flag: spec.flag, field: attr });
  }
});

test("sizes: binary units, a bare number is MiB, bad or out-of-range values are refused by name", () => {
  const p = parseSizeArg("--memory-budget", 2 ** 20, 2 ** 44);
  expect([p("8G"), p("512M"), p("1.5g"), p("4096"), p("2GiB"), p("64 MB"), p("1T")]).toEqual([8 * 2 ** 30, 512 * 2 ** 20, 1.5 * 2 ** 30, 4096 * 2 ** 20, 2 * 2 ** 30, 64 * 2 ** 20, 2 ** 40]);
  expect(() => p("8X")).toThrow(/--memory-budget must be a size such as 8G/);
  expect(() => p("-1")).toThrow(/must be a size/);
  expect(() => p("12K")).toThrow(/--memory-budget must be between 1 MiB and 16 TiB, got '12K'/);
  expect(() => p("17T")).toThrow(/between 1 MiB and 16 TiB/);
});
