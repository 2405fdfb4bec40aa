/* backends/cuda/seq.c — the CUDA kernels ("cuda") of the token-sequence layer types embedding and seq_pool: host
 * logic (dtype and format checks, the argmax kept for backward, scratch, launches on the backend's stream) reading
 * the attributes the types' own plugins parse (glia/types/embedding.h, seq_pool.h), with the CPU kernels'
 * semantics. Not the types (their plugins register them) nor the device code (seq_kernels.cu). One difference from
 * the CPU: a token outside [0, vocab) gives embedding a zero vector and no gradient instead of an error (checking
 * would stall the stream). */
#include "cuda_internal.h"
#include "seq_kernels.h"
#include <glia/types/embedding.h>
#include <glia/types/seq_pool.h>

static float *dev(const struct glia_tensor *t) { return (float *)t->data; }

static cudaStream_t stream_of(const struct glia_layer *l) { return glia__cuda_of(l->backend)->stream; }

/* The memory format of the 4-D tensors t (NULL entries skipped): that of t[0], which every other one must be
 * dense in (a tensor whose C or H*W is 1 has both orders); GLIA_EUNSUPPORTED naming the layer otherwise. */
static glia_status call_format(const struct glia_layer *l, const struct glia_tensor *const *t, int n,
                               enum glia_memory_format *f)
{
    *f = glia_tensor_memory_format(t[0]);
    for (int i = 0; i < n; i++) {
        if (!t[i]) continue;
        const int64_t *d = t[i]->shape.dim;
        bool ok = glia_tensor_is_contiguous(t[i])
                      ? *f == GLIA_CONTIGUOUS || d[1] == 1 || d[2] * d[3] == 1
                      : *f == GLIA_CHANNELS_LAST && glia_tensor_memory_format(t[i]) == GLIA_CHANNELS_LAST;
        if (!ok)
            return glia_error(l->ctx, GLIA_EUNSUPPORTED,
                              "[%s] %s (cuda): tensors of one call must all be %s (dense NCHW or NHWC); tensor %d is not",
                              l->name, l->type->name, glia_memory_format_name(*f), i);
    }
    return GLIA_OK;
}

/* ---- embedding ---- */

/* Whether y (the output or its gradient) holds one dim-vector per position: (N, L, dim) with output = sequence
 * (which must be contiguous), or in channels_last memory (N, 1, L, dim); the kernels' nhwc. */
static glia_status emb_rows(const struct glia_layer *l, const struct glia_tensor *y, bool *rows)
{
    const struct glia_embedding_attrs *d = l->attrs;
    if (!d->sequence) {
        enum glia_memory_format f;
        glia_status st = call_format(l, (const struct glia_tensor *[]){y}, 1, &f);
        *rows = f == GLIA_CHANNELS_LAST;
        return st;
    }
    *rows = true;
    if (glia_tensor_is_contiguous(y)) return GLIA_OK;
    return glia_error(l->ctx, GLIA_EUNSUPPORTED, "[%s] embedding (cuda): the (N, L, dim) output must be contiguous",
                      l->name);
}

/* y(N, dim, 1, L) = weight(vocab, dim)[tok(N, L)] (channels_last: y(N, 1, L, dim); output = sequence: y(N, L, dim)),
 * padding_idx's row like any other; zeros for tokens outside [0, vocab) */
static glia_status emb_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_embedding_attrs *d = l->attrs;
    glia_status st = glia_embedding_check_tokens(l, a->in[0]);
    bool rows;
    if (!st) st = emb_rows(l, a->out, &rows);
    if (st) return st;
    int64_t N = a->in[0]->shape.dim[0], L = a->in[0]->shape.dim[1];
    CUDA_TRY(l->ctx, glia__cuda_embedding_forward(dev(a->out), dev(l->params[d->w].value), a->in[0]->data, N, L,
                                                  d->vocab, d->dim, rows, stream_of(l)));
fail:
    return st;
}

/* dweight(vocab, dim) (+)= dy(N, dim, 1, L) (or dy(N, L, dim)) scattered to the rows of the valid tokens other
 * than padding_idx (zeroed first when unset); no input gradient */
static glia_status emb_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_embedding_attrs *d = l->attrs;
    struct glia_param *pw = &l->params[d->w];
    glia_status st = glia_embedding_check_tokens(l, a->in[0]);
    bool rows;
    if (!st) st = emb_rows(l, a->dout, &rows);
    if (st) return st;
    int64_t N = a->in[0]->shape.dim[0], L = a->in[0]->shape.dim[1];
    cudaStream_t s = stream_of(l);
    if (pw->grad_unset) CUDA_TRY(l->ctx, cudaMemsetAsync(dev(pw->grad), 0, glia_tensor_nbytes(pw->grad), s));
    CUDA_TRY(l->ctx, glia__cuda_embedding_backward(dev(pw->grad), dev(a->dout), a->in[0]->data, N, L, d->vocab, d->dim,
                                                   d->pad, rows, l->backend->options.deterministic, s));
