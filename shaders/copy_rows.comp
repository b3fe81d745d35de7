#version 450
// copy_rows — Y[a·yA + b·yB + yOff + j] = X[a·xA + b·xB + xOff + j] for a < A, b < B, j < width:
// rows of a two-level layout (tokens, heads) moved between buffers of other strides (MLA's
// per-head query parts and outputs, its latent rows into K and V). Dispatch (⌈width / 64⌉, B, A).
layout(local_size_x = 64, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer XBuf { float X[]; };
layout(std430, binding = 1) writeonly buffer YBuf { float Y[]; };
layout(std140, binding = 2) uniform Params { uint width, xA, xB, xOff, yA, yB, yOff; } p;

void main() {
    const uint j = gl_GlobalInvocationID.x, b = gl_WorkGroupID.y, a = gl_WorkGroupID.z;
    if (j >= p.width) return;
    Y[a * p.yA + b * p.yB + p.yOff + j] = X[a * p.xA + b * p.xB + p.xOff + j];
}
