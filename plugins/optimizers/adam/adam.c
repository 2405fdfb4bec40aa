/* plugins/optimizers/adam — Adam with L2 weight decay added to the gradient, with PyTorch's
 * torch.optim.Adam update rule (amsgrad off, no maximize), on the CPU. Not AdamW: see adamw; not
 * the CUDA step: that is backends/cuda/optim.c; keys and create are shared with it in adam_desc.c. */
#include <glia/glia.h>
#include <math.h>
#include "adam_desc.h"

/* g' = g + wd w;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;
 * w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)   (torch's order of operations) */
static glia_status adam_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct glia__adam_coef c = glia__adam_coef(o->priv, s);
    float b1 = c.b1, c1 = c.c1, b2 = c.b2, c2 = c.c2, eps = c.eps, wd = c.wd;
    float step_size = c.step_size, bc2_sqrt = c.bc2_sqrt;
    float *w = s->w, *m = s->state[0], *v = s->state[1];
    const float *g = s->g, *mask = s->decay_mask;
    int64_t n = (int64_t)s->n;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float d = g[i] + (mask ? mask[i] : 1.0f) * wd * w[i];
        float mi = b1 * m[i] + c1 * d;
        float vi = b2 * v[i] + c2 * d * d;
        m[i] = mi;
        v[i] = vi;
        w[i] -= step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    }
    return GLIA_OK;
}

static const struct glia_optimizer_ops adam_ops = {
    .struct_size = sizeof(struct glia_optimizer_ops),
    .name = "adam",
    .doc = "Adam with L2 weight decay in the gradient (torch.optim.Adam rule)",
    .keys = glia__adam_keys,
    .n_state = GLIA__ADAM_N_STATE,
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__adam_create,
    .destroy = glia__adam_destroy,
    .step = adam_step,
};

static glia_status adam_init(struct glia_registry *r) { return glia_register_optimizer(r, &adam_ops); }

GLIA_PLUGIN_DEFINE(adam, "1.0", "MIT", "Adam optimizer (CPU)", adam_init)
