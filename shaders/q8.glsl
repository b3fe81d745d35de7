// q8.glsl — the 8-bit activation blocks of quantize_q8 (for matvec_dot_T). A block of 32 values x has the scale
// d = amax/127 and the values q = round(x / d) (x * (1/d), to nearest even through the 2^23
// bias: the low byte of the biased float's bits is q as int8; |q| <= 127); the stored scale is
// d rounded to f16 (as the CPU's Q8_0/Q8_1).
#extension GL_EXT_integer_dot_product : require

float q8_scale(float amax) { return amax / 127.0; }
float q8_inv(float d) { return d != 0.0 ? 1.0 / d : 0.0; }
float q8_stored(float d) { return unpackHalf2x16(packHalf2x16(vec2(d, 0.0))).x; }
// 4 values to 4 packed int8 (byte i = value i)
uint q8_word(vec4 v, float id) {
    const uvec4 u = floatBitsToUint(fma(v, vec4(id), vec4(12582912.0))) & 0xFFu;
    return u.x | (u.y << 8) | (u.z << 16) | (u.w << 24);
}
// the sum of the 4 int8 of a word
int q8_sum(uint w) { return dotPacked4x8EXT(int(w), 0x01010101); }

#ifdef Q8_STORE
// q8_store: n values of the workgroup's shared `q8src` (n a multiple of 32, written before a
// barrier) as blocks blk0, blk0 + 1, ... of XQ (uint words) and XD, exactly as quantize_q8
// would write them: 8 threads per block, 4 values each (the workgroup size a multiple of 8).
// For kernels that produce a matvec_dot input whole, so it needs no quantize_q8 dispatch.
// Every thread of the workgroup must call it.
shared float q8max[Q8_STORE];
shared uint q8word[Q8_STORE];
void q8_store(uint n, uint blk0) {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x, lane = tid & 7u;
    for (uint g0 = 0u; g0 < n / 4u; g0 += WG) {
        const uint g = g0 + tid;
        const bool live = g < n / 4u;
        const vec4 v = live ? vec4(q8src[4u * g], q8src[4u * g + 1u], q8src[4u * g + 2u], q8src[4u * g + 3u]) : vec4(0.0);
        const vec4 a = abs(v);
        q8max[tid] = max(max(a.x, a.y), max(a.z, a.w));
        barrier();
        float amax = 0.0;
        for (uint j = 0u; j < 8u; j++) amax = max(amax, q8max[(tid & ~7u) + j]);
        const float d = q8_scale(amax);
        const uint w = q8_word(v, q8_inv(d));
        q8word[tid] = w;
        barrier();
        if (live) {
            XQ[(blk0 + g / 8u) * 8u + lane] = w;
            if (lane == 0u) {
                int s = 0;
                for (uint j = 0u; j < 8u; j++) s += q8_sum(q8word[tid + j]);
                XD[blk0 + g / 8u] = vec2(q8_stored(d), float(s));
            }
        }
        barrier();
    }
}
#endif
