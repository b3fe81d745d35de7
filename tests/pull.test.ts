// `velo pull`, `velo ls`, `velo rm` against a local server that answers like the Hugging Face hub:
// the model API's file listing with LFS sha256 (/api/models/OWNER/REPO/revision/main?blobs=true),
// resolve/main/FILE answered with a redirect to a CDN on another origin, and a CDN that serves
// ranges (206) and can drop a connection half-way. VELO_HF_ENDPOINT points velo at it.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ProgressBar } from "../cli/progress";
import { runCli } from "./helpers/cli";
import { repoRoot } from "./helpers/paths";
import { testData } from "./helpers/paths";

const sha256 = (b: Uint8Array) => new Bun.CryptoHasher("sha256").update(b).digest("hex");

interface HubFile {
  name: string;
  bytes: Uint8Array;
  /** the sha256 the listing publishes (default: the real one) */
  published?: string;
  lfs?: boolean;
}

const f32 = new Uint8Array(readFileSync(join(repoRoot, "models", "stories260K.gguf")));
const q8 = new Uint8Array(readFileSync(testData("stories260K-q8_0.gguf")));
const q4 = new Uint8Array(readFileSync(testData("stories260K-q4_0.gguf")));
const html = new TextEncoder().encode("<!DOCTYPE html><html><body>Sign in to continue</body></html>".padEnd(4096, " "));

const repos: Record<string, HubFile[]> = {
  "tiny/stories": [
    { name: "README.md", bytes: new TextEncoder().encode("# stories\n"), lfs: false },
    { name: "stories260K-F32.gguf", bytes: f32 },
    { name: "stories260K-Q8_0.gguf", bytes: q8 },
    { name: "stories260K-Q4_0.gguf", bytes: q4 },
  ],
  "tiny/single": [{ name: "stories260K.gguf", bytes: f32 }],
  "tiny/webpage": [{ name: "model.gguf", bytes: html }],
  "tiny/badsha": [{ name: "corrupt.gguf", bytes: q4, published: "0".repeat(64) }],
  "tiny/split": [
    { name: "big-Q4_K_M-00001-of-00002.gguf", bytes: q4 },
    { name: "big-Q4_K_M-00002-of-00002.gguf", bytes: q4 },
  ],
  "gated/stories": [{ name: "gated.gguf", bytes: q8 }],
};
const GOOD_TOKEN = "hf_good";

/** What the CDN saw: path, Range header, Authorization header. */
const cdnLog: { path: string; range: string | null; auth: string | null }[] = [];
/** Paths served slowly. */
const slow = new Set<string>();
/** Paths whose next request is cut after this many bytes (once). */
const dropOnce = new Map<string, number>();

let cdn: ReturnType<typeof Bun.serve>;
let hub: ReturnType<typeof Bun.serve>;
let store: string;
let env: Record<string, string>;

function blob(sha: string): Uint8Array | undefined {
  for (const files of Object.values(repos)) for (const f of files) if (sha256(f.bytes) === sha) return f.bytes;
  return undefined;
}

