#version 450
// attention_coop — attention_tiled on tensor cores (GL_KHR_cooperative_matrix), Vulkan only:
// the same contract, blocks and parameters, but R = 64 query rows per workgroup (blocks of at
// most 64 / G tokens) and head sizes that are multiples of 16, at most 128.
//
// Four subgroups each own 16 of the block's query rows; Q, scaled, stays in registers as float16
// fragments for the whole block. Per tile of BC = 32 keys:
//   the workgroup stores the tile's K (as [dimension][key], the f16 page layout) and V ([key][
//   dimension]) into shared memory as float16, from registers loaded while the previous tile
//   was computed (one barrier), then starts the loads of the next tile;
//   each subgroup, on its own:
//   S = Q K^T      (16 x 32, float16 products accumulated in float32)
//   softmax        S through shared memory; two invocations per row keep its running max and
//                  sum in float32 and write P = exp(S - max) as float16 and the row's rescale
//   O = O a + P V  (16 x headDim in float32 accumulators; each accumulator element's row is
//                  read from a matrix of row numbers loaded once, so the per-row rescale needs
//                  no knowledge of the implementation's fragment layout)
//   and a second barrier before the tile's shared memory is overwritten.
// f16 pages whose planes sit at 16-byte boundaries (page sizes that are multiples of 8, the
// usual case) are copied 8 halves a load; other cache types and layouts go through
// kv_types.glsl's readers, 4 values a load. Tiles start at multiples of BC (keys before a row's
// first are masked), so the 8-key runs of a page never straddle a page.
// At the end each element of O, divided by its row's sum, goes straight to its output row (a
// second matrix gives the column of each element).
// Needs: shaderFloat16, VK_KHR_cooperative_matrix with a subgroup-scope 16x16x16 float16 x
// float16 -> float32 shape, subgroups of 32 (the 4-subgroup layout and the row pairs),
// 33.5 KiB of shared memory. Workgroup of 128 (constant 0 must stay 128). Dispatch (blocks,
// kvHeads, splits): split-K as attention_tiled (partials for attention_combine; chunks are
// multiples of BC).
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
layout(std430, binding = 8) readonly buffer SinkBuf { float sinkv[]; };  // attention_sink.glsl
layout(std140, binding = 9) uniform Params {
    uint heads, kvHeads, headDim, kvDim, pageSize, pageStride, layerOff;
    float scale;
    uint qStride;
    float softcap;
    uint window;
    uint chunk, splits, sinks;
} p;

#include "attention_mask.glsl"
#include "attention_sink.glsl"
#define KV_BINDING 1
#define KV_ACCESS readonly
#include "kv_types.glsl"
// the pages 16 bytes at a time (the f16 copies)
layout(std430, binding = 1) readonly buffer KVBuf128 { uvec4 kv16[]; };

const uint WG = 128u;
const uint R = 64u;            // query rows per workgroup, 16 per subgroup
const uint BC = 32u;           // keys per tile
const uint DMAX = 128u;        // largest head size
const uint DT = DMAX / 16u;    // 16-wide column tiles of the head
const uint KS = BC + 8u;       // K row stride in halves ([dim][key]; 80 bytes: 8 rows, 8 bank groups)
const uint VS = DMAX + 8u;     // V row stride in halves ([key][dim]; 272 bytes)
const uint VBASE = DMAX * KS;  // V's first half in KV
const uint SS = BC + 4u;       // float32 score row stride
const uint PS = BC + 8u;       // float16 probability row stride
const uint LOADS = 4u;         // 16-byte register loads a thread per tile, for K and again for V
const float NEG = -1.0e30;     // "minus infinity" that stays finite in exp(a - b)

// The tile's K then V, as float16 (f16vec4 units); first Q's 64 rows (stride VS) while its
// fragments are loaded.
shared f16vec4 KV[(VBASE + BC * VS) / 4u];
shared vec4 Ss[4u * 16u * SS / 4u];      // per subgroup [row][key] scores; first the row map, at the end the column map
shared f16vec4 Ps[4u * 16u * PS / 4u];   // per subgroup [row][key] probabilities
shared float alphaS[R];                  // per row: rescale of O for this tile, at the end 1 / sum

