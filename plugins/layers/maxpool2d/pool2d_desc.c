/* plugins/layers/maxpool2d/pool2d_desc.c — the window description shared by maxpool2d and avgpool2d,
 * CPU plugins and cuda.so alike: keys, create's checks, output shape, flops. Not the pooling. */
#include "pool2d_desc.h"

const struct glia_key glia__maxpool2d_keys[] = {
    GLIA_KEY("size", GLIA_KEY_INT, "2", "window height and width", .min = 1, .max = 1 << 20),
    GLIA_KEY("stride", GLIA_KEY_INT, "0", "window step (0: the window size)", .min = 0, .max = 1 << 20),
    GLIA_KEY("padding", GLIA_KEY_INT, "0", "implicit -inf border on each side (at most size/2)", .min = 0, .max = 1 << 20),
    GLIA_KEY_END};

const struct glia_key glia__avgpool2d_keys[] = {
    GLIA_KEY("size", GLIA_KEY_INT, "2", "window height and width", .min = 1, .max = 1 << 20),
    GLIA_KEY("stride", GLIA_KEY_INT, "0", "window step (0: the window size)", .min = 0, .max = 1 << 20),
    GLIA_KEY("padding", GLIA_KEY_INT, "0", "implicit zero border on each side (at most size/2)", .min = 0, .max = 1 << 20),
    GLIA_KEY_END};

glia_status glia__pool2d_describe(const struct glia_section *cfg, const struct glia_shape *in, const char *type,
                                  struct glia__pool2d_desc *d)
{
    int64_t k = glia_section_int(cfg, "size"), s = glia_section_int(cfg, "stride"), p = glia_section_int(cfg, "padding");
    char a[64];
    if (in[0].ndim != 4)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "%s expects (N, C, H, W) input, got %s", type,
                                  glia_shape_str(&in[0], a, sizeof a));
    if (p > k / 2)
        return glia_section_error(cfg, "padding", GLIA_ECONFIG, "%lld is more than half the window size %lld",
                                  (long long)p, (long long)k);
    if (in[0].dim[2] + 2 * p < k || in[0].dim[3] + 2 * p < k)
        return glia_section_error(cfg, "size", GLIA_ESHAPE, "window %lldx%lld is larger than the padded input %lldx%lld",
                                  (long long)k, (long long)k, (long long)(in[0].dim[2] + 2 * p),
                                  (long long)(in[0].dim[3] + 2 * p));
    d->k = k;
    d->s = s ? s : k;
    d->p = p;
    return GLIA_OK;
}

glia_status glia__pool2d_shape(const struct glia__pool2d_desc *d, const struct glia_shape *in, struct glia_shape *out)
{
    if (in->ndim != 4) return GLIA_ESHAPE;
    int64_t hp = in->dim[2] + 2 * d->p, wp = in->dim[3] + 2 * d->p;
    if (hp < d->k || wp < d->k) return GLIA_ESHAPE;
    *out = glia_shape_make(4, (int64_t[]){in->dim[0], in->dim[1], (hp - d->k) / d->s + 1, (wp - d->k) / d->s + 1});
    return GLIA_OK;
}

glia_status glia__pool2d_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                               struct glia_shape *out)
{
    (void)n_in;
    return glia__pool2d_shape(l->priv, &in[0], out);
}

uint64_t glia__pool2d_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    (void)n_in;
    const struct glia__pool2d_desc *d = l->priv;
    struct glia_shape out;
    if (glia__pool2d_shape(d, &in[0], &out)) return 0;
    return (uint64_t)(glia_shape_numel(&out) * d->k * d->k);
}
