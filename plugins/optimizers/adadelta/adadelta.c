/* plugins/optimizers/adadelta — Adadelta with L2 weight decay added to the gradient, with
 * PyTorch's torch.optim.Adadelta update rule (no maximize). Not torch's default lr of 1.0: the
 * learning rate is [train] lr, so set lr = 1 for torch's default; not a fused GPU kernel. */
#include <glia/glia.h>
#include <math.h>
#include <stdlib.h>

struct adadelta {
    double rho;
    float eps, weight_decay;
};

static const struct glia_key adadelta_keys[] = {
    GLIA_KEY("rho", GLIA_KEY_FLOAT, "0.9", "decay rate of the running averages", .min = 0, .max = 1),
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-6", "added inside both square roots", .min = 1e-30, .max = 1),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0", "L2 penalty added to the gradient", .min = 0, .max = 1e6),
    GLIA_KEY_END};

static glia_status adadelta_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    struct adadelta *p = calloc(1, sizeof *p);
    if (!p) return GLIA_ENOMEM;
    p->rho = glia_section_float(cfg, "rho");
    p->eps = (float)glia_section_float(cfg, "eps");
    p->weight_decay = (float)glia_section_float(cfg, "weight_decay");
    o->priv = p;
    return GLIA_OK;
}

static void adadelta_destroy(struct glia_optimizer *o) { free(o->priv); }

/* g' = g + wd w;  v = rho v + (1 - rho) g'^2;  d = sqrt(u + eps) / sqrt(v + eps) g';
 * u = rho u + (1 - rho) d^2;  w -= lr d */
static glia_status adadelta_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct adadelta *p = o->priv;
    float lr = (float)s->lr, rho = (float)p->rho, c = (float)(1 - p->rho);
    float eps = p->eps, wd = p->weight_decay;
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
    .keys = adadelta_keys,
    .n_state = 2,
    .device_type = GLIA_DEVICE_CPU,
    .create = adadelta_create,
    .destroy = adadelta_destroy,
    .step = adadelta_step,
};

static glia_status adadelta_init(struct glia_registry *r) { return glia_register_optimizer(r, &adadelta_ops); }

GLIA_PLUGIN_DEFINE(adadelta, "1.0", "MIT", "Adadelta optimizer (CPU)", adadelta_init)
