#version 450
// attention — causal paged attention, split over the keys ("flash decoding"). Token t (at
// position tokpos[t] of its sequence, whose page list starts at pagetab[tokpt[t]]) attends over
// keys 0 .. tokpos[t] of that sequence, for the heads/kvHeads query heads that share KV head kvh:
//   out[t][h] = sum_j softmax_j(scale * q[t][h] . k[j]) v[j]
// Q rows are qStride floats apart, out rows heads*headDim floats (head h at h*headDim in both);
// K/V live in the pages at this layer (README.md, "K/V pages"). One workgroup per (token, KV
// head, split); dispatch (n, kvHeads, splits). Split s takes keys [s*chunk, min((s+1)*chunk, tokpos[t]+1)) (a split past
// the token's last key does nothing).
//   splits == 1: the workgroup writes out[t][h] itself (part is not touched).
//   splits  > 1: it writes a partial for each head h to part, row r = (t*heads + h)*splits + s of
//                headDim+2 floats: sum_j exp(x_j - m) v[j] (headDim floats), m, sum_j exp(x_j - m);
//                attention_combine then merges the splits into out.
//
// Within a workgroup keys go TK at a time with an online softmax. Scores: thread (key kk =
// tid % TK, slice ps = tid / TK) dots a slice of the dimensions (consecutive threads read
// consecutive K slots), slices summed through shared memory. Weighted V: thread over d (V rows are
// contiguous in d). The query heads of a group share every K/V load; a pass takes
// min(8, 2048/headDim) heads (headDim up to 2048; more heads re-read K/V per pass).
// Needs a workgroup of at least 64 threads (GMAX * TK / KPT) and a multiple of TK (32).
// K/V in any of the cache types (kv_types.glsl: one build per K type and V type).
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require

layout(local_size_x = 128, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer QBuf { float Q[]; };
layout(std430, binding = 2) writeonly buffer OutBuf { float outv[]; };
layout(std430, binding = 3) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 4) readonly buffer PtBuf { int tokpt[]; };
layout(std430, binding = 5) readonly buffer PageBuf { int pagetab[]; };
layout(std430, binding = 6) writeonly buffer PartBuf { float part[]; };
layout(std140, binding = 7) uniform Params {
    uint n, heads, kvHeads, headDim, kvDim, pageSize, pageStride, layerOff;
    float scale;
    uint chunk, splits, qStride;
    float softcap;
    uint window;
} p;

#include "attention_mask.glsl"
#define KV_BINDING 1
#define KV_ACCESS readonly
#include "kv_types.glsl"

const uint TK = 32u;     // keys per tile
const uint GMAX = 8u;    // query heads per pass
const uint QMAX = 2048u; // floats of the heads of a pass
const uint PMAX = 8u;    // dimension slices per key in the score phase
const uint KPT = 4u;     // keys per thread in the softmax phase
const uint NQ = TK / KPT;
const float NEG = -1.0e30; // "minus infinity" that stays finite in exp(a - b)

shared float Qs[QMAX];            // [g][d] queries of the pass
shared float Os[QMAX];            // [g][d] running weighted sums of V
shared float Ps[PMAX * GMAX * TK]; // [slice][g][key] partial scores
shared float S[GMAX * TK];        // [g][key] probabilities of the tile
shared uint Vb[TK];               // V row handle of each key (v_row)
shared float red[GMAX * NQ];      // [g][q] tile maxima, then sums
shared float alphaS[GMAX], mS[GMAX];

