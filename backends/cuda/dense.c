/* backends/cuda/dense.c — the CUDA kernels of layer types linear (cuBLASLt with a fused bias and bias-gradient
 * epilogue; f32 or half activations), softmax_cross_entropy, flatten and dropout, registered by cuda.so for the types their own plugins
 * register (reading the attributes of glia/types/). Not the device code (dense_kernels.cu) nor the GEMM plans
 * (gemm.c). */
#include "cuda_internal.h"
#include "gemm.h"
#include "dense_kernels.h"
#include "kernels.h"
#include <glia/types/linear.h>
#include <glia/types/softmax_cross_entropy.h>
#include <glia/types/dropout.h>

/* ---- shared checks ---- */

/* t must be a dense (row-major) f32 tensor in CUDA memory. */
static glia_status need_dense_f32(const struct glia_layer *l, const struct glia_tensor *t, const char *what)
{
    if (t && t->dtype == GLIA_F32 && t->device.type == GLIA_DEVICE_CUDA && glia_tensor_is_contiguous(t))
        return GLIA_OK;
    return glia_error(l->ctx, GLIA_EINVAL, "[%s] %s: expected a contiguous f32 tensor in CUDA memory", l->name, what);
}

/* t must be an f32 tensor in CUDA memory, in the memory format `f`. */
static glia_status need_f32_in(const struct glia_layer *l, const struct glia_tensor *t, enum glia_memory_format f,
                               const char *what)
{
    if (!t || t->dtype != GLIA_F32 || t->device.type != GLIA_DEVICE_CUDA)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] %s: expected an f32 tensor in CUDA memory", l->name, what);
    if (glia_tensor_memory_format(t) != f || (f == GLIA_CONTIGUOUS && !glia_tensor_is_contiguous(t)))
        return glia_error(l->ctx, GLIA_EUNSUPPORTED, "[%s] %s is %s, the other tensors %s", l->name, what,
                          glia_memory_format_name(glia_tensor_memory_format(t)), glia_memory_format_name(f));
    return GLIA_OK;
}

static float *f32(const struct glia_tensor *t) { return (float *)t->data; }

/* A kernel with GLIA_KERNEL_HALF: t holds the call's activations, of dtype dt (that of the output, or of its gradient
 * in backward: f32, f16 or bf16) in format f, in CUDA memory. */
static glia_status need_act_in(const struct glia_layer *l, const struct glia_tensor *t, enum glia_dtype dt,
                               enum glia_memory_format f, const char *what)
{
    bool type_ok = t && t->dtype == dt && (dt == GLIA_F32 || dt == GLIA_F16 || dt == GLIA_BF16);
    if (!type_ok || t->device.type != GLIA_DEVICE_CUDA)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] %s: expected a %s tensor in CUDA memory, got %s", l->name, what,
                          glia_dtype_name(dt), t ? glia_dtype_name(t->dtype) : "none");
    if (glia_tensor_memory_format(t) != f || (f == GLIA_CONTIGUOUS && !glia_tensor_is_contiguous(t)))
        return glia_error(l->ctx, GLIA_EUNSUPPORTED, "[%s] %s is %s, the other tensors %s", l->name, what,
                          glia_memory_format_name(glia_tensor_memory_format(t)), glia_memory_format_name(f));
    return GLIA_OK;
}

/* ---- linear ----
 * Activations (x, y, dy, dx of one call) are f32, f16 or bf16 alike (GLIA_KERNEL_HALF); the weights, the bias and
 * their gradients stay f32 (the optimizer's master copy). A half call multiplies a half copy of W and adds a half copy
 * of b, both of which each forward converts on the stream (so a CUDA graph replays it with the step's weights) and
 * backward reuses W's (the optimizer changes W only after backward); products are exact and sums f32 in cuBLASLt
 * (CUBLAS_COMPUTE_32F), y and dx are rounded once to the half type and dW, db are f32, as torch.autocast runs a linear
 * (whose bias is cast to the half type too: the type cuBLASLt's bias epilogue is made for). */

/* l->state */
struct linear_cuda {
    struct glia_tensor *wh;  /* (O,I) W in the half type of the latest half forward; NULL before one */
    struct glia_tensor *bh;  /* (O) b likewise (NULL without a bias) */
    int wh_id, bh_id;        /* their records among the backend's weight copies (params.c; 0: none) */
};

static void linear_destroy(struct glia_layer *l)
{
    struct linear_cuda *s = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia__wcopy_drop(c, &s->wh_id);
    glia__wcopy_drop(c, &s->bh_id);
    glia_tensor_release(s->wh);
    glia_tensor_release(s->bh);
    s->wh = s->bh = NULL;
}

/* With an activation, a training forward keeps the pre-activation h (N, O), in the activations' type, in the memory
 * the core plans (glia_fwd.saved): cuBLASLt's GELU epilogue writes it as its aux matrix. */
static size_t linear_saved(const struct glia_layer *l, const struct glia_shape *in, int n_in, enum glia_dtype act)
{
    const struct glia_linear_attrs *p = l->attrs;
    return p->act ? (size_t)(glia_linear_rows(&in[0]) * p->out) * glia_dtype_size(act) : 0;
}

/* *h: parameter v's half copy in type t, made once (and again if the type changes), then converted from v when
 * `convert`, unless the pass's start converted it with the others (params.c: *id its record there); its data in
 * *out. */
