/* plugins/layers/dropout — inverted dropout on the CPU: in training each element is kept with
 * probability 1-p and scaled by 1/(1-p); in eval it is the identity. Not spatial dropout.
 * The mask is counter-based (a hash of the step seed and the element index), so backward
 * recomputes it instead of storing it, and any device draws the same mask. */
#include <glia/glia.h>
#include <stdlib.h>
#include <string.h>

struct dropout {
    float p;
    uint64_t seed;  /* seed of the last training forward */
};

static const struct glia_key dropout_keys[] = {
    GLIA_KEY("p", GLIA_KEY_FLOAT, "0.5", "probability of zeroing an element", .min = 0, .max = 0.999999),
    GLIA_KEY_END};

static glia_status dropout_create(struct glia_layer *l, const struct glia_section *cfg,
                                  const struct glia_shape *in, int n_in)
{
    struct dropout *d = calloc(1, sizeof *d);
    if (!d) return GLIA_ENOMEM;
    d->p = (float)glia_section_float(cfg, "p");
    l->priv = d;
    return GLIA_OK;
}

static void dropout_destroy(struct glia_layer *l) { free(l->priv); }

static glia_status dropout_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                 struct glia_shape *out)
{
    *out = in[0];
    return GLIA_OK;
}

/* Uniform [0,1) from (seed, i): splitmix64 finalizer of a Weyl sequence. */
static inline float uniform_at(uint64_t seed, int64_t i)
{
    uint64_t z = seed + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)(z >> 40) * 0x1.0p-24f;
}

/* y(n) = keep(n) ? x(n) / (1-p) : 0 in training; y = x in eval */
static glia_status dropout_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct dropout *d = l->priv;
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    int64_t n = glia_tensor_numel(a->out);
    if (!a->train || d->p == 0.0f) {
        memcpy(y, x, (size_t)n * sizeof *y);
        return GLIA_OK;
    }
    d->seed = a->seed;
    float p = d->p, scale = 1.0f / (1.0f - p);
    uint64_t seed = a->seed;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = uniform_at(seed, i) >= p ? x[i] * scale : 0.0f;
    return GLIA_OK;
}

/* dx(n) (+)= keep(n) ? dy(n) / (1-p) : 0, with the mask of the last training forward */
static glia_status dropout_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct dropout *d = l->priv;
    if (!a->din[0]) return GLIA_OK;
    const float *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int64_t n = glia_tensor_numel(a->dout);
    float p = d->p, scale = 1.0f / (1.0f - p);
    uint64_t seed = d->seed;
    int add = a->din_accumulate[0], all = p == 0.0f;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float g = all ? dy[i] : uniform_at(seed, i) >= p ? dy[i] * scale : 0.0f;
        dx[i] = add ? dx[i] + g : g;
    }
    return GLIA_OK;
}

static const struct glia_layer_ops dropout_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "dropout",
    .impl = "cpu",
    .doc = "inverted dropout (seeded, counter-based mask); identity in eval",
    .keys = dropout_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .device_type = GLIA_DEVICE_CPU,
    .create = dropout_create,
    .destroy = dropout_destroy,
    .infer_shape = dropout_infer,
    .forward = dropout_forward,
    .backward = dropout_backward,
};

static glia_status dropout_init(struct glia_registry *r) { return glia_register_layer(r, &dropout_ops); }

GLIA_PLUGIN_DEFINE(dropout, "1.0", "MIT", "dropout (CPU, OpenMP)", dropout_init)
