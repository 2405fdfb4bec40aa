#!/usr/bin/env python3
# bench/gpu_fmnist/torch_fmnist_gpu.py — PyTorch side of bench/gpu_fmnist: the networks of
# share/glia/examples/fmnist-cnn.ini and fmnist-resnet.ini trained the way PyTorch's performance-
# tuning guide says (cudnn.benchmark, autocast, channels_last, zero_grad(set_to_none=True), no per-step
# host sync), fed in one of five ways (--variant), so that glia is compared with PyTorch at its best:
#   loader          a DataLoader over host tensors, pinned memory, persistent workers, non-blocking copies
#   eager           the whole data set as uint8 on the device; each epoch a permutation made on the device;
#                   [data] random_crop_padding / random_flip / mean, std as tensor ops on the device
#   graph           eager's data, and the whole training step (forward, backward, the optimizer: Adam/AdamW
#                   with capturable=True and a tensor lr, the others foreach; the gradients written, not
#                   accumulated, as set_to_none leaves them) captured once in torch.cuda.graph with static
#                   input buffers after warm-up on a side stream, replayed per batch; the partial last batch of
#                   an epoch is dropped; CUDA only
#   compile         eager with torch.compile(model, mode="max-autotune-no-cudagraphs")
#   compile-graphs  eager with torch.compile(model, mode="reduce-overhead") (its CUDA graphs); CUDA only
# Prints one JSON line per epoch; a variant that cannot run here prints why on stderr and exits 3. --profile N
# (eager and graph) records N training steps of the first epoch, after PROFILE_WARM steps, with torch.profiler and
# prints their CUDA kernels on stderr (launches per step, total and mean microseconds): that epoch's time then
# counts the profiler's.
# Not a glia test. Hyper-parameters and the data's augmentation and normalization are read from the INI file.
#   usage: torch_fmnist_gpu.py DATA_DIR cnn|resnet [--variant loader] [--ini FILE] [--epochs N]
#          [--precision bf16] [--memory-format channels_last] [--cudnn-benchmark on] [--seed 1]
#          [--device cuda] [--train-samples N] [--test-samples N] [--profile N]
import argparse
import configparser
import gzip
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from torch_kernels import print_kernels  # noqa: E402  (bench/torch_kernels.py)
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


class Unavailable(Exception):
    """A variant that cannot run here (no CUDA, an old PyTorch, a setting it does not mirror)."""


def ini_settings(path):
    """[data], [train] and [optimizer] of a glia model file, with glia's defaults."""
    c = configparser.ConfigParser(inline_comment_prefixes=(';', '#'), strict=False)
    if not c.read(path):
        raise SystemExit(f'torch_fmnist_gpu.py: cannot read {path}')
    g = lambda s, k, d: c.get(s, k, fallback=d) if c.has_section(s) else d
    floats = lambda v: [float(x) for x in str(v).split(',')]
    sched, warm = g('train', 'schedule', 'constant'), int(g('train', 'warmup_steps', 0))
    if sched not in ('constant', 'step', 'cosine') or warm:  # lr_at follows the per-epoch schedules only
        raise SystemExit(f'torch_fmnist_gpu.py: {path}: [train] schedule = {sched}, warmup_steps = {warm}: '
                         'only constant, step and cosine without warmup are mirrored here')
    return {
        'batch': int(g('data', 'batch_size', 64)), 'test_batch': int(g('data', 'test_batch_size', 1000)),
        'workers': int(g('data', 'workers', 2)), 'mean': floats(g('data', 'mean', 0.2860)),
        'std': floats(g('data', 'std', 0.3530)), 'pad': int(g('data', 'random_crop_padding', 0)),
        'flip': bool(number(g('data', 'random_flip', 'off'))), 'epochs': int(g('train', 'epochs', 1)),
        'optimizer': g('train', 'optimizer', 'sgd'), 'lr': float(g('train', 'lr', 0.01)),
        'schedule': g('train', 'schedule', 'constant'), 'gamma': float(g('train', 'gamma', 0.1)),
        'step_epochs': int(g('train', 'step_epochs', 1)), 'min_lr': float(g('train', 'min_lr', 0)),
        'opt': {k: number(v) for k, v in (c.items('optimizer') if c.has_section('optimizer') else [])},
    }


