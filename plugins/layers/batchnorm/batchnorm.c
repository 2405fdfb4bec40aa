/* plugins/layers/batchnorm — layer type batchnorm (PyTorch's BatchNorm1d for (N, C) and BatchNorm2d for
 * (N, C, H, W): statistics per channel over N (and H, W), an optional learned affine transform, running statistics
 * in layer buffers for eval; with key sync, SyncBatchNorm, statistics over the ranks of a data-parallel job) and its
 * CPU kernel (OpenMP) in either memory format (NCHW or channels_last NHWC). Not layer, group or instance
 * normalization, and no cumulative moving average (PyTorch's momentum = None). */
#include <glia/glia.h>
#include <glia/types/batchnorm.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct glia_key batchnorm_keys[] = {
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

/* Checks that in[0] is (N, C) or (N, C, H, W), reads the keys into l->attrs and declares the parameters
 * (weight = 1, bias = 0) and buffers (running_mean = 0, running_var = 1). */
static glia_status batchnorm_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                    int n_in)
{
    struct glia_batchnorm_attrs *d = l->attrs;
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

static glia_status batchnorm_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                   struct glia_shape *out)
{
    const struct glia_batchnorm_attrs *d = l->attrs;
    if ((in[0].ndim != 2 && in[0].ndim != 4) || in[0].dim[1] != d->C) return GLIA_ESHAPE;
    *out = in[0];
    return GLIA_OK;
}

/* statistics (sum, squared deviation) and the normalization: about four multiply-adds per element;
 * with activation = relu one more operation, the relu layer's count */
static uint64_t batchnorm_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct glia_batchnorm_attrs *d = l->attrs;
    return (d && d->relu ? 9u : 8u) * (uint64_t)glia_shape_numel(&in[0]);
}

/* ---- the CPU kernel ---- */

