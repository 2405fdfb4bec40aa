/* plugins/optimizers/adadelta/adadelta_desc.h — what the CPU and CUDA impls of adadelta share:
 * the keys, the settings read from them, and the fp32 scalars of one step. Not the update loop:
 * one per device. */
#ifndef GLIA_ADADELTA_DESC_H
#define GLIA_ADADELTA_DESC_H

#include <glia/glia.h>

#define GLIA__ADADELTA_N_STATE 2  /* square_avg, acc_delta */

struct glia__adadelta {
    double rho;
    float eps, weight_decay;
};

extern const struct glia_key glia__adadelta_keys[];

/* Reads the keys into o->priv (a struct glia__adadelta). */
glia_status glia__adadelta_create(struct glia_optimizer *o, const struct glia_section *cfg);
void glia__adadelta_destroy(struct glia_optimizer *o);

/* The scalars of step s: lr, rho and its complement c = 1 - rho, eps, the L2 decay wd. */
struct glia__adadelta_coef {
    float lr, rho, c, eps, wd;
};
struct glia__adadelta_coef glia__adadelta_coef(const struct glia__adadelta *p, const struct glia_opt_step *s);

#endif
