/* plugins/layers/linear/linear_desc.h — what the CPU and CUDA impls of linear share: keys, the
 * layer's geometry, create (key reading, parameters), shape inference, flops.
 * Not the maths: each impl computes forward and backward in its own file. Not a plugin. */
#ifndef GLIA_LINEAR_DESC_H
#define GLIA_LINEAR_DESC_H

#include <stddef.h>
#include <glia/glia.h>

#define GLIA__LINEAR_DOC "fully connected: y = x W^T + b, input (N, features)"

/* The geometry of one linear layer. Each impl's l->priv starts with this struct (first member),
 * so that the shared functions below read it from l->priv. */
struct glia__linear {
    int64_t in, out;
    int w, b;  /* parameter indices; b = -1 without bias */
};

extern const struct glia_key glia__linear_keys[];

/* Check the (N, features) input, allocate l->priv of priv_size bytes (zeroed; at least
 * sizeof(struct glia__linear), which it starts with), read the keys and declare "weight" (O, I)
 * and, with bias on, "bias" (O), both U(-1/sqrt(I), 1/sqrt(I)) like PyTorch. */
glia_status glia__linear_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                int n_in, size_t priv_size);
/* free(l->priv): for impls whose priv owns nothing else. */
void glia__linear_destroy(struct glia_layer *l);
glia_status glia__linear_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                               struct glia_shape *out);
uint64_t glia__linear_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);

#endif
