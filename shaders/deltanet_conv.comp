#version 450
// deltanet_conv — a Gated DeltaNet layer's causal convolution (ggml_ssm_conv, then SiLU) over
// each sequence's rows in order: OUT[t][c] = silu(Σ_k W[c·taps + k] · in(t - (taps-1) + k, c)),
// the inputs before a sequence's first row from its state (zero when that row is position 0),
// which then keeps the last taps - 1 inputs (state[k·convDim + c], oldest first).
// `grouped` (Qwen3-Next's ssm_in): channel c is read where that projection's rows keep it, per
// key head g: q (hk), k (hk), its value heads' v (hv), their z (hv).
// Dispatch (ceil(convDim / 64), sequences, 1).
layout(local_size_x = 64, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer InBuf { float IN[]; };
layout(std430, binding = 1) readonly buffer WBuf { float W[]; };
layout(std430, binding = 2) buffer StateBuf { float STATE[]; };
layout(std430, binding = 3) writeonly buffer OutBuf { float OUT[]; };
// per sequence: first index into ROWS, row count, state slot, 1 when its first row is position 0
layout(std430, binding = 4) readonly buffer SeqBuf { int SEQS[]; };
layout(std430, binding = 5) readonly buffer RowBuf { int ROWS[]; };
layout(std140, binding = 6) uniform Params {
    uint convDim, taps, inStride, slotFloats, layerOff;
    uint grouped, keyDim, hk, hv;
} p;

#define MAX_TAPS 8

uint inputChannel(uint c) {
    if (p.grouped == 0) return c;
    const uint group = 2 * p.hk + 2 * p.hv;
    if (c < 2 * p.keyDim) {
        const uint part = c / p.keyDim, i = c % p.keyDim; // q (0) or k (1)
        return (i / p.hk) * group + part * p.hk + i % p.hk;
    }
    const uint i = c - 2 * p.keyDim;
    return (i / p.hv) * group + 2 * p.hk + i % p.hv;
}

void main() {
    const uint c = gl_GlobalInvocationID.x, s = gl_WorkGroupID.y;
    if (c >= p.convDim) return;
    const int first = SEQS[4 * s], count = SEQS[4 * s + 1];
    const uint base = uint(SEQS[4 * s + 2]) * p.slotFloats + p.layerOff;
    const bool fresh = SEQS[4 * s + 3] != 0;
    const uint taps = p.taps, src = inputChannel(c);
    float win[MAX_TAPS], w[MAX_TAPS];
    for (uint k = 0; k < MAX_TAPS; ++k) {
        w[k] = k < taps ? W[c * taps + k] : 0.0;
        win[k] = (k + 1 < taps && !fresh) ? STATE[base + k * p.convDim + c] : 0.0;
    }
    for (int i = 0; i < count; ++i) {
        const uint t = uint(ROWS[first + i]);
        win[taps - 1] = IN[t * p.inStride + src];
        float sum = 0.0;
        for (uint k = 0; k < MAX_TAPS; ++k) {
            if (k < taps) sum += win[k] * w[k];
        }
        OUT[t * p.convDim + c] = sum / (1.0 + exp(-sum));
        for (uint k = 0; k + 1 < MAX_TAPS; ++k) {
            if (k + 1 < taps) win[k] = win[k + 1];
        }
    }
    if (count > 0) {
        for (uint k = 0; k + 1 < MAX_TAPS; ++k) {
            if (k + 1 < taps) STATE[base + k * p.convDim + c] = win[k];
        }
    }
}
