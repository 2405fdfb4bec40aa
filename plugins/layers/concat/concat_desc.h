/* plugins/layers/concat/concat_desc.h — what the CPU and CUDA concat impls share: the key, the axis,
 * create's checks, infer_shape and the (outer, axis, inner) view of a tensor in either memory format.
 * Not the copies. */
#ifndef GLIA_CONCAT_DESC_H
#define GLIA_CONCAT_DESC_H

#include <glia/glia.h>

extern const struct glia_key glia__concat_keys[];

/* The first member of every concat impl's priv (glia__concat_infer reads l->priv as one). */
struct glia__concat_desc {
    int axis;  /* 1 .. ndim-1, in NCHW order for 4-D shapes */
};

/* Checks that the axis exists and the n_in inputs agree on every other dimension; reads it into *d. */
glia_status glia__concat_describe(const struct glia_section *cfg, const struct glia_shape *in, int n_in,
                                  struct glia__concat_desc *d);
/* The output shape: in[0] with dim `axis` the sum of the inputs'; GLIA_ESHAPE when they disagree. */
glia_status glia__concat_shape(int axis, const struct glia_shape *in, int n_in, struct glia_shape *out);
/* The infer_shape slot (l->priv starts with a struct glia__concat_desc). */
glia_status glia__concat_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                               struct glia_shape *out);
/* t as (outer, dim(axis), inner) in memory order: outer = product of the dims stored before the axis,
 * inner = of those after (channels_last 4-D tensors store N, H, W, C). */
void glia__concat_sizes(const struct glia_tensor *t, int axis, int64_t *outer, int64_t *inner);

#endif
