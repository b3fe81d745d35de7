// The gated MLP's activation of its gate value g (act: 1 = SiLU, 2 = tanh-approximated GELU,
// ggml_gelu's formula); the argument of tanh is clamped where tanh is already ±1 in float, so
// no implementation's exp overflows into inf/inf.
float glu_act(float g, uint act) {
    if (act == 2u) return 0.5 * g * (1.0 + tanh(clamp(0.7978845608028654 * g * (1.0 + 0.044715 * g * g), -15.0, 15.0)));
    return g / (1.0 + exp(-g));
}

// act(g) * u, where act 3 is gpt-oss's clamped SwiGLU (swift's ck_swiglu_clamped): with
// x = min(g, limit), x * sigmoid(alpha x) * (clamp(u, -limit, limit) + 1).
float glu_pair(float g, float u, uint act, float alpha, float limit) {
    if (act == 3u) {
        const float x = min(g, limit);
        return x / (1.0 + exp(alpha * -x)) * (clamp(u, -limit, limit) + 1.0);
    }
    return glu_act(g, act) * u;
}
