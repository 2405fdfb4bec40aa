#!/usr/bin/python3
# tests/torch_layer_linear.py — glia's CPU linear kernel against torch.nn.functional.linear in float64: output, input
# gradient and parameter gradients on seeded 2-, 3- and 4-D inputs, and with activation = gelu | gelu_tanh against
# F.gelu(F.linear(...)) (approximate='none' | 'tanh'). Not a gradcheck (test_layers has that); run by
# torch_layers.sh.
import torch
import torchref as T

# (N, features) and, as nn.Linear, (N, T, features) and 4-D: the last dim maps, the leading ones are rows
for shape, outputs, bias, act in (((5, 7), 3, "on", "none"), ((1, 16), 9, "off", "none"), ((2, 3, 5), 4, "on", "none"),
                                  ((3, 4, 6), 2, "off", "none"), ((2, 2, 3, 4), 3, "on", "none"),
                                  ((2, 6, 8), 12, "on", "gelu"), ((3, 5), 4, "off", "gelu"),
                                  ((2, 6, 8), 16, "on", "gelu_tanh"), ((4, 3, 5), 7, "off", "gelu_tanh")):
    r = T.Run("[fc]\ntype = linear\noutputs = %d\nbias = %s\nactivation = %s\n" % (outputs, bias, act), [shape])
    r.forward()
    r.backward()
    x = r.input().requires_grad_()
    p = r.params()
    w = p["weight"][0].requires_grad_()
    b = p["bias"][0].requires_grad_() if "bias" in p else None
    y = torch.nn.functional.linear(x, w, b)
    if act != "none":
        y = torch.nn.functional.gelu(y, approximate="tanh" if act == "gelu_tanh" else "none")
    y.backward(r.output_grad())
    what = "linear %s -> %d, bias %s, activation %s" % (shape, outputs, bias, act)
    T.compare(what + ": output", r.output(), y.detach())
    T.compare(what + ": input gradient", r.input_grad(), x.grad)
    T.compare(what + ": weight gradient", p["weight"][1], w.grad)
    if b is not None:
        T.compare(what + ": bias gradient", p["bias"][1], b.grad)
    r.close()
T.finish("torch_layer_linear")
