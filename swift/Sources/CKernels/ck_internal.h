/* ck_internal.h — block layouts, scalar helpers and the per-ISA kernel tables. */
#ifndef CK_INTERNAL_H
#define CK_INTERNAL_H

#include "ckernels.h"
#include <string.h>

#define CK_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define CK_TARGET_AVX512 \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#define CK_INLINE static inline __attribute__((always_inline))

#define CK_NTYPES 40 /* type ids are < 40 */

/* ---- ggml block layouts (ggml-common.h); all little-endian, packed without padding ---- */

#define QK 32  /* elements per block of the *_0 / *_1 types */
#define QKK 256 /* elements per super-block of the K types */

typedef struct { uint16_t d; uint8_t qs[QK / 2]; } blk_q4_0;                 /* q = nibble - 8 */
typedef struct { uint16_t d, m; uint8_t qs[QK / 2]; } blk_q4_1;              /* x = d*q + m */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; } blk_q5_0; /* q = 5 bits - 16 */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; } blk_q5_1;
typedef struct { uint16_t d; int8_t qs[QK]; } blk_q8_0;
typedef struct { uint16_t d, s; int8_t qs[QK]; } blk_q8_1; /* s = d * sum(qs) */

/* 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes. */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[QKK / 2]; } blk_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[QKK / 8]; uint8_t qs[QKK / 2]; } blk_q5_K;
/* 16 sub-blocks of 16 with int8 scales; q = 6 bits - 32. */
typedef struct { uint8_t ql[QKK / 2]; uint8_t qh[QKK / 4]; int8_t scales[QKK / 16]; uint16_t d; } blk_q6_K;
/* 16 sub-blocks of 16, each with a 4-bit scale (low nibble of scales[j]) and a 4-bit min (high
 * nibble); q = 2 bits: x = d*sc*q - dmin*m. Value 128h + 32s + l (l < 32) is bits 2s..2s+1 of
 * qs[32h + l]. */
typedef struct { uint8_t scales[QKK / 16]; uint8_t qs[QKK / 4]; uint16_t d, dmin; } blk_q2_K;
/* 16 sub-blocks of 16 with 6-bit scales stored plus 32; q = 2 low bits (laid out as Q2_K's)
 * and a high bit, bit v/32 of hmask[v % 32]: x = d*(sc-32)*(q - (high ? 0 : 4)). */
typedef struct { uint8_t hmask[QKK / 8]; uint8_t qs[QKK / 4]; uint8_t scales[12]; uint16_t d; } blk_q3_K;
/* Q4_0's layout, but a nibble indexes the non-linear table ck_kvalues_iq4nl: x = d*kvalues[q]. */
typedef struct { uint16_t d; uint8_t qs[QK / 2]; } blk_iq4_nl;
/* 8 sub-blocks of 32, each laid out as an IQ4_NL block, with 6-bit scales stored plus 32 (low
 * nibbles in scales_l, high 2 bits in scales_h): x = d*(ls-32)*kvalues[q]. */
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[QKK / 64]; uint8_t qs[QKK / 2]; } blk_iq4_xs;
/* MXFP4 (OCP microscaling FP4, gpt-oss's experts): an E8M0 scale 2^(e-127) and 32 E2M1 values,
 * laid out as Q4_0 (value j in the low nibble of qs[j], value j+16 in the high one); a nibble
 * indexes ck_kvalues_mxfp4, the E2M1 values doubled, so x = kvalues[q] * 2^(e-128). */
typedef struct { uint8_t e; uint8_t qs[QK / 2]; } blk_mxfp4;
/* Activations for the K types: f32 scale, and sums of each group of 16 quants. */
typedef struct { float d; int8_t qs[QKK]; int16_t bsums[QKK / 16]; } blk_q8_K;

_Static_assert(sizeof(blk_q4_0) == 18, "q4_0");
_Static_assert(sizeof(blk_q4_1) == 20, "q4_1");
_Static_assert(sizeof(blk_q5_0) == 22, "q5_0");
_Static_assert(sizeof(blk_q5_1) == 24, "q5_1");
_Static_assert(sizeof(blk_q8_0) == 34, "q8_0");
_Static_assert(sizeof(blk_q8_1) == 36, "q8_1");
_Static_assert(sizeof(blk_q4_K) == 144, "q4_K");
_Static_assert(sizeof(blk_q5_K) == 176, "q5_K");
_Static_assert(sizeof(blk_q6_K) == 210, "q6_K");
_Static_assert(sizeof(blk_q8_K) == 292, "q8_K");
_Static_assert(sizeof(blk_q2_K) == 84, "q2_K");
_Static_assert(sizeof(blk_q3_K) == 110, "q3_K");
_Static_assert(sizeof(blk_iq4_nl) == 18, "iq4_nl");
_Static_assert(sizeof(blk_iq4_xs) == 136, "iq4_xs");
_Static_assert(sizeof(blk_mxfp4) == 17, "mxfp4");

