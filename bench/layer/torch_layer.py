#!/usr/bin/env python3
# bench/layer/torch_layer.py — the PyTorch side of `glia bench layer`: one op at one shape, dtype and memory
# format, timed forward and forward+backward with CUDA events (warm-up excluded), one JSON line per pass.
# Not glia's side (glia bench layer runs this script and prints both) and not a training benchmark.
#
#   python3 torch_layer.py --op batchnorm --shape 256x64x56x56 --precision bf16 --memory-format channels_last \
#       [--activations auto|f32] [--device cuda] [--steps 50] [--warmup 10]
#   prints {"pass": "forward", "ms": X, "bytes": B} and {"pass": "forward+backward", "ms": Y, "bytes": B2}
#
# The tensors are those the op meets inside a model PyTorch runs at that precision at its best: bf16/fp16 inputs
# (what autocast's convolutions hand a batchnorm or a pool), fp32 for fp32/tf32 or with --activations f32
# (glia's `--activations f32`: fp32 activations at any precision); parameters fp32; the op runs
# under autocast at bf16/fp16 (so cross_entropy computes in fp32, as in such a model). bytes counts
# as glia does: forward = inputs + output; backward = output gradient + the tensors backward reads + input
# gradients, each at its own element size. The ops mirror glia's: batchnorm (training, affine, momentum 0.1,
# eps 1e-5), batchnorm_relu, maxpool and avgpool (3x3, stride 2, padding 1, avgpool counting the padding),
# dropout (p 0.5), cross_entropy (logits (N, K), int64 labels, mean), relu, gelu (erf), cat (two inputs, dim 1),
# linear (GPT-2's MLP fc: (..., C) -> (..., 3072), bias) and linear_gelu (that fc, then F.gelu(approximate='tanh')).
import argparse
import json
import sys

import torch
import torch.nn.functional as F


