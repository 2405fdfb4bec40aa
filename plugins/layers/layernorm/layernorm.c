/* plugins/layers/layernorm — layer type layernorm (PyTorch's nn.LayerNorm(C): statistics per row over the last
 * dimension of an input of rank 2 or more, an optional learned per-feature affine transform) and its CPU kernel
 * (OpenMP, one fused pass per row forward and backward). Not RMSNorm, group norm or a normalization over several
 * trailing dimensions; keeps no running statistics (train and eval compute the same). */
#include <glia/glia.h>
#include <glia/types/layernorm.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct glia_key layernorm_keys[] = {
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-5", "added to the variance before the square root", .min = 1e-12, .max = 1),
    GLIA_KEY("affine", GLIA_KEY_BOOL, "on",
             "learned per-feature weight (init 1) and bias (init 0), PyTorch's elementwise_affine"),
    GLIA_KEY_END};

/* Checks that in[0] has rank 2 or more, reads the keys into l->attrs and declares weight (C) = 1 and bias (C) = 0
 * with affine on. */
static glia_status layernorm_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                    int n_in)
{
    struct glia_layernorm_attrs *d = l->attrs;
    char buf[64];
    if (in[0].ndim < 2 || in[0].dim[in[0].ndim - 1] < 1)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE,
                                  "layernorm expects (N, C), (N, T, C) or another input of rank 2 or more with C >= 1 "
                                  "features last, got %s", glia_shape_str(&in[0], buf, sizeof buf));
    d->C = in[0].dim[in[0].ndim - 1];
    d->eps = glia_section_float(cfg, "eps");
    d->w = d->b = -1;
    if (!glia_section_bool(cfg, "affine")) return GLIA_OK;
    struct glia_shape cs = glia_shape_make(1, (int64_t[]){d->C});
    glia_status st = glia_layer_add_param(l, "weight", &cs, (struct glia_param_init){GLIA_INIT_CONST, 1.0}, &d->w);
    if (!st) st = glia_layer_add_param(l, "bias", &cs, (struct glia_param_init){GLIA_INIT_ZEROS, 0.0}, &d->b);
    return st;
}

static glia_status layernorm_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                   struct glia_shape *out)
{
    const struct glia_layernorm_attrs *d = l->attrs;
    if (in[0].ndim < 2 || in[0].dim[in[0].ndim - 1] != d->C) return GLIA_ESHAPE;
    *out = in[0];
    return GLIA_OK;
}

/* the row's sum, squared deviations, and the normalization with its affine: about four multiply-adds per element */
static uint64_t layernorm_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return 8u * (uint64_t)glia_shape_numel(&in[0]);
}

/* ---- the CPU kernel ---- */

/* Backward's weight and bias gradients are summed over the rows in blocks of consecutive rows (at most MAX_BLOCKS
 * of at least BLOCK_ROWS, fixed by the row count alone), each into partials of its own, then added per feature in
 * block order: the same bits for any thread count. */
#define MAX_BLOCKS 64
#define BLOCK_ROWS 16

/* l->state of the CPU kernel */
struct layernorm {
    float *mean, *rstd;  /* rows: the statistics of the last training forward, per row (owned) */
    int64_t cap;         /* rows mean and rstd have room for */
    int64_t kept;        /* rows the statistics belong to, when has_kept */
    bool has_kept;       /* a training forward kept statistics, no eval forward since */
    double *part;        /* 2*MAX_BLOCKS*C: the blocks' partial sums of dy*x_hat and dy (owned) */
};

static int64_t n_blocks(int64_t R)
{
    int64_t nb = (R + BLOCK_ROWS - 1) / BLOCK_ROWS;
    return nb < MAX_BLOCKS ? nb : MAX_BLOCKS;
}

static glia_status oom(struct glia_layer *l) { return glia_error(l->ctx, GLIA_ENOMEM, "[%s] layernorm: out of memory", l->name); }

/* The partials of the parameter gradients, with affine on (C is fixed: made once). */
static glia_status layernorm_prepare(struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct glia_layernorm_attrs *d = l->attrs;
    struct layernorm *p = l->state;
    if (d->w < 0) return GLIA_OK;
    p->part = malloc(2 * MAX_BLOCKS * (size_t)d->C * sizeof *p->part);
    return p->part ? GLIA_OK : oom(l);
}

