#version 450
// attention_coop — attention_tiled on tensor cores (GL_KHR_cooperative_matrix), Vulkan only:
// the same contract, blocks and parameters, but R = 64 query rows per workgroup (blocks of at
// most 64 / G tokens) and head sizes that are multiples of 16, at most 128.
//
// Four subgroups each own 16 of the block's query rows. Per tile of BC = 32 keys the workgroup
// loads K and V (pages of any cache type) into shared memory as float16; then each subgroup, on its own:
//   S = Q K^T      (16 x 32, float16 products accumulated in float32; Q, scaled, stays in
//                   registers as float16 fragments for the whole block)
//   softmax        S through shared memory; two invocations per row keep its running max and
//                  sum in float32 and write P = exp(S - max) as float16 and the row's rescale
//   O = O a + P V  (16 x headDim in float32 accumulators; each accumulator element's row is
//                  read from a matrix of row numbers loaded once, so the per-row rescale needs
//                  no knowledge of the implementation's fragment layout)
// At the end each element of O, divided by its row's sum, goes straight to its output row (a
// second matrix gives the column of each element).
// Needs: shaderFloat16, VK_KHR_cooperative_matrix with a subgroup-scope 16x16x16 float16 x
// float16 -> float32 shape, subgroups of 32 (the 4-subgroup layout and the row pairs),
// 31.3 KiB of shared memory. Workgroup of 128 (constant 0 must stay 128). Dispatch (blocks,
// kvHeads, splits): split-K as attention_tiled (partials for attention_combine).
// K/V in any of the cache types (kv_types.glsl: one build per K type and V type).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require

layout(local_size_x = 128, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer QBuf { float Q[]; };
layout(std430, binding = 2) writeonly buffer OutBuf { float outv[]; };
layout(std430, binding = 3) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 4) readonly buffer PtBuf { int tokpt[]; };
layout(std430, binding = 5) readonly buffer PageBuf { int pagetab[]; };
layout(std430, binding = 6) readonly buffer BlockBuf { int blocks[]; };
layout(std430, binding = 7) writeonly buffer PartBuf { float part[]; };
layout(std140, binding = 8) uniform Params {
    uint heads, kvHeads, headDim, kvDim, pageSize, pageStride, layerOff;
    float scale;
    uint qStride;
    float softcap;
    uint window;
    uint chunk, splits;
} p;

#include "attention_mask.glsl"
#define KV_BINDING 1
#define KV_ACCESS readonly
#include "kv_types.glsl"

const uint WG = 128u;
const uint R = 64u;            // query rows per workgroup, 16 per subgroup
const uint BC = 32u;           // keys per tile
const uint DMAX = 128u;        // largest head size
const uint DT = DMAX / 16u;    // 16-wide column tiles of the head
const uint HS = DMAX + 8u;     // float16 shared row stride (272 bytes: rows start in other banks)
const uint SS = BC + 4u;       // float32 score row stride
const uint PS = BC + 8u;       // float16 probability row stride
const float NEG = -1.0e30;     // "minus infinity" that stays finite in exp(a - b)

// Q's 64 rows while the fragments are loaded, then K (keys 0..31) and V (rows 32..63)
shared float16_t QKV[R * HS];
shared float Ss[4u * 16u * SS];         // per subgroup [row][key] scores; first the row/column maps
shared float16_t Ps[4u * 16u * PS];     // per subgroup [row][key] probabilities
shared float alphaS[R];                 // per row: rescale of O for this tile, at the end 1 / sum

#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

