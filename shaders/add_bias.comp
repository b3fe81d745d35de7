#version 450
// add_bias — X[r * stride + j] += B[j] for rows r < rows and j < n (a projection's bias, on
// every row of a batch). Dispatch (ceil(n / 256), rows, 1).
layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer XBuf { float X[]; };
layout(std430, binding = 1) readonly buffer BBuf { float B[]; };
layout(std140, binding = 2) uniform Params { uint n, rows, stride; } p;

void main() {
    const uint j = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    if (j >= p.n || r >= p.rows) return;
    X[r * p.stride + j] += B[j];
}
