#version 450
// get_rows_T — embedding lookup: out[i*K + k] = W[tokens[i]][k] * scale for i < n, dequantized
// exactly as swift/Sources/CKernels/dequantize.c does (scale: Gemma's √dim, else 1). One workgroup per row; dispatch (n, 1, 1).
#extension GL_EXT_shader_16bit_storage : require

layout(local_size_x = 256, local_size_x_id = 0) in;

#define DQ_PRECISE
#include "quants.glsl"

layout(std430, binding = 1) readonly buffer TokBuf { int tokens[]; };
layout(std430, binding = 2) writeonly buffer OutBuf { float outv[]; };
layout(std140, binding = 3) uniform Params {
    uint K, rowBytes, n;
    float scale;
} p;

void main() {
    const uint i = gl_WorkGroupID.x;
    if (i >= p.n) return;
    const uint rw = uint(tokens[i]) * (p.rowBytes >> 1);
    const uint ob = i * p.K;
    const uint U = units_per_row(p.K);
    for (uint u = gl_LocalInvocationID.x; u < U; u += gl_WorkGroupSize.x) {
        const Unit s = unit_load(rw, u, p.K);
        for (uint g = 0u; g < UNIT_VECS; g++) {
            const vec4 v = unit_vec(s, g);
            const uint k = unit_pos(u, g);
#ifdef UNIT_TAIL
            for (uint e = 0u; e < 4u; e++)
                if (k + e < p.K) outv[ob + k + e] = v[e] * p.scale;
#else
            outv[ob + k] = v.x * p.scale;
            outv[ob + k + 1u] = v.y * p.scale;
            outv[ob + k + 2u] = v.z * p.scale;
            outv[ob + k + 3u] = v.w * p.scale;
#endif
        }
    }
}
