#!/usr/bin/env python3
"""Last-position logits of a prompt from a float64 numpy forward pass over a GGUF file: the same
math as ../shared/tools/ref_llama.py (its Llama class loads and dequantizes the weights), but
all prompt positions at once, so a 1.1B model with a 100-token prompt takes seconds.
Usage: numpy_logits.py MODEL.gguf PROMPT.json OUT.npy   (PROMPT.json: {"prompt": [ids...]})
"""
import json, os, sys
import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("VELO_SHARED", os.path.join(os.path.dirname(__file__), "../../../shared")), "tools"))
from ref_llama import Llama  # noqa: E402

path, prompt_file, out = sys.argv[1:4]
toks = json.load(open(prompt_file))["prompt"]
m = Llama(path)
T = m.T
n, H, KV, hd = len(toks), m.n_head, m.n_head_kv, m.head_dim
W = lambda name: T[name].astype(np.float64)
rms = lambda x, w: x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + m.eps) * w
half = m.n_rot // 2
theta = np.arange(n)[:, None] * m.rope_base ** (-2.0 * np.arange(half) / m.n_rot)
cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]


def rope(q):  # (n, heads, hd), pairs (2i, 2i+1) as ref_llama.py
    q = q.copy()
    a, b = q[:, :, 0:m.n_rot:2].copy(), q[:, :, 1:m.n_rot:2].copy()
    q[:, :, 0:m.n_rot:2], q[:, :, 1:m.n_rot:2] = a * cos - b * sin, a * sin + b * cos
    return q


mask = np.triu(np.full((n, n), -np.inf), 1)
x = m.tok_embd[toks].astype(np.float64)
for l in range(m.n_layer):
    p = "blk.%d." % l
    h = rms(x, T[p + "attn_norm.weight"])
    q = rope((h @ W(p + "attn_q.weight").T).reshape(n, H, hd))
    k = rope((h @ W(p + "attn_k.weight").T).reshape(n, KV, hd))
    v = (h @ W(p + "attn_v.weight").T).reshape(n, KV, hd)
    att = np.zeros((n, H, hd))
    for hh in range(H):
        s = q[:, hh, :] @ k[:, hh // (H // KV), :].T / np.sqrt(hd) + mask
        s = np.exp(s - s.max(axis=1, keepdims=True))
        att[:, hh, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, hh // (H // KV), :]
    x = x + att.reshape(n, -1) @ W(p + "attn_output.weight").T
    h = rms(x, T[p + "ffn_norm.weight"])
    a, b = h @ W(p + "ffn_gate.weight").T, h @ W(p + "ffn_up.weight").T
    x = x + (a / (1 + np.exp(-a)) * b) @ W(p + "ffn_down.weight").T
xl = rms(x[-1], T["output_norm.weight"])
np.save(out, (W("output.weight") if "output.weight" in T else m.tok_embd.astype(np.float64)) @ xl)
