/* plugins/layers/dropout — inverted dropout on the CPU: in training each element is kept with
 * probability 1-p and scaled by 1/(1-p); in eval it is the identity. Not spatial dropout.
 * The mask is counter-based (a hash of the step seed and the element's logical NCHW index), so
 * backward recomputes it instead of storing it, and any device and memory format (channels_last
 * tensors are walked in NHWC order) draws the same mask. */
#include <glia/glia.h>
#include <string.h>
#include "dropout_desc.h"

/* Calls body(i, j) for every element: i its offset in memory, j its logical (NCHW row-major)
 * index, the mask's counter. Channels_last (N,H,W,C) memory is walked in memory order. */
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
    struct glia__dropout *d = l->priv;
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    if (!a->train || d->p == 0.0f) {
        memcpy(y, x, glia_tensor_nbytes(a->out));
        return GLIA_OK;
    }
    d->seed = glia__seed_of(a);
    float p = d->p, scale = 1.0f / (1.0f - p);
    uint64_t seed = a->seed;
    FOR_EACH(a->out, y[i] = glia__dropout_uniform(seed, j) >= p ? x[i] * scale : 0.0f);
    return GLIA_OK;
}

/* dx(N,...) (+)= keep(j) ? dy / (1-p) : 0, with the mask of the last training forward */
static glia_status dropout_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia__dropout *d = l->priv;
    if (!a->din[0]) return GLIA_OK;
    const float *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    float p = d->p, scale = 1.0f / (1.0f - p);
    uint64_t seed = d->seed.seed;  /* the CPU never captures: step_at is NULL */
    int add = a->din_accumulate[0], all = p == 0.0f;
    FOR_EACH(a->dout, {
        float v = dy[i];  /* loaded unconditionally: the select then vectorizes without masked loads */
        float g = all ? v : glia__dropout_uniform(seed, j) >= p ? v * scale : 0.0f;
        dx[i] = add ? dx[i] + g : g;
    });
    return GLIA_OK;
}

static const struct glia_layer_ops dropout_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "dropout",
    .impl = "cpu",
    .doc = GLIA__DROPOUT_DOC,
    .keys = glia__dropout_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_INPUT | GLIA_LAYER_BWD_NO_OUTPUT,
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__dropout_create,
    .destroy = glia__dropout_destroy,
    .infer_shape = glia__dropout_infer,
    .forward = dropout_forward,
    .backward = dropout_backward,
};

static glia_status dropout_init(struct glia_registry *r) { return glia_register_layer(r, &dropout_ops); }

GLIA_PLUGIN_DEFINE(dropout, "1.0", "MIT", "dropout (CPU, OpenMP)", dropout_init)
