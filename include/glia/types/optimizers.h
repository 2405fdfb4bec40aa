/* glia/types/optimizers.h — the settings of glia's optimizers sgd, adam, adamw and adadelta (one plugin each),
 * which every kernel of them reads, and the fp32 scalars of one step that all their kernels compute with.
 * Not an update loop: each device's kernel has its own (the CPU one in the optimizer's plugin, the CUDA one in
 * cuda.so). C and C++ (nvcc) alike. */
#ifndef GLIA_TYPES_OPTIMIZERS_H
#define GLIA_TYPES_OPTIMIZERS_H

#include <math.h>
#include <glia/config.h>
#include <glia/optimizer.h>

/* ---- sgd: torch.optim.SGD ---- */

#define GLIA_SGD_N_STATE 1  /* the momentum buffer */

/* o->attrs of sgd. */
struct glia_sgd_attrs {
    float momentum, dampening, weight_decay;  /* keys momentum, dampening, weight_decay */
    int nesterov;                             /* key nesterov (needs momentum > 0, dampening 0) */
};

/* The scalars of a step, in the precision the update computes in:
 * g' = g + wd w;  buf = g' (first step) or mu buf + (1 - damp) g';  d = nesterov ? g' + mu buf : buf (or g'
 * without momentum);  w -= lr d. */
struct glia_sgd_coef {
    float lr, mu, damp, wd;
    int first, nesterov;  /* first: step 1 (the buffer starts as the gradient) */
};

static inline struct glia_sgd_coef glia_sgd_coef(const struct glia_sgd_attrs *p, const struct glia_opt_step *s)
{
    struct glia_sgd_coef c;
    c.lr = (float)s->lr;
    c.mu = p->momentum;
    c.damp = p->dampening;
    c.wd = p->weight_decay;
    c.first = s->step == 1;
    c.nesterov = p->nesterov;
    return c;
}

/* ---- adam (torch.optim.Adam) and adamw (torch.optim.AdamW): amsgrad off, no maximize ---- */

#define GLIA_ADAM_N_STATE 2  /* m (gradient mean), v (squared gradient mean); adamw's too */

/* o->attrs of adam and of adamw: the same keys. adam adds weight_decay w to the gradient (L2); adamw decays
 * the weight itself, w *= 1 - lr weight_decay, before the update. */
struct glia_adam_attrs {
    double beta1, beta2, weight_decay;
    float eps;
};

/* Reads the keys beta1, beta2, eps and weight_decay of adam or adamw into a (its create). The schema's
 * bounds are closed, [0, 1]: a beta of 1 is refused here, as torch refuses it. */
static inline glia_status glia_adam_attrs_read(struct glia_adam_attrs *a, const struct glia_section *cfg)
{
    double b1 = glia_section_float(cfg, "beta1"), b2 = glia_section_float(cfg, "beta2");
    if (b1 >= 1) return glia_section_error(cfg, "beta1", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b1);
    if (b2 >= 1) return glia_section_error(cfg, "beta2", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b2);
    a->beta1 = b1;
    a->beta2 = b2;
    a->eps = (float)glia_section_float(cfg, "eps");
    a->weight_decay = glia_section_float(cfg, "weight_decay");
    return GLIA_OK;
}

/* The scalars of an adam or adamw step, bias corrections in double (torch's order of operations):
 * w *= keep;  g' = g + wd w;  m = b1 m + c1 g';  v = b2 v + c2 g'^2;
 * w -= step_size * (m / (sqrt(v) / bc2_sqrt + eps)),
 * c1 = 1 - b1, c2 = 1 - b2, step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t). adam's keep is 1 (its
 * kernels skip that product), adamw's wd is 0 (its kernels skip that sum). */
struct glia_adam_coef {
    float b1, c1, b2, c2, eps, wd, keep, step_size, bc2_sqrt;
};

static inline struct glia_adam_coef glia_adam_coef(const struct glia_adam_attrs *p, const struct glia_opt_step *s)
{
    double t = (double)s->step;
    struct glia_adam_coef c;
    c.b1 = (float)p->beta1;
    c.c1 = (float)(1 - p->beta1);
    c.b2 = (float)p->beta2;
    c.c2 = (float)(1 - p->beta2);
    c.eps = p->eps;
    c.wd = (float)p->weight_decay;
    c.keep = 1.0f;
    c.step_size = (float)(s->lr / (1 - pow(p->beta1, t)));
    c.bc2_sqrt = (float)sqrt(1 - pow(p->beta2, t));
    return c;
}

static inline struct glia_adam_coef glia_adamw_coef(const struct glia_adam_attrs *p, const struct glia_opt_step *s)
{
    struct glia_adam_coef c = glia_adam_coef(p, s);
    c.wd = 0.0f;
    c.keep = (float)(1 - s->lr * p->weight_decay);  /* torch: param.mul_(1 - lr * wd) */
    return c;
}

/* The moments of element i of an adam or adamw step, m = b1 m + c1 g and v = b2 v + c2 g^2, stored, and the
 * change of its weight, step_size * (m / (sqrt(v) / bc2_sqrt + eps)), in float, as the CPU kernels compute
 * them (g: the gradient, adam's with wd w added). */
static inline float glia_adam_moments(struct glia_adam_coef k, float g, float *m, float *v)
{
    float mi = k.b1 * *m + k.c1 * g;
    float vi = k.b2 * *v + k.c2 * g * g;
    *m = mi;
    *v = vi;
    return k.step_size * (mi / (sqrtf(vi) / k.bc2_sqrt + k.eps));
}

/* ---- adadelta: torch.optim.Adadelta (no maximize) ---- */

#define GLIA_ADADELTA_N_STATE 2  /* square_avg, acc_delta */

/* o->attrs of adadelta. */
struct glia_adadelta_attrs {
    double rho;
    float eps, weight_decay;
};

/* The scalars of a step: g' = g + wd w;  v = rho v + c g'^2;  d = sqrt(u + eps) / sqrt(v + eps) g';
 * u = rho u + c d^2;  w -= lr d, with c = 1 - rho. */
struct glia_adadelta_coef {
    float lr, rho, c, eps, wd;
};

static inline struct glia_adadelta_coef glia_adadelta_coef(const struct glia_adadelta_attrs *p,
                                                           const struct glia_opt_step *s)
{
    struct glia_adadelta_coef c;
    c.lr = (float)s->lr;
    c.rho = (float)p->rho;
    c.c = (float)(1 - p->rho);
    c.eps = p->eps;
    c.wd = p->weight_decay;
    return c;
}

#endif
