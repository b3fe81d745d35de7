/* dot_avx2.c — matmul kernels for AVX2 + FMA + F16C (x86-64 without AVX-512 VNNI).
 *
 * Same tiling as the AVX-512 file (ck_tiles.h), 2 weight rows x up to 4 activation rows,
 * one 32-element block per 256-bit register. Products go through vpmaddubsw (u8 x s8 ->
 * int16 pairs) and vpmaddwd (-> int32), as in llama.cpp: 4-/5-bit weights are the unsigned
 * operand and their offset is removed with a precomputed -8*d*sum(a) / -16*d*sum(a); Q8_0
 * weights use |w| and sign(a, w). Activation quants must lie in [-127, 127], which is what
 * the quantizers produce. Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4 have kernels here only: the
 * AVX-512 table keeps these (the IQ4 and FP4 levels come from a vpshufb table lookup).
 */
#include "ck_internal.h"
#include "ck_tiles.h"

#if CK_X86
#include <immintrin.h>

#define T2 CK_TARGET_AVX2
#define INL CK_INLINE


T2 INL float h2f(uint16_t h) { return _cvtsh_ss(h); }

T2 INL float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ======================= 32-element block types ======================= */

/* Activations repacked per call, one block per 96 bytes:
 *   q   32 x int8
 *   d    8 x f32 (broadcast)
 *   aux  8 x f32: -8*d*sum / -16*d*sum per group of 4 (Q4_0 / Q5_0), or s (Q8_1) */
#define PACK_BYTES 96
#define PACKED_ROW(nb) ((size_t)(nb) * PACK_BYTES)

T2 static void pack_act(int type, int64_t nb, const uint8_t *a, uint8_t *out) {
    const int q81 = ck_uses_q8_1(type);
    const size_t ab = q81 ? sizeof(blk_q8_1) : sizeof(blk_q8_0);
    for (int64_t b = 0; b < nb; b++, out += PACK_BYTES) {
        const uint8_t *p = a + b * ab;
        const __m256i q = _mm256_loadu_si256((const __m256i *)(p + (q81 ? 4 : 2)));
        __m256i aux = _mm256_setzero_si256();
        if (q81) {
            aux = _mm256_castps_si256(_mm256_set1_ps(h2f(ck_ld16(p + 2))));
        } else if (type != CK_TYPE_Q8_0) {
            /* -off * d * sum(a): each lane holds the part of its group of 4 */
            const __m256i off = _mm256_set1_epi8(type == CK_TYPE_Q4_0 ? 8 : 16);
            const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(off, q), _mm256_set1_epi16(1));
            aux = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(-h2f(ck_ld16(p)))));
        }
        _mm256_store_si256((__m256i *)out, q);
        _mm256_store_ps((float *)(out + 32), _mm256_set1_ps(h2f(ck_ld16(p))));
        _mm256_store_si256((__m256i *)(out + 64), aux);
    }
}


/* 16 bytes of packed nibbles -> 32 bytes in element order [lo | hi]. */
T2 INL __m256i nibbles(const uint8_t *q) {
    const __m128i t = _mm_loadu_si128((const __m128i *)q);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}

