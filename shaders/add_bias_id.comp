#version 450
// add_bias_id — X[i * stride + j] += B[ids[i] * n + j] for rows i < rows and j < n: each routed
// pair's expert bias (gpt-oss; B stacks the experts' biases, expert e's at e·n) on the
// expert-ordered rows of an expert product (moe_route's rows; its ids section at word idsOff of
// R). Dispatch (ceil(n / 256), rows, 1).
layout(local_size_x = 256, local_size_x_id = 0) in;
layout(std430, binding = 0) buffer XBuf { float X[]; };
layout(std430, binding = 1) readonly buffer BBuf { float B[]; };
layout(std430, binding = 2) readonly buffer RBuf { uint R[]; };
layout(std140, binding = 3) uniform Params { uint n, rows, stride, idsOff; } p;
void main() {
    const uint j = gl_GlobalInvocationID.x, i = gl_WorkGroupID.y;
    if (j >= p.n || i >= p.rows) return;
    X[i * p.stride + j] += B[R[p.idsOff + i] * p.n + j];
}
