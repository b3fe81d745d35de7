#version 450
// add_rms_norm_q8 — add_rms_norm (X[i] += D[i], Y[i] = X[i] / sqrt(mean(X^2) + eps) * w) for the
// rows of a decode step, that also writes Y as quantize_q8's 8-bit blocks (XQ, XD, exactly as
// quantize_q8 would make them from Y) for the matvec_dot that reads it next. One workgroup per
// row, dispatch (rows, 1, 1); n a multiple of 32, at most 32 RMAX threads (8192 at 256).
//
// Built for latency (it runs twice a layer, on one row, with nothing else on the GPU): every
// load (X, D and w) is issued at the start, each thread keeps its values in registers (runs of 8
// consecutive values, RMAX runs at WG-run strides), one barrier for the sum of squares, and
// each block of 32 is quantized by the 4 threads that hold it (their maxima and sums through
// shuffles: subgroups of at least 4 consecutive invocations). Y may be the same buffer as D:
// each thread reads its values before it writes them.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "q8.glsl"

layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer XBuf { vec4 X[]; };
layout(std430, binding = 1) readonly buffer DBuf { vec4 D[]; };
layout(std430, binding = 2) readonly buffer WBuf { vec4 W[]; };
layout(std430, binding = 3) writeonly buffer YBuf { vec4 Y[]; };
layout(std430, binding = 4) writeonly buffer Q8QBuf { uint XQ[]; };
layout(std430, binding = 5) writeonly buffer Q8DBuf { vec2 XD[]; };
layout(std140, binding = 6) uniform Params {
    uint n, rows;
    float eps;
} p;

const uint RMAX = 4u;   // runs of 8 values a thread
const uint SGMAX = 64u; // subgroups (of at least 4)
shared float red[SGMAX];

void main() {
    const uint i = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    if (i >= p.rows) return;
    const uint row4 = i * (p.n / 4u); // the row, in vec4s
    // run r of this thread: values 8 (r WG + tid) .. + 7 of the row
    vec4 v[RMAX][2], w[RMAX][2];
    float ss = 0.0;
    [[unroll]] for (uint r = 0u; r < RMAX; r++) {
        const uint c4 = 2u * (r * WG + tid);
        if (4u * c4 < p.n) {
            [[unroll]] for (uint h = 0u; h < 2u; h++) {
                v[r][h] = X[row4 + c4 + h] + D[row4 + c4 + h];
                w[r][h] = W[c4 + h];
            }
        }
    }
    [[unroll]] for (uint r = 0u; r < RMAX; r++) {
        const uint c4 = 2u * (r * WG + tid);
        if (4u * c4 < p.n) {
            [[unroll]] for (uint h = 0u; h < 2u; h++) {
                X[row4 + c4 + h] = v[r][h];
                ss += dot(v[r][h], v[r][h]);
            }
        }
    }
    ss = subgroupAdd(ss);
    if (subgroupElect()) red[gl_SubgroupID] = ss;
    barrier();
    float total = 0.0;
    for (uint s = 0u; s < gl_NumSubgroups; s++) total += red[s];
    const float scale = 1.0 / sqrt(total / float(p.n) + p.eps);

    [[unroll]] for (uint r = 0u; r < RMAX; r++) {
        const uint c4 = 2u * (r * WG + tid);
        const bool live = 4u * c4 < p.n; // the same for the 4 threads of a block (n % 32 == 0)
        vec4 y[2];
        [[unroll]] for (uint h = 0u; h < 2u; h++) y[h] = live ? (v[r][h] * scale) * w[r][h] : vec4(0.0);
        const vec4 a = max(abs(y[0]), abs(y[1]));
        float amax = max(max(a.x, a.y), max(a.z, a.w));
        amax = max(amax, subgroupShuffleXor(amax, 1u));
        amax = max(amax, subgroupShuffleXor(amax, 2u));
        const float d = q8_scale(amax), id = q8_inv(d);
        const uint q0 = q8_word(y[0], id), q1 = q8_word(y[1], id);
        int s = q8_sum(q0) + q8_sum(q1);
        s += subgroupShuffleXor(s, 1u);
        s += subgroupShuffleXor(s, 2u);
        if (live) {
            Y[row4 + c4] = y[0];
            Y[row4 + c4 + 1u] = y[1];
            XQ[row4 + c4] = q0; // 4 values a word, as a vec4
            XQ[row4 + c4 + 1u] = q1;
            if ((tid & 3u) == 0u) XD[(row4 + c4) / 8u] = vec2(q8_stored(d), float(s)); // the block's first thread
        }
    }
}
