// unit_f16.glsl — quants.glsl's groups as float16 (the tensor-core products' operands), for
// kernels that include quants.glsl first and enable 16-bit arithmetic.
#ifdef WTYPE_Q4_0
// Q4_0 in float16 arithmetic: a nibble n in the low bits of a float16 with bits 0x6400 is
// 1024 + n, so an AND and an OR make two values at once and (1024 + n) - 1032 = n - 8 exactly;
// times the float16 scale that rounds once, to what float32 (n - 8) d rounds to (no
// float-to-float16 conversion per value).
f16vec4 unit_vec16(Unit s, uint g) {
    const uint q = ((g & 1u) == 0u ? s.q0 : s.q1) >> (g < 2u ? 0u : 4u);
    const float16_t d = float16_t(s.d);
    const f16vec2 a = (unpackFloat2x16((q & 0x000F000Fu) | 0x64006400u) - float16_t(1032.0)) * d;        // values 0, 2
    const f16vec2 b = (unpackFloat2x16(((q >> 8) & 0x000F000Fu) | 0x64006400u) - float16_t(1032.0)) * d; // values 1, 3
    return f16vec4(a.x, b.x, a.y, b.y);
}
#else
f16vec4 unit_vec16(Unit s, uint g) { return f16vec4(unit_vec(s, g)); }
#endif
