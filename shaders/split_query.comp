#version 450
// split_query — the queries out of a gated-attention query product (Qwen3.5: each head's rows
// are its query, then its output gate): Q[t·stride + h·headDim + i] = S[t·2·qDim + 2h·headDim + i]
// for i < headDim, every head h of each row t < rows; the gates stay in S (sigmoid_gate reads
// them). Dispatch (ceil(qDim / 256), rows, 1).
layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer SBuf { float S[]; };
layout(std430, binding = 1) writeonly buffer QBuf { float Q[]; };
layout(std140, binding = 2) uniform Params { uint qDim, headDim, rows, stride; } p;

void main() {
    const uint c = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (c >= p.qDim || t >= p.rows) return;
    const uint h = c / p.headDim, i = c % p.headDim;
    Q[t * p.stride + c] = S[t * 2 * p.qDim + 2 * h * p.headDim + i];
}
