/* softsign.c — an out-of-tree glia layer plugin: the softsign activation y = x / (1 + |x|),
 * CPU, any shape. Not part of glia itself: a template to copy, built against the installed SDK. */
#include <math.h>
#include <glia/glia.h>

/* Any input shape; the output has the same shape. */
static glia_status softsign_create(struct glia_layer *l, const struct glia_section *cfg,
                                   const struct glia_shape *in, int n_in)
{
    (void)cfg;
    (void)in;
    (void)n_in;
    l->priv = NULL; /* no state: backward recomputes from the input */
    return GLIA_OK;
}

static glia_status softsign_infer_shape(const struct glia_layer *l, const struct glia_shape *in,
                                        int n_in, struct glia_shape *out)
{
    (void)l;
    (void)n_in;
    *out = in[0];
    return GLIA_OK;
}

static glia_status softsign_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    int64_t n = glia_tensor_numel(a->out);
    if (!x || !y || glia_tensor_numel(a->in[0]) != n)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] softsign: expects host f32 tensors of equal size",
                          l->name);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + fabsf(x[i]));
    return GLIA_OK;
}

/* dx = dy / (1 + |x|)^2. Per the gradient contract in glia/layer.h: write (=) din unless the
 * core asks to accumulate (+=); a NULL din needs no gradient. */
static glia_status softsign_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    const float *x = glia_tensor_f32(a->in[0]);
    const float *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int64_t n = glia_tensor_numel(a->in[0]);
    if (!x || !dy || !dx || glia_tensor_numel(a->dout) != n || glia_tensor_numel(a->din[0]) != n)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] softsign: expects host f32 tensors of equal size",
                          l->name);
    bool acc = a->din_accumulate && a->din_accumulate[0];
    for (int64_t i = 0; i < n; i++) {
        float d = 1.0f + fabsf(x[i]);
        float g = dy[i] / (d * d);
        dx[i] = acc ? dx[i] + g : g;
    }
    return GLIA_OK;
}

/* Optional: work per forward for the summary table; an add and a divide per element. */
static uint64_t softsign_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    (void)l;
    (void)n_in;
    return 2u * (uint64_t)glia_shape_numel(&in[0]);
}

static const struct glia_layer_ops softsign_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "softsign",
    .impl = "cpu",
    .doc = "softsign activation: y = x / (1 + |x|)",
    .keys = NULL,           /* no keys of its own */
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = 0,
    .device_type = GLIA_DEVICE_CPU,
    .create = softsign_create,
    .destroy = NULL,        /* nothing to free */
    .infer_shape = softsign_infer_shape,
    .forward = softsign_forward,
    .backward = softsign_backward,
    .flops = softsign_flops,
};

static glia_status softsign_init(struct glia_registry *r)
{
    return glia_register_layer(r, &softsign_ops);
}

GLIA_PLUGIN_DEFINE(softsign, "1.0", "MIT", "softsign activation: x / (1 + |x|)", softsign_init)
