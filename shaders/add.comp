#version 450
// add — X[i] += Y[i] for i < count.
// Dispatch (ceil(count / 256), 1, 1); a grid-stride loop covers the rest when fewer groups are
// dispatched (e.g. at most 65535).
layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer XBuf { float X[]; };
layout(std430, binding = 1) readonly buffer YBuf { float Y[]; };
layout(std140, binding = 2) uniform Params { uint count; } p;

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) X[i] += Y[i];
}
