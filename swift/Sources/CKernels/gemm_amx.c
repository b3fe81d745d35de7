/* gemm_amx.c — Q4_0 and Q8_0 weights x Q8_0 activations on AMX tiles (int8), for prefill.
 *
 * The arithmetic is the AVX-512 kernels' and llama.cpp's: each 32-value block's int8 x int8
 * products are summed exactly in int32, then scaled by the two blocks' scales in float and
 * added up block by block. So results differ from theirs only in float summation order.
 *
 * The tile unit does the integer sums, 16 activation rows x 16 weight rows a block
 * (tdpbssd). Each block's sums go through memory (a tile store) to an AVX-512 epilogue:
 * convert, scale, FMA into 16 registers. Per-block scales make that store unavoidable, and
 * with the register file holding one 16 x 16 tile of sums, each block loads a tile of each
 * operand: on this machine's Sapphire Rapids cores that runs ~1.5-2x the AVX-512 VNNI kernel,
 * not the tile unit's peak (bench/RESULTS.md).
 *
 * Operands (a packed block, PB bytes: a 512-byte tile, then 16 float scales):
 * - A, activations: 16 rows x 32 bytes. Packed once per call, MC rows at a time.
 * - B, weights in the VNNI layout: 8 rows x 64 bytes, dword (j, n) = quants 4j..4j+3 of weight
 *   row n, signed. Packed for 16 weight rows and KC blocks at a time, then used by every
 *   activation tile.
 * Partial sums live in y between K-chunks.
 */
#include "ck_internal.h"

#if CK_AMX
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TAMX __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")))

#define PB 576 /* a packed block: 16 x 32 int8 (A) or 8 x 64 int8 (B), then 16 floats */
#define KC 128 /* blocks per K-chunk: partial sums go through y once per chunk (72 KiB panels) */
#define PF 2   /* activation blocks ahead that are prefetched into L1 */
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

TAMX static void load_config(void) {
    tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 2; t++) { c.rows[t] = 16; c.colsb[t] = 64; }     /* C: 16 x 16 int32 */
    for (int t = 2; t < 4; t++) { c.rows[t] = 16; c.colsb[t] = 32; }     /* A: 16 rows x 32 int8 */
    for (int t = 4; t < 6; t++) { c.rows[t] = 8; c.colsb[t] = 64; }      /* B: 8 x (16 x 4) int8 */
    _tile_loadconfig(&c);
}

/* Activation rows (Q8_0, `rows` <= 16 of them at stride as) -> nb packed A blocks; rows past
 * `rows` are zero. */
TAMX static void pack_acts(const uint8_t *a, size_t as, int rows, int64_t nb, uint8_t *out) {
    for (int64_t b = 0; b < nb; b++, out += PB) {
        float *d = (float *)(out + 512);
        for (int m = 0; m < 16; m++) {
            if (m < rows) {
                const blk_q8_0 *blk = (const blk_q8_0 *)(a + m * as) + b;
                _mm256_store_si256((__m256i *)(out + 32 * m), _mm256_loadu_si256((const __m256i *)blk->qs));
                d[m] = ck_h2f(blk->d);
            } else {
                _mm256_store_si256((__m256i *)(out + 32 * m), _mm256_setzero_si256());
                d[m] = 0;
            }
        }
    }
}

/* Weight rows w (R <= 16 of them at stride ws), blocks [0, nb) -> packed B blocks. Lanes of
 * rows past R are left out of the gathers: their scale is 0 and their columns are not stored. */
TAMX static void pack_weights(int type, const uint8_t *w, size_t ws, int R, int64_t nb, uint8_t *out) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)ws));
    const __mmask16 k = (__mmask16)((1u << R) - 1);
    const __m512i z = _mm512_setzero_si512();
    if (type == CK_TYPE_Q4_0) {
        const __m512i m4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
        for (int64_t b = 0; b < nb; b++, out += PB, w += sizeof(blk_q4_0)) {
            for (int j = 0; j < 4; j++) {
                /* quants 4j..4j+3 are the low nibbles of bytes 4j..4j+3, 16+4j.. their high ones */
                const __m512i q = _mm512_mask_i32gather_epi32(z, k, idx, w + 2 + 4 * j, 1);
                _mm512_store_si512(out + 64 * j, _mm512_sub_epi8(_mm512_and_si512(q, m4), eight));
                _mm512_store_si512(out + 64 * (j + 4), _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), eight));
            }
            const __m512i h = _mm512_mask_i32gather_epi32(z, k, idx, w, 1);
            _mm512_store_ps(out + 512, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
        }
    } else {
        for (int64_t b = 0; b < nb; b++, out += PB, w += sizeof(blk_q8_0)) {
            for (int j = 0; j < 8; j++)
                _mm512_store_si512(out + 64 * j, _mm512_mask_i32gather_epi32(z, k, idx, w + 2 + 4 * j, 1));
            const __m512i h = _mm512_mask_i32gather_epi32(z, k, idx, w, 1);
            _mm512_store_ps(out + 512, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
        }
    }
}

/* acc[m] += float(c[m]) * da[m] * dw: one block's sums, scaled. */
TAMX static inline __attribute__((always_inline)) void scale_add(const int32_t *c, const uint8_t *ap, const uint8_t *bp,
                                                                  __m512 acc[16]) {
    const float *da = (const float *)(ap + 512);
    const __m512 dw = _mm512_load_ps(bp + 512);
    for (int m = 0; m < 16; m++)
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * m)), _mm512_mul_ps(dw, _mm512_set1_ps(da[m])), acc[m]);
}