/* l->state of the CPU kernel */
struct batchnorm {
    double *mean;       /* C: batch mean of the last training forward (owned, as every pointer here) */
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

/* Channels, at least 1: the size of per-channel arrays. */
static size_t channels(const struct glia_layer *l)
{
    int64_t C = ((const struct glia_batchnorm_attrs *)l->attrs)->C;
    return (size_t)(C > 0 ? C : 1);
}

/* p's per-channel coefficients coef(3, C), made once: the NHWC and sync paths, and the NCHW one with
 * activation = relu (the mask's coefficients for backward). */
static glia_status coef_scratch(struct glia_layer *l, struct batchnorm *p)
{
    if (!p->coef) p->coef = malloc(3 * channels(l) * sizeof *p->coef);
    return p->coef ? GLIA_OK : glia_error(l->ctx, GLIA_ENOMEM, "[%s] batchnorm: out of memory", l->name);
}

/* The scratch of p's NHWC and sync paths (coef, and the blocks' partial sums), made once. */
static glia_status nhwc_scratch(struct glia_layer *l, struct batchnorm *p)
{
    if (!p->part) p->part = malloc((2 * MAX_BLOCKS + 1) * channels(l) * sizeof *p->part);
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

/* Channel c's statistics are mean and the biased variance var over M values: returns invstd = 1/sqrt(var + eps);
 * with update the running statistics move toward mean and the unbiased var*M/(M-1) with momentum; fm, scale and
 * shift get the channel's coefficients (bn_coef) of y = (x - mean)*invstd*gamma + beta. Every path of the forward
 * ends a channel here. */
static double bn_channel(const struct glia_batchnorm_attrs *d, const struct glia_batchnorm_tensors *t, int64_t c,
                         double mean, double var, double M, bool update, float *fm, float *scale, float *shift)
{
    double invstd = 1.0 / sqrt(var + d->eps), mom = d->momentum;
    if (update) {
        t->rmean[c] = (float)((1.0 - mom) * t->rmean[c] + mom * mean);
        t->rvar[c] = (float)((1.0 - mom) * t->rvar[c] + mom * var * M / (M - 1));
    }
    bn_coef(mean, invstd * (t->gamma ? t->gamma[c] : 1.0f), t->beta ? t->beta[c] : 0.0f, fm, scale, shift);
    return invstd;
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

/* y(n) = (x(n) - m)*scale + shift over n values of one channel (an NCHW plane), then the relu with relu */
static inline void normalize_run(const float *x, float *y, int64_t n, float m, float scale, float shift, bool relu)
{
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] - m) * scale + shift;
    if (relu) relu_inplace(y, n);
}

/* y(like x) = (x - coef(0, c))*coef(1, c) + coef(2, c), then the relu with relu: the rows of C of x(N*HW, C) (nhwc)
 * or the planes of HW of x(N, C, HW) in parallel. */
static void normalize(const float *x, float *y, const float *coef, int64_t N, int64_t C, int64_t HW, bool nhwc,
                      bool relu)
{
    const float *fm = coef, *scale = coef + C, *shift = coef + 2 * C;
    if (nhwc) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < N * HW; r++) {
            const float *xr = x + r * C;
            float *yr = y + r * C;
            for (int64_t c = 0; c < C; c++) yr[c] = (xr[c] - fm[c]) * scale[c] + shift[c];
            if (relu) relu_inplace(yr, C);
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < N * C; j++) {
        int64_t c = j % C;
        normalize_run(x + j * HW, y + j * HW, HW, fm[c], scale[c], shift[c], relu);
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

/* The arrays every call uses: mean, invstd and sums, per channel. */
static glia_status batchnorm_prepare(struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    struct batchnorm *p = l->state;
    size_t C = channels(l);
    p->mean = malloc(C * sizeof *p->mean);
    p->invstd = malloc(C * sizeof *p->invstd);
    p->sums = malloc((2 * C + 1) * sizeof *p->sums);
    if (p->mean && p->invstd && p->sums) return GLIA_OK;
    free(p->mean);  /* no destroy after a failed prepare */
    free(p->invstd);
    free(p->sums);
    return glia_error(l->ctx, GLIA_ENOMEM, "[%s] batchnorm: out of memory", l->name);
}

static void batchnorm_destroy(struct glia_layer *l)
{
    struct batchnorm *p = l->state;
    free(p->mean);
    free(p->invstd);
    free(p->part);
    free(p->coef);
    free(p->sums);
}

/* ---- per-channel sums (backward; SyncBatchNorm's forward) and SyncBatchNorm (key sync;
 * glia/types/batchnorm.h says when it applies and what it computes) ---- */

/* s(2, C) = per channel c over the M = N*HW values of x(N, C, HW) (nhwc: the rows of x(M, C)), in double:
 * without dy (s(0, c), s(1, c)) = (sum x, sum x^2); with dy(like x), (sum dy, sum dy*x_hat), x_hat =
 * (x - mean(c))*invstd(c) from p. NCHW: a channel per thread, serial; NHWC: per block of rows into p->part,
 * then the blocks in order -- the same bits for any thread count. */
static void local_sums(struct batchnorm *p, int64_t C, const float *x, const float *dy, int64_t N, int64_t HW,
                       bool nhwc, bool relu, double *s)
{
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
    const struct glia_batchnorm_attrs *d = l->attrs;
    struct batchnorm *p = l->state;
    glia_status st = nhwc_scratch(l, p);
    if (st) return st;
    int64_t N, C, HW;
    dims(&a->in[0]->shape, &N, &C, &HW);
    bool nhwc = is_nhwc(a->in[0]);
    const float *x = glia_tensor_f32(a->in[0]);
    double *s = p->sums;
    if (!reuse) {
        local_sums(p, C, x, NULL, N, HW, nhwc, false, s);
        s[2 * C] = (double)(N * HW);
        if ((st = glia_batchnorm_exchange(l, s, (size_t)(2 * C + 1), "statistics"))) return st;
    }
    double M = s[2 * C];
    if (M < 2) return glia_batchnorm_too_few(l, M, &a->in[0]->shape, true);
    struct glia_batchnorm_tensors t = glia_batchnorm_tensors(l);
    float *fm = p->coef, *scale = p->coef + C, *shift = p->coef + 2 * C;
    for (int64_t c = 0; c < C; c++) {
        double m = s[c] / M, var = s[C + c] / M - m * m;
        if (var < 0) var = 0;  /* rounding, for a constant channel */
        p->mean[c] = m;
        p->invstd[c] = bn_channel(d, &t, c, m, var, M, t.rmean && !a->recompute, &fm[c], &scale[c], &shift[c]);
    }
    normalize(x, glia_tensor_f32(a->out), p->coef, N, C, HW, nhwc, d->relu);
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
    const struct glia_batchnorm_attrs *d = l->attrs;
    struct batchnorm *p = l->state;
    glia_status st = nhwc_scratch(l, p);
    if (st) return st;
    int64_t C = d->C, nb = n_blocks(M);
    bool use_running = !a->train && d->rm >= 0;
    const float *x = glia_tensor_f32(a->in[0]);
    struct glia_batchnorm_tensors t = glia_batchnorm_tensors(l);
    bool update = a->train && !a->recompute && t.rmean;  /* a recomputation moves nothing twice */
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
                    double dv = xr[c] - mean[c];
                    q[c] += dv * dv;
                }
            }
        }
    }
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; c++) {
        double m, var;
        if (use_running) {
            m = t.rmean[c];
            var = t.rvar[c];
        } else {
            double q = 0;
            for (int64_t b = 0; b < nb; b++) q += part[b * C + c];
            m = mean[c];
            var = q / (double)M;
        }
        mean[c] = m;
        invstd[c] = bn_channel(d, &t, c, m, var, (double)M, update, &fm[c], &scale[c], &shift[c]);
    }
    normalize(x, glia_tensor_f32(a->out), p->coef, M, C, 1, true, d->relu);
    if (a->train) p->kept = glia_tensor_numel(a->in[0]);
    return GLIA_OK;
}

