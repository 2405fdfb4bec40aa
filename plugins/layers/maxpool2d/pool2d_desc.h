/* plugins/layers/maxpool2d/pool2d_desc.h — what the CPU and CUDA impls of maxpool2d and avgpool2d share:
 * their keys, the window geometry, create's checks, infer_shape and flops. Not the pooling itself
 * (each impl computes max or mean); avgpool2d's plugin compiles this file from here too. */
#ifndef GLIA_POOL2D_DESC_H
#define GLIA_POOL2D_DESC_H

#include <glia/glia.h>

extern const struct glia_key glia__maxpool2d_keys[];  /* size, stride, padding (-inf border) */
extern const struct glia_key glia__avgpool2d_keys[];  /* size, stride, padding (zero border, counted) */

/* The first member of every maxpool2d/avgpool2d impl's priv (the shared slots read l->priv as one). */
struct glia__pool2d_desc {
    int64_t k, s, p;  /* window size, stride, padding on each side (p <= k/2: no window is all padding) */
};

/* Checks that in[0] is (N, C, H, W), padding <= size/2 and that the window fits the padded input
 * (messages name `type`, "maxpool2d" or "avgpool2d"); reads the keys of cfg into *d. */
glia_status glia__pool2d_describe(const struct glia_section *cfg, const struct glia_shape *in, const char *type,
                                  struct glia__pool2d_desc *d);

/* OH = (H + 2p - k)/s + 1 (floor), OW alike; GLIA_ESHAPE unless 4-D and the window fits the padded input */
glia_status glia__pool2d_shape(const struct glia__pool2d_desc *d, const struct glia_shape *in, struct glia_shape *out);

/* The infer_shape and flops (one compare or add per window element) slots; l->priv starts with a
 * struct glia__pool2d_desc. */
glia_status glia__pool2d_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                               struct glia_shape *out);
uint64_t glia__pool2d_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);

#endif
