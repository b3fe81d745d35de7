// kv_types.glsl — K/V page access in the cache's storage types (README.md, "K/V pages").
//
// Included by the kernels that read or write K/V pages, after their Params block `p` (which has
// pageSize and kvDim), with KV_BINDING (the binding of the pages) and KV_ACCESS (readonly or
// writeonly) defined, and GL_EXT_shader_16bit_storage (and, for the stores, KV_STORE and
// GL_EXT_control_flow_attributes) enabled. Built once per (K type, V type) pair with -DKT_<TYPE> -DVT_<TYPE>
// (F32 when not given): F32, F16, Q8_0, Q4_0.
//
// Within a page, layer l's K plane starts at word layerOff and its V plane kv_kplane_words()
// words after it. Offsets are in 32-bit words; 16-bit data (f16 values, ggml blocks) is read
// through a 16-bit view of the same buffer.
//   K f32/f16: transposed, [dim][slot] (neighbouring threads read neighbouring keys).
//   K q8_0/q4_0 and V of every type: by slot, [slot][row]; a quantized row is ceil(kvDim / 32)
//   ggml blocks (q8_0: f16 scale + 32 int8, 17 words of 16 bits; q4_0: f16 scale + 16 bytes of
//   nibbles, value j < 16 the low nibble of byte j and value j + 16 its high nibble, minus 8).
//
//   uint  k_key(kplane, slot)     a handle of key `slot`'s K in a K plane (word offset)
//   float k_at(h, d)              element d (0 <= d < kvDim) of that key
//   vec4  k_at4(h, d)             elements d .. d+3
//   uint  v_row(vplane, slot)     a handle of V row `slot` in a V plane
//   float v_at(h, d), vec4 v_at4(h, d)
//   void  k_put(kplane, slot, d, x), v_put(...)      (f32/f16 only) one element
//   void  q_put_block(plane, slot, b, float x[32])   (quantized only) block b of a row
// Dequantization is ggml's (float(q) * d, (float(nibble) - 8) * d), so exact; quantization
// follows ggml's reference quantizers (q8_0: d = amax / 127, q = round(x / d); q4_0: d = max /
// -8, q = min(15, int(x / d + 8.5))) up to the device's division.

#if !defined(KT_F16) && !defined(KT_Q8_0) && !defined(KT_Q4_0)
#define KT_F32
#endif
#if !defined(VT_F16) && !defined(VT_Q8_0) && !defined(VT_Q4_0)
#define VT_F32
#endif
#if defined(KT_Q8_0) || defined(KT_Q4_0)
#define KT_Q
#endif
#if defined(VT_Q8_0) || defined(VT_Q4_0)
#define VT_Q
#endif

layout(std430, binding = KV_BINDING) KV_ACCESS buffer KVBuf { float kv[]; };
#if !defined(KT_F32) || !defined(VT_F32)
layout(std430, binding = KV_BINDING) KV_ACCESS buffer KVBuf16 { uint16_t kvh[]; };
#endif

// 16-bit words of a quantized row of kvDim values
uint q8_row_halves() { return ((p.kvDim + 31u) >> 5) * 17u; }
uint q4_row_halves() { return ((p.kvDim + 31u) >> 5) * 9u; }

// words of a K plane (the V plane follows it)
uint kv_kplane_words() {
#if defined(KT_F32)
    return p.pageSize * p.kvDim;
#elif defined(KT_F16)
    return (p.pageSize * p.kvDim + 1u) >> 1;
#elif defined(KT_Q8_0)
    return (p.pageSize * q8_row_halves() + 1u) >> 1;
#else
    return (p.pageSize * q4_row_halves() + 1u) >> 1;
#endif
}

#ifndef KV_STORE // readers (the stores bind the pages write-only)
#if !defined(KT_F32) || !defined(VT_F32)
float h16(uint i) { return unpackHalf2x16(uint(kvh[i])).x; }
#endif