fail:
    return st;
}

static const struct glia_kernel emb_cuda = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "embedding",
    .impl = "cuda",
    .doc = "CUDA",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_DECODE,
    .forward = emb_forward,
    .backward = emb_backward,
};

/* ---- seq_pool ---- */

/* l->state of the CUDA kernel. */
struct sp_state {
    struct glia_tensor *arg;  /* max mode: i32 (N*C), per (n, c) the position of the max in the last training forward
                                 (-1: no valid position); re-made when N*C grows */
    int64_t n_arg;            /* elements of arg kept for backward (0: none) */
};

static void sp_destroy(struct glia_layer *l)
{
    struct sp_state *p = l->state;
    glia_tensor_release(p->arg);
}

/* Valid positions per sample in scratch (mean mode; NULL in max mode, which needs none). */
static glia_status sp_counts(struct glia_layer *l, const struct glia_tensor *tok, int32_t **count)
{
    const struct glia_seq_pool_attrs *d = l->attrs;
    *count = NULL;
    if (d->max) return GLIA_OK;
    int64_t N = tok->shape.dim[0], L = tok->shape.dim[1];
    void *scratch;
    glia_status st = glia__cuda_scratch(glia__cuda_of(l->backend), (size_t)(N > 0 ? N : 1) * sizeof(int32_t), &scratch);
    if (st) return st;
    CUDA_TRY(l->ctx, glia__cuda_seq_count(scratch, tok->data, N, L, d->pad_id, stream_of(l)));
    *count = scratch;
fail:
    return st;
}

/* y(N, C) = mean (float sum in l order / count) or max (first maximal l, a NaN wins) over the valid positions l
 * of x(N, C, 1, L); 0 for a sample without valid positions. Training in max mode keeps the max's position. */
static glia_status sp_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    const struct glia_seq_pool_attrs *d = l->attrs;
    struct sp_state *p = l->state;
    const struct glia_tensor *x = a->in[0], *tok = a->in[1];
    glia_status st = glia_seq_pool_check_tokens(l, tok);
    enum glia_memory_format f;
    if (!st) st = call_format(l, (const struct glia_tensor *[]){x}, 1, &f);
    if (st) return st;
    int64_t N = x->shape.dim[0], C = x->shape.dim[1], L = x->shape.dim[3], n = N * C;
    int32_t *arg = NULL, *count;
    p->n_arg = 0;
    if (a->train && d->max) {
        if (!p->arg || glia_tensor_numel(p->arg) < n) {
            glia_tensor_release(p->arg);
            p->arg = NULL;
            st = glia_tensor_new(l->backend, GLIA_I32, &(struct glia_shape){1, {n > 0 ? n : 1}}, &p->arg);
            if (st) return st;
        }
        arg = p->arg->data;
    }
    if ((st = sp_counts(l, tok, &count))) return st;
    CUDA_TRY(l->ctx, glia__cuda_seq_pool_forward(dev(a->out), arg, dev(x), tok->data, count, N, C, L, d->pad_id,
                                                 d->max, f == GLIA_CHANNELS_LAST, stream_of(l)));
    if (arg) p->n_arg = n;
fail:
    return st;
}

/* dx(N, C, 1, L) (+)= for valid l: dy(N, C) / count (mean) or dy at the kept max (max); 0 elsewhere */
static glia_status sp_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_seq_pool_attrs *d = l->attrs;
    const struct sp_state *p = l->state;
    if (!a->din[0]) return GLIA_OK;
    const struct glia_tensor *tok = a->in[1];
    glia_status st = glia_seq_pool_check_tokens(l, tok);
    enum glia_memory_format f;
    if (!st) st = call_format(l, (const struct glia_tensor *[]){a->din[0], a->in[0]}, 2, &f);
    if (st) return st;
    const int64_t *dim = a->din[0]->shape.dim;
    int64_t N = dim[0], C = dim[1], L = dim[3];
    if ((st = glia_seq_pool_check_kept(l, p->n_arg, N, C))) return st;
    int32_t *count;
    if ((st = sp_counts(l, tok, &count))) return st;
    CUDA_TRY(l->ctx, glia__cuda_seq_pool_backward(dev(a->din[0]), a->din_accumulate[0], dev(a->dout),
                                                  d->max && p->arg ? p->arg->data : NULL, tok->data, count, N, C, L,
                                                  d->pad_id, d->max, f == GLIA_CHANNELS_LAST, stream_of(l)));
fail:
    return st;
}

static const struct glia_kernel sp_cuda = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "seq_pool",
    .impl = "cuda",
    .doc = "CUDA",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_CAPTURABLE,
    .state_size = sizeof(struct sp_state),
    .destroy = sp_destroy,
    .forward = sp_forward,
    .backward = sp_backward,
};

glia_status glia__cuda_register_seq(struct glia_registry *r)
{
    glia_status st = glia_register_kernel(r, &emb_cuda);
    return st ? st : glia_register_kernel(r, &sp_cuda);
}
