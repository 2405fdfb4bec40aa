/* plugins/optimizers/adamw/adamw_desc.c — the keys, create and per-step scalars of adamw,
 * compiled into both the CPU plugin and cuda.so. Not the update loop: each device has its own. */
#include "adamw_desc.h"
#include <math.h>
#include <stdlib.h>

const struct glia_key glia__adamw_keys[] = {
    GLIA_KEY("beta1", GLIA_KEY_FLOAT, "0.9", "decay rate of the gradient mean, in [0, 1)", .min = 0, .max = 1),
    GLIA_KEY("beta2", GLIA_KEY_FLOAT, "0.999", "decay rate of the squared gradient mean, in [0, 1)", .min = 0, .max = 1),
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-8", "added to the denominator", .min = 1e-30, .max = 1),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0.01", "decoupled decay: w *= 1 - lr weight_decay", .min = 0, .max = 1e6),
    GLIA_KEY_END};

glia_status glia__adamw_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    double b1 = glia_section_float(cfg, "beta1"), b2 = glia_section_float(cfg, "beta2");
    /* the schema bounds are closed; torch.optim.AdamW also refuses a beta of 1 */
    if (b1 >= 1) return glia_section_error(cfg, "beta1", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b1);
    if (b2 >= 1) return glia_section_error(cfg, "beta2", GLIA_ECONFIG, "%.15g is out of range [0, 1)", b2);
    struct glia__adamw *p = calloc(1, sizeof *p);
    if (!p) return GLIA_ENOMEM;
    p->beta1 = b1;
    p->beta2 = b2;
    p->eps = (float)glia_section_float(cfg, "eps");
    p->weight_decay = glia_section_float(cfg, "weight_decay");
    o->priv = p;
    return GLIA_OK;
}

void glia__adamw_destroy(struct glia_optimizer *o) { free(o->priv); }

struct glia__adamw_coef glia__adamw_coef(const struct glia__adamw *p, const struct glia_opt_step *s)
{
    double t = (double)s->step;
    return (struct glia__adamw_coef){.b1 = (float)p->beta1,
                                     .c1 = (float)(1 - p->beta1),
                                     .b2 = (float)p->beta2,
                                     .c2 = (float)(1 - p->beta2),
                                     .eps = p->eps,
                                     .keep = (float)(1 - s->lr * p->weight_decay), /* torch: param.mul_(1 - lr * wd) */
                                     .step_size = (float)(s->lr / (1 - pow(p->beta1, t))),
                                     .bc2_sqrt = (float)sqrt(1 - pow(p->beta2, t))};
}