static glia_status half_copy(struct glia_layer *l, const struct glia_tensor *v, enum glia_dtype t, bool convert,
                             struct glia_tensor **h, int *id, void **out)
{
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st;
    if (*h && (*h)->dtype != t) {
        glia__wcopy_drop(c, id);
        glia_tensor_release(*h);
        *h = NULL;
    }
    if (!*h) {
        if ((st = glia_tensor_new(l->backend, t, &v->shape, h))) return st;
        convert = true;
    }
    if (convert && !glia__wcopy_take(c, id, v->data, (*h)->data, glia__cuda_conv_type(t), 1, 1, glia_tensor_numel(v)) &&
        (st = glia_tensor_convert(*h, v, false)))
        return st;
    *out = (*h)->data;
    return GLIA_OK;
}

/* W's half copy in type t (converted from W when `convert`: each forward), and with bh not NULL b's (converted; NULL
 * without a bias). */
static glia_status linear_half_w(struct glia_layer *l, enum glia_dtype t, bool convert, const void **w, void **bh)
{
    const struct glia_linear_attrs *p = l->attrs;
    struct linear_cuda *s = l->state;
    void *wd = NULL;
    glia_status st = half_copy(l, l->params[p->w].value, t, convert, &s->wh, &s->wh_id, &wd);
    *w = wd;
    if (!st && bh) {
        *bh = NULL;
        if (p->b >= 0) st = half_copy(l, l->params[p->b].value, t, true, &s->bh, &s->bh_id, bh);
    }
    return st;
}

/* y(N,O) = x(N,I) W(O,I)^T + b(O) (x, W, y and b of type t; b NULL without a bias), N the rows of x (..., I): one
 * cuBLASLt GEMM with the bias in its epilogue (or, where cuBLASLt has no such algorithm, the GEMM and a bias-add
 * kernel). */
static glia_status linear_gemm_bias(struct glia_layer *l, enum glia_dtype t, int64_t N, const void *x, const void *w,
                                    void *b, void *y)
{
    const struct glia_linear_attrs *p = l->attrs;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    int64_t I = p->in, O = p->out;
    glia_status st;
    if (!b) return glia__cuda_gemm_typed(c, false, true, N, O, I, 1.0f, x, I, w, I, t, 0.0f, y, O, t,
                                         GLIA__GEMM_PLAIN, NULL);
    st = glia__cuda_gemm_typed(c, false, true, N, O, I, 1.0f, x, I, w, I, t, 0.0f, y, O, t, GLIA__GEMM_BIAS, b);
    if (st != GLIA_EUNSUPPORTED) return st;
    if (t == GLIA_F32) {
        if ((st = glia__cuda_gemm_ex(c, false, true, N, O, I, 1.0f, x, I, w, I, 0.0f, y, O, GLIA__GEMM_PLAIN, NULL)))
            return st;
        CUDA_TRY(l->ctx, glia__cuda_bias_add(y, (const float *)b, N, O, c->stream));
        return GLIA_OK;
    }
    /* half: the GEMM's f32 result in scratch, the bias added and rounded once */
    void *acc;
    if ((st = glia__cuda_scratch(c, (size_t)(N * O > 0 ? N * O : 1) * sizeof(float), &acc)) ||
        (st = glia__cuda_gemm_typed(c, false, true, N, O, I, 1.0f, x, I, w, I, t, 0.0f, acc, O, GLIA_F32,
                                    GLIA__GEMM_PLAIN, NULL)))
        return st;
    CUDA_TRY(l->ctx, glia__cuda_bias_add_round(y, t, acc, b, N, O, c->stream));
fail:
    return st;
}

/* y(N,O) = act(x W^T + b) (b of type t, or NULL), keeping h = x W^T + b in a->saved in training: with gelu_tanh one
 * cuBLASLt GEMM whose GELU epilogue adds the bias and writes both (eval: y only); otherwise, or where cuBLASLt has no
 * such algorithm, the GEMM with its bias into h (eval: into y) and the activation kernel. */
static glia_status linear_forward_act(struct glia_layer *l, const struct glia_fwd *a, enum glia_dtype t, int64_t N,
                                      const void *x, const void *w, void *b)
{
    const struct glia_linear_attrs *p = l->attrs;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    int64_t I = p->in, O = p->out;
    void *y = a->out->data, *h = y;
    glia_status st;
    if (a->train) {
        if (!a->saved) return glia_error(l->ctx, GLIA_EINVAL, "[%s] a training forward without its saved memory", l->name);
        h = a->saved;
    }
    if (p->act == GLIA_LINEAR_ACT_GELU_TANH) {
        enum glia__gemm_epilogue ep = a->train ? (b ? GLIA__GEMM_GELU_AUX_BIAS : GLIA__GEMM_GELU_AUX)
                                               : (b ? GLIA__GEMM_GELU_BIAS : GLIA__GEMM_GELU);
        st = glia__cuda_gemm_aux(c, false, true, N, O, I, 1.0f, x, I, w, I, t, 0.0f, y, O, t, ep, b,
                                 a->train ? h : NULL);
        if (st != GLIA_EUNSUPPORTED) return st;
    }
    if ((st = linear_gemm_bias(l, t, N, x, w, b, h))) return st;
    CUDA_TRY(l->ctx, glia__cuda_linear_act(y, h, t, p->act, N * O, c->stream));
fail:
    return st;
}

