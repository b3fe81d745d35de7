// A float64 forward pass of a llama GGUF, written from ggml's definitions and independent of
// Velo's kernels and shaders: the reference for tests/weight-types.test.ts.
//
// Weights are dequantized as ggml's dequantize_row_* do (ggml-quants.c, float32 arithmetic:
// every value is exactly what llama.cpp's get_rows gives), then every product, norm, RoPE
// angle, softmax and SiLU is evaluated in float64. Two activation modes:
// - "float": the activations enter each matrix product as they are (what Velo's GPU products
//   do, in float32 there);
// - "ggml": each product's input is first rounded as llama.cpp's CPU backend rounds it for that
//   weight type (type_traits_cpu[type].vec_dot_type): to Q8_K blocks of 256 for the K-quants and
//   IQ4_XS (quantize_row_q8_K_ref), to Q8_0 blocks of 32 for IQ4_NL and the 32-value types
//   (x86 quantize_row_q8_0: 127/amax, round to nearest even, scale stored in f16), not at all
//   for F32 and F16 weights. (ggml's vec_dot_type for F16 is F16, but on AVX-512 machines the
//   prebuilt llama.cpp lands within 5e-6 of float activations on F16 weights: its sgemm takes
//   them as they are; on AVX2-only ones it rounds them to f16, which "ggml-f16" does.) The rest
//   stays float64, so this mode lands
//   where llama.cpp does up to float32 rounding (and the occasional activation that rounds the
//   other way because of it).
// Only what tests/weight-types.test.ts's test shapes use: LLM_ARCH_LLAMA (RMSNorm, RoPE on
// adjacent pairs, grouped-query attention, SwiGLU, a separate or tied output matrix).
import { readFileSync } from "node:fs";
import type { PromptRun } from "../../bench/llamacpp/reference";
import { decodeValue, readGGUFTensorTable } from "../../src/gguf/reader";
import { blockLayout, GGMLTypeId, type GGMLTypeName } from "../../src/gguf/writer";

const f32 = Math.fround;
const F16 = new Float16Array(Uint16Array.from({ length: 65536 }, (_, i) => i).buffer);
const h = (b: Uint8Array, o: number) => F16[b[o]! | (b[o + 1]! << 8)]!;
const IQ4 = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/** get_scale_min_k4: the j-th 6-bit (scale, min) pair of a Q4_K/Q5_K block's 12 scale bytes at `s`. */
function scaleMinK4(b: Uint8Array, s: number, j: number): [number, number] {
  if (j < 4) return [b[s + j]! & 63, b[s + j + 4]! & 63];
  return [(b[s + j + 4]! & 0xf) | ((b[s + j - 4]! >> 6) << 4), (b[s + j + 4]! >> 4) | ((b[s + j]! >> 6) << 4)];
}

