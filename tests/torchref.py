#!/usr/bin/python3
# tests/torchref.py — runs one glia layer alone on the CPU through libglia's C API (ctypes, glia_layer_run) and hands
# its inputs, output, gradients and parameters to the tests/torch_layer_*.py programs as float64 torch tensors, with
# compare() to check them against a PyTorch reference. A helper module, not a test: tests/torch_layers.sh runs them.
import ctypes as C
import os
import sys

import torch

MAX_DIMS = 8
DTYPES = {0: (torch.float32, 4), 3: (torch.int32, 4)}  # enum glia_dtype: GLIA_F32, GLIA_I32


class Shape(C.Structure):  # struct glia_shape
    _fields_ = [("ndim", C.c_int), ("dim", C.c_int64 * MAX_DIMS)]


class Tensor(C.Structure):  # struct glia_tensor, up to shape
    _fields_ = [("dtype", C.c_int), ("shape", Shape)]


class Device(C.Structure):  # struct glia_device, passed by value
    _fields_ = [("type", C.c_int), ("index", C.c_int)]


class ParamInit(C.Structure):  # struct glia_param_init
    _fields_ = [("kind", C.c_int), ("a", C.c_double)]


class Param(C.Structure):  # struct glia_param
    _fields_ = [("name", C.c_char_p), ("shape", Shape), ("init", ParamInit), ("decay", C.c_bool),
                ("value", C.POINTER(Tensor)), ("grad", C.POINTER(Tensor)), ("grad_unset", C.c_bool)]


class Layer(C.Structure):  # struct glia_layer
    _fields_ = [("name", C.c_char_p), ("type", C.c_void_p), ("kernel", C.c_void_p), ("ctx", C.c_void_p),
                ("backend", C.c_void_p), ("attrs", C.c_void_p), ("state", C.c_void_p), ("n_params", C.c_int),
                ("params", C.POINTER(Param)), ("n_buffers", C.c_int), ("buffers", C.POINTER(Param))]


def _lib():
    top = os.path.dirname(os.path.dirname(os.path.abspath(os.environ.get("GLIA_BIN", "tools/glia"))))
    lib = C.CDLL(os.path.join(top, ".libs", "libglia.so"))  # the build tree's (make check sets GLIA_BIN)
    vp = C.c_void_p
    lib.glia_context_new.argtypes = [C.POINTER(vp)]
    lib.glia_context_free.argtypes = [vp]
    lib.glia_context_error.restype = C.c_char_p
    lib.glia_context_error.argtypes = [vp]
    lib.glia_layer_run_new.argtypes = [vp, C.c_char_p, Device, C.POINTER(Shape), C.c_int, C.c_int,
                                       C.c_uint64, C.POINTER(vp)]
    for f in ("forward",):
        getattr(lib, "glia_layer_run_" + f).argtypes = [vp, C.c_bool]
    for f in ("backward", "sync"):
        getattr(lib, "glia_layer_run_" + f).argtypes = [vp]
    for f in ("input", "input_grad"):
        getattr(lib, "glia_layer_run_" + f).argtypes = [vp, C.c_int]
        getattr(lib, "glia_layer_run_" + f).restype = C.POINTER(Tensor)
    for f in ("output", "output_grad", "labels"):
        getattr(lib, "glia_layer_run_" + f).argtypes = [vp]
        getattr(lib, "glia_layer_run_" + f).restype = C.POINTER(Tensor)
    lib.glia_layer_run_set_ids.argtypes = [vp, C.c_int, C.POINTER(C.c_int32), C.c_size_t]
    lib.glia_layer_run_layer.argtypes = [vp]
    lib.glia_layer_run_layer.restype = C.POINTER(Layer)
    lib.glia_layer_run_free.argtypes = [vp]
    lib.glia_tensor_nbytes.argtypes = [C.POINTER(Tensor)]
    lib.glia_tensor_nbytes.restype = C.c_size_t
    lib.glia_tensor_to_host.argtypes = [C.POINTER(Tensor), vp, C.c_size_t]
    lib.glia_tensor_from_host.argtypes = [C.POINTER(Tensor), vp, C.c_size_t]
    return lib


LIB = _lib()


