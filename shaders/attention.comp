#version 450
// attention — causal paged attention. Token t (at position tokpos[t] of its sequence, whose page
// list starts at pagetab[tokpt[t]]) attends over keys 0 .. tokpos[t] of that sequence, for the
// heads/kvHeads query heads that share KV head kvh:
//   out[t][h] = sum_j softmax_j(scale * q[t][h] . k[j]) v[j]
// Q and out rows are heads*headDim floats (head h at h*headDim); K/V live in the pages at this
// layer (README.md, "K/V pages"). One workgroup per (token, KV head); dispatch (n, kvHeads, 1).
//
// Keys are taken TK at a time with an online softmax (running max and sum), so any context length
// works; the query heads of the group share every K/V load. headDim up to 256 (any size with
// fewer heads per pass: a pass takes min(8, 2048/headDim) heads and re-reads K/V per pass).
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 128, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer QBuf { float Q[]; };
layout(std430, binding = 1) readonly buffer KVBuf { float kv[]; };
layout(std430, binding = 2) writeonly buffer OutBuf { float outv[]; };
layout(std430, binding = 3) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 4) readonly buffer PtBuf { int tokpt[]; };
layout(std430, binding = 5) readonly buffer PageBuf { int pagetab[]; };
layout(std140, binding = 6) uniform Params {
    uint n, heads, kvHeads, headDim, kvDim, pageSize, pageStride, layerOff;
    float scale;
} p;

const uint TK = 128u;    // keys per tile
const uint GMAX = 8u;    // query heads per pass
const uint QMAX = 2048u; // floats of the heads of a pass
const uint SGMAX = 32u;  // subgroup partials reduced at a time
const float NEG = -1.0e30; // "minus infinity" that stays finite in exp(a - b)

shared float Qs[QMAX];       // [g][d] queries of the pass
shared float Os[QMAX];       // [g][d] running weighted sums of V
shared float S[GMAX * TK];   // [g][key] scores, then probabilities
shared uint Vb[TK];          // index of V[key][kvh*headDim] in kv
shared float red[SGMAX * GMAX];

