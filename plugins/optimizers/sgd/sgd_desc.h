/* plugins/optimizers/sgd/sgd_desc.h — what the CPU and CUDA impls of sgd share: the keys, the
 * settings read from them, and the fp32 scalars of one step. Not the update loop: one per device. */
#ifndef GLIA_SGD_DESC_H
#define GLIA_SGD_DESC_H

#include <glia/glia.h>

#define GLIA__SGD_N_STATE 1  /* the momentum buffer */

struct glia__sgd {
    float momentum, dampening, weight_decay;
    int nesterov;
};

extern const struct glia_key glia__sgd_keys[];

/* Reads the keys into o->priv (a struct glia__sgd); refuses Nesterov without momentum or with
 * dampening. */
glia_status glia__sgd_create(struct glia_optimizer *o, const struct glia_section *cfg);
void glia__sgd_destroy(struct glia_optimizer *o);

/* The scalars of step s, in the precision the update computes in. */
struct glia__sgd_coef {
    float lr, mu, damp, wd;
    int first, nesterov;  /* first: step 1 (the buffer starts as the gradient) */
};
struct glia__sgd_coef glia__sgd_coef(const struct glia__sgd *p, const struct glia_opt_step *s);

#endif
