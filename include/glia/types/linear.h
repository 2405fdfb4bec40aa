/* glia/types/linear.h — the attributes of layer type linear (plugin linear), which every kernel of it reads.
 * Not a kernel: the CPU kernel is in plugins/layers/linear, the CUDA one in cuda.so. */
#ifndef GLIA_TYPES_LINEAR_H
#define GLIA_TYPES_LINEAR_H

#include <stdint.h>
#include <glia/tensor.h>

/* l->attrs of a linear layer: y(..., out) = x(..., in) W(out, in)^T + b(out), one GEMM over the M rows of x. */
struct glia_linear_attrs {
    int64_t in, out;  /* features in (the input's last dim), outputs (key outputs) */
    int w, b;         /* parameter indices of weight (out, in) and bias (out); b = -1 with bias = off */
};

/* M, the GEMM's rows: the product of every dim of the (..., in) shape s but the last. */
static inline int64_t glia_linear_rows(const struct glia_shape *s)
{
    int64_t m = 1;
    for (int i = 0; i < s->ndim - 1; i++) m *= s->dim[i];
    return m;
}

#endif
