/* plugins/optimizers/adadelta/adadelta_desc.c — the keys, create and per-step scalars of
 * adadelta, compiled into both the CPU plugin and cuda.so. Not the update loop: each device has
 * its own. */
#include "adadelta_desc.h"
#include <stdlib.h>

const struct glia_key glia__adadelta_keys[] = {
    GLIA_KEY("rho", GLIA_KEY_FLOAT, "0.9", "decay rate of the running averages", .min = 0, .max = 1),
    GLIA_KEY("eps", GLIA_KEY_FLOAT, "1e-6", "added inside both square roots", .min = 1e-30, .max = 1),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0", "L2 penalty added to the gradient", .min = 0, .max = 1e6),
    GLIA_KEY_END};

glia_status glia__adadelta_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    struct glia__adadelta *p = calloc(1, sizeof *p);
    if (!p) return GLIA_ENOMEM;
    p->rho = glia_section_float(cfg, "rho");
    p->eps = (float)glia_section_float(cfg, "eps");
    p->weight_decay = (float)glia_section_float(cfg, "weight_decay");
    o->priv = p;
    return GLIA_OK;
}

void glia__adadelta_destroy(struct glia_optimizer *o) { free(o->priv); }

struct glia__adadelta_coef glia__adadelta_coef(const struct glia__adadelta *p, const struct glia_opt_step *s)
{
    return (struct glia__adadelta_coef){.lr = (float)s->lr,
                                        .rho = (float)p->rho,
                                        .c = (float)(1 - p->rho),
                                        .eps = p->eps,
                                        .wd = p->weight_decay};
}