static void layernorm_destroy(struct glia_layer *l)
{
    struct layernorm *p = l->state;
    free(p->mean);
    free(p->rstd);
    free(p->part);
}

/* Room for the statistics of R rows (grown with the batch). */
static glia_status stats_room(struct glia_layer *l, struct layernorm *p, int64_t R)
{
    if (R <= p->cap) return GLIA_OK;
    float *m = realloc(p->mean, (size_t)R * sizeof *m);
    if (!m) return oom(l);
    p->mean = m;
    float *r = realloc(p->rstd, (size_t)R * sizeof *r);
    if (!r) return oom(l);
    p->rstd = r;
    p->cap = R;
    return GLIA_OK;
}

/* One row x(C): mean and biased variance in double (two passes over the row, in order), *mean = (float)mean and
 * *rstd = (float)(1/sqrt(var + eps)); y(C) = (x - mean)*rstd*w + b in float (w, b NULL: 1, 0). A constant row
 * has var 0 exactly (its mean is exact), so y = b. */
static void row_forward(const float *x, float *y, int64_t C, double eps, const float *w, const float *b, float *mean,
                        float *rstd)
{
    double s = 0, q = 0;
    for (int64_t i = 0; i < C; i++) s += x[i];
    double m = s / (double)C;
    for (int64_t i = 0; i < C; i++) {
        double dv = x[i] - m;
        q += dv * dv;
    }
    float fm = (float)m, fr = (float)(1.0 / sqrt(q / (double)C + eps));
    if (w) {
        for (int64_t i = 0; i < C; i++) y[i] = (x[i] - fm) * fr * w[i] + b[i];
    } else {
        for (int64_t i = 0; i < C; i++) y[i] = (x[i] - fm) * fr;
    }
    *mean = fm;
    *rstd = fr;
}

/* y(R, C) = per row (x(R, C) - mean)*rstd*weight(C) + bias(C); training keeps mean(R) and rstd(R) for backward, eval
 * keeps nothing. Rows in parallel. */
static glia_status layernorm_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_layernorm_attrs *d = l->attrs;
    struct layernorm *p = l->state;
    int64_t R = glia_layernorm_rows(&a->in[0]->shape), C = d->C;
    p->has_kept = false;
    glia_status st = a->train ? stats_room(l, p, R) : GLIA_OK;
    if (st) return st;
    const float *x = glia_tensor_f32(a->in[0]), *w = glia_layernorm_weight(l), *b = glia_layernorm_bias(l);
    const float *res = a->residual ? glia_tensor_f32(a->residual) : NULL;
    float *y = glia_tensor_f32(a->out), *mean = p->mean, *rstd = p->rstd, *sum = res ? glia_tensor_f32(a->sum) : NULL;
    bool train = a->train;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; r++) {
        float fm, fr;
        if (res) {  /* the residual add's row first, as it would write it; then normalized from there */
            for (int64_t i = 0; i < C; i++) sum[r * C + i] = x[r * C + i] + res[r * C + i];
            row_forward(sum + r * C, y + r * C, C, d->eps, w, b, &fm, &fr);
        } else {
            row_forward(x + r * C, y + r * C, C, d->eps, w, b, &fm, &fr);
        }
        if (train) mean[r] = fm, rstd[r] = fr;
    }
    p->kept = R;
    p->has_kept = train;
    return GLIA_OK;
}

/* One row, x_hat = (x - mean)*rstd and g = dy*w (dy without affine): with dx, dx(C) (+)= rstd*(g - mean(g) -
 * x_hat*mean(g*x_hat)) (the two means in double, in order); with pw, pw(C) += dy*x_hat and pb(C) += dy, in the same
 * pass as dx. */
static void row_backward(const float *x, const float *dy, float *dx, bool add, int64_t C, float mean, float rstd,
                         const float *w, double *pw, double *pb)
{
    float mg = 0, mgx = 0;
    if (dx) {
        double sg = 0, sgx = 0;
        for (int64_t i = 0; i < C; i++) {
            float xh = (x[i] - mean) * rstd, g = w ? dy[i] * w[i] : dy[i];
            sg += g;
            sgx += g * xh;
        }
        mg = (float)(sg / (double)C);
        mgx = (float)(sgx / (double)C);
    }
    for (int64_t i = 0; i < C; i++) {
        float xh = (x[i] - mean) * rstd;
        if (dx) {
            float g = w ? dy[i] * w[i] : dy[i], v = rstd * (g - mg - xh * mgx);
            dx[i] = add ? dx[i] + v : v;
        }
        if (pw) {
            pw[i] += dy[i] * xh;
            pb[i] += dy[i];
        }
    }
}

