/* plugins/optimizers/sgd — optimizer sgd (stochastic gradient descent with momentum, dampening, Nesterov and L2
 * weight decay, with PyTorch's torch.optim.SGD update rule) and its CPU kernel. Not the CUDA kernel: that is
 * in cuda.so; settings and step scalars: glia/types/optimizers.h. */
#include <glia/glia.h>
#include <glia/types/optimizers.h>

static const struct glia_key sgd_keys[] = {
    GLIA_KEY("momentum", GLIA_KEY_FLOAT, "0", "momentum factor", .min = 0, .max = 1),
    GLIA_KEY("dampening", GLIA_KEY_FLOAT, "0", "dampening for momentum", .min = 0, .max = 1),
    GLIA_KEY("nesterov", GLIA_KEY_BOOL, "off", "Nesterov momentum (needs momentum > 0, dampening 0)"),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0", "L2 penalty added to the gradient", .min = 0, .max = 1e6),
    GLIA_KEY_END};

/* Reads the keys; refuses Nesterov without momentum or with dampening. */
static glia_status sgd_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    struct glia_sgd_attrs *p = o->attrs;
    p->momentum = (float)glia_section_float(cfg, "momentum");
    p->dampening = (float)glia_section_float(cfg, "dampening");
    p->weight_decay = (float)glia_section_float(cfg, "weight_decay");
    p->nesterov = glia_section_bool(cfg, "nesterov");
    if (p->nesterov && (p->momentum <= 0 || p->dampening != 0))
        return glia_section_error(cfg, "nesterov", GLIA_ECONFIG, "Nesterov momentum needs momentum > 0 and dampening = 0");
    return GLIA_OK;
}

/* g' = g + wd w;  buf = g' (first step) or mu buf + (1 - damp) g';
 * d = nesterov ? g' + mu buf : buf (or g' without momentum);  w -= lr d */
static glia_status sgd_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    const struct glia_sgd_coef c = glia_sgd_coef(o->attrs, s);
    float lr = c.lr, mu = c.mu, damp = c.damp, wd = c.wd;
    float *w = s->w, *buf = s->state[0];
    const float *g = s->g, *mask = s->decay_mask;
    int first = c.first, nesterov = c.nesterov;
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

static const struct glia_optimizer_type sgd_type = {
    .struct_size = sizeof(struct glia_optimizer_type),
    .name = "sgd",
    .doc = "SGD with momentum, dampening, Nesterov and weight decay (torch.optim.SGD rule)",
    .keys = sgd_keys,
    .n_state = GLIA_SGD_N_STATE,
    .attrs_size = sizeof(struct glia_sgd_attrs),
    .create = sgd_create,
};

static const struct glia_optimizer_kernel sgd_cpu = {
    .struct_size = sizeof(struct glia_optimizer_kernel),
    .type = "sgd",
    .doc = "OpenMP loop over the flat arena",
    .device_type = GLIA_DEVICE_CPU,
    .step = sgd_step,
};

static glia_status sgd_init(struct glia_registry *r)
{
    glia_status st = glia_register_optimizer_type(r, &sgd_type);
    return st ? st : glia_register_optimizer_kernel(r, &sgd_cpu);
}

GLIA_PLUGIN_DEFINE(sgd, "2.0", "MIT", "stochastic gradient descent (CPU)", sgd_init)
