/* plugins/layers/flatten/flatten_desc.h — what the CPU and CUDA impls of flatten share: create
 * (the batch-dimension check) and shape inference. Not the copies: each impl moves its own data.
 * Not a plugin. */
#ifndef GLIA_FLATTEN_DESC_H
#define GLIA_FLATTEN_DESC_H

#include <glia/glia.h>

#define GLIA__FLATTEN_DOC "(N, ...) -> (N, features)"

/* Refuses an input without a batch dimension; keeps no state (l->priv stays NULL). */
glia_status glia__flatten_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                 int n_in);
/* out = (N, product of the other dimensions) */
glia_status glia__flatten_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                struct glia_shape *out);

#endif
