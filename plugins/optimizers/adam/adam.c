/* plugins/optimizers/adam — optimizer adam (Adam with L2 weight decay added to the gradient, with PyTorch's
 * torch.optim.Adam update rule, amsgrad off, no maximize) and its CPU kernel. Not AdamW: see adamw; not the
 * CUDA kernel: that is in cuda.so; settings and step scalars: glia/types/optimizers.h. */
#include <glia/glia.h>
#include <glia/types/optimizers.h>

static const struct glia_key adam_keys[] = {
    GLIA_KEY("beta1", GLIA_KEY_FLOAT, "0.9", "decay rate of the gradient mean, in [0, 1)", .min = 0, .max = 1),
    GLIA_KEY("beta2", GLIA_KEY_FLOAT, "0.999", "decay rate of the squared gradient mean, in [0, 1)", .min = 0, .max = 1),
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-8", "added to the denominator", .min = 1e-30, .max = 1),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0", "L2 penalty added to the gradient", .min = 0, .max = 1e6),
    GLIA_KEY_END};

static glia_status adam_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    return glia_adam_attrs_read(o->attrs, cfg);
}

/* g' = g + wd w;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;
 * w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)   (torch's order of operations) */
static glia_status adam_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct glia_adam_coef c = glia_adam_coef(o->attrs, s);
    float wd = c.wd;
    float *w = s->w, *m = s->state[0], *v = s->state[1];
    const float *g = s->g, *mask = s->decay_mask;
    int64_t n = (int64_t)s->n;
    /* firstprivate: each thread's own copy of c, which its stores to m and v cannot alias (kept in registers) */
#pragma omp parallel for simd schedule(static) firstprivate(c)
    for (int64_t i = 0; i < n; i++) {
        float d = g[i] + (mask ? mask[i] : 1.0f) * wd * w[i];
        w[i] -= glia_adam_moments(c, d, &m[i], &v[i]);
    }
    return GLIA_OK;
}

static const struct glia_optimizer_type adam_type = {
    .struct_size = sizeof(struct glia_optimizer_type),
    .name = "adam",
    .doc = "Adam with L2 weight decay in the gradient (torch.optim.Adam rule)",
    .keys = adam_keys,
    .n_state = GLIA_ADAM_N_STATE,
    .attrs_size = sizeof(struct glia_adam_attrs),
    .create = adam_create,
};

static const struct glia_optimizer_kernel adam_cpu = {
    .struct_size = sizeof(struct glia_optimizer_kernel),
    .type = "adam",
    .doc = "OpenMP loop over the flat arena",
    .device_type = GLIA_DEVICE_CPU,
    .step = adam_step,
};

static glia_status adam_init(struct glia_registry *r)
{
    glia_status st = glia_register_optimizer_type(r, &adam_type);
    return st ? st : glia_register_optimizer_kernel(r, &adam_cpu);
}

GLIA_PLUGIN_DEFINE(adam, "2.0", "MIT", "Adam optimizer (CPU)", adam_init)
