/* plugins/layers/maxpool2d — layer type maxpool2d (2-D max pooling of (N, C, H, W): a size x size window, a stride
 * and a -inf padding border) and its CPU kernel (OpenMP), in NCHW (contiguous) or NHWC (channels_last) memory format.
 * Not dilated, ceil-mode or adaptive pooling; returns no indices. */
#include <glia/glia.h>
#include <glia/types/pool2d.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const struct glia_key maxpool_keys[] = {
    GLIA_POOL2D_KEYS("implicit -inf border on each side (at most size/2)"), GLIA_KEY_END};

/* l->state of the CPU kernel */
struct maxpool {
    int64_t *argmax;   /* per output element, in the output's memory order: plane offset (h*W + w) of its max
                          in the last training forward (owned) */
    int64_t n_argmax;  /* elements of argmax kept for backward (0: none) */
    int64_t cap;       /* elements allocated */
    enum glia_memory_format fmt;  /* memory format of that forward: the order of argmax */
};

static void maxpool_destroy(struct glia_layer *l) { free(((struct maxpool *)l->state)->argmax); }

/* y(N, OH, OW, C) = max over i, j < k of x(N, oh*s - p + i, ow*s - p + j, C), padding = -inf; arg (N, OH, OW, C)
 * (NULL: eval) gets the plane offset h*W + w of the first max in scan order, a NaN winning, as in NCHW.
 * Rows (n, oh) run in parallel; the channel loop is innermost. The window d is a copy in each thread, as in
 * maxpool_forward. */
static void maxpool_forward_nhwc(struct glia_pool2d_attrs d, const float *x, float *y, int64_t *arg, int64_t N,
                                 int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW)
{
#pragma omp parallel for schedule(static) firstprivate(d)
    for (int64_t r = 0; r < N * OH; r++) {
        int64_t nb = r / OH, h0, h1;
        glia_pool2d_window(&d, r % OH, H, &h0, &h1);
        for (int64_t ow = 0; ow < OW; ow++) {
            int64_t w0, w1;
            glia_pool2d_window(&d, ow, W, &w0, &w1);
            int64_t o = (r * OW + ow) * C;
            float *yo = y + o;
            const float *x0 = x + ((nb * H + h0) * W + w0) * C;  /* padding <= size/2: never empty */
            for (int64_t c = 0; c < C; c++) yo[c] = x0[c];
            if (arg) {
                int64_t *ao = arg + o;
                for (int64_t c = 0; c < C; c++) ao[c] = h0 * W + w0;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        const float *xw = x + ((nb * H + h) * W + w) * C;
                        int64_t bi = h * W + w;
                        for (int64_t c = 0; c < C; c++) {
                            float v = xw[c];
                            bool up = v > yo[c] || isnan(v);
                            yo[c] = up ? v : yo[c];
                            ao[c] = up ? bi : ao[c];
                        }
                    }
            } else {
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        const float *xw = x + ((nb * H + h) * W + w) * C;
                        for (int64_t c = 0; c < C; c++) {
                            float v = xw[c];
                            yo[c] = v > yo[c] || isnan(v) ? v : yo[c];
                        }
                    }
            }
        }
    }
}

/* y(N, C, OH, OW) = max over i, j < k of x(N, C, oh*s - p + i, ow*s - p + j), padding = -inf;
 * training keeps the plane offset of the first max in scan order (a NaN wins, like PyTorch) and the format */
static glia_status maxpool_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    /* the window, copied into each thread (firstprivate): the stores into arg (int64_t) could alias l->attrs, and
     * every window would load it again */
    const struct glia_pool2d_attrs d = *(const struct glia_pool2d_attrs *)l->attrs;
    struct maxpool *m = l->state;
    const struct glia_shape *xs = &a->in[0]->shape, *ys = &a->out->shape;
    int64_t planes = xs->dim[0] * xs->dim[1], H = xs->dim[2], W = xs->dim[3], OH = ys->dim[2], OW = ys->dim[3];
    int64_t n = planes * OH * OW;
    enum glia_memory_format fmt = glia_tensor_memory_format(a->in[0]);
    int64_t *arg = NULL;
    m->n_argmax = 0;
    if (a->train) {
        if (n > m->cap) {
            int64_t *g = realloc(m->argmax, (size_t)n * sizeof *g);
            if (!g) return GLIA_ENOMEM;
            m->argmax = g;
            m->cap = n;
        }
        arg = m->argmax;
        m->n_argmax = n;
        m->fmt = fmt;
    }
    const float *x = glia_tensor_f32(a->in[0]);
    float *y = glia_tensor_f32(a->out);
    if (fmt == GLIA_CHANNELS_LAST) {
        maxpool_forward_nhwc(d, x, y, arg, xs->dim[0], xs->dim[1], H, W, OH, OW);
        return GLIA_OK;
    }
    if (d.k == 2 && d.s == 2 && d.p == 0) {  /* the common 2x2 window: the same comparisons, unrolled */
#pragma omp parallel for schedule(static)
        for (int64_t pl = 0; pl < planes; pl++) {
            const float *xp = x + pl * H * W;
            for (int64_t oh = 0; oh < OH; oh++) {
                const float *r0 = xp + 2 * oh * W, *r1 = r0 + W;
                int64_t o = (pl * OH + oh) * OW, i0 = 2 * oh * W;
                for (int64_t ow = 0; ow < OW; ow++) {
                    float best = r0[2 * ow], v;
                    int64_t bi = i0 + 2 * ow;
                    if ((v = r0[2 * ow + 1]) > best || isnan(v)) best = v, bi = i0 + 2 * ow + 1;
                    if ((v = r1[2 * ow]) > best || isnan(v)) best = v, bi = i0 + W + 2 * ow;
                    if ((v = r1[2 * ow + 1]) > best || isnan(v)) best = v, bi = i0 + W + 2 * ow + 1;
                    y[o + ow] = best;
                    if (arg) arg[o + ow] = bi;
                }
            }
        }
        return GLIA_OK;
    }
