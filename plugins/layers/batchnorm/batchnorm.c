/* plugins/layers/batchnorm — batch normalization on the CPU (OpenMP), PyTorch's BatchNorm1d for
 * (N, C) and BatchNorm2d for (N, C, H, W) in either memory format (NCHW or channels_last NHWC):
 * statistics per channel over N (and H, W), an optional learned affine transform, running
 * statistics in layer buffers for eval; with key sync, SyncBatchNorm (statistics over the ranks of a
 * data-parallel job). Not layer, group or instance normalization, and no cumulative moving average
 * (PyTorch's momentum = None). */
#include <glia/glia.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "batchnorm_desc.h"

struct batchnorm {
    struct glia__batchnorm_desc d;  /* first: the shared infer_shape and flops read it */
    double *mean;       /* C: batch mean of the last training forward */
    double *invstd;     /* C: 1/sqrt(biased batch variance + eps) of the last training forward */
    int64_t kept;       /* elements of the input that mean/invstd belong to (0: none kept) */
    double *part;       /* NHWC and sync only, made on first use: (2*MAX_BLOCKS + 1)*C partial sums and per-channel terms */
    float *coef;        /* NHWC and sync only: 3*C, the forward's per-channel coefficients (bn_coef) */
    double *sums;       /* 2*C + 1: backward's gradient sums; with sync, the sums exchanged between ranks */
    double count;       /* values per channel over all ranks of the last training forward if it synced, else 0 */
    bool fresh;         /* sums hold the statistics the last training forward exchanged, no backward since: a
                           recompute of it (glia_fwd.recompute, the same batch) uses them without exchanging */
};

/* Channels_last (N, H, W, C) is M = N*H*W rows of C: the per-channel sums run over row blocks in
 * parallel (at most MAX_BLOCKS of at least BLOCK_ROWS rows, fixed by M alone) into partial sums per
 * block, then add up per channel in block order -- the same bits for any thread count. */
#define MAX_BLOCKS 64
#define BLOCK_ROWS 16

static int64_t n_blocks(int64_t M)
{
    int64_t nb = (M + BLOCK_ROWS - 1) / BLOCK_ROWS;
    return nb < MAX_BLOCKS ? nb : MAX_BLOCKS;
}

/* p's per-channel coefficients coef(3, C), made once: the NHWC and sync paths, and the NCHW one with
 * activation = relu (the mask's coefficients for backward). */
static glia_status coef_scratch(struct glia_layer *l, struct batchnorm *p)
{
    if (!p->coef) p->coef = malloc(3 * (size_t)(p->d.C > 0 ? p->d.C : 1) * sizeof *p->coef);
    return p->coef ? GLIA_OK : glia_error(l->ctx, GLIA_ENOMEM, "[%s] batchnorm: out of memory", l->name);
}

/* The scratch of p's NHWC and sync paths (coef, and the blocks' partial sums), made once. */
static glia_status nhwc_scratch(struct glia_layer *l, struct batchnorm *p)
{
    size_t C = (size_t)(p->d.C > 0 ? p->d.C : 1);
    if (!p->part) p->part = malloc((2 * MAX_BLOCKS + 1) * C * sizeof *p->part);
    if (!p->part) return glia_error(l->ctx, GLIA_ENOMEM, "[%s] batchnorm: out of memory", l->name);
    return coef_scratch(l, p);
}

/* The float coefficients of y = (x - mean)*s + beta for one channel, s = invstd*gamma in double: y is
 * computed as (x - hi)*scale + shift with hi = (float)mean, scale = (float)s and shift = (float)(beta -
 * (mean - hi)*s). x - hi is exact near the mean (Sterbenz), and the bits of the mean below float's, which
 * (float)mean drops, are folded into the shift in double, so they still count: with mean 100 (float steps
 * of 7.6e-6 there) and std 1e-3, (x - (float)mean)*s was off by up to 3.8e-6, about 0.4% of a std, in every
 * output of the channel (0.27 of an output near 0); now the outputs are within float rounding of the
 * double formula, as for a centred input, with as many operations per element as before. A float mean
 * (eval on the running statistics) gives shift = beta, as before. CUDA's finalize kernels compute the same. */
