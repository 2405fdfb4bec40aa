/* plugins/optimizers/adamw/adamw_desc.h — what the CPU and CUDA impls of adamw share: the keys,
 * the settings read from them, and the fp32 scalars of one step (bias corrections and decay
 * factor computed in double). Not the update loop: one per device. */
#ifndef GLIA_ADAMW_DESC_H
#define GLIA_ADAMW_DESC_H

#include <glia/glia.h>

#define GLIA__ADAMW_N_STATE 2  /* m (gradient mean), v (squared gradient mean) */

struct glia__adamw {
    double beta1, beta2, weight_decay;
    float eps;
};

extern const struct glia_key glia__adamw_keys[];

/* Reads the keys into o->priv (a struct glia__adamw); refuses a beta of 1. */
glia_status glia__adamw_create(struct glia_optimizer *o, const struct glia_section *cfg);
void glia__adamw_destroy(struct glia_optimizer *o);

/* The scalars of step s: b1, b2 and their complements c1 = 1 - b1, c2 = 1 - b2, the decoupled
 * decay factor keep = 1 - lr wd, step_size = lr / (1 - b1^t) and bc2_sqrt = sqrt(1 - b2^t)
 * (torch's order of operations). */
struct glia__adamw_coef {
    float b1, c1, b2, c2, eps, keep, step_size, bc2_sqrt;
};
struct glia__adamw_coef glia__adamw_coef(const struct glia__adamw *p, const struct glia_opt_step *s);

#endif
