#version 450
// matvec_dot_batch_T — matvec_dot_T for a few activation rows (a decode batch of 2..16
// sequences), same buffers, parameters and result: Y[m*yStride + r] = sum_k W[r][k] X[m][k], X
// as quantize_q8's 8-bit blocks, GLU mode as matvec_dot_T.
//
// Why another kernel: in matvec_dot_T a workgroup takes ROWS (2) weight rows and reads every
// activation row's blocks itself, so each weight byte brings ~18 bytes of activations through the
// caches at 16 rows. Here a workgroup takes many weight rows (RG row groups of SGR rows each) and
// the activation blocks go through shared memory once for all of them: the workgroup walks K in
// chunks of KC = 32 BPL blocks; per chunk each thread loads its weight blocks (lane, lane + 32,
// ... of the chunk, for its group's SGR rows), the threads copy the NCOLS rows' blocks of the
// chunk to shared memory, then each thread multiplies its weight blocks with every activation row. A row group is 32 consecutive invocations (a
// "lane" is the invocation's index among them); its sums are reduced with subgroupAdd, and where
// a subgroup is narrower than 32, the subgroups of a group add up through shared memory
// (subgroup sizes must divide 32, SGR be at most 4: the partial sums reuse the chunk's shared
// words; the host keeps matvec_dot_T elsewhere).
// Dispatch (ceil(N / (SGR * WG / 32)), ceil(M / NCOLS), 1). Vulkan only, as matvec_dot_T.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 256, local_size_x_id = 0) in;
layout(constant_id = 1) const uint NCOLS = 16; // activation rows per workgroup
layout(constant_id = 2) const uint SGR = 2;    // weight rows per group of 32 invocations (even in GLU mode)
layout(constant_id = 3) const uint BPL = 1;    // blocks per lane per chunk

#include "quants.glsl"

layout(std430, binding = 0) readonly buffer WeightBuf32 { uint w32[]; };
layout(std430, binding = 1) readonly buffer XQBuf { uvec4 XQ[]; };
layout(std430, binding = 2) readonly buffer XDBuf { vec2 XD[]; };
layout(std430, binding = 3) writeonly buffer YBuf { float Y[]; };
layout(std140, binding = 4) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride;
    uint glu; // > 0: rows come in (gate, up) pairs, Y[m*yStride + r/2] = glu_act(gate, glu) * up
} p;

#include "glu.glsl"
#define DOT_TWO_CHAINS
#include "dot_blocks.glsl"

const uint KC = 32u * BPL;                     // blocks a chunk
// the chunk's activation blocks: values as [col][half][block] uvec4s (lanes read neighbouring
// blocks: no bank conflicts), (scale, sum) as [col][block]; after the last chunk the same words
// hold the subgroups' partial sums
shared uvec4 xq[NCOLS * 2u * KC];
shared vec2 xds[NCOLS * KC];

