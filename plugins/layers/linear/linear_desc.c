/* plugins/layers/linear/linear_desc.c — the shared description of linear (compiled into the CPU
 * plugin and into cuda.so): keys, create, shapes, flops. Not the maths. */
#include "linear_desc.h"
#include <math.h>
#include <stdlib.h>

const struct glia_key glia__linear_keys[] = {
    GLIA_KEY("outputs", GLIA_KEY_INT, NULL, "output features", .required = true, .min = 1, .max = 1 << 30),
    GLIA_KEY("bias", GLIA_KEY_BOOL, "on", "add a learned bias"),
    GLIA_KEY_END};

glia_status glia__linear_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                int n_in, size_t priv_size)
{
    char buf[64];
    if (in[0].ndim != 2)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "linear expects (N, features) input, got %s; put a flatten layer before it",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    struct glia__linear *p = calloc(1, priv_size > sizeof *p ? priv_size : sizeof *p);
    if (!p) return GLIA_ENOMEM;
    l->priv = p;
    p->in = in[0].dim[1];
    p->out = glia_section_int(cfg, "outputs");
    /* PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias. */
    struct glia_param_init init = {GLIA_INIT_UNIFORM, 1.0 / sqrt((double)p->in)};
    struct glia_shape ws = glia_shape_make(2, (int64_t[]){p->out, p->in});
    struct glia_shape bs = glia_shape_make(1, (int64_t[]){p->out});
    glia_status st = glia_layer_add_param(l, "weight", &ws, init, &p->w);
    p->b = -1;
    if (!st && glia_section_bool(cfg, "bias")) st = glia_layer_add_param(l, "bias", &bs, init, &p->b);
    return st;
}

void glia__linear_destroy(struct glia_layer *l) { free(l->priv); }

glia_status glia__linear_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                               struct glia_shape *out)
{
    const struct glia__linear *p = l->priv;
    if (in[0].ndim != 2 || in[0].dim[1] != p->in) return GLIA_ESHAPE;
    *out = glia_shape_make(2, (int64_t[]){in[0].dim[0], p->out});
    return GLIA_OK;
}

uint64_t glia__linear_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct glia__linear *p = l->priv;
    return 2ull * (uint64_t)in[0].dim[0] * (uint64_t)p->in * (uint64_t)p->out;
}