def number(v):
    """An INI value as a float (on/off/true/false as 1/0)."""
    b = {'on': 1.0, 'true': 1.0, 'yes': 1.0, 'off': 0.0, 'false': 0.0, 'no': 0.0}
    return b[str(v).lower()] if str(v).lower() in b else float(v)


def lr_at(s, epoch):
    """glia's schedule (core/train.c): StepLR / CosineAnnealingLR stepped once per epoch."""
    if s['schedule'] == 'step':
        return s['lr'] * s['gamma'] ** ((epoch - 1) // s['step_epochs'])
    if s['schedule'] == 'cosine':
        return s['min_lr'] + (s['lr'] - s['min_lr']) * 0.5 * (1 + math.cos(math.pi * (epoch - 1) / s['epochs']))
    return s['lr']


def make_optimizer(s, params, dev, graph):
    """The INI's optimizer. graph: state and lr on the device so that a captured step replays it (Adam and AdamW
    with capturable=True and a tensor lr; Adadelta capturable with a Python lr; SGD foreach with a Python lr):
    the caller captures again when a Python lr changes."""
    o, cuda = s['opt'], dev.type == 'cuda'
    if s['optimizer'] == 'adadelta':
        kw = {'capturable': True, 'foreach': True} if graph else {}
        return torch.optim.Adadelta(params, lr=s['lr'], rho=o.get('rho', 0.9), eps=o.get('eps', 1e-6),
                                    weight_decay=o.get('weight_decay', 0), **kw)
    if s['optimizer'] in ('adam', 'adamw'):
        cls = torch.optim.AdamW if s['optimizer'] == 'adamw' else torch.optim.Adam
        wd = o.get('weight_decay', 0.01 if s['optimizer'] == 'adamw' else 0)
        if graph:  # fused and capturable: one kernel per step, replayable, its lr a device tensor
            kw, lr = {'fused': True, 'capturable': True}, torch.tensor(s['lr'], device=dev)
        else:  # one kernel per step, as glia's fused CUDA optimizers
            kw, lr = ({'fused': True} if cuda else {}), s['lr']
        return cls(params, lr=lr, betas=(o.get('beta1', 0.9), o.get('beta2', 0.999)), eps=o.get('eps', 1e-8),
                   weight_decay=wd, **kw)
    if s['optimizer'] == 'sgd':
        return torch.optim.SGD(params, lr=s['lr'], momentum=o.get('momentum', 0), dampening=o.get('dampening', 0),
                               weight_decay=o.get('weight_decay', 0), nesterov=bool(o.get('nesterov', 0)),
                               **({'foreach': True} if graph else {}))
    raise SystemExit(f"torch_fmnist_gpu.py: optimizer '{s['optimizer']}' is not mirrored here")


def set_lr(opt, lr):
    """Sets every group's lr; True when a captured step must be captured again (a Python lr that changed)."""
    again = False
    for group in opt.param_groups:
        if torch.is_tensor(group['lr']):
            group['lr'].fill_(lr)
        else:
            again |= group['lr'] != lr
            group['lr'] = lr
    return again


def loaders(a, s, cuda):
    """The loader variant: the data normalized on the host, batched by DataLoaders."""
    if s['pad'] or s['flip']:
        raise Unavailable('random_crop_padding and random_flip are not mirrored by the DataLoader variant')
    mean, std = np.float32(s['mean'][0]), np.float32(s['std'][0])
    norm = lambda x: torch.from_numpy(((x.astype(np.float32) / 255.0) - mean) / std)
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


class DeviceData:
    """A whole set as uint8 (N, C, H, W) and int64 labels on the device, and its batches made there: gathered
    by a permutation made on the device, cropped from the image padded by `pad` black pixels at a random offset
    and flipped with probability 1/2 (training only, as [data] says), normalized (x/255 - mean[c]) / std[c]."""

    def __init__(self, images, labels, s, dev, mf, gen):
        self.x = torch.from_numpy(np.array(images)).to(dev)  # a writable copy
        self.y = torch.from_numpy(labels).to(dev)
        self.n, c, self.h, self.w = self.x.shape
        self.pad, self.flip, self.dev, self.mf, self.gen = s['pad'], s['flip'], dev, mf, gen
        per = lambda v: torch.tensor((v * c)[:c] if len(v) == 1 else v, device=dev).view(1, c, 1, 1)
        self.mean, self.std = per(s['mean']), per(s['std'])
        self.rows, self.cols = torch.arange(self.h, device=dev), torch.arange(self.w, device=dev)
        self.chan = torch.arange(c, device=dev).view(1, c, 1, 1)

    def permutation(self):
        return torch.randperm(self.n, device=self.dev, generator=self.gen)

    def batch(self, index, train):
        """(images, labels) of the samples `index` (a device tensor)."""
        u8 = self.x[index]
        if train and (self.pad or self.flip):
            u8 = self.augment(u8)
        x = (u8.float() / 255.0 - self.mean) / self.std
        return x.contiguous(memory_format=self.mf), self.y[index]

    def augment(self, u8):
        """One gather: each sample's crop offset and flip folded into its row and column indices."""
        n, p, p2 = u8.shape[0], self.pad, 2 * self.pad + 1
        src = F.pad(u8, (p, p, p, p)) if p else u8
        oy = torch.randint(0, p2, (n, 1), device=self.dev, generator=self.gen)
        ox = torch.randint(0, p2, (n, 1), device=self.dev, generator=self.gen)
        cols = self.cols.expand(n, self.w)
        if self.flip:
            flipped = torch.rand(n, 1, device=self.dev, generator=self.gen) < 0.5
            cols = torch.where(flipped, self.w - 1 - self.cols, self.cols)
        iy, ix = (oy + self.rows)[:, None, :, None], (ox + cols)[:, None, None, :]
        return src[torch.arange(n, device=self.dev).view(n, 1, 1, 1), self.chan, iy, ix]


class Trainer:
    """One training step per call of step(x, y): eager, or a torch.compile'd model. Returns the loss (a device
    tensor, not read)."""

    def __init__(self, model, opt, autocast, scaler, compiled=None):
        self.model, self.opt, self.autocast, self.scaler = model, opt, autocast, scaler
        self.fwd = compiled or model
        self.mark = getattr(getattr(torch, 'compiler', None), 'cudagraph_mark_step_begin', None) if compiled else None

    def step(self, x, y):
        if self.mark:  # reduce-overhead: a new step, the outputs of the last replay may be overwritten
            self.mark()
        self.opt.zero_grad(set_to_none=True)
        with self.autocast():
            loss = F.cross_entropy(self.fwd(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.detach()


class GraphTrainer:
    """The whole step captured once in a CUDA graph: static input buffers of one batch, warm-up steps on a side
    stream (their effect then undone: weights and buffers restored, optimizer state zeroed, as before any
    step), the capture, and per batch a copy into the buffers and one replay. A Python lr that changes
    (SGD, Adadelta) is captured again."""

    def __init__(self, model, opt, autocast, batch, shape, y_dtype, dev, mf, warmup_batch):
        self.model, self.opt, self.autocast = model, opt, autocast
        self.x = torch.zeros((batch,) + shape, device=dev).contiguous(memory_format=mf)
        self.y = torch.zeros(batch, dtype=y_dtype, device=dev)
        self.captures = 0
        keep = {k: v.detach().clone() for k, v in model.state_dict().items()}
        x, y = warmup_batch
        self.x.copy_(x)
        self.y.copy_(y)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.opt.zero_grad(set_to_none=True)
                with autocast():
                    loss = F.cross_entropy(model(self.x), self.y)
                loss.backward()
                self.opt.step()
        torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad():
            for k, v in model.state_dict().items():
                v.copy_(keep[k])
            for st in self.opt.state.values():
                for v in st.values():
                    if torch.is_tensor(v):
                        v.zero_()
        self.capture()

    def capture(self):
        self.opt.zero_grad(set_to_none=True)  # the captured backward writes the gradients
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            with self.autocast():
                self.loss = F.cross_entropy(self.model(self.x), self.y)
            self.loss.backward()
            self.opt.step()
        self.captures += 1

    def step(self, x, y):
        self.x.copy_(x, non_blocking=True)
        self.y.copy_(y, non_blocking=True)
        self.graph.replay()
        return self.loss.detach()


def device_sets(a, s, dev, mf, gen):
    d = a.data_dir
    tr = DeviceData(idx(d + '/train-images-idx3-ubyte.gz', True, a.train_samples),
                    idx(d + '/train-labels-idx1-ubyte.gz', False, a.train_samples), s, dev, mf, gen)
    te = DeviceData(idx(d + '/t10k-images-idx3-ubyte.gz', True, a.test_samples),
                    idx(d + '/t10k-labels-idx1-ubyte.gz', False, a.test_samples), s, dev, mf, gen)
    return tr, te


def compiled(model, mode):
    if not hasattr(torch, 'compile'):
        raise Unavailable(f'torch.compile needs PyTorch 2.0 or later; this is {torch.__version__}')
    return torch.compile(model, mode=mode)


def run(a, s, dev):
    cuda = dev.type == 'cuda'
    if a.variant in ('graph', 'compile-graphs') and not cuda:
        raise Unavailable(f'the {a.variant} variant replays CUDA graphs: it needs --device cuda')
    if a.variant == 'graph' and a.precision == 'fp16':
        raise Unavailable('fp16 loss scaling (GradScaler) checks for inf on the host each step: not captured; use bf16')
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = a.cudnn_benchmark == 'on'
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = a.precision == 'tf32'
    low = {'bf16': torch.bfloat16, 'fp16': torch.float16}.get(a.precision)
    autocast = lambda: torch.autocast(device_type=dev.type, dtype=low or torch.bfloat16, enabled=low is not None)
    if hasattr(torch, 'amp') and hasattr(torch.amp, 'GradScaler'):
        scaler = torch.amp.GradScaler(dev.type, enabled=a.precision == 'fp16')
    else:  # PyTorch before 2.3
        scaler = torch.cuda.amp.GradScaler(enabled=a.precision == 'fp16' and cuda)
    mf = torch.channels_last if a.memory_format == 'channels_last' else torch.contiguous_format
    model = (CNN() if a.model == 'cnn' else ResNet()).to(dev).to(memory_format=mf)
    opt = make_optimizer(s, model.parameters(), dev, a.variant == 'graph')
    set_lr(opt, lr_at(s, 1))
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    if a.variant == 'loader':
        train, test = loaders(a, s, cuda)
        n_train, n_test = len(train.dataset), len(test.dataset)
    else:
        train, test = device_sets(a, s, dev, mf, gen)
        n_train, n_test = train.n, test.n
    b = s['batch']
    if a.variant == 'graph':
        if n_train < b:
            raise Unavailable(f'{n_train} training samples make no whole batch of {b} to capture')
        step = GraphTrainer(model, opt, autocast, b, tuple(train.x.shape[1:]), train.y.dtype, dev, mf,
                            train.batch(train.permutation()[:b], True))
    else:
        mode = {'compile': 'max-autotune-no-cudagraphs', 'compile-graphs': 'reduce-overhead'}.get(a.variant)
        step = Trainer(model, opt, autocast, scaler, compiled(model, mode) if mode else None)
    for epoch in range(1, s['epochs'] + 1):
        lr = lr_at(s, epoch)
        if set_lr(opt, lr) and a.variant == 'graph':
            step.capture()
        model.train()
        loss_sum = torch.zeros((), device=dev)
        trained = 0
        sync()
        t0 = time.perf_counter()
        if a.variant == 'loader':
            for x, y in train:
                x = x.to(dev, non_blocking=True, memory_format=mf)
                loss_sum += step.step(x, y.to(dev, non_blocking=True)).float() * x.shape[0]
                trained += x.shape[0]
        else:
            perm = train.permutation()
            last = n_train - n_train % b if a.variant == 'graph' else n_train  # graph: whole batches only
            prof = None
            for j, i in enumerate(range(0, last, b)):
                if a.profile and epoch == 1 and j == PROFILE_WARM:
                    sync()
                    act = torch.profiler.ProfilerActivity.CUDA if cuda else torch.profiler.ProfilerActivity.CPU
                    prof = torch.profiler.profile(activities=[act])
                    prof.__enter__()
                x, y = train.batch(perm[i:i + b], True)
                loss_sum += step.step(x, y).float() * x.shape[0]  # read once per epoch: no per-step sync
                trained += x.shape[0]
                if prof is not None and j == PROFILE_WARM + a.profile - 1:
                    sync()
                    prof.__exit__(None, None, None)
                    print_kernels(prof, a.profile, cuda)
                    prof = None
        sync()
        train_s = time.perf_counter() - t0
        model.eval()
        correct = torch.zeros((), dtype=torch.int64, device=dev)
        with torch.no_grad(), autocast():
            if a.variant == 'loader':
                for x, y in test:
                    x = x.to(dev, non_blocking=True, memory_format=mf)
                    correct += (model(x).argmax(1) == y.to(dev, non_blocking=True)).sum()
            else:
                for i in range(0, n_test, s['test_batch']):
                    x, y = test.batch(torch.arange(i, min(i + s['test_batch'], n_test), device=dev), False)
                    correct += (model(x).argmax(1) == y).sum()
        row = {'epoch': epoch, 'variant': a.variant, 'lr': lr, 'train_loss': loss_sum.item() / trained,
               'test_accuracy': correct.item() / n_test, 'train_seconds': train_s, 'samples': trained,
               'samples_per_s': trained / train_s, 'torch': torch.__version__,
               'device_peak_mb': torch.cuda.max_memory_allocated(dev) / 2**20 if cuda else None}
        if a.variant == 'graph':
            row['graph_captures'] = step.captures
        print(json.dumps(row), flush=True)


PROFILE_WARM = int(os.environ.get("PROFILE_WARM", 50))  # steps before the profiled ones (the benchmark, the capture settled)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('data_dir')
    ap.add_argument('model', choices=['cnn', 'resnet'])
    ap.add_argument('--variant', choices=['loader', 'eager', 'graph', 'compile', 'compile-graphs'], default='loader')
    ap.add_argument('--ini', help='glia model file (default: share/glia/examples/fmnist-MODEL.ini)')
    ap.add_argument('--epochs', type=int, default=0, help='0: as the INI file says')
    ap.add_argument('--precision', choices=['fp32', 'tf32', 'bf16', 'fp16'], default='bf16')
    ap.add_argument('--memory-format', choices=['contiguous', 'channels_last'], default='channels_last')
    ap.add_argument('--cudnn-benchmark', choices=['on', 'off'], default='on')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--train-samples', type=int, default=0)
    ap.add_argument('--test-samples', type=int, default=0)
    ap.add_argument('--profile', type=int, default=0, help='N: profile N steps of the first epoch (eager, graph)')
    a = ap.parse_args()
    s = ini_settings(a.ini or f'share/glia/examples/fmnist-{a.model}.ini')
    if a.epochs:
        s['epochs'] = a.epochs
    dev = torch.device(a.device)
    try:
        if dev.type == 'cuda' and not torch.cuda.is_available():
            raise Unavailable('needs a CUDA device: torch.cuda.is_available() is False')
        run(a, s, dev)
    except Unavailable as e:
        print(f'torch_fmnist_gpu.py: variant {a.variant}: {e}', file=sys.stderr)
        sys.exit(3)


if __name__ == '__main__':
    main()
