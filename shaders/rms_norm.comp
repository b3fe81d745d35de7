#version 450
// rms_norm — Y[i*n + j] = (x[j] * (1 / sqrt(mean(x^2) + eps))) * w[j], x = input row rowsel[i]
// (useRowsel = 1) or i, read at X[row * xStride]. One workgroup per output row;
// dispatch (rows, 1, 1).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer XBuf { float X[]; };
layout(std430, binding = 1) readonly buffer WBuf { float W[]; };
layout(std430, binding = 2) writeonly buffer YBuf { float Y[]; };
layout(std430, binding = 3) readonly buffer SelBuf { uint rowsel[]; };
layout(std140, binding = 4) uniform Params {
    uint n, rows;
    float eps;
    uint useRowsel, xStride;
} p;

shared float red[32];

void main() {
    const uint i = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    if (i >= p.rows) return;
    const uint xb = (p.useRowsel != 0u ? rowsel[i] : i) * p.xStride;
    float s = 0.0;
    for (uint j = tid; j < p.n; j += WG) {
        const float v = X[xb + j];
        s += v * v;
    }
    // sum over the workgroup: subgroups, then up to 32 subgroup sums at a time in shared memory
    s = subgroupAdd(s);
    float total = 0.0;
    for (uint base = 0u; base < gl_NumSubgroups; base += 32u) {
        if (gl_SubgroupID >= base && gl_SubgroupID < base + 32u && subgroupElect()) red[gl_SubgroupID - base] = s;
        barrier();
        const uint cnt = min(32u, gl_NumSubgroups - base);
        for (uint j = 0u; j < cnt; j++) total += red[j];
        barrier();
    }
    const float scale = 1.0 / sqrt(total / float(p.n) + p.eps);
    const uint yb = i * p.n;
    for (uint j = tid; j < p.n; j += WG) Y[yb + j] = (X[xb + j] * scale) * W[j];
}
