/* Paged attention on the CPU: one token's query heads that share a KV head attend over n
 * keys held in fixed-size pages. Heads of a GQA group are done together so each K and V row
 * is loaded once for all of them. Two passes (scores, then weighted V) with an exact softmax.
 *
 * Layouts inside a page (page_size slots):
 *   K is stored transposed, [kv head][dim][slot], so the scores of a whole page for one head
 *   are page_size-wide vector FMAs of broadcast query values: no horizontal sums.
 *   V is stored by slot, [slot][kv dim], for the weighted sum. */
#include "ck_internal.h"
#include <math.h>
#include <string.h>
#if CK_X86
#include <immintrin.h>
#endif

/* V row of key j */
#define VROW(pages, j) ((pages)[(j) / page_size] + ((j) % page_size) * stride + head_offset)
/* K element d of key j (transposed layout) */
#define KELEM(pages, j, d) ((pages)[(j) / page_size][(head_offset + (d)) * page_size + (j) % page_size])

/* Each head's scores (rows of n) to probabilities: softcapped (cap·tanh(s/cap)) when softcap > 0;
 * keys before `start` (outside a sliding window) get probability 0. sinks (NULL: none): one
 * logit per head that joins its softmax without a value (gpt-oss), so the row sums to less than 1. */
static void softmax_rows(float *scores, int64_t heads, int64_t n, float softcap, const float *sinks, int64_t start) {
    const ck_f32_ops *f = &ck_active()->f32;
    for (int64_t g = 0; g < heads; g++) {
        float *row = scores + g * n;
        if (softcap > 0)
            for (int64_t j = start; j < n; j++) row[j] = softcap * tanhf(row[j] / softcap);
        float m = f->max(row + start, n - start);
        if (sinks && sinks[g] > m) m = sinks[g];
        float sum = f->exp_sum(row + start, m, n - start);
        if (sinks) sum += expf(sinks[g] - m);
        f->scale(row + start, 1.0f / sum, n - start);
        memset(row, 0, (size_t)start * sizeof(float));
    }
}

static void attention_scalar(const float *q, int64_t heads, int64_t hd, const float *const *kp, const float *const *vp,
                             int64_t page_size, int64_t stride, int64_t head_offset, int64_t n, float scale,
                             float softcap, const float *sinks, int64_t start, float *out, float *scores) {
    for (int64_t j = 0; j < n; j++) {
        for (int64_t g = 0; g < heads; g++) {
            float s = 0;
            for (int64_t d = 0; d < hd; d++) s += q[g * hd + d] * KELEM(kp, j, d);
            scores[g * n + j] = s * scale;
        }
    }
    softmax_rows(scores, heads, n, softcap, sinks, start);
    memset(out, 0, (size_t)(heads * hd) * sizeof(float));
    for (int64_t j = 0; j < n; j++) {
        const float *v = VROW(vp, j);
        for (int64_t g = 0; g < heads; g++) {
            const float p = scores[g * n + j];
            for (int64_t d = 0; d < hd; d++) out[g * hd + d] += p * v[d];
        }
    }
}

