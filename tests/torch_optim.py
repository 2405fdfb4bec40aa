#!/usr/bin/python3
# tests/torch_optim.py — glia's CPU lamb, lars and novograd kernels against straightforward PyTorch implementations
# of their rules (Apex FusedLAMB's, LARC's and FusedNovoGrad's, written as Apex's python code writes them: per-tensor
# torch ops in fp32) on the same tensors for several steps, through libglia's C API (ctypes). Not a GPU test and not
# a test of Apex itself; run by tests/torch_optim.sh, which skips (77) where torch is missing.
import ctypes as C
import os
import sys

import torch

F = C.POINTER(C.c_float)


class OptStep(C.Structure):  # struct glia_opt_step (glia/optimizer.h, ABI 2.2)
    _fields_ = [("w", F), ("g", F), ("state", C.POINTER(F)), ("n", C.c_size_t), ("decay_mask", F),
                ("lr", C.c_double), ("step", C.c_int64), ("backend", C.c_void_p), ("dev_scalars", C.c_void_p),
                ("dev_skip", C.c_void_p), ("n_seg", C.c_int), ("seg", C.POINTER(C.c_int64)),
                ("dev_seg", C.c_void_p)]


StepFn = C.CFUNCTYPE(C.c_int, C.c_void_p, C.POINTER(OptStep))


class Kernel(C.Structure):  # struct glia_optimizer_kernel, up to step
    _fields_ = [("struct_size", C.c_uint32), ("type", C.c_char_p), ("doc", C.c_char_p), ("device_type", C.c_int),
                ("step", StepFn)]


class Optimizer(C.Structure):  # struct glia_optimizer
    _fields_ = [("type", C.c_void_p), ("kernel", C.POINTER(Kernel)), ("ctx", C.c_void_p), ("attrs", C.c_void_p)]


def load_glia():
    top = os.path.dirname(os.path.dirname(os.environ.get("GLIA_BIN", "tools/glia")))
    lib = C.CDLL(os.path.join(top or ".", ".libs", "libglia.so"))
    lib.glia_context_new.argtypes = [C.POINTER(C.c_void_p)]
    lib.glia_context_error.restype = C.c_char_p
    lib.glia_context_error.argtypes = [C.c_void_p]
    lib.glia_optimizer_new.argtypes = [C.c_void_p, C.c_char_p, C.c_char_p, C.POINTER(C.POINTER(Optimizer))]
    lib.glia_optimizer_free.argtypes = [C.POINTER(Optimizer)]
    lib.glia_context_free.argtypes = [C.c_void_p]
    return lib


# The arena: tensors with padding between them; decays: weight decay on (mask 1) or off.
SEGS = [(0, 100), (128, 37), (192, 5000), (5248, 20), (5376, 1)]
DECAYS = [True, False, True, True, False]
LEN = 5400


def ref_lamb(ps, gs, ms, vs, lr, t, o):
    """Apex FusedLAMB (adam_w_mode, grad averaging) in torch fp32, one tensor at a time."""
    b1, b2 = o["beta1"], o["beta2"]
    gnorm = torch.norm(torch.stack([torch.norm(g) for g in gs]))
    clip = gnorm / o["max_grad_norm"] if o["max_grad_norm"] > 0 and gnorm > o["max_grad_norm"] else 1.0
    bc1, bc2 = (1 - b1 ** t, 1 - b2 ** t) if o["bias_correction"] else (1.0, 1.0)
    for p, g, m, v, decay in zip(ps, gs, ms, vs, DECAYS):
        wd = o["weight_decay"] if decay else 0.0
        sg = g / clip
        m.mul_(b1).add_(sg, alpha=1 - b1)
        v.mul_(b2).addcmul_(sg, sg, value=1 - b2)
        u = (m / bc1) / ((v / bc2).sqrt() + o["eps"]) + wd * p
        wn, un = p.norm(), u.norm()
        ratio = wn / un if (o["nvlamb"] or wd != 0) and wn > 0 and un > 0 else 1.0
        p.add_(u * (-lr * ratio))


def ref_lars(ps, gs, bufs, _, lr, t, o):
    """Apex LARC (apex/parallel/LARC.py) around torch.optim.SGD, in torch fp32; tensors without decay: plain SGD."""
    for p, g, buf, decay in zip(ps, gs, bufs, DECAYS):
        wd = o["weight_decay"]
        pn, gn = torch.norm(p), torch.norm(g)
        if decay and pn != 0 and gn != 0:
            a = o["trust_coefficient"] * pn / (gn + pn * wd + o["eps"])
            if o["clip"]:
                a = min(a / lr, 1)
            g = (g + wd * p) * a
        if o["momentum"] != 0:
            if t == 1:
                buf.copy_(g)
            else:
                buf.mul_(o["momentum"]).add_(g, alpha=1 - o["dampening"])
            g = g + o["momentum"] * buf if o["nesterov"] else buf
        p.add_(g, alpha=-lr)


def ref_novograd(ps, gs, ms, ns, lr, t, o):
    """Apex FusedNovoGrad (norm_type 2, reg_inside_moment off) in torch fp32: n per tensor (kept in ns[i][0], where
    glia keeps it), starting as the gradient's norm."""
    b1, b2 = o["beta1"], o["beta2"]
    b3 = 1 - b1 if o["grad_averaging"] else 1.0
    bc1, bc2 = (1 - b1 ** t, (1 - b2 ** t) ** 0.5) if o["bias_correction"] else (1.0, 1.0)
    for p, g, m, nbuf, decay in zip(ps, gs, ms, ns, DECAYS):
        sq = torch.sum(torch.pow(g, 2))
        n = sq.sqrt() if t == 1 else nbuf[0]
        n = torch.sqrt(b2 * n * n + (1 - b2) * sq)
        nbuf[0] = n
        m.mul_(b1).add_(g, alpha=b3)
        p.sub_(lr * ((m / bc1) / (n / bc2 + o["eps"]) + (o["weight_decay"] if decay else 0.0) * p))


