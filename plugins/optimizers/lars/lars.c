/* plugins/optimizers/lars — optimizer lars (layer-wise adaptive rate scaling, NVIDIA Apex's LARC wrapping
 * torch.optim.SGD: each tensor's gradient, its weight decay folded in, scaled by a trust ratio of its norms, then
 * SGD with momentum) and its CPU kernel. Not the CUDA kernel: that is in cuda.so; settings, step scalars and the
 * order of the norms' sums: glia/types/optimizers.h. */
#include <stdlib.h>
#include <glia/glia.h>
#include <glia/types/optimizers.h>

static const struct glia_key lars_keys[] = {
    GLIA_KEY("momentum", GLIA_KEY_FLOAT, "0.9", "momentum factor", .min = 0, .max = 1),
    GLIA_KEY("dampening", GLIA_KEY_FLOAT, "0", "dampening for momentum", .min = 0, .max = 1),
    GLIA_KEY("nesterov", GLIA_KEY_BOOL, "off", "Nesterov momentum (needs momentum > 0, dampening 0)"),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0", "L2 penalty folded into the gradient before the trust ratio scales it",
             .min = 0, .max = 1e6),
    GLIA_KEY("trust_coefficient", GLIA_KEY_FLOAT, "0.02", "the trust ratio's coefficient", .min = 1e-30, .max = 1e6),
    GLIA_KEY("clip", GLIA_KEY_BOOL, "on", "clip the trust ratio so that the step never exceeds lr's"),
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-8", "added to the trust ratio's denominator", .min = 0, .max = 1),
    GLIA_KEY_END};

/* Reads the keys; refuses Nesterov without momentum or with dampening (as sgd). */
static glia_status lars_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    struct glia_lars_attrs *p = o->attrs;
    p->sgd.momentum = (float)glia_section_float(cfg, "momentum");
    p->sgd.dampening = (float)glia_section_float(cfg, "dampening");
    p->sgd.weight_decay = (float)glia_section_float(cfg, "weight_decay");
    p->sgd.nesterov = glia_section_bool(cfg, "nesterov");
    p->trust_coefficient = (float)glia_section_float(cfg, "trust_coefficient");
    p->eps = (float)glia_section_float(cfg, "eps");
    p->clip = glia_section_bool(cfg, "clip");
    if (p->sgd.nesterov && (p->sgd.momentum <= 0 || p->sgd.dampening != 0))
        return glia_section_error(cfg, "nesterov", GLIA_ECONFIG, "Nesterov momentum needs momentum > 0 and dampening = 0");
    return GLIA_OK;
}

/* |w| and |g| per tensor, its factor (glia_lars_factor), then sgd's update of g' (glia_lars_coef). */
static glia_status lars_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    if (!s->seg && s->n_seg == 0 && s->n > 0)
        return glia_error(o->ctx, GLIA_EINVAL, "optimizer 'lars': the step has no tensor segments (glia_opt_step.seg): "
                          "its trust ratio is per tensor");
    const struct glia_lars_coef k = glia_lars_coef(o->attrs, s);
    const int nt = s->n_seg;
    float *part = malloc(sizeof(float) * (size_t)glia_norm_slots((int64_t)s->n, nt));
    float *sw = malloc(sizeof(float) * 2 * (size_t)(nt + 1)), *sg = sw ? sw + nt : NULL;
    if (!part || !sw) {
        free(part), free(sw);
        return glia_error(o->ctx, GLIA_ENOMEM, "optimizer 'lars': out of memory for its norms");
    }
    glia_norm_sums(s, s->w, part, sw);
    glia_norm_sums(s, s->g, part, sg);
    float mu = k.sgd.mu, damp = k.sgd.damp, lr = k.sgd.lr, *w = s->w, *buf = s->state[0];
    int first = k.sgd.first, nesterov = k.sgd.nesterov;
    for (int t = 0; t < nt; t++) {
        int64_t off = s->seg[2 * t], end = off + s->seg[2 * t + 1];
        float a = glia_lars_factor(k, glia_seg_decays(s, t), sqrtf(sw[t]), sqrtf(sg[t]));
        const float *g = s->g;
#pragma omp parallel for simd schedule(static)
        for (int64_t i = off; i < end; i++) {
            float d = glia_lars_grad(k, a, g[i], w[i]);
            if (mu != 0.0f) {
                float b = first ? d : mu * buf[i] + (1.0f - damp) * d;
                buf[i] = b;
                d = nesterov ? d + mu * b : b;
            }
            w[i] = w[i] - lr * d;
        }
    }
    free(part), free(sw);
    return GLIA_OK;
}

static const struct glia_optimizer_type lars_type = {
    .struct_size = sizeof(struct glia_optimizer_type),
    .name = "lars",
    .doc = "LARS: SGD with momentum on per-tensor trust-ratio scaled gradients (NVIDIA Apex LARC rule)",
    .keys = lars_keys,
    .n_state = GLIA_LARS_N_STATE,
    .attrs_size = sizeof(struct glia_lars_attrs),
    .create = lars_create,
};

static const struct glia_optimizer_kernel lars_cpu = {
    .struct_size = sizeof(struct glia_optimizer_kernel),
    .type = "lars",
    .doc = "OpenMP loops over the tensors: norms, then the update",
    .device_type = GLIA_DEVICE_CPU,
    .step = lars_step,
    .flags = GLIA_OPT_KERNEL_SEGMENTS,
};

static glia_status lars_init(struct glia_registry *r)
{
    glia_status st = glia_register_optimizer_type(r, &lars_type);
    return st ? st : glia_register_optimizer_kernel(r, &lars_cpu);
}

GLIA_PLUGIN_DEFINE(lars, "2.0", "MIT", "LARS optimizer (CPU)", lars_init)
