/* gemm_avx512.c — Q4_0 weights x Q8_0 activations for 2 or more activation rows (AVX-512 VNNI).
 *
 * The tiles of dot_avx512.c give each 32-element block 8 int32 lanes of a register, so every
 * block costs an int->float conversion and two FMAs on top of its one vpdpbusd (per two
 * blocks). Here a lane is a whole block instead: 16 blocks of a row sit in the 16 lanes of 8
 * registers (register k, lane l = quants 4k..4k+3 of block b(l) of the group), so 8 vpdpbusd
 * sum 16 complete blocks, and one conversion, one multiply (weight scale x activation scale)
 * and one FMA scale all 16. The offset of the Q4_0 quants (nibble - 8) is folded into the
 * start of the integer sum: -8 * sum(a) per activation block, precomputed when packing.
 *
 * Activation rows are transposed into that layout once per call (pack_g16); weight rows with
 * dword permutes and an in-register transpose (unpack_g16). Up to SMALL_M activation rows, a
 * weight row is unpacked into registers and used for all of them (row_g16). From there on,
 * RT weight rows are unpacked into a scratch that stays in L1 and the tile runs RT x CT
 * integer sums (tile_g16), so each activation load feeds RT vpdpbusd and each weight load CT:
 * with one weight row against many activation rows, loads (about one 64-byte load per cycle
 * here), not arithmetic, were the limit.
 */
#include "ck_internal.h"
#include "ck_tiles.h"

#if CK_X86
#include <immintrin.h>

#define T512 CK_TARGET_AVX512
#define INL CK_INLINE

#define GB 16                /* blocks per group: one per 32-bit lane */
#define GW_BYTES (GB * 18)   /* a group of Q4_0 weight blocks */
#define GA_BYTES (10 * 64)   /* a packed group of activations: 8 x 64 quants, bias, scales */
#define GU_BYTES (9 * 64)    /* an unpacked group of weights: 8 x 64 quants, scales */
#define RT 4                 /* weight rows per tile */
#define CT 3                 /* activation rows per tile (at most) */
#define PFT 2                /* row tiles ahead that unpack_row prefetches */
#define SMALL_M 4            /* up to this many activation rows: one weight row at a time, in registers */
/* Packed activation rows a chunk holds, in bytes. Every chunk unpacks and reads every weight
 * row again, so a chunk is as large as L2 keeps beside the unpacked rows: at the 256 KiB of
 * the other kernels (ck_tiles.h), Qwen2.5-7B's down product (K = 18944, 23.7 KB a packed row)
 * took 8 rows a chunk and read its weights 64 times a 512-token prefill; at 1 MiB, 12 times
 * (pp512 +25 %, bench/RESULTS.md). */
#define G16_CHUNK_BYTES (1024 * 1024)

/* Lane l holds block 4 * (l % 4) + l / 4 of the group (the order unpack_g16 produces). */
#define LANE_BLOCKS _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)

/* Activation row -> groups of GA_BYTES (b(l): LANE_BLOCKS):
 *   q[k]  (k = 0..7) 64 bytes: lane l = quants 4k..4k+3 of block b(l)
 *   bias  16 x int32: -8 * sum of block b(l)'s quants
 *   d     16 x f32: block b(l)'s scale
 * Lanes of blocks past the end of the row are zero. */
