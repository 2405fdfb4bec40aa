#!/usr/bin/env python3
# bench/gpu_conv/torch_conv.py — PyTorch side of bench/gpu_conv: nn.Conv2d(64, 64, 3, padding=1) on
# a BATCHx64x64x64 input, timed forward and forward+backward for cudnn.benchmark off/on, fp32/bf16
# (autocast), contiguous/channels_last, as `glia bench conv --json` does; prints the same JSON lines.
# Not a glia test. Each cudnn.benchmark setting runs in a process of its own: PyTorch keeps one
# algorithm cache per process whose key does not include the benchmark flag.
#   usage: torch_conv.py [--device cuda] [--steps 50] [--warmup 10] [--batch 32] [--bias on|off]
#                        [--relu on|off] [--benchmark both|off|on]
# --relu on times F.relu(conv(x)) (in-place relu, as nn.ReLU(inplace=True) in torchvision's models), the twin of
# glia's conv2d with activation = relu.
import argparse
import json
import subprocess
import sys
import time

import torch


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--steps', type=int, default=50)
    ap.add_argument('--warmup', type=int, default=10)
    ap.add_argument('--batch', type=int, default=32)
    ap.add_argument('--bias', choices=['on', 'off'], default='on')
    ap.add_argument('--relu', choices=['on', 'off'], default='off')
    ap.add_argument('--benchmark', choices=['both', 'off', 'on'], default='both')
    return ap.parse_args()


def time_loop(step, n, sync):
    """Seconds for n calls of step(), the device synchronized before and after."""
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    sync()
    return time.perf_counter() - t0


def measure(a, dev, tune, prec, fmt, sync):
    """ms per iteration of the forward and the forward+backward pass of one configuration."""
    torch.backends.cudnn.benchmark = tune
    mf = torch.channels_last if fmt == 'channels_last' else torch.contiguous_format
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=a.bias == 'on').to(dev).to(memory_format=mf)
    x = torch.randn(a.batch, 64, 64, 64, device=dev).to(memory_format=mf).requires_grad_(True)
    autocast = lambda: torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=prec == 'bf16')
    with autocast():
        y = conv(x)
    dy = torch.randn_like(y)  # y's dtype (bf16 under autocast) and memory format
    del y

    def forward():
        with autocast():
            y = conv(x)
            return torch.relu_(y) if a.relu == 'on' else y

    def forward_backward():
        conv.zero_grad(set_to_none=True)  # gradients written, not accumulated, as glia's runner does
        x.grad = None
        forward().backward(dy)

    if a.warmup:
        time_loop(forward_backward, a.warmup, sync)
    return [1e3 * time_loop(f, a.steps, sync) / a.steps for f in (forward, forward_backward)]


def run_one_setting(a):
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == 'cuda' else (lambda: None)
    # glia's fp32 is strict IEEE; PyTorch's cuDNN convolutions default to TF32 on Ampere and later
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    tune = a.benchmark == 'on'
    flops = 2 * a.batch * 64 * 64 * 64 * 64 * 9
    for prec in ('fp32', 'bf16'):
        for fmt in ('contiguous', 'channels_last'):
            ms = measure(a, dev, tune, prec, fmt, sync)
            for p, (name, mult) in enumerate((('forward', 1), ('forward+backward', 3))):
                print(json.dumps({'pass': name, 'cudnn_benchmark': tune, 'precision': prec, 'memory_format': fmt,
                                  'ms': ms[p], 'tflops': flops * mult / (ms[p] * 1e-3) * 1e-12}), flush=True)


def main():
    a = parse()
    if a.device.startswith('cuda') and not torch.cuda.is_available():
        sys.exit('torch_conv.py: needs a CUDA device: torch.cuda.is_available() is False')
    if a.benchmark != 'both':
        run_one_setting(a)
        return
    print(json.dumps({'bench': 'conv', 'device': a.device, 'torch': torch.__version__, 'batch': a.batch,
                      'bias': a.bias == 'on', 'relu': a.relu == 'on', 'steps': a.steps, 'warmup': a.warmup,
                      'forward_flops': 2 * a.batch * 64 * 64 * 64 * 64 * 9}), flush=True)
    for tune in ('off', 'on'):
        argv = [sys.executable, sys.argv[0], '--device', a.device, '--steps', str(a.steps), '--warmup', str(a.warmup),
                '--batch', str(a.batch), '--bias', a.bias, '--relu', a.relu, '--benchmark', tune]
        subprocess.run(argv, check=True)


if __name__ == '__main__':
    main()
