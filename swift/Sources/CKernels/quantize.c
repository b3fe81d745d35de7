/* quantize.c — F32 -> quantized rows.
 *
 * Activation formats (Q8_0, Q8_1, Q8_K) have an AVX2 path that produces the same bytes as
 * the scalar one; weight quantizers are scalar and round exactly like ggml's reference code
 * (quantize_row_*_ref), so files written with them match llama.cpp's.
 */
#include "ck_internal.h"
#include <float.h>
#include <math.h>

/* Exact reproduction needs a*b+c evaluated as two roundings, never fused. */
#pragma STDC FP_CONTRACT OFF

/* ---------------- activation formats (scalar reference) ---------------- */

void ck_quantize_q8_0_ref(const float *x, void *vy, int64_t n) {
    blk_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ck_f2h(d);
        for (int j = 0; j < QK; j++) y[i].qs[j] = (int8_t)ck_roundf_int(x[j] * id);
    }
}

void ck_quantize_q8_1_ref(const float *x, void *vy, int64_t n) {
    blk_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK; j++) {
            y[i].qs[j] = (int8_t)ck_roundf_int(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = ck_f2h(d);
        y[i].s = ck_f2h((float)sum * d);
    }
}

void ck_quantize_q8_K_ref(const float *x, void *vy, int64_t n) {
    blk_q8_K *y = vy;
    for (int64_t i = 0; i < n / QKK; i++, x += QKK) {
        /* the scale's sign follows the first element of largest magnitude */
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QKK; j++) {
            if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QKK; j++) {
            const int v = ck_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < QKK / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += y[i].qs[g * 16 + j];
            y[i].bsums[g] = (int16_t)s;
        }
        y[i].d = 1.0f / iscale;
    }
}

/* ---------------- weight formats (ggml reference rounding) ---------------- */

static void quantize_q4_0(const float *x, void *vy, int64_t n) {
    blk_q4_0 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ck_f2h(d);
        for (int j = 0; j < QK / 2; j++) {
            const int q0 = (int8_t)(x[j] * id + 8.5f), q1 = (int8_t)(x[j + QK / 2] * id + 8.5f);
            y[i].qs[j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
    }
}

static void quantize_q4_1(const float *x, void *vy, int64_t n) {
    blk_q4_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ck_f2h(d);
        y[i].m = ck_f2h(min);
        for (int j = 0; j < QK / 2; j++) {
            const int q0 = (int8_t)((x[j] - min) * id + 0.5f);
            const int q1 = (int8_t)((x[j + QK / 2] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 < 15 ? q0 : 15) | (q1 < 15 ? q1 : 15) << 4);
        }
    }
}

