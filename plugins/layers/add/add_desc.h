/* plugins/layers/add/add_desc.h — what the CPU and CUDA impls of `add` share: doc, create (the
 * equal-shapes check), shape, flops. Not the maths: each impl sums in its own file. */
#ifndef GLIA_ADD_DESC_H
#define GLIA_ADD_DESC_H

#include <glia/glia.h>

#define GLIA__ADD_DOC "elementwise sum of 2 or more inputs of one shape (inputs = a, b, ...)"

/* Checks that every input has input 1's shape; keeps nothing. */
glia_status glia__add_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                             int n_in);
/* The output has the inputs' (common) shape; GLIA_ESHAPE when they differ. */
glia_status glia__add_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                            struct glia_shape *out);
/* n_in - 1 additions per element. */
uint64_t glia__add_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);

#endif
