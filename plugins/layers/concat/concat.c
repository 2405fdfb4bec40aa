/* plugins/layers/concat — layer type concat (joins N inputs along one axis, default 1, the channels) and its CPU
 * kernel, in either memory format (NCHW or NHWC). Not a stack: the inputs keep their rank and must agree on every
 * other dimension. */
#include <glia/glia.h>
#include <glia/types/concat.h>
#include <string.h>

static const struct glia_key concat_keys[] = {
    GLIA_KEY("axis", GLIA_KEY_INT, "1", "dimension to join along (0 is the batch; not allowed)", .min = 1, .max = 7),
    GLIA_KEY_END};

/* The output shape: in[0] with dim `axis` the sum of the inputs'; GLIA_ESHAPE when they disagree. */
static glia_status concat_shape(int axis, const struct glia_shape *in, int n_in, struct glia_shape *out)
{
    if (axis >= in[0].ndim) return GLIA_ESHAPE;
    *out = in[0];
    for (int k = 1; k < n_in; k++) {
        if (in[k].ndim != in[0].ndim) return GLIA_ESHAPE;
        for (int d = 0; d < in[0].ndim; d++)
            if (d != axis && in[k].dim[d] != in[0].dim[d]) return GLIA_ESHAPE;
        out->dim[axis] += in[k].dim[axis];
    }
    return GLIA_OK;
}

/* Checks that the axis exists and the n_in inputs agree on every other dimension (the message names the first
 * input that does not); reads it into l->attrs. */
static glia_status concat_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                 int n_in)
{
    struct glia_concat_attrs *c = l->attrs;
    int axis = (int)glia_section_int(cfg, "axis");
    struct glia_shape out;
    char a[64], b[64];
    if (axis >= in[0].ndim)
        return glia_section_error(cfg, "axis", GLIA_ESHAPE, "axis %d does not exist in input shape %s", axis,
                                  glia_shape_str(&in[0], a, sizeof a));
    if (concat_shape(axis, in, n_in, &out))
        for (int k = 1; k < n_in; k++)
            if (in[k].ndim != in[0].ndim || concat_shape(axis, (struct glia_shape[]){in[0], in[k]}, 2, &out))
                return glia_section_error(cfg, "inputs", GLIA_ESHAPE, "concat along axis %d: input 1 is %s, input %d is %s",
                                          axis, glia_shape_str(&in[0], a, sizeof a), k + 1,
                                          glia_shape_str(&in[k], b, sizeof b));
    c->axis = axis;
    return GLIA_OK;
}

static glia_status concat_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                struct glia_shape *out)
{
    return concat_shape(((const struct glia_concat_attrs *)l->attrs)->axis, in, n_in, out);
}

/* y(outer, sum_k C_k, inner) = [x_1(outer, C_1, inner), ..., x_N(outer, C_N, inner)] */
static glia_status concat_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    int axis = ((const struct glia_concat_attrs *)l->attrs)->axis;
    int64_t outer, inner, off = 0, ytotal = a->out->shape.dim[axis];
    glia_concat_sizes(a->out, axis, &outer, &inner);
    float *y = glia_tensor_f32(a->out);
    for (int k = 0; k < a->n_in; k++) {
        const float *x = glia_tensor_f32(a->in[k]);
        int64_t ck = a->in[k]->shape.dim[axis];
#pragma omp parallel for schedule(static)
        for (int64_t o = 0; o < outer; o++)
            memcpy(y + (o * ytotal + off) * inner, x + o * ck * inner, (size_t)(ck * inner) * sizeof(float));
        off += ck;
    }
    return GLIA_OK;
}

/* dx_k (+)= the slice of dy that x_k filled */
static glia_status concat_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    int axis = ((const struct glia_concat_attrs *)l->attrs)->axis;
    int64_t outer, inner, off = 0, ytotal = a->out->shape.dim[axis];
    glia_concat_sizes(a->out, axis, &outer, &inner);
    const float *dy = glia_tensor_f32(a->dout);
    for (int k = 0; k < a->n_in; k++) {
        int64_t ck = a->in[k]->shape.dim[axis], blk = ck * inner;
        if (a->din[k]) {
            float *dx = glia_tensor_f32(a->din[k]);
            int add = a->din_accumulate[k];
#pragma omp parallel for schedule(static)
            for (int64_t o = 0; o < outer; o++) {
                const float *src = dy + (o * ytotal + off) * inner;
                float *dst = dx + o * blk;
                for (int64_t i = 0; i < blk; i++) dst[i] = add ? dst[i] + src[i] : src[i];
            }
        }
        off += ck;
    }
    return GLIA_OK;
}

static const struct glia_layer_type concat_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "concat",
    .doc = "join 2 or more inputs along an axis (default 1: channels)",
    .keys = concat_keys,
    .min_inputs = 2,
    .max_inputs = -1,
    .attrs_size = sizeof(struct glia_concat_attrs),
    .create = concat_create,
    .infer_shape = concat_infer,
};

static const struct glia_kernel concat_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "concat",
    .impl = "cpu",
    .doc = "a copy per input and outer index (OpenMP); NCHW or NHWC",
    .device_type = GLIA_DEVICE_CPU,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT,
    .forward = concat_forward,
    .backward = concat_backward,
};

static glia_status concat_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &concat_type);
    return st ? st : glia_register_kernel(r, &concat_cpu);
}

GLIA_PLUGIN_DEFINE(concat, "2.0", "MIT", "concatenation along an axis (CPU)", concat_init)
