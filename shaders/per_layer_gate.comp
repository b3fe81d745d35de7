#version 450
// per_layer_gate — one layer's gated per-layer input (Gemma 4's PerLayerBlock):
// G[r*width + j] = gelu_tanh(G[r*width + j]) * I[iOff + r*iStride + j], I per_layer_inputs'
// rows and iOff the layer's slice in them. Dispatch (ceil(width / 256), rows, 1).
layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer GBuf { float G[]; };
layout(std430, binding = 1) readonly buffer IBuf { float I[]; };
layout(std140, binding = 2) uniform Params { uint width, rows, iStride, iOff; } p;

#include "glu.glsl"

void main() {
    const uint j = gl_GlobalInvocationID.x, r = gl_WorkGroupID.y;
    if (j >= p.width || r >= p.rows) return;
    const uint g = r * p.width + j;
    G[g] = glu_act(G[g], 2u) * I[p.iOff + r * p.iStride + j];
}
