/* dot_neon.c — matmul kernels for arm64 NEON with the dot-product extension (sdot).
 *
 * sdot multiplies signed bytes, so weight quants are made signed (offset removed) and
 * multiplied with the activations directly; 4 int32 lanes per 16 bytes are scaled per block.
 * Tiles as in ck_tiles.h: 2 weight rows x up to 4 activation rows.
 */
#include "ck_internal.h"
#include "ck_tiles.h"

#if CK_ARM64
#include <arm_neon.h>

/* Apple's arm64 targets have dotprod by default; elsewhere enable it per function (the
 * table is only used when the CPU reports it). */
#if defined(__ARM_FEATURE_DOTPROD)
#define TN
#else
#define TN __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#define INL CK_INLINE

static inline float h2f(uint16_t h) {
    __fp16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}


/* 16 bits -> 16 bytes, 0x10 where the bit is set. */
static inline uint8x16_t bit4_from_bits(uint32_t bits) {
    static const uint8_t sel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)bits), vdup_n_u8((uint8_t)(bits >> 8)));
    return vandq_u8(vtstq_u8(v, vld1q_u8(sel)), vdupq_n_u8(0x10));
}

/* ======================= 32-element block types ======================= */

typedef struct {
    int8x16_t lo, hi; /* elements 0-15 and 16-31, signed */
    float d, m;
} wq;


INL wq load_w(int type, const uint8_t *p) {
    wq w;
    w.d = h2f(ck_ld16(p));
    w.m = ck_uses_q8_1(type) ? h2f(ck_ld16(p + 2)) : 0.0f;
    if (type == CK_TYPE_Q8_0) {
        w.lo = vld1q_s8((const int8_t *)p + 2);
        w.hi = vld1q_s8((const int8_t *)p + 18);
        return w;
    }
    const int qs = type == CK_TYPE_Q4_0 ? 2 : type == CK_TYPE_Q4_1 ? 4 : type == CK_TYPE_Q5_0 ? 6 : 8;
    const uint8x16_t q = vld1q_u8(p + qs);
    uint8x16_t lo = vandq_u8(q, vdupq_n_u8(0x0f)), hi = vshrq_n_u8(q, 4);
    if (type == CK_TYPE_Q5_0 || type == CK_TYPE_Q5_1) {
        const uint32_t qh = ck_ld32(p + qs - 4);
        lo = vorrq_u8(lo, bit4_from_bits(qh & 0xffff));
        hi = vorrq_u8(hi, bit4_from_bits(qh >> 16));
    }
    const int off = type == CK_TYPE_Q4_0 ? 8 : type == CK_TYPE_Q5_0 ? 16 : 0;
    w.lo = vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8((int8_t)off));
    w.hi = vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8((int8_t)off));
    return w;
}

TN INL void tile_q32(int type, int R, int C, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                     size_t as, int pf, float *y, int64_t ldy) {
    (void)pf;
    const size_t wb = ck_q32_bytes(type), ab = ck_uses_q8_1(type) ? sizeof(blk_q8_1) : sizeof(blk_q8_0);
    const int qoff = ck_uses_q8_1(type) ? 4 : 2;
    float32x4_t acc[4][4];
    float macc[4][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            acc[i][j] = vdupq_n_f32(0.0f);
            macc[i][j] = 0.0f;
        }
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < R; i++) {
            const wq wo = load_w(type, w + i * ws + b * wb);
            for (int j = 0; j < C; j++) {
                const uint8_t *pa = a + j * as + b * ab;
                const int8x16_t alo = vld1q_s8((const int8_t *)pa + qoff), ahi = vld1q_s8((const int8_t *)pa + qoff + 16);
                const int32x4_t s = vdotq_s32(vdotq_s32(vdupq_n_s32(0), wo.lo, alo), wo.hi, ahi);
                acc[i][j] = vfmaq_n_f32(acc[i][j], vcvtq_f32_s32(s), wo.d * h2f(ck_ld16(pa)));
                if (ck_uses_q8_1(type)) macc[i][j] += wo.m * h2f(ck_ld16(pa + 2));
            }
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) y[j * ldy + i] = vaddvq_f32(acc[i][j]) + macc[i][j];
}

/* ======================= K types ======================= */

TN INL int32x4_t dot32(int8x16_t w0, int8x16_t w1, const int8_t *a) {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(a)), w1, vld1q_s8(a + 16));
}

