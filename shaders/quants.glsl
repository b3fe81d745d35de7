// quants.glsl — weight access for every weight type, in ggml's block layouts.
//
// Included by the weight kernels (get_rows, matvec, matmul) after `#version`, compiled once per
// type with -DWTYPE_<TYPE>. It declares the weight buffer itself (binding 0 in every weight
// kernel), read as 16-bit words: every block size is even, so a row starts on a word and a block
// field never straddles a word unless it is 32 bits wide (two words, little-endian).
//
// A row is cut into *units*, the piece of work one thread takes at a time:
//   quantized types: 16 values of one block, as 4 groups of 4 consecutive values;
//   f32 / f16 / bf16: 4 consecutive values (1 group); the last unit of a row may be partial
//     (K need not be a multiple of 4), its missing values read as 0 (UNIT_TAIL is defined).
// Every value of a row belongs to exactly one (unit, group, lane), so a kernel may visit the
// units in any order and pair each group with the activations at unit_pos().
//
//   units_per_row(K)       number of units in a row of K values
//   Unit unit_load(rw, u, K)   raw data of unit u of the row starting at word rw
//   vec4 unit_vec(s, g)    dequantized values of group g (0 <= g < UNIT_VECS) of the unit
//   uint unit_pos(u, g)    index in the row of the first of those 4 values
//
// Dequantization follows swift/Sources/CKernels/dequantize.c (ggml's dequantize_row_*): same
// integer decoding, same order of float operations. A kernel that needs it bit for bit
// defines DQ_PRECISE first, which marks the results `precise` (no fused multiply-add).

#extension GL_EXT_shader_16bit_storage : require

layout(std430, binding = 0) readonly buffer WeightBuf { uint16_t w16[]; };

#ifdef DQ_PRECISE
#define DQP precise
#else
#define DQP
#endif

uint wload(uint i) { return uint(w16[i]); }
// two consecutive words as one little-endian 32-bit value
uint wload32(uint i) { return uint(w16[i]) | (uint(w16[i + 1u]) << 16); }
float wf16(uint i) { return unpackHalf2x16(uint(w16[i])).x; }
// byte `off` of the data starting at word `base`
uint wbyte(uint base, uint off) { return (uint(w16[base + (off >> 1)]) >> ((off & 1u) << 3)) & 0xFFu; }

// Small unsigned integers to float without an int-to-float conversion (a low-throughput
// instruction on some GPUs): for v < 2^23, the float with bits 0x4B000000 | v is exactly
// 2^23 + v, so one OR and one subtraction give v - bias exactly.
const float MAGIC = 8388608.0; // 2^23
vec4 ufloat4(uvec4 v, float bias) { return uintBitsToFloat(v | 0x4B000000u) - (MAGIC + bias); }
float ufloat(uint v) { return uintBitsToFloat(v | 0x4B000000u) - MAGIC; }
uvec4 bytes4(uint q) { return uvec4(q, q >> 8, q >> 16, q >> 24) & 0xFFu; }
// the 4 low / high nibbles of the 4 bytes of q (byte 0 first)
uvec4 nib_lo(uint q) { return uvec4(q, q >> 8, q >> 16, q >> 24) & 0xFu; }
uvec4 nib_hi(uint q) { return uvec4(q >> 4, q >> 12, q >> 20, q >> 28) & 0xFu; }
// bit 0 of each byte of h, moved to bit 4 (the fifth bit of the Q5 types)
uvec4 bit4_16(uint h) { return (uvec4(h, h >> 8, h >> 16, h >> 24) & 1u) << 4; }
// bits 0..3 of h, each moved to bit 4
uvec4 bits_16(uint h) { return (uvec4(h, h >> 1, h >> 2, h >> 3) & 1u) << 4; }
// the 4 bytes of q as signed values (b ^ 0x80 is the signed byte plus 128)
vec4 sbytes(uint q) { return ufloat4(bytes4(q) ^ 0x80u, 128.0); }

