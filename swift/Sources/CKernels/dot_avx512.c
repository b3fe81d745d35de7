/* dot_avx512.c — matmul kernels for AVX-512 (F/BW/VL/DQ) with VNNI.
 *
 * Every kernel computes a register tile of R weight rows x C activation rows (ck_tiles.h), so
 * each weight block is unpacked once for C activation rows and each activation block loaded
 * once for R weight rows.
 *
 * 32-element block types work on two blocks per 512-bit register: vpdpbusd (u8 x s8) sums
 * groups of 4 products into 16 int32 lanes, 8 lanes per block, and the lanes are scaled by
 * per-block float scales in place. The weight quants (4/5-bit, without their offset) are the
 * unsigned operand; the offset's share, -16*d*sum(a) for Q5_0, is precomputed per
 * activation block. For Q8_0 weights the activations are made unsigned (a ^ 0x80 = a + 128)
 * and the sum starts at -128*sum(w). Activations are repacked once per call (pack_act) so
 * the tiles only load them.
 *
 * K types work on 64 values per register: vpmaddubsw gives int16 pair sums, and vpdpwssd
 * multiplies them by the (integer) sub-block scales while accumulating in int32, so the whole
 * 256-element super-block is summed in integers before one float scale.
 */
#include "ck_internal.h"
#include "ck_tiles.h"

#if CK_X86
#include <immintrin.h>

#define T512 CK_TARGET_AVX512
#define INL CK_INLINE

#define ld16 ck_ld16
#define ld32 ck_ld32

/* ======================= 32-element block types ======================= */

/* [f(h0) x8, f(h1) x8] from two f16 values. */
T512 INL __m512 f16_pair(uint32_t h0, uint32_t h1) {
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(h0 | h1 << 16)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                 _mm512_castps128_ps512(f));
}

/* From two (d, m) f16 pairs: d as [d0 x8, d1 x8]; m as [m0 x8, m1 x8], or with `sparse` as
 * [m0, 0 x7, m1, 0 x7] so that the lane sum of m*s is m0*s0 + m1*s1. */
T512 INL void f16_dm_pair(uint32_t dm0, uint32_t dm1, int sparse, __m512 *d, __m512 *m) {
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)((uint64_t)dm0 | (uint64_t)dm1 << 32)));
    const __m512 f5 = _mm512_castps128_ps512(f);
    *d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), f5);
    *m = _mm512_maskz_permutexvar_ps(sparse ? 0x0101 : 0xffff,
                                     _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3), f5);
}

/* 16 packed nibble bytes of one or two blocks -> 64 bytes in element order:
 * [lo(q0), hi(q0), lo(q1), hi(q1)]. */
T512 INL __m512i nibbles(const uint8_t *q0, const uint8_t *q1, int two) {
    __m512i z = two ? _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)q0))
                    : _mm512_maskz_broadcast_i32x4(0x00ff, _mm_loadu_si128((const __m128i *)q0));
    if (two) z = _mm512_mask_broadcast_i32x4(z, 0xff00, _mm_loadu_si128((const __m128i *)q1));
    z = _mm512_srlv_epi64(z, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    return _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
}

/* 32 int8 of one or two blocks -> 64 bytes (upper half zero for one block). */
T512 INL __m512i q8_pair(const uint8_t *q0, const uint8_t *q1, int two) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)q0);
    return two ? _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)q1), 1)
               : _mm512_zextsi256_si512(lo);
}

/* Weight operands of one or two blocks of a 32-element type. */
typedef struct {
    __m512i q;    /* unsigned operand (signed for Q8_0) */
    __m512i bias; /* Q8_0: -128*sum(w) per lane group */
    __m512 d, m;  /* per-lane scale; min (Q4_1/Q5_1) */
} wops;



