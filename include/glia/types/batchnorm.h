/* glia/types/batchnorm.h — layer type batchnorm's attributes and what its kernels share: parameter arrays, errors,
 * SyncBatchNorm's rule and exchange. Not the maths: each kernel computes statistics and gradients itself. */
#ifndef GLIA_TYPES_BATCHNORM_H
#define GLIA_TYPES_BATCHNORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <glia/comm.h>
#include <glia/layer.h>
#include <glia/log.h>

/* l->attrs of a batchnorm layer. */
struct glia_batchnorm_attrs {
    int64_t C;             /* channels: dim 1 of the (N, C) or (N, C, H, W) input */
    double momentum, eps;  /* keys momentum and eps */
    int w, b;              /* parameter indices of weight (gamma) and bias (beta); -1 with affine = off */
    int rm, rv;            /* buffer indices of running_mean and running_var; -1 with track_running_stats = off */
    bool sync;             /* key sync: SyncBatchNorm (see glia_batchnorm_syncs) */
    bool relu;             /* key activation = relu: y = relu(BN(x)) where v = BN(x) is rounded as without it
                              (relu(v) = v < 0 ? 0 : v, the relu layer's: NaN stays NaN); backward passes dy
                              unless v <= 0, v recomputed from the input with the forward's float coefficients */
};

/* The weight (gamma), bias (beta), running mean and running variance of batchnorm layer l: C floats each in the
 * memory of l's backend, NULL where the layer has none (affine, track_running_stats off). */
struct glia_batchnorm_tensors {
    const float *gamma, *beta;
    float *rmean, *rvar;
};

static inline struct glia_batchnorm_tensors glia_batchnorm_tensors(const struct glia_layer *l)
{
    const struct glia_batchnorm_attrs *a = (const struct glia_batchnorm_attrs *)l->attrs;
    struct glia_batchnorm_tensors t = {
        a->w >= 0 ? (const float *)l->params[a->w].value->data : NULL,
        a->b >= 0 ? (const float *)l->params[a->b].value->data : NULL,
        a->rm >= 0 ? (float *)l->buffers[a->rm].value->data : NULL,
        a->rv >= 0 ? (float *)l->buffers[a->rv].value->data : NULL,
    };
    return t;
}

/* The error of a training forward of l with n < 2 values per channel (no batch variance to normalize by) on input
 * shape in: with sync, n counts the values of all l->comm's ranks. */
static inline glia_status glia_batchnorm_too_few(const struct glia_layer *l, double n, const struct glia_shape *in,
                                                 bool sync)
{
    char buf[64];
    glia_shape_str(in, buf, sizeof buf);
    if (!sync)
        return glia_error(l->ctx, GLIA_ESHAPE, "[%s] batchnorm needs more than 1 value per channel in training, got "
                          "input %s", l->name, buf);
    return glia_error(l->ctx, GLIA_ESHAPE, "[%s] batchnorm needs more than 1 value per channel in training, got %.0f "
                      "over %d ranks (input %s here)", l->name, n, l->comm->info.world, buf);
}

/* SyncBatchNorm. Whether a forward of batchnorm layer l exchanges statistics between ranks: in training
 * (train), with key sync on, when the layer has a communicator (l->comm, set by the core in [distributed]
 * mode = ddp) of more than one rank. Otherwise the layer is plain BatchNorm on this rank's batch, eval never
 * communicates, and a backward exchanges sums only after a forward that did.
 * With sync, over the R ranks r with n_r values per channel each (batch sizes may differ):
 *   forward:  per channel the local n_r, sum x, sum x^2 (double), summed over ranks in one all-reduce of
 *             2C + 1 doubles; N = sum n_r, mean = sum x / N, var = sum x^2 / N - mean^2 (biased, normalizes),
 *             and the running statistics move toward mean and var*N/(N-1) with momentum, as without sync;
 *   backward: per channel the local sum dy and sum dy*x_hat, summed over ranks (2C doubles, skipped when the
 *             input needs no gradient), dx = gamma*invstd*(dy - sum dy / N - x_hat * sum(dy*x_hat) / N) with
 *             those global sums; dgamma and dbeta stay the local sums (DDP averages parameter gradients over
 *             ranks afterwards). */
static inline bool glia_batchnorm_syncs(const struct glia_layer *l, bool train)
{
    const struct glia_batchnorm_attrs *a = (const struct glia_batchnorm_attrs *)l->attrs;
    return train && a->sync && l->comm && l->comm->info.world > 1;
}

/* buf(count) = the sum over l->comm's ranks of buf(count) (doubles; host memory, or memory of l's backend),
 * blocking; a failure's context error names the layer and `what`. */
static inline glia_status glia_batchnorm_exchange(struct glia_layer *l, double *buf, size_t count, const char *what)
{
    glia_status st = glia_comm_all_reduce_sync(l->comm, buf, count, GLIA_F64, GLIA_REDUCE_SUM);
    if (!st) return GLIA_OK;
    return glia_error(l->ctx, st, "[%s] batchnorm (sync) %s: %s", l->name, what, glia_context_error(l->ctx));
}

#endif
