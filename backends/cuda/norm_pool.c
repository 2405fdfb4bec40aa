/* backends/cuda/norm_pool.c — the CUDA kernels ("cuda") of layer types batchnorm (and SyncBatchNorm), maxpool2d,
 * avgpool2d, global_avgpool and concat: host logic (format checks, saved state, scratch, launches on the backend's
 * stream) reading the attributes their types' plugins fill (glia/types/), with the CPU kernels' semantics. Not
 * the types (keys, shapes: their plugins), nor the device code (norm_pool_kernels.cu); no cuDNN, so that results
 * follow the CPU kernels' definitions exactly. */
#include <stdlib.h>
#include <string.h>
#include <glia/types/batchnorm.h>
#include <glia/types/concat.h>
#include <glia/types/pool2d.h>
#include "cuda_internal.h"
#include "norm_pool_kernels.h"

/* ---- shared helpers ---- */

static float *dev(const struct glia_tensor *t) { return (float *)t->data; }

/* Whether t's elements lie in memory in format f's order: dense NCHW (any rank) for GLIA_CONTIGUOUS, NHWC for
 * GLIA_CHANNELS_LAST; a 4-D tensor whose C or H*W is 1 has both orders (the same bytes). */
static bool in_order(const struct glia_tensor *t, enum glia_memory_format f)
{
    const int64_t *d = t->shape.dim;
    if (glia_tensor_is_contiguous(t))
        return f == GLIA_CONTIGUOUS || t->shape.ndim != 4 || d[1] == 1 || d[2] * d[3] == 1;
    return f == GLIA_CHANNELS_LAST && t->shape.ndim == 4 && glia_tensor_memory_format(t) == GLIA_CHANNELS_LAST;
}

/* The memory format of the call: that of t[0], checked against the other tensors (NULL entries skipped);
 * GLIA_EUNSUPPORTED naming the layer when one is in another order or neither dense order. */
static glia_status call_format(const struct glia_layer *l, const struct glia_tensor *const *t, int n,
                               enum glia_memory_format *f)
{
    *f = glia_tensor_memory_format(t[0]);
    for (int i = 0; i < n; i++)
        if (t[i] && !in_order(t[i], *f))
            return glia_error(l->ctx, GLIA_EUNSUPPORTED,
                              "[%s] %s (cuda): tensors of one call must all be %s (dense NCHW or NHWC); tensor %d is not",
                              l->name, l->type->name, glia_memory_format_name(*f), i);
    return GLIA_OK;
}

static cudaStream_t stream_of(const struct glia_layer *l) { return glia__cuda_of(l->backend)->stream; }

/* The element type of a call of a kernel with GLIA_KERNEL_HALF: that of t[0] (f32, f16 or bf16), checked against the
 * other tensors (NULL entries skipped); GLIA_EINVAL naming the layer otherwise. */
static glia_status call_dtype(const struct glia_layer *l, const struct glia_tensor *const *t, int n,
                              enum glia_dtype *dt)
{
    *dt = t[0]->dtype;
    bool ok = *dt == GLIA_F32 || *dt == GLIA_F16 || *dt == GLIA_BF16;
    for (int i = 1; i < n && ok; i++) ok = !t[i] || t[i]->dtype == *dt;
    if (!ok)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] %s (cuda): the tensors of one call must all be f32, f16 or bf16 "
                          "alike (tensor 0 is %s)", l->name, l->type->name, glia_dtype_name(*dt));
    return GLIA_OK;
}

/* ---- batchnorm ---- */

/* l->state of the batchnorm kernel */
struct cuda_bn {
    struct glia_tensor *saved;      /* (3C) f32 on the device: mean_hi(C), mean_lo(C), invstd(C) of the last
                                       training forward (the mean as a float pair: hi + lo); with activation =
                                       relu (6C): then that forward's coef(3, C), for backward's relu mask (owned) */
    int64_t kept;                   /* elements of the input that saved belongs to (0: none kept) */
    struct glia_tensor *sums;       /* sync: (2C + 1) f64 on the device, the sums exchanged between ranks (owned) */
    bool synced;                    /* the last training forward synced: sums[2C] holds its count over all
                                       ranks (on the device) */
    bool fresh;                     /* sums hold the statistics the last training forward exchanged, no
                                       backward since: a recompute of it (the same batch) uses them without
                                       exchanging */
    struct glia_tensor *tickets;    /* GLIA_CUDA_BN_FUSE=on: (C) zeroed unsigned on the device, the tickets of the
                                       statistics' and gradient sums' channel groups (owned) */
};

