/* plugins/layers/gelu — GELU y = x * Phi(x) in the exact erf form (PyTorch's approximate='none'),
 * any shape, on the CPU (OpenMP). Not the tanh approximation (approximate='tanh'), not SiLU. */
#include <glia/glia.h>
#include <math.h>
#include "../activation/activation_desc.h"

#define GELU_INV_SQRT2 0.70710678118654752440f    /* 1 / sqrt(2) */
#define GELU_INV_SQRT2PI 0.39894228040143267794f  /* 1 / sqrt(2 pi) */

/* y(n) = 0.5 * x(n) * (1 + erf(x(n) / sqrt(2))) */
static glia_status gelu_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    int64_t n = glia_tensor_numel(a->out);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * GELU_INV_SQRT2));
    return GLIA_OK;
}

/* dx(n) (+)= dy(n) * (0.5 * (1 + erf(x(n) / sqrt(2))) + x(n) * exp(-x(n)^2 / 2) / sqrt(2 pi))
 * i.e. Phi(x) + x * phi(x); needs the input x, not the output. */
static glia_status gelu_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    const float *x = glia_tensor_f32(a->in[0]), *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int64_t n = glia_tensor_numel(a->in[0]);
    if (a->din_accumulate[0]) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float cdf = 0.5f * (1.0f + erff(x[i] * GELU_INV_SQRT2));
            float pdf = expf(-0.5f * x[i] * x[i]) * GELU_INV_SQRT2PI;
            dx[i] += dy[i] * (cdf + x[i] * pdf);
        }
    } else {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float cdf = 0.5f * (1.0f + erff(x[i] * GELU_INV_SQRT2));
            float pdf = expf(-0.5f * x[i] * x[i]) * GELU_INV_SQRT2PI;
            dx[i] = dy[i] * (cdf + x[i] * pdf);
        }
    }
    return GLIA_OK;
}

static const struct glia_layer_ops gelu_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "gelu",
    .impl = "cpu",
    .doc = GLIA__GELU_DOC,
    .keys = NULL,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_OUTPUT, /* elementwise: any format */
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__activation_create,
    .infer_shape = glia__activation_infer,
    .forward = gelu_forward,
    .backward = gelu_backward,
    .flops = glia__gelu_flops,
};

static glia_status gelu_init(struct glia_registry *r) { return glia_register_layer(r, &gelu_ops); }

GLIA_PLUGIN_DEFINE(gelu, "1.0", "MIT", "GELU activation, erf form (CPU, OpenMP)", gelu_init)
