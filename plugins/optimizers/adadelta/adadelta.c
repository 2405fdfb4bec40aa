/* plugins/optimizers/adadelta — Adadelta with L2 weight decay added to the gradient, with
 * PyTorch's torch.optim.Adadelta update rule (no maximize), on the CPU. Not torch's default lr of
 * 1.0: the learning rate is [train] lr, so set lr = 1 for torch's default; not the CUDA step: that
 * is backends/cuda/optim.c; keys and create are shared with it in adadelta_desc.c. */
#include <glia/glia.h>
#include <math.h>
#include "adadelta_desc.h"

/* g' = g + wd w;  v = rho v + (1 - rho) g'^2;  d = sqrt(u + eps) / sqrt(v + eps) g';
 * u = rho u + (1 - rho) d^2;  w -= lr d */
static glia_status adadelta_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct glia__adadelta_coef k = glia__adadelta_coef(o->priv, s);
    float lr = k.lr, rho = k.rho, c = k.c, eps = k.eps, wd = k.wd;
    float *w = s->w, *sq = s->state[0], *acc = s->state[1];
    const float *g = s->g, *mask = s->decay_mask;
    int64_t n = (int64_t)s->n;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] + (mask ? mask[i] : 1.0f) * wd * w[i];
        float vi = rho * sq[i] + c * gi * gi;
        float d = sqrtf(acc[i] + eps) / sqrtf(vi + eps) * gi;
        sq[i] = vi;
        acc[i] = rho * acc[i] + c * d * d;
        w[i] -= lr * d;
    }
    return GLIA_OK;
}

static const struct glia_optimizer_ops adadelta_ops = {
    .struct_size = sizeof(struct glia_optimizer_ops),
    .name = "adadelta",
    .doc = "Adadelta with L2 weight decay in the gradient (torch.optim.Adadelta rule)",
    .keys = glia__adadelta_keys,
    .n_state = GLIA__ADADELTA_N_STATE,
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__adadelta_create,
    .destroy = glia__adadelta_destroy,
    .step = adadelta_step,
};

static glia_status adadelta_init(struct glia_registry *r) { return glia_register_optimizer(r, &adadelta_ops); }

GLIA_PLUGIN_DEFINE(adadelta, "1.0", "MIT", "Adadelta optimizer (CPU)", adadelta_init)