// Scale (x) and min (y) j of the 12 packed 6-bit scale bytes of a Q4_K / Q5_K block, which start
// at byte 4 of the block at word b (ck_kscales / ggml's get_scale_min_k4).
uvec2 kscale(uint b, uint j) {
    if (j < 4u) return uvec2(wbyte(b, 4u + j) & 63u, wbyte(b, 8u + j) & 63u);
    uint lo = wbyte(b, 8u + j);                 // scales[j + 4]
    return uvec2((lo & 0xFu) | ((wbyte(b, j) >> 6) << 4),        // scales[j - 4] >> 6
                 (lo >> 4) | ((wbyte(b, 4u + j) >> 6) << 4));    // scales[j] >> 6
}

#if defined(WTYPE_Q4_0)
// struct { f16 d; u8 qs[16]; }   x[j] = (qs[j] & 15 - 8) d, x[j+16] = (qs[j] >> 4 - 8) d
#define QK 32u
#define BLOCK_WORDS 9u
#define UNITS_PER_BLOCK 2u
struct Unit { float d; uint q0; uint q1; };
Unit unit_load(uint rw, uint u, uint K) {
    uint b = rw + (u >> 1) * BLOCK_WORDS, o = b + 1u + (u & 1u) * 4u;
    Unit s;
    s.d = wf16(b);
    s.q0 = wload32(o);
    s.q1 = wload32(o + 2u);
    return s;
}
vec4 unit_vec(Unit s, uint g) {
    uint q = (g & 1u) == 0u ? s.q0 : s.q1;
    DQP vec4 r = ufloat4(g < 2u ? nib_lo(q) : nib_hi(q), 8.0) * s.d;
    return r;
}
uint unit_pos(uint u, uint g) { return (u >> 1) * 32u + (u & 1u) * 8u + (g & 1u) * 4u + (g >> 1) * 16u; }

#elif defined(WTYPE_Q4_1)
// struct { f16 d, m; u8 qs[16]; }   x = q d + m
#define QK 32u
#define BLOCK_WORDS 10u
#define UNITS_PER_BLOCK 2u
struct Unit { float d; float m; uint q0; uint q1; };
Unit unit_load(uint rw, uint u, uint K) {
    uint b = rw + (u >> 1) * BLOCK_WORDS, o = b + 2u + (u & 1u) * 4u;
    Unit s;
    s.d = wf16(b);
    s.m = wf16(b + 1u);
    s.q0 = wload32(o);
    s.q1 = wload32(o + 2u);
    return s;
}
vec4 unit_vec(Unit s, uint g) {
    uint q = (g & 1u) == 0u ? s.q0 : s.q1;
    DQP vec4 r = ufloat4(g < 2u ? nib_lo(q) : nib_hi(q), 0.0) * s.d + s.m;
    return r;
}
uint unit_pos(uint u, uint g) { return (u >> 1) * 32u + (u & 1u) * 8u + (g & 1u) * 4u + (g >> 1) * 16u; }

#elif defined(WTYPE_Q5_0)
// struct { f16 d; u8 qh[4]; u8 qs[16]; }   5th bit of x[j] is bit j of qh; x = (q - 16) d
#define QK 32u
#define BLOCK_WORDS 11u
#define UNITS_PER_BLOCK 2u
struct Unit { float d; uint q0; uint q1; uint h; };
Unit unit_load(uint rw, uint u, uint K) {
    uint b = rw + (u >> 1) * BLOCK_WORDS, j0 = (u & 1u) * 8u, o = b + 3u + (u & 1u) * 4u;
    Unit s;
    s.d = wf16(b);
    s.h = wload32(b + 1u) >> j0;
    s.q0 = wload32(o);
    s.q1 = wload32(o + 2u);
    return s;
}
vec4 unit_vec(Unit s, uint g) {
    uint q = (g & 1u) == 0u ? s.q0 : s.q1;
    uvec4 hb = bits_16(s.h >> ((g & 1u) * 4u + (g >> 1) * 16u));
    DQP vec4 r = ufloat4((g < 2u ? nib_lo(q) : nib_hi(q)) | hb, 16.0) * s.d;
    return r;
}
uint unit_pos(uint u, uint g) { return (u >> 1) * 32u + (u & 1u) * 8u + (g & 1u) * 4u + (g >> 1) * 16u; }

