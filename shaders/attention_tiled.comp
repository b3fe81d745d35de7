#version 450
// attention_tiled — causal paged attention for prefill, FlashAttention-2 style: a workgroup
// takes a block of query rows that share one sequence and one KV head, and every K/V tile it
// loads serves all of them (attention.comp loads each key once per query token).
//
// Block b is blocks[2b] .. blocks[2b] + blocks[2b+1] - 1, consecutive tokens of one sequence
// (the same tokpt), at most R / G tokens, G = heads / kvHeads (<= R). Its R query rows are
// (token i, head g of the group) pairs, row r = i*G + g. Token t attends over keys
// 0 .. tokpos[t] of its sequence; the block walks keys 0 .. its largest position in tiles of BC
// with an online softmax (running max and sum per row, the output rescaled when the max
// grows), in float32 throughout. out rows are heads*headDim floats (head h at h*headDim); Q
// rows are qStride floats apart. K/V pages as in attention.comp (shaders/README.md).
//
// Per tile: K to shared memory; scores, each thread 2 rows x 2 keys over float4s of the
// dimensions (4 loads per 16 products); V to the same shared memory while each row's 4 threads
// update its softmax; then the weighted sum, each thread 4 rows x 2 float4s of dimensions.
// Each thread loads the K/V of one key of the tile (key tid % BC), so it looks up that key's
// page itself. Shared rows are padded by one float4 (rows of Q and of K start in different
// banks).
// Split-K (splits > 1): workgroup z takes the block's keys in [z*chunk, (z+1)*chunk) and writes
// each row's unnormalised output, running max and sum as attention.comp's partials (row
// (t*heads + h)*splits + z of headDim+2 floats) for attention_combine, so a long cache is
// spread over many workgroups rather than walked by a few.
// Needs: headDim a multiple of 4, at most DMAX; 29.3 KiB of shared memory. Workgroup of 128
// threads (constant 0 must stay 128). Dispatch (blocks, kvHeads, splits).
// K/V in any of the cache types (kv_types.glsl: one build per K type and V type).
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_16bit_storage : require

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

const uint WG = 128u;
const uint R = 32u;          // query rows per workgroup
const uint BC = 16u;         // keys per tile
const uint DMAX = 128u;      // largest head size
const uint RS = DMAX / 4u + 1u; // float4s per shared row (one of padding)
const uint OV = DMAX / 64u;  // float4s of dimensions per thread and row in the weighted sum
const float NEG = -1.0e30;   // "minus infinity" that stays finite in exp(a - b)

shared vec4 Qs[R * RS];      // [r][d/4], times scale
shared vec4 KVs[BC * RS];    // the K tile [k][d/4], then the V tile [k][d/4]
shared float Ss[R * BC];     // [r][k] scores; at the end, [r][part] sums
shared vec4 Ps[BC * R / 4u]; // [k][r/4] probabilities
shared float alphaS[R];      // rescale of each row's output for this tile