static void bn_coef(double mean, double s, float beta, float *hi, float *scale, float *shift)
{
    *hi = (float)mean;
    *scale = (float)s;
    *shift = (float)((double)beta - (mean - (double)*hi) * s);
}

/* g unless v <= 0 (so also for a NaN v), else +0, as the relu layer's backward: by a bit mask, no
 * branch (the relu's cut is random, a branch on it mispredicts half the time) */
static inline float relu_grad(float g, float v)
{
    uint32_t u;
    memcpy(&u, &g, sizeof u);
    u &= -(uint32_t)!(v <= 0.0f);
    memcpy(&g, &u, sizeof g);
    return g;
}

/* With activation = relu, y(n) = y(n) < 0 ? 0 : y(n) over n values just written (still in cache), as
 * the relu layer (NaN stays NaN, -0 stays -0): a separate loop, so that the normalization's loop stays as
 * it is without relu */
static void relu_inplace(float *y, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float v = y[i];
        y[i] = v < 0.0f ? 0.0f : v;
    }
}

/* dy where the forward's y (recomputed from x with its float coefficients coef(3, C): mean_hi, scale,
 * shift, see bn_coef) passed the relu's gradient (y positive or NaN), else 0; dy itself without activation = relu */
static inline float bn_dy(float dy, float x, const float *coef, int64_t c, int64_t C, bool relu)
{
    return relu ? relu_grad(dy, (x - coef[c]) * coef[C + c] + coef[2 * C + c]) : dy;
}

/* Whether a 4-D tensor of the call is channels_last (2-D ones never are). */
static bool is_nhwc(const struct glia_tensor *t)
{
    return t->shape.ndim == 4 && glia_tensor_memory_format(t) == GLIA_CHANNELS_LAST;
}

/* N, C and the plane size HW (1 for (N, C)) of a 2-D or 4-D shape. */
static void dims(const struct glia_shape *s, int64_t *N, int64_t *C, int64_t *HW)
{
    *N = s->dim[0];
    *C = s->dim[1];
    *HW = s->ndim == 4 ? s->dim[2] * s->dim[3] : 1;
}

static void batchnorm_destroy(struct glia_layer *l)
{
    struct batchnorm *p = l->priv;
    if (!p) return;
    free(p->mean);
    free(p->invstd);
    free(p->part);
    free(p->coef);
    free(p->sums);
    free(p);
}

static glia_status batchnorm_create(struct glia_layer *l, const struct glia_section *cfg,
                                    const struct glia_shape *in, int n_in)
{
    struct batchnorm *p = calloc(1, sizeof *p);
    if (!p) return GLIA_ENOMEM;
    l->priv = p;
    glia_status st = glia__batchnorm_describe(l, cfg, in, &p->d);
    if (!st) {
        size_t C = (size_t)(p->d.C > 0 ? p->d.C : 1);
        p->mean = malloc(C * sizeof *p->mean);
        p->invstd = malloc(C * sizeof *p->invstd);
        p->sums = malloc((2 * C + 1) * sizeof *p->sums);
        if (!p->mean || !p->invstd || !p->sums) st = GLIA_ENOMEM;
    }
    if (st) {  /* the core calls destroy only after a successful create */
        batchnorm_destroy(l);
        l->priv = NULL;
    }
    return st;
}

/* ---- per-channel sums (backward; SyncBatchNorm's forward) and SyncBatchNorm (key sync;
 * batchnorm_desc.h says when it applies and what it computes) ---- */

/* s(2, C) = per channel c over the M = N*HW values of x(N, C, HW) (nhwc: the rows of x(M, C)), in double:
 * without dy (s(0, c), s(1, c)) = (sum x, sum x^2); with dy(like x), (sum dy, sum dy*x_hat), x_hat =
 * (x - mean(c))*invstd(c) from p. NCHW: a channel per thread, serial; NHWC: per block of rows into p->part,
 * then the blocks in order -- the same bits for any thread count. */