#elif defined(WTYPE_Q5_1)
// struct { f16 d, m; u8 qh[4]; u8 qs[16]; }   x = q d + m
#define QK 32u
#define BLOCK_WORDS 12u
#define UNITS_PER_BLOCK 2u
struct Unit { float d; float m; uint q0; uint q1; uint h; };
Unit unit_load(uint rw, uint u, uint K) {
    uint b = rw + (u >> 1) * BLOCK_WORDS, j0 = (u & 1u) * 8u, o = b + 4u + (u & 1u) * 4u;
    Unit s;
    s.d = wf16(b);
    s.m = wf16(b + 1u);
    s.h = wload32(b + 2u) >> j0;
    s.q0 = wload32(o);
    s.q1 = wload32(o + 2u);
    return s;
}
vec4 unit_vec(Unit s, uint g) {
    uint q = (g & 1u) == 0u ? s.q0 : s.q1;
    uvec4 hb = bits_16(s.h >> ((g & 1u) * 4u + (g >> 1) * 16u));
    DQP vec4 r = ufloat4((g < 2u ? nib_lo(q) : nib_hi(q)) | hb, 0.0) * s.d + s.m;
    return r;
}
uint unit_pos(uint u, uint g) { return (u >> 1) * 32u + (u & 1u) * 8u + (g & 1u) * 4u + (g >> 1) * 16u; }

#elif defined(WTYPE_Q8_0)
// struct { f16 d; i8 qs[32]; }   x = q d
#define QK 32u
#define BLOCK_WORDS 17u
#define UNITS_PER_BLOCK 2u
struct Unit { float d; uvec4 q; };
Unit unit_load(uint rw, uint u, uint K) {
    uint b = rw + (u >> 1) * BLOCK_WORDS, o = b + 1u + (u & 1u) * 8u;
    Unit s;
    s.d = wf16(b);
    s.q = uvec4(wload32(o), wload32(o + 2u), wload32(o + 4u), wload32(o + 6u));
    return s;
}
vec4 unit_vec(Unit s, uint g) {
    DQP vec4 r = sbytes(s.q[g]) * s.d;
    return r;
}
uint unit_pos(uint u, uint g) { return (u >> 1) * 32u + (u & 1u) * 16u + g * 4u; }

#elif defined(WTYPE_Q4_K)
// struct { f16 d, dmin; u8 scales[12]; u8 qs[128]; }: 4 chunks of 64 values; in chunk c,
// qs[32c + l] holds x[64c + l] (low nibble, scale/min 2c) and x[64c + 32 + l] (high, 2c+1);
// x = d sc q - dmin mn. Unit v (0..15) of a block: chunk c = v/4, bytes l0 = 8 (v%4) .. l0+7.
#define QK 256u
#define BLOCK_WORDS 72u
#define UNITS_PER_BLOCK 16u
struct Unit { float d1; float m1; float d2; float m2; uint q0; uint q1; };
Unit unit_load(uint rw, uint u, uint K) {
    uint v = u & 15u, c = v >> 2, b = rw + (u >> 4) * BLOCK_WORDS, o = b + 8u + 4u * v;
    float d = wf16(b), dmin = wf16(b + 1u);
    uvec2 sm1 = kscale(b, 2u * c), sm2 = kscale(b, 2u * c + 1u);
    Unit s;
    s.d1 = d * ufloat(sm1.x);
    s.m1 = dmin * ufloat(sm1.y);
    s.d2 = d * ufloat(sm2.x);
    s.m2 = dmin * ufloat(sm2.y);
    s.q0 = wload32(o);
    s.q1 = wload32(o + 2u);
    return s;
}
vec4 unit_vec(Unit s, uint g) {
    uint q = (g & 1u) == 0u ? s.q0 : s.q1;
    DQP vec4 r = g < 2u ? s.d1 * ufloat4(nib_lo(q), 0.0) - s.m1 : s.d2 * ufloat4(nib_hi(q), 0.0) - s.m2;
    return r;
}
uint unit_pos(uint u, uint g) {
    uint v = u & 15u;
    return (u >> 4) * 256u + (v >> 2) * 64u + (v & 3u) * 8u + (g & 1u) * 4u + (g >> 1) * 32u;
}