/* ---- f32 activations under [runtime] precision = bf16 or fp16 ----
 * A linear whose neighbours keep f32 activations (one feeding a loss whose kernel takes only f32 logits, or a layer
 * without GLIA_KERNEL_HALF) still multiplies
 * half operands, as torch.autocast runs every linear: x (and in backward dy) converted to the half type in scratch, W's
 * half copy, f32 sums and an f32 result, y and dx f32. cuBLASLt's f32 GEMMs in a FAST_16BF/16F compute type would
 * read f32 operands and may take TF32 kernels at half the half type's rate (GPT-2's classifier: 7.6 TFLOP a step at
 * 32 x 1024). Backward converts dy by chunks of rows (MIXED_CHUNK bytes of scratch at most with x's), each chunk's
 * dW added to the last's. Only GEMMs of glia__cuda_mixed_min_flop forward FLOPs or more: the conversions are four
 * launches a step, more than a small classifier's GEMM saves (fmnist's 64 x 64 -> 10). */

#define MIXED_CHUNK ((size_t)512 << 20)

double glia__cuda_mixed_min_flop = 4294967296.0;  /* 2^32; a variable so that tests reach the path at small shapes */

static glia_status linear_bias_grad(struct glia_layer *l, struct glia_param *pb, const void *dy, enum glia_dtype t,
                                    int64_t N, void *part);

/* The half type a GEMM of N rows of l multiplies f32 activations in: that of the backend's precision where the GEMM has
 * glia__cuda_mixed_min_flop forward FLOPs or more (GLIA_F32: none) */
static enum glia_dtype mixed_half(const struct glia_layer *l, int64_t N)
{
    const struct glia_linear_attrs *p = l->attrs;
    if (2.0 * (double)N * (double)p->in * (double)p->out < glia__cuda_mixed_min_flop) return GLIA_F32;
    return glia__cuda_half_of(l->backend->options.precision);
}

/* dst(n) of type h = src(n) f32, rounded to nearest even (the backend's convert) */
static glia_status to_half(struct glia_layer *l, void *dst, enum glia_dtype h, const void *src, int64_t n)
{
    return n ? glia_backend_convert(l->backend, dst, h, src, GLIA_F32, 1, 1, n, 0.0f) : GLIA_OK;
}

/* y(N,O) f32 = xh(N,I) Wh(O,I)^T + b(O) f32, xh x's half copy in scratch */
static glia_status linear_forward_mixed(struct glia_layer *l, const struct glia_fwd *a, int64_t N)
{
    const struct glia_linear_attrs *p = l->attrs;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    enum glia_dtype h = mixed_half(l, N);
    int64_t I = p->in, O = p->out;
    float *y = f32(a->out), *b = p->b >= 0 ? f32(l->params[p->b].value) : NULL;
    const void *w;
    void *xh;
    glia_status st;
    if ((st = linear_half_w(l, h, true, &w, NULL)) ||
        (st = glia__cuda_scratch(c, (size_t)(N * I > 0 ? N * I : 1) * glia_dtype_size(h), &xh)))
        return st;
    if ((st = to_half(l, xh, h, a->in[0]->data, N * I))) return st;
    st = glia__cuda_gemm_typed(c, false, true, N, O, I, 1.0f, xh, I, w, I, h, 0.0f, y, O, GLIA_F32,
                               b ? GLIA__GEMM_BIAS : GLIA__GEMM_PLAIN, b);
    if (st != GLIA_EUNSUPPORTED || !b) return st;
    if ((st = glia__cuda_gemm_typed(c, false, true, N, O, I, 1.0f, xh, I, w, I, h, 0.0f, y, O, GLIA_F32,
                                    GLIA__GEMM_PLAIN, NULL)))
        return st;
    CUDA_TRY(l->ctx, glia__cuda_bias_add(y, b, N, O, c->stream));
fail:
    return st;
}

/* dx(N,I) f32 (+)= dyh Wh and dW(O,I) (+)= dyh^T xh by chunks of rows, dyh and xh the half copies of the chunk's dy
 * and x; db (+)= the column sums of dy (f32) */
static glia_status linear_backward_mixed(struct glia_layer *l, const struct glia_bwd *a, int64_t N)
{
    const struct glia_linear_attrs *p = l->attrs;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    struct glia_param *pw = &l->params[p->w];
    enum glia_dtype h = mixed_half(l, N);
    int64_t I = p->in, O = p->out;
    size_t es = glia_dtype_size(h), row = (size_t)(I + O) * es;
    int64_t R = (int64_t)(MIXED_CHUNK / row) > 0 ? (int64_t)(MIXED_CHUNK / row) : 1;
    const float *dy = f32(a->dout), *x = f32(a->in[0]);
    float *dx = a->din[0] ? f32(a->din[0]) : NULL, *dw = f32(pw->grad);
    const void *w;
    void *scratch;
    glia_status st;
    if (R > N) R = N;
    if ((st = linear_half_w(l, h, false, &w, NULL)) ||
        (st = glia__cuda_scratch(c, (size_t)(R > 0 ? R : 1) * row, &scratch)))
        return st;
    if (N == 0 && pw->grad_unset) CUDA_TRY(l->ctx, cudaMemsetAsync(dw, 0, (size_t)(O * I) * sizeof(float), c->stream));
    for (int64_t r0 = 0; r0 < N; r0 += R) {
        int64_t n = N - r0 < R ? N - r0 : R;
        void *dyh = scratch, *xh = (char *)scratch + (size_t)(n * O) * es;
        if ((st = to_half(l, dyh, h, dy + r0 * O, n * O)) || (st = to_half(l, xh, h, x + r0 * I, n * I))) return st;
        if (dx && (st = glia__cuda_gemm_typed(c, false, false, n, I, O, 1.0f, dyh, O, w, I, h,
                                              a->din_accumulate[0] ? 1.0f : 0.0f, dx + r0 * I, I, GLIA_F32,
                                              GLIA__GEMM_PLAIN, NULL)))
            return st;
        if ((st = glia__cuda_gemm_typed(c, true, false, O, I, n, 1.0f, dyh, O, xh, I, h,
                                        r0 == 0 ? glia_param_beta(pw) : 1.0f, dw, I, GLIA_F32, GLIA__GEMM_PLAIN,
                                        NULL)))
            return st;
    }
    if (p->b >= 0) return linear_bias_grad(l, &l->params[p->b], dy, GLIA_F32, N, NULL);
fail:
    return st;
}