static void quantize_q5_0(const float *x, void *vy, int64_t n) {
    blk_q5_0 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ck_f2h(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; j++) {
            int q0 = (int8_t)(x[j] * id + 16.5f), q1 = (int8_t)(x[j + QK / 2] * id + 16.5f);
            q0 = q0 < 31 ? q0 : 31;
            q1 = q1 < 31 ? q1 : 31;
            y[i].qs[j] = (uint8_t)((q0 & 0xf) | (q1 & 0xf) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + QK / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

static void quantize_q5_1(const float *x, void *vy, int64_t n) {
    blk_q5_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = ck_f2h(d);
        y[i].m = ck_f2h(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK / 2; j++) {
            const uint8_t q0 = (uint8_t)((x[j] - min) * id + 0.5f);
            const uint8_t q1 = (uint8_t)((x[j + QK / 2] - min) * id + 0.5f);
            y[i].qs[j] = (uint8_t)((q0 & 0xf) | (q1 & 0xf) << 4);
            qh |= (uint32_t)((q0 >> 4) & 1) << j | (uint32_t)((q1 >> 4) & 1) << (j + QK / 2);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

static void quantize_f16(const float *x, void *y, int64_t n) { ck_f32_to_f16(x, y, n); }

static void quantize_bf16(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = ck_f2bf(x[i]);
}

static void quantize_f32(const float *x, void *y, int64_t n) { memmove(y, x, (size_t)n * sizeof(float)); }

/* ---- K types: a simple fit (min/max per sub-block, no search), then ggml's packing ---- */

/* 6-bit scales and mins of 8 sub-blocks into the 12-byte layout read by ck_kscales. */
static void pack_kscales(uint8_t *q, const uint8_t ls[8], const uint8_t lm[8]) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)(ls[j] | (ls[j + 4] >> 4) << 6);
        q[j + 4] = (uint8_t)(lm[j] | (lm[j + 4] >> 4) << 6);
        q[j + 8] = (uint8_t)((ls[j + 4] & 0xf) | (lm[j + 4] & 0xf) << 4);
    }
}

/* Fits d, dmin and 8 scale/min pairs for nmax levels (15 or 31); writes levels to L. */
static void fit_kquant(const float *x, int nmax, uint16_t *d16, uint16_t *dmin16, uint8_t *scales, uint8_t *L) {
    float sc[8], mn[8], max_sc = 0.0f, max_mn = 0.0f;
    for (int j = 0; j < 8; j++) {
        float lo = x[32 * j], hi = x[32 * j];
        for (int l = 1; l < 32; l++) {
            lo = fminf(lo, x[32 * j + l]);
            hi = fmaxf(hi, x[32 * j + l]);
        }
        if (lo > 0.0f) lo = 0.0f; /* mins are stored as positive offsets below zero */
        sc[j] = (hi - lo) / (float)nmax;
        mn[j] = -lo;
        max_sc = fmaxf(max_sc, sc[j]);
        max_mn = fmaxf(max_mn, mn[j]);
    }
    const float inv_sc = max_sc > 0.0f ? 63.0f / max_sc : 0.0f;
    const float inv_mn = max_mn > 0.0f ? 63.0f / max_mn : 0.0f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        const int a = ck_nearest_int(inv_sc * sc[j]), b = ck_nearest_int(inv_mn * mn[j]);
        ls[j] = (uint8_t)(a < 63 ? a : 63);
        lm[j] = (uint8_t)(b < 63 ? b : 63);
    }
    pack_kscales(scales, ls, lm);
    *d16 = ck_f2h(max_sc / 63.0f);
    *dmin16 = ck_f2h(max_mn / 63.0f);
    const float d = ck_h2f(*d16), dmin = ck_h2f(*dmin16);
    for (int j = 0; j < 8; j++) {
        const float ds = d * ls[j], dm = dmin * lm[j];
        for (int l = 0; l < 32; l++) {
            int q = ds != 0.0f ? ck_nearest_int((x[32 * j + l] + dm) / ds) : 0;
            L[32 * j + l] = (uint8_t)(q < 0 ? 0 : q > nmax ? nmax : q);
        }
    }
}

static void quantize_q4_K(const float *x, void *vy, int64_t n) {
    blk_q4_K *y = vy;
    uint8_t L[QKK];
    for (int64_t i = 0; i < n / QKK; i++, x += QKK) {
        fit_kquant(x, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
    }
}

static void quantize_q5_K(const float *x, void *vy, int64_t n) {
    blk_q5_K *y = vy;
    uint8_t L[QKK];
    for (int64_t i = 0; i < n / QKK; i++, x += QKK) {
        fit_kquant(x, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((lo & 0xf) | (hi & 0xf) << 4);
                y[i].qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
            }
        }
    }
}

static void quantize_q6_K(const float *x, void *vy, int64_t n) {
    blk_q6_K *y = vy;
    int8_t L[QKK];
    for (int64_t i = 0; i < n / QKK; i++, x += QKK) {
        float sc[16], max_sc = 0.0f, amax_sc = 0.0f;
        for (int g = 0; g < 16; g++) {
            float amax = 0.0f, max = 0.0f;
            for (int l = 0; l < 16; l++) {
                if (fabsf(x[16 * g + l]) > amax) { amax = fabsf(x[16 * g + l]); max = x[16 * g + l]; }
            }
            sc[g] = max / -32.0f;
            if (fabsf(sc[g]) > amax_sc) { amax_sc = fabsf(sc[g]); max_sc = sc[g]; }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (amax_sc == 0.0f) continue;
        const float iscale = -128.0f / max_sc;
        y[i].d = ck_f2h(1.0f / iscale);
        const float d = ck_h2f(y[i].d);
        for (int g = 0; g < 16; g++) {
            const int s = ck_nearest_int(iscale * sc[g]);
            y[i].scales[g] = (int8_t)(s < 127 ? s : 127);
            const float ds = d * y[i].scales[g];
            for (int l = 0; l < 16; l++) {
                int q = ds != 0.0f ? ck_nearest_int(x[16 * g + l] / ds) : 0;
                L[16 * g + l] = (int8_t)((q < -32 ? -32 : q > 31 ? 31 : q) + 32);
            }
        }
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0xf) | (Lh[l + 64] & 0xf) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xf) | (Lh[l + 96] & 0xf) << 4);
                qh[l] = (uint8_t)((Lh[l] >> 4) | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 | (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

/* 2-bit quants L (0..3) of 256 values into ggml's qs layout (Q2_K, Q3_K): value 128h + 32s + l
 * is bits 2s..2s+1 of qs[32h + l]. */
static void pack_2bit(uint8_t *qs, const uint8_t *L) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *Lh = L + 128 * h;
            qs[32 * h + l] = (uint8_t)(Lh[l] | Lh[l + 32] << 2 | Lh[l + 64] << 4 | Lh[l + 96] << 6);
        }
}

/* Q2_K: min/max per sub-block of 16 (3 steps), 4-bit scales and mins under d and dmin. */
static void quantize_q2_K(const float *x, void *vy, int64_t n) {
    blk_q2_K *y = vy;
    uint8_t L[QKK];
    for (int64_t i = 0; i < n / QKK; i++, x += QKK) {
        float sc[16], mn[16], max_sc = 0.0f, max_mn = 0.0f;
        for (int j = 0; j < 16; j++) {
            float lo = x[16 * j], hi = x[16 * j];
            for (int l = 1; l < 16; l++) {
                lo = fminf(lo, x[16 * j + l]);
                hi = fmaxf(hi, x[16 * j + l]);
            }
            if (lo > 0.0f) lo = 0.0f;
            sc[j] = (hi - lo) / 3.0f;
            mn[j] = -lo;
            max_sc = fmaxf(max_sc, sc[j]);
            max_mn = fmaxf(max_mn, mn[j]);
        }
        const float inv_sc = max_sc > 0.0f ? 15.0f / max_sc : 0.0f;
        const float inv_mn = max_mn > 0.0f ? 15.0f / max_mn : 0.0f;
        for (int j = 0; j < 16; j++) {
            const int a = ck_nearest_int(inv_sc * sc[j]), b = ck_nearest_int(inv_mn * mn[j]);
            y[i].scales[j] = (uint8_t)((a < 15 ? a : 15) | (b < 15 ? b : 15) << 4);
        }
        y[i].d = ck_f2h(max_sc / 15.0f);
        y[i].dmin = ck_f2h(max_mn / 15.0f);
        const float d = ck_h2f(y[i].d), dmin = ck_h2f(y[i].dmin);
        for (int j = 0; j < 16; j++) {
            const float ds = d * (float)(y[i].scales[j] & 0xf), dm = dmin * (float)(y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) {
                const int q = ds != 0.0f ? ck_nearest_int((x[16 * j + l] + dm) / ds) : 0;
                L[16 * j + l] = (uint8_t)(q < 0 ? 0 : q > 3 ? 3 : q);
            }
        }
        pack_2bit(y[i].qs, L);
    }
}

/* Q3_K: per sub-block of 16 the value of largest magnitude becomes -4 steps (as Q6_K's fit),
 * scales to 6 bits under d; then ggml's packing of scales, high bits and low bits. */
static void quantize_q3_K(const float *x, void *vy, int64_t n) {
    blk_q3_K *y = vy;
    uint8_t L[QKK];
    for (int64_t i = 0; i < n / QKK; i++, x += QKK) {
        float sc[16], max_sc = 0.0f, amax_sc = 0.0f;
        for (int j = 0; j < 16; j++) {
            float amax = 0.0f, max = 0.0f;
            for (int l = 0; l < 16; l++) {
                if (fabsf(x[16 * j + l]) > amax) { amax = fabsf(x[16 * j + l]); max = x[16 * j + l]; }
            }
            sc[j] = max / -4.0f;
            if (fabsf(sc[j]) > amax_sc) { amax_sc = fabsf(sc[j]); max_sc = sc[j]; }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (amax_sc == 0.0f) continue; /* d = 0 */
        const float iscale = -32.0f / max_sc;
        for (int j = 0; j < 16; j++) {
            int l = ck_nearest_int(iscale * sc[j]);
            l = (l < -32 ? -32 : l > 31 ? 31 : l) + 32;
            if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xf);
            else y[i].scales[j - 8] |= (uint8_t)((l & 0xf) << 4);
            y[i].scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        }
        y[i].d = ck_f2h(1.0f / iscale);
        const float d = ck_h2f(y[i].d);
        for (int j = 0; j < 16; j++) {
            const float ds = d * (float)ck_q3k_scale(y[i].scales, j);
            for (int l = 0; l < 16; l++) {
                const int q = ds != 0.0f ? ck_nearest_int(x[16 * j + l] / ds) : 0;
                L[16 * j + l] = (uint8_t)((q < -4 ? -4 : q > 3 ? 3 : q) + 4);
            }
        }
        for (int v = 0; v < QKK; v++) {
            if (L[v] > 3) {
                y[i].hmask[v % 32] |= (uint8_t)(1 << (v / 32));
                L[v] -= 4;
            }
        }
        pack_2bit(y[i].qs, L);
    }
}

/* Index of the IQ4_NL level nearest v (ties to the lower level). */
static int iq4_index(float v) {
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        if (v + v > (float)(ck_kvalues_iq4nl[j - 1] + ck_kvalues_iq4nl[j])) idx = j;
    }
    return idx;
}