/* x as (N, C, L): NCHW (N, C, H*W); channels_last and 2-D as rows (N*H*W, C, 1); also NCHW with H*W = 1. */
static struct glia__bn_geom bn_geom(const struct glia_tensor *x, enum glia_memory_format f)
{
    const int64_t *d = x->shape.dim;
    int64_t HW = x->shape.ndim == 4 ? d[2] * d[3] : 1;
    return f == GLIA_CHANNELS_LAST ? glia__cuda_bn_geom(d[0] * HW, d[1], 1) : glia__cuda_bn_geom(d[0], d[1], HW);
}

static void bn_destroy(struct glia_layer *l)
{
    struct cuda_bn *p = l->state;
    glia_tensor_release(p->saved);
    glia_tensor_release(p->sums);
    glia_tensor_release(p->tickets);
}

/* GLIA_CUDA_BN_FUSE=on: the statistics and the gradient sums finalize in their passes' own launches (a launch less
 * each, the finalize on one block per channel group; docs/cuda.md), with p->tickets made and zeroed on first use (the
 * kernels leave them zero); *tickets NULL when off. Read at each call: a benchmark or test may switch it. */
static glia_status bn_fuse(struct glia_layer *l, struct cuda_bn *p, unsigned **tickets)
{
    const struct glia_batchnorm_attrs *d = l->attrs;
    const char *v = getenv("GLIA_CUDA_BN_FUSE");
    *tickets = NULL;
    if (!v || strcmp(v, "on")) return GLIA_OK;
    glia_status st = GLIA_OK;
    if (!p->tickets) {
        st = glia_tensor_new(l->backend, GLIA_I32, &(struct glia_shape){1, {d->C}}, &p->tickets);
        if (!st) st = glia_tensor_fill_zero(p->tickets);
        if (st) {
            glia_tensor_release(p->tickets);
            p->tickets = NULL;
            return st;
        }
    }
    *tickets = p->tickets->data;
    return GLIA_OK;
}

/* p->saved, made on the first training forward: (3, C) floats, or (6, C) with activation = relu. */
static glia_status saved_make(struct glia_layer *l, struct cuda_bn *p)
{
    const struct glia_batchnorm_attrs *d = l->attrs;
    if (p->saved) return GLIA_OK;
    return glia_tensor_new(l->backend, GLIA_F32, &(struct glia_shape){1, {(d->relu ? 6 : 3) * d->C}}, &p->saved);
}

/* ---- SyncBatchNorm (key sync; glia/types/batchnorm.h says when it applies and what it computes) ---- */

/* Scratch of a sync call: 2 partial sums (S, C) in double, then coef(3, C) in float. */
static size_t sync_scratch_bytes(struct glia__bn_geom g)
{
    return (size_t)(2 * g.S * g.C) * sizeof(double) + (size_t)(3 * g.C) * sizeof(float);
}

/* Training over all ranks: per split sums of x and x^2 in double, added per channel in a fixed order into
 * sums(2C + 1) with this rank's count, summed over the ranks (glia_batchnorm_exchange: staged through the
 * host when the transport takes host memory only); then the statistics
 * (mean = sum x / N, var = sum x^2 / N - mean^2), running statistics toward mean and var*N/(N-1), saved and
 * coef from the global sums (the count N read on the device: no wait for the exchange), and the
 * normalization as without sync. The host reads N back only when this rank has fewer than 2 values per channel
 * (N >= this rank's count, so N >= 2 is known otherwise). reuse (a recompute of the last forward): sums as
 * that forward left them, nothing summed or exchanged again. */
