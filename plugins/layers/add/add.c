/* plugins/layers/add — elementwise sum of N inputs of one shape (residual connections), CPU.
 * Not broadcasting: every input must have exactly the output's shape. */
#include <glia/glia.h>

static glia_status add_create(struct glia_layer *l, const struct glia_section *cfg,
                              const struct glia_shape *in, int n_in)
{
    char a[64], b[64];
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0]))
            return glia_section_error(cfg, "inputs", GLIA_ESHAPE, "add needs equal shapes: input 1 is %s, input %d is %s",
                                      glia_shape_str(&in[0], a, sizeof a), k + 1, glia_shape_str(&in[k], b, sizeof b));
    return GLIA_OK;
}

static glia_status add_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                             struct glia_shape *out)
{
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0])) return GLIA_ESHAPE;
    *out = in[0];
    return GLIA_OK;
}

/* y(n) = sum_k x_k(n) */
static glia_status add_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    float *y = glia_tensor_f32(a->out);
    int64_t n = glia_tensor_numel(a->out);
    const float *x0 = glia_tensor_f32(a->in[0]);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = x0[i];
    for (int k = 1; k < a->n_in; k++) {
        const float *x = glia_tensor_f32(a->in[k]);
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) y[i] += x[i];
    }
    return GLIA_OK;
}

/* dx_k(n) (+)= dy(n) for every input k */
static glia_status add_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const float *dy = glia_tensor_f32(a->dout);
    int64_t n = glia_tensor_numel(a->dout);
    for (int k = 0; k < a->n_in; k++) {
        if (!a->din[k]) continue;
        float *dx = glia_tensor_f32(a->din[k]);
        if (a->din_accumulate[k]) {
#pragma omp parallel for simd schedule(static)
            for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
        } else {
#pragma omp parallel for simd schedule(static)
            for (int64_t i = 0; i < n; i++) dx[i] = dy[i];
        }
    }
    return GLIA_OK;
}

static uint64_t add_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return (uint64_t)(n_in - 1) * (uint64_t)glia_shape_numel(&in[0]);
}

static const struct glia_layer_ops add_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "add",
    .impl = "cpu",
    .doc = "elementwise sum of 2 or more inputs of one shape (inputs = a, b, ...)",
    .keys = NULL,
    .min_inputs = 2,
    .max_inputs = -1,
    .flags = GLIA_LAYER_CHANNELS_LAST, /* elementwise: any memory format */
    .device_type = GLIA_DEVICE_CPU,
    .create = add_create,
    .infer_shape = add_infer,
    .forward = add_forward,
    .backward = add_backward,
    .flops = add_flops,
};

static glia_status add_init(struct glia_registry *r) { return glia_register_layer(r, &add_ops); }

GLIA_PLUGIN_DEFINE(add, "1.0", "MIT", "residual add of N inputs (CPU)", add_init)
