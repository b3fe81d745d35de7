// Writes a random-weight GGUF of a real or a small test shape, laid out exactly as llama.cpp's
// converter (convert_hf_to_gguf.py) writes that architecture: same metadata keys, tensor names,
// shapes and conventions (Gemma 2/3's norm weights stored as w + 1, Llama 3.1's rope_freqs factors,
// Phi-3's fused attn_qkv / gate|up ffn_up and LongRoPE factors). For speed tests of Velo and
// llama.cpp (real shapes) and for checking Velo's forward pass of every architecture against
// llama.cpp's (test shapes, tests/architectures.test.ts).
//   bun src/gguf/synth.ts OUT.gguf [--arch llama] --shape tiny|1b|3b|8b|test --type q4_0 [--vocab VOCAB.gguf] [--seed N]
//   bun src/gguf/synth.ts OUT.gguf --arch qwen2|qwen3|gemma2|gemma3|phi3|llama31 --shape test --type q8_0
//   bun src/gguf/synth.ts OUT.gguf --shape test256 --type q2_k --pure   (every 2-D weight in Q2_K)
//   bun src/gguf/synth.ts OUT.gguf --arch qwen3 --shape test --type f32 --pooling 3   (an embedding model: last-token pooling)
//   bun src/gguf/synth.ts OUT.gguf --arch mixtral|qwen3moe|qwen2moe --shape test --type q8_0   (mixtures of experts)
//   bun src/gguf/synth.ts OUT.gguf --arch gpt-oss --shape test|20b --type q8_0   (experts in MXFP4, as the files ship)
//   bun src/gguf/synth.ts OUT.gguf --arch qwen35 --shape test --type q8_0   (Gated DeltaNet layers between gated attention)
//   bun src/gguf/synth.ts OUT.gguf --arch qwen35moe --shape test|35b_a3b --type q8_0   (the same with experts, and an MTP block)
//   bun src/gguf/synth.ts OUT.gguf --arch qwen3next --shape test|test-qkv|80b_a3b --type q8_0   (Qwen3-Next: grouped value heads, fused inputs)
//   bun src/gguf/synth.ts OUT.gguf --arch gemma4 --shape test|test-kv|e2b|31b --type q8_0   (Gemma 4 text; its BPE vocabulary made from llama-spm's)
//   bun src/gguf/synth.ts OUT.gguf --arch gemma4 --shape test-moe|26b_a4b --type q8_0   (Gemma 4 with experts beside the dense MLP)
// Weights are random but well-formed: quantized blocks are made directly (random quants,
// scales chosen so each weight has a standard deviation near 0.02, like a fresh init; on test
// shapes 1/√(row length), with norm gains and biases random too), so activations stay finite
// through every layer. The text such a model writes is meaningless. The tokenizer is copied
// verbatim from a vocabulary GGUF, so llama.cpp loads the file. Real shapes of other models than
// Llama use llama3's vocabulary (Phi-3: its own), so their output matrix is of that size.
import { statSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { arrayLength, decodeValue, type GGUFKeyValue, readGGUFMetadata } from "./reader";
import { spmMerges } from "./spm-merges";
import { blockLayout, type GGMLTypeName, type MetaValue, meta, type TensorSpec, writeGGUF } from "./writer";

// the vocabularies of tests/data (VELO_TEST_DATA: a copy of that folder elsewhere, as on the GPU machine)
const dataDir = process.env.VELO_TEST_DATA ?? resolve(import.meta.dir, "..", "..", "tests", "data");
const SPM_VOCAB = "vocab/ggml-vocab-llama-spm.gguf";
const LLAMA3_VOCAB = "vocab/reconstructed/ggml-vocab-llama3-bpe.reconstructed.gguf";
const PHI3_VOCAB = "vocab/ggml-vocab-phi-3.gguf";

export type Arch = "llama" | "llama31" | "qwen2" | "qwen3" | "gemma2" | "gemma3" | "gemma4" | "phi3" | "mixtral" | "qwen3moe" | "qwen2moe" | "gpt-oss" | "qwen35" | "qwen35moe" | "qwen3next" | "deepseek2";

export interface Shape {
  dim: number; ffn: number; layers: number; heads: number; kvHeads: number;
  ropeBase: number; ctx: number; vocab: string;
  /** attention.key_length = value_length, when a head is not dim / heads wide (Qwen3, Gemma). */
  headDim?: number;
  /** rope.dimension_count when only part of a head is rotated (Phi-4-mini's partial_rotary_factor). */
  ropeDim?: number;
  /** attention.layer_norm_rms_epsilon (default 1e-5). */
  eps?: number;
  /** No output.weight: the output projection is token_embd (tie_word_embeddings). */
  tied?: boolean;
  /** attention.sliding_window (Gemma: the window of the sliding-window layers; Phi-3: written, ignored by llama.cpp). */
  swa?: number;
  /** Gemma 3: rope.freq_base_swa, the base of the sliding-window layers (rope_local_base_freq). */
  ropeBaseSwa?: number;
  /** Gemma 3: rope.scaling.type "linear" with this rope.scaling.factor (global layers only). */
  ropeLinear?: number;
  /** Gemma 2: attn_logit_softcapping and final_logit_softcapping. */
  attnSoftcap?: number;
  finalSoftcap?: number;
  /**
   * Llama 3.1: original_max_position_embeddings of the rope_freqs factors (factor 8, low 1, high 4).
   * Phi-3: rope.scaling.original_context_length (with long/short factors and attn_factor).
   */
  origCtx?: number;
  // Test shapes only: what makes an engine that skips or misplaces a step disagree clearly.
  /** RMSNorm gains 1 + normSpread·N(0,1) instead of exactly 1. */
  normSpread?: number;
  /**
   * Gemma: post_attention_norm / post_ffw_norm gains around this instead of 1. With tied
   * embeddings scaled by √dim, gains of 1 leave the current token's own embedding so large in
   * the last hidden state that a random model repeats its input token forever.
   */
  postNormGain?: number;
  /**
   * Every matrix with a standard deviation of 1/√(row length) instead of 0.02: each product keeps
   * the size of its input, so attention scores and logits are of unit size (softcaps and rope
   * matter) and every layer adds as much to the residual stream as the embedding brings.
   */
  unitInit?: boolean;
  /** Standard deviation of the Q/K/V biases (Qwen2; default 0.02). */
  biasSigma?: number;
  /** The experts in the file's own type rather than the one the family ships them in (gpt-oss's MXFP4). */
  plainExperts?: boolean;
  /**
   * A mixture of experts in every layer: `count` experts of which `used` run per token, each a
   * gated MLP of `ffn` (Mixtral: the shape's ffn); `shared`: a shared expert's width (Qwen2-MoE).
   * Gemma 4 (26B-A4B): the experts run beside the layer's dense MLP of the shape's ffn, fused
   * gate|up, with a router scale per input channel and a scale per expert.
   */
  experts?: {
    count: number; used: number; ffn?: number; shared?: number;
    /** DeepSeek: `sharedCount` ungated shared experts (one MLP of sharedCount × ffn), the first
     * `dense` layers dense, a sigmoid router with exp_probs_b biases, groups, norm and scale. */
    sharedCount?: number; dense?: number; sigmoid?: boolean; groups?: [number, number]; norm?: boolean; scale?: number;
  };
  /** DeepSeek's multi-head latent attention: latent width, query low rank (0: attn_q), a head's parts without and with RoPE, its output width. */
  mla?: { kvLora: number; qLora: number; nope: number; rope: number; vHead: number };
  /** rope.scaling.type "yarn" with this factor over `origCtx` (gpt-oss). */
  yarn?: number;
  /**
   * Gated DeltaNet layers (Qwen3.5, Qwen3-Next): every `interval`-th layer is full attention, the
   * others linear attention of `kHeads` key heads and `vHeads` value heads of `state` each, a
   * causal convolution of `conv` taps over their Q|K|V.
   */
  /**
   * Gated DeltaNet layers between every `interval`-th attention layer. `fused` (qwen3next's
   * first converter): the inputs as ssm_in, a key head's q, k, v and z rows together (else
   * attn_qkv and attn_gate); qwen3next's betas and alphas are always one ssm_ba.
   */
  deltaNet?: { interval: number; kHeads: number; vHeads: number; state: number; conv: number; fused?: boolean };
  /**
   * Multi-token-prediction blocks after the model's (`nextn_predict_layers`; Qwen3.5/3.6's
   * converter writes one): a full-attention block with the nextn.* projection and norms.
   */
  mtp?: number;
  /**
   * Gemma 4: every `pattern`-th layer is full attention, the others slide (headDim and kvHeads
   * are the sliding layers'); a full layer's heads are `fullHeadDim` wide (`fullKvHeads` KV heads,
   * when its config has num_global_key_value_heads), a `fullRotary` part of them rotated. The last
   * `sharedKv` layers read earlier layers' KV (their FFN twice as wide with `doubleWide`);
   * `perLayer`: the width of the per-layer embeddings (0: none); `kEqV`: full layers have no
   * attn_v (attention_k_eq_v: V is K's projection); `layerScale`: layer_output_scale drawn in
   * 0.5..1.5 (otherwise 1).
   */
  gemma4?: {
    pattern: number; fullHeadDim: number; fullKvHeads?: number; fullRotary: number; sharedKv: number; perLayer: number;
    doubleWide?: boolean; kEqV?: boolean; layerScale?: boolean;
  };
}

// Test shapes: 128-wide, a few layers (Gemma 3: 6, so layer 5 is a global one), the llama-spm
// vocabulary (32000), windows of 8 and 12 tokens so ~40-token prompts cross them, and the
// features of each architecture switched to values that change the logits visibly.
const TEST_BASE = { dim: 128, ffn: 384, layers: 3, heads: 4, kvHeads: 2, ctx: 4096, vocab: SPM_VOCAB, normSpread: 0.1, unitInit: true };

export const SHAPES: Record<string, Shape> = {
  // stories15M
  tiny: { dim: 288, ffn: 768, layers: 6, heads: 6, kvHeads: 6, ropeBase: 10000, ctx: 2048, vocab: SPM_VOCAB },
  // TinyLlama-1.1B
  "1b": { dim: 2048, ffn: 5632, layers: 22, heads: 32, kvHeads: 4, ropeBase: 10000, ctx: 2048, vocab: SPM_VOCAB },
  // Llama-3.2-3B (with a separate output matrix)
  "3b": { dim: 3072, ffn: 8192, layers: 28, heads: 24, kvHeads: 8, ropeBase: 500000, ctx: 8192, vocab: LLAMA3_VOCAB },
  // Llama-3-8B
  "8b": { dim: 4096, ffn: 14336, layers: 32, heads: 32, kvHeads: 8, ropeBase: 500000, ctx: 8192, vocab: LLAMA3_VOCAB },
  test: { ...TEST_BASE, ropeBase: 10000 },
  // 256 wide with a 512-wide FFN, so every row is a whole number of 256-value K-quant / IQ4_XS
  // blocks (the 128-wide shapes fall back to 32-value types): tests/weight-types.test.ts
  test256: { ...TEST_BASE, dim: 256, ffn: 512, ropeBase: 10000 },
};

/** The shapes of each architecture: `--arch A --shape S`. Real shapes keep gains of 1 and σ 0.02 everywhere. */
export const ARCH_SHAPES: Record<Arch, Record<string, Shape>> = {
  llama: SHAPES,
  llama31: {
    // Llama-3.1-8B: Llama-3-8B with rope_freqs (original_max_position_embeddings 8192)
    "8b": { ...SHAPES["8b"]!, ctx: 131072, origCtx: 8192 },
    // factors from an original context of 64 (not 8192) and base 10000: dims 0-1 keep 1,
    // 2-4 are smoothed, 5-15 get 8, so positions 0-63 see them
    test: { ...TEST_BASE, ropeBase: 10000, origCtx: 64 },
  },
  qwen2: {
    // Qwen2.5-7B (vocabulary: llama3's 128256 tokens stand in for Qwen's 152064)
    "7b": { dim: 3584, ffn: 18944, layers: 28, heads: 28, kvHeads: 4, ropeBase: 1e6, ctx: 131072, eps: 1e-6, vocab: LLAMA3_VOCAB },
    test: { ...TEST_BASE, ropeBase: 1e6, eps: 1e-6, biasSigma: 0.1 },
  },
  qwen3: {
    // Qwen3-8B
    "8b": { dim: 4096, ffn: 12288, layers: 36, heads: 32, kvHeads: 8, headDim: 128, ropeBase: 1e6, ctx: 40960, eps: 1e-6, vocab: LLAMA3_VOCAB },
    // heads of 64 on a 128-wide model (q is 256 wide), like Qwen3-0.6B's 128 on 1024; tied
    test: { ...TEST_BASE, headDim: 64, ropeBase: 1e6, eps: 1e-6, tied: true },
  },
  gemma2: {
    // Gemma-2-9B (vocabulary: llama3's 128256 tokens stand in for Gemma's 256000)
    "9b": { dim: 3584, ffn: 14336, layers: 42, heads: 16, kvHeads: 8, headDim: 256, ropeBase: 10000, ctx: 8192, eps: 1e-6, tied: true, swa: 4096, attnSoftcap: 50, finalSoftcap: 30, vocab: LLAMA3_VOCAB },
    // even layers slide over 8 tokens; caps small enough to bend the scores and the logits
    test: { ...TEST_BASE, layers: 4, headDim: 64, ropeBase: 10000, ctx: 8192, eps: 1e-6, tied: true, swa: 8, attnSoftcap: 5, finalSoftcap: 8, postNormGain: 3 },
  },
  gemma3: {
    // Gemma-3-1B (no linear rope scaling; the 4B and larger have factor 8)
    "1b": { dim: 1152, ffn: 6912, layers: 26, heads: 4, kvHeads: 1, headDim: 256, ropeBase: 1e6, ropeBaseSwa: 10000, ctx: 32768, eps: 1e-6, tied: true, swa: 512, vocab: LLAMA3_VOCAB },
    // layers 0-4 slide over 12 tokens, layer 5 is global (base 1e6, linear factor 8); the local
    // base is 20000, not Gemma 3's 10000, so that an engine must read rope.freq_base_swa as
    // llama.cpp does rather than assume it
    test: { ...TEST_BASE, layers: 6, headDim: 64, ropeBase: 1e6, ropeBaseSwa: 20000, ropeLinear: 8, ctx: 131072, eps: 1e-6, tied: true, swa: 12, postNormGain: 3 },
  },
  gemma4: {
    // Gemma-4-E2B (text_config as public copies of its config.json give it; the checkpoint was
    // not read here): 35 layers, every 5th full (heads of 512, a
    // quarter rotated) and the rest sliding over 512 (heads of 256), one KV head; the last 20
    // layers share KV and have a double-wide FFN; per-layer embeddings of 256 (vocabulary: llama3's
    // 128256 tokens stand in for Gemma's 262144, in token_embd and per_layer_token_embd)
    e2b: { dim: 1536, ffn: 6144, layers: 35, heads: 8, kvHeads: 1, headDim: 256, ropeBase: 1e6, ropeBaseSwa: 10000, ctx: 131072, eps: 1e-6, tied: true, swa: 512, finalSoftcap: 30, vocab: LLAMA3_VOCAB, gemma4: { pattern: 5, fullHeadDim: 512, fullRotary: 0.25, sharedKv: 20, perLayer: 256, doubleWide: true } },
    // Gemma-4-31B (dense; the same kind of source): 60 layers, every 6th full (4 KV heads of 512, V = K) and the rest
    // sliding over 1024 (16 KV heads of 256); no KV sharing, no per-layer embeddings
    "31b": { dim: 5376, ffn: 21504, layers: 60, heads: 32, kvHeads: 16, headDim: 256, ropeBase: 1e6, ropeBaseSwa: 10000, ctx: 262144, eps: 1e-6, tied: true, swa: 1024, finalSoftcap: 30, vocab: LLAMA3_VOCAB, gemma4: { pattern: 6, fullHeadDim: 512, fullKvHeads: 4, fullRotary: 0.25, sharedKv: 0, perLayer: 0, kEqV: true } },
    // sliding, sliding, full ×2: sliding heads of 32 (2 KV heads) over 12 tokens, full heads of 64
    // (1 KV head, 16 of 64 values rotated); layers 3-5 read layers 1 and 2's KV (llama.cpp's
    // reuse rule: the last sliding and the last full layer before them, so 3 not 2 of the 6),
    // per-layer embeddings of 16; the cap small enough to bend the logits
    test: { ...TEST_BASE, layers: 6, headDim: 32, ropeBase: 1e6, ropeBaseSwa: 10000, eps: 1e-6, tied: true, swa: 12, finalSoftcap: 8, postNormGain: 3, gemma4: { pattern: 3, fullHeadDim: 64, fullKvHeads: 1, fullRotary: 0.25, sharedKv: 3, perLayer: 16, doubleWide: true, layerScale: true } },
    // Gemma-4-31B's attention at test size: no KV sharing, no per-layer embeddings, V = K on full layers
    "test-kv": { ...TEST_BASE, layers: 6, headDim: 32, ropeBase: 1e6, ropeBaseSwa: 10000, eps: 1e-6, tied: true, swa: 12, finalSoftcap: 8, postNormGain: 3, gemma4: { pattern: 3, fullHeadDim: 64, fullKvHeads: 1, fullRotary: 0.25, sharedKv: 0, perLayer: 0, kEqV: true, layerScale: true } },
    // test with 2 K/V heads on the global layers: their K/V rows (128) twice the sliding ones' (64),
    // so the KV pages hold layers of two widths
    "test-wide": { ...TEST_BASE, layers: 6, headDim: 32, ropeBase: 1e6, ropeBaseSwa: 10000, eps: 1e-6, tied: true, swa: 12, finalSoftcap: 8, postNormGain: 3, gemma4: { pattern: 3, fullHeadDim: 64, fullKvHeads: 2, fullRotary: 0.25, sharedKv: 3, perLayer: 16, doubleWide: true, layerScale: true } },
    // Gemma-4-26B-A4B's layout at test size: test's attention (no KV sharing, no per-layer
    // embeddings) with 8 experts of 64, 2 a token, beside the dense MLP of 384 in every layer;
    // ffn_down_exps.scale drawn in 0.5..1.5, ffn_gate_inp.scale around 1
    "test-moe": { ...TEST_BASE, layers: 6, headDim: 32, ropeBase: 1e6, ropeBaseSwa: 10000, eps: 1e-6, tied: true, swa: 12, finalSoftcap: 8, postNormGain: 3, gemma4: { pattern: 3, fullHeadDim: 64, fullKvHeads: 1, fullRotary: 0.25, sharedKv: 0, perLayer: 0, layerScale: true }, experts: { count: 8, used: 2, ffn: 64 } },
    // Gemma-4-26B-A4B (text_config as public copies of its config.json give it; the checkpoint
    // was not read here): 30 layers, every 6th full (2 KV heads of 512, V = K, a quarter rotated)
    // and the rest sliding over 1024 (8 KV heads of 256), 16 query heads; in every layer a dense
    // MLP of 2112 and 128 experts of 704, 8 a token; no KV sharing, no per-layer embeddings
    // (attention_k_eq_v and 2 global KV heads as those copies and llama.cpp's test-backend-ops
    // note give them: unverified against the checkpoint)
    "26b_a4b": { dim: 2816, ffn: 2112, layers: 30, heads: 16, kvHeads: 8, headDim: 256, ropeBase: 1e6, ropeBaseSwa: 10000, ctx: 262144, eps: 1e-6, tied: true, swa: 1024, finalSoftcap: 30, vocab: LLAMA3_VOCAB, gemma4: { pattern: 6, fullHeadDim: 512, fullKvHeads: 2, fullRotary: 0.25, sharedKv: 0, perLayer: 0, kEqV: true }, experts: { count: 128, used: 8, ffn: 704 } },
    // its first 12 of 30 layers (two global), for CPU speed tests on this machine
    "26b_a4b_12l": { dim: 2816, ffn: 2112, layers: 12, heads: 16, kvHeads: 8, headDim: 256, ropeBase: 1e6, ropeBaseSwa: 10000, ctx: 262144, eps: 1e-6, tied: true, swa: 1024, finalSoftcap: 30, vocab: LLAMA3_VOCAB, gemma4: { pattern: 6, fullHeadDim: 512, fullKvHeads: 2, fullRotary: 0.25, sharedKv: 0, perLayer: 0, kEqV: true }, experts: { count: 128, used: 8, ffn: 704 } },
  },
  phi3: {
    // Phi-3-mini-4k-instruct (no LongRoPE factors; sliding_window 2047, which llama.cpp ignores)
    mini: { dim: 3072, ffn: 8192, layers: 32, heads: 32, kvHeads: 32, ropeBase: 10000, ctx: 4096, eps: 1e-5, swa: 2047, vocab: PHI3_VOCAB },
    // like Phi-4-mini: 3/4 of each head rotated, LongRoPE factors (original context 256: llama.cpp
    // takes the long ones for contexts above 256), GQA, tied embeddings, a sliding_window it ignores.
    // Phi-3's vocabulary: llama.cpp looks up "<|endoftext|>" in any model whose general.name says phi3
    test: { ...TEST_BASE, vocab: PHI3_VOCAB, ffn: 256, ropeDim: 24, ropeBase: 10000, ctx: 4096, origCtx: 256, eps: 1e-5, tied: true, swa: 16 },
  },
  // Mixture-of-experts test shapes: enough experts that routing picks differ from token to
  // token, experts small enough that the files stay small. `test-all`: every expert on every
  // token (no top-k choice), whose output changes smoothly with rounding upstream (a choice
  // of experts flips where two are near-tied, and any engine's rounding can flip some).
  mixtral: {
    // Mixtral-8x7B: 8 experts of 14336, 2 per token
    "8x7b": { dim: 4096, ffn: 14336, layers: 32, heads: 32, kvHeads: 8, ropeBase: 1e6, ctx: 32768, vocab: SPM_VOCAB, experts: { count: 8, used: 2 } },
    test: { ...TEST_BASE, ffn: 128, ropeBase: 1e6, experts: { count: 8, used: 2 } },
    "test-all": { ...TEST_BASE, ffn: 128, ropeBase: 1e6, experts: { count: 3, used: 3 } },
  },
  qwen3moe: {
    // Qwen3-30B-A3B: 48 layers of 128 experts of 768, 8 per token (feed_forward_length 6144 is
    // written, as the converter does, and not used)
    "30b_a3b": { dim: 2048, ffn: 6144, layers: 48, heads: 32, kvHeads: 4, headDim: 128, ropeBase: 1e6, ctx: 40960, eps: 1e-6, vocab: LLAMA3_VOCAB, experts: { count: 128, used: 8, ffn: 768 } },
    // its per-layer shape with 12 of the 48 layers: what this machine's memory and time allow
    "30b_a3b_12l": { dim: 2048, ffn: 6144, layers: 12, heads: 32, kvHeads: 4, headDim: 128, ropeBase: 1e6, ctx: 40960, eps: 1e-6, vocab: LLAMA3_VOCAB, experts: { count: 128, used: 8, ffn: 768 } },
    test: { ...TEST_BASE, ffn: 384, headDim: 64, ropeBase: 1e6, eps: 1e-6, tied: true, experts: { count: 16, used: 4, ffn: 64 } },
    "test-all": { ...TEST_BASE, ffn: 384, headDim: 64, ropeBase: 1e6, eps: 1e-6, tied: true, experts: { count: 4, used: 4, ffn: 64 } },
  },
  qwen2moe: {
    // Qwen1.5-MoE-A2.7B: 60 experts of 1408, 4 per token, a shared expert of 5632
    "a2.7b": { dim: 2048, ffn: 5632, layers: 24, heads: 16, kvHeads: 16, ropeBase: 1e6, ctx: 8192, eps: 1e-6, vocab: LLAMA3_VOCAB, experts: { count: 60, used: 4, ffn: 1408, shared: 5632 } },
    test: { ...TEST_BASE, ffn: 256, ropeBase: 1e6, eps: 1e-6, biasSigma: 0.1, experts: { count: 12, used: 4, ffn: 64, shared: 256 } },
    "test-all": { ...TEST_BASE, ffn: 256, ropeBase: 1e6, eps: 1e-6, biasSigma: 0.1, experts: { count: 4, used: 4, ffn: 64, shared: 256 } },
  },
  qwen35: {
    // Qwen3.5-9B: 32 layers, every 4th full attention (16 heads of 256, 4 KV heads, a quarter
    // of each head rotated); linear layers of 16 key heads and 32 value heads of 128
    "9b": { dim: 4096, ffn: 12288, layers: 32, heads: 16, kvHeads: 4, headDim: 256, ropeDim: 64, ropeBase: 1e7, ctx: 262144, eps: 1e-6, vocab: LLAMA3_VOCAB, deltaNet: { interval: 4, kHeads: 16, vHeads: 32, state: 128, conv: 4 } },
    // two of each value head per key head (the tiled order), 16 of 64 head values rotated
    test: { ...TEST_BASE, ffn: 256, layers: 4, heads: 4, kvHeads: 2, headDim: 64, ropeDim: 16, ropeBase: 1e7, eps: 1e-6, deltaNet: { interval: 4, kHeads: 2, vHeads: 4, state: 32, conv: 4 } },
  },
  qwen3next: {
    // Qwen3-Next-80B-A3B: 48 layers, every 4th full attention (16 heads of 256, 2 KV heads, a
    // quarter of each head rotated), linear layers of 16 key and 32 value heads of 128 (each
    // key head's two value heads together), 512 experts of 512, 10 per token, a shared expert
    // of 512; its files from the first converter fuse the DeltaNet's inputs (ssm_in)
    "80b_a3b": { dim: 2048, ffn: 512, layers: 48, heads: 16, kvHeads: 2, headDim: 256, ropeDim: 64, ropeBase: 1e7, ctx: 262144, eps: 1e-6, vocab: LLAMA3_VOCAB, deltaNet: { interval: 4, kHeads: 16, vHeads: 32, state: 128, conv: 4, fused: true }, experts: { count: 512, used: 10, ffn: 512, shared: 512 } },
    // its per-layer shape with 4 of the 48 layers (3 DeltaNet, 1 attention): this machine's memory and time
    "80b_a3b_4l": { dim: 2048, ffn: 512, layers: 4, heads: 16, kvHeads: 2, headDim: 256, ropeDim: 64, ropeBase: 1e7, ctx: 262144, eps: 1e-6, vocab: LLAMA3_VOCAB, deltaNet: { interval: 4, kHeads: 16, vHeads: 32, state: 128, conv: 4, fused: true }, experts: { count: 512, used: 10, ffn: 512, shared: 512 } },
    // two value heads a key head (the grouped order matters), ssm_in; and attn_qkv + attn_gate
    test: { ...TEST_BASE, ffn: 256, layers: 4, heads: 4, kvHeads: 2, headDim: 64, ropeDim: 16, ropeBase: 1e7, eps: 1e-6, deltaNet: { interval: 4, kHeads: 2, vHeads: 4, state: 32, conv: 4, fused: true }, experts: { count: 8, used: 3, ffn: 64, shared: 96 } },
    "test-qkv": { ...TEST_BASE, ffn: 256, layers: 4, heads: 4, kvHeads: 2, headDim: 64, ropeDim: 16, ropeBase: 1e7, eps: 1e-6, deltaNet: { interval: 4, kHeads: 2, vHeads: 4, state: 32, conv: 4 }, experts: { count: 8, used: 3, ffn: 64, shared: 96 } },
    "test-all": { ...TEST_BASE, ffn: 256, layers: 4, heads: 4, kvHeads: 2, headDim: 64, ropeDim: 16, ropeBase: 1e7, eps: 1e-6, deltaNet: { interval: 4, kHeads: 2, vHeads: 4, state: 32, conv: 4, fused: true }, experts: { count: 3, used: 3, ffn: 64, shared: 96 } },
  },
  qwen35moe: {
    // Qwen3.6-35B-A3B: 40 layers, every 4th full attention (16 heads of 256, 2 KV heads, a
    // quarter of each head rotated), linear layers of 16 key and 32 value heads of 128; 256
    // experts of 512, 8 per token, a shared expert of 512; one MTP block (its vocabulary of
    // 248k is not in tests/data: llama3's stands in)
    "35b_a3b": { dim: 2048, ffn: 512, layers: 40, heads: 16, kvHeads: 2, headDim: 256, ropeDim: 64, ropeBase: 1e7, ctx: 262144, eps: 1e-6, vocab: LLAMA3_VOCAB, deltaNet: { interval: 4, kHeads: 16, vHeads: 32, state: 128, conv: 4 }, experts: { count: 256, used: 8, ffn: 512, shared: 512 }, mtp: 1 },
    // its per-layer shape with 8 of the 40 layers: what this machine's memory and time allow
    "35b_a3b_8l": { dim: 2048, ffn: 512, layers: 8, heads: 16, kvHeads: 2, headDim: 256, ropeDim: 64, ropeBase: 1e7, ctx: 262144, eps: 1e-6, vocab: LLAMA3_VOCAB, deltaNet: { interval: 4, kHeads: 16, vHeads: 32, state: 128, conv: 4 }, experts: { count: 256, used: 8, ffn: 512, shared: 512 }, mtp: 1 },
    test: { ...TEST_BASE, ffn: 256, layers: 4, heads: 4, kvHeads: 2, headDim: 64, ropeDim: 16, ropeBase: 1e7, eps: 1e-6, deltaNet: { interval: 4, kHeads: 2, vHeads: 4, state: 32, conv: 4 }, experts: { count: 8, used: 3, ffn: 64, shared: 96 }, mtp: 1 },
    "test-all": { ...TEST_BASE, ffn: 256, layers: 4, heads: 4, kvHeads: 2, headDim: 64, ropeDim: 16, ropeBase: 1e7, eps: 1e-6, deltaNet: { interval: 4, kHeads: 2, vHeads: 4, state: 32, conv: 4 }, experts: { count: 3, used: 3, ffn: 64, shared: 96 } },
  },
  deepseek2: {
    // DeepSeek-V2-Lite's layout (attn_q direct, a softmax router, 2 shared experts, the first
    // layer dense) at test size; its latent 64 wide, heads of 32 + 16 RoPE, outputs of 32
    test: { ...TEST_BASE, layers: 3, heads: 4, kvHeads: 1, headDim: 80, ropeDim: 16, ropeBase: 10000, eps: 1e-6, mla: { kvLora: 64, qLora: 0, nope: 32, rope: 16, vHead: 32 }, experts: { count: 8, used: 2, ffn: 64, sharedCount: 2, dense: 1 } },
    // with V2-Lite's YaRN: factor 40 (over an original context of 256) and mscale_all_dim 0.707
    "test-yarn": { ...TEST_BASE, layers: 3, heads: 4, kvHeads: 1, headDim: 80, ropeDim: 16, ropeBase: 10000, eps: 1e-6, yarn: 40, origCtx: 256, mla: { kvLora: 64, qLora: 0, nope: 32, rope: 16, vHead: 32 }, experts: { count: 8, used: 2, ffn: 64, sharedCount: 2, dense: 1 } },
    // DeepSeek-V3 / GLM-4.7-Flash's: queries through a low rank, a sigmoid router with choice
    // biases in 4 groups of which 2 are used, weights renormalised and scaled
    "test-v3": { ...TEST_BASE, layers: 3, heads: 4, kvHeads: 1, headDim: 80, ropeDim: 16, ropeBase: 10000, eps: 1e-6, mla: { kvLora: 64, qLora: 64, nope: 32, rope: 16, vHead: 32 }, experts: { count: 8, used: 3, ffn: 64, sharedCount: 1, dense: 1, sigmoid: true, groups: [4, 2], norm: true, scale: 2.5 } },
    // DeepSeek-V2-Lite (27 layers, 64 experts of 1408, 6 a token, YaRN 40 over 4096; llama3's vocabulary)
    "v2_lite": { dim: 2048, ffn: 10944, layers: 27, heads: 16, kvHeads: 1, headDim: 576, ropeDim: 64, ropeBase: 10000, ctx: 163840, eps: 1e-6, yarn: 40, origCtx: 4096, vocab: LLAMA3_VOCAB, mla: { kvLora: 512, qLora: 0, nope: 128, rope: 64, vHead: 128 }, experts: { count: 64, used: 6, ffn: 1408, sharedCount: 2, dense: 1 } },
  },
  "gpt-oss": {
    // gpt-oss-20b: 24 layers of 32 experts of 2880, 4 per token; 64 query heads of 64 (wider
    // than the model), windows of 128 on every other layer, YaRN ×32 over 4096 (its o200k
    // vocabulary is not in tests/data: llama3's stands in, so the output matrix is smaller)
    "20b": { dim: 2880, ffn: 2880, layers: 24, heads: 64, kvHeads: 8, headDim: 64, ropeBase: 150000, ctx: 131072, vocab: LLAMA3_VOCAB, swa: 128, yarn: 32, origCtx: 4096, experts: { count: 32, used: 4, ffn: 2880 } },
    // one layer of it with 4 experts, all used (bench/RESULTS.md: what MXFP4's Q8_0 activations cost)
    "20b_1l": { dim: 2880, ffn: 2880, layers: 1, heads: 64, kvHeads: 8, headDim: 64, ropeBase: 150000, ctx: 131072, vocab: SPM_VOCAB, swa: 128, yarn: 32, origCtx: 4096, experts: { count: 4, used: 4, ffn: 2880 } },
    // queries wider than the model (6 × 32 > 128), windows of 8, YaRN ×8 over 256
    test: { ...TEST_BASE, layers: 4, heads: 6, kvHeads: 2, headDim: 32, ropeBase: 150000, swa: 8, yarn: 8, origCtx: 256, biasSigma: 0.1, experts: { count: 8, used: 4, ffn: 64 } },
    // the same with the experts in the file's type (F32: the graph without MXFP4's Q8_0
    // activations), and with every expert on every token (no choice for a rounding to flip)
    "test-plain": { ...TEST_BASE, layers: 4, heads: 6, kvHeads: 2, headDim: 32, ropeBase: 150000, swa: 8, yarn: 8, origCtx: 256, biasSigma: 0.1, experts: { count: 8, used: 4, ffn: 64 }, plainExperts: true },
    "test-all": { ...TEST_BASE, layers: 4, heads: 6, kvHeads: 2, headDim: 32, ropeBase: 150000, swa: 8, yarn: 8, origCtx: 256, biasSigma: 0.1, experts: { count: 4, used: 4, ffn: 64 } },
  },
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
  /** Fixes the block's quants after the random fill. */
  quants?: (b: Uint8Array, o: number) => void;
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

// Q8_0: quants in −127..127 as llama.cpp's quantizer writes them (d = amax/127): never −128, a
// value some integer dot products (sign tricks on 8-bit lanes) cannot take.
function q8Quants(b: Uint8Array, o: number) {
  for (let j = o + 2; j < o + 34; j++) if (b[j] === 0x80) b[j] = 0x81;
}

const kScaleRms = rmsOf(0, 63);
const QUANT: Partial<Record<GGMLTypeName, QuantPlan>> = {
  Q4_0: { d: 0, rms: rmsOf(-8, 7) },
  Q4_1: { d: 0, rms: rmsOf(-8, 7), min: { at: 2, factor: -8 } },
  Q5_0: { d: 0, rms: rmsOf(-16, 15) },
  Q5_1: { d: 0, rms: rmsOf(-16, 15), min: { at: 2, factor: -16 } },
  Q8_0: { d: 0, rms: rmsOf(-127, 127), quants: q8Quants },
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

// MXFP4: an E8M0 scale byte (2^(e-127)) and 32 nibbles indexing ggml's kvalues_mxfp4, the
// E2M1 values doubled (so a block's value is kvalues[q]·2^(e-128)); the scales spread over 4
// powers of two around the target.
const MXFP4_LEVELS = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
const mxfp4Rms = Math.sqrt(MXFP4_LEVELS.reduce((s, v) => s + v * v, 0) / 16);

function mxfp4Tensor(elements: number, seed: number, sigma: number): Uint8Array {
  const bytes = randomBytes((elements / 32) * 17, seed);
  const e0 = Math.round(Math.log2(sigma / mxfp4Rms)) + 128 - 2;
  for (let o = 0; o < bytes.length; o += 17) bytes[o] = e0 + (bytes[o]! & 3);
  return bytes;
}

const f16Bits = (values: number[]) => new Uint16Array(Float16Array.from(values).buffer);

function quantizedTensor(type: GGMLTypeName, elements: number, seed: number, sigma: number): Uint8Array {
  const plan = QUANT[type];
  if (!plan) throw new Error(`no random-block recipe for ${type}`);
  const [perBlock, blockBytes] = blockLayout[type];
  const bytes = randomBytes((elements / perBlock) * blockBytes, seed);
  // 256 scales within ±50 % of the target; a random byte of each block picks one.
  const target = sigma / plan.rms;
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
    plan.quants?.(bytes, o);
  }
  return bytes;
}

// Float weights come from a table of 65536 normal samples indexed by random 16-bit numbers:
// one table lookup per weight instead of a logarithm and a cosine.
function floatTensor(type: "F32" | "F16" | "BF16", elements: number, seed: number, sigma: number): Uint8Array {
  const table = new Float32Array(normals(65536, seed ^ 0x5eed).map((x) => x * sigma));
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

function tensorData(type: GGMLTypeName, elements: number, seed: number, sigma = SIGMA): Uint8Array {
  if (type === "F32" || type === "F16" || type === "BF16") return floatTensor(type, elements, seed, sigma);
  if (type === "MXFP4") return mxfp4Tensor(elements, seed, sigma);
  return quantizedTensor(type, elements, seed, sigma);
}

// ---- the model ----------------------------------------------------------------------------

export interface SynthOptions {
  out: string;
  /** Architecture (default llama). */
  arch?: string;
  shape: string;
  type: string;
  /** Vocabulary GGUF whose tokenizer.* metadata is copied (default: the shape's own). */
  vocab?: string;
  seed?: number;
  /**
   * Every 2-D weight in the type's main type, output.weight and ffn_down too (llama.cpp's
   * `llama-quantize --pure`); rows that do not fit its blocks are still an error, not a fallback.
   */
  pure?: boolean;
  /** `{arch}.pooling_type` for embeddings (llama.cpp's enum: 1 mean, 2 cls, 3 last, …); absent when not given. */
  pooling?: number;
  /**
   * Every RMSNorm gain times this (default 1): activations that large, to check what the GPU's
   * float16 paths do when a product overflows 65504 (they re-run in float32).
   */
  normGain?: number;
}

export function shapeOf(arch: string, shape: string): Shape {
  const shapes = ARCH_SHAPES[arch as Arch];
  if (!shapes) throw new Error(`unknown architecture ${arch} (${Object.keys(ARCH_SHAPES).join(", ")})`);
  const s = shapes[shape];
  if (!s) throw new Error(`unknown shape ${shape} for ${arch} (${Object.keys(shapes).join(", ")})`);
  return s;
}

const f32 = Math.fround;

/**
 * Llama 3.1's rope_freqs.weight, as convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors
 * computes it (in float32, as torch does there): one factor per rotated pair; the frequency of
 * pair i is divided by it.
 */
export function llama3RopeFactors(headDim: number, base: number, origCtx = 8192, factor = 8, lowFreqFactor = 1, highFreqFactor = 4): number[] {
  const lowFreqWavelen = origCtx / lowFreqFactor;
  const highFreqWavelen = origCtx / highFreqFactor;
  const out: number[] = [];
  for (let i = 0; i < headDim; i += 2) {
    const freq = f32(1 / f32(Math.pow(base, f32(i / headDim))));
    const wavelen = f32(f32(2 * Math.PI) / freq);
    if (wavelen < highFreqWavelen) out.push(1);
    else if (wavelen > lowFreqWavelen) out.push(factor);
    else {
      const smooth = f32(f32(f32(origCtx / wavelen) - lowFreqFactor) / (highFreqFactor - lowFreqFactor));
      out.push(f32(1 / f32(f32(f32(1 - smooth) / factor) + smooth)));
    }
  }
  return out;
}

/** Test LongRoPE factors (Phi-3 style): short ones near 1, long ones rising to 5 (real files: to ~60). */
export function phi3RopeFactors(pairs: number): { short: number[]; long: number[] } {
  const t = (i: number) => (pairs > 1 ? i / (pairs - 1) : 0);
  return {
    short: Array.from({ length: pairs }, (_, i) => f32(1 + 0.1 * t(i))),
    long: Array.from({ length: pairs }, (_, i) => f32(1 + 4 * t(i))),
  };
}

/** Phi-3's rope.scaling.attn_factor for LongRoPE ("su"/"longrope"), as the converter computes it. */
export function phi3AttnFactor(ctx: number, origCtx: number): number {
  const scale = ctx / origCtx;
  return scale > 1 ? Math.sqrt(1 + Math.log(scale) / Math.log(origCtx)) : 1;
}

const f32Data = (values: ArrayLike<number>) => new Uint8Array(Float32Array.from(values).buffer);

/** A Gemma 4 layer as llama.cpp sees it (hparams.is_swa, n_embd_head_k(il), n_head_kv(il), n_ff(il), has_kv(il)). */
export interface Gemma4Layer { swa: boolean; headDim: number; kvHeads: number; ffn: number; hasKv: boolean }

export function gemma4Layers(shape: Shape): Gemma4Layer[] {
  const g = shape.gemma4!;
  const firstShared = shape.layers - g.sharedKv;
  return Array.from({ length: shape.layers }, (_, i) => {
    const swa = (i + 1) % g.pattern !== 0;
    return {
      swa,
      headDim: swa ? shape.headDim! : g.fullHeadDim,
      kvHeads: swa ? shape.kvHeads : g.fullKvHeads ?? shape.kvHeads,
      ffn: g.doubleWide && i >= firstShared ? 2 * shape.ffn : shape.ffn,
      hasKv: i < firstShared,
    };
  });
}

/**
 * Gemma 4's rope_freqs.weight (Gemma4Model.generate_extra_tensors), read by the full layers
 * only: their "proportional" RoPE rotates the first `rotary` of each head's pairs, at the
 * frequencies of the whole head; ggml's NeoX RoPE rotates them all, so the other pairs get a
 * factor of 1e30 (their frequency divided to nothing).
 */
export function gemma4RopeFactors(headDim: number, rotary: number): number[] {
  const rotated = Math.trunc((headDim * rotary) / 2);
  return Array.from({ length: headDim / 2 }, (_, i) => (i < rotated ? 1 : 1e30));
}

/**
 * A "gemma4" tokenizer from a SentencePiece vocabulary's metadata (tests/data has no Gemma 4
 * vocabulary): its tokens, scores and types, BPE merges made from them (spmMerges), its special
 * ids, in Gemma4Model.set_vocab's keys: add_bos_token true (llama.cpp forces it anyway),
 * add_space_prefix false, no tokenizer.ggml.pre (llama.cpp takes "gemma4" from the model name).
 */
export function gemma4Tokenizer(kvs: GGUFKeyValue[]): [string, MetaValue][] {
  const raw = (key: string): [string, MetaValue][] => {
    const kv = kvs.find((x) => x.key === key);
    return kv ? [[key, { type: "raw", bytes: kv.raw }]] : [];
  };
  const tokens = kvs.find((x) => x.key === "tokenizer.ggml.tokens");
  if (!tokens) throw new Error("the vocabulary has no tokenizer.ggml.tokens");
  return [
    ["tokenizer.ggml.model", meta.str("gemma4")],
    ...raw("tokenizer.ggml.tokens"),
    ...raw("tokenizer.ggml.scores"),
    ...raw("tokenizer.ggml.token_type"),
    ["tokenizer.ggml.merges", meta.arr("string", spmMerges(decodeValue(tokens.raw) as string[]))],
    ...["bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"].flatMap((k) => raw(`tokenizer.ggml.${k}`)),
    ["tokenizer.ggml.add_bos_token", meta.bool(true)],
    ...raw("tokenizer.ggml.add_eos_token"),
    ["tokenizer.ggml.add_space_prefix", meta.bool(false)],
  ];
}

export function synthesize(opts: SynthOptions): { tensors: number; bytes: number } {
  const arch = (opts.arch ?? "llama") as Arch;
  const shape = shapeOf(arch, opts.shape);
  const types = TYPES[opts.type];
  if (!types) throw new Error(`unknown type ${opts.type} (${Object.keys(TYPES).join(", ")})`);
  const vocabPath = opts.vocab ?? join(dataDir, shape.vocab);
  const seed = opts.seed ?? 1;

  const tokenizer = readGGUFMetadata(vocabPath).kvs.filter((kv) => kv.key.startsWith("tokenizer."));
  const tokens = tokenizer.find((kv) => kv.key === "tokenizer.ggml.tokens");
  if (!tokens) throw new Error(`${vocabPath}: no tokenizer.ggml.tokens`);
  const nVocab = arrayLength(tokens.raw);

  const { dim, ffn, heads, kvHeads } = shape;
  const headDim = shape.headDim ?? dim / heads;
  const ropeDim = shape.ropeDim ?? headDim;
  const qDim = heads * headDim, kvDim = kvHeads * headDim;
  const eps = shape.eps ?? 1e-5;
  if (!Number.isInteger(headDim)) throw new Error(`${dim} is not a multiple of ${heads} heads`);
  // llama.cpp's loaders for these take the query width and the output rows as n_embd
  if ((arch === "qwen2" || arch === "phi3" || arch === "llama" || arch === "llama31" || arch === "mixtral" || arch === "qwen2moe") && qDim !== dim) {
    throw new Error(`${arch}: heads × head size must equal the width (${heads} × ${headDim} ≠ ${dim})`);
  }
  if (arch !== "phi3" && !arch.startsWith("gemma") && !arch.startsWith("qwen35") && arch !== "qwen3next" && arch !== "deepseek2" && ropeDim !== headDim) {
    throw new Error(`${arch}: llama.cpp rotates whole heads (rope.dimension_count must be ${headDim})`);
  }
  if (arch === "gemma4") {
    if (!shape.gemma4) throw new Error("gemma4: the shape has no Gemma 4 layer layout");
    // 26B-A4B's experts: a softmax router, every layer, beside the dense MLP; nothing else
    const e = shape.experts;
    if (e && (!e.ffn || e.shared || e.sharedCount || e.dense || e.sigmoid || e.groups || e.norm || e.scale !== undefined)) {
      throw new Error("gemma4: only 26B-A4B's experts are written (every layer, an expert width, no shared experts, a softmax router)");
    }
  }
  const g4 = shape.gemma4 && gemma4Layers(shape);

  // Metadata in the converter's keys (LLM_KV_* of llama-arch.cpp under the architecture's name).
  const gguArch = arch === "llama31" || arch === "mixtral" ? "llama" : arch;
  const k = (key: string) => `${gguArch}.${key}`;
  const metadata: [string, MetaValue][] = [
    ["general.architecture", meta.str(gguArch)],
    ["general.name", meta.str(`synthetic-${arch === "llama" ? "" : arch + "-"}${opts.shape}-${opts.type}${opts.pure ? "-pure" : ""}`)],
    ["general.file_type", meta.u32(types.fileType)],
    [k("context_length"), meta.u32(shape.ctx)],
    [k("embedding_length"), meta.u32(dim)],
    [k("block_count"), meta.u32(shape.layers + (shape.mtp ?? 0))],
    [k("feed_forward_length"), meta.u32(ffn)],
    [k("attention.head_count"), meta.u32(heads)],
    [k("attention.head_count_kv"), meta.u32(kvHeads)],
  ];
  const add = (key: string, v: MetaValue) => metadata.push([k(key), v]);
  /** A key written again: the converter's writer overwrites it where it stands. */
  const set = (key: string, v: MetaValue) => {
    const at = metadata.findIndex(([name]) => name === k(key));
    if (at < 0) add(key, v);
    else metadata[at] = [k(key), v];
  };
  if (gguArch === "llama") {
    add("rope.freq_base", meta.f32(shape.ropeBase));
    add("rope.dimension_count", meta.u32(headDim));
  }
  add("attention.layer_norm_rms_epsilon", meta.f32(eps));
  if (opts.pooling !== undefined) add("pooling_type", meta.u32(opts.pooling));
  switch (arch) {
    case "llama":
    case "llama31":
    case "mixtral":
      add("vocab_size", meta.u32(nVocab));
      break;
    case "qwen2":
    case "qwen2moe":
      add("rope.freq_base", meta.f32(shape.ropeBase));
      break;
    case "qwen3":
    case "qwen3moe":
      add("rope.freq_base", meta.f32(shape.ropeBase));
      add("attention.key_length", meta.u32(headDim));
      add("attention.value_length", meta.u32(headDim));
      break;
    case "qwen35":
    case "qwen35moe":
    case "qwen3next": {
      // Qwen3NextModel's keys (and _Qwen35MRopeMixin's sections: text positions turn every
      // section alike)
      const dn = shape.deltaNet!;
      add("rope.freq_base", meta.f32(shape.ropeBase));
      add("attention.key_length", meta.u32(headDim));
      add("attention.value_length", meta.u32(headDim));
      add("ssm.conv_kernel", meta.u32(dn.conv));
      add("ssm.state_size", meta.u32(dn.state));
      add("ssm.group_count", meta.u32(dn.kHeads));
      add("ssm.time_step_rank", meta.u32(dn.vHeads));
      add("ssm.inner_size", meta.u32(dn.state * dn.vHeads));
      add("full_attention_interval", meta.u32(dn.interval));
      add("rope.dimension_count", meta.u32(ropeDim));
      const pairs = ropeDim / 2, third = Math.ceil(pairs / 3);
      if (arch !== "qwen3next") add("rope.dimension_sections", meta.arr("i32", [third, third, pairs - 2 * third, 0]));
      if (shape.mtp) add("nextn_predict_layers", meta.u32(shape.mtp));
      break;
    }
    case "deepseek2": {
      // DeepseekV2Model: MLA's cache row (key_length = latent + RoPE, value_length = latent)
      // and the heads' own widths (*_mla)
      const m = shape.mla!, e = shape.experts!;
      add("vocab_size", meta.u32(nVocab));
      add("rope.freq_base", meta.f32(shape.ropeBase));
      add("rope.dimension_count", meta.u32(m.rope));
      add("leading_dense_block_count", meta.u32(e.dense ?? 0));
      add("attention.q_lora_rank", meta.u32(m.qLora));
      add("attention.kv_lora_rank", meta.u32(m.kvLora));
      add("attention.key_length", meta.u32(m.kvLora + m.rope));
      add("attention.value_length", meta.u32(m.kvLora));
      add("attention.key_length_mla", meta.u32(m.nope + m.rope));
      add("attention.value_length_mla", meta.u32(m.vHead));
      add("expert_shared_count", meta.u32(e.sharedCount ?? 0));
      add("expert_weights_scale", meta.f32(e.scale ?? 1));
      add("expert_weights_norm", meta.bool(e.norm ?? false));
      add("expert_gating_func", meta.u32(e.sigmoid ? 2 : 1));
      if (shape.yarn) {
        // V2-Lite's rope_scaling: YaRN with mscale_all_dim 0.707 (0.1 × it as the log multiplier)
        add("rope.scaling.type", meta.str("yarn"));
        add("rope.scaling.factor", meta.f32(shape.yarn));
        add("rope.scaling.original_context_length", meta.u32(shape.origCtx!));
        add("rope.scaling.yarn_log_multiplier", meta.f32(0.0707));
      }
      if (e.groups) {
        add("expert_group_count", meta.u32(e.groups[0]));
        add("expert_group_used_count", meta.u32(e.groups[1]));
      }
      break;
    }
    case "gpt-oss":
      // GptOssModel: the base writer's keys (head_dim as key/value length, rope_scaling's
      // yarn fields), then sliding_window and the experts' width
      add("rope.freq_base", meta.f32(shape.ropeBase));
      add("attention.key_length", meta.u32(headDim));
      add("attention.value_length", meta.u32(headDim));
      add("rope.scaling.type", meta.str("yarn"));
      add("rope.scaling.factor", meta.f32(shape.yarn!));
      add("rope.scaling.original_context_length", meta.u32(shape.origCtx!));
      add("rope.scaling.yarn_beta_fast", meta.f32(32));
      add("rope.scaling.yarn_beta_slow", meta.f32(1));
      add("attention.sliding_window", meta.u32(shape.swa!));
      break;
    case "gemma2":
      // Gemma2Model.set_gguf_parameters writes no rope.freq_base (llama.cpp's default is 10000)
      // and no query_pre_attn_scalar (llama.cpp derives the scale from the model size).
      add("attention.key_length", meta.u32(headDim));
      add("attention.value_length", meta.u32(headDim));
      add("attn_logit_softcapping", meta.f32(shape.attnSoftcap!));
      add("final_logit_softcapping", meta.f32(shape.finalSoftcap!));
      add("attention.sliding_window", meta.u32(shape.swa!));
      break;
    case "gemma3":
      if (shape.ropeLinear) {
        add("rope.scaling.type", meta.str("linear"));
        add("rope.scaling.factor", meta.f32(shape.ropeLinear));
      }
      add("rope.freq_base", meta.f32(shape.ropeBase));
      add("rope.freq_base_swa", meta.f32(shape.ropeBaseSwa!));
      add("attention.key_length", meta.u32(headDim));
      add("attention.value_length", meta.u32(headDim));
      add("attention.sliding_window", meta.u32(shape.swa!));
      break;
    case "gemma4": {
      // Gemma3Model's keys with Gemma4Model's over them: key/value_length are the full layers'
      // heads, *_swa the sliding ones'; per-layer arrays (i32, as the writer types Python ints)
      // where layers differ; a full head rotated whole (rope_freqs does the partial rotation)
      const g = shape.gemma4!;
      add("attention.key_length", meta.u32(g.fullHeadDim));
      add("attention.value_length", meta.u32(g.fullHeadDim));
      add("rope.freq_base", meta.f32(shape.ropeBase));
      add("rope.freq_base_swa", meta.f32(shape.ropeBaseSwa!));
      if (shape.finalSoftcap) add("final_logit_softcapping", meta.f32(shape.finalSoftcap));
      add("attention.sliding_window", meta.u32(shape.swa!));
      add("attention.shared_kv_layers", meta.u32(g.sharedKv));
      add("embedding_length_per_layer_input", meta.u32(g.perLayer));
      add("attention.sliding_window_pattern", meta.arr("bool", g4!.map((l) => l.swa)));
      add("attention.key_length_swa", meta.u32(headDim));
      add("attention.value_length_swa", meta.u32(headDim));
      if (g.doubleWide) set("feed_forward_length", meta.arr("i32", g4!.map((l) => l.ffn)));
      if (g.fullKvHeads !== undefined) set("attention.head_count_kv", meta.arr("i32", g4!.map((l) => l.kvHeads)));
      add("rope.dimension_count", meta.u32(g.fullHeadDim));
      add("rope.dimension_count_swa", meta.u32(headDim));
      break;
    }
    case "phi3":
      add("rope.scaling.original_context_length", meta.u32(shape.origCtx ?? shape.ctx));
      add("rope.dimension_count", meta.u32(ropeDim));
      add("rope.freq_base", meta.f32(shape.ropeBase));
      add("attention.sliding_window", meta.u32(shape.swa ?? 0));
      if (shape.origCtx) add("rope.scaling.attn_factor", meta.f32(phi3AttnFactor(shape.ctx, shape.origCtx)));
      break;
  }
  const experts = shape.experts;
  if (experts) {
    // LLM_KV_EXPERT_*: Mixtral's converter writes the count and the used count; the Qwen MoE
    // converters add the expert (and shared expert) widths
    add("expert_count", meta.u32(experts.count));
    add("expert_used_count", meta.u32(experts.used));
    if (experts.ffn) add("expert_feed_forward_length", meta.u32(experts.ffn));
    if (experts.shared) add("expert_shared_feed_forward_length", meta.u32(experts.shared));
  }
  if (arch === "gemma4") metadata.push(...gemma4Tokenizer(tokenizer));
  else metadata.push(...tokenizer.map((kv): [string, MetaValue] => [kv.key, { type: "raw", bytes: kv.raw }]));

  const tensors: TensorSpec[] = [];
  const streamSeed = () => (seed * 0x10001 + tensors.length) | 0; // each tensor its own stream
  /** A weight of `rows` rows of `rowLength`; `stack` of them in one 3-D tensor (experts); `gain` times the usual σ. */
  const weight = (name: string, type: GGMLTypeName, rowLength: number, rows: number, stack = 1, gain = 1) => {
    const t = opts.pure ? type : typeForRow(type, rowLength, name);
    if (rowLength % blockLayout[t][0] !== 0) throw new Error(`${name}: rows of ${rowLength} do not fit ${t} blocks of ${blockLayout[t][0]} (--pure)`);
    const s = streamSeed();
    const sigma = (shape.unitInit ? 1 / Math.sqrt(rowLength) : SIGMA) * gain;
    const dims = stack > 1 ? [rowLength, rows, stack] : [rowLength, rows];
    tensors.push({ name, type: t, dims, data: () => tensorData(t, rowLength * rows * stack, s, sigma) });
  };
  /** A 1-D F32 tensor (norm gains, biases): the converter keeps every 1-D tensor in F32. */
  const vector = (name: string, values: () => ArrayLike<number>, n: number, dims = [n]) =>
    tensors.push({ name, type: "F32", dims, data: () => f32Data(values()) });
  // RMSNorm gains: 1 on real shapes (the random matrices alone set the activations' scale),
  // 1 + spread·N(0,1) on test shapes. Gemma's converter stores 1 + w (Gemma's RMSNorm multiplies
  // by 1 + w): these values are what the file holds, whatever the architecture.
  const norm = (name: string, n = dim, center = 1) => {
    const s = streamSeed();
    const spread = (shape.normSpread ?? 0) * center, gain = opts.normGain ?? 1;
    vector(name, () => (spread ? normals(n, s).map((x) => (center + spread * x) * gain) : new Float32Array(n).fill(center * gain)), n);
  };
  /** Random biases; `stack` of them in one [n, stack] tensor (the experts'). */
  const bias = (name: string, n: number, stack = 1) => {
    const s = streamSeed();
    vector(name, () => normals(n * stack, s).map((x) => x * (shape.biasSigma ?? SIGMA)), n * stack, stack > 1 ? [n, stack] : [n]);
  };

  // Extra tensors first, as the converter's generate_extra_tensors yields them.
  if (arch === "llama31") {
    const factors = llama3RopeFactors(headDim, shape.ropeBase, shape.origCtx);
    vector("rope_freqs.weight", () => factors, headDim / 2);
  }
  if (arch === "phi3" && shape.origCtx) {
    const { long, short } = phi3RopeFactors(ropeDim / 2);
    vector("rope_factors_long.weight", () => long, ropeDim / 2);
    vector("rope_factors_short.weight", () => short, ropeDim / 2);
  }
  if (arch === "gemma4") {
    const g = shape.gemma4!;
    vector("rope_freqs.weight", () => gemma4RopeFactors(g.fullHeadDim, g.fullRotary), g.fullHeadDim / 2);
  }

  const big = opts.pure ? types.main : types.big ?? types.main;
  const main = types.main;
  weight("token_embd.weight", main, dim, nVocab);
  const perLayer = shape.gemma4?.perLayer ?? 0;
  // rows of the per-layer width (16 on the test shape) that fit no block of the type: the
  // converter (and llama-quantize) fall back to F16
  const plType: GGMLTypeName = perLayer % blockLayout[main][0] === 0 ? main : "F16";
  if (perLayer > 0) {
    // Gemma 4's per-layer embeddings: a row of every layer's per token, and their projection from the embedding
    weight("per_layer_token_embd.weight", main, perLayer * shape.layers, nVocab);
    weight("per_layer_model_proj.weight", main, dim, perLayer * shape.layers);
    norm("per_layer_proj_norm.weight", perLayer);
  }
  /** blk.N.'s mixture of experts: the router, the stacked experts, their biases, the shared expert. */
  const expertTensors = (p: string) => {
    const experts = shape.experts!;
    // the router stays F32 (llama-quantize leaves ffn_gate_inp alone); each expert's matrix
    // is one slice of a stacked 3-D tensor [row length, rows, experts]
    weight(p + "ffn_gate_inp.weight", "F32", dim, experts.count);
    const ef = experts.ffn ?? ffn;
    // gpt-oss ships its experts in MXFP4 (repack_mxfp4), whatever the rest is in
    const mxfp4 = arch === "gpt-oss" && !shape.plainExperts;
    const et = mxfp4 ? "MXFP4" : main, edt = mxfp4 ? "MXFP4" : big;
    weight(p + "ffn_gate_exps.weight", et, dim, ef, experts.count);
    weight(p + "ffn_up_exps.weight", et, dim, ef, experts.count);
    weight(p + "ffn_down_exps.weight", edt, ef, dim, experts.count);
    if (arch === "gpt-oss") {
      // the router's and every expert's biases, [width, experts] for the experts'
      bias(p + "ffn_gate_inp.bias", experts.count);
      bias(p + "ffn_gate_exps.bias", ef, experts.count);
      bias(p + "ffn_up_exps.bias", ef, experts.count);
      bias(p + "ffn_down_exps.bias", dim, experts.count);
    }
    if (experts.sigmoid) {
      // e_score_correction_bias: positive, of the probabilities' size, so it changes choices
      const b = streamSeed();
      vector(p + "exp_probs_b.bias", () => normals(experts.count, b).map((x) => 0.05 * Math.abs(x)), experts.count);
    }
    if (experts.sharedCount) {
      // DeepSeek's shared experts: one MLP of their summed width, no gate
      weight(p + "ffn_gate_shexp.weight", main, dim, ef * experts.sharedCount);
      weight(p + "ffn_up_shexp.weight", main, dim, ef * experts.sharedCount);
      weight(p + "ffn_down_shexp.weight", big, ef * experts.sharedCount, dim);
    }
    if (experts.shared) {
      // shared_expert_gate [1, dim]: the converter squeezes it to a 1-D F32 tensor
      const g = streamSeed(), sigma = shape.unitInit ? 1 / Math.sqrt(dim) : SIGMA;
      vector(p + "ffn_gate_inp_shexp.weight", () => normals(dim, g).map((x) => x * sigma), dim);
      weight(p + "ffn_gate_shexp.weight", main, dim, experts.shared);
      weight(p + "ffn_up_shexp.weight", main, dim, experts.shared);
      weight(p + "ffn_down_shexp.weight", big, experts.shared, dim);
    }
  };
  /**
   * Gemma 4's experts (26B-A4B; llama.cpp's gemma4.cpp): post_ffw_norm_1 after the dense MLP;
   * the router (router.proj) and its scale per input channel (router.scale); pre_ffw_norm_2,
   * the experts' fused gate|up (experts.gate_up_proj: the first ef rows of each expert its
   * gate) and down, a scale per expert (router.per_expert_scale, applied by llama.cpp to each
   * expert's down output), post_ffw_norm_2. Router and scales F32 as the converter keeps them.
   */
  const gemma4Experts = (p: string) => {
    const e = shape.experts!, ef = e.ffn!;
    // test shapes: scales drawn; real shapes: 1
    const drawn = (shape.normSpread ?? 0) > 0;
    norm(p + "post_ffw_norm_1.weight", dim, shape.postNormGain);
    // llama.cpp scales the router's input by 1/√dim: on unit-init shapes a router σ of 1 (not
    // 1/√dim) gives logits of unit size, so the softmax weights of the chosen experts differ
    weight(p + "ffn_gate_inp.weight", "F32", dim, e.count, 1, shape.unitInit ? Math.sqrt(dim) : 1);
    const rs = streamSeed();
    vector(p + "ffn_gate_inp.scale", () => (drawn ? normals(dim, rs).map((x) => Math.exp(0.25 * x)) : new Float32Array(dim).fill(1)), dim);
    norm(p + "pre_ffw_norm_2.weight");
    weight(p + "ffn_gate_up_exps.weight", main, dim, 2 * ef, e.count);
    weight(p + "ffn_down_exps.weight", big, ef, dim, e.count);
    const ds = streamSeed();
    vector(p + "ffn_down_exps.scale", () => (drawn ? Array.from(randomBytes(e.count, ds), (b) => 0.5 + b / 255) : new Float32Array(e.count).fill(1)), e.count);
    norm(p + "post_ffw_norm_2.weight", dim, shape.postNormGain);
  };
  /** Qwen3.5's gated attention: the query projection is each head's query, then its output gate. */
  const gatedAttention = (p: string) => {
    weight(p + "attn_q.weight", main, dim, 2 * qDim);
    weight(p + "attn_k.weight", main, dim, kvDim);
    weight(p + "attn_v.weight", main, dim, kvDim);
    norm(p + "attn_q_norm.weight", headDim);
    norm(p + "attn_k_norm.weight", headDim);
    weight(p + "attn_output.weight", main, qDim, dim);
  };
  /** Qwen3.5's FFN: the experts (qwen35moe) or a gated MLP. */
  const hybridFFN = (p: string) => {
    if (experts) return expertTensors(p);
    weight(p + "ffn_gate.weight", main, dim, ffn);
    weight(p + "ffn_up.weight", main, dim, ffn);
    weight(p + "ffn_down.weight", big, ffn, dim);
  };
  for (let i = 0; i < shape.layers; i++) {
    const p = `blk.${i}.`;
    norm(p + "attn_norm.weight");
    const mla = shape.mla;
    if (mla) {
      // DeepSeek2's layer (llama.cpp's deepseek2.cpp), attn_k_b / attn_v_b split per head
      const qRows = heads * (mla.nope + mla.rope);
      if (mla.qLora > 0) {
        weight(p + "attn_q_a.weight", main, dim, mla.qLora);
        norm(p + "attn_q_a_norm.weight", mla.qLora);
        weight(p + "attn_q_b.weight", main, mla.qLora, qRows);
      } else {
        weight(p + "attn_q.weight", main, dim, qRows);
      }
      weight(p + "attn_kv_a_mqa.weight", main, dim, mla.kvLora + mla.rope);
      norm(p + "attn_kv_a_norm.weight", mla.kvLora);
      weight(p + "attn_k_b.weight", main, mla.nope, mla.kvLora, heads);
      weight(p + "attn_v_b.weight", main, mla.kvLora, mla.vHead, heads);
      weight(p + "attn_output.weight", main, heads * mla.vHead, dim);
      norm(p + "ffn_norm.weight");
      if (i < (experts?.dense ?? 0)) {
        weight(p + "ffn_gate.weight", main, dim, ffn);
        weight(p + "ffn_up.weight", main, dim, ffn);
        weight(p + "ffn_down.weight", big, ffn, dim);
      } else {
        expertTensors(p);
      }
      continue;
    }
    if (g4) {
      // Gemma 4's layer (llama.cpp's gemma4.cpp): each layer's own head size and KV heads; the
      // kv-shared layers keep attn_k/attn_v/attn_k_norm as the converter writes them (llama.cpp
      // loads them as optional and reads another layer's KV); norms as they are used (not w + 1)
      const l = g4[i]!, g = shape.gemma4!;
      const q = heads * l.headDim, kv = l.kvHeads * l.headDim;
      weight(p + "attn_q.weight", main, dim, q);
      weight(p + "attn_k.weight", main, dim, kv);
      if (!(g.kEqV && !l.swa)) weight(p + "attn_v.weight", main, dim, kv);
      // Gemma 4 leaves scores unscaled (its trained Q/K norms scale them): gains near d^-1/4
      // each give random weights the usual 1/√d, so that attention is not near one-hot and
      // the Q8_0 rounding of its inputs does not swing it
      norm(p + "attn_q_norm.weight", l.headDim, l.headDim ** -0.25);
      norm(p + "attn_k_norm.weight", l.headDim, l.headDim ** -0.25);
      weight(p + "attn_output.weight", main, q, dim);
      norm(p + "post_attention_norm.weight", dim, shape.postNormGain);
      norm(p + "ffn_norm.weight");
      weight(p + "ffn_gate.weight", main, dim, l.ffn);
      weight(p + "ffn_up.weight", main, dim, l.ffn);
      weight(p + "ffn_down.weight", big, l.ffn, dim);
      if (experts) gemma4Experts(p);
      norm(p + "post_ffw_norm.weight", dim, shape.postNormGain);
      if (perLayer > 0) {
        weight(p + "inp_gate.weight", main, dim, perLayer);
        weight(p + "proj.weight", plType, perLayer, dim);
        norm(p + "post_norm.weight");
      }
      // layer_scalar: multiplies the whole residual stream at the layer's end
      const s = streamSeed();
      vector(p + "layer_output_scale.weight", () => (g.layerScale ? [0.5 + randomBytes(1, s)[0]! / 255] : [1]), 1);
      continue;
    }
    const dn = shape.deltaNet;
    if (dn) {
      // Qwen3.5: attn_norm, then a Gated DeltaNet or a gated attention block, post_attention_norm
      // before the dense FFN; llama.cpp's tensor shapes (qwen35.cpp)
      if ((i + 1) % dn.interval !== 0) {
        const keyDim = dn.state * dn.kHeads, valueDim = dn.state * dn.vHeads, convDim = 2 * keyDim + valueDim;
        if (dn.fused) {
          weight(p + "ssm_in.weight", main, dim, convDim + valueDim);
        } else {
          weight(p + "attn_qkv.weight", main, dim, convDim);
          weight(p + "attn_gate.weight", main, dim, valueDim);
        }
        const c = streamSeed();
        // conv1d [taps, channels] in F32, as the converter squeezes it
        vector(p + "ssm_conv1d.weight", () => normals(dn.conv * convDim, c).map((x) => x / Math.sqrt(dn.conv)), dn.conv * convDim, [dn.conv, convDim]);
        bias(p + "ssm_dt.bias", dn.vHeads);
        // -exp(A_log): a decay per value head, slow enough that the state outlives a few tokens
        const a = streamSeed();
        vector(p + "ssm_a", () => normals(dn.vHeads, a).map((x) => -0.3 * Math.exp(0.5 * x)), dn.vHeads);
        if (arch === "qwen3next") {
          weight(p + "ssm_ba.weight", main, dim, 2 * dn.vHeads);
        } else {
          weight(p + "ssm_beta.weight", main, dim, dn.vHeads);
          weight(p + "ssm_alpha.weight", main, dim, dn.vHeads);
        }
        norm(p + "ssm_norm.weight", dn.state);
        weight(p + "ssm_out.weight", main, valueDim, dim);
      } else {
        gatedAttention(p);
      }
      norm(p + "post_attention_norm.weight");
      hybridFFN(p);
      continue;
    }
    if (arch === "phi3") {
      weight(p + "attn_qkv.weight", main, dim, qDim + 2 * kvDim); // rows: q, then k, then v
    } else {
      weight(p + "attn_q.weight", main, dim, qDim);
      weight(p + "attn_k.weight", main, dim, kvDim);
      weight(p + "attn_v.weight", main, dim, kvDim);
    }
    if (arch === "qwen2" || arch === "qwen2moe" || arch === "gpt-oss") {
      bias(p + "attn_q.bias", qDim);
      bias(p + "attn_k.bias", kvDim);
      bias(p + "attn_v.bias", kvDim);
    }
    if (arch === "qwen3" || arch === "qwen3moe" || arch === "gemma3") {
      norm(p + "attn_q_norm.weight", headDim);
      norm(p + "attn_k_norm.weight", headDim);
    }
    weight(p + "attn_output.weight", main, qDim, dim);
    if (arch === "gpt-oss") {
      bias(p + "attn_output.bias", dim);
      // one learned logit per head that every softmax row also takes (the converter's "sinks" + ".weight")
      const s = streamSeed();
      vector(p + "attn_sinks.weight", () => normals(heads, s), heads);
    }
    if (arch === "gemma2" || arch === "gemma3") norm(p + "post_attention_norm.weight", dim, shape.postNormGain);
    // gpt-oss: the FFN's input norm is post_attention_norm (llama.cpp's attn_post_norm), no ffn_norm
    if (arch === "gpt-oss") norm(p + "post_attention_norm.weight");
    else norm(p + "ffn_norm.weight");
    if (experts) {
      expertTensors(p);
    } else if (arch === "phi3") {
      weight(p + "ffn_up.weight", main, dim, 2 * ffn); // rows: gate, then up (gate_up_proj)
    } else {
      weight(p + "ffn_gate.weight", main, dim, ffn);
      weight(p + "ffn_up.weight", main, dim, ffn);
    }
    if (!experts) weight(p + "ffn_down.weight", big, ffn, dim);
    if (arch === "gemma2" || arch === "gemma3") norm(p + "post_ffw_norm.weight", dim, shape.postNormGain);
  }
  for (let i = shape.layers; i < shape.layers + (shape.mtp ?? 0); i++) {
    // an MTP block (llama.cpp's load_block_mtp): a full-attention block, then the projection
    // of [embedding; hidden] and its two norms
    const p = `blk.${i}.`;
    norm(p + "attn_norm.weight");
    gatedAttention(p);
    norm(p + "post_attention_norm.weight");
    hybridFFN(p);
    weight(p + "nextn.eh_proj.weight", main, 2 * dim, dim);
    norm(p + "nextn.enorm.weight");
    norm(p + "nextn.hnorm.weight");
    norm(p + "nextn.shared_head_norm.weight");
  }
  norm("output_norm.weight");
  if (!shape.tied) weight("output.weight", big, dim, nVocab);

  writeGGUF(opts.out, { metadata, tensors });
  return { tensors: tensors.length, bytes: statSync(opts.out).size };
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      arch: { type: "string", default: "llama" },
      shape: { type: "string" },
      type: { type: "string", default: "q4_0" },
      vocab: { type: "string" },
      seed: { type: "string", default: "1" },
      pure: { type: "boolean", default: false },
      pooling: { type: "string" },
      "norm-gain": { type: "string" },
    },
  });
  const arch = values.arch!;
  const shape = values.shape ?? (arch === "llama" ? "1b" : "test");
  if (positionals.length !== 1) {
    const shapes = Object.entries(ARCH_SHAPES).map(([a, s]) => `${a}: ${Object.keys(s).join("|")}`).join("; ");
    console.error(`usage: bun src/gguf/synth.ts OUT.gguf [--arch ${Object.keys(ARCH_SHAPES).join("|")}] --shape S --type ${Object.keys(TYPES).join("|")} [--pure] [--vocab VOCAB.gguf] [--seed N] [--pooling N] [--norm-gain G]\nshapes: ${shapes}`);
    process.exit(2);
  }
  const seed = Number(values.seed);
  if (!Number.isInteger(seed)) {
    console.error(`synth: --seed must be an integer, got ${values.seed}`);
    process.exit(2);
  }
  const t0 = performance.now();
  try {
    const pooling = values.pooling === undefined ? undefined : Number(values.pooling);
    const normGain = values["norm-gain"] === undefined ? undefined : Number(values["norm-gain"]);
    if (normGain !== undefined && !(normGain > 0)) throw new Error(`--norm-gain must be a positive number, got ${values["norm-gain"]}`);
    const r = synthesize({ out: positionals[0]!, arch, shape, type: values.type!, vocab: values.vocab, seed, pure: values.pure, pooling, normGain });
    const secs = ((performance.now() - t0) / 1000).toFixed(1);
    console.log(`${positionals[0]}: ${arch === "llama" ? "" : arch + " "}${shape} ${values.type}${values.pure ? " (pure)" : ""}, ${r.tensors} tensors, ${(r.bytes / 2 ** 20).toFixed(1)} MiB in ${secs} s`);
  } catch (e) {
    console.error(`synth: ${(e as Error).message}`);
    process.exit(1);
  }
}
