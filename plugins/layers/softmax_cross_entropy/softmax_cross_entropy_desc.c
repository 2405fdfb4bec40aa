/* plugins/layers/softmax_cross_entropy/softmax_cross_entropy_desc.c — the shared description of
 * softmax_cross_entropy (compiled into the CPU plugin and into cuda.so): keys, create, shapes.
 * Not the maths. */
#include "softmax_cross_entropy_desc.h"
#include <stdlib.h>

const struct glia_key glia__sce_keys[] = {
    GLIA_KEY("label_smoothing", GLIA_KEY_FLOAT, "0",
             "target = (1 - e) onehot + e / classes (torch's label_smoothing)", .min = 0, .max = 1),
    GLIA_KEY_END};

glia_status glia__sce_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                             int n_in, size_t priv_size)
{
    char buf[64];
    if (in[0].ndim != 2)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "softmax_cross_entropy expects (N, classes) logits, got %s",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    struct glia__sce *p = calloc(1, priv_size > sizeof *p ? priv_size : sizeof *p);
    if (!p) return GLIA_ENOMEM;
    p->smoothing = (float)glia_section_float(cfg, "label_smoothing");
    l->priv = p;
    return GLIA_OK;
}

glia_status glia__sce_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                            struct glia_shape *out)
{
    if (in[0].ndim != 2) return GLIA_ESHAPE;
    *out = glia_shape_make(1, (int64_t[]){1});
    return GLIA_OK;
}
