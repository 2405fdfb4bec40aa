/* plugins/layers/batchnorm/batchnorm_desc.c — the batchnorm description shared by the CPU plugin and
 * cuda.so: keys, create's checks and declarations, infer_shape, flops, and SyncBatchNorm's exchange
 * between ranks. Not the maths. */
#include <stdio.h>
#include <string.h>
#include "batchnorm_desc.h"

const struct glia_key glia__batchnorm_keys[] = {
    GLIA_KEY("momentum", GLIA_KEY_FLOAT, "0.1", "running = (1 - momentum)*running + momentum*batch statistic",
             .min = 0, .max = 1),
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-5", "added to the variance before the square root", .min = 1e-12, .max = 1),
    GLIA_KEY("affine", GLIA_KEY_BOOL, "on", "learned per-channel weight (gamma, init 1) and bias (beta, init 0)"),
    GLIA_KEY("track_running_stats", GLIA_KEY_BOOL, "on",
             "keep running mean and variance and use them in eval (off: batch statistics in eval too)"),
    GLIA_KEY("sync", GLIA_KEY_BOOL, "off",
             "SyncBatchNorm: in training, batch statistics over all ranks of [distributed] mode = ddp "
             "(eval and a single process: this rank's batch)"),
    GLIA_KEY("activation", GLIA_KEY_ENUM, "none",
             "relu: y = relu(batchnorm(x)) in the same pass over the data (what [graph] fuse_pointwise makes of a "
             "batchnorm read only by a relu) | none", .choices = "none|relu"),
    GLIA_KEY_END};

glia_status glia__batchnorm_describe(struct glia_layer *l, const struct glia_section *cfg,
                                     const struct glia_shape *in, struct glia__batchnorm_desc *d)
{
    char buf[64];
    if (in[0].ndim != 2 && in[0].ndim != 4)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "batchnorm expects (N, C) or (N, C, H, W) input, got %s",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    d->C = in[0].dim[1];
    d->momentum = glia_section_float(cfg, "momentum");
    d->eps = glia_section_float(cfg, "eps");
    d->sync = glia_section_bool(cfg, "sync");
    d->relu = !strcmp(glia_section_str(cfg, "activation"), "relu");
    d->w = d->b = d->rm = d->rv = -1;
    struct glia_shape cs = glia_shape_make(1, (int64_t[]){d->C});
    glia_status st = GLIA_OK;
    if (glia_section_bool(cfg, "affine")) {
        st = glia_layer_add_param(l, "weight", &cs, (struct glia_param_init){GLIA_INIT_CONST, 1.0}, &d->w);
        if (!st) st = glia_layer_add_param(l, "bias", &cs, (struct glia_param_init){GLIA_INIT_ZEROS, 0.0}, &d->b);
    }
    if (!st && glia_section_bool(cfg, "track_running_stats")) {
        st = glia_layer_add_buffer(l, "running_mean", &cs, (struct glia_param_init){GLIA_INIT_ZEROS, 0.0}, &d->rm);
        if (!st)
            st = glia_layer_add_buffer(l, "running_var", &cs, (struct glia_param_init){GLIA_INIT_CONST, 1.0}, &d->rv);
    }
    return st;
}

bool glia__batchnorm_syncs(const struct glia_layer *l, const struct glia__batchnorm_desc *d, bool train)
{
    return train && d->sync && l->comm && l->comm->info.world > 1;
}

glia_status glia__batchnorm_exchange(struct glia_layer *l, double *buf, size_t count, const char *what)
{
    glia_status st = glia_comm_all_reduce_sync(l->comm, buf, count, GLIA_F64, GLIA_REDUCE_SUM);
    if (!st) return GLIA_OK;
    char why[512];
    snprintf(why, sizeof why, "%s", glia_context_error(l->ctx));
    return glia_error(l->ctx, st, "[%s] batchnorm (sync) %s: %s", l->name, what, why);
}

glia_status glia__batchnorm_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                  struct glia_shape *out)
{
    (void)n_in;
    const struct glia__batchnorm_desc *d = l->priv;
    if ((in[0].ndim != 2 && in[0].ndim != 4) || in[0].dim[1] != d->C) return GLIA_ESHAPE;
    *out = in[0];
    return GLIA_OK;
}

/* statistics (sum, squared deviation) and the normalization: about four multiply-adds per element;
 * with activation = relu one more operation, the relu layer's count */
uint64_t glia__batchnorm_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    (void)n_in;
    const struct glia__batchnorm_desc *d = l->priv;
    return (d && d->relu ? 9u : 8u) * (uint64_t)glia_shape_numel(&in[0]);
}
