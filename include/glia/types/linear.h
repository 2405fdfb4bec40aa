/* glia/types/linear.h — the attributes of layer type linear (plugin linear), which every kernel of it reads.
 * Not a kernel: the CPU kernel is in plugins/layers/linear, the CUDA one in cuda.so. */
#ifndef GLIA_TYPES_LINEAR_H
#define GLIA_TYPES_LINEAR_H

#include <stdint.h>

/* l->attrs of a linear layer: y(N, out) = x(N, in) W(out, in)^T + b(out). */
struct glia_linear_attrs {
    int64_t in, out;  /* features in (dim 1 of the input), outputs (key outputs) */
    int w, b;         /* parameter indices of weight (out, in) and bias (out); b = -1 with bias = off */
};

#endif