/* 32 values to nibbles of the levels nearest x/d (Q4_0's order). */
static void iq4_nibbles(const float *x, float d, uint8_t *qs) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(iq4_index(x[j] * id) | iq4_index(x[j + 16] * id) << 4);
}

/* The value of largest magnitude of 32 (its sign kept). */
static float signed_amax32(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) { amax = fabsf(x[j]); max = x[j]; }
    }
    return max;
}

/* IQ4_NL: the value of largest magnitude becomes the level -127. */
static void quantize_iq4_nl(const float *x, void *vy, int64_t n) {
    blk_iq4_nl *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        y[i].d = ck_f2h(signed_amax32(x) / -127.0f);
        iq4_nibbles(x, ck_h2f(y[i].d), y[i].qs);
    }
}

/* MXFP4 as ggml's quantize_row_mxfp4_ref: e = floor(log2 amax) - 2 + 127 (the largest level,
 * 6 = 12/2, then covers amax), each value the nearest level (ties to the lower index). */
static void quantize_mxfp4(const float *x, void *vy, int64_t n) {
    blk_mxfp4 *y = vy;
    for (int64_t i = 0; i < n / QK; i++, x += QK) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const uint8_t e = amax > 0.0f ? (uint8_t)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = ck_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < QK / 2; j++) {
            uint8_t q[2];
            for (int h = 0; h < 2; h++) {
                const float v = x[j + h * QK / 2];
                int best = 0;
                float err = fabsf(ck_kvalues_mxfp4[0] * d - v);
                for (int l = 1; l < 16; l++) {
                    const float el = fabsf(ck_kvalues_mxfp4[l] * d - v);
                    if (el < err) best = l, err = el;
                }
                q[h] = (uint8_t)best;
            }
            y[i].qs[j] = q[0] | (uint8_t)(q[1] << 4);
        }
    }
}

