#version 450
// kv_store — writes the K and V rows of n tokens into their sequences' pages (layout in
// README.md, "K/V pages"): token t goes to position tokpos[t] of the sequence whose page list
// starts at pagetab[tokpt[t]]. K[t*kvStride + d] lands transposed (dimension-major within the
// page), V[t*kvStride + d] by slot (K and V rows kvStride floats apart: they may be views of one
// Q|K|V row). Dispatch (n, ceil(kvDim / 64), 1) (64 = the workgroup size).
layout(local_size_x = 64, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer KBuf { float Kin[]; };
layout(std430, binding = 1) readonly buffer VBuf { float Vin[]; };
layout(std430, binding = 2) writeonly buffer KVBuf { float kv[]; };
layout(std430, binding = 3) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 4) readonly buffer PtBuf { int tokpt[]; };
layout(std430, binding = 5) readonly buffer PageBuf { int pagetab[]; };
layout(std140, binding = 6) uniform Params {
    uint n, kvDim, pageSize, pageStride, layerOff, kvStride;
} p;

void main() {
    const uint t = gl_WorkGroupID.x;
    const uint d = gl_WorkGroupID.y * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (t >= p.n || d >= p.kvDim) return;
    const uint pos = uint(tokpos[t]);
    const uint page = uint(pagetab[uint(tokpt[t]) + pos / p.pageSize]);
    const uint slot = pos % p.pageSize;
    const uint base = page * p.pageStride + p.layerOff;
    kv[base + d * p.pageSize + slot] = Kin[t * p.kvStride + d];
    kv[base + p.pageSize * p.kvDim + slot * p.kvDim + d] = Vin[t * p.kvStride + d];
}
