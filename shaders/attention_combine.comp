#version 450
// attention_combine — merges the per-split partials of attention (splits > 1) into out:
// for token t and head h, with the splits s that hold keys of the token
// (s < min(splits, ceil((tokpos[t] + 1) / chunk))) and row r = (t*heads + h)*splits + s of
// headDim+2 floats (O_s[headDim], m_s, l_s):
//   M = max_s m_s,  out[t][h][d] = sum_s exp(m_s - M) O_s[d] / sum_s exp(m_s - M) l_s
// One workgroup per (token, head); dispatch (n, heads, 1).
// Built with -DQ8 (attention_combine_q8), it also writes out as quantize_q8's 8-bit blocks
// (XQ, XD; rows of heads*headDim values) for the matvec_dot that reads it next (headDim a
// multiple of 32, at most 256).
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 128, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer PartBuf { float part[]; };
layout(std430, binding = 1) writeonly buffer OutBuf { float outv[]; };
layout(std430, binding = 2) readonly buffer PosBuf { int tokpos[]; };
#ifdef Q8
shared float q8src[256];
layout(std430, binding = 3) writeonly buffer Q8QBuf { uint XQ[]; };
layout(std430, binding = 4) writeonly buffer Q8DBuf { vec2 XD[]; };
#define Q8_STORE 128
#include "q8.glsl"
layout(std140, binding = 5) uniform Params {
#else
layout(std140, binding = 3) uniform Params {
#endif
    uint n, heads, headDim, chunk, splits;
} p;

const uint SMAX = 256u; // most splits (the host's split count stays below)

shared float w[SMAX];

void main() {
    const uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    if (t >= p.n || h >= p.heads) return;
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint hd = p.headDim, stride = hd + 2u;
    const uint nkeys = uint(tokpos[t]) + 1u;
    const uint ns = min(min(p.splits, SMAX), (nkeys + p.chunk - 1u) / p.chunk);
    const uint rb = (t * p.heads + h) * p.splits * stride;
    // M: every thread reads the maxima (few, independent loads); weights in shared memory
    float M = -1.0e30;
    for (uint s = 0u; s < ns; s++) M = max(M, part[rb + s * stride + hd]);
    for (uint s = tid; s < ns; s += WG) w[s] = exp(part[rb + s * stride + hd] - M);
    barrier();
    float L = 0.0;
    for (uint s = 0u; s < ns; s++) L = fma(w[s], part[rb + s * stride + hd + 1u], L);
    const uint ob = (t * p.heads + h) * hd;
    for (uint d = tid; d < hd; d += WG) {
        float a0 = 0.0, a1 = 0.0;
        uint s = 0u;
        for (; s + 2u <= ns; s += 2u) {
            a0 = fma(w[s], part[rb + s * stride + d], a0);
            a1 = fma(w[s + 1u], part[rb + (s + 1u) * stride + d], a1);
        }
        if (s < ns) a0 = fma(w[s], part[rb + s * stride + d], a0);
        const float o = (a0 + a1) / L;
        outv[ob + d] = o;
#ifdef Q8
        q8src[d] = o;
#endif
    }
#ifdef Q8
    barrier();
    q8_store(hd, ob / 32u);
#endif
}