#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>

uint tid, pt, kOff, hd, kend;
bool fast;
uvec4 kreg[LOADS], vreg[LOADS];

uvec2 h4(vec4 v) { return uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw)); }

// Issue the loads of the tile at j0 into kreg / vreg (zeros where there is no key or dimension).
void load_tile(uint j0) {
    const uint ps0 = p.pageSize;
#if defined(KT_F16) && defined(VT_F16)
    if (fast) {
        // K: unit (dimension d, run g of 8 keys); a thread keeps its run, so one page lookup
        const uint g = tid & 3u, j = j0 + 8u * g;
        const bool have = j < kend;
        const uint kb = have ? (2u * (uint(pagetab[pt + j / ps0]) * p.pageStride + p.layerOff) + j % ps0) : 0u;
        [[unroll]] for (uint i = 0u; i < LOADS; i++) {
            const uint d = (tid >> 2) + 32u * i;
            kreg[i] = have && d < hd ? kv16[(kb + (kOff + d) * ps0) >> 3] : uvec4(0u);
        }
        // V: unit (key k, run of 8 dimensions); keys past the end are zero (P is 0 there, and
        // 0 * a stale half could be NaN)
        [[unroll]] for (uint i = 0u; i < LOADS; i++) {
            const uint k = (tid >> 4) + 8u * i, dg = tid & 15u, jj = j0 + k;
            vreg[i] = jj < kend && 8u * dg < hd
                ? kv16[(2u * (uint(pagetab[pt + jj / ps0]) * p.pageStride + p.layerOff + kv_kplane_words()) + (jj % ps0) * p.kvDim + kOff + 8u * dg) >> 3]
                : uvec4(0u);
        }
        return;
    }
#endif
    // any type: K a key per invocation, 4 dimensions a load (unit i: dims c, c+1, c+2, c+3 and
    // c + 16 ...); V a key per 16 invocations, 8 dimensions each
    const uint k = tid % BC, j = j0 + k;
    const bool have = j < kend;
    const uint kb = have ? k_key(uint(pagetab[pt + j / ps0]) * p.pageStride + p.layerOff, j % ps0) : 0u;
    [[unroll]] for (uint i = 0u; i < LOADS; i++) {
        const uint c0 = 4u * (tid / BC) + 32u * i, c1 = c0 + 16u;
        kreg[i] = uvec4(have && c0 < hd ? h4(k_at4(kb, kOff + c0)) : uvec2(0u),
                        have && c1 < hd ? h4(k_at4(kb, kOff + c1)) : uvec2(0u));
    }
    [[unroll]] for (uint i = 0u; i < LOADS; i++) {
        const uint e = tid + i * WG, kk = e / (DMAX / 8u), c = 8u * (e % (DMAX / 8u)), jj = j0 + kk;
        uvec4 w = uvec4(0u);
        if (jj < kend && c < hd) {
            const uint vb = v_row(uint(pagetab[pt + jj / ps0]) * p.pageStride + p.layerOff + kv_kplane_words(), jj % ps0);
            w = uvec4(h4(v_at4(vb, kOff + c)), h4(v_at4(vb, kOff + c + 4u)));
        }
        vreg[i] = w;
    }
}

f16vec4 lo4(uvec4 w) { return f16vec4(unpackFloat2x16(w.x), unpackFloat2x16(w.y)); }
f16vec4 hi4(uvec4 w) { return f16vec4(unpackFloat2x16(w.z), unpackFloat2x16(w.w)); }

