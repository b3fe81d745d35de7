#version 450
// moe_combine — a mixture-of-experts layer's output for each of the tokens:
//   Y[t] = Σ_k W[t·used + k] · E[Slot[t·used + k]]  (+ sigmoid(G · Y[t]) · S[t] with a shared expert)
// E holds the experts' output rows (width floats each), Slot and W each token's used rows of E and
// their weights; S the shared expert's output rows, G its gate vector, dotted with the layer's
// input, which Y holds until this kernel overwrites it (one workgroup per token: the dot is taken
// before any thread writes). Y rows are yStride apart. Without a shared expert (shared 0) S and G
// are not read. Dispatch (tokens, 1, 1).
layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer YBuf { float Y[]; };
layout(std430, binding = 1) readonly buffer EBuf { float E[]; };
layout(std430, binding = 2) readonly buffer SlotBuf { uint Slot[]; };
layout(std430, binding = 3) readonly buffer WBuf { float W[]; };
layout(std430, binding = 4) readonly buffer SBuf { float S[]; };
layout(std430, binding = 5) readonly buffer GBuf { float G[]; };
layout(std140, binding = 6) uniform Params { uint width, used, shared_expert, yStride, tokens; } p;

shared float partial[256];

void main() {
    const uint t = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x;
    if (t >= p.tokens) return;
    const uint y = t * p.yStride;
    float gate = 0.0;
    if (p.shared_expert != 0u) {
        float s = 0.0;
        for (uint c = lid; c < p.width; c += n) s += G[c] * Y[y + c];
        partial[lid] = s;
        barrier();
        for (uint h = n / 2u; h > 0u; h >>= 1u) {
            if (lid < h) partial[lid] += partial[lid + h];
            barrier();
        }
        gate = 1.0 / (1.0 + exp(-partial[0]));
    }
    for (uint c = lid; c < p.width; c += n) {
        float acc = 0.0;
        for (uint k = 0u; k < p.used; k++) acc += W[t * p.used + k] * E[Slot[t * p.used + k] * p.width + c];
        if (p.shared_expert != 0u) acc += gate * S[t * p.width + c];
        Y[y + c] = acc;
    }
}