void main() {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    // groups are made of whole subgroups, whichever invocations the device puts in them
    const uint S = gl_SubgroupSize, per = 32u / S, sg = gl_SubgroupID;
    const uint RG = WG / 32u, rg = sg / per, lane = (sg % per) * S + gl_SubgroupInvocationID;
    const uint r0 = gl_WorkGroupID.x * (RG * SGR), c0 = gl_WorkGroupID.y * NCOLS;
    if (r0 >= p.N || c0 >= p.M) return; // whole workgroup: no barrier is skipped by part of it
    const uint ncols = min(NCOLS, p.M - c0);
    const uint rowWords = p.rowBytes >> 1, nb = p.K / 32u;
    const uint g0 = r0 + rg * SGR; // this group's first row

    uint rw[SGR];
    [[unroll]] for (uint r = 0u; r < SGR; r++) rw[r] = min(g0 + r, p.N - 1u) * rowWords; // rows past N: read row N-1, never stored
    float acc[SGR * NCOLS];
    [[unroll]] for (uint i = 0u; i < SGR * NCOLS; i++) acc[i] = 0.0;

    for (uint cb = 0u; cb < nb; cb += KC) {
        const uint kc = min(KC, nb - cb);
        // this lane's weight blocks of the chunk, loads issued before the activations' (their
        // latencies overlap)
        WB w[BPL * SGR];
        [[unroll]] for (uint i = 0u; i < BPL; i++) {
            const uint b = min(lane + 32u * i, kc - 1u); // past the chunk: a block of it, unused
            [[unroll]] for (uint r = 0u; r < SGR; r++) w[i * SGR + r] = wbload_at(rw[r], cb + b);
        }
        // the chunk's activation blocks of the ncols rows to shared memory
        // (rows past ncols as zero blocks: the products below then need no guard, so the
        // compiler can interleave the activation rows' dependent chains)
        for (uint e = tid; e < NCOLS * 2u * KC; e += WG) {
            const uint c = e / (2u * KC), b = (e / 2u) % KC, h = e % 2u;
            xq[(c * 2u + h) * KC + b] = b < kc && c < ncols ? XQ[2u * ((c0 + c) * nb + cb + b) + h] : uvec4(0u);
        }
        for (uint e = tid; e < NCOLS * KC; e += WG) {
            const uint c = e / KC, b = e % KC;
            xds[e] = b < kc && c < ncols ? XD[(c0 + c) * nb + cb + b] : vec2(0.0);
        }
        barrier();
        [[unroll]] for (uint i = 0u; i < BPL; i++) {
            const uint b = lane + 32u * i;
            if (b < kc) {
                [[unroll]] for (uint c = 0u; c < NCOLS; c++) {
                    XB x;
                    x.a = xq[(c * 2u) * KC + b];
                    x.b = xq[(c * 2u + 1u) * KC + b];
                    const vec2 ds = xds[c * KC + b];
                    x.d = ds.x;
                    x.s = ds.y;
                    [[unroll]] for (uint r = 0u; r < SGR; r++) acc[r * NCOLS + c] += wdot(w[i * SGR + r], x);
                }
            }
        }
        barrier();
    }

    // a group's 32 invocations are one subgroup (gl_SubgroupSize 32) or 32 / gl_SubgroupSize of
    // them: each subgroup's sums go to shared memory (in xq's words), then the first invocation
    // of each of the group's outputs adds its subgroups' sums
    const uint RN = SGR * NCOLS;
    [[unroll]] for (uint o = 0u; o < RN; o++) {
        if (o % NCOLS < ncols) {
            const float t = subgroupAdd(acc[o]);
            if (subgroupElect()) xq[(sg * RN + o) / 4u][(sg * RN + o) % 4u] = floatBitsToUint(t);
        }
    }
    barrier();
    // outputs: (group, row, col); in GLU mode a (gate, up) pair of rows gives one value
    const uint outs = RG * RN;
    for (uint o = tid; o < outs; o += WG) {
        const uint g = o / RN, ro = o % RN, r = ro / NCOLS, c = ro % NCOLS, row = r0 + g * SGR + r;
        if (c >= ncols || row >= p.N) continue;
        if (p.glu != 0u && (r & 1u) != 0u) continue; // the up row: taken with its gate
        float t = 0.0, u = 0.0;
        for (uint s = 0u; s < per; s++) {
            const uint base = (g * per + s) * RN;
            t += uintBitsToFloat(xq[(base + ro) / 4u][(base + ro) % 4u]);
            if (p.glu != 0u) u += uintBitsToFloat(xq[(base + ro + NCOLS) / 4u][(base + ro + NCOLS) % 4u]);
        }
        if (p.glu != 0u) {
            if (row + 1u < p.N) Y[(c0 + c) * p.yStride + row / 2u] = glu_act(t, p.glu) * u;
        } else {
            Y[(c0 + c) * p.yStride + row] = t;
        }
    }
}
