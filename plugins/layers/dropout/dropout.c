/* plugins/layers/dropout — layer type dropout (inverted dropout: in training each element is kept with
 * probability 1-p and scaled by 1/(1-p); in eval it is the identity) and its CPU kernel. Not spatial dropout.
 * The mask is counter-based (glia/types/dropout.h: a hash of the step seed and the element's logical NCHW
 * index), so backward recomputes it instead of storing it, and any device and memory format (channels_last
 * tensors are walked in NHWC order) draws the same mask. */
#include <glia/glia.h>
#include <glia/types/dropout.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct glia_key dropout_keys[] = {
    GLIA_KEY("p", GLIA_KEY_FLOAT, "0.5", "probability of zeroing an element", .min = 0, .max = 0.999999),
    GLIA_KEY_END};

static glia_status dropout_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                  int n_in)
{
    struct glia_dropout_attrs *d = l->attrs;
    d->p_key = glia_section_float(cfg, "p");
    d->p = (float)d->p_key;
    return GLIA_OK;
}

/* out = in[0] */
static glia_status dropout_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                 struct glia_shape *out)
{
    *out = in[0];
    return GLIA_OK;
}

/* dropout(x, p), the language's dropout() draws this layer's mask; p written so that it reads back exactly */
static int dropout_text(const struct glia_layer *l, int n_in, char *buf, size_t size)
{
    double p = ((const struct glia_dropout_attrs *)l->attrs)->p_key;
    char num[32];
    snprintf(num, sizeof num, "%.15g", p);
    if (strtod(num, NULL) != p) snprintf(num, sizeof num, "%.17g", p);
    return snprintf(buf, size, "dropout(x, %s)", num);
}

/* ---- the CPU kernel: l->state is the seed of the last training forward (backward's mask) ---- */

/* Calls body(i, j) for every element: i its offset in memory, j its logical (NCHW row-major) index, the
 * mask's counter. Channels_last (N,H,W,C) memory is walked in memory order. */
#define FOR_EACH(t, body)                                                                        \
    do {                                                                                         \
        const struct glia_shape *s_ = &(t)->shape;                                               \
        if (glia_tensor_memory_format(t) == GLIA_CHANNELS_LAST) {                                \
            int64_t C_ = s_->dim[1], H_ = s_->dim[2], W_ = s_->dim[3];                           \
            _Pragma("omp parallel for schedule(static)")                                         \
            for (int64_t r_ = 0; r_ < s_->dim[0] * H_ * W_; r_++) {                              \
                int64_t n_ = r_ / (H_ * W_), hw_ = r_ % (H_ * W_);                               \
                for (int64_t c_ = 0; c_ < C_; c_++) {                                            \
                    int64_t i = r_ * C_ + c_, j = (n_ * C_ + c_) * H_ * W_ + hw_;                \
                    body;                                                                        \
                }                                                                                \
            }                                                                                    \
        } else {                                                                                 \
            int64_t n_ = glia_shape_numel(s_);                                                   \
            _Pragma("omp parallel for simd schedule(static)")                                    \
            for (int64_t i = 0; i < n_; i++) {                                                   \
                int64_t j = i;                                                                   \
                body;                                                                            \
            }                                                                                    \
        }                                                                                        \
    } while (0)

/* y(N,...) = keep(j) ? x / (1-p) : 0 in training; y = x in eval. Any shape and format. */
static glia_status dropout_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_dropout_attrs *d = l->attrs;
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    if (!a->train || d->p == 0.0f) {
        memcpy(y, x, glia_tensor_nbytes(a->out));
        return GLIA_OK;
    }
    *(struct glia_seed_at *)l->state = glia_seed_of(a);
    float p = d->p, scale = 1.0f / (1.0f - p);
    uint64_t seed = a->seed;
    FOR_EACH(a->out, y[i] = glia_dropout_uniform(seed, j) >= p ? x[i] * scale : 0.0f);
    return GLIA_OK;
}

/* dx(N,...) (+)= keep(j) ? dy / (1-p) : 0, with the mask of the last training forward */
static glia_status dropout_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_dropout_attrs *d = l->attrs;
    if (!a->din[0]) return GLIA_OK;
    const float *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    float p = d->p, scale = 1.0f / (1.0f - p);
    uint64_t seed = ((const struct glia_seed_at *)l->state)->seed;  /* the CPU never captures: step_at is NULL */
    int add = a->din_accumulate[0], all = p == 0.0f;
    FOR_EACH(a->dout, {
        float v = dy[i];  /* loaded unconditionally: the select then vectorizes without masked loads */
        float g = all ? v : glia_dropout_uniform(seed, j) >= p ? v * scale : 0.0f;
        dx[i] = add ? dx[i] + g : g;
    });
    return GLIA_OK;
}

static const struct glia_layer_type dropout_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "dropout",
    .doc = "inverted dropout (seeded, counter-based mask); identity in eval",
    .keys = dropout_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs_size = sizeof(struct glia_dropout_attrs),
    .create = dropout_create,
    .infer_shape = dropout_infer,
    .pointwise = dropout_text,
};

static const struct glia_kernel dropout_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "dropout",
    .impl = "cpu",
    .doc = "OpenMP",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_DECODE,
    .state_size = sizeof(struct glia_seed_at),
    .forward = dropout_forward,
    .backward = dropout_backward,
};

static glia_status dropout_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &dropout_type);
    return st ? st : glia_register_kernel(r, &dropout_cpu);
}

GLIA_PLUGIN_DEFINE(dropout, "2.0", "MIT", "dropout (CPU, OpenMP)", dropout_init)
