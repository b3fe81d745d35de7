#version 450
// to_f16 — activation rows to float16 for matmul_coop_T: Y[m*Kp + k] = X[m*xStride + k] for
// k < K, 0 for K <= k < Kp (Kp: K rounded up to 4, so every row is whole f16vec4s). The tensor-core
// GEMM reads each activation row once per 128 weight rows; converted once here, it reads half the
// bytes and converts nothing. Dispatch (ceil(Kp/4 / threads), M, 1).
// (Written as packed pairs: no 16-bit features needed here.)

layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer XBuf { float X[]; };
layout(std430, binding = 1) writeonly buffer YBuf { uvec2 Y[]; };
layout(std140, binding = 2) uniform Params {
    uint K, M, xStride, Kp;
} p;

void main() {
    const uint g = gl_GlobalInvocationID.x, m = gl_WorkGroupID.y;
    if (4u * g >= p.Kp || m >= p.M) return;
    const uint k = 4u * g, b = m * p.xStride + k;
    vec4 v = vec4(0.0);
    for (uint e = 0u; e < 4u; e++)
        if (k + e < p.K) v[e] = X[b + e];
    Y[m * (p.Kp / 4u) + g] = uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
}
