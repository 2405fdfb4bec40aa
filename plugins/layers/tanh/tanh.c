/* plugins/layers/tanh — hyperbolic tangent y = tanh(x), any shape, on the CPU (OpenMP).
 * Not hardtanh, not the tanh approximation of GELU (see plugins/layers/gelu). */
#include <glia/glia.h>
#include <math.h>
#include "../activation/activation_desc.h"

/* y(n) = tanh(x(n)) */
static glia_status tanh_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    int64_t n = glia_tensor_numel(a->out);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
    return GLIA_OK;
}

/* dx(n) (+)= dy(n) * (1 - y(n)^2) */
static glia_status tanh_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    const float *y = glia_tensor_f32(a->out), *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int64_t n = glia_tensor_numel(a->out);
    if (a->din_accumulate[0]) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] += dy[i] * (1.0f - y[i] * y[i]);
    } else {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    }
    return GLIA_OK;
}

static const struct glia_layer_ops tanh_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "tanh",
    .impl = "cpu",
    .doc = GLIA__TANH_DOC,
    .keys = NULL,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_INPUT, /* elementwise: any format */
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__activation_create,
    .infer_shape = glia__activation_infer,
    .forward = tanh_forward,
    .backward = tanh_backward,
    .flops = glia__tanh_flops,
};

static glia_status tanh_init(struct glia_registry *r) { return glia_register_layer(r, &tanh_ops); }

GLIA_PLUGIN_DEFINE(tanh, "1.0", "MIT", "tanh activation (CPU, OpenMP)", tanh_init)
