#version 450
#ifdef F16_OUT
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
// swiglu_pairs — the prefill half of the fused MLP input: S holds interleaved (gate, up) products
// (a matmul of the interleaved gate/up weight: row m is gate_0, up_0, gate_1, up_1, ...), and
// G[j] = act(S[2j]) * S[2j+1] for j < count, so G[m*ffn + i] = act(gate_i) * up_i for row m
// (act: glu.glsl; SiLU or tanh-GELU).
// Dispatch (ceil(count / 256), 1, 1); a grid-stride loop covers the rest when fewer groups are
// dispatched (e.g. at most 65535).
layout(local_size_x = 256, local_size_x_id = 0) in;

#include "glu.glsl"

#ifdef F16_OUT
// swiglu_pairs_f16 (Vulkan only): also G as float16 rows (to_f16's copy, for the down product),
// two values a thread; count = rows * ffn, ffn a multiple of 4 (so rows of G are whole pairs).
layout(std430, binding = 0) readonly buffer SBuf { vec4 S[]; };
layout(std430, binding = 1) writeonly buffer GateBuf { vec2 G[]; };
layout(std430, binding = 2) writeonly buffer G16Buf { f16vec2 G16[]; };
layout(std140, binding = 3) uniform Params { uint count, act; } p;

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.count / 2u; i += stride) {
        const vec4 s = S[i];
        const vec2 g = vec2(glu_act(s.x, p.act) * s.y, glu_act(s.z, p.act) * s.w);
        G[i] = g;
        G16[i] = f16vec2(g);
    }
}
#else
layout(std430, binding = 0) readonly buffer SBuf { vec2 S[]; };
layout(std430, binding = 1) writeonly buffer GateBuf { float G[]; };
layout(std140, binding = 2) uniform Params { uint count, act; } p;

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) {
        const vec2 s = S[i];
        G[i] = glu_act(s.x, p.act) * s.y;
    }
}
#endif