/* Training: per channel c over M = N*HW values, mean and biased variance (two passes, double, fixed
 * order), y = (x - mean)/sqrt(var + eps)*gamma + beta; running mean and variance move toward the batch
 * mean and the unbiased variance var*M/(M-1). Eval with running statistics: the same with those in
 * place of the batch's, nothing kept or updated; eval without them: batch statistics, nothing kept. */
static glia_status batchnorm_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_batchnorm_attrs *d = l->attrs;
    struct batchnorm *p = l->state;
    int64_t N, C, HW;
    dims(&a->in[0]->shape, &N, &C, &HW);
    int64_t M = N * HW;
    bool reuse = a->recompute && p->fresh && p->kept == glia_tensor_numel(a->in[0]);
    p->kept = 0;
    p->count = 0;
    p->fresh = false;
    if (glia_batchnorm_syncs(l, a->train)) return batchnorm_forward_sync(l, a, reuse);
    bool use_running = !a->train && d->rm >= 0;
    if (a->train && M < 2) return glia_batchnorm_too_few(l, (double)M, &a->in[0]->shape, false);
    if (is_nhwc(a->in[0])) return batchnorm_forward_nhwc(l, a, M);
    bool relu = d->relu;
    glia_status st = relu ? coef_scratch(l, p) : GLIA_OK;
    if (st) return st;
    float *coef = p->coef;
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    struct glia_batchnorm_tensors t = glia_batchnorm_tensors(l);
    bool update = a->train && !a->recompute && t.rmean;  /* a recomputation moves nothing twice */
    double *keep_mean = p->mean, *keep_invstd = p->invstd;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < C; c++) {
        double mean, var;
        if (use_running) {
            mean = t.rmean[c];
            var = t.rvar[c];
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
                    double dv = xc[i] - mean;
                    q += dv * dv;
                }
            }
            var = q / (double)M;
        }
        float fm, scale, shift;
        double invstd = bn_channel(d, &t, c, mean, var, (double)M, update, &fm, &scale, &shift);
        if (a->train) {
            keep_mean[c] = mean;
            keep_invstd[c] = invstd;
        }
        if (relu) coef[c] = fm, coef[C + c] = scale, coef[2 * C + c] = shift;
        for (int64_t n = 0; n < N; n++)
            normalize_run(x + (n * C + c) * HW, y + (n * C + c) * HW, HW, fm, scale, shift, relu);
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
    const struct glia_batchnorm_attrs *d = l->attrs;
    struct batchnorm *p = l->state;
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
    struct glia_param *pw = d->w >= 0 ? &l->params[d->w] : NULL, *pb = d->b >= 0 ? &l->params[d->b] : NULL;
    const float *gamma = pw ? glia_tensor_f32(pw->value) : NULL;
    float *dgamma = pw ? glia_tensor_f32(pw->grad) : NULL, *dbeta = pb ? glia_tensor_f32(pb->grad) : NULL;
    bool add_dg = pw && !pw->grad_unset, add_db = pb && !pb->grad_unset;
    double *s = p->sums, M = synced ? p->count : (double)(N * HW), *k = p->part + 2 * MAX_BLOCKS * C;
    const double *mean = p->mean, *invstd = p->invstd, *sdy = s, *sdyx = s + C;
    const float *fc = p->coef;  /* activation = relu: the forward's coefficients for the mask */
    bool relu = d->relu;
    if (relu && dx && !add_dx) {  /* dx = masked dy first (one vectorized pass), then dy is dx, masked */
        mask_dy(dx, dy, x, fc, N, C, HW, nhwc);
        dy = dx;
        relu = false;
    }
    local_sums(p, C, x, dy, N, HW, nhwc, relu, s);
    for (int64_t c = 0; c < C; c++) {
        if (dgamma) dgamma[c] = add_dg ? dgamma[c] + (float)sdyx[c] : (float)sdyx[c];  /* never 0 * old */
        if (dbeta) dbeta[c] = add_db ? dbeta[c] + (float)sdy[c] : (float)sdy[c];
    }
    if (!dx) return GLIA_OK;  /* with sync the same on every rank (one model): none of them exchanges */
    if (synced && (st = glia_batchnorm_exchange(l, s, (size_t)(2 * C), "gradient sums"))) return st;
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

