#!/usr/bin/python3
# tests/torch_layer_embedding.py — glia's CPU embedding kernel against torch.nn.functional.embedding in float64: the
# sequence output (N, T, dim) (and the conv layout (N, dim, 1, T), a transpose of it) and the weight gradient, with and
# without padding_idx, on ids that repeat. Not a gradcheck (test_seq has that); run by torch_layers.sh.
import torch
import torchref as T

g = torch.Generator().manual_seed(5)
for output, pad, shape in (("sequence", -1, (3, 7)), ("sequence", 0, (2, 9)), ("conv", 2, (4, 5))):
    r = T.Run("[wte]\ntype = embedding\nvocab = 11\ndim = 6\noutput = %s\npadding_idx = %d\n" % (output, pad), [shape])
    ids = torch.randint(0, 11, shape, generator=g)
    ids[0, :3] = torch.tensor([pad if pad >= 0 else 1, 4, 4])  # the padding id, and a repeated one
    r.set_ids(0, ids)
    r.forward()
    r.backward()
    p = r.params()
    w = p["weight"][0].requires_grad_()
    y = torch.nn.functional.embedding(ids, w, padding_idx=pad if pad >= 0 else None)
    if output == "conv":
        y = y.transpose(1, 2).unsqueeze(2)  # (N, dim, 1, T)
    dy = r.output_grad()
    y.backward(dy)
    what = "embedding output = %s, padding_idx %d, ids %s" % (output, pad, shape)
    T.compare(what + ": output", r.output(), y.detach())
    T.compare(what + ": weight gradient", p["weight"][1], w.grad)
    assert r.input_grad(0) is None
    r.close()
T.finish("torch_layer_embedding")
