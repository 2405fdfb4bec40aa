#!/usr/bin/python3
# tests/torch_layer_layernorm.py — glia's CPU layernorm kernel against torch.nn.functional.layer_norm in float64:
# output, input gradient and weight and bias gradients on seeded inputs, (N, C) and (N, T, C), affine on and off, another
# eps, and rows that are constant (variance 0). Not a gradcheck (test_layernorm has that); run by torch_layers.sh.
import torch
import torchref as T

torch.manual_seed(3)
for shape, keys, constant in (((4, 7), "", False), ((2, 5, 16), "", False), ((2, 5, 16), "affine = off\n", False),
                              ((4, 7), "eps = 1e-3\n", False), ((2, 5, 16), "eps = 1e-3\n", True),
                              ((3, 9), "affine = off\n", True)):
    r = T.Run("[ln]\ntype = layernorm\n" + keys, [shape])
    C = shape[-1]
    affine = "affine = off" not in keys
    if affine:  # weight and bias away from their init (1, 0), so that a swapped or ignored one shows
        r.put(r.param_tensor("weight"), 1 + 0.5 * torch.randn(C))
        r.put(r.param_tensor("bias"), 0.5 * torch.randn(C))
    if constant:  # every other row constant: var = 0, y = bias, rstd = 1/sqrt(eps)
        x = r.input().reshape(-1, C)
        x[::2] = torch.arange(x[::2].shape[0], dtype=x.dtype).unsqueeze(1) - 1.5
        r.put(T.LIB.glia_layer_run_input(r.r, 0), x.reshape(shape))
    r.forward()
    r.backward()
    x = r.input().requires_grad_()
    p = r.params()
    w = p["weight"][0].requires_grad_() if affine else None
    b = p["bias"][0].requires_grad_() if affine else None
    eps = float(keys.split("=")[1]) if keys.startswith("eps") else 1e-5
    y = torch.nn.functional.layer_norm(x, (C,), w, b, eps)
    y.backward(r.output_grad())
    what = "layernorm %s %s%s" % (shape, keys.strip() or "defaults", ", constant rows" if constant else "")
    T.compare(what + ": output", r.output(), y.detach())
    T.compare(what + ": input gradient", r.input_grad(), x.grad)
    if affine:
        T.compare(what + ": weight gradient", p["weight"][1], w.grad)
        T.compare(what + ": bias gradient", p["bias"][1], b.grad)
    r.close()
T.finish("torch_layer_layernorm")