#elif defined(WTYPE_Q5_K)
// struct { f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }: as Q4_K, with the fifth bit
// of x[64c + l] in bit 2c of qh[l] and of x[64c + 32 + l] in bit 2c+1.
#define QK 256u
#define BLOCK_WORDS 88u
#define UNITS_PER_BLOCK 16u
struct Unit { float d1; float m1; float d2; float m2; uint q0; uint q1; uint h0; uint h1; };
Unit unit_load(uint rw, uint u, uint K) {
    uint v = u & 15u, c = v >> 2, b = rw + (u >> 4) * BLOCK_WORDS, o = b + 24u + 4u * v;
    uint oh = b + 8u + 4u * (v & 3u);
    float d = wf16(b), dmin = wf16(b + 1u);
    uvec2 sm1 = kscale(b, 2u * c), sm2 = kscale(b, 2u * c + 1u);
    Unit s;
    s.d1 = d * ufloat(sm1.x);
    s.m1 = dmin * ufloat(sm1.y);
    s.d2 = d * ufloat(sm2.x);
    s.m2 = dmin * ufloat(sm2.y);
    s.q0 = wload32(o);
    s.q1 = wload32(o + 2u);
    s.h0 = wload32(oh) >> (2u * c);
    s.h1 = wload32(oh + 2u) >> (2u * c);
    return s;
}
vec4 unit_vec(Unit s, uint g) {
    uint q = (g & 1u) == 0u ? s.q0 : s.q1;
    uvec4 hb = bit4_16(((g & 1u) == 0u ? s.h0 : s.h1) >> (g >> 1));
    DQP vec4 r = g < 2u ? s.d1 * ufloat4(nib_lo(q) | hb, 0.0) - s.m1 : s.d2 * ufloat4(nib_hi(q) | hb, 0.0) - s.m2;
    return r;
}
uint unit_pos(uint u, uint g) {
    uint v = u & 15u;
    return (u >> 4) * 256u + (v >> 2) * 64u + (v & 3u) * 8u + (g & 1u) * 4u + (g >> 1) * 32u;
}

#elif defined(WTYPE_Q6_K)
// struct { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }: two halves of 128 values; in half h,
// for l < 32 (is = l/16):
//   x[l]      = d sc[is]   ((ql[l]    & 15) | (qh[l]      & 3) << 4) - 32)
//   x[l + 32] = d sc[is+2] ((ql[l+32] & 15) | (qh[l] >> 2 & 3) << 4) - 32)
//   x[l + 64] = d sc[is+4] ((ql[l]    >> 4) | (qh[l] >> 4 & 3) << 4) - 32)
//   x[l + 96] = d sc[is+6] ((ql[l+32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32)
// with ql, qh, sc offset by 64h, 32h, 8h. Unit v (0..15): h = v/8, l = 4 (v%8) .. +3; group g
// is x[l + 32g].
#define QK 256u
#define BLOCK_WORDS 105u
#define UNITS_PER_BLOCK 16u
struct Unit { vec4 ds; uint qla; uint qlb; uint qh; };
Unit unit_load(uint rw, uint u, uint K) {
    uint v = u & 15u, h = v >> 3, l0 = (v & 7u) * 4u, b = rw + (u >> 4) * BLOCK_WORDS;
    float d = wf16(b + 104u);
    uint sb = 192u + 8u * h + l0 / 16u;          // byte of sc[is]
    vec4 sc = ufloat4(uvec4(wbyte(b, sb), wbyte(b, sb + 2u), wbyte(b, sb + 4u), wbyte(b, sb + 6u)) ^ 0x80u, 128.0);
    Unit s;
    s.ds = d * sc;
    s.qla = wload32(b + 32u * h + l0 / 2u);
    s.qlb = wload32(b + 32u * h + 16u + l0 / 2u);
    s.qh = wload32(b + 64u + 16u * h + l0 / 2u);
    return s;
}
vec4 unit_vec(Unit s, uint g) {
    uint ql = ((g & 1u) == 0u ? s.qla : s.qlb) >> ((g >> 1) * 4u);
    uint q = (ql & 0x0F0F0F0Fu) | (((s.qh >> (2u * g)) & 0x03030303u) << 4);
    DQP vec4 r = s.ds[g] * ufloat4(bytes4(q), 32.0);
    return r;
}
uint unit_pos(uint u, uint g) {
    uint v = u & 15u;
    return (u >> 4) * 256u + (v >> 3) * 128u + (v & 7u) * 4u + g * 32u;
}