static void local_sums(struct batchnorm *p, const float *x, const float *dy, int64_t N, int64_t HW, bool nhwc,
                       bool relu, double *s)
{
    int64_t C = p->d.C;
    const double *mean = p->mean, *invstd = p->invstd;
    const float *coef = p->coef;  /* the forward's, for relu's mask (dy not masked yet) */
    if (!nhwc) {
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < C; c++) {
            double a = 0, b = 0;
            for (int64_t n = 0; n < N; n++) {
                const float *xc = x + (n * C + c) * HW;
                if (!dy) {
                    for (int64_t i = 0; i < HW; i++) {
                        a += xc[i];
                        b += (double)xc[i] * xc[i];
                    }
                } else {
                    const float *dyc = dy + (n * C + c) * HW;
                    for (int64_t i = 0; i < HW; i++) {
                        float g = bn_dy(dyc[i], xc[i], coef, c, C, relu);
                        a += g;
                        b += g * ((xc[i] - mean[c]) * invstd[c]);
                    }
                }
            }
            s[c] = a;
            s[C + c] = b;
        }
        return;
    }
    int64_t M = N * HW, nb = n_blocks(M);
    double *pa = p->part, *pb = p->part + MAX_BLOCKS * C;  /* pa(nb, C), pb(nb, C) */
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < nb; k++) {
        double *a = pa + k * C, *b = pb + k * C;
        for (int64_t c = 0; c < C; c++) a[c] = b[c] = 0;
        for (int64_t r = k * M / nb; r < (k + 1) * M / nb; r++) {
            const float *xr = x + r * C;
            if (!dy) {
                for (int64_t c = 0; c < C; c++) {
                    a[c] += xr[c];
                    b[c] += (double)xr[c] * xr[c];
                }
            } else {
                const float *dyr = dy + r * C;
                for (int64_t c = 0; c < C; c++) {
                    float g = bn_dy(dyr[c], xr[c], coef, c, C, relu);
                    a[c] += g;
                    b[c] += g * ((xr[c] - mean[c]) * invstd[c]);
                }
            }
        }
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; c++) {
        double a = 0, b = 0;
        for (int64_t k = 0; k < nb; k++) {
            a += pa[k * C + c];
            b += pb[k * C + c];
        }
        s[c] = a;
        s[C + c] = b;
    }
}

/* Training forward over all ranks (with reuse, a recompute of the last one: s as that one left it, no
 * exchange): s(2C + 1) = this rank's (sum x(C), sum x^2(C), M) summed over the ranks;
 * with N = s(2C): mean = s(0, c)/N, var = s(1, c)/N - mean^2 (biased), running statistics toward mean and
 * var*N/(N-1); y(like x) = (x - mean)*invstd*gamma + beta; the global mean and invstd kept for backward. */
