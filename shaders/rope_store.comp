#version 450
// rope_store — the rotary embedding of a layer's queries and keys, and the keys and values
// written into the KV pages, in one dispatch (three before: one dispatch costs microseconds of
// fixed time on a GPU, and a decode step has hundreds). For each token t:
//   Q heads h < heads: rotated in place (Q row t at t * qStride), as rope.comp;
//   K/V heads kh < kvHeads: K rotated on the way into the page, V copied (K, V rows at
//   t * kvStride; Q, K and V may be views of one Q|K|V row), to position tokpos[t] of the
//   token's sequence (pages and types as kv_store.comp). A quantized K or V row is written a
//   block of 32 at a time, each block by the workgroup of the head its first value is in (one
//   thread a block, rotating the K values it needs itself).
// Angles and magnitude as rope.comp. One workgroup per (token, head); dispatch (n, heads + kvHeads, 1).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 64, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer QBuf { float Q[]; };
layout(std430, binding = 1) readonly buffer KBuf { float Kin[]; };
layout(std430, binding = 2) readonly buffer VBuf { float Vin[]; };
layout(std430, binding = 4) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 5) readonly buffer PtBuf { int tokpt[]; };
layout(std430, binding = 6) readonly buffer PageBuf { int pagetab[]; };
layout(std430, binding = 7) readonly buffer FreqBuf { float freqs[]; };
layout(std140, binding = 8) uniform Params {
    uint n, heads, kvHeads, headDim, ropeDim, neox;
    float magnitude;
    uint kvDim, pageSize, pageStride, layerOff, qStride, kvStride;
} p;

#define KV_BINDING 3
#define KV_ACCESS writeonly
#define KV_STORE
#include "kv_types.glsl"

#include "rope_angle.glsl"

// cos and sin of pair i's angle at position pos, times the magnitude
vec2 angle(float pos, uint i) { return rope_angle(pos, freqs[i], p.magnitude); }

void main() {
    const uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    if (t >= p.n || h >= p.heads + p.kvHeads) return;
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint half_ = p.ropeDim / 2u, hd = p.headDim;
    const uint posi = uint(tokpos[t]);
    const float pos = float(posi);
    const uint step = p.neox != 0u ? half_ : 1u;
    if (h < p.heads) {
        const uint vb = t * p.qStride + h * hd;
        for (uint i = tid; i < half_; i += WG) {
            const vec2 cs = angle(pos, i);
            const uint ia = vb + (p.neox != 0u ? i : 2u * i), ib = ia + step;
            const float a = Q[ia], b = Q[ib];
            Q[ia] = a * cs.x - b * cs.y;
            Q[ib] = a * cs.y + b * cs.x;
        }
        return;
    }
    const uint kh = h - p.heads;
    const uint page = uint(pagetab[uint(tokpt[t]) + posi / p.pageSize]);
    const uint slot = posi % p.pageSize;
    const uint kplane = page * p.pageStride + p.layerOff, vplane = kplane + kv_kplane_words();
    const uint rb = t * p.kvStride + kh * hd;
#if defined(KT_Q) || defined(VT_Q)
    // the blocks whose first value lies in this head
    const uint b0 = (kh * hd + 31u) >> 5, b1 = ((kh + 1u) * hd + 31u) >> 5;
    float x[32];
#endif
#ifdef KT_Q
    for (uint b = b0 + tid; b < b1; b += WG) {
        [[unroll]] for (uint i = 0u; i < 32u; i++) {
            const uint dd = 32u * b + i;
            float v = 0.0;
            if (dd < p.kvDim) {
                const uint e = dd % hd, base = t * p.kvStride + dd - e;
                if (e >= p.ropeDim) {
                    v = Kin[base + e];
                } else {
                    const uint pi = p.neox != 0u ? (e < half_ ? e : e - half_) : e >> 1;
                    const bool second = p.neox != 0u ? e >= half_ : (e & 1u) != 0u;
                    const uint da = p.neox != 0u ? pi : 2u * pi;
                    const vec2 cs = angle(pos, pi);
                    const float a = Kin[base + da], bb = Kin[base + da + step];
                    v = second ? a * cs.y + bb * cs.x : a * cs.x - bb * cs.y;
                }
            }
            x[i] = v;
        }
        k_put_block(kplane, slot, b, x);
    }
#else
    for (uint d = tid; d < hd; d += WG)
        if (d >= p.ropeDim) k_put(kplane, slot, kh * hd + d, Kin[rb + d]);
    for (uint i = tid; i < half_; i += WG) {
        const vec2 cs = angle(pos, i);
        const uint da = p.neox != 0u ? i : 2u * i, db = da + step;
        const float a = Kin[rb + da], b = Kin[rb + db];
        k_put(kplane, slot, kh * hd + da, a * cs.x - b * cs.y);
        k_put(kplane, slot, kh * hd + db, a * cs.y + b * cs.x);
    }
#endif
#ifdef VT_Q
    for (uint b = b0 + tid; b < b1; b += WG) {
        [[unroll]] for (uint i = 0u; i < 32u; i++) x[i] = 32u * b + i < p.kvDim ? Vin[t * p.kvStride + 32u * b + i] : 0.0;
        v_put_block(vplane, slot, b, x);
    }
#else
    for (uint d = tid; d < hd; d += WG) v_put(vplane, slot, kh * hd + d, Vin[rb + d]);
#endif
}
