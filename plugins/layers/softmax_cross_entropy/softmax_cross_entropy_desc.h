/* plugins/layers/softmax_cross_entropy/softmax_cross_entropy_desc.h — what the CPU and CUDA
 * impls of softmax_cross_entropy share: keys, create (key reading, shape check), shape inference.
 * Not the maths: each impl computes the loss and its gradient in its own file. Not a plugin. */
#ifndef GLIA_SOFTMAX_CROSS_ENTROPY_DESC_H
#define GLIA_SOFTMAX_CROSS_ENTROPY_DESC_H

#include <stddef.h>
#include <glia/glia.h>

#define GLIA__SCE_DOC "loss: mean cross-entropy of softmax(logits) and integer labels"

/* The settings of one softmax_cross_entropy layer. Each impl's l->priv starts with this struct
 * (first member). */
struct glia__sce {
    float smoothing;   /* label smoothing epsilon */
};

extern const struct glia_key glia__sce_keys[];

/* Check the (N, classes) logits, allocate l->priv of priv_size bytes (zeroed; at least
 * sizeof(struct glia__sce), which it starts with) and read the keys. */
glia_status glia__sce_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                             int n_in, size_t priv_size);
/* out = (1): the mean loss. */
glia_status glia__sce_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                            struct glia_shape *out);

#endif
