/* plugins/layers/concat — joins N inputs along one axis (default 1, the channels), CPU, in
 * either memory format (NCHW or NHWC). Not a stack: the inputs keep their rank and must agree on
 * every other dimension. */
#include <glia/glia.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "concat_desc.h"

struct concat {
    struct glia__concat_desc d;  /* first: the shared infer_shape reads it */
};

static glia_status concat_create(struct glia_layer *l, const struct glia_section *cfg,
                                 const struct glia_shape *in, int n_in)
{
    struct glia__concat_desc d;
    glia_status st = glia__concat_describe(cfg, in, n_in, &d);
    if (st) return st;
    struct concat *c = malloc(sizeof *c);
    if (!c) return GLIA_ENOMEM;
    c->d = d;
    l->priv = c;
    return GLIA_OK;
}

static void concat_destroy(struct glia_layer *l) { free(l->priv); }

/* y(outer, sum_k C_k, inner) = [x_1(outer, C_1, inner), ..., x_N(outer, C_N, inner)] */
static glia_status concat_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    int axis = ((const struct concat *)l->priv)->d.axis;
    int64_t outer, inner, off = 0, ytotal = a->out->shape.dim[axis];
    glia__concat_sizes(a->out, axis, &outer, &inner);
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
    int axis = ((const struct concat *)l->priv)->d.axis;
    int64_t outer, inner, off = 0, ytotal = a->out->shape.dim[axis];
    glia__concat_sizes(a->out, axis, &outer, &inner);
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
    .keys = glia__concat_keys,
    .min_inputs = 2,
    .max_inputs = -1,
    .flags = GLIA_LAYER_CHANNELS_LAST | GLIA_LAYER_BWD_NO_INPUT | GLIA_LAYER_BWD_NO_OUTPUT,
    .device_type = GLIA_DEVICE_CPU,
    .create = concat_create,
    .destroy = concat_destroy,
    .infer_shape = glia__concat_infer,
    .forward = concat_forward,
    .backward = concat_backward,
};

static glia_status concat_init(struct glia_registry *r) { return glia_register_layer(r, &concat_ops); }

GLIA_PLUGIN_DEFINE(concat, "1.0", "MIT", "concatenation along an axis (CPU)", concat_init)
