#version 450
// attention — causal paged attention, split over the keys ("flash decoding"). Token t (at
// position tokpos[t] of its sequence, whose page list starts at pagetab[tokpt[t]]) attends over
// keys 0 .. tokpos[t] of that sequence, for the heads/kvHeads query heads that share KV head kvh:
//   out[t][h] = sum_j softmax_j(scale * q[t][h] . k[j]) v[j]
// Q rows are qStride floats apart (head h at h*headDim), out rows heads*vDim floats (head h at
// h*vDim): v[j] is vDim values from vOff of the key's V head (MLA: the latent after its RoPE part;
// vDim 0 means headDim, all of it);
// K/V live in the pages at this layer (README.md, "K/V pages"). One workgroup per (token, KV
// head, split); dispatch (n, kvHeads, splits). Split s takes keys [s*chunk, min((s+1)*chunk, tokpos[t]+1)) (a split past
// the token's last key does nothing).
//   splits == 1: the workgroup writes out[t][h] itself (part is not touched).
//   sinks: a head's sink logit joins its softmax (attention_sink.glsl; binding SINK_BINDING,
//   the last buffer), where the output is normalised: here, or in the merge of the splits.
//   splits  > 1: it writes a partial for each head h to part, row r = (t*heads + h)*splits + s of
//                vDim+2 floats: sum_j exp(x_j - m) v[j] (vDim floats), m, sum_j exp(x_j - m);
//                attention_combine then merges the splits into out.
//
// Keys go up to TK = 128 at a time with an online softmax, three barriers a tile:
//   1. thread i scores key j0 + i against every head of the pass (splits of 32 or 64 keys: 4 or 2
//      threads a key, each over a slice of the dimensions, summed by shuffles; the queries in shared
//      memory as [dim][head] vec4s, read by all threads at once; neighbouring threads read
//      neighbouring K slots), the tile's maximum per head through subgroupMax;
//   2. every thread derives the new running maxima itself, writes its key's probabilities and
//      keeps its own share of each head's sum (rescaled as the maximum grows);
//   3. weighted V: thread (column c of 4 dimensions, key group kq) sums every group-th key of
//      the tile into vec4 accumulators for all heads of the pass (V rows are contiguous).
// Built with -DSTAGED (attention_staged_f16_f16, attention_q8_staged_f16_f16: f16 K and V, the
// cache's default types, for long caches), tiles are staged where the pages' 8-key runs sit at
// 16-byte boundaries (GPUKernels.attentionStagedFits): at the top of a tile every thread issues
// all its loads at once, K as 16-byte runs of 8 keys into shared memory (KO, as the page holds
// it: [dim][key]) and V as its own keys' 8-byte rows into registers, with the pages' offsets
// read a tile ahead into shared memory, so a tile costs one memory round trip rather than one
// every few dimensions or keys. Tiles then hold at most 8192 halves of K (64 keys at headDim 128,
// 32 at 256) and start at a multiple of 8 keys. (The extra registers cost short caches more
// than the staging saves, hence a build of its own.)
// The key groups' outputs and the threads' sums are reduced once, after the last tile. The
// heads of a KV group share every K/V load; a pass takes min(GS, 2048/headDim) of them (GS:
// constant 1, at most 8; the host gives the heads of a group where fewer).
// Needs: a workgroup of 128 (constant 0), subgroups of at least 4 (consecutive invocations), headDim a multiple of 4, at
// most 576, values at most 512 of it. K/V in any of the cache types (kv_types.glsl: one build per K type and V type).
// Built with -DF16OUT (attention_x16*), the same merge writes the output also as to_f16's float16
// rows (binding 7, x16Stride halves apart; counters at binding 8), for a decode batch whose O
// product runs on tensor cores: no attention_combine and no to_f16 after it.
// Built with -DQ8 (attention_q8*), the output is also written as quantize_q8's 8-bit blocks
// (XQ, XD, bindings 7 and 8; rows of heads*headDim values; headDim a multiple of 32) for the
// O product's matvec_dot, and with up to JMAX splits a token's splits are merged by the last of
// them to finish, so decode needs neither attention_combine_q8 nor quantize_q8 after it: each
// split's workgroup writes its partials, then counts itself on the token's and KV head's
// counter (binding 9, zero between dispatches); the last one to count reads every split's
// partials and merges them as attention_combine does.
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require

