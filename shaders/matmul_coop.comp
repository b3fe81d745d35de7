#version 450
// matmul_coop_T — matmul_T on tensor cores (GL_KHR_cooperative_matrix), Vulkan only.
// Same contract as matmul_T, Y[m*yStride + r] = sum_k W[r][k] X[m*xStride + k], r < N, m < M,
// but X is float16 (to_f16's rows: xStride a multiple of 4, values past K zero), plus split-K:
// workgroup z takes units [z*splitUnits, (z+1)*splitUnits) of K and writes Y + z*plane
// (splitUnits = 0xFFFFFFFF, plane = 0 for one split; sum_splits adds the planes up).
//
// A workgroup of 128 WGM threads (4 WGM subgroups of 32: WGM along M, 4 along N) computes a
// BM x BN tile of Y (activation rows x weight rows), BM = 16 TM WGM, BN = 128, stepping along K
// by BK values. Each step dequantizes BK values of the 128 weight rows (whole units of
// quants.glsl, so not necessarily contiguous in K; activations use the same order) and copies
// the matching BK values of the BM activation rows to shared memory; then each subgroup
// multiplies its 16 TM x 32 part of the tile as TM x 2 float16 16x16x16 products accumulated
// in float32 matrices: D (m x r) += X (m x k) * W^T (k x r), W^T being read column-major from
// the weight rows. With PREFETCH the global loads of step s+1 are issued into registers before
// the products of step s; without, after them. With one shared buffer (STAGES 1) a step has two
// barriers; with two, the next step's tiles go to the other buffer and a step has one.
// Edges: rows past M or N and units past the row read as zero; result tiles that lie wholly
// inside Y are stored directly, the others through shared memory with guards, 8 subgroups at
// a time.
//
// Measured on the H100 (bench/RESULTS.md): 64 values a step beat 32 double-buffered, float16
// scalar tiles beat f16vec4 ones. What decides the rest is registers, so subgroups in flight:
// 8 subgroups of 64 x 32 took 185 a thread (8 subgroups an SM); 16 subgroups of 32 x 32
// without prefetch (TM 2, WGM 4, BK 64, one buffer: the host's choice) take ~110 (16 an SM).
// 32 values a step, double-buffered or not, ran 25-30 % slower. Figures in GPUKernels.coopShape
// and bench/RESULTS.md.
//
// matmul_coop_id_T (built with -DEXPERTS): matmul_id_T on tensor cores, the prefill products of
// a mixture-of-experts layer in one dispatch over its experts. Buffers W (the stacked tensor),
// X (float16 rows), Y, R (moe_route's output); params these + expertWords, gather, rowsOff,
// idsOff, expertsOff. Workgroup z is expert e (no split-K: splitUnits is every unit, plane 0),
// with W's expert e; its activation rows are pairs R[expertsOff + 2e] + m, m < R[expertsOff +
// 2e + 1] (X rows R[rowsOff + pair] with gather, else X row pair), written to Y row pair; groups
// past the expert's rows exit at once. M is the most rows an expert can have (the tokens).
// Dispatch (ceil(N / 128), ceil(M / BM), experts).
//
// Needs: shaderFloat16, 16-bit storage, VK_KHR_cooperative_matrix with a subgroup-scope
// 16x16x16 float16 x float16 -> float32 shape, subgroup size 32 (the warp layout), 44 KiB of
// shared memory. Constant 0 must be 128 WGM. Dispatch (ceil(N / 128), ceil(M / BM), splits).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require

layout(local_size_x = 256, local_size_x_id = 0) in;
// 16-row result tiles per subgroup along M (BM = 32 TM activation rows per workgroup), and
// whether a step's global loads are issued into registers before the previous step's
// products (1) or after them (0: fewer registers live across the products)
layout(constant_id = 1) const uint TM = 4u;
layout(constant_id = 2) const uint PREFETCH = 1u;
// subgroups along M (4 along N): the workgroup has 128 WGM invocations (constant 0)
layout(constant_id = 3) const uint WGM = 2u;
// values of K a step (a multiple of 16) and shared buffers: 1 (two barriers a step) or 2 (the
// next step's tiles go to the other buffer while this one's are multiplied: one barrier)
layout(constant_id = 4) const uint BK = 64u;
layout(constant_id = 5) const uint STAGES = 1u;

#include "quants.glsl"

