/* plugins/layers/conv2d/conv2d_desc.c — the shared description of conv2d (compiled into the CPU
 * plugin and into cuda.so): keys, key checks, parameters, shapes, flops. Not the maths. */
#include "conv2d_desc.h"
#include <math.h>

const struct glia_key glia__conv2d_keys[] = {
    GLIA_KEY("filters", GLIA_KEY_INT, NULL, "output channels", .required = true, .min = 1, .max = 1 << 30),
    GLIA_KEY("size", GLIA_KEY_INT, "3", "kernel height and width", .min = 1, .max = 1 << 20),
    GLIA_KEY("stride", GLIA_KEY_INT, "1", "step between kernel positions", .min = 1, .max = 1 << 20),
    GLIA_KEY("padding", GLIA_KEY_INT, "0", "zeros added on every side of H and W", .min = 0, .max = 1 << 20),
    GLIA_KEY("dilation", GLIA_KEY_INT, "1", "spacing between kernel taps (1: dense)", .min = 1, .max = 1 << 20),
    GLIA_KEY("groups", GLIA_KEY_INT, "1", "channel groups; must divide input channels and filters", .min = 1,
             .max = 1 << 30),
    GLIA_KEY("bias", GLIA_KEY_BOOL, "on", "add a learned bias per filter"),
    GLIA_KEY_END};

int64_t glia__conv2d_out_extent(const struct glia__conv2d_geom *g, int64_t in)
{
    int64_t span = in + 2 * g->pad - g->d * (g->k - 1) - 1;
    return span < 0 ? 0 : span / g->s + 1;
}

glia_status glia__conv2d_read(const struct glia_section *cfg, const struct glia_shape *in,
                              struct glia__conv2d_geom *g)
{
    char buf[64];
    if (in[0].ndim != 4)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "conv2d expects (N, C, H, W) input, got %s",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    struct glia__conv2d_geom q = {
        .C = in[0].dim[1],
        .F = glia_section_int(cfg, "filters"),
        .k = glia_section_int(cfg, "size"),
        .s = glia_section_int(cfg, "stride"),
        .pad = glia_section_int(cfg, "padding"),
        .d = glia_section_int(cfg, "dilation"),
        .g = glia_section_int(cfg, "groups"),
        .bias = glia_section_bool(cfg, "bias"),
        .w = -1,
        .b = -1,
    };
    if (q.C % q.g)
        return glia_section_error(cfg, "groups", GLIA_ECONFIG, "%lld groups do not divide the %lld input channels",
                                  (long long)q.g, (long long)q.C);
    if (q.F % q.g)
        return glia_section_error(cfg, "groups", GLIA_ECONFIG, "%lld groups do not divide the %lld filters",
                                  (long long)q.g, (long long)q.F);
    int64_t OH = glia__conv2d_out_extent(&q, in[0].dim[2]), OW = glia__conv2d_out_extent(&q, in[0].dim[3]);
    if (OH < 1 || OW < 1)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE,
                                  "conv2d output would be empty: input %lldx%lld with size %lld, dilation %lld, "
                                  "padding %lld gives %lldx%lld",
                                  (long long)in[0].dim[2], (long long)in[0].dim[3], (long long)q.k, (long long)q.d,
                                  (long long)q.pad, (long long)OH, (long long)OW);
    *g = q;
    return GLIA_OK;
}

glia_status glia__conv2d_add_params(struct glia_layer *l, struct glia__conv2d_geom *g)
{
    int64_t fan_in = g->C / g->g * g->k * g->k;
    /* PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias. */
    struct glia_param_init init = {GLIA_INIT_UNIFORM, 1.0 / sqrt((double)fan_in)};
    struct glia_shape ws = glia_shape_make(4, (int64_t[]){g->F, g->C / g->g, g->k, g->k});
    struct glia_shape bs = glia_shape_make(1, (int64_t[]){g->F});
    glia_status st = glia_layer_add_param(l, "weight", &ws, init, &g->w);
    if (!st && g->bias) st = glia_layer_add_param(l, "bias", &bs, init, &g->b);
    return st;
}

glia_status glia__conv2d_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                               struct glia_shape *out)
{
    const struct glia__conv2d_geom *g = l->priv;
    if (in[0].ndim != 4 || in[0].dim[1] != g->C) return GLIA_ESHAPE;
    int64_t OH = glia__conv2d_out_extent(g, in[0].dim[2]), OW = glia__conv2d_out_extent(g, in[0].dim[3]);
    if (OH < 1 || OW < 1) return GLIA_ESHAPE;
    *out = glia_shape_make(4, (int64_t[]){in[0].dim[0], g->F, OH, OW});
    return GLIA_OK;
}

uint64_t glia__conv2d_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct glia__conv2d_geom *g = l->priv;
    uint64_t OH = (uint64_t)glia__conv2d_out_extent(g, in[0].dim[2]);
    uint64_t OW = (uint64_t)glia__conv2d_out_extent(g, in[0].dim[3]);
    return 2ull * (uint64_t)in[0].dim[0] * (uint64_t)g->F * OH * OW * (uint64_t)(g->C / g->g) *
           (uint64_t)(g->k * g->k);
}
