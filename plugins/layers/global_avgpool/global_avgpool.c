/* plugins/layers/global_avgpool — layer type global_avgpool (the mean over H and W of (N, C, H, W), giving (N, C):
 * AdaptiveAvgPool2d(1) then flatten) and its CPU kernel (OpenMP), from an input in either memory format (NCHW or
 * channels_last NHWC; the output is 2-D). Not windowed pooling (see avgpool2d); no keys, no attributes. */
#include <glia/glia.h>

/* Checks that in[0] is (N, C, H, W). */
static glia_status gap_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                              int n_in)
{
    (void)l;
    (void)n_in;
    char a[64];
    if (in[0].ndim != 4)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "global_avgpool expects (N, C, H, W) input, got %s",
                                  glia_shape_str(&in[0], a, sizeof a));
    return GLIA_OK;
}

/* (N, C, H, W) -> (N, C) */
static glia_status gap_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in, struct glia_shape *out)
{
    (void)l;
    (void)n_in;
    if (in[0].ndim != 4) return GLIA_ESHAPE;
    *out = glia_shape_make(2, (int64_t[]){in[0].dim[0], in[0].dim[1]});
    return GLIA_OK;
}

/* one add per input element */
static uint64_t gap_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    (void)l;
    (void)n_in;
    return (uint64_t)glia_shape_numel(&in[0]);
}

/* Channels of a channels_last row that one thread sums or spreads at a time. */
#define CBLOCK 64

/* y(N, C) = sum over h, w of x(N, h, w, C) / (H*W): per sample and block of channels, the rows are
 * added in h, w order in float, as the NCHW loop does, so both formats give the same bits. */
static void gap_forward_nhwc(const float *x, float *y, int64_t N, int64_t C, int64_t HW, float inv)
{
    int64_t nc = (C + CBLOCK - 1) / CBLOCK;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N * nc; t++) {
        int64_t n = t / nc, c0 = t % nc * CBLOCK, c1 = c0 + CBLOCK < C ? c0 + CBLOCK : C;
        float *yn = y + n * C;
        for (int64_t c = c0; c < c1; c++) yn[c] = 0.0f;
        for (int64_t i = 0; i < HW; i++) {
            const float *xr = x + (n * HW + i) * C;
            for (int64_t c = c0; c < c1; c++) yn[c] += xr[c];
        }
        for (int64_t c = c0; c < c1; c++) yn[c] *= inv;
    }
}

/* y(N, C) = sum over h, w of x(N, C, h, w) / (H*W) */
static glia_status gap_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_shape *xs = &a->in[0]->shape;
    int64_t planes = xs->dim[0] * xs->dim[1], HW = xs->dim[2] * xs->dim[3];
    float inv = 1.0f / (float)HW;
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    if (glia_tensor_memory_format(a->in[0]) == GLIA_CHANNELS_LAST) {
        gap_forward_nhwc(x, y, xs->dim[0], xs->dim[1], HW, inv);
        return GLIA_OK;
    }
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *xp = x + pl * HW;
        float sum = 0.0f;
        for (int64_t i = 0; i < HW; i++) sum += xp[i];
        y[pl] = sum * inv;
    }
    return GLIA_OK;
}

/* dx(N, h, w, C) (+)= dy(N, C) / (H*W), one row of C per (n, h, w) */
static void gap_backward_nhwc(const float *dy, float *dx, int64_t N, int64_t C, int64_t HW, float inv, int add)
{
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N * HW; r++) {
        const float *dyn = dy + r / HW * C;
        float *dxr = dx + r * C;
        if (add)
            for (int64_t c = 0; c < C; c++) dxr[c] += dyn[c] * inv;
        else
            for (int64_t c = 0; c < C; c++) dxr[c] = dyn[c] * inv;
    }
}

/* dx(N, C, h, w) (+)= dy(N, C) / (H*W) */
static glia_status gap_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    const struct glia_shape *xs = &a->in[0]->shape;
    int64_t planes = xs->dim[0] * xs->dim[1], HW = xs->dim[2] * xs->dim[3];
    float inv = 1.0f / (float)HW;
    const float *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int add = a->din_accumulate[0];
    if (glia_tensor_memory_format(a->din[0]) == GLIA_CHANNELS_LAST) {
        gap_backward_nhwc(dy, dx, xs->dim[0], xs->dim[1], HW, inv, add);
        return GLIA_OK;
    }
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        float g = dy[pl] * inv, *dxp = dx + pl * HW;
        if (add)
            for (int64_t i = 0; i < HW; i++) dxp[i] += g;
        else
            for (int64_t i = 0; i < HW; i++) dxp[i] = g;
    }
    return GLIA_OK;
}

static const struct glia_layer_type gap_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "global_avgpool",
    .doc = "mean over H and W: (N, C, H, W) (NCHW or NHWC) -> (N, C)",
    .min_inputs = 1,
    .max_inputs = 1,
    .create = gap_create,
    .infer_shape = gap_infer,
    .flops = gap_flops,
};

static const struct glia_kernel gap_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "global_avgpool",
    .impl = "cpu",
    .doc = "OpenMP; NCHW or NHWC, the same bits",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT,
    .forward = gap_forward,
    .backward = gap_backward,
};

static glia_status gap_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &gap_type);
    return st ? st : glia_register_kernel(r, &gap_cpu);
}

GLIA_PLUGIN_DEFINE(global_avgpool, "2.0", "MIT", "global average pooling (CPU, OpenMP)", gap_init)
