/* plugins/layers/add — layer type add, the elementwise sum of 2 or more inputs of one shape (residual
 * connections), and its CPU kernel. Not broadcasting: every input must have exactly the output's shape. */
#include <glia/glia.h>
#include <stdio.h>

/* Checks that every input has input 1's shape; keeps nothing. */
static glia_status add_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                              int n_in)
{
    char a[64], b[64];
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0]))
            return glia_section_error(cfg, "inputs", GLIA_ESHAPE, "add needs equal shapes: input 1 is %s, input %d is %s",
                                      glia_shape_str(&in[0], a, sizeof a), k + 1, glia_shape_str(&in[k], b, sizeof b));
    return GLIA_OK;
}

/* The output has the inputs' (common) shape. */
static glia_status add_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in, struct glia_shape *out)
{
    for (int k = 1; k < n_in; k++)
        if (!glia_shape_equal(&in[k], &in[0])) return GLIA_ESHAPE;
    *out = in[0];
    return GLIA_OK;
}

/* n_in - 1 additions per element. */
static uint64_t add_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return (uint64_t)(n_in - 1) * (uint64_t)glia_shape_numel(&in[0]);
}

/* x + y + ..., summed left to right as the kernels do; none beyond the expression language's 4 variables */
static int add_text(const struct glia_layer *l, int n_in, char *buf, size_t size)
{
    static const char *const sums[] = {"x", "x + y", "x + y + z", "x + y + z + w"};
    return n_in >= 1 && n_in <= 4 ? snprintf(buf, size, "%s", sums[n_in - 1]) : -1;
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

static const struct glia_layer_type add_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "add",
    .doc = "elementwise sum of 2 or more inputs of one shape (inputs = a, b, ...)",
    .min_inputs = 2,
    .max_inputs = -1,
    .create = add_create,
    .infer_shape = add_infer,
    .flops = add_flops,
    .pointwise = add_text,
};

static const struct glia_kernel add_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "add",
    .impl = "cpu",
    .doc = "OpenMP",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT |
             GLIA_KERNEL_DECODE, /* elementwise: any format */
    .forward = add_forward,
    .backward = add_backward,
};

static glia_status add_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &add_type);
    return st ? st : glia_register_kernel(r, &add_cpu);
}

GLIA_PLUGIN_DEFINE(add, "2.0", "MIT", "residual add of N inputs (CPU)", add_init)
