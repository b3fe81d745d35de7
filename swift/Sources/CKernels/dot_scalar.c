/* dot_scalar.c — portable dot products, block by block with integer inner sums and ggml's
 * float order. The reference the SIMD kernels are checked against, and the fallback. */
#include "ck_internal.h"

static float dot_q4_0(int64_t n, const void *vw, const void *va) {
    const blk_q4_0 *w = vw;
    const blk_q8_0 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int s = 0;
        for (int j = 0; j < QK / 2; j++)
            s += ((w[i].qs[j] & 0xf) - 8) * a[i].qs[j] + ((w[i].qs[j] >> 4) - 8) * a[i].qs[j + QK / 2];
        sum += (float)s * (ck_h2f(w[i].d) * ck_h2f(a[i].d));
    }
    return sum;
}

static float dot_q4_1(int64_t n, const void *vw, const void *va) {
    const blk_q4_1 *w = vw;
    const blk_q8_1 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int s = 0;
        for (int j = 0; j < QK / 2; j++)
            s += (w[i].qs[j] & 0xf) * a[i].qs[j] + (w[i].qs[j] >> 4) * a[i].qs[j + QK / 2];
        sum += (float)s * (ck_h2f(w[i].d) * ck_h2f(a[i].d)) + ck_h2f(w[i].m) * ck_h2f(a[i].s);
    }
    return sum;
}

static float dot_q5_0(int64_t n, const void *vw, const void *va) {
    const blk_q5_0 *w = vw;
    const blk_q8_0 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        uint32_t qh;
        memcpy(&qh, w[i].qh, 4);
        int s = 0;
        for (int j = 0; j < QK / 2; j++) {
            const int q0 = ((w[i].qs[j] & 0xf) | ((qh >> j) & 1) << 4) - 16;
            const int q1 = ((w[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16;
            s += q0 * a[i].qs[j] + q1 * a[i].qs[j + QK / 2];
        }
        sum += (float)s * (ck_h2f(w[i].d) * ck_h2f(a[i].d));
    }
    return sum;
}

static float dot_q5_1(int64_t n, const void *vw, const void *va) {
    const blk_q5_1 *w = vw;
    const blk_q8_1 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        uint32_t qh;
        memcpy(&qh, w[i].qh, 4);
        int s = 0;
        for (int j = 0; j < QK / 2; j++) {
            const int q0 = (w[i].qs[j] & 0xf) | ((qh >> j) & 1) << 4;
            const int q1 = (w[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
            s += q0 * a[i].qs[j] + q1 * a[i].qs[j + QK / 2];
        }
        sum += (float)s * (ck_h2f(w[i].d) * ck_h2f(a[i].d)) + ck_h2f(w[i].m) * ck_h2f(a[i].s);
    }
    return sum;
}

static float dot_q8_0(int64_t n, const void *vw, const void *va) {
    const blk_q8_0 *w = vw;
    const blk_q8_0 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int s = 0;
        for (int j = 0; j < QK; j++) s += w[i].qs[j] * a[i].qs[j];
        sum += (float)s * (ck_h2f(w[i].d) * ck_h2f(a[i].d));
    }
    return sum;
}

static float dot_q4_K(int64_t n, const void *vw, const void *va) {
    const blk_q4_K *w = vw;
    const blk_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        uint8_t sc[8], mn[8];
        ck_kscales(w[i].scales, sc, mn);
        int isum = 0, msum = 0;
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = w[i].qs + 32 * c;
            const int8_t *y = a[i].qs + 64 * c;
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (q[l] & 0xf) * y[l];
                s1 += (q[l] >> 4) * y[l + 32];
            }
            isum += s0 * sc[2 * c] + s1 * sc[2 * c + 1];
        }
        for (int j = 0; j < 8; j++) msum += mn[j] * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
        sum += a[i].d * ck_h2f(w[i].d) * (float)isum - a[i].d * ck_h2f(w[i].dmin) * (float)msum;
    }
    return sum;
}

