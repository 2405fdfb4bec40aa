/* glia/types/pointwise.h — the attributes of layer type pointwise (its expression and derivatives), which every kernel
 * reads, and where its elements draw dropout()'s mask. Not a kernel (plugins/layers/pointwise; cuda.so compiles). */
#ifndef GLIA_TYPES_POINTWISE_H
#define GLIA_TYPES_POINTWISE_H

#include <stdbool.h>
#include <glia/expr.h>
#include <glia/tensor.h>
#include <glia/types/dropout.h>

/* l->attrs of a pointwise layer: its output is f of its n_in inputs x, y, z, w (key expr). */
struct glia_pointwise_attrs {
    char *text;                                /* expr as written (owned): what the type's pointwise() gives */
    struct glia_expr *f;                       /* the parsed expression (owned) */
    struct glia_expr *df[GLIA_EXPR_MAX_VARS];  /* df / d input k, for k < n_in (owned) */
    unsigned same_df[GLIA_EXPR_MAX_VARS];      /* bit j (j < k): df[j] is the same function as df[k] */
    int n_in;
};

/* Where the elements of t draw dropout()'s mask (glia/expr.h): the seed of this training forward, or of
 * the last one for backward; t's memory format gives each element's logical NCHW index. */
static inline struct glia_expr_site glia_pointwise_site(const struct glia_tensor *t, struct glia_seed_at seed,
                                                        bool train)
{
    struct glia_expr_site s = {.seed = seed.seed, .train = train, .key = seed.key, .step_at = seed.step_at};
    if (glia_tensor_memory_format(t) == GLIA_CHANNELS_LAST) {
        s.C = t->shape.dim[1];
        s.HW = t->shape.dim[2] * t->shape.dim[3];
    }
    return s;
}

#endif