static const struct glia_layer_type batchnorm_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "batchnorm",
    .doc = "batch normalization of (N, C) or (N, C, H, W) (NCHW or NHWC) per channel, running statistics for eval, "
           "SyncBatchNorm over ranks with sync",
    .keys = batchnorm_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    /* subtracts the per-channel mean: a bias before it is useless; folds a relu that alone reads it (activation) */
    .flags = GLIA_TYPE_NORMALIZATION | GLIA_TYPE_FUSIBLE_ACTIVATION,
    .attrs_size = sizeof(struct glia_batchnorm_attrs),
    .create = batchnorm_create,
    .infer_shape = batchnorm_infer,
    .flops = batchnorm_flops,
};

/* The evaluation on the running statistics as a per-channel affine: mean, scale and shift (bn_coef's, as the eval
 * forward computes them), (3, C) into affine; none with track_running_stats = off (batch statistics) */
static glia_status batchnorm_eval_affine(struct glia_layer *l, struct glia_tensor *affine, bool *relu)
{
    const struct glia_batchnorm_attrs *d = l->attrs;
    if (d->rm < 0) return GLIA_EUNSUPPORTED;
    *relu = d->relu;
    if (!affine) return GLIA_OK;
    int64_t C = d->C;
    if (glia_tensor_numel(affine) != 3 * C || !glia_tensor_f32(affine))
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] batchnorm: the evaluation's affine must be a (3, %lld) f32 host tensor",
                          l->name, (long long)C);
    struct glia_batchnorm_tensors t = glia_batchnorm_tensors(l);
    float *o = glia_tensor_f32(affine);
    for (int64_t c = 0; c < C; c++) {
        float fm, scale, shift;
        bn_channel(d, &t, c, t.rmean[c], t.rvar[c], 2.0, false, &fm, &scale, &shift);
        o[c] = fm, o[C + c] = scale, o[2 * C + c] = shift;
    }
    return GLIA_OK;
}

static const struct glia_kernel batchnorm_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "batchnorm",
    .impl = "cpu",
    .doc = "OpenMP, sums in double in a fixed order; NCHW or NHWC",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_OUTPUT,
    .state_size = sizeof(struct batchnorm),
    .prepare = batchnorm_prepare,
    .destroy = batchnorm_destroy,
    .forward = batchnorm_forward,
    .backward = batchnorm_backward,
    .eval_affine = batchnorm_eval_affine,
};

static glia_status batchnorm_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &batchnorm_type);
    return st ? st : glia_register_kernel(r, &batchnorm_cpu);
}

GLIA_PLUGIN_DEFINE(batchnorm, "2.0", "MIT", "batch normalization 1d/2d (CPU)", batchnorm_init)