#if CK_X86
__attribute__((target("avx512f,avx512dq")))
static void attention_avx512(const float *q, int64_t heads, int64_t hd, const float *const *kp, const float *const *vp,
                             int64_t page_size, int64_t stride, int64_t head_offset, int64_t n, float scale,
                             float softcap, const float *sinks, int64_t start, float *out, float *scores) {
    /* page_size == 16: one zmm holds a page's 16 scores */
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const float *kt = kp[j0 / 16] + head_offset * 16;
        const __mmask16 valid = n - j0 >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j0)) - 1);
        for (int64_t g = 0; g < heads; g++) {
            const float *qg = q + g * hd;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t d = 0; d < hd; d++) acc = _mm512_fmadd_ps(_mm512_set1_ps(qg[d]), _mm512_loadu_ps(kt + d * 16), acc);
            _mm512_mask_storeu_ps(scores + g * n + j0, valid, _mm512_mul_ps(acc, _mm512_set1_ps(scale)));
        }
    }
    softmax_rows(scores, heads, n, softcap, sinks, start);
    /* weighted V: each head's output stays in registers (hd/16 zmm) across all keys */
    for (int64_t g = 0; g < heads; g++) {
        const float *pg = scores + g * n;
        float *o = out + g * hd;
        for (int64_t d0 = 0; d0 < hd; d0 += 64) {
            const int64_t w = hd - d0 < 64 ? hd - d0 : 64; /* multiple of 16 */
            __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
            for (int64_t j0 = 0; j0 < n; j0 += 16) { /* page by page (page_size == 16 here) */
                const float *base = vp[j0 / 16] + head_offset + d0;
                const int64_t m = n - j0 < 16 ? n - j0 : 16;
                for (int64_t t = 0; t < m; t++) {
                    const float *v = base + t * stride;
                    const __m512 p = _mm512_set1_ps(pg[j0 + t]);
                    acc0 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v), acc0);
                    if (w > 16) acc1 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 16), acc1);
                    if (w > 32) acc2 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 32), acc2);
                    if (w > 48) acc3 = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + 48), acc3);
                }
            }
            _mm512_storeu_ps(o + d0, acc0);
            if (w > 16) _mm512_storeu_ps(o + d0 + 16, acc1);
            if (w > 32) _mm512_storeu_ps(o + d0 + 32, acc2);
            if (w > 48) _mm512_storeu_ps(o + d0 + 48, acc3);
        }
    }
}


__attribute__((target("avx2,fma")))
static void attention_avx2(const float *q, int64_t heads, int64_t hd, const float *const *kp, const float *const *vp,
                           int64_t page_size, int64_t stride, int64_t head_offset, int64_t n, float scale,
                           float softcap, const float *sinks, int64_t start, float *out, float *scores) {
    /* page_size % 8 == 0: 8 scores per ymm; the tail of the last group is computed and dropped */
    float tmp[8];
    for (int64_t j0 = 0; j0 < n; j0 += 8) {
        const float *kt = kp[j0 / page_size] + head_offset * page_size + j0 % page_size;
        const int64_t m = n - j0 < 8 ? n - j0 : 8;
        for (int64_t g = 0; g < heads; g++) {
            const float *qg = q + g * hd;
            __m256 acc = _mm256_setzero_ps();
            for (int64_t d = 0; d < hd; d++) acc = _mm256_fmadd_ps(_mm256_set1_ps(qg[d]), _mm256_loadu_ps(kt + d * page_size), acc);
            acc = _mm256_mul_ps(acc, _mm256_set1_ps(scale));
            if (m == 8) _mm256_storeu_ps(scores + g * n + j0, acc);
            else { _mm256_storeu_ps(tmp, acc); memcpy(scores + g * n + j0, tmp, (size_t)m * sizeof(float)); }
        }
    }
    softmax_rows(scores, heads, n, softcap, sinks, start);
    memset(out, 0, (size_t)(heads * hd) * sizeof(float));
    for (int64_t j = 0; j < n; j++) {
        const float *v = VROW(vp, j);
        for (int64_t g = 0; g < heads; g++) {
            const __m256 p = _mm256_set1_ps(scores[g * n + j]);
            float *o = out + g * hd;
            for (int64_t d = 0; d < hd; d += 8) _mm256_storeu_ps(o + d, _mm256_fmadd_ps(p, _mm256_loadu_ps(v + d), _mm256_loadu_ps(o + d)));
        }
    }
}
#endif

void ck_attention(const float *q, int64_t heads, int64_t hd, const float *const *kpages, const float *const *vpages,
                  int64_t page_size, int64_t stride, int64_t head_offset, int64_t n, float scale, float softcap, const float *sinks, int64_t start,
                  float *out, float *scores) {
#if CK_X86
    const ck_table *t = ck_active();
    if (t->f32.dot == ck_f32_avx512.dot && hd % 16 == 0 && page_size == 16) {
        attention_avx512(q, heads, hd, kpages, vpages, page_size, stride, head_offset, n, scale, softcap, sinks, start, out, scores);
        return;
    }
    if ((t->f32.dot == ck_f32_avx2.dot || t->f32.dot == ck_f32_avx512.dot) && hd % 8 == 0 && page_size % 8 == 0) {
        attention_avx2(q, heads, hd, kpages, vpages, page_size, stride, head_offset, n, scale, softcap, sinks, start, out, scores);
        return;
    }
#endif
    attention_scalar(q, heads, hd, kpages, vpages, page_size, stride, head_offset, n, scale, softcap, sinks, start, out, scores);
}

