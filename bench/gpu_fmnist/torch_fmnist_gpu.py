#!/usr/bin/env python3
# bench/gpu_fmnist/torch_fmnist_gpu.py — PyTorch side of bench/gpu_fmnist: the networks of
# share/glia/examples/fmnist-cnn.ini and fmnist-resnet.ini trained the way PyTorch's performance-
# tuning guide says (cudnn.benchmark, autocast, channels_last, zero_grad(set_to_none=True), a
# DataLoader with pinned memory and persistent workers, non-blocking copies, no per-step host sync);
# prints one JSON line per epoch. Not a glia test. Hyper-parameters are read from the INI file.
#   usage: torch_fmnist_gpu.py DATA_DIR cnn|resnet [--ini FILE] [--epochs N] [--precision bf16]
#          [--memory-format channels_last] [--cudnn-benchmark on] [--seed 1] [--device cuda]
#          [--train-samples N] [--test-samples N]
import argparse
import configparser
import gzip
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def idx(path, images, limit):
    with gzip.open(path, 'rb') as f:
        data = f.read()
    if images:
        n, r, c = np.frombuffer(data[4:16], dtype='>u4')
        a = np.frombuffer(data[16:], dtype=np.uint8).reshape(n, 1, r, c)
    else:
        a = np.frombuffer(data[8:], dtype=np.uint8).astype(np.int64)
    return a[:limit] if limit > 0 else a


class CNN(nn.Module):  # fmnist-cnn.ini: pytorch/examples mnist/main.py
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.drop1 = nn.Dropout(0.25)
        self.drop2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.drop1(F.max_pool2d(x, 2))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(self.drop2(x))


def conv_bn(cin, cout):
    # glia's drop_bias_before_norm pass removes the bias of a convolution feeding a batchnorm
    return nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout)


