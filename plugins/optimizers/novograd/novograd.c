/* plugins/optimizers/novograd — optimizer novograd (NVIDIA Apex's FusedNovoGrad rule: a moving norm of each tensor's
 * gradient as the second moment, one float per tensor, and decoupled weight decay in the update) and its CPU kernel.
 * Not the CUDA kernel: that is in cuda.so; settings, step scalars and the order of the norms' sums:
 * glia/types/optimizers.h. */
#include <stdlib.h>
#include <glia/glia.h>
#include <glia/types/optimizers.h>

static const struct glia_key novograd_keys[] = {
    GLIA_KEY("beta1", GLIA_KEY_FLOAT, "0.9", "decay rate of the gradient mean, in [0, 1)", .min = 0, .max = 1),
    GLIA_KEY("beta2", GLIA_KEY_FLOAT, "0.999", "decay rate of each tensor's squared gradient norm, in [0, 1)", .min = 0,
             .max = 1),
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-8", "added to the denominator", .min = 0, .max = 1),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0", "decoupled decay: wd w added to the update", .min = 0, .max = 1e6),
    GLIA_KEY("grad_averaging", GLIA_KEY_BOOL, "on", "scale the gradient by 1 - beta1 in the mean"),
    GLIA_KEY("bias_correction", GLIA_KEY_BOOL, "on", "divide the mean by 1 - beta1^t and the norm by sqrt(1 - beta2^t)"),
    GLIA_KEY_END};

static glia_status novograd_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    struct glia_novograd_attrs *p = o->attrs;
    double b1 = glia_section_float(cfg, "beta1"), b2 = glia_section_float(cfg, "beta2");
    if (b1 >= 1) return glia_section_error(cfg, "beta1", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b1);
    if (b2 >= 1) return glia_section_error(cfg, "beta2", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b2);
    p->beta1 = (float)b1;
    p->beta2 = (float)b2;
    p->eps = (float)glia_section_float(cfg, "eps");
    p->weight_decay = (float)glia_section_float(cfg, "weight_decay");
    p->grad_averaging = glia_section_bool(cfg, "grad_averaging");
    p->bias_correction = glia_section_bool(cfg, "bias_correction");
    return GLIA_OK;
}

/* Per tensor: n from its gradient's norm (kept at state[1][its offset]), then m and w (glia_novograd_coef). */
static glia_status novograd_step(struct glia_optimizer *o, const struct glia_opt_step *s)
{
    if (!s->seg && s->n_seg == 0 && s->n > 0)
        return glia_error(o->ctx, GLIA_EINVAL, "optimizer 'novograd': the step has no tensor segments "
                          "(glia_opt_step.seg): its second moment is per tensor");
    const struct glia_novograd_coef k = glia_novograd_coef(o->attrs, s);
    float *part = malloc(sizeof(float) * (size_t)glia_norm_slots((int64_t)s->n, s->n_seg));
    float *gsq = malloc(sizeof(float) * (size_t)(s->n_seg + 1));
    if (!part || !gsq) {
        free(part), free(gsq);
        return glia_error(o->ctx, GLIA_ENOMEM, "optimizer 'novograd': out of memory for its norms");
    }
    glia_norm_sums(s, s->g, part, gsq);
    float *w = s->w, *m = s->state[0], *nrm = s->state[1];
    const float *g = s->g;
    float b1 = k.b1, b3 = k.b3, bc1 = k.bc1, lr = k.lr;
    for (int t = 0; t < s->n_seg; t++) {
        int64_t off = s->seg[2 * t], end = off + s->seg[2 * t + 1];
        if (end == off) continue;  /* no element to keep its n in */
        float n = nrm[off] = glia_novograd_norm(k, nrm[off], gsq[t]);
        float denom = n / k.bc2 + k.eps;
        float wd = glia_seg_decays(s, t) ? k.wd : 0.0f;
#pragma omp parallel for simd schedule(static)
        for (int64_t i = off; i < end; i++) {
            float mi = b1 * m[i] + b3 * g[i];
            m[i] = mi;
            float update = mi / bc1 / denom + wd * w[i];
            w[i] = w[i] - lr * update;
        }
    }
    free(part), free(gsq);
    return GLIA_OK;
}

static const struct glia_optimizer_type novograd_type = {
    .struct_size = sizeof(struct glia_optimizer_type),
    .name = "novograd",
    .doc = "NovoGrad: per-tensor gradient-norm second moment (NVIDIA Apex FusedNovoGrad rule)",
    .keys = novograd_keys,
    .n_state = GLIA_NOVOGRAD_N_STATE,
    .attrs_size = sizeof(struct glia_novograd_attrs),
    .create = novograd_create,
};

static const struct glia_optimizer_kernel novograd_cpu = {
    .struct_size = sizeof(struct glia_optimizer_kernel),
    .type = "novograd",
    .doc = "OpenMP loops over the tensors: norms, then the update",
    .device_type = GLIA_DEVICE_CPU,
    .step = novograd_step,
    .flags = GLIA_OPT_KERNEL_SEGMENTS,
};

static glia_status novograd_init(struct glia_registry *r)
{
    glia_status st = glia_register_optimizer_type(r, &novograd_type);
    return st ? st : glia_register_optimizer_kernel(r, &novograd_cpu);
}

GLIA_PLUGIN_DEFINE(novograd, "2.0", "MIT", "NovoGrad optimizer (CPU)", novograd_init)