/** One block of `type` at b[o..], dequantized into y[at..] (ggml's dequantize_row_*, float32). */
const BLOCK: Partial<Record<GGMLTypeName, (b: Uint8Array, o: number, y: Float32Array, at: number) => void>> = {
  // the 32-value types: value j < 16 from byte j's low nibble, j + 16 from its high one; Q5's
  // fifth bit j from a 32-bit mask; the _1 types add a min m instead of an offset
  Q4_0: (b, o, y, at) => {
    const d = h(b, o);
    for (let j = 0; j < 16; j++) {
      y[at + j] = f32(((b[o + 2 + j]! & 0xf) - 8) * d);
      y[at + j + 16] = f32(((b[o + 2 + j]! >> 4) - 8) * d);
    }
  },
  Q4_1: (b, o, y, at) => {
    const d = h(b, o), m = h(b, o + 2);
    for (let j = 0; j < 16; j++) {
      y[at + j] = f32(f32((b[o + 4 + j]! & 0xf) * d) + m);
      y[at + j + 16] = f32(f32((b[o + 4 + j]! >> 4) * d) + m);
    }
  },
  Q5_0: (b, o, y, at) => {
    const d = h(b, o), qh = (b[o + 2]! | (b[o + 3]! << 8) | (b[o + 4]! << 16) | (b[o + 5]! << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const lo = (b[o + 6 + j]! & 0xf) | (((qh >>> j) & 1) << 4), hi = (b[o + 6 + j]! >> 4) | (((qh >>> (j + 16)) & 1) << 4);
      y[at + j] = f32((lo - 16) * d);
      y[at + j + 16] = f32((hi - 16) * d);
    }
  },
  Q5_1: (b, o, y, at) => {
    const d = h(b, o), m = h(b, o + 2), qh = (b[o + 4]! | (b[o + 5]! << 8) | (b[o + 6]! << 16) | (b[o + 7]! << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const lo = (b[o + 8 + j]! & 0xf) | (((qh >>> j) & 1) << 4), hi = (b[o + 8 + j]! >> 4) | (((qh >>> (j + 16)) & 1) << 4);
      y[at + j] = f32(f32(lo * d) + m);
      y[at + j + 16] = f32(f32(hi * d) + m);
    }
  },
  Q8_0: (b, o, y, at) => {
    const d = h(b, o);
    for (let j = 0; j < 32; j++) y[at + j] = f32(((b[o + 2 + j]! << 24) >> 24) * d);
  },
  Q2_K: (b, o, y, at) => {
    // scales[16] qs[64] d dmin
    const d = h(b, o + 80), min = h(b, o + 82);
    let is = 0;
    for (let n = 0; n < 2; n++) {
      const q = o + 16 + 32 * n;
      for (let j = 0, shift = 0; j < 4; j++, shift += 2) {
        for (const off of [0, 16]) {
          const sc = b[o + is++]!;
          const dl = f32(d * (sc & 0xf)), ml = f32(min * (sc >> 4));
          for (let l = 0; l < 16; l++) y[at++] = f32(f32(dl * ((b[q + l + off]! >> shift) & 3)) - ml);
        }
      }
    }
  },
  Q3_K: (b, o, y, at) => {
    // hmask[32] qs[64] scales[12] d
    const d = h(b, o + 108);
    const u32 = (k: number) => (b[o + 96 + k]! | (b[o + 97 + k]! << 8) | (b[o + 98 + k]! << 16) | (b[o + 99 + k]! << 24)) >>> 0;
    const a0 = u32(0), a1 = u32(4), tmp = u32(8), m2 = 0x0f0f0f0f, m1 = 0x03030303;
    const aux = [
      (a0 & m2) | (((tmp >>> 0) & m1) << 4), (a1 & m2) | (((tmp >>> 2) & m1) << 4),
      ((a0 >>> 4) & m2) | (((tmp >>> 4) & m1) << 4), ((a1 >>> 4) & m2) | (((tmp >>> 6) & m1) << 4),
    ];
    const scales = new Int8Array(new Uint32Array(aux).buffer);
    let is = 0, m = 1;
    for (let n = 0; n < 2; n++) {
      const q = o + 32 + 32 * n;
      for (let j = 0, shift = 0; j < 4; j++, shift += 2, m <<= 1) {
        for (const off of [0, 16]) {
          const dl = f32(d * (scales[is++]! - 32));
          for (let l = 0; l < 16; l++) {
            y[at++] = f32(dl * (((b[q + l + off]! >> shift) & 3) - (b[o + l + off]! & m ? 0 : 4)));
          }
        }
      }
    }
  },
  Q4_K: (b, o, y, at) => {
    // d dmin scales[12] qs[128]
    const d = h(b, o), min = h(b, o + 2);
    for (let j = 0, is = 0, q = o + 16; j < 256; j += 64, is += 2, q += 32) {
      const [s1, n1] = scaleMinK4(b, o + 4, is), [s2, n2] = scaleMinK4(b, o + 4, is + 1);
      const d1 = f32(d * s1), mm1 = f32(min * n1), d2 = f32(d * s2), mm2 = f32(min * n2);
      for (let l = 0; l < 32; l++) y[at++] = f32(f32(d1 * (b[q + l]! & 0xf)) - mm1);
      for (let l = 0; l < 32; l++) y[at++] = f32(f32(d2 * (b[q + l]! >> 4)) - mm2);
    }
  },
  Q5_K: (b, o, y, at) => {
    // d dmin scales[12] qh[32] qs[128]
    const d = h(b, o), min = h(b, o + 2);
    let u1 = 1, u2 = 2;
    for (let j = 0, is = 0, ql = o + 48; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      const [s1, n1] = scaleMinK4(b, o + 4, is), [s2, n2] = scaleMinK4(b, o + 4, is + 1);
      const d1 = f32(d * s1), mm1 = f32(min * n1), d2 = f32(d * s2), mm2 = f32(min * n2);
      for (let l = 0; l < 32; l++) y[at++] = f32(f32(d1 * ((b[ql + l]! & 0xf) + (b[o + 16 + l]! & u1 ? 16 : 0))) - mm1);
      for (let l = 0; l < 32; l++) y[at++] = f32(f32(d2 * ((b[ql + l]! >> 4) + (b[o + 16 + l]! & u2 ? 16 : 0))) - mm2);
    }
  },
  Q6_K: (b, o, y, at) => {
    // ql[128] qh[64] scales[16] (int8) d
    const d = h(b, o + 208);
    const sc = (k: number) => (b[o + 192 + k]! << 24) >> 24;
    for (let n = 0; n < 2; n++) {
      const ql = o + 64 * n, qh = o + 128 + 32 * n, s = 8 * n, y0 = at + 128 * n;
      for (let l = 0; l < 32; l++) {
        const is = l >> 4;
        const q1 = ((b[ql + l]! & 0xf) | (((b[qh + l]! >> 0) & 3) << 4)) - 32;
        const q2 = ((b[ql + l + 32]! & 0xf) | (((b[qh + l]! >> 2) & 3) << 4)) - 32;
        const q3 = ((b[ql + l]! >> 4) | (((b[qh + l]! >> 4) & 3) << 4)) - 32;
        const q4 = ((b[ql + l + 32]! >> 4) | (((b[qh + l]! >> 6) & 3) << 4)) - 32;
        y[y0 + l] = f32(f32(d * sc(s + is)) * q1);
        y[y0 + l + 32] = f32(f32(d * sc(s + is + 2)) * q2);
        y[y0 + l + 64] = f32(f32(d * sc(s + is + 4)) * q3);
        y[y0 + l + 96] = f32(f32(d * sc(s + is + 6)) * q4);
      }
    }
  },
  IQ4_NL: (b, o, y, at) => {
    // d qs[16]
    const d = h(b, o);
    for (let j = 0; j < 16; j++) {
      y[at + j] = f32(d * IQ4[b[o + 2 + j]! & 0xf]!);
      y[at + j + 16] = f32(d * IQ4[b[o + 2 + j]! >> 4]!);
    }
  },
  IQ4_XS: (b, o, y, at) => {
    // d scales_h (u16) scales_l[4] qs[128]
    const d = h(b, o), scalesH = b[o + 2]! | (b[o + 3]! << 8);
    for (let ib = 0; ib < 8; ib++) {
      const ls = ((b[o + 4 + (ib >> 1)]! >> (4 * (ib % 2))) & 0xf) | (((scalesH >> (2 * ib)) & 3) << 4);
      const dl = f32(d * (ls - 32)), q = o + 8 + 16 * ib, y0 = at + 32 * ib;
      for (let j = 0; j < 16; j++) {
        y[y0 + j] = f32(dl * IQ4[b[q + j]! & 0xf]!);
        y[y0 + j + 16] = f32(dl * IQ4[b[q + j]! >> 4]!);
      }
    }
  },
};

const TYPE_NAME = Object.fromEntries(Object.entries(GGMLTypeId).map(([k, v]) => [v, k])) as Record<number, GGMLTypeName>;

/** `n` values of a tensor of `type` from `bytes` (a whole number of blocks), as ggml dequantizes them. */
export function dequantize(type: GGMLTypeName, bytes: Uint8Array, n: number): Float32Array {
  const y = new Float32Array(n);
  if (type === "F32") {
    y.set(new Float32Array(bytes.slice(0, n * 4).buffer));
    return y;
  }
  if (type === "F16") {
    const u = new Uint16Array(bytes.slice(0, n * 2).buffer);
    for (let i = 0; i < n; i++) y[i] = F16[u[i]!]!;
    return y;
  }
  const block = BLOCK[type];
  if (!block) throw new Error(`f64-llama: no dequantizer for ${type}`);
  const [per, size] = blockLayout[type];
  if (n % per !== 0) throw new Error(`f64-llama: ${n} values are not whole ${type} blocks of ${per}`);
  for (let i = 0; i < n / per; i++) block(bytes, i * size, y, i * per);
  return y;
}

// ---- activation rounding (the "ggml" mode) ----------------------------------------------

/** Round half to even, as nearest_int's float trick and _mm256_round_ps do. */
function roundEven(v: number): number {
  const r = Math.round(v);
  return r - v === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** quantize_row_q8_K_ref, returned dequantized (q·d per value). */
function q8K(x: Float64Array): Float64Array {
  const y = new Float64Array(x.length);
  for (let i = 0; i < x.length; i += 256) {
    let amax = 0, max = 0;
    for (let j = i; j < i + 256; j++) {
      const v = f32(x[j]!);
      if (Math.abs(v) > amax) { amax = Math.abs(v); max = v; }
    }
    if (amax === 0) continue;
    const iscale = f32(-127 / max), d = f32(1 / iscale);
    for (let j = i; j < i + 256; j++) y[j] = Math.min(127, roundEven(f32(iscale * f32(x[j]!)))) * d;
  }
  return y;
}

/** x86 quantize_row_q8_0 (AVX: 127/amax, round to nearest even, f16 scale), returned dequantized. */
function q80(x: Float64Array): Float64Array {
  const y = new Float64Array(x.length);
  for (let i = 0; i < x.length; i += 32) {
    let amax = 0;
    for (let j = i; j < i + 32; j++) amax = Math.max(amax, Math.abs(f32(x[j]!)));
    const d = Math.f16round(f32(amax / 127)), id = amax !== 0 ? f32(127 / amax) : 0;
    for (let j = i; j < i + 32; j++) y[j] = roundEven(f32(f32(x[j]!) * id)) * d;
  }
  return y;
}

/** What a product with a weight of `type` sees of the activations `x` in llama.cpp's CPU backend
 * (`f16`: F16 weights' activations rounded to float16, ggml's vec_dot_type for them). */
function ggmlActivations(type: GGMLTypeName, x: Float64Array, f16: boolean): Float64Array {
  switch (type) {
    case "F32": return x;
    case "F16": return f16 ? x.map((v) => Math.f16round(v)) : x;
    case "Q2_K": case "Q3_K": case "Q4_K": case "Q5_K": case "Q6_K": case "IQ4_XS": return q8K(x);
    case "Q4_0": case "Q5_0": case "Q8_0": case "IQ4_NL": return q80(x);
    // Q8_1 (quantize_row_q8_1): Q8_0's values, and s = d·Σq for the weight's min, which llama.cpp
    // rounds to float16 where this sums the values (a relative 2^-11 of the min's term)
    case "Q4_1": case "Q5_1": return q80(x);
    default: throw new Error(`f64-llama: llama.cpp's activation type for ${type} is not emulated`);
  }
}

// ---- the model ----------------------------------------------------------------------------

interface Matrix { type: GGMLTypeName; rows: number; cols: number; w: Float32Array }

export type Activations = "float" | "ggml" | "ggml-f16";

export class F64Llama {
  readonly dim: number; readonly ffn: number; readonly layers: number; readonly heads: number; readonly kvHeads: number;
  readonly headDim: number; readonly ropeBase: number; readonly eps: number; readonly nVocab: number;
  /** Every tensor's type by name, as the file gives it. */
  readonly types = new Map<string, GGMLTypeName>();
  private bytes: Uint8Array;
  private info = new Map<string, { type: GGMLTypeName; dims: number[]; offset: number }>();
  private cache = new Map<string, Matrix>();

  constructor(path: string) {
    const table = readGGUFTensorTable(path);
    const kv = (key: string) => {
      const e = table.kvs.find((x) => x.key === key);
      return e ? decodeValue(e.raw) : undefined;
    };
    if (kv("general.architecture") !== "llama") throw new Error(`f64-llama: ${path} is not a llama`);
    const num = (key: string, def?: number) => {
      const v = kv(`llama.${key}`) ?? def;
      if (typeof v !== "number") throw new Error(`f64-llama: ${path} has no llama.${key}`);
      return v;
    };
    this.dim = num("embedding_length"); this.ffn = num("feed_forward_length"); this.layers = num("block_count");
    this.heads = num("attention.head_count"); this.kvHeads = num("attention.head_count_kv", this.heads);
    this.headDim = this.dim / this.heads; this.ropeBase = num("rope.freq_base", 10000);
    this.eps = num("attention.layer_norm_rms_epsilon", 1e-5);
    if (num("rope.dimension_count", this.headDim) !== this.headDim) throw new Error("f64-llama: partial RoPE is not implemented");
    if (table.kvs.some((x) => x.key.startsWith("llama.rope.scaling")) || table.tensors.some((t) => t.name === "rope_freqs.weight")) {
      throw new Error("f64-llama: RoPE scaling is not implemented");
    }
    this.bytes = new Uint8Array(readFileSync(path));
    for (const t of table.tensors) {
      const type = TYPE_NAME[t.type];
      if (!type) throw new Error(`f64-llama: ${t.name} has type id ${t.type}`);
      this.info.set(t.name, { type, dims: t.dims, offset: t.offset });
      this.types.set(t.name, type);
    }
    this.nVocab = this.info.get("token_embd.weight")!.dims[1]!;
  }

  private matrix(name: string): Matrix {
    let m = this.cache.get(name);
    if (!m) {
      const t = this.info.get(name);
      if (!t) throw new Error(`f64-llama: no tensor ${name}`);
      const [cols, rows = 1] = t.dims;
      m = { type: t.type, rows, cols: cols!, w: dequantize(t.type, this.bytes.subarray(t.offset), cols! * rows) };
      this.cache.set(name, m);
    }
    return m;
  }

  private vector(name: string): Float32Array { return this.matrix(name).w; }

  /** y = W x, W's input rounded as `mode` says. */
  private matvec(name: string, x: Float64Array, mode: Activations): Float64Array {
    const m = this.matrix(name);
    const a = mode === "float" ? x : ggmlActivations(m.type, x, mode === "ggml-f16");
    const y = new Float64Array(m.rows), w = m.w, n = m.cols;
    for (let r = 0; r < m.rows; r++) {
      let s = 0;
      for (let c = 0, o = r * n; c < n; c++) s += w[o + c]! * a[c]!;
      y[r] = s;
    }
    return y;
  }

  private rmsNorm(x: Float64Array, gain: string): Float64Array {
    const g = this.vector(gain);
    let ss = 0;
    for (const v of x) ss += v * v;
    const s = 1 / Math.sqrt(ss / x.length + this.eps);
    return x.map((v, i) => v * s * g[i]!);
  }

  /** RoPE on adjacent pairs (llama.cpp's LLAMA_ROPE_TYPE_NORM), every head of `x` in place. */
  private rope(x: Float64Array, nHeads: number, pos: number) {
    const hd = this.headDim;
    for (let i = 0; i < hd / 2; i++) {
      const theta = pos * Math.pow(this.ropeBase, (-2 * i) / hd), c = Math.cos(theta), s = Math.sin(theta);
      for (let hh = 0; hh < nHeads; hh++) {
        const o = hh * hd + 2 * i, a = x[o]!, b = x[o + 1]!;
        x[o] = a * c - b * s;
        x[o + 1] = a * s + b * c;
      }
    }
  }

  /**
   * Greedy runs of `prompts` (a fresh context each; ties go to the lower id), with the `top`
   * largest logits of every step, in the shape of bench/llamacpp/reference.ts's PromptRun.
   */
  run(prompts: number[][], opts: { nGen: number; top: number; activations: Activations }): PromptRun[] {
    const { dim, headDim: hd, heads, kvHeads } = this;
    const kvDim = kvHeads * hd, group = heads / kvHeads, scale = 1 / Math.sqrt(hd);
    const out = this.info.has("output.weight") ? "output.weight" : "token_embd.weight";
    const embd = this.matrix("token_embd.weight");
    return prompts.map((prompt): PromptRun => {
      const total = prompt.length + opts.nGen;
      const K = Array.from({ length: this.layers }, () => new Float64Array(total * kvDim));
      const V = Array.from({ length: this.layers }, () => new Float64Array(total * kvDim));
      const run: PromptRun = { prompt, tokens: [], steps: [] };
      const seq = [...prompt];
      for (let pos = 0; pos < prompt.length + opts.nGen - 1; pos++) {
        const tok = seq[pos]!;
        let x = Float64Array.from(embd.w.subarray(tok * dim, (tok + 1) * dim));
        for (let l = 0; l < this.layers; l++) {
          const p = `blk.${l}.`;
          const hN = this.rmsNorm(x, p + "attn_norm.weight");
          const q = this.matvec(p + "attn_q.weight", hN, opts.activations);
          const k = this.matvec(p + "attn_k.weight", hN, opts.activations);
          const v = this.matvec(p + "attn_v.weight", hN, opts.activations);
          this.rope(q, heads, pos);
          this.rope(k, kvHeads, pos);
          K[l]!.set(k, pos * kvDim);
          V[l]!.set(v, pos * kvDim);
          const att = new Float64Array(heads * hd);
          const scores = new Float64Array(pos + 1);
          for (let hh = 0; hh < heads; hh++) {
            const kvo = Math.floor(hh / group) * hd;
            let max = -Infinity;
            for (let t = 0; t <= pos; t++) {
              let s = 0;
              for (let i = 0; i < hd; i++) s += q[hh * hd + i]! * K[l]![t * kvDim + kvo + i]!;
              scores[t] = s * scale;
              max = Math.max(max, scores[t]!);
            }
            let sum = 0;
            for (let t = 0; t <= pos; t++) sum += (scores[t] = Math.exp(scores[t]! - max));
            for (let t = 0; t <= pos; t++) {
              const w = scores[t]! / sum;
              for (let i = 0; i < hd; i++) att[hh * hd + i]! += w * V[l]![t * kvDim + kvo + i]!;
            }
          }
          const o = this.matvec(p + "attn_output.weight", att, opts.activations);
          x = x.map((v2, i) => v2 + o[i]!);
          const hF = this.rmsNorm(x, p + "ffn_norm.weight");
          const g = this.matvec(p + "ffn_gate.weight", hF, opts.activations);
          const u = this.matvec(p + "ffn_up.weight", hF, opts.activations);
          const d = this.matvec(p + "ffn_down.weight", g.map((gv, i) => (gv / (1 + Math.exp(-gv))) * u[i]!), opts.activations);
          x = x.map((v2, i) => v2 + d[i]!);
        }
        if (pos < prompt.length - 1) continue;
        const logits = this.matvec(out, this.rmsNorm(x, "output_norm.weight"), opts.activations);
        const top = topK(logits, opts.top);
        run.tokens.push(top[0]![0]);
        run.steps.push({ top });
        seq.push(top[0]![0]);
      }
      return run;
    });
  }
}

/** The k largest values as [index, value], largest first (equal values: the lower index first). */
function topK(v: Float64Array, k: number): [number, number][] {
  const best: [number, number][] = [];
  for (let i = 0; i < v.length; i++) {
    const x = v[i]!;
    if (best.length === k && x <= best[k - 1]![1]) continue;
    let j = best.length < k ? best.length : k - 1;
    while (j > 0 && best[j - 1]![1] < x) j--;
    best.splice(j, 0, [i, x]);
    if (best.length > k) best.pop();
  }
  return best;
}
