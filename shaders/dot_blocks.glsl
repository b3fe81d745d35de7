// dot_blocks.glsl — a weight block of 32 against an 8-bit activation block of 32 (quantize_q8's),
// in packed 4x8-bit integer dot products, for matvec_dot_T and matvec_dot_batch_T:
//   WB wbload_at(rw, b) block b (values 32b .. 32b+31) of the row starting at 16-bit word rw
//                       (its bytes read as aligned 32-bit words where the block allows; for
//                       the K-quants a 32-value sub-block of a super-block)
//   float wdot(w, x)    sum_k w[k] x[k] for an activation block x (XB: 8 words of values, scale
//                       d, sum of values s)
// Needs the weight buffer as 32-bit words, w32 (binding 0, beside quants.glsl's w16), declared
// first; one of WTYPE_Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K (rows of Q4_K and Q5_K start on a
// 32-bit word: 144- and 176-byte super-blocks), Q6_K, MXFP4.
#extension GL_EXT_integer_dot_product : require

// A block's eight dot products as two chains of four (DOT_TWO_CHAINS: matvec_dot_batch_T, where
// the chains' latency is the limit) or one of eight (matvec_dot_T: two chains measured 1-3 %
// slower for single sequences on the H100; bench/RESULTS.md).
// DOTS(A, B): int s = sum over j of A + B (A, B expressions in j)
#ifdef DOT_TWO_CHAINS
#define DOTS(A, B) \
    int s0 = 0, s1 = 0; \
    [[unroll]] for (uint j = 0u; j < 4u; j++) { s0 += A; s1 += B; } \
    const int s = s0 + s1;
#else
#define DOTS(A, B) \
    int s = 0; \
    [[unroll]] for (uint j = 0u; j < 4u; j++) s += A + B;
#endif

// exact int -> float for |v| < 2^22 (two full-rate operations instead of a conversion)
float i2f(int v) { return intBitsToFloat(v + 0x4B400000) - 12582912.0; }
int sdot(uint a, uint b) { return dotPacked4x8EXT(int(a), int(b)); }   // both signed
int sudot(uint x, uint w) { return dotPacked4x8EXT(int(x), w); }      // signed x, unsigned w
// bits 0..3 of h, each moved to bit 4 of its byte
uint spread4(uint h) { return (((h & 0xFu) * 0x00204081u) & 0x01010101u) << 4; }

// One activation block: 32 values as 8 words (a.x = values 0..3, ..., b.w = values 28..31),
// scale d and sum s of the values.
struct XB { uvec4 a; uvec4 b; float d; float s; };
// A block whose first 16-bit word is a scale followed by T = (BLOCK_WORDS - 1) / 2 32-bit words
// (BLOCK_WORDS odd), starting at 16-bit word i of the weights: T aligned 32-bit loads and one
// 16-bit load (the words past the scale start on a 32-bit boundary when i is odd; when i is
// even the scale shares the first 32-bit word and the last 16 bits come alone).
#define WBLOCK(T) \
    void wblock(uint i, out float d, out uint q[T]) { \
        const uint base = (i + 1u) >> 1; \
        const bool odd = (i & 1u) != 0u; \
        uint a[T + 1]; \
        [[unroll]] for (uint j = 0u; j < T; j++) a[j] = w32[base + j]; \
        a[T] = uint(w16[odd ? i : i + 2u * T]); \
        d = unpackHalf2x16(odd ? a[T] : a[0]).x; \
        [[unroll]] for (uint j = 0u; j < T; j++) q[j] = odd ? a[j] : (a[j] >> 16) | (a[j + 1u] << 16); \
    }

#if defined(WTYPE_Q4_0)
WBLOCK(4)
struct WB { float d; uvec4 lo; uvec4 hi; };
WB wbload(uint i) {
    WB w;
    uint q[4];
    wblock(i, w.d, q);
    const uvec4 v = uvec4(q[0], q[1], q[2], q[3]);
    w.lo = v & 0x0F0F0F0Fu;
    w.hi = (v >> 4) & 0x0F0F0F0Fu;
    return w;
}
float wdot(WB w, XB x) {
    DOTS(sudot(x.a[j], w.lo[j]), sudot(x.b[j], w.hi[j]))
    return (w.d * x.d) * i2f(s - 8 * int(x.s));
}

