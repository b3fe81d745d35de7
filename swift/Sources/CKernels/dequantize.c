/* dequantize.c — quantized rows -> F32, with ggml's arithmetic (bit-exact with its
 * dequantize_row_* functions). Used for embeddings and tests, not in hot loops. */
#include "ck_internal.h"

#pragma STDC FP_CONTRACT OFF

static void dq_q4_0(const void *vx, float *y, int64_t n) {
    const blk_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = ck_h2f(x[i].d);
        for (int j = 0; j < QK / 2; j++) {
            y[j] = (float)((x[i].qs[j] & 0xf) - 8) * d;
            y[j + QK / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dq_q4_1(const void *vx, float *y, int64_t n) {
    const blk_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = ck_h2f(x[i].d), m = ck_h2f(x[i].m);
        for (int j = 0; j < QK / 2; j++) {
            y[j] = (float)(x[i].qs[j] & 0xf) * d + m;
            y[j + QK / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

static void dq_q5_0(const void *vx, float *y, int64_t n) {
    const blk_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = ck_h2f(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK / 2; j++) {
            const int h0 = (qh >> j) & 1, h1 = (qh >> (j + QK / 2)) & 1;
            y[j] = (float)(((x[i].qs[j] & 0xf) | h0 << 4) - 16) * d;
            y[j + QK / 2] = (float)(((x[i].qs[j] >> 4) | h1 << 4) - 16) * d;
        }
    }
}

static void dq_q5_1(const void *vx, float *y, int64_t n) {
    const blk_q5_1 *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = ck_h2f(x[i].d), m = ck_h2f(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK / 2; j++) {
            const int h0 = (qh >> j) & 1, h1 = (qh >> (j + QK / 2)) & 1;
            y[j] = (float)((x[i].qs[j] & 0xf) | h0 << 4) * d + m;
            y[j + QK / 2] = (float)((x[i].qs[j] >> 4) | h1 << 4) * d + m;
        }
    }
}

static void dq_q8_0(const void *vx, float *y, int64_t n) {
    const blk_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = ck_h2f(x[i].d);
        for (int j = 0; j < QK; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

static void dq_q8_1(const void *vx, float *y, int64_t n) {
    const blk_q8_1 *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = ck_h2f(x[i].d);
        for (int j = 0; j < QK; j++) y[j] = (float)x[i].qs[j] * d;
    }
}

static void dq_q4_K(const void *vx, float *y, int64_t n) {
    const blk_q4_K *x = vx;
    for (int64_t i = 0; i < n / QKK; i++) {
        const float d = ck_h2f(x[i].d), dmin = ck_h2f(x[i].dmin);
        uint8_t sc[8], mn[8];
        ck_kscales(x[i].scales, sc, mn);
        for (int c = 0; c < 4; c++, y += 64) {
            const uint8_t *q = x[i].qs + 32 * c;
            const float d1 = d * sc[2 * c], m1 = dmin * mn[2 * c];
            const float d2 = d * sc[2 * c + 1], m2 = dmin * mn[2 * c + 1];
            for (int l = 0; l < 32; l++) y[l] = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++) y[l + 32] = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void dq_q5_K(const void *vx, float *y, int64_t n) {
    const blk_q5_K *x = vx;
    for (int64_t i = 0; i < n / QKK; i++) {
        const float d = ck_h2f(x[i].d), dmin = ck_h2f(x[i].dmin);
        uint8_t sc[8], mn[8];
        ck_kscales(x[i].scales, sc, mn);
        for (int c = 0; c < 4; c++, y += 64) {
            const uint8_t *q = x[i].qs + 32 * c, *qh = x[i].qh;
            const float d1 = d * sc[2 * c], m1 = dmin * mn[2 * c];
            const float d2 = d * sc[2 * c + 1], m2 = dmin * mn[2 * c + 1];
            for (int l = 0; l < 32; l++) y[l] = d1 * (float)((q[l] & 0xf) | ((qh[l] >> (2 * c)) & 1) << 4) - m1;
            for (int l = 0; l < 32; l++) y[l + 32] = d2 * (float)((q[l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4) - m2;
        }
    }
}

static void dq_q6_K(const void *vx, float *y, int64_t n) {
    const blk_q6_K *x = vx;
    for (int64_t i = 0; i < n / QKK; i++) {
        const float d = ck_h2f(x[i].d);
        for (int h = 0; h < 2; h++, y += 128) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xf) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0xf) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

static void dq_q2_K(const void *vx, float *y, int64_t n) {
    const blk_q2_K *x = vx;
    for (int64_t i = 0; i < n / QKK; i++) {
        const float d = ck_h2f(x[i].d), dmin = ck_h2f(x[i].dmin);
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = x[i].qs + 32 * h;
            for (int s = 0; s < 4; s++) {
                for (int half = 0; half < 2; half++, y += 16) {
                    const uint8_t sc = x[i].scales[8 * h + 2 * s + half];
                    const float dl = d * (float)(sc & 0xf), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; l++) y[l] = dl * (float)((q[16 * half + l] >> (2 * s)) & 3) - ml;
                }
            }
        }
    }
}

static void dq_q3_K(const void *vx, float *y, int64_t n) {
    const blk_q3_K *x = vx;
    for (int64_t i = 0; i < n / QKK; i++) {
        const float d = ck_h2f(x[i].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *q = x[i].qs + 32 * h;
            for (int s = 0; s < 4; s++) {
                const int bit = 4 * h + s; /* hmask bit of values 128h + 32s .. +31 */
                for (int half = 0; half < 2; half++, y += 16) {
                    const float dl = d * (float)ck_q3k_scale(x[i].scales, 8 * h + 2 * s + half);
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        const int v = ((q[l] >> (2 * s)) & 3) - (((x[i].hmask[l] >> bit) & 1) ? 0 : 4);
                        y[l - 16 * half] = dl * (float)v;
                    }
                }
            }
        }
    }
}

static void dq_iq4_nl(const void *vx, float *y, int64_t n) {
    const blk_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = ck_h2f(x[i].d);
        for (int j = 0; j < QK / 2; j++) {
            y[j] = d * (float)ck_kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[j + QK / 2] = d * (float)ck_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

static void dq_iq4_xs(const void *vx, float *y, int64_t n) {
    const blk_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / QKK; i++) {
        const float d = ck_h2f(x[i].d);
        for (int ib = 0; ib < QKK / 32; ib++, y += 32) {
            const float dl = d * (float)ck_iq4xs_scale(x[i].scales_l, x[i].scales_h, ib);
            const uint8_t *q = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)ck_kvalues_iq4nl[q[j] & 0xf];
                y[j + 16] = dl * (float)ck_kvalues_iq4nl[q[j] >> 4];
            }
        }
    }
}

static void dq_q8_K(const void *vx, float *y, int64_t n) {
    const blk_q8_K *x = vx;
    for (int64_t i = 0; i < n / QKK; i++, y += QKK)
        for (int j = 0; j < QKK; j++) y[j] = x[i].d * (float)x[i].qs[j];
}

static void dq_f32(const void *x, float *y, int64_t n) { memmove(y, x, (size_t)n * sizeof(float)); }
static void dq_f16(const void *x, float *y, int64_t n) { ck_f16_to_f32(x, y, n); }
static void dq_bf16(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = ck_bf2f(x[i]);
}

static void dq_mxfp4(const void *vx, float *y, int64_t n) {
    const blk_mxfp4 *x = vx;
    for (int64_t i = 0; i < n / QK; i++, y += QK) {
        const float d = ck_e8m0_half(x[i].e);
        for (int j = 0; j < QK / 2; j++) {
            y[j] = d * (float)ck_kvalues_mxfp4[x[i].qs[j] & 0xf];
            y[j + QK / 2] = d * (float)ck_kvalues_mxfp4[x[i].qs[j] >> 4];
        }
    }
}

typedef void (*dq_fn)(const void *, float *, int64_t);
static const dq_fn dq_table[CK_NTYPES] = {
    [CK_TYPE_F32] = dq_f32,   [CK_TYPE_F16] = dq_f16,   [CK_TYPE_BF16] = dq_bf16,
    [CK_TYPE_Q4_0] = dq_q4_0, [CK_TYPE_Q4_1] = dq_q4_1, [CK_TYPE_Q5_0] = dq_q5_0,
    [CK_TYPE_Q5_1] = dq_q5_1, [CK_TYPE_Q8_0] = dq_q8_0, [CK_TYPE_Q8_1] = dq_q8_1,
    [CK_TYPE_Q4_K] = dq_q4_K, [CK_TYPE_Q5_K] = dq_q5_K, [CK_TYPE_Q6_K] = dq_q6_K,
    [CK_TYPE_Q8_K] = dq_q8_K,  [CK_TYPE_Q2_K] = dq_q2_K, [CK_TYPE_Q3_K] = dq_q3_K,
    [CK_TYPE_IQ4_NL] = dq_iq4_nl, [CK_TYPE_IQ4_XS] = dq_iq4_xs, [CK_TYPE_MXFP4] = dq_mxfp4,
};

int ck_dequantize_row(int type, const void *x, float *y, int64_t n) {
    if (type < 0 || type >= CK_NTYPES || !dq_table[type]) return 0;
    dq_table[type](x, y, n);
    return 1;
}