/* y(N,O) = act(x(N,I) W(O,I)^T + b(O)), N the rows of x (..., I) */
static glia_status linear_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_linear_attrs *p = l->attrs;
    enum glia_dtype t = a->out->dtype;
    glia_status st;
    if ((st = need_act_in(l, a->out, t, GLIA_CONTIGUOUS, "output")) ||
        (st = need_act_in(l, a->in[0], t, GLIA_CONTIGUOUS, "input")))
        return st;
    int64_t N = glia_linear_rows(&a->in[0]->shape);
    const void *x = a->in[0]->data, *w = l->params[p->w].value->data;
    void *b = p->b >= 0 ? l->params[p->b].value->data : NULL;
    if (t != GLIA_F32 && (st = linear_half_w(l, t, true, &w, &b))) return st;
    if (t == GLIA_F32 && !p->act && mixed_half(l, N) != GLIA_F32) return linear_forward_mixed(l, a, N);
    if (p->act) return linear_forward_act(l, a, t, N, x, w, b);
    return linear_gemm_bias(l, t, N, x, w, b, a->out->data);
}

/* db(O) (+)= sum_n dy(N,O) by the column-sum kernel (its chunks' sums in scratch) */
static glia_status linear_bias_grad(struct glia_layer *l, struct glia_param *pb, const void *dy, enum glia_dtype t,
                                    int64_t N, void *part)
{
    const struct glia_linear_attrs *p = l->attrs;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st = GLIA_OK;
    int64_t O = p->out, R = glia__cuda_col_sum_chunks(N, O);
    if (R > 1 && !part && (st = glia__cuda_scratch(c, (size_t)(R * O) * sizeof(float), &part))) return st;
    CUDA_TRY(l->ctx, glia__cuda_col_sum(f32(pb->grad), dy, t, N, O, glia_param_beta(pb), part, c->stream));
fail:
    return st;
}

/* dW(O,I) (+)= dy(N,O)^T x(N,I) and db(O) (+)= sum_n dy, in f32 whatever t (the type of dy and x). One GEMM does
 * both where the two gradients are both unset (the first backward after a step) or both set (gradient accumulation):
 * cuBLASLt's BGRADB epilogue sums its B operand, which is dy^T here, over the GEMM's k (the batch). It only writes, so
 * with set gradients it writes the sums to scratch (part, else the backend's: nothing else of the call is there then)
 * and a kernel adds those O values to db. A shape it has no algorithm for takes the plain GEMM and a column-sum kernel
 * over dy, with part as its chunks' scratch (NULL: the backend's scratch). */
static glia_status linear_param_grads(struct glia_layer *l, const void *dy, const void *x, enum glia_dtype t, int64_t N,
                                      void *part)
{
    const struct glia_linear_attrs *p = l->attrs;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    struct glia_param *pw = &l->params[p->w], *pb = p->b >= 0 ? &l->params[p->b] : NULL;
    int64_t I = p->in, O = p->out;
    float *dw = f32(pw->grad);
    glia_status st = GLIA_OK;
    if (N == 0) {  /* an empty sum: the GEMM has k = 0 */
        if (pw->grad_unset) CUDA_TRY(l->ctx, cudaMemsetAsync(dw, 0, (size_t)(O * I) * sizeof(float), c->stream));
    } else {
        if (pb && pw->grad_unset == pb->grad_unset) {
            float *sums = f32(pb->grad);
            void *room = part;
            if (!pb->grad_unset && !room && (st = glia__cuda_scratch(c, (size_t)O * sizeof(float), &room))) return st;
            if (!pb->grad_unset) sums = room;
            st = glia__cuda_gemm_typed(c, true, false, O, I, N, 1.0f, dy, O, x, I, t, glia_param_beta(pw), dw, I,
                                       GLIA_F32, GLIA__GEMM_BGRAD_A, sums);
            if (!st && !pb->grad_unset) CUDA_TRY(l->ctx, glia__cuda_axpy(f32(pb->grad), sums, O, 1.0f, c->stream));
            if (st != GLIA_EUNSUPPORTED) return st;
        }
        if ((st = glia__cuda_gemm_typed(c, true, false, O, I, N, 1.0f, dy, O, x, I, t, glia_param_beta(pw), dw, I,
                                        GLIA_F32, GLIA__GEMM_PLAIN, NULL)))
            return st;
    }
    if (pb) return linear_bias_grad(l, pb, dy, t, N, part);
fail:
    return st;
}