#elif defined(WTYPE_Q5_0)
WBLOCK(5)
struct WB { float d; uvec4 lo; uvec4 hi; };
WB wbload(uint i) {
    WB w;
    uint q[5];
    wblock(i, w.d, q);
    const uint h = q[0];
    const uvec4 v = uvec4(q[1], q[2], q[3], q[4]);
    w.lo = (v & 0x0F0F0F0Fu) | uvec4(spread4(h), spread4(h >> 4), spread4(h >> 8), spread4(h >> 12));
    w.hi = ((v >> 4) & 0x0F0F0F0Fu) | uvec4(spread4(h >> 16), spread4(h >> 20), spread4(h >> 24), spread4(h >> 28));
    return w;
}
float wdot(WB w, XB x) {
    DOTS(sudot(x.a[j], w.lo[j]), sudot(x.b[j], w.hi[j]))
    return (w.d * x.d) * i2f(s - 16 * int(x.s));
}

#elif defined(WTYPE_Q8_0)
WBLOCK(8)
struct WB { float d; uvec4 a; uvec4 b; };
WB wbload(uint i) {
    WB w;
    uint q[8];
    wblock(i, w.d, q);
    w.a = uvec4(q[0], q[1], q[2], q[3]);
    w.b = uvec4(q[4], q[5], q[6], q[7]);
    return w;
}
float wdot(WB w, XB x) {
    DOTS(sdot(x.a[j], w.a[j]), sdot(x.b[j], w.b[j]))
    return (w.d * x.d) * i2f(s);
}

#elif defined(WTYPE_Q4_1) || defined(WTYPE_Q5_1)
// even block sizes (10 / 12 words): 32-bit aligned when the row is (rowBytes % 4 == 0, K % 64 == 0
// in practice), else read word by word
uint w32at(uint i) { return (i & 1u) == 0u ? w32[i >> 1] : uint(w16[i]) | (uint(w16[i + 1u]) << 16); }
struct WB { float d; float m; uvec4 lo; uvec4 hi; };
WB wbload(uint i) {
    WB w;
    const vec2 dm = unpackHalf2x16(w32at(i));
#if defined(WTYPE_Q4_1)
    const uvec4 v = uvec4(w32at(i + 2u), w32at(i + 4u), w32at(i + 6u), w32at(i + 8u));
    w.lo = v & 0x0F0F0F0Fu;
    w.hi = (v >> 4) & 0x0F0F0F0Fu;
#else
    const uint h = w32at(i + 2u);
    const uvec4 v = uvec4(w32at(i + 4u), w32at(i + 6u), w32at(i + 8u), w32at(i + 10u));
    w.lo = (v & 0x0F0F0F0Fu) | uvec4(spread4(h), spread4(h >> 4), spread4(h >> 8), spread4(h >> 12));
    w.hi = ((v >> 4) & 0x0F0F0F0Fu) | uvec4(spread4(h >> 16), spread4(h >> 20), spread4(h >> 24), spread4(h >> 28));
#endif
    w.d = dm.x;
    w.m = dm.y;
    return w;
}
float wdot(WB w, XB x) {
    DOTS(sudot(x.a[j], w.lo[j]), sudot(x.b[j], w.hi[j]))
    return x.d * fma(w.d, i2f(s), w.m * x.s);
}

#elif defined(WTYPE_Q4_K) || defined(WTYPE_Q5_K)
// A "block" here is one 32-value sub-block j of a 256-value super-block (quants.glsl's layout:
// chunk c = j/2 of qs, low nibbles for even j, high for odd): x = d sc_j q - dmin m_j, so the
// product is Q4_1's with scale d sc_j and offset -dmin m_j. Q5_K: qs after 32 bytes of qh, value
// l's fifth bit bit j of qh[l] (rows start on a 32-bit word: 176-byte super-blocks).
struct WB { float d; float m; uvec4 lo; uvec4 hi; };
#if defined(WTYPE_Q4_K)
const uint QS_WORDS = 8u; // 16-bit words before qs
#else
const uint QS_WORDS = 24u;
#endif
WB wbload_at(uint rw, uint b) {
    const uint sb = rw + (b >> 3) * BLOCK_WORDS, j = b & 7u, q = (sb + QS_WORDS + 16u * (j >> 1)) >> 1;
    const uint sh = 4u * (j & 1u);
    WB w;
    const uvec2 sm = kscale(sb, j);
    w.d = wf16(sb) * ufloat(sm.x);
    w.m = -wf16(sb + 1u) * ufloat(sm.y);
    w.lo = (uvec4(w32[q], w32[q + 1u], w32[q + 2u], w32[q + 3u]) >> sh) & 0x0F0F0F0Fu;
    w.hi = (uvec4(w32[q + 4u], w32[q + 5u], w32[q + 6u], w32[q + 7u]) >> sh) & 0x0F0F0F0Fu;
#if defined(WTYPE_Q5_K)
    const uint h = (sb + 8u) >> 1;
    w.lo |= ((uvec4(w32[h], w32[h + 1u], w32[h + 2u], w32[h + 3u]) >> j) & 0x01010101u) << 4;
    w.hi |= ((uvec4(w32[h + 4u], w32[h + 5u], w32[h + 6u], w32[h + 7u]) >> j) & 0x01010101u) << 4;
#endif
    return w;
}
float wdot(WB w, XB x) {
    DOTS(sudot(x.a[j], w.lo[j]), sudot(x.b[j], w.hi[j]))
    return x.d * fma(w.d, i2f(s), w.m * x.s);
}
#define WBLOAD_AT

