#!/usr/bin/python3
# tests/torch_layer_position_embedding.py — glia's CPU position_embedding kernel against GPT-2's x + wpe(arange(T))
# (torch.nn.Embedding) in float64: output, input gradient and weight gradient on seeded inputs, T below and equal to
# max_positions. Not a gradcheck (test_seq has that); run by torch_layers.sh.
import torch
import torchref as T

for shape, positions in (((2, 5, 3), 8), ((3, 4, 6), 4), ((1, 1, 5), 2)):
    r = T.Run("[pos]\ntype = position_embedding\nmax_positions = %d\ninit_std = 1\n" % positions, [shape])
    r.forward()
    r.backward()
    x = r.input().requires_grad_()
    w, w_grad = r.params()["weight"]
    wpe = torch.nn.Embedding(positions, shape[2], dtype=torch.float64)
    with torch.no_grad():
        wpe.weight.copy_(w)
    y = x + wpe(torch.arange(shape[1]))
    y.backward(r.output_grad())
    what = "position_embedding %s, max_positions %d" % (shape, positions)
    T.compare(what + ": output", r.output(), y.detach())
    T.compare(what + ": input gradient", r.input_grad(), x.grad)
    T.compare(what + ": weight gradient", w_grad, wpe.weight.grad)
    r.close()
T.finish("torch_layer_position_embedding")