static glia_status batchnorm_forward_sync(struct glia_layer *l, const struct glia_fwd *a, bool reuse)
{
    struct batchnorm *p = l->priv;
    glia_status st = nhwc_scratch(l, p);
    if (st) return st;
    int64_t N, C, HW;
    dims(&a->in[0]->shape, &N, &C, &HW);
    bool nhwc = is_nhwc(a->in[0]);
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    double *s = p->sums;
    if (!reuse) {
        local_sums(p, x, NULL, N, HW, nhwc, false, s);
        s[2 * C] = (double)(N * HW);
        if ((st = glia__batchnorm_exchange(l, s, (size_t)(2 * C + 1), "statistics"))) return st;
    }
    double M = s[2 * C];
    if (M < 2) {
        char buf[64];
        return glia_error(l->ctx, GLIA_ESHAPE,
                          "[%s] batchnorm needs more than 1 value per channel in training, got %.0f over %d ranks "
                          "(input %s here)", l->name, M, l->comm->info.world,
                          glia_shape_str(&a->in[0]->shape, buf, sizeof buf));
    }
    const float *gamma = p->d.w >= 0 ? glia_tensor_f32(l->params[p->d.w].value) : NULL;
    const float *beta = p->d.b >= 0 ? glia_tensor_f32(l->params[p->d.b].value) : NULL;
    float *rmean = p->d.rm >= 0 ? glia_tensor_f32(l->buffers[p->d.rm].value) : NULL;
    float *rvar = p->d.rv >= 0 ? glia_tensor_f32(l->buffers[p->d.rv].value) : NULL;
    double mom = p->d.momentum, eps = p->d.eps, *mean = p->mean, *invstd = p->invstd;
    float *fm = p->coef, *scale = p->coef + C, *shift = p->coef + 2 * C;
    bool relu = p->d.relu;
    for (int64_t c = 0; c < C; c++) {
        double m = s[c] / M, var = s[C + c] / M - m * m;
        if (var < 0) var = 0;  /* rounding, for a constant channel */
        mean[c] = m;
        invstd[c] = 1.0 / sqrt(var + eps);
        if (rmean && !a->recompute) {
            rmean[c] = (float)((1.0 - mom) * rmean[c] + mom * m);
            rvar[c] = (float)((1.0 - mom) * rvar[c] + mom * var * M / (M - 1));
        }
        bn_coef(m, invstd[c] * (gamma ? gamma[c] : 1.0f), beta ? beta[c] : 0.0f, &fm[c], &scale[c], &shift[c]);
    }
    if (nhwc) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < N * HW; r++) {
            const float *xr = x + r * C;
            float *yr = y + r * C;
            for (int64_t c = 0; c < C; c++) yr[c] = (xr[c] - fm[c]) * scale[c] + shift[c];
            if (relu) relu_inplace(yr, C);
        }
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < N * C; j++) {
            int64_t c = j % C;
            const float *xc = x + j * HW;
            float *yc = y + j * HW;
            for (int64_t i = 0; i < HW; i++) yc[i] = (xc[i] - fm[c]) * scale[c] + shift[c];
            if (relu) relu_inplace(yc, HW);
        }
    }
    p->kept = glia_tensor_numel(a->in[0]);
    p->count = M;
    p->fresh = true;
    return GLIA_OK;
}

/* The channels_last forward, same semantics as batchnorm_forward's NCHW path below. With rows r of
 * x(N,H,W,C) (M of them): per block of rows s(c) = sum x(r, c), mean(c) = sum of blocks' s / M; then
 * likewise q(c) = sum (x(r, c) - mean(c))^2, var(c) = q / M (double, fixed order);
 * y(N,H,W,C) = (x(N,H,W,C) - mean(C)) * scale(C) + shift(C). In eval p->mean and p->invstd are
 * just scratch (kept stays 0). */
