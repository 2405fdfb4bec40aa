#!/usr/bin/env python3
# bench/gpt2/torch_gpt2.py — GPT-2 124M (share/glia/examples/gpt2-124m.ini) in PyTorch at its best on one GPU, the
# PyTorch side of bench/gpt2/run.sh: nanoGPT's model (pre-norm blocks, fused qkv, F.scaled_dot_product_attention
# causal, GPT-2's tanh GELU, tied lm_head, vocab 50304), bf16 autocast, torch.compile, fused AdamW (0.9, 0.95, weight decay
# 0.1 on the 2-D weights), clipping 1, a linear warmup then a constant rate, random windows of llm.c token files, the data on
# the GPU. Prints a JSON line per logged step (loss) and one summary line: ms per step after the warm-up, tokens/s,
# MFU by 6N + 6·L·C·T FLOPs per token against the given peak, peak memory. --profile N then runs N more steps under
# torch.profiler and prints their CUDA kernels on stderr (bench/torch_kernels.py). --device cpu --compile off runs the
# same recipe in fp32 on the CPU (any PyTorch from 1.13: attention written out where SDPA is missing), to check the
# script and a few steps without a GPU (124M parameters: seconds a step). Not glia, and not a test.
import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from torch_kernels import print_kernels  # noqa: E402  (bench/torch_kernels.py)


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        n, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(n, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch before 2.0 (Debian's, for --device cpu): the same causal softmax attention written out
            a = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            a = a.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = a.softmax(dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).contiguous().view(n, t, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, t, c, layers, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(t, c)
        self.blocks = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        self.lm_head = nn.Linear(c, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        for name, p in self.named_parameters():  # GPT-2's init: N(0, 0.02), the residual projections scaled
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "fc2.weight")) else 0.02
                nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def tokens(pattern):
    out = []
    for f in sorted(glob.glob(pattern)):
        head = np.fromfile(f, dtype=np.int32, count=256)
        assert head[0] == 20240520, "%s: not an llm.c token file" % f
        out.append(np.fromfile(f, dtype=np.uint16, offset=1024)[: head[2]])
    if not out:
        raise SystemExit("torch_gpt2.py: no files match %s" % pattern)
    return torch.from_numpy(np.concatenate(out).astype(np.int64))


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--train", required=True, help="llm.c token files (glob)")
    a.add_argument("--batch", type=int, default=16)
    a.add_argument("--seq-len", type=int, default=1024)
    a.add_argument("--steps", type=int, default=60, help="measured steps (after --warmup)")
    a.add_argument("--warmup", type=int, default=10)
    a.add_argument("--lr", type=float, default=6e-4)
    a.add_argument("--warmup-lr-steps", type=int, default=700)
    a.add_argument("--compile", default="on", choices=["on", "off"])
    a.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak (H100/H200 SXM: 989)")
    a.add_argument("--log-every", type=int, default=10)
    a.add_argument("--seed", type=int, default=1337)
    a.add_argument("--profile", type=int, default=0, help="N: after the timed steps, N more under torch.profiler")
    a.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: fp32, no autocast, AdamW unfused, for checking the recipe against glia on the CPU")
    a.add_argument("--threads", type=int, default=0, help="--device cpu: torch.set_num_threads (0: as it is)")
    o = a.parse_args()
    dev = torch.device(o.device)
    cuda = o.device == "cuda"
    if o.threads:
        torch.set_num_threads(o.threads)
    torch.manual_seed(o.seed)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    L, C, H, V, T = 12, 768, 12, 50304, o.seq_len
    data = tokens(o.train).to(dev)  # on the device: batches cut there
    model = GPT(V, T, C, L, H).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=o.lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if cuda else {}))
    step_model = torch.compile(model) if o.compile == "on" else model
    g = torch.Generator(device=dev).manual_seed(o.seed)
    offs = torch.arange(T + 1, device=dev)

    def batch():
        ix = torch.randint(len(data) - T - 1, (o.batch,), device=dev, generator=g)
        w = data[ix[:, None] + offs]
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def step(k):
        x, y = batch()
        for grp in opt.param_groups:
            grp["lr"] = o.lr * min(1.0, k / o.warmup_lr_steps)
        if cuda:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(x, y)
        else:
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = 0.0
    for k in range(1, o.warmup + o.steps + 1):
        if k == o.warmup + 1:  # the timed steps start here, compiled and warm
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
        loss = step(k)
        if k % o.log_every == 0:
            print(json.dumps({"side": "pytorch", "step": k, "loss": loss.item()}), flush=True)
    if cuda:
        torch.cuda.synchronize()
    ms = 1e3 * (time.perf_counter() - t0) / o.steps
    tok_s = o.batch * T / (ms * 1e-3)
    flops_per_token = 6 * n_params + 6 * L * C * T  # the formula, n_params counting wte once
    print(json.dumps({"side": "pytorch", "torch": torch.__version__, "compile": o.compile, "batch": o.batch,
                      "seq_len": T, "params": n_params, "ms_per_step": ms, "tokens_per_s": tok_s,
                      "mfu": tok_s * flops_per_token / (o.peak_tflops * 1e12),
                      "peak_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
                      "gpu": torch.cuda.get_device_name() if cuda else "cpu"}))
    if o.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for k in range(o.profile):
                step(o.warmup + o.steps + 1 + k)
            torch.cuda.synchronize()
        print_kernels(prof, o.profile)


if __name__ == "__main__":
    main()
