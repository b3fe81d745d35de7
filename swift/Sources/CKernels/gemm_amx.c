/* gemm_amx.c — Q4_0 / Q5_0 / Q8_0 / IQ4_NL weights x Q8_0 activations, Q4_1 / Q5_1 x Q8_1 and
 * Q2_K / Q3_K / Q4_K / Q5_K / Q6_K / IQ4_XS x Q8_K on AMX tiles (int8), for prefill.
 *
 * The arithmetic is the AVX-512 kernels' and llama.cpp's: each sub-block's int8 x int8
 * products are summed exactly in int32, then scaled in float and added up sub-block by
 * sub-block; a Q2_K / Q4_K / Q5_K super-block's mins come off through its activations' quant sums,
 * and a Q4_1 / Q5_1 block's min m is added as m times its Q8_1 activation block's s.
 * So results differ from theirs only in float rounding order.
 *
 * The tile unit does the integer sums, 16 activation rows x 16 weight rows a sub-block
 * (tdpbssd). Each sub-block's sums go through memory (a tile store) to an AVX-512 epilogue:
 * convert, scale, FMA into 16 registers. Per-sub-block scales make that store unavoidable,
 * and with the register file holding one 16 x 16 tile of sums, each sub-block loads a tile of
 * each operand: on this machine's Sapphire Rapids cores the products run at ~1.3-1.5x (Q4_0) to
 * ~2.3-3.5x (the K types) the AVX-512 kernels, far from the tile unit's peak (bench/RESULTS.md).
 *
 * Operands (per sub-block of V values, a tile of 16 V bytes; scales beside them, see AUNIT):
 * - A, activations: 16 rows x V bytes. Packed once per call, MC rows at a time.
 * - B, weights in the VNNI layout: V/4 rows x 64 bytes, dword (j, n) = quants 4j..4j+3 of
 *   weight row n, signed. Packed for 16 weight rows and KC values at a time, then used by
 *   every activation tile.
 * Partial sums live in y between K-chunks.
 */
#include "ck_internal.h"

#if CK_AMX
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TAMX __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")))

#define KC 4096 /* values per K-chunk: partial sums go through y once per chunk (72 KiB panels) */
#define PF 2   /* activation sub-blocks ahead that are prefetched into L1 */
#define MC 512 /* activation rows packed at a time */

int ck_amx_request(void) {
    /* Linux gives a process the tile data state only when asked (arch_prctl, Linux 5.16+). */
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
}
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Tiles for sub-blocks of V values (32, or Q6_K's 16). */
TAMX static void load_config(int V) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 2; t++) { c.rows[t] = 16; c.colsb[t] = 64; }                     /* C: 16 x 16 int32 */
    for (int t = 2; t < 4; t++) { c.rows[t] = 16; c.colsb[t] = (uint16_t)V; }            /* A: 16 rows x V int8 */
    for (int t = 4; t < 6; t++) { c.rows[t] = (uint8_t)(V / 4); c.colsb[t] = 64; }       /* B: V/4 x (16 x 4) int8 */
    _tile_loadconfig(&c);
}

/* A type's units are S sub-blocks of V values: its blocks for the 32-value types (S = 1; Q4_1
 * and Q5_1 with mins, their activations Q8_1),
 * its super-blocks for Q4_K, Q5_K and IQ4_XS (S = 8, V = 32) and Q2_K, Q3_K and Q6_K (S = 16, V = 16). A sub-block
 * is a tile of T = 16 V bytes. Packed for a 16-row tile, a unit of activations is S A-tiles,
 * the rows' 16 scales and, for the types with mins, S x 16 floats scale x (the sub-block's
 * quant sum); a unit of weights is S B-tiles, S x 16 scales (d, or d x the sub-block's
 * scale) and, with mins, S x 16 of them (dmin x the sub-block's min). */
#define AUNIT(S, T, K) ((S) * (T) + 64 + ((K) ? (S) * 64 : 0))
#define BUNIT(S, T, K) ((S) * ((T) + 64) + ((K) ? (S) * 64 : 0))

