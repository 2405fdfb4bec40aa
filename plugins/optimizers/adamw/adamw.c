/* plugins/optimizers/adamw — Adam with decoupled weight decay (w *= 1 - lr wd before the Adam
 * update), with PyTorch's torch.optim.AdamW update rule (amsgrad off, no maximize), on the CPU.
 * Not L2 in the gradient: that is adam's weight_decay; not the CUDA step: that is
 * backends/cuda/optim.c; keys and create are shared with it in adamw_desc.c. */
#include <glia/glia.h>
#include <math.h>
#include "adamw_desc.h"

/* w *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 * w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)   (torch's order of operations) */
static glia_status adamw_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct glia__adamw_coef c = glia__adamw_coef(o->priv, s);
    float b1 = c.b1, c1 = c.c1, b2 = c.b2, c2 = c.c2, eps = c.eps, keep = c.keep;
    float step_size = c.step_size, bc2_sqrt = c.bc2_sqrt;
    float *w = s->w, *m = s->state[0], *v = s->state[1];
    const float *g = s->g, *mask = s->decay_mask;
    int64_t n = (int64_t)s->n;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        float wi = mask && mask[i] == 0.0f ? w[i] : w[i] * keep;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        w[i] = wi - step_size * (mi / (sqrtf(vi) / bc2_sqrt + eps));
    }
    return GLIA_OK;
}

static const struct glia_optimizer_ops adamw_ops = {
    .struct_size = sizeof(struct glia_optimizer_ops),
    .name = "adamw",
    .doc = "Adam with decoupled weight decay (torch.optim.AdamW rule)",
    .keys = glia__adamw_keys,
    .n_state = GLIA__ADAMW_N_STATE,
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__adamw_create,
    .destroy = glia__adamw_destroy,
    .step = adamw_step,
};

static glia_status adamw_init(struct glia_registry *r) { return glia_register_optimizer(r, &adamw_ops); }

GLIA_PLUGIN_DEFINE(adamw, "1.0", "MIT", "AdamW optimizer (CPU)", adamw_init)
