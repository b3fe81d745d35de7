#version 450
// attention_cm2 — prefill attention of one sequence on NVIDIA's second cooperative-matrix
// extension (GL_NV_cooperative_matrix2), Vulkan only, over kv_gather's contiguous float16 copy
// of the layer's K and V (tensor-addressed loads need a tile's keys in one run; pages split it).
//
// One workgroup per (block of BR consecutive tokens, query head, split). The whole workgroup
// owns workgroup-scope matrices: Q (BR x HD, scaled, float16), S = Q K^T for a tile of BC keys,
// O (BR x HD) and the running max M and sum L (BR x BC, each row's value smeared across it).
// Per tile: S; on the tiles that reach past a row's last key (the causal diagonal, the last
// tile), those keys' scores are set to NEG; M' = max(M, rowmax S), P = exp(S - M'), the rescale
// exp(M - M'); L = L * rescale + P x ones (a product, not a reduction); O = O * rescale + P V.
// K (through a transposing view) and V are loaded from the copy's [key][dimension] rows,
// unchecked: the copy holds whole tiles (kv_gather zeroes V past the last key, and masked scores
// never reach P).
// Rows: tokens t0 .. t0 + BR - 1 within first .. end - 1 of the batch, one sequence's (rows past
// end read zero and are not written).
// splits == 1: out[t][h] = O / L. splits > 1: keys [z*chunk, (z+1)*chunk) and attention's
// partials (O unnormalised, M, L) for attention_combine. A row with no key in a split (its last
// key before the split's first) sums exp(0) over NEG scores there; attention_combine does not
// read that split for the row (it counts a token's splits from tokpos and chunk).
// No sliding window, no soft cap (the host keeps such models on attention_coop).
// Needs: VK_NV_cooperative_matrix2 (workgroup scope, reductions, per-element ops, tensor
// addressing), shaderFloat16. Constants: 0 threads, 1 BR, 2 BC, 3 HD (the head size, a multiple
// of 16). Dispatch (ceil((end - first) / BR), heads, splits).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint BR = 64u;
layout(constant_id = 2) const uint BC = 64u;
layout(constant_id = 3) const uint HD = 128u;

layout(std430, binding = 0) readonly buffer QBuf { float Q[]; };
layout(std430, binding = 1) readonly buffer KVBuf { float16_t KV[]; };
layout(std430, binding = 2) writeonly buffer OutBuf { float outv[]; };
layout(std430, binding = 3) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 4) writeonly buffer PartBuf { float part[]; };
layout(std140, binding = 5) uniform Params {
    uint first, end, heads, kvHeads, kvDim, qStride, cap;
    float scale;
    uint chunk, splits;
} p;

const float NEG = -1.0e30;   // "minus infinity" that stays finite in exp(a - b)

shared uint nkS[BR];          // each row's key count (0 past end)
uint t0, hq, split, kbeg, kend;

#define MAT(T, R, C, U) coopmat<T, gl_ScopeWorkgroup, R, C, U>
#define ACC(R, C) MAT(float, R, C, gl_MatrixUseAccumulator)

// a key the row does not see (past its last, outside the split) scores NEG
float maskScore(const in uint r, const in uint c, const in float s, const in uint j0) {
    const uint j = j0 + c;
    return j >= kbeg && j < min(nkS[r], kend) ? s : NEG;
}
float maxOf(const in float a, const in float b) { return max(a, b); }
float smear(const in float a, const in float b) { return a; }
float expOf(const in uint r, const in uint c, const in float x) { return exp(x); }
float maxElem(const in uint r, const in uint c, const in float a, const in float b) { return max(a, b); }
float recip(const in uint r, const in uint c, const in float l) { return l > 0.0 ? 1.0 / l : 0.0; }