#pragma omp parallel for schedule(static) firstprivate(d)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *xp = x + pl * H * W;
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t h0, h1;
            glia_pool2d_window(&d, oh, H, &h0, &h1);
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t w0, w1;
                glia_pool2d_window(&d, ow, W, &w0, &w1);
                int64_t bi = h0 * W + w0;  /* padding <= size/2: every window holds an input element */
                float best = xp[bi];
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        float v = xp[h * W + w];
                        if (v > best || isnan(v)) {
                            best = v;
                            bi = h * W + w;
                        }
                    }
                int64_t o = (pl * OH + oh) * OW + ow;
                y[o] = best;
                if (arg) arg[o] = bi;
            }
        }
    }
    return GLIA_OK;
}

/* dx(N, H, W, C) (+)= sum of dy(N, OH, OW, C) over the outputs whose max x(N, h, w, C) was, arg (N, OH, OW, C).
 * Without overlap (size <= stride) output rows scatter in parallel; with overlap input rows (n, h) run in
 * parallel, each gathering from the output rows whose windows hold h in (oh, ow) order, so overlapping
 * windows add up in the order of the NCHW scatter. */
static void maxpool_backward_nhwc(const struct glia_pool2d_attrs *d, const int64_t *arg, const float *dy, float *dx,
                                  int add, int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW)
{
    if (d->k <= d->s) {  /* windows do not overlap: each output row scatters into rows no other one touches */
        if (!add) memset(dx, 0, (size_t)(N * H * W * C) * sizeof *dx);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < N * OH; r++) {
            float *dxn = dx + r / OH * H * W * C;
            const int64_t *ao = arg + r * OW * C;
            const float *dyo = dy + r * OW * C;
            for (int64_t ow = 0; ow < OW; ow++)
                for (int64_t c = 0; c < C; c++) dxn[ao[ow * C + c] * C + c] += dyo[ow * C + c];
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N * H; r++) {
        int64_t nb = r / H, h = r % H, oh0, oh1;
        float *dxr = dx + r * W * C;
        if (!add) memset(dxr, 0, (size_t)(W * C) * sizeof *dxr);
        glia_pool2d_span(d, h, OH, &oh0, &oh1);
        for (int64_t oh = oh0; oh < oh1; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t o = ((nb * OH + oh) * OW + ow) * C;
                const int64_t *ao = arg + o;
                const float *dyo = dy + o;
                for (int64_t c = 0; c < C; c++) {
                    int64_t w = ao[c] - h * W;  /* in [0, W) when the max lies on row h */
                    if (w >= 0 && w < W) dxr[w * C + c] += dyo[c];
                }
            }
    }
}

/* dx(N, C, H, W) (+)= sum of dy(N, C, OH, OW) over the outputs whose max x(N, C, h, w) was;
 * overlapping windows add up. Planes run in parallel, each plane's scatter is serial. */
static glia_status maxpool_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct maxpool *m = l->state;
    if (!a->din[0]) return GLIA_OK;
    const struct glia_shape *xs = &a->in[0]->shape, *ys = &a->dout->shape;
    int64_t planes = xs->dim[0] * xs->dim[1], HW = xs->dim[2] * xs->dim[3], OHW = ys->dim[2] * ys->dim[3];
    enum glia_memory_format fmt = glia_tensor_memory_format(a->in[0]);
    if (m->n_argmax != planes * OHW)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] maxpool2d backward needs a training forward just before it", l->name);
    if (m->fmt != fmt)
        return glia_error(l->ctx, GLIA_EINVAL,
                          "[%s] maxpool2d backward needs a training forward just before it in its memory format "
                          "(%s, got %s)", l->name, glia_memory_format_name(m->fmt), glia_memory_format_name(fmt));
    const int64_t *arg = m->argmax;
    const float *dy = glia_tensor_f32(a->dout);
    float *dx = glia_tensor_f32(a->din[0]);
    int add = a->din_accumulate[0];
    if (fmt == GLIA_CHANNELS_LAST) {
        maxpool_backward_nhwc(l->attrs, arg, dy, dx, add, xs->dim[0], xs->dim[1], xs->dim[2], xs->dim[3], ys->dim[2],
                              ys->dim[3]);
        return GLIA_OK;
    }
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        float *dxp = dx + pl * HW;
        const float *dyp = dy + pl * OHW;
        const int64_t *ap = arg + pl * OHW;
        if (!add) memset(dxp, 0, (size_t)HW * sizeof *dxp);
        for (int64_t o = 0; o < OHW; o++) dxp[ap[o]] += dyp[o];
    }
    return GLIA_OK;
}

static const struct glia_layer_type maxpool_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "maxpool2d",
    .doc = "2-D max pooling of (N, C, H, W): size x size window, stride, -inf padding; NCHW or NHWC",
    .keys = maxpool_keys,
    GLIA_POOL2D_TYPE_SLOTS,
};

static const struct glia_kernel maxpool_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "maxpool2d",
    .impl = "cpu",
    .doc = "OpenMP; NCHW or NHWC",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST,
    .state_size = sizeof(struct maxpool),
    .destroy = maxpool_destroy,
    .forward = maxpool_forward,
    .backward = maxpool_backward,
};

static glia_status maxpool_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &maxpool_type);
    return st ? st : glia_register_kernel(r, &maxpool_cpu);
}

GLIA_PLUGIN_DEFINE(maxpool2d, "2.0", "MIT", "2-D max pooling (CPU, OpenMP)", maxpool_init)
