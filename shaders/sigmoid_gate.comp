#version 450
// sigmoid_gate — a gated attention's output times sigmoid of its gates:
// X[t·stride + c] *= sigmoid(S[t·2·qDim + (2h + 1)·headDim + i]), c = h·headDim + i < qDim, the
// gates where split_query left them. Dispatch (ceil(qDim / 256), rows, 1).
layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer XBuf { float X[]; };
layout(std430, binding = 1) readonly buffer SBuf { float S[]; };
layout(std140, binding = 2) uniform Params { uint qDim, headDim, rows, stride; } p;

void main() {
    const uint c = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (c >= p.qDim || t >= p.rows) return;
    const uint h = c / p.headDim, i = c % p.headDim;
    const float g = S[t * 2 * p.qDim + (2 * h + 1) * p.headDim + i];
    X[t * p.stride + c] *= 1.0 / (1.0 + exp(-g));
}
