/* plugins/layers/avgpool2d — layer type avgpool2d (2-D average pooling of (N, C, H, W): a size x size window, a
 * stride and a zero padding border counted in the mean, PyTorch's count_include_pad) and its CPU kernel (OpenMP), in
 * NCHW (contiguous) or NHWC (channels_last) memory format. Not ceil-mode. */
#include <glia/glia.h>
#include <glia/types/pool2d.h>
#include <string.h>

static const struct glia_key avgpool_keys[] = {
    GLIA_POOL2D_KEYS("implicit zero border on each side (at most size/2)"), GLIA_KEY_END};

/* y(N, OH, OW, C) = sum over i, j < k of x(N, oh*s - p + i, ow*s - p + j, C) / (k*k), padding = 0, summed in
 * the NCHW path's order. Rows (n, oh) run in parallel; the channel loop is innermost. */
static void avgpool_forward_nhwc(const struct glia_pool2d_attrs *d, const float *x, float *y, int64_t N, int64_t C,
                                 int64_t H, int64_t W, int64_t OH, int64_t OW)
{
    float inv = 1.0f / (float)(d->k * d->k);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N * OH; r++) {
        int64_t nb = r / OH, h0, h1;
        glia_pool2d_window(d, r % OH, H, &h0, &h1);
        for (int64_t ow = 0; ow < OW; ow++) {
            int64_t w0, w1;
            glia_pool2d_window(d, ow, W, &w0, &w1);
            float *yo = y + (r * OW + ow) * C;
            for (int64_t c = 0; c < C; c++) yo[c] = 0.0f;
            for (int64_t h = h0; h < h1; h++)
                for (int64_t w = w0; w < w1; w++) {
                    const float *xw = x + ((nb * H + h) * W + w) * C;
                    for (int64_t c = 0; c < C; c++) yo[c] += xw[c];
                }
            for (int64_t c = 0; c < C; c++) yo[c] *= inv;
        }
    }
}

/* y(N, C, OH, OW) = sum over i, j < k of x(N, C, oh*s - p + i, ow*s - p + j) / (k*k), padding = 0 */
static glia_status avgpool_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_pool2d_attrs *d = l->attrs;
    const struct glia_shape *xs = &a->in[0]->shape, *ys = &a->out->shape;
    int64_t planes = xs->dim[0] * xs->dim[1], H = xs->dim[2], W = xs->dim[3], OH = ys->dim[2], OW = ys->dim[3];
    float inv = 1.0f / (float)(d->k * d->k);
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    if (glia_tensor_memory_format(a->in[0]) == GLIA_CHANNELS_LAST) {
        avgpool_forward_nhwc(d, x, y, xs->dim[0], xs->dim[1], H, W, OH, OW);
        return GLIA_OK;
    }
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *xp = x + pl * H * W;
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t h0, h1;
            glia_pool2d_window(d, oh, H, &h0, &h1);
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t w0, w1;
                glia_pool2d_window(d, ow, W, &w0, &w1);
                float sum = 0.0f;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) sum += xp[h * W + w];
                y[(pl * OH + oh) * OW + ow] = sum * inv;
            }
        }
    }
    return GLIA_OK;
}

/* dx(N, h, w, C) (+)= sum over the windows that hold (h, w) of dy(N, oh, ow, C) / (k*k). Input rows (n, h) run
 * in parallel, each gathering from the output rows whose windows hold h in (oh, ow) order, so overlapping
 * windows add up in the order of the NCHW scatter; the channel loop is innermost. */
static void avgpool_backward_nhwc(const struct glia_pool2d_attrs *d, const float *dy, float *dx, int add, int64_t N,
                                  int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW)
{
    float inv = 1.0f / (float)(d->k * d->k);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N * H; r++) {
        int64_t nb = r / H, oh0, oh1;
        float *dxr = dx + r * W * C;
        if (!add) memset(dxr, 0, (size_t)(W * C) * sizeof *dxr);
        glia_pool2d_span(d, r % H, OH, &oh0, &oh1);
        for (int64_t oh = oh0; oh < oh1; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t w0, w1;
                glia_pool2d_window(d, ow, W, &w0, &w1);
                const float *dyo = dy + ((nb * OH + oh) * OW + ow) * C;
                for (int64_t w = w0; w < w1; w++) {
                    float *dxw = dxr + w * C;
                    for (int64_t c = 0; c < C; c++) dxw[c] += dyo[c] * inv;
                }
            }
    }
}

/* dx(N, C, h, w) (+)= sum over the windows that hold (h, w) of dy(N, C, oh, ow) / (k*k);
 * overlapping windows add up. Planes run in parallel, each plane's scatter is serial. */
static glia_status avgpool_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_pool2d_attrs *d = l->attrs;
    if (!a->din[0]) return GLIA_OK;
    const struct glia_shape *xs = &a->in[0]->shape, *ys = &a->dout->shape;
    int64_t planes = xs->dim[0] * xs->dim[1], H = xs->dim[2], W = xs->dim[3], OH = ys->dim[2], OW = ys->dim[3];
    float inv = 1.0f / (float)(d->k * d->k);
    const float *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int add = a->din_accumulate[0];
    if (glia_tensor_memory_format(a->in[0]) == GLIA_CHANNELS_LAST) {
        avgpool_backward_nhwc(d, dy, dx, add, xs->dim[0], xs->dim[1], H, W, OH, OW);
        return GLIA_OK;
    }
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        float *dxp = dx + pl * H * W;
        const float *dyp = dy + pl * OH * OW;
        if (!add) memset(dxp, 0, (size_t)(H * W) * sizeof *dxp);
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t h0, h1;
            glia_pool2d_window(d, oh, H, &h0, &h1);
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t w0, w1;
                glia_pool2d_window(d, ow, W, &w0, &w1);
                float g = dyp[oh * OW + ow] * inv;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) dxp[h * W + w] += g;
            }
        }
    }
    return GLIA_OK;
}

static const struct glia_layer_type avgpool_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "avgpool2d",
    .doc = "2-D average pooling of (N, C, H, W): size x size window, stride, zero padding counted; NCHW or NHWC",
    .keys = avgpool_keys,
    GLIA_POOL2D_TYPE_SLOTS,
};

static const struct glia_kernel avgpool_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "avgpool2d",
    .impl = "cpu",
    .doc = "OpenMP; NCHW or NHWC",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT,
    .forward = avgpool_forward,
    .backward = avgpool_backward,
};

static glia_status avgpool_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &avgpool_type);
    return st ? st : glia_register_kernel(r, &avgpool_cpu);
}

GLIA_PLUGIN_DEFINE(avgpool2d, "2.0", "MIT", "2-D average pooling (CPU, OpenMP)", avgpool_init)
