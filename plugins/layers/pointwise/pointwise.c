/* plugins/layers/pointwise — an elementwise function of 1 to 4 inputs of one shape, written as
 * an expression (`expr = x * sigmoid(x)`), CPU. Forward interprets the expression's IR (expr.h);
 * backward interprets its symbolic derivatives, built once at create. Not broadcasting: every
 * input has the output's shape. Not a fuser of other layers. */
#include <glia/glia.h>
#include <string.h>
#include "pointwise_desc.h"

/* y(n) = f(x_1(n), ..., x_k(n)); dropout() draws its mask from the step's seed */
static glia_status pointwise_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct glia__pointwise *p = l->priv;
    const float *vars[EXPR_MAX_VARS] = {0};
    for (int k = 0; k < a->n_in && k < EXPR_MAX_VARS; k++) vars[k] = glia_tensor_f32(a->in[k]);
    struct glia__seed_at seed = glia__seed_of(a);
    if (a->train) p->seed = seed;
    struct expr_site site = glia__pointwise_site(a->out, seed, a->train);
    if (expr_eval_ex(p->f, vars, glia_tensor_numel(a->out), NULL, false, &site, glia_tensor_f32(a->out)))
        return glia_error(l->ctx, GLIA_ENOMEM, "pointwise [%s]: out of memory", l->name);
    return GLIA_OK;
}

/* dx_k(n) (+)= dy(n) * df/dx_k(x_1(n), ..., x_k(n)), with the last training forward's mask */
static glia_status pointwise_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia__pointwise *p = l->priv;
    const float *vars[EXPR_MAX_VARS] = {0};
    for (int k = 0; k < a->n_in && k < EXPR_MAX_VARS; k++) vars[k] = glia_tensor_f32(a->in[k]);
    const float *dy = glia_tensor_f32(a->dout);
    int64_t n = glia_tensor_numel(a->dout);
    struct expr_site site = glia__pointwise_site(a->dout, p->seed, true);
    bool own[EXPR_MAX_VARS];  /* input k's gradient holds dy * df/dx_k alone */
    for (int k = 0; k < a->n_in && k < EXPR_MAX_VARS; k++) {
        own[k] = false;
        if (!a->din[k]) continue;
        float *dk = glia_tensor_f32(a->din[k]);
        int same = -1;  /* the same derivative already computed (x + y: both 1) */
        for (int j = 0; j < k && same < 0; j++)
            if (own[j] && (p->same_df[k] >> j & 1)) same = j;
        if (same >= 0) {
            const float *dj = glia_tensor_f32(a->din[same]);
            if (a->din_accumulate[k])
                for (int64_t i = 0; i < n; i++) dk[i] += dj[i];
            else if (dk != dj)
                memcpy(dk, dj, sizeof *dk * (size_t)n);
        } else if (expr_eval_ex(p->df[k], vars, n, dy, a->din_accumulate[k], &site, dk)) {
            return glia_error(l->ctx, GLIA_ENOMEM, "pointwise [%s]: out of memory", l->name);
        }
        for (int j = 0; j < k; j++)  /* an input fed by the same layer shares the buffer: no longer its own */
            if (own[j] && glia_tensor_f32(a->din[j]) == dk) own[j] = false;
        own[k] = !a->din_accumulate[k];
    }
    return GLIA_OK;
}

static const struct glia_layer_ops pointwise_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "pointwise",
    .impl = "cpu",
    .doc = GLIA__POINTWISE_DOC,
    .keys = glia__pointwise_keys,
    .min_inputs = 1,
    .max_inputs = 4,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_OUTPUT, /* any memory format; backward reads the inputs */
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__pointwise_create,
    .destroy = glia__pointwise_destroy,
    .infer_shape = glia__pointwise_infer,
    .forward = pointwise_forward,
    .backward = pointwise_backward,
    .flops = glia__pointwise_flops,
};

static glia_status pointwise_init(struct glia_registry *r) { return glia_register_layer(r, &pointwise_ops); }

GLIA_PLUGIN_DEFINE(pointwise, "1.0", "MIT", "elementwise expression layer with symbolic backward (CPU)", pointwise_init)
