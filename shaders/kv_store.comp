#version 450
// kv_store — writes the K and V rows of n tokens into their sequences' pages (layout in
// README.md, "K/V pages"; types as kv_types.glsl): token t goes to position tokpos[t] of the
// sequence whose page list starts at pagetab[tokpt[t]]. K[t*kvStride + d] lands transposed
// (dimension-major within the page) when f32/f16, V[t*kvStride + d] by slot (K and V rows
// kvStride floats apart: they may be views of one Q|K|V row). A quantized K or V row is written
// a block of 32 at a time, by the thread whose d is the block's first value.
// Dispatch (n, ceil(kvDim / 64), 1) (64 = the workgroup size).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 64, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer KBuf { float Kin[]; };
layout(std430, binding = 1) readonly buffer VBuf { float Vin[]; };
layout(std430, binding = 3) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 4) readonly buffer PtBuf { int tokpt[]; };
layout(std430, binding = 5) readonly buffer PageBuf { int pagetab[]; };
layout(std140, binding = 6) uniform Params {
    uint n, kvDim, pageSize, pageStride, layerOff, kvStride;
} p;

#define KV_BINDING 2
#define KV_ACCESS writeonly
#define KV_STORE
#include "kv_types.glsl"

void main() {
    const uint t = gl_WorkGroupID.x;
    const uint d = gl_WorkGroupID.y * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (t >= p.n || d >= p.kvDim) return;
    const uint pos = uint(tokpos[t]);
    const uint page = uint(pagetab[uint(tokpt[t]) + pos / p.pageSize]);
    const uint slot = pos % p.pageSize;
    const uint kplane = page * p.pageStride + p.layerOff, vplane = kplane + kv_kplane_words();
    const uint rb = t * p.kvStride;
#if defined(KT_Q) || defined(VT_Q)
    float x[32];
#endif
#ifdef KT_Q
    if ((d & 31u) == 0u) {
        [[unroll]] for (uint i = 0u; i < 32u; i++) x[i] = d + i < p.kvDim ? Kin[rb + d + i] : 0.0;
        k_put_block(kplane, slot, d >> 5, x);
    }
#else
    k_put(kplane, slot, d, Kin[rb + d]);
#endif
#ifdef VT_Q
    if ((d & 31u) == 0u) {
        [[unroll]] for (uint i = 0u; i < 32u; i++) x[i] = d + i < p.kvDim ? Vin[rb + d + i] : 0.0;
        v_put_block(vplane, slot, d >> 5, x);
    }
#else
    v_put(vplane, slot, d, Vin[rb + d]);
#endif
}