/* ---- KV cache types (f32, f16, q8_0, q4_0) ----
 * A plane of a page holds page_size slots of a kv_dim-wide row of K or V. K in f32/f16 is
 * transposed as above ([dim][slot]); quantized K and every V are by slot, slot s's row at
 * s * ck_kv_row_bytes(type, kv_dim) bytes, a quantized row being ceil(kv_dim / 32) blocks of
 * ggml's layout (the values past kv_dim zero). Planes are padded to 4 bytes (a GPU reads them as 32-bit words). */

static int kv_quantized(int type) { return type == CK_TYPE_Q8_0 || type == CK_TYPE_Q4_0; }
static int kv_transposed(int type, int key) { return key && (type == CK_TYPE_F32 || type == CK_TYPE_F16); }

int ck_kv_type_supported(int type) {
    return type == CK_TYPE_F32 || type == CK_TYPE_F16 || type == CK_TYPE_Q8_0 || type == CK_TYPE_Q4_0;
}

size_t ck_kv_row_bytes(int type, int64_t kv_dim) {
    switch (type) {
    case CK_TYPE_F32: return (size_t)kv_dim * 4;
    case CK_TYPE_F16: return (size_t)kv_dim * 2;
    case CK_TYPE_Q8_0: return (size_t)((kv_dim + QK - 1) / QK) * sizeof(blk_q8_0);
    case CK_TYPE_Q4_0: return (size_t)((kv_dim + QK - 1) / QK) * sizeof(blk_q4_0);
    default: return 0;
    }
}

size_t ck_kv_plane_bytes(int type, int64_t page_size, int64_t kv_dim) {
    return ((size_t)page_size * ck_kv_row_bytes(type, kv_dim) + 3) & ~(size_t)3;
}

void ck_kv_store(int type, int key, void *plane, int64_t page_size, int64_t kv_dim, int64_t slot, const float *x) {
    if (kv_transposed(type, key)) {
        if (type == CK_TYPE_F32) {
            float *p = (float *)plane + slot;
            for (int64_t d = 0; d < kv_dim; d++) p[d * page_size] = x[d];
        } else {
            uint16_t *p = (uint16_t *)plane + slot;
            for (int64_t d = 0; d < kv_dim; d++) p[d * page_size] = ck_f2h(x[d]);
        }
        return;
    }
    char *row = (char *)plane + (size_t)slot * ck_kv_row_bytes(type, kv_dim);
    if (!kv_quantized(type)) {
        ck_quantize_row(type, x, row, kv_dim);
        return;
    }
    const int64_t full = kv_dim / QK * QK;
    if (full > 0) ck_quantize_row(type, x, row, full);
    if (full < kv_dim) { /* the last block, zero-padded */
        float tail[QK] = {0};
        memcpy(tail, x + full, (size_t)(kv_dim - full) * sizeof(float));
        ck_quantize_row(type, tail, row + (size_t)(full / QK) * (type == CK_TYPE_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0)), QK);
    }
}

void ck_kv_load(int type, int key, const void *plane, int64_t page_size, int64_t kv_dim, int64_t slot, float *y) {
    if (kv_transposed(type, key)) {
        for (int64_t d = 0; d < kv_dim; d++)
            y[d] = type == CK_TYPE_F32 ? ((const float *)plane)[d * page_size + slot] : ck_h2f(((const uint16_t *)plane)[d * page_size + slot]);
        return;
    }
    const char *row = (const char *)plane + (size_t)slot * ck_kv_row_bytes(type, kv_dim);
    if (!kv_quantized(type)) {
        ck_dequantize_row(type, row, y, kv_dim);
        return;
    }
    const int64_t nb = (kv_dim + QK - 1) / QK;
    float *tmp = ck_scratch((size_t)(nb * QK) * sizeof(float));
    ck_dequantize_row(type, row, tmp, nb * QK);
    memcpy(y, tmp, (size_t)kv_dim * sizeof(float));
}

