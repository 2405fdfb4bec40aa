/* softsign.c — an out-of-tree glia layer plugin: layer type softsign, y = x / (1 + |x|), any shape, and its
 * CPU kernel. Not part of glia itself: a template to copy, built against the installed SDK. softsign_omp.c
 * shows how a second plugin adds another kernel to this type. */
#include <math.h>
#include <glia/glia.h>

/* ---- the type: what softsign is, whatever computes it ---- */

/* Any input shape; no keys, no parameters, nothing to keep (attrs_size 0). */
static glia_status softsign_create(struct glia_layer *l, const struct glia_section *cfg,
                                   const struct glia_shape *in, int n_in)
{
    (void)l, (void)cfg, (void)in, (void)n_in;
    return GLIA_OK;
}

static glia_status softsign_infer_shape(const struct glia_layer *l, const struct glia_shape *in,
                                        int n_in, struct glia_shape *out)
{
    (void)l, (void)n_in;
    *out = in[0];
    return GLIA_OK;
}

/* Optional: work per forward for the summary table; an add and a divide per element. */
static uint64_t softsign_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    (void)l, (void)n_in;
    return 2u * (uint64_t)glia_shape_numel(&in[0]);
}

/* Optional: the type's elementwise meaning in the [pointwise] expression language. With it glia's
 * [graph] fuse_pointwise can fuse a softsign into a chain of elementwise layers (one pass over the data). */
static int softsign_pointwise(const struct glia_layer *l, int n_in, char *buf, size_t size)
{
    (void)l, (void)n_in;
    return snprintf(buf, size, "x / (1 + abs(x))");
}

static const struct glia_layer_type softsign_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "softsign",
    .doc = "softsign activation: y = x / (1 + |x|)",
    .keys = NULL,  /* no keys of its own */
    .min_inputs = 1,
    .max_inputs = 1,
    .create = softsign_create,
    .infer_shape = softsign_infer_shape,
    .flops = softsign_flops,
    .pointwise = softsign_pointwise,
};

/* ---- the CPU kernel: how ---- */

static glia_status softsign_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    int64_t n = glia_tensor_numel(a->out);
    if (!x || !y || glia_tensor_numel(a->in[0]) != n)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] softsign: expects host f32 tensors of equal size", l->name);
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
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] softsign: expects host f32 tensors of equal size", l->name);
    bool acc = a->din_accumulate && a->din_accumulate[0];
    for (int64_t i = 0; i < n; i++) {
        float d = 1.0f + fabsf(x[i]);
        float g = dy[i] / (d * d);
        dx[i] = acc ? dx[i] + g : g;
    }
    return GLIA_OK;
}

static const struct glia_kernel softsign_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "softsign",
    .impl = "cpu",  /* `impl = cpu` picks it; without impl, a CPU model runs the first CPU kernel registered */
    .doc = "one thread",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_BWD_NO_OUTPUT,  /* backward reads the input, not the output */
    .forward = softsign_forward,
    .backward = softsign_backward,
};

static glia_status softsign_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &softsign_type);
    return st ? st : glia_register_kernel(r, &softsign_cpu);
}

GLIA_PLUGIN_DEFINE(softsign, "1.0", "MIT", "softsign activation: x / (1 + |x|)", softsign_init)