layout(local_size_x = 128, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer QBuf { float Q[]; };
layout(std430, binding = 2) writeonly buffer OutBuf { float outv[]; };
layout(std430, binding = 3) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 4) readonly buffer PtBuf { int tokpt[]; };
layout(std430, binding = 5) readonly buffer PageBuf { int pagetab[]; };
#if defined(Q8) || defined(F16OUT)
#define JOIN
#endif
#ifdef JOIN
// the partials are read back by the token's last split: coherent, so it sees the others' stores
layout(std430, binding = 6) coherent writeonly buffer PartBuf { float part[]; };
layout(std430, binding = 6) coherent readonly buffer PartBufR { float partR[]; };
const uint JMAX = 16u; // GPUKernels.attentionJoinMaxSplits
shared float jw[8u * JMAX];  // [head][split] weights exp(m_s - M)
shared float jl[8u];         // [head] sum_s w_s l_s
shared bool lastSplit;
#endif
#if defined(Q8)
layout(std430, binding = 9) coherent buffer DoneBuf { uint done[]; }; // a counter a (token, KV head)
layout(std430, binding = 7) writeonly buffer Q8QBuf { uint XQ[]; };
layout(std430, binding = 8) writeonly buffer Q8DBuf { vec2 XD[]; };
shared float q8src[2048];  // a pass's outputs (QMAX floats), for q8_store
#define Q8_STORE 128
#include "q8.glsl"
#define SINK_BINDING 10
#define PARAMS_BINDING 11
#elif defined(F16OUT)
// the output also as to_f16's float16 rows (x16Stride halves apart, pairs packed as to_f16
// packs them), for the O product on tensor cores
layout(std430, binding = 7) writeonly buffer X16Buf { uint X16[]; };
layout(std430, binding = 8) coherent buffer DoneBuf { uint done[]; }; // a counter a (token, KV head)
#define SINK_BINDING 9
#define PARAMS_BINDING 10
#else
layout(std430, binding = 6) writeonly buffer PartBuf { float part[]; };
#define SINK_BINDING 7
#define PARAMS_BINDING 8
#endif
layout(std430, binding = SINK_BINDING) readonly buffer SinkBuf { float sinkv[]; };
layout(std140, binding = PARAMS_BINDING) uniform Params {
    uint n, heads, kvHeads, headDim, kvDim, pageSize, pageStride, layerOff;
    float scale;
    uint chunk, splits, qStride;
    float softcap;
    uint window, sinks;
    uint vOff, vDim;  // the values: vDim dimensions from vOff of each V head (0: headDim from 0)
#ifdef F16OUT
    uint x16Stride;
#endif
} p;

#include "attention_mask.glsl"
#include "attention_sink.glsl"
#define KV_BINDING 1
#define KV_ACCESS readonly
#include "kv_types.glsl"

const uint TK = 128u;    // keys per tile, one per thread
const uint GMAX = 8u;    // query heads per pass, at most
// query heads a pass keeps in registers (1 … GMAX; the host gives the model's heads per KV head
// where that is fewer: with GMAX unrolled, 4 heads a group held 8 heads' accumulators)
#ifdef MSL
const uint GS = GMAX; // Metal's functions take no constant after 0 (MetalDevice bakes shapes)
#else
layout(constant_id = 1) const uint GS = GMAX;
#endif
const uint QMAX = 2304u; // floats of the heads of a pass (4 heads of MLA's 576)
const uint CMAX = 128u;  // columns (4 dimensions) of a head's values: up to 512
const uint SGMAX = 32u;  // subgroups of a workgroup (subgroups of at least 4)
const float NEG = -1.0e30; // "minus infinity" that stays finite in exp(a - b)

shared vec4 Qs[QMAX / 4u];          // [d][head / 4]: query d of heads 4i .. 4i+3
shared float Ps[GMAX * TK];         // [head][key] probabilities of the tile
shared uint Vb[TK];                 // V row handle of each key (v_row)
shared float red[SGMAX * GMAX];     // [subgroup][head] tile maxima, at the end sums
// staged tiles: K as [dim][key] halves; at the end the outputs [key group][head][column] (as bits)
shared uvec4 KO[GMAX * TK];
shared float mS[GMAX];              // at the end: the running maxima

const uint KSMAX = 8u * GMAX * TK;  // halves of a staged K tile
const uint KUNITS = KSMAX / 8u / TK; // 16-byte K loads a thread per staged tile
const uint VUNITS = 16u;            // V rows a thread per staged tile
const uint PBMAX = TK / 8u + 1u;    // pages a tile can touch (pages of at least 8 keys)
shared uint pbase[2u * PBMAX];      // staged tiles: word offsets of the tile's pages' layer (two tiles)
#if defined(STAGED)
#if !defined(KT_F16) || !defined(VT_F16)
#error "STAGED takes f16 K and V"
#endif
layout(std430, binding = 1) readonly buffer KVBuf128 { uvec4 kv16[]; };
#endif