T512 static void pack_g16(int64_t nb, const uint8_t *a, uint8_t *out) {
    const __m512i lane = LANE_BLOCKS;
    const __m512i off = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)sizeof(blk_q8_0)));
    for (int64_t b = 0; b < nb; b += GB, out += GA_BYTES) {
        const int64_t left = nb - b;
        const __mmask16 k = _mm512_cmplt_epi32_mask(lane, _mm512_set1_epi32((int)(left < GB ? left : GB)));
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

/* Unpacks the group of Q4_0 blocks at p (`left` blocks remain in the row; a group of fewer
 * than 16 reads only those and leaves the other lanes zero): w[k] lane l = nibbles of quants
 * 4k..4k+3 of block b(l) = 4 * (l % 4) + l / 4 (unsigned), d lane l = its scale.
 * Blocks 4i..4i+3 take two loads: at 72i - 2, where the even blocks' quants are dword-aligned
 * (and all four scales lie), and at 72i + 20, for the odd ones. A dword permute per pair
 * gathers the four blocks' quants, one per 128-bit lane; an in-lane 4x4 transpose (8
 * unpacks) makes one register per dword of the blocks. Word permutes, twice as slow, only
 * gather the 16 scales. */
T512 INL void unpack_g16(const uint8_t *p, int64_t left, __m512i w[8], __m512 *d) {
    __m512i ta[4], tb[4];
    if (left >= GB) {
        ta[0] = _mm512_maskz_loadu_epi8(~3ull, p - 2); /* not the 2 bytes before the group */
        for (int i = 1; i < 4; i++) ta[i] = _mm512_loadu_si512(p + 72 * i - 2);
        for (int i = 0; i < 3; i++) tb[i] = _mm512_loadu_si512(p + 72 * i + 20);
        tb[3] = _mm512_maskz_loadu_epi8((1ull << 52) - 1, p + 236); /* not past the group */
    } else {
        /* bytes [o, o + 64) of the group, those in [0, left * 18) */
        const int64_t bytes = left * 18;
#define BMASK(o) ((bytes <= (o) ? 0ull : bytes - (o) >= 64 ? ~0ull : (1ull << (bytes - (o))) - 1) & ((o) < 0 ? ~0ull << -(o) : ~0ull))
        for (int i = 0; i < 4; i++) {
            ta[i] = _mm512_maskz_loadu_epi8(BMASK(72 * i - 2), p + 72 * i - 2);
            tb[i] = _mm512_maskz_loadu_epi8(BMASK(72 * i + 20), p + 72 * i + 20);
        }
#undef BMASK
    }
    /* z[i]: the 16 quant bytes of blocks 4i, 4i+1, 4i+2, 4i+3, one per 128-bit lane */
    const __m512i iz = _mm512_setr_epi32(1, 2, 3, 4, 16, 17, 18, 19, 10, 11, 12, 13, 25, 26, 27, 28);
    __m512i z[4];
    for (int i = 0; i < 4; i++) z[i] = _mm512_permutex2var_epi32(ta[i], iz, tb[i]);
    const __m512i u0 = _mm512_unpacklo_epi32(z[0], z[1]), u1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i u2 = _mm512_unpacklo_epi32(z[2], z[3]), u3 = _mm512_unpackhi_epi32(z[2], z[3]);
    const __m512i q[4] = {_mm512_unpacklo_epi64(u0, u2), _mm512_unpackhi_epi64(u0, u2),
                          _mm512_unpacklo_epi64(u1, u3), _mm512_unpackhi_epi64(u1, u3)};
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int j = 0; j < 4; j++) {
        w[j] = _mm512_and_si512(q[j], m4);
        w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(q[j], 4), m4);
    }
    /* scales: block 4i + c at word 1 + 9c of ta[i]; (ta[0], ta[1]) for lanes l % 4 < 2 */
    const __m512i is = _mm512_setr_epi32(1 | 33 << 16, 1 | 33 << 16, 10 | 42 << 16, 10 | 42 << 16,
                                         19 | 51 << 16, 19 | 51 << 16, 28 | 60 << 16, 28 | 60 << 16,
                                         0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i h = _mm512_mask_blend_epi16(0xcccc, _mm512_permutex2var_epi16(ta[0], is, ta[1]),
                                              _mm512_permutex2var_epi16(ta[2], is, ta[3]));
    *d = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
}

/* A weight row -> groups of GU_BYTES (unpack_g16's registers, then the scales). `pf`, when
 * set, is a row read later: its lines are prefetched alongside. */