class ResNet(nn.Module):  # fmnist-resnet.ini
    def __init__(self):
        super().__init__()
        self.stem, self.stem_bn = conv_bn(1, 16)
        self.b1_conv1, self.b1_bn1 = conv_bn(16, 16)
        self.b1_conv2, self.b1_bn2 = conv_bn(16, 16)
        self.wide, self.wide_bn = conv_bn(16, 32)
        self.b2_conv1, self.b2_bn1 = conv_bn(32, 32)
        self.b2_conv2, self.b2_bn2 = conv_bn(32, 32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.stem_bn(self.stem(x))), 2)            # 16x14x14
        y = F.relu(self.b1_bn1(self.b1_conv1(x)))
        x = F.relu(x + self.b1_bn2(self.b1_conv2(y)))
        x = F.max_pool2d(F.relu(self.wide_bn(self.wide(x))), 2)            # 32x7x7
        y = F.relu(self.b2_bn1(self.b2_conv1(x)))
        x = F.relu(x + self.b2_bn2(self.b2_conv2(y)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def ini_settings(path):
    """[data], [train] and [optimizer] of a glia model file, with glia's defaults."""
    c = configparser.ConfigParser(inline_comment_prefixes=(';', '#'), strict=False)
    c.read(path)
    g = lambda s, k, d: c.get(s, k, fallback=d) if c.has_section(s) else d
    return {
        'batch': int(g('data', 'batch_size', 64)), 'test_batch': int(g('data', 'test_batch_size', 1000)),
        'workers': int(g('data', 'workers', 2)), 'mean': float(g('data', 'mean', 0.2860)),
        'std': float(g('data', 'std', 0.3530)), 'epochs': int(g('train', 'epochs', 1)),
        'optimizer': g('train', 'optimizer', 'sgd'), 'lr': float(g('train', 'lr', 0.01)),
        'schedule': g('train', 'schedule', 'constant'), 'gamma': float(g('train', 'gamma', 0.1)),
        'step_epochs': int(g('train', 'step_epochs', 1)), 'min_lr': float(g('train', 'min_lr', 0)),
        'opt': {k: number(v) for k, v in (c.items('optimizer') if c.has_section('optimizer') else [])},
    }


def number(v):
    """An INI value as a float (on/off/true/false as 1/0)."""
    b = {'on': 1.0, 'true': 1.0, 'yes': 1.0, 'off': 0.0, 'false': 0.0, 'no': 0.0}
    return b[v.lower()] if v.lower() in b else float(v)


def lr_at(s, epoch):
    """glia's schedule (core/train.c): StepLR / CosineAnnealingLR stepped once per epoch."""
    if s['schedule'] == 'step':
        return s['lr'] * s['gamma'] ** ((epoch - 1) // s['step_epochs'])
    if s['schedule'] == 'cosine':
        return s['min_lr'] + (s['lr'] - s['min_lr']) * 0.5 * (1 + math.cos(math.pi * (epoch - 1) / s['epochs']))
    return s['lr']


def make_optimizer(s, params, cuda):
    o = s['opt']
    if s['optimizer'] == 'adadelta':
        return torch.optim.Adadelta(params, lr=s['lr'], rho=o.get('rho', 0.9), eps=o.get('eps', 1e-6),
                                    weight_decay=o.get('weight_decay', 0))
    if s['optimizer'] in ('adam', 'adamw'):
        cls = torch.optim.AdamW if s['optimizer'] == 'adamw' else torch.optim.Adam
        wd = o.get('weight_decay', 0.01 if s['optimizer'] == 'adamw' else 0)
        fused = {'fused': True} if cuda else {}  # one kernel per step, as glia's fused CUDA optimizers
        return cls(params, lr=s['lr'], betas=(o.get('beta1', 0.9), o.get('beta2', 0.999)), eps=o.get('eps', 1e-8),
                   weight_decay=wd, **fused)
    if s['optimizer'] == 'sgd':
        return torch.optim.SGD(params, lr=s['lr'], momentum=o.get('momentum', 0), dampening=o.get('dampening', 0),
                               weight_decay=o.get('weight_decay', 0), nesterov=bool(o.get('nesterov', 0)))
    raise SystemExit(f"torch_fmnist_gpu.py: optimizer '{s['optimizer']}' is not mirrored here")


def loaders(a, s, cuda):
    norm = lambda x: torch.from_numpy(((x.astype(np.float32) / 255.0) - s['mean']) / s['std'])
    d = a.data_dir
    tr = torch.utils.data.TensorDataset(norm(idx(d + '/train-images-idx3-ubyte.gz', True, a.train_samples)),
                                        torch.from_numpy(idx(d + '/train-labels-idx1-ubyte.gz', False, a.train_samples)))
    te = torch.utils.data.TensorDataset(norm(idx(d + '/t10k-images-idx3-ubyte.gz', True, a.test_samples)),
                                        torch.from_numpy(idx(d + '/t10k-labels-idx1-ubyte.gz', False, a.test_samples)))
    w = s['workers']
    kw = dict(pin_memory=cuda, num_workers=w, persistent_workers=w > 0)
    g = torch.Generator()
    g.manual_seed(a.seed)
    return (torch.utils.data.DataLoader(tr, batch_size=s['batch'], shuffle=True, generator=g, **kw),
            torch.utils.data.DataLoader(te, batch_size=s['test_batch'], shuffle=False, **kw))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('data_dir')
    ap.add_argument('model', choices=['cnn', 'resnet'])
    ap.add_argument('--ini', help='glia model file (default: share/glia/examples/fmnist-MODEL.ini)')
    ap.add_argument('--epochs', type=int, default=0, help='0: as the INI file says')
    ap.add_argument('--precision', choices=['fp32', 'tf32', 'bf16', 'fp16'], default='bf16')
    ap.add_argument('--memory-format', choices=['contiguous', 'channels_last'], default='channels_last')
    ap.add_argument('--cudnn-benchmark', choices=['on', 'off'], default='on')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--train-samples', type=int, default=0)
    ap.add_argument('--test-samples', type=int, default=0)
    a = ap.parse_args()
    s = ini_settings(a.ini or f'share/glia/examples/fmnist-{a.model}.ini')
    if a.epochs:
        s['epochs'] = a.epochs
    dev = torch.device(a.device)
    cuda = dev.type == 'cuda'
    if cuda and not torch.cuda.is_available():
        raise SystemExit('torch_fmnist_gpu.py: needs a CUDA device: torch.cuda.is_available() is False')
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = a.cudnn_benchmark == 'on'
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = a.precision == 'tf32'
    low = {'bf16': torch.bfloat16, 'fp16': torch.float16}.get(a.precision)
    autocast = lambda: torch.autocast(device_type=dev.type, dtype=low or torch.bfloat16, enabled=low is not None)
    if hasattr(torch.amp, 'GradScaler'):
        scaler = torch.amp.GradScaler(dev.type, enabled=a.precision == 'fp16')
    else:  # PyTorch before 2.3
        scaler = torch.cuda.amp.GradScaler(enabled=a.precision == 'fp16' and cuda)
    mf = torch.channels_last if a.memory_format == 'channels_last' else torch.contiguous_format
    model = (CNN() if a.model == 'cnn' else ResNet()).to(dev).to(memory_format=mf)
    opt = make_optimizer(s, model.parameters(), cuda)
    train, test = loaders(a, s, cuda)
    n_train, n_test = len(train.dataset), len(test.dataset)
    for epoch in range(1, s['epochs'] + 1):
        lr = lr_at(s, epoch)
        for group in opt.param_groups:
            group['lr'] = lr
        model.train()
        loss_sum = torch.zeros((), device=dev)
        sync()
        t0 = time.perf_counter()
        for x, y in train:
            x = x.to(dev, non_blocking=True, memory_format=mf)
            y = y.to(dev, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            loss_sum += loss.detach().float() * x.shape[0]  # read once per epoch: no per-step sync
        sync()
        train_s = time.perf_counter() - t0
        model.eval()
        correct = torch.zeros((), dtype=torch.int64, device=dev)
        with torch.no_grad(), autocast():
            for x, y in test:
                x = x.to(dev, non_blocking=True, memory_format=mf)
                correct += (model(x).argmax(1) == y.to(dev, non_blocking=True)).sum()
        print(json.dumps({'epoch': epoch, 'lr': lr, 'train_loss': loss_sum.item() / n_train,
                          'test_accuracy': correct.item() / n_test, 'train_seconds': train_s,
                          'samples_per_s': n_train / train_s, 'torch': torch.__version__,
                          'device_peak_mb': torch.cuda.max_memory_allocated(dev) / 2**20 if cuda else None}), flush=True)


if __name__ == '__main__':
    main()