// partials: element (r, c) of O to its token's split row, and M, L (column 0) after it
float storePartO(const in uint r, const in uint c, const in float o) {
    if (nkS[r] > 0u) part[(((t0 + r) * p.heads + hq) * p.splits + split) * (HD + 2u) + c] = o;
    return o;
}
float storePartML(const in uint r, const in uint c, const in float v, const in uint which) {
    if (c == 0u && nkS[r] > 0u) part[(((t0 + r) * p.heads + hq) * p.splits + split) * (HD + 2u) + HD + which] = v;
    return v;
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    t0 = p.first + gl_WorkGroupID.x * BR;
    hq = gl_WorkGroupID.y;
    split = gl_WorkGroupID.z;
    const uint kvh = hq / (p.heads / p.kvHeads);
    for (uint r = tid; r < BR; r += gl_WorkGroupSize.x) nkS[r] = t0 + r < p.end ? uint(tokpos[t0 + r]) + 1u : 0u;
    barrier();
    uint kmin = ~0u, kmax = 0u;
    for (uint r = 0u; r < BR; r++) {
        const uint k = nkS[r];
        if (k > 0u) { kmin = min(kmin, k); kmax = max(kmax, k); }
    }
    kbeg = 0u;
    kend = kmax;
    if (p.splits > 1u) {
        if (split * p.chunk >= kend) return;   // no row of the block has keys here
        kbeg = split * p.chunk;
        kend = min(kend, kbeg + p.chunk);
    }

    // Q: rows t0.., this head's columns; float32, scaled, then float16
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lq = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lq = setTensorLayoutDimensionNV(lq, p.end, p.qStride);
    ACC(BR, HD) q32;
    coopMatLoadTensorNV(q32, Q, 0, sliceTensorLayoutNV(lq, t0, BR, hq * HD, HD));
    q32 = q32 * float(p.scale);
    const MAT(float16_t, BR, HD, gl_MatrixUseA) qf = MAT(float16_t, BR, HD, gl_MatrixUseA)(q32);

    // K and V rows ([key][dimension], this KV head's), unchecked; K loaded transposed (as
    // llama.cpp's kernel does: from [dimension][key] rows the same tile took 2.5x as long, 1877
    // against 756 us a layer at 16384 keys on an H200)
    tensorLayoutNV<2> lk = createTensorLayoutNV(2);
    lk = setTensorLayoutDimensionNV(lk, p.cap, HD);
    tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
    tensorLayoutNV<2> lv = createTensorLayoutNV(2);
    lv = setTensorLayoutDimensionNV(lv, p.cap, HD);
    const uint kOff = kvh * p.cap * HD, vOff = p.kvDim * p.cap + kOff;

    ACC(BR, HD) o = ACC(BR, HD)(0.0);
    ACC(BR, BC) m = ACC(BR, BC)(NEG), l = ACC(BR, BC)(0.0);
    const MAT(float16_t, BC, BC, gl_MatrixUseB) ones = MAT(float16_t, BC, BC, gl_MatrixUseB)(1.0);

    [[dont_unroll]]
    for (uint j0 = kbeg - kbeg % BC; j0 < kend; j0 += BC) {
        MAT(float16_t, HD, BC, gl_MatrixUseB) kt;
        coopMatLoadTensorNV(kt, KV, kOff, sliceTensorLayoutNV(lk, j0, BC, 0, HD), tr);
        ACC(BR, BC) s = ACC(BR, BC)(0.0);
        s = coopMatMulAdd(qf, kt, s);
        // only tiles with a key some row does not see: the causal diagonal, a split's edges
        if (j0 < kbeg || j0 + BC > min(kmin, kend)) coopMatPerElementNV(s, s, maskScore, j0);

        ACC(BR, BC) rowmax, mnew, em;
        coopMatReduceNV(rowmax, s, gl_CooperativeMatrixReduceRowNV, maxOf);
        coopMatPerElementNV(mnew, rowmax, maxElem, m);
        coopMatPerElementNV(em, m - mnew, expOf);
        m = mnew;
        ACC(BR, BC) pr;
        coopMatPerElementNV(pr, s - mnew, expOf);
        const MAT(float16_t, BR, BC, gl_MatrixUseA) pa = MAT(float16_t, BR, BC, gl_MatrixUseA)(pr);
        ACC(BR, BC) rowsum = ACC(BR, BC)(0.0);
        rowsum = coopMatMulAdd(pa, ones, rowsum);
        l = em * l + rowsum;

        MAT(float16_t, BC, HD, gl_MatrixUseB) vt;
        coopMatLoadTensorNV(vt, KV, vOff, sliceTensorLayoutNV(lv, j0, BC, 0, HD));
        ACC(BR, HD) emd;
        coopMatReduceNV(emd, em, gl_CooperativeMatrixReduceRowNV, smear);
        o = o * emd;
        o = coopMatMulAdd(pa, vt, o);
    }

    if (p.splits > 1u) {
        coopMatPerElementNV(o, o, storePartO);
        coopMatPerElementNV(m, m, storePartML, 0u);
        coopMatPerElementNV(l, l, storePartML, 1u);
        return;
    }
    ACC(BR, HD) inv;
    coopMatReduceNV(inv, l, gl_CooperativeMatrixReduceRowNV, smear);
    coopMatPerElementNV(inv, inv, recip);
    o = o * inv;
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> lo = createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    lo = setTensorLayoutDimensionNV(lo, p.end, p.heads * HD);
    coopMatStoreTensorNV(o, outv, 0, sliceTensorLayoutNV(lo, t0, BR, hq * HD, HD));
}