/* The 16 levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl). */
static const int8_t ck_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The 16 levels of MXFP4 (ggml's kvalues_mxfp4: E2M1 times 2). */
static const int8_t ck_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e-128): half an E8M0 scale, which with the doubled levels gives the E2M1 value (ggml's
 * ggml_e8m0_to_fp32_half, exact for every e, the two smallest as subnormals). */
static inline float ck_e8m0_half(uint8_t e) {
    union { uint32_t u; float f; } v = {e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23};
    return v.f;
}

/* Scale j (0..15) of a Q3_K super-block, minus 32: the low 4 bits are the low nibble of s[j]
 * (j < 8) or the high nibble of s[j-8], the top 2 bits are bits 2(j/4).. of s[8 + j%4]. */
static inline int ck_q3k_scale(const uint8_t *s, int j) {
    const int lo = j < 8 ? s[j] & 0xf : s[j - 8] >> 4;
    const int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | hi << 4) - 32;
}

/* Scale of sub-block ib (0..7) of an IQ4_XS super-block, minus 32. */
static inline int ck_iq4xs_scale(const uint8_t *scales_l, uint16_t scales_h, int ib) {
    return (((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | ((scales_h >> (2 * ib)) & 3) << 4) - 32;
}

/* Bytes per block of a 32-element weight type. */
static inline size_t ck_q32_bytes(int type) {
    switch (type) {
    case CK_TYPE_Q4_0: return sizeof(blk_q4_0);
    case CK_TYPE_Q4_1: return sizeof(blk_q4_1);
    case CK_TYPE_Q5_0: return sizeof(blk_q5_0);
    case CK_TYPE_Q5_1: return sizeof(blk_q5_1);
    default: return sizeof(blk_q8_0);
    }
}

/* Bytes per super-block of a K weight type. */
static inline size_t ck_k_bytes(int type) {
    return type == CK_TYPE_Q4_K ? sizeof(blk_q4_K) : type == CK_TYPE_Q5_K ? sizeof(blk_q5_K) : sizeof(blk_q6_K);
}

/* Q4_1 and Q5_1 multiply with Q8_1 activations (whose s carries the min term). */
static inline int ck_uses_q8_1(int type) { return type == CK_TYPE_Q4_1 || type == CK_TYPE_Q5_1; }

/* ---- scalar conversions ---- */

static inline uint16_t ck_ld16(const void *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t ck_ld32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }

static inline float ck_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t ck_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* IEEE half -> float, exact (subnormals, inf, nan included). */
static inline float ck_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return ck_bits_f32(sign | 0x7f800000 | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return ck_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* float -> IEEE half, round to nearest even (what F16C and ggml do). */
static inline uint16_t ck_f2h(float f) {
    uint32_t u = ck_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffff;
    if (a > 0x7f800000) return sign | 0x7e00 | (uint16_t)((a >> 13) & 0x3ff); /* nan stays nan */
    if (a >= 0x477ff000) return sign | 0x7c00;                                /* rounds to inf */
    if (a < 0x38800000) {
        /* half subnormal or zero: scale so the half ulp (2^-24) becomes 1, then round */
        float v = ck_bits_f32(a) * 16777216.0f; /* exact: power-of-two scale */
        uint32_t q = (uint32_t)v;
        float rem = v - (float)q;
        if (rem > 0.5f || (rem == 0.5f && (q & 1))) q++;
        return sign | (uint16_t)q;
    }
    uint32_t r = a + 0xfff + ((a >> 13) & 1); /* round mantissa to 10 bits, ties to even */
    return sign | (uint16_t)((r - 0x38000000) >> 13);
}

static inline float ck_bf2f(uint16_t h) { return ck_bits_f32((uint32_t)h << 16); }

/* ggml's fp32 -> bf16: round to nearest even, nan kept quiet. */
static inline uint16_t ck_f2bf(float f) {
    uint32_t u = ck_f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* Round half away from zero, as roundf; for |x| < 2^23. */
static inline int ck_roundf_int(float x) { return (int)__builtin_roundf(x); }

/* ggml's nearest_int: round half to even (|x| < 2^22). */
static inline int ck_nearest_int(float x) {
    float v = x + 12582912.0f;
    return (int)(ck_f32_bits(v) & 0x007fffff) - 0x00400000;
}

/* Unpacks the 8 6-bit scales and 8 6-bit mins of a Q4_K/Q5_K super-block. */
static inline void ck_kscales(const uint8_t *q, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
        sc[j + 4] = (q[j + 8] & 0xf) | ((q[j] >> 6) << 4);
        mn[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
    }
}

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
/* ck_kscales in SIMD: the 16 bytes [sc0..sc7, m0..m7]. Reads 16 bytes (the 12 scale bytes
 * are followed by quants in every block type that has them). */
__attribute__((target("avx2"))) static inline __m128i ck_kscales_sse(const uint8_t *q) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)q);                      /* u0 u1 u2 - */
    const __m128i lo6 = _mm_and_si128(raw, _mm_set1_epi8(0x3f));                  /* sc0-3, m0-3 */
    const __m128i top = _mm_and_si128(_mm_srli_epi32(raw, 2), _mm_set1_epi8(0x30)); /* bits 6-7 -> 4-5 */
    const __m128i u2 = _mm_shuffle_epi32(raw, 0xaa);
    const __m128i nib = _mm_and_si128(_mm_srlv_epi32(u2, _mm_setr_epi32(0, 4, 0, 0)), _mm_set1_epi8(0x0f));
    return _mm_unpacklo_epi32(lo6, _mm_or_si128(nib, top)); /* sc0-3, sc4-7, m0-3, m4-7 */
}
#endif

/* ---- kernel tables: one per ISA, NULL entries fall back to the next lower ISA ---- */

/* y[m*ldy + r] for r in [r0,r1), m in [0,M); see ck_matmul. */
typedef void (*ck_matmul_fn)(int64_t n, const void *w, size_t ws, int64_t r0, int64_t r1,
                             const void *a, size_t as, int64_t M, float *y, int64_t ldy);
typedef void (*ck_quant_fn)(const float *x, void *y, int64_t n);

typedef struct {
    float (*dot)(const float *, const float *, int64_t);
    void (*axpy)(float, const float *, float *, int64_t);
    float (*sumsq)(const float *, int64_t);
    void (*scale_mul)(const float *, const float *, float, float *, int64_t); /* y = x*s*w (w may be NULL) */
    void (*swiglu)(const float *, const float *, float *, int64_t);
    float (*max)(const float *, int64_t);
    float (*exp_sum)(float *, float, int64_t); /* x = exp(x - m); returns the sum */
    void (*scale)(float *, float, int64_t);
    void (*add)(const float *, const float *, float *, int64_t);
    void (*f16_to_f32)(const uint16_t *, float *, int64_t);
    void (*f32_to_f16)(const float *, uint16_t *, int64_t);
} ck_f32_ops;

typedef struct {
    const char *name;
    ck_matmul_fn matmul[CK_NTYPES];  /* by weight type */
    ck_quant_fn quantize[CK_NTYPES]; /* by type (SIMD only for the activation formats) */
    ck_f32_ops f32;
} ck_table;

/* Per-thread scratch of at least `bytes` (64-byte aligned), reused across calls; NULL if out of memory. */
void *ck_scratch(size_t bytes);

/* The table in use, every entry filled. */
const ck_table *ck_active(void);
/* The table of a CK_ISA_* level, every entry filled (the level's fallbacks included). */
const ck_table *ck_table_at(int level);

extern const ck_matmul_fn ck_matmul_scalar[CK_NTYPES];
extern const ck_quant_fn ck_quant_scalar[CK_NTYPES];
extern const ck_f32_ops ck_f32_scalar;
#if defined(__x86_64__) || defined(_M_X64)
#define CK_X86 1
extern const ck_matmul_fn ck_matmul_avx2[CK_NTYPES], ck_matmul_avx512[CK_NTYPES];
extern const ck_quant_fn ck_quant_avx2[CK_NTYPES];
extern const ck_f32_ops ck_f32_avx2, ck_f32_avx512;
/* Q4_0 x Q8_0 for 2 or more activation rows, one block per int32 lane (gemm_avx512.c). */
void ck_mm_q4_0_g16(int64_t n, const void *w, size_t ws, int64_t r0, int64_t r1, const void *a, size_t as,
                    int64_t M, float *y, int64_t ldy);
#if defined(__linux__)
/* AMX tiles (gemm_amx.c): Linux hands them out on request. */
#define CK_AMX 1
extern const ck_matmul_fn ck_matmul_amx[CK_NTYPES];
/* Asks the kernel for the tile data state for this process: 1 granted. */
int ck_amx_request(void);
#endif
#endif
#if defined(__aarch64__)
#define CK_ARM64 1
extern const ck_matmul_fn ck_matmul_neon[CK_NTYPES];
extern const ck_f32_ops ck_f32_neon;
#endif

#endif
