#version 450
// kv_gather — one sequence's keys 0 .. keys - 1 of one layer, from its f16 K/V pages into a
// contiguous float16 copy for attention_cm2 (whose tensor-addressed loads cannot follow pages):
// K at [kvHead][cap][headDim], V after it (kvDim * cap halves in) the same way.
// Keys keys .. padded - 1 of V are written as zeros (whole tiles for attention_cm2; its masked
// scores give those keys P = 0, and 0 times a stale half could be NaN). 16 bytes a copy: f16
// pages whose 8-key runs sit at 16-byte boundaries (pageSize a multiple of 8, pageStride and
// layerOff multiples of 4 words, kvDim and headDim multiples of 8; the host checks).
// A page's K plane is [dimension][slot], so each K unit transposes an 8 x 8 block (8 dimensions
// of 8 keys) in registers; neighbouring threads take neighbouring dimensions, so each key's
// row is written whole by a few threads. Grid-stride over (K units, then V units).
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer KVBuf { uvec4 kv16[]; };
layout(std430, binding = 1) writeonly buffer OutBuf { uvec4 out16[]; };
layout(std430, binding = 2) readonly buffer PageBuf { int pagetab[]; };
layout(std140, binding = 3) uniform Params {
    uint kvDim, headDim, pageSize, pageStride, layerOff;
    uint keys, padded, cap, pt;
} p;

uint half_of(const uvec4 w, const uint i) { return (w[i >> 1] >> (16u * (i & 1u))) & 0xFFFFu; }

void main() {
    const uint ps = p.pageSize, groups = p.kvDim / 8u;
    const uint kUnits = groups * (p.padded / 8u), units = kUnits + p.padded * groups;
    const uint kplane = (ps * p.kvDim + 1u) >> 1;   // words of a page's K plane (f16)
    for (uint u = gl_GlobalInvocationID.x; u < units; u += gl_NumWorkGroups.x * gl_WorkGroupSize.x) {
        if (u < kUnits) {
            // K: dimensions d0 .. d0 + 7 of keys j .. j + 7 (a page's run), transposed
            const uint d0 = 8u * (u % groups), j = 8u * (u / groups);
            uvec4 w[8];
            const bool have = j < p.keys;   // a run past the last key is padding (its scores are masked)
            const uint base = have ? 2u * (uint(pagetab[p.pt + j / ps]) * p.pageStride + p.layerOff) + j % ps : 0u;
            [[unroll]] for (uint r = 0u; r < 8u; r++) w[r] = have ? kv16[(base + (d0 + r) * ps) >> 3] : uvec4(0u);
            const uint row = (d0 / p.headDim) * p.cap + j, dd = d0 % p.headDim;
            [[unroll]] for (uint i = 0u; i < 8u; i++) {
                uvec4 o;
                [[unroll]] for (uint q = 0u; q < 4u; q++) o[q] = half_of(w[2u * q], i) | (half_of(w[2u * q + 1u], i) << 16);
                out16[((row + i) * p.headDim + dd) >> 3] = o;
            }
        } else {
            // V: key j, dimensions c .. c + 7 (of KV head c / headDim)
            const uint v = u - kUnits, j = v / groups, c = 8u * (v % groups);
            uvec4 w = uvec4(0u);
            if (j < p.keys) {
                const uint base = 2u * (uint(pagetab[p.pt + j / ps]) * p.pageStride + p.layerOff + kplane);
                w = kv16[(base + (j % ps) * p.kvDim + c) >> 3];
            }
            out16[(p.kvDim * p.cap + ((c / p.headDim) * p.cap + j) * p.headDim + c % p.headDim) >> 3] = w;
        }
    }
}