#if defined(KT_Q8_0) || defined(VT_Q8_0)
float q8_at(uint row, uint d) {
    const uint blk = row + (d >> 5) * 17u, j = d & 31u;
    const uint w = uint(kvh[blk + 1u + (j >> 1)]);
    return float(int(w << (24u - ((j & 1u) << 3))) >> 24) * h16(blk);
}
vec4 q8_at4(uint row, uint d) {
    if ((d & 3u) != 0u) return vec4(q8_at(row, d), q8_at(row, d + 1u), q8_at(row, d + 2u), q8_at(row, d + 3u));
    const uint blk = row + (d >> 5) * 17u, i = blk + 1u + ((d & 31u) >> 1);
    const uint w = uint(kvh[i]) | (uint(kvh[i + 1u]) << 16);
    return vec4(float(int(w << 24) >> 24), float(int(w << 16) >> 24), float(int(w << 8) >> 24), float(int(w) >> 24)) * h16(blk);
}
#endif
#if defined(KT_Q4_0) || defined(VT_Q4_0)
float q4_at(uint row, uint d) {
    const uint blk = row + (d >> 5) * 9u, j = d & 31u, b = j & 15u;
    const uint w = uint(kvh[blk + 1u + (b >> 1)]);
    const uint nib = (w >> (((b & 1u) << 3) + (j >= 16u ? 4u : 0u))) & 15u;
    return (float(nib) - 8.0) * h16(blk);
}
vec4 q4_at4(uint row, uint d) {
    if ((d & 3u) != 0u) return vec4(q4_at(row, d), q4_at(row, d + 1u), q4_at(row, d + 2u), q4_at(row, d + 3u));
    const uint blk = row + (d >> 5) * 9u, j = d & 31u, i = blk + 1u + ((j & 15u) >> 1);
    const uint w = uint(kvh[i]) | (uint(kvh[i + 1u]) << 16);
    const uint sh = j >= 16u ? 4u : 0u;
    const uvec4 n = (uvec4(w, w >> 8, w >> 16, w >> 24) >> sh) & 15u;
    return (vec4(n) - 8.0) * h16(blk);
}
#endif

// ---- K ----
#if defined(KT_F32)
uint k_key(uint kplane, uint slot) { return kplane + slot; }
float k_at(uint h, uint d) { return kv[h + d * p.pageSize]; }
vec4 k_at4(uint h, uint d) {
    const uint b = h + d * p.pageSize, s = p.pageSize;
    return vec4(kv[b], kv[b + s], kv[b + 2u * s], kv[b + 3u * s]);
}
#elif defined(KT_F16)
uint k_key(uint kplane, uint slot) { return 2u * kplane + slot; }
float k_at(uint h, uint d) { return h16(h + d * p.pageSize); }
vec4 k_at4(uint h, uint d) {
    const uint b = h + d * p.pageSize, s = p.pageSize;
    return vec4(h16(b), h16(b + s), h16(b + 2u * s), h16(b + 3u * s));
}
#elif defined(KT_Q8_0)
uint k_key(uint kplane, uint slot) { return 2u * kplane + slot * q8_row_halves(); }
float k_at(uint h, uint d) { return q8_at(h, d); }
vec4 k_at4(uint h, uint d) { return q8_at4(h, d); }
#else
uint k_key(uint kplane, uint slot) { return 2u * kplane + slot * q4_row_halves(); }
float k_at(uint h, uint d) { return q4_at(h, d); }
vec4 k_at4(uint h, uint d) { return q4_at4(h, d); }
#endif

// ---- V ----
#if defined(VT_F32)
uint v_row(uint vplane, uint slot) { return vplane + slot * p.kvDim; }
float v_at(uint h, uint d) { return kv[h + d]; }
vec4 v_at4(uint h, uint d) { const uint b = h + d; return vec4(kv[b], kv[b + 1u], kv[b + 2u], kv[b + 3u]); }
#elif defined(VT_F16)
layout(std430, binding = KV_BINDING) KV_ACCESS buffer KVBuf64 { uvec2 kvq[]; };
uint v_row(uint vplane, uint slot) { return 2u * vplane + slot * p.kvDim; }
float v_at(uint h, uint d) { return h16(h + d); }
// four values at an 8-byte boundary (the usual case) in one load
vec4 v_at4(uint h, uint d) {
    const uint b = h + d;
    if ((b & 3u) == 0u) { const uvec2 w = kvq[b >> 2]; return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)); }
    return vec4(h16(b), h16(b + 1u), h16(b + 2u), h16(b + 3u));
}
#elif defined(VT_Q8_0)
uint v_row(uint vplane, uint slot) { return 2u * vplane + slot * q8_row_halves(); }
float v_at(uint h, uint d) { return q8_at(h, d); }
vec4 v_at4(uint h, uint d) { return q8_at4(h, d); }
#else
uint v_row(uint vplane, uint slot) { return 2u * vplane + slot * q4_row_halves(); }
float v_at(uint h, uint d) { return q4_at(h, d); }
vec4 v_at4(uint h, uint d) { return q4_at4(h, d); }
#endif