T512 INL wops load_w(int type, const uint8_t *p, int two) {
    const size_t bs = ck_q32_bytes(type);
    const uint8_t *p1 = p + bs;
    wops w;
    w.bias = _mm512_setzero_si512();
    w.m = _mm512_setzero_ps();
    switch (type) {
    case CK_TYPE_Q4_1:
        w.q = nibbles(p + 4, p1 + 4, two);
        f16_dm_pair(ld32(p), two ? ld32(p1) : 0, 1, &w.d, &w.m);
        break;
    case CK_TYPE_Q5_0:
    case CK_TYPE_Q5_1: {
        const int off = type == CK_TYPE_Q5_0 ? 2 : 4; /* qh, then 16 bytes of nibbles */
        const uint64_t hb = (uint64_t)ld32(p + off) | (two ? (uint64_t)ld32(p1 + off) << 32 : 0);
        const __m512i q = nibbles(p + off + 4, p1 + off + 4, two);
        w.q = _mm512_mask_add_epi8(q, _cvtu64_mask64(hb), q, _mm512_set1_epi8(16));
        if (type == CK_TYPE_Q5_0) w.d = f16_pair(ld16(p), two ? ld16(p1) : 0);
        else f16_dm_pair(ld32(p), two ? ld32(p1) : 0, 1, &w.d, &w.m);
        break;
    }
    default: /* Q8_0 */
        w.q = q8_pair(p + 2, p1 + 2, two);
        w.d = f16_pair(ld16(p), two ? ld16(p1) : 0);
        w.bias = _mm512_sub_epi32(_mm512_setzero_si512(),
                                  _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), w.q));
        break;
    }
    return w;
}

/* Activations are repacked once per call, two blocks per 192 bytes, so the tiles only load:
 *   q   64 x int8 (for Q8_0 weights: a ^ 0x80, unsigned)
 *   d   16 x f32 [d0 x8, d1 x8]
 *   aux 16 x f32: -16*d*sum per lane group (Q5_0), or [s0 x8, s1 x8] (Q8_1)
 * A trailing odd block leaves the upper half zero. */
#define PACK_BYTES 192
#define PACKED_ROW(nb) ((size_t)((nb) + 1) / 2 * PACK_BYTES)

T512 static void pack_act(int type, int64_t nb, const uint8_t *a, uint8_t *out) {
    const int q81 = ck_uses_q8_1(type);
    const size_t ab = q81 ? sizeof(blk_q8_1) : sizeof(blk_q8_0), qoff = q81 ? 4 : 2;
    for (int64_t b = 0; b < nb; b += 2, out += PACK_BYTES) {
        const int two = b + 1 < nb;
        const uint8_t *p = a + b * ab, *p1 = p + ab;
        __m512i q = q8_pair(p + qoff, p1 + qoff, two), aux = _mm512_setzero_si512();
        __m512 d;
        if (q81) {
            __m512 s;
            f16_dm_pair(ld32(p), two ? ld32(p1) : 0, 0, &d, &s);
            aux = _mm512_castps_si512(s);
        } else {
            d = f16_pair(ld16(p), two ? ld16(p1) : 0);
            if (type == CK_TYPE_Q8_0) {
                q = _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80));
                if (!two) q = _mm512_zextsi256_si512(_mm512_castsi512_si256(q));
            } else {
                /* Q5_0: -16 * d * sum(a), each lane the part of its group of 4 */
                const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(16), q);
                aux = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(sum), _mm512_sub_ps(_mm512_setzero_ps(), d)));
            }
        }
        _mm512_store_si512(out, q);
        _mm512_store_ps(out + 64, d);
        _mm512_store_si512(out + 128, aux);
    }
}

/* One step (one or two blocks) of an R x C tile; `a` is packed. */
T512 INL void step_q32(int type, int R, int C, int two, const uint8_t *w, size_t ws, const uint8_t *a,
                       size_t as, int pf, __m512 acc[8][4]) {
    for (int i = 0; i < R; i++) {
        /* a later tile's row; for one activation row (decode) into L2 only, so the prefetches
         * do not hold the L1 fill buffers the tile's own loads need */
        if (pf && C == 1) _mm_prefetch((const char *)(w + (PF_TILES * R + i) * ws), _MM_HINT_T1);
        else if (pf) _mm_prefetch((const char *)(w + (PF_TILES * R + i) * ws), _MM_HINT_T0);
        const wops wo = load_w(type, w + i * ws, two);
        for (int j = 0; j < C; j++) {
            const uint8_t *pa = a + j * as;
            const __m512i q = _mm512_load_si512(pa), aux = _mm512_load_si512(pa + 128);
            const __m512 d = _mm512_load_ps(pa + 64);
            if (type == CK_TYPE_Q5_0) {
                /* w_d * (a_d * sum(q*a) - 16 * a_d * sum(a)) */
                const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wo.q, q);
                const __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, _mm512_castsi512_ps(aux));
                acc[i][j] = _mm512_fmadd_ps(wo.d, t, acc[i][j]);
                continue;
            }
            __m512i s;
            if (type == CK_TYPE_Q8_0) s = _mm512_dpbusd_epi32(wo.bias, q, wo.q);
            else s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wo.q, q);
            acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(wo.d, d), acc[i][j]);
            /* the min term: m lanes are zero except one per block */
            if (ck_uses_q8_1(type)) acc[i][j] = _mm512_fmadd_ps(wo.m, _mm512_castsi512_ps(aux), acc[i][j]);
        }
    }
}

