/* plugins/layers/add — elementwise sum of N inputs of one shape (residual connections), CPU.
 * Not broadcasting: every input must have exactly the output's shape. */
#include <glia/glia.h>
#include "add_desc.h"

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

static const struct glia_layer_ops add_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "add",
    .impl = "cpu",
    .doc = GLIA__ADD_DOC,
    .keys = NULL,
    .min_inputs = 2,
    .max_inputs = -1,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_INPUT | GLIA_LAYER_BWD_NO_OUTPUT, /* elementwise: any format */
    .device_type = GLIA_DEVICE_CPU,
    .create = glia__add_create,
    .infer_shape = glia__add_infer,
    .forward = add_forward,
    .backward = add_backward,
    .flops = glia__add_flops,
};

static glia_status add_init(struct glia_registry *r) { return glia_register_layer(r, &add_ops); }

GLIA_PLUGIN_DEFINE(add, "1.0", "MIT", "residual add of N inputs (CPU)", add_init)
