#!/usr/bin/env python3
# bench/gpu_resnet50/torch_resnet50.py — PyTorch side of bench/gpu_resnet50: ResNet-50 (torchvision's layout,
# written out here so that torchvision is not needed; 25,557,032 parameters, checked at start) trained on
# synthetic ImageNet-shaped data already on the device, timed in images/s after warm-up steps. Not a glia test.
# The data: `samples` random uint8 3x224x224 images and labels in 0..999 made on the device; a batch is
# gathered by a permutation made there and normalized (x/255 - 0.5) / 0.2898, as glia's [data] format =
# synthetic does. The step: autocast (bf16), channels_last, SGD momentum 0.9 (foreach), lr 0.1, set-to-none
# gradients, cudnn.benchmark, no host sync. Variants (--variant):
#   eager           the step as written
#   compile         torch.compile(model, mode="max-autotune-no-cudagraphs")
#   compile-graphs  torch.compile(model, mode="reduce-overhead") (its CUDA graphs)
#   graph           the whole step (forward, backward, SGD) captured once in torch.cuda.graph with static input
#                   buffers after warm-up on a side stream, replayed per batch
# Prints one JSON line; a variant that cannot run prints why on stderr and exits 3.
#   usage: torch_resnet50.py [--variant eager] [--batch 256] [--steps 30] [--warmup 30] [--samples 2560]
#          [--precision bf16|fp32] [--memory-format channels_last|contiguous] [--seed 1] [--device cuda]
import argparse
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

RESNET50_PARAMS = 25557032  # torchvision.models.resnet50()


class Unavailable(Exception):
    """A variant that cannot run here."""


class Bottleneck(nn.Module):
    """1x1 (width), 3x3 (width, stride), 1x1 (4 x width), each with batchnorm; a projection shortcut where the
    shape changes; relu after the sum."""

    def __init__(self, cin, width, stride):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, 4 * width, 1, bias=False), nn.BatchNorm2d(4 * width)
        self.proj = None
        if stride != 1 or cin != 4 * width:
            self.proj = nn.Sequential(nn.Conv2d(cin, 4 * width, 1, stride, bias=False), nn.BatchNorm2d(4 * width))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (self.proj(x) if self.proj is not None else x))


class ResNet50(nn.Module):  # share/glia/examples/resnet50.ini
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for n, width, stride in ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)):
            for b in range(n):
                blocks.append(Bottleneck(cin, width, stride if b == 0 else 1))
                cin = 4 * width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--variant', choices=['eager', 'compile', 'compile-graphs', 'graph'], default='eager')
    ap.add_argument('--batch', type=int, default=256)
    ap.add_argument('--steps', type=int, default=30, help='timed steps')
    ap.add_argument('--warmup', type=int, default=30, help='steps before the timing (compilation, autotuning)')
    ap.add_argument('--samples', type=int, default=2560, help='synthetic images on the device')
    ap.add_argument('--precision', choices=['bf16', 'fp32'], default='bf16')
    ap.add_argument('--memory-format', choices=['channels_last', 'contiguous'], default='channels_last')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--device', default='cuda')
    a = ap.parse_args()
    try:
        print(json.dumps(run(a)), flush=True)
    except Unavailable as e:
        print(f'torch_resnet50.py: variant {a.variant}: {e}', file=sys.stderr)
        sys.exit(3)


def run(a):
    dev = torch.device(a.device)
    cuda = dev.type == 'cuda'
    if cuda and not torch.cuda.is_available():
        raise Unavailable('needs a CUDA device: torch.cuda.is_available() is False')
    if a.variant in ('graph', 'compile-graphs') and not cuda:
        raise Unavailable(f'the {a.variant} variant replays CUDA graphs: it needs --device cuda')
    if a.variant.startswith('compile') and not hasattr(torch, 'compile'):
        raise Unavailable(f'torch.compile needs PyTorch 2.0 or later; this is {torch.__version__}')
    if a.samples < a.batch:
        raise Unavailable(f'--samples {a.samples} is less than one batch of {a.batch}')
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = True
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    mf = torch.channels_last if a.memory_format == 'channels_last' else torch.contiguous_format
    model = ResNet50().to(dev).to(memory_format=mf)
    params = sum(p.numel() for p in model.parameters())
    if params != RESNET50_PARAMS:
        raise SystemExit(f'torch_resnet50.py: the model has {params} parameters, not ResNet-50\'s {RESNET50_PARAMS}')
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=False, foreach=True)
    low = a.precision == 'bf16'
    autocast = lambda: torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=low)
    gen = torch.Generator(device=dev)
    gen.manual_seed(a.seed)
    images = torch.randint(0, 256, (a.samples, 3, 224, 224), dtype=torch.uint8, device=dev, generator=gen)
    labels = torch.randint(0, 1000, (a.samples,), device=dev, generator=gen)
    order = {'perm': torch.randperm(a.samples, device=dev, generator=gen), 'at': 0}

    def batch():
        """The next batch of a permutation of the set, a new permutation when it runs out."""
        if order['at'] + a.batch > a.samples:
            order['perm'], order['at'] = torch.randperm(a.samples, device=dev, generator=gen), 0
        i = order['perm'][order['at']:order['at'] + a.batch]
        order['at'] += a.batch
        x = (images[i].float() / 255.0 - 0.5) / 0.2898
        return x.contiguous(memory_format=mf), labels[i]

    fwd = model
    if a.variant == 'compile':
        fwd = torch.compile(model, mode='max-autotune-no-cudagraphs')
    elif a.variant == 'compile-graphs':
        fwd = torch.compile(model, mode='reduce-overhead')
    mark = getattr(getattr(torch, 'compiler', None), 'cudagraph_mark_step_begin', None)

    def eager_step():
        if a.variant == 'compile-graphs' and mark:
            mark()
        x, y = batch()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(fwd(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    step = eager_step
    if a.variant == 'graph':
        x0, y0 = batch()
        static_x, static_y = x0.clone(memory_format=mf), y0.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                opt.zero_grad(set_to_none=True)
                with autocast():
                    loss = F.cross_entropy(model(static_x), static_y)
                loss.backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        opt.zero_grad(set_to_none=True)  # the captured backward writes the gradients
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            with autocast():
                static_loss = F.cross_entropy(model(static_x), static_y)
            static_loss.backward()
            opt.step()

        def step():
            x, y = batch()
            static_x.copy_(x)
            static_y.copy_(y)
            graph.replay()
            return static_loss.detach()

    model.train()
    t0 = time.perf_counter()
    for _ in range(a.warmup):
        loss = step()
    sync()
    warm_s = time.perf_counter() - t0
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    loss_sum = torch.zeros((), device=dev)
    for _ in range(a.steps):
        loss_sum += step().float()  # read once at the end: no per-step sync
    sync()
    s = time.perf_counter() - t0
    return {'variant': a.variant, 'images_per_s': a.steps * a.batch / s, 'step_ms': 1000 * s / a.steps,
            'steps': a.steps, 'warmup_steps': a.warmup, 'warmup_s': warm_s, 'batch': a.batch,
            'mean_loss': loss_sum.item() / a.steps, 'params': params, 'precision': a.precision,
            'memory_format': a.memory_format, 'torch': torch.__version__,
            'device_peak_mb': torch.cuda.max_memory_allocated(dev) / 2**20 if cuda else None}


if __name__ == '__main__':
    main()