beforeAll(() => {
  cdn = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch(req) {
      const url = new URL(req.url);
      cdnLog.push({ path: url.pathname, range: req.headers.get("range"), auth: req.headers.get("authorization") });
      const bytes = url.pathname.startsWith("/blobs/") ? blob(url.pathname.slice(7)) : url.pathname === "/files/stories260K.gguf" ? f32 : undefined;
      if (!bytes) return new Response("Not Found", { status: 404 });
      let start = 0;
      const range = req.headers.get("range");
      if (range) {
        const m = /^bytes=(\d+)-$/.exec(range);
        if (!m || Number(m[1]) >= bytes.length) return new Response(null, { status: 416, headers: { "content-range": `bytes */${bytes.length}` } });
        start = Number(m[1]);
      }
      const body = bytes.subarray(start);
      const headers = { "content-length": String(body.length), "accept-ranges": "bytes", ...(range ? { "content-range": `bytes ${start}-${bytes.length - 1}/${bytes.length}` } : {}) };
      if (slow.has(url.pathname)) {
        // 64 KiB every 50 ms: slow enough to be interrupted half-way
        let off = 0;
        const stream = new ReadableStream({
          async pull(c) {
            if (off >= body.length) return c.close();
            await Bun.sleep(50);
            c.enqueue(body.subarray(off, off + 65536));
            off += 65536;
          },
        });
        return new Response(stream, { status: range ? 206 : 200, headers });
      }
      const cut = dropOnce.get(url.pathname);
      if (cut !== undefined) {
        dropOnce.delete(url.pathname);
        // send part of the body, then break the connection
        const stream = new ReadableStream({
          async pull(c) {
            c.enqueue(body.subarray(0, cut));
            await Bun.sleep(50);
            c.error(new Error("connection dropped"));
          },
        });
        return new Response(stream, { status: range ? 206 : 200, headers });
      }
      return new Response(body as Uint8Array<ArrayBuffer>, { status: range ? 206 : 200, headers }); // (the files' bytes: never a SharedArrayBuffer)
    },
  });
  hub = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch(req) {
      const url = new URL(req.url);
      const auth = req.headers.get("authorization");
      const gate = (repo: string) => {
        if (!repo.startsWith("gated/")) return null;
        if (!auth) return Response.json({ error: "Access to model gated/stories is restricted. You must be authenticated to access it." }, { status: 401 });
        if (auth !== `Bearer ${GOOD_TOKEN}`) return Response.json({ error: "Access to model gated/stories is restricted and you are not in the authorized list." }, { status: 403 });
        return null;
      };
      let m = /^\/api\/models\/([^/]+\/[^/]+)\/revision\/([^/]+)$/.exec(url.pathname);
      if (m) {
        const files = repos[m[1]!];
        if (!files || m[2] !== "main") return Response.json({ error: "Repository not found" }, { status: 404 });
        const denied = gate(m[1]!);
        if (denied) return denied;
        return Response.json({
          id: m[1], sha: "0123456789abcdef0123456789abcdef01234567",
          siblings: files.map((f) => ({
            rfilename: f.name, size: f.bytes.length, blobId: sha256(f.bytes).slice(0, 40),
            ...(f.lfs === false ? {} : { lfs: { sha256: f.published ?? sha256(f.bytes), size: f.bytes.length, pointerSize: 134 } }),
          })),
        });
      }
      m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
      if (m) {
        const f = repos[m[1]!]?.find((x) => x.name === decodeURIComponent(m![3]!));
        if (!f) return new Response("Entry not found", { status: 404, headers: { "x-error-code": "EntryNotFound" } });
        const denied = gate(m[1]!);
        if (denied) return denied;
        return new Response(null, {
          status: 302,
          headers: { location: `${cdn.url.origin}/blobs/${sha256(f.bytes)}?X-Amz-Signature=abc`, "x-linked-size": String(f.bytes.length), "x-linked-etag": `"${sha256(f.bytes)}"` },
        });
      }
      return new Response("Not Found", { status: 404 });
    },
  });
  store = mkdtempSync(join(tmpdir(), "velo-store-"));
  env = { VELO_MODELS: store, VELO_HF_ENDPOINT: hub.url.origin, HF_TOKEN: "", HF_ENDPOINT: "" };
});

afterAll(() => {
  cdn?.stop(true);
  hub?.stop(true);
  rmSync(store, { recursive: true, force: true });
});

const velo = (args: string[], extra: Record<string, string> = {}) => runCli(args, { env: { ...env, ...extra } });
const stored = (name: string) => new Uint8Array(readFileSync(join(store, `${name}.gguf`)));