layout(std430, binding = 1) readonly buffer XBuf { f16vec4 X4[]; };
layout(std430, binding = 2) writeonly buffer YBuf { float Y[]; };
#ifdef EXPERTS
layout(std430, binding = 3) readonly buffer RouteBuf { uint R[]; };
layout(std140, binding = 4) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride;
    uint splitUnits, plane;
    uint expertWords, gather, rowsOff, idsOff, expertsOff;
} p;
#else
layout(std140, binding = 3) uniform Params {
    uint K, N, M, rowBytes, xStride, yStride;
    uint splitUnits, plane;
} p;
#endif

const uint WG = 128u * WGM;
const uint BM = 16u * TM * WGM;       // activation rows per tile
const uint BN = 128u;                 // weight rows per tile
const uint SK = BK + 8u;              // shared row stride in values (BK 64: 144 bytes, fewer bank conflicts)
const uint UPT = BK / UNIT_VALUES;    // units per step
const uint WUNITS = BN * UPT;         // weight units per step
const uint WIT = (WUNITS + WG - 1u) / WG; // per thread (the last round may leave threads idle)
const uint XVR = BK / 4u;             // vec4s of one activation row per step
const uint XIT = BM * XVR / WG;       // activation vec4s per thread per step
// warp layout: 2 x 4 subgroups, each 64 activation rows x 32 weight rows = 4 x 2 tiles of 16
const uint SGM = 16u * TM, SGN = 32u, TN = SGN / 16u;

shared float16_t Xs[STAGES * BM * SK]; // [stage][m][k]
shared float16_t Ws[STAGES * BN * SK]; // [stage][n][k]
shared float Cs[8u * 256u];           // 8 subgroups' 16 x 16 result tiles (edge tiles)
#ifdef EXPERTS
shared uint xrow[BM];                 // where each of the tile's activation rows starts in X
#endif
// this workgroup's weights (16-bit word offset), activation rows, and first Y row
uint wBase = 0u, mRows = 0u, yRow0 = 0u;

#ifdef WTYPE_Q4_0
// Q4_0 in float16 arithmetic: a nibble n in the low bits of a float16 with bits 0x6400 is
// 1024 + n, so an AND and an OR make two values at once and (1024 + n) - 1032 = n - 8 exactly;
// times the float16 scale that rounds once, to what float32 (n - 8) d rounds to (no
// float-to-float16 conversion per value).
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

// global loads of the step starting at unit u0 (units up to U) into registers
void fetch(uint u0, uint n0, uint m0, uint U, uint rowWords, uint tid) {
    [[unroll]] for (uint i = 0u; i < WIT; i++) {
        const uint it = tid + i * WG, j = it % UPT, n = it / UPT, u = u0 + j, row = n0 + n;
        wok[i] = it < WUNITS && row < p.N && u < U;
        if (wok[i]) wu[i] = unit_load(wBase + row * rowWords, u, p.K);
    }
    [[unroll]] for (uint i = 0u; i < XIT; i++) {
        const uint it = tid + i * WG, jg = it % XVR, m = it / XVR;
        const uint j = jg / UNIT_VECS, g = jg % UNIT_VECS, u = u0 + j;
        f16vec4 x = f16vec4(0.0);
#ifdef EXPERTS
        if (m0 + m < mRows && u < U) x = X4[(xrow[m] + unit_pos(u, g)) >> 2];
#else
        if (m0 + m < mRows && u < U) x = X4[((m0 + m) * p.xStride + unit_pos(u, g)) >> 2];
#endif
        xv[i] = x;
    }
}