#elif defined(WTYPE_Q2_K)
// struct { u8 scales[16]; u8 qs[64]; f16 d, dmin; }: 16 sub-blocks of 16 values. Value
// v = 128h + 32s + 16k + l (l < 16) is bits 2s, 2s+1 of qs[32h + 16k + l]; sub-block v/16 has the
// 4-bit scale sc (low nibble of scales[v/16]) and min m (high nibble): x = (d sc) q - (dmin m).
// Unit v (0..15) of a block is sub-block v (h = v/8, s = v/2 % 4, k = v%2); group g is its
// values 4g..4g+3.
#define QK 256u
#define BLOCK_WORDS 42u
#define UNITS_PER_BLOCK 16u
struct Unit { float dl; float ml; uvec4 q; };
Unit unit_load(uint rw, uint u, uint K) {
    uint v = u & 15u, b = rw + (u >> 4) * BLOCK_WORDS;
    uint o = b + 8u + 16u * (v >> 3) + 8u * (v & 1u), sh = 2u * ((v >> 1) & 3u);
    uint sc = wbyte(b, v);
    Unit s;
    s.dl = wf16(b + 40u) * ufloat(sc & 0xFu);
    s.ml = wf16(b + 41u) * ufloat(sc >> 4);
    s.q = (uvec4(wload32(o), wload32(o + 2u), wload32(o + 4u), wload32(o + 6u)) >> sh) & 0x03030303u;
    return s;
}
vec4 unit_vec(Unit s, uint g) {
    DQP vec4 r = s.dl * ufloat4(bytes4(s.q[g]), 0.0) - s.ml;
    return r;
}
uint unit_pos(uint u, uint g) { return (u >> 4) * 256u + (u & 15u) * 16u + g * 4u; }

#elif defined(WTYPE_Q3_K)
// struct { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }: 16 sub-blocks of 16 values. Value
// v = 128h + 32s + 16k + l has its low 2 bits where Q2_K has them (qs[32h + 16k + l] >> 2s) and a
// high bit, bit v/32 (= 4h + s) of hmask[v % 32]; x = d (sc - 32) (q - 4) with q = low | high << 2
// and sc the 6-bit scale j = v/16: low 4 bits from scales[j] (j < 8, low nibble) or scales[j-8]
// (high nibble), top 2 bits at 2(j/4) of scales[8 + j%4] (ck_q3k_scale). Units as Q2_K's.
#define QK 256u
#define BLOCK_WORDS 55u
#define UNITS_PER_BLOCK 16u
struct Unit { float dl; uvec4 q; };
Unit unit_load(uint rw, uint u, uint K) {
    uint v = u & 15u, b = rw + (u >> 4) * BLOCK_WORDS;
    uint h = v >> 3, sh = (v >> 1) & 3u, k = v & 1u;
    uint o = b + 16u + 16u * h + 8u * k, oh = b + 8u * k;
    uint lo = v < 8u ? wbyte(b, 96u + v) & 0xFu : wbyte(b, 88u + v) >> 4;
    uint hi = (wbyte(b, 104u + (v & 3u)) >> (2u * (v >> 2))) & 3u;
    Unit s;
    s.dl = wf16(b + 54u) * (ufloat(lo | (hi << 4)) - 32.0);
    uvec4 ql = uvec4(wload32(o), wload32(o + 2u), wload32(o + 4u), wload32(o + 6u));
    uvec4 qh = uvec4(wload32(oh), wload32(oh + 2u), wload32(oh + 4u), wload32(oh + 6u));
    s.q = ((ql >> (2u * sh)) & 0x03030303u) | (((qh >> (4u * h + sh)) & 0x01010101u) << 2);
    return s;
}
vec4 unit_vec(Unit s, uint g) {
    DQP vec4 r = s.dl * ufloat4(bytes4(s.q[g]), 4.0);
    return r;
}
uint unit_pos(uint u, uint g) { return (u >> 4) * 256u + (u & 15u) * 16u + g * 4u; }

