/* plugins/layers/activation/activation_desc.c — the shared description of relu, leaky_relu,
 * sigmoid, tanh and gelu (compiled into each CPU plugin and into cuda.so). Not the maths. */
#include "activation_desc.h"
#include <stdlib.h>

glia_status glia__activation_create(struct glia_layer *l, const struct glia_section *cfg,
                                    const struct glia_shape *in, int n_in)
{
    return GLIA_OK;
}

glia_status glia__activation_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                   struct glia_shape *out)
{
    *out = in[0];
    return GLIA_OK;
}

uint64_t glia__relu_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return (uint64_t)glia_shape_numel(&in[0]);
}

uint64_t glia__leaky_relu_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return 2u * (uint64_t)glia_shape_numel(&in[0]);
}

uint64_t glia__sigmoid_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return 3u * (uint64_t)glia_shape_numel(&in[0]);
}

uint64_t glia__tanh_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return (uint64_t)glia_shape_numel(&in[0]);
}

uint64_t glia__gelu_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return 5u * (uint64_t)glia_shape_numel(&in[0]);
}

const struct glia_key glia__leaky_relu_keys[] = {
    GLIA_KEY("negative_slope", GLIA_KEY_FLOAT, "0.01", "slope for x <= 0", .min = 0, .max = 1),
    GLIA_KEY_END};

glia_status glia__leaky_relu_create(struct glia_layer *l, const struct glia_section *cfg,
                                    const struct glia_shape *in, int n_in)
{
    struct glia__leaky_relu *p = malloc(sizeof *p);
    if (!p) return GLIA_ENOMEM;
    p->slope = (float)glia_section_float(cfg, "negative_slope");
    l->priv = p;
    return GLIA_OK;
}

void glia__leaky_relu_destroy(struct glia_layer *l)
{
    free(l->priv);
    l->priv = NULL;
}