/* dx(N,I) (+)= dy(N,O) W(O,I); with din_act (a producer's activation, not accumulating) dx = (dy W) act'(pre(N,I)):
 * for gelu_tanh one cuBLASLt GEMM with its DGELU epilogue (pre is what the producer's GELU_AUX epilogue kept), else
 * (or where cuBLASLt has none) the GEMM and the activation-gradient kernel in place, as the producer would run it */
static glia_status linear_dx(struct glia_layer *l, enum glia_dtype t, int64_t N, const void *dy, const void *w,
                             void *dx, bool accumulate, int din_act, const void *pre)
{
    const struct glia_linear_attrs *p = l->attrs;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    int64_t I = p->in, O = p->out;
    glia_status st = GLIA_EUNSUPPORTED;
    if (din_act == GLIA_LINEAR_ACT_GELU_TANH)
        st = glia__cuda_gemm_aux(c, false, false, N, I, O, 1.0f, dy, O, w, I, t, 0.0f, dx, I, t, GLIA__GEMM_DGELU, NULL,
                                 (void *)pre);
    if (st != GLIA_EUNSUPPORTED) return st;
    if ((st = glia__cuda_gemm_typed(c, false, false, N, I, O, 1.0f, dy, O, w, I, t, accumulate ? 1.0f : 0.0f, dx, I, t,
                                    GLIA__GEMM_PLAIN, NULL)))
        return st;
    if (din_act) CUDA_TRY(l->ctx, glia__cuda_linear_act_grad(dx, dx, pre, t, din_act, N * I, c->stream));
fail:
    return st;
}

/* dh(N,O) = dy act'(h) with an activation (in scratch, with room after it for the bias gradient's chunks); dx(N,I) (+)=
 * dh W(O,I) (W's half copy from the forward when dh is half); then the parameter gradients */
static glia_status linear_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_linear_attrs *p = l->attrs;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    enum glia_dtype t = a->dout->dtype;
    glia_status st;
    if ((st = need_act_in(l, a->dout, t, GLIA_CONTIGUOUS, "output gradient")) ||
        (st = need_act_in(l, a->in[0], t, GLIA_CONTIGUOUS, "input")) ||
        (a->din[0] && (st = need_act_in(l, a->din[0], t, GLIA_CONTIGUOUS, "input gradient"))))
        return st;
    int64_t N = glia_linear_rows(&a->in[0]->shape), O = p->out;
    const void *dy = a->dout->data, *w = l->params[p->w].value->data;
    void *part = NULL;
    if (p->act && !a->dout_preact) {  /* (dout_preact: the layer after this one applied act's gradient) */
        if (!a->saved) return glia_error(l->ctx, GLIA_EINVAL, "[%s] a backward without its saved memory", l->name);
        size_t dh_bytes = ((size_t)(N * O) * glia_dtype_size(t) + 255) & ~(size_t)255;
        size_t part_bytes = (size_t)(glia__cuda_col_sum_chunks(N, O) * O) * sizeof(float);
        void *dh;
        if ((st = glia__cuda_scratch(c, dh_bytes + part_bytes, &dh))) return st;
        CUDA_TRY(l->ctx, glia__cuda_linear_act_grad(dh, dy, a->saved, t, p->act, N * O, c->stream));
        dy = dh;
        part = (char *)dh + dh_bytes;
    }
    int din_act = a->din_act ? glia_linear_act_of(a->din_act) : GLIA_LINEAR_ACT_NONE;
    if (a->din_act && (!din_act || !a->din_act_pre || !a->din[0] || a->din_accumulate[0]))
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] backward asked to apply the gradient of activation %s", l->name,
                          a->din_act);
    if (t == GLIA_F32 && !p->act && !din_act && mixed_half(l, N) != GLIA_F32) return linear_backward_mixed(l, a, N);
    if (a->din[0]) {
        if (t != GLIA_F32 && (st = linear_half_w(l, t, false, &w, NULL))) return st;
        if ((st = linear_dx(l, t, N, dy, w, a->din[0]->data, a->din_accumulate[0], din_act, a->din_act_pre))) return st;
    }
    return linear_param_grads(l, dy, a->in[0]->data, t, N, part);
fail:
    return st;
}

#define LINEAR_CUDA_FLAGS (GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_HALF | GLIA_KERNEL_DECODE)

/* A layer with an activation hands its gradient to the layer after it where that one can apply it */
static uint32_t linear_layer_flags(const struct glia_layer *l)
{
    const struct glia_linear_attrs *p = l->attrs;
    return LINEAR_CUDA_FLAGS | (p->act ? GLIA_KERNEL_DOUT_PREACT : 0);
}

static const struct glia_kernel linear_cuda = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "linear",
    .impl = "cuda",
    .doc = "cuBLASLt GEMM, bias, tanh GELU, its gradient and bias gradient in its epilogue; f32, f16 or bf16 activations",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = LINEAR_CUDA_FLAGS,
    .state_size = sizeof(struct linear_cuda),
    .destroy = linear_destroy,
    .forward = linear_forward,
    .backward = linear_backward,
    .saved_size = linear_saved,
    .layer_flags = linear_layer_flags,
    .din_act = glia_linear_din_act,  /* gelu_tanh by cuBLASLt's DGELU epilogue */
};

/* ---- softmax_cross_entropy ----
 * The CPU kernel refuses a label outside [0, classes) before computing anything. Here the labels
 * are in device memory and looking at them would wait for the GPU, so the forward kernel checks
 * them: a bad row's loss is NaN (so the mean loss is NaN at once) and its gradient row NaN, and
 * the first bad (row, label) goes into a device flag that each forward copies to page-locked host
 * memory behind an event. The layer's next forward or backward whose copy has landed (no waiting)
 * returns GLIA_EINVAL naming the row, the label and that it was seen by an earlier forward, and
 * re-arms the flag; destroy logs one that nothing reported. */

