/* plugins/layers/seq_pool/seq_pool_desc.c — the seq_pool description shared by the CPU plugin and cuda.so:
 * keys, create's checks, output shape, flops, the token dtype check. Not the pooling. */
#include <stdio.h>
#include <string.h>
#include "seq_pool_desc.h"

const struct glia_key glia__seq_pool_keys[] = {
    GLIA_KEY("mode", GLIA_KEY_ENUM, "mean", "mean or max over the valid positions", .choices = "mean|max"),
    GLIA_KEY("pad_id", GLIA_KEY_INT, "0", "token id of padding: positions holding it are left out", .min = -(1LL << 31),
             .max = (1LL << 31) - 1),
    GLIA_KEY_END};

/* Whether the inputs' shapes fit; if not, the first problem is written to why. */
static bool shapes_ok(const struct glia_shape *in, int n_in, char *why, size_t n)
{
    char a[64], b[64];
    if (n_in != 2) {
        snprintf(why, n, "seq_pool takes 2 inputs (features (N, C, 1, L), then the token batch (N, L): "
                 "inputs = LAYER, input), got %d", n_in);
        return false;
    }
    glia_shape_str(&in[0], a, sizeof a);
    glia_shape_str(&in[1], b, sizeof b);
    if (in[0].ndim != 4 || in[0].dim[2] != 1)
        snprintf(why, n, "seq_pool expects features (N, C, 1, L) as first input, got %s", a);
    else if (in[1].ndim != 2)
        snprintf(why, n, "seq_pool expects the token batch (N, L) of a [data] format = tokens dataset as second input, got %s", b);
    else if (in[1].dim[0] != in[0].dim[0] || in[1].dim[1] != in[0].dim[3])
        snprintf(why, n, "seq_pool: features %s and tokens %s differ in N or L", a, b);
    else
        return true;
    return false;
}

glia_status glia__seq_pool_describe(const struct glia_section *cfg, const struct glia_shape *in, int n_in,
                                    struct glia__seq_pool_desc *d)
{
    char why[256];
    if (!shapes_ok(in, n_in, why, sizeof why))
        return glia_section_error(cfg, n_in != 2 ? "inputs" : NULL, GLIA_ESHAPE, "%s", why);
    d->max = !strcmp(glia_section_str(cfg, "mode"), "max");
    d->pad_id = glia_section_int(cfg, "pad_id");
    return GLIA_OK;
}

glia_status glia__seq_pool_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                 struct glia_shape *out)
{
    (void)l;
    char why[256];
    if (!shapes_ok(in, n_in, why, sizeof why)) return GLIA_ESHAPE;
    *out = glia_shape_make(2, (int64_t[]){in[0].dim[0], in[0].dim[1]});
    return GLIA_OK;
}

uint64_t glia__seq_pool_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    (void)l;
    (void)n_in;
    return (uint64_t)glia_shape_numel(&in[0]);
}

glia_status glia__seq_pool_check_tokens(const struct glia_layer *l, const struct glia_tensor *t)
{
    if (t->dtype == GLIA_I32 && t->shape.ndim == 2) return GLIA_OK;
    char buf[64];
    return glia_error(l->ctx, GLIA_EINVAL, "[%s] seq_pool takes i32 token ids (N, L) as second input, got %s %s", l->name,
                      glia_dtype_name(t->dtype), glia_shape_str(&t->shape, buf, sizeof buf));
}
