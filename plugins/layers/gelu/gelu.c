/* plugins/layers/gelu — GELU y = x * Phi(x) in the exact erf form (PyTorch's approximate='none'),
 * any shape, on the CPU (OpenMP). Not the tanh approximation (approximate='tanh'), not SiLU. */
#include <glia/glia.h>
#include <math.h>

#define GELU_INV_SQRT2 0.70710678118654752440f    /* 1 / sqrt(2) */
#define GELU_INV_SQRT2PI 0.39894228040143267794f  /* 1 / sqrt(2 pi) */

static glia_status gelu_create(struct glia_layer *l, const struct glia_section *cfg,
                               const struct glia_shape *in, int n_in)
{
    return GLIA_OK;
}

static glia_status gelu_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                              struct glia_shape *out)
{
    *out = in[0];
    return GLIA_OK;
}

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

/* scale, erf, add, two multiplies: 5 per element (a transcendental counts as one). */
static uint64_t gelu_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return 5u * (uint64_t)glia_shape_numel(&in[0]);
}

static const struct glia_layer_ops gelu_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "gelu",
    .impl = "cpu",
    .doc = "y = 0.5 x (1 + erf(x / sqrt(2)))",
    .keys = NULL,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_LAYER_CHANNELS_LAST, /* elementwise: any memory format */
    .device_type = GLIA_DEVICE_CPU,
    .create = gelu_create,
    .infer_shape = gelu_infer,
    .forward = gelu_forward,
    .backward = gelu_backward,
    .flops = gelu_flops,
};

static glia_status gelu_init(struct glia_registry *r) { return glia_register_layer(r, &gelu_ops); }

GLIA_PLUGIN_DEFINE(gelu, "1.0", "MIT", "GELU activation, erf form (CPU, OpenMP)", gelu_init)