static glia_status bn_forward_sync(struct glia_layer *l, const struct glia_fwd *a, struct glia__bn_geom g,
                                   enum glia_dtype dt, bool reuse)
{
    const struct glia_batchnorm_attrs *d = l->attrs;
    struct cuda_bn *p = l->state;
    const struct glia_tensor *x = a->in[0];
    int64_t C = g.C;
    glia_status st = saved_make(l, p);
    if (!st && !p->sums) st = glia_tensor_new(l->backend, GLIA_F64, &(struct glia_shape){1, {2 * C + 1}}, &p->sums);
    void *scratch;
    if (!st) st = glia__cuda_scratch(glia__cuda_of(l->backend), sync_scratch_bytes(g), &scratch);
    if (st) return st;
    double *pa = scratch, *pb = pa + g.S * C, *sums = p->sums->data;
    /* with activation = relu, coef is kept for backward's mask in saved(3..5, C) */
    float *coef = d->relu ? dev(p->saved) + 3 * C : (float *)(pb + g.S * C);
    struct glia_batchnorm_tensors t = glia_batchnorm_tensors(l);
    cudaStream_t s = stream_of(l);
    if (!reuse) {  /* else sums still hold this batch's statistics over the ranks */
        CUDA_TRY(l->ctx, glia__cuda_bn_sync_partials(pa, pb, x->data, NULL, dt, NULL, false, g, s));
        CUDA_TRY(l->ctx, glia__cuda_bn_sync_collect(sums, NULL, false, NULL, false, pa, pb, true, g, s));
        if ((st = glia_batchnorm_exchange(l, sums, (size_t)(2 * C + 1), "statistics"))) return st;
    }
    if (g.N * g.L < 2) {  /* few values here: the count over the ranks decides (a host wait, on this path only) */
        double n;
        CUDA_TRY(l->ctx, cudaMemcpyAsync(&n, sums + 2 * C, sizeof n, cudaMemcpyDeviceToHost, s));
        CUDA_TRY(l->ctx, cudaStreamSynchronize(s));
        if (n < 2) return glia_batchnorm_too_few(l, n, &x->shape, true);
    }
    CUDA_TRY(l->ctx, glia__cuda_bn_sync_finalize(coef, dev(p->saved), t.rmean, t.rvar, t.gamma, t.beta, sums, g,
                                                 t.rmean != NULL && !a->recompute, d->momentum, d->eps, s));
    CUDA_TRY(l->ctx, glia__cuda_bn_normalize(a->out->data, x->data, dt, coef, d->relu, g, s));
    p->kept = glia_tensor_numel(x);
    p->synced = true;
    p->fresh = true;
fail:
    return st;
}

/* Backward after a forward that synced, with N its count over all ranks (sums[2C]): per split sums of dy and dy*x_hat
 * in double, added per channel into sums(2C); dgamma (+)= sum dy*x_hat and dbeta (+)= sum dy of this rank;
 * with an input gradient, sums summed over the ranks and dx (+)= gamma*invstd/N * (N*dy - sum dy -
 * x_hat*sum dy*x_hat) with those (glia__cuda_bn_dx). */
static glia_status bn_backward_sync(struct glia_layer *l, const struct glia_bwd *a, struct glia__bn_geom g,
                                    enum glia_dtype dt)
{
    const struct glia_batchnorm_attrs *d = l->attrs;
    struct cuda_bn *p = l->state;
    const struct glia_tensor *x = a->in[0];
    int64_t C = g.C;
    struct glia_param *pw = d->w >= 0 ? &l->params[d->w] : NULL, *pb = d->b >= 0 ? &l->params[d->b] : NULL;
    void *scratch;
    glia_status st = glia__cuda_scratch(glia__cuda_of(l->backend), sync_scratch_bytes(g), &scratch);
    if (st) return st;
    double *pdy = scratch, *pdyx = pdy + g.S * C, *sums = p->sums->data;
    float *coef = (float *)(pdyx + g.S * C);
    const float *saved = dev(p->saved), *gamma = pw ? dev(pw->value) : NULL;
    cudaStream_t s = stream_of(l);
    CUDA_TRY(l->ctx, glia__cuda_bn_sync_partials(pdy, pdyx, x->data, a->dout->data, dt, saved, d->relu, g, s));
    CUDA_TRY(l->ctx, glia__cuda_bn_sync_collect(sums, pw ? dev(pw->grad) : NULL, pw && !pw->grad_unset,
                                                pb ? dev(pb->grad) : NULL, pb && !pb->grad_unset, pdy, pdyx, false,
                                                g, s));
    if (!a->din[0]) return GLIA_OK;  /* the same on every rank (one model): none of them exchanges */
    if ((st = glia_batchnorm_exchange(l, sums, (size_t)(2 * C), "gradient sums"))) return st;
    CUDA_TRY(l->ctx, glia__cuda_bn_sync_grad_coef(coef, gamma, saved, sums, g, s));
    CUDA_TRY(l->ctx, glia__cuda_bn_dx(a->din[0]->data, a->din_accumulate[0], x->data, a->dout->data, dt, saved, coef,
                                      d->relu, g, s));
fail:
    return st;
}