static glia_status batchnorm_forward_nhwc(struct glia_layer *l, const struct glia_fwd *a, int64_t M)
{
    struct batchnorm *p = l->priv;
    glia_status st = nhwc_scratch(l, p);
    if (st) return st;
    int64_t C = p->d.C, nb = n_blocks(M);
    bool use_running = !a->train && p->d.rm >= 0;
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    const float *gamma = p->d.w >= 0 ? glia_tensor_f32(l->params[p->d.w].value) : NULL;
    const float *beta = p->d.b >= 0 ? glia_tensor_f32(l->params[p->d.b].value) : NULL;
    float *rmean = p->d.rm >= 0 ? glia_tensor_f32(l->buffers[p->d.rm].value) : NULL;
    float *rvar = p->d.rv >= 0 ? glia_tensor_f32(l->buffers[p->d.rv].value) : NULL;
    double mom = p->d.momentum, eps = p->d.eps;
    bool update = a->train && !a->recompute && rmean;  /* a recomputation moves nothing twice */
    double *part = p->part, *mean = p->mean, *invstd = p->invstd;
    float *fm = p->coef, *scale = p->coef + C, *shift = p->coef + 2 * C;
    if (!use_running) {
        /* s(block, C) = sum over the block's rows of x(r, C); mean(C) = sum over blocks / M */
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            double *s = part + b * C;
            for (int64_t c = 0; c < C; c++) s[c] = 0;
            for (int64_t r = b * M / nb; r < (b + 1) * M / nb; r++) {
                const float *xr = x + r * C;
                for (int64_t c = 0; c < C; c++) s[c] += xr[c];
            }
        }
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t b = 0; b < nb; b++) s += part[b * C + c];
            mean[c] = s / (double)M;
        }
        /* q(block, C) = sum over the block's rows of (x(r, C) - mean(C))^2 */
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nb; b++) {
            double *q = part + b * C;
            for (int64_t c = 0; c < C; c++) q[c] = 0;
            for (int64_t r = b * M / nb; r < (b + 1) * M / nb; r++) {
                const float *xr = x + r * C;
                for (int64_t c = 0; c < C; c++) {
                    double d = xr[c] - mean[c];
                    q[c] += d * d;
                }
            }
        }
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; c++) {
        double m, var;
        if (use_running) {
            m = rmean[c];
            var = rvar[c];
        } else {
            double q = 0;
            for (int64_t b = 0; b < nb; b++) q += part[b * C + c];
            m = mean[c];
            var = q / (double)M;
        }
        double is = 1.0 / sqrt(var + eps);
        mean[c] = m;
        invstd[c] = is;
        if (update) {
            rmean[c] = (float)((1.0 - mom) * rmean[c] + mom * m);
            rvar[c] = (float)((1.0 - mom) * rvar[c] + mom * var * (double)M / (double)(M - 1));
        }
        bn_coef(m, is * (gamma ? gamma[c] : 1.0f), beta ? beta[c] : 0.0f, &fm[c], &scale[c], &shift[c]);
    }
    /* y(r, C) = (x(r, C) - mean(C)) * scale(C) + shift(C) (then relu) */
    bool relu = p->d.relu;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < M; r++) {
        const float *xr = x + r * C;
        float *yr = y + r * C;
        for (int64_t c = 0; c < C; c++) yr[c] = (xr[c] - fm[c]) * scale[c] + shift[c];
        if (relu) relu_inplace(yr, C);
    }
    if (a->train) p->kept = glia_tensor_numel(a->in[0]);
    return GLIA_OK;
}

/* Training: per channel c over M = N*HW values, mean and biased variance (two passes, double, fixed
 * order), y = (x - mean)/sqrt(var + eps)*gamma + beta; running mean and variance move toward the batch
 * mean and the unbiased variance var*M/(M-1). Eval with running statistics: the same with those in
 * place of the batch's, nothing kept or updated; eval without them: batch statistics, nothing kept. */
static glia_status batchnorm_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct batchnorm *p = l->priv;
    int64_t N, C, HW;
    dims(&a->in[0]->shape, &N, &C, &HW);
    int64_t M = N * HW;
    bool reuse = a->recompute && p->fresh && p->kept == glia_tensor_numel(a->in[0]);
    p->kept = 0;
    p->count = 0;
    p->fresh = false;
    if (glia__batchnorm_syncs(l, &p->d, a->train)) return batchnorm_forward_sync(l, a, reuse);
    bool use_running = !a->train && p->d.rm >= 0;
    if (a->train && M < 2) {
        char buf[64];
        return glia_error(l->ctx, GLIA_ESHAPE, "[%s] batchnorm needs more than 1 value per channel in training, got input %s",
                          l->name, glia_shape_str(&a->in[0]->shape, buf, sizeof buf));
    }
    if (is_nhwc(a->in[0])) return batchnorm_forward_nhwc(l, a, M);
    bool relu = p->d.relu;
    glia_status st = relu ? coef_scratch(l, p) : GLIA_OK;
    if (st) return st;
    float *coef = p->coef;
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    const float *gamma = p->d.w >= 0 ? glia_tensor_f32(l->params[p->d.w].value) : NULL;
    const float *beta = p->d.b >= 0 ? glia_tensor_f32(l->params[p->d.b].value) : NULL;
    float *rmean = p->d.rm >= 0 ? glia_tensor_f32(l->buffers[p->d.rm].value) : NULL;
    float *rvar = p->d.rv >= 0 ? glia_tensor_f32(l->buffers[p->d.rv].value) : NULL;
    double mom = p->d.momentum, eps = p->d.eps;
    bool update = a->train && !a->recompute && rmean;  /* a recomputation moves nothing twice */
    double *keep_mean = p->mean, *keep_invstd = p->invstd;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; c++) {
        double mean, var;
        if (use_running) {
            mean = rmean[c];
            var = rvar[c];
        } else {
            double s = 0, q = 0;
            for (int64_t n = 0; n < N; n++) {
                const float *xc = x + (n * C + c) * HW;
                for (int64_t i = 0; i < HW; i++) s += xc[i];
            }
            mean = s / (double)M;
            for (int64_t n = 0; n < N; n++) {
                const float *xc = x + (n * C + c) * HW;
                for (int64_t i = 0; i < HW; i++) {
                    double d = xc[i] - mean;
                    q += d * d;
                }
            }
            var = q / (double)M;
        }
        double invstd = 1.0 / sqrt(var + eps);
        if (a->train) {
            keep_mean[c] = mean;
            keep_invstd[c] = invstd;
        }
        if (update) {
            rmean[c] = (float)((1.0 - mom) * rmean[c] + mom * mean);
            rvar[c] = (float)((1.0 - mom) * rvar[c] + mom * var * (double)M / (double)(M - 1));
        }
        float fm, scale, shift;
        bn_coef(mean, invstd * (gamma ? gamma[c] : 1.0f), beta ? beta[c] : 0.0f, &fm, &scale, &shift);
        if (relu) coef[c] = fm, coef[C + c] = scale, coef[2 * C + c] = shift;
        for (int64_t n = 0; n < N; n++) {
            const float *xc = x + (n * C + c) * HW;
            float *yc = y + (n * C + c) * HW;
            for (int64_t i = 0; i < HW; i++) yc[i] = (xc[i] - fm) * scale + shift;
            if (relu) relu_inplace(yc, HW);
        }
    }
    if (a->train) p->kept = glia_tensor_numel(a->in[0]);
    return GLIA_OK;
}