T512 INL void tile_q32(int type, int R, int C, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                       size_t as, int pf, float *y, int64_t ldy) {
    const size_t wb = ck_q32_bytes(type);
    __m512 acc[8][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) acc[i][j] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) step_q32(type, R, C, 1, w + b * wb, ws, a + b / 2 * PACK_BYTES, as, pf, acc);
    if (b < nb) step_q32(type, R, C, 0, w + b * wb, ws, a + b / 2 * PACK_BYTES, as, pf, acc);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) y[j * ldy + i] = _mm512_reduce_add_ps(acc[i][j]);
}

/* ---- Q4_0 x one activation row (decode): four weight rows a register ----
 *
 * Decode reads each weight once. A row-a-register tile like tile_q32 (which Q4_0 used before)
 * spends about 11 vector uops on a row's two blocks (its scales' conversion and spread, the
 * nibbles' broadcast, the dot and two FMAs): as many cycles as the memory takes to bring the
 * 36 bytes, so the two barely overlap (bench/RESULTS.md). Here a register holds the 16 quant
 * bytes of one block of four rows, one row per 128-bit lane, so each vpdpbusd serves four
 * rows; the activation block is
 * broadcast to every lane once per call (pack_bcast), and the 16 scales of 8 rows' two blocks
 * come in one gather and one conversion. A row's sum is then its lane's four int32 sums. */
#define BC_BYTES 256 /* a broadcast activation block: low and high 16 quants x4, d x16, -2*d*sum(q) x16 */

T512 static void pack_bcast(int64_t nb, const uint8_t *a, uint8_t *out) {
    for (int64_t b = 0; b < nb; b++, out += BC_BYTES) {
        const blk_q8_0 *blk = (const blk_q8_0 *)(a + b * sizeof(blk_q8_0));
        const __m128i lo = _mm_loadu_si128((const __m128i *)blk->qs), hi = _mm_loadu_si128((const __m128i *)(blk->qs + 16));
        const __m256i q = _mm256_set_m128i(hi, lo);
        const int sum = _mm512_reduce_add_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), _mm512_zextsi256_si512(q)));
        const float d = _cvtsh_ss(blk->d);
        _mm512_store_si512(out, _mm512_broadcast_i32x4(lo));
        _mm512_store_si512(out + 64, _mm512_broadcast_i32x4(hi));
        _mm512_store_ps(out + 128, _mm512_set1_ps(d));
        /* the -8 of every quant, a quarter in each of a row's four lanes */
        _mm512_store_ps(out + 192, _mm512_set1_ps(-2.0f * d * (float)sum));
    }
}

/* One block of four rows (quant bytes at q[0..3], 16 each) into acc (row i in lanes 4i..4i+3). */
T512 INL __m512 quad_q4_0(const uint8_t *q0, const uint8_t *q1, const uint8_t *q2, const uint8_t *q3,
                          const uint8_t *ab, __m512 dw, __m512 acc) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)q0));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)q1), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)q2), 2);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)q3), 3);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(z, m4), _mm512_load_si512(ab));
    s = _mm512_dpbusd_epi32(s, _mm512_and_si512(_mm512_srli_epi16(z, 4), m4), _mm512_load_si512(ab + 64));
    const __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_load_ps(ab + 128), _mm512_load_ps(ab + 192));
    return _mm512_fmadd_ps(dw, t, acc);
}

