/* plugins/layers/concat — joins N inputs along one axis (default 1, the channels), CPU, in
 * either memory format (NCHW or NHWC). Not a stack: the inputs keep their rank and must agree on
 * every other dimension. */
#include <glia/glia.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const struct glia_key concat_keys[] = {
    GLIA_KEY("axis", GLIA_KEY_INT, "1", "dimension to join along (0 is the batch; not allowed)", .min = 1, .max = 7),
    GLIA_KEY_END};

struct concat {
    int axis;
};

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

static glia_status concat_create(struct glia_layer *l, const struct glia_section *cfg,
                                 const struct glia_shape *in, int n_in)
{
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
    struct concat *c = malloc(sizeof *c);
    if (!c) return GLIA_ENOMEM;
    c->axis = axis;
    l->priv = c;
    return GLIA_OK;
}

static void concat_destroy(struct glia_layer *l) { free(l->priv); }

static glia_status concat_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in,
                                struct glia_shape *out)
{
    return concat_shape(((const struct concat *)l->priv)->axis, in, n_in, out);
}

/* outer = prod(dims stored before axis); a block of input k is dim_k(axis) * inner elements.
 * Channels_last tensors store their dims in the order N, H, W, C. */
static void sizes(const struct glia_tensor *t, int axis, int64_t *outer, int64_t *inner)
{
    static const int nhwc[4] = {0, 2, 3, 1};
    const struct glia_shape *s = &t->shape;
    bool cl = glia_tensor_memory_format(t) == GLIA_CHANNELS_LAST;
    int pos = 0;
    while ((cl ? nhwc[pos] : pos) != axis) pos++;
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < s->ndim; d++) {
        int64_t n = s->dim[cl ? nhwc[d] : d];
        if (d < pos) *outer *= n;
        else if (d > pos) *inner *= n;
    }
}

/* y(outer, sum_k C_k, inner) = [x_1(outer, C_1, inner), ..., x_N(outer, C_N, inner)] */
static glia_status concat_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    int axis = ((const struct concat *)l->priv)->axis;
    int64_t outer, inner, off = 0, ytotal = a->out->shape.dim[axis];
    sizes(a->out, axis, &outer, &inner);
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
    int axis = ((const struct concat *)l->priv)->axis;
    int64_t outer, inner, off = 0, ytotal = a->out->shape.dim[axis];
    sizes(a->out, axis, &outer, &inner);
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

static const struct glia_layer_ops concat_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "concat",
    .impl = "cpu",
    .doc = "join 2 or more inputs along an axis (default 1: channels)",
    .keys = concat_keys,
    .min_inputs = 2,
    .max_inputs = -1,
    .flags = GLIA_LAYER_CHANNELS_LAST,
    .device_type = GLIA_DEVICE_CPU,
    .create = concat_create,
    .destroy = concat_destroy,
    .infer_shape = concat_infer,
    .forward = concat_forward,
    .backward = concat_backward,
};

static glia_status concat_init(struct glia_registry *r) { return glia_register_layer(r, &concat_ops); }

GLIA_PLUGIN_DEFINE(concat, "1.0", "MIT", "concatenation along an axis (CPU)", concat_init)