static float dot_q5_K(int64_t n, const void *vw, const void *va) {
    const blk_q5_K *w = vw;
    const blk_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        uint8_t sc[8], mn[8];
        ck_kscales(w[i].scales, sc, mn);
        int isum = 0, msum = 0;
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = w[i].qs + 32 * c, *qh = w[i].qh;
            const int8_t *y = a[i].qs + 64 * c;
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += ((q[l] & 0xf) | ((qh[l] >> (2 * c)) & 1) << 4) * y[l];
                s1 += ((q[l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4) * y[l + 32];
            }
            isum += s0 * sc[2 * c] + s1 * sc[2 * c + 1];
        }
        for (int j = 0; j < 8; j++) msum += mn[j] * (a[i].bsums[2 * j] + a[i].bsums[2 * j + 1]);
        sum += a[i].d * ck_h2f(w[i].d) * (float)isum - a[i].d * ck_h2f(w[i].dmin) * (float)msum;
    }
    return sum;
}

static float dot_q6_K(int64_t n, const void *vw, const void *va) {
    const blk_q6_K *w = vw;
    const blk_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        int isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w[i].ql + 64 * h, *qh = w[i].qh + 32 * h;
            const int8_t *y = a[i].qs + 128 * h, *sc = w[i].scales + 8 * h;
            int s[8] = {0}; /* one per group of 16 */
            for (int l = 0; l < 32; l++) {
                const int g = l / 16;
                s[g] += (((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32) * y[l];
                s[g + 2] += (((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32) * y[l + 32];
                s[g + 4] += (((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32) * y[l + 64];
                s[g + 6] += (((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32) * y[l + 96];
            }
            for (int g = 0; g < 8; g++) isum += s[g] * sc[g];
        }
        sum += a[i].d * ck_h2f(w[i].d) * (float)isum;
    }
    return sum;
}

/* Q2_K: the integer sums of each sub-block of 16 times its 4-bit scale, and the mins against
 * the activations' group sums; then ggml's dall*isum - dmin*summs per super-block. */
static float dot_q2_K(int64_t n, const void *vw, const void *va) {
    const blk_q2_K *w = vw;
    const blk_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        int isum = 0, msum = 0;
        for (int j = 0; j < 16; j++) msum += a[i].bsums[j] * (w[i].scales[j] >> 4);
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = w[i].qs + 32 * h;
            for (int s = 0; s < 4; s++) {
                const int8_t *y = a[i].qs + 128 * h + 32 * s;
                int s0 = 0, s1 = 0;
                for (int l = 0; l < 16; l++) {
                    s0 += ((q[l] >> (2 * s)) & 3) * y[l];
                    s1 += ((q[l + 16] >> (2 * s)) & 3) * y[l + 16];
                }
                isum += s0 * (w[i].scales[8 * h + 2 * s] & 0xf) + s1 * (w[i].scales[8 * h + 2 * s + 1] & 0xf);
            }
        }
        const float dall = a[i].d * ck_h2f(w[i].d), dmin = a[i].d * ck_h2f(w[i].dmin);
        sum += dall * (float)isum - dmin * (float)msum;
    }
    return sum;
}

static float dot_q3_K(int64_t n, const void *vw, const void *va) {
    const blk_q3_K *w = vw;
    const blk_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        int isum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = w[i].qs + 32 * h;
            for (int s = 0; s < 4; s++) {
                const int8_t *y = a[i].qs + 128 * h + 32 * s;
                const int bit = 4 * h + s;
                int s0 = 0, s1 = 0;
                for (int l = 0; l < 16; l++) {
                    const int q0 = ((q[l] >> (2 * s)) & 3) - (((w[i].hmask[l] >> bit) & 1) ? 0 : 4);
                    const int q1 = ((q[l + 16] >> (2 * s)) & 3) - (((w[i].hmask[l + 16] >> bit) & 1) ? 0 : 4);
                    s0 += q0 * y[l];
                    s1 += q1 * y[l + 16];
                }
                isum += s0 * ck_q3k_scale(w[i].scales, 8 * h + 2 * s) + s1 * ck_q3k_scale(w[i].scales, 8 * h + 2 * s + 1);
            }
        }
        sum += ck_h2f(w[i].d) * a[i].d * (float)isum;
    }
    return sum;
}

static float dot_iq4_nl(int64_t n, const void *vw, const void *va) {
    const blk_iq4_nl *w = vw;
    const blk_q8_0 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int s = 0;
        for (int j = 0; j < QK / 2; j++)
            s += ck_kvalues_iq4nl[w[i].qs[j] & 0xf] * a[i].qs[j] + ck_kvalues_iq4nl[w[i].qs[j] >> 4] * a[i].qs[j + QK / 2];
        sum += (ck_h2f(a[i].d) * ck_h2f(w[i].d)) * (float)s;
    }
    return sum;
}

static float dot_iq4_xs(int64_t n, const void *vw, const void *va) {
    const blk_iq4_xs *w = vw;
    const blk_q8_K *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QKK; i++) {
        int isum = 0;
        for (int ib = 0; ib < QKK / 32; ib++) {
            const uint8_t *q = w[i].qs + 16 * ib;
            const int8_t *y = a[i].qs + 32 * ib;
            int s = 0;
            for (int j = 0; j < 16; j++) s += ck_kvalues_iq4nl[q[j] & 0xf] * y[j] + ck_kvalues_iq4nl[q[j] >> 4] * y[j + 16];
            isum += s * ck_iq4xs_scale(w[i].scales_l, w[i].scales_h, ib);
        }
        sum += ck_h2f(w[i].d) * a[i].d * (float)isum;
    }
    return sum;
}