/* Rows [0, R) (R <= 8) of w against the broadcast activation row ab; rows past R repeat row 0
 * and are not stored. `pf`: prefetch rows 2 tiles on into L2. */
T512 INL void tile_q4_0_r8(int R, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *ab, int pf, float *y) {
    const uint8_t *row[8];
    int off[8];
    for (int i = 0; i < 8; i++) {
        row[i] = w + (i < R ? i : 0) * ws;
        off[i] = (int)(row[i] - w);
    }
    /* gather lanes: rows 0..7, blocks b and b+1: [r0b0, r0b1, r1b0, ...] */
    const __m512i offs = _mm512_add_epi32(
        _mm512_setr_epi32(off[0], off[0], off[1], off[1], off[2], off[2], off[3], off[3],
                          off[4], off[4], off[5], off[5], off[6], off[6], off[7], off[7]),
        _mm512_setr_epi32(0, 18, 0, 18, 0, 18, 0, 18, 0, 18, 0, 18, 0, 18, 0, 18));
    /* lane l of rows 4g.. takes the scale of row 4g + l/4, block j: index 2 (4g + l/4) + j */
    const __m512i i00 = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    const __m512i i01 = _mm512_add_epi32(i00, _mm512_set1_epi32(1)), i10 = _mm512_add_epi32(i00, _mm512_set1_epi32(8));
    const __m512i i11 = _mm512_add_epi32(i00, _mm512_set1_epi32(9));
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b < nb; b += 2) {
        const int two = b + 1 < nb;
        const size_t o = (size_t)b * 18;
        if (pf)
            for (int i = 0; i < 8; i++) _mm_prefetch((const char *)(w + (PF_TILES * 8 + i) * ws + o), _MM_HINT_T1);
        /* a lone last block reads no scale past the row */
        const __m512i h = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), two ? 0xffff : 0x5555, offs, w + o, 1);
        const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
        const uint8_t *a0 = ab + b * BC_BYTES;
        acc0 = quad_q4_0(row[0] + o + 2, row[1] + o + 2, row[2] + o + 2, row[3] + o + 2, a0, _mm512_permutexvar_ps(i00, d), acc0);
        acc1 = quad_q4_0(row[4] + o + 2, row[5] + o + 2, row[6] + o + 2, row[7] + o + 2, a0, _mm512_permutexvar_ps(i10, d), acc1);
        if (two) {
            acc0 = quad_q4_0(row[0] + o + 20, row[1] + o + 20, row[2] + o + 20, row[3] + o + 20, a0 + BC_BYTES,
                             _mm512_permutexvar_ps(i01, d), acc0);
            acc1 = quad_q4_0(row[4] + o + 20, row[5] + o + 20, row[6] + o + 20, row[7] + o + 20, a0 + BC_BYTES,
                             _mm512_permutexvar_ps(i11, d), acc1);
        }
    }
    /* each 128-bit lane's four sums, then lanes 0, 4, 8, 12 */
    acc0 = _mm512_add_ps(acc0, _mm512_permute_ps(acc0, 0x4e));
    acc0 = _mm512_add_ps(acc0, _mm512_permute_ps(acc0, 0xb1));
    acc1 = _mm512_add_ps(acc1, _mm512_permute_ps(acc1, 0x4e));
    acc1 = _mm512_add_ps(acc1, _mm512_permute_ps(acc1, 0xb1));
    const __m512 sums = _mm512_permutex2var_ps(acc0, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0), acc1);
    _mm256_mask_storeu_ps(y, (__mmask8)((1u << R) - 1), _mm512_castps512_ps256(sums));
}

T512 static void mm_q4_0_row(int64_t n, const void *vw, size_t ws, int64_t r0, int64_t r1, const void *va,
                             size_t as, int64_t M, float *y, int64_t ldy) {
    const uint8_t *w = vw, *a = va;
    const int64_t nb = n / QK;
    uint8_t *ab = ck_scratch((size_t)nb * BC_BYTES);
    if (!ab) {
        ck_matmul_scalar[CK_TYPE_Q4_0](n, vw, ws, r0, r1, va, as, M, y, ldy);
        return;
    }
    for (int64_t m = 0; m < M; m++) {
        pack_bcast(nb, a + m * as, ab);
        for (int64_t r = r0; r < r1; r += 8) {
            const int R = r1 - r < 8 ? (int)(r1 - r) : 8;
            tile_q4_0_r8(R, nb, w + r * ws, ws, ab, r + 8 < r1, y + m * ldy + r);
        }
    }
}