TN INL void tile_k(int type, int R, int C, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                   size_t as, int pf, float *y, int64_t ldy) {
    (void)pf;
    const size_t wb = ck_k_bytes(type);
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(3);
    float acc[4][4] = {{0}};
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < R; i++) {
            const uint8_t *pw = w + i * ws + b * wb;
            int32x4_t s[4];
            for (int j = 0; j < C; j++) s[j] = vdupq_n_s32(0);
            if (type == CK_TYPE_Q6_K) {
                const blk_q6_K *x = (const blk_q6_K *)pw;
                for (int h = 0; h < 2; h++) {
                    const uint8_t *ql = x->ql + 64 * h, *qhp = x->qh + 32 * h;
                    const uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16), l2 = vld1q_u8(ql + 32), l3 = vld1q_u8(ql + 48);
                    const uint8x16_t h0 = vld1q_u8(qhp), h1 = vld1q_u8(qhp + 16);
                    /* 8 groups of 16 values: low nibbles then high nibbles, qh bits 0-1, 2-3, 4-5, 6-7 */
                    const uint8x16_t q[8] = {
                        vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(h0, m3), 4)),
                        vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(h1, m3), 4)),
                        vorrq_u8(vandq_u8(l2, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h0, 2), m3), 4)),
                        vorrq_u8(vandq_u8(l3, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h1, 2), m3), 4)),
                        vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h0, 4), m3), 4)),
                        vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h1, 4), m3), 4)),
                        vorrq_u8(vshrq_n_u8(l2, 4), vshlq_n_u8(vshrq_n_u8(h0, 6), 4)),
                        vorrq_u8(vshrq_n_u8(l3, 4), vshlq_n_u8(vshrq_n_u8(h1, 6), 4)),
                    };
                    for (int g = 0; g < 8; g++) {
                        const int8x16_t qs = vsubq_s8(vreinterpretq_s8_u8(q[g]), vdupq_n_s8(32));
                        const int sc = x->scales[8 * h + g];
                        for (int j = 0; j < C; j++) {
                            const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                            const int32x4_t p = vdotq_s32(vdupq_n_s32(0), qs, vld1q_s8(ya->qs + 128 * h + 16 * g));
                            s[j] = vmlaq_n_s32(s[j], p, sc);
                        }
                    }
                }
                const float d = h2f(x->d);
                for (int j = 0; j < C; j++) {
                    const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                    acc[i][j] += ya->d * d * (float)vaddvq_s32(s[j]);
                }
                continue;
            }
            /* Q4_K / Q5_K */
            const blk_q4_K *x = (const blk_q4_K *)pw;
            uint8_t sc[8], mn[8];
            ck_kscales(x->scales, sc, mn);
            const uint8_t *qs = type == CK_TYPE_Q5_K ? ((const blk_q5_K *)pw)->qs : x->qs;
            const uint8_t *qh = type == CK_TYPE_Q5_K ? ((const blk_q5_K *)pw)->qh : NULL;
            for (int c = 0; c < 4; c++) {
                const uint8x16_t q0 = vld1q_u8(qs + 32 * c), q1 = vld1q_u8(qs + 32 * c + 16);
                uint8x16_t lo0 = vandq_u8(q0, m4), lo1 = vandq_u8(q1, m4), hi0 = vshrq_n_u8(q0, 4), hi1 = vshrq_n_u8(q1, 4);
                if (qh) {
                    /* bit 2c of qh[l] is the 5th bit of lo[l], bit 2c+1 that of hi[l] */
                    const uint8x16_t b0 = vdupq_n_u8((uint8_t)(1 << (2 * c))), b1 = vdupq_n_u8((uint8_t)(2 << (2 * c)));
                    const uint8x16_t x0 = vld1q_u8(qh), x1 = vld1q_u8(qh + 16), m10 = vdupq_n_u8(0x10);
                    lo0 = vorrq_u8(lo0, vandq_u8(vtstq_u8(x0, b0), m10));
                    lo1 = vorrq_u8(lo1, vandq_u8(vtstq_u8(x1, b0), m10));
                    hi0 = vorrq_u8(hi0, vandq_u8(vtstq_u8(x0, b1), m10));
                    hi1 = vorrq_u8(hi1, vandq_u8(vtstq_u8(x1, b1), m10));
                }
                for (int j = 0; j < C; j++) {
                    const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                    const int8_t *aq = ya->qs + 64 * c;
                    s[j] = vmlaq_n_s32(s[j], dot32(vreinterpretq_s8_u8(lo0), vreinterpretq_s8_u8(lo1), aq), sc[2 * c]);
                    s[j] = vmlaq_n_s32(s[j], dot32(vreinterpretq_s8_u8(hi0), vreinterpretq_s8_u8(hi1), aq + 32), sc[2 * c + 1]);
                }
            }
            const float d = h2f(x->d), dmin = h2f(x->dmin);
            const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mn)));
            for (int j = 0; j < C; j++) {
                const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                /* sum of each sub-block's 32 activations = two adjacent bsums */
                const int16x8_t bs = vpaddq_s16(vld1q_s16(ya->bsums), vld1q_s16(ya->bsums + 8));
                const int32x4_t mp = vmlal_s16(vmull_s16(vget_low_s16(mins), vget_low_s16(bs)), vget_high_s16(mins), vget_high_s16(bs));
                acc[i][j] += ya->d * d * (float)vaddvq_s32(s[j]) - ya->d * dmin * (float)vaddvq_s32(mp);
            }
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) y[j * ldy + i] = acc[i][j];
}

