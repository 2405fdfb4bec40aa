/* plugins/layers/conv2d/conv2d_desc.h — what the CPU (oneDNN) and CUDA (cuDNN) impls of conv2d
 * share: keys, geometry, create's key reading and parameters, shape inference, flops.
 * Not the maths: each impl computes forward and backward in its own file. Not a plugin. */
#ifndef GLIA_CONV2D_DESC_H
#define GLIA_CONV2D_DESC_H

#include <glia/glia.h>

#define GLIA__CONV2D_DOC \
    "2-D convolution, input (N, C, H, W) -> (N, filters, OH, OW); square or rectangular kernel and padding, " \
    "stride, dilation, groups"

/* The geometry of one conv2d layer. Each impl's l->priv starts with this struct (first member),
 * so that glia__conv2d_infer and glia__conv2d_flops read it from l->priv. */
struct glia__conv2d_geom {
    int64_t C, F;                   /* channels in, filters */
    int64_t kh, kw, ph, pw;         /* kernel height and width, padding of H (top and bottom) and of W */
    int64_t s, d, g;                /* stride, dilation (both square), groups */
    bool bias;                      /* bias = on */
    int w, b;                       /* parameter indices; b = -1 without bias */
};

extern const struct glia_key glia__conv2d_keys[];

/* Output extent along H (glia__conv2d_out_h) or W (glia__conv2d_out_w) for an input extent in;
 * < 1 when the dilated kernel does not fit. */
int64_t glia__conv2d_out_h(const struct glia__conv2d_geom *g, int64_t in);
int64_t glia__conv2d_out_w(const struct glia__conv2d_geom *g, int64_t in);

/* Read the keys of cfg for input in[0] (N, C, H, W) into *g and check them (4-D input, groups
 * dividing channels and filters, a non-empty output); errors name the section. size_h / size_w
 * and padding_h / padding_w default to size and padding (when both are written, the specific
 * one wins). Declares nothing: g->w = g->b = -1. */
glia_status glia__conv2d_read(const struct glia_section *cfg, const struct glia_shape *in,
                              struct glia__conv2d_geom *g);

/* Declare "weight" (F, C/groups, kh, kw) and, with bias on, "bias" (F), in that order, both
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) like PyTorch; sets g->w and g->b. */
glia_status glia__conv2d_add_params(struct glia_layer *l, struct glia__conv2d_geom *g);

/* infer_shape and flops of both impls (l->priv starts with a struct glia__conv2d_geom). */
glia_status glia__conv2d_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                               struct glia_shape *out);
uint64_t glia__conv2d_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);

#endif