/* ======================= K types (256-element super-blocks) ======================= */

/* acc += pairwise products of int16 a and b (vpdpwssd). In asm because LLVM 17 rewrites
 * chains of it into vpmaddwd + vpaddd (twice the uops) to shorten the dependency chain,
 * which only hurts here: the tiles have plenty of independent chains. */
T512 INL __m512i dpwssd(__m512i acc, __m512i a, __m512i b) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
    return acc;
}

/* int16 scale vector for 64 values: word k of `sc` for the first 32, word k+1 for the rest. */
T512 INL __m512i scale_words(__m512i sc, int k0, int k1) {
    const __m512i idx = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16((short)k0), _mm512_set1_epi16((short)k1));
    return _mm512_permutexvar_epi16(idx, sc);
}

/* Q6_K: int16 scale vector for 64 values = 4 groups of 16, scales k..k+3 (8 words each). */
T512 INL __m512i scale_words4(__m512i sc, int k) {
    const __m512i idx = _mm512_setr_epi32(
        k | k << 16, k | k << 16, k | k << 16, k | k << 16,
        (k + 1) | (k + 1) << 16, (k + 1) | (k + 1) << 16, (k + 1) | (k + 1) << 16, (k + 1) | (k + 1) << 16,
        (k + 2) | (k + 2) << 16, (k + 2) | (k + 2) << 16, (k + 2) | (k + 2) << 16, (k + 2) | (k + 2) << 16,
        (k + 3) | (k + 3) << 16, (k + 3) | (k + 3) << 16, (k + 3) | (k + 3) << 16, (k + 3) | (k + 3) << 16);
    return _mm512_permutexvar_epi16(idx, sc);
}

/* Weight operands of one super-block: 4 x 64 unsigned quants in element order, their int16
 * scales, the float scales, and (Q4_K/Q5_K) the mins laid out against bsums. */
typedef struct {
    __m512i q[4], sc[4];
    __m512i mins;   /* Q4_K/Q5_K: 16 int16 (min of sub-block j in words 2j, 2j+1); Q6_K: -32*scale */
    __m512 d, dmin;
} kops;

T512 INL kops load_k(int type, const uint8_t *p) {
    kops k;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    if (type == CK_TYPE_Q6_K) {
        const blk_q6_K *x = (const blk_q6_K *)p;
        const __m512i m30 = _mm512_set1_epi8(0x30);
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(x->ql + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * h)));
            /* values 0-63 of the half: low nibbles, qh bits 0-1 (first 32) and 2-3 (next 32) */
            const __m512i h0 = _mm512_and_si512(_mm512_sllv_epi64(qh, _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2)), m30);
            /* values 64-127: high nibbles, qh bits 4-5 and 6-7 */
            const __m512i h1 = _mm512_and_si512(_mm512_srlv_epi64(qh, _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2)), m30);
            k.q[2 * h] = _mm512_ternarylogic_epi32(ql, m4, h0, 0xea);                         /* (ql & m4) | h0 */
            k.q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), m4, h1, 0xea);
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
        const __m512i sc = _mm512_castsi256_si512(sc16);
        for (int c = 0; c < 4; c++) k.sc[c] = scale_words4(sc, 4 * c);
        /* q is stored +32: subtract 32 * scale * (sum of the 16 activations), from bsums */
        k.mins = _mm512_zextsi256_si512(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5)));
        k.d = _mm512_set1_ps(_cvtsh_ss(x->d));
        k.dmin = _mm512_setzero_ps();
        return k;
    }
    /* Q4_K / Q5_K share the header: d, dmin, 12 bytes of scales; then (Q5_K) qh; then qs */
    const blk_q4_K *x = (const blk_q4_K *)p;
    const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(ck_kscales_sse(x->scales))); /* words 0-7 scales, 8-15 mins */
    const uint8_t *qs = type == CK_TYPE_Q5_K ? ((const blk_q5_K *)p)->qs : x->qs;
    for (int c = 0; c < 4; c++) {
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * c)));
        k.q[c] = _mm512_and_si512(_mm512_srlv_epi64(q, _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4)), m4);
        k.sc[c] = scale_words(sc, 2 * c, 2 * c + 1);
    }
    if (type == CK_TYPE_Q5_K) {
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const blk_q5_K *)p)->qh));
        for (int c = 0; c < 4; c++) {
            const __m512i bit = _mm512_mask_blend_epi8(0xffffffff00000000ull, _mm512_set1_epi8((char)(1 << (2 * c))),
                                                       _mm512_set1_epi8((char)(2 << (2 * c))));
            k.q[c] = _mm512_mask_add_epi8(k.q[c], _mm512_test_epi8_mask(qh, bit), k.q[c], _mm512_set1_epi8(16));
        }
    }
    /* mins (words 8-15) repeated twice each, to pair with the 16 bsums */
    k.mins = _mm512_maskz_permutexvar_epi16(0x0000ffff,
                                            _mm512_setr_epi32(0x00080008, 0x00090009, 0x000a000a, 0x000b000b,
                                                              0x000c000c, 0x000d000d, 0x000e000e, 0x000f000f,
                                                              0, 0, 0, 0, 0, 0, 0, 0), sc);
    k.d = _mm512_set1_ps(_cvtsh_ss(x->d));
    k.dmin = _mm512_set1_ps(_cvtsh_ss(x->dmin));
    return k;
}

