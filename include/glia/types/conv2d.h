/* glia/types/conv2d.h — the attributes of layer type conv2d (plugin conv2d), which every kernel of it reads, and
 * its output-size formula. Not a kernel: the CPU (oneDNN) one is in plugins/layers/conv2d, the cuDNN one in cuda.so. */
#ifndef GLIA_TYPES_CONV2D_H
#define GLIA_TYPES_CONV2D_H

#include <stdint.h>

/* The activation applied to a conv2d's output in the same pass (key activation). */
enum glia_conv2d_act {
    GLIA_CONV2D_ACT_NONE = 0,
    GLIA_CONV2D_ACT_RELU = 1  /* y = relu(conv(x) + b); backward masks dy by y > 0 (reads the output) */
};

/* l->attrs of a conv2d layer: input (N, C, H, W) -> output (N, F, OH, OW), weight (F, C/g, kh, kw), bias (F). */
struct glia_conv2d_attrs {
    int64_t C, F;            /* channels in (dim 1 of the input), filters (key filters) */
    int64_t kh, kw, ph, pw;  /* kernel height and width, zero padding of H (top and bottom) and of W (left and right) */
    int64_t s, d, g;         /* stride and dilation (both square), groups */
    int w, b;                /* parameter indices of weight and bias; b = -1 with bias = off */
    int act;                 /* enum glia_conv2d_act (ABI 2.4) */
};

/* Output extent of one spatial dimension: input extent in, kernel k, padding pad (on both sides), stride s,
 * dilation d; 0 when the dilated kernel does not fit. */
static inline int64_t glia_conv2d_out_extent(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t d)
{
    int64_t span = in + 2 * pad - d * (k - 1) - 1;
    return span < 0 ? 0 : span / s + 1;
}

/* OH for an input of height in (glia_conv2d_out_h), OW for an input of width in (glia_conv2d_out_w). */
static inline int64_t glia_conv2d_out_h(const struct glia_conv2d_attrs *a, int64_t in)
{
    return glia_conv2d_out_extent(in, a->kh, a->ph, a->s, a->d);
}

static inline int64_t glia_conv2d_out_w(const struct glia_conv2d_attrs *a, int64_t in)
{
    return glia_conv2d_out_extent(in, a->kw, a->pw, a->s, a->d);
}

#endif
