/* plugins/layers/pointwise/pointwise_desc.c — the shared description of `pointwise` (compiled
 * into the CPU plugin and into cuda.so): parsing and differentiating `expr` at create. Not an
 * evaluator. */
#include "pointwise_desc.h"
#include <stdlib.h>
#include <string.h>

const struct glia_key glia__pointwise_keys[] = {
    GLIA_KEY("expr", GLIA_KEY_STRING, NULL, "the function, e.g. x * sigmoid(x); inputs are x, y, z, w",
             .required = true),
    GLIA_KEY_END,
};

void glia__pointwise_clear(struct glia__pointwise *p)
{
    if (!p) return;
    expr_free(p->f);
    p->f = NULL;
    for (int k = 0; k < EXPR_MAX_VARS; k++) {
        expr_free(p->df[k]);
        p->df[k] = NULL;
    }
}

glia_status glia__pointwise_build(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                  int n_in, struct glia__pointwise *p)
{
    char a[64], b[64], err[256];
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0]))
            return glia_section_error(cfg, "inputs", GLIA_ESHAPE, "pointwise needs equal shapes: input 1 is %s, input %d is %s",
                                      glia_shape_str(&in[0], a, sizeof a), k + 1, glia_shape_str(&in[k], b, sizeof b));
    p->n_in = n_in;
    const char *text = glia_section_str(cfg, "expr");
    if (expr_parse(text, n_in, &p->f, err, sizeof err)) {
        glia__pointwise_clear(p);
        /* the parser's messages start "expr: "; the section error already names the key */
        const char *msg = strncmp(err, "expr: ", 6) ? err : err + 6;
        return glia_section_error(cfg, "expr", GLIA_ECONFIG, "%s", msg);
    }
    for (int k = 0; k < n_in && k < EXPR_MAX_VARS; k++) {
        if (!(p->df[k] = expr_diff(p->f, k))) {
            glia__pointwise_clear(p);
            return glia_error(l->ctx, GLIA_ENOMEM, "pointwise: out of memory");
        }
        p->same_df[k] = 0;
        for (int j = 0; j < k; j++) p->same_df[k] |= (unsigned)expr_same(p->df[j], p->df[k]) << j;
    }
    return GLIA_OK;
}

glia_status glia__pointwise_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                   int n_in)
{
    struct glia__pointwise *p = calloc(1, sizeof *p);
    if (!p) return glia_error(l->ctx, GLIA_ENOMEM, "pointwise: out of memory");
    glia_status st = glia__pointwise_build(l, cfg, in, n_in, p);
    if (st) {
        free(p);
        return st;
    }
    l->priv = p;
    return GLIA_OK;
}

void glia__pointwise_destroy(struct glia_layer *l)
{
    glia__pointwise_clear(l->priv);
    free(l->priv);
    l->priv = NULL;
}

struct expr_site glia__pointwise_site(const struct glia_tensor *t, struct glia__seed_at seed, bool train)
{
    struct expr_site s = {.seed = seed.seed, .train = train, .key = seed.key, .step_at = seed.step_at};
    if (glia_tensor_memory_format(t) == GLIA_CHANNELS_LAST) {
        s.C = t->shape.dim[1];
        s.HW = t->shape.dim[2] * t->shape.dim[3];
    }
    return s;
}

glia_status glia__pointwise_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                  struct glia_shape *out)
{
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0])) return GLIA_ESHAPE;
    *out = in[0];
    return GLIA_OK;
}

uint64_t glia__pointwise_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct glia__pointwise *p = l->priv;
    return (uint64_t)(p ? expr_op_count(p->f) : 0) * (uint64_t)glia_shape_numel(&in[0]);
}