// Store kreg / vreg into KV (the layouts load_tile's two paths read).
void store_tile() {
#if defined(KT_F16) && defined(VT_F16)
    if (fast) {
        [[unroll]] for (uint i = 0u; i < LOADS; i++) {
            const uint d = (tid >> 2) + 32u * i, at = (d * KS + 8u * (tid & 3u)) >> 2;
            KV[at] = lo4(kreg[i]);
            KV[at + 1u] = hi4(kreg[i]);
        }
        [[unroll]] for (uint i = 0u; i < LOADS; i++) {
            const uint k = (tid >> 4) + 8u * i, at = (VBASE + k * VS + 8u * (tid & 15u)) >> 2;
            KV[at] = lo4(vreg[i]);
            KV[at + 1u] = hi4(vreg[i]);
        }
        return;
    }
#endif
    // K transposed here: four scalars for each 4-dimension load
    const uint k = tid % BC;
    [[unroll]] for (uint i = 0u; i < LOADS; i++) {
        const uint c0 = 4u * (tid / BC) + 32u * i;
        const f16vec4 a = lo4(kreg[i]), b = hi4(kreg[i]);
        [[unroll]] for (uint t = 0u; t < 4u; t++) {
            const uint x = (c0 + t) * KS + k, y = (c0 + 16u + t) * KS + k;
            KV[x >> 2][x & 3u] = a[t];
            KV[y >> 2][y & 3u] = b[t];
        }
    }
    [[unroll]] for (uint i = 0u; i < LOADS; i++) {
        const uint e = tid + i * WG, kk = e / (DMAX / 8u), c = 8u * (e % (DMAX / 8u)), at = (VBASE + kk * VS + c) >> 2;
        KV[at] = lo4(vreg[i]);
        KV[at + 1u] = hi4(vreg[i]);
    }
}

