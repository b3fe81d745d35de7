// Copies a GGUF with its MXFP4 and Q8_0 tensors dequantized to F32 (the same values, exactly):
// run both engines on both files (bench/quant-noise.ts) to tell what the Q8_0 activations of a
// quantized file cost from what an engine gets wrong.
//   bun bench/dequantize-f32.ts IN.gguf OUT.gguf   (read whole: files of a few GB at most)
import { readFileSync } from "node:fs";
import { readGGUFTensorTable } from "../src/gguf/reader";
import { GGMLTypeId, type GGMLTypeName, tensorBytes, writeGGUF } from "../src/gguf/writer";
if (process.argv.length !== 4) {
  console.error("usage: bun bench/dequantize-f32.ts IN.gguf OUT.gguf");
  process.exit(2);
}
const [inp, out] = [process.argv[2]!, process.argv[3]!];
const t = readGGUFTensorTable(inp);
const buf = readFileSync(inp);
const L = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
function f16(h: number): number {
  const e = (h >> 10) & 31, m = h & 1023, s = h >> 15 ? -1 : 1;
  return e === 0 ? s * m * 2 ** -24 : e === 31 ? (m ? NaN : s * Infinity) : s * (1 + m / 1024) * 2 ** (e - 15);
}
const names = Object.fromEntries(Object.entries(GGMLTypeId).map(([k, v]) => [v, k as GGMLTypeName]));
const tensors = t.tensors.map((ti) => {
  const tn = names[ti.type];
  if (!tn) throw new Error(`${ti.name}: ggml type ${ti.type} is not one the writer knows`);
  const size = tensorBytes(tn, ti.dims);
  const raw = buf.subarray(ti.offset, ti.offset + size);
  if (tn !== "MXFP4" && tn !== "Q8_0") return { name: ti.name, type: tn, dims: ti.dims, data: raw };
  const n = ti.dims.reduce((a, b) => a * b, 1);
  const f = new Float32Array(n);
  if (tn === "Q8_0") {
    const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    for (let b = 0; b < n / 32; b++) {
      const d = f16(view.getUint16(b * 34, true));
      for (let j = 0; j < 32; j++) f[b * 32 + j] = d * view.getInt8(b * 34 + 2 + j);
    }
    return { name: ti.name, type: "F32" as const, dims: ti.dims, data: new Uint8Array(f.buffer) };
  }
  for (let b = 0; b < n / 32; b++) {
    const e = raw[b * 17]!;
    const d = 2 ** (e - 128); // ggml_e8m0_to_fp32_half: kvalues_mxfp4 are the levels doubled
    for (let j = 0; j < 16; j++) {
      const q = raw[b * 17 + 1 + j]!;
      f[b * 32 + j] = d * L[q & 15]!;
      f[b * 32 + j + 16] = d * L[q >> 4]!;
    }
  }
  return { name: ti.name, type: "F32" as const, dims: ti.dims, data: new Uint8Array(f.buffer) };
});
writeGGUF(out, { metadata: t.kvs.map((kv) => [kv.key, { type: "raw", bytes: kv.raw }]), tensors });