T512 static void unpack_row(int64_t nb, const uint8_t *w, uint8_t *out, const uint8_t *pf) {
    for (int64_t b = 0; b < nb; b += GB, w += GW_BYTES, out += GU_BYTES) {
        if (pf) {
            for (int o = 0; o < GW_BYTES; o += 64) _mm_prefetch((const char *)(pf + o), _MM_HINT_T0);
            pf += GW_BYTES;
        }
        __m512i q[8];
        __m512 d;
        unpack_g16(w, nb - b, q, &d);
        for (int k = 0; k < 8; k++) _mm512_store_si512(out + 64 * k, q[k]);
        _mm512_store_ps(out + 512, d);
    }
}

/* Few activation rows: one weight row at a time, unpacked into registers and used for all C
 * (<= 4) activation rows. */
T512 INL void row_g16(int C, int64_t nb, const uint8_t *w, const uint8_t *a, size_t as, const uint8_t *pf,
                      float *y, int64_t ldy) {
    __m512 acc[4];
    for (int m = 0; m < C; m++) acc[m] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += GB, w += GW_BYTES, a += GA_BYTES) {
        if (pf) {
            for (int o = 0; o < GW_BYTES; o += 64) _mm_prefetch((const char *)(pf + o), _MM_HINT_T0);
            pf += GW_BYTES;
        }
        __m512i wq[8];
        __m512 wd;
        unpack_g16(w, nb - b, wq, &wd);
        __m512i s[4];
        for (int m = 0; m < C; m++) s[m] = _mm512_load_si512(a + m * as + 512);
        for (int k = 0; k < 8; k++)
            for (int m = 0; m < C; m++) s[m] = _mm512_dpbusd_epi32(s[m], wq[k], _mm512_load_si512(a + m * as + 64 * k));
        for (int m = 0; m < C; m++)
            acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[m]), _mm512_mul_ps(wd, _mm512_load_ps(a + m * as + 576)), acc[m]);
    }
    for (int m = 0; m < C; m++) y[m * ldy] = _mm512_reduce_add_ps(acc[m]);
}

/* The sums of the lanes of a, b, c, d. */
T512 INL __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    t = _mm512_add_ps(t, _mm512_permute_ps(t, 0x4e));
    t = _mm512_add_ps(t, _mm512_permute_ps(t, 0xb1));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), t));
}

/* R unpacked weight rows (wu, stride wus) x C packed activation rows (a, stride as), ng
 * groups: y[m*ldy + r]. */
T512 INL void tile_g16(int R, int C, int64_t ng, const uint8_t *wu, size_t wus, const uint8_t *a, size_t as,
                       float *y, int64_t ldy) {
    __m512 acc[RT][CT];
    for (int r = 0; r < R; r++)
        for (int m = 0; m < C; m++) acc[r][m] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++, wu += GU_BYTES, a += GA_BYTES) {
        __m512i s[RT][CT];
        for (int m = 0; m < C; m++) {
            const __m512i bias = _mm512_load_si512(a + m * as + 512);
            for (int r = 0; r < R; r++) s[r][m] = bias;
        }
        for (int k = 0; k < 8; k++) {
            __m512i wk[RT];
            for (int r = 0; r < R; r++) wk[r] = _mm512_load_si512(wu + r * wus + 64 * k);
            for (int m = 0; m < C; m++) {
                __m512i x = _mm512_load_si512(a + m * as + 64 * k);
                if (R > 1) __asm__("" : "+v"(x)); /* one load for the R rows, not one folded into each */
                for (int r = 0; r < R; r++) s[r][m] = _mm512_dpbusd_epi32(s[r][m], wk[r], x);
            }
        }
        __m512 dw[RT];
        for (int r = 0; r < R; r++) dw[r] = _mm512_load_ps(wu + r * wus + 512);
        for (int m = 0; m < C; m++) {
            const __m512 da = _mm512_load_ps(a + m * as + 576);
            for (int r = 0; r < R; r++)
                acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][m]), _mm512_mul_ps(dw[r], da), acc[r][m]);
        }
    }
    for (int m = 0; m < C; m++) {
        if (R == 4) _mm_storeu_ps(y + m * ldy, hsum4(acc[0][m], acc[1][m], acc[2][m], acc[3][m]));
        else
            for (int r = 0; r < R; r++) y[m * ldy + r] = _mm512_reduce_add_ps(acc[r][m]);
    }
}

