#version 450
// moe_combine — a mixture-of-experts layer's output for each of the tokens:
//   Y[t] = Σ_k W[t·used + k] · E[Slot[t·used + k]]  (+ sigmoid(G · Y[t]) · S[t] with a shared expert)
// E holds the experts' output rows (width floats each), Slot and W each token's used rows of E and
// their weights; S the shared expert's output rows, G its gate vector, dotted with the layer's
// input, which Y holds until this kernel overwrites it (one workgroup per token: the dot is taken
// before any thread writes). Y rows are yStride apart. Without a shared expert (shared 0) S and G
// are not read; shared 2 adds S[t] ungated (DeepSeek's shared experts), G not read. Dispatch (tokens, blocks, 1): group (t, y) takes columns y·threads + i·blocks·threads
// (i = 0, 1, ...) of token t's row; blocks must be 1 with a shared expert (each group reads the
// whole row for the gate's dot), up to ceil(width / threads) without (decode: more groups than
// tokens). The token's used (row, weight) pairs are read once into shared memory.
layout(local_size_x = 256, local_size_x_id = 0) in;

layout(std430, binding = 0) buffer YBuf { float Y[]; };
layout(std430, binding = 1) readonly buffer EBuf { float E[]; };
layout(std430, binding = 2) readonly buffer SlotBuf { uint Slot[]; };
layout(std430, binding = 3) readonly buffer WBuf { float W[]; };
layout(std430, binding = 4) readonly buffer SBuf { float S[]; };
layout(std430, binding = 5) readonly buffer GBuf { float G[]; };
layout(std140, binding = 6) uniform Params { uint width, used, shared_expert, yStride, tokens; } p;

shared float partial[256];
const uint MAX_USED = 64u;
shared uint slots[MAX_USED];
shared float weights[MAX_USED];

void main() {
    const uint t = gl_WorkGroupID.x, lid = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x;
    if (t >= p.tokens) return;
    const uint y = t * p.yStride, used = min(p.used, MAX_USED);
    for (uint k = lid; k < used; k += n) {
        slots[k] = Slot[t * p.used + k] * p.width;
        weights[k] = W[t * p.used + k];
    }
    barrier();
    float gate = 0.0;
    if (p.shared_expert == 1u) {
        float s = 0.0;
        for (uint c = lid; c < p.width; c += n) s += G[c] * Y[y + c];
        partial[lid] = s;
        barrier();
        for (uint h = n / 2u; h > 0u; h >>= 1u) {
            if (lid < h) partial[lid] += partial[lid + h];
            barrier();
        }
        gate = 1.0 / (1.0 + exp(-partial[0]));
    } else if (p.shared_expert == 2u) {
        gate = 1.0;
    }
    for (uint c = gl_WorkGroupID.y * n + lid; c < p.width; c += n * gl_NumWorkGroups.y) {
        float acc = 0.0;
        for (uint k = 0u; k < used; k++) acc += weights[k] * E[slots[k] + c];
        for (uint k = used; k < p.used; k++) acc += W[t * p.used + k] * E[Slot[t * p.used + k] * p.width + c];
        if (p.shared_expert != 0u) acc += gate * S[t * p.width + c];
        Y[y + c] = acc;
    }
}