describe("velo pull from a hub", () => {
  test("hf:OWNER/REPO:QUANT: picks the file, follows the redirect, verifies, stores; then by name", async () => {
    const r = await velo(["pull", "hf:tiny/stories:Q8_0"]);
    expect(r.stderr).not.toContain("error");
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("stories260K-Q8_0\n");
    expect(sha256(stored("stories260K-Q8_0"))).toBe(sha256(q8));
    // not a terminal: plain lines, no carriage returns
    expect(r.stderr).not.toContain("\r");
    expect(r.stderr).toMatch(/pulling stories260K-Q8_0\.gguf: .*(KiB|MiB)/);
    const meta = JSON.parse(readFileSync(join(store, "stories260K-Q8_0.gguf.json"), "utf8"));
    expect(meta).toMatchObject({ source: "hf:tiny/stories/stories260K-Q8_0.gguf", spec: "hf:tiny/stories:Q8_0", sha256: sha256(q8) });
    expect(cdnLog.at(-1)!.path).toBe(`/blobs/${sha256(q8)}`);

    // every command takes the stored name (or the spec) where it takes a file
    const want = (await runCli(["generate", testData("stories260K-q8_0.gguf"), "Once upon a time", "-n", "8", "--temp", "0"])).stdout;
    expect((await velo(["generate", "stories260K-Q8_0", "Once upon a time", "-n", "8", "--temp", "0"])).stdout).toBe(want);
    expect((await velo(["generate", "-m", "hf:tiny/stories:Q8_0", "Once upon a time", "-n", "8", "--temp", "0"])).stdout).toBe(want);
    expect((await velo(["tokenize", "-m", "stories260K-Q8_0", "Once upon a time"])).stdout).toBe("1 403 407 261 378\n");

    // pulled already: nothing downloaded
    const n = cdnLog.length;
    const again = await velo(["pull", "hf:tiny/stories:Q8_0"]);
    expect(again.code).toBe(0);
    expect(again.stderr).toContain("already in the store");
    expect(cdnLog.length).toBe(n);
  });

  test("the only GGUF of a repository, and a plain URL", async () => {
    const r = await velo(["pull", "hf:tiny/single", "--name", "single"]);
    expect(r.code).toBe(0);
    expect(sha256(stored("single"))).toBe(sha256(f32));
    const u = await velo(["pull", `${cdn.url.origin}/files/stories260K.gguf`]);
    expect(u.code).toBe(0);
    expect(u.stdout).toBe("stories260K\n");
    expect(sha256(stored("stories260K"))).toBe(sha256(f32));
    const missing = await velo(["pull", `${cdn.url.origin}/files/none.gguf`]);
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/velo: error: .*file not found \(404/);
  });

  test("a dropped connection resumes with a Range request", async () => {
    const path = `/blobs/${sha256(q4)}`;
    dropOnce.set(path, 300_000);
    const from = cdnLog.length;
    const r = await velo(["pull", "hf:tiny/stories:Q4_0"]);
    expect(r.stderr).toMatch(/resuming \(attempt 2 of 4\)/);
    expect(r.code).toBe(0);
    expect(sha256(stored("stories260K-Q4_0"))).toBe(sha256(q4));
    const reqs = cdnLog.slice(from).filter((x) => x.path === path);
    expect(reqs.length).toBe(2);
    expect(reqs[0]!.range).toBeNull();
    expect(reqs[1]!.range).toMatch(/^bytes=[1-9]\d*-$/);
    expect(Number(/\d+/.exec(reqs[1]!.range!)![0])).toBeLessThanOrEqual(300_000);
  });

  test("an interrupted pull is kept as a partial download and finished by the next pull", async () => {
    const path = `/blobs/${sha256(f32)}`;
    dropOnce.set(path, 500_000);
    const first = await velo(["pull", "hf:tiny/stories:F32", "--retries", "0"]);
    expect(first.code).not.toBe(0);
    expect(first.stderr).toMatch(/velo: error: .*kept: run velo pull hf:tiny\/stories:F32 again to resume/);
    expect(existsSync(join(store, "stories260K-F32.gguf.part"))).toBe(true);
    expect(existsSync(join(store, "stories260K-F32.gguf"))).toBe(false);
    const ls = await velo(["ls"]);
    expect(ls.stdout).toMatch(/stories260K-F32.*partial/);
    const from = cdnLog.length;
    const second = await velo(["pull", "hf:tiny/stories:F32"]);
    expect(second.code).toBe(0);
    expect(second.stderr).toMatch(/resuming at/);
    expect(cdnLog.slice(from).find((x) => x.path === path)!.range).toMatch(/^bytes=[1-9]\d*-$/);
    expect(sha256(stored("stories260K-F32"))).toBe(sha256(f32));
    expect(existsSync(join(store, "stories260K-F32.gguf.part"))).toBe(false);
  });

  test("Ctrl-C keeps the partial download, and the next pull resumes it", async () => {
    const path = `/blobs/${sha256(f32)}`;
    rmSync(join(store, "ctrlc.gguf"), { force: true });
    slow.add(path);
    const proc = Bun.spawn([process.execPath, join(repoRoot, "cli", "index.ts"), "pull", "hf:tiny/single", "--name", "ctrlc"], {
      env: { ...process.env, NO_COLOR: "1", ...env }, stdout: "pipe", stderr: "pipe",
    });
    const part = join(store, "ctrlc.gguf.part");
    for (let i = 0; i < 200 && !(existsSync(part) && statSync(part).size > 0); i++) await Bun.sleep(25);
    proc.kill("SIGINT");
    const [code, stderr] = await Promise.all([proc.exited, new Response(proc.stderr).text()]);
    slow.delete(path);
    expect(code).toBe(130);
    expect(stderr).toMatch(/interrupted: the partial download is kept/);
    const kept = statSync(part).size;
    expect(kept).toBeGreaterThan(0);
    expect(kept).toBeLessThan(f32.length);
    const from = cdnLog.length;
    const r = await velo(["pull", "hf:tiny/single", "--name", "ctrlc"]);
    expect(r.code).toBe(0);
    expect(cdnLog.slice(from).find((x) => x.path === path)!.range).toBe(`bytes=${kept}-`);
    expect(sha256(stored("ctrlc"))).toBe(sha256(f32));
  });

  test("gated repositories: 401 without HF_TOKEN, 403 with a token that has no access, and the token never reaches the CDN", async () => {
    const no = await velo(["pull", "hf:gated/stories"]);
    expect(no.code).not.toBe(0);
    expect(no.stderr).toMatch(/velo: error: hf:gated\/stories: 401 .*HF_TOKEN/);
    const bad = await velo(["pull", "hf:gated/stories"], { HF_TOKEN: "hf_wrong" });
    expect(bad.stderr).toMatch(/velo: error: .*403 forbidden: HF_TOKEN does not give access/);
    const from = cdnLog.length;
    const ok = await velo(["pull", "hf:gated/stories"], { HF_TOKEN: GOOD_TOKEN });
    expect(ok.code).toBe(0);
    expect(sha256(stored("gated"))).toBe(sha256(q8));
    const reqs = cdnLog.slice(from);
    expect(reqs.length).toBe(1);
    expect(reqs[0]!.auth).toBeNull();
  });

  test("clear errors: no such repository, quant or file; several choices; split files; not a GGUF; checksum; disk full", async () => {
    const cases: [string[], RegExp][] = [
      [["pull", "hf:tiny/nothere"], /hf:tiny\/nothere: no such repository/],
      [["pull", "hf:tiny/stories:Q5_K_M"], /has no Q5_K_M file \(GGUF files: stories260K-F32.gguf, stories260K-Q8_0.gguf, stories260K-Q4_0.gguf\)/],
      [["pull", "hf:tiny/stories/missing.gguf"], /has no file missing.gguf/],
      [["pull", "hf:tiny/stories"], /has 3 GGUF files: choose one with hf:tiny\/stories:QUANT/],
      [["pull", "hf:tiny/split"], /split into 2 parts/],
      [["pull", "hf:tiny/webpage"], /is not a GGUF file \(it starts with '<!DOCTYPE html><'\); nothing was kept/],
      [["pull", "hf:tiny/badsha"], /SHA-256 mismatch: got [0-9a-f]{64}, the hub publishes 0{64}/],
      [["pull", "nonsense"], /not a model spec/],
    ];
    for (const [args, msg] of cases) {
      const r = await velo(args);
      expect(r.code).not.toBe(0);
      const lines = r.stderr.trim().split("\n");
      expect(lines.at(-1)).toMatch(/^velo: error: /);
      expect(lines.at(-1)).toMatch(msg);
    }
    expect(existsSync(join(store, "model.gguf"))).toBe(false);
    expect(existsSync(join(store, "model.gguf.part"))).toBe(false);
    expect(existsSync(join(store, "corrupt.gguf"))).toBe(false);

    // a full disk: the partial file is /dev/full, where every write fails with ENOSPC
    if (existsSync("/dev/full")) {
      const full = mkdtempSync(join(tmpdir(), "velo-full-"));
      writeFileSync(join(full, "single.gguf.part.json"), JSON.stringify({ source: "hf:tiny/single/stories260K.gguf", sha256: sha256(f32), size: f32.length }));
      symlinkSync("/dev/full", join(full, "single.gguf.part"));
      const r = await velo(["pull", "hf:tiny/single", "--name", "single"], { VELO_MODELS: full });
      expect(r.code).not.toBe(0);
      expect(r.stderr.trim().split("\n").at(-1)).toMatch(/velo: error: disk full while writing .*single.gguf.part .*run velo pull again to resume/);
      rmSync(full, { recursive: true, force: true });
    }
  });

  test("velo ls and velo rm", async () => {
    mkdirSync(store, { recursive: true });
    const ls = await velo(["ls"]);
    expect(ls.code).toBe(0);
    expect(ls.stdout).toMatch(/stories260K-Q8_0 .*hf:tiny\/stories\/stories260K-Q8_0\.gguf/);
    const json = JSON.parse((await velo(["ls", "--json"])).stdout);
    expect(json.store).toBe(store);
    expect(json.models.map((m: { name: string }) => m.name)).toContain("single");
    const rm = await velo(["rm", "single", "stories260K"]);
    expect(rm.code).toBe(0);
    expect(rm.stdout).toMatch(/removed single/);
    expect(existsSync(join(store, "single.gguf"))).toBe(false);
    expect(existsSync(join(store, "single.gguf.json"))).toBe(false);
    const gone = await velo(["rm", "single"]);
    expect(gone.code).not.toBe(0);
    expect(gone.stderr).toMatch(/velo: error: not in the store/);
    const use = await velo(["generate", "single", "x"]);
    expect(use.stderr).toMatch(/model file not found: single/);
  });
});

