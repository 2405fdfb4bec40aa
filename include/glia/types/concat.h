/* glia/types/concat.h — the attributes of layer type concat (plugin concat), which every kernel of it reads, and
 * the (outer, axis, inner) view of a tensor in either memory format that its kernels copy by. Not the copies. */
#ifndef GLIA_TYPES_CONCAT_H
#define GLIA_TYPES_CONCAT_H

#include <stdbool.h>
#include <stdint.h>
#include <glia/tensor.h>

/* l->attrs of a concat layer. */
struct glia_concat_attrs {
    int axis;  /* 1 .. ndim-1, in NCHW order for 4-D shapes (key axis) */
};

/* t as (outer, dim(axis), inner) in memory order: outer = product of the dims stored before the axis, inner = of
 * those after (channels_last 4-D tensors store N, H, W, C). */
static inline void glia_concat_sizes(const struct glia_tensor *t, int axis, int64_t *outer, int64_t *inner)
{
    static const int nhwc[4] = {0, 2, 3, 1};
    const struct glia_shape *s = &t->shape;
    bool cl = glia_tensor_memory_format(t) == GLIA_CHANNELS_LAST;
    int pos = 0;
    while ((cl ? nhwc[pos] : pos) != axis) pos++;
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < s->ndim; d++) {
        int64_t n = s->dim[cl ? nhwc[d] : d];
        if (d < pos) *outer *= n;
        else if (d > pos) *inner *= n;
    }
}

#endif
