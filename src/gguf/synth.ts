// Writes a random-weight Llama GGUF of a real shape, for speed tests of Velo and llama.cpp.
//   bun src/gguf/synth.ts OUT.gguf --shape tiny|1b|3b|8b --type q4_0 [--vocab VOCAB.gguf] [--seed N]
// Weights are random but well-formed: quantized blocks are made directly (random quants,
// scales chosen so each weight has a standard deviation near 0.02, like a fresh init), so
// activations stay finite through every layer. The text such a model writes is meaningless.
// The tokenizer is copied verbatim from a vocabulary GGUF, so llama.cpp loads the file.
import { statSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { arrayLength, readGGUFMetadata } from "./reader";
import { blockLayout, type GGMLTypeName, type MetaValue, meta, type TensorSpec, writeGGUF } from "./writer";

const sharedDir = process.env.VELO_SHARED ?? resolve(import.meta.dir, "..", "..", "..", "shared");
const SPM_VOCAB = "models/vocab/ggml-vocab-llama-spm.gguf";
const LLAMA3_VOCAB = "models/vocab/reconstructed/ggml-vocab-llama3-bpe.reconstructed.gguf";

export interface Shape {
  dim: number; ffn: number; layers: number; heads: number; kvHeads: number;
  ropeBase: number; ctx: number; vocab: string;
}

export const SHAPES: Record<string, Shape> = {
  // stories15M
  tiny: { dim: 288, ffn: 768, layers: 6, heads: 6, kvHeads: 6, ropeBase: 10000, ctx: 2048, vocab: SPM_VOCAB },
  // TinyLlama-1.1B
  "1b": { dim: 2048, ffn: 5632, layers: 22, heads: 32, kvHeads: 4, ropeBase: 10000, ctx: 2048, vocab: SPM_VOCAB },
  // Llama-3.2-3B (with a separate output matrix)
  "3b": { dim: 3072, ffn: 8192, layers: 28, heads: 24, kvHeads: 8, ropeBase: 500000, ctx: 8192, vocab: LLAMA3_VOCAB },
  // Llama-3-8B
  "8b": { dim: 4096, ffn: 14336, layers: 32, heads: 32, kvHeads: 8, ropeBase: 500000, ctx: 8192, vocab: LLAMA3_VOCAB },
};

// Per --type: the weight type, the type of output.weight and ffn_down (the K-quants follow
// llama.cpp's _M mixes, which keep those two in Q6_K), and general.file_type (llama_ftype).
export const TYPES: Record<string, { main: GGMLTypeName; big?: GGMLTypeName; fileType: number }> = {
  f32: { main: "F32", fileType: 0 },
  f16: { main: "F16", fileType: 1 },
  bf16: { main: "BF16", fileType: 32 },
  q8_0: { main: "Q8_0", fileType: 7 },
  q4_0: { main: "Q4_0", fileType: 2 },
  q4_1: { main: "Q4_1", fileType: 3 },
  q5_0: { main: "Q5_0", fileType: 8 },
  q5_1: { main: "Q5_1", fileType: 9 },
  q4_k: { main: "Q4_K", big: "Q6_K", fileType: 15 }, // Q4_K_M-like
  q5_k: { main: "Q5_K", big: "Q6_K", fileType: 17 }, // Q5_K_M-like
  q6_k: { main: "Q6_K", fileType: 18 },
  q2_k: { main: "Q2_K", big: "Q3_K", fileType: 10 }, // Q2_K-like: ffn_down in Q3_K (llama.cpp's output.weight would be Q6_K)
  q3_k: { main: "Q3_K", big: "Q6_K", fileType: 12 }, // Q3_K_M-like (llama.cpp's ffn_down would be Q4_K/Q5_K)
  iq4_nl: { main: "IQ4_NL", fileType: 25 },
  iq4_xs: { main: "IQ4_XS", fileType: 30 },
};

// What llama.cpp's quantizer uses when a row is not a multiple of the K-quant block (256),
// e.g. the tiny shape's 288-wide rows.
const FALLBACK: Partial<Record<GGMLTypeName, GGMLTypeName>> = {
  Q4_K: "Q5_0", Q5_K: "Q5_1", Q6_K: "Q8_0", Q2_K: "IQ4_NL", Q3_K: "IQ4_NL", IQ4_XS: "IQ4_NL",
};

function typeForRow(type: GGMLTypeName, rowLength: number, name: string): GGMLTypeName {
  if (rowLength % blockLayout[type][0] === 0) return type;
  const fb = FALLBACK[type];
  if (fb && rowLength % blockLayout[fb][0] === 0) return fb;
  throw new Error(`${name}: rows of ${rowLength} do not fit ${type} blocks of ${blockLayout[type][0]}`);
}

// ---- random numbers -------------------------------------------------------------------

/** splitmix32: turns (seed, stream) into well-mixed starting states. */
function splitmix32(x: number): () => number {
  return () => {
    x = (x + 0x9e3779b9) | 0;
    let z = x;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/** `n` random bytes from xoshiro128** (fast in a JIT: 32-bit ops only), one stream per seed. */
function randomBytes(n: number, seed: number): Uint8Array {
  const words = new Uint32Array(Math.ceil(n / 4));
  const init = splitmix32(seed);
  let a = init(), b = init(), c = init(), d = init();
  for (let i = 0; i < words.length; i++) {
    const r = Math.imul(b, 5);
    words[i] = Math.imul((r << 7) | (r >>> 25), 9);
    const t = b << 9;
    c ^= a; d ^= b; b ^= c; a ^= d;
    c ^= t;
    d = (d << 11) | (d >>> 21);
  }
  return new Uint8Array(words.buffer, 0, n);
}

/** Standard normal samples (Box-Muller) from a seeded stream. */
function normals(n: number, seed: number): Float64Array {
  const u = new Uint32Array(randomBytes(n * 8, seed).buffer);
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const u1 = (u[2 * i]! + 1) / 4294967297; // in (0, 1): log stays finite
    const u2 = u[2 * i + 1]! / 4294967296;
    out[i] = Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
  }
  return out;
}

// ---- tensor data ----------------------------------------------------------------------

/** Standard deviation of each weight: a typical initialization, so activations neither vanish nor explode. */
const SIGMA = 0.02;

/** Root mean square of the integers lo..hi, each equally likely (a random quant's size). */
function rmsOf(lo: number, hi: number): number {
  let s = 0;
  for (let k = lo; k <= hi; k++) s += k * k;
  return Math.sqrt(s / (hi - lo + 1));
}

interface QuantPlan {
  /** Byte offset of the f16 scale d in a block. */
  d: number;
  /** RMS of what d multiplies (quant times sub-block scale), for random bytes: sets d's size. */
  rms: number;
  /** A second f16 (min or dmin) at this offset, `factor` times d, centering the weights on zero. */
  min?: { at: number; factor: number };
  /** Fixes the block's sub-block scales after the random fill. */
  scales?: (b: Uint8Array, o: number) => void;
}

// K-quant 6-bit scale/min pairs: make each min equal its scale (sc = m in all 8 sub-blocks) so
// with dmin = c·d the weights d·sc·q − dmin·m = d·sc·(q − c) are centered. Layout of the 12 bytes:
// sc[j] = s[j] & 63 and m[j] = s[j+4] & 63 for j < 4; for j ≥ 4 the low nibbles of s[j+4] are sc,
// the high nibbles m, and their top two bits come from s[j−4] (sc) and s[j] (m).
function pairedKScales(b: Uint8Array, o: number) {
  const s = o + 4;
  for (let j = 0; j < 4; j++) b[s + 4 + j] = b[s + j]!;
  for (let j = 8; j < 12; j++) b[s + j] = (b[s + j]! & 0x0f) * 0x11;
}

// Q6_K: signed 8-bit sub-block scales, kept within −32..31 (like real files).
function q6kScales(b: Uint8Array, o: number) {
  for (let j = 192; j < 208; j++) b[o + j] = ((b[o + j]! & 0x3f) + 0xe0) & 0xff;
}

// Q2_K: each sub-block's 4-bit min equal to its 4-bit scale (both nibbles of scales[j] alike), so
// with dmin = 1.5·d the weights d·sc·q − dmin·m = d·sc·(q − 1.5) are centered.
function pairedQ2KScales(b: Uint8Array, o: number) {
  for (let j = 0; j < 16; j++) b[o + j] = (b[o + j]! & 0x0f) * 0x11;
}

// IQ4_NL / IQ4_XS: a nibble picks one of 16 non-linear levels (ggml's kvalues_iq4nl).
const IQ4_LEVELS = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
const iq4Rms = Math.sqrt(IQ4_LEVELS.reduce((s, v) => s + v * v, 0) / 16);

const kScaleRms = rmsOf(0, 63);
const QUANT: Partial<Record<GGMLTypeName, QuantPlan>> = {
  Q4_0: { d: 0, rms: rmsOf(-8, 7) },
  Q4_1: { d: 0, rms: rmsOf(-8, 7), min: { at: 2, factor: -8 } },
  Q5_0: { d: 0, rms: rmsOf(-16, 15) },
  Q5_1: { d: 0, rms: rmsOf(-16, 15), min: { at: 2, factor: -16 } },
  Q8_0: { d: 0, rms: rmsOf(-128, 127) },
  Q4_K: { d: 0, rms: kScaleRms * Math.sqrt((16 * 16 - 1) / 12), min: { at: 2, factor: 7.5 }, scales: pairedKScales },
  Q5_K: { d: 0, rms: kScaleRms * Math.sqrt((32 * 32 - 1) / 12), min: { at: 2, factor: 15.5 }, scales: pairedKScales },
  Q6_K: { d: 208, rms: rmsOf(-32, 31) * rmsOf(-32, 31), scales: q6kScales },
  // scales[16] qs[64] d dmin: 4-bit scale × 2-bit quant
  Q2_K: { d: 80, rms: rmsOf(0, 15) * Math.sqrt((4 * 4 - 1) / 12), min: { at: 82, factor: 1.5 }, scales: pairedQ2KScales },
  // hmask[32] qs[64] scales[12] d: (6-bit scale − 32) × (3-bit quant − 4), random bits as they come
  Q3_K: { d: 108, rms: rmsOf(-32, 31) * rmsOf(-4, 3) },
  IQ4_NL: { d: 0, rms: iq4Rms },
  // d scales_h scales_l[4] qs[128]: (6-bit scale − 32) × level
  IQ4_XS: { d: 0, rms: rmsOf(-32, 31) * iq4Rms },
};

const f16Bits = (values: number[]) => new Uint16Array(Float16Array.from(values).buffer);

function quantizedTensor(type: GGMLTypeName, elements: number, seed: number): Uint8Array {
  const plan = QUANT[type];
  if (!plan) throw new Error(`no random-block recipe for ${type}`);
  const [perBlock, blockBytes] = blockLayout[type];
  const bytes = randomBytes((elements / perBlock) * blockBytes, seed);
  // 256 scales within ±50 % of the target; a random byte of each block picks one.
  const target = SIGMA / plan.rms;
  const dValues = Array.from({ length: 256 }, (_, i) => target * (0.5 + i / 255));
  const dTable = f16Bits(dValues);
  const mTable = plan.min ? f16Bits(dValues.map((d) => d * plan.min!.factor)) : undefined;
  const dAt = plan.d, mAt = plan.min?.at ?? 0;
  for (let o = 0; o < bytes.length; o += blockBytes) {
    const i = bytes[o + dAt]!;
    const d = dTable[i]!;
    bytes[o + dAt] = d & 0xff;
    bytes[o + dAt + 1] = d >>> 8;
    if (mTable) {
      const m = mTable[i]!;
      bytes[o + mAt] = m & 0xff;
      bytes[o + mAt + 1] = m >>> 8;
    }
    plan.scales?.(bytes, o);
  }
  return bytes;
}

// Float weights come from a table of 65536 normal samples indexed by random 16-bit numbers:
// one table lookup per weight instead of a logarithm and a cosine.
function floatTensor(type: "F32" | "F16" | "BF16", elements: number, seed: number): Uint8Array {
  const table = new Float32Array(normals(65536, seed ^ 0x5eed).map((x) => x * SIGMA));
  if (type === "F32") {
    const bytes = randomBytes(elements * 4, seed);
    const idx = new Uint32Array(bytes.buffer, 0, elements);
    const out = new Float32Array(bytes.buffer, 0, elements); // same memory: each slot is read, then written
    for (let i = 0; i < elements; i++) out[i] = table[idx[i]! & 0xffff]!;
    return bytes;
  }
  const bits = type === "F16"
    ? new Uint16Array(Float16Array.from(table).buffer)
    : Uint16Array.from(new Uint32Array(table.buffer), (u) => u >>> 16); // bf16: the top half of an f32
  const bytes = randomBytes(elements * 2, seed);
  const idx = new Uint16Array(bytes.buffer, 0, elements);
  for (let i = 0; i < elements; i++) idx[i] = bits[idx[i]!]!;
  return bytes;
}

function tensorData(type: GGMLTypeName, elements: number, seed: number): Uint8Array {
  if (type === "F32" || type === "F16" || type === "BF16") return floatTensor(type, elements, seed);
  return quantizedTensor(type, elements, seed);
}

// ---- the model --------------------------------------------------------------------------

export interface SynthOptions {
  out: string;
  shape: string;
  type: string;
  /** Vocabulary GGUF whose tokenizer.* metadata is copied (default: the shape's own). */
  vocab?: string;
  seed?: number;
}

export function synthesize(opts: SynthOptions): { tensors: number; bytes: number } {
  const shape = SHAPES[opts.shape];
  if (!shape) throw new Error(`unknown shape ${opts.shape} (${Object.keys(SHAPES).join(", ")})`);
  const types = TYPES[opts.type];
  if (!types) throw new Error(`unknown type ${opts.type} (${Object.keys(TYPES).join(", ")})`);
  const vocabPath = opts.vocab ?? join(sharedDir, shape.vocab);
  const seed = opts.seed ?? 1;

  const tokenizer = readGGUFMetadata(vocabPath).kvs.filter((kv) => kv.key.startsWith("tokenizer."));
  const tokens = tokenizer.find((kv) => kv.key === "tokenizer.ggml.tokens");
  if (!tokens) throw new Error(`${vocabPath}: no tokenizer.ggml.tokens`);
  const nVocab = arrayLength(tokens.raw);

  const { dim, ffn, heads, kvHeads } = shape;
  const headDim = dim / heads;
  const metadata: [string, MetaValue][] = [
    ["general.architecture", meta.str("llama")],
    ["general.name", meta.str(`synthetic-${opts.shape}-${opts.type}`)],
    ["general.file_type", meta.u32(types.fileType)],
    ["llama.context_length", meta.u32(shape.ctx)],
    ["llama.embedding_length", meta.u32(dim)],
    ["llama.block_count", meta.u32(shape.layers)],
    ["llama.feed_forward_length", meta.u32(ffn)],
    ["llama.attention.head_count", meta.u32(heads)],
    ["llama.attention.head_count_kv", meta.u32(kvHeads)],
    ["llama.rope.freq_base", meta.f32(shape.ropeBase)],
    ["llama.rope.dimension_count", meta.u32(headDim)],
    ["llama.attention.layer_norm_rms_epsilon", meta.f32(1e-5)],
    ["llama.vocab_size", meta.u32(nVocab)],
    ...tokenizer.map((kv): [string, MetaValue] => [kv.key, { type: "raw", bytes: kv.raw }]),
  ];

  const tensors: TensorSpec[] = [];
  const weight = (name: string, type: GGMLTypeName, rowLength: number, rows: number) => {
    const t = typeForRow(type, rowLength, name);
    const streamSeed = (seed * 0x10001 + tensors.length) | 0; // each tensor its own stream
    tensors.push({ name, type: t, dims: [rowLength, rows], data: () => tensorData(t, rowLength * rows, streamSeed) });
  };
  // RMSNorm gains of 1: the random matrices alone set the activations' scale.
  const norm = (name: string) => tensors.push({ name, type: "F32", dims: [dim], data: () => new Uint8Array(new Float32Array(dim).fill(1).buffer) });

  const big = types.big ?? types.main;
  weight("token_embd.weight", types.main, dim, nVocab);
  for (let i = 0; i < shape.layers; i++) {
    const p = `blk.${i}.`;
    norm(p + "attn_norm.weight");
    weight(p + "attn_q.weight", types.main, dim, dim);
    weight(p + "attn_k.weight", types.main, dim, kvHeads * headDim);
    weight(p + "attn_v.weight", types.main, dim, kvHeads * headDim);
    weight(p + "attn_output.weight", types.main, dim, dim);
    norm(p + "ffn_norm.weight");
    weight(p + "ffn_gate.weight", types.main, dim, ffn);
    weight(p + "ffn_up.weight", types.main, dim, ffn);
    weight(p + "ffn_down.weight", big, ffn, dim);
  }
  norm("output_norm.weight");
  weight("output.weight", big, dim, nVocab);

  writeGGUF(opts.out, { metadata, tensors });
  return { tensors: tensors.length, bytes: statSync(opts.out).size };
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      shape: { type: "string", default: "1b" },
      type: { type: "string", default: "q4_0" },
      vocab: { type: "string" },
      seed: { type: "string", default: "1" },
    },
  });
  if (positionals.length !== 1) {
    console.error(`usage: bun src/gguf/synth.ts OUT.gguf --shape ${Object.keys(SHAPES).join("|")} --type ${Object.keys(TYPES).join("|")} [--vocab VOCAB.gguf] [--seed N]`);
    process.exit(2);
  }
  const seed = Number(values.seed);
  if (!Number.isInteger(seed)) {
    console.error(`synth: --seed must be an integer, got ${values.seed}`);
    process.exit(2);
  }
  const t0 = performance.now();
  try {
    const r = synthesize({ out: positionals[0]!, shape: values.shape!, type: values.type!, vocab: values.vocab, seed });
    const secs = ((performance.now() - t0) / 1000).toFixed(1);
    console.log(`${positionals[0]}: ${values.shape} ${values.type}, ${r.tensors} tensors, ${(r.bytes / 2 ** 20).toFixed(1)} MiB in ${secs} s`);
  } catch (e) {
    console.error(`synth: ${(e as Error).message}`);
    process.exit(1);
  }
}
