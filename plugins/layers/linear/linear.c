/* plugins/layers/linear — fully connected layer y = x W^T + b on the CPU (GEMM via the backend).
 * Not a batched or N-d matmul: the input must be (N, features); put a flatten before it. */
#include <glia/glia.h>
#include "linear_desc.h"

static glia_status linear_create(struct glia_layer *l, const struct glia_section *cfg,
                                 const struct glia_shape *in, int n_in)
{
    return glia__linear_create(l, cfg, in, n_in, sizeof(struct glia__linear));
}

/* y(N,O) = x(N,I) W(O,I)^T + b(O) */
static glia_status linear_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia__linear *p = l->priv;
    int64_t N = a->in[0]->shape.dim[0], I = p->in, O = p->out;
    const float *x = glia_tensor_f32(a->in[0]), *w = glia_tensor_f32(l->params[p->w].value);
    float *y = glia_tensor_f32(a->out);
    if (p->b >= 0) {
        const float *b = glia_tensor_f32(l->params[p->b].value);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < O; j++) y[i * O + j] = b[j];
    }
    return glia_backend_gemm_f32(l->backend, false, true, N, O, I, 1.0f, x, I, w, I,
                                 p->b >= 0 ? 1.0f : 0.0f, y, O);
}

/* dx(N,I) = dy(N,O) W(O,I);  dW(O,I) (+)= dy^T x;  db(O) (+)= sum_n dy */
static glia_status linear_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia__linear *p = l->priv;
    int64_t N = a->in[0]->shape.dim[0], I = p->in, O = p->out;
    const float *x = glia_tensor_f32(a->in[0]), *dy = glia_tensor_f32(a->dout);
    struct glia_param *pw = &l->params[p->w];
    glia_status st = GLIA_OK;
    if (a->din[0])
        st = glia_backend_gemm_f32(l->backend, false, false, N, I, O, 1.0f, dy, O,
                                   glia_tensor_f32(pw->value), I, a->din_accumulate[0] ? 1.0f : 0.0f,
                                   glia_tensor_f32(a->din[0]), I);
    if (!st)
        st = glia_backend_gemm_f32(l->backend, true, false, O, I, N, 1.0f, dy, O, x, I,
                                   glia_param_beta(pw), glia_tensor_f32(pw->grad), I);
    if (!st && p->b >= 0) {
        struct glia_param *pb = &l->params[p->b];
        float *db = glia_tensor_f32(pb->grad);
        bool add = !pb->grad_unset;
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < O; j++) {
            float s = 0;
            for (int64_t i = 0; i < N; i++) s += dy[i * O + j];
            db[j] = add ? db[j] + s : s;  /* never 0 * old: old may be garbage */
        }
    }
    return st;
}

static const struct glia_layer_ops linear_ops = {
    .struct_size = sizeof(struct glia_layer_ops),
    .type = "linear",
    .impl = "cpu",
    .doc = GLIA__LINEAR_DOC,
    .keys = glia__linear_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .flags = GLIA_LAYER_BWD_NO_OUTPUT,
    .device_type = GLIA_DEVICE_CPU,
    .create = linear_create,
    .destroy = glia__linear_destroy,
    .infer_shape = glia__linear_infer,
    .forward = linear_forward,
    .backward = linear_backward,
    .flops = glia__linear_flops,
};

static glia_status linear_init(struct glia_registry *r) { return glia_register_layer(r, &linear_ops); }

GLIA_PLUGIN_DEFINE(linear, "1.0", "MIT", "fully connected layer (CPU: oneDNN GEMM)", linear_init)
