/* f32_ops.c — small f32 vector helpers (dot, axpy, norms, activations, softmax, f16 conversion)
 * for each ISA. Reductions that feed a normalization accumulate in double, like ggml. */
#include "ck_internal.h"
#include <math.h>

/* ---------------- scalar ---------------- */

static float dot_scalar(const float *x, const float *y, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * y[i];
    return (float)s;
}

static void axpy_scalar(float a, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static float sumsq_scalar(const float *x, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)(x[i] * x[i]);
    return (float)s;
}

static void scale_mul_scalar(const float *x, const float *w, float s, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = w ? (x[i] * s) * w[i] : x[i] * s;
}

static void swiglu_scalar(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static float max_scalar(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

static float exp_sum_scalar(float *x, float m, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    return (float)s;
}

static void scale_scalar(float *x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

static void add_scalar(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static void f16_to_f32_scalar(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ck_h2f(x[i]);
}

static void f32_to_f16_scalar(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = ck_f2h(x[i]);
}

const ck_f32_ops ck_f32_scalar = {
    .dot = dot_scalar, .axpy = axpy_scalar, .sumsq = sumsq_scalar, .scale_mul = scale_mul_scalar,
    .swiglu = swiglu_scalar, .max = max_scalar, .exp_sum = exp_sum_scalar, .scale = scale_scalar,
    .add = add_scalar, .f16_to_f32 = f16_to_f32_scalar, .f32_to_f16 = f32_to_f16_scalar,
};

/* Vector exp: e^x = 2^k * e^r with r = x - k*ln2 in [-ln2/2, ln2/2] and a degree-6
 * polynomial for e^r (Cephes' coefficients; about 1 ulp). Below -87.3 it returns 0. */
#define EXP_HI 88.3762626647949f
#define EXP_LO (-87.3365478515625f)
#define EXP_LOG2E 1.44269504088896341f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO (-2.12194440e-4f)
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

#if CK_X86
#include <immintrin.h>

/* ---------------- AVX2 ---------------- */

CK_TARGET_AVX2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

CK_TARGET_AVX2 static inline double hsum4d(__m256d v) {
    __m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

CK_TARGET_AVX2 static inline __m256 exp8(__m256 x) {
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LO)), _mm256_set1_ps(EXP_HI));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(EXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^k in two halves so k = 128 (x near EXP_HI) does not overflow the exponent field */
    const __m256i ki = _mm256_cvtps_epi32(k);
    const __m256i k1 = _mm256_srai_epi32(ki, 1), k2 = _mm256_sub_epi32(ki, k1);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, _mm256_set1_epi32(127)), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, _mm256_set1_epi32(127)), 23));
    return _mm256_andnot_ps(under, _mm256_mul_ps(_mm256_mul_ps(p, s1), s2));
}

CK_TARGET_AVX2 static float dot_avx2(const float *x, const float *y, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

CK_TARGET_AVX2 static void axpy_avx2(float a, const float *x, float *y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

CK_TARGET_AVX2 static float sumsq_avx2(const float *x, int64_t n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = a0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 sq = _mm256_mul_ps(v, v);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
    }
    double s = hsum4d(_mm256_add_pd(a0, a1));
    for (; i < n; i++) s += (double)(x[i] * x[i]);
    return (float)s;
}

CK_TARGET_AVX2 static void scale_mul_avx2(const float *x, const float *w, float s, float *y, int64_t n) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    if (w) {
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
    } else {
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    }
    for (; i < n; i++) y[i] = w ? (x[i] * s) * w[i] : x[i] * s;
}

CK_TARGET_AVX2 static void swiglu_avx2(const float *g, const float *u, float *y, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 vg = _mm256_loadu_ps(g + i);
        const __m256 e = exp8(_mm256_xor_ps(vg, neg));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_div_ps(vg, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

CK_TARGET_AVX2 static float max_avx2(const float *x, int64_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float r = _mm_cvtss_f32(h);
    for (; i < n; i++) r = x[i] > r ? x[i] : r;
    return r;
}

CK_TARGET_AVX2 static float exp_sum_avx2(float *x, float m, int64_t n) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256d acc = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm_add_ps(_mm256_castps256_ps128(e), _mm256_extractf128_ps(e, 1))));
    }
    double s = hsum4d(acc);
    for (; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    return (float)s;
}

