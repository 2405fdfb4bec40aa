/* plugins/layers/relu — rectified linear unit y = max(x, 0), any shape, on the CPU (OpenMP), with
 * PyTorch's edge cases (NaN in, NaN out). Not leaky or parametric ReLU. */
#include <glia/glia.h>
#include "../activation/activation_desc.h"

/* y(n) = x(n) < 0 ? 0 : x(n), torch.relu's clamp_min: NaN stays NaN (a diverging run shows it) and
 * -0 stays -0. One compare and a blend, like x > 0 ? x : 0. */
static glia_status relu_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    int64_t n = glia_tensor_numel(a->out);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = v < 0.0f ? 0.0f : v;
    }
    return GLIA_OK;
}

/* dx(n) (+)= y(n) <= 0 ? 0 : dy(n), torch's threshold_backward: dy passes where y is positive or NaN,
 * 0 at y = +-0. dy is read unconditionally: a select between loaded values vectorizes plainly, where
 * `y <= 0 ? 0 : dy[i]` makes the compiler use masked loads. */
static glia_status relu_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    const float *y = glia_tensor_f32(a->out), *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int64_t n = glia_tensor_numel(a->out);
    if (a->din_accumulate[0]) {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float g = dy[i];
            dx[i] += y[i] <= 0.0f ? 0.0f : g;
        }
    } else {
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float g = dy[i];
            dx[i] = y[i] <= 0.0f ? 0.0f : g;
        }
    }
    return GLIA_OK;
}

static const struct glia_layer_ops relu_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "relu",
    .impl = "cpu",
    .doc = GLIA__RELU_DOC,
    .keys = NULL,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_INPUT, /* elementwise: any format */
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__activation_create,
    .infer_shape = glia__activation_infer,
    .forward = relu_forward,
    .backward = relu_backward,
    .flops = glia__relu_flops,
};

static glia_status relu_init(struct glia_registry *r) { return glia_register_layer(r, &relu_ops); }

GLIA_PLUGIN_DEFINE(relu, "1.0", "MIT", "ReLU activation (CPU, OpenMP)", relu_init)