#define KV_TILE 16 /* keys per tile of the typed path */

/* K of keys slot0 .. slot0+m-1 of one page, dimensions head_offset .. +hd, as floats [d][KV_TILE]
 * (columns past m zero). `row`: scratch of hd + 64 floats. */
static void kv_k_tile(int type, const void *page, int64_t page_size, int64_t kv_dim, int64_t ho, int64_t hd,
                      int64_t slot0, int64_t m, float *kt, float *row) {
    if (m < KV_TILE) memset(kt, 0, (size_t)(hd * KV_TILE) * sizeof(float));
    if (type == CK_TYPE_F32) {
        for (int64_t d = 0; d < hd; d++) memcpy(kt + d * KV_TILE, (const float *)page + (ho + d) * page_size + slot0, (size_t)m * sizeof(float));
    } else if (type == CK_TYPE_F16) {
        for (int64_t d = 0; d < hd; d++) ck_f16_to_f32((const uint16_t *)page + (ho + d) * page_size + slot0, kt + d * KV_TILE, m);
    } else {
        const size_t rb = ck_kv_row_bytes(type, kv_dim), bb = type == CK_TYPE_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0);
        const int64_t b0 = ho / QK, nb = (ho + hd - 1) / QK - b0 + 1, off = ho - b0 * QK;
        for (int64_t i = 0; i < m; i++) {
            ck_dequantize_row(type, (const char *)page + (size_t)(slot0 + i) * rb + (size_t)b0 * bb, row, nb * QK);
            for (int64_t d = 0; d < hd; d++) kt[d * KV_TILE + i] = row[off + d];
        }
    }
}

/* V rows of keys slot0 .. slot0+m-1, dimensions head_offset .. +hd, as floats [i][hd]. */
static void kv_v_tile(int type, const void *page, int64_t kv_dim, int64_t ho, int64_t hd, int64_t slot0, int64_t m,
                      float *vt, float *row) {
    const size_t rb = ck_kv_row_bytes(type, kv_dim);
    for (int64_t i = 0; i < m; i++) {
        const char *r = (const char *)page + (size_t)(slot0 + i) * rb;
        if (type == CK_TYPE_F32) {
            memcpy(vt + i * hd, (const float *)r + ho, (size_t)hd * sizeof(float));
        } else if (type == CK_TYPE_F16) {
            ck_f16_to_f32((const uint16_t *)r + ho, vt + i * hd, hd);
        } else {
            const size_t bb = type == CK_TYPE_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0);
            const int64_t b0 = ho / QK, nb = (ho + hd - 1) / QK - b0 + 1;
            ck_dequantize_row(type, r + (size_t)b0 * bb, row, nb * QK);
            memcpy(vt + i * hd, row + (ho - b0 * QK), (size_t)hd * sizeof(float));
        }
    }
}

/* scores[g*n + j0 + i] = scale * q_g . kt[:, i] for i < m */
static void tile_scores_scalar(const float *q, int64_t heads, int64_t hd, const float *kt, int64_t m, float scale,
                               float *scores, int64_t n, int64_t j0) {
    for (int64_t g = 0; g < heads; g++) {
        float acc[KV_TILE] = {0};
        for (int64_t d = 0; d < hd; d++) {
            const float qd = q[g * hd + d];
            for (int i = 0; i < KV_TILE; i++) acc[i] += qd * kt[d * KV_TILE + i];
        }
        for (int64_t i = 0; i < m; i++) scores[g * n + j0 + i] = acc[i] * scale;
    }
}