/* 32 bits -> 32 bytes, 0x10 where the bit is set. */
T2 INL __m256i bit4_from_bits(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                               _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i sel = _mm256_set1_epi64x(0x8040201008040201ll);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

typedef struct {
    __m256i q;   /* unsigned quants; Q8_0: |w| */
    __m256i sgn; /* Q8_0: w, whose sign goes onto the activations */
    __m256 d, m; /* m: [min, 0 x7] (Q4_1/Q5_1) */
} wops;

T2 INL wops load_w(int type, const uint8_t *p) {
    wops w;
    w.sgn = _mm256_setzero_si256();
    w.m = _mm256_setzero_ps();
    w.d = _mm256_set1_ps(h2f(ck_ld16(p)));
    switch (type) {
    case CK_TYPE_Q4_0: w.q = nibbles(p + 2); break;
    case CK_TYPE_Q4_1: w.q = nibbles(p + 4); break;
    case CK_TYPE_Q5_0: w.q = _mm256_or_si256(nibbles(p + 6), bit4_from_bits(ck_ld32(p + 2))); break;
    case CK_TYPE_Q5_1: w.q = _mm256_or_si256(nibbles(p + 8), bit4_from_bits(ck_ld32(p + 4))); break;
    default:
        w.sgn = _mm256_loadu_si256((const __m256i *)(p + 2));
        w.q = _mm256_abs_epi8(w.sgn);
        break;
    }
    if (ck_uses_q8_1(type)) w.m = _mm256_zextps128_ps256(_mm_set_ss(h2f(ck_ld16(p + 2))));
    return w;
}

T2 INL void tile_q32(int type, int R, int C, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                     size_t as, int pf, float *y, int64_t ldy) {
    const size_t wb = ck_q32_bytes(type);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < R; i++) {
            const uint8_t *pw = w + i * ws + b * wb;
            if (pf) _mm_prefetch((const char *)(pw + PF_TILES * R * ws), _MM_HINT_T0); /* a later tile's row */
            const wops wo = load_w(type, pw);
            for (int j = 0; j < C; j++) {
                const uint8_t *pa = a + j * as + b * PACK_BYTES;
                const __m256i q = _mm256_load_si256((const __m256i *)pa);
                const __m256i aux = _mm256_load_si256((const __m256i *)(pa + 64));
                const __m256 d = _mm256_load_ps((const float *)(pa + 32));
                const __m256i p16 = type == CK_TYPE_Q8_0 ? _mm256_maddubs_epi16(wo.q, _mm256_sign_epi8(q, wo.sgn))
                                                         : _mm256_maddubs_epi16(wo.q, q);
                const __m256i s = _mm256_madd_epi16(p16, ones);
                if (type == CK_TYPE_Q4_0 || type == CK_TYPE_Q5_0) {
                    /* w_d * (a_d * sum(q*a) - off * a_d * sum(a)) */
                    const __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, _mm256_castsi256_ps(aux));
                    acc[i][j] = _mm256_fmadd_ps(wo.d, t, acc[i][j]);
                    continue;
                }
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(wo.d, d), acc[i][j]);
                if (ck_uses_q8_1(type)) acc[i][j] = _mm256_fmadd_ps(wo.m, _mm256_castsi256_ps(aux), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) y[j * ldy + i] = hsum(acc[i][j]);
}

/* ======================= K types ======================= */

/* int16 scale vector: word k of `sc` (8 words, both lanes) everywhere. */
T2 INL __m256i bcast_word(__m256i sc, int k) {
    return _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)((2 * k) | (2 * k + 1) << 8)));
}

