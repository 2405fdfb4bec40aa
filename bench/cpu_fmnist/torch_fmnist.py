#!/usr/bin/python3
# bench/cpu_fmnist/torch_fmnist.py — PyTorch side of the CPU Fashion-MNIST benchmark: the
# network of PyTorch's MNIST example, Adadelta lr 1.0, batch 64, one epoch; prints one JSON
# line with the training seconds and the test accuracy. Not a glia test.
import gzip, json, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

def idx(path, images):
    with gzip.open(path, 'rb') as f:
        data = f.read()
    if images:
        n, r, c = np.frombuffer(data[4:16], dtype='>u4')
        return np.frombuffer(data[16:], dtype=np.uint8).reshape(n, 1, r, c)
    return np.frombuffer(data[8:], dtype=np.uint8).astype(np.int64)

class Net(nn.Module):  # pytorch/examples mnist/main.py
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)
    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return self.fc2(x)

def main():
    d, threads, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    norm = lambda a: torch.from_numpy(((a.astype(np.float32) / 255.0) - 0.2860) / 0.3530)
    xtr = norm(idx(d + '/train-images-idx3-ubyte.gz', True)); ytr = torch.from_numpy(idx(d + '/train-labels-idx1-ubyte.gz', False))
    xte = norm(idx(d + '/t10k-images-idx3-ubyte.gz', True)); yte = torch.from_numpy(idx(d + '/t10k-labels-idx1-ubyte.gz', False))
    model = Net()
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    model.train()
    t0 = time.perf_counter()
    perm = torch.randperm(xtr.shape[0])
    for b in range(0, xtr.shape[0], 64):
        i = perm[b:b + 64]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xtr[i]), ytr[i])
        loss.backward()
        opt.step()
    train_s = time.perf_counter() - t0
    model.eval()
    correct = 0
    with torch.no_grad():
        for b in range(0, xte.shape[0], 1000):
            correct += (model(xte[b:b + 1000]).argmax(1) == yte[b:b + 1000]).sum().item()
    print(json.dumps({"train_seconds": train_s, "test_accuracy": correct / xte.shape[0],
                      "torch": torch.__version__, "threads": threads}))

main()
