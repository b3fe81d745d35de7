// What the attention kernels share beyond softmax(q.k)v, read from their Params `p`:
//   softcap > 0: a score s becomes softcap * tanh(s / softcap) (Gemma 2);
//   window > 0:  a query at position q sees keys q - window + 1 .. q (sliding-window layers).
float softcapped(float s) { return p.softcap > 0.0 ? p.softcap * tanh(clamp(s / p.softcap, -15.0, 15.0)) : s; }

// The first key of a query that sees keys 0 .. nkeys - 1 without a window.
uint first_key(uint nkeys) { return p.window > 0u && nkeys > p.window ? nkeys - p.window : 0u; }
