/* plugins/layers/position_embedding — layer type position_embedding, GPT-2's learned position table (wpe) added to
 * a sequence (keys, the weight, the shape checks), and its CPU kernel (OpenMP): y(N, T, C) = x + weight[t] for
 * t = 0..T-1, what x + wpe(arange(T)) computes in PyTorch, or t = pos..pos+T-1 in a cached decode. Not sinusoidal or
 * rotary positions. */
#include <glia/glia.h>
#include <glia/types/position_embedding.h>
#include <string.h>

static const struct glia_key pe_keys[] = {
    GLIA_KEY("max_positions", GLIA_KEY_INT, NULL, "rows of the table: the most positions T an input may have",
             .required = true, .min = 1, .max = 1 << 30),
    GLIA_KEY("init_std", GLIA_KEY_FLOAT, "0.02", "standard deviation of the N(0, std^2) initial weight (GPT-2's)",
             .min = 0, .max = 1e6),
    GLIA_KEY_END};

/* Checks that in[0] is (N, T, C) with T <= max_positions, reads the keys and declares "weight" (max_positions, C),
 * N(0, init_std^2) (2-D: weight decay applies, as to GPT-2's wpe). */
static glia_status pe_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                             int n_in)
{
    (void)n_in;
    struct glia_position_embedding_attrs *d = l->attrs;
    char buf[64];
    if (in[0].ndim != 3)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "position_embedding takes a sequence (N, T, C), got %s",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    d->max_positions = glia_section_int(cfg, "max_positions");
    d->dim = in[0].dim[2];
    if (in[0].dim[1] > d->max_positions)
        return glia_section_error(cfg, "max_positions", GLIA_ESHAPE,
                                  "position_embedding: the input %s has T = %lld positions, more than max_positions = "
                                  "%lld",
                                  glia_shape_str(&in[0], buf, sizeof buf), (long long)in[0].dim[1],
                                  (long long)d->max_positions);
    struct glia_shape ws = glia_shape_make(2, (int64_t[]){d->max_positions, d->dim});
    struct glia_param_init init = {GLIA_INIT_NORMAL, glia_section_float(cfg, "init_std")};
    return glia_layer_add_param(l, "weight", &ws, init, &d->w);
}

/* (N, T, C) -> (N, T, C), T <= max_positions */
static glia_status pe_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in, struct glia_shape *out)
{
    (void)n_in;
    const struct glia_position_embedding_attrs *d = l->attrs;
    if (in[0].ndim != 3 || in[0].dim[1] > d->max_positions || in[0].dim[2] != d->dim) return GLIA_ESHAPE;
    *out = in[0];
    return GLIA_OK;
}

/* one addition per element */
static uint64_t pe_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    (void)l, (void)n_in;
    return (uint64_t)glia_shape_numel(&in[0]);
}

/* y(N, T, C) = x(N, T, C) + weight(max_positions, C)[first + t], first the decode's position (else 0) */
static glia_status pe_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_position_embedding_attrs *d = l->attrs;
    int64_t first;
    glia_status st = glia_position_embedding_check(l, a->in[0]);
    if (!st) st = glia_position_embedding_first(l, a, &first);
    if (st) return st;
    int64_t N = a->in[0]->shape.dim[0], T = a->in[0]->shape.dim[1], C = d->dim;
    const float *x = glia_tensor_f32(a->in[0]), *w = glia_tensor_f32(l->params[d->w].value) + first * C;
    float *y = glia_tensor_f32(a->out);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N * T; r++) {
        const float *xr = x + r * C, *wr = w + (r % T) * C;
        float *yr = y + r * C;
        for (int64_t c = 0; c < C; c++) yr[c] = xr[c] + wr[c];
    }
    return GLIA_OK;
}

/* dx(N, T, C) (+)= dy;  dweight(max_positions, C)[t] (+)= sum over n of dy[n, t] (n ascending, for every thread
 * count the same bits) for t < T; rows t >= T get no gradient: written 0 when unset, else left as they are */
static glia_status pe_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_position_embedding_attrs *d = l->attrs;
    glia_status st = glia_position_embedding_check(l, a->dout);
    if (st) return st;
    struct glia_param *pw = &l->params[d->w];
    int64_t N = a->dout->shape.dim[0], T = a->dout->shape.dim[1], C = d->dim, n = N * T * C;
    const float *dy = glia_tensor_f32(a->dout);
    if (a->din[0]) {
        float *dx = glia_tensor_f32(a->din[0]);
        if (a->din_accumulate[0]) {
#pragma omp parallel for simd schedule(static)
            for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
        } else {
#pragma omp parallel for simd schedule(static)
            for (int64_t i = 0; i < n; i++) dx[i] = dy[i];
        }
    }
    float *dw = glia_tensor_f32(pw->grad);
    bool unset = pw->grad_unset;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; t++) {
        float *g = dw + t * C;
        for (int64_t c = 0; c < C; c++) {
            float s = 0;
            for (int64_t k = 0; k < N; k++) s += dy[(k * T + t) * C + c];
            g[c] = unset ? s : g[c] + s;  /* never 0 * old: old may be garbage */
        }
    }
    if (unset && d->max_positions > T)
        memset(dw + T * C, 0, (size_t)((d->max_positions - T) * C) * sizeof *dw);
    return GLIA_OK;
}

static const struct glia_layer_type pe_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "position_embedding",
    .doc = "x (N, T, C) + weight[t] of a learned (max_positions, C) table for t = 0..T-1 (GPT-2's wpe)",
    .keys = pe_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs_size = sizeof(struct glia_position_embedding_attrs),
    .create = pe_create,
    .infer_shape = pe_infer,
    .flops = pe_flops,
};

static const struct glia_kernel pe_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "position_embedding",
    .impl = "cpu",
    .doc = "OpenMP",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_DECODE, /* backward: dy only */
    .forward = pe_forward,
    .backward = pe_backward,
};

static glia_status pe_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &pe_type);
    return st ? st : glia_register_kernel(r, &pe_cpu);
}

GLIA_PLUGIN_DEFINE(position_embedding, "2.0", "MIT", "learned position table added to a sequence (CPU, OpenMP)",
                   pe_init)
