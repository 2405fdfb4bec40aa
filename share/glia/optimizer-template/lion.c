/* lion.c — an out-of-tree glia optimizer plugin: Lion (Chen et al. 2023, "Symbolic Discovery of
 * Optimization Algorithms"), CPU. Not part of glia itself: a template to copy, built against the
 * installed SDK. */
#include <glia/glia.h>

/* The keys of the [optimizer] section when [train] optimizer = lion; glia validates them (type,
 * range, unknown keys) before create runs. */
static const struct glia_key lion_keys[] = {
    GLIA_KEY("beta1", GLIA_KEY_FLOAT, "0.9", "weight of the momentum in the update's sign", .min = 0, .max = 1),
    GLIA_KEY("beta2", GLIA_KEY_FLOAT, "0.99", "decay of the momentum", .min = 0, .max = 1),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0", "decoupled weight decay: w -= lr * weight_decay * w", .min = 0,
             .max = 100),
    GLIA_KEY_END};

/* The optimizer's settings: o->attrs, attrs_size zeroed bytes that glia allocates before create and frees
 * itself. create fills them; the kernels (one per device) only read them. */
struct lion_attrs {
    float beta1, beta2, weight_decay;
};

static glia_status lion_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    struct lion_attrs *p = o->attrs;
    p->beta1 = (float)glia_section_float(cfg, "beta1");
    p->beta2 = (float)glia_section_float(cfg, "beta2");
    p->weight_decay = (float)glia_section_float(cfg, "weight_decay");
    return GLIA_OK;
}

/* c = beta1 m + (1 - beta1) g;  w -= lr (sign(c) + weight_decay w);  m = beta2 m + (1 - beta2) g.
 * state[0] is m (zero before the first step). decay_mask, when given, says which elements decay
 * (a layer with weight_decay = off has 0s). The core computes lr (schedule, warm-up) each step. */
static glia_status lion_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct lion_attrs *p = o->attrs;
    float lr = (float)s->lr, b1 = p->beta1, b2 = p->beta2, wd = p->weight_decay;
    float *w = s->w, *m = s->state[0];
    const float *g = s->g, *mask = s->decay_mask;
    for (size_t i = 0; i < s->n; i++) {
        float c = b1 * m[i] + (1.0f - b1) * g[i];
        float sign = c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c; /* 0 stays 0; NaN stays NaN, not hidden */
        float decay = mask ? mask[i] * wd : wd;
        w[i] -= lr * (sign + decay * w[i]);
        m[i] = b2 * m[i] + (1.0f - b2) * g[i];
    }
    return GLIA_OK;
}

/* The optimizer: its keys, state and settings. */
static const struct glia_optimizer_type lion_type = {
    .struct_size = sizeof(struct glia_optimizer_type),
    .name = "lion", /* [train] optimizer = lion */
    .doc = "Lion: the sign of interpolated momentum, decoupled weight decay",
    .keys = lion_keys,
    .n_state = 1, /* m: one float per parameter element, zeroed by the core */
    .attrs_size = sizeof(struct lion_attrs),
    .create = lion_create,
};

/* Its update on the CPU (one kernel per optimizer and device type); a kernel for another device may come from another
 * plugin. */
static const struct glia_optimizer_kernel lion_cpu = {
    .struct_size = sizeof(struct glia_optimizer_kernel),
    .type = "lion",
    .device_type = GLIA_DEVICE_CPU,
    .step = lion_step,
};

static glia_status lion_init(struct glia_registry *r)
{
    glia_status st = glia_register_optimizer_type(r, &lion_type);
    return st ? st : glia_register_optimizer_kernel(r, &lion_cpu);
}

GLIA_PLUGIN_DEFINE(lion, "2.0", "MIT", "Lion optimizer (CPU)", lion_init)
