#version 450
// matmul_coop_T — matmul_T on tensor cores (GL_KHR_cooperative_matrix), Vulkan only.
// Same contract as matmul_T, Y[m*yStride + r] = sum_k W[r][k] X[m*xStride + k], r < N, m < M,
// but X is float16 (to_f16's rows: xStride a multiple of 4, values past K zero).
//
// A workgroup of 256 threads (8 subgroups of 32) computes a BM x BN = 128 x 128 tile of Y
// (activation rows x weight rows), stepping along K by BK = 32 values. Each step dequantizes
// 32 values of the 128 weight rows (whole units of quants.glsl, so not necessarily contiguous
// in K; activations use the same order) and copies the matching 32 values of the 128
// activation rows to shared memory; then each subgroup multiplies its 64 x 32 part
// of the tile as 4 x 2 float16 16x16x16 products accumulated in float32 matrices:
// D (m x r) += X (m x k) * W^T (k x r), W^T being read column-major from the weight rows.
// Shared memory is double-buffered: the global loads of step s+1 are issued before the
// products of step s and land in the other buffer after them (one barrier per step).
// Edges: rows past M or N and units past the row read as zero; result tiles that lie wholly
// inside Y are stored directly, the others through shared memory with guards.
//
// Needs: shaderFloat16, 16-bit storage, VK_KHR_cooperative_matrix with a subgroup-scope
// 16x16x16 float16 x float16 -> float32 shape, subgroup size 32 (the warp layout below
// assumes 8 subgroups), 48 KiB of shared memory. Constant 0 must stay 256.
// Dispatch (ceil(N / 128), ceil(M / 128), 1).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require

layout(local_size_x = 256, local_size_x_id = 0) in;

#include "quants.glsl"

layout(std430, binding = 1) readonly buffer XBuf { f16vec4 X4[]; };
layout(std430, binding = 2) writeonly buffer YBuf { float Y[]; };
layout(std140, binding = 3) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride;
    uint splitUnits, plane;  // split-K: units of K per workgroup z, floats between the z outputs
} p;

#ifdef WARPS4
// experiment: 4 subgroups (2 x 2), each 64 x 64 = 4 x 4 tiles (constant 0 must be 128)
const uint WG = 128u;
const uint SGM = 64u, SGN = 64u, SGC = 2u;
#else
const uint WG = 256u;
// warp layout: 2 x 4 subgroups, each 64 activation rows x 32 weight rows = 4 x 2 tiles of 16
const uint SGM = 64u, SGN = 32u, SGC = 4u;
#endif
const uint BM = 128u;                 // activation rows per tile
const uint BN = 128u;                 // weight rows per tile
#ifdef BK64
// one shared buffer of 64 values of K per step: twice the products between barriers, the
// next step's loads still in flight in registers during them (two barriers per step)
const uint BK = 64u;
const uint NBUF = 1u;
#else
const uint BK = 32u;                  // values of K per step
const uint NBUF = 2u;                 // shared buffers (double-buffered: one barrier per step)
#endif
const uint SK = (BK + 8u) / 4u;       // shared row stride in f16vec4s (80 bytes: fewer bank conflicts)
const uint UPT = BK / UNIT_VALUES;    // units per step
const uint WIT = BN * UPT / WG;       // weight units per thread per step
const uint XVR = BK / 4u;             // vec4s of one activation row per step
const uint XIT = BM * XVR / WG;       // activation vec4s per thread per step
const uint TM = SGM / 16u, TN = SGN / 16u;

// float16 tiles as f16vec4s (one 8-byte store per group of 4 values; coopMatLoad counts
// offsets and strides in array elements, so in units of 4 values)
#if defined(SCALAR_SMEM) || defined(B_ROWMAJOR)
// experiment: tiles as float16 scalars (offsets and strides in values)
shared float16_t Xs[NBUF * BM * SK * 4u];
#ifdef B_ROWMAJOR
const uint SNT = BN + 8u;             // W^T rows: [buf][k][n]
shared float16_t Ws[NBUF * BK * SNT];
#else
shared float16_t Ws[NBUF * BN * SK * 4u];
#endif
#define VS 4u
#define VS4
#else
shared f16vec4 Xs[NBUF * BM * SK];   // [buf][m][k/4]
shared f16vec4 Ws[NBUF * BN * SK];    // [buf][n][k/4]
#define VS 1u
#endif
shared float Cs[WG / 32u * 256u];           // per subgroup: one 16 x 16 result tile (edge tiles)