CK_TARGET_AVX2 static void scale_avx2(float *x, float s, int64_t n) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++) x[i] *= s;
}

CK_TARGET_AVX2 static void add_avx2(const float *a, const float *b, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++) y[i] = a[i] + b[i];
}

CK_TARGET_AVX2 static void f16_to_f32_avx2(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = ck_h2f(x[i]);
}

CK_TARGET_AVX2 static void f32_to_f16_avx2(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = ck_f2h(x[i]);
}

const ck_f32_ops ck_f32_avx2 = {
    .dot = dot_avx2, .axpy = axpy_avx2, .sumsq = sumsq_avx2, .scale_mul = scale_mul_avx2,
    .swiglu = swiglu_avx2, .max = max_avx2, .exp_sum = exp_sum_avx2, .scale = scale_avx2,
    .add = add_avx2, .f16_to_f32 = f16_to_f32_avx2, .f32_to_f16 = f32_to_f16_avx2,
};

/* ---------------- AVX-512: masked tails instead of scalar loops ---------------- */

#define TAIL_MASK(rem) ((__mmask16)((1u << (rem)) - 1u))

CK_TARGET_AVX512 static inline __m512 exp16(__m512 x) {
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LO), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(EXP_LO)), _mm512_set1_ps(EXP_HI));
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    /* scalef computes p * 2^k without building the exponent by hand */
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_scalef_ps(p, k));
}

CK_TARGET_AVX512 static float dot_avx512(const float *x, const float *y, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
    if (i < n) {
        const __mmask16 k = TAIL_MASK(n - i);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

CK_TARGET_AVX512 static void axpy_avx512(float a, const float *x, float *y, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : TAIL_MASK(n - i);
        _mm512_mask_storeu_ps(y + i, k, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(k, x + i), _mm512_maskz_loadu_ps(k, y + i)));
    }
}

CK_TARGET_AVX512 static float sumsq_avx512(const float *x, int64_t n) {
    __m512d a0 = _mm512_setzero_pd(), a1 = a0;
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : TAIL_MASK(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        const __m512 sq = _mm512_mul_ps(v, v);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
    }
    return (float)_mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

CK_TARGET_AVX512 static void scale_mul_avx512(const float *x, const float *w, float s, float *y, int64_t n) {
    const __m512 vs = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : TAIL_MASK(n - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vs);
        if (w) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + i));
        _mm512_mask_storeu_ps(y + i, k, v);
    }
}

CK_TARGET_AVX512 static void swiglu_avx512(const float *g, const float *u, float *y, int64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : TAIL_MASK(n - i);
        const __m512 vg = _mm512_maskz_loadu_ps(k, g + i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), vg));
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_div_ps(vg, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(k, u + i)));
    }
}

CK_TARGET_AVX512 static float max_avx512(const float *x, int64_t n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : TAIL_MASK(n - i);
        m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, x + i));
    }
    return _mm512_reduce_max_ps(m);
}

CK_TARGET_AVX512 static float exp_sum_avx512(float *x, float m, int64_t n) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512d acc = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : TAIL_MASK(n - i);
        const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm)));
        _mm512_mask_storeu_ps(x + i, k, e);
        const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(e), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(h));
    }
    return (float)_mm512_reduce_add_pd(acc);
}

CK_TARGET_AVX512 static void scale_avx512(float *x, float s, int64_t n) {
    const __m512 vs = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : TAIL_MASK(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vs));
    }
}

CK_TARGET_AVX512 static void add_avx512(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : TAIL_MASK(n - i);
        _mm512_mask_storeu_ps(y + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i)));
    }
}

CK_TARGET_AVX512 static void f16_to_f32_avx512(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : TAIL_MASK(n - i);
        _mm512_mask_storeu_ps(y + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, x + i)));
    }
}