/* Training: per channel over M = N*H*W values, Welford mean and biased variance (about a pivot, combined in
 * double in a fixed order), y = (x - mean)*invstd*gamma + beta, mean (as a float pair) and invstd kept for
 * backward, running statistics
 * moved toward the batch mean and the unbiased variance var*M/(M-1). Eval: the running statistics (or,
 * without them, the batch's), nothing kept or updated. x and y f32, f16 or bf16 alike (call_dtype); the rest f32.
 */
static glia_status bn_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_batchnorm_attrs *d = l->attrs;
    struct cuda_bn *p = l->state;
    const struct glia_tensor *x = a->in[0];
    enum glia_memory_format f;
    enum glia_dtype dt;
    glia_status st = call_format(l, (const struct glia_tensor *[]){x, a->out}, 2, &f);
    if (!st) st = call_dtype(l, (const struct glia_tensor *[]){x, a->out}, 2, &dt);
    if (st) return st;
    struct glia__bn_geom g = bn_geom(x, f);
    int64_t C = g.C, M = g.N * g.L;
    bool reuse = a->recompute && p->fresh && p->synced && p->kept == glia_tensor_numel(x);
    p->kept = 0;
    p->synced = false;
    p->fresh = false;
    if (glia_batchnorm_syncs(l, a->train)) return bn_forward_sync(l, a, g, dt, reuse);
    if (a->train && M < 2) return glia_batchnorm_too_few(l, (double)M, &x->shape, false);
    bool use_running = !a->train && d->rm >= 0, update = a->train && !a->recompute && d->rm >= 0;
    if (a->train && (st = saved_make(l, p))) return st;
    void *scratch;
    st = glia__cuda_scratch(glia__cuda_of(l->backend), (size_t)(2 * g.S * C + 3 * C) * sizeof(float), &scratch);
    if (st) return st;
    float *pmean = scratch, *pm2 = pmean + g.S * C, *coef = pm2 + g.S * C;
    if (a->train && d->relu) coef = dev(p->saved) + 3 * C;  /* kept for backward's mask */
    struct glia_batchnorm_tensors t = glia_batchnorm_tensors(l);
    cudaStream_t s = stream_of(l);
    unsigned *tickets = NULL;  /* the running statistics need no pass over x */
    if (!use_running && (st = bn_fuse(l, p, &tickets))) return st;
    if (tickets) {
        CUDA_TRY(l->ctx, glia__cuda_bn_stats_finalize(coef, a->train ? dev(p->saved) : NULL, t.rmean, t.rvar, t.gamma,
                                                      t.beta, x->data, dt, pmean, pm2, tickets, g, update, d->momentum,
                                                      d->eps, s));
    } else {
        if (!use_running) CUDA_TRY(l->ctx, glia__cuda_bn_stats(pmean, pm2, x->data, dt, g, s));
        CUDA_TRY(l->ctx, glia__cuda_bn_finalize(coef, a->train ? dev(p->saved) : NULL, t.rmean, t.rvar, t.gamma,
                                                t.beta, x->data, dt, pmean, pm2, g, use_running, update, d->momentum,
                                                d->eps, s));
    }
    CUDA_TRY(l->ctx, glia__cuda_bn_normalize(a->out->data, x->data, dt, coef, d->relu, g, s));
    if (a->train) p->kept = glia_tensor_numel(x);
fail:
    return st;
}

/* With x_hat = (x - mean)*invstd from the kept statistics, per channel over its M values:
 * dgamma (+)= sum(dy*x_hat); dbeta (+)= sum(dy); dx (+)= gamma*invstd/M * (M*dy - sum(dy) - x_hat*sum(dy*x_hat)). */
