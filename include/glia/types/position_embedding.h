/* glia/types/position_embedding.h — the attributes of layer type position_embedding (plugin position_embedding),
 * which every kernel of it reads, and the position check its kernels make first. Not a kernel: the CPU one is in
 * plugins/layers/position_embedding, the CUDA one in cuda.so. */
#ifndef GLIA_TYPES_POSITION_EMBEDDING_H
#define GLIA_TYPES_POSITION_EMBEDDING_H

#include <stdint.h>
#include <glia/glia.h>

/* l->attrs of a position_embedding layer: y(N, T, C) = x(N, T, C) + weight(max_positions, C)[t] (GPT-2's wpe). */
struct glia_position_embedding_attrs {
    int64_t max_positions;  /* key max_positions: rows of the table, the most positions T an input may have */
    int64_t dim;            /* C, the input's last dim and the table's columns */
    int w;                  /* index of the parameter "weight" (max_positions, C) */
};

/* GLIA_ESHAPE naming the layer unless t is (N, T, C) with T <= max_positions and C the table's: what forward and
 * backward check first (a token batch's T may change from batch to batch). */
static inline glia_status glia_position_embedding_check(const struct glia_layer *l, const struct glia_tensor *t)
{
    const struct glia_position_embedding_attrs *d = l->attrs;
    const struct glia_shape *s = &t->shape;
    if (s->ndim == 3 && s->dim[1] <= d->max_positions && s->dim[2] == d->dim) return GLIA_OK;
    char buf[64];
    return glia_error(l->ctx, GLIA_ESHAPE, "[%s] position_embedding takes (N, T <= %lld, %lld), got %s", l->name,
                      (long long)d->max_positions, (long long)d->dim, glia_shape_str(s, buf, sizeof buf));
}

/* The position of the input's first row in forward a: a cached decode's pos (ABI 2.3), else 0; GLIA_ESHAPE naming the
 * layer when the positions run past the table. */
static inline glia_status glia_position_embedding_first(const struct glia_layer *l, const struct glia_fwd *a,
                                                        int64_t *first)
{
    const struct glia_position_embedding_attrs *d = l->attrs;
    *first = a->decode ? a->pos : 0;
    int64_t T = a->in[0]->shape.dim[1];
    if (*first >= 0 && *first + T <= d->max_positions) return GLIA_OK;
    return glia_error(l->ctx, GLIA_ESHAPE, "[%s] position_embedding: positions %lld .. %lld, beyond its max_positions = "
                      "%lld", l->name, (long long)*first, (long long)(*first + T - 1), (long long)d->max_positions);
}

#endif