/* IQ4_XS: IQ4_NL's fit per sub-block of 32, its scale rounded to 6 bits under d. */
static void quantize_iq4_xs(const float *x, void *vy, int64_t n) {
    blk_iq4_xs *y = vy;
    for (int64_t i = 0; i < n / QKK; i++, x += QKK) {
        float sc[8], max_sc = 0.0f, amax_sc = 0.0f;
        for (int ib = 0; ib < 8; ib++) {
            sc[ib] = signed_amax32(x + 32 * ib) / -127.0f;
            if (fabsf(sc[ib]) > amax_sc) { amax_sc = fabsf(sc[ib]); max_sc = sc[ib]; }
        }
        y[i].d = ck_f2h(max_sc / -32.0f);
        const float d = ck_h2f(y[i].d), id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t sh = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int ib = 0; ib < 8; ib++) {
            int l = ck_nearest_int(id * sc[ib]);
            l = (l < -32 ? -32 : l > 31 ? 31 : l) + 32;
            y[i].scales_l[ib / 2] |= (uint8_t)((l & 0xf) << (4 * (ib % 2)));
            sh |= (uint16_t)((l >> 4) << (2 * ib));
        }
        y[i].scales_h = sh;
        for (int ib = 0; ib < 8; ib++)
            iq4_nibbles(x + 32 * ib, d * (float)ck_iq4xs_scale(y[i].scales_l, sh, ib), y[i].qs + 16 * ib);
    }
}