void main() {
    const uint t = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, split = gl_WorkGroupID.z;
    if (t >= p.n || kvh >= p.kvHeads) return;
    const uint nkeys = uint(tokpos[t]) + 1u;
    const uint kbeg = split * p.chunk;
    if (kbeg >= nkeys) return;
    const uint kend = min(nkeys, kbeg + p.chunk);
    // a split wholly before the window runs no tile and leaves an empty partial (m = NEG, l = 0)
    const uint kstart = max(kbeg, first_key(nkeys));
    const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID, nsg = gl_NumSubgroups;
    // (vd: the values' width, from vOff into each V head: all of it but for MLA's latent rows)
    const uint hd = p.headDim, vd = p.vDim != 0u ? p.vDim : hd, G = p.heads / p.kvHeads, ps0 = p.pageSize;
    const uint pt = uint(tokpt[t]);
    const uint kOff = kvh * hd, vOff = kOff + p.vOff, plane = kv_kplane_words();
    // heads a pass: whole vec4s of Qs ([d][head / 4]) for hd dimensions each
    const uint gpass = max(1u, min(GS, 4u * (QMAX / (4u * hd))));
    // weighted V: column c (dimensions 4c .. 4c+3) of key group kq of `groups`
    const uint cols = vd / 4u, groups = TK / cols, c = tid % cols, kq = tid / cols;
    // scores: KT threads a key (short splits: 2 or 4, each over a slice of the dimensions, so a
    // tile is not mostly idle threads), key kt of the tile, dimensions d0 .. d0 + dl
    const uint KT0 = hd % 16u != 0u ? 1u : p.chunk <= 32u ? 4u : p.chunk <= 64u ? 2u : 1u;
    uint KT = KT0;
    bool staged = false;
#if defined(STAGED)
    // staged tiles of at most KSMAX halves (more threads a key where a head is wide), whole
    // 16-byte runs of 8 keys, at most VUNITS V rows a thread
    if ((p.pageSize & 7u) == 0u && (p.pageStride & 3u) == 0u && (p.layerOff & 3u) == 0u && (p.kvDim & 7u) == 0u
        && hd <= 256u && (hd % 16u == 0u || hd * TK <= KSMAX)) {
        while (hd * (TK / KT) > KSMAX) KT *= 2u;
        staged = (TK / KT + groups - 1u) / groups <= VUNITS;
        if (!staged) KT = KT0;
    }
#endif
    const uint TKE = TK / KT, kt = tid / KT, dl = hd / KT, d0 = (tid % KT) * dl;
    // a staged tile's first key: runs of 8 keys never cross a page (keys before kstart are masked)
    const uint jfirst = staged ? kstart & ~7u : kstart;

    for (uint g0 = 0u; g0 < G; g0 += gpass) {
        const uint GC = min(gpass, G - g0), GQ = (GC + 3u) / 4u;
        const uint qb = t * p.qStride + (kvh * G + g0) * hd;
        // a staged tile's page offsets come from shared memory, written a tile ahead; the first
        // tile's are loaded with Q
        uint firstBase = 0u;
        const uint pg0 = jfirst / ps0 + tid;
        if (staged && tid < PBMAX && pg0 <= (kend - 1u) / ps0) firstBase = uint(pagetab[pt + pg0]) * p.pageStride + p.layerOff;
        // (four loads in flight per thread: at most 2048 floats, one round trip)
        for (uint e0 = tid; e0 < hd * 4u * GQ; e0 += 4u * TK) {
            float qv[4];
            [[unroll]] for (uint u = 0u; u < 4u; u++) {
                const uint e = e0 + u * TK, d = e / (4u * GQ), g = e % (4u * GQ);
                qv[u] = e < hd * 4u * GQ && g < GC ? Q[qb + g * hd + d] : 0.0;
            }
            [[unroll]] for (uint u = 0u; u < 4u; u++) {
                const uint e = e0 + u * TK, d = e / (4u * GQ), g = e % (4u * GQ);
                if (e < hd * 4u * GQ) Qs[d * GQ + g / 4u][g % 4u] = qv[u];
            }
        }
        float mrun[GMAX], lpart[GMAX];  // running maxima (the same in every thread), this thread's share of the sums
        vec4 o[GMAX];
        [[unroll]] for (uint g = 0u; g < GS; g++) { mrun[g] = NEG; lpart[g] = 0.0; o[g] = vec4(0.0); }
        if (staged && tid < PBMAX) pbase[tid] = firstBase;
        barrier();

        uint tile = 0u;
        for (uint j0 = jfirst; j0 < kend; j0 += TKE, tile ^= 1u) {
            const uint nt = min(TKE, kend - j0);
            const bool live = kt < nt && j0 + kt >= kstart;
            uint nextBase = 0u;
#if defined(STAGED)
            uvec2 vreg[VUNITS];
            if (staged) {
                // the next tile's page offsets, stored after this tile's last barrier but one
                const uint pg = (j0 + TKE) / ps0 + tid;
                if (tid < PBMAX && j0 + TKE < kend && pg <= (kend - 1u) / ps0) nextBase = uint(pagetab[pt + pg]) * p.pageStride + p.layerOff;
                const uint pb0 = tile * PBMAX, pfirst = j0 / ps0;
                // every load of the tile in flight at once: K runs (dimension d, keys 8r .. 8r+7)
                // into KO at the unit's own index, V rows of this thread's keys into vreg
                const uint runs = TKE / 8u;
                uvec4 kreg[KUNITS];
                [[unroll]] for (uint i = 0u; i < KUNITS; i++) {
                    const uint u = tid + i * TK, r = u % runs, d = u / runs, j = j0 + 8u * r;
                    kreg[i] = d < hd && j < kend && j + 8u > kstart
                        ? kv16[(2u * pbase[pb0 + j / ps0 - pfirst] + j % ps0 + (kOff + d) * ps0) >> 3]
                        : uvec4(0u);
                }
                [[unroll]] for (uint i = 0u; i < VUNITS; i++) {
                    const uint k = kq + i * groups, j = j0 + k;
                    vreg[i] = kq < groups && k < nt && j >= kstart
                        ? kvq[(v_row(pbase[pb0 + j / ps0 - pfirst] + plane, j % ps0) + vOff + 4u * c) >> 2]
                        : uvec2(0u);
                }
                [[unroll]] for (uint i = 0u; i < KUNITS; i++) {
                    if (tid + i * TK < runs * hd) KO[tid + i * TK] = kreg[i];
                }
                barrier();
            }
#endif
            // 1. scores of key j0 + kt
            vec4 s4[2] = vec4[2](vec4(0.0), vec4(0.0));
            if (live && staged) {
                // the same sums as below, K from the staged tile
                for (uint d = d0; d < d0 + dl; d += 4u) {
                    vec4 k4;
                    [[unroll]] for (uint i = 0u; i < 4u; i++) {
                        const uint x = (d + i) * TKE + kt, w = KO[x >> 3][(x >> 1) & 3u];
                        k4[i] = unpackHalf2x16((x & 1u) != 0u ? w >> 16 : w).x;
                    }
                    [[unroll]] for (uint i = 0u; i < 4u; i++) {
                        s4[0] = fma(Qs[(d + i) * GQ], vec4(k4[i]), s4[0]);
                        if (GS > 4u && GQ > 1u) s4[1] = fma(Qs[(d + i) * GQ + 1u], vec4(k4[i]), s4[1]);
                    }
                }
            } else if (live) {
                const uint j = j0 + kt;
                const uint pb = uint(pagetab[pt + j / ps0]) * p.pageStride + p.layerOff, slot = j % ps0;
                const uint kb = k_key(pb, slot);
                if (d0 == 0u) Vb[kt] = v_row(pb + plane, slot);
                // 32 dimensions' loads in flight before they are used (a loop that waits for
                // each load is bound by memory latency, not bandwidth)
                uint d = d0;
                for (; d + 32u <= d0 + dl; d += 32u) {
                    vec4 k4[8];
                    [[unroll]] for (uint u = 0u; u < 8u; u++) k4[u] = k_at4(kb, kOff + d + 4u * u);
                    [[unroll]] for (uint u = 0u; u < 8u; u++) {
                        [[unroll]] for (uint i = 0u; i < 4u; i++) {
                            s4[0] = fma(Qs[(d + 4u * u + i) * GQ], vec4(k4[u][i]), s4[0]);
                            if (GS > 4u && GQ > 1u) s4[1] = fma(Qs[(d + 4u * u + i) * GQ + 1u], vec4(k4[u][i]), s4[1]);
                        }
                    }
                }
                for (; d < d0 + dl; d += 4u) {
                    const vec4 k4 = k_at4(kb, kOff + d);
                    [[unroll]] for (uint i = 0u; i < 4u; i++) {
                        s4[0] = fma(Qs[(d + i) * GQ], vec4(k4[i]), s4[0]);
                        if (GS > 4u && GQ > 1u) s4[1] = fma(Qs[(d + i) * GQ + 1u], vec4(k4[i]), s4[1]);
                    }
                }
            }
            for (uint sh = 1u; sh < KT; sh <<= 1) {  // the key's slices summed
                s4[0] += subgroupShuffleXor(s4[0], sh);
                s4[1] += subgroupShuffleXor(s4[1], sh);
            }
            float x[GMAX];
            [[unroll]] for (uint g = 0u; g < GS; g++) {
                x[g] = live && g < GC ? softcapped(s4[g / 4u][g % 4u] * p.scale) : NEG;
                const float m = subgroupMax(x[g]);
                if (g < GC && subgroupElect()) red[sg * GMAX + g] = m;
            }
            barrier();
            // 2. the new running maxima, this key's probabilities, the sums' shares
            [[unroll]] for (uint g = 0u; g < GS; g++) {
                if (g < GC) {
                    float tmax = NEG;
                    for (uint i = 0u; i < nsg; i++) tmax = max(tmax, red[i * GMAX + g]);
                    const float mn = max(mrun[g], tmax), alpha = exp(mrun[g] - mn);
                    mrun[g] = mn;
                    const float e = live && d0 == 0u ? exp(x[g] - mn) : 0.0;
                    if (kt < nt && d0 == 0u) Ps[g * TK + kt] = e; // masked keys of a staged tile: 0
                    lpart[g] = fma(lpart[g], alpha, e);
                    o[g] *= alpha;
                }
            }
            barrier();
            // 3. weighted V: every groups-th key of the tile, column c, all heads of the pass
#if defined(STAGED)
            if (staged && kq < groups) {
                [[unroll]] for (uint i = 0u; i < VUNITS; i++) {
                    const uint k = kq + i * groups;
                    if (k < nt) {
                        const vec4 v = vec4(unpackHalf2x16(vreg[i].x), unpackHalf2x16(vreg[i].y));
                        [[unroll]] for (uint g = 0u; g < GS; g++)
                            if (g < GC) o[g] = fma(vec4(Ps[g * TK + k]), v, o[g]);
                    }
                }
            } else
#endif
            if (kq < groups) {
                uint k = kq;
                for (; k + 3u * groups < nt; k += 4u * groups) {
                    vec4 v[4];
                    [[unroll]] for (uint u = 0u; u < 4u; u++) v[u] = v_at4(Vb[k + u * groups], vOff + 4u * c);
                    [[unroll]] for (uint u = 0u; u < 4u; u++) {
                        [[unroll]] for (uint g = 0u; g < GS; g++)
                            if (g < GC) o[g] = fma(vec4(Ps[g * TK + k + u * groups]), v[u], o[g]);
                    }
                }
                for (; k < nt; k += groups) {
                    const vec4 v = v_at4(Vb[k], vOff + 4u * c);
                    [[unroll]] for (uint g = 0u; g < GS; g++)
                        if (g < GC) o[g] = fma(vec4(Ps[g * TK + k]), v, o[g]);
                }
            }
            if (staged && tid < PBMAX) pbase[(tile ^ 1u) * PBMAX + tid] = nextBase;
            barrier();  // Ps, Vb, red and pbase are reused
        }

        // the sums: subgroups, then across subgroups; the key groups' outputs through shared memory
        [[unroll]] for (uint g = 0u; g < GS; g++) {
            const float l = subgroupAdd(lpart[g]);
            if (g < GC && subgroupElect()) red[sg * GMAX + g] = l;
        }
        if (kq < groups) {
            [[unroll]] for (uint g = 0u; g < GS; g++)
                if (g < GC) KO[(kq * GMAX + g) * cols + c] = floatBitsToUint(o[g]);
        }
        if (tid == 0u) {
            [[unroll]] for (uint g = 0u; g < GS; g++) mS[g] = mrun[g];
        }
        barrier();
        for (uint e = tid; e < GC * cols; e += TK) {
            const uint g = e / cols, cc = e % cols, h = kvh * G + g0 + g;
            float l = 0.0;
            for (uint i = 0u; i < nsg; i++) l += red[i * GMAX + g];
            vec4 acc = vec4(0.0);
            for (uint q = 0u; q < groups; q++) acc += uintBitsToFloat(KO[(q * GMAX + g) * cols + cc]);
            if (p.splits == 1u) {
                const uint ob = (t * p.heads + h) * vd + 4u * cc;
                const vec4 r = acc / with_sink(l, mS[g], h);
                outv[ob] = r.x; outv[ob + 1u] = r.y; outv[ob + 2u] = r.z; outv[ob + 3u] = r.w;
#ifdef Q8
                [[unroll]] for (uint i = 0u; i < 4u; i++) q8src[g * vd + 4u * cc + i] = r[i];
#elif defined(F16OUT)
                const uint xb = (t * p.x16Stride + h * vd + 4u * cc) / 2u;
                X16[xb] = packHalf2x16(r.xy);
                X16[xb + 1u] = packHalf2x16(r.zw);
#endif
            } else {
                const uint rb = ((t * p.heads + h) * p.splits + split) * (vd + 2u);
                part[rb + 4u * cc] = acc.x; part[rb + 4u * cc + 1u] = acc.y;
                part[rb + 4u * cc + 2u] = acc.z; part[rb + 4u * cc + 3u] = acc.w;
                if (cc == 0u) { part[rb + vd] = mS[g]; part[rb + vd + 1u] = l; }
            }
        }
#ifdef Q8
        // the pass's heads are consecutive in the row: GC*vd values from head kvh*G + g0, whole blocks
        barrier();
        if (p.splits == 1u) q8_store(GC * vd, (t * p.heads + kvh * G + g0) * vd / 32u);
#endif
        barrier(); // Qs, red and Os are reused by the next pass
    }
#ifdef JOIN
    if (p.splits > 1u && p.splits <= JMAX) {
        // count this split done; the token's last one merges the splits (every head of the group)
        const uint ns = min(p.splits, (nkeys + p.chunk - 1u) / p.chunk);
        memoryBarrierBuffer();
        barrier();
        if (tid == 0u) lastSplit = atomicAdd(done[t * p.kvHeads + kvh], 1u) == ns - 1u;
        barrier();
        if (!lastSplit) return;
        memoryBarrierBuffer();
        if (tid == 0u) done[t * p.kvHeads + kvh] = 0u; // for the next dispatch
        const uint stride = vd + 2u;
        for (uint g0 = 0u; g0 < G; g0 += gpass) {
            const uint GC = min(gpass, G - g0), h0 = kvh * G + g0;
            if (tid < GC) {
                const uint rb = (t * p.heads + h0 + tid) * p.splits * stride;
                float M = NEG;
                for (uint s = 0u; s < ns; s++) M = max(M, partR[rb + s * stride + vd]);
                float L = 0.0;
                for (uint s = 0u; s < ns; s++) {
                    const float w = exp(partR[rb + s * stride + vd] - M);
                    jw[tid * JMAX + s] = w;
                    L = fma(w, partR[rb + s * stride + vd + 1u], L);
                }
                jl[tid] = with_sink(L, M, h0 + tid);
            }
            barrier();
#ifdef Q8
            for (uint e = tid; e < GC * vd; e += TK) {
                const uint g = e / vd, d = e % vd, rb = (t * p.heads + h0 + g) * p.splits * stride + d;
                float a = 0.0;
                for (uint s = 0u; s < ns; s++) a = fma(jw[g * JMAX + s], partR[rb + s * stride], a);
                const float o = a / jl[g];
                outv[(t * p.heads + h0) * vd + e] = o;
                q8src[e] = o;
            }
            barrier();
            q8_store(GC * vd, (t * p.heads + h0) * vd / 32u);
#else
            // two dimensions a thread (one packed pair of the float16 copy; vd is even)
            for (uint e = 2u * tid; e < GC * vd; e += 2u * TK) {
                const uint g = e / vd, d = e % vd, rb = (t * p.heads + h0 + g) * p.splits * stride + d;
                vec2 a = vec2(0.0);
                for (uint s = 0u; s < ns; s++) {
                    a.x = fma(jw[g * JMAX + s], partR[rb + s * stride], a.x);
                    a.y = fma(jw[g * JMAX + s], partR[rb + s * stride + 1u], a.y);
                }
                const vec2 o = a / jl[g];
                outv[(t * p.heads + h0) * vd + e] = o.x;
                outv[(t * p.heads + h0) * vd + e + 1u] = o.y;
                X16[(t * p.x16Stride + h0 * vd + e) / 2u] = packHalf2x16(o);
            }
#endif
            barrier();
        }
    }
#endif
}