static glia_status bn_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_batchnorm_attrs *d = l->attrs;
    struct cuda_bn *p = l->state;
    const struct glia_tensor *x = a->in[0];
    if (p->kept == 0 || p->kept != glia_tensor_numel(x))
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] batchnorm backward needs a training forward just before it", l->name);
    p->fresh = false;  /* a synced backward sums into p->sums */
    struct glia_param *pw = d->w >= 0 ? &l->params[d->w] : NULL, *pb = d->b >= 0 ? &l->params[d->b] : NULL;
    if (!pw && !pb && !a->din[0]) return GLIA_OK;
    enum glia_memory_format f;
    enum glia_dtype dt;
    glia_status st = call_format(l, (const struct glia_tensor *[]){x, a->dout, a->din[0]}, 3, &f);
    if (!st) st = call_dtype(l, (const struct glia_tensor *[]){x, a->dout, a->din[0]}, 3, &dt);
    if (st) return st;
    struct glia__bn_geom g = bn_geom(x, f);
    if (p->synced) return bn_backward_sync(l, a, g, dt);
    int64_t C = g.C;
    void *scratch;
    st = glia__cuda_scratch(glia__cuda_of(l->backend), (size_t)(2 * g.S * C + 3 * C) * sizeof(float), &scratch);
    if (st) return st;
    float *pdy = scratch, *pdyx = pdy + g.S * C, *coef = pdyx + g.S * C;
    const float *saved = dev(p->saved), *gamma = pw ? dev(pw->value) : NULL;
    cudaStream_t s = stream_of(l);
    unsigned *tickets;
    if ((st = bn_fuse(l, p, &tickets))) return st;
    if (tickets) {
        CUDA_TRY(l->ctx, glia__cuda_bn_grad_stats_finalize(coef, pw ? dev(pw->grad) : NULL, pw && !pw->grad_unset,
                                                           pb ? dev(pb->grad) : NULL, pb && !pb->grad_unset, gamma,
                                                           saved, x->data, a->dout->data, dt, d->relu, pdy, pdyx,
                                                           tickets, g, s));
    } else {
        CUDA_TRY(l->ctx, glia__cuda_bn_grad_stats(pdy, pdyx, x->data, a->dout->data, dt, saved, d->relu, g, s));
        CUDA_TRY(l->ctx, glia__cuda_bn_grad_finalize(coef, pw ? dev(pw->grad) : NULL, pw && !pw->grad_unset,
                                                     pb ? dev(pb->grad) : NULL, pb && !pb->grad_unset, gamma, saved,
                                                     pdy, pdyx, g, s));
    }
    if (a->din[0])
        CUDA_TRY(l->ctx, glia__cuda_bn_dx(a->din[0]->data, a->din_accumulate[0], x->data, a->dout->data, dt, saved,
                                          coef, d->relu, g, s));
fail:
    return st;
}

/* The evaluation on the running statistics as a per-channel affine (3, C): glia__cuda_bn_finalize's coefficients, which
 * the eval forward normalizes with; none with track_running_stats = off (batch statistics) */
static glia_status bn_eval_affine(struct glia_layer *l, struct glia_tensor *affine, bool *relu)
{
    const struct glia_batchnorm_attrs *d = l->attrs;
    if (d->rm < 0) return GLIA_EUNSUPPORTED;
    *relu = d->relu;
    if (!affine) return GLIA_OK;
    if (glia_tensor_numel(affine) != 3 * d->C || affine->dtype != GLIA_F32 || affine->device.type != GLIA_DEVICE_CUDA)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] batchnorm: the evaluation's affine must be a (3, %lld) f32 CUDA tensor",
                          l->name, (long long)d->C);
    struct glia_batchnorm_tensors t = glia_batchnorm_tensors(l);
    glia_status st = GLIA_OK;
    CUDA_TRY(l->ctx, glia__cuda_bn_finalize(affine->data, NULL, t.rmean, t.rvar, t.gamma, t.beta, NULL, GLIA_F32, NULL,
                                            NULL, glia__cuda_bn_geom(1, d->C, 1), true, false, d->momentum, d->eps,
                                            stream_of(l)));
fail:
    return st;
}

