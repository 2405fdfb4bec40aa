/* backends/cuda/layernorm.c — the CUDA kernel ("cuda") of layer type layernorm: host logic (dtype checks, the row
 * statistics kept for backward, scratch, launches on the backend's stream) reading the attributes the type's plugin
 * fills (glia/types/layernorm.h), with the CPU kernel's semantics. Not the type (its plugin registers it) nor the
 * device code (layernorm_kernels.cu). The statistics are summed in float here (in double on the CPU). */
#include <stdlib.h>
#include <string.h>
#include <glia/types/layernorm.h>
#include "cuda_internal.h"
#include "layernorm_kernels.h"

/* l->state of the kernel */
struct cuda_ln {
    struct glia_tensor *stats;  /* f32 (2*cap) on the device: mean(cap) then rstd(cap), of the last training forward's
                                   rows (owned); re-made when the rows outgrow it */
    int64_t cap;                /* rows stats has room for */
    int64_t kept;               /* rows the statistics belong to, when has_kept */
    bool has_kept;              /* a training forward kept statistics, no eval forward since */
};

static cudaStream_t stream_of(const struct glia_layer *l) { return glia__cuda_of(l->backend)->stream; }

static void ln_destroy(struct glia_layer *l) { glia_tensor_release(((struct cuda_ln *)l->state)->stats); }

/* The element type of a call: that of t[0] (f32, f16 or bf16), checked against the other tensors (NULL entries
 * skipped); GLIA_EINVAL naming the layer otherwise. */
static glia_status call_dtype(const struct glia_layer *l, const struct glia_tensor *const *t, int n,
                              enum glia_dtype *dt)
{
    *dt = t[0]->dtype;
    bool ok = *dt == GLIA_F32 || *dt == GLIA_F16 || *dt == GLIA_BF16;
    for (int i = 1; i < n && ok; i++) ok = !t[i] || t[i]->dtype == *dt;
    if (!ok)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] layernorm (cuda): the tensors of one call must all be f32, f16 or "
                          "bf16 alike (tensor 0 is %s)", l->name, glia_dtype_name(*dt));
    return GLIA_OK;
}

/* Room in p->stats for the statistics of R rows. */
static glia_status stats_room(struct glia_layer *l, struct cuda_ln *p, int64_t R)
{
    if (p->stats && R <= p->cap) return GLIA_OK;
    glia_tensor_release(p->stats);
    p->stats = NULL;
    p->cap = R > 0 ? R : 1;
    return glia_tensor_new(l->backend, GLIA_F32, &(struct glia_shape){1, {2 * p->cap}}, &p->stats);
}

/* y(R, C) = (x - mean)*rstd*weight + bias per row; training keeps mean(R) and rstd(R) for backward, eval nothing. x
 * and y f32, f16 or bf16 alike; statistics and parameters f32. */
static glia_status ln_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_layernorm_attrs *d = l->attrs;
    struct cuda_ln *p = l->state;
    const struct glia_tensor *x = a->in[0];
    enum glia_dtype dt;
    glia_status st = call_dtype(l, (const struct glia_tensor *[]){x, a->out, a->residual, a->sum}, 4, &dt);
    if (st) return st;
    if (!a->residual != !a->sum || (a->residual && (!glia_shape_equal(&a->residual->shape, &x->shape) ||
                                                    !glia_shape_equal(&a->sum->shape, &x->shape))))
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] layernorm (cuda): a residual and its sum of the input's shape, or "
                          "neither", l->name);
    int64_t R = glia_layernorm_rows(&x->shape);
    p->has_kept = false;
    if (a->train && (st = stats_room(l, p, R))) return st;
    float *mean = a->train ? (float *)p->stats->data : NULL, *rstd = a->train ? mean + p->cap : NULL;
    CUDA_TRY(l->ctx, glia__cuda_layernorm_forward(a->out->data, mean, rstd, x->data,
                                                  a->residual ? a->residual->data : NULL, a->sum ? a->sum->data : NULL,
                                                  dt, glia_layernorm_weight(l),
                                                  glia_layernorm_bias(l), R, d->C, (float)d->eps, stream_of(l)));
    p->kept = R;
    p->has_kept = a->train;
fail:
    return st;
}

/* With the kept statistics: dx (+)= rstd*(dxhat - mean(dxhat) - x_hat*mean(dxhat*x_hat)), dxhat = dy*weight, one warp
 * per row; dweight (+)= sum over rows of dy*x_hat and dbias (+)= sum dy, a column reduction in a fixed order. Both in
 * one pass over x and dy where the rows' column sums fit a block's shared memory (C <= 6144), else two. */
static glia_status ln_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_layernorm_attrs *d = l->attrs;
    struct cuda_ln *p = l->state;
    const struct glia_tensor *x = a->in[0];
    int64_t R = glia_layernorm_rows(&x->shape), C = d->C;
    if (!p->has_kept || p->kept != R)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] layernorm backward needs a training forward just before it", l->name);
    struct glia_param *pw = d->w >= 0 ? &l->params[d->w] : NULL, *pb = d->b >= 0 ? &l->params[d->b] : NULL;
    if (!pw && !a->din[0]) return GLIA_OK;
    enum glia_dtype dt;
    glia_status st = call_dtype(l, (const struct glia_tensor *[]){x, a->dout, a->din[0]}, 3, &dt);
    if (st) return st;
    const float *mean = p->stats->data, *rstd = mean + p->cap;
    cudaStream_t s = stream_of(l);
    void *part = NULL;
    if (pw && (st = glia__cuda_scratch(glia__cuda_of(l->backend),
                                       glia__cuda_layernorm_dparams_scratch(R, C) * sizeof(float), &part)))
        return st;
    const char *fuse = getenv("GLIA_CUDA_LN_FUSE");  /* off: the two passes, for measuring against (docs/cuda.md) */
    if (pw && a->din[0] && glia__cuda_layernorm_fused_ok(C) && !(fuse && !strcmp(fuse, "off"))) {
        CUDA_TRY(l->ctx, glia__cuda_layernorm_backward(a->din[0]->data, a->din_accumulate[0], pw->grad->data,
                                                       !pw->grad_unset, pb->grad->data, !pb->grad_unset, part, x->data,
                                                       a->dout->data, dt, mean, rstd, glia_layernorm_weight(l), R, C,
                                                       s));
        return GLIA_OK;
    }
    if (a->din[0])
        CUDA_TRY(l->ctx, glia__cuda_layernorm_dx(a->din[0]->data, a->din_accumulate[0], x->data, a->dout->data, dt,
                                                 mean, rstd, glia_layernorm_weight(l), R, C, s));
    if (pw)
        CUDA_TRY(l->ctx, glia__cuda_layernorm_dparams(pw->grad->data, !pw->grad_unset, pb->grad->data, !pb->grad_unset,
                                                      part, x->data, a->dout->data, dt, mean, rstd, R, C, s));
fail:
    return st;
}

static const struct glia_kernel ln_kernel = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "layernorm",
    .impl = "cuda",
    .doc = "CUDA; a warp per row, parameter gradients a column reduction in a fixed order; f32, f16 or bf16 "
           "activations (statistics and parameters f32)",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_HALF | GLIA_KERNEL_DECODE |
             GLIA_KERNEL_RESIDUAL_IN,
    .state_size = sizeof(struct cuda_ln),
    .destroy = ln_destroy,
    .forward = ln_forward,
    .backward = ln_backward,
};

glia_status glia__cuda_register_layernorm(struct glia_registry *r) { return glia_register_kernel(r, &ln_kernel); }