void main() {
    const uint t = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y;
    if (t >= p.n || kvh >= p.kvHeads) return;
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint sg = gl_SubgroupID, nsg = gl_NumSubgroups;
    const uint hd = p.headDim, G = p.heads / p.kvHeads;
    const uint nkeys = uint(tokpos[t]) + 1u, pt = uint(tokpt[t]);
    const uint kOff = kvh * hd, plane = p.pageSize * p.kvDim;
    const uint gpass = max(1u, min(GMAX, QMAX / hd));

    for (uint g0 = 0u; g0 < G; g0 += gpass) {
        const uint GC = min(gpass, G - g0);
        const uint qb = t * p.heads * hd + (kvh * G + g0) * hd;
        for (uint i = tid; i < GC * hd; i += WG) {
            Qs[i] = Q[qb + i];
            Os[i] = 0.0;
        }
        float mrun[GMAX], lrun[GMAX]; // running max (same in every thread), this thread's share of the sum
        [[unroll]] for (uint g = 0u; g < GMAX; g++) { mrun[g] = NEG; lrun[g] = 0.0; }
        barrier();

        for (uint j0 = 0u; j0 < nkeys; j0 += TK) {
            const uint nt = min(TK, nkeys - j0);
            // scores of this thread's keys
            float lmax[GMAX];
            [[unroll]] for (uint g = 0u; g < GMAX; g++) lmax[g] = NEG;
            for (uint jj = tid; jj < nt; jj += WG) {
                const uint j = j0 + jj;
                const uint pb = uint(pagetab[pt + j / p.pageSize]) * p.pageStride + p.layerOff;
                const uint slot = j % p.pageSize;
                const uint kb = pb + kOff * p.pageSize + slot;
                Vb[jj] = pb + plane + slot * p.kvDim + kOff;
                float sc[GMAX];
                [[unroll]] for (uint g = 0u; g < GMAX; g++) sc[g] = 0.0;
                for (uint d = 0u; d < hd; d++) {
                    const float kd = kv[kb + d * p.pageSize];
                    [[unroll]] for (uint g = 0u; g < GMAX; g++)
                        if (g < GC) sc[g] = fma(Qs[g * hd + d], kd, sc[g]);
                }
                [[unroll]] for (uint g = 0u; g < GMAX; g++) {
                    if (g < GC) {
                        const float v = sc[g] * p.scale;
                        S[g * TK + jj] = v;
                        lmax[g] = max(lmax[g], v);
                    }
                }
            }
            // tile max of each head over the workgroup
            float tmax[GMAX];
            [[unroll]] for (uint g = 0u; g < GMAX; g++) tmax[g] = NEG;
            for (uint base = 0u; base < nsg; base += SGMAX) {
                if (sg >= base && sg < base + SGMAX) {
                    [[unroll]] for (uint g = 0u; g < GMAX; g++) {
                        if (g < GC) {
                            const float m = subgroupMax(lmax[g]);
                            if (subgroupElect()) red[(sg - base) * GMAX + g] = m;
                        }
                    }
                }
                barrier();
                const uint cnt = min(SGMAX, nsg - base);
                for (uint q = 0u; q < cnt; q++) {
                    [[unroll]] for (uint g = 0u; g < GMAX; g++)
                        if (g < GC) tmax[g] = max(tmax[g], red[q * GMAX + g]);
                }
                barrier();
            }
            // rescale by exp(old max - new max); probabilities of this thread's keys
            float alpha[GMAX];
            [[unroll]] for (uint g = 0u; g < GMAX; g++) {
                const float mn = max(mrun[g], tmax[g]);
                alpha[g] = exp(mrun[g] - mn);
                mrun[g] = mn;
                lrun[g] *= alpha[g];
            }
            for (uint jj = tid; jj < nt; jj += WG) {
                [[unroll]] for (uint g = 0u; g < GMAX; g++) {
                    if (g < GC) {
                        const float e = exp(S[g * TK + jj] - mrun[g]);
                        S[g * TK + jj] = e;
                        lrun[g] += e;
                    }
                }
            }
            barrier();
            // weighted V: this thread's dimensions, all heads of the pass
            for (uint d = tid; d < hd; d += WG) {
                float o[GMAX];
                [[unroll]] for (uint g = 0u; g < GMAX; g++) o[g] = g < GC ? Os[g * hd + d] * alpha[g] : 0.0;
                for (uint jj = 0u; jj < nt; jj++) {
                    const float v = kv[Vb[jj] + d];
                    [[unroll]] for (uint g = 0u; g < GMAX; g++)
                        if (g < GC) o[g] = fma(S[g * TK + jj], v, o[g]);
                }
                [[unroll]] for (uint g = 0u; g < GMAX; g++)
                    if (g < GC) Os[g * hd + d] = o[g];
            }
            barrier();
        }

        // softmax denominators: sum of every thread's share
        float l[GMAX];
        [[unroll]] for (uint g = 0u; g < GMAX; g++) l[g] = 0.0;
        for (uint base = 0u; base < nsg; base += SGMAX) {
            if (sg >= base && sg < base + SGMAX) {
                [[unroll]] for (uint g = 0u; g < GMAX; g++) {
                    if (g < GC) {
                        const float s = subgroupAdd(lrun[g]);
                        if (subgroupElect()) red[(sg - base) * GMAX + g] = s;
                    }
                }
            }
            barrier();
            const uint cnt = min(SGMAX, nsg - base);
            for (uint q = 0u; q < cnt; q++) {
                [[unroll]] for (uint g = 0u; g < GMAX; g++)
                    if (g < GC) l[g] += red[q * GMAX + g];
            }
            barrier();
        }
        for (uint i = tid; i < GC * hd; i += WG) {
            const uint g = i / hd;
            float lg = l[0];
            [[unroll]] for (uint q = 1u; q < GMAX; q++)
                if (q == g) lg = l[q];
            outv[qb + i] = Os[i] / lg;
        }
        barrier(); // Qs/Os are reloaded by the next pass
    }
}