#if CK_X86
__attribute__((target("avx512f,avx512dq")))
static void tile_scores_avx512(const float *q, int64_t heads, int64_t hd, const float *kt, int64_t m, float scale,
                               float *scores, int64_t n, int64_t j0) {
    const __mmask16 valid = m >= 16 ? 0xFFFF : (__mmask16)((1u << m) - 1);
    for (int64_t g = 0; g < heads; g++) {
        const float *qg = q + g * hd;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t d = 0; d < hd; d++) acc = _mm512_fmadd_ps(_mm512_set1_ps(qg[d]), _mm512_loadu_ps(kt + d * KV_TILE), acc);
        _mm512_mask_storeu_ps(scores + g * n + j0, valid, _mm512_mul_ps(acc, _mm512_set1_ps(scale)));
    }
}

__attribute__((target("avx2,fma")))
static void tile_scores_avx2(const float *q, int64_t heads, int64_t hd, const float *kt, int64_t m, float scale,
                             float *scores, int64_t n, int64_t j0) {
    float tmp[KV_TILE];
    for (int64_t g = 0; g < heads; g++) {
        const float *qg = q + g * hd;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int64_t d = 0; d < hd; d++) {
            const __m256 qd = _mm256_set1_ps(qg[d]);
            a0 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kt + d * KV_TILE), a0);
            a1 = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kt + d * KV_TILE + 8), a1);
        }
        const __m256 s = _mm256_set1_ps(scale);
        _mm256_storeu_ps(tmp, _mm256_mul_ps(a0, s));
        _mm256_storeu_ps(tmp + 8, _mm256_mul_ps(a1, s));
        memcpy(scores + g * n + j0, tmp, (size_t)m * sizeof(float));
    }
}
#endif

/* Any K/V types: each page's keys in tiles of KV_TILE converted to float, then the float
 * arithmetic of the f32 path (scores, exact softmax, weighted V). */
static void attention_typed(const float *q, int64_t heads, int64_t hd, int ktype, const void *const *kpages, int vtype,
                            const void *const *vpages, int64_t page_size, int64_t kv_dim, int64_t ho, int64_t n, float scale,
                            float softcap, const float *sinks, int64_t start, float *out, float *scores) {
    float *kt = ck_scratch((size_t)(2 * KV_TILE * hd + hd + 2 * QK) * sizeof(float));
    float *row = kt + KV_TILE * hd, *vt = row + hd + 2 * QK;
    void (*tile_scores)(const float *, int64_t, int64_t, const float *, int64_t, float, float *, int64_t, int64_t) = tile_scores_scalar;
#if CK_X86
    const ck_table *t = ck_active();
    if (t->f32.dot == ck_f32_avx512.dot) tile_scores = tile_scores_avx512;
    else if (t->f32.dot == ck_f32_avx2.dot) tile_scores = tile_scores_avx2;
#endif
    const ck_f32_ops *f = &ck_active()->f32;
    /* keys before the page holding `start` are never looked at */
    const int64_t first = start / page_size * page_size;
    for (int64_t j0 = first; j0 < n;) {
        const int64_t slot0 = j0 % page_size;
        int64_t m = page_size - slot0;
        if (m > KV_TILE) m = KV_TILE;
        if (m > n - j0) m = n - j0;
        kv_k_tile(ktype, kpages[j0 / page_size], page_size, kv_dim, ho, hd, slot0, m, kt, row);
        tile_scores(q, heads, hd, kt, m, scale, scores, n, j0);
        j0 += m;
    }
    softmax_rows(scores, heads, n, softcap, sinks, start);
    memset(out, 0, (size_t)(heads * hd) * sizeof(float));
    for (int64_t j0 = first; j0 < n;) {
        const int64_t slot0 = j0 % page_size;
        int64_t m = page_size - slot0;
        if (m > KV_TILE) m = KV_TILE;
        if (m > n - j0) m = n - j0;
        kv_v_tile(vtype, vpages[j0 / page_size], kv_dim, ho, hd, slot0, m, vt, row);
        for (int64_t i = 0; i < m; i++)
            for (int64_t g = 0; g < heads; g++) {
                const float p = scores[g * n + j0 + i];
                if (p != 0) f->axpy(p, vt + i * hd, out + g * hd, hd);
            }
        j0 += m;
    }
}