void main() {
    const uint t = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, split = gl_WorkGroupID.z;
    if (t >= p.n || kvh >= p.kvHeads) return;
    const uint nkeys = uint(tokpos[t]) + 1u;
    const uint kbeg = split * p.chunk;
    if (kbeg >= nkeys) return;
    const uint kend = min(nkeys, kbeg + p.chunk);
    // a split wholly before the window runs no tile and leaves an empty partial (m = NEG, l = 0)
    const uint kstart = max(kbeg, first_key(nkeys));
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint hd = p.headDim, G = p.heads / p.kvHeads, ps0 = p.pageSize;
    const uint pt = uint(tokpt[t]);
    const uint kOff = kvh * hd, plane = kv_kplane_words();
    const uint gpass = max(1u, min(GMAX, QMAX / hd));
    // score phase: key kk, dimension slice ps of P
    const uint kk = tid % TK, ps = tid / TK;
    const uint P = min(PMAX, max(1u, WG / TK));
    const uint dsl = (hd + P - 1u) / P;
    const uint d0 = min(hd, ps * dsl), d1 = min(hd, d0 + dsl);
    // softmax phase: head sg, keys sq*KPT .. +KPT
    const uint sg = tid / NQ, sq = tid % NQ;

    for (uint g0 = 0u; g0 < G; g0 += gpass) {
        const uint GC = min(gpass, G - g0);
        const uint qb = t * p.qStride + (kvh * G + g0) * hd, ob = (t * p.heads + kvh * G + g0) * hd;
        for (uint i = tid; i < GC * hd; i += WG) {
            Qs[i] = Q[qb + i];
            Os[i] = 0.0;
        }
        float mrun = NEG, lrun = 0.0; // of head sg (threads of the softmax phase)
        if (tid < GMAX) mS[tid] = NEG;
        barrier();

        for (uint j0 = kstart; j0 < kend; j0 += TK) {
            const uint nt = min(TK, kend - j0);
            // 1. partial scores of key kk over dimensions d0 .. d1
            if (ps < P) {
                float sc[GMAX];
                [[unroll]] for (uint g = 0u; g < GMAX; g++) sc[g] = 0.0;
                if (kk < nt) {
                    const uint j = j0 + kk;
                    const uint pb = uint(pagetab[pt + j / ps0]) * p.pageStride + p.layerOff;
                    const uint slot = j % ps0;
                    const uint kb = k_key(pb, slot);
                    if (ps == 0u) Vb[kk] = v_row(pb + plane, slot);
                    uint d = d0;
                    for (; d + 4u <= d1; d += 4u) {
                        const vec4 k4 = k_at4(kb, kOff + d);
                        [[unroll]] for (uint g = 0u; g < GMAX; g++) {
                            if (g < GC) {
                                const uint qo = g * hd + d;
                                sc[g] = fma(Qs[qo], k4.x, sc[g]);
                                sc[g] = fma(Qs[qo + 1u], k4.y, sc[g]);
                                sc[g] = fma(Qs[qo + 2u], k4.z, sc[g]);
                                sc[g] = fma(Qs[qo + 3u], k4.w, sc[g]);
                            }
                        }
                    }
                    for (; d < d1; d++) {
                        const float k0 = k_at(kb, kOff + d);
                        [[unroll]] for (uint g = 0u; g < GMAX; g++)
                            if (g < GC) sc[g] = fma(Qs[g * hd + d], k0, sc[g]);
                    }
                }
                [[unroll]] for (uint g = 0u; g < GMAX; g++)
                    if (g < GC) Ps[(ps * GMAX + g) * TK + kk] = sc[g];
            }
            barrier();
            // 2. scores of keys sq*KPT .. (head sg): sum the slices, tile max
            float x[KPT];
            if (sg < GC) {
                float lm = NEG;
                [[unroll]] for (uint c = 0u; c < KPT; c++) {
                    const uint k = sq * KPT + c;
                    float s = 0.0;
                    for (uint q = 0u; q < P; q++) s += Ps[(q * GMAX + sg) * TK + k];
                    x[c] = k < nt ? softcapped(s * p.scale) : NEG;
                    lm = max(lm, x[c]);
                }
                red[sg * NQ + sq] = lm;
            }
            barrier();
            // 3. new running max, rescale factor, probabilities
            if (sg < GC) {
                float tmax = NEG;
                [[unroll]] for (uint q = 0u; q < NQ; q++) tmax = max(tmax, red[sg * NQ + q]);
                const float mn = max(mrun, tmax);
                const float alpha = exp(mrun - mn);
                mrun = mn;
                float l = 0.0;
                [[unroll]] for (uint c = 0u; c < KPT; c++) {
                    const float e = exp(x[c] - mn);
                    S[sg * TK + sq * KPT + c] = e;
                    l += e;
                }
                lrun = fma(lrun, alpha, l);
                if (sq == 0u) { alphaS[sg] = alpha; mS[sg] = mn; }
            }
            barrier();
            // 4. weighted V: this thread's dimensions, all heads of the pass
            for (uint d = tid; d < hd; d += WG) {
                float o[GMAX];
                [[unroll]] for (uint g = 0u; g < GMAX; g++) o[g] = g < GC ? Os[g * hd + d] * alphaS[g] : 0.0;
                uint k = 0u;
                for (; k + 4u <= nt; k += 4u) {
                    const uint dv = kOff + d;
                    const float v0 = v_at(Vb[k], dv), v1 = v_at(Vb[k + 1u], dv);
                    const float v2 = v_at(Vb[k + 2u], dv), v3 = v_at(Vb[k + 3u], dv);
                    [[unroll]] for (uint g = 0u; g < GMAX; g++) {
                        if (g < GC) {
                            const uint so = g * TK + k;
                            o[g] = fma(S[so], v0, o[g]);
                            o[g] = fma(S[so + 1u], v1, o[g]);
                            o[g] = fma(S[so + 2u], v2, o[g]);
                            o[g] = fma(S[so + 3u], v3, o[g]);
                        }
                    }
                }
                for (; k < nt; k++) {
                    const float v0 = v_at(Vb[k], kOff + d);
                    [[unroll]] for (uint g = 0u; g < GMAX; g++)
                        if (g < GC) o[g] = fma(S[g * TK + k], v0, o[g]);
                }
                [[unroll]] for (uint g = 0u; g < GMAX; g++)
                    if (g < GC) Os[g * hd + d] = o[g];
            }
            barrier();
        }

        // softmax denominators: the sum of the softmax threads' shares
        if (sg < GC) red[sg * NQ + sq] = lrun;
        barrier();
        for (uint i = tid; i < GC * hd; i += WG) {
            const uint g = i / hd, d = i - g * hd;
            float l = 0.0;
            [[unroll]] for (uint q = 0u; q < NQ; q++) l += red[g * NQ + q];
            const uint h = kvh * G + g0 + g;
            if (p.splits == 1u) {
                outv[ob + i] = Os[i] / l;
            } else {
                const uint rb = ((t * p.heads + h) * p.splits + split) * (hd + 2u);
                part[rb + d] = Os[i];
                if (d == 0u) { part[rb + hd] = mS[g]; part[rb + hd + 1u] = l; }
            }
        }
        barrier(); // Qs/Os/red are reused by the next pass
    }
}
