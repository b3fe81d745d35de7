/* ckernels.h — Velo's CPU compute kernels.
 *
 * Quantized weights use ggml's block layouts (GGUF); activations are quantized to 8-bit
 * blocks (Q8_0 / Q8_1 / Q8_K) and multiplied with integer dot products, as llama.cpp does.
 * SIMD paths (AVX2+FMA+F16C, AVX-512 VNNI, NEON dotprod) are chosen at run time.
 * All functions are single-threaded and reentrant; callers split work across threads.
 */
#ifndef CKERNELS_H
#define CKERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ggml type ids (ggml.h) of the types these kernels handle. */
enum {
    CK_TYPE_F32 = 0,
    CK_TYPE_F16 = 1,
    CK_TYPE_Q4_0 = 2,
    CK_TYPE_Q4_1 = 3,
    CK_TYPE_Q5_0 = 6,
    CK_TYPE_Q5_1 = 7,
    CK_TYPE_Q8_0 = 8,
    CK_TYPE_Q8_1 = 9,
    CK_TYPE_Q2_K = 10,
    CK_TYPE_Q3_K = 11,
    CK_TYPE_Q4_K = 12,
    CK_TYPE_Q5_K = 13,
    CK_TYPE_Q6_K = 14,
    CK_TYPE_Q8_K = 15,
    CK_TYPE_IQ4_NL = 20,
    CK_TYPE_IQ4_XS = 23,
    CK_TYPE_BF16 = 30,
    CK_TYPE_MXFP4 = 39,
};

/* ck_cpu_features() bits */
enum {
    CK_CPU_AVX2 = 1,        /* AVX2 + FMA + F16C */
    CK_CPU_AVX512 = 2,      /* AVX-512 F/BW/VL/DQ */
    CK_CPU_AVX512_VNNI = 4,
    CK_CPU_AVX_VNNI = 8,
    CK_CPU_NEON_DOTPROD = 16,
    CK_CPU_AMX_INT8 = 32,   /* AMX tiles with int8 products, granted to this process by the OS */
};

/* ck_set_isa_limit levels */
enum {
    CK_ISA_SCALAR = 0,
    CK_ISA_SIMD = 1,   /* AVX2, or NEON */
    CK_ISA_AVX512 = 2, /* AVX-512 VNNI */
    CK_ISA_BEST = 3,   /* everything available, AMX included (the default) */
};

/* Moves the bytes of the page-aligned mapping [addr, addr + size) into anonymous memory (huge
 * pages where the kernel gives them) at the same addresses: 0 done, 1 not on this system, -1
 * failed (the mapping is as it was). */
int ck_make_resident(void *addr, size_t size);

int ck_cpu_features(void);
/* The kernel sets up to a CK_ISA_* level; CK_ISA_BEST (the default) is everything available.
 * Process-wide, for tests and benchmarks: do not change it while kernels run on other threads. */
void ck_set_isa_limit(int level);
/* Name of the kernel set in use now: "avx512-amx", "avx512-vnni", "avx2", "neon-dotprod" or
 * "scalar". */
const char *ck_isa_name(void);

int ck_type_supported(int type);
/* Activation format a weight type multiplies with (Q8_0, Q8_1, Q8_K or F32, as llama.cpp's CPU
 * backend: Q8_K for Q2_K/Q3_K/IQ4_XS, Q8_0 for IQ4_NL); -1 if unsupported. */
int ck_vec_dot_type(int wtype);
/* Bytes of a row of n elements (n a multiple of the block size); 0 for unsupported types. */
size_t ck_row_size(int type, int64_t n);
/* Elements per block (1 for F32/F16/BF16); 0 for unsupported types. */
int64_t ck_block_size(int type);

/* F32 -> type. Q8_0/Q8_1/Q8_K, Q4_0/Q4_1/Q5_0/Q5_1, F16, BF16 round exactly like ggml's
 * reference quantizers; Q2_K..Q6_K, IQ4_NL and IQ4_XS use a simple (non-searching)
 * max-abs/min-max fit. */
void ck_quantize_row(int type, const float *x, void *y, int64_t n);
/* type -> F32, every supported type (including Q8_1 and Q8_K). */
int ck_dequantize_row(int type, const void *x, float *y, int64_t n); /* 0: no dequantizer for the type */

/* One weight row times one activation row in ck_vec_dot_type(wtype) format. */
float ck_vec_dot(int wtype, int64_t n, const void *w, const void *a);

/* y[m*ldy + r] = dot(W row r, A row m) for r in [r0, r1), m in [0, M).
 * W row r is at (char*)w + r*w_stride, A row m at (char*)a + m*a_stride, in the activation
 * format (rows from ck_quantize_row; Q8_* quants must lie in [-127, 127]). n is a multiple of
 * the weight type's block size. Any alignment. Single-threaded: split [r0, r1) across threads,
 * in large ranges, since each call repacks its activation rows once. Unsupported types leave
 * y untouched. */