static const struct glia_kernel bn_kernel = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "batchnorm",
    .impl = "cuda",
    .doc = "CUDA; Welford statistics in a fixed order, SyncBatchNorm sums in double; f32, f16 or bf16 activations "
           "(statistics and parameters f32)",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_HALF,
    .state_size = sizeof(struct cuda_bn),
    .destroy = bn_destroy,
    .forward = bn_forward,
    .backward = bn_backward,
    .eval_affine = bn_eval_affine,
};

/* ---- maxpool2d and avgpool2d ---- */

/* l->state of the maxpool2d kernel (avgpool2d's keeps none) */
struct cuda_maxpool {
    struct glia_tensor *arg;      /* i32, per output element in its memory order, the plane offset h*W + w of its
                                     max in the last training forward (owned) */
    int64_t n_arg;                /* elements of arg kept for backward (0: none) */
    enum glia_memory_format fmt;  /* memory format of that forward: the order of arg */
};

static void maxpool_destroy(struct glia_layer *l) { glia_tensor_release(((struct cuda_maxpool *)l->state)->arg); }

/* The launch geometry of l's window (its attributes) from input x to output y in format f. */
static struct glia__pool_geom pool_geom(const struct glia_layer *l, const struct glia_shape *x,
                                        const struct glia_shape *y, enum glia_memory_format f)
{
    const struct glia_pool2d_attrs *d = l->attrs;
    return (struct glia__pool_geom){.N = x->dim[0], .C = x->dim[1], .H = x->dim[2], .W = x->dim[3], .OH = y->dim[2],
                                    .OW = y->dim[3], .k = d->k, .s = d->s, .p = d->p, .nhwc = f == GLIA_CHANNELS_LAST};
}

/* y(N, C, OH, OW) = max over the window of x(N, C, H, W), padding -inf; training keeps the plane offset of
 * the first max in scan order (a NaN wins, like the CPU kernel) and the format. */
static glia_status maxpool_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct cuda_maxpool *m = l->state;
    const struct glia_tensor *x = a->in[0];
    enum glia_memory_format f;
    enum glia_dtype t;
    glia_status st = call_format(l, (const struct glia_tensor *[]){x, a->out}, 2, &f);
    if (!st) st = call_dtype(l, (const struct glia_tensor *[]){x, a->out}, 2, &t);
    if (st) return st;
    struct glia__pool_geom g = pool_geom(l, &x->shape, &a->out->shape, f);
    int64_t n = glia_tensor_numel(a->out);
    int32_t *arg = NULL;
    m->n_arg = 0;
    if (a->train) {
        if (g.H * g.W > INT32_MAX)
            return glia_error(l->ctx, GLIA_EUNSUPPORTED, "[%s] maxpool2d (cuda): planes of more than 2^31 elements",
                              l->name);
        if (!m->arg || glia_tensor_numel(m->arg) < n) {  /* re-made when the batch grows */
            glia_tensor_release(m->arg);
            m->arg = NULL;
            st = glia_tensor_new(l->backend, GLIA_I32, &(struct glia_shape){1, {n}}, &m->arg);
            if (st) return st;
        }
        arg = m->arg->data;
    }
    CUDA_TRY(l->ctx, glia__cuda_maxpool_forward(a->out->data, arg, x->data, t, g, stream_of(l)));
    if (a->train) {
        m->n_arg = n;
        m->fmt = f;
    }
fail:
    return st;
}

/* dx(N, C, H, W) (+)= sum of dy over the outputs whose max x(N, C, h, w) was (a gather: deterministic) */
static glia_status maxpool_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct cuda_maxpool *m = l->state;
    if (!a->din[0]) return GLIA_OK;
    const struct glia_tensor *x = a->in[0];
    enum glia_memory_format f;
    enum glia_dtype t;
    glia_status st = call_format(l, (const struct glia_tensor *[]){x, a->dout, a->din[0]}, 3, &f);
    if (!st) st = call_dtype(l, (const struct glia_tensor *[]){a->dout, a->din[0]}, 2, &t);
    if (st) return st;
    if (m->n_arg != glia_tensor_numel(a->dout))
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] maxpool2d backward needs a training forward just before it", l->name);
    if (m->fmt != f)
        return glia_error(l->ctx, GLIA_EINVAL,
                          "[%s] maxpool2d backward needs a training forward just before it in its memory format "
                          "(%s, got %s)", l->name, glia_memory_format_name(m->fmt), glia_memory_format_name(f));
    struct glia__pool_geom g = pool_geom(l, &x->shape, &a->dout->shape, f);
    CUDA_TRY(l->ctx, glia__cuda_maxpool_backward(a->din[0]->data, a->din_accumulate[0], a->dout->data, m->arg->data, t,
                                                 g, stream_of(l)));