#elif defined(WTYPE_Q6_K)
// Sub-block j of a super-block (quants.glsl's layout): half h = j/4 and group g = j%4 there,
// its bytes l < 32 from ql[64h + 32(g%2) + l] (nibble g/2) and bits 2g of qh[32h + l], scale
// sc[2j] for its first 16 values and sc[2j+1] for the rest. The 6-bit values minus 32 become
// signed bytes, so each half of 16 is one chain of signed dot products with its own scale.
// (Super-blocks are 105 words: a row may start mid 32-bit word, so two 16-bit loads a word.)
struct WB { float da; float db; uvec4 a; uvec4 b; };
uint s6(uint q) { const uint v = q ^ 0x20202020u; return v | ((v & 0x20202020u) * 6u); } // q - 32, bytewise
WB wbload_at(uint rw, uint b) {
    const uint sb = rw + (b >> 3) * BLOCK_WORDS, j = b & 7u, h = j >> 2, g = j & 3u;
    const uint qlw = sb + 32u * h + 16u * (g & 1u), qhw = sb + 64u + 16u * h, ns = 4u * (g >> 1), hs = 2u * g;
    const float d = wf16(sb + 104u);
    const uint sc = uint(w16[sb + 96u + j]); // sc[2j] (low byte), sc[2j+1]
    WB w;
    w.da = d * float(int(sc << 24) >> 24);
    w.db = d * float(int(sc << 16) >> 24);
    uint q[8];
    [[unroll]] for (uint k = 0u; k < 8u; k++)
        q[k] = s6(((wload32(qlw + 2u * k) >> ns) & 0x0F0F0F0Fu) | (((wload32(qhw + 2u * k) >> hs) & 0x03030303u) << 4));
    w.a = uvec4(q[0], q[1], q[2], q[3]);
    w.b = uvec4(q[4], q[5], q[6], q[7]);
    return w;
}
float wdot(WB w, XB x) {
    int sa = 0, sb = 0;
    [[unroll]] for (uint j = 0u; j < 4u; j++) { sa += sdot(x.a[j], w.a[j]); sb += sdot(x.b[j], w.b[j]); }
    return x.d * fma(w.da, i2f(sa), w.db * i2f(sb));
}
#define WBLOAD_AT

#elif defined(WTYPE_MXFP4)
// struct { u8 e; u8 qs[16]; } (17 bytes: quants.glsl reads it a byte at a time): each nibble's
// level as an int8 (ggml's doubled E2M1 values, quants.glsl's mx_level), Q4_0's order, then 2^(e-128) d, as
// ggml_vec_dot_mxfp4_q8_0
// the levels of the 4 nibbles of q at shift sh (0: the low ones, 4: the high), as 4 packed int8
uint mx_levels(uint q, uint sh) {
    uint r = 0u;
    [[unroll]] for (uint i = 0u; i < 4u; i++) r |= (uint(mx_level((q >> (8u * i + sh)) & 0xFu)) & 0xFFu) << (8u * i);
    return r;
}
struct WB { float d; uvec4 lo; uvec4 hi; };
WB wbload_at(uint rw, uint b) {
    const uint o = 17u * b, e = wbyte(rw, o);
    WB w;
    w.d = uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23);
    [[unroll]] for (uint j = 0u; j < 4u; j++) {
        const uint q = wload32_byte(rw, o + 1u + 4u * j);
        w.lo[j] = mx_levels(q, 0u);
        w.hi[j] = mx_levels(q, 4u);
    }
    return w;
}
float wdot(WB w, XB x) {
    DOTS(sdot(x.a[j], w.lo[j]), sdot(x.b[j], w.hi[j]))
    return (w.d * x.d) * i2f(s);
}
#define WBLOAD_AT

#else
#error "matvec_dot: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K or MXFP4 weights"
#endif

#ifndef WBLOAD_AT
// block b (of 32 values) of the row starting at 16-bit word rw
WB wbload_at(uint rw, uint b) { return wbload(rw + b * BLOCK_WORDS); }
#endif