T2 INL void tile_k(int type, int R, int C, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                   size_t as, int pf, float *y, int64_t ldy) {
    const size_t wb = ck_k_bytes(type);
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256 acc[4][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < R; i++) {
            const uint8_t *pw = w + i * ws + b * wb;
            if (pf)
                for (size_t o = 0; o < wb; o += 64) _mm_prefetch((const char *)(pw + PF_TILES * R * ws + o), _MM_HINT_T0);
            __m256i s[4];
            for (int j = 0; j < C; j++) s[j] = _mm256_setzero_si256();
            if (type == CK_TYPE_Q6_K) {
                const blk_q6_K *x = (const blk_q6_K *)pw;
                const __m128i sc8 = _mm_loadu_si128((const __m128i *)x->scales);
                for (int h = 0; h < 2; h++) {
                    const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
                    const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
                    const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
                    /* 4 groups of 32 values; each has 2 scales (16 values each) */
                    const __m256i q[4] = {
                        _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
                        _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
                    };
                    for (int g = 0; g < 4; g++) {
                        const int k = 8 * h + 2 * g; /* scales k (first 16) and k+1 */
                        const __m128i pick = _mm_setr_epi8((char)k, (char)k, (char)k, (char)k, (char)k, (char)k, (char)k, (char)k,
                                                           (char)(k + 1), (char)(k + 1), (char)(k + 1), (char)(k + 1),
                                                           (char)(k + 1), (char)(k + 1), (char)(k + 1), (char)(k + 1));
                        const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
                        for (int j = 0; j < C; j++) {
                            const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                            const __m256i q8 = _mm256_loadu_si256((const __m256i *)(ya->qs + 128 * h + 32 * g));
                            s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], q8), sc));
                        }
                    }
                }
                /* quants are stored +32: subtract 32 * scale * (sum of each 16 activations) */
                const __m256i corr = _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc8), 5);
                const __m256 d = _mm256_set1_ps(h2f(x->d));
                for (int j = 0; j < C; j++) {
                    const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                    const __m256i bs = _mm256_loadu_si256((const __m256i *)ya->bsums);
                    s[j] = _mm256_sub_epi32(s[j], _mm256_madd_epi16(corr, bs));
                    acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j]), _mm256_mul_ps(d, _mm256_set1_ps(ya->d)), acc[i][j]);
                }
                continue;
            }
            /* Q4_K / Q5_K */
            const blk_q4_K *x = (const blk_q4_K *)pw;
            const __m128i scm = ck_kscales_sse(x->scales);
            const __m128i sm = _mm_cvtepu8_epi16(scm), mn = _mm_cvtepu8_epi16(_mm_unpackhi_epi64(scm, scm));
            const __m256i sc = _mm256_broadcastsi128_si256(sm);
            const __m256i mins = _mm256_set_m128i(_mm_unpackhi_epi16(mn, mn), _mm_unpacklo_epi16(mn, mn));
            const uint8_t *qs = type == CK_TYPE_Q5_K ? ((const blk_q5_K *)pw)->qs : x->qs;
            const __m256i qh = type == CK_TYPE_Q5_K ? _mm256_loadu_si256((const __m256i *)((const blk_q5_K *)pw)->qh)
                                                    : _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (type == CK_TYPE_Q5_K) {
                    /* bit 2c of qh[l] is the 5th bit of lo[l], bit 2c+1 that of hi[l]: move it to bit 4 */
                    const __m256i b0 = 2 * c <= 4 ? _mm256_slli_epi16(qh, 4 - 2 * c) : _mm256_srli_epi16(qh, 2 * c - 4);
                    const __m256i b1 = 2 * c + 1 <= 4 ? _mm256_slli_epi16(qh, 3 - 2 * c) : _mm256_srli_epi16(qh, 2 * c - 3);
                    const __m256i m10 = _mm256_set1_epi8(0x10);
                    lo = _mm256_or_si256(lo, _mm256_and_si256(b0, m10));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(b1, m10));
                }
                const __m256i sc_lo = bcast_word(sc, 2 * c), sc_hi = bcast_word(sc, 2 * c + 1);
                for (int j = 0; j < C; j++) {
                    const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                    const __m256i a0 = _mm256_loadu_si256((const __m256i *)(ya->qs + 64 * c));
                    const __m256i a1 = _mm256_loadu_si256((const __m256i *)(ya->qs + 64 * c + 32));
                    s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), sc_lo));
                    s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), sc_hi));
                }
            }
            const __m256 d = _mm256_set1_ps(h2f(x->d)), dmin = _mm256_set1_ps(h2f(x->dmin));
            for (int j = 0; j < C; j++) {
                const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                const __m256 da = _mm256_set1_ps(ya->d);
                const __m256i ms = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)ya->bsums));
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j]), _mm256_mul_ps(d, da), acc[i][j]);
                acc[i][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dmin, da), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) y[j * ldy + i] = hsum(acc[i][j]);
}

/* ======= Q2_K, Q3_K, IQ4_XS (Q8_K activations), IQ4_NL and MXFP4 (Q8_0) ======= */

/* Sums of products of signed bytes x and activations y, pairwise into int16: vpmaddubsw
 * on |x| and sign(y, x) (|x| <= 127 here: the IQ4 levels, Q8 quants). */