static float dot_f32(int64_t n, const void *vw, const void *va) {
    const float *w = vw, *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += w[i] * a[i];
    return sum;
}

static float dot_f16(int64_t n, const void *vw, const void *va) {
    const uint16_t *w = vw;
    const float *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += ck_h2f(w[i]) * a[i];
    return sum;
}

static float dot_bf16(int64_t n, const void *vw, const void *va) {
    const uint16_t *w = vw;
    const float *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += ck_bf2f(w[i]) * a[i];
    return sum;
}

#define SCALAR_MATMUL(name)                                                                              \
    static void mm_##name(int64_t n, const void *w, size_t ws, int64_t r0, int64_t r1, const void *a,   \
                          size_t as, int64_t M, float *y, int64_t ldy) {                                \
        for (int64_t m = 0; m < M; m++)                                                                  \
            for (int64_t r = r0; r < r1; r++)                                                            \
                y[m * ldy + r] = dot_##name(n, (const char *)w + r * ws, (const char *)a + m * as);      \
    }

/* ggml's vec_dot_mxfp4_q8_0: integer sums per block, one float product d_a * d_w each. */
static float dot_mxfp4(int64_t n, const void *vw, const void *va) {
    const blk_mxfp4 *w = vw;
    const blk_q8_0 *a = va;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK; i++) {
        int s = 0;
        for (int j = 0; j < QK / 2; j++)
            s += ck_kvalues_mxfp4[w[i].qs[j] & 0xf] * a[i].qs[j] + ck_kvalues_mxfp4[w[i].qs[j] >> 4] * a[i].qs[j + QK / 2];
        sum += (ck_h2f(a[i].d) * ck_e8m0_half(w[i].e)) * (float)s;
    }
    return sum;
}

SCALAR_MATMUL(q4_0)
SCALAR_MATMUL(q4_1)
SCALAR_MATMUL(q5_0)
SCALAR_MATMUL(q5_1)
SCALAR_MATMUL(q8_0)
SCALAR_MATMUL(q4_K)
SCALAR_MATMUL(q5_K)
SCALAR_MATMUL(q6_K)
SCALAR_MATMUL(q2_K)
SCALAR_MATMUL(q3_K)
SCALAR_MATMUL(iq4_nl)
SCALAR_MATMUL(iq4_xs)
SCALAR_MATMUL(mxfp4)
SCALAR_MATMUL(f32)
SCALAR_MATMUL(f16)
SCALAR_MATMUL(bf16)

const ck_matmul_fn ck_matmul_scalar[CK_NTYPES] = {
    [CK_TYPE_F32] = mm_f32,   [CK_TYPE_F16] = mm_f16,   [CK_TYPE_BF16] = mm_bf16,
    [CK_TYPE_Q4_0] = mm_q4_0, [CK_TYPE_Q4_1] = mm_q4_1, [CK_TYPE_Q5_0] = mm_q5_0,
    [CK_TYPE_Q5_1] = mm_q5_1, [CK_TYPE_Q8_0] = mm_q8_0, [CK_TYPE_Q4_K] = mm_q4_K,
    [CK_TYPE_Q5_K] = mm_q5_K, [CK_TYPE_Q6_K] = mm_q6_K, [CK_TYPE_Q2_K] = mm_q2_K,
    [CK_TYPE_Q3_K] = mm_q3_K, [CK_TYPE_IQ4_NL] = mm_iq4_nl, [CK_TYPE_IQ4_XS] = mm_iq4_xs,
    [CK_TYPE_MXFP4] = mm_mxfp4,
};