/* l->state */
struct sce_cuda {
    struct glia_tensor *lse;          /* (cap) 8-byte slots holding doubles: the last training forward's
                                         log-sum-exp per row, from which backward recomputes softmax */
    int64_t cap;
    struct glia_tensor *bad;          /* (1) 8 bytes: GLIA__SCE_NO_BAD_LABEL or the first (row << 32 | label) */
    struct glia_tensor *count;        /* (1) 8 bytes holding a double: the positions the last forward counted
                                         (labels not ignore_index), by which backward divides */
    unsigned long long *bad_host;     /* page-locked copy of *bad */
    cudaEvent_t copied;               /* after the latest copy into bad_host */
    bool pending;                     /* a copy was queued that no call has looked at yet */
    int64_t classes;                  /* C of the latest forward */
    const void *grad_at;              /* where the latest training forward wrote the gradient (glia_fwd.din), or NULL */
};

static glia_status sce_bad_label_error(struct glia_layer *l, const struct sce_cuda *p, unsigned long long v)
{
    return glia_error(l->ctx, GLIA_EINVAL,
                      "[%s] label %d at batch row %lld is out of range for %lld classes (found on the GPU by an "
                      "earlier forward, whose loss is NaN)",
                      l->name, (int)(int32_t)(uint32_t)v, (long long)(v >> 32), (long long)p->classes);
}

/* Whether work queued now is being captured into a CUDA graph ([runtime] cuda_graph): the flag's
 * copy and its event are then captured too (an external event record: each replay records it),
 * but a replay does not call the layer, so a bad label seen by a replay is reported by the next
 * call outside a graph (evaluation) or when the layer is destroyed. */
static bool capturing(struct glia__cuda *c) { return glia__cuda_capturing(c); }

/* Report a bad label seen by an earlier forward once its flag's copy has landed. */
static glia_status sce_poll(struct glia_layer *l, struct sce_cuda *p)
{
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st = GLIA_OK;
    if (!p->pending || capturing(c)) return GLIA_OK;
    cudaError_t e = cudaEventQuery(p->copied);
    if (e == cudaErrorNotReady) return GLIA_OK;
    CUDA_TRY(l->ctx, e);
    p->pending = false;
    unsigned long long v = *p->bad_host;
    if (v == GLIA__SCE_NO_BAD_LABEL) return GLIA_OK;
    *p->bad_host = GLIA__SCE_NO_BAD_LABEL;
    CUDA_TRY(l->ctx, cudaMemsetAsync(p->bad->data, 0xff, sizeof v, c->stream));  /* re-arm */
    return sce_bad_label_error(l, p, v);
fail:
    return st;
}

/* The flag, its host copy and event, made at the first forward. */
static glia_status sce_init_flag(struct glia_layer *l, struct sce_cuda *p)
{
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st = GLIA_OK;
    struct glia_shape one = glia_shape_make(1, (int64_t[]){1});
    if ((st = glia_tensor_new(l->backend, GLIA_I64, &one, &p->bad))) return st;
    if ((st = glia_tensor_new(l->backend, GLIA_I64, &one, &p->count))) goto fail;
    CUDA_TRY(l->ctx, cudaMemsetAsync(p->bad->data, 0xff, sizeof *p->bad_host, c->stream));
    if ((st = glia_backend_host_alloc(l->backend, sizeof *p->bad_host, (void **)&p->bad_host))) goto fail;
    *p->bad_host = GLIA__SCE_NO_BAD_LABEL;
    CUDA_TRY(l->ctx, cudaEventCreateWithFlags(&p->copied, cudaEventDisableTiming));
    return GLIA_OK;
fail:
    if (p->bad_host) glia_backend_host_free(l->backend, p->bad_host);
    p->bad_host = NULL;
    glia_tensor_release(p->bad);
    glia_tensor_release(p->count);
    p->bad = p->count = NULL;
    return st;
}

static void sce_destroy(struct glia_layer *l)
{
    struct sce_cuda *p = l->state;
    if (p->pending && cudaStreamSynchronize(glia__cuda_of(l->backend)->stream) == cudaSuccess &&
        *p->bad_host != GLIA__SCE_NO_BAD_LABEL) {  /* the whole stream: graph replays may still run */
        unsigned long long v = *p->bad_host;
        glia_log(l->ctx, GLIA_LOG_ERROR,
                 "[%s] label %d at batch row %lld is out of range for %lld classes (found on the GPU by the last "
                 "forward, whose loss was NaN)",
                 l->name, (int)(int32_t)(uint32_t)v, (long long)(v >> 32), (long long)p->classes);
    }
    if (p->copied) cudaEventDestroy(p->copied);
    if (p->bad_host) glia_backend_host_free(l->backend, p->bad_host);
    glia_tensor_release(p->bad);
    glia_tensor_release(p->count);
    glia_tensor_release(p->lse);
}

/* The rows N (positions: N, or N*T of (N, T, C) logits) and classes C of logits x. */
static void sce_rows(const struct glia_tensor *x, int64_t *N, int64_t *C)
{
    *C = x->shape.dim[x->shape.ndim - 1];
    *N = glia_tensor_numel(x) / (*C > 0 ? *C : 1);
}

