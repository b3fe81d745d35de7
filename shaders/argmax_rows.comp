#version 450
// argmax_rows — each logit row's greedy token, picked as the host's ck_argmax_f32 picks it:
//   I[r] = the first i < n where X[r*stride + i] is largest, for r < rows;
// except that a row holding a NaN or an infinity anywhere gives 0xFFFFFFFF (-1 as the host's
// int32): the host ends that request with an error (Scheduler.finiteLogits) rather than pick
// from numbers that are not numbers (damaged weights). The host checks its own rows with
// ck_all_finite_f32 before ck_argmax_f32.
//
// Why on the device: a greedy step needs one token a row, and reading the row instead (a
// 128K vocabulary is 0.5 MB of floats) cost the host ~100 µs a row on the H200's machine,
// over 10 % of a 16-sequence decode step (bench/RESULTS.md). Then the logits need not reach
// host memory at all.
//
// A workgroup a row: each invocation keeps the first largest of its strided values, then
// subgroups and their leaders reduce (largest value, lowest index).
// Dispatch (rows, 1, 1), constant 0 the threads.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(local_size_x = 1024, local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer XBuf { float X[]; };
layout(std430, binding = 1) writeonly buffer IBuf { uint I[]; };
layout(std140, binding = 2) uniform Params { uint n, stride; } p;

const uint NONE = 0xFFFFFFFFu;
shared float sv[256]; // each subgroup's best: 1024 threads in subgroups of 4 or more
shared uint si[256];
shared bool sbad[256]; // whether a subgroup saw a NaN or an infinity

// the lowest index among the subgroup's invocations holding its largest value (NONE: none holds one)
void reduce(inout float v, inout uint i) {
    const float m = subgroupMax(i != NONE ? v : uintBitsToFloat(0xFF800000u)); // -inf where none
    i = subgroupMin(i != NONE && v == m ? i : NONE);
    v = m;
}

void main() {
    const uint base = gl_WorkGroupID.x * p.stride, tid = gl_LocalInvocationID.x;
    float v = uintBitsToFloat(0xFF800000u);
    uint i = NONE;
    bool bad = false;
    for (uint j = tid; j < p.n; j += gl_WorkGroupSize.x) {
        const float x = X[base + j];
        // exponent bits all set: NaN or infinity (a bit test, which no float optimisation drops)
        bad = bad || (floatBitsToUint(x) & 0x7F800000u) == 0x7F800000u;
        // strictly larger, or the first -inf while nothing is held (NaN fails both)
        if (x > v || (i == NONE && x == v)) { v = x; i = j; }
    }
    reduce(v, i);
    bad = subgroupMax(bad ? 1u : 0u) != 0u; // any (arithmetic, already required: no vote extension)
    if (subgroupElect()) { sv[gl_SubgroupID] = v; si[gl_SubgroupID] = i; sbad[gl_SubgroupID] = bad; }
    barrier();
    if (gl_SubgroupID == 0u) {
        v = uintBitsToFloat(0xFF800000u);
        i = NONE;
        bad = false;
        for (uint s = gl_SubgroupInvocationID; s < gl_NumSubgroups; s += gl_SubgroupSize) {
            const float sx = sv[s];
            const uint sj = si[s];
            bad = bad || sbad[s];
            if (sj != NONE && (i == NONE || sx > v || (sx == v && sj < i))) { v = sx; i = sj; }
        }
        reduce(v, i);
        bad = subgroupMax(bad ? 1u : 0u) != 0u; // any (arithmetic, already required: no vote extension)
        if (subgroupElect()) I[gl_WorkGroupID.x] = bad ? NONE : i == NONE ? 0u : i;
    }
}
