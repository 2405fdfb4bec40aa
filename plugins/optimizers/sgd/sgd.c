/* plugins/optimizers/sgd — stochastic gradient descent with momentum, dampening, Nesterov and
 * L2 weight decay, with PyTorch's torch.optim.SGD update rule, on the CPU. Not the CUDA step:
 * that is backends/cuda/optim.c; keys and create are shared with it in sgd_desc.c. */
#include <glia/glia.h>
#include "sgd_desc.h"

/* g' = g + wd w;  buf = g' (first step) or mu buf + (1 - damp) g';
 * d = nesterov ? g' + mu buf : buf (or g' without momentum);  w -= lr d */
static glia_status sgd_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct glia__sgd_coef c = glia__sgd_coef(o->priv, s);
    float lr = c.lr, mu = c.mu, damp = c.damp, wd = c.wd;
    float *w = s->w, *buf = s->state[0];
    const float *g = s->g, *mask = s->decay_mask;
    int first = c.first, nesterov = c.nesterov;
    int64_t n = (int64_t)s->n;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float d = g[i] + (mask ? mask[i] : 1.0f) * wd * w[i];
        if (mu != 0.0f) {
            float b = first ? d : mu * buf[i] + (1.0f - damp) * d;
            buf[i] = b;
            d = nesterov ? d + mu * b : b;
        }
        w[i] -= lr * d;
    }
    return GLIA_OK;
}

static const struct glia_optimizer_ops sgd_ops = {
    .struct_size = sizeof(struct glia_optimizer_ops),
    .name = "sgd",
    .doc = "SGD with momentum, dampening, Nesterov and weight decay (torch.optim.SGD rule)",
    .keys = glia__sgd_keys,
    .n_state = GLIA__SGD_N_STATE,
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__sgd_create,
    .destroy = glia__sgd_destroy,
    .step = sgd_step,
};

static glia_status sgd_init(struct glia_registry *r) { return glia_register_optimizer(r, &sgd_ops); }

GLIA_PLUGIN_DEFINE(sgd, "1.0", "MIT", "stochastic gradient descent (CPU)", sgd_init)
