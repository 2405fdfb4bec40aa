/* plugins/layers/linear — layer type linear (fully connected, y = x W^T + b on the last dimension, as nn.Linear)
 * and its CPU kernel (one GEMM via the backend). Not a batched matmul of two activations (the weight is learned). */
#include <math.h>
#include <glia/glia.h>
#include <glia/types/linear.h>

static const struct glia_key linear_keys[] = {
    GLIA_KEY("outputs", GLIA_KEY_INT, NULL, "output features", .required = true, .min = 1, .max = 1 << 30),
    GLIA_KEY("bias", GLIA_KEY_BOOL, "on", "add a learned bias"),
    GLIA_KEY_END};

/* Checks the (..., features) input (2 or more dims), reads the keys and declares "weight" (O, I) and, with bias
 * on, "bias" (O), both U(-1/sqrt(I), 1/sqrt(I)) like PyTorch. */
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
    struct glia_param_init init = {GLIA_INIT_UNIFORM, 1.0 / sqrt((double)p->in)};
    struct glia_shape ws = glia_shape_make(2, (int64_t[]){p->out, p->in});
    struct glia_shape bs = glia_shape_make(1, (int64_t[]){p->out});
    glia_status st = glia_layer_add_param(l, "weight", &ws, init, &p->w);
    p->b = -1;
    if (!st && glia_section_bool(cfg, "bias")) st = glia_layer_add_param(l, "bias", &bs, init, &p->b);
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
    return 2ull * (uint64_t)glia_linear_rows(&in[0]) * (uint64_t)p->in * (uint64_t)p->out;
}

/* y(M,O) = x(M,I) W(O,I)^T + b(O), M the rows of all leading dims */
static glia_status linear_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_linear_attrs *p = l->attrs;
    int64_t M = glia_linear_rows(&a->in[0]->shape), I = p->in, O = p->out;
    const float *x = glia_tensor_f32(a->in[0]), *w = glia_tensor_f32(l->params[p->w].value);
    float *y = glia_tensor_f32(a->out);
    if (p->b >= 0) {
        const float *b = glia_tensor_f32(l->params[p->b].value);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < O; j++) y[i * O + j] = b[j];
    }
    return glia_backend_gemm_f32(l->backend, false, true, M, O, I, 1.0f, x, I, w, I,
                                 p->b >= 0 ? 1.0f : 0.0f, y, O);
}

/* dx(M,I) = dy(M,O) W(O,I);  dW(O,I) (+)= dy^T x;  db(O) (+)= sum_m dy */
static glia_status linear_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_linear_attrs *p = l->attrs;
    int64_t M = glia_linear_rows(&a->in[0]->shape), I = p->in, O = p->out;
    const float *x = glia_tensor_f32(a->in[0]), *dy = glia_tensor_f32(a->dout);
    struct glia_param *pw = &l->params[p->w];
    glia_status st = GLIA_OK;
    if (a->din[0])
        st = glia_backend_gemm_f32(l->backend, false, false, M, I, O, 1.0f, dy, O,
                                   glia_tensor_f32(pw->value), I, a->din_accumulate[0] ? 1.0f : 0.0f,
                                   glia_tensor_f32(a->din[0]), I);
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

static const struct glia_layer_type linear_type = {
    .struct_size = sizeof(struct glia_layer_type),
    .name = "linear",
    .doc = "fully connected on the last dimension: y = x W^T + b, (..., features) -> (..., outputs)",
    .keys = linear_keys,
    .min_inputs = 1,
    .max_inputs = 1,
    .attrs_size = sizeof(struct glia_linear_attrs),
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
    .flags = GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_DECODE, /* per row */
    .forward = linear_forward,
    .backward = linear_backward,
};

static glia_status linear_init(struct glia_registry *r)
{
    glia_status st = glia_register_layer_type(r, &linear_type);
    return st ? st : glia_register_kernel(r, &linear_cpu);
}

GLIA_PLUGIN_DEFINE(linear, "2.0", "MIT", "fully connected layer (CPU: oneDNN GEMM)", linear_init)
