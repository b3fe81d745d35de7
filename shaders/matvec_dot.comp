#version 450
// matvec_dot_T — matvec_T for 8-bit activations: Y[m*yStride + r] = sum_k W[r][k] X[m][k] with X
// given as quantize_q8's blocks of 32 (8-bit values q, scale d, sum of q), so each block of a
// weight row meets each activation block in packed 4x8-bit integer dot products
// (GL_EXT_integer_dot_product; on NVIDIA one dp4a per 4 weights) and a few float operations:
//   Q4_0: dw dx (sum nib q - 8 sum q)          Q4_1: dx (dw sum nib q + mw sum q)
//   Q5_0: dw dx (sum q5 q - 16 sum q)          Q5_1: dx (dw sum q5 q + mw sum q)
//   Q8_0: dw dx sum w q                        Q4_K: as Q4_1 per 32-value sub-block, dw = d sc,
//   Q6_K: dx (d sc_a sum_a q6 q + d sc_b sum_b q6 q), halves of 16, q6 = 6-bit - 32    mw = -dmin m
// Otherwise as matvec_T: one workgroup computes ROWS weight rows for NCOLS activation rows, its
// threads stride over the blocks of the rows (a thread takes one whole block of each row: its
// bytes are read as aligned 32-bit words, see wblock), the partial sums are reduced with
// subgroupAdd and shared memory. Dispatch (ceil(N / ROWS), ceil(M / NCOLS), 1).
// Buffers: W, XQ (quantize_q8's values), XD (its (d, sum) pairs), Y; params as matvec_T (xStride
// unused: XQ rows are K/32 blocks apart).
//
// matvec_dot_id_T (built with -DEXPERTS): matvec_id_T on 8-bit activations, the decode half of a
// mixture-of-experts layer's products. W is a stacked expert tensor (expert e's N rows start
// expertWords 16-bit words after expert e-1's), binding 4 moe_route's output R: activation row m
// (a pair, in expert order) is multiplied by expert R[idsOff + m]'s rows, its blocks read from
// XQ/XD row R[rowsOff + m] (gather = 1: quantize_q8 of the layer's input, a row per token) or row
// m (gather = 0: the pairs' rows). NCOLS must be 1 (each group one pair); GLU mode as above.
// Dispatch (ceil(N / ROWS), M, 1), M the pairs.
//
// matvec_dot_rope_T (built with -DROPE_KV, and once more with -DKT_F16 -DVT_F16): a decode
// token's Q|K|V product joined with rope_store's work, so the layer needs no dispatch for it.
// Rows come as the Q|K|V row (qDim, kvDim, kvDim), each group one rotary pair (2i, 2i+1) of a
// head (NCOLS 1, ROWS 2; NEOX = 1: the pair (i, i + ropeDim/2)): Q rows are written rotated, K
// rows as they are and rotated into the token's KV page slot, V rows as they are and into the
// slot (pages and angles as rope_store.comp; f32 and f16 caches). Buffers W, XQ, XD, Y, then
// kv, tokpos, tokpt, pagetab, freqs, S, B; params as matvec_dot_T's, then qDim, kvDim, headDim,
// ropeDim, magnitude, pageSize, pageStride, layerOff, eps. With SCALED = 1 its input is
// matvec_dot_q8out_T's residual-mode output (the norm's 1/rms not yet applied; S its sums of
// squares), and the sums are scaled before anything else; BIAS = 1 then adds the rows' biases
// B (Qwen2's), as add_bias would have.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_integer_dot_product : require

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint NCOLS = 16; // activation rows per workgroup
layout(constant_id = 2) const uint ROWS = 4;   // weight rows per workgroup (rowsPerGroup)
layout(constant_id = 3) const uint SCALED = 0; // matvec_dot_rope_T: 1 applies the norm's 1/rms from S
layout(constant_id = 4) const uint NEOX = 0;   // matvec_dot_rope_T: pairs (i, i + ropeDim/2) of a head, not (2i, 2i+1)
layout(constant_id = 5) const uint BIAS = 0;   // matvec_dot_rope_T: 1 adds B (the Q|K|V bias) to the sums

#include "quants.glsl"

