/* plugins/layers/sigmoid — logistic sigmoid y = 1 / (1 + exp(-x)), any shape, on the CPU (OpenMP).
 * Not hard sigmoid, not SiLU/swish (x * sigmoid(x)), not a fused sigmoid + binary cross-entropy. */
#include <glia/glia.h>
#include <math.h>
#include "../activation/activation_desc.h"

/* y(n) = 1 / (1 + exp(-x(n)))
 * computed as 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0 with e = exp(-|x|) <= 1,
 * so exp never overflows and y saturates cleanly to 0 or 1 for large |x|. */
static glia_status sigmoid_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    int64_t n = glia_tensor_numel(a->out);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float e = expf(-fabsf(x[i]));
        y[i] = x[i] >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    }
    return GLIA_OK;
}

/* dx(n) (+)= dy(n) * y(n) * (1 - y(n)) */
static glia_status sigmoid_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    const float *y = glia_tensor_f32(a->out), *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int64_t n = glia_tensor_numel(a->out);
    if (a->din_accumulate[0]) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * y[i] * (1.0f - y[i]);
    } else {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
    }
    return GLIA_OK;
}

static const struct glia_layer_ops sigmoid_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "sigmoid",
    .impl = "cpu",
    .doc = GLIA__SIGMOID_DOC,
    .keys = NULL,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_INPUT, /* elementwise: any format */
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__activation_create,
    .infer_shape = glia__activation_infer,
    .forward = sigmoid_forward,
    .backward = sigmoid_backward,
    .flops = glia__sigmoid_flops,
};

static glia_status sigmoid_init(struct glia_registry *r) { return glia_register_layer(r, &sigmoid_ops); }

GLIA_PLUGIN_DEFINE(sigmoid, "1.0", "MIT", "sigmoid activation (CPU, OpenMP)", sigmoid_init)
