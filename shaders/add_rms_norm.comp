#version 450
#ifdef F16_OUT
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
// add_rms_norm — the residual add and the next norm in one pass: X[i] += D[i], then
// Y[i] = (X[i] / sqrt(mean(X[i]^2) + eps)) * w, for rows of n floats. One workgroup per row;
// dispatch (rows, 1, 1). Y may be the same buffer as D (the Llama forward writes the norm over
// the sublayer output it just added): every element is read by the thread that later writes it,
// with a barrier in between. Same thread layout as rms_norm.comp.
// add_rms_norm_q8.comp is the decode rows' version that also writes 8-bit blocks. Built with
// -DF16_OUT (add_rms_norm_f16, Vulkan only) it also writes Y as float16 rows kp apart (to_f16's
// copy, for the tensor-core products that read it next; n a multiple of 4, so kp = n).
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer XBuf { float X[]; };
layout(std430, binding = 1) readonly buffer DBuf { float D[]; };
layout(std430, binding = 2) readonly buffer WBuf { float W[]; };
layout(std430, binding = 3) writeonly buffer YBuf { float Y[]; };
// set to 1 when a row's sum of squares is not finite: a float16 product upstream overflowed (an
// overflow's inf or NaN reaches the row's residual), and the host re-runs the pass wider
layout(std430, binding = 4) buffer FlagBuf { uint nonfinite; };
#ifdef F16_OUT
layout(std430, binding = 5) writeonly buffer X16Buf { float16_t X16[]; };
layout(std140, binding = 6) uniform Params {
    uint n, rows;
    float eps;
} p;
#define PUT16(j, y) X16[i * p.n + (j)] = float16_t(y);
#else
layout(std140, binding = 5) uniform Params {
    uint n, rows;
    float eps;
} p;
#define PUT16(j, y)
#endif

const uint U = 4u;
const uint RMAX = 128u; // subgroup sums reduced at a time

shared float red[RMAX];

void main() {
    const uint i = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    if (i >= p.rows) return;
    const uint xb = i * p.n;
    float s[U];
    [[unroll]] for (uint u = 0u; u < U; u++) s[u] = 0.0;
    uint j0 = 0u;
    for (; j0 + U * WG <= p.n; j0 += U * WG) {
        float v[U];
        [[unroll]] for (uint u = 0u; u < U; u++) v[u] = X[xb + j0 + u * WG + tid] + D[xb + j0 + u * WG + tid];
        [[unroll]] for (uint u = 0u; u < U; u++) { X[xb + j0 + u * WG + tid] = v[u]; s[u] = fma(v[u], v[u], s[u]); }
    }
    [[unroll]] for (uint u = 0u; u < U; u++) {
        const uint j = j0 + u * WG + tid;
        if (j < p.n) { const float v = X[xb + j] + D[xb + j]; X[xb + j] = v; s[u] = fma(v, v, s[u]); }
    }
    float ss = (s[0] + s[1]) + (s[2] + s[3]);
    // sum over the workgroup: subgroups, then up to RMAX subgroup sums at a time in shared memory
    ss = subgroupAdd(ss);
    float total = 0.0;
    for (uint base = 0u; base < gl_NumSubgroups; base += RMAX) {
        if (gl_SubgroupID >= base && gl_SubgroupID < base + RMAX && subgroupElect()) red[gl_SubgroupID - base] = ss;
        barrier();
        const uint cnt = min(RMAX, gl_NumSubgroups - base);
        float t0 = 0.0, t1 = 0.0, t2 = 0.0, t3 = 0.0;
        uint j = 0u;
        for (; j + 4u <= cnt; j += 4u) { t0 += red[j]; t1 += red[j + 1u]; t2 += red[j + 2u]; t3 += red[j + 3u]; }
        for (; j < cnt; j++) t0 += red[j];
        total += (t0 + t1) + (t2 + t3);
        barrier();
    }
    if (tid == 0u && (isnan(total) || isinf(total))) nonfinite = 1u;
    const float scale = 1.0 / sqrt(total / float(p.n) + p.eps);
    const uint yb = xb;
    for (j0 = 0u; j0 + U * WG <= p.n; j0 += U * WG) {
        float v[U], w[U];
        [[unroll]] for (uint u = 0u; u < U; u++) { v[u] = X[xb + j0 + u * WG + tid]; w[u] = W[j0 + u * WG + tid]; }
        [[unroll]] for (uint u = 0u; u < U; u++) {
            const float y = (v[u] * scale) * w[u];
            Y[yb + j0 + u * WG + tid] = y;
            PUT16(j0 + u * WG + tid, y)
        }
    }
    [[unroll]] for (uint u = 0u; u < U; u++) {
        const uint j = j0 + u * WG + tid;
        if (j < p.n) {
            const float y = (X[xb + j] * scale) * W[j];
            Y[yb + j] = y;
            PUT16(j, y)
        }
    }
}
