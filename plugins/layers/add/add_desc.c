/* plugins/layers/add/add_desc.c — the shared description of `add` (compiled into the CPU plugin
 * and into cuda.so). Not the maths. */
#include "add_desc.h"

glia_status glia__add_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                             int n_in)
{
    char a[64], b[64];
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0]))
            return glia_section_error(cfg, "inputs", GLIA_ESHAPE, "add needs equal shapes: input 1 is %s, input %d is %s",
                                      glia_shape_str(&in[0], a, sizeof a), k + 1, glia_shape_str(&in[k], b, sizeof b));
    return GLIA_OK;
}

glia_status glia__add_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                            struct glia_shape *out)
{
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0])) return GLIA_ESHAPE;
    *out = in[0];
    return GLIA_OK;
}

uint64_t glia__add_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return (uint64_t)(n_in - 1) * (uint64_t)glia_shape_numel(&in[0]);
}
