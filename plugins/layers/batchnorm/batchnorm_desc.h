/* plugins/layers/batchnorm/batchnorm_desc.h — what the CPU and CUDA batchnorm impls share: the keys, the
 * settings and parameter/buffer indices, create's checks and declarations, infer_shape and flops, when
 * and how SyncBatchNorm exchanges sums between ranks.
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
    bool sync;          /* key sync: SyncBatchNorm (see glia__batchnorm_syncs) */
    bool relu;          /* key activation = relu: y = relu(BN(x)) where v = BN(x) is rounded as without it
                           (relu(v) = v < 0 ? 0 : v, the relu layer's: NaN stays NaN); backward passes dy
                           unless v <= 0, v recomputed from the input with the forward's float coefficients */
};

/* Checks that in[0] is (N, C) or (N, C, H, W), reads the keys of cfg into *d and declares the
 * parameters (weight = 1, bias = 0) and buffers (running_mean = 0, running_var = 1) of l. */
glia_status glia__batchnorm_describe(struct glia_layer *l, const struct glia_section *cfg,
                                     const struct glia_shape *in, struct glia__batchnorm_desc *d);

/* SyncBatchNorm. Whether a forward exchanges statistics between ranks: in training (train), with
 * key sync on, when the layer has a communicator (l->comm, set by the core in [distributed]
 * mode = ddp) of more than one rank. Otherwise the layer is plain BatchNorm on this rank's batch,
 * eval never communicates, and a backward exchanges sums only after a forward that did.
 * With sync, over the R ranks r with n_r values per channel each (batch sizes may differ):
 *   forward:  per channel the local n_r, sum x, sum x^2 (double), summed over ranks in one
 *             all-reduce of 2C + 1 doubles; N = sum n_r, mean = sum x / N,
 *             var = sum x^2 / N - mean^2 (biased, normalizes), and the running statistics move
 *             toward mean and var*N/(N-1) with momentum, as without sync;
 *   backward: per channel the local sum dy and sum dy*x_hat, summed over ranks (2C doubles,
 *             skipped when the input needs no gradient), dx = gamma*invstd*(dy - sum dy / N -
 *             x_hat * sum(dy*x_hat) / N) with those global sums; dgamma and dbeta stay the local
 *             sums (DDP averages parameter gradients over ranks afterwards). */
bool glia__batchnorm_syncs(const struct glia_layer *l, const struct glia__batchnorm_desc *d, bool train);

/* buf(count) = the sum over l->comm's ranks of buf(count) (doubles; host memory, or memory of
 * l's backend), blocking; a failure's context error names the layer and `what`. */
glia_status glia__batchnorm_exchange(struct glia_layer *l, double *buf, size_t count, const char *what);

/* The infer_shape and flops slots (l->priv starts with a struct glia__batchnorm_desc). */
glia_status glia__batchnorm_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                  struct glia_shape *out);
uint64_t glia__batchnorm_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);

#endif