fail:
    return st;
}

/* y(N, C, OH, OW) = sum over the window of x(N, C, H, W) / (k*k), zero padding counted */
static glia_status avgpool_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_tensor *x = a->in[0];
    enum glia_memory_format f;
    enum glia_dtype t;
    glia_status st = call_format(l, (const struct glia_tensor *[]){x, a->out}, 2, &f);
    if (!st) st = call_dtype(l, (const struct glia_tensor *[]){x, a->out}, 2, &t);
    if (st) return st;
    struct glia__pool_geom g = pool_geom(l, &x->shape, &a->out->shape, f);
    CUDA_TRY(l->ctx, glia__cuda_avgpool_forward(a->out->data, x->data, t, 1.0f / (float)(g.k * g.k), g, stream_of(l)));
fail:
    return st;
}

/* dx(N, C, h, w) (+)= sum over the windows that hold (h, w) of dy / (k*k) (a gather: deterministic) */
static glia_status avgpool_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    const struct glia_tensor *x = a->in[0];
    enum glia_memory_format f;
    enum glia_dtype t;
    glia_status st = call_format(l, (const struct glia_tensor *[]){x, a->dout, a->din[0]}, 3, &f);
    if (!st) st = call_dtype(l, (const struct glia_tensor *[]){a->dout, a->din[0]}, 2, &t);
    if (st) return st;
    struct glia__pool_geom g = pool_geom(l, &x->shape, &a->dout->shape, f);
    CUDA_TRY(l->ctx, glia__cuda_avgpool_backward(a->din[0]->data, a->din_accumulate[0], a->dout->data, t,
                                                 1.0f / (float)(g.k * g.k), g, stream_of(l)));
fail:
    return st;
}

static const struct glia_kernel maxpool_kernel = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "maxpool2d",
    .impl = "cuda",
    .doc = "CUDA; backward a gather (deterministic)",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_HALF,
    .state_size = sizeof(struct cuda_maxpool),
    .destroy = maxpool_destroy,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
};

static const struct glia_kernel avgpool_kernel = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "avgpool2d",
    .impl = "cuda",
    .doc = "CUDA; backward a gather (deterministic)",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE |
             GLIA_KERNEL_HALF,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
};

/* ---- global_avgpool ---- */

/* y(N, C) = sum over h, w of x(N, C, h, w) / (H*W) */
static glia_status gap_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_tensor *x = a->in[0];
    enum glia_memory_format f;
    enum glia_dtype t;
    glia_status st = call_format(l, (const struct glia_tensor *[]){x, a->out}, 2, &f);
    if (!st) st = call_dtype(l, (const struct glia_tensor *[]){x, a->out}, 2, &t);
    if (st) return st;
    const int64_t *d = x->shape.dim;
    int64_t HW = d[2] * d[3];
    CUDA_TRY(l->ctx, glia__cuda_gap_forward(a->out->data, x->data, t, d[0], d[1], HW, f == GLIA_CHANNELS_LAST,
                                            1.0f / (float)HW, stream_of(l)));
fail:
    return st;
}

/* dx(N, C, h, w) (+)= dy(N, C) / (H*W) */
static glia_status gap_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    enum glia_memory_format f;
    enum glia_dtype t;
    glia_status st = call_format(l, (const struct glia_tensor *[]){a->din[0], a->in[0], a->dout}, 3, &f);
    if (!st) st = call_dtype(l, (const struct glia_tensor *[]){a->dout, a->din[0]}, 2, &t);
    if (st) return st;
    const int64_t *d = a->din[0]->shape.dim;
    int64_t HW = d[2] * d[3];
    CUDA_TRY(l->ctx, glia__cuda_gap_backward(a->din[0]->data, a->din_accumulate[0], a->dout->data, t, d[0], d[1], HW,
                                             f == GLIA_CHANNELS_LAST, 1.0f / (float)HW, stream_of(l)));
