/* plugins/layers/seq_pool — masked pooling over sequence positions on the CPU (OpenMP): the mean or max of
 * features (N, C, 1, L) (NCHW or channels_last) over the positions l whose token (N, L) is not pad_id, giving
 * (N, C); a row without valid tokens gives 0. Not attention pooling, not pooling over H (H must be 1). */
#include <glia/glia.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "seq_pool_desc.h"

/* Channels of a channels_last row that one thread pools at a time. */
#define CBLOCK 64

struct seq_pool {
    struct glia__seq_pool_desc d;  /* first: the shared infer_shape and flops read it */
    int32_t *argmax;               /* max mode, training: per (n, c) the position l of the first max, -1 for a row
                                      without valid tokens, from the last training forward */
    int64_t n_argmax;              /* elements of argmax kept for backward (0: none) */
    int64_t cap;                   /* elements allocated (the largest N*C so far) */
};

static glia_status sp_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                             int n_in)
{
    struct glia__seq_pool_desc d;
    glia_status st = glia__seq_pool_describe(cfg, in, n_in, &d);
    if (st) return st;
    struct seq_pool *p = calloc(1, sizeof *p);
    if (!p) return GLIA_ENOMEM;
    p->d = d;
    l->priv = p;
    return GLIA_OK;
}

static void sp_destroy(struct glia_layer *l)
{
    struct seq_pool *p = l->priv;
    if (!p) return;
    free(p->argmax);
    free(p);
}

/* Valid tokens (not pad) of row tok(L). */
static int64_t count_valid(const int32_t *tok, int64_t L, int64_t pad)
{
    int64_t k = 0;
    for (int64_t i = 0; i < L; i++) k += tok[i] != pad;
    return k;
}

/* Whether v takes the max from best (arg < 0: none yet): larger, or the first NaN (which then stays). */
static inline bool takes_max(float v, float best, int32_t arg)
{
    return arg < 0 || v > best || (isnan(v) && !isnan(best));
}

/* The position of the max of x(L) over the l with tok(L) != pad, the first of equal ones; a NaN
 * wins (the first); -1 when no l is valid. takes_max's rule in two passes that vectorize: the
 * max and whether a NaN occurs, then the first position holding it. */
static int32_t first_max(const float *x, const int32_t *tok, int64_t L, int64_t pad64)
{
    const int32_t pad = (int32_t)pad64;  /* pad_id is an int32 (its key's range): one lane width */
    float m = -INFINITY;
    int any = 0, nan = 0;
#pragma omp simd reduction(max : m) reduction(| : any, nan)
    for (int64_t i = 0; i < L; i++) {
        int valid = tok[i] != pad;
        float v = x[i];
        any |= valid;
        nan |= valid & (v != v);
        m = valid && v > m ? v : m;
    }
    if (!any) return -1;
    for (int64_t i = 0; i < L; i++)
        if (tok[i] != pad && (nan ? x[i] != x[i] : x[i] == m)) return (int32_t)i;
    return -1;  /* not reached: some valid position holds m */
}

/* y(N, C) = masked mean or max over l of x(N, L, C) (channels_last), per sample and block of channels, positions
 * in l order as in NCHW (the same bits); arg (N, C) (NULL: eval) gets the max's position */
static void sp_forward_nhwc(const struct seq_pool *p, const float *x, const int32_t *tok, float *y, int32_t *arg,
                            int64_t N, int64_t C, int64_t L)
{
    int64_t nc = (C + CBLOCK - 1) / CBLOCK, pad = p->d.pad_id;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N * nc; t++) {
        int64_t n = t / nc, c0 = t % nc * CBLOCK, c1 = c0 + CBLOCK < C ? c0 + CBLOCK : C;
        const int32_t *tn = tok + n * L;
        float *yn = y + n * C;
        int32_t ab[CBLOCK];
        for (int64_t c = c0; c < c1; c++) yn[c] = 0.0f, ab[c - c0] = -1;
        for (int64_t i = 0; i < L; i++) {
            if (tn[i] == pad) continue;
            const float *xr = x + (n * L + i) * C;
            if (!p->d.max)
                for (int64_t c = c0; c < c1; c++) yn[c] += xr[c];
            else
                for (int64_t c = c0; c < c1; c++)
                    if (takes_max(xr[c], yn[c], ab[c - c0])) yn[c] = xr[c], ab[c - c0] = (int32_t)i;
        }
        if (!p->d.max) {
            int64_t k = count_valid(tn, L, pad);
            if (k > 0)
                for (int64_t c = c0; c < c1; c++) yn[c] /= (float)k;
        } else if (arg)
            for (int64_t c = c0; c < c1; c++) arg[n * C + c] = ab[c - c0];
    }
}

/* y(N, C) = mean over l with tok(N, L) != pad_id of x(N, C, 1, L) (a float sum in l order, divided by the count),
 * or the max over them (the first maximal l; a NaN wins); 0 for a row without such l. Training in max mode
 * keeps the max's position per (n, c). */
