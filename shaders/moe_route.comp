#version 450
// moe_route — a mixture-of-experts layer's routing, on the device (the host's ExpertRoutes, the
// CPU path's, does the same): for each of the tokens, the softmax of its router logits
// L[t·experts ..], the `used` most probable experts (largest first; ties: the lower expert), their
// probabilities as weights, divided by their sum (clamped to 6.103515625e-5, float16's smallest
// normal, as llama.cpp) where `normalize` is 1. With `softmaxChosen` (gpt-oss) the picks are by
// logit and their weights the softmax of the chosen logits alone. With `sigmoid` (DeepSeek-V3)
// the probabilities are each logit's sigmoid; with `biased` the picks are by probability plus
// B[expert] (exp_probs_b) and the weights the probabilities alone (sigmoid only); with `groups`
// > 0 the experts are that many groups of experts/groups, and only the `groupsUsed` groups whose
// two best scores sum highest (ties: the lower group) are picked from. With `scaled` (Gemma 4) each
// weight is then times its expert's factor S[expert] (ffn_down_exps.scale: one factor an expert
// on its output). Then the (token, expert) pairs grouped by expert:
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
// One workgroup (any size, a multiple of the subgroup size), all in shared memory but for one
// read of the logits and the writes of R, tokens in chunks of QCAP / experts:
//   1. each token's softmax (a subgroup per token, lanes over the experts, the logits read
//      once into shared memory);
//   2. each token's `used` picks (probability descending, expert ascending) by as many rounds
//      of a subgroup maximum, a subgroup per token; each expert's pairs counted in shared memory;
//   3. each token's picks' sum (in pick order) and the weights (a thread per token);
// then each expert's first row by a prefix sum over the experts (subgroup scans, a thread per
// expert), and each pair's row: its expert's first row plus the earlier pairs of that expert
// (a thread per pair over chunks of CHUNK pairs; the pairs' experts stay in shared memory when
// they fit one chunk, the decode case). At most MAX_EXPERTS experts. Dispatch (1, 1, 1).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 512, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer LBuf { float L[]; };
layout(std430, binding = 1) buffer RBuf { uint R[]; };
layout(std430, binding = 2) readonly buffer SBuf { float S[]; };  // read only where scaled is 1
layout(std430, binding = 3) readonly buffer BBuf { float B[]; };  // read only where biased is 1
layout(std140, binding = 4) uniform Params { uint tokens, experts, used, normalize, cap, softmaxChosen, scaled, sigmoid, biased, groups, groupsUsed; } p;

const uint MAX_EXPERTS = 512u;
const uint CHUNK = 1024u;
const uint QCAP = 2048u;   // probabilities (and picks' weights) of a chunk of tokens
const uint MAX_SUBGROUPS = 128u;
const float PICKED = -3.402823466e38; // below every logit and probability: taken
const uint MAX_GROUPS = 64u;
shared uint counts[MAX_EXPERTS];
shared uint fill[MAX_EXPERTS];
shared uint chunk[CHUNK];
shared float q[QCAP];
shared float pick[QCAP];
shared uint sgsum[MAX_SUBGROUPS];

