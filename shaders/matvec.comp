#version 450
// matvec_T — decode-shaped matrix product: Y[m*yStride + r] = sum_k W[r][k] X[m*xStride + k]
// for weight rows r < N and activation rows m < M, when M is small (decode, batched decode).
//
// One workgroup computes ROWS weight rows for NCOLS activation rows: every thread walks the
// units of the rows (see quants.glsl) with a stride of the workgroup size, so neighbouring
// threads read neighbouring bytes of each row (coalesced), dequantizes each unit once and
// multiplies it with all NCOLS activation rows (a weight is read once for up to NCOLS
// sequences), each activation load serving all ROWS rows. Per-thread partial sums are reduced
// with subgroupAdd, then across subgroups in shared memory (any subgroup size).
//
// Dispatch (ceil(N / ROWS), ceil(M / NCOLS), 1). With ROWS = 4, N up to 262140 keeps the x group
// count within 65535.
//
// GLU mode (params.glu = 1, the MLP's gate and up in one dispatch): W holds N/2 (gate, up) row pairs
// interleaved (row 2i = gate row i, row 2i+1 = up row i) and the kernel stores
// Y[m*yStride + i] = silu(gate_i . x_m) * (up_i . x_m) instead of the N products (ROWS must be even).
//
// matvec_id_T (built with -DEXPERTS): the decode half of a mixture-of-experts layer's products,
// one dispatch over all its routed pairs. W is a stacked expert tensor (expert e's N rows start
// expertWords 16-bit words after expert e-1's), binding 3 moe_route's output R: activation row m
// (a pair, in expert order) is multiplied by expert R[idsOff + m]'s rows, and read from X row
// R[rowsOff + m] (gather = 1: the layer's input, a row per token) or row m (gather = 0). NCOLS
// must be 1 (each group one pair); GLU mode works as above (a stack of interleaved gate/up
// experts). Dispatch (ceil(N / ROWS), M, 1), M the pairs.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint NCOLS = 16; // activation rows per workgroup
layout(constant_id = 2) const uint ROWS = 4;   // weight rows per workgroup (rowsPerGroup)

#include "quants.glsl"

layout(std430, binding = 1) readonly buffer XBuf { float X[]; };
// the same buffer as vec4s, for 16-byte loads when every row starts 16-byte aligned (xStride % 4 == 0:
// the 4 values of a group start at a multiple of 4 and lie within the row)
layout(std430, binding = 1) readonly buffer XBuf4 { vec4 X4[]; };
layout(std430, binding = 2) writeonly buffer YBuf { float Y[]; };
#ifdef EXPERTS
layout(std430, binding = 3) readonly buffer RouteBuf { uint R[]; };
layout(std140, binding = 4) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride, glu;
    uint expertWords, gather, rowsOff, idsOff, expertsOff;
} p;
// the first word of row m's expert, and the first value of its activation row
uint expert_base(uint m) { return R[p.idsOff + m] * p.expertWords; }
uint x_row(uint m) { return (p.gather != 0u ? R[p.rowsOff + m] : m) * p.xStride; }
#else
layout(std140, binding = 3) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride;
    uint glu; // > 0: rows come in (gate, up) pairs, Y[m*yStride + r/2] = glu_act(gate, glu) * up (ROWS even)
} p;
uint expert_base(uint m) { return 0u; }
uint x_row(uint m) { return m * p.xStride; }
#endif

#include "glu.glsl"

const uint SGMAX = 16u; // subgroups reduced per pass
shared float red[SGMAX * ROWS * NCOLS];
shared float tot[ROWS * NCOLS];

// 4 consecutive activations from index i; with a partial unit (f32/f16/bf16), those at k >= K read as 0
vec4 xload(uint i, uint k) {
#ifdef UNIT_TAIL
    if (k + 4u > p.K) {
        vec4 x = vec4(0.0);
        for (uint e = 0u; e < 4u; e++)
            if (k + e < p.K) x[e] = X[i + e];
        return x;
    }
#endif
    if ((p.xStride & 3u) == 0u) return X4[i >> 2];
    return vec4(X[i], X[i + 1u], X[i + 2u], X[i + 3u]);
}

void main() {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint r0 = gl_WorkGroupID.x * ROWS, c0 = gl_WorkGroupID.y * NCOLS;
    if (r0 >= p.N || c0 >= p.M) return; // whole workgroup: no barrier is skipped by part of it
    const uint ncols = min(NCOLS, p.M - c0);
    const uint rowWords = p.rowBytes >> 1;

    uint rw[ROWS];
    const uint wb = expert_base(c0);
    [[unroll]] for (uint r = 0u; r < ROWS; r++) rw[r] = wb + min(r0 + r, p.N - 1u) * rowWords; // rows past N: read row N-1, never stored
    uint xr[NCOLS];
    [[unroll]] for (uint c = 0u; c < NCOLS; c++) xr[c] = c < ncols ? x_row(c0 + c) : 0u;

    float acc[ROWS * NCOLS];
    [[unroll]] for (uint i = 0u; i < ROWS * NCOLS; i++) acc[i] = 0.0;

    const uint U = units_per_row(p.K);
    for (uint u = tid; u < U; u += WG) {
        Unit s[ROWS];
        [[unroll]] for (uint r = 0u; r < ROWS; r++) s[r] = unit_load(rw[r], u, p.K);
        [[unroll]] for (uint g = 0u; g < UNIT_VECS; g++) {
            const uint k = unit_pos(u, g);
            vec4 w[ROWS];
            [[unroll]] for (uint r = 0u; r < ROWS; r++) w[r] = unit_vec(s[r], g);
            [[unroll]] for (uint c = 0u; c < NCOLS; c++) {
                if (c < ncols) {
                    const vec4 x = xload(xr[c] + k, k);
                    [[unroll]] for (uint r = 0u; r < ROWS; r++) {
                        float a = acc[r * NCOLS + c];
                        a = fma(w[r].x, x.x, a);
                        a = fma(w[r].y, x.y, a);
                        a = fma(w[r].z, x.z, a);
                        a = fma(w[r].w, x.w, a);
                        acc[r * NCOLS + c] = a;
                    }
                }
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
