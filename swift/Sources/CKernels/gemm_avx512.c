/* gemm_avx512.c — Q4_0 weights x Q8_0 activations for a few activation rows (AVX-512 VNNI).
 *
 * The tiles of dot_avx512.c give each 32-element block 8 int32 lanes of a register, so every
 * block costs an int->float conversion and two FMAs on top of its one vpdpbusd (per two
 * blocks). Here a lane is a whole block instead: 16 consecutive blocks of a weight row sit in
 * the 16 lanes of 8 registers (register k, lane l = quants 4k..4k+3 of block l), so 8 vpdpbusd
 * sum 16 complete blocks, and one conversion, one multiply (weight scale x activation scale)
 * and one FMA scale all 16. A weight row's group of 16 blocks (288 bytes) is unpacked once
 * into that layout with word permutes and reused for up to 8 activation rows, whose blocks
 * are transposed the same way once per call.
 *
 * The offset of the Q4_0 quants (nibble - 8) is folded into the start of the integer sum:
 * -8 * sum(a) per activation block, precomputed when packing.
 */
#include "ck_internal.h"
#include "ck_tiles.h"

#if CK_X86
#include <immintrin.h>

#define T512 CK_TARGET_AVX512
#define INL CK_INLINE

#define GB 16                 /* blocks per group: one per 32-bit lane */
#define GW_BYTES (GB * 18)    /* a group of Q4_0 weight blocks */
#define GA_BYTES (10 * 64)    /* a packed group of activations: 8 x 64 quants, bias, scales */
#define CMAX 8                /* activation rows per pass over a weight row */

/* Activation row -> groups of GA_BYTES:
 *   q[k]  (k = 0..7) 64 bytes: lane l = quants 4k..4k+3 of block l
 *   bias  16 x int32: -8 * sum of block l's quants
 *   d     16 x f32: block l's scale
 * Lanes past the last block are zero. */
T512 static void pack_g16(int64_t nb, const uint8_t *a, uint8_t *out) {
    const __m512i off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)sizeof(blk_q8_0)));
    for (int64_t b = 0; b < nb; b += GB, out += GA_BYTES) {
        const int64_t left = nb - b;
        const __mmask16 k = left >= GB ? 0xffff : (__mmask16)((1u << left) - 1);
        const uint8_t *p = a + b * sizeof(blk_q8_0);
        __m512i sum = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            const __m512i q = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k,
                                                          _mm512_add_epi32(off, _mm512_set1_epi32(2 + 4 * j)), p, 1);
            _mm512_store_si512(out + 64 * j, q);
            sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), q);
        }
        _mm512_store_si512(out + 512, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 3)));
        const __m512i h = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, off, p, 1);
        _mm512_store_ps(out + 576, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
    }
}

/* Word indexes into a 128-byte window holding 7 whole blocks (block i at word 9i): lane l
 * takes block l mod 7, so one index serves the three windows a group of 16 spans (blocks
 * 0-6, 7-13, 14-15). */
#define LANE_IDX(j)                                                                                   \
    _mm512_setr_epi32(                                                                                \
        (1 + 2 * (j)) | (2 + 2 * (j)) << 16, (10 + 2 * (j)) | (11 + 2 * (j)) << 16,                   \
        (19 + 2 * (j)) | (20 + 2 * (j)) << 16, (28 + 2 * (j)) | (29 + 2 * (j)) << 16,                 \
        (37 + 2 * (j)) | (38 + 2 * (j)) << 16, (46 + 2 * (j)) | (47 + 2 * (j)) << 16,                 \
        (55 + 2 * (j)) | (56 + 2 * (j)) << 16, (1 + 2 * (j)) | (2 + 2 * (j)) << 16,                   \
        (10 + 2 * (j)) | (11 + 2 * (j)) << 16, (19 + 2 * (j)) | (20 + 2 * (j)) << 16,                 \
        (28 + 2 * (j)) | (29 + 2 * (j)) << 16, (37 + 2 * (j)) | (38 + 2 * (j)) << 16,                 \
        (46 + 2 * (j)) | (47 + 2 * (j)) << 16, (55 + 2 * (j)) | (56 + 2 * (j)) << 16,                 \
        (1 + 2 * (j)) | (2 + 2 * (j)) << 16, (10 + 2 * (j)) | (11 + 2 * (j)) << 16)

/* Words 0-15: the scale of block l mod 7 (word 9 * (l mod 7)). */
#define SCALE_IDX                                                                                     \
    _mm512_setr_epi32(0 | 9 << 16, 18 | 27 << 16, 36 | 45 << 16, 54 | 0 << 16, 9 | 18 << 16,           \
                      27 | 36 << 16, 45 | 54 << 16, 0 | 9 << 16, 0, 0, 0, 0, 0, 0, 0, 0)

/* Words of the lanes (two per lane) that come from the second and third window. */
#define LANES_B 0x0fffc000u
#define LANES_C 0xf0000000u

/* Unpacks the group of Q4_0 blocks at p (`left` blocks remain in the row; a group of fewer
 * than 16 reads only those and leaves the other lanes zero): w[k] lane l = nibbles of quants
 * 4k..4k+3 of block l (unsigned), d lane l = its scale. */