// the registers, dequantized to float16, into shared memory
void stash(uint tid, uint stage) {
    [[unroll]] for (uint i = 0u; i < WIT; i++) {
        const uint it = tid + i * WG, j = it % UPT, n = it / UPT;
        if (it >= WUNITS) continue;
        [[unroll]] for (uint g = 0u; g < UNIT_VECS; g++) {
            const f16vec4 v = wok[i] ? unit_vec16(wu[i], g) : f16vec4(0.0);
            const uint o = (stage * BN + n) * SK + j * UNIT_VALUES + 4u * g;
            [[unroll]] for (uint c = 0u; c < 4u; c++) Ws[o + c] = v[c];
        }
    }
    [[unroll]] for (uint i = 0u; i < XIT; i++) {
        const uint it = tid + i * WG, jg = it % XVR, m = it / XVR;
        const uint j = jg / UNIT_VECS, g = jg % UNIT_VECS;
        const uint o = (stage * BM + m) * SK + j * UNIT_VALUES + 4u * g;
        [[unroll]] for (uint c = 0u; c < 4u; c++) Xs[o + c] = xv[i][c];
    }
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint n0 = gl_WorkGroupID.x * BN, m0 = gl_WorkGroupID.y * BM;
    const uint sg = gl_SubgroupID, sm = (sg / 4u) * SGM, sn = (sg % 4u) * SGN;
    const uint rowWords = p.rowBytes >> 1;
#ifdef EXPERTS
    // workgroup z: expert z's rows and weights, all of K
    const uint ez = gl_WorkGroupID.z, first = R[p.expertsOff + 2u * ez];
    mRows = R[p.expertsOff + 2u * ez + 1u];
    if (m0 >= mRows) return; // whole workgroup: no barrier is skipped by part of it
    wBase = ez * p.expertWords;
    yRow0 = first;
    for (uint m = tid; m < BM; m += WG) {
        const uint i = first + min(m0 + m, mRows - 1u);
        xrow[m] = (p.gather != 0u ? R[p.rowsOff + i] : i) * p.xStride;
    }
    barrier();
    const uint u0 = 0u, U = units_per_row(p.K), yOff = 0u;
#else
    // split-K: workgroup z takes units [u0, U) and writes output plane z
    const uint z = gl_WorkGroupID.z;
    const uint u0 = z * p.splitUnits, U = min(units_per_row(p.K), u0 + min(p.splitUnits, 0xFFFFFFFFu - u0));
    const uint yOff = z * p.plane;
    mRows = p.M;
#endif
    const uint steps = U > u0 ? (U - u0 + UPT - 1u) / UPT : 0u;

    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc[TM * TN];
    [[unroll]] for (uint t = 0u; t < TM * TN; t++)
        acc[t] = coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);

    fetch(u0, n0, m0, U, rowWords, tid);
    stash(tid, 0u);
    barrier();
    for (uint s = 0u; s < steps; s++) {
        const bool more = s + 1u < steps;
        const uint cur = STAGES == 2u ? (s & 1u) : 0u, nxt = STAGES == 2u ? cur ^ 1u : 0u;
        if (more && PREFETCH != 0u) fetch(u0 + (s + 1u) * UPT, n0, m0, U, rowWords, tid);
        [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a[TM];
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> w[TN];
            [[unroll]] for (uint i = 0u; i < TM; i++)
                coopMatLoad(a[i], Xs, (cur * BM + sm + i * 16u) * SK + kk, SK, gl_CooperativeMatrixLayoutRowMajor);
            [[unroll]] for (uint j = 0u; j < TN; j++)
                coopMatLoad(w[j], Ws, (cur * BN + sn + j * 16u) * SK + kk, SK, gl_CooperativeMatrixLayoutColumnMajor);
            [[unroll]] for (uint i = 0u; i < TM; i++)
                [[unroll]] for (uint j = 0u; j < TN; j++)
                    acc[i * TN + j] = coopMatMulAdd(a[i], w[j], acc[i * TN + j]);
        }
        if (STAGES == 1u) barrier();  // everyone is done with the buffer stash overwrites
        if (more && PREFETCH == 0u) fetch(u0 + (s + 1u) * UPT, n0, m0, U, rowWords, tid);
        if (more) stash(tid, nxt);
        barrier();
    }

    // results: acc[i][j] holds Y rows m0+sm+16i.. (activation rows), columns n0+sn+16j..;
    // edge tiles go through Cs, which holds 8 subgroups' tiles: subgroup sg in round sg / 8
    const bool aligned = (p.yStride & 3u) == 0u && (yOff & 3u) == 0u;
    const uint slot = (sg % 8u) * 256u;
    for (uint rd = 0u; rd < (4u * WGM + 7u) / 8u; rd++) {
        if (sg / 8u == rd) {
            [[unroll]] for (uint i = 0u; i < TM; i++) {
                [[unroll]] for (uint j = 0u; j < TN; j++) {
                    const uint mm = m0 + sm + i * 16u, nn = n0 + sn + j * 16u;
                    if (mm >= mRows || nn >= p.N) continue;
                    if (aligned && mm + 16u <= mRows && nn + 16u <= p.N) {
                        coopMatStore(acc[i * TN + j], Y, yOff + (yRow0 + mm) * p.yStride + nn, p.yStride, gl_CooperativeMatrixLayoutRowMajor);
                    } else {
                        coopMatStore(acc[i * TN + j], Cs, slot, 16u, gl_CooperativeMatrixLayoutRowMajor);
                        subgroupMemoryBarrierShared();
                        subgroupBarrier();
                        for (uint e = gl_SubgroupInvocationID; e < 256u; e += gl_SubgroupSize) {
                            const uint r = e / 16u, c = e % 16u;
                            if (mm + r < mRows && nn + c < p.N) Y[yOff + (yRow0 + mm + r) * p.yStride + nn + c] = Cs[slot + e];
                        }
                        subgroupBarrier();
                    }
                }
            }
        }
        barrier();
    }
}
