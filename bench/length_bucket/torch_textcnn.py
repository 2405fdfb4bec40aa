#!/usr/bin/env python3
"""bench/length_bucket/torch_textcnn.py — the PyTorch side of the length-bucketing benchmark:
text-cnn.ini's network (Embedding(padding_idx=0), Conv1d(64, 128, 3, padding=1), ReLU, max over
the unpadded positions, Linear) trained for one epoch on the same token files, with random
batches or with length-grouped batches made by the rule glia's group_by_length uses (runs of
group_size batches sorted by length, longest first, then the batches shuffled). Each batch is
padded to its longest sample, rounded up to pad_to_multiple. Prints one JSON line: train
seconds, samples/s, the padding share, test accuracy. Not a test.
   usage: torch_textcnn.py DATADIR --group on|off [--threads N] [--seed S] [--batch B]
          [--group-size G] [--pad-multiple M] [--device cpu|cuda]"""
import argparse, json, random, time
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument('data')
p.add_argument('--group', default='off')
p.add_argument('--threads', type=int, default=0)
p.add_argument('--seed', type=int, default=1)
p.add_argument('--batch', type=int, default=64)
p.add_argument('--test-batch', type=int, default=500)
p.add_argument('--group-size', type=int, default=50)
p.add_argument('--pad-multiple', type=int, default=8)
p.add_argument('--vocab', type=int, default=2000)
p.add_argument('--device', default='cpu')
a = p.parse_args()
if a.threads > 0:
    torch.set_num_threads(a.threads)
torch.manual_seed(a.seed)
dev = torch.device(a.device)

def read(path):
    xs, ys = [], []
    with open(path) as f:
        for line in f:
            v = line.split()
            if not v or v[0].startswith('#'):
                continue
            ys.append(int(v[0]))
            xs.append(torch.tensor([int(t) for t in v[1:]], dtype=torch.long))
    return xs, torch.tensor(ys, dtype=torch.long)

train_x, train_y = read(a.data + '/train.txt')
test_x, test_y = read(a.data + '/test.txt')
classes = int(max(train_y.max(), test_y.max())) + 1

class TextCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(a.vocab, 64, padding_idx=0)
        self.conv = nn.Conv1d(64, 128, 3, padding=1)
        self.fc = nn.Linear(128, 4)
    def forward(self, ids):                      # ids (N, L), 0 = padding
        h = F.relu(self.conv(self.emb(ids).transpose(1, 2)))        # (N, 128, L)
        h = h.masked_fill((ids == 0).unsqueeze(1), float('-inf')).amax(dim=2)
        return self.fc(torch.nan_to_num(h, neginf=0.0))             # rows with no token: 0

def batches(n, lengths, batch, group, shuffle, rng):
    order = list(range(n))
    if shuffle:
        rng.shuffle(order)
    if group:
        run = a.group_size * batch if shuffle else n
        for s in range(0, n, run):
            order[s:s + run] = sorted(order[s:s + run], key=lambda i: -lengths[i])  # stable
        whole = n // batch
        if shuffle and whole > 1:
            perm = list(range(whole))
            rng.shuffle(perm)
            order = [i for b in perm for i in order[b * batch:(b + 1) * batch]] + order[whole * batch:]
    return [order[s:s + batch] for s in range(0, n, batch)]

def pad(xs, idx):
    m = a.pad_multiple
    L = max(1, max(len(xs[i]) for i in idx))
    L = (L + m - 1) // m * m
    out = torch.zeros(len(idx), L, dtype=torch.long)
    for r, i in enumerate(idx):
        out[r, :len(xs[i])] = xs[i]
    return out

model = TextCNN().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
rng = random.Random(a.seed)
group = a.group == 'on'
lens = [len(x) for x in train_x]
plan = batches(len(train_x), lens, a.batch, group, True, rng)
model.train()
slots = real = 0
t0 = time.perf_counter()
for idx in plan:
    x = pad(train_x, idx).to(dev, non_blocking=True)
    slots += x.numel()
    real += sum(lens[i] for i in idx)
    loss = F.cross_entropy(model(x), train_y[idx].to(dev))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
if dev.type == 'cuda':
    torch.cuda.synchronize()
train_s = time.perf_counter() - t0
model.eval()
correct = 0
with torch.no_grad():
    for idx in batches(len(test_x), [len(x) for x in test_x], a.test_batch, group, False, rng):
        correct += int((model(pad(test_x, idx).to(dev)).argmax(1).cpu() == test_y[idx]).sum())
print(json.dumps({'train_s': train_s, 'samples_per_s': len(train_x) / train_s, 'pad_frac': 1 - real / slots,
                  'test_accuracy': correct / len(test_x)}))
