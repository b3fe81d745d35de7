#version 450
// matvec_dot_q8out_T — a decode token's product (one activation row, 8-bit as matvec_dot_T)
// whose workgroup makes one block of 32 outputs and writes it straight away as the next
// product's 8-bit input (quantize_q8's blocks). So neither quantize_q8 nor add_rms_norm_q8 runs
// after it: three dispatches fewer a decode layer, at ~4 µs of fixed cost each.
//
//   residual mode (GLU = 0: the O and down products): H[o] += W[o]·x (H the residual stream),
//     then the block of H[o]·nw[o] (nw the next norm's weight; the row's 1/rms not applied yet)
//     as 8-bit values, and the block's sum of squares of H into S[block]. The row's rms needs
//     every block, so the product that reads these blocks applies it (SCALED): the 8-bit values
//     of x·w/rms and of x·w are the same, only their scale differs by 1/rms.
//   GLU mode (GLU = 1: gate/up, interleaved rows 2o = gate, 2o + 1 = up): Y[o] = act(gate)·up,
//     to Y and as 8-bit blocks (down's input).
// SCALED = 1: the input is a residual mode's output; the sums are multiplied by
// 1/sqrt(sum(S)/K + eps) before anything else, with S summed in the same order by every
// workgroup (one result, the same bits every run).
//
// Threads: 32 outputs × TPR threads each (TPR 32 on NVIDIA: a warp an output); thread (j, l)
// takes blocks l, l + TPR, ... of output j's row(s), UNROLL of them loaded before use, so the
// threads of a row read consecutive blocks. (Written as arrays even at UNROLL 1: that way the
// H200's compiler gave the Q4_K GLU build 32 registers, not 45-47, and two workgroups a
// multiprocessor; bench/RESULTS.md.) The row sums through shared memory (padded: no bank conflicts), then the block is
// quantized by q8.glsl's q8_store. Dispatch (N / 32, 1, 1), N the outputs (a multiple of 32).
// Buffers: W, AQ, AD (the input's 8-bit blocks), Y (residual mode: H, read and written), NW
// (residual mode's norm weight; unread in GLU mode), XQ, XD (the output's blocks: never the
// input's buffers), S (written in residual mode, read when SCALED).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_integer_dot_product : require

layout(local_size_x = 1024, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 32u;    // threads an output (at most 32)
layout(constant_id = 2) const uint GLU = 0u;     // 1: GLU mode, else residual mode
layout(constant_id = 3) const uint SCALED = 0u;  // 1: apply the previous norm's 1/rms
layout(constant_id = 4) const uint UNROLL = 1u;  // blocks of a row a thread loads before using them

#include "quants.glsl"

layout(std430, binding = 0) readonly buffer WeightBuf32 { uint w32[]; };
layout(std430, binding = 1) readonly buffer AQBuf { uvec4 AQ[]; };
layout(std430, binding = 2) readonly buffer ADBuf { vec2 AD[]; };
layout(std430, binding = 3) buffer YBuf { float Y[]; };
layout(std430, binding = 4) readonly buffer NWBuf { float NW[]; };
layout(std430, binding = 5) writeonly buffer XQBuf { uint XQ[]; };
layout(std430, binding = 6) writeonly buffer XDBuf { vec2 XD[]; };
layout(std430, binding = 7) buffer SBuf { float S[]; };
layout(std140, binding = 8) uniform Params {
    uint K, rowBytes;
    uint act;   // GLU mode's activation (glu.glsl)
    float eps;  // SCALED: the norm's epsilon
} p;

#include "glu.glsl"
#include "dot_blocks.glsl"

const uint OUTS = 32u;
shared float q8src[OUTS];
#define Q8_STORE 1024
#include "q8.glsl"

shared float red[2u * OUTS * 33u]; // the row sums' partials, rows padded to TPR + 1
shared float ssq[OUTS];
shared float sgs[256];             // SCALED: the subgroups' sums of S

XB xblock(uint i) {
    XB x;
    x.a = AQ[2u * i];
    x.b = AQ[2u * i + 1u];
    const vec2 ds = AD[i];
    x.d = ds.x;
    x.s = ds.y;
    return x;
}

void main() {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint j = tid / TPR, l = tid % TPR, blk = gl_WorkGroupID.x;
    const uint nb = p.K / 32u, rowWords = p.rowBytes >> 1;
    const uint o = blk * OUTS + j;

    // loaded before the products: the norm's sums of squares, and the residual and norm weight
    float sp = 0.0;
    if (SCALED != 0u) for (uint i = tid; i < nb; i += WG) sp += S[i];
    float h0 = 0.0, nw = 0.0;
    if (GLU == 0u && tid < OUTS) {
        h0 = Y[blk * OUTS + tid];
        nw = NW[blk * OUTS + tid];
    }

    const uint rw0 = (GLU != 0u ? 2u * o : o) * rowWords, rw1 = rw0 + rowWords;
    float a0 = 0.0, a1 = 0.0;
    for (uint b = l; b < nb; b += UNROLL * TPR) {
        // UNROLL blocks' loads in flight together (past the row's end: its last block, unused)
        XB x[UNROLL];
        WB w0[UNROLL], w1[UNROLL];
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
            const uint bu = min(b + u * TPR, nb - 1u);
            x[u] = xblock(bu);
            w0[u] = wbload_at(rw0, bu);
            if (GLU != 0u) w1[u] = wbload_at(rw1, bu);
        }
        [[unroll]] for (uint u = 0u; u < UNROLL; u++) {
            if (b + u * TPR < nb) {
                a0 += wdot(w0[u], x[u]);
                if (GLU != 0u) a1 += wdot(w1[u], x[u]);
            }
        }
    }
    red[j * (TPR + 1u) + l] = a0;
    if (GLU != 0u) red[(OUTS + j) * (TPR + 1u) + l] = a1;
    if (SCALED != 0u) {
        const float t = subgroupAdd(sp);
        if (subgroupElect()) sgs[gl_SubgroupID] = t;
    }
    barrier();

    if (tid < OUTS) {
        float s0 = 0.0, s1 = 0.0;
        for (uint i = 0u; i < TPR; i++) s0 += red[tid * (TPR + 1u) + i];
        if (GLU != 0u) for (uint i = 0u; i < TPR; i++) s1 += red[(OUTS + tid) * (TPR + 1u) + i];
        if (SCALED != 0u) {
            float total = 0.0;
            for (uint s = 0u; s < gl_NumSubgroups; s++) total += sgs[s];
            const float sc = 1.0 / sqrt(total / float(p.K) + p.eps);
            s0 *= sc;
            s1 *= sc;
        }
        float v;
        if (GLU != 0u) {
            v = glu_act(s0, p.act) * s1;
            Y[blk * OUTS + tid] = v;
        } else {
            const float h = h0 + s0;
            Y[blk * OUTS + tid] = h;
            ssq[tid] = h * h;
            v = h * nw;
        }
        q8src[tid] = v;
    }
    barrier();
    q8_store(OUTS, blk);
    if (GLU == 0u && tid == 0u) {
        float t = 0.0;
        for (uint i = 0u; i < OUTS; i++) t += ssq[i];
        S[blk] = t;
    }
}