fail:
    return st;
}

static const struct glia_kernel gap_kernel = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "global_avgpool",
    .impl = "cuda",
    .doc = "CUDA; a warp per NCHW plane, fixed-order sums",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE |
             GLIA_KERNEL_HALF,
    .forward = gap_forward,
    .backward = gap_backward,
};

/* ---- concat ---- */

/* The call's format (the output's, as on the CPU), checked against n more tensors t. */
static glia_status concat_format(const struct glia_layer *l, const struct glia_tensor *out,
                                 const struct glia_tensor *const *t, int n, enum glia_memory_format *f)
{
    *f = glia_tensor_memory_format(out);
    const struct glia_tensor *both[2] = {out, NULL};
    for (int k = 0; k < n; k++) {
        both[1] = t[k];
        glia_status st = call_format(l, both, 2, f);
        if (st) return st;
    }
    return GLIA_OK;
}

/* y(outer, sum_k C_k, inner) = [x_1(outer, C_1, inner), ..., x_n(outer, C_n, inner)] in memory order: one
 * strided copy per input */
static glia_status concat_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    int axis = ((const struct glia_concat_attrs *)l->attrs)->axis;
    enum glia_memory_format f;
    enum glia_dtype t = a->out->dtype;
    glia_status st = concat_format(l, a->out, a->in, a->n_in, &f);
    for (int k = 0; k < a->n_in && !st; k++) st = call_dtype(l, (const struct glia_tensor *[]){a->out, a->in[k]}, 2, &t);
    if (st) return st;
    size_t es = glia_dtype_size(t);
    int64_t outer, inner, off = 0, ytotal = a->out->shape.dim[axis];
    glia_concat_sizes(a->out, axis, &outer, &inner);
    for (int k = 0; k < a->n_in; k++) {
        int64_t ck = a->in[k]->shape.dim[axis];
        CUDA_TRY(l->ctx, glia__cuda_copy_rows((char *)a->out->data + (size_t)(off * inner) * es, ytotal * inner,
                                              a->in[k]->data, ck * inner, outer, ck * inner, t, false, stream_of(l)));
        off += ck;
    }
fail:
    return st;
}

/* dx_k (+)= the slice of dy that x_k filled */
static glia_status concat_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    int axis = ((const struct glia_concat_attrs *)l->attrs)->axis;
    enum glia_memory_format f;
    enum glia_dtype t = a->dout->dtype;
    glia_status st = concat_format(l, a->out, (const struct glia_tensor *const *)a->din, a->n_in, &f);
    if (!st) st = concat_format(l, a->out, &a->dout, 1, &f);
    for (int k = 0; k < a->n_in && !st; k++)
        st = call_dtype(l, (const struct glia_tensor *[]){a->dout, a->din[k]}, 2, &t);
    if (st) return st;
    size_t es = glia_dtype_size(t);
    int64_t outer, inner, off = 0, ytotal = a->out->shape.dim[axis];
    glia_concat_sizes(a->out, axis, &outer, &inner);
    for (int k = 0; k < a->n_in; k++) {
        int64_t ck = a->in[k]->shape.dim[axis];
        if (a->din[k])
            CUDA_TRY(l->ctx, glia__cuda_copy_rows(a->din[k]->data, ck * inner,
                                                  (const char *)a->dout->data + (size_t)(off * inner) * es,
                                                  ytotal * inner, outer, ck * inner, t, a->din_accumulate[k],
                                                  stream_of(l)));
        off += ck;
    }
fail:
    return st;
}

static const struct glia_kernel concat_kernel = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "concat",
    .impl = "cuda",
    .doc = "CUDA; a strided copy per input",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE |
             GLIA_KERNEL_HALF,
    .forward = concat_forward,
    .backward = concat_backward,
};

glia_status glia__cuda_register_norm_pool(struct glia_registry *r)
{
    const struct glia_kernel *all[] = {&bn_kernel, &maxpool_kernel, &avgpool_kernel, &gap_kernel, &concat_kernel};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        glia_status st = glia_register_kernel(r, all[i]);
        if (st) return st;
    }
    return GLIA_OK;
}
