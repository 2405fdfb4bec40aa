/* plugins/layers/flatten/flatten_desc.c — the shared description of flatten (compiled into the CPU
 * plugin and into cuda.so): create and shapes. Not the copies. */
#include "flatten_desc.h"

glia_status glia__flatten_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                 int n_in)
{
    if (in[0].ndim < 1) return glia_section_error(cfg, NULL, GLIA_ESHAPE, "flatten needs a batch dimension");
    return GLIA_OK;
}

glia_status glia__flatten_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                struct glia_shape *out)
{
    int64_t n = in[0].dim[0];
    *out = glia_shape_make(2, (int64_t[]){n, n ? glia_shape_numel(&in[0]) / n : 0});
    return GLIA_OK;
}