#elif defined(WTYPE_IQ4_NL) || defined(WTYPE_IQ4_XS)
// IQ4: a nibble indexes the 16 non-linear levels (ggml's kvalues_iq4nl).
const float KVALUES_IQ4NL[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
                                          1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
vec4 iq4_levels(uvec4 i) {
    return vec4(KVALUES_IQ4NL[i.x], KVALUES_IQ4NL[i.y], KVALUES_IQ4NL[i.z], KVALUES_IQ4NL[i.w]);
}
#if defined(WTYPE_IQ4_NL)
// struct { f16 d; u8 qs[16]; }: Q4_0's layout, x = d kvalues[nibble]
#define QK 32u
#define BLOCK_WORDS 9u
#define UNITS_PER_BLOCK 2u
struct Unit { float d; uint q0; uint q1; };
Unit unit_load(uint rw, uint u, uint K) {
    uint b = rw + (u >> 1) * BLOCK_WORDS, o = b + 1u + (u & 1u) * 4u;
    Unit s;
    s.d = wf16(b);
    s.q0 = wload32(o);
    s.q1 = wload32(o + 2u);
    return s;
}
uint unit_pos(uint u, uint g) { return (u >> 1) * 32u + (u & 1u) * 8u + (g & 1u) * 4u + (g >> 1) * 16u; }
#else
// struct { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }: 8 sub-blocks of 32, each laid out
// as an IQ4_NL block (qs[16 ib ..]); sub-block ib has the 6-bit scale ls (low nibble ib%2 of
// scales_l[ib/2], top 2 bits at 2 ib of scales_h): x = (d (ls - 32)) kvalues[nibble]. Unit v
// (0..15) of a block: sub-block v/2, bytes 8 (v%2) .. +7 of its 16.
#define QK 256u
#define BLOCK_WORDS 68u
#define UNITS_PER_BLOCK 16u
struct Unit { float d; uint q0; uint q1; };
Unit unit_load(uint rw, uint u, uint K) {
    uint v = u & 15u, ib = v >> 1, b = rw + (u >> 4) * BLOCK_WORDS, o = b + 4u + 8u * ib + 4u * (v & 1u);
    uint ls = ((wbyte(b, 4u + (ib >> 1)) >> (4u * (ib & 1u))) & 0xFu) | (((wload(b + 1u) >> (2u * ib)) & 3u) << 4);
    Unit s;
    s.d = wf16(b) * (ufloat(ls) - 32.0);
    s.q0 = wload32(o);
    s.q1 = wload32(o + 2u);
    return s;
}
uint unit_pos(uint u, uint g) {
    uint v = u & 15u;
    return (u >> 4) * 256u + (v >> 1) * 32u + (v & 1u) * 8u + (g & 1u) * 4u + (g >> 1) * 16u;
}
#endif
vec4 unit_vec(Unit s, uint g) {
    uint q = (g & 1u) == 0u ? s.q0 : s.q1;
    DQP vec4 r = s.d * iq4_levels(g < 2u ? nib_lo(q) : nib_hi(q));
    return r;
}

#elif defined(WTYPE_MXFP4)
// struct { u8 e; u8 qs[16]; } (17 bytes): Q4_0's nibble order, x = 2^(e-128) kvalues[nibble]
// (ggml's doubled E2M1 levels and ggml_e8m0_to_fp32_half). A block is an odd number of bytes,
// so units start at any byte: a row itself must start on a word (an even number of blocks a
// row: GPUForward.lacking refuses others).
// The doubled E2M1 level of nibble n: 0 1 2 3 4 6 8 12 from a constant's 4-bit fields, negated
// for n >= 8 (not an array indexed at run time: NVIDIA's compiler keeps such arrays in local
// memory, a load per nibble)
int mx_level(uint n) {
    const int v = int((0xC8643210u >> ((n & 7u) << 2)) & 0xFu);
    return (n & 8u) != 0u ? -v : v;
}
#define QK 32u
#define UNITS_PER_BLOCK 2u
// the 32-bit little-endian value at byte `off` of the data starting at word `base`
uint wload32_byte(uint base, uint off) {
    const uint i = base + (off >> 1);
    if ((off & 1u) == 0u) return wload32(i);
    return (wload(i) >> 8) | (wload(i + 1u) << 8) | ((wload(i + 2u) & 0xFFu) << 24);
}
struct Unit { float d; uint q0; uint q1; };
Unit unit_load(uint rw, uint u, uint K) {
    const uint b = (u >> 1) * 17u, o = b + 1u + (u & 1u) * 8u, e = wbyte(rw, b);
    Unit s;
    s.d = uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23);
    s.q0 = wload32_byte(rw, o);
    s.q1 = wload32_byte(rw, o + 4u);
    return s;
}
uint unit_pos(uint u, uint g) { return (u >> 1) * 32u + (u & 1u) * 8u + (g & 1u) * 4u + (g >> 1) * 16u; }
vec4 unit_vec(Unit s, uint g) {
    const uvec4 i = (g < 2u ? nib_lo((g & 1u) == 0u ? s.q0 : s.q1) : nib_hi((g & 1u) == 0u ? s.q0 : s.q1));
    DQP vec4 r = s.d * vec4(mx_level(i.x), mx_level(i.y), mx_level(i.z), mx_level(i.w));
    return r;
}