/* ======================= F32 / F16 / BF16 weights, F32 activations ======================= */

static inline float32x4_t load_wf(int type, const uint8_t *p, int64_t k) {
    if (type == CK_TYPE_F32) return vld1q_f32((const float *)p + k);
    const uint16x4_t h = vld1_u16((const uint16_t *)p + k);
    if (type == CK_TYPE_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

static inline float scalar_wf(int type, const uint8_t *p, int64_t k) {
    if (type == CK_TYPE_F32) return ((const float *)p)[k];
    const uint16_t h = ((const uint16_t *)p)[k];
    return type == CK_TYPE_F16 ? h2f(h) : ck_bf2f(h);
}

INL void tile_f(int type, int R, int C, int64_t n, const uint8_t *w, size_t ws, const uint8_t *a, size_t as,
                int pf, float *y, int64_t ldy) {
    (void)pf;
    float32x4_t acc[4][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) acc[i][j] = vdupq_n_f32(0.0f);
    int64_t k = 0;
    for (; k + 4 <= n; k += 4)
        for (int i = 0; i < R; i++) {
            const float32x4_t wv = load_wf(type, w + i * ws, k);
            for (int j = 0; j < C; j++) acc[i][j] = vfmaq_f32(acc[i][j], wv, vld1q_f32((const float *)(a + j * as) + k));
        }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            float s = vaddvq_f32(acc[i][j]);
            for (int64_t t = k; t < n; t++) s += scalar_wf(type, w + i * ws, t) * ((const float *)(a + j * as))[t];
            y[j * ldy + i] = s;
        }
}

/* ======================= drivers (ck_tiles.h) ======================= */

DEFINE_MATMUL(TN, mm_q4_0, tile_q32, CK_TYPE_Q4_0, 2, n / QK)
DEFINE_MATMUL(TN, mm_q4_1, tile_q32, CK_TYPE_Q4_1, 2, n / QK)
DEFINE_MATMUL(TN, mm_q5_0, tile_q32, CK_TYPE_Q5_0, 2, n / QK)
DEFINE_MATMUL(TN, mm_q5_1, tile_q32, CK_TYPE_Q5_1, 2, n / QK)
DEFINE_MATMUL(TN, mm_q8_0, tile_q32, CK_TYPE_Q8_0, 2, n / QK)
DEFINE_MATMUL(TN, mm_q4_K, tile_k, CK_TYPE_Q4_K, 2, n / QKK)
DEFINE_MATMUL(TN, mm_q5_K, tile_k, CK_TYPE_Q5_K, 2, n / QKK)
DEFINE_MATMUL(TN, mm_q6_K, tile_k, CK_TYPE_Q6_K, 2, n / QKK)
DEFINE_MATMUL(TN, mm_f32, tile_f, CK_TYPE_F32, 2, n)
DEFINE_MATMUL(TN, mm_f16, tile_f, CK_TYPE_F16, 2, n)
DEFINE_MATMUL(TN, mm_bf16, tile_f, CK_TYPE_BF16, 2, n)

const ck_matmul_fn ck_matmul_neon[CK_NTYPES] = {
    [CK_TYPE_F32] = mm_f32,   [CK_TYPE_F16] = mm_f16,   [CK_TYPE_BF16] = mm_bf16,
    [CK_TYPE_Q4_0] = mm_q4_0, [CK_TYPE_Q4_1] = mm_q4_1, [CK_TYPE_Q5_0] = mm_q5_0,
    [CK_TYPE_Q5_1] = mm_q5_1, [CK_TYPE_Q8_0] = mm_q8_0, [CK_TYPE_Q4_K] = mm_q4_K,
    [CK_TYPE_Q5_K] = mm_q5_K, [CK_TYPE_Q6_K] = mm_q6_K,
};
#endif