/* Weight rows [r0, r1) (unpacked into wu, RT at a time) x packed activation rows [m0, m1)
 * (pk, stride ps), in tiles of up to CT activation rows, spread evenly (8 rows: 3 + 3 + 2). */
#define TILE_ROWS(R, ...)                                   \
    do {                                                    \
        const int64_t nm_ = m1 - m0, nt_ = (nm_ + CT - 1) / CT; \
        for (int64_t t_ = 0, m_ = m0; t_ < nt_; t_++) {     \
            const int64_t c_ = (nm_ - (m_ - m0)) / (nt_ - t_) + ((nm_ - (m_ - m0)) % (nt_ - t_) != 0); \
            const uint8_t *pa_ = pk + (m_ - m0) * ps;       \
            float *yy_ = y + m_ * ldy + r;                  \
            switch (c_) {                                   \
            case 3: tile_g16(R, 3, ng, wu, wus, pa_, ps, yy_, ldy); break; \
            case 2: tile_g16(R, 2, ng, wu, wus, pa_, ps, yy_, ldy); break; \
            default: tile_g16(R, 1, ng, wu, wus, pa_, ps, yy_, ldy); break; \
            }                                               \
            m_ += c_;                                       \
        }                                                   \
    } while (0)

T512 void ck_mm_q4_0_g16(int64_t n, const void *vw, size_t ws, int64_t r0, int64_t r1, const void *va, size_t as,
                         int64_t M, float *y, int64_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / QK, ng = (nb + GB - 1) / GB;
    const size_t ps = (size_t)ng * GA_BYTES, wus = (size_t)ng * GU_BYTES;
    const int64_t chunk = (int64_t)(G16_CHUNK_BYTES / ps) < 4 ? 4 : (int64_t)(G16_CHUNK_BYTES / ps) & ~(int64_t)3;
    const int64_t rows = M < chunk ? M : chunk;
    uint8_t *pk = ck_scratch(ps * (size_t)rows + wus * RT);
    if (!pk) {
        ck_matmul_scalar[CK_TYPE_Q4_0](n, vw, ws, r0, r1, va, as, M, y, ldy);
        return;
    }
    uint8_t *wu = pk + ps * (size_t)rows; /* ps is a multiple of 64: stays aligned */
    if (M <= SMALL_M) {
        for (int64_t m = 0; m < M; m++) pack_g16(nb, a + m * as, pk + m * ps);
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *wr = w + r * ws, *pf = r + 2 < r1 ? wr + 2 * ws : NULL;
            switch (M) {
            case 4: row_g16(4, nb, wr, pk, ps, pf, y + r, ldy); break;
            case 3: row_g16(3, nb, wr, pk, ps, pf, y + r, ldy); break;
            default: row_g16(2, nb, wr, pk, ps, pf, y + r, ldy); break;
            }
        }
        return;
    }
    for (int64_t m0 = 0; m0 < M; m0 += chunk) {
        const int64_t m1 = m0 + chunk < M ? m0 + chunk : M;
        for (int64_t m = m0; m < m1; m++) pack_g16(nb, a + m * as, pk + (m - m0) * ps);
        int64_t r = r0;
        for (; r + RT <= r1; r += RT) {
            for (int i = 0; i < RT; i++)
                unpack_row(nb, w + (r + i) * ws, wu + i * wus, PFT && r + PFT * RT + i < r1 ? w + (r + PFT * RT + i) * ws : NULL);
            TILE_ROWS(RT);
        }
        for (; r < r1; r++) {
            unpack_row(nb, w + r * ws, wu, NULL);
            TILE_ROWS(1);
        }
    }
}
#endif
