/* plugins/layers/global_avgpool/global_avgpool_desc.c — the global_avgpool description shared by the CPU
 * plugin and cuda.so: create's check, output shape, flops. Not the mean itself. */
#include "global_avgpool_desc.h"

glia_status glia__global_avgpool_create(struct glia_layer *l, const struct glia_section *cfg,
                                        const struct glia_shape *in, int n_in)
{
    (void)l;
    (void)n_in;
    char a[64];
    if (in[0].ndim != 4)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "global_avgpool expects (N, C, H, W) input, got %s",
                                  glia_shape_str(&in[0], a, sizeof a));
    return GLIA_OK;
}

glia_status glia__global_avgpool_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                       struct glia_shape *out)
{
    (void)l;
    (void)n_in;
    if (in[0].ndim != 4) return GLIA_ESHAPE;
    *out = glia_shape_make(2, (int64_t[]){in[0].dim[0], in[0].dim[1]});
    return GLIA_OK;
}

uint64_t glia__global_avgpool_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    (void)l;
    (void)n_in;
    return (uint64_t)glia_shape_numel(&in[0]);
}