// the weight buffer (binding 0, declared by quants.glsl as 16-bit words) as 32-bit words
layout(std430, binding = 0) readonly buffer WeightBuf32 { uint w32[]; };
layout(std430, binding = 1) readonly buffer XQBuf { uvec4 XQ[]; };
layout(std430, binding = 2) readonly buffer XDBuf { vec2 XD[]; };
layout(std430, binding = 3) writeonly buffer YBuf { float Y[]; };
#ifdef EXPERTS
layout(std430, binding = 4) readonly buffer RouteBuf { uint R[]; };
layout(std140, binding = 5) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride, glu;
    uint expertWords, gather, rowsOff, idsOff, expertsOff;
} p;
// the first word of row m's expert, and row m's activation row (in quantize_q8's rows)
uint expert_base(uint m) { return R[p.idsOff + m] * p.expertWords; }
uint x_row(uint m) { return p.gather != 0u ? R[p.rowsOff + m] : m; }
#elif defined(ROPE_KV)
layout(std430, binding = 5) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 6) readonly buffer PtBuf { int tokpt[]; };
layout(std430, binding = 7) readonly buffer PageBuf { int pagetab[]; };
layout(std430, binding = 8) readonly buffer FreqBuf { float freqs[]; };
// SCALED: the input is matvec_dot_q8out_T's residual-mode output, x·w without the norm's 1/rms,
// and S its blocks' sums of squares (that kernel's header)
layout(std430, binding = 9) readonly buffer SBuf { float S[]; };
layout(std430, binding = 10) readonly buffer BBuf { float B[]; }; // BIAS: the Q|K|V rows' biases
layout(std140, binding = 11) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride, glu;
    uint qDim, kvDim, headDim, ropeDim;
    float magnitude;
    uint pageSize, pageStride, layerOff;
    float eps; // SCALED: the norm's epsilon
} p;
uint expert_base(uint m) { return 0u; }
uint x_row(uint m) { return m; }
#define KV_BINDING 4
#define KV_ACCESS writeonly
#define KV_STORE
#include "kv_types.glsl"
#include "rope_angle.glsl"
#else
layout(std140, binding = 4) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride;
    uint glu; // > 0: rows come in (gate, up) pairs, Y[m*yStride + r/2] = glu_act(gate, glu) * up (ROWS even)
} p;
uint expert_base(uint m) { return 0u; }
uint x_row(uint m) { return m; }
#endif

#include "glu.glsl"

const uint SGMAX = 16u; // subgroups reduced per pass
shared float red[SGMAX * ROWS * NCOLS];
shared float tot[ROWS * NCOLS];

#include "dot_blocks.glsl"

XB xblock(uint i) {
    XB x;
    x.a = XQ[2u * i];
    x.b = XQ[2u * i + 1u];
    const vec2 ds = XD[i];
    x.d = ds.x;
    x.s = ds.y;
    return x;
}

