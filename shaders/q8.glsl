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