class Run:
    """One layer (an INI section) built by glia_layer_run_new on the CPU with seeded N(0,1) inputs of the given
    shapes; forward() and backward() run it, the accessors return float64 copies (int64 for i32 tensors)."""

    def __init__(self, ini, shapes, seed=1):
        self.ctx = C.c_void_p()
        assert LIB.glia_context_new(C.byref(self.ctx)) == 0
        sh = (Shape * len(shapes))()
        for k, s in enumerate(shapes):
            sh[k].ndim = len(s)
            for i, d in enumerate(s):
                sh[k].dim[i] = d
        self.r = C.c_void_p()
        dev = Device(0, 0)  # GLIA_DEVICE_CPU, index 0
        self._check(LIB.glia_layer_run_new(self.ctx, ini.encode(), dev, sh, len(shapes), 0, seed, C.byref(self.r)),
                    "glia_layer_run_new")
        self.n_in = len(shapes)

    def _check(self, st, what):
        if st != 0:
            sys.exit("%s: %s (status %d)" % (what, LIB.glia_context_error(self.ctx).decode(), st))

    def set_ids(self, k, ids):
        """Input k becomes the i32 token ids of torch tensor ids (its shape's element count), with no gradient."""
        v = ids.to(torch.int32).contiguous()
        self._check(LIB.glia_layer_run_set_ids(self.r, k, C.cast(v.data_ptr(), C.POINTER(C.c_int32)), v.numel()),
                    "glia_layer_run_set_ids")

    def forward(self, train=True):
        self._check(LIB.glia_layer_run_forward(self.r, train), "forward")
        self._check(LIB.glia_layer_run_sync(self.r), "sync")

    def backward(self):
        self._check(LIB.glia_layer_run_backward(self.r), "backward")
        self._check(LIB.glia_layer_run_sync(self.r), "sync")

    @staticmethod
    def get(t):
        """A float64 (or int64) torch copy of glia tensor t (a POINTER(Tensor); None for NULL)."""
        if not t:
            return None
        tt, size = DTYPES[t.contents.dtype]
        shape = [t.contents.shape.dim[i] for i in range(t.contents.shape.ndim)]
        out = torch.empty(shape, dtype=tt)
        assert LIB.glia_tensor_nbytes(t) == out.numel() * size
        assert LIB.glia_tensor_to_host(t, out.data_ptr(), out.numel() * size) == 0
        return out.double() if tt == torch.float32 else out.long()

    @staticmethod
    def put(t, value):
        """Writes value (any torch tensor of t's element count) into glia tensor t as t's dtype."""
        tt, size = DTYPES[t.contents.dtype]
        v = value.to(tt).contiguous()
        assert LIB.glia_tensor_nbytes(t) == v.numel() * size
        assert LIB.glia_tensor_from_host(t, v.data_ptr(), v.numel() * size) == 0

    def input(self, k=0):
        return self.get(LIB.glia_layer_run_input(self.r, k))

    def input_grad(self, k=0):
        return self.get(LIB.glia_layer_run_input_grad(self.r, k))

    def output(self):
        return self.get(LIB.glia_layer_run_output(self.r))

    def output_grad(self):
        return self.get(LIB.glia_layer_run_output_grad(self.r))

    def labels(self):
        """A loss layer's labels, int64 of the logits' shape without its last dimension (None for other layers)."""
        return self.get(LIB.glia_layer_run_labels(self.r))

    def set_labels(self, value):
        """Writes a loss layer's labels (e.g. some ignore_index) before forward()."""
        self.put(LIB.glia_layer_run_labels(self.r), value)

    def params(self):
        """{name: (value, grad)} of the layer's parameters (grad None before a backward wrote it)."""
        l = LIB.glia_layer_run_layer(self.r).contents
        return {l.params[i].name.decode(): (self.get(l.params[i].value), self.get(l.params[i].grad))
                for i in range(l.n_params)}

    def param_tensor(self, name):
        """The glia tensor (POINTER(Tensor)) of parameter name's value, to set it with put()."""
        l = LIB.glia_layer_run_layer(self.r).contents
        for i in range(l.n_params):
            if l.params[i].name.decode() == name:
                return l.params[i].value
        raise KeyError(name)

    def close(self):
        LIB.glia_layer_run_free(self.r)
        LIB.glia_context_free(self.ctx)


FAILED = []


def compare(what, got, want, rtol=1e-4, atol=1e-5):
    """Records a failure unless |got - want| <= atol + rtol |want| everywhere (float32 kernels against a float64
    reference); prints one line either way."""
    err = (got - want).abs()
    bad = err > atol + rtol * want.abs()
    worst = err.max().item() if err.numel() else 0.0
    if got.shape != want.shape or bad.any():
        FAILED.append(what)
        print("FAIL %s: shape %s vs %s, max |err| %.3g" % (what, tuple(got.shape), tuple(want.shape), worst))
    else:
        print("ok   %s: max |err| %.3g" % (what, worst))


def finish(name):
    """Exit status of a tests/torch_layer_*.py program: 0 when every compare passed."""
    print("%s: %d failed" % (name, len(FAILED)))
    sys.exit(1 if FAILED else 0)
