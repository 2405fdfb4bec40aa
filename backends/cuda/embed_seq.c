/* backends/cuda/embed_seq.c — the CUDA kernel ("cuda") of layer type position_embedding: host logic (shape and
 * dtype checks, the zeroed gradient rows beyond T, launches on the backend's stream) reading the attributes its
 * own plugin parses (glia/types/position_embedding.h), with the CPU kernel's semantics and bits. Not the type (its
 * plugin registers it) nor the device code (embed_seq_kernels.cu). */
#include "cuda_internal.h"
#include "embed_seq_kernels.h"
#include <glia/types/position_embedding.h>

static float *dev(const struct glia_tensor *t) { return (float *)t->data; }

static cudaStream_t stream_of(const struct glia_layer *l) { return glia__cuda_of(l->backend)->stream; }

/* t must be a contiguous f32 (N, T, C) tensor with T <= max_positions (what the kernels index). */
static glia_status need_seq(const struct glia_layer *l, const struct glia_tensor *t, const char *what)
{
    glia_status st = glia_position_embedding_check(l, t);
    if (st) return st;
    if (t->dtype == GLIA_F32 && glia_tensor_is_contiguous(t)) return GLIA_OK;
    return glia_error(l->ctx, GLIA_EINVAL,
                      "[%s] position_embedding (cuda): %s must be a contiguous f32 tensor, got %s%s", l->name, what,
                      glia_dtype_name(t->dtype), glia_tensor_is_contiguous(t) ? "" : " (strided)");
}

/* y(N, T, C) = x(N, T, C) + weight(max_positions, C)[first + t], first the decode's position (else 0) */
static glia_status pe_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_position_embedding_attrs *d = l->attrs;
    glia_status st;
    int64_t first;
    if ((st = need_seq(l, a->in[0], "the input")) || (st = need_seq(l, a->out, "the output")) ||
        (st = glia_position_embedding_first(l, a, &first)))
        return st;
    const int64_t *s = a->in[0]->shape.dim;
    CUDA_TRY(l->ctx, glia__cuda_pos_embedding_forward(dev(a->out), dev(a->in[0]),
                                                      dev(l->params[d->w].value) + first * s[2], s[0], s[1], s[2],
                                                      stream_of(l)));
fail:
    return st;
}

/* dx(N, T, C) (+)= dy;  dweight[t] (+)= sum over n of dy[n, t] for t < T; rows t >= T zeroed when unset */
static glia_status pe_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_position_embedding_attrs *d = l->attrs;
    struct glia_param *pw = &l->params[d->w];
    glia_status st;
    if ((st = need_seq(l, a->dout, "the output gradient")) ||
        (a->din[0] && (st = need_seq(l, a->din[0], "the input gradient"))))
        return st;
    const int64_t *s = a->dout->shape.dim;
    int64_t N = s[0], T = s[1], C = s[2];
    cudaStream_t q = stream_of(l);
    if (a->din[0])
        CUDA_TRY(l->ctx, glia__cuda_pos_embedding_dx(dev(a->din[0]), dev(a->dout), N * T * C, a->din_accumulate[0], q));
    CUDA_TRY(l->ctx, glia__cuda_pos_embedding_dw(dev(pw->grad), dev(a->dout), N, T, C, !pw->grad_unset, q));
    if (pw->grad_unset && d->max_positions > T)
        CUDA_TRY(l->ctx, cudaMemsetAsync(dev(pw->grad) + T * C, 0,
                                         (size_t)((d->max_positions - T) * C) * sizeof(float), q));
fail:
    return st;
}

static const struct glia_kernel pe_cuda = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "position_embedding",
    .impl = "cuda",
    .doc = "CUDA; the weight gradient in the CPU's order (its bits)",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_BWD_NO_INPUT | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_DECODE,
    .forward = pe_forward,
    .backward = pe_backward,
};

glia_status glia__cuda_register_embed_seq(struct glia_registry *r) { return glia_register_kernel(r, &pe_cuda); }