/* d(like x) = dy where the forward's y (recomputed from x with coef(3, C)) passed the relu's gradient,
 * else +0; d may be dy itself */
static void mask_dy(float *d, const float *dy, const float *x, const float *coef, int64_t N, int64_t C, int64_t HW,
                    bool nhwc)
{
    if (nhwc) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < N * HW; r++) {
            const float *xr = x + r * C, *dyr = dy + r * C;
            float *dr = d + r * C;
#pragma omp simd
            for (int64_t c = 0; c < C; c++)
                dr[c] = relu_grad(dyr[c], (xr[c] - coef[c]) * coef[C + c] + coef[2 * C + c]);
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < N * C; j++) {
        int64_t c = j % C;
        float m = coef[c], sc = coef[C + c], sh = coef[2 * C + c];
        const float *xc = x + j * HW, *dyc = dy + j * HW;
        float *dc = d + j * HW;
#pragma omp simd
        for (int64_t i = 0; i < HW; i++) dc[i] = relu_grad(dyc[i], (xc[i] - m) * sc + sh);
    }
}

/* With x_hat = (x - mean)*invstd recomputed from the input and M the forward's count (N*HW, or with
 * sync the count over all ranks), per channel:
 * dgamma (+)= sum(dy*x_hat); dbeta (+)= sum(dy) -- over this rank's values (DDP averages parameter
 * gradients over the ranks afterwards);
 * dx (+)= gamma*invstd/M * (M*dy - sum(dy) - x_hat*sum(dy*x_hat)), with sync the two sums over all ranks.
 * The sums are local_sums's (double, in a fixed order). */
