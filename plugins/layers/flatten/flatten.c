/* plugins/layers/flatten — layer type flatten, reshaping (N, d1, d2, ...) into (N, d1*d2*...), and its CPU
 * kernel. Not a general reshape or transpose: the batch dimension is kept, order is row-major (NCHW, like
 * PyTorch: a channels_last input is transposed, so the next layer's weights mean the same). The CUDA kernel is
 * in cuda.so. */
#include <glia/glia.h>
#include <string.h>

/* Refuses an input without a batch dimension; flatten has no attributes. */
static glia_status flatten_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                  int n_in)
{
    if (in[0].ndim < 1) return glia_section_error(cfg, NULL, GLIA_ESHAPE, "flatten needs a batch dimension");
    return GLIA_OK;
}

/* out = (N, product of the other dimensions) */
static glia_status flatten_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                 struct glia_shape *out)
{
    int64_t n = in[0].dim[0];
    *out = glia_shape_make(2, (int64_t[]){n, n ? glia_shape_numel(&in[0]) / n : 0});
    return GLIA_OK;
}

/* t's (N, features) memory seen as the contiguous 4-D shape of x (N, C, H, W) */
static glia_status as_4d(const struct glia_tensor *t, const struct glia_tensor *x, struct glia_tensor **out)
{
    return glia_tensor_view((struct glia_tensor *)t, 0, &x->shape, out);
}

/* y(N, C*H*W) = x(N, C, H, W); from channels_last x(N, H, W, C) a transpose */
static glia_status flatten_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_tensor *x = a->in[0];
    if (glia_tensor_memory_format(x) == GLIA_CONTIGUOUS) {
        memcpy(glia_tensor_f32(a->out), glia_tensor_f32(x), glia_tensor_nbytes(a->out));
        return GLIA_OK;
    }
    struct glia_tensor *y4;
    glia_status st = as_4d(a->out, x, &y4);
    if (!st) st = glia_tensor_convert(y4, x, false);
    glia_tensor_release(y4);
    return st;
}

/* dx (+)= dy in the layout of dx */
static glia_status flatten_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    if (glia_tensor_memory_format(a->din[0]) == GLIA_CHANNELS_LAST) {
        struct glia_tensor *dy4;
        glia_status st = as_4d(a->dout, a->din[0], &dy4);
        if (!st) st = glia_tensor_convert(a->din[0], dy4, a->din_accumulate[0]);
        glia_tensor_release(dy4);
        return st;
    }
    const float *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int64_t n = glia_tensor_numel(a->dout);
    if (!a->din_accumulate[0]) {
        memcpy(dx, dy, (size_t)n * sizeof(float));
        return GLIA_OK;
    }
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
    return GLIA_OK;
}

static const struct glia_layer_type flatten_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "flatten",
    .doc = "(N, ...) -> (N, features)",
    .min_inputs = 1,
    .max_inputs = 1,
    .create = flatten_create,
    .infer_shape = flatten_infer,
};

static const struct glia_kernel flatten_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "flatten",
    .impl = "cpu",
    .doc = "copy, or a transpose from channels_last",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT,
    .forward = flatten_forward,
    .backward = flatten_backward,
};

static glia_status flatten_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &flatten_type);
    return st ? st : glia_register_kernel(r, &flatten_cpu);
}

GLIA_PLUGIN_DEFINE(flatten, "2.0", "MIT", "flatten all but the batch dimension", flatten_init)
