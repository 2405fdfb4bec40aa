/* plugins/optimizers/adam — Adam with L2 weight decay added to the gradient, with PyTorch's
 * torch.optim.Adam update rule (amsgrad off, no maximize). Not AdamW: see adamw; not fused GPU. */
#include <glia/glia.h>
#include <math.h>
#include <stdlib.h>

struct adam {
    double beta1, beta2;
    float eps, weight_decay;
};

static const struct glia_key adam_keys[] = {
    GLIA_KEY("beta1", GLIA_KEY_FLOAT, "0.9", "decay rate of the gradient mean, in [0, 1)", .min = 0, .max = 1),
    GLIA_KEY("beta2", GLIA_KEY_FLOAT, "0.999", "decay rate of the squared gradient mean, in [0, 1)", .min = 0, .max = 1),
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-8", "added to the denominator", .min = 1e-30, .max = 1),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0", "L2 penalty added to the gradient", .min = 0, .max = 1e6),
    GLIA_KEY_END};

static glia_status adam_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    double b1 = glia_section_float(cfg, "beta1"), b2 = glia_section_float(cfg, "beta2");
    /* the schema bounds are closed; torch.optim.Adam also refuses a beta of 1 */
    if (b1 >= 1) return glia_section_error(cfg, "beta1", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b1);
    if (b2 >= 1) return glia_section_error(cfg, "beta2", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b2);
    struct adam *p = calloc(1, sizeof *p);
    if (!p) return GLIA_ENOMEM;
    p->beta1 = b1;
    p->beta2 = b2;
    p->eps = (float)glia_section_float(cfg, "eps");
    p->weight_decay = (float)glia_section_float(cfg, "weight_decay");
    o->priv = p;
    return GLIA_OK;
}

static void adam_destroy(struct glia_optimizer *o) { free(o->priv); }

/* g' = g + wd w;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;
 * w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)   (torch's order of operations) */
static glia_status adam_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct adam *p = o->priv;
    double t = (double)s->step;
    float b1 = (float)p->beta1, c1 = (float)(1 - p->beta1), b2 = (float)p->beta2,
          c2 = (float)(1 - p->beta2), eps = p->eps, wd = p->weight_decay;
    float step_size = (float)(s->lr / (1 - pow(p->beta1, t)));
    float bc2_sqrt = (float)sqrt(1 - pow(p->beta2, t));
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
    .keys = adam_keys,
    .n_state = 2,
    .device_type = GLIA_DEVICE_CPU,
    .create = adam_create,
    .destroy = adam_destroy,
    .step = adam_step,
};

static glia_status adam_init(struct glia_registry *r) { return glia_register_optimizer(r, &adam_ops); }

GLIA_PLUGIN_DEFINE(adam, "1.0", "MIT", "Adam optimizer (CPU)", adam_init)