T2 INL __m256i mul_add_i8(__m256i x, __m256i y) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* Bytes k (8 times) then k+1 (8 times) of v, widened to int16 (signed or not). */
T2 INL __m256i pick_pair16(__m128i v, int k, int is_signed) {
    const char a = (char)k, b = (char)(k + 1);
    const __m128i p = _mm_shuffle_epi8(v, _mm_setr_epi8(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b));
    return is_signed ? _mm256_cvtepi8_epi16(p) : _mm256_cvtepu8_epi16(p);
}

T2 INL size_t lowbit_bytes(int type) {
    return type == CK_TYPE_Q2_K ? sizeof(blk_q2_K) : type == CK_TYPE_Q3_K ? sizeof(blk_q3_K)
         : type == CK_TYPE_IQ4_NL ? sizeof(blk_iq4_nl) : type == CK_TYPE_MXFP4 ? sizeof(blk_mxfp4) : sizeof(blk_iq4_xs);
}

/* Integer sums per super-block (per block for IQ4_NL) as in dot_scalar.c, then one float
 * multiply-add per lane. Q3_K's quants are taken +4 (unsigned for vpmaddubsw) and 4 * scale *
 * the activations' group sums subtracted; Q2_K's mins go through the group sums too. */
T2 INL void tile_lowbit(int type, int R, int C, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *a,
                        size_t as, int pf, float *y, int64_t ldy) {
    const size_t wb = lowbit_bytes(type);
    const __m256i m1 = _mm256_set1_epi8(1), m3 = _mm256_set1_epi8(3);
    const __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ck_kvalues_iq4nl));
    const __m256i fp4 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ck_kvalues_mxfp4));
    __m256 acc[4][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        for (int i = 0; i < R; i++) {
            const uint8_t *pw = w + i * ws + b * wb;
            if (pf)
                for (size_t o = 0; o < wb; o += 64) _mm_prefetch((const char *)(pw + PF_TILES * R * ws + o), _MM_HINT_T0);
            if (type == CK_TYPE_IQ4_NL || type == CK_TYPE_MXFP4) {
                /* one block: its levels, and its scale (f16, or MXFP4's E8M0 halved) */
                const int nl = type == CK_TYPE_IQ4_NL;
                const __m256i q = nl ? _mm256_shuffle_epi8(levels, nibbles(((const blk_iq4_nl *)pw)->qs))
                                     : _mm256_shuffle_epi8(fp4, nibbles(((const blk_mxfp4 *)pw)->qs));
                const float dw = nl ? h2f(((const blk_iq4_nl *)pw)->d) : ck_e8m0_half(((const blk_mxfp4 *)pw)->e);
                for (int j = 0; j < C; j++) {
                    const blk_q8_0 *ya = (const blk_q8_0 *)(a + j * as) + b;
                    const __m256i p = _mm256_madd_epi16(mul_add_i8(q, _mm256_loadu_si256((const __m256i *)ya->qs)), _mm256_set1_epi16(1));
                    acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(ya->d) * dw), acc[i][j]);
                }
                continue;
            }
            __m256i s[4];
            for (int j = 0; j < C; j++) s[j] = _mm256_setzero_si256();
            float d;
            if (type == CK_TYPE_IQ4_XS) {
                const blk_iq4_xs *x = (const blk_iq4_xs *)pw;
                for (int ib = 0; ib < QKK / 32; ib++) {
                    const __m256i q = _mm256_shuffle_epi8(levels, nibbles(x->qs + 16 * ib));
                    const __m256i sc = _mm256_set1_epi16((short)ck_iq4xs_scale(x->scales_l, x->scales_h, ib));
                    for (int j = 0; j < C; j++) {
                        const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                        const __m256i a8 = _mm256_loadu_si256((const __m256i *)(ya->qs + 32 * ib));
                        s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(mul_add_i8(q, a8), sc));
                    }
                }
                d = h2f(x->d);
            } else {
                /* Q2_K / Q3_K: qs[32h + l] holds values 128h + 32s + l in bits 2s, 2s+1 */
                const int q3 = type == CK_TYPE_Q3_K;
                const uint8_t *qs = q3 ? ((const blk_q3_K *)pw)->qs : ((const blk_q2_K *)pw)->qs;
                __m128i sc8;
                __m256i hm = _mm256_setzero_si256();
                if (q3) {
                    const blk_q3_K *x = (const blk_q3_K *)pw;
                    /* the 16 scales as ggml unpacks them: low nibbles of bytes 0-7, then their high
                     * nibbles, each with 2 bits of bytes 8-11 on top; minus 32 */
                    const uint32_t a0 = ck_ld32(x->scales), a1 = ck_ld32(x->scales + 4), t = ck_ld32(x->scales + 8);
                    const uint32_t k2 = 0x0f0f0f0fu, k1 = 0x03030303u;
                    sc8 = _mm_sub_epi8(_mm_setr_epi32((int)((a0 & k2) | ((t & k1) << 4)), (int)((a1 & k2) | (((t >> 2) & k1) << 4)),
                                                      (int)(((a0 >> 4) & k2) | (((t >> 4) & k1) << 4)),
                                                      (int)(((a1 >> 4) & k2) | (((t >> 6) & k1) << 4))),
                                       _mm_set1_epi8(32));
                    hm = _mm256_loadu_si256((const __m256i *)x->hmask);
                    d = h2f(x->d);
                } else {
                    sc8 = _mm_and_si128(_mm_loadu_si128((const __m128i *)((const blk_q2_K *)pw)->scales), _mm_set1_epi8(0x0f));
                    d = h2f(((const blk_q2_K *)pw)->d);
                }
                for (int h = 0; h < 2; h++) {
                    const __m256i qv = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
                    for (int g = 0; g < 4; g++) {
                        __m256i q = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * g), m3);
                        if (q3) q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + g), m1), 2));
                        const __m256i sc = pick_pair16(sc8, 8 * h + 2 * g, q3);
                        for (int j = 0; j < C; j++) {
                            const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                            const __m256i a8 = _mm256_loadu_si256((const __m256i *)(ya->qs + 128 * h + 32 * g));
                            s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(_mm256_maddubs_epi16(q, a8), sc));
                        }
                    }
                }
                if (q3) {
                    const __m256i corr = _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc8), 2); /* 4 * scale */
                    for (int j = 0; j < C; j++) {
                        const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                        s[j] = _mm256_sub_epi32(s[j], _mm256_madd_epi16(corr, _mm256_loadu_si256((const __m256i *)ya->bsums)));
                    }
                } else {
                    const blk_q2_K *x = (const blk_q2_K *)pw;
                    const __m256i mins = _mm256_cvtepu8_epi16(
                        _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)x->scales), 4), _mm_set1_epi8(0x0f)));
                    const __m256 dmin = _mm256_set1_ps(h2f(x->dmin));
                    for (int j = 0; j < C; j++) {
                        const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                        const __m256i ms = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)ya->bsums));
                        acc[i][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(dmin, _mm256_set1_ps(ya->d)), acc[i][j]);
                    }
                }
            }
            const __m256 dv = _mm256_set1_ps(d);
            for (int j = 0; j < C; j++) {
                const blk_q8_K *ya = (const blk_q8_K *)(a + j * as) + b;
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j]), _mm256_mul_ps(dv, _mm256_set1_ps(ya->d)), acc[i][j]);
            }
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) y[j * ldy + i] = hsum(acc[i][j]);
}