void main() {
    const uint blk = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    if (kvh >= p.kvHeads) return;
    const uint t0 = uint(blocks[2u * blk]), count = uint(blocks[2u * blk + 1u]);
    const uint hd = p.headDim, hv = hd / 4u, G = p.heads / p.kvHeads, ps0 = p.pageSize;
    const uint used = min(R / G, count) * G;  // rows in use
    const uint pt = uint(tokpt[t0]);
    const uint kOff = kvh * hd, plane = kv_kplane_words();

    // queries, scaled, and the block's key range
    for (uint e = tid; e < R * hv; e += WG) {
        const uint r = e / hv, c = e % hv;
        vec4 q = vec4(0.0);
        if (r < used) {
            const uint b = (t0 + r / G) * p.qStride + (kvh * G + r % G) * hd + 4u * c;
            q = vec4(Q[b], Q[b + 1u], Q[b + 2u], Q[b + 3u]) * p.scale;
        }
        Qs[r * RS + c] = q;
    }
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

    // loads: key lk of each tile, float4s lc, lc + WG/BC, ...
    const uint lk = tid % BC, lc = tid / BC;
    // score phase: rows sr, sr+1 and keys sk, sk+8 (distinct banks); softmax phase: row rr, keys 4*rq ..
    const uint sr = 2u * (tid / 8u), sk = tid % 8u;
    const uint rr = tid / 4u, rq = tid % 4u;
    // rows sr, sr + 1 see keys lo .. lim - 1 (a split's end at kend: the rest of its last tile
    // is not loaded)
    const uint nk0 = sr < used ? uint(tokpos[t0 + sr / G]) + 1u : 0u;
    const uint nk1 = sr + 1u < used ? uint(tokpos[t0 + (sr + 1u) / G]) + 1u : 0u;
    const uint lo0 = first_key(nk0), lo1 = first_key(nk1), lim0 = min(nk0, kend), lim1 = min(nk1, kend);
    // weighted sum: rows orow .. orow+3, float4 columns oc + 16 i
    const uint orow = 4u * (tid / 16u), oc = tid % 16u;
    vec4 o[4][OV];
    [[unroll]] for (uint a = 0u; a < 4u; a++)
        [[unroll]] for (uint i = 0u; i < OV; i++) o[a][i] = vec4(0.0);
    float mrun = NEG, lrun = 0.0;  // row rr, this thread's share of the sum

    for (uint j0 = kbeg; j0 < kend; j0 += BC) {
        const uint nt = min(BC, kend - j0);
        const bool have = lk < nt;
        uint kb = 0u, vb = 0u;
        if (have) {
            const uint j = j0 + lk;
            const uint pb = uint(pagetab[pt + j / ps0]) * p.pageStride + p.layerOff, slot = j % ps0;
            kb = k_key(pb, slot);
            vb = v_row(pb + plane, slot);
        }
        for (uint c = lc; c < hv; c += WG / BC) {
            vec4 k = vec4(0.0);
            if (have) k = k_at4(kb, kOff + 4u * c);
            KVs[lk * RS + c] = k;
        }
        barrier();
        // 1. scores
        float s00 = 0.0, s01 = 0.0, s10 = 0.0, s11 = 0.0;
        for (uint c = 0u; c < hv; c++) {
            const vec4 q0 = Qs[sr * RS + c], q1 = Qs[(sr + 1u) * RS + c];
            const vec4 k0 = KVs[sk * RS + c], k1 = KVs[(sk + 8u) * RS + c];
            s00 += dot(q0, k0); s01 += dot(q0, k1);
            s10 += dot(q1, k0); s11 += dot(q1, k1);
        }
        const uint j = j0 + sk;
        Ss[sr * BC + sk] = j >= lo0 && j < lim0 ? softcapped(s00) : NEG;
        Ss[sr * BC + sk + 8u] = j + 8u >= lo0 && j + 8u < lim0 ? softcapped(s01) : NEG;
        Ss[(sr + 1u) * BC + sk] = j >= lo1 && j < lim1 ? softcapped(s10) : NEG;
        Ss[(sr + 1u) * BC + sk + 8u] = j + 8u >= lo1 && j + 8u < lim1 ? softcapped(s11) : NEG;
        barrier();
        // 2. the V tile (K is no longer needed) and each row's softmax update
        for (uint c = lc; c < hv; c += WG / BC) {
            vec4 v = vec4(0.0);
            if (have) v = v_at4(vb, kOff + 4u * c);
            KVs[lk * RS + c] = v;
        }
        {
            float tmax = NEG;
            [[unroll]] for (uint k = 0u; k < BC; k++) tmax = max(tmax, Ss[rr * BC + k]);
            const float mn = max(mrun, tmax), alpha = exp(mrun - mn);
            mrun = mn;
            float l = 0.0;
            [[unroll]] for (uint c = 0u; c < 4u; c++) {
                const uint k = 4u * rq + c;
                const float e = exp(Ss[rr * BC + k] - mn);
                Ps[k * (R / 4u) + rr / 4u][rr % 4u] = e;
                l += e;
            }
            lrun = fma(lrun, alpha, l);
            if (rq == 0u) alphaS[rr] = alpha;
        }
        barrier();
        // 3. weighted V
        [[unroll]] for (uint a = 0u; a < 4u; a++) {
            const float al = alphaS[orow + a];
            [[unroll]] for (uint i = 0u; i < OV; i++) o[a][i] *= al;
        }
        for (uint k = 0u; k < nt; k++) {
            const vec4 pk = Ps[k * (R / 4u) + orow / 4u];
            [[unroll]] for (uint i = 0u; i < OV; i++) {
                const uint c = oc + 16u * i;
                if (c < hv) {
                    const vec4 v = KVs[k * RS + c];
                    o[0][i] = fma(vec4(pk.x), v, o[0][i]);
                    o[1][i] = fma(vec4(pk.y), v, o[1][i]);
                    o[2][i] = fma(vec4(pk.z), v, o[2][i]);
                    o[3][i] = fma(vec4(pk.w), v, o[3][i]);
                }
            }
        }
        barrier();
    }

    // each row's sum is the sum of its 4 softmax threads' shares
    Ss[rr * 4u + rq] = lrun;
    if (rq == 0u) alphaS[rr] = mrun;
    barrier();
    [[unroll]] for (uint a = 0u; a < 4u; a++) {
        const uint r = orow + a;
        if (r >= used) continue;
        const float l = Ss[r * 4u] + Ss[r * 4u + 1u] + Ss[r * 4u + 2u] + Ss[r * 4u + 3u];
        const uint row = (t0 + r / G) * p.heads + kvh * G + r % G;
        if (p.splits > 1u) {
            const uint pb = (row * p.splits + split) * (hd + 2u);
            [[unroll]] for (uint i = 0u; i < OV; i++) {
                const uint c = oc + 16u * i;
                if (c < hv) {
                    const vec4 v = o[a][i];
                    const uint d = pb + 4u * c;
                    part[d] = v.x; part[d + 1u] = v.y; part[d + 2u] = v.z; part[d + 3u] = v.w;
                }
            }
            if (oc == 0u) { part[pb + hd] = alphaS[r]; part[pb + hd + 1u] = l; }
            continue;
        }
        const uint ob = row * hd;
        const float ls = with_sink(l, alphaS[r], kvh * G + r % G);
        [[unroll]] for (uint i = 0u; i < OV; i++) {
            const uint c = oc + 16u * i;
            if (c < hv) {
                const vec4 v = o[a][i] / ls;
                const uint d = ob + 4u * c;
                outv[d] = v.x; outv[d + 1u] = v.y; outv[d + 2u] = v.z; outv[d + 3u] = v.w;
            }
        }
    }
}