/* Activation rows (`rows` <= 16 of them at stride as; Q8_0, or Q8_K for the K types) -> nu
 * packed units; rows past `rows` are zero. */
TAMX static void pack_acts(int S, int V, int mins, const uint8_t *a, size_t as, int rows, int64_t nu, uint8_t *out) {
    const int T = 16 * V;
    const size_t unit = AUNIT(S, T, mins);
    memset(out, 0, unit * (size_t)nu);
    for (int64_t u = 0; u < nu; u++, out += unit) {
        float *d = (float *)(out + T * S), *dsum = d + 16;
        for (int m = 0; m < rows; m++) {
            if (S == 1 && mins) {
                /* Q8_1: the block's s = d x sum(qs), as llama.cpp's kernels take it (float16) */
                const blk_q8_1 *blk = (const blk_q8_1 *)(a + m * as) + u;
                _mm256_store_si256((__m256i *)(out + 32 * m), _mm256_loadu_si256((const __m256i *)blk->qs));
                d[m] = ck_h2f(blk->d);
                dsum[m] = ck_h2f(blk->s);
                continue;
            }
            if (S == 1) {
                const blk_q8_0 *blk = (const blk_q8_0 *)(a + m * as) + u;
                _mm256_store_si256((__m256i *)(out + 32 * m), _mm256_loadu_si256((const __m256i *)blk->qs));
                d[m] = ck_h2f(blk->d);
                continue;
            }
            const blk_q8_K *blk = (const blk_q8_K *)(a + m * as) + u;
            for (int j = 0; j < S; j++) {
                if (V == 32) _mm256_store_si256((__m256i *)(out + T * j + 32 * m), _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * j)));
                else _mm_store_si128((__m128i *)(out + T * j + 16 * m), _mm_loadu_si128((const __m128i *)(blk->qs + 16 * j)));
                if (mins) dsum[16 * j + m] = blk->d * (float)(V == 32 ? blk->bsums[2 * j] + blk->bsums[2 * j + 1] : blk->bsums[j]);
            }
            d[m] = blk->d;
        }
    }
}

/* Q5_0 / Q5_1: bits s..s+3 of each lane's qh dword, one to a byte, as 16 (the quants' fifth
 * bits): x * 0x204081 moves bit t of a 4-bit x to bit 8t. */
TAMX static inline __m512i fifth_bits(__m512i qh, int s) {
    const __m512i x = _mm512_and_si512(_mm512_srli_epi32(qh, s), _mm512_set1_epi32(0xf));
    return _mm512_slli_epi32(_mm512_and_si512(_mm512_mullo_epi32(x, _mm512_set1_epi32(0x00204081)), _mm512_set1_epi8(1)), 4);
}

/* Weight rows w (R <= 16 of them at stride ws), units [0, nu) -> packed units. Lanes of rows
 * past R are left out of the gathers: their scales are 0 and their columns are not stored. */