CK_TARGET_AVX512 static void f32_to_f16_avx512(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? 0xffff : TAIL_MASK(n - i);
        const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_mask_storeu_epi16(y + i, k, h);
    }
}

const ck_f32_ops ck_f32_avx512 = {
    .dot = dot_avx512, .axpy = axpy_avx512, .sumsq = sumsq_avx512, .scale_mul = scale_mul_avx512,
    .swiglu = swiglu_avx512, .max = max_avx512, .exp_sum = exp_sum_avx512, .scale = scale_avx512,
    .add = add_avx512, .f16_to_f32 = f16_to_f32_avx512, .f32_to_f16 = f32_to_f16_avx512,
};
#endif /* CK_X86 */

/* ---------------- NEON ---------------- */
#if CK_ARM64
#include <arm_neon.h>

static inline float32x4_t exp4(float32x4_t x) {
    const uint32x4_t under = vcltq_f32(x, vdupq_n_f32(EXP_LO));
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(EXP_LO)), vdupq_n_f32(EXP_HI));
    const float32x4_t k = vrndnq_f32(vmulq_n_f32(x, EXP_LOG2E));
    float32x4_t r = vfmsq_f32(x, k, vdupq_n_f32(EXP_LN2_HI));
    r = vfmsq_f32(r, k, vdupq_n_f32(EXP_LN2_LO));
    float32x4_t p = vdupq_n_f32(EXP_P0);
    p = vfmaq_f32(vdupq_n_f32(EXP_P1), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_P2), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_P3), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_P4), p, r);
    p = vfmaq_f32(vdupq_n_f32(EXP_P5), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t ki = vcvtq_s32_f32(k);
    const int32x4_t k1 = vshrq_n_s32(ki, 1), k2 = vsubq_s32(ki, k1);
    const float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k1, vdupq_n_s32(127)), 23));
    const float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k2, vdupq_n_s32(127)), 23));
    const float32x4_t e = vmulq_f32(vmulq_f32(p, s1), s2);
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(e), under));
}

static float dot_neon(const float *x, const float *y, int64_t n) {
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
        a1 = vfmaq_f32(a1, vld1q_f32(x + i + 4), vld1q_f32(y + i + 4));
        a2 = vfmaq_f32(a2, vld1q_f32(x + i + 8), vld1q_f32(y + i + 8));
        a3 = vfmaq_f32(a3, vld1q_f32(x + i + 12), vld1q_f32(y + i + 12));
    }
    for (; i + 4 <= n; i += 4) a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

static void axpy_neon(float a, const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++) y[i] += a * x[i];
}

static void swiglu_neon(const float *g, const float *u, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t vg = vld1q_f32(g + i);
        const float32x4_t e = exp4(vnegq_f32(vg));
        vst1q_f32(y + i, vmulq_f32(vdivq_f32(vg, vaddq_f32(vdupq_n_f32(1.0f), e)), vld1q_f32(u + i)));
    }
    for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static float exp_sum_neon(float *x, float m, int64_t n) {
    double s = 0.0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t e = exp4(vsubq_f32(vld1q_f32(x + i), vdupq_n_f32(m)));
        vst1q_f32(x + i, e);
        s += vaddvq_f32(e);
    }
    for (; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    return (float)s;
}

static void f16_to_f32_neon(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(x + i))));
    for (; i < n; i++) y[i] = ck_h2f(x[i]);
}

static void f32_to_f16_neon(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++) y[i] = ck_f2h(x[i]);
}

/* The rest auto-vectorizes well enough from the scalar loops. */
const ck_f32_ops ck_f32_neon = {
    .dot = dot_neon, .axpy = axpy_neon, .swiglu = swiglu_neon, .exp_sum = exp_sum_neon,
    .f16_to_f32 = f16_to_f32_neon, .f32_to_f16 = f32_to_f16_neon,
};
#endif

/* The first index of the largest value (NaNs never win unless every value is one: then 0).
 * Eight independent running maxima, then a search for the first index holding the maximum:
 * both loops vectorize, so a 128K vocabulary takes microseconds (a fast GPU decode step is a
 * few milliseconds, and every step of every sequence reads one). */
