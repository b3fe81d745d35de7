#version 450
// sum_splits — the split-K planes of matmul_coop_T added up:
//   Y[m*yStride + n] = sum_{z < splits} P[z*plane + m*N + n]   for m < M, n < N.
// Dispatch (ceil(M*N / 256), 1, 1) or fewer: a grid-stride loop covers the rest.
layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer PBuf { float P[]; };
layout(std430, binding = 1) writeonly buffer YBuf { float Y[]; };
layout(std140, binding = 2) uniform Params { uint N, M, yStride, splits, plane; } p;

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x, count = p.M * p.N;
    for (uint i = gl_GlobalInvocationID.x; i < count; i += stride) {
        float s = 0.0;
        for (uint z = 0u; z < p.splits; z++) s += P[z * p.plane + i];
        Y[(i / p.N) * p.yStride + i % p.N] = s;
    }
}
