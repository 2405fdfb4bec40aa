#!/usr/bin/python3
# bench/gpt_bytes/model.py — share/glia/examples/gpt-bytes.ini written in PyTorch the way nanoGPT writes its GPT
# (pre-norm blocks, fused qkv projection, causal self-attention, erf GELU, tied lm_head), trained with the same
# hyper-parameters on the same bytes: AdamW (0.9, 0.95), weight decay 0.1 on the 2-D weights, clipping 1, warmup then
# glia's per-epoch cosine, random windows, validation on the first val_batches x test_batch_size sequential windows
# of the last val_fraction of the bytes. Prints one JSON line. Not glia: the PyTorch side of bench/gpt_bytes/run.sh.
import argparse
import glob
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def attention(self, x):
        n, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(n, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0: nanoGPT's own path
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(n, t, c))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, t, c, layers, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(t, c)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        self.lm_head = nn.Linear(c, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--files", default="/usr/share/games/fortunes/*.u8")
    a.add_argument("--val-fraction", type=float, default=0.1)
    a.add_argument("--seq-len", type=int, default=64)
    a.add_argument("--batch", type=int, default=12)
    a.add_argument("--test-batch", type=int, default=12)
    a.add_argument("--layers", type=int, default=4)
    a.add_argument("--heads", type=int, default=4)
    a.add_argument("--width", type=int, default=128)
    a.add_argument("--steps-per-epoch", type=int, default=100)
    a.add_argument("--epochs", type=int, default=20)
    a.add_argument("--val-batches", type=int, default=20)
    a.add_argument("--lr", type=float, default=1e-3)
    a.add_argument("--min-lr", type=float, default=1e-4)
    a.add_argument("--warmup", type=int, default=100)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--seed", type=int, default=1337)
    o = a.parse_args()
    torch.set_num_threads(o.threads)
    torch.manual_seed(o.seed)
    data = b"".join(open(f, "rb").read() for f in sorted(glob.glob(o.files)))
    cut = len(data) - int(len(data) * o.val_fraction)
    train = torch.tensor(list(data[:cut]), dtype=torch.long)
    val = torch.tensor(list(data[cut:]), dtype=torch.long)
    T = o.seq_len
    model = GPT(256, T, o.width, o.layers, o.heads)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=o.lr, betas=(0.9, 0.95), eps=1e-8)

    def lr_at(step, epoch):  # glia: warmup lr·k/W, then [train] schedule = cosine per epoch
        if step <= o.warmup:
            return o.lr * step / o.warmup
        return o.min_lr + (o.lr - o.min_lr) * (1 + math.cos(math.pi * (epoch - 1) / o.epochs)) / 2

    def evaluate():
        model.eval()
        total, n = 0.0, 0
        with torch.no_grad():
            starts = list(range(0, len(val) - T, T))[: o.val_batches * o.test_batch]
            for i in range(0, len(starts), o.test_batch):
                s = starts[i:i + o.test_batch]
                x = torch.stack([val[j:j + T] for j in s])
                y = torch.stack([val[j + 1:j + T + 1] for j in s])
                total += model(x, y).item() * len(s)
                n += len(s)
        model.train()
        return total / n

    step, t_train = 0, 0.0
    g = torch.Generator().manual_seed(o.seed)
    for epoch in range(1, o.epochs + 1):
        t0 = time.perf_counter()
        for _ in range(o.steps_per_epoch):
            step += 1
            ix = torch.randint(len(train) - T - 1, (o.batch,), generator=g)
            x = torch.stack([train[i:i + T] for i in ix])
            y = torch.stack([train[i + 1:i + T + 1] for i in ix])
            for grp in opt.param_groups:
                grp["lr"] = lr_at(step, epoch)
            loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        t_train += time.perf_counter() - t0
    print(json.dumps({"side": "pytorch", "torch": torch.__version__, "steps": step, "val_loss": evaluate(),
                      "train_loss_last": loss.item(), "ms_per_step": 1e3 * t_train / step, "threads": o.threads}))


if __name__ == "__main__":
    main()