#if CK_X86
/* f16 K and V, page_size == 16, hd % 16 == 0: attention_avx512 with each load converted */
__attribute__((target("avx512f,avx512dq,f16c")))
static void attention_f16_avx512(const float *q, int64_t heads, int64_t hd, const uint16_t *const *kp, const uint16_t *const *vp,
                                 int64_t stride, int64_t head_offset, int64_t n, float scale, float softcap, const float *sinks, int64_t start,
                                 float *out, float *scores) {
    const int64_t first = start / 16 * 16;
    for (int64_t j0 = first; j0 < n; j0 += 16) {
        const uint16_t *kt = kp[j0 / 16] + head_offset * 16;
        const __mmask16 valid = n - j0 >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j0)) - 1);
        for (int64_t g = 0; g < heads; g++) {
            const float *qg = q + g * hd;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t d = 0; d < hd; d++)
                acc = _mm512_fmadd_ps(_mm512_set1_ps(qg[d]), _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kt + d * 16))), acc);
            _mm512_mask_storeu_ps(scores + g * n + j0, valid, _mm512_mul_ps(acc, _mm512_set1_ps(scale)));
        }
    }
    softmax_rows(scores, heads, n, softcap, sinks, start);
    for (int64_t g = 0; g < heads; g++) {
        const float *pg = scores + g * n;
        float *o = out + g * hd;
        for (int64_t d0 = 0; d0 < hd; d0 += 64) {
            const int64_t w = hd - d0 < 64 ? hd - d0 : 64;
            __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
            for (int64_t j0 = first; j0 < n; j0 += 16) {
                const uint16_t *base = vp[j0 / 16] + head_offset + d0;
                const int64_t m = n - j0 < 16 ? n - j0 : 16;
                for (int64_t t = 0; t < m; t++) {
                    const uint16_t *v = base + t * stride;
                    const __m512 p = _mm512_set1_ps(pg[j0 + t]);
                    acc0 = _mm512_fmadd_ps(p, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)v)), acc0);
                    if (w > 16) acc1 = _mm512_fmadd_ps(p, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + 16))), acc1);
                    if (w > 32) acc2 = _mm512_fmadd_ps(p, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + 32))), acc2);
                    if (w > 48) acc3 = _mm512_fmadd_ps(p, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + 48))), acc3);
                }
            }
            _mm512_storeu_ps(o + d0, acc0);
            if (w > 16) _mm512_storeu_ps(o + d0 + 16, acc1);
            if (w > 32) _mm512_storeu_ps(o + d0 + 32, acc2);
            if (w > 48) _mm512_storeu_ps(o + d0 + 48, acc3);
        }
    }
}

/* f16 K and V, page_size == 16, hd % 16 == 0, hd <= 256, a GQA group of at least 3 heads:
 * the group's heads 8 at a time (padded with zero queries), so that each K row (16 keys of one
 * dimension) and each V row is converted once for all of them and every head has its own
 * accumulator chain (attention_f16_avx512 runs one dependent chain a head and converts K and V
 * again for each head). */
