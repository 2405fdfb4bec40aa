#!/usr/bin/python3
# tests/torch_layer_softmax_cross_entropy.py — glia's CPU softmax_cross_entropy kernel against
# torch.nn.functional.cross_entropy in float64: the loss and the logits' gradient on (N, V) logits with (N) labels and
# on a language model's (N, T, V) logits with (N, T) labels, with label_smoothing and ignore_index. Not a gradcheck
# (test_layers has that); run by torch_layers.sh.
import torch
import torch.nn.functional as F
import torchref as T

CASES = (  # logits shape, label_smoothing, ignore_index, every how many labels are set to ignore_index (0: none)
    ((6, 10), 0.0, -100, 0),
    ((5, 7), 0.1, -100, 2),
    ((3, 8, 11), 0.0, -100, 0),
    ((2, 9, 13), 0.0, -100, 3),
    ((4, 5, 6), 0.2, 3, 4),
    ((2, 4, 5), 0.3, -100, 1),  # every position ignored: glia gives 0 where torch gives NaN
)
for shape, smoothing, ignore, every in CASES:
    r = T.Run("[loss]\ntype = softmax_cross_entropy\nlabel_smoothing = %g\nignore_index = %d\n" % (smoothing, ignore),
              [shape])
    y = r.labels()
    assert list(y.shape) == list(shape[:-1])
    if every:
        y.view(-1)[::every] = ignore
        r.set_labels(y)
    r.forward()
    r.backward()
    x = r.input().requires_grad_()
    # torch takes the classes in dimension 1: (N, V, T)
    logits = x if x.dim() == 2 else x.transpose(1, 2)
    loss = F.cross_entropy(logits, y, ignore_index=ignore, label_smoothing=smoothing)
    what = "softmax_cross_entropy %s smoothing %g ignore_index %d every %d" % (shape, smoothing, ignore, every)
    if every == 1:  # nothing counts
        assert torch.isnan(loss)
        T.compare(what + ": loss (all ignored)", r.output(), torch.zeros(1, dtype=torch.float64))
        T.compare(what + ": logits gradient (all ignored)", r.input_grad(), torch.zeros_like(x))
    else:
        loss.backward()
        T.compare(what + ": loss", r.output(), loss.detach().reshape(1))
        T.compare(what + ": logits gradient", r.input_grad(), x.grad)
    r.close()
T.finish("torch_layer_softmax_cross_entropy")