/* The PB bytes at p into L1. Tile loads from L2 take twice as long as from L1, and the
 * hardware prefetchers do not follow them. */
TAMX static inline __attribute__((always_inline)) void prefetch_block(const uint8_t *p) {
    for (int o = 0; o < PB; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* One activation tile (ap: its nbk packed blocks) x one weight panel (bp) over a K-chunk,
 * added to y's `rows` x 16 (columns `cols`) partial sums, or stored there when `first`.
 * `next` is the activation tile read after this one (prefetched as this one ends). */
TAMX static void tile_chunk(int64_t nbk, const uint8_t *ap, const uint8_t *next, const uint8_t *bp, float *y, int64_t ldy,
                            int rows, __mmask16 cols, int first) {
    __m512 acc[16];
    for (int m = 0; m < 16; m++) acc[m] = first || m >= rows ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(cols, y + m * ldy);
    /* Step b issues block b's product, stores block b - 1's sums and scales block b - 2's, so
     * that no step waits on the one before. Even blocks take tiles 0, 2, 4 and c[0]. */
    _Alignas(64) int32_t c[2][256];
    for (int64_t b = 0; b < nbk + 2; b++) {
        if (b + PF < nbk) prefetch_block(ap + (b + PF) * PB);
        else if (b + PF < nbk + PF) prefetch_block(next + (b + PF - nbk) * PB);
        if (b & 1) {
            if (b < nbk) {
                _tile_zero(1);
                _tile_loadd(3, ap + b * PB, 32);
                _tile_loadd(5, bp + b * PB, 64);
                _tile_dpbssd(1, 3, 5);
            }
            if (b <= nbk) _tile_stored(0, c[0], 64);
        } else {
            if (b < nbk) {
                _tile_zero(0);
                _tile_loadd(2, ap + b * PB, 32);
                _tile_loadd(4, bp + b * PB, 64);
                _tile_dpbssd(0, 2, 4);
            }
            if (b >= 1 && b <= nbk) _tile_stored(1, c[1], 64);
        }
        if (b >= 2) scale_add(c[b & 1], ap + (b - 2) * PB, bp + (b - 2) * PB, acc);
    }
    for (int m = 0; m < rows; m++) _mm512_mask_storeu_ps(y + m * ldy, cols, acc[m]);
}

/* Returns 0 (nothing written) when out of memory. */
TAMX static int mm_amx(int type, int64_t n, const void *vw, size_t ws, int64_t r0, int64_t r1, const void *va, size_t as,
                  int64_t M, float *y, int64_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / QK, mc = M < MC ? M : MC, nmt = (mc + 15) / 16;
    const size_t wb = type == CK_TYPE_Q4_0 ? sizeof(blk_q4_0) : sizeof(blk_q8_0);
    uint8_t *acts = ck_scratch((size_t)(nmt * nb + KC) * PB);
    if (!acts) return 0;
    uint8_t *panel = acts + (size_t)(nmt * nb) * PB;
    load_config();
    for (int64_t m0 = 0; m0 < M; m0 += MC) {
        const int64_t mrows = M - m0 < MC ? M - m0 : MC, tiles = (mrows + 15) / 16;
        for (int64_t t = 0; t < tiles; t++) {
            const int64_t left = mrows - 16 * t;
            pack_acts(a + (m0 + 16 * t) * as, as, left < 16 ? (int)left : 16, nb, acts + (size_t)(t * nb) * PB);
        }
        for (int64_t kb = 0; kb < nb; kb += KC) {
            const int64_t nbk = nb - kb < KC ? nb - kb : KC;
            for (int64_t r = r0; r < r1; r += 16) {
                const int R = r1 - r < 16 ? (int)(r1 - r) : 16;
                pack_weights(type, w + r * ws + kb * wb, ws, R, nbk, panel);
                for (int64_t t = 0; t < tiles; t++) {
                    const int64_t left = mrows - 16 * t;
                    const uint8_t *at = acts + (size_t)(t * nb + kb) * PB;
                    tile_chunk(nbk, at, t + 1 < tiles ? at + nb * PB : acts + (size_t)kb * PB, panel, y + (m0 + 16 * t) * ldy + r, ldy,
                               left < 16 ? (int)left : 16, (__mmask16)((1u << R) - 1), kb == 0);
                }
            }
        }
    }
    _tile_release();
    return 1;
}

/* From AMX_MIN_M activation rows on (prefill); fewer take the AVX-512 kernels, which read each
 * weight once without packing it (decode, small batches). */
#define AMX_MIN_M 16

static void mm_q4_0(int64_t n, const void *w, size_t ws, int64_t r0, int64_t r1, const void *a, size_t as, int64_t M,
                    float *y, int64_t ldy) {
    if (M < AMX_MIN_M || !mm_amx(CK_TYPE_Q4_0, n, w, ws, r0, r1, a, as, M, y, ldy))
        ck_matmul_avx512[CK_TYPE_Q4_0](n, w, ws, r0, r1, a, as, M, y, ldy);
}
static void mm_q8_0(int64_t n, const void *w, size_t ws, int64_t r0, int64_t r1, const void *a, size_t as, int64_t M,
                    float *y, int64_t ldy) {
    if (M < AMX_MIN_M || !mm_amx(CK_TYPE_Q8_0, n, w, ws, r0, r1, a, as, M, y, ldy))
        ck_matmul_avx512[CK_TYPE_Q8_0](n, w, ws, r0, r1, a, as, M, y, ldy);
}

const ck_matmul_fn ck_matmul_amx[CK_NTYPES] = {[CK_TYPE_Q4_0] = mm_q4_0, [CK_TYPE_Q8_0] = mm_q8_0};
#endif
