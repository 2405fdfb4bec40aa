/* plugins/layers/leaky_relu — leaky rectified linear unit y = x > 0 ? x : negative_slope * x,
 * any shape, on the CPU (OpenMP). Not PReLU: the slope is a fixed key, not a learned parameter. */
#include <glia/glia.h>
#include <stdlib.h>

struct leaky_relu {
    float slope;
};

static const struct glia_key leaky_relu_keys[] = {
    GLIA_KEY("negative_slope", GLIA_KEY_FLOAT, "0.01", "slope for x <= 0", .min = 0, .max = 1),
    GLIA_KEY_END};

static glia_status leaky_relu_create(struct glia_layer *l, const struct glia_section *cfg,
                                     const struct glia_shape *in, int n_in)
{
    struct leaky_relu *p = malloc(sizeof *p);
    if (!p) return GLIA_ENOMEM;
    p->slope = (float)glia_section_float(cfg, "negative_slope");
    l->priv = p;
    return GLIA_OK;
}

static void leaky_relu_destroy(struct glia_layer *l) { free(l->priv); }

static glia_status leaky_relu_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                    struct glia_shape *out)
{
    *out = in[0];
    return GLIA_OK;
}

/* y(n) = x(n) > 0 ? x(n) : slope * x(n) */
static glia_status leaky_relu_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const float s = ((const struct leaky_relu *)l->priv)->slope;
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
    const float s = ((const struct leaky_relu *)l->priv)->slope;
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

/* compare and multiply: 2 per element. */
static uint64_t leaky_relu_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return 2u * (uint64_t)glia_shape_numel(&in[0]);
}

static const struct glia_layer_ops leaky_relu_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "leaky_relu",
    .impl = "cpu",
    .doc = "y = x > 0 ? x : negative_slope * x",
    .keys = leaky_relu_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_LAYER_CHANNELS_LAST, /* elementwise: any memory format */
    .device_type = GLIA_DEVICE_CPU,
    .create = leaky_relu_create,
    .destroy = leaky_relu_destroy,
    .infer_shape = leaky_relu_infer,
    .forward = leaky_relu_forward,
    .backward = leaky_relu_backward,
    .flops = leaky_relu_flops,
};

static glia_status leaky_relu_init(struct glia_registry *r) { return glia_register_layer(r, &leaky_relu_ops); }

GLIA_PLUGIN_DEFINE(leaky_relu, "1.0", "MIT", "leaky ReLU activation (CPU, OpenMP)", leaky_relu_init)
