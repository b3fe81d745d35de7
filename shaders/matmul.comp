#version 450
// matmul_T — prefill-shaped matrix product, same contract as matvec_T:
// Y[m*yStride + r] = sum_k W[r][k] X[m*xStride + k] for r < N, m < M.
//
// Tiled GEMM in portable fp32: a workgroup computes a BN (weight rows) x BM (activation rows)
// tile of Y, stepping along K by 32 values: each step dequantizes 32 values of BN weight rows
// and loads the matching 32 activations of BM rows into shared memory, then every thread
// accumulates a 4 x 4 block of outputs. A step covers whole units (quants.glsl), so its 32
// values need not be contiguous in K; weights and activations use the same order.
//
// The workgroup size must be (BM/4) * (BN/4): 256 with the defaults BM = BN = 64.
// Dispatch (ceil(N / BN), ceil(M / BM), 1).
//
// matmul_id_T (built with -DEXPERTS): the prefill half of a mixture-of-experts layer's products,
// one dispatch over all its experts, with matvec_id_T's buffers and parameters (binding 3 moe_route's
// output R). Workgroup z is expert e, with W's expert e (expertWords 16-bit words after expert
// e-1): its activation rows are the pairs R[expertsOff + 2e] + m for m < R[expertsOff + 2e + 1]
// (gathered from X as matvec_id_T does), and groups past its count exit at once. M is the most
// rows an expert can have (the tokens). Dispatch (ceil(N / BN), ceil(M / BM), experts).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 256, local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64; // activation rows per tile (multiple of 4)
layout(constant_id = 2) const uint BN = 64; // weight rows per tile (multiple of 4)

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
#else
layout(std140, binding = 3) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride;
} p;
#endif

const uint BK = 32u;                 // values per step
const uint UPT = BK / UNIT_VALUES;   // units per step
shared vec4 Ws[BK * BN / 4u];        // [k][n/4]
shared vec4 Xs[BK * BM / 4u];        // [k][m/4]
#ifdef EXPERTS
shared uint xrow[BM];                // where each of the tile's activation rows starts in X
#endif

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
    const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    const uint tx = tid % (BN / 4u), ty = tid / (BN / 4u);
    const bool computes = ty < BM / 4u;
    const uint rowWords = p.rowBytes >> 1;
    const uint U = units_per_row(p.K);
#ifdef EXPERTS
    const uint e = gl_WorkGroupID.z, first = R[p.expertsOff + 2u * e], M = R[p.expertsOff + 2u * e + 1u];
    if (m0 >= M) return; // whole workgroup: no barrier is skipped by part of it
    const uint wb = e * p.expertWords;
    for (uint m = tid; m < BM; m += WG) {
        const uint i = first + min(m0 + m, M - 1u);
        xrow[m] = (p.gather != 0u ? R[p.rowsOff + i] : i) * p.xStride;
    }
    barrier();
#define XROW(m) xrow[m]
#else
    const uint first = 0u, M = p.M, wb = 0u;
#define XROW(m) ((m0 + (m)) * p.xStride)
#endif

    vec4 acc[4];
    [[unroll]] for (uint i = 0u; i < 4u; i++) acc[i] = vec4(0.0);

    for (uint u0 = 0u; u0 < U; u0 += UPT) {
        // weights: item = (unit j of the step, row n), n fastest (conflict-free shared stores)
        for (uint it = tid; it < BN * UPT; it += WG) {
            const uint n = it % BN, j = it / BN, u = u0 + j, row = n0 + n;
            const bool ok = row < p.N && u < U;
            Unit s;
            if (ok) s = unit_load(wb + row * rowWords, u, p.K);
            [[unroll]] for (uint g = 0u; g < UNIT_VECS; g++) {
                const vec4 v = ok ? unit_vec(s, g) : vec4(0.0);
                const uint kk = j * UNIT_VALUES + g * 4u;
                Ws[(kk + 0u) * (BN / 4u) + n / 4u][n & 3u] = v.x;
                Ws[(kk + 1u) * (BN / 4u) + n / 4u][n & 3u] = v.y;
                Ws[(kk + 2u) * (BN / 4u) + n / 4u][n & 3u] = v.z;
                Ws[(kk + 3u) * (BN / 4u) + n / 4u][n & 3u] = v.w;
            }
        }
        // activations: item = (unit j, group g, row m), m fastest
        for (uint it = tid; it < BM * UPT * UNIT_VECS; it += WG) {
            const uint m = it % BM, jg = it / BM, j = jg / UNIT_VECS, g = jg % UNIT_VECS, u = u0 + j;
            vec4 x = vec4(0.0);
            if (m0 + m < M && u < U) {
                const uint k = unit_pos(u, g);
                x = xload(XROW(m) + k, k);
            }
            const uint kk = j * UNIT_VALUES + g * 4u;
            Xs[(kk + 0u) * (BM / 4u) + m / 4u][m & 3u] = x.x;
            Xs[(kk + 1u) * (BM / 4u) + m / 4u][m & 3u] = x.y;
            Xs[(kk + 2u) * (BM / 4u) + m / 4u][m & 3u] = x.z;
            Xs[(kk + 3u) * (BM / 4u) + m / 4u][m & 3u] = x.w;
        }
        barrier();
        if (computes) {
            [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
                const vec4 w = Ws[kk * (BN / 4u) + tx];
                const vec4 x = Xs[kk * (BM / 4u) + ty];
                acc[0] = fma(vec4(w.x), x, acc[0]);
                acc[1] = fma(vec4(w.y), x, acc[1]);
                acc[2] = fma(vec4(w.z), x, acc[2]);
                acc[3] = fma(vec4(w.w), x, acc[3]);
            }
        }
        barrier();
    }

    if (!computes) return;
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
        const uint r = n0 + tx * 4u + i;
        if (r >= p.N) break;
        [[unroll]] for (uint jm = 0u; jm < 4u; jm++) {
            const uint m = m0 + ty * 4u + jm;
            if (m < M) Y[(first + m) * p.yStride + r] = acc[i][jm];
        }
    }
}