#endif

// ---- stores (kv_store, rope_store) ----
#ifdef KV_STORE
// IEEE half bits of x, rounded to nearest even where the device's packHalf2x16 does (NVIDIA,
// Apple and lavapipe do)
uint16_t f2h(float x) { return uint16_t(packHalf2x16(vec2(x, 0.0)) & 0xFFFFu); }

#if defined(KT_F32)
void k_put(uint kplane, uint slot, uint d, float x) { kv[kplane + d * p.pageSize + slot] = x; }
#elif defined(KT_F16)
void k_put(uint kplane, uint slot, uint d, float x) { kvh[2u * kplane + d * p.pageSize + slot] = f2h(x); }
#endif
#if defined(VT_F32)
void v_put(uint vplane, uint slot, uint d, float x) { kv[vplane + slot * p.kvDim + d] = x; }
#elif defined(VT_F16)
void v_put(uint vplane, uint slot, uint d, float x) { kvh[2u * vplane + slot * p.kvDim + d] = f2h(x); }
#endif

#if defined(KT_Q8_0) || defined(VT_Q8_0)
// ggml's quantize_row_q8_0_ref over x, into the block at 16-bit word `blk`
void q8_put(uint blk, float x[32]) {
    float amax = 0.0;
    [[unroll]] for (uint i = 0u; i < 32u; i++) amax = max(amax, abs(x[i]));
    const float d = amax / 127.0, id = d != 0.0 ? 1.0 / d : 0.0;
    kvh[blk] = f2h(d);
    [[unroll]] for (uint i = 0u; i < 32u; i += 2u) {
        const float a = x[i] * id, b = x[i + 1u] * id;
        // roundf: half away from zero
        const int qa = int(sign(a) * floor(abs(a) + 0.5)), qb = int(sign(b) * floor(abs(b) + 0.5));
        kvh[blk + 1u + i / 2u] = uint16_t((uint(qa) & 0xFFu) | ((uint(qb) & 0xFFu) << 8));
    }
}
#endif
#if defined(KT_Q4_0) || defined(VT_Q4_0)
// ggml's quantize_row_q4_0_ref
void q4_put(uint blk, float x[32]) {
    float amax = 0.0, mx = 0.0;
    [[unroll]] for (uint i = 0u; i < 32u; i++) {
        if (amax < abs(x[i])) { amax = abs(x[i]); mx = x[i]; }
    }
    const float d = mx / -8.0, id = d != 0.0 ? 1.0 / d : 0.0;
    kvh[blk] = f2h(d);
    [[unroll]] for (uint j = 0u; j < 16u; j += 2u) {
        uint q[4];
        [[unroll]] for (uint c = 0u; c < 4u; c++) {
            const uint jj = j + (c & 1u) + ((c >> 1) << 4); // j, j+1, j+16, j+17
            q[c] = uint(min(15, int(x[jj] * id + 8.5)));
        }
        kvh[blk + 1u + j / 2u] = uint16_t((q[0] | (q[2] << 4)) | ((q[1] | (q[3] << 4)) << 8));
    }
}
#endif
#ifdef KT_Q
void k_put_block(uint kplane, uint slot, uint b, float x[32]) {
#ifdef KT_Q8_0
    q8_put(2u * kplane + slot * q8_row_halves() + b * 17u, x);
#else
    q4_put(2u * kplane + slot * q4_row_halves() + b * 9u, x);
#endif
}
#endif
#ifdef VT_Q
void v_put_block(uint vplane, uint slot, uint b, float x[32]) {
#ifdef VT_Q8_0
    q8_put(2u * vplane + slot * q8_row_halves() + b * 17u, x);
#else
    q4_put(2u * vplane + slot * q4_row_halves() + b * 9u, x);
#endif
}
#endif
#endif