TAMX static void pack_weights(int type, const uint8_t *w, size_t ws, int R, int64_t nu, uint8_t *out) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)ws));
    const __mmask16 k = (__mmask16)((1u << R) - 1);
    const __m512i z = _mm512_setzero_si512(), m4 = _mm512_set1_epi8(0x0f);
    if (type == CK_TYPE_Q4_0) {
        const __m512i eight = _mm512_set1_epi8(8);
        for (int64_t u = 0; u < nu; u++, out += BUNIT(1, 512, 0), w += sizeof(blk_q4_0)) {
            for (int j = 0; j < 4; j++) {
                /* quants 4j..4j+3 are the low nibbles of bytes 4j..4j+3, 16+4j.. their high ones */
                const __m512i q = _mm512_mask_i32gather_epi32(z, k, idx, w + 2 + 4 * j, 1);
                _mm512_store_si512(out + 64 * j, _mm512_sub_epi8(_mm512_and_si512(q, m4), eight));
                _mm512_store_si512(out + 64 * (j + 4), _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), eight));
            }
            const __m512i h = _mm512_mask_i32gather_epi32(z, k, idx, w, 1);
            _mm512_store_ps(out + 512, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
        }
    } else if (type == CK_TYPE_Q5_0 || type == CK_TYPE_IQ4_NL) {
        /* Q5_0: quant j's fifth bit is bit j of qh, as 16; IQ4_NL: a nibble indexes the levels */
        const int q5 = type == CK_TYPE_Q5_0;
        const size_t wb = q5 ? sizeof(blk_q5_0) : sizeof(blk_iq4_nl), qs = q5 ? offsetof(blk_q5_0, qs) : offsetof(blk_iq4_nl, qs);
        const __m512i levels = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ck_kvalues_iq4nl));
        const __m512i sixteen = _mm512_set1_epi8(16);
        for (int64_t u = 0; u < nu; u++, out += BUNIT(1, 512, 0), w += wb) {
            const __m512i h = q5 ? _mm512_mask_i32gather_epi32(z, k, idx, w + offsetof(blk_q5_0, qh), 1) : z;
            for (int j = 0; j < 4; j++) {
                const __m512i q = _mm512_mask_i32gather_epi32(z, k, idx, w + qs + 4 * j, 1);
                __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
                if (q5) {
                    /* quants 4j.. take bits 4j.. of qh, the high nibbles' 16+4j.. */
                    lo = _mm512_sub_epi8(_mm512_or_si512(lo, fifth_bits(h, 4 * j)), sixteen);
                    hi = _mm512_sub_epi8(_mm512_or_si512(hi, fifth_bits(h, 16 + 4 * j)), sixteen);
                } else {
                    lo = _mm512_shuffle_epi8(levels, lo);
                    hi = _mm512_shuffle_epi8(levels, hi);
                }
                _mm512_store_si512(out + 64 * j, lo);
                _mm512_store_si512(out + 64 * (j + 4), hi);
            }
            const __m512i d = _mm512_mask_i32gather_epi32(z, k, idx, w, 1);
            _mm512_store_ps(out + 512, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
        }
    } else if (type == CK_TYPE_Q4_1 || type == CK_TYPE_Q5_1) {
        /* Q4_0's and Q5_0's quants without the offset (0..15, 0..31: x = d q + m); d and m in
         * the block's first dword; the min stored negated (scale_add subtracts mins) */
        const int q5 = type == CK_TYPE_Q5_1;
        const size_t wb = q5 ? sizeof(blk_q5_1) : sizeof(blk_q4_1), qs = q5 ? offsetof(blk_q5_1, qs) : offsetof(blk_q4_1, qs);
        for (int64_t u = 0; u < nu; u++, out += BUNIT(1, 512, 1), w += wb) {
            const __m512i h = q5 ? _mm512_mask_i32gather_epi32(z, k, idx, w + offsetof(blk_q5_1, qh), 1) : z;
            for (int j = 0; j < 4; j++) {
                const __m512i q = _mm512_mask_i32gather_epi32(z, k, idx, w + qs + 4 * j, 1);
                __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
                if (q5) {
                    lo = _mm512_or_si512(lo, fifth_bits(h, 4 * j));
                    hi = _mm512_or_si512(hi, fifth_bits(h, 16 + 4 * j));
                }
                _mm512_store_si512(out + 64 * j, lo);
                _mm512_store_si512(out + 64 * (j + 4), hi);
            }
            const __m512i dm = _mm512_mask_i32gather_epi32(z, k, idx, w, 1);
            _mm512_store_ps(out + 512, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm)));
            _mm512_store_ps(out + 576, _mm512_sub_ps(_mm512_setzero_ps(), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)))));
        }
    } else if (type == CK_TYPE_Q8_0) {
        for (int64_t u = 0; u < nu; u++, out += BUNIT(1, 512, 0), w += sizeof(blk_q8_0)) {
            for (int j = 0; j < 8; j++)
                _mm512_store_si512(out + 64 * j, _mm512_mask_i32gather_epi32(z, k, idx, w + 2 + 4 * j, 1));
            const __m512i h = _mm512_mask_i32gather_epi32(z, k, idx, w, 1);
            _mm512_store_ps(out + 512, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
        }
    } else if (type == CK_TYPE_IQ4_XS) {
        /* Sub-block ib's quants j and 16 + j (j < 16) are the low and high nibbles of
         * qs[16 ib + j], levels as IQ4_NL's; its scale is d x (its 6-bit scale - 32). */
        const __m512i levels = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ck_kvalues_iq4nl));
        for (int64_t u = 0; u < nu; u++, out += BUNIT(8, 512, 0), w += sizeof(blk_iq4_xs)) {
            for (int ib = 0; ib < 8; ib++)
                for (int j = 0; j < 4; j++) {
                    const __m512i q = _mm512_mask_i32gather_epi32(z, k, idx, w + offsetof(blk_iq4_xs, qs) + 16 * ib + 4 * j, 1);
                    _mm512_store_si512(out + 512 * ib + 64 * j, _mm512_shuffle_epi8(levels, _mm512_and_si512(q, m4)));
                    _mm512_store_si512(out + 512 * ib + 64 * (j + 4), _mm512_shuffle_epi8(levels, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4)));
                }
            float *sc = (float *)(out + 8 * 512);
            for (int n = 0; n < 16; n++) {
                const blk_iq4_xs *x = (const blk_iq4_xs *)(w + n * ws);
                const float d = n < R ? ck_h2f(x->d) : 0;
                for (int ib = 0; ib < 8; ib++) sc[16 * ib + n] = n < R ? d * (float)ck_iq4xs_scale(x->scales_l, x->scales_h, ib) : 0;
            }
        }
    } else if (type == CK_TYPE_Q3_K) {
        /* Value 32c + l (l < 32) of half h: bits 2c..2c+1 of qs[32h + l], minus 4 unless bit
         * 4h + c of hmask[l] is set; sub-block (16 values) 8h + 2c + l / 16, its scale d x
         * ck_q3k_scale. */
        const __m512i m3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1), four = _mm512_set1_epi8(4);
        for (int64_t u = 0; u < nu; u++, out += BUNIT(16, 256, 0), w += sizeof(blk_q3_K)) {
            for (int h = 0; h < 2; h++)
                for (int l0 = 0; l0 < 32; l0 += 4) {
                    const __m512i q = _mm512_mask_i32gather_epi32(z, k, idx, w + offsetof(blk_q3_K, qs) + 32 * h + l0, 1);
                    const __m512i hm = _mm512_mask_i32gather_epi32(z, k, idx, w + offsetof(blk_q3_K, hmask) + l0, 1);
                    for (int c = 0; c < 4; c++) {
                        const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(q, 2 * c), m3);
                        const __m512i hb = _mm512_and_si512(_mm512_srli_epi16(hm, 4 * h + c), one);
                        const int sb = 8 * h + 2 * c + l0 / 16;
                        _mm512_store_si512(out + 256 * sb + 64 * ((l0 % 16) / 4),
                                           _mm512_sub_epi8(_mm512_or_si512(lo, _mm512_slli_epi16(hb, 2)), four));
                    }
                }
            float *sc = (float *)(out + 16 * 256);
            for (int n = 0; n < 16; n++) {
                const blk_q3_K *x = (const blk_q3_K *)(w + n * ws);
                const float d = n < R ? ck_h2f(x->d) : 0;
                for (int j = 0; j < 16; j++) sc[16 * j + n] = n < R ? d * (float)ck_q3k_scale(x->scales, j) : 0;
            }
        }
    } else if (type == CK_TYPE_Q2_K) {
        /* Q3_K's low bits alone: value 32c + l (l < 32) of half h is bits 2c..2c+1 of qs[32h + l]
         * (0..3), sub-block 8h + 2c + l / 16; its scale d x (scales[j] & 15), its min dmin x
         * (scales[j] >> 4), subtracted */
        const __m512i m3 = _mm512_set1_epi8(3);
        for (int64_t u = 0; u < nu; u++, out += BUNIT(16, 256, 1), w += sizeof(blk_q2_K)) {
            for (int h = 0; h < 2; h++)
                for (int l0 = 0; l0 < 32; l0 += 4) {
                    const __m512i q = _mm512_mask_i32gather_epi32(z, k, idx, w + offsetof(blk_q2_K, qs) + 32 * h + l0, 1);
                    for (int c = 0; c < 4; c++)
                        _mm512_store_si512(out + 256 * (8 * h + 2 * c + l0 / 16) + 64 * ((l0 % 16) / 4), _mm512_and_si512(_mm512_srli_epi16(q, 2 * c), m3));
                }
            float *sc = (float *)(out + 16 * 256), *mn = sc + 16 * 16;
            for (int n = 0; n < 16; n++) {
                const blk_q2_K *x = (const blk_q2_K *)(w + n * ws);
                const float d = n < R ? ck_h2f(x->d) : 0, dmin = n < R ? ck_h2f(x->dmin) : 0;
                for (int j = 0; j < 16; j++) {
                    sc[16 * j + n] = d * (float)(x->scales[j] & 15);
                    mn[16 * j + n] = dmin * (float)(x->scales[j] >> 4);
                }
            }
        }
    } else if (type == CK_TYPE_Q6_K) {
        /* Value 32c + l (l < 32) of half h: the low (c < 2) or high nibble of ql[64h + 32(c % 2) +
         * l] and bits 2c..2c+1 of qh[32h + l], minus 32; sub-block (16 values) 8h + 2c + l / 16. */
        const __m512i m3 = _mm512_set1_epi8(3), k32 = _mm512_set1_epi8(32);
        for (int64_t u = 0; u < nu; u++, out += BUNIT(16, 256, 0), w += sizeof(blk_q6_K)) {
            for (int h = 0; h < 2; h++)
                for (int l0 = 0; l0 < 32; l0 += 4) {
                    const __m512i qh = _mm512_mask_i32gather_epi32(z, k, idx, w + offsetof(blk_q6_K, qh) + 32 * h + l0, 1);
                    for (int c = 0; c < 4; c++) {
                        __m512i q = _mm512_mask_i32gather_epi32(z, k, idx, w + 64 * h + 32 * (c % 2) + l0, 1);
                        if (c >= 2) q = _mm512_srli_epi16(q, 4);
                        q = _mm512_or_si512(_mm512_and_si512(q, m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi32(qh, 2 * c), m3), 4));
                        const int sb = 8 * h + 2 * c + l0 / 16;
                        _mm512_store_si512(out + 256 * sb + 64 * ((l0 % 16) / 4), _mm512_sub_epi8(q, k32));
                    }
                }
            float *sc = (float *)(out + 16 * 256);
            for (int n = 0; n < 16; n++) {
                const blk_q6_K *x = (const blk_q6_K *)(w + n * ws);
                const float d = n < R ? ck_h2f(x->d) : 0;
                for (int j = 0; j < 16; j++) sc[16 * j + n] = n < R ? d * (float)x->scales[j] : 0;
            }
        }
    } else {
        /* Q4_K, Q5_K: sub-blocks 2i and 2i+1 are the low and high nibbles of qs[32i..32i+31];
         * Q5_K adds bit 2i (2i+1) of qh[l] as 16 to value l of sub-block 2i (2i+1). */
        const int q5 = type == CK_TYPE_Q5_K;
        const size_t wb = q5 ? sizeof(blk_q5_K) : sizeof(blk_q4_K), qs = q5 ? offsetof(blk_q5_K, qs) : offsetof(blk_q4_K, qs);
        const __m512i one = _mm512_set1_epi8(1);
        for (int64_t u = 0; u < nu; u++, out += BUNIT(8, 512, 1), w += wb) {
            for (int jj = 0; jj < 8; jj++) {
                const __m512i h = q5 ? _mm512_mask_i32gather_epi32(z, k, idx, w + offsetof(blk_q5_K, qh) + 4 * jj, 1) : z;
                for (int i = 0; i < 4; i++) {
                    const __m512i q = _mm512_mask_i32gather_epi32(z, k, idx, w + qs + 32 * i + 4 * jj, 1);
                    __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
                    if (q5) {
                        lo = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi32(h, 2 * i), one), 4));
                        hi = _mm512_or_si512(hi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi32(h, 2 * i + 1), one), 4));
                    }
                    _mm512_store_si512(out + 512 * (2 * i) + 64 * jj, lo);
                    _mm512_store_si512(out + 512 * (2 * i + 1) + 64 * jj, hi);
                }
            }
            float *sc = (float *)(out + 8 * 512), *mn = sc + 8 * 16;
            for (int n = 0; n < 16; n++) {
                uint8_t s8[8] = {0}, m8[8] = {0};
                float d = 0, dmin = 0;
                if (n < R) {
                    const blk_q4_K *x = (const blk_q4_K *)(w + n * ws); /* Q5_K starts the same way */
                    ck_kscales(x->scales, s8, m8);
                    d = ck_h2f(x->d);
                    dmin = ck_h2f(x->dmin);
                }
                for (int j = 0; j < 8; j++) {
                    sc[16 * j + n] = d * (float)s8[j];
                    mn[16 * j + n] = dmin * (float)m8[j];
                }
            }
        }
    }
}

