/* plugins/optimizers/adadelta — optimizer adadelta (Adadelta with L2 weight decay added to the gradient, with
 * PyTorch's torch.optim.Adadelta update rule, no maximize) and its CPU kernel. Not torch's default lr of 1.0:
 * the learning rate is [train] lr, so set lr = 1 for torch's default; not the CUDA kernel: that is in cuda.so;
 * settings and step scalars: glia/types/optimizers.h. */
#include <glia/glia.h>
#include <glia/types/optimizers.h>
#include <math.h>

static const struct glia_key adadelta_keys[] = {
    GLIA_KEY("rho", GLIA_KEY_FLOAT, "0.9", "decay rate of the running averages", .min = 0, .max = 1),
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-6", "added inside both square roots", .min = 1e-30, .max = 1),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0", "L2 penalty added to the gradient", .min = 0, .max = 1e6),
    GLIA_KEY_END};

static glia_status adadelta_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    struct glia_adadelta_attrs *p = o->attrs;
    p->rho = glia_section_float(cfg, "rho");
    p->eps = (float)glia_section_float(cfg, "eps");
    p->weight_decay = (float)glia_section_float(cfg, "weight_decay");
    return GLIA_OK;
}

/* g' = g + wd w;  v = rho v + (1 - rho) g'^2;  d = sqrt(u + eps) / sqrt(v + eps) g';
 * u = rho u + (1 - rho) d^2;  w -= lr d */
static glia_status adadelta_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct glia_adadelta_coef k = glia_adadelta_coef(o->attrs, s);
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

static const struct glia_optimizer_type adadelta_type = {
    .struct_size = sizeof(struct glia_optimizer_type),
    .name = "adadelta",
    .doc = "Adadelta with L2 weight decay in the gradient (torch.optim.Adadelta rule)",
    .keys = adadelta_keys,
    .n_state = GLIA_ADADELTA_N_STATE,
    .attrs_size = sizeof(struct glia_adadelta_attrs),
    .create = adadelta_create,
};

static const struct glia_optimizer_kernel adadelta_cpu = {
    .struct_size = sizeof(struct glia_optimizer_kernel),
    .type = "adadelta",
    .doc = "OpenMP loop over the flat arena",
    .device_type = GLIA_DEVICE_CPU,
    .step = adadelta_step,
};

static glia_status adadelta_init(struct glia_registry *r)
{
    glia_status st = glia_register_optimizer_type(r, &adadelta_type);
    return st ? st : glia_register_optimizer_kernel(r, &adadelta_cpu);
}

GLIA_PLUGIN_DEFINE(adadelta, "2.0", "MIT", "Adadelta optimizer (CPU)", adadelta_init)
