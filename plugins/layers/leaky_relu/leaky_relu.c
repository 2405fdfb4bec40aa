/* plugins/layers/leaky_relu — leaky rectified linear unit y = x > 0 ? x : negative_slope * x,
 * any shape, on the CPU (OpenMP). Not PReLU: the slope is a fixed key, not a learned parameter. */
#include <glia/glia.h>
#include "../activation/activation_desc.h"

/* y(n) = x(n) > 0 ? x(n) : slope * x(n) */
static glia_status leaky_relu_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const float s = ((const struct glia__leaky_relu *)l->priv)->slope;
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    int64_t n = glia_tensor_numel(a->out);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : s * x[i];
    return GLIA_OK;
}

/* dx(n) (+)= dy(n) * (x(n) > 0 ? 1 : slope)
 * decided on x, not y: with slope 0, y = 0 would not tell the sides apart. */
static glia_status leaky_relu_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    const float s = ((const struct glia__leaky_relu *)l->priv)->slope;
    const float *x = glia_tensor_f32(a->in[0]), *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int64_t n = glia_tensor_numel(a->in[0]);
    if (a->din_accumulate[0]) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] += x[i] > 0.0f ? dy[i] : s * dy[i];
    } else {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] = x[i] > 0.0f ? dy[i] : s * dy[i];
    }
    return GLIA_OK;
}

static const struct glia_layer_ops leaky_relu_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "leaky_relu",
    .impl = "cpu",
    .doc = GLIA__LEAKY_RELU_DOC,
    .keys = glia__leaky_relu_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_OUTPUT, /* elementwise: any format */
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__leaky_relu_create,
    .destroy = glia__leaky_relu_destroy,
    .infer_shape = glia__activation_infer,
    .forward = leaky_relu_forward,
    .backward = leaky_relu_backward,
    .flops = glia__leaky_relu_flops,
};

static glia_status leaky_relu_init(struct glia_registry *r) { return glia_register_layer(r, &leaky_relu_ops); }

GLIA_PLUGIN_DEFINE(leaky_relu, "1.0", "MIT", "leaky ReLU activation (CPU, OpenMP)", leaky_relu_init)