// a group of 4 dequantized values as float16
#if defined(ABLATE_DQ)
f16vec4 unit_vec16(Unit s, uint g) { return f16vec4(unpackFloat2x16(s.q0 + g), unpackFloat2x16(s.q1)); }
#elif defined(F16DQ) && defined(WTYPE_Q4_0)
// Q4_0 in float16 arithmetic: a nibble n in the low bits of a float16 with bits 0x6400 is
// 1024 + n, so an AND and an OR make two values at once and (1024 + n) - 1032 = n - 8 exactly;
// times the float16 scale, that rounds once, to what float32 (n - 8) d rounds to (no
// int-to-float or float32-to-float16 conversion per value).
f16vec4 unit_vec16(Unit s, uint g) {
    const uint q = ((g & 1u) == 0u ? s.q0 : s.q1) >> (g < 2u ? 0u : 4u);
    const float16_t d = float16_t(s.d);
    const f16vec2 a = (unpackFloat2x16((q & 0x000F000Fu) | 0x64006400u) - float16_t(1032.0)) * d;        // values 0, 2
    const f16vec2 b = (unpackFloat2x16(((q >> 8) & 0x000F000Fu) | 0x64006400u) - float16_t(1032.0)) * d; // values 1, 3
    return f16vec4(a.x, b.x, a.y, b.y);
}
#else
f16vec4 unit_vec16(Unit s, uint g) { return f16vec4(unit_vec(s, g)); }
#endif

Unit wu[WIT];
bool wok[WIT];
f16vec4 xv[XIT];

// global loads of step u0 into registers
void fetch(uint u0, uint n0, uint m0, uint U, uint rowWords, uint tid) {
    [[unroll]] for (uint i = 0u; i < WIT; i++) {
        const uint it = tid + i * WG, j = it % UPT, n = it / UPT, u = u0 + j, row = n0 + n;
        wok[i] = row < p.N && u < U;
#ifdef ABLATE_LOAD
        wu[i].d = 0.5; wu[i].q0 = (tid + u) * 2654435761u; wu[i].q1 = ~wu[i].q0;
#else
        if (wok[i]) wu[i] = unit_load(row * rowWords, u, p.K);
#endif
    }
    [[unroll]] for (uint i = 0u; i < XIT; i++) {
        const uint it = tid + i * WG, jg = it % XVR, m = it / XVR;
        const uint j = jg / UNIT_VECS, g = jg % UNIT_VECS, u = u0 + j;
        f16vec4 x = f16vec4(0.0);
#ifdef ABLATE_LOAD
        x = f16vec4(float16_t(0.001 * float(g)));
#else
        if (m0 + m < p.M && u < U) x = X4[((m0 + m) * p.xStride + unit_pos(u, g)) >> 2];
#endif
        xv[i] = x;
    }
}

// the registers, dequantized and converted to float16, into shared buffer `b`
void stash(uint b, uint tid) {
    [[unroll]] for (uint i = 0u; i < WIT; i++) {
        const uint it = tid + i * WG, j = it % UPT, n = it / UPT;
        const uint base = b * BN * SK + n * SK + j * (UNIT_VALUES / 4u);
        [[unroll]] for (uint g = 0u; g < UNIT_VECS; g++) {
            const f16vec4 v = wok[i] ? unit_vec16(wu[i], g) : f16vec4(0.0);
#if defined(B_ROWMAJOR)
            const uint k = j * UNIT_VALUES + 4u * g;
            [[unroll]] for (uint c = 0u; c < 4u; c++) Ws[b * BK * SNT + (k + c) * SNT + n] = v[c];
#elif defined(SCALAR_SMEM)
            [[unroll]] for (uint c = 0u; c < 4u; c++) Ws[(base + g) * 4u + c] = v[c];
#else
            Ws[base + g] = v;
#endif
        }
    }
    [[unroll]] for (uint i = 0u; i < XIT; i++) {
        const uint it = tid + i * WG, jg = it % XVR, m = it / XVR;
        const uint j = jg / UNIT_VECS, g = jg % UNIT_VECS;
#ifdef VS4
        [[unroll]] for (uint c = 0u; c < 4u; c++) Xs[(b * BM * SK + m * SK + j * (UNIT_VALUES / 4u) + g) * 4u + c] = xv[i][c];
#else
        Xs[b * BM * SK + m * SK + j * (UNIT_VALUES / 4u) + g] = xv[i];
#endif
    }
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    const uint sg = gl_SubgroupID, sm = (sg / SGC) * SGM, sn = (sg % SGC) * SGN;
    const uint rowWords = p.rowBytes >> 1;
    // split-K: workgroup z takes units [z * splitUnits, ...) and writes output plane z
    const uint z = gl_WorkGroupID.z;
    const uint u0 = z * p.splitUnits, U = min(units_per_row(p.K), u0 + p.splitUnits);
    const uint steps = U > u0 ? (U - u0 + UPT - 1u) / UPT : 0u;
    const uint yOff = z * p.plane;

    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[TM * TN];
    [[unroll]] for (uint t = 0u; t < TM * TN; t++)
        acc[t] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);

    fetch(u0, n0, m0, U, rowWords, tid);
    stash(0u, tid);
    barrier();