/* ======================= F32 / F16 / BF16 weights, F32 activations ======================= */

T2 INL __m256 load_wf(int type, const uint8_t *p, int64_t k) {
    if (type == CK_TYPE_F32) return _mm256_loadu_ps((const float *)p + k);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + k));
    if (type == CK_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INL float scalar_wf(int type, const uint8_t *p, int64_t k) {
    if (type == CK_TYPE_F32) return ((const float *)p)[k];
    const uint16_t h = ((const uint16_t *)p)[k];
    return type == CK_TYPE_F16 ? ck_h2f(h) : ck_bf2f(h);
}

T2 INL void tile_f(int type, int R, int C, int64_t n, const uint8_t *w, size_t ws, const uint8_t *a,
                   size_t as, int pf, float *y, int64_t ldy) {
    const int64_t esz = type == CK_TYPE_F32 ? 4 : 2;
    __m256 acc[4][4];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) acc[i][j] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        for (int i = 0; i < R; i++) {
            if (pf) _mm_prefetch((const char *)(w + (PF_TILES * R + i) * ws + k * esz), _MM_HINT_T0);
            const __m256 wv = load_wf(type, w + i * ws, k);
            for (int j = 0; j < C; j++)
                acc[i][j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps((const float *)(a + j * as) + k), acc[i][j]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            float s = hsum(acc[i][j]);
            for (int64_t t = k; t < n; t++) s += scalar_wf(type, w + i * ws, t) * ((const float *)(a + j * as))[t];
            y[j * ldy + i] = s;
        }
}

/* ======================= drivers (ck_tiles.h) ======================= */

DEFINE_MATMUL_PACKED(T2, mm_q4_0, tile_q32, CK_TYPE_Q4_0, 2, QK, pack_act, PACKED_ROW)
DEFINE_MATMUL_PACKED(T2, mm_q4_1, tile_q32, CK_TYPE_Q4_1, 2, QK, pack_act, PACKED_ROW)
DEFINE_MATMUL_PACKED(T2, mm_q5_0, tile_q32, CK_TYPE_Q5_0, 2, QK, pack_act, PACKED_ROW)
DEFINE_MATMUL_PACKED(T2, mm_q5_1, tile_q32, CK_TYPE_Q5_1, 2, QK, pack_act, PACKED_ROW)
DEFINE_MATMUL_PACKED(T2, mm_q8_0, tile_q32, CK_TYPE_Q8_0, 2, QK, pack_act, PACKED_ROW)
DEFINE_MATMUL(T2, mm_q4_K, tile_k, CK_TYPE_Q4_K, 2, n / QKK)
DEFINE_MATMUL(T2, mm_q5_K, tile_k, CK_TYPE_Q5_K, 2, n / QKK)
DEFINE_MATMUL(T2, mm_q6_K, tile_k, CK_TYPE_Q6_K, 2, n / QKK)
DEFINE_MATMUL(T2, mm_q2_K, tile_lowbit, CK_TYPE_Q2_K, 2, n / QKK)
DEFINE_MATMUL(T2, mm_q3_K, tile_lowbit, CK_TYPE_Q3_K, 2, n / QKK)
DEFINE_MATMUL(T2, mm_iq4_xs, tile_lowbit, CK_TYPE_IQ4_XS, 2, n / QKK)
DEFINE_MATMUL(T2, mm_iq4_nl, tile_lowbit, CK_TYPE_IQ4_NL, 2, n / QK)
DEFINE_MATMUL(T2, mm_mxfp4, tile_lowbit, CK_TYPE_MXFP4, 2, n / QK)
DEFINE_MATMUL(T2, mm_f32, tile_f, CK_TYPE_F32, 2, n)
DEFINE_MATMUL(T2, mm_f16, tile_f, CK_TYPE_F16, 2, n)
DEFINE_MATMUL(T2, mm_bf16, tile_f, CK_TYPE_BF16, 2, n)

const ck_matmul_fn ck_matmul_avx2[CK_NTYPES] = {
    [CK_TYPE_F32] = mm_f32,   [CK_TYPE_F16] = mm_f16,   [CK_TYPE_BF16] = mm_bf16,
    [CK_TYPE_Q4_0] = mm_q4_0, [CK_TYPE_Q4_1] = mm_q4_1, [CK_TYPE_Q5_0] = mm_q5_0,
    [CK_TYPE_Q5_1] = mm_q5_1, [CK_TYPE_Q8_0] = mm_q8_0, [CK_TYPE_Q4_K] = mm_q4_K,
    [CK_TYPE_Q5_K] = mm_q5_K, [CK_TYPE_Q6_K] = mm_q6_K, [CK_TYPE_Q2_K] = mm_q2_K,
    [CK_TYPE_Q3_K] = mm_q3_K, [CK_TYPE_IQ4_NL] = mm_iq4_nl, [CK_TYPE_IQ4_XS] = mm_iq4_xs,
    [CK_TYPE_MXFP4] = mm_mxfp4,
};
#endif
