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
// Per tile: K to shared memory ([d][k]); scores, each thread 2 rows x 2 keys; V to the same
// shared memory ([k][d]) while each row's 4 threads update its softmax; then the weighted
// sum, each thread 4 rows x 2 groups of 4 dimensions.
// Needs: headDim a multiple of 4, at most DMAX; 28.3 KiB of shared memory. Workgroup of 128
// threads (constant 0 must stay 128). Dispatch (blocks, kvHeads, 1).
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 128, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer QBuf { float Q[]; };
layout(std430, binding = 1) readonly buffer KVBuf { float kv[]; };
layout(std430, binding = 2) writeonly buffer OutBuf { float outv[]; };
layout(std430, binding = 3) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 4) readonly buffer PtBuf { int tokpt[]; };
layout(std430, binding = 5) readonly buffer PageBuf { int pagetab[]; };
layout(std430, binding = 6) readonly buffer BlockBuf { int blocks[]; };
layout(std140, binding = 7) uniform Params {
    uint heads, kvHeads, headDim, kvDim, pageSize, pageStride, layerOff;
    float scale;
    uint qStride;
} p;

const uint WG = 128u;
const uint R = 32u;       // query rows per workgroup
const uint BC = 16u;      // keys per tile
const uint DMAX = 128u;   // largest head size
const uint OV = DMAX / 64u; // vec4 groups of dimensions per thread in the weighted sum
const float NEG = -1.0e30; // "minus infinity" that stays finite in exp(a - b)

shared float Qs[DMAX * R];     // [d][r], times scale
shared float KVs[BC * DMAX];   // the K tile [d][k], then the V tile [k][d]
shared float Ss[R * BC];       // [r][k] scores; at the end, [r][part] sums
shared float Ps[BC * R];       // [k][r] probabilities
shared float alphaS[R];        // rescale of each row's output for this tile
shared uint kb[BC], vb[BC];    // where key k of the tile lives: K (+ d*pageSize), V (+ d)

void main() {
    const uint blk = gl_WorkGroupID.x, kvh = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x;
    if (kvh >= p.kvHeads) return;
    const uint t0 = uint(blocks[2u * blk]), count = uint(blocks[2u * blk + 1u]);
    const uint hd = p.headDim, G = p.heads / p.kvHeads, ps0 = p.pageSize;
    const uint used = min(R / G, count) * G;  // rows in use
    const uint pt = uint(tokpt[t0]);
    const uint kOff = kvh * hd, plane = ps0 * p.kvDim;

    // queries, scaled, and the block's key range
    for (uint e = tid; e < R * hd; e += WG) {
        const uint r = e % R, d = e / R;
        float q = 0.0;
        if (r < used) q = Q[(t0 + r / G) * p.qStride + (kvh * G + r % G) * hd + d] * p.scale;
        Qs[d * R + r] = q;
    }
    uint kend = 0u;
    for (uint i = 0u; i < used / G; i++) kend = max(kend, uint(tokpos[t0 + i]) + 1u);

    // score phase: rows sr, sr+1 and keys sk, sk+1; softmax phase: row rr, keys 4*rq ..
    const uint sr = 2u * (tid / 8u), sk = 2u * (tid % 8u);
    const uint rr = tid / 4u, rq = tid % 4u;
    const uint lim0 = sr < used ? uint(tokpos[t0 + sr / G]) + 1u : 0u;
    const uint lim1 = sr + 1u < used ? uint(tokpos[t0 + (sr + 1u) / G]) + 1u : 0u;
    // weighted sum: rows orow .. orow+3, vec4 columns oc + 16 i
    const uint orow = 4u * (tid / 16u), oc = tid % 16u;
    vec4 o[4][OV];
    [[unroll]] for (uint a = 0u; a < 4u; a++)
        [[unroll]] for (uint i = 0u; i < OV; i++) o[a][i] = vec4(0.0);
    float mrun = NEG, lrun = 0.0;  // row rr, this thread's share of the sum

    for (uint j0 = 0u; j0 < kend; j0 += BC) {
        const uint nt = min(BC, kend - j0);
        if (tid < nt) {
            const uint j = j0 + tid;
            const uint pb = uint(pagetab[pt + j / ps0]) * p.pageStride + p.layerOff, slot = j % ps0;
            kb[tid] = pb + kOff * ps0 + slot;
            vb[tid] = pb + plane + slot * p.kvDim + kOff;
        }
        barrier();
        for (uint e = tid; e < BC * hd; e += WG) {
            const uint k = e % BC, d = e / BC;
            KVs[d * BC + k] = k < nt ? kv[kb[k] + d * ps0] : 0.0;
        }
        barrier();
        // 1. scores
        float s00 = 0.0, s01 = 0.0, s10 = 0.0, s11 = 0.0;
        for (uint d = 0u; d < hd; d++) {
            const float q0 = Qs[d * R + sr], q1 = Qs[d * R + sr + 1u];
            const float k0 = KVs[d * BC + sk], k1 = KVs[d * BC + sk + 1u];
            s00 = fma(q0, k0, s00); s01 = fma(q0, k1, s01);
            s10 = fma(q1, k0, s10); s11 = fma(q1, k1, s11);
        }
        const uint j = j0 + sk;
        Ss[sr * BC + sk] = j < lim0 ? s00 : NEG;
        Ss[sr * BC + sk + 1u] = j + 1u < lim0 ? s01 : NEG;
        Ss[(sr + 1u) * BC + sk] = j < lim1 ? s10 : NEG;
        Ss[(sr + 1u) * BC + sk + 1u] = j + 1u < lim1 ? s11 : NEG;
        barrier();
        // 2. the V tile (K is no longer needed) and each row's softmax update
        for (uint e = tid; e < BC * hd; e += WG) {
            const uint k = e / hd, d = e % hd;
            KVs[k * hd + d] = k < nt ? kv[vb[k] + d] : 0.0;
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
                Ps[k * R + rr] = e;
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
            const vec4 pk = vec4(Ps[k * R + orow], Ps[k * R + orow + 1u], Ps[k * R + orow + 2u], Ps[k * R + orow + 3u]);
            [[unroll]] for (uint i = 0u; i < OV; i++) {
                const uint d = 4u * (oc + 16u * i);
                if (d < hd) {
                    const vec4 v = vec4(KVs[k * hd + d], KVs[k * hd + d + 1u], KVs[k * hd + d + 2u], KVs[k * hd + d + 3u]);
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
    barrier();
    [[unroll]] for (uint a = 0u; a < 4u; a++) {
        const uint r = orow + a;
        if (r >= used) continue;
        const float l = Ss[r * 4u] + Ss[r * 4u + 1u] + Ss[r * 4u + 2u] + Ss[r * 4u + 3u];
        const uint ob = ((t0 + r / G) * p.heads + kvh * G + r % G) * hd;
        [[unroll]] for (uint i = 0u; i < OV; i++) {
            const uint d = 4u * (oc + 16u * i);
            if (d < hd) {
                const vec4 v = o[a][i] / l;
                outv[ob + d] = v.x; outv[ob + d + 1u] = v.y; outv[ob + d + 2u] = v.z; outv[ob + d + 3u] = v.w;
            }
        }
    }
}
