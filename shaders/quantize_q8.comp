#version 450
// quantize_q8 — activation rows to 8-bit blocks of 32 for matvec_dot_T (integer dot products):
// for row m < M and block b < K/32 of X[m*xStride ...], d = amax/127 and q_j = round(x_j / d),
// as the CPU's Q8_0/Q8_1 (ck_quantize_q8_*_ref) but for ties (to even here), d rounded to f16
// (q8.glsl). One dispatch per matvec input (the Q, K and V products share it): quantizing in
// matvec_dot_T itself, each workgroup its own copy, was slower on an H100 (the float rows are
// read once per group of weight rows, and the rounding costs about as much as the dot products).
//   XQ[(m*(K/32) + b)*8 + j/4] byte j%4 = q_j (int8)
//   XD[m*(K/32) + b] = (d, float(sum_j q_j))
// Eight threads per block, 4 values each; dispatch (ceil(K/32 / (threads/8)), M, 1).
#extension GL_EXT_control_flow_attributes : require
#include "q8.glsl"

layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer XBuf { float X[]; };
layout(std430, binding = 0) readonly buffer XBuf4 { vec4 X4[]; };
layout(std430, binding = 1) writeonly buffer QBuf { uint XQ[]; };
layout(std430, binding = 2) writeonly buffer DBuf { vec2 XD[]; };
layout(std140, binding = 3) uniform Params {
    uint K, M, xStride;
} p;

const uint MAXWG = 1024u;
shared float smax[MAXWG];
shared uint sword[MAXWG];

void main() {
    const uint tid = gl_LocalInvocationID.x, lane = tid & 7u;
    const uint nb = p.K / 32u, m = gl_WorkGroupID.y;
    const uint b = gl_WorkGroupID.x * (gl_WorkGroupSize.x / 8u) + tid / 8u;
    const bool live = b < nb && m < p.M;
    vec4 v = vec4(0.0);
    if (live) {
        const uint i = m * p.xStride + b * 32u + lane * 4u;
        v = (p.xStride & 3u) == 0u ? X4[i >> 2] : vec4(X[i], X[i + 1u], X[i + 2u], X[i + 3u]);
    }
    const vec4 a = abs(v);
    smax[tid] = max(max(a.x, a.y), max(a.z, a.w));
    barrier();
    float amax = 0.0;
    [[unroll]] for (uint j = 0u; j < 8u; j++) amax = max(amax, smax[(tid & ~7u) + j]);
    const float d = q8_scale(amax);
    const uint w = q8_word(v, q8_inv(d));
    sword[tid] = w;
    barrier();
    if (!live) return;
    XQ[(m * nb + b) * 8u + lane] = w;
    if (lane == 0u) {
        int s = 0;
        [[unroll]] for (uint j = 0u; j < 8u; j++) s += q8_sum(sword[tid + j]);
        XD[m * nb + b] = vec2(q8_stored(d), float(s));
    }
}
