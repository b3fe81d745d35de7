// The GGUF reader must answer every corrupt or truncated file with a clean error that says
// what is wrong, through the C ABI, without ever crashing the Bun process.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ErrorCode, VeloError } from "../src/engine/errors";
import { Model } from "../src/engine/model";
import { readGGUFTensorTable } from "../src/gguf/reader";
import { synthesize } from "../src/gguf/synth";
import { encodeGGUF, encodeHeader, type GGUFDocument, meta } from "../src/gguf/writer";
import { testData } from "./helpers/paths";

const dir = mkdtempSync(join(tmpdir(), "velo-gguf-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
function file(bytes: Uint8Array): string {
  const p = join(dir, `f${n++}.gguf`);
  writeFileSync(p, bytes);
  return p;
}

function openError(bytes: Uint8Array): VeloError {
  try {
    Model.open(file(bytes)).close();
  } catch (e) {
    if (e instanceof VeloError) return e;
    throw e;
  }
  throw new Error("expected the file to be rejected");
}

function f32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(new Float32Array(values).buffer);
}

const valid: GGUFDocument = {
  metadata: [
    ["general.architecture", meta.str("llama")],
    ["general.name", meta.str("test")],
    ["test.u8s", meta.arr("u8", [1, 2, 3])],
    ["test.nested", { type: "array", elementType: "array", values: [
      { type: "array", elementType: "string", values: ["a", "bc"] },
      { type: "array", elementType: "i32", values: [-1, 2] },
    ] }],
    ["test.f64", { type: "f64", value: 0.25 }],
    ["test.i64", { type: "i64", value: -5n }],
    ["test.bool", meta.bool(true)],
  ],
  tensors: [
    { name: "a", type: "F32", dims: [4, 2], data: f32Bytes([1, 2, 3, 4, 5, 6, 7, 8]) },
    { name: "b", type: "Q8_0", dims: [32], data: new Uint8Array(34) },
  ],
};
const validBytes = encodeGGUF(valid);

/** A copy of the valid file with a u64/u32 overwritten at `offset`. */
function patched(offset: number, value: bigint | number, size: 4 | 8 = 8): Uint8Array {
  const b = validBytes.slice();
  const dv = new DataView(b.buffer);
  if (size === 8) dv.setBigUint64(offset, BigInt(value), true);
  else dv.setUint32(offset, Number(value), true);
  return b;
}

describe("valid files", () => {
  test("every metadata type, nested arrays and tensors are read", () => {
    const m = Model.open(file(validBytes));
    const info = m.info();
    expect(info.gguf_version).toBe(3);
    expect(info.architecture).toBe("llama");
    expect(info.tensor_count).toBe(2);
    expect(info.metadata["test.nested"]).toEqual([["a", "bc"], [-1, 2]]);
    expect(info.metadata["test.i64"]).toBe(-5);
    expect(info.metadata["test.f64"]).toBe(0.25);
    expect(info.tensors.map((t) => [t.name, t.type, t.dims, t.bytes])).toEqual([["a", "F32", [4, 2], 32], ["b", "Q8_0", [32], 34]]);
    expect(info.tensors[1]!.offset % 32).toBe(0);
    expect(info.tokenizer).toBeNull();
    m.close();
  });

  test("version 2 files are read", () => {
    const m = Model.open(file(encodeGGUF({ ...valid, version: 2 })));
    expect(m.info().gguf_version).toBe(2);
    m.close();
  });

  test("a custom alignment is honoured", () => {
    const doc = { ...valid, alignment: 64, metadata: [...valid.metadata, ["general.alignment", meta.u32(64)]] as GGUFDocument["metadata"] };
    const m = Model.open(file(encodeGGUF(doc)));
    expect(m.info().alignment).toBe(64);
    expect(m.info().data_offset % 64).toBe(0);
    m.close();
  });

  test("the real stories260K model", () => {
    const m = Model.open(testData("stories260K.gguf"));
    const info = m.info();
    expect(info.architecture).toBe("llama");
    expect(info.tokenizer?.vocab_size).toBe(512);
    expect(info.tensor_types.F32).toBeGreaterThan(0);
    m.close();
  });
});

describe("corrupt files give clean errors", () => {
  test("truncated at every byte of the header and inside the data", () => {
    const { header } = encodeHeader(valid);
    const cuts = new Set<number>();
    for (let i = 0; i < header.length; i++) cuts.add(i);
    for (let i = header.length; i < validBytes.length; i += 7) cuts.add(i);
    for (const cut of cuts) {
      const e = openError(validBytes.subarray(0, cut));
      expect(e.code).toBe(ErrorCode.invalidFile);
      expect(e.message.length).toBeGreaterThan(10);
    }
  });

  test("truncation messages say what and where", () => {
    expect(openError(validBytes.subarray(0, 10)).message).toMatch(/truncated while reading tensor count at offset 8/);
    expect(openError(validBytes.subarray(0, validBytes.length - 5)).message).toMatch(/tensor 'b' data .* past the end/);
  });

  test("not a GGUF at all", () => {
    expect(openError(new Uint8Array(0)).message).toMatch(/empty file/);
    expect(openError(new TextEncoder().encode("hello world, definitely not gguf")).message).toMatch(/not a GGUF file/);
  });

  test("unsupported versions", () => {
    expect(openError(patched(4, 1, 4)).code).toBe(ErrorCode.unsupported);
    expect(openError(patched(4, 0x03000000, 4)).message).toMatch(/big-endian/);
    expect(openError(patched(4, 77, 4)).message).toMatch(/unknown GGUF version 77/);
  });

  test("absurd counts and lengths are refused before allocating", () => {
    expect(openError(patched(8, 1n << 62n)).message).toMatch(/tensor count .* impossible/);
    expect(openError(patched(16, 1n << 40n)).message).toMatch(/metadata count .* impossible/);
    expect(openError(patched(24, 1n << 50n)).message).toMatch(/length .* runs past the end/); // first key's length
  });

  const doc = (metadata: GGUFDocument["metadata"], tensors = valid.tensors): Uint8Array => encodeGGUF({ metadata, tensors });

  test("an array whose count does not fit the file", () => {
    // first key "general.architecture" (u64 len + 20 bytes) at 24; its u32 type at 52
    const bytes = doc([["x", meta.arr("u32", [1, 2])]], []);
    const dv = new DataView(bytes.buffer);
    dv.setBigUint64(24 + 8 + 1 + 4 + 4, 1n << 60n, true);
    expect(openError(bytes).message).toMatch(/element count of 'x' .* impossible/);
  });

  test("unknown value and tensor types", () => {
    const bytes = doc([["x", meta.u32(1)]], []);
    new DataView(bytes.buffer).setUint32(24 + 8 + 1, 13, true);
    expect(openError(bytes).message).toMatch(/unknown value type 13/);
    const t = encodeGGUF({ metadata: [], tensors: [{ name: "w", type: 4, dims: [4], data: new Uint8Array(16) }] });
    expect(openError(t).message).toMatch(/unknown ggml type 4/);
    const arr = doc([["x", meta.arr("u32", [1])]], []);
    new DataView(arr.buffer).setUint32(24 + 8 + 1 + 4, 99, true);
    expect(openError(arr).message).toMatch(/array of unknown type 99/);
  });

  test("duplicate keys and tensor names", () => {
    expect(openError(doc([["k", meta.u32(1)], ["k", meta.u32(2)]], [])).message).toMatch(/duplicate metadata key 'k'/);
    const t = { name: "w", type: "F32" as const, dims: [1], data: new Uint8Array(4) };
    expect(openError(doc([], [t, t])).message).toMatch(/duplicate tensor name 'w'/);
  });

  test("bad tensor shapes", () => {
    const one = (dims: number[], type: "F32" | "Q8_0" = "F32", bytes = 4) =>
      encodeGGUF({ metadata: [], tensors: [{ name: "w", type: type === "F32" ? 0 : 8, dims, data: new Uint8Array(bytes) }] });
    expect(openError(one([1, 1, 1, 1, 1])).message).toMatch(/5 dimensions/);
    expect(openError(one([0])).message).toMatch(/invalid dimension 0/);
    expect(openError(one([33], "Q8_0", 34)).message).toMatch(/not a multiple of the Q8_0 block size 32/);
    expect(openError(one([1 << 20, 1 << 20])).message).toMatch(/past the end/);
    expect(openError(one([2 ** 31, 2 ** 31, 2 ** 31])).message).toMatch(/overflows|invalid dimension/);
  });

  test("tensor offsets past the end or misaligned", () => {
    const { header } = encodeHeader(valid);
    // the last tensor's offset is the final u64 before the padding; find it by encoding again
    const offsetPos = (() => {
      const dv = new DataView(validBytes.buffer);
      for (let p = header.length - 8; p > 0; p--) if (dv.getBigUint64(p, true) === 32n && validBytes[p - 4] === 8) return p;
      throw new Error("offset field not found");
    })();
    expect(openError(patched(offsetPos, 1n << 40n)).message).toMatch(/past the end/);
    expect(openError(patched(offsetPos, 33n)).message).toMatch(/not aligned/);
    expect(openError(patched(offsetPos, 1n << 63n)).message).toMatch(/absurd data offset/);
  });

  test("other malformed values", () => {
    const b = doc([["flag", meta.bool(true)]], []);
    b[24 + 8 + 4 + 4] = 7;
    expect(openError(b).message).toMatch(/bool with value 7/);
    let deep: any = { type: "array", elementType: "u8", values: [1] };
    for (let i = 0; i < 9; i++) deep = { type: "array", elementType: "array", values: [deep] };
    expect(openError(doc([["deep", deep]], [])).message).toMatch(/deeper than 8/);
    expect(openError(doc([["general.alignment", meta.u32(3)]], [])).message).toMatch(/power-of-two/);
    expect(openError(doc([["", meta.u32(3)]], [])).message).toMatch(/empty key/);
  });
});

describe("the C ABI never crashes on misuse", () => {
  test("missing paths and directories", () => {
    expect(() => Model.open(join(dir, "nope.gguf"))).toThrow(/cannot open .*nope.gguf/);
    expect(() => Model.open(dir)).toThrow(/not a regular file/);
  });

  test("closed and bogus handles are errors, not crashes", () => {
    const m = Model.open(file(validBytes));
    m.close();
    expect(() => m.info()).toThrow(/closed/);
    const { lib } = require("../src/ffi/library");
    expect(lib().velo_model_close(123456)).toBe(ErrorCode.invalidArgument);
    expect(lib().velo_last_error().toString()).toMatch(/invalid or closed model handle/);
    expect(lib().velo_model_info(0, null, 0, null)).toBe(ErrorCode.invalidArgument);
  });

  test("a model without a tokenizer says so", () => {
    const m = Model.open(file(validBytes));
    expect(() => m.tokenize("hi")).toThrow(/has no tokenizer/);
    m.close();
  });
});

describe("synth --norm-gain (the GPU's float16 overflow check, bench/gpu/h100.sh overflow)", () => {
  test("multiplies every RMSNorm gain and leaves every other tensor as it was", () => {
    const plain = join(dir, "gain1.gguf"), big = join(dir, "gain4.gguf");
    synthesize({ out: plain, shape: "test", type: "q8_0" });
    synthesize({ out: big, shape: "test", type: "q8_0", normGain: 4 });
    const a = readFileSync(plain), b = readFileSync(big);
    const ta = readGGUFTensorTable(plain).tensors, tb = readGGUFTensorTable(big).tensors;
    expect(tb.map((t) => t.name)).toEqual(ta.map((t) => t.name));
    let norms = 0;
    for (const [i, t] of ta.entries()) {
      const n = t.dims.reduce((x, y) => x * y, 1);
      if (t.name.endsWith("norm.weight")) {
        norms++;
        const x = new Float32Array(a.buffer.slice(a.byteOffset + t.offset, a.byteOffset + t.offset + 4 * n));
        const y = new Float32Array(b.buffer.slice(b.byteOffset + tb[i]!.offset, b.byteOffset + tb[i]!.offset + 4 * n));
        expect(Array.from(y)).toEqual(Array.from(x, (v) => Math.fround(v * 4)));
      } else {
        const end = i + 1 < ta.length ? ta[i + 1]!.offset : a.length;
        expect(b.subarray(tb[i]!.offset, tb[i]!.offset + end - t.offset).equals(a.subarray(t.offset, end))).toBe(true);
      }
    }
    expect(norms).toBeGreaterThan(3);
  });
});
