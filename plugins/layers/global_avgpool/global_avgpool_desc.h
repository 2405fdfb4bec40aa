/* plugins/layers/global_avgpool/global_avgpool_desc.h — what the CPU and CUDA global_avgpool impls share:
 * create's check, infer_shape ((N, C, H, W) -> (N, C)) and flops. Not the mean itself; no keys, no priv. */
#ifndef GLIA_GLOBAL_AVGPOOL_DESC_H
#define GLIA_GLOBAL_AVGPOOL_DESC_H

#include <glia/glia.h>

/* The create slot: checks that in[0] is (N, C, H, W); the layer keeps no state. */
glia_status glia__global_avgpool_create(struct glia_layer *l, const struct glia_section *cfg,
                                        const struct glia_shape *in, int n_in);
/* The infer_shape slot: (N, C, H, W) -> (N, C). */
glia_status glia__global_avgpool_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                       struct glia_shape *out);
/* The flops slot: one add per input element. */
uint64_t glia__global_avgpool_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in);

#endif