def run(lib, name, ini, opts, ref, steps=6, tol=1e-5):
    """steps steps of glia's kernel and of ref from the same weights and gradients; the largest difference of the
    weights relative to their scale. tol: fp32 results of differently ordered sums (the norms), a few ulps grown over
    the steps, and glia's fp32 betas (Apex's kernel takes them as fp32 too): 1 - 0.999f is 1.3e-5 off 0.001, which
    shows as 6.5e-6 in lamb's update of a tensor without the trust ratio when bias_correction is off, and in
    novograd's sqrt(1 - beta2^t)."""
    ctx = C.c_void_p()
    assert lib.glia_context_new(C.byref(ctx)) == 0
    o = C.POINTER(Optimizer)()
    if lib.glia_optimizer_new(ctx, name.encode(), ini.encode(), C.byref(o)):
        sys.exit("glia_optimizer_new %s: %s" % (name, lib.glia_context_error(ctx).decode()))
    gen = torch.Generator().manual_seed(5)
    w = torch.full((LEN,), 7.0)
    mask = torch.ones(LEN)
    for (a, n), d in zip(SEGS, DECAYS):
        w[a:a + n] = torch.randn(n, generator=gen) * (5 if n > 4096 else 1)
        mask[a:a + n] = 1.0 if d else 0.0
    w[SEGS[3][0]:SEGS[3][0] + SEGS[3][1]] = 0  # a tensor of zero norm
    state = [torch.zeros(LEN), torch.zeros(LEN)]
    ps = [w[a:a + n].clone() for a, n in SEGS]
    rs = [[torch.zeros(n) for _, n in SEGS] for _ in range(2)]
    seg = (C.c_int64 * (2 * len(SEGS)))(*[x for s in SEGS for x in s])
    sp = (F * 4)(*[C.cast(s.data_ptr(), F) for s in state], None, None)
    worst = 0.0
    for t in range(1, steps + 1):
        g = torch.zeros(LEN)
        for a, n in SEGS:
            g[a:a + n] = torch.randn(n, generator=gen)
        lr = 0.01 * (1 - 0.1 * (t - 1))
        s = OptStep(C.cast(w.data_ptr(), F), C.cast(g.data_ptr(), F), sp, LEN, C.cast(mask.data_ptr(), F), lr, t,
                    None, None, None, len(SEGS), seg, None)
        if o.contents.kernel.contents.step(C.cast(o, C.c_void_p), C.byref(s)):
            sys.exit("%s step %d: %s" % (name, t, lib.glia_context_error(ctx).decode()))
        ref(ps, [g[a:a + n] for a, n in SEGS], rs[0], rs[1], lr, t, opts)
        for (a, n), p in zip(SEGS, ps):
            worst = max(worst, float((w[a:a + n] - p).abs().max() / max(float(p.abs().max()), 1e-30)))
    pad = torch.ones(LEN, dtype=torch.bool)
    for a, n in SEGS:
        pad[a:a + n] = False
    lib.glia_optimizer_free(o)
    lib.glia_context_free(ctx)
    ok = worst <= tol and bool((w[pad] == 7.0).all())
    print("%s %s %r: largest relative difference %.3g (tolerance %g)%s" % ("ok  " if ok else "FAIL", name, ini, worst,
          tol, "" if bool((w[pad] == 7.0).all()) else ", padding changed"))
    return ok


LAMB = dict(beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.01, max_grad_norm=1.0, bias_correction=True, nvlamb=False)


def main():
    torch.set_num_threads(1)
    lib = load_glia()
    ok = run(lib, "lamb", "", LAMB, ref_lamb)
    ok &= run(lib, "lamb", "[optimizer]\nnvlamb = on\nmax_grad_norm = 0\nweight_decay = 0.1\n",
              dict(LAMB, nvlamb=True, max_grad_norm=0.0, weight_decay=0.1), ref_lamb)
    ok &= run(lib, "lamb", "[optimizer]\nbias_correction = off\nbeta1 = 0.8\nmax_grad_norm = 1000\n",
              dict(LAMB, bias_correction=False, beta1=0.8, max_grad_norm=1000.0), ref_lamb)
    lars = dict(momentum=0.9, dampening=0.0, nesterov=False, weight_decay=0.0, trust_coefficient=0.02, clip=True,
                eps=1e-8)
    ok &= run(lib, "lars", "", lars, ref_lars)
    ok &= run(lib, "lars", "[optimizer]\nweight_decay = 0.05\nclip = off\n", dict(lars, weight_decay=0.05, clip=False),
              ref_lars)
    ok &= run(lib, "lars", "[optimizer]\nweight_decay = 0.01\nnesterov = on\ntrust_coefficient = 0.5\n",
              dict(lars, weight_decay=0.01, nesterov=True, trust_coefficient=0.5), ref_lars)
    novograd = dict(beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, grad_averaging=True, bias_correction=True)
    ok &= run(lib, "novograd", "", novograd, ref_novograd)
    ok &= run(lib, "novograd", "[optimizer]\nbeta1 = 0.95\nbeta2 = 0.98\nweight_decay = 0.001\ngrad_averaging = off\n",
              dict(novograd, beta1=0.95, beta2=0.98, weight_decay=0.001, grad_averaging=False), ref_novograd)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
