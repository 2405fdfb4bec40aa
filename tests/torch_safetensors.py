#!/usr/bin/python3
# tests/torch_safetensors.py — PyTorch's side of tests/torch_safetensors.sh, with its own reader and writer of the
# safetensors format (json + numpy; Debian has no safetensors package): `check FILE DATA ACC` reads glia's file
# strictly (8-byte little-endian header length, JSON with dtype/shape/data_offsets and __metadata__, header padded to
# 8 bytes, tensors back to back, no trailing bytes), loads it into fmnist-cnn's twin with load_state_dict(strict=True)
# and checks its test accuracy equals ACC within 0.1 points; `train FILE DATA` trains the twin 60 steps, writes FILE
# and prints its test accuracy. Not glia.
import gzip
import json
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DT = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


class Net(nn.Module):  # share/glia/examples/fmnist-cnn.ini, layer names as state_dict keys
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = F.dropout(x, 0.25, self.training)
        x = F.dropout(F.relu(self.fc1(torch.flatten(x, 1))), 0.5, self.training)
        return self.fc2(x)


def idx(path, images):
    with gzip.open(path, "rb") as f:
        data = f.read()
    if images:
        n, r, c = np.frombuffer(data[4:16], dtype=">u4")
        return np.frombuffer(data[16:], dtype=np.uint8).reshape(n, 1, r, c)
    return np.frombuffer(data[8:], dtype=np.uint8).astype(np.int64)


def test_set(d):  # glia's normalization of idx images: (x/255 - 0.2860) / 0.3530
    x = torch.from_numpy(((idx(d + "/t10k-images-idx3-ubyte.gz", True).astype(np.float32) / 255.0) - 0.2860) / 0.3530)
    return x, torch.from_numpy(idx(d + "/t10k-labels-idx1-ubyte.gz", False))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        return sum((model(x[b:b + 1000]).argmax(1) == y[b:b + 1000]).sum().item() for b in range(0, len(x), 1000)) / len(x)


def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0, "header length %d is not a multiple of 8" % n
    text = raw[8:8 + n].decode("utf-8")
    assert text.rstrip(" ") == text.rstrip(" ").strip() and text.startswith("{"), "header padded with spaces only"
    header = json.loads(text)
    meta = header.pop("__metadata__", {})
    assert all(isinstance(v, str) for v in meta.values()), "metadata holds strings"
    data, out, spans = raw[8 + n:], {}, []
    for name, e in header.items():
        assert set(e) == {"dtype", "shape", "data_offsets"}, name
        b, end = e["data_offsets"]
        a = np.frombuffer(data[b:end], dtype=np.dtype(DT[e["dtype"]]).newbyteorder("<")).reshape(e["shape"])
        assert a.nbytes == end - b, name
        out[name] = torch.from_numpy(a.copy())
        spans.append((b, end))
    spans.sort()
    at = 0
    for b, end in spans:
        assert b == at, "tensors back to back"
        at = end
    assert at == len(data), "no bytes after the tensors"
    return out


def write(path, tensors):
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        a = t.detach().cpu().numpy().astype("<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        blobs.append(a.tobytes())
        at += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    torch.set_num_threads(2)
    torch.manual_seed(7)
    cmd, path, d = sys.argv[1], sys.argv[2], sys.argv[3]
    x, y = test_set(d)
    model = Net()
    if cmd == "check":
        model.load_state_dict(read(path), strict=True)
        acc, want = accuracy(model, x, y), float(sys.argv[4])
        print("pytorch with glia's weights: test accuracy %.4f (glia %.4f)" % (acc, want))
        if abs(acc - want) > 0.001:
            sys.exit("FAIL: PyTorch scores %.4f with glia's weights, glia %.4f" % (acc, want))
        return
    xtr = torch.from_numpy(((idx(d + "/train-images-idx3-ubyte.gz", True).astype(np.float32) / 255.0) - 0.2860) / 0.3530)
    ytr = torch.from_numpy(idx(d + "/train-labels-idx1-ubyte.gz", False))
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    model.train()
    perm = torch.randperm(len(xtr))
    for s in range(60):
        i = perm[s * 64:(s + 1) * 64]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(xtr[i]), ytr[i]).backward()
        opt.step()
    write(path, model.state_dict())
    print("%.4f" % accuracy(model, x, y))


if __name__ == "__main__":
    main()