void ck_matmul(int wtype, int64_t n, const void *w, size_t w_stride, int64_t r0, int64_t r1,
               const void *a, size_t a_stride, int64_t M, float *y, int64_t ldy);

/* f32 helpers */
float ck_dot_f32(const float *x, const float *y, int64_t n);
void ck_axpy_f32(float a, const float *x, float *y, int64_t n);                  /* y += a*x */
void ck_rms_norm(const float *x, const float *w, float *y, int64_t n, float eps); /* w may be NULL */
void ck_swiglu(const float *gate, const float *up, float *y, int64_t n);         /* silu(gate)*up */
void ck_geglu(const float *gate, const float *up, float *y, int64_t n);          /* gelu_tanh(gate)*up */
/* gpt-oss's SwiGLU (ggml's swiglu_oai): g = min(gate, limit), u = clamp(up, -limit, limit),
 * y = g / (1 + exp(-alpha g)) * (u + 1) */
void ck_swiglu_clamped(const float *gate, const float *up, float *y, int64_t n, float alpha, float limit);
void ck_softmax(float *x, int64_t n);                                            /* in place */
void ck_add_f32(const float *a, const float *b, float *y, int64_t n);
int64_t ck_argmax_f32(const float *x, int64_t n); /* first index of the largest value */
int ck_all_finite_f32(const float *x, int64_t n); /* 1 when no value is a NaN or an infinity */
/* the k largest values among allowed (bits; NULL: all), descending, ties to the lower index: how many */
int64_t ck_top_k_f32(const float *x, int64_t n, const uint64_t *allowed, int64_t k, int32_t *ids, float *vals);
void ck_f16_to_f32(const uint16_t *x, float *y, int64_t n);
void ck_f32_to_f16(const float *x, uint16_t *y, int64_t n);

/* Paged attention for one token: `heads` query heads (q: heads x hd, contiguous) that share one
 * KV head attend over keys 0..n-1. K pages are transposed: element d of key j is
 * kpages[j / page_size][(head_offset + d) * page_size + j % page_size]. V pages are by slot:
 * key j's V row is vpages[j / page_size] + (j % page_size) * stride + head_offset.
 * Scores are q·k·scale, then softcap·tanh(s/softcap) when softcap > 0; keys before `start`
 * (a sliding window's edge) are left out. sinks (NULL: none): one logit per head that joins
 * the softmax with no value (gpt-oss's attention sinks). out: heads x hd. scores: scratch of
 * heads * n floats. */
void   ck_attention(const float *q, int64_t heads, int64_t hd, const float *const *kpages, const float *const *vpages,
                    int64_t page_size, int64_t stride, int64_t head_offset, int64_t n, float scale, float softcap, const float *sinks,
                    int64_t start, float *out, float *scores);

/* KV cache storage (CK_TYPE_F32, F16, Q8_0, Q4_0). A plane holds page_size slots of one
 * kv_dim-wide row of K or V for one layer of one page. K in F32/F16 is transposed (element d of
 * slot s at [d * page_size + s], as ck_attention reads it); quantized K and every V are by slot,
 * slot s's row at s * ck_kv_row_bytes bytes, a quantized row being ceil(kv_dim / 32) ggml blocks
 * (values past kv_dim zero). Planes are padded to 4 bytes (whole 32-bit words). */
int    ck_kv_type_supported(int type);
size_t ck_kv_row_bytes(int type, int64_t kv_dim);
size_t ck_kv_plane_bytes(int type, int64_t page_size, int64_t kv_dim);
/* Writes row x (kv_dim floats) to slot `slot` of a plane; key: 1 for K, 0 for V. Quantized rows
 * round as ggml's reference quantizers, F16 to nearest even. */
void   ck_kv_store(int type, int key, void *plane, int64_t page_size, int64_t kv_dim, int64_t slot, const float *x);
/* Reads slot `slot` back as kv_dim floats. */
void   ck_kv_load(int type, int key, const void *plane, int64_t page_size, int64_t kv_dim, int64_t slot, float *y);
/* ck_attention over pages of any KV types: kpages/vpages are the K and V planes of this layer;
 * stride is kv_dim. Both F32 is exactly ck_attention. */
void   ck_attention_kv(const float *q, int64_t heads, int64_t hd, int ktype, const void *const *kpages, int vtype,
                       const void *const *vpages, int64_t page_size, int64_t kv_dim, int64_t head_offset, int64_t n,
                       float scale, float softcap, const float *sinks, int64_t start, float *out, float *scores);

#ifdef __cplusplus
}
#endif
#endif