const ck_quant_fn ck_quant_scalar[CK_NTYPES] = {
    [CK_TYPE_F32] = quantize_f32,
    [CK_TYPE_F16] = quantize_f16,
    [CK_TYPE_BF16] = quantize_bf16,
    [CK_TYPE_Q4_0] = quantize_q4_0,
    [CK_TYPE_Q4_1] = quantize_q4_1,
    [CK_TYPE_Q5_0] = quantize_q5_0,
    [CK_TYPE_Q5_1] = quantize_q5_1,
    [CK_TYPE_Q8_0] = ck_quantize_q8_0_ref,
    [CK_TYPE_Q8_1] = ck_quantize_q8_1_ref,
    [CK_TYPE_Q4_K] = quantize_q4_K,
    [CK_TYPE_Q5_K] = quantize_q5_K,
    [CK_TYPE_Q6_K] = quantize_q6_K,
    [CK_TYPE_Q8_K] = ck_quantize_q8_K_ref,
    [CK_TYPE_Q2_K] = quantize_q2_K,
    [CK_TYPE_Q3_K] = quantize_q3_K,
    [CK_TYPE_IQ4_NL] = quantize_iq4_nl,
    [CK_TYPE_IQ4_XS] = quantize_iq4_xs,
    [CK_TYPE_MXFP4] = quantize_mxfp4,
};

/* ---------------- AVX2 activation quantizers (same bytes as the scalar ones) ---------------- */
#if CK_X86
#include <immintrin.h>

CK_TARGET_AVX2 static inline float hmax256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

CK_TARGET_AVX2 static inline int hsum256_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* roundf(v): truncate, then step away from zero when the dropped part is >= 0.5 (exact). */
CK_TARGET_AVX2 static inline __m256i round_away(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
    const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
    const __m256 step = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                                      _mm256_or_ps(sign, _mm256_set1_ps(1.0f)));
    return _mm256_cvttps_epi32(_mm256_add_ps(t, step));
}

/* Packs 4x8 int32 (each in [-128,127]) into 32 int8 in order. */
CK_TARGET_AVX2 static inline __m256i pack4(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    const __m256i q = _mm256_packs_epi16(ab, cd);
    /* the packs interleave 128-bit lanes: restore element order */
    return _mm256_permutevar8x32_epi32(q, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

CK_TARGET_AVX2 static __m256i q8_block(const float *x, float *d_out, int *sum_out) {
    const __m256 sm = _mm256_set1_ps(-0.0f);
    __m256 v[4], m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sm, v[k]));
    }
    const float amax = hmax256(m);
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = round_away(_mm256_mul_ps(v[k], id));
    if (sum_out)
        *sum_out = hsum256_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    *d_out = d;
    return pack4(q[0], q[1], q[2], q[3]);
}

CK_TARGET_AVX2 static void quantize_q8_0_avx2(const float *x, void *vy, int64_t n) {
    blk_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK; i++) {
        float d;
        const __m256i q = q8_block(x + i * QK, &d, NULL);
        y[i].d = ck_f2h(d);
        _mm256_storeu_si256((__m256i *)y[i].qs, q);
    }
}

CK_TARGET_AVX2 static void quantize_q8_1_avx2(const float *x, void *vy, int64_t n) {
    blk_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK; i++) {
        float d;
        int sum;
        const __m256i q = q8_block(x + i * QK, &d, &sum);
        y[i].d = ck_f2h(d);
        y[i].s = ck_f2h((float)sum * d);
        _mm256_storeu_si256((__m256i *)y[i].qs, q);
    }
}

CK_TARGET_AVX2 static void quantize_q8_K_avx2(const float *x, void *vy, int64_t n) {
    blk_q8_K *y = vy;
    const __m256 sm = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QKK; i++, x += QKK) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < QKK; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sm, _mm256_loadu_ps(x + j)));
        const float amax = hmax256(m);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = 0;
        while (fabsf(x[first]) != amax) first++;
        const float iscale = -127.0f / x[first];
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i hi = _mm256_set1_epi32(127);
        for (int g = 0; g < QKK / 32; g++) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * k), is);
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_round_ps(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)), hi);
            }
            y[i].bsums[2 * g] = (int16_t)hsum256_epi32(_mm256_add_epi32(q[0], q[1]));
            y[i].bsums[2 * g + 1] = (int16_t)hsum256_epi32(_mm256_add_epi32(q[2], q[3]));
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * g), pack4(q[0], q[1], q[2], q[3]));
        }
        y[i].d = 1.0f / iscale;
    }
}

const ck_quant_fn ck_quant_avx2[CK_NTYPES] = {
    [CK_TYPE_Q8_0] = quantize_q8_0_avx2,
    [CK_TYPE_Q8_1] = quantize_q8_1_avx2,
    [CK_TYPE_Q8_K] = quantize_q8_K_avx2,
};
#endif
