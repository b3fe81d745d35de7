#version 450
// rope — rotary position embedding, in place, on `heads` heads of headDim values in each of
// `rows` rows (row r starts at X[r * rowStride], head h at + h * headDim). Pair i < ropeDim/2
// is (2i, 2i+1) (neox = 0) or (i, i + ropeDim/2) (neox = 1), rotated by theta = tokpos[r] *
// freqs[i] (the host's table: base^(-2i/ropeDim) with any scaling applied) and scaled by m =
// magnitude (YaRN, longrope):
//   a' = m (a cos(theta) - b sin(theta)),  b' = m (a sin(theta) + b cos(theta)).
// Values past ropeDim are left alone. One workgroup per (row, head); dispatch (rows, heads, 1).
layout(local_size_x = 64, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer XBuf { float X[]; };
layout(std430, binding = 1) readonly buffer PosBuf { int tokpos[]; };
layout(std430, binding = 2) readonly buffer FreqBuf { float freqs[]; };
layout(std140, binding = 3) uniform Params {
    uint rows, heads, headDim, ropeDim, neox;
    float magnitude;
    uint rowStride;
} p;

#include "rope_angle.glsl"

void main() {
    const uint r = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    if (r >= p.rows || h >= p.heads) return;
    const uint half_ = p.ropeDim / 2u;
    const uint vb = r * p.rowStride + h * p.headDim;
    const float pos = float(tokpos[r]);
    for (uint i = gl_LocalInvocationID.x; i < half_; i += gl_WorkGroupSize.x) {
        const vec2 cs = rope_angle(pos, freqs[i], p.magnitude);
        const float c = cs.x, s = cs.y;
        const uint ia = vb + (p.neox != 0u ? i : 2u * i);
        const uint ib = ia + (p.neox != 0u ? half_ : 1u);
        const float a = X[ia], b = X[ib];
        X[ia] = a * c - b * s;
        X[ib] = a * s + b * c;
    }
}