#elif defined(WTYPE_F32) || defined(WTYPE_F16) || defined(WTYPE_BF16)
// Plain floats: a unit is values 4u .. 4u+3, the ones at or past K read as 0.
#define UNIT_TAIL 1
struct Unit { vec4 v; };
#if defined(WTYPE_F32)
float wval(uint rw, uint k) { return uintBitsToFloat(wload32(rw + 2u * k)); }
#elif defined(WTYPE_F16)
float wval(uint rw, uint k) { return wf16(rw + k); }
#else
float wval(uint rw, uint k) { return uintBitsToFloat(wload(rw + k) << 16); }
#endif
Unit unit_load(uint rw, uint u, uint K) {
    uint k = 4u * u;
    Unit s;
    if (k + 4u <= K) {
        s.v = vec4(wval(rw, k), wval(rw, k + 1u), wval(rw, k + 2u), wval(rw, k + 3u));
    } else {
        s.v = vec4(0.0);
        for (uint i = 0u; i < 4u; i++)
            if (k + i < K) s.v[i] = wval(rw, k + i);
    }
    return s;
}
vec4 unit_vec(Unit s, uint g) { return s.v; }
uint unit_pos(uint u, uint g) { return 4u * u; }

#else
#error "define one WTYPE_<TYPE>"
#endif

#ifdef UNIT_TAIL
#define UNIT_VALUES 4u
#define UNIT_VECS 1u
uint units_per_row(uint K) { return (K + 3u) / 4u; }
#else
#define UNIT_VALUES 16u
#define UNIT_VECS 4u
uint units_per_row(uint K) { return (K / QK) * UNITS_PER_BLOCK; }
#endif
