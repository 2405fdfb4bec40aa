/* glia/types/layernorm.h — layer type layernorm's attributes and what its kernels share: the row geometry of an
 * input and the parameter arrays. Not the maths: each kernel computes statistics and gradients itself. */
#ifndef GLIA_TYPES_LAYERNORM_H
#define GLIA_TYPES_LAYERNORM_H

#include <stdint.h>
#include <glia/layer.h>

/* l->attrs of a layernorm layer: y = (x - mean)*rstd*weight + bias over the last dimension of the input, PyTorch's
 * nn.LayerNorm(C) (elementwise_affine with affine = on). */
struct glia_layernorm_attrs {
    int64_t C;   /* features: the last dimension of the input, of rank 2 or more ((N, C), (N, T, C), ...) */
    double eps;  /* key eps: rstd = 1/sqrt(var + eps), var the biased variance of the row */
    int w, b;    /* parameter indices of weight (C, init 1) and bias (C, init 0); -1 with affine = off */
};

/* The rows of an input of shape s: every dimension but the last (R = numel / C). */
static inline int64_t glia_layernorm_rows(const struct glia_shape *s)
{
    int64_t r = 1;
    for (int i = 0; i + 1 < s->ndim; i++) r *= s->dim[i];
    return r;
}

/* The weight and bias of layernorm layer l (C floats each in the memory of l's backend), NULL with affine = off. */
static inline const float *glia_layernorm_weight(const struct glia_layer *l)
{
    const struct glia_layernorm_attrs *a = (const struct glia_layernorm_attrs *)l->attrs;
    return a->w >= 0 ? (const float *)l->params[a->w].value->data : (const float *)0;
}

static inline const float *glia_layernorm_bias(const struct glia_layer *l)
{
    const struct glia_layernorm_attrs *a = (const struct glia_layernorm_attrs *)l->attrs;
    return a->b >= 0 ? (const float *)l->params[a->b].value->data : (const float *)0;
}

#endif
