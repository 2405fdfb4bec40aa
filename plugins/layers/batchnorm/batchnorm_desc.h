/* plugins/layers/batchnorm/batchnorm_desc.h — what the CPU and CUDA batchnorm impls share: the keys, the
 * settings and parameter/buffer indices, create's checks and declarations, infer_shape and flops.
 * Not the maths: each impl computes the statistics and gradients itself. */
#ifndef GLIA_BATCHNORM_DESC_H
#define GLIA_BATCHNORM_DESC_H

#include <glia/glia.h>

extern const struct glia_key glia__batchnorm_keys[];

/* The first member of every batchnorm impl's priv (glia__batchnorm_infer reads l->priv as one). */
struct glia__batchnorm_desc {
    int64_t C;          /* channels: dim 1 of the (N, C) or (N, C, H, W) input */
    double momentum, eps;
    int w, b;           /* parameter indices of weight (gamma) and bias (beta); -1 without affine */
    int rm, rv;         /* buffer indices of running_mean and running_var; -1 without track_running_stats */
};

/* Checks that in[0] is (N, C) or (N, C, H, W), reads the keys of cfg into *d and declares the
 * parameters (weight = 1, bias = 0) and buffers (running_mean = 0, running_var = 1) of l. */
glia_status glia__batchnorm_describe(struct glia_layer *l, const struct glia_section *cfg,
                                     const struct glia_shape *in, struct glia__batchnorm_desc *d);

/* The infer_shape and flops slots (l->priv starts with a struct glia__batchnorm_desc). */
glia_status glia__batchnorm_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                  struct glia_shape *out);
uint64_t glia__batchnorm_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);

#endif