/* logits x(N,C) or (N,T,C) (f32, f16 or bf16: GLIA_KERNEL_HALF) and labels y(N) or (N,T) in CUDA memory, of
 * matching sizes */
static glia_status sce_check(struct glia_layer *l, const struct glia_tensor *x, const struct glia_tensor *y)
{
    glia_status st = need_act_in(l, x, x ? x->dtype : GLIA_F32, GLIA_CONTIGUOUS, "logits");
    if (st) return st;
    int64_t N, C;
    sce_rows(x, &N, &C);
    if (!y || y->dtype != GLIA_I32 || y->device.type != GLIA_DEVICE_CUDA || glia_tensor_numel(y) < N)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] labels: expected at least %lld i32 labels in CUDA memory", l->name,
                          (long long)N);
    return GLIA_OK;
}

/* loss(1) = sum_n [(1-e) (-log p[n, y(n)]) + e mean_c (-log p[n, c])] / count over the rows n of x(N,C) (N*T rows of
 * (N,T,C) logits) whose label is not ignore_index (0 when none is), p = softmax; keeps lse(N) when training */
static glia_status sce_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_softmax_cross_entropy_attrs *e = l->attrs;
    struct sce_cuda *p = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st;
    if ((st = sce_poll(l, p)) || (st = sce_check(l, a->in[0], a->labels)) ||
        (st = need_dense_f32(l, a->out, "output")))
        return st;
    int64_t N, C;
    sce_rows(a->in[0], &N, &C);
    if (!p->bad && (st = sce_init_flag(l, p))) return st;
    if (a->train && p->cap < N) {
        glia_tensor_release(p->lse);
        p->lse = NULL;
        p->cap = 0;
        struct glia_shape s = glia_shape_make(1, (int64_t[]){N});
        if ((st = glia_tensor_new(l->backend, GLIA_I64, &s, &p->lse))) return st;
        p->cap = N;
    }
    void *row;
    if ((st = glia__cuda_scratch(c, (size_t)(N > 0 ? N : 1) * sizeof(double), &row))) return st;
    p->classes = C;
    enum glia_dtype t = a->in[0]->dtype;
    if (a->train && a->din &&
        ((st = need_act_in(l, a->din, t, GLIA_CONTIGUOUS, "input gradient")) ||
         (st = need_dense_f32(l, a->dout, "loss scale"))))
        return st;
    void *dx = a->train && a->din ? a->din->data : NULL;
    p->grad_at = dx;
    CUDA_TRY(l->ctx, glia__cuda_sce_forward(f32(a->out), a->train ? (double *)p->lse->data : NULL, row,
                                            p->count->data, p->bad->data, dx, dx ? f32(a->dout) : NULL, a->in[0]->data,
                                            t, a->labels->data, N, C, e->smoothing, e->ignore_index, c->stream));
    CUDA_TRY(l->ctx, cudaMemcpyAsync(p->bad_host, p->bad->data, sizeof *p->bad_host, cudaMemcpyDeviceToHost,
                                     c->stream));
    CUDA_TRY(l->ctx, cudaEventRecordWithFlags(p->copied, c->stream,
                                              capturing(c) ? cudaEventRecordExternal : cudaEventRecordDefault));
    p->pending = true;
fail:
    return st;
}

/* dx(N,C) (+)= scale * (softmax(x) - (1-e) onehot(y) - e/C) / count on the counted rows, 0 on the ignored ones,
 * scale = dout[0] and count (the forward's) read on the GPU */
static glia_status sce_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_softmax_cross_entropy_attrs *e = l->attrs;
    struct sce_cuda *p = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st;
    if ((st = sce_poll(l, p))) return st;
    if (!a->din[0]) return GLIA_OK;
    if (p->grad_at && p->grad_at == a->din[0]->data && !a->din_accumulate[0]) {  /* the forward wrote it */
        p->grad_at = NULL;
        return GLIA_OK;
    }
    if (p->grad_at && p->grad_at == a->in[0]->data)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] the training forward wrote its gradient over the logits; this "
                          "backward asks for it elsewhere or to add it", l->name);
    if ((st = sce_check(l, a->in[0], a->labels)) ||
        (st = need_act_in(l, a->din[0], a->in[0]->dtype, GLIA_CONTIGUOUS, "input gradient")))
        return st;
    if (!a->dout || a->dout->dtype != GLIA_F32 || a->dout->device.type != GLIA_DEVICE_CUDA ||
        glia_tensor_numel(a->dout) < 1)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] the loss scale must be one f32 element in CUDA memory", l->name);
    int64_t N, C;
    sce_rows(a->in[0], &N, &C);
    if (!p->lse || p->cap < N)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] backward without a training forward of this batch", l->name);
    CUDA_TRY(l->ctx, glia__cuda_sce_backward(a->din[0]->data, a->in[0]->data, a->in[0]->dtype, p->lse->data, p->count->data,
                                             a->labels->data, f32(a->dout), N, C, e->smoothing, e->ignore_index,
                                             a->din_accumulate[0] ? 1.0f : 0.0f, c->stream));
fail:
    return st;
}

static const struct glia_kernel sce_cuda = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "softmax_cross_entropy",
    .impl = "cuda",
    .doc = "a warp per row; f32, f16 or bf16 logits read as f32; labels checked on the GPU; the gradient written over "
           "the logits in the forward's pass",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_GRAD_IN_PLACE | GLIA_KERNEL_GRAD_IN_FORWARD |
             GLIA_KERNEL_HALF, /* the logits and their gradient; the loss and its scale f32 */
    .state_size = sizeof(struct sce_cuda),
    .destroy = sce_destroy,
    .forward = sce_forward,
    .backward = sce_backward,
};

