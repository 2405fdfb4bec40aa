/* plugins/layers/concat/concat_desc.c — the concat description shared by the CPU plugin and cuda.so:
 * the axis key, create's checks, output shape, memory-order sizes. Not the copies. */
#include <stdbool.h>
#include "concat_desc.h"

const struct glia_key glia__concat_keys[] = {
    GLIA_KEY("axis", GLIA_KEY_INT, "1", "dimension to join along (0 is the batch; not allowed)", .min = 1, .max = 7),
    GLIA_KEY_END};

glia_status glia__concat_shape(int axis, const struct glia_shape *in, int n_in, struct glia_shape *out)
{
    if (axis >= in[0].ndim) return GLIA_ESHAPE;
    *out = in[0];
    for (int k = 1; k < n_in; k++) {
        if (in[k].ndim != in[0].ndim) return GLIA_ESHAPE;
        for (int d = 0; d < in[0].ndim; d++)
            if (d != axis && in[k].dim[d] != in[0].dim[d]) return GLIA_ESHAPE;
        out->dim[axis] += in[k].dim[axis];
    }
    return GLIA_OK;
}

glia_status glia__concat_describe(const struct glia_section *cfg, const struct glia_shape *in, int n_in,
                                  struct glia__concat_desc *d)
{
    int axis = (int)glia_section_int(cfg, "axis");
    struct glia_shape out;
    char a[64], b[64];
    if (axis >= in[0].ndim)
        return glia_section_error(cfg, "axis", GLIA_ESHAPE, "axis %d does not exist in input shape %s", axis,
                                  glia_shape_str(&in[0], a, sizeof a));
    if (glia__concat_shape(axis, in, n_in, &out))
        for (int k = 1; k < n_in; k++)
            if (in[k].ndim != in[0].ndim || glia__concat_shape(axis, (struct glia_shape[]){in[0], in[k]}, 2, &out))
                return glia_section_error(cfg, "inputs", GLIA_ESHAPE, "concat along axis %d: input 1 is %s, input %d is %s",
                                          axis, glia_shape_str(&in[0], a, sizeof a), k + 1,
                                          glia_shape_str(&in[k], b, sizeof b));
    d->axis = axis;
    return GLIA_OK;
}

glia_status glia__concat_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                               struct glia_shape *out)
{
    return glia__concat_shape(((const struct glia__concat_desc *)l->priv)->axis, in, n_in, out);
}

void glia__concat_sizes(const struct glia_tensor *t, int axis, int64_t *outer, int64_t *inner)
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
