#version 450
// attention_combine — merges the per-split partials of attention (splits > 1) into out:
// for token t and head h, with the splits s that hold keys of the token
// (s < min(splits, ceil((tokpos[t] + 1) / chunk))) and row r = (t*heads + h)*splits + s of
// headDim+2 floats (O_s[headDim], m_s, l_s):
//   M = max_s m_s,  out[t][h][d] = sum_s exp(m_s - M) O_s[d] / sum_s exp(m_s - M) l_s
// One workgroup per (token, head, block of 32 dimensions), of a power of two threads from 32 up
// to 128; dispatch (n, heads, ceil(headDim / 32)). Each block's workgroup derives M and the sum
// itself (from the splits' m_s, l_s: hundreds of floats), then thread (dimension d, part q) sums
// every WG/32-th split for d. With a workgroup a head, a thread walked every split for its
// dimension, a load round trip each four: 14.3 µs a layer over 171 splits on an H200, 32
// workgroups in all.
// Built with -DQ8 (attention_combine_q8), it also writes out as quantize_q8's 8-bit blocks
// (XQ, XD; rows of heads*headDim values) for the matvec_dot that reads it next (headDim a
// multiple of 32, at most 256).
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 128, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer PartBuf { float part[]; };
layout(std430, binding = 1) writeonly buffer OutBuf { float outv[]; };
layout(std430, binding = 2) readonly buffer PosBuf { int tokpos[]; };
#ifdef Q8
shared float q8src[32];
layout(std430, binding = 3) writeonly buffer Q8QBuf { uint XQ[]; };
layout(std430, binding = 4) writeonly buffer Q8DBuf { vec2 XD[]; };
#define Q8_STORE 128
#include "q8.glsl"
#define SINK_BINDING 5
#define PARAMS_BINDING 6
#else
#define SINK_BINDING 3
#define PARAMS_BINDING 4
#endif
layout(std430, binding = SINK_BINDING) readonly buffer SinkBuf { float sinkv[]; }; // attention_sink.glsl
layout(std140, binding = PARAMS_BINDING) uniform Params {
    uint n, heads, headDim, chunk, splits, sinks;
} p;
#include "attention_sink.glsl"

const uint SMAX = 256u; // most splits (the host's split count stays below)
const uint WMAX = 128u; // workgroup size (a power of two, at most this)

const uint DB = 32u;    // dimensions a workgroup

shared float w[SMAX];
shared float red[WMAX];

// the workgroup's maximum (op 0) or sum (op 1) of x, in red[0]; every thread calls it
float reduce(float x, uint op) {
    const uint tid = gl_LocalInvocationID.x;
    red[tid] = x;
    barrier();
    for (uint o = gl_WorkGroupSize.x / 2u; o > 0u; o >>= 1) {
        if (tid < o) red[tid] = op == 0u ? max(red[tid], red[tid + o]) : red[tid] + red[tid + o];
        barrier();
    }
    const float r = red[0];
    barrier(); // red is reused
    return r;
}

void main() {
    const uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y, d0 = gl_WorkGroupID.z * DB;
    if (t >= p.n || h >= p.heads || d0 >= p.headDim) return; // whole workgroup
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint hd = p.headDim, stride = hd + 2u;
    const uint nkeys = uint(tokpos[t]) + 1u;
    const uint ns = min(min(p.splits, SMAX), (nkeys + p.chunk - 1u) / p.chunk);
    const uint rb = (t * p.heads + h) * p.splits * stride;
    // the splits' maxima, then their weights and sums, a split a thread (a long cache has
    // hundreds: walked by every thread in turn they were a chain of dependent loads)
    float m = -1.0e30;
    for (uint s = tid; s < ns; s += WG) {
        w[s] = part[rb + s * stride + hd];
        m = max(m, w[s]);
    }
    const float M = reduce(m, 0u);
    float l = 0.0;
    for (uint s = tid; s < ns; s += WG) {
        w[s] = exp(w[s] - M);
        l = fma(w[s], part[rb + s * stride + hd + 1u], l);
    }
    const float L = with_sink(reduce(l, 1u), M, h); // reduce's barriers also publish w
    const uint ob = (t * p.heads + h) * hd;
    // dimension d of the block, every nq-th split from q (four loads in flight)
    const uint d = d0 + tid % DB, q = tid / DB, nq = WG / DB;
    vec4 a = vec4(0.0);
    if (d < hd) {
        uint s = q;
        for (; s + 3u * nq < ns; s += 4u * nq) {
            const uint b = rb + s * stride + d;
            a = fma(vec4(w[s], w[s + nq], w[s + 2u * nq], w[s + 3u * nq]),
                    vec4(part[b], part[b + nq * stride], part[b + 2u * nq * stride], part[b + 3u * nq * stride]), a);
        }
        for (; s < ns; s += nq) a.x = fma(w[s], part[rb + s * stride + d], a.x);
    }
    red[tid] = a.x + a.y + a.z + a.w; // free again after reduce's last barrier
    barrier();
    if (tid < DB && d < hd) {
        float o = 0.0;
        for (uint i = 0u; i < nq; i++) o += red[tid + i * DB];
        o /= L;
        outv[ob + d] = o;
#ifdef Q8
        q8src[tid] = o;
#endif
    }
#ifdef Q8
    barrier();
    q8_store(DB, (ob + d0) / 32u); // headDim a multiple of 32: the block is one 8-bit block
#endif
}
