/* plugins/optimizers/adamw — optimizer adamw (Adam with decoupled weight decay, w *= 1 - lr wd before the Adam
 * update, with PyTorch's torch.optim.AdamW update rule, amsgrad off, no maximize) and its CPU kernel. Not L2 in
 * the gradient: that is adam's weight_decay; not the CUDA kernel: that is in cuda.so; settings and step
 * scalars: glia/types/optimizers.h. */
#include <glia/glia.h>
#include <glia/types/optimizers.h>

static const struct glia_key adamw_keys[] = {
    GLIA_KEY("beta1", GLIA_KEY_FLOAT, "0.9", "decay rate of the gradient mean, in [0, 1)", .min = 0, .max = 1),
    GLIA_KEY("beta2", GLIA_KEY_FLOAT, "0.999", "decay rate of the squared gradient mean, in [0, 1)", .min = 0, .max = 1),
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-8", "added to the denominator", .min = 1e-30, .max = 1),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0.01", "decoupled decay: w *= 1 - lr weight_decay", .min = 0, .max = 1e6),
    GLIA_KEY_END};

static glia_status adamw_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    return glia_adam_attrs_read(o->attrs, cfg);
}

/* w *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 * w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)   (torch's order of operations) */
static glia_status adamw_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct glia_adam_coef c = glia_adamw_coef(o->attrs, s);
    float keep = c.keep;
    float *w = s->w, *m = s->state[0], *v = s->state[1];
    const float *g = s->g, *mask = s->decay_mask;
    int64_t n = (int64_t)s->n;
    /* firstprivate: each thread's own copy of c, which its stores to m and v cannot alias (kept in registers) */
#pragma omp parallel for simd schedule(static) firstprivate(c)
    for (int64_t i = 0; i < n; i++) {
        float wi = mask && mask[i] == 0.0f ? w[i] : w[i] * keep;
        w[i] = wi - glia_adam_moments(c, g[i], &m[i], &v[i]);
    }
    return GLIA_OK;
}

static const struct glia_optimizer_type adamw_type = {
    .struct_size = sizeof(struct glia_optimizer_type),
    .name = "adamw",
    .doc = "Adam with decoupled weight decay (torch.optim.AdamW rule)",
    .keys = adamw_keys,
    .n_state = GLIA_ADAM_N_STATE,
    .attrs_size = sizeof(struct glia_adam_attrs),
    .create = adamw_create,
};

static const struct glia_optimizer_kernel adamw_cpu = {
    .struct_size = sizeof(struct glia_optimizer_kernel),
    .type = "adamw",
    .doc = "OpenMP loop over the flat arena",
    .device_type = GLIA_DEVICE_CPU,
    .step = adamw_step,
};

static glia_status adamw_init(struct glia_registry *r)
{
    glia_status st = glia_register_optimizer_type(r, &adamw_type);
    return st ? st : glia_register_optimizer_kernel(r, &adamw_cpu);
}

GLIA_PLUGIN_DEFINE(adamw, "2.0", "MIT", "AdamW optimizer (CPU)", adamw_init)