void main() {
    const uint blk = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    if (kvh >= p.kvHeads) return;
    const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint t0 = uint(blocks[2u * blk]), count = uint(blocks[2u * blk + 1u]);
    const uint hd = p.headDim, G = p.heads / p.kvHeads, ps0 = p.pageSize;
    const uint used = min(R / G, count) * G;   // rows in use
    const uint pt = uint(tokpt[t0]);
    const uint kOff = kvh * hd, plane = kv_kplane_words();
    const uint dt = hd / 16u;                  // column tiles in use

    // queries, scaled, as float16 (rows past `used` and columns past hd are zero)
    for (uint e = tid; e < R * (DMAX / 4u); e += WG) {
        const uint r = e / (DMAX / 4u), c = 4u * (e % (DMAX / 4u));
        vec4 q = vec4(0.0);
        if (r < used && c < hd) {
            const uint b = (t0 + r / G) * p.qStride + (kvh * G + r % G) * hd + c;
            q = vec4(Q[b], Q[b + 1u], Q[b + 2u], Q[b + 3u]) * p.scale;
        }
        [[unroll]] for (uint i = 0u; i < 4u; i++) QKV[r * HS + c + i] = float16_t(q[i]);
    }
    // row and column numbers as accumulator matrices: element i of any accumulator of this
    // type lies at (rowOf[i], colOf[i]) of its 16 x 16 tile
    for (uint e = tid; e < 256u; e += WG) { Ss[e] = float(e / 16u); Ss[256u + e] = float(e % 16u); }
    uint kbeg = ~0u, kend = 0u;
    for (uint i = 0u; i < used / G; i++) {
        const uint nk = uint(tokpos[t0 + i]) + 1u;
        kbeg = min(kbeg, first_key(nk));
        kend = max(kend, nk);
    }
    const uint split = gl_WorkGroupID.z;
    if (p.splits > 1u) {
        // no row of the block has keys from here on (the whole workgroup leaves)
        if (split * p.chunk >= kend) return;
        kbeg = max(kbeg, split * p.chunk);
        kend = min(kend, (split + 1u) * p.chunk);
    }
    barrier();
    ACC rowm, colm;
    coopMatLoad(rowm, Ss, 0u, 16u, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(colm, Ss, 256u, 16u, gl_CooperativeMatrixLayoutRowMajor);
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> qf[DT];
    [[unroll]] for (uint c = 0u; c < DT; c++)
        if (c < dt) coopMatLoad(qf[c], QKV, sg * 16u * HS + c * 16u, HS, gl_CooperativeMatrixLayoutRowMajor);
    ACC o[DT];
    [[unroll]] for (uint c = 0u; c < DT; c++) o[c] = ACC(0.0);
    barrier();

    // softmax phase: this invocation's row (of the subgroup's 16) and which half (hk) of the tile's keys
    const uint srow = lane / 2u, hk = lane % 2u, grow = sg * 16u + srow;
    // the row's keys lo .. lim - 1 (a split's end at kend: the rest of its last tile is not loaded)
    const uint nkr = grow < used ? uint(tokpos[t0 + grow / G]) + 1u : 0u, lo = first_key(nkr), lim = min(nkr, kend);
    float mrun = NEG, lrun = 0.0;
    const uint sBase = sg * 16u * SS, pBase = sg * 16u * PS;

    for (uint j0 = kbeg; j0 < kend; j0 += BC) {
        // K and V of the tile, every load issued before any is stored (a load, store, load...
        // chain is bound by memory latency). K: invocations along keys (the K plane is
        // [d][slot] within a page), 4 dimensions each; V: along dimensions (the V plane is [slot][d]).
        {
            const uint KL = DMAX / 4u / (WG / BC), VL = BC * (DMAX / 4u) / WG;
            const uint k = tid % BC, j = j0 + k;
            const bool have = j < kend;
            uint kb = 0u;
            if (have) kb = k_key(uint(pagetab[pt + j / ps0]) * p.pageStride + p.layerOff, j % ps0);
            f16vec4 kv4[KL], vv4[VL];
            [[unroll]] for (uint u = 0u; u < KL; u++) {
                const uint c = 4u * (tid / BC) + u * 4u * (WG / BC);
                kv4[u] = have && c < hd ? f16vec4(k_at4(kb, kOff + c)) : f16vec4(0.0);
            }
            [[unroll]] for (uint u = 0u; u < VL; u++) {
                const uint e = tid + u * WG, kk = e / (DMAX / 4u), c = 4u * (e % (DMAX / 4u)), jj = j0 + kk;
                vv4[u] = jj < kend && c < hd
                    ? f16vec4(v_at4(v_row(uint(pagetab[pt + jj / ps0]) * p.pageStride + p.layerOff + plane, jj % ps0), kOff + c))
                    : f16vec4(0.0);
            }
            [[unroll]] for (uint u = 0u; u < KL; u++) {
                const uint c = 4u * (tid / BC) + u * 4u * (WG / BC);
                [[unroll]] for (uint i = 0u; i < 4u; i++) QKV[k * HS + c + i] = kv4[u][i];
            }
            [[unroll]] for (uint u = 0u; u < VL; u++) {
                const uint e = tid + u * WG, kk = e / (DMAX / 4u), c = 4u * (e % (DMAX / 4u));
                [[unroll]] for (uint i = 0u; i < 4u; i++) QKV[(BC + kk) * HS + c + i] = vv4[u][i];
            }
        }
        barrier();

        // S = Q K^T for this subgroup's 16 rows, into shared memory
        [[unroll]] for (uint n = 0u; n < BC / 16u; n++) {
            ACC s = ACC(0.0);
            [[unroll]] for (uint c = 0u; c < DT; c++) {
                if (c < dt) {
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> kf;
                    coopMatLoad(kf, QKV, n * 16u * HS + c * 16u, HS, gl_CooperativeMatrixLayoutColumnMajor);
                    s = coopMatMulAdd(qf[c], kf, s);
                }
            }
            coopMatStore(s, Ss, sBase + n * 16u, SS, gl_CooperativeMatrixLayoutRowMajor);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();

        // online softmax: the row's pair of invocations, 16 keys each
        {
            float sv[16];
            float tmax = NEG;
            [[unroll]] for (uint i = 0u; i < 16u; i++) {
                const uint k = hk * 16u + i;
                sv[i] = j0 + k >= lo && j0 + k < lim ? softcapped(Ss[sBase + srow * SS + k]) : NEG;
                tmax = max(tmax, sv[i]);
            }
            tmax = max(tmax, subgroupShuffleXor(tmax, 1u));
            const float mn = max(mrun, tmax), alpha = exp(mrun - mn);
            mrun = mn;
            float l = 0.0;
            [[unroll]] for (uint i = 0u; i < 16u; i++) {
                const uint k = hk * 16u + i;
                const float e = j0 + k >= lo && j0 + k < lim ? exp(sv[i] - mn) : 0.0;
                Ps[pBase + srow * PS + k] = float16_t(e);
                l += e;
            }
            l += subgroupShuffleXor(l, 1u);
            lrun = fma(lrun, alpha, l);
            if (hk == 0u) alphaS[grow] = alpha;
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();

        // O = O alpha + P V
        [[unroll]] for (uint i = 0u; i < rowm.length(); i++) {
            const float a = alphaS[sg * 16u + uint(rowm[i])];
            [[unroll]] for (uint c = 0u; c < DT; c++) o[c][i] *= a;
        }
        [[unroll]] for (uint kk = 0u; kk < BC / 16u; kk++) {
            coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> pf;
            coopMatLoad(pf, Ps, pBase + kk * 16u, PS, gl_CooperativeMatrixLayoutRowMajor);
            [[unroll]] for (uint c = 0u; c < DT; c++) {
                if (c < dt) {
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> vf;
                    coopMatLoad(vf, QKV, (BC + kk * 16u) * HS + c * 16u, HS, gl_CooperativeMatrixLayoutRowMajor);
                    o[c] = coopMatMulAdd(pf, vf, o[c]);
                }
            }
        }
        barrier();  // K/V tile (all subgroups) and this subgroup's alphaS before the next tile
    }

    if (p.splits > 1u) {
        // partials: O unnormalised, then the row's running max and sum
        if (hk == 0u && grow < used) {
            const uint pb = (((t0 + grow / G) * p.heads + kvh * G + grow % G) * p.splits + split) * (hd + 2u);
            part[pb + hd] = mrun;
            part[pb + hd + 1u] = lrun;
        }
        [[unroll]] for (uint i = 0u; i < rowm.length(); i++) {
            const uint r = sg * 16u + uint(rowm[i]), col = uint(colm[i]);
            if (r >= used) continue;
            const uint pb = (((t0 + r / G) * p.heads + kvh * G + r % G) * p.splits + split) * (hd + 2u) + col;
            [[unroll]] for (uint c = 0u; c < DT; c++)
                if (c < dt) part[pb + c * 16u] = o[c][i];
        }
        return;
    }
    // out = O / sum, each element to its row
    if (hk == 0u) alphaS[grow] = lrun > 0.0 ? 1.0 / lrun : 0.0;
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    [[unroll]] for (uint i = 0u; i < rowm.length(); i++) {
        const uint r = sg * 16u + uint(rowm[i]), col = uint(colm[i]);
        if (r >= used) continue;
        const float inv = alphaS[r];
        const uint ob = ((t0 + r / G) * p.heads + kvh * G + r % G) * hd + col;
        [[unroll]] for (uint c = 0u; c < DT; c++)
            if (c < dt) outv[ob + c * 16u] = o[c][i] * inv;
    }
}
