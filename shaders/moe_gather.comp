#version 450
// moe_gather — Out[i] = X[Rows[i]] for the count rows of width floats a mixture-of-experts layer
// routes (row i of Out is the i-th (token, expert) pair in expert order; X rows xStride apart).
// Dispatch (count, 1, 1).
layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer XBuf { float X[]; };
layout(std430, binding = 1) readonly buffer RowsBuf { uint Rows[]; };
layout(std430, binding = 2) writeonly buffer OutBuf { float Out[]; };
layout(std140, binding = 3) uniform Params { uint width, count, xStride; } p;

void main() {
    const uint i = gl_WorkGroupID.x;
    if (i >= p.count) return;
    const uint src = Rows[i] * p.xStride, dst = i * p.width;
    for (uint c = gl_LocalInvocationID.x; c < p.width; c += gl_WorkGroupSize.x) Out[dst + c] = X[src + c];
}
