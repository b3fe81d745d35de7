#version 450
// swiglu — gate[i] = act(gate[i]) * up[i] for i < count (act: glu.glsl's glu_pair; SiLU,
// tanh-GELU, or 3: the clamped SwiGLU with its alpha and limit).
// Dispatch (ceil(count / 256), 1, 1); a grid-stride loop covers the rest when fewer groups are
// dispatched (e.g. at most 65535).
layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer GateBuf { float G[]; };
layout(std430, binding = 1) readonly buffer UpBuf { float Up[]; };
layout(std140, binding = 2) uniform Params { uint count, act; float alpha, limit; } p;

#include "glu.glsl"

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) {
        const float g = G[i];
        G[i] = glu_pair(g, Up[i], p.act, p.alpha, p.limit);
    }
}
