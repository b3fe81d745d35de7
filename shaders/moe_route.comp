#version 450
// moe_route — a mixture-of-experts layer's routing, on the device (the host's ExpertRoutes, the
// CPU path's, does the same): for each of the tokens, the softmax of its router logits
// L[t·experts ..], the `used` most probable experts (largest first; ties: the lower expert), their
// probabilities as weights, divided by their sum (clamped to 6.103515625e-5, float16's smallest
// normal, as llama.cpp) where `normalize` is 1. Then the (token, expert) pairs grouped by expert:
// pair p = t·used + k is row slot[p] of the pairs in expert order (expert 0's first, each
// expert's in token order), and for each of those rows i, rows[i] its token and ids[i] its
// expert; experts[2e], experts[2e + 1] are expert e's first row and row count.
//
// R is one buffer of 32-bit words in sections of `cap` words (cap >= tokens·used; hosts align
// each section for their bindings): rows at 0, slot at cap, weight (float bits) at 2·cap, ids at
// 3·cap, scratch (each pair's expert) at 4·cap, experts at 5·cap (2·experts words).
// moe_combine reads slot and weight, the expert-indexed products (matvec_id_T, matmul_id_T)
// rows, ids and experts.
//
// One workgroup (any size, a multiple of the subgroup size): each subgroup routes tokens in turn
// (lanes over the experts), counting each expert's pairs in shared memory; then the first rows
// (a prefix sum of the counts); then each expert's pairs found in pair order (a thread per
// expert, the pairs' experts read through shared memory in chunks). At most MAX_EXPERTS experts.
// Dispatch (1, 1, 1).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 512, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer LBuf { float L[]; };
layout(std430, binding = 1) buffer RBuf { uint R[]; };
layout(std140, binding = 2) uniform Params { uint tokens, experts, used, normalize, cap; } p;

const uint MAX_EXPERTS = 512u;
const uint CHUNK = 1024u;
shared uint counts[MAX_EXPERTS];
shared uint fill[MAX_EXPERTS];
shared uint chunk[CHUNK];

void main() {
    const uint lid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint E = p.experts, used = p.used, pairs = p.tokens * used;
    const uint ROWS = 0u, SLOT = p.cap, WEIGHT = 2u * p.cap, IDS = 3u * p.cap, CHOICE = 4u * p.cap, EXPERTS = 5u * p.cap;
    for (uint e = lid; e < E; e += WG) counts[e] = 0u;
    barrier();

    // 1. each token's experts and weights (a subgroup per token, its lanes over the experts)
    const uint lane = gl_SubgroupInvocationID, SG = gl_SubgroupSize;
    for (uint t = gl_SubgroupID; t < p.tokens; t += gl_NumSubgroups) {
        const uint base = t * E;
        float mx = -3.402823466e38;
        for (uint j = lane; j < E; j += SG) mx = max(mx, L[base + j]);
        mx = subgroupMax(mx);
        float s = 0.0;
        for (uint j = lane; j < E; j += SG) s += exp(L[base + j] - mx);
        const float inv = 1.0 / subgroupAdd(s);
        // the k-th pick is the most probable expert after the (k-1)-th in the order
        // (probability descending, expert ascending)
        float pv = 0.0, sum = 0.0;
        uint pj = 0u;
        for (uint k = 0u; k < used; k++) {
            float bp = -1.0;
            uint bj = 0xFFFFFFFFu;
            for (uint j = lane; j < E; j += SG) {
                const float q = exp(L[base + j] - mx) * inv;
                const bool after = k == 0u || q < pv || (q == pv && j > pj);
                if (after && q > bp) { bp = q; bj = j; }
            }
            pv = subgroupMax(bp);
            pj = subgroupMin(bp == pv ? bj : 0xFFFFFFFFu);
            sum += pv;
            if (lane == 0u) {
                R[CHOICE + t * used + k] = pj;
                R[WEIGHT + t * used + k] = floatBitsToUint(pv);
                atomicAdd(counts[pj], 1u);
            }
        }
        if (p.normalize != 0u && lane == 0u) {
            // the lane that wrote the weights reads them back
            sum = max(sum, 6.103515625e-5);
            for (uint k = 0u; k < used; k++) {
                const uint i = WEIGHT + t * used + k;
                R[i] = floatBitsToUint(uintBitsToFloat(R[i]) / sum);
            }
        }
    }
    memoryBarrierBuffer();
    barrier();

    // 2. each expert's first row: the counts before it
    for (uint e = lid; e < E; e += WG) {
        uint first = 0u;
        for (uint j = 0u; j < e; j++) first += counts[j];
        fill[e] = first;
        R[EXPERTS + 2u * e] = first;
        R[EXPERTS + 2u * e + 1u] = counts[e];
    }
    barrier();

    // 3. each expert's pairs in pair order (so in token order)
    for (uint c0 = 0u; c0 < pairs; c0 += CHUNK) {
        const uint n = min(CHUNK, pairs - c0);
        for (uint i = lid; i < n; i += WG) chunk[i] = R[CHOICE + c0 + i];
        barrier();
        for (uint e = lid; e < E; e += WG) {
            uint at = fill[e];
            for (uint i = 0u; i < n; i++) {
                if (chunk[i] == e) {
                    R[ROWS + at] = (c0 + i) / used;
                    R[SLOT + c0 + i] = at;
                    R[IDS + at] = e;
                    at++;
                }
            }
            fill[e] = at;
        }
        barrier();
    }
}
