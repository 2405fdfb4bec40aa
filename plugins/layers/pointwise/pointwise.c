/* plugins/layers/pointwise — an elementwise function of 1 to 4 inputs of one shape, written as
 * an expression (`expr = x * sigmoid(x)`), CPU. Forward interprets the expression's IR (expr.h);
 * backward interprets its symbolic derivatives, built once at create. Not broadcasting: every
 * input has the output's shape. Not a fuser of other layers. */
#include <glia/glia.h>
#include <stdlib.h>
#include <string.h>
#include "expr.h"

struct pointwise {
    struct expr *f;                    /* y = f(x, y, z, w) */
    struct expr *df[EXPR_MAX_VARS];    /* df / d input k */
    int n_in;
};

static void pointwise_free(struct pointwise *p)
{
    if (!p) return;
    expr_free(p->f);
    for (int k = 0; k < EXPR_MAX_VARS; k++) expr_free(p->df[k]);
    free(p);
}

static void pointwise_destroy(struct glia_layer *l)
{
    pointwise_free(l->priv);
    l->priv = NULL;
}

static glia_status pointwise_create(struct glia_layer *l, const struct glia_section *cfg,
                                    const struct glia_shape *in, int n_in)
{
    char a[64], b[64], err[256];
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0]))
            return glia_section_error(cfg, "inputs", GLIA_ESHAPE, "pointwise needs equal shapes: input 1 is %s, input %d is %s",
                                      glia_shape_str(&in[0], a, sizeof a), k + 1, glia_shape_str(&in[k], b, sizeof b));
    struct pointwise *p = calloc(1, sizeof *p);
    if (!p) return glia_error(l->ctx, GLIA_ENOMEM, "pointwise: out of memory");
    p->n_in = n_in;
    const char *text = glia_section_str(cfg, "expr");
    if (expr_parse(text, n_in, &p->f, err, sizeof err)) {
        pointwise_free(p);
        /* the parser's messages start "expr: "; the section error already names the key */
        const char *msg = strncmp(err, "expr: ", 6) ? err : err + 6;
        return glia_section_error(cfg, "expr", GLIA_ECONFIG, "%s", msg);
    }
    for (int k = 0; k < n_in; k++)
        if (!(p->df[k] = expr_diff(p->f, k))) {
            pointwise_free(p);
            return glia_error(l->ctx, GLIA_ENOMEM, "pointwise: out of memory");
        }
    l->priv = p;
    return GLIA_OK;
}

static glia_status pointwise_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                   struct glia_shape *out)
{
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0])) return GLIA_ESHAPE;
    *out = in[0];
    return GLIA_OK;
}

/* y(n) = f(x_1(n), ..., x_k(n)) */
static glia_status pointwise_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct pointwise *p = l->priv;
    const float *vars[EXPR_MAX_VARS] = {0};
    for (int k = 0; k < a->n_in && k < EXPR_MAX_VARS; k++) vars[k] = glia_tensor_f32(a->in[k]);
    if (expr_eval(p->f, vars, glia_tensor_numel(a->out), glia_tensor_f32(a->out)))
        return glia_error(l->ctx, GLIA_ENOMEM, "pointwise [%s]: out of memory", l->name);
    return GLIA_OK;
}

/* dx_k(n) (+)= dy(n) * df/dx_k(x_1(n), ..., x_k(n)) */
static glia_status pointwise_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct pointwise *p = l->priv;
    const float *vars[EXPR_MAX_VARS] = {0};
    for (int k = 0; k < a->n_in && k < EXPR_MAX_VARS; k++) vars[k] = glia_tensor_f32(a->in[k]);
    const float *dy = glia_tensor_f32(a->dout);
    int64_t n = glia_tensor_numel(a->dout);
    for (int k = 0; k < a->n_in && k < EXPR_MAX_VARS; k++) {
        if (!a->din[k]) continue;
        if (expr_eval_ex(p->df[k], vars, n, dy, a->din_accumulate[k], glia_tensor_f32(a->din[k])))
            return glia_error(l->ctx, GLIA_ENOMEM, "pointwise [%s]: out of memory", l->name);
    }
    return GLIA_OK;
}

/* one per computing IR node (a transcendental counts as one) per element */
static uint64_t pointwise_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct pointwise *p = l->priv;
    return (uint64_t)(p ? expr_op_count(p->f) : 0) * (uint64_t)glia_shape_numel(&in[0]);
}

static const struct glia_key pointwise_keys[] = {
    GLIA_KEY("expr", GLIA_KEY_STRING, NULL, "the function, e.g. x * sigmoid(x); inputs are x, y, z, w",
             .required = true),
    GLIA_KEY_END,
};

static const struct glia_layer_ops pointwise_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "pointwise",
    .impl = "cpu",
    .doc = "elementwise expression of 1 to 4 inputs of one shape (expr = x * sigmoid(x)), symbolic backward",
    .keys = pointwise_keys,
    .min_inputs = 1,
    .max_inputs = 4,
    .flags = GLIA_LAYER_CHANNELS_LAST, /* elementwise: any memory format */
    .device_type = GLIA_DEVICE_CPU,
    .create = pointwise_create,
    .destroy = pointwise_destroy,
    .infer_shape = pointwise_infer,
    .forward = pointwise_forward,
    .backward = pointwise_backward,
    .flops = pointwise_flops,
};

static glia_status pointwise_init(struct glia_registry *r) { return glia_register_layer(r, &pointwise_ops); }

GLIA_PLUGIN_DEFINE(pointwise, "1.0", "MIT", "elementwise expression layer with symbolic backward (CPU)", pointwise_init)
