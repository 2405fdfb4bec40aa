/* plugins/optimizers/sgd/sgd_desc.c — the keys, create and per-step scalars of sgd, compiled
 * into both the CPU plugin and cuda.so. Not the update loop: each device has its own. */
#include "sgd_desc.h"
#include <stdlib.h>

const struct glia_key glia__sgd_keys[] = {
    GLIA_KEY("momentum", GLIA_KEY_FLOAT, "0", "momentum factor", .min = 0, .max = 1),
    GLIA_KEY("dampening", GLIA_KEY_FLOAT, "0", "dampening for momentum", .min = 0, .max = 1),
    GLIA_KEY("nesterov", GLIA_KEY_BOOL, "off", "Nesterov momentum (needs momentum > 0, dampening 0)"),
    GLIA_KEY("weight_decay", GLIA_KEY_FLOAT, "0", "L2 penalty added to the gradient", .min = 0, .max = 1e6),
    GLIA_KEY_END};

glia_status glia__sgd_create(struct glia_optimizer *o, const struct glia_section *cfg)
{
    struct glia__sgd *p = calloc(1, sizeof *p);
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

void glia__sgd_destroy(struct glia_optimizer *o) { free(o->priv); }

struct glia__sgd_coef glia__sgd_coef(const struct glia__sgd *p, const struct glia_opt_step *s)
{
    return (struct glia__sgd_coef){.lr = (float)s->lr,
                                   .mu = p->momentum,
                                   .damp = p->dampening,
                                   .wd = p->weight_decay,
                                   .first = s->step == 1,
                                   .nesterov = p->nesterov};
}
