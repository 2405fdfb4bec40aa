/* plugins/layers/linear — layer type linear (fully connected, y = act(x W^T + b) on the last dimension, as nn.Linear
 * and an optional GELU) and its CPU kernel (one GEMM via the backend). Not a batched matmul of two activations (the
 * weight is learned). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <glia/glia.h>
#include <glia/types/linear.h>

static const struct glia_key linear_keys[] = {
    GLIA_KEY("outputs", GLIA_KEY_INT, NULL, "output features", .required = true, .min = 1, .max = 1 << 30),
    GLIA_KEY("bias", GLIA_KEY_BOOL, "on", "add a learned bias"),
    GLIA_KEY("activation", GLIA_KEY_ENUM, "none",
             "apply an activation to the result: gelu (erf form) or gelu_tanh (nn.GELU(approximate='tanh')); "
             "[graph] fuse_pointwise sets it for a gelu layer that reads only this one",
             .choices = "none|gelu|gelu_tanh"),
    GLIA_KEY("init_std", GLIA_KEY_FLOAT, "0",
             "0: weight and bias U(-1/sqrt(features), 1/sqrt(features)) like nn.Linear; > 0: weight N(0, std^2) and "
             "bias zeros, GPT-2's init (0.02; its residual projections 0.02/sqrt(2 layers))",
             .min = 0, .max = 1e6),
    GLIA_KEY_END};

/* Checks the (..., features) input (2 or more dims), reads the keys and declares "weight" (O, I) and, with bias
 * on, "bias" (O), both U(-1/sqrt(I), 1/sqrt(I)) like PyTorch, or with init_std > 0 N(0, init_std^2) and zeros. */
static glia_status linear_create(struct glia_layer *l, const struct glia_section *cfg, const struct glia_shape *in,
                                 int n_in)
{
    struct glia_linear_attrs *p = l->attrs;
    char buf[64];
    if (in[0].ndim < 2)
        return glia_section_error(cfg, NULL, GLIA_ESHAPE,
                                  "linear expects (N, ..., features) input of 2 or more dimensions, got %s",
                                  glia_shape_str(&in[0], buf, sizeof buf));
    p->in = in[0].dim[in[0].ndim - 1];
    p->out = glia_section_int(cfg, "outputs");
    const char *act = glia_section_str(cfg, "activation");
    p->act = glia_linear_act_of(act);
    double std = glia_section_float(cfg, "init_std");
    struct glia_param_init init = {GLIA_INIT_UNIFORM, 1.0 / sqrt((double)p->in)}, binit = init;
    if (std > 0) {
        init = (struct glia_param_init){GLIA_INIT_NORMAL, std};
        binit = (struct glia_param_init){GLIA_INIT_ZEROS, 0};
    }
    struct glia_shape ws = glia_shape_make(2, (int64_t[]){p->out, p->in});
    struct glia_shape bs = glia_shape_make(1, (int64_t[]){p->out});
    glia_status st = glia_layer_add_param(l, "weight", &ws, init, &p->w);
    p->b = -1;
    if (!st && glia_section_bool(cfg, "bias")) st = glia_layer_add_param(l, "bias", &bs, binit, &p->b);
    return st;
}

/* (..., in) -> (..., out) */
static glia_status linear_infer(const struct glia_layer *l, const struct glia_shape *in, int n_in, struct glia_shape *out)
{
    const struct glia_linear_attrs *p = l->attrs;
    if (in[0].ndim < 2 || in[0].dim[in[0].ndim - 1] != p->in) return GLIA_ESHAPE;
    *out = in[0];
    out->dim[out->ndim - 1] = p->out;
    return GLIA_OK;
}

static uint64_t linear_flops(const struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    const struct glia_linear_attrs *p = l->attrs;
    uint64_t rows = (uint64_t)glia_linear_rows(&in[0]);
    return 2ull * rows * (uint64_t)p->in * (uint64_t)p->out + (p->act ? 5ull * rows * (uint64_t)p->out : 0);
}

/* With an activation, a training forward keeps the pre-activation h (M, O) for backward in the memory the core plans
 * (glia_fwd.saved). */
static size_t linear_saved(const struct glia_layer *l, const struct glia_shape *in, int n_in, enum glia_dtype act)
{
    const struct glia_linear_attrs *p = l->attrs;
    return p->act ? (size_t)(glia_linear_rows(&in[0]) * p->out) * glia_dtype_size(act) : 0;
}

/* l->state of the CPU kernel: room for dh (M, O) in backward, grown as needed */
struct linear_cpu_state {
    float *dh;
    int64_t cap;
};

static void linear_cpu_destroy(struct glia_layer *l)
{
    struct linear_cpu_state *s = l->state;
    free(s->dh);
    memset(s, 0, sizeof *s);
}