describe("the progress bar", () => {
  test("a terminal gets one redrawn line with bytes, rate and ETA; other streams get plain lines", () => {
    const capture = () => {
      const out: string[] = [];
      return { out, stream: { write: (s: string) => out.push(s), isTTY: false } as unknown as NodeJS.WriteStream };
    };
    const tty = capture();
    const bar = new ProgressBar({ label: "pulling x.gguf", total: 10 * 2 ** 20, tty: true, stream: tty.stream });
    (bar as unknown as { t0: number }).t0 -= 1000; // pretend a second has passed
    bar.update(5 * 2 ** 20);
    bar.finish("pulled x.gguf");
    expect(tty.out[0]).toMatch(/^\rpulling x\.gguf +50% .*5\.00 MiB \/ 10\.0 MiB {2}\d.* MiB\/s {2}ETA \d+s/);
    expect(tty.out.at(-1)).toBe("\r\x1b[Kpulled x.gguf\n");
    const plain = capture();
    const p = new ProgressBar({ label: "pulling x.gguf", total: 100, tty: false, stream: plain.stream });
    for (let i = 1; i <= 100; i++) p.update(i);
    p.finish("done");
    expect(plain.out.join("")).not.toContain("\r");
    expect(plain.out.length).toBeLessThanOrEqual(12);
  });
});