__attribute__((target("avx512f,avx512dq,f16c")))
static void attention_f16_avx512_group(const float *q, int64_t heads, int64_t hd, const uint16_t *const *kp, const uint16_t *const *vp,
                                       int64_t stride, int64_t head_offset, int64_t n, float scale, float softcap, const float *sinks, int64_t start,
                                       float *out, float *scores) {
    static const float zeros[16];
    const int64_t first = start / 16 * 16;
    float qpad[8 * 256];
    const __m512 sc = _mm512_set1_ps(scale);
    for (int64_t g0 = 0; g0 < heads; g0 += 8) {
        const int64_t gn = heads - g0 < 8 ? heads - g0 : 8;
        memset(qpad, 0, sizeof(float) * (size_t)(8 * hd));
        memcpy(qpad, q + g0 * hd, sizeof(float) * (size_t)(gn * hd));
        for (int64_t j0 = first; j0 < n; j0 += 16) {
            const uint16_t *kt = kp[j0 / 16] + head_offset * 16;
            const __mmask16 valid = n - j0 >= 16 ? 0xFFFF : (__mmask16)((1u << (n - j0)) - 1);
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
            for (int64_t d = 0; d < hd; d++) {
                const __m512 k = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kt + d * 16)));
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(qpad[d]), k, a0);
                a1 = _mm512_fmadd_ps(_mm512_set1_ps(qpad[hd + d]), k, a1);
                a2 = _mm512_fmadd_ps(_mm512_set1_ps(qpad[2 * hd + d]), k, a2);
                a3 = _mm512_fmadd_ps(_mm512_set1_ps(qpad[3 * hd + d]), k, a3);
                a4 = _mm512_fmadd_ps(_mm512_set1_ps(qpad[4 * hd + d]), k, a4);
                a5 = _mm512_fmadd_ps(_mm512_set1_ps(qpad[5 * hd + d]), k, a5);
                a6 = _mm512_fmadd_ps(_mm512_set1_ps(qpad[6 * hd + d]), k, a6);
                a7 = _mm512_fmadd_ps(_mm512_set1_ps(qpad[7 * hd + d]), k, a7);
            }
            const __m512 a[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
            for (int64_t g = 0; g < gn; g++) _mm512_mask_storeu_ps(scores + (g0 + g) * n + j0, valid, _mm512_mul_ps(a[g], sc));
        }
    }
    softmax_rows(scores, heads, n, softcap, sinks, start);
    for (int64_t g0 = 0; g0 < heads; g0 += 8) {
        const int64_t gn = heads - g0 < 8 ? heads - g0 : 8;
        for (int64_t d0 = 0; d0 < hd; d0 += 32) {
            const int wide = hd - d0 >= 32;
            __m512 o00 = _mm512_setzero_ps(), o01 = o00, o10 = o00, o11 = o00, o20 = o00, o21 = o00, o30 = o00, o31 = o00;
            __m512 o40 = o00, o41 = o00, o50 = o00, o51 = o00, o60 = o00, o61 = o00, o70 = o00, o71 = o00;
            for (int64_t j0 = first; j0 < n; j0 += 16) {
                const uint16_t *base = vp[j0 / 16] + head_offset + d0;
                const int64_t m = n - j0 < 16 ? n - j0 : 16;
                const float *p[8];  /* this tile's probabilities of each head; zeros past the group */
                for (int64_t g = 0; g < 8; g++) p[g] = g < gn ? scores + (g0 + g) * n + j0 : zeros;
                for (int64_t t = 0; t < m; t++) {
                    const uint16_t *v = base + t * stride;
                    const __m512 v0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)v));
                    const __m512 v1 = wide ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + 16))) : _mm512_setzero_ps();
#define PV(g, x0, x1) { const __m512 pb = _mm512_set1_ps(p[g][t]); x0 = _mm512_fmadd_ps(pb, v0, x0); x1 = _mm512_fmadd_ps(pb, v1, x1); }
                    PV(0, o00, o01) PV(1, o10, o11) PV(2, o20, o21) PV(3, o30, o31)
                    PV(4, o40, o41) PV(5, o50, o51) PV(6, o60, o61) PV(7, o70, o71)
#undef PV
                }
            }
            const __m512 lo[8] = {o00, o10, o20, o30, o40, o50, o60, o70}, hi[8] = {o01, o11, o21, o31, o41, o51, o61, o71};
            for (int64_t g = 0; g < gn; g++) {
                float *o = out + (g0 + g) * hd + d0;
                _mm512_storeu_ps(o, lo[g]);
                if (wide) _mm512_storeu_ps(o + 16, hi[g]);
            }
        }
    }
}