static glia_status batchnorm_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    struct batchnorm *p = l->priv;
    int64_t N, C, HW;
    dims(&a->in[0]->shape, &N, &C, &HW);
    if (p->kept == 0 || p->kept != glia_tensor_numel(a->in[0]))
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] batchnorm backward needs a training forward just before it", l->name);
    p->fresh = false;  /* a synced backward sums into p->sums */
    glia_status st = nhwc_scratch(l, p);
    if (st) return st;
    bool nhwc = is_nhwc(a->in[0]), synced = p->count > 0;
    const float *x = glia_tensor_f32(a->in[0]), *dy = glia_tensor_f32(a->dout);
    float *dx = a->din[0] ? glia_tensor_f32(a->din[0]) : NULL;
    bool add_dx = a->din_accumulate[0];
    const float *gamma = p->d.w >= 0 ? glia_tensor_f32(l->params[p->d.w].value) : NULL;
    struct glia_param *pw = p->d.w >= 0 ? &l->params[p->d.w] : NULL, *pb = p->d.b >= 0 ? &l->params[p->d.b] : NULL;
    float *dgamma = pw ? glia_tensor_f32(pw->grad) : NULL, *dbeta = pb ? glia_tensor_f32(pb->grad) : NULL;
    bool add_dg = pw && !pw->grad_unset, add_db = pb && !pb->grad_unset;
    double *s = p->sums, M = synced ? p->count : (double)(N * HW), *k = p->part + 2 * MAX_BLOCKS * C;
    const double *mean = p->mean, *invstd = p->invstd, *sdy = s, *sdyx = s + C;
    const float *fc = p->coef;  /* activation = relu: the forward's coefficients for the mask */
    bool relu = p->d.relu;
    if (relu && dx && !add_dx) {  /* dx = masked dy first (one vectorized pass), then dy is dx, masked */
        mask_dy(dx, dy, x, fc, N, C, HW, nhwc);
        dy = dx;
        relu = false;
    }
    local_sums(p, x, dy, N, HW, nhwc, relu, s);
    for (int64_t c = 0; c < C; c++) {
        if (dgamma) dgamma[c] = add_dg ? dgamma[c] + (float)sdyx[c] : (float)sdyx[c];  /* never 0 * old */
        if (dbeta) dbeta[c] = add_db ? dbeta[c] + (float)sdy[c] : (float)sdy[c];
    }
    if (!dx) return GLIA_OK;  /* with sync the same on every rank (one model): none of them exchanges */
    if (synced && (st = glia__batchnorm_exchange(l, s, (size_t)(2 * C), "gradient sums"))) return st;
    for (int64_t c = 0; c < C; c++) k[c] = (gamma ? gamma[c] : 1.0) * invstd[c] / M;
    if (nhwc) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < N * HW; r++) {
            const float *xr = x + r * C, *dyr = dy + r * C;
            float *dxr = dx + r * C;
            for (int64_t c = 0; c < C; c++) {
                double xh = (xr[c] - mean[c]) * invstd[c];
                float g = (float)(k[c] * (M * bn_dy(dyr[c], xr[c], fc, c, C, relu) - sdy[c] - xh * sdyx[c]));
                dxr[c] = add_dx ? dxr[c] + g : g;
            }
        }
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < N * C; j++) {
            int64_t c = j % C;
            const float *xc = x + j * HW, *dyc = dy + j * HW;
            float *dxc = dx + j * HW;
            for (int64_t i = 0; i < HW; i++) {
                double xh = (xc[i] - mean[c]) * invstd[c];
                float g = (float)(k[c] * (M * bn_dy(dyc[i], xc[i], fc, c, C, relu) - sdy[c] - xh * sdyx[c]));
                dxc[i] = add_dx ? dxc[i] + g : g;
            }
        }
    }
    return GLIA_OK;
}

static const struct glia_layer_ops batchnorm_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "batchnorm",
    .impl = "cpu",
    .doc = "batch normalization of (N, C) or (N, C, H, W) (NCHW or NHWC) per channel, running statistics for eval, "
           "SyncBatchNorm over ranks with sync",
    .keys = glia__batchnorm_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    /* subtracts the per-channel mean: a bias before it is useless; 4-D tensors in either memory format */
    .flags = GLIA_LAYER_NORMALIZATION | GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_OUTPUT,
    .device_type = GLIA_DEVICE_CPU,
    .create = batchnorm_create,
    .destroy = batchnorm_destroy,
    .infer_shape = glia__batchnorm_infer,
    .forward = batchnorm_forward,
    .backward = batchnorm_backward,
    .flops = glia__batchnorm_flops,
};

static glia_status batchnorm_init(struct glia_registry *r) { return glia_register_layer(r, &batchnorm_ops); }

GLIA_PLUGIN_DEFINE(batchnorm, "1.0", "MIT", "batch normalization 1d/2d (CPU)", batchnorm_init)
