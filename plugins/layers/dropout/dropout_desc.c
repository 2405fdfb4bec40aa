/* plugins/layers/dropout/dropout_desc.c — the shared description of dropout (compiled into the CPU
 * plugin and into cuda.so): keys, create, shapes. Not the mask loops. */
#include "dropout_desc.h"
#include <stdlib.h>

const struct glia_key glia__dropout_keys[] = {
    GLIA_KEY("p", GLIA_KEY_FLOAT, "0.5", "probability of zeroing an element", .min = 0, .max = 0.999999),
    GLIA_KEY_END};

glia_status glia__dropout_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                 int n_in)
{
    struct glia__dropout *d = calloc(1, sizeof *d);
    if (!d) return GLIA_ENOMEM;
    d->p = (float)glia_section_float(cfg, "p");
    l->priv = d;
    return GLIA_OK;
}

void glia__dropout_destroy(struct glia_layer *l) { free(l->priv); }

glia_status glia__dropout_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                struct glia_shape *out)
{
    *out = in[0];
    return GLIA_OK;
}