T512 INL void tile_k(int type, int R, int C, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                     size_t as, int pf, float *y, int64_t ldy) {
    const size_t wb = ck_k_bytes(type);
    __m512 acc[4][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < R; i++) {
            if (pf)
                for (size_t o = 0; o < wb; o += 64) _mm_prefetch((const char *)(w + (PF_TILES * R + i) * ws + b * wb + o), _MM_HINT_T0);
            const kops ko = load_k(type, w + i * ws + b * wb);
            for (int j = 0; j < C; j++) {
                const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                const __m512i bsums = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)ya->bsums));
                const __m512 da = _mm512_set1_ps(ya->d);
                __m512i s = _mm512_setzero_si512();
                for (int c = 0; c < 4; c++)
                    s = dpwssd(s, _mm512_maddubs_epi16(ko.q[c], _mm512_loadu_si512(ya->qs + 64 * c)), ko.sc[c]);
                if (type == CK_TYPE_Q6_K) {
                    s = dpwssd(s, ko.mins, bsums);
                    acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(ko.d, da), acc[i][j]);
                } else {
                    const __m512i ms = _mm512_madd_epi16(ko.mins, bsums);
                    acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(ko.d, da), acc[i][j]);
                    acc[i][j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(ko.dmin, da), acc[i][j]);
                }
            }
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) y[j * ldy + i] = _mm512_reduce_add_ps(acc[i][j]);
}

/* ======================= F32 / F16 / BF16 weights, F32 activations ======================= */

T512 INL __m512 load_wf(int type, const uint8_t *p, int64_t k, __mmask16 mask) {
    if (type == CK_TYPE_F32) return _mm512_maskz_loadu_ps(mask, (const float *)p + k);
    const __m256i h = _mm256_maskz_loadu_epi16(mask, (const uint16_t *)p + k);
    if (type == CK_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* BF16 */
}

T512 INL void step_f(int type, int R, int C, int64_t k, __mmask16 mask, const uint8_t *w, size_t ws,
                     const uint8_t *a, size_t as, int pf, __m512 acc[4][4]) {
    __m512 wv[4];
    const int64_t esz = type == CK_TYPE_F32 ? 4 : 2;
    for (int i = 0; i < R; i++) {
        if (pf) _mm_prefetch((const char *)(w + (PF_TILES * R + i) * ws + k * esz), _MM_HINT_T0);
        wv[i] = load_wf(type, w + i * ws, k, mask);
    }
    for (int j = 0; j < C; j++) {
        const __m512 av = _mm512_maskz_loadu_ps(mask, (const float *)(a + j * as) + k);
        for (int i = 0; i < R; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], av, acc[i][j]);
    }
}

