#version 450
// per_layer_inputs — Gemma 4's per-layer inputs (swift/Sources/VeloCore/Models/PerLayerEmbeddings.swift),
// in place: P holds each token's per_layer_model_proj product (layers × width a row), T its
// per_layer_token_embd row already times √width (get_rows' scale), G per_layer_proj_norm's gain.
// For token t and layer l, with v = P[t][l] * projScale:
//   P[t][l] = (rmsnorm(v) * G + T[t][l]) * mix
// in CPUForward.perLayerInputs' order. One workgroup per (layer, token); dispatch (layers, tokens, 1).
layout(local_size_x = 128, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer PBuf { float P[]; };
layout(std430, binding = 1) readonly buffer TBuf { float T[]; };
layout(std430, binding = 2) readonly buffer GBuf { float G[]; };
layout(std140, binding = 3) uniform Params {
    uint width, layers;
    float eps, projScale, mix;
} p;

const uint WMAX = 1024u; // workgroup sizes the reduction takes

shared float red[WMAX];

void main() {
    const uint l = gl_WorkGroupID.x, t = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint base = (t * p.layers + l) * p.width;
    float s = 0.0;
    for (uint j = tid; j < p.width; j += WG) {
        const float v = P[base + j] * p.projScale;
        s = fma(v, v, s);
    }
    red[tid] = s;
    barrier();
    for (uint h = WG / 2u; h > 0u; h >>= 1u) {
        if (tid < h) red[tid] += red[tid + h];
        barrier();
    }
    const float scale = 1.0 / sqrt(red[0] / float(p.width) + p.eps);
    for (uint j = tid; j < p.width; j += WG) {
        const float v = P[base + j] * p.projScale;
        P[base + j] = ((v * scale) * G[j] + T[base + j]) * p.mix;
    }
}