void main() {
    const uint lid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint E = p.experts, used = p.used, pairs = p.tokens * used;
    const uint ROWS = 0u, SLOT = p.cap, WEIGHT = 2u * p.cap, IDS = 3u * p.cap, CHOICE = 4u * p.cap, EXPERTS = 5u * p.cap;
    const uint lane = gl_SubgroupInvocationID, SG = gl_SubgroupSize, sg = gl_SubgroupID, nsg = gl_NumSubgroups;
    for (uint e = lid; e < E; e += WG) counts[e] = 0u;
    barrier();

    const uint TC = max(1u, QCAP / E); // tokens a chunk (E <= MAX_EXPERTS <= QCAP)
    for (uint t0 = 0u; t0 < p.tokens; t0 += TC) {
        const uint tc = min(TC, p.tokens - t0);
        // 1. softmax: a subgroup per token, each lane only ever touching its own experts' q
        // (softmaxChosen: the logits as they are)
        for (uint tl = sg; tl < tc; tl += nsg) {
            const uint base = (t0 + tl) * E, qb = tl * E;
            float mx = -3.402823466e38;
            for (uint j = lane; j < E; j += SG) {
                const float v = L[base + j];
                q[qb + j] = v;
                mx = max(mx, v);
            }
            if (p.softmaxChosen != 0u) continue;
            if (p.sigmoid != 0u) {
                for (uint j = lane; j < E; j += SG) q[qb + j] = 1.0 / (1.0 + exp(-q[qb + j]));
            } else {
                mx = subgroupMax(mx);
                float s = 0.0;
                for (uint j = lane; j < E; j += SG) s += exp(q[qb + j] - mx);
                const float inv = 1.0 / subgroupAdd(s);
                for (uint j = lane; j < E; j += SG) q[qb + j] = exp(q[qb + j] - mx) * inv;
            }
            if (p.biased != 0u) for (uint j = lane; j < E; j += SG) q[qb + j] += B[j];
            if (p.groups > 0u) {
                // each group's two best scores summed (the subgroup's uniform values), the best
                // groupsUsed kept, the other groups' experts taken out of the picks
                const uint size = E / p.groups;
                float gs[MAX_GROUPS];
                for (uint g = 0u; g < p.groups; g++) {
                    float t1 = PICKED, t2 = PICKED;
                    for (uint j = lane; j < size; j += SG) {
                        const float v = q[qb + g * size + j];
                        if (v > t1) { t2 = t1; t1 = v; } else if (v > t2) t2 = v;
                    }
                    const float m1 = subgroupMax(t1);
                    const uint at = subgroupMin(t1 == m1 ? lane : 0xFFFFFFFFu);
                    const float m2 = subgroupMax(lane == at ? t2 : t1);
                    gs[g] = size > 1u ? m1 + m2 : m1;
                }
                uint keep0 = 0u, keep1 = 0u; // groups 0-31, 32-63
                for (uint r = 0u; r < p.groupsUsed; r++) {
                    uint bg = 0u;
                    float bv = PICKED;
                    bool found = false;
                    for (uint g = 0u; g < p.groups; g++) {
                        const bool kept = ((g < 32u ? keep0 >> g : keep1 >> (g - 32u)) & 1u) != 0u;
                        if (!kept && (!found || gs[g] > bv)) { bv = gs[g]; bg = g; found = true; }
                    }
                    if (bg < 32u) keep0 |= 1u << bg; else keep1 |= 1u << (bg - 32u);
                }
                for (uint j = lane; j < E; j += SG) {
                    const uint g = j / size;
                    if (((g < 32u ? keep0 >> g : keep1 >> (g - 32u)) & 1u) == 0u) q[qb + j] = PICKED;
                }
            }
        }
        barrier();
        // 2. each token's picks, largest first (ties: the lower expert): a subgroup per token,
        // `used` rounds of a subgroup maximum over the probabilities not yet picked (a picked
        // one is set to PICKED by the lane that owns it, so no lane reads another's writes)
        for (uint tl = sg; tl < tc; tl += nsg) {
            const uint qb = tl * E;
            for (uint k = 0u; k < used; k++) {
                float best = PICKED;
                uint bj = 0xFFFFFFFFu;
                for (uint j = lane; j < E; j += SG) {
                    const float v = q[qb + j];
                    if (v > best) { best = v; bj = j; }
                }
                const float m = subgroupMax(best);
                const uint j = subgroupMin(best == m ? bj : 0xFFFFFFFFu);
                if (lane == j % SG) q[qb + j] = PICKED;
                if (subgroupElect()) {
                    const uint pr = (t0 + tl) * used + k;
                    // (biased: the weight is the probability alone, the sigmoid of the logit)
                    pick[tl * used + k] = p.biased != 0u ? 1.0 / (1.0 + exp(-L[(t0 + tl) * E + j])) : m;
                    R[CHOICE + pr] = j;
                    if (pr < CHUNK) chunk[pr] = j;
                    atomicAdd(counts[j], 1u);
                }
            }
        }
        memoryBarrierBuffer(); // (the picks' experts in R, for step 3's factors)
        barrier();
        // 3. the weights, divided by their sum (in pick order) where asked
        for (uint tl = lid; tl < tc; tl += WG) {
            if (p.softmaxChosen != 0u) {
                // the first pick is the largest logit
                const float m = pick[tl * used];
                float z = 0.0;
                for (uint k = 0u; k < used; k++) {
                    pick[tl * used + k] = exp(pick[tl * used + k] - m);
                    z += pick[tl * used + k];
                }
                for (uint k = 0u; k < used; k++) pick[tl * used + k] /= z;
            }
            float sum = 0.0;
            for (uint k = 0u; k < used; k++) sum += pick[tl * used + k];
            sum = p.normalize != 0u ? max(sum, 6.103515625e-5) : 1.0;
            for (uint k = 0u; k < used; k++) {
                const float w = pick[tl * used + k], f = p.scaled != 0u ? S[R[CHOICE + (t0 + tl) * used + k]] : 1.0;
                R[WEIGHT + (t0 + tl) * used + k] = floatBitsToUint((p.normalize != 0u ? w / sum : w) * f);
            }
        }
        barrier();
    }
    memoryBarrierBuffer();

    // 4. each expert's first row: the counts before it (subgroup scans, then the subgroups' sums;
    // experts numbered by subgroup and lane, as the scans run, whatever the invocations' order)
    uint carry = 0u;
    for (uint e0 = 0u; e0 < E; e0 += WG) {
        const uint e = e0 + sg * SG + lane, c = e < E ? counts[e] : 0u;
        const uint incl = subgroupInclusiveAdd(c);
        const uint tot = subgroupAdd(c);
        if (subgroupElect()) sgsum[sg] = tot;
        barrier();
        uint before = carry, all = 0u;
        for (uint j = 0u; j < nsg; j++) {
            const uint v = sgsum[j];
            if (j < sg) before += v;
            all += v;
        }
        if (e < E) {
            const uint first = before + incl - c;
            fill[e] = first;
            R[EXPERTS + 2u * e] = first;
            R[EXPERTS + 2u * e + 1u] = c;
            counts[e] = 0u; // from here: each expert's pairs in the chunks before
        }
        carry += all;
        barrier();
    }

    // 5. each pair's row: its expert's first row, plus its expert's pairs before it
    for (uint c0 = 0u; c0 < pairs; c0 += CHUNK) {
        const uint n = min(CHUNK, pairs - c0);
        if (c0 > 0u) {
            for (uint i = lid; i < n; i += WG) chunk[i] = R[CHOICE + c0 + i];
            barrier();
        }
        for (uint i = lid; i < n; i += WG) {
            const uint e = chunk[i];
            uint at = fill[e];
            for (uint o = 0u; o < i; o++) at += chunk[o] == e ? 1u : 0u;
            R[ROWS + at] = (c0 + i) / used;
            R[SLOT + c0 + i] = at;
            R[IDS + at] = e;
            atomicAdd(counts[e], 1u);
        }
        barrier();
        for (uint e = lid; e < E; e += WG) {
            fill[e] += counts[e];
            counts[e] = 0u;
        }
        barrier();
    }
}