def parse():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--op", required=True)
    p.add_argument("--shape", required=True)
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16", "fp16"])
    p.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels_last"])
    p.add_argument("--activations", default="auto", choices=["auto", "f32"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    return p.parse_args()


def make(a):
    """(the op over the inputs, the inputs, what its backward reads besides dy: "x", "y" or "")"""
    dev = torch.device(a.device)
    shape = [int(s) for s in a.shape.split("x")]
    lp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision, torch.float32)
    if a.activations == "f32":
        lp = torch.float32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    fmt = torch.channels_last if a.memory_format == "channels_last" and len(shape) == 4 else torch.contiguous_format

    def x_():
        return torch.randn(shape, device=dev, dtype=lp).to(memory_format=fmt).requires_grad_(True)

    op = a.op
    if op in ("batchnorm", "batchnorm_relu"):
        bn = torch.nn.BatchNorm2d(shape[1]).to(dev).to(memory_format=fmt) if len(shape) == 4 else \
            torch.nn.BatchNorm1d(shape[1]).to(dev)
        relu = op == "batchnorm_relu"
        return (lambda x: F.relu(bn(x)) if relu else bn(x)), [x_()], "x"
    if op in ("maxpool", "avgpool"):
        pool = (lambda x: F.max_pool2d(x, 3, 2, 1)) if op == "maxpool" else (lambda x: F.avg_pool2d(x, 3, 2, 1))
        return pool, [x_()], "x" if op == "maxpool" else ""
    if op == "dropout":
        return (lambda x: F.dropout(x, 0.5, True)), [x_()], ""
    if op == "cross_entropy":
        labels = torch.randint(0, shape[1], (shape[0],), device=dev)
        return (lambda x: F.cross_entropy(x, labels)), [x_()], "x"
    if op == "relu":
        return F.relu, [x_()], "y"
    if op == "gelu":
        return F.gelu, [x_()], "x"
    if op == "attention":  # glia's fused qkv (N, T, 3C), 12 heads, causal: F.scaled_dot_product_attention
        n, t, c = shape[0], shape[1], shape[2] // 3
        h = 12

        def att(x):
            q, k, v = x.view(n, t, 3, h, c // h).permute(2, 0, 3, 1, 4).unbind(0)
            if hasattr(F, "scaled_dot_product_attention"):
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # PyTorch before 2.0: the same by its parts
                s = (q @ k.transpose(-2, -1)) / (c // h) ** 0.5
                s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
                y = torch.softmax(s, -1) @ v
            return y.transpose(1, 2).reshape(n, t, c)
        return att, [x_()], "x"
    if op in ("linear", "linear_gelu"):  # GPT-2's MLP fc (C -> 3072), and with its tanh GELU (cuBLAS, then the GELU)
        fc = torch.nn.Linear(shape[-1], 3072).to(dev)
        if op == "linear":
            return fc, [x_()], "x"
        return (lambda x: F.gelu(fc(x), approximate="tanh")), [x_()], "x"
    if op == "layernorm":  # over the last dimension, f32 weight and bias beside the activations' type
        ln = torch.nn.LayerNorm(shape[-1]).to(dev)
        return ln, [x_()], "x"
    if op == "cat":
        return (lambda a_, b_: torch.cat([a_, b_], 1)), [x_(), x_()], ""
    sys.exit("torch_layer.py: unknown op %s" % op)


def nbytes(t):
    return t.numel() * t.element_size()


WARM_S, TIMED_S = 0.2, 0.1  # glia bench layer's floors on a GPU (tools/bench.c): warm-up and timed seconds


def warm_then_timed(fn, warmup, steps, dev):
    """ms per call of fn: warmup calls (on a GPU, more until WARM_S seconds passed: clocks rise only under load), then
    steps timed ones (on a GPU, as many more as fill TIMED_S seconds, counted from the warm-up's), as glia's side"""
    import time
    if dev.type != "cuda":
        if warmup:
            timed(fn, warmup, dev)
        return timed(fn, steps, dev)
    spent, done = 0.0, 0
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    spent, done = time.perf_counter() - t, warmup
    while spent < WARM_S:
        more = done if done > 0 else 1
        t = time.perf_counter()
        for _ in range(more):
            fn()
        torch.cuda.synchronize()
        spent, done = spent + time.perf_counter() - t, done + more
    n = max(steps, int(TIMED_S / (spent / done)) + 1)
    return timed(fn, n, dev)


def timed(fn, n, dev):
    """ms per call of fn over n calls (CUDA events on a GPU)"""
    if dev.type == "cuda":
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0.record()
        for _ in range(n):
            fn()
        t1.record()
        torch.cuda.synchronize()
        return t0.elapsed_time(t1) / n
    import time
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) * 1e3 / n


def main():
    a = parse()
    dev = torch.device(a.device)
    op, xs, reads = make(a)
    lp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)

    def fn(*args):
        if lp is None:  # fp32: no autocast at all (some builds refuse an fp32 autocast even when disabled)
            return op(*args)
        with torch.autocast(dev.type, dtype=lp):
            return op(*args)

    y = fn(*xs)
    dy = torch.randn_like(y)
    labels = 8 * xs[0].shape[0] if a.op == "cross_entropy" else 0
    fwd_bytes = sum(nbytes(x) for x in xs) + nbytes(y) + labels
    read = sum(nbytes(x) for x in xs) if reads == "x" else nbytes(y) if reads == "y" else 0
    bwd_bytes = nbytes(dy) + read + sum(nbytes(x) for x in xs) + labels

    def forward():
        with torch.no_grad():
            fn(*xs)

    def forward_backward():
        for x in xs:
            x.grad = None
        fn(*xs).backward(dy)

    for name, f, b in (("forward", forward, fwd_bytes), ("forward+backward", forward_backward, fwd_bytes + bwd_bytes)):
        ms = warm_then_timed(f, a.warmup, a.steps, dev)
        print(json.dumps({"pass": name, "ms": ms, "bytes": b}), flush=True)


if __name__ == "__main__":
    main()