T512 INL void unpack_g16(const uint8_t *p, int64_t left, __m512i w[8], __m512 *d) {
    __m512i L0, L1, L2, L3, L4;
    if (left >= GB) {
        L0 = _mm512_loadu_si512(p);
        L1 = _mm512_loadu_si512(p + 64);
        L2 = _mm512_loadu_si512(p + 126);
        L3 = _mm512_loadu_si512(p + 190);
        L4 = _mm512_maskz_loadu_epi16(0x3ffff, p + 252); /* the last 36 bytes */
    } else {
        /* words [s, s+32) of the group that lie in the row */
        const int64_t words = left * 9;
#define WMASK(s) (words <= (s) ? 0u : words - (s) >= 32 ? 0xffffffffu : (1u << (words - (s))) - 1)
        L0 = _mm512_maskz_loadu_epi16(WMASK(0), p);
        L1 = _mm512_maskz_loadu_epi16(WMASK(32), p + 64);
        L2 = _mm512_maskz_loadu_epi16(WMASK(63), p + 126);
        L3 = _mm512_maskz_loadu_epi16(WMASK(95), p + 190);
        L4 = _mm512_maskz_loadu_epi16(WMASK(126), p + 252);
#undef WMASK
    }
    const __m512i m4 = _mm512_set1_epi8(0x0f);
#define UNPACK_Q(j)                                                                                  \
    do {                                                                                             \
        const __m512i idx = LANE_IDX(j);                                                             \
        __m512i q = _mm512_permutex2var_epi16(L0, idx, L1);                                          \
        q = _mm512_mask_blend_epi16(LANES_B, q, _mm512_permutex2var_epi16(L2, idx, L3));             \
        q = _mm512_mask_permutexvar_epi16(q, LANES_C, idx, L4);                                      \
        w[j] = _mm512_and_si512(q, m4);                                                              \
        w[(j) + 4] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);                                  \
    } while (0)
    UNPACK_Q(0);
    UNPACK_Q(1);
    UNPACK_Q(2);
    UNPACK_Q(3);
#undef UNPACK_Q
    const __m512i sidx = SCALE_IDX;
    __m512i h = _mm512_permutex2var_epi16(L0, sidx, L1);
    h = _mm512_mask_blend_epi16(0x3f80, h, _mm512_permutex2var_epi16(L2, sidx, L3));
    h = _mm512_mask_permutexvar_epi16(h, 0xc000, sidx, L4);
    *d = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
}

/* One weight row (nb blocks at w) against C packed activation rows (a, stride as). */
T512 INL void row_g16(int C, int64_t nb, const uint8_t *w, const uint8_t *a, size_t as, const uint8_t *pf,
                      float *y, int64_t ldy) {
    __m512 acc[CMAX];
    for (int m = 0; m < C; m++) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += GB, w += GW_BYTES, a += GA_BYTES) {
        if (pf) {
            for (int o = 0; o < GW_BYTES; o += 64) _mm_prefetch((const char *)(pf + o), _MM_HINT_T0);
            pf += GW_BYTES;
        }
        __m512i wq[8];
        __m512 wd;
        unpack_g16(w, nb - b, wq, &wd);
        for (int m = 0; m < C; m++) {
            const uint8_t *pa = a + m * as;
            __m512i s = _mm512_load_si512(pa + 512);
            for (int k = 0; k < 8; k++) s = _mm512_dpbusd_epi32(s, wq[k], _mm512_load_si512(pa + 64 * k));
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wd, _mm512_load_ps(pa + 576)), acc[m]);
        }
    }
    for (int m = 0; m < C; m++) y[m * ldy] = _mm512_reduce_add_ps(acc[m]);
}

/* Rows of weights ahead that a row prefetches. */
#define PF_ROWS 2

T512 void ck_mm_q4_0_g16(int64_t n, const void *vw, size_t ws, int64_t r0, int64_t r1, const void *va, size_t as,
                         int64_t M, float *y, int64_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / QK, ng = (nb + GB - 1) / GB;
    const size_t ps = (size_t)ng * GA_BYTES;
    const int64_t chunk = (chunk_rows(ps) + CMAX - 1) / CMAX * CMAX, rows = M < chunk ? M : chunk;
    uint8_t *pk = ck_scratch(ps * (size_t)rows);
    if (!pk) {
        ck_matmul_scalar[CK_TYPE_Q4_0](n, vw, ws, r0, r1, va, as, M, y, ldy);
        return;
    }
    for (int64_t m0 = 0; m0 < M; m0 += chunk) {
        const int64_t m1 = m0 + chunk < M ? m0 + chunk : M;
        for (int64_t m = m0; m < m1; m++) pack_g16(nb, a + m * as, pk + (m - m0) * ps);
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *wr = w + r * ws;
            for (int64_t mm = m0; mm < m1; mm += CMAX) {
                const int64_t c = m1 - mm < CMAX ? m1 - mm : CMAX;
                const uint8_t *pf = mm == m0 && r + PF_ROWS < r1 ? wr + PF_ROWS * ws : NULL;
                const uint8_t *pa = pk + (mm - m0) * ps;
                float *yy = y + mm * ldy + r;
                switch (c) {
                case 8: row_g16(8, nb, wr, pa, ps, pf, yy, ldy); break;
                case 7: row_g16(7, nb, wr, pa, ps, pf, yy, ldy); break;
                case 6: row_g16(6, nb, wr, pa, ps, pf, yy, ldy); break;
                case 5: row_g16(5, nb, wr, pa, ps, pf, yy, ldy); break;
                case 4: row_g16(4, nb, wr, pa, ps, pf, yy, ldy); break;
                case 3: row_g16(3, nb, wr, pa, ps, pf, yy, ldy); break;
                case 2: row_g16(2, nb, wr, pa, ps, pf, yy, ldy); break;
                default: row_g16(1, nb, wr, pa, ps, pf, yy, ldy); break;
                }
            }
        }
    }
}
#endif
