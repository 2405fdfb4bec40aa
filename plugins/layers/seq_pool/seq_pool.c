/* plugins/layers/seq_pool — layer type seq_pool (keys, input checks, output shape, flops) and its CPU kernel
 * (OpenMP): masked pooling over sequence positions, the mean or max of features (N, C, 1, L) (NCHW or
 * channels_last) over the positions l whose token (N, L) is not pad_id, giving (N, C); a row without valid tokens
 * gives 0. Not attention pooling, not pooling over H (H must be 1). */
#include <glia/glia.h>
#include <glia/types/seq_pool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Channels of a channels_last row that one thread pools at a time. */
#define CBLOCK 64

static const struct glia_key sp_keys[] = {
    GLIA_KEY("mode", GLIA_KEY_ENUM, "mean", "mean or max over the valid positions", .choices = "mean|max"),
    GLIA_KEY("pad_id", GLIA_KEY_INT, "0", "token id of padding: positions holding it are left out", .min = -(1LL << 31),
             .max = (1LL << 31) - 1),
    GLIA_KEY_END};

/* Whether the inputs' shapes fit; if not, the first problem is written to why. */
static bool shapes_ok(const struct glia_shape *in, int n_in, char *why, size_t n)
{
    char a[64], b[64];
    if (n_in != 2) {
        snprintf(why, n, "seq_pool takes 2 inputs (features (N, C, 1, L), then the token batch (N, L): "
                 "inputs = LAYER, input), got %d", n_in);
        return false;
    }
    glia_shape_str(&in[0], a, sizeof a);
    glia_shape_str(&in[1], b, sizeof b);
    if (in[0].ndim != 4 || in[0].dim[2] != 1)
        snprintf(why, n, "seq_pool expects features (N, C, 1, L) as first input, got %s", a);
    else if (in[1].ndim != 2)
        snprintf(why, n, "seq_pool expects the token batch (N, L) of a [data] format = tokens dataset as second input, got %s", b);
    else if (in[1].dim[0] != in[0].dim[0] || in[1].dim[1] != in[0].dim[3])
        snprintf(why, n, "seq_pool: features %s and tokens %s differ in N or L", a, b);
    else
        return true;
    return false;
}

/* Checks the two inputs, features (N, C, 1, L) and tokens (N, L) of the same N and L (messages name what differs),
 * and reads the keys. */
static glia_status sp_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                             int n_in)
{
    struct glia_seq_pool_attrs *d = l->attrs;
    char why[256];
    if (!shapes_ok(in, n_in, why, sizeof why))
        return glia_section_error(cfg, n_in != 2 ? "inputs" : NULL, GLIA_ESHAPE, "%s", why);
    d->max = !strcmp(glia_section_str(cfg, "mode"), "max");
    d->pad_id = glia_section_int(cfg, "pad_id");
    return GLIA_OK;
}

/* (N, C, 1, L), (N, L) -> (N, C) */
static glia_status sp_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in, struct glia_shape *out)
{
    (void)l;
    char why[256];
    if (!shapes_ok(in, n_in, why, sizeof why)) return GLIA_ESHAPE;
    *out = glia_shape_make(2, (int64_t[]){in[0].dim[0], in[0].dim[1]});
    return GLIA_OK;
}

/* One add or compare per feature element. */
static uint64_t sp_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    (void)l;
    (void)n_in;
    return (uint64_t)glia_shape_numel(&in[0]);
}

/* ---- the CPU kernel ---- */

/* l->state of the CPU kernel. */
struct sp_state {
    int32_t *argmax;    /* max mode, training: per (n, c) the position l of the first max, -1 for a row without
                           valid tokens, from the last training forward */
    int64_t n_argmax;   /* elements of argmax kept for backward (0: none) */
    int64_t cap;        /* elements allocated (the largest N*C so far) */
};

static void sp_cpu_destroy(struct glia_layer *l)
{
    struct sp_state *p = l->state;
    free(p->argmax);
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
static void sp_forward_nhwc(const struct glia_seq_pool_attrs *d, const float *x, const int32_t *tok, float *y,
                            int32_t *arg, int64_t N, int64_t C, int64_t L)
{
    int64_t nc = (C + CBLOCK - 1) / CBLOCK, pad = d->pad_id;
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
            if (!d->max)
                for (int64_t c = c0; c < c1; c++) yn[c] += xr[c];
            else
                for (int64_t c = c0; c < c1; c++)
                    if (takes_max(xr[c], yn[c], ab[c - c0])) yn[c] = xr[c], ab[c - c0] = (int32_t)i;
        }
        if (!d->max) {
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
    const struct glia_seq_pool_attrs *d = l->attrs;
    struct sp_state *p = l->state;
    glia_status st = glia_seq_pool_check_tokens(l, a->in[1]);
    if (st) return st;
    const struct glia_shape *xs = &a->in[0]->shape;
    int64_t N = xs->dim[0], C = xs->dim[1], L = xs->dim[3], n = N * C, pad = d->pad_id;
    int32_t *arg = NULL;
    p->n_argmax = 0;
    if (a->train && d->max) {
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
        sp_forward_nhwc(d, x, tok, y, arg, N, C, L);
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t pl = 0; pl < n; pl++) {
            const float *xp = x + pl * L;
            const int32_t *tn = tok + pl / C * L;
            if (!d->max) {
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
    const struct glia_seq_pool_attrs *d = l->attrs;
    const struct sp_state *p = l->state;
    if (!a->din[0]) return GLIA_OK;
    const struct glia_shape *xs = &a->in[0]->shape;
    int64_t N = xs->dim[0], C = xs->dim[1], L = xs->dim[3], pad = d->pad_id;
    glia_status st = glia_seq_pool_check_tokens(l, a->in[1]);
    if (!st) st = glia_seq_pool_check_kept(l, p->n_argmax, N, C);
    if (st) return st;
    const int32_t *tok = glia_tensor_i32(a->in[1]), *arg = p->argmax;
    const float *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    bool add = a->din_accumulate[0], mx = d->max;
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

static const struct glia_layer_type sp_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "seq_pool",
    .doc = "masked mean or max over the positions of valid tokens: features (N, C, 1, L) + token ids (N, L) -> (N, C)",
    .keys = sp_keys,
    .min_inputs = 2,
    .max_inputs = 2,
    .flags = GLIA_TYPE_TOKEN_INPUT,
    .attrs_size = sizeof(struct glia_seq_pool_attrs),
    .create = sp_create,
    .infer_shape = sp_infer,
    .flops = sp_flops,
};

static const struct glia_kernel sp_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "seq_pool",
    .impl = "cpu",
    .doc = "OpenMP",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST,
    .state_size = sizeof(struct sp_state),
    .destroy = sp_cpu_destroy,
    .forward = sp_forward,
    .backward = sp_backward,
};

static glia_status sp_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &sp_type);
    return st ? st : glia_register_kernel(r, &sp_cpu);
}

GLIA_PLUGIN_DEFINE(seq_pool, "2.0", "MIT", "masked mean or max pooling over token positions (CPU, OpenMP)", sp_init)
