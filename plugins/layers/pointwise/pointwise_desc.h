/* plugins/layers/pointwise/pointwise_desc.h — what the CPU and CUDA impls of `pointwise` share:
 * doc, keys, the parsed expression and its derivatives (struct glia__pointwise), create, shape,
 * flops. Not an evaluator: the CPU impl interprets the IR, the CUDA impl compiles it. */
#ifndef GLIA_POINTWISE_DESC_H
#define GLIA_POINTWISE_DESC_H

#include <glia/glia.h>
#include "expr.h"
#include "../dropout/dropout_desc.h"  /* struct glia__seed_at */

#define GLIA__POINTWISE_DOC \
    "elementwise expression of 1 to 4 inputs of one shape (expr = x * sigmoid(x)), symbolic backward"

/* l->priv of a pointwise layer starts with this struct (an impl may embed it first in its own). */
struct glia__pointwise {
    struct expr *f;                    /* y = f(x, y, z, w) */
    struct expr *df[EXPR_MAX_VARS];    /* df / d input k, for k < n_in */
    unsigned same_df[EXPR_MAX_VARS];   /* bit j (j < k): df[j] is the same function as df[k] */
    int n_in;
    struct glia__seed_at seed;         /* of the last training forward: backward's dropout() mask */
};

extern const struct glia_key glia__pointwise_keys[];

/* Checks the input shapes, parses `expr` and differentiates it into *p (zero-initialized by the
 * caller). On error *p holds nothing (cleared) and the error names the key. */
glia_status glia__pointwise_build(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                  int n_in, struct glia__pointwise *p);
/* Frees the expressions of *p (not p itself). */
void glia__pointwise_clear(struct glia__pointwise *p);

/* create / destroy for an impl whose l->priv is exactly a struct glia__pointwise (the CPU's). */
glia_status glia__pointwise_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                   int n_in);
void glia__pointwise_destroy(struct glia_layer *l);

/* Where t's elements draw dropout()'s mask (expr.h): seed, train, and t's memory format. */
struct expr_site glia__pointwise_site(const struct glia_tensor *t, struct glia__seed_at seed, bool train);

/* The output has the inputs' (common) shape; GLIA_ESHAPE when they differ. */
glia_status glia__pointwise_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                  struct glia_shape *out);
/* One per computing IR node (a transcendental counts as one) per element. */
uint64_t glia__pointwise_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);

#endif
