/* plugins/layers/embedding/embedding_desc.c — the shared description of embedding (compiled into the CPU
 * plugin and into cuda.so): keys, create, output shape, the padding row's init, the token dtype check.
 * Not the lookup. */
#include "embedding_desc.h"
#include <stdlib.h>
#include <string.h>

const struct glia_key glia__embedding_keys[] = {
    GLIA_KEY("vocab", GLIA_KEY_INT, NULL, "rows of the table: token ids are in [0, vocab)", .required = true, .min = 1,
             .max = 1 << 30),
    GLIA_KEY("dim", GLIA_KEY_INT, NULL, "features per token (output channels)", .required = true, .min = 1,
             .max = 1 << 30),
    GLIA_KEY("padding_idx", GLIA_KEY_INT, "0", "token whose row starts at zero and gets no gradient (-1: none)",
             .min = -1, .max = 1 << 30),
    GLIA_KEY_END};

glia_status glia__embedding_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                   int n_in)
{
    (void)n_in;
    char buf[64];
    if (in[0].ndim != 2)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE,
                                  "embedding takes the token batch (N, L) of a [data] format = tokens dataset, got %s",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    int64_t vocab = glia_section_int(cfg, "vocab"), pad = glia_section_int(cfg, "padding_idx");
    if (pad >= vocab)
        return glia_section_error(cfg, "padding_idx", GLIA_ECONFIG, "%lld is not a token id: -1 (none) or in [0, %lld)",
                                  (long long)pad, (long long)vocab);
    struct glia__embedding_desc *d = calloc(1, sizeof *d);
    if (!d) return GLIA_ENOMEM;
    l->priv = d;
    d->vocab = vocab;
    d->dim = glia_section_int(cfg, "dim");
    d->pad = pad;
    struct glia_shape ws = glia_shape_make(2, (int64_t[]){d->vocab, d->dim});
    glia_status st = glia_layer_add_param(l, "weight", &ws, (struct glia_param_init){GLIA_INIT_NORMAL, 1.0}, &d->w);
    if (st) {  /* the core calls destroy only after a successful create */
        free(d);
        l->priv = NULL;
    }
    return st;
}

void glia__embedding_destroy(struct glia_layer *l) { free(l->priv); }

void glia__embedding_init_param(const struct glia_layer *l, int index, float *values)
{
    const struct glia__embedding_desc *d = l->priv;
    if (index == d->w && d->pad >= 0) memset(values + d->pad * d->dim, 0, (size_t)d->dim * sizeof *values);
}

glia_status glia__embedding_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                  struct glia_shape *out)
{
    (void)n_in;
    const struct glia__embedding_desc *d = l->priv;
    if (in[0].ndim != 2) return GLIA_ESHAPE;
    *out = glia_shape_make(4, (int64_t[]){in[0].dim[0], d->dim, 1, in[0].dim[1]});
    return GLIA_OK;
}

glia_status glia__embedding_check_tokens(const struct glia_layer *l, const struct glia_tensor *t)
{
    if (t->dtype == GLIA_I32 && t->shape.ndim == 2) return GLIA_OK;
    char buf[64];
    return glia_error(l->ctx, GLIA_EINVAL, "[%s] embedding takes i32 token ids (N, L), got %s %s", l->name,
                      glia_dtype_name(t->dtype), glia_shape_str(&t->shape, buf, sizeof buf));
}
