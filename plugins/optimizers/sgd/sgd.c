/* plugins/optimizers/sgd — stochastic gradient descent with momentum, dampening, Nesterov and
 * L2 weight decay, with PyTorch's torch.optim.SGD update rule. Not a fused GPU kernel. */
#include <glia/glia.h>
#include <stdlib.h>

struct sgd {
    float momentum, dampening, weight_decay;
    int nesterov;
};

static const struct glia_key sgd_keys[] = {
    GLIA_KEY("momentum", GLIA_KEY_FLOAT, "0", "momentum factor", .min = 0, .max = 1),
    GLIA_KEY("dampening", GLIA_KEY_FLOAT, "0", "dampening for momentum", .min = 0, .max = 1),
    GLIA_KEY("nesterov", GLIA_KEY_BOOL, "off", "Nesterov momentum (needs momentum > 0, dampening 0)"),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0", "L2 penalty added to the gradient", .min = 0, .max = 1e6),
    GLIA_KEY_END};

static glia_status sgd_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    struct sgd *p = calloc(1, sizeof *p);
    if (!p) return GLIA_ENOMEM;
    p->momentum = (float)glia_section_float(cfg, "momentum");
    p->dampening = (float)glia_section_float(cfg, "dampening");
    p->weight_decay = (float)glia_section_float(cfg, "weight_decay");
    p->nesterov = glia_section_bool(cfg, "nesterov");
    if (p->nesterov && (p->momentum <= 0 || p->dampening != 0)) {
        free(p);
        return glia_section_error(cfg, "nesterov", GLIA_ECONFIG, "Nesterov momentum needs momentum > 0 and dampening = 0");
    }
    o->priv = p;
    return GLIA_OK;
}

static void sgd_destroy(struct glia_optimizer *o) { free(o->priv); }

/* g' = g + wd w;  buf = g' (first step) or mu buf + (1 - damp) g';
 * d = nesterov ? g' + mu buf : buf (or g' without momentum);  w -= lr d */
static glia_status sgd_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct sgd *p = o->priv;
    float lr = (float)s->lr, mu = p->momentum, damp = p->dampening, wd = p->weight_decay;
    float *w = s->w, *buf = s->state[0];
    const float *g = s->g, *mask = s->decay_mask;
    int first = s->step == 1, nesterov = p->nesterov;
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
    .keys = sgd_keys,
    .n_state = 1,
    .device_type = GLIA_DEVICE_CPU,
    .create = sgd_create,
    .destroy = sgd_destroy,
    .step = sgd_step,
};

static glia_status sgd_init(struct glia_registry *r) { return glia_register_optimizer(r, &sgd_ops); }

GLIA_PLUGIN_DEFINE(sgd, "1.0", "MIT", "stochastic gradient descent (CPU)", sgd_init)