T512 INL void tile_f(int type, int R, int C, int64_t n, const uint8_t *w, size_t ws, const uint8_t *a,
                     size_t as, int pf, float *y, int64_t ldy) {
    __m512 acc[4][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) acc[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) step_f(type, R, C, k, 0xffff, w, ws, a, as, pf, acc);
    if (k < n) step_f(type, R, C, k, (__mmask16)((1u << (n - k)) - 1), w, ws, a, as, pf, acc);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) y[j * ldy + i] = _mm512_reduce_add_ps(acc[i][j]);
}

/* ======================= drivers (ck_tiles.h) ======================= */

DEFINE_MATMUL_PACKED(T512, mm_q4_1, tile_q32, CK_TYPE_Q4_1, 4, QK, pack_act, PACKED_ROW)
DEFINE_MATMUL_PACKED(T512, mm_q5_0, tile_q32, CK_TYPE_Q5_0, 4, QK, pack_act, PACKED_ROW)
DEFINE_MATMUL_PACKED(T512, mm_q5_1, tile_q32, CK_TYPE_Q5_1, 4, QK, pack_act, PACKED_ROW)
DEFINE_MATMUL_PACKED(T512, mm_q8_0, tile_q32, CK_TYPE_Q8_0, 4, QK, pack_act, PACKED_ROW)
/* Q8_0 decode (one activation row) streams each weight once and is bound by how many reads a
 * thread keeps in flight: 8 weight rows a tile instead of 4 (bench/RESULTS.md). Q4_0's is
 * mm_q4_0_row above. */
DEFINE_MATMUL_PACKED(T512, mm_q8_0_row, tile_q32, CK_TYPE_Q8_0, 8, QK, pack_act, PACKED_ROW)
DEFINE_MATMUL(T512, mm_q4_K, tile_k, CK_TYPE_Q4_K, 4, n / QKK)
DEFINE_MATMUL(T512, mm_q5_K, tile_k, CK_TYPE_Q5_K, 4, n / QKK)
DEFINE_MATMUL(T512, mm_q6_K, tile_k, CK_TYPE_Q6_K, 4, n / QKK)
DEFINE_MATMUL(T512, mm_f32, tile_f, CK_TYPE_F32, 4, n)
DEFINE_MATMUL(T512, mm_f16, tile_f, CK_TYPE_F16, 4, n)
DEFINE_MATMUL(T512, mm_bf16, tile_f, CK_TYPE_BF16, 4, n)

/* Q4_0 from 2 activation rows on (batched decode, prefill): gemm_avx512.c, whose tiles sum a
 * whole block per int32 lane; one row (decode of one sequence) takes mm_q4_0_row, four rows a
 * register. */
T512 static void mm_q4_0_any(int64_t n, const void *vw, size_t ws, int64_t r0, int64_t r1, const void *va,
                             size_t as, int64_t M, float *y, int64_t ldy) {
    if (M >= 2) ck_mm_q4_0_g16(n, vw, ws, r0, r1, va, as, M, y, ldy);
    else mm_q4_0_row(n, vw, ws, r0, r1, va, as, M, y, ldy);
}
T512 static void mm_q8_0_any(int64_t n, const void *vw, size_t ws, int64_t r0, int64_t r1, const void *va,
                             size_t as, int64_t M, float *y, int64_t ldy) {
    if (M >= 2) mm_q8_0(n, vw, ws, r0, r1, va, as, M, y, ldy);
    else mm_q8_0_row(n, vw, ws, r0, r1, va, as, M, y, ldy);
}

const ck_matmul_fn ck_matmul_avx512[CK_NTYPES] = {
    [CK_TYPE_F32] = mm_f32,   [CK_TYPE_F16] = mm_f16,   [CK_TYPE_BF16] = mm_bf16,
    [CK_TYPE_Q4_0] = mm_q4_0_any, [CK_TYPE_Q4_1] = mm_q4_1, [CK_TYPE_Q5_0] = mm_q5_0,
    [CK_TYPE_Q5_1] = mm_q5_1, [CK_TYPE_Q8_0] = mm_q8_0_any, [CK_TYPE_Q4_K] = mm_q4_K,
    [CK_TYPE_Q5_K] = mm_q5_K, [CK_TYPE_Q6_K] = mm_q6_K,
};
#endif
