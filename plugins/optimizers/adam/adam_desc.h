/* plugins/optimizers/adam/adam_desc.h — what the CPU and CUDA impls of adam share: the keys, the
 * settings read from them, and the fp32 scalars of one step (bias corrections computed in double).
 * Not the update loop: one per device. */
#ifndef GLIA_ADAM_DESC_H
#define GLIA_ADAM_DESC_H

#include <glia/glia.h>

#define GLIA__ADAM_N_STATE 2  /* m (gradient mean), v (squared gradient mean) */

struct glia__adam {
    double beta1, beta2;
    float eps, weight_decay;
};

extern const struct glia_key glia__adam_keys[];

/* Reads the keys into o->priv (a struct glia__adam); refuses a beta of 1. */
glia_status glia__adam_create(struct glia_optimizer *o, const struct glia_section *cfg);
void glia__adam_destroy(struct glia_optimizer *o);

/* The scalars of step s: b1, b2 and their complements c1 = 1 - b1, c2 = 1 - b2, the L2 decay wd,
 * step_size = lr / (1 - b1^t) and bc2_sqrt = sqrt(1 - b2^t) (torch's order of operations). */
struct glia__adam_coef {
    float b1, c1, b2, c2, eps, wd, step_size, bc2_sqrt;
};
struct glia__adam_coef glia__adam_coef(const struct glia__adam *p, const struct glia_opt_step *s);

#endif