void main() {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint r0 = gl_WorkGroupID.x * ROWS, c0 = gl_WorkGroupID.y * NCOLS;
    if (r0 >= p.N || c0 >= p.M) return; // whole workgroup: no barrier is skipped by part of it
    const uint ncols = min(NCOLS, p.M - c0);
    const uint rowWords = p.rowBytes >> 1;
    const uint nb = p.K / 32u;

    uint rw[ROWS];
    const uint wb = expert_base(c0);
#ifndef ROPE_KV
    [[unroll]] for (uint r = 0u; r < ROWS; r++) rw[r] = wb + min(r0 + r, p.N - 1u) * rowWords; // rows past N: read row N-1, never stored
#else
    // the group's rotary pair: rows ra, rb of the Q|K|V row, dimensions da, db of their part;
    // pair i of a head is (2i, 2i+1), or with NEOX (i, i + ropeDim/2) and the dimensions past
    // ropeDim two by two (V rows: always two neighbours)
    const uint part = r0 < p.qDim ? 0u : r0 < p.qDim + p.kvDim ? 1u : 2u;
    const uint d0 = r0 - (part == 0u ? 0u : part == 1u ? p.qDim : p.qDim + p.kvDim);
    const uint pi = (d0 % p.headDim) >> 1, half_ = p.ropeDim >> 1;
    uint da = d0, db = d0 + 1u;
    if (NEOX != 0u && part < 2u) {
        const uint hb = d0 - d0 % p.headDim;
        da = hb + (pi < half_ ? pi : p.ropeDim + 2u * (pi - half_));
        db = da + (pi < half_ ? half_ : 1u);
    }
    const uint ra = r0 - d0 + da, rb = r0 - d0 + db;
    rw[0] = wb + ra * rowWords;
    rw[1] = wb + rb * rowWords;
#endif
    uint xr[NCOLS];
    [[unroll]] for (uint c = 0u; c < NCOLS; c++) xr[c] = c < ncols ? x_row(c0 + c) * nb : 0u;

#ifdef ROPE_KV
    // the token's page slot and the pair's angle, loaded before the products
    const uint posi = uint(tokpos[0]);
    const uint page = uint(pagetab[uint(tokpt[0]) + posi / p.pageSize]), slot = posi % p.pageSize;
    const uint kplane = page * p.pageStride + p.layerOff, vplane = kplane + kv_kplane_words();
    const bool rotated = part < 2u && pi < half_;
    const vec2 cs = rotated ? rope_angle(float(posi), freqs[pi], p.magnitude) : vec2(1.0, 0.0);
    const vec2 bias = BIAS != 0u ? vec2(B[ra], B[rb]) : vec2(0.0);
    float sp = 0.0; // SCALED: this thread's share of the sums of squares
    if (SCALED != 0u) for (uint i = tid; i < nb; i += WG) sp += S[i];
#endif
    float acc[ROWS * NCOLS];
    [[unroll]] for (uint i = 0u; i < ROWS * NCOLS; i++) acc[i] = 0.0;

    for (uint b = tid; b < nb; b += WG) {
        WB w[ROWS];
        [[unroll]] for (uint r = 0u; r < ROWS; r++) w[r] = wbload_at(rw[r], b);
        [[unroll]] for (uint c = 0u; c < NCOLS; c++) {
            if (c < ncols) {
                const XB x = xblock(xr[c] + b);
                [[unroll]] for (uint r = 0u; r < ROWS; r++) acc[r * NCOLS + c] += wdot(w[r], x);
            }
        }
    }

    // reduction: subgroupAdd, then the subgroup sums through shared memory, SGMAX subgroups a pass
    const uint RN = ROWS * NCOLS, sg = gl_SubgroupID, nsg = gl_NumSubgroups;
    for (uint o = tid; o < RN; o += WG) tot[o] = 0.0;
    for (uint base = 0u; base < nsg; base += SGMAX) {
        if (sg >= base && sg < base + SGMAX) {
            [[unroll]] for (uint o = 0u; o < RN; o++) {
                if (o % NCOLS < ncols) {
                    const float t = subgroupAdd(acc[o]);
                    if (subgroupElect()) red[(sg - base) * RN + o] = t;
                }
            }
        }
        barrier();
        const uint cnt = min(SGMAX, nsg - base);
        for (uint o = tid; o < RN; o += WG) {
            if (o % NCOLS < ncols) {
                float t = tot[o];
                for (uint j = 0u; j < cnt; j++) t += red[j * RN + o];
                tot[o] = t;
            }
        }
        barrier();
    }
#ifdef ROPE_KV
    float sc = 1.0;
    if (SCALED != 0u) {
        // every workgroup sums the subgroups' shares in one order: the same 1/rms everywhere
        const float t = subgroupAdd(sp);
        if (subgroupElect()) red[sg] = t; // red is free after the last barrier above
        barrier();
        float total = 0.0;
        for (uint s = 0u; s < nsg; s++) total += red[s];
        sc = 1.0 / sqrt(total / float(p.K) + p.eps);
    }
    if (tid == 0u && r0 + 1u < p.N) {
        const float a = tot[0] * sc + bias.x, b = tot[1] * sc + bias.y;
        const float xa = rotated ? a * cs.x - b * cs.y : a, xb = rotated ? a * cs.y + b * cs.x : b;
        if (part == 0u) {
            Y[ra] = xa;
            Y[rb] = xb;
        } else {
            Y[ra] = a;
            Y[rb] = b;
            if (part == 1u) {
                k_put(kplane, slot, da, xa);
                k_put(kplane, slot, db, xb);
            } else {
                v_put(vplane, slot, da, a);
                v_put(vplane, slot, db, b);
            }
        }
    }
    return;
#endif
    if (p.glu != 0u) {
        // (gate, up) row pairs: r0 and ROWS are even, so a pair never straddles two groups
        for (uint o = tid; o < RN / 2u; o += WG) {
            const uint r = (o / NCOLS) * 2u, c = o % NCOLS;
            if (c < ncols && r0 + r + 1u < p.N) {
                const float g = tot[r * NCOLS + c];
                Y[(c0 + c) * p.yStride + (r0 + r) / 2u] = glu_act(g, p.glu) * tot[(r + 1u) * NCOLS + c];
            }
        }
        return;
    }
    for (uint o = tid; o < RN; o += WG) {
        const uint r = o / NCOLS, c = o % NCOLS;
        if (c < ncols && r0 + r < p.N) Y[(c0 + c) * p.yStride + r0 + r] = tot[o];
    }
}