/* acc[m] += float(c[m]) * da[m] * dw: sub-block j's sums, scaled; after the last sub-block
 * of a unit with mins, those: acc[m] -= sum over j of min_j * da[m] * (sub-block j's quant sum). */
TAMX static inline __attribute__((always_inline)) void scale_add(int S, int T, int mins, const int32_t *c, const uint8_t *au,
                                                                  const uint8_t *bu, int j, __m512 acc[16]) {
    const float *da = (const float *)(au + T * S);
    const __m512 dw = _mm512_load_ps(bu + T * S + 64 * j);
    for (int m = 0; m < 16; m++)
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * m)), _mm512_mul_ps(dw, _mm512_set1_ps(da[m])), acc[m]);
    if (mins && j == S - 1)
        for (int jj = 0; jj < S; jj++) {
            const __m512 mn = _mm512_load_ps(bu + (T + 64) * S + 64 * jj);
            const float *dsum = da + 16 + 16 * jj;
            for (int m = 0; m < 16; m++) acc[m] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(dsum[m]), acc[m]);
        }
}

/* A sub-block's tile (T bytes) and the line after it into L1: activation tiles come from L2.
 * Measured gains were small (bench/RESULTS.md); it costs a few instructions a sub-block. */
TAMX static inline __attribute__((always_inline)) void prefetch_tile(const uint8_t *p, int T) {
    for (int o = 0; o < T + 64; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* One activation tile (ap: its packed units) x one weight panel (bp) over a K-chunk of nsub
 * sub-blocks, added to y's `rows` x 16 (columns `cols`) partial sums, or stored there when
 * `first`. `next` is the activation tile read after this one (prefetched as this one ends). */
TAMX static inline __attribute__((always_inline)) void tile_chunk(int S, int V, int mins, int64_t nsub, const uint8_t *ap,
                                                                   const uint8_t *next, const uint8_t *bp, float *y,
                                                                   int64_t ldy, int rows, __mmask16 cols, int first) {
    const int T = 16 * V;
    const size_t au = AUNIT(S, T, mins), bu = BUNIT(S, T, mins);
#define A_TILE(base, b) ((base) + ((b) / S) * au + ((b) % S) * T)
#define B_TILE(b) (bp + ((b) / S) * bu + ((b) % S) * T)
    __m512 acc[16];
    for (int m = 0; m < 16; m++) acc[m] = first || m >= rows ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(cols, y + m * ldy);
    /* Step b issues sub-block b's product, stores b - 1's sums and scales b - 2's, so that no
     * step waits on the one before. Even sub-blocks take tiles 0, 2, 4 and c[0]. */
    _Alignas(64) int32_t c[2][256];
    for (int64_t b = 0; b < nsub + 2; b++) {
        if (b + PF < nsub) prefetch_tile(A_TILE(ap, b + PF), T);
        else if (b < nsub) prefetch_tile(A_TILE(next, b + PF - nsub), T);
        if (b & 1) {
            if (b < nsub) {
                _tile_zero(1);
                _tile_loadd(3, A_TILE(ap, b), V);
                _tile_loadd(5, B_TILE(b), 64);
                _tile_dpbssd(1, 3, 5);
            }
            if (b <= nsub) _tile_stored(0, c[0], 64);
        } else {
            if (b < nsub) {
                _tile_zero(0);
                _tile_loadd(2, A_TILE(ap, b), V);
                _tile_loadd(4, B_TILE(b), 64);
                _tile_dpbssd(0, 2, 4);
            }
            if (b >= 1 && b <= nsub) _tile_stored(1, c[1], 64);
        }
        if (b >= 2) scale_add(S, T, mins, c[b & 1], ap + ((b - 2) / S) * au, bp + ((b - 2) / S) * bu, (int)((b - 2) % S), acc);
    }
#undef A_TILE
#undef B_TILE
    for (int m = 0; m < rows; m++) _mm512_mask_storeu_ps(y + m * ldy, cols, acc[m]);
}

/* The six layouts, each compiled on its own. */
#define TILE_CHUNK(NAME, S, V, MINS)                                                                                 \
    TAMX static void NAME(int64_t nsub, const uint8_t *ap, const uint8_t *next, const uint8_t *bp, float *y, int64_t ldy, \
                          int rows, __mmask16 cols, int first) {                                                      \
        tile_chunk(S, V, MINS, nsub, ap, next, bp, y, ldy, rows, cols, first);                                         \
    }
TILE_CHUNK(tile_chunk_q32, 1, 32, 0)
TILE_CHUNK(tile_chunk_q32m, 1, 32, 1)
TILE_CHUNK(tile_chunk_k32, 8, 32, 1)
TILE_CHUNK(tile_chunk_k32n, 8, 32, 0)
TILE_CHUNK(tile_chunk_k16, 16, 16, 0)
TILE_CHUNK(tile_chunk_k16m, 16, 16, 1)

/* Returns 0 (nothing written) when out of memory. */
TAMX static int mm_amx(int type, int64_t n, const void *vw, size_t ws, int64_t r0, int64_t r1, const void *va, size_t as,
                       int64_t M, float *y, int64_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int kmins = type == CK_TYPE_Q4_K || type == CK_TYPE_Q5_K;
    const int v16 = type == CK_TYPE_Q6_K || type == CK_TYPE_Q3_K || type == CK_TYPE_Q2_K;
    const int mins = kmins || type == CK_TYPE_Q4_1 || type == CK_TYPE_Q5_1 || type == CK_TYPE_Q2_K;
    const int S = v16 ? 16 : kmins || type == CK_TYPE_IQ4_XS ? 8 : 1;
    const int V = v16 ? 16 : 32, kc = KC / (S * V), T = 16 * V;
    const size_t au = AUNIT(S, T, mins), bu = BUNIT(S, T, mins);
    const size_t wb = ck_row_size(type, S * V); /* a unit is one block of the type */
    const int64_t nu = n / (V * S), mc = M < MC ? M : MC, nmt = (mc + 15) / 16;
    uint8_t *acts = ck_scratch((size_t)(nmt * nu) * au + (size_t)kc * bu);
    if (!acts) return 0;
    uint8_t *panel = acts + (size_t)(nmt * nu) * au;
    load_config(V);
    for (int64_t m0 = 0; m0 < M; m0 += MC) {
        const int64_t mrows = M - m0 < MC ? M - m0 : MC, tiles = (mrows + 15) / 16;
        for (int64_t t = 0; t < tiles; t++) {
            const int64_t left = mrows - 16 * t;
            pack_acts(S, V, mins, a + (m0 + 16 * t) * as, as, left < 16 ? (int)left : 16, nu, acts + (size_t)(t * nu) * au);
        }
        for (int64_t ku = 0; ku < nu; ku += kc) {
            const int64_t nku = nu - ku < kc ? nu - ku : kc;
            for (int64_t r = r0; r < r1; r += 16) {
                const int R = r1 - r < 16 ? (int)(r1 - r) : 16;
                pack_weights(type, w + r * ws + ku * wb, ws, R, nku, panel);
                for (int64_t t = 0; t < tiles; t++) {
                    const int64_t left = mrows - 16 * t;
                    const uint8_t *at = acts + (size_t)(t * nu + ku) * au;
                    const uint8_t *next = t + 1 < tiles ? at + nu * au : acts + (size_t)ku * au;
                    float *yt = y + (m0 + 16 * t) * ldy + r;
                    const int rows = left < 16 ? (int)left : 16;
                    const __mmask16 cols = (__mmask16)((1u << R) - 1);
                    if (S == 1 && mins) tile_chunk_q32m(nku, at, next, panel, yt, ldy, rows, cols, ku == 0);
                    else if (S == 1) tile_chunk_q32(nku, at, next, panel, yt, ldy, rows, cols, ku == 0);
                    else if (V == 32 && mins) tile_chunk_k32(nku * S, at, next, panel, yt, ldy, rows, cols, ku == 0);
                    else if (V == 32) tile_chunk_k32n(nku * S, at, next, panel, yt, ldy, rows, cols, ku == 0);
                    else if (mins) tile_chunk_k16m(nku * S, at, next, panel, yt, ldy, rows, cols, ku == 0);
                    else tile_chunk_k16(nku * S, at, next, panel, yt, ldy, rows, cols, ku == 0);
                }
            }
        }
    }
    _tile_release();
    return 1;
}

/* From AMX_MIN_M activation rows on (prefill); fewer take the level below (the AVX-512 kernels,
 * or AVX2's for the types they leave out), which read each weight once without packing it
 * (decode, small batches). */
#define AMX_MIN_M 16

#define AMX_MATMUL(NAME, TYPE)                                                                                       \
    static void NAME(int64_t n, const void *w, size_t ws, int64_t r0, int64_t r1, const void *a, size_t as, int64_t M, \
                     float *y, int64_t ldy) {                                                                          \
        if (M < AMX_MIN_M || !mm_amx(TYPE, n, w, ws, r0, r1, a, as, M, y, ldy))                                        \
            ck_table_at(CK_ISA_AVX512)->matmul[TYPE](n, w, ws, r0, r1, a, as, M, y, ldy);                              \
    }
AMX_MATMUL(mm_q4_0, CK_TYPE_Q4_0)
AMX_MATMUL(mm_q4_1, CK_TYPE_Q4_1)
AMX_MATMUL(mm_q5_1, CK_TYPE_Q5_1)
AMX_MATMUL(mm_q5_0, CK_TYPE_Q5_0)
AMX_MATMUL(mm_q8_0, CK_TYPE_Q8_0)
AMX_MATMUL(mm_iq4_nl, CK_TYPE_IQ4_NL)
AMX_MATMUL(mm_q4_K, CK_TYPE_Q4_K)
AMX_MATMUL(mm_q5_K, CK_TYPE_Q5_K)
AMX_MATMUL(mm_q6_K, CK_TYPE_Q6_K)
AMX_MATMUL(mm_iq4_xs, CK_TYPE_IQ4_XS)
AMX_MATMUL(mm_q3_K, CK_TYPE_Q3_K)
AMX_MATMUL(mm_q2_K, CK_TYPE_Q2_K)

/* The float types keep the AVX-512 kernels. */
const ck_matmul_fn ck_matmul_amx[CK_NTYPES] = {
    [CK_TYPE_Q4_0] = mm_q4_0, [CK_TYPE_Q4_1] = mm_q4_1, [CK_TYPE_Q5_0] = mm_q5_0, [CK_TYPE_Q5_1] = mm_q5_1, [CK_TYPE_Q8_0] = mm_q8_0, [CK_TYPE_IQ4_NL] = mm_iq4_nl,
    [CK_TYPE_Q4_K] = mm_q4_K, [CK_TYPE_Q5_K] = mm_q5_K, [CK_TYPE_Q6_K] = mm_q6_K, [CK_TYPE_IQ4_XS] = mm_iq4_xs,
    [CK_TYPE_Q3_K] = mm_q3_K, [CK_TYPE_Q2_K] = mm_q2_K,
};
#endif