#ifdef ABLATE_FRAG
    // timing only: the first step's fragments, reused by every step (products alone)
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a[TM];
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> w[TN];
    [[unroll]] for (uint i = 0u; i < TM; i++)
        coopMatLoad(a[i], Xs, (sm + i * 16u) * SK * VS, SK * VS, gl_CooperativeMatrixLayoutRowMajor);
    [[unroll]] for (uint j = 0u; j < TN; j++)
        coopMatLoad(w[j], Ws, (sn + j * 16u) * SK * VS, SK * VS, gl_CooperativeMatrixLayoutColumnMajor);
#endif
    for (uint s = 0u; s < steps; s++) {
        const uint b = NBUF == 2u ? s & 1u : 0u;
        const bool more = s + 1u < steps;
#ifndef ABLATE_PIPE
        if (more) fetch(u0 + (s + 1u) * UPT, n0, m0, U, rowWords, tid);
#endif
#if defined(ABLATE_FRAG)
        [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u)
            [[unroll]] for (uint i = 0u; i < TM; i++)
                [[unroll]] for (uint j = 0u; j < TN; j++)
                    acc[i * TN + j] = coopMatMulAdd(a[i], w[j], acc[i * TN + j]);
#elif !defined(ABLATE_MMA)
        [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a[TM];
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> w[TN];
            [[unroll]] for (uint i = 0u; i < TM; i++)
                coopMatLoad(a[i], Xs, (b * BM * SK + (sm + i * 16u) * SK + kk / 4u) * VS, SK * VS, gl_CooperativeMatrixLayoutRowMajor);
            [[unroll]] for (uint j = 0u; j < TN; j++)
#ifdef B_ROWMAJOR
                coopMatLoad(w[j], Ws, b * BK * SNT + kk * SNT + sn + j * 16u, SNT, gl_CooperativeMatrixLayoutRowMajor);
#else
                coopMatLoad(w[j], Ws, (b * BN * SK + (sn + j * 16u) * SK + kk / 4u) * VS, SK * VS, gl_CooperativeMatrixLayoutColumnMajor);
#endif
            [[unroll]] for (uint i = 0u; i < TM; i++)
                [[unroll]] for (uint j = 0u; j < TN; j++)
                    acc[i * TN + j] = coopMatMulAdd(a[i], w[j], acc[i * TN + j]);
        }
#endif
#ifndef ABLATE_PIPE
        if (NBUF == 1u) barrier();
        if (more) stash(NBUF == 2u ? b ^ 1u : 0u, tid);
        barrier();
#endif
    }

    // results: acc[i][j] holds Y rows m0+sm+16i.. (activation rows), columns n0+sn+16j..
    const bool aligned = (p.yStride & 3u) == 0u;
    [[unroll]] for (uint i = 0u; i < TM; i++) {
        [[unroll]] for (uint j = 0u; j < TN; j++) {
            const uint mm = m0 + sm + i * 16u, nn = n0 + sn + j * 16u;
            if (mm >= p.M || nn >= p.N) continue;
            if (aligned && mm + 16u <= p.M && nn + 16u <= p.N) {
                coopMatStore(acc[i * TN + j], Y, yOff + mm * p.yStride + nn, p.yStride, gl_CooperativeMatrixLayoutRowMajor);
            } else {
                coopMatStore(acc[i * TN + j], Cs, sg * 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
                subgroupMemoryBarrierShared();
                subgroupBarrier();
                for (uint e = gl_SubgroupInvocationID; e < 256u; e += gl_SubgroupSize) {
                    const uint r = e / 16u, c = e % 16u;
                    if (mm + r < p.M && nn + c < p.N) Y[yOff + (mm + r) * p.yStride + nn + c] = Cs[sg * 256u + e];
                }
                subgroupBarrier();
            }
        }
    }
}
