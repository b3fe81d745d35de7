#version 450
// deltanet_recur — a Gated DeltaNet layer's recurrence (ggml_gated_delta_net) and output, for one
// (value head h, sequence) a workgroup, its rows in order. Per row: q and k of h's key head
// L2-normalised (llama.cpp's build_gdn_l2_norm); the state S decays by exp(softplus(alpha + dt)·a),
// takes the delta rule's write of v against what S recalls for k, strength sigmoid(beta); then
// o = Sᵀq / √state, RMS-normed (NORMW), times SiLU(z), into OUT. Thread j keeps column j of S
// (m[i] = S[i][j]: what llama.cpp's CPU loop calls row j) in registers through the rows; the
// GPU stores S row-major (S[i][j] at i·n + j: a warp's loads of one i are contiguous), the
// transpose of the CPU's layout; states never leave the device. A sequence whose first row is
// position 0 starts from zero.
// Qwen3-Next's fused inputs: `grouped`, z is read from ssm_in's rows (per key head: q, k, v of
// its value heads, then their z); `groupedRates`, beta and alpha from ssm_ba's (per key head: r
// betas, then r alphas). Else z, beta and alpha have rows of their own. Dispatch (vHeads, sequences, 1), state <= 128.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 128, local_size_x_id = 0) in; // 128 only: the shared rows and the reduction are MAXS wide

layout(std430, binding = 0) readonly buffer QKVBuf { float QKV[]; };
layout(std430, binding = 1) readonly buffer ZBuf { float Z[]; };
layout(std430, binding = 2) readonly buffer BetaBuf { float BETA[]; };
layout(std430, binding = 3) readonly buffer AlphaBuf { float ALPHA[]; };
layout(std430, binding = 4) buffer StateBuf { float STATE[]; };
layout(std430, binding = 5) readonly buffer SeqBuf { int SEQS[]; };
layout(std430, binding = 6) readonly buffer RowBuf { int ROWS[]; };
layout(std430, binding = 7) writeonly buffer OutBuf { float OUT[]; };
layout(std430, binding = 8) readonly buffer DtBuf { float DT[]; };
layout(std430, binding = 9) readonly buffer ABuf { float A[]; };
layout(std430, binding = 10) readonly buffer NormBuf { float NORMW[]; };
layout(std140, binding = 11) uniform Params {
    uint n, kHeads, vHeads, convDim, slotFloats, layerOff;
    uint grouped, groupedRates, groupedValues, zStride, betaStride, alphaStride;
    float eps;
} p;

#define MAXS 128
shared float qs[MAXS], ks[MAXS];
shared vec2 red[MAXS]; // a subgroup's partial sums each

// the sums of x over the workgroup's threads (every thread calls it): each subgroup's, then
// theirs in subgroup order (two barriers: a row's three sums take two calls)
vec2 total(vec2 x) {
    x = subgroupAdd(x);
    if (subgroupElect()) red[gl_SubgroupID] = x;
    barrier();
    vec2 r = vec2(0.0);
    for (uint i = 0; i < gl_NumSubgroups; ++i) r += red[i];
    barrier();
    return r;
}

void main() {
    const uint j = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, s = gl_WorkGroupID.y, n = p.n;
    const bool live = j < n;
    const uint r = p.vHeads / p.kHeads, kh = p.groupedValues != 0 ? h / r : h % p.kHeads;
    const uint keyDim = p.kHeads * n;
    const int first = SEQS[4 * s], count = SEQS[4 * s + 1];
    const uint base = uint(SEQS[4 * s + 2]) * p.slotFloats + p.layerOff + h * n * n + j;
    const bool fresh = SEQS[4 * s + 3] != 0;
    float m[MAXS];
    for (uint i = 0; i < MAXS; ++i) m[i] = (live && i < n && !fresh) ? STATE[base + i * n] : 0.0;
    // where h's z, beta and alpha sit in their rows
    const uint g = h / r, hi = h % r;
    const uint zAt = p.grouped != 0 ? g * (2 * n + 2 * r * n) + 2 * n + r * n + hi * n : h * n;
    const uint betaAt = p.groupedRates != 0 ? g * 2 * r + hi : h, alphaAt = p.groupedRates != 0 ? g * 2 * r + r + hi : h;
    const float scale = 1.0 / sqrt(float(n)), dt = DT[h], a = A[h], w = live ? NORMW[j] : 0.0;
    for (int ri = 0; ri < count; ++ri) {
        const uint t = uint(ROWS[first + ri]), row = t * p.convDim;
        const float q = live ? QKV[row + kh * n + j] : 0.0, k = live ? QKV[row + keyDim + kh * n + j] : 0.0;
        const float v = live ? QKV[row + 2 * keyDim + h * n + j] : 0.0;
        const vec2 sqk = total(vec2(q * q, k * k));
        // (q and k / √(Σ + eps), as llama.cpp's L2 norm: an RMS norm of eps/n, over √n)
        qs[j] = q / sqrt(sqk.x / float(n) + p.eps / float(n)) * scale;
        ks[j] = k / sqrt(sqk.y / float(n) + p.eps / float(n)) * scale;
        barrier();
        const float beta = 1.0 / (1.0 + exp(-BETA[t * p.betaStride + betaAt]));
        const float u = ALPHA[t * p.alphaStride + alphaAt] + dt;
        const float decay = exp((u > 20.0 ? u : log(1.0 + exp(u))) * a);
        float recall = 0.0;
        for (uint i = 0; i < MAXS; ++i) {
            if (i < n) { m[i] *= decay; recall += m[i] * ks[i]; }
        }
        const float delta = (v - recall) * beta;
        float o = 0.0;
        for (uint i = 0; i < MAXS; ++i) {
            if (i < n) { m[i] += delta * ks[i]; o += m[i] * qs[i]; }
        }
        o *= scale;
        const float so = total(vec2(live ? o * o : 0.0, 0.0)).x;
        if (live) {
            const float zj = Z[t * p.zStride + zAt + j];
            OUT[t * (p.vHeads * n) + h * n + j] = o / sqrt(so / float(n) + p.eps) * w * (zj / (1.0 + exp(-zj)));
        }
    }
    if (live && count > 0) {
        for (uint i = 0; i < MAXS; ++i) if (i < n) STATE[base + i * n] = m[i];
    }
}