int64_t ck_argmax_f32(const float *x, int64_t n) {
    float m[8];
    for (int j = 0; j < 8; j++) m[j] = -INFINITY;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    float top = -INFINITY;
    for (int j = 0; j < 8; j++) top = m[j] > top ? m[j] : top;
    for (; i < n; i++) top = x[i] > top ? x[i] : top;
    for (i = 0; i < n; i++)
        if (x[i] == top) return i;
    return 0;
}

/* Whether no value is a NaN or an infinity (exponent bits all set): a logit row is checked with
 * it before anything chooses from it, since NaN logits from damaged weights would otherwise make
 * every comparison false. Integer tests, so the loop vectorizes: microseconds for 128K values. */
int ck_all_finite_f32(const float *x, int64_t n) {
    const uint32_t *u = (const uint32_t *)x;
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
    return bad == 0;
}

/* The k largest values, optionally among `allowed` (bit i of allowed[i / 64]; NULL: all), sorted
 * descending, ties to the lower index; returns how many were found (fewer than k when fewer are
 * allowed). A min-heap of the best so far; each block of 64 is first tested against the heap's
 * worst through its (vectorizing) maximum, so after the first blocks a 128K vocabulary costs
 * one pass of comparisons. NaNs are never chosen. This is the sampler's top-k and a grammar's
 * masked choice: one scan instead of writing -inf over the vocabulary and scanning again. */
static int ck_worse(float va, int32_t ia, float vb, int32_t ib) { return va < vb || (va == vb && ia > ib); }

static void ck_sift_down(float *v, int32_t *id, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && ck_worse(v[l], id[l], v[w], id[w])) w = l;
        if (r < n && ck_worse(v[r], id[r], v[w], id[w])) w = r;
        if (w == i) return;
        float tv = v[i]; v[i] = v[w]; v[w] = tv;
        int32_t ti = id[i]; id[i] = id[w]; id[w] = ti;
        i = w;
    }
}

static void ck_heap_offer(float *v, int32_t *id, int64_t *count, int64_t k, float x, int32_t i) {
    if (x != x) return;
    if (*count < k) {
        int64_t j = (*count)++;
        v[j] = x; id[j] = i;
        while (j > 0) {  /* sift up: the worst stays at the root */
            int64_t p = (j - 1) / 2;
            if (!ck_worse(v[j], id[j], v[p], id[p])) break;
            float tv = v[j]; v[j] = v[p]; v[p] = tv;
            int32_t ti = id[j]; id[j] = id[p]; id[p] = ti;
            j = p;
        }
    } else if (x > v[0]) {  /* a later index never wins a tie */
        v[0] = x; id[0] = i;
        ck_sift_down(v, id, k, 0);
    }
}

int64_t ck_top_k_f32(const float *x, int64_t n, const uint64_t *allowed, int64_t k, int32_t *ids, float *vals) {
    if (k <= 0) return 0;
    int64_t count = 0;
    for (int64_t b = 0; b < n; b += 64) {
        int64_t len = n - b < 64 ? n - b : 64;
        uint64_t word = allowed ? allowed[b / 64] : ~(uint64_t)0;
        if (len < 64) word &= ((uint64_t)1 << len) - 1;
        if (word == 0) continue;
        if (count == k) {
            float m = -INFINITY;
            for (int64_t j = 0; j < len; j++) m = x[b + j] > m ? x[b + j] : m;
            if (!(m > vals[0])) continue;
        }
        while (word) {
            int j = __builtin_ctzll(word);
            word &= word - 1;
            ck_heap_offer(vals, ids, &count, k, x[b + j], (int32_t)(b + j));
        }
    }
    /* heap sort: repeatedly move the worst to the end, leaving the best first */
    for (int64_t end = count - 1; end > 0; end--) {
        float tv = vals[0]; vals[0] = vals[end]; vals[end] = tv;
        int32_t ti = ids[0]; ids[0] = ids[end]; ids[end] = ti;
        ck_sift_down(vals, ids, end, 0);
    }
    return count;
}
