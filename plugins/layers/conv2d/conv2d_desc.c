/* plugins/layers/conv2d/conv2d_desc.c — the shared description of conv2d (compiled into the CPU
 * plugin and into cuda.so): keys, key checks, parameters, shapes, flops. Not the maths. */
#include "conv2d_desc.h"
#include <math.h>

const struct glia_key glia__conv2d_keys[] = {
    GLIA_KEY("filters", GLIA_KEY_INT, NULL, "output channels", .required = true, .min = 1, .max = 1 << 30),
    GLIA_KEY("size", GLIA_KEY_INT, "3", "kernel height and width", .min = 1, .max = 1 << 20),
    GLIA_KEY("size_h", GLIA_KEY_INT, NULL, "kernel height (default: size)", .min = 1, .max = 1 << 20),
    GLIA_KEY("size_w", GLIA_KEY_INT, NULL, "kernel width (default: size)", .min = 1, .max = 1 << 20),
    GLIA_KEY("stride", GLIA_KEY_INT, "1", "step between kernel positions", .min = 1, .max = 1 << 20),
    GLIA_KEY("padding", GLIA_KEY_INT, "0", "zeros added on every side of H and W", .min = 0, .max = 1 << 20),
    GLIA_KEY("padding_h", GLIA_KEY_INT, NULL, "zeros added above and below (default: padding)", .min = 0,
             .max = 1 << 20),
    GLIA_KEY("padding_w", GLIA_KEY_INT, NULL, "zeros added left and right (default: padding)", .min = 0,
             .max = 1 << 20),
    GLIA_KEY("dilation", GLIA_KEY_INT, "1", "spacing between kernel taps (1: dense)", .min = 1, .max = 1 << 20),
    GLIA_KEY("groups", GLIA_KEY_INT, "1", "channel groups; must divide input channels and filters", .min = 1,
             .max = 1 << 30),
    GLIA_KEY("bias", GLIA_KEY_BOOL, "on", "add a learned bias per filter"),
    GLIA_KEY_END};

/* Output extent of one spatial dimension with kernel k and padding pad. */
static int64_t out_extent(const struct glia__conv2d_geom *g, int64_t in, int64_t k, int64_t pad)
{
    int64_t span = in + 2 * pad - g->d * (k - 1) - 1;
    return span < 0 ? 0 : span / g->s + 1;
}

int64_t glia__conv2d_out_h(const struct glia__conv2d_geom *g, int64_t in) { return out_extent(g, in, g->kh, g->ph); }

int64_t glia__conv2d_out_w(const struct glia__conv2d_geom *g, int64_t in) { return out_extent(g, in, g->kw, g->pw); }

/* The int key `specific` when written, else `general` (its default applied). */
static int64_t int_or(const struct glia_section *cfg, const char *specific, const char *general)
{
    return glia_section_int(cfg, glia_section_has(cfg, specific) ? specific : general);
}

/* "a" when a == b, else "axb" (height x width), in buf (48 bytes). */
static const char *pair(char *buf, int64_t a, int64_t b)
{
    if (a == b) snprintf(buf, 48, "%lld", (long long)a);
    else snprintf(buf, 48, "%lldx%lld", (long long)a, (long long)b);
    return buf;
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
        .kh = int_or(cfg, "size_h", "size"),
        .kw = int_or(cfg, "size_w", "size"),
        .ph = int_or(cfg, "padding_h", "padding"),
        .pw = int_or(cfg, "padding_w", "padding"),
        .s = glia_section_int(cfg, "stride"),
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
    int64_t OH = glia__conv2d_out_h(&q, in[0].dim[2]), OW = glia__conv2d_out_w(&q, in[0].dim[3]);
    if (OH < 1 || OW < 1) {
        char size[48], pad[48];
        return glia_section_error(cfg, NULL, GLIA_ESHAPE,
                                  "conv2d output would be empty: input %lldx%lld with size %s, dilation %lld, "
                                  "padding %s gives %lldx%lld",
                                  (long long)in[0].dim[2], (long long)in[0].dim[3], pair(size, q.kh, q.kw),
                                  (long long)q.d, pair(pad, q.ph, q.pw), (long long)OH, (long long)OW);
    }
    *g = q;
    return GLIA_OK;
}

glia_status glia__conv2d_add_params(struct glia_layer *l, struct glia__conv2d_geom *g)
{
    int64_t fan_in = g->C / g->g * g->kh * g->kw;
    /* PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias. */
    struct glia_param_init init = {GLIA_INIT_UNIFORM, 1.0 / sqrt((double)fan_in)};
    struct glia_shape ws = glia_shape_make(4, (int64_t[]){g->F, g->C / g->g, g->kh, g->kw});
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
    int64_t OH = glia__conv2d_out_h(g, in[0].dim[2]), OW = glia__conv2d_out_w(g, in[0].dim[3]);
    if (OH < 1 || OW < 1) return GLIA_ESHAPE;
    *out = glia_shape_make(4, (int64_t[]){in[0].dim[0], g->F, OH, OW});
    return GLIA_OK;
}

uint64_t glia__conv2d_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct glia__conv2d_geom *g = l->priv;
    uint64_t OH = (uint64_t)glia__conv2d_out_h(g, in[0].dim[2]);
    uint64_t OW = (uint64_t)glia__conv2d_out_w(g, in[0].dim[3]);
    return 2ull * (uint64_t)in[0].dim[0] * (uint64_t)g->F * OH * OW * (uint64_t)(g->C / g->g) *
           (uint64_t)(g->kh * g->kw);
}