/* h(M,O) = x(M,I) W(O,I)^T + b(O), M the rows of all leading dims; y = act(h), h kept for backward in training */
static glia_status linear_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_linear_attrs *p = l->attrs;
    int64_t M = glia_linear_rows(&a->in[0]->shape), I = p->in, O = p->out;
    const float *x = glia_tensor_f32(a->in[0]), *w = glia_tensor_f32(l->params[p->w].value);
    float *y = glia_tensor_f32(a->out), *h = y;
    glia_status st;
    if (p->act && a->train) {
        if (!a->saved) return glia_error(l->ctx, GLIA_EINVAL, "[%s] a training forward without its saved memory", l->name);
        h = a->saved;
    }
    if (p->b >= 0) {
        const float *b = glia_tensor_f32(l->params[p->b].value);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < O; j++) h[i * O + j] = b[j];
    }
    if ((st = glia_backend_gemm_f32(l->backend, false, true, M, O, I, 1.0f, x, I, w, I, p->b >= 0 ? 1.0f : 0.0f, h, O)))
        return st;
    if (p->act) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < M * O; i++) y[i] = glia_linear_act(p->act, h[i]);
    }
    return GLIA_OK;
}

/* dh(M,O) = dy * act'(h);  dx(M,I) = dh W(O,I);  dW(O,I) (+)= dh^T x;  db(O) (+)= sum_m dh */
static glia_status linear_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_linear_attrs *p = l->attrs;
    struct linear_cpu_state *s = l->state;
    int64_t M = glia_linear_rows(&a->in[0]->shape), I = p->in, O = p->out;
    const float *x = glia_tensor_f32(a->in[0]), *dy = glia_tensor_f32(a->dout);
    struct glia_param *pw = &l->params[p->w];
    glia_status st = GLIA_OK;
    if (p->act && !a->dout_preact) {  /* (dout_preact: the layer after this one applied act's gradient) */
        if (!a->saved) return glia_error(l->ctx, GLIA_EINVAL, "[%s] a backward without its saved memory", l->name);
        if (M * O > s->cap) {
            float *q = realloc(s->dh, (size_t)(M * O) * sizeof *q);
            if (!q) return GLIA_ENOMEM;
            s->dh = q;
            s->cap = M * O;
        }
        const float *h = a->saved, *g = dy;
        float *dh = s->dh;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < M * O; i++) dh[i] = g[i] * glia_linear_act_grad(p->act, h[i]);
        dy = dh;
    }
    int din_act = a->din_act ? glia_linear_act_of(a->din_act) : GLIA_LINEAR_ACT_NONE;
    if (a->din_act && (!din_act || !a->din_act_pre || !a->din[0] || a->din_accumulate[0]))
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] backward asked to apply the gradient of activation %s", l->name,
                          a->din_act);
    if (a->din[0])
        st = glia_backend_gemm_f32(l->backend, false, false, M, I, O, 1.0f, dy, O,
                                   glia_tensor_f32(pw->value), I, a->din_accumulate[0] ? 1.0f : 0.0f,
                                   glia_tensor_f32(a->din[0]), I);
    if (!st && din_act) {  /* din(M,I) *= act'(pre): the producer's activation gradient, as its backward would apply it */
        float *dx = glia_tensor_f32(a->din[0]);
        const float *pre = a->din_act_pre;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < M * I; i++) dx[i] = dx[i] * glia_linear_act_grad(din_act, pre[i]);
    }
    if (!st)
        st = glia_backend_gemm_f32(l->backend, true, false, O, I, M, 1.0f, dy, O, x, I,
                                   glia_param_beta(pw), glia_tensor_f32(pw->grad), I);
    if (!st && p->b >= 0) {
        struct glia_param *pb = &l->params[p->b];
        float *db = glia_tensor_f32(pb->grad);
        bool add = !pb->grad_unset;
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < O; j++) {
            float s = 0;
            for (int64_t i = 0; i < M; i++) s += dy[i * O + j];
            db[j] = add ? db[j] + s : s;  /* never 0 * old: old may be garbage */
        }
    }
    return st;
}

#define LINEAR_CPU_FLAGS (GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_DECODE) /* per row */

/* A layer with an activation hands its gradient to the layer after it where that one can apply it */
static uint32_t linear_layer_flags(const struct glia_layer *l)
{
    const struct glia_linear_attrs *p = l->attrs;
    return LINEAR_CPU_FLAGS | (p->act ? GLIA_KERNEL_DOUT_PREACT : 0);
}

static const struct glia_layer_type linear_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "linear",
    .doc = "fully connected on the last dimension: y = x W^T + b, (..., features) -> (..., outputs)",
    .keys = linear_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs_size = sizeof(struct glia_linear_attrs),
    .flags = GLIA_TYPE_FUSIBLE_ACTIVATION,
    .create = linear_create,
    .infer_shape = linear_infer,
    .flops = linear_flops,
};

static const struct glia_kernel linear_cpu = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "linear",
    .impl = "cpu",
    .doc = "oneDNN GEMM",
    .device_type = GLIA_DEVICE_CPU,
    .flags = LINEAR_CPU_FLAGS,
    .state_size = sizeof(struct linear_cpu_state),
    .destroy = linear_cpu_destroy,
    .forward = linear_forward,
    .backward = linear_backward,
    .saved_size = linear_saved,
    .layer_flags = linear_layer_flags,
    .din_act = glia_linear_din_act,
};

static glia_status linear_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &linear_type);
    return st ? st : glia_register_kernel(r, &linear_cpu);
}

GLIA_PLUGIN_DEFINE(linear, "2.0", "MIT", "fully connected layer (CPU: oneDNN GEMM)", linear_init)
