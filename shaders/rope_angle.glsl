// rope_angle.glsl — the rotary embedding's (cos, sin) of pair i at position pos, times the
// magnitude m (YaRN, longrope), for every kernel that rotates: theta = pos * freq (the host's
// table of per-pair frequencies, any scaling applied), kept as th + tl (the exact product) and
// reduced modulo 2 pi with 2 pi as a float plus its remainder, accurate at large angles.
const float TWO_PI_HI = 6.28318548202514648;
const float TWO_PI_LO = -1.7484556000744883e-7;
const float INV_TWO_PI = 0.159154943091895336;

vec2 rope_angle(float pos, float freq, float m) {
    precise float th = pos * freq;
    precise float tl = fma(pos, freq, -th);
    precise float kq = round(th * INV_TWO_PI);
    precise float a0 = fma(-kq, TWO_PI_HI, th);
    precise float a1 = fma(-kq, TWO_PI_LO, a0);
    precise float ang = a1 + tl;
    return vec2(cos(ang), sin(ang)) * m;
}
