#!/usr/bin/python3
# bench/ddp_overhead/torch_ddp.py — PyTorch side of bench/ddp_overhead: ms per training step of
# fmnist-resnet.ini's network (the ResNet of bench/gpu_fmnist/torch_fmnist_gpu.py, imported, not
# copied), plain or wrapped in DistributedDataParallel at world size 1 (gloo on the CPU, nccl on CUDA,
# env:// init on 127.0.0.1 and a free port); prints one JSON line. Not a glia test, not a trainer.
#   usage: torch_ddp.py DATA_DIR [--ddp on|off] [--device cpu|cuda] [--steps N] [--warmup N]
#          [--precision fp32|tf32|bf16|fp16] [--memory-format contiguous|channels_last]
#          [--cudnn-benchmark on|off] [--threads N] [--seed N] [--ini FILE]
import argparse
import json
import os
import socket
import sys
import time

os.environ.setdefault('OPENBLAS_CORETYPE', 'SkylakeX')  # read when torch loads OpenBLAS
import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'gpu_fmnist'))
from torch_fmnist_gpu import ResNet, idx, ini_settings, make_optimizer  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('data_dir')
    ap.add_argument('--ddp', choices=['on', 'off'], default='off')
    ap.add_argument('--device', default='cpu')
    ap.add_argument('--steps', type=int, default=50)
    ap.add_argument('--warmup', type=int, default=5)
    ap.add_argument('--precision', choices=['fp32', 'tf32', 'bf16', 'fp16'], default='fp32')
    ap.add_argument('--memory-format', choices=['contiguous', 'channels_last'], default='contiguous')
    ap.add_argument('--cudnn-benchmark', choices=['on', 'off'], default='on')
    ap.add_argument('--threads', type=int, default=os.cpu_count())
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--ini', default='share/glia/examples/fmnist-resnet.ini')
    a = ap.parse_args()
    s = ini_settings(a.ini)
    dev = torch.device(a.device)
    cuda = dev.type == 'cuda'
    if cuda and not torch.cuda.is_available():
        raise SystemExit('torch_ddp.py: needs a CUDA device: torch.cuda.is_available() is False')
    if cuda and dev.index is None:
        dev = torch.device('cuda', torch.cuda.current_device())
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = a.cudnn_benchmark == 'on'
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = a.precision == 'tf32'
    low = {'bf16': torch.bfloat16, 'fp16': torch.float16}.get(a.precision)
    autocast = lambda: torch.autocast(device_type=dev.type, dtype=low or torch.bfloat16, enabled=low is not None)
    if hasattr(torch.amp, 'GradScaler'):
        scaler = torch.amp.GradScaler(dev.type, enabled=a.precision == 'fp16')
    else:  # PyTorch before 2.3
        scaler = torch.cuda.amp.GradScaler(enabled=a.precision == 'fp16' and cuda)
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    mf = torch.channels_last if a.memory_format == 'channels_last' else torch.contiguous_format

    # the first (warmup + steps) batches of the training set, shuffled once, as glia's loader gives them
    n = (a.warmup + a.steps) * s['batch']
    x = idx(a.data_dir + '/train-images-idx3-ubyte.gz', True, n)
    y = idx(a.data_dir + '/train-labels-idx1-ubyte.gz', False, n)
    if len(x) < n:
        raise SystemExit(f'torch_ddp.py: {n} samples needed, the training set has {len(x)}')
    perm = np.random.default_rng(a.seed).permutation(n)
    x = torch.from_numpy(((x[perm].astype(np.float32) / 255.0) - s['mean']) / s['std'])
    y = torch.from_numpy(y[perm].copy())
    if cuda:
        x, y = x.pin_memory(), y.pin_memory()

    model = ResNet().to(dev).to(memory_format=mf)
    backend = None
    if a.ddp == 'on':
        backend = 'nccl' if cuda else 'gloo'
        os.environ['MASTER_ADDR'] = '127.0.0.1'
        os.environ.setdefault('MASTER_PORT', str(free_port()))
        dist.init_process_group(backend, init_method='env://', rank=0, world_size=1)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if cuda else None)
    opt = make_optimizer(s, model.parameters(), cuda)
    model.train()
    B = s['batch']
    for k in range(a.warmup + a.steps):
        if k == a.warmup:
            sync()
            t0 = time.perf_counter()
        xb = x[k * B:(k + 1) * B].to(dev, non_blocking=True, memory_format=mf)
        yb = y[k * B:(k + 1) * B].to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = F.cross_entropy(model(xb), yb)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    sync()
    t = time.perf_counter() - t0
    if backend:
        dist.destroy_process_group()
    print(json.dumps({'ms_per_step': 1e3 * t / a.steps, 'steps': a.steps, 'warmup': a.warmup, 'batch': B,
                      'ddp': a.ddp, 'backend': backend, 'device': str(dev), 'precision': a.precision,
                      'memory_format': a.memory_format, 'threads': a.threads, 'loss': loss.item(),
                      'torch': torch.__version__}), flush=True)


if __name__ == '__main__':
    main()
