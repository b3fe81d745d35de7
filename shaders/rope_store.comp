#version 450
// rope_store — the rotary embedding of a layer's queries and keys, and the keys and values
// written into the KV pages, in one dispatch (three before: one dispatch costs microseconds of
// fixed time on a GPU, and a decode step has hundreds). For each token t:
//   Q heads h < heads: rotated in place (Q row t at t * qStride), as rope.comp;
//   K/V heads kh < kvHeads: K rotated on the way into the page, V copied (K, V rows at
//   t * kvStride; Q, K and V may be views of one Q|K|V row), to position tokpos[t] of the
//   token's sequence (pages as kv_store.comp).
// Angles and magnitude as rope.comp. One workgroup per (token, head); dispatch (n, heads + kvHeads, 1).
layout(local_size_x = 64, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer QBuf { float Q[]; };
layout(std430, binding = 1) readonly buffer KBuf { float Kin[]; };
layout(std430, binding = 2) readonly buffer VBuf { float Vin[]; };
layout(std430, binding = 3) writeonly buffer KVBuf { float kv[]; };
layout(std430, binding = 4) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 5) readonly buffer PtBuf { int tokpt[]; };
layout(std430, binding = 6) readonly buffer PageBuf { int pagetab[]; };
layout(std430, binding = 7) readonly buffer FreqBuf { float freqs[]; };
layout(std140, binding = 8) uniform Params {
    uint n, heads, kvHeads, headDim, ropeDim, neox;
    float magnitude;
    uint kvDim, pageSize, pageStride, layerOff, qStride, kvStride;
} p;

const float TWO_PI_HI = 6.28318548202514648;
const float TWO_PI_LO = -1.7484556000744883e-7;
const float INV_TWO_PI = 0.159154943091895336;

// cos and sin of pair i's angle at position pos, times the magnitude (see rope.comp)
vec2 angle(float pos, uint i) {
    const float freq = freqs[i];
    precise float th = pos * freq;
    precise float tl = fma(pos, freq, -th);
    precise float kq = round(th * INV_TWO_PI);
    precise float a0 = fma(-kq, TWO_PI_HI, th);
    precise float a1 = fma(-kq, TWO_PI_LO, a0);
    precise float ang = a1 + tl;
    return vec2(cos(ang), sin(ang)) * p.magnitude;
}

void main() {
    const uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    if (t >= p.n || h >= p.heads + p.kvHeads) return;
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint half_ = p.ropeDim / 2u, hd = p.headDim;
    const uint posi = uint(tokpos[t]);
    const float pos = float(posi);
    const uint step = p.neox != 0u ? half_ : 1u;
    if (h < p.heads) {
        const uint vb = t * p.qStride + h * hd;
        for (uint i = tid; i < half_; i += WG) {
            const vec2 cs = angle(pos, i);
            const uint ia = vb + (p.neox != 0u ? i : 2u * i), ib = ia + step;
            const float a = Q[ia], b = Q[ib];
            Q[ia] = a * cs.x - b * cs.y;
            Q[ib] = a * cs.y + b * cs.x;
        }
        return;
    }
    const uint kh = h - p.heads;
    const uint page = uint(pagetab[uint(tokpt[t]) + posi / p.pageSize]);
    const uint slot = posi % p.pageSize;
    const uint kbase = page * p.pageStride + p.layerOff;      // K plane, transposed: [dim][slot]
    const uint vbase = kbase + p.pageSize * p.kvDim + slot * p.kvDim;
    const uint rb = t * p.kvStride + kh * hd;
    for (uint d = tid; d < hd; d += WG) {
        kv[vbase + kh * hd + d] = Vin[rb + d];
        if (d >= p.ropeDim) kv[kbase + (kh * hd + d) * p.pageSize + slot] = Kin[rb + d];
    }
    for (uint i = tid; i < half_; i += WG) {
        const vec2 cs = angle(pos, i);
        const uint da = p.neox != 0u ? i : 2u * i, db = da + step;
        const float a = Kin[rb + da], b = Kin[rb + db];
        kv[kbase + (kh * hd + da) * p.pageSize + slot] = a * cs.x - b * cs.y;
        kv[kbase + (kh * hd + db) * p.pageSize + slot] = a * cs.y + b * cs.x;
    }
}
