#!/usr/bin/python3
# tests/torch_layer_attention.py — glia's CPU attention kernel against torch.nn.functional.scaled_dot_product_attention
# in float64 (nanoGPT's CausalSelfAttention between its two projections: q, k, v = qkv.split(C, 2), each viewed as
# (N, T, heads, D) and transposed, the output transposed back and viewed as (N, T, C)): output and input gradient on
# seeded inputs, causal or not, without dropout. Where torch predates scaled_dot_product_attention (2.0) the same
# formula written out (softmax(q kᵀ / sqrt(D) + mask) v) stands in. Not a gradcheck (test_attention has that); run by
# torch_layers.sh.
import math

import torch
import torchref as T


def sdpa(q, k, v, is_causal):
    f = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if f is not None:
        return f(q, k, v, is_causal=is_causal)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        t = q.shape[-2]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


for (N, L, C), heads, causal in (((2, 5, 8), 2, "on"), ((2, 37, 12), 3, "on"), ((1, 37, 16), 1, "off"),
                                 ((3, 64, 32), 4, "on"), ((2, 20, 6), 2, "off")):
    r = T.Run("[attn]\ntype = attention\nheads = %d\ncausal = %s\n" % (heads, causal), [(N, L, 3 * C)])
    r.forward()
    r.backward()
    qkv = r.input().requires_grad_()
    q, k, v = qkv.split(C, dim=2)
    q, k, v = (t.view(N, L, heads, C // heads).transpose(1, 2) for t in (q, k, v))
    y = sdpa(q, k, v, causal == "on").transpose(1, 2).contiguous().view(N, L, C)
    y.backward(r.output_grad())
    what = "attention (%d, %d, 3x%d), heads %d, causal %s" % (N, L, C, heads, causal)
    T.compare(what + ": output", r.output(), y.detach())
    T.compare(what + ": input gradient", r.input_grad(), qkv.grad)
    r.close()
T.finish("torch_layer_attention")