/* ---- flatten ----
 * The output is always row-major (N, C*H*W), like the CPU kernel's: a channels_last input is
 * transposed (the backend's transpose on the compute stream), a contiguous one copied, in the
 * activations' type (f32, f16 or bf16: glia_tensor_convert). */

/* t's memory seen as a contiguous tensor of shape s (the same element count) */
static glia_status view_as(const struct glia_tensor *t, const struct glia_shape *s, struct glia_tensor **out)
{
    return glia_tensor_view((struct glia_tensor *)t, 0, s, out);
}

/* y(N, C*H*W) = x(N, C, H, W); from channels_last x(N, H, W, C) a transpose */
static glia_status flatten_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct glia_tensor *y4;
    glia_status st = view_as(a->out, &a->in[0]->shape, &y4);
    if (!st) st = glia_tensor_convert(y4, a->in[0], false);
    glia_tensor_release(y4);
    return st;
}

/* dx (+)= dy in the layout of dx */
static glia_status flatten_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    if (!a->din[0]) return GLIA_OK;
    struct glia_tensor *dy4;
    glia_status st = view_as(a->dout, &a->din[0]->shape, &dy4);
    if (!st) st = glia_tensor_convert(a->din[0], dy4, a->din_accumulate[0]);
    glia_tensor_release(dy4);
    return st;
}

static const struct glia_kernel flatten_cuda = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "flatten",
    .impl = "cuda",
    .doc = "copy, or the backend's transpose from channels_last",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE |
             GLIA_KERNEL_HALF,  /* glia_tensor_convert moves any of the float types */
    .forward = flatten_forward,
    .backward = flatten_backward,
};

/* ---- dropout ----
 * The CPU kernel's mask (glia_dropout_uniform of the step seed and each element's logical NCHW
 * index), so CPU and GPU runs drop the same elements in either memory format; backward recomputes
 * it from the seed of the last training forward, kept in l->state (a captured step's: from the step a
 * replay is handed). */

/* Launch the masked scaling over t's memory: y = (keep ? x * scale : 0) + beta y, values of t's dtype. */
static glia_status dropout_launch(struct glia_layer *l, const struct glia_tensor *t, void *y, const void *x,
                                  struct glia_seed_at seed, float beta)
{
    const struct glia_dropout_attrs *d = l->attrs;
    glia_status st = GLIA_OK;
    bool cl = glia_tensor_memory_format(t) == GLIA_CHANNELS_LAST;
    int64_t C = cl ? t->shape.dim[1] : 1, HW = cl ? t->shape.dim[2] * t->shape.dim[3] : 1;
    float scale = 1.0f / (1.0f - d->p);
    CUDA_TRY(l->ctx, glia__cuda_dropout(y, x, t->dtype, glia_tensor_numel(t), cl, C, HW, seed, d->p, scale, beta,
                                        glia__cuda_of(l->backend)->stream));
fail:
    return st;
}

/* y(N,...) = keep(j) ? x / (1-p) : 0 in training; y = x in eval. Any shape and format; f32, f16 or bf16. */
static glia_status dropout_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_dropout_attrs *d = l->attrs;
    struct glia_seed_at *seed = l->state;
    glia_status st;
    enum glia_memory_format f = glia_tensor_memory_format(a->out);
    enum glia_dtype t = a->out->dtype;
    if ((st = need_act_in(l, a->out, t, f, "output")) || (st = need_act_in(l, a->in[0], t, f, "input"))) return st;
    if (!a->train || d->p == 0.0f) return glia_tensor_convert(a->out, a->in[0], false);
    *seed = glia_seed_of(a);
    return dropout_launch(l, a->out, a->out->data, a->in[0]->data, *seed, 0.0f);
}

/* dx(N,...) (+)= keep(j) ? dy / (1-p) : 0, with the mask of the last training forward */
static glia_status dropout_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_dropout_attrs *d = l->attrs;
    const struct glia_seed_at *seed = l->state;
    if (!a->din[0]) return GLIA_OK;
    glia_status st;
    enum glia_memory_format f = glia_tensor_memory_format(a->dout);
    enum glia_dtype t = a->dout->dtype;
    if ((st = need_act_in(l, a->dout, t, f, "output gradient")) ||
        (st = need_act_in(l, a->din[0], t, f, "input gradient")))
        return st;
    if (d->p == 0.0f) return glia_tensor_convert(a->din[0], a->dout, a->din_accumulate[0]);
    return dropout_launch(l, a->dout, a->din[0]->data, a->dout->data, *seed, a->din_accumulate[0] ? 1.0f : 0.0f);
}

static const struct glia_kernel dropout_cuda = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "dropout",
    .impl = "cuda",
    .doc = "the CPU kernel's counter-based mask, one pass",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE |
             GLIA_KERNEL_HALF | GLIA_KERNEL_DECODE,
    .state_size = sizeof(struct glia_seed_at),
    .forward = dropout_forward,
    .backward = dropout_backward,
};

glia_status glia__cuda_register_dense(struct glia_registry *r)
{
    static const struct glia_kernel *const all[] = {&linear_cuda, &sce_cuda, &flatten_cuda, &dropout_cuda};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        glia_status st = glia_register_kernel(r, all[i]);
        if (st) return st;
    }
    return GLIA_OK;
}