void main() {
    const uint blk = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y;
    tid = gl_LocalInvocationID.x;
    if (kvh >= p.kvHeads) return;
    const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint t0 = uint(blocks[2u * blk]), count = uint(blocks[2u * blk + 1u]);
    hd = p.headDim;
    const uint G = p.heads / p.kvHeads;
    const uint used = min(R / G, count) * G;   // rows in use
    pt = uint(tokpt[t0]);
    kOff = kvh * hd;
    const uint dt = hd / 16u;                  // column tiles in use
    // 16-byte copies need 8-key runs inside a page, at 16-byte boundaries
    fast = (p.pageSize & 7u) == 0u && (p.pageStride & 3u) == 0u && (p.layerOff & 3u) == 0u && (p.kvDim & 7u) == 0u;

    // queries, scaled, as float16 (rows past `used` and columns past hd are zero)
    for (uint e = tid; e < R * (DMAX / 4u); e += WG) {
        const uint r = e / (DMAX / 4u), c = 4u * (e % (DMAX / 4u));
        vec4 q = vec4(0.0);
        if (r < used && c < hd) {
            const uint b = (t0 + r / G) * p.qStride + (kvh * G + r % G) * hd + c;
            q = vec4(Q[b], Q[b + 1u], Q[b + 2u], Q[b + 3u]) * p.scale;
        }
        KV[(r * VS + c) >> 2] = f16vec4(q);
    }
    // row numbers as an accumulator matrix: element i of any accumulator of this type lies in
    // row rowm[i] of its 16 x 16 tile (and column colm[i], loaded at the end)
    for (uint e = tid; e < 64u; e += WG) Ss[e] = vec4(float(e / 4u));
    uint kbeg = ~0u;
    kend = 0u;
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
    ACC rowm;
    coopMatLoad(rowm, Ss, 0u, 16u / 4u, gl_CooperativeMatrixLayoutRowMajor);
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> qf[DT];
    [[unroll]] for (uint c = 0u; c < DT; c++)
        if (c < dt) coopMatLoad(qf[c], KV, (sg * 16u * VS + c * 16u) / 4u, VS / 4u, gl_CooperativeMatrixLayoutRowMajor);
    ACC o[DT];
    [[unroll]] for (uint c = 0u; c < DT; c++) o[c] = ACC(0.0);
    barrier();

    // softmax phase: this invocation's row (of the subgroup's 16) and which half (hk) of the tile's keys
    const uint srow = lane / 2u, hk = lane % 2u, grow = sg * 16u + srow;
    // the row's keys lo .. lim - 1 (a split's keys only: kbeg .. kend - 1)
    const uint nkr = grow < used ? uint(tokpos[t0 + grow / G]) + 1u : 0u;
    const uint lo = max(first_key(nkr), kbeg), lim = min(nkr, kend);
    float mrun = NEG, lrun = 0.0;
    const uint sBase = sg * 16u * SS, pBase = sg * 16u * PS;

    // tiles start at multiples of BC (a split's chunk is one)
    const uint jstart = kbeg - kbeg % BC;
    load_tile(jstart);
    for (uint j0 = jstart; j0 < kend; j0 += BC) {
        store_tile();
        barrier();
        if (j0 + BC < kend) load_tile(j0 + BC);   // in flight while this tile is computed

        // S = Q K^T for this subgroup's 16 rows, into shared memory
        [[unroll]] for (uint n = 0u; n < BC / 16u; n++) {
            ACC s = ACC(0.0);
            [[unroll]] for (uint c = 0u; c < DT; c++) {
                if (c < dt) {
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> kf;
                    coopMatLoad(kf, KV, (c * 16u * KS + n * 16u) / 4u, KS / 4u, gl_CooperativeMatrixLayoutRowMajor);
                    s = coopMatMulAdd(qf[c], kf, s);
                }
            }
            coopMatStore(s, Ss, (sBase + n * 16u) / 4u, SS / 4u, gl_CooperativeMatrixLayoutRowMajor);
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();

        // online softmax: the row's pair of invocations, 16 keys each
        {
            const uint kb = j0 + hk * 16u, sAt = (sBase + srow * SS + hk * 16u) / 4u;
            vec4 sv[4];
            float tmax = NEG;
            [[unroll]] for (uint v = 0u; v < 4u; v++) {
                const vec4 x = Ss[sAt + v];
                [[unroll]] for (uint i = 0u; i < 4u; i++) {
                    const uint j = kb + 4u * v + i;
                    sv[v][i] = j >= lo && j < lim ? softcapped(x[i]) : NEG;
                    tmax = max(tmax, sv[v][i]);
                }
            }
            tmax = max(tmax, subgroupShuffleXor(tmax, 1u));
            const float mn = max(mrun, tmax), alpha = exp(mrun - mn);
            mrun = mn;
            float l = 0.0;
            const uint pAt = (pBase + srow * PS + hk * 16u) / 4u;
            [[unroll]] for (uint v = 0u; v < 4u; v++) {
                vec4 e;
                [[unroll]] for (uint i = 0u; i < 4u; i++) {
                    e[i] = sv[v][i] > 0.5 * NEG ? exp(sv[v][i] - mn) : 0.0;
                    l += e[i];
                }
                Ps[pAt + v] = f16vec4(e);
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
            coopMatLoad(pf, Ps, (pBase + kk * 16u) / 4u, PS / 4u, gl_CooperativeMatrixLayoutRowMajor);
            [[unroll]] for (uint c = 0u; c < DT; c++) {
                if (c < dt) {
                    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> vf;
                    coopMatLoad(vf, KV, (VBASE + kk * 16u * VS + c * 16u) / 4u, VS / 4u, gl_CooperativeMatrixLayoutRowMajor);
                    o[c] = coopMatMulAdd(pf, vf, o[c]);
                }
            }
        }
        barrier();  // K/V tile (all subgroups) and this subgroup's alphaS before the next tile
    }

    // the column map, into this subgroup's own scores (free now; colm is not kept in registers
    // through the loop)
    for (uint e = lane; e < 64u; e += gl_SubgroupSize) {
        const uint x = 4u * (e % 4u);
        Ss[sBase / 4u + e] = vec4(float(x), float(x + 1u), float(x + 2u), float(x + 3u));
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    ACC colm;
    coopMatLoad(colm, Ss, sBase / 4u, 16u / 4u, gl_CooperativeMatrixLayoutRowMajor);
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
    if (hk == 0u) {
        const float ls = with_sink(lrun, mrun, kvh * G + grow % G);
        alphaS[grow] = ls > 0.0 ? 1.0 / ls : 0.0;
    }
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
