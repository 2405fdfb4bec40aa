# bench/torch_kernels.py — the CUDA kernels a torch.profiler run recorded, summed by name: what the PyTorch sides of
# the benches print with --profile, beside bench/ncu_summary.py's table of glia's kernels. Not a profiler itself.
import sys

import torch


def print_kernels(prof, steps, cuda=True, out=sys.stderr):
    """The kernels of prof (on the CPU: its operators' own times), summed by name, largest total first: launches a
    step, total and mean microseconds."""
    rows = {}
    for e in prof.events():
        if cuda and e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        t = (getattr(e, 'device_time', None) or getattr(e, 'cuda_time', 0.0)) if cuda else e.self_cpu_time_total
        n, total = rows.get(e.name, (0, 0.0))
        rows[e.name] = (n + 1, total + t)
    total = sum(t for _, t in rows.values())
    launches = sum(n for n, _ in rows.values())
    what = 'kernels' if cuda else 'CPU operators'
    print(f'torch.profiler: {steps} steps, {launches / steps:.1f} {what} and {total / steps:.1f} us of them a step',
          file=out)
    print('%8s %12s %10s  kernel' % ('per step', 'total us', 'mean us'), file=out)
    for name, (n, t) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:50]:
        print('%8.1f %12.1f %10.2f  %s' % (n / steps, t, t / n, name[:110]), file=out)