/* With x_hat = (x - mean)*rstd from the kept statistics, per row: dx (+)= rstd*(dxhat - mean(dxhat) -
 * x_hat*mean(dxhat*x_hat)), dxhat = dy*weight; over the rows dweight (+)= sum dy*x_hat, dbias (+)= sum dy (blocks of
 * rows in parallel, then the blocks' partials in order, in double). */
static glia_status layernorm_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_layernorm_attrs *d = l->attrs;
    struct layernorm *p = l->state;
    int64_t R = glia_layernorm_rows(&a->in[0]->shape), C = d->C;
    if (!p->has_kept || p->kept != R)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] layernorm backward needs a training forward just before it", l->name);
    struct glia_param *pw = d->w >= 0 ? &l->params[d->w] : NULL, *pb = d->b >= 0 ? &l->params[d->b] : NULL;
    const float *x = glia_tensor_f32(a->in[0]), *dy = glia_tensor_f32(a->dout), *w = glia_layernorm_weight(l);
    const float *mean = p->mean, *rstd = p->rstd;
    float *dx = a->din[0] ? glia_tensor_f32(a->din[0]) : NULL;
    bool add = a->din[0] && a->din_accumulate[0];
    if (!dx && !pw) return GLIA_OK;
    int64_t nb = n_blocks(R);
    double *part = pw ? p->part : NULL;  /* pdw(nb, C) then pdb(nb, C) */
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < nb; k++) {
        double *bw = part ? part + k * C : NULL, *bb = part ? part + (MAX_BLOCKS + k) * C : NULL;
        if (bw)
            for (int64_t i = 0; i < C; i++) bw[i] = bb[i] = 0;
        for (int64_t r = k * R / nb; r < (k + 1) * R / nb; r++)
            row_backward(x + r * C, dy + r * C, dx ? dx + r * C : NULL, add, C, mean[r], rstd[r], w, bw, bb);
    }
    if (!pw) return GLIA_OK;
    float *dw = glia_tensor_f32(pw->grad), *db = glia_tensor_f32(pb->grad);
    bool add_w = !pw->grad_unset, add_b = !pb->grad_unset;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < C; i++) {
        double sw = 0, sb = 0;
        for (int64_t k = 0; k < nb; k++) {
            sw += part[k * C + i];
            sb += part[(MAX_BLOCKS + k) * C + i];
        }
        dw[i] = add_w ? dw[i] + (float)sw : (float)sw;  /* never 0 * old: old may be garbage */
        db[i] = add_b ? db[i] + (float)sb : (float)sb;
    }
    return GLIA_OK;
}

static const struct glia_layer_type layernorm_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "layernorm",
    .doc = "layer normalization over the last dimension of (N, C), (N, T, C), ...: y = (x - mean)/sqrt(var + eps)*weight "
           "+ bias per row, nn.LayerNorm(C)",
    .keys = layernorm_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    /* not GLIA_TYPE_NORMALIZATION: it subtracts each row's mean over the features, so a per-feature bias before it
       still changes its output */
    .attrs_size = sizeof(struct glia_layernorm_attrs),
    .create = layernorm_create,
    .infer_shape = layernorm_infer,
    .flops = layernorm_flops,
};

static const struct glia_kernel layernorm_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "layernorm",
    .impl = "cpu",
    .doc = "OpenMP, a row per pass; row statistics in double, parameter gradients in double in a fixed order",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_DECODE | /* per position */
             GLIA_KERNEL_RESIDUAL_IN,
    .state_size = sizeof(struct layernorm),
    .prepare = layernorm_prepare,
    .destroy = layernorm_destroy,
    .forward = layernorm_forward,
    .backward = layernorm_backward,
};

static glia_status layernorm_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &layernorm_type);
    return st ? st : glia_register_kernel(r, &layernorm_cpu);
}

GLIA_PLUGIN_DEFINE(layernorm, "2.0", "MIT", "layer normalization over the last dimension (CPU)", layernorm_init)
