// Weights that are not numbers (a corrupted download, a broken fine-tune): NaN or infinite
// logits end the request with a clear error and the process goes on serving; --check-tensors
// refuses such a file at load, naming the tensor. Before, greedy decoding printed <unk> forever
// and sampling killed the process (an illegal-instruction trap).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readGGUFTensorTable } from "../src/gguf/reader";
import { runCli } from "./helpers/cli";
import { testData } from "./helpers/paths";
import { type Running, startServer } from "./helpers/server";

const dir = mkdtempSync(join(tmpdir(), "velo-nonfinite-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8;

/** A copy of `src` whose tensor `name` starts with `value`: 64 floats of an F32 tensor, or the
 * float16 scale of its first block for Q4_0/Q8_0 (what a flipped bit there does). */
function damaged(src: string, name: string, value: number, out: string): string {
  const bytes = readFileSync(testData(src));
  const t = readGGUFTensorTable(testData(src)).tensors.find((x) => x.name === name)!;
  const view = new DataView(bytes.buffer, bytes.byteOffset);
  if (t.type === F32) for (let i = 0; i < 64; i++) view.setFloat32(t.offset + 4 * i, value, true);
  else if (t.type === F16 || t.type === Q4_0 || t.type === Q8_0) view.setUint16(t.offset, Number.isNaN(value) ? 0x7e00 : value > 0 ? 0x7c00 : 0xfc00, true);
  else throw new Error(`type ${t.type} not handled`);
  const path = join(dir, out);
  writeFileSync(path, bytes);
  return path;
}

const cases = [
  { what: "NaN in blk.0.ffn_gate.weight (F32)", file: () => damaged("stories260K.gguf", "blk.0.ffn_gate.weight", NaN, "gate-nan.gguf"), tensor: "blk.0.ffn_gate.weight" },
  { what: "+inf in blk.0.attn_output.weight (F32)", file: () => damaged("stories260K.gguf", "blk.0.attn_output.weight", Infinity, "o-inf.gguf"), tensor: "blk.0.attn_output.weight" },
  // (a NaN confined to one element of Q or K is absorbed: the softmax's SIMD exp clamps its
  // input, which turns a NaN score into a finite one; --check-tensors catches that file)
  { what: "NaN scale in blk.2.ffn_up.weight (Q8_0)", file: () => damaged("stories260K-q8_0.gguf", "blk.2.ffn_up.weight", NaN, "q8-nan.gguf"), tensor: "blk.2.ffn_up.weight" },
  { what: "NaN scale in output.weight (Q4_0)", file: () => damaged("stories260K-q4_0.gguf", "output.weight", NaN, "out-nan.gguf"), tensor: "output.weight" },
];
const MESSAGE = /logits that are not numbers \(NaN or infinity\).*--check-tensors/;

describe("velo generate", () => {
  for (const c of cases) {
    test(`${c.what}: greedy and sampled end with the error, on the CPU and Vulkan; --check-tensors names the tensor`, async () => {
      const file = c.file();
      for (const backend of ["cpu", "vulkan"]) {
        for (const temp of ["0", "0.8"]) {
          const r = await runCli(["generate", file, "Once upon a time", "-n", "8", "--temp", temp, "--backend", backend]);
          expect({ backend, temp, code: r.code, out: r.stdout }).toEqual({ backend, temp, code: 1, out: "" });
          expect(r.stderr).toMatch(MESSAGE);
        }
      }
      const checked = await runCli(["generate", file, "Once", "-n", "1", "--check-tensors"]);
      expect(checked.code).toBe(1);
      expect(checked.stderr).toContain(`tensor ${c.tensor} `);
      expect(checked.stderr).toMatch(/holds (a NaN|an infinity) at row \d+, column \d+/);
    }, 60_000);
  }

  test("--check-tensors passes every undamaged test model", async () => {
    for (const f of ["stories260K.gguf", "stories260K-q8_0.gguf", "stories260K-q4_0.gguf", "llama-2-tiny-random.gguf", "tiny-random-llama3-bpe.gguf"]) {
      const r = await runCli(["generate", testData(f), "Once", "-n", "2", "--temp", "0", "--check-tensors"]);
      expect({ f, code: r.code, err: r.stderr }).toEqual({ f, code: 0, err: "" });
    }
  }, 60_000);
});

describe("velo serve", () => {
  let server: Running;
  beforeAll(async () => {
    server = await startServer([cases[0]!.file(), "--ctx-size", "256", "--max-batch-size", "4"]);
  });
  afterAll(() => server?.proc.kill());

  test("each request gets the error, streamed or not; the server keeps serving", async () => {
    const post = (body: object) => fetch(`${server.url}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ model: "gate-nan", prompt: "Once upon a time", max_tokens: 8, ...body }) });
    for (let round = 0; round < 3; round++) {
      // greedy, sampled and several at once
      const answers = await Promise.all([post({ temperature: 0 }), post({ temperature: 1, seed: round }), post({ temperature: 0.5, n: 2 })]);
      for (const res of answers) {
        expect(res.status).toBe(500);
        expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(MESSAGE);
      }
      const streamed = await (await post({ stream: true })).text();
      expect(streamed).toMatch(MESSAGE);
      expect(streamed.trimEnd().endsWith("data: [DONE]")).toBe(true);
      expect((await fetch(`${server.url}/health`)).status).toBe(200);
    }
    const tok = await fetch(`${server.url}/tokenize`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ content: "Once" }) });
    expect(tok.status).toBe(200);
    expect(server.proc.exitCode).toBeNull();
  }, 60_000);

  test("--check-tensors refuses the file at start, naming the tensor", async () => {
    const err = await startServer([cases[0]!.file(), "--check-tensors"]).then(() => null, (e: Error) => e.message);
    expect(err).toContain("tensor blk.0.ffn_gate.weight (f32) holds a NaN");
  }, 30_000);
});