/* f16 K and V, page_size % 8 == 0, hd % 8 == 0: attention_avx2 with each load converted */
__attribute__((target("avx2,fma,f16c")))
static void attention_f16_avx2(const float *q, int64_t heads, int64_t hd, const uint16_t *const *kp, const uint16_t *const *vp,
                               int64_t page_size, int64_t stride, int64_t head_offset, int64_t n, float scale, float softcap, const float *sinks,
                               int64_t start, float *out, float *scores) {
    float tmp[8];
    const int64_t first = start / page_size * page_size;
    for (int64_t j0 = first; j0 < n; j0 += 8) {
        const uint16_t *kt = kp[j0 / page_size] + head_offset * page_size + j0 % page_size;
        const int64_t m = n - j0 < 8 ? n - j0 : 8;
        for (int64_t g = 0; g < heads; g++) {
            const float *qg = q + g * hd;
            __m256 acc = _mm256_setzero_ps();
            for (int64_t d = 0; d < hd; d++)
                acc = _mm256_fmadd_ps(_mm256_set1_ps(qg[d]), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kt + d * page_size))), acc);
            acc = _mm256_mul_ps(acc, _mm256_set1_ps(scale));
            if (m == 8) _mm256_storeu_ps(scores + g * n + j0, acc);
            else { _mm256_storeu_ps(tmp, acc); memcpy(scores + g * n + j0, tmp, (size_t)m * sizeof(float)); }
        }
    }
    softmax_rows(scores, heads, n, softcap, sinks, start);
    memset(out, 0, (size_t)(heads * hd) * sizeof(float));
    for (int64_t j = first; j < n; j++) {
        const uint16_t *v = vp[j / page_size] + (j % page_size) * stride + head_offset;
        for (int64_t g = 0; g < heads; g++) {
            const __m256 p = _mm256_set1_ps(scores[g * n + j]);
            float *o = out + g * hd;
            for (int64_t d = 0; d < hd; d += 8)
                _mm256_storeu_ps(o + d, _mm256_fmadd_ps(p, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + d))), _mm256_loadu_ps(o + d)));
        }
    }
}
#endif

void ck_attention_kv(const float *q, int64_t heads, int64_t hd, int ktype, const void *const *kpages, int vtype,
                     const void *const *vpages, int64_t page_size, int64_t kv_dim, int64_t head_offset, int64_t n, float scale,
                     float softcap, const float *sinks, int64_t start, float *out, float *scores) {
    if (ktype == CK_TYPE_F32 && vtype == CK_TYPE_F32) {
        ck_attention(q, heads, hd, (const float *const *)kpages, (const float *const *)vpages, page_size, kv_dim, head_offset, n,
                     scale, softcap, sinks, start, out, scores);
        return;
    }
#if CK_X86
    if (ktype == CK_TYPE_F16 && vtype == CK_TYPE_F16) {
        const ck_table *t = ck_active();
        if (t->f32.dot == ck_f32_avx512.dot && hd % 16 == 0 && page_size == 16 && heads >= 3 && hd <= 256) {
            attention_f16_avx512_group(q, heads, hd, (const uint16_t *const *)kpages, (const uint16_t *const *)vpages, kv_dim, head_offset,
                                       n, scale, softcap, sinks, start, out, scores);
            return;
        }
        if (t->f32.dot == ck_f32_avx512.dot && hd % 16 == 0 && page_size == 16) {
            attention_f16_avx512(q, heads, hd, (const uint16_t *const *)kpages, (const uint16_t *const *)vpages, kv_dim, head_offset, n,
                                 scale, softcap, sinks, start, out, scores);
            return;
        }
        if ((t->f32.dot == ck_f32_avx2.dot || t->f32.dot == ck_f32_avx512.dot) && hd % 8 == 0 && page_size % 8 == 0) {
            attention_f16_avx2(q, heads, hd, (const uint16_t *const *)kpages, (const uint16_t *const *)vpages, page_size, kv_dim,
                               head_offset, n, scale, softcap, sinks, start, out, scores);
            return;
        }
    }
#endif
    attention_typed(q, heads, hd, ktype, kpages, vtype, vpages, page_size, kv_dim, head_offset, n, scale, softcap, sinks, start, out, scores);
}
