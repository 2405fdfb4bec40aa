#!/usr/bin/python3
# tests/torch_layer_gelu.py — glia's CPU gelu kernel (the erf form, and approximate = tanh, GPT-2's) against
# torch.nn.functional.gelu in float64, and the tanh form written as a pointwise expression against it too: output
# and input gradient on seeded (N, F), (N, T, C) and 4-D inputs. Not a gradcheck (test_layers has that); run by
# torch_layers.sh.
import torch
import torchref as T

TANH_EXPR = "0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x^3)))"

for approximate, ini in (("none", "[g]\ntype = gelu\n"), ("tanh", "[g]\ntype = gelu\napproximate = tanh\n"),
                         ("tanh", "[g]\ntype = pointwise\nexpr = %s\n" % TANH_EXPR)):
    for shape in ((5, 7), (2, 6, 16), (2, 3, 4, 5)):
        r = T.Run(ini, [shape])
        r.forward()
        r.backward()
        x = r.input().requires_grad_()
        y = torch.nn.functional.gelu(x, approximate=approximate)
        y.backward(r.output_grad())
        what = "gelu approximate=%s %s" % (approximate, shape)
        T.compare(what + ": output", r.output(), y.detach())
        T.compare(what + ": input gradient", r.input_grad(), x.grad)
        r.close()
T.finish("torch_layer_gelu")