static glia_status sp_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct seq_pool *p = l->priv;
    glia_status st = glia__seq_pool_check_tokens(l, a->in[1]);
    if (st) return st;
    const struct glia_shape *xs = &a->in[0]->shape;
    int64_t N = xs->dim[0], C = xs->dim[1], L = xs->dim[3], n = N * C, pad = p->d.pad_id;
    int32_t *arg = NULL;
    p->n_argmax = 0;
    if (a->train && p->d.max) {
        if (n > p->cap) {
            int32_t *g = realloc(p->argmax, (size_t)n * sizeof *g);
            if (!g) return GLIA_ENOMEM;
            p->argmax = g;
            p->cap = n;
        }
        arg = p->argmax;
    }
    const float *x = glia_tensor_f32(a->in[0]);
    const int32_t *tok = glia_tensor_i32(a->in[1]);
    float *y = glia_tensor_f32(a->out);
    if (glia_tensor_memory_format(a->in[0]) == GLIA_CHANNELS_LAST) {
        sp_forward_nhwc(p, x, tok, y, arg, N, C, L);
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t pl = 0; pl < n; pl++) {
            const float *xp = x + pl * L;
            const int32_t *tn = tok + pl / C * L;
            if (!p->d.max) {
                float acc = 0.0f;
                int64_t k = 0;  /* valid positions, counted in the same pass */
                for (int64_t i = 0; i < L; i++)
                    if (tn[i] != pad) acc += xp[i], k++;
                y[pl] = k > 0 ? acc / (float)k : 0.0f;
            } else {
                int32_t bi = first_max(xp, tn, L, pad);
                y[pl] = bi < 0 ? 0.0f : xp[bi];  /* 0 when no position is valid */
                if (arg) arg[pl] = bi;
            }
        }
    }
    if (arg) p->n_argmax = n;
    return GLIA_OK;
}

/* dx(N, C, 1, L) (+)= for valid l: dy(N, C) / count (mean) or dy where l is the kept max (max); 0 elsewhere.
 * NCHW: planes (n, c) in parallel; channels_last: samples n in parallel. No gradient for the tokens. */
static glia_status sp_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct seq_pool *p = l->priv;
    if (!a->din[0]) return GLIA_OK;
    glia_status st = glia__seq_pool_check_tokens(l, a->in[1]);
    if (st) return st;
    const struct glia_shape *xs = &a->in[0]->shape;
    int64_t N = xs->dim[0], C = xs->dim[1], L = xs->dim[3], pad = p->d.pad_id;
    if (p->d.max && p->n_argmax != N * C)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] seq_pool (max) backward needs a training forward just before it",
                          l->name);
    const int32_t *tok = glia_tensor_i32(a->in[1]), *arg = p->argmax;
    const float *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    bool add = a->din_accumulate[0], mx = p->d.max;
    if (glia_tensor_memory_format(a->din[0]) == GLIA_CHANNELS_LAST) {
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            const int32_t *tn = tok + n * L;
            const float *dyn = dy + n * C;
            float k = mx ? 1.0f : (float)count_valid(tn, L, pad);
            for (int64_t i = 0; i < L; i++) {
                float *dxr = dx + (n * L + i) * C;
                bool valid = tn[i] != pad;
                for (int64_t c = 0; c < C; c++) {
                    float g = !valid ? 0.0f : mx ? (arg[n * C + c] == i ? dyn[c] : 0.0f) : dyn[c] / k;
                    dxr[c] = add ? dxr[c] + g : g;
                }
            }
        }
        return GLIA_OK;
    }
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < N * C; pl++) {
        const int32_t *tn = tok + pl / C * L;
        float *dxp = dx + pl * L;
        if (mx) {  /* the gradient goes to the kept position only */
            if (!add) memset(dxp, 0, sizeof *dxp * (size_t)L);
            if (arg[pl] >= 0) dxp[arg[pl]] = add ? dxp[arg[pl]] + dy[pl] : dy[pl];
            continue;
        }
        int64_t k = count_valid(tn, L, pad);
        float g = k > 0 ? dy[pl] / (float)k : 0.0f;
        if (add) {
#pragma omp simd
            for (int64_t i = 0; i < L; i++) dxp[i] += tn[i] != pad ? g : 0.0f;
        } else {
#pragma omp simd
            for (int64_t i = 0; i < L; i++) dxp[i] = tn[i] != pad ? g : 0.0f;
        }
    }
    return GLIA_OK;
}

static const struct glia_layer_ops sp_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "seq_pool",
    .impl = "cpu",
    .doc = GLIA__SEQ_POOL_DOC,
    .keys = glia__seq_pool_keys,
    .min_inputs = 2,
    .max_inputs = 2,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_TOKEN_INPUT,
    .device_type = GLIA_DEVICE_CPU,
    .create = sp_create,
    .destroy = sp_destroy,
    .infer_shape = glia__seq_pool_infer,
    .forward = sp_forward,
    .backward = sp_backward,
    .flops = glia__seq_pool_flops,
};

static glia_status sp_init(struct glia_registry *r) { return glia_register_layer(r, &sp_ops); }

GLIA_PLUGIN_DEFINE(seq_pool, "1.0", "MIT", "masked mean or max pooling over token positions (CPU, OpenMP)", sp_init)
