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
 * keys before `start` (outside a sliding window) get probability 0. */
static void softmax_rows(float *scores, int64_t heads, int64_t n, float softcap, int64_t start) {
    const ck_f32_ops *f = &ck_active()->f32;
    for (int64_t g = 0; g < heads; g++) {
        float *row = scores + g * n;
        if (softcap > 0)
            for (int64_t j = start; j < n; j++) row[j] = softcap * tanhf(row[j] / softcap);
        const float sum = f->exp_sum(row + start, f->max(row + start, n - start), n - start);
        f->scale(row + start, 1.0f / sum, n - start);
        memset(row, 0, (size_t)start * sizeof(float));
    }
}

static void attention_scalar(const float *q, int64_t heads, int64_t hd, const float *const *kp, const float *const *vp,
                             int64_t page_size, int64_t stride, int64_t head_offset, int64_t n, float scale,
                             float softcap, int64_t start, float *out, float *scores) {
    for (int64_t j = 0; j < n; j++) {
        for (int64_t g = 0; g < heads; g++) {
            float s = 0;
            for (int64_t d = 0; d < hd; d++) s += q[g * hd + d] * KELEM(kp, j, d);
            scores[g * n + j] = s * scale;
        }
    }
    softmax_rows(scores, heads, n, softcap, start);
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
                             float softcap, int64_t start, float *out, float *scores) {
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
    softmax_rows(scores, heads, n, softcap, start);
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
                           float softcap, int64_t start, float *out, float *scores) {
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
    softmax_rows(scores, heads, n, softcap, start);
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
                  int64_t page_size, int64_t stride, int64_t head_offset, int64_t n, float scale, float softcap, int64_t start,
                  float *out, float *scores) {
#if CK_X86
    const ck_table *t = ck_active();
    if (t->f32.dot == ck_f32_avx512.dot && hd % 16 == 0 && page_size == 16) {
        attention_avx512(q, heads, hd, kpages, vpages, page_size, stride, head_offset, n, scale, softcap, start, out, scores);
        return;
    }
    if ((t->f32.dot == ck_f32_avx2.dot || t->f32.dot == ck_f32_avx512.dot) && hd % 8 == 0 && page_size % 8 == 0) {
        attention_avx2(q, heads, hd, kpages, vpages, page_size, stride, head_offset, n, scale, softcap, start, out, scores);
        return;
    }
#endif
    attention_scalar(q, heads, hd, kpages, vpages, page_size, stride, head_offset, n, scale, softcap, start, out, scores);
}
