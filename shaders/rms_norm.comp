#version 450
// rms_norm — Y[i*n + j] = (x[j] * (1 / sqrt(mean(x^2) + eps))) * w[j], x = input row rowsel[i]
// (useRowsel = 1) or i, read at X[row * xStride]. With heads > 1 (Q/K head norms), row i is
// head i % heads of token i / heads: read at X[(i / heads) * xStride + (i % heads) * n], written
// at Y[(i / heads) * yStride + (i % heads) * n] (Y may be X: each thread reads its elements
// before writing them). One workgroup per output row; dispatch (rows, 1, 1). Each thread takes U elements a WG apart per step, independent loads and
// partial sums (a 4096-wide row is one step of a 1024-thread workgroup).
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer XBuf { float X[]; };
layout(std430, binding = 1) readonly buffer WBuf { float W[]; };
layout(std430, binding = 2) buffer YBuf { float Y[]; };
layout(std430, binding = 3) readonly buffer SelBuf { uint rowsel[]; };
// set to 1 when a row's sum of squares is not finite (add_rms_norm.comp says why)
layout(std430, binding = 4) buffer FlagBuf { uint nonfinite; };
layout(std140, binding = 5) uniform Params {
    uint n, rows;
    float eps;
    uint useRowsel, xStride, heads, yStride;
} p;

const uint U = 4u;
const uint RMAX = 128u; // subgroup sums reduced at a time

shared float red[RMAX];

void main() {
    const uint i = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    if (i >= p.rows) return;
    const uint row = p.useRowsel != 0u ? rowsel[i] : i;
    const uint xb = (row / p.heads) * p.xStride + (row % p.heads) * p.n;
    float s[U];
    [[unroll]] for (uint u = 0u; u < U; u++) s[u] = 0.0;
    uint j0 = 0u;
    for (; j0 + U * WG <= p.n; j0 += U * WG) {
        float v[U];
        [[unroll]] for (uint u = 0u; u < U; u++) v[u] = X[xb + j0 + u * WG + tid];
        [[unroll]] for (uint u = 0u; u < U; u++) s[u] = fma(v[u], v[u], s[u]);
    }
    [[unroll]] for (uint u = 0u; u < U; u++) {
        const uint j = j0 + u * WG + tid;
        if (j < p.n) { const float v = X[xb + j]; s[u] = fma(v, v, s[u]); }
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
    const uint yb = (i / p.heads) * p.yStride + (i % p.heads) * p.n;
    for (j0 = 0u; j0 + U * WG <= p.n; j0 += U * WG) {
        float v[U], w[U];
        [[unroll]] for (uint u = 0u; u < U; u++) { v[u] = X[xb + j0 + u * WG + tid]; w[u] = W[j0 + u * WG + tid]; }
        [[unroll]] for (uint u = 0u; u < U; u++) Y[yb + j0 + u * WG + tid] = (v[u] * scale) * w[u];
    }
    [[unroll]] for (uint u = 0u; u < U; u++) {
        const uint j = j0 + u * WG + tid;
        if (j < p.n) Y[yb + j] = (X[xb + j] * scale) * W[j];
    }
}
