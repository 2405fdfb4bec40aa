/* plugins/layers/global_avgpool — the mean over H and W of (N, C, H, W), giving (N, C), on the CPU
 * (OpenMP): AdaptiveAvgPool2d(1) then flatten. Not windowed pooling (see avgpool2d); no keys. */
#include <glia/glia.h>

static glia_status gap_create(struct glia_layer *l, const struct glia_section *cfg,
                              const struct glia_shape *in, int n_in)
{
    char a[64];
    if (in[0].ndim != 4)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE, "global_avgpool expects (N, C, H, W) input, got %s",
                                  glia_shape_str(&in[0], a, sizeof a));
    return GLIA_OK;
}

static glia_status gap_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                             struct glia_shape *out)
{
    if (in[0].ndim != 4) return GLIA_ESHAPE;
    *out = glia_shape_make(2, (int64_t[]){in[0].dim[0], in[0].dim[1]});
    return GLIA_OK;
}

/* y(N, C) = sum over h, w of x(N, C, h, w) / (H*W) */
static glia_status gap_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_shape *xs = &a->in[0]->shape;
    int64_t planes = xs->dim[0] * xs->dim[1], HW = xs->dim[2] * xs->dim[3];
    float inv = 1.0f / (float)HW;
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *xp = x + pl * HW;
        float sum = 0.0f;
        for (int64_t i = 0; i < HW; i++) sum += xp[i];
        y[pl] = sum * inv;
    }
    return GLIA_OK;
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

/* one add per input element */
static uint64_t gap_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    return (uint64_t)glia_shape_numel(&in[0]);
}

static const struct glia_layer_ops gap_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "global_avgpool",
    .impl = "cpu",
    .doc = "mean over H and W: (N, C, H, W) -> (N, C)",
    .keys = NULL,
    .min_inputs = 1,
    .max_inputs = 1,
    .device_type = GLIA_DEVICE_CPU,
    .create = gap_create,
    .infer_shape = gap_infer,
    .forward = gap_forward,
    .backward = gap_backward,
    .flops = gap_flops,
};

static glia_status gap_init(struct glia_registry *r) { return glia_register_layer(r, &gap_ops); }

GLIA_PLUGIN_DEFINE(global_avgpool, "1.0", "MIT", "global average pooling (CPU, OpenMP)", gap_init)
