/* backends/cuda/attention.c — the CUDA kernel ("cuda") of layer type attention. With bf16 or fp16 activations, causal
 * and without dropout in training, cuDNN's fused flash attention (attention_cudnn.c: plans built once per shape, the
 * first run of each checked against the unfused kernels on its first sequences); otherwise, or when cuDNN refuses (a
 * one-line notice), the unfused kernels in f32: the heads of qkv split into (3, N, heads, T, D), S = Q Kᵀ / sqrt(D) and Y = P V as
 * strided-batched cuBLASLt GEMMs, one kernel for the causal mask, softmax and dropout, the probabilities (N, heads, T,
 * T) kept for backward; backward the GEMMs of dV, dP, dQ, dK around a softmax-backward kernel. A cached decode keeps
 * the keys and values and attends one warp per query. Not the type (plugins/layers/attention registers it). */
#include "cuda_internal.h"
#include "attention_kernels.h"
#include "attention_cudnn.h"
#include "cudnn_graph.h"
#include <math.h>
#include <stdlib.h>
#include <glia/types/attention.h>

/* l->state of the CUDA kernel. */
struct at_state {
    struct glia_tensor *att;    /* (N, heads, T, T) f32: the probabilities of the last training forward, before
                                   dropout; re-made when a larger one is needed */
    int64_t n_att;              /* elements of att kept for backward (0: none) */
    struct glia_seed_at seed;   /* the dropout seed of that forward */
    struct glia_tensor *kv;     /* a cached decode's keys and values (N, heads, 2, kv_t, D) f32 */
    int64_t kv_n, kv_t;         /* the sequences and positions kv has room for */
    struct glia__sdpa sdpa;     /* cuDNN's fused plans of the last shape it ran (B == 0: none) */
    bool sdpa_off;              /* cuDNN refused, or its result was off: the unfused kernels run from then on */
    bool checked[3];            /* the fused forward (eval, training) and backward of that shape checked once */
    bool fused_last;            /* the last training forward ran fused: its backward does too */
    bool fused_captured;        /* sdpa's plans ran inside a CUDA graph capture: a replay may run them any time, so
                                   they stay while the layer lives and other shapes run unfused */
    struct glia_tensor *stats;  /* (N, heads, T) f32: that forward's row logsumexp */
    struct glia_tensor *rng;    /* 4 i64 zeros on the device: the fused graphs' dropout seed (0) and offset (2), each
                                   16-byte aligned as the graphs' tensors say */
};

static void at_destroy(struct glia_layer *l)
{
    struct at_state *s = l->state;
    glia_tensor_release(s->att);
    glia_tensor_release(s->kv);
    glia_tensor_release(s->stats);
    glia_tensor_release(s->rng);
    if (s->sdpa.B) cudaStreamSynchronize(glia__cuda_of(l->backend)->stream);  /* queued runs may use the plans */
    glia__sdpa_free(&s->sdpa);
}

static cudaStream_t stream_of(const struct glia_layer *l) { return glia__cuda_of(l->backend)->stream; }

/* The cuBLASLt compute type of a precision, as the backend's GEMMs use it (gemm.c). */
static cublasComputeType_t compute_of(enum glia_precision p)
{
    switch (p) {
    case GLIA_PRECISION_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GLIA_PRECISION_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case GLIA_PRECISION_FP16: return CUBLAS_COMPUTE_32F_FAST_16F;
    default: return CUBLAS_COMPUTE_32F;
    }
}

/* A column-major f32 layout of rows x cols with leading dim ld, batch matrices stride apart. */
static cublasStatus_t layout(cublasLtMatrixLayout_t *m, uint64_t rows, uint64_t cols, int64_t ld, int32_t batch,
                             int64_t stride)
{
    cublasStatus_t e = cublasLtMatrixLayoutCreate(m, CUDA_R_32F, rows, cols, ld);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatrixLayoutSetAttribute(*m, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    if (e == CUBLAS_STATUS_SUCCESS)
        e = cublasLtMatrixLayoutSetAttribute(*m, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    return e;
}

/* For b < batch: C[b](M, N) = alpha op(A[b])(M, K) op(B[b])(K, N) + beta C[b], all row-major, contiguous rows
 * (row strides: op's source's columns), the matrices of a batch sA, sB, sC floats apart, on the compute stream in
 * the precision of c->options. Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ, so cuBLASLt gets B
 * first. */
static glia_status bgemm(struct glia_layer *l, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t sA, const float *B, int64_t sB, float beta, float *C, int64_t sC,
                         int64_t batch)
{
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st = GLIA_OK;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    if (batch == 0 || M == 0 || N == 0) return GLIA_OK;
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    cublasOperation_t opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint64_t ws = GLIA__CUDA_LT_WORKSPACE;
    CUBLAS_TRY(l->ctx, cublasLtMatmulDescCreate(&desc, compute_of(c->options.precision), CUDA_R_32F));
    CUBLAS_TRY(l->ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_TRY(l->ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    /* cuBLASLt's first operand is B: stored column-major as (ldb x rows of B) */
    CUBLAS_TRY(l->ctx, layout(&la, (uint64_t)(tb ? K : N), (uint64_t)(tb ? N : K), ldb, (int32_t)batch, sB));
    CUBLAS_TRY(l->ctx, layout(&lb, (uint64_t)(ta ? M : K), (uint64_t)(ta ? K : M), lda, (int32_t)batch, sA));
    CUBLAS_TRY(l->ctx, layout(&lc, (uint64_t)N, (uint64_t)M, N, (int32_t)batch, sC));
    CUBLAS_TRY(l->ctx, cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_TRY(l->ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                            sizeof ws));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    CUBLAS_TRY(l->ctx, cublasLtMatmulAlgoGetHeuristic(c->lt, desc, la, lb, lc, lc, pref, 1, &h, &found));
    if (found < 1) {
        st = glia_error(l->ctx, GLIA_EUNSUPPORTED, "[%s] attention (cuda): cuBLASLt has no algorithm for a batch of %lld "
                        "%lldx%lldx%lld GEMMs", l->name, (long long)batch, (long long)M, (long long)N, (long long)K);
        goto fail;
    }
    CUBLAS_TRY(l->ctx, cublasLtMatmul(c->lt, desc, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &h.algo, c->lt_workspace,
                                      GLIA__CUDA_LT_WORKSPACE, c->stream));
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return st;
}

/* The sizes of one call, qkv (N, T, 3C) with C = H * D, B = N * H. */
struct dims {
    int64_t N, T, C, H, D, B;
};

static glia_status dims_of(const struct glia_layer *l, const struct glia_tensor *qkv, struct dims *z)
{
    const struct glia_attention_attrs *a = l->attrs;
    char why[256];
    if (qkv->dtype != GLIA_F32 && qkv->dtype != GLIA_BF16 && qkv->dtype != GLIA_F16)
        return glia_error(l->ctx, GLIA_EUNSUPPORTED, "[%s] attention (cuda) takes f32, bf16 or f16, got %s", l->name,
                          glia_dtype_name(qkv->dtype));
    if (!glia_attention_shape_ok(&qkv->shape, a->heads, why, sizeof why))
        return glia_error(l->ctx, GLIA_ESHAPE, "[%s] %s", l->name, why);
    *z = (struct dims){qkv->shape.dim[0], qkv->shape.dim[1], qkv->shape.dim[2] / 3, a->heads, 0, 0};
    z->D = z->C / z->H;
    z->B = z->N * z->H;
    if (z->B > INT32_MAX)  /* cuBLASLt's batch count is an int32 */
        return glia_error(l->ctx, GLIA_EUNSUPPORTED, "[%s] attention (cuda): %lld (sample, head) pairs are more than "
                          "one batch of GEMMs takes", l->name, (long long)z->B);
    return GLIA_OK;
}

/* Q, K, V (B, T, D) at qkvp, qkvp + BTD, qkvp + 2 BTD (the split heads) */
#define QP(z, p) (p)
#define KP(z, p) ((p) + (z).B * (z).T * (z).D)
#define VP(z, p) ((p) + 2 * (z).B * (z).T * (z).D)

/* Room in s->kv for z.N sequences of `end` positions; the first `keep` positions of each stay (keep > 0: same N). */
static glia_status kv_room(struct glia_layer *l, struct at_state *s, const struct dims *z, int64_t end, int64_t keep)
{
    if (s->kv && s->kv_n == z->N && s->kv_t >= end) return GLIA_OK;
    int64_t t = s->kv_n == z->N && 2 * s->kv_t > end ? 2 * s->kv_t : end;
    struct glia_tensor *kv;
    glia_status st = glia_tensor_new(l->backend, GLIA_F32, &(struct glia_shape){1, {z->B * 2 * t * z->D}}, &kv);
    if (st) return st;
    cudaStream_t cs = stream_of(l);
    for (int64_t r = 0; r < z->B * 2 && keep > 0; r++)
        CUDA_TRY(l->ctx, cudaMemcpyAsync((float *)kv->data + r * t * z->D, (const float *)s->kv->data + r * s->kv_t * z->D,
                                         (size_t)(keep * z->D) * sizeof(float), cudaMemcpyDeviceToDevice, cs));
    glia_tensor_release(s->kv);
    s->kv = kv;
    s->kv_n = z->N;
    s->kv_t = t;
    return GLIA_OK;
fail:
    glia_tensor_release(kv);
    return st;
}

/* The eval forward of a cached decode: the keys and values of positions pos .. pos + T - 1 join the kept ones, then
 * each query attends to positions 0 .. its own. Scratch: the scores (B, T, pos + T). */
static glia_status at_decode(struct glia_layer *l, const struct glia_fwd *a, const struct dims *z)
{
    const struct glia_attention_attrs *at = l->attrs;
    struct at_state *s = l->state;
    if (!at->causal)
        return glia_error(l->ctx, GLIA_EUNSUPPORTED, "[%s] attention: a cached decode needs causal = on (with causal = "
                          "off an earlier position attends to later ones)", l->name);
    int64_t pos = a->pos, end = pos + z->T;
    glia_status st = kv_room(l, s, z, end, pos);
    void *sc;
    if (!st) st = glia__cuda_scratch(glia__cuda_of(l->backend), (size_t)(z->B * z->T * end) * sizeof(float), &sc);
    if (st) return st;
    cudaStream_t cs = stream_of(l);
    CUDA_TRY(l->ctx, glia__cuda_attn_kv_store(s->kv->data, a->in[0]->data, z->N, z->T, z->H, z->D, s->kv_t, pos, cs));
    CUDA_TRY(l->ctx, glia__cuda_attn_decode(a->out->data, sc, a->in[0]->data, s->kv->data, z->N, z->T, z->H, z->D,
                                            s->kv_t, pos, 1.0f / sqrtf((float)z->D), cs));
fail:
    return st;
}

/* y(N, T, C) = softmax(q kᵀ / sqrt(D) + mask) v per head of qkv(N, T, 3C), the probabilities dropped in training when
 * dropout > 0. Scratch: qkvp (3, B, T, D), yp (B, T, D), then z (B, T, T) for the dropped probabilities (training
 * with dropout) or the probabilities themselves (eval). Training keeps the probabilities in the state. */
static glia_status forward_f32(struct glia_layer *l, const struct glia_fwd *a, struct dims z)
{
    const struct glia_attention_attrs *at = l->attrs;
    struct at_state *s = l->state;
    glia_status st = GLIA_OK;
    if (a->decode && !a->train) return at_decode(l, a, &z);
    s->n_att = 0;
    int64_t btd = z.B * z.T * z.D, btt = z.B * z.T * z.T;
    float p = a->train ? at->p : 0.0f, scale = 1.0f / sqrtf((float)z.D);
    if (a->train && (!s->att || glia_tensor_numel(s->att) < btt)) {
        glia_tensor_release(s->att);
        s->att = NULL;
        if ((st = glia_tensor_new(l->backend, GLIA_F32, &(struct glia_shape){1, {btt > 0 ? btt : 1}}, &s->att)))
            return st;
    }
    bool need_z = !a->train || p > 0;
    void *scratch;
    size_t n = (size_t)(4 * btd + (need_z ? btt : 0));
    if ((st = glia__cuda_scratch(glia__cuda_of(l->backend), (n ? n : 1) * sizeof(float), &scratch))) return st;
    float *qkvp = scratch, *yp = qkvp + 3 * btd, *zb = yp + btd;
    float *att = a->train ? (float *)s->att->data : zb;
    struct glia_seed_at seed = glia_seed_of(a);
    cudaStream_t cs = stream_of(l);
    CUDA_TRY(l->ctx, glia__cuda_attn_split(qkvp, a->in[0]->data, z.N, z.T, 3, z.H, z.D, cs));
    /* att(b) (T, T) = scale Q(b) K(b)ᵀ */
    if ((st = bgemm(l, false, true, z.T, z.T, z.D, scale, QP(z, qkvp), z.T * z.D, KP(z, qkvp), z.T * z.D, 0.0f, att,
                    z.T * z.T, z.B)))
        return st;
    CUDA_TRY(l->ctx, glia__cuda_attn_softmax(att, zb, z.B, z.T, at->causal, p, seed, cs));
    /* yp(b) (T, D) = Z(b) V(b), Z the dropped probabilities (the probabilities without dropout) */
    if ((st = bgemm(l, false, false, z.T, z.D, z.T, 1.0f, p > 0 ? zb : att, z.T * z.T, VP(z, qkvp), z.T * z.D, 0.0f,
                    yp, z.T * z.D, z.B)))
        return st;
    CUDA_TRY(l->ctx, glia__cuda_attn_merge(a->out->data, false, yp, z.N, z.T, 1, z.H, z.D, cs));
    if (a->train) {
        s->n_att = btt;
        s->seed = seed;
    }
fail:
    return st;
}

/* dqkv(N, T, 3C) (+)= the gradient of the last training forward from qkv and dy(N, T, C), with its probabilities:
 * dV = Zᵀ dY, W = dY Vᵀ, dS = P ∘ (W dropped − rowsum(P ∘ W dropped)) / sqrt(D), dQ = dS K, dK = dSᵀ Q. Scratch: qkvp
 * and dqkvp (3, B, T, D), dyp (B, T, D), w (B, T, T). */
static glia_status backward_f32(struct glia_layer *l, const struct glia_bwd *a, struct dims z)
{
    const struct glia_attention_attrs *at = l->attrs;
    const struct at_state *s = l->state;
    glia_status st = GLIA_OK;
    int64_t btd = z.B * z.T * z.D, btt = z.B * z.T * z.T;
    if (s->n_att != btt || a->dout->dtype != GLIA_F32)
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] attention backward needs a training forward just before it",
                          l->name);
    float scale = 1.0f / sqrtf((float)z.D);
    void *scratch;
    size_t n = (size_t)(7 * btd + btt);
    if ((st = glia__cuda_scratch(glia__cuda_of(l->backend), (n ? n : 1) * sizeof(float), &scratch))) return st;
    float *qkvp = scratch, *dqkvp = qkvp + 3 * btd, *dyp = dqkvp + 3 * btd, *w = dyp + btd;
    const float *att = s->att->data;
    cudaStream_t cs = stream_of(l);
    CUDA_TRY(l->ctx, glia__cuda_attn_split(qkvp, a->in[0]->data, z.N, z.T, 3, z.H, z.D, cs));
    CUDA_TRY(l->ctx, glia__cuda_attn_split(dyp, a->dout->data, z.N, z.T, 1, z.H, z.D, cs));
    if (at->p > 0) CUDA_TRY(l->ctx, glia__cuda_attn_dropped(w, att, z.B, z.T, at->p, s->seed, cs));
    /* dV(b) (T, D) = Z(b)ᵀ dY(b) */
    if ((st = bgemm(l, true, false, z.T, z.D, z.T, 1.0f, at->p > 0 ? w : att, z.T * z.T, dyp, z.T * z.D, 0.0f,
                    VP(z, dqkvp), z.T * z.D, z.B)))
        return st;
    /* w(b) (T, T) = dY(b) V(b)ᵀ, then the scores' gradient times 1/sqrt(D) */
    if ((st = bgemm(l, false, true, z.T, z.T, z.D, 1.0f, dyp, z.T * z.D, VP(z, qkvp), z.T * z.D, 0.0f, w, z.T * z.T,
                    z.B)))
        return st;
    CUDA_TRY(l->ctx, glia__cuda_attn_softmax_backward(w, att, z.B, z.T, at->causal, at->p, s->seed, scale, cs));
    /* dQ(b) (T, D) = dS(b) K(b); dK(b) (T, D) = dS(b)ᵀ Q(b) */
    if ((st = bgemm(l, false, false, z.T, z.D, z.T, 1.0f, w, z.T * z.T, KP(z, qkvp), z.T * z.D, 0.0f, QP(z, dqkvp),
                    z.T * z.D, z.B)))
        return st;
    if ((st = bgemm(l, true, false, z.T, z.D, z.T, 1.0f, w, z.T * z.T, QP(z, qkvp), z.T * z.D, 0.0f, KP(z, dqkvp),
                    z.T * z.D, z.B)))
        return st;
    CUDA_TRY(l->ctx, glia__cuda_attn_merge(a->din[0]->data, a->din_accumulate[0], dqkvp, z.N, z.T, 3, z.H, z.D, cs));
fail:
    return st;
}

/* ---- bf16 / fp16 activations: cuDNN's fused attention, or the f32 kernels between conversions ---- */

/* An f32 tensor of t's shape holding t's values (convert) or not yet (garbage). NULL on failure (the context says). */
static struct glia_tensor *as_f32(struct glia_layer *l, const struct glia_tensor *t, bool convert)
{
    struct glia_tensor *f = NULL;
    if (glia_tensor_new(l->backend, GLIA_F32, &t->shape, &f)) return NULL;
    if (convert && glia_tensor_convert(f, t, false)) {
        glia_tensor_release(f);
        return NULL;
    }
    return f;
}

/* The forward of half activations through the f32 kernels: qkv converted, y converted back into a->out (or into
 * y32 when the caller gives it: the check of a fused run). */
static glia_status forward_via_f32(struct glia_layer *l, const struct glia_fwd *a, const struct dims *z,
                                   struct glia_tensor *y32)
{
    struct glia_tensor *x = as_f32(l, a->in[0], true), *y = y32 ? glia_tensor_retain(y32) : as_f32(l, a->out, false);
    glia_status st = x && y ? GLIA_OK : GLIA_ENOMEM;
    struct glia_fwd b = *a;
    const struct glia_tensor *in[1] = {x};
    b.in = in;
    b.out = y;
    if (!st) st = forward_f32(l, &b, *z);
    if (!st && !y32) st = glia_tensor_convert(a->out, y, false);
    glia_tensor_release(x);
    glia_tensor_release(y);
    return st;
}

/* The backward of half activations through the f32 kernels (after forward_via_f32's training forward): dqkv into
 * a->din[0] (+= with din_accumulate), or into dx32 when the caller gives it. */
static glia_status backward_via_f32(struct glia_layer *l, const struct glia_bwd *a, const struct dims *z,
                                    struct glia_tensor *dx32)
{
    struct glia_tensor *x = as_f32(l, a->in[0], true), *dy = as_f32(l, a->dout, true);
    struct glia_tensor *dx = dx32 ? glia_tensor_retain(dx32) : as_f32(l, a->din[0], false);
    glia_status st = x && dy && dx ? GLIA_OK : GLIA_ENOMEM;
    struct glia_bwd b = *a;
    const struct glia_tensor *in[1] = {x};
    struct glia_tensor *din[1] = {dx};
    const bool acc[1] = {false};
    b.in = in;
    b.dout = dy;
    b.din = din;
    b.din_accumulate = acc;
    if (!st) st = backward_f32(l, &b, *z);
    if (!st && !dx32) st = glia_tensor_convert(a->din[0], dx, a->din_accumulate[0]);
    glia_tensor_release(x);
    glia_tensor_release(dy);
    glia_tensor_release(dx);
    return st;
}

/* The fused path off for this layer from now on, with one line saying why. */
static void fused_off(struct glia_layer *l, const char *why)
{
    struct at_state *s = l->state;
    s->sdpa_off = true;
    glia_log(l->ctx, GLIA_LOG_WARN, "[%s] attention: %s; the unfused kernels run instead", l->name, why);
    if (s->fused_captured) return;  /* the plans stay for the CUDA graphs that ran them */
    if (s->sdpa.B) cudaStreamSynchronize(stream_of(l));
    glia__sdpa_free(&s->sdpa);
}

/* Whether cuDNN's fused attention can run this call (train: a training forward or the backward), its plans for the
 * shape built (once; a refusal turns it off with a notice). */
static bool fused_ready(struct glia_layer *l, const struct dims *z, enum glia_dtype dt, bool train, bool bwd)
{
    const struct glia_attention_attrs *at = l->attrs;
    struct at_state *s = l->state;
    if (s->sdpa_off || (dt != GLIA_BF16 && dt != GLIA_F16) || !at->causal || (train && at->p > 0) || z->D % 8 ||
        z->D > 256 || z->C % 8)
        return false;
    struct glia__sdpa *q = &s->sdpa;
    cudnnDataType_t type = dt == GLIA_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    if (q->B != z->N || q->H != z->H || q->T != z->T || q->D != z->D || q->type != type) {
        if (s->fused_captured) return false;
        if (q->B) cudaStreamSynchronize(c->stream);  /* queued runs may still use the plans */
        glia__sdpa_free(q);
        *q = (struct glia__sdpa){.B = z->N, .H = z->H, .T = z->T, .D = z->D, .type = type,
                                 .refuse = l->backend->options.deterministic
                                               ? GLIA__CG_NOTE(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) : 0u};
        s->checked[0] = s->checked[1] = s->checked[2] = false;
    }
    char why[256] = "", line[400];
    cudnnStatus_t e = CUDNN_STATUS_SUCCESS;
    if (!bwd && !q->fwd[train]) e = glia__sdpa_build_fwd(c->dnn, q, train, why, sizeof why);
    if (bwd && !q->bwd) e = glia__sdpa_build_bwd(c->dnn, q, why, sizeof why);
    if (e != CUDNN_STATUS_SUCCESS) {
        snprintf(line, sizeof line, "cuDNN's fused attention refused (N %lld, heads %lld, T %lld, D %lld): %s",
                 (long long)z->N, (long long)z->H, (long long)z->T, (long long)z->D, why);
        fused_off(l, line);
        return false;
    }
    if (!s->rng && glia_tensor_zeros(l->backend, GLIA_I64, &(struct glia_shape){1, {4}}, &s->rng)) return false;
    return true;
}

/* The largest |got - want| / (1 + |want|) of two tensors of n elements (got in any float type, want f32), read on
 * the host; -1 when they cannot be read. */
static double off_by(struct glia_layer *l, const struct glia_tensor *got, const struct glia_tensor *want)
{
    struct glia_tensor *g = as_f32(l, got, true);
    int64_t n = glia_tensor_numel(want);
    float *hg = malloc((size_t)n * sizeof(float)), *hw = malloc((size_t)n * sizeof(float));
    double worst = -1;
    if (g && hg && hw && !glia_tensor_to_host(g, hg, (size_t)n * sizeof(float)) &&
        !glia_tensor_to_host(want, hw, (size_t)n * sizeof(float))) {
        worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = fabs((double)hg[i] - hw[i]) / (1.0 + fabs((double)hw[i]));
            worst = d > worst || d != d ? d : worst;  /* a NaN is off */
        }
    }
    glia_tensor_release(g);
    free(hg);
    free(hw);
    return worst;
}

/* How far a fused result may be from the f32 kernels': the activations' rounding, a few times over. */
static double fused_tol(enum glia_dtype dt) { return dt == GLIA_BF16 ? 3e-2 : 5e-3; }

/* The first fused run of a kind checked against the f32 kernels on the same input; false (and the fused path off,
 * with a notice) when it is off by more than the rounding allows. want holds the f32 kernels' result. */
static bool fused_agrees(struct glia_layer *l, const struct glia_tensor *got, const struct glia_tensor *want,
                         const char *what)
{
    double d = off_by(l, got, want);
    if (d >= 0 && d <= fused_tol(got->dtype)) return true;
    char line[200];
    snprintf(line, sizeof line, "cuDNN's fused attention %s differs from the unfused kernels' by %.3g (more than %s "
             "rounding allows)", what, d, glia_dtype_name(got->dtype));
    fused_off(l, line);
    return false;
}

/* y(N, T, C) of half qkv by cuDNN's fused attention; training keeps the statistics for backward. */
static glia_status forward_fused(struct glia_layer *l, const struct glia_fwd *a, const struct dims *z)
{
    struct at_state *s = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st = GLIA_OK;
    int64_t rows = z->N * z->H * z->T;
    if (a->train && (!s->stats || glia_tensor_numel(s->stats) < rows)) {
        glia_tensor_release(s->stats);
        s->stats = NULL;
        if ((st = glia_tensor_new(l->backend, GLIA_F32, &(struct glia_shape){1, {rows}}, &s->stats))) return st;
    }
    void *ws = NULL;
    int64_t n = s->sdpa.fwd_ws[a->train];
    if (n > 0 && (st = glia__cuda_scratch(c, (size_t)n, &ws))) return st;
    s->fused_captured = s->fused_captured || glia__cuda_capturing(c);
    CUDNN_TRY(l->ctx, glia__sdpa_forward(c->dnn, &s->sdpa, a->train, a->in[0]->data, a->out->data,
                                         a->train ? (float *)s->stats->data : NULL, (int64_t *)s->rng->data, ws,
                                         1.0f / sqrtf((float)z->D)));
fail:
    return st;
}

/* dqkv of half tensors by cuDNN's fused backward, after a fused training forward: into a->din[0], or through a
 * scratch copy added into it with din_accumulate. Scratch: the workspace, dq_acc (N, T, C) f32 (zeroed), the row
 * sums (N, heads, T) f32, and the copy. */
static glia_status backward_fused(struct glia_layer *l, const struct glia_bwd *a, const struct dims *z,
                                  struct glia_tensor *into)
{
    struct at_state *s = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st = GLIA_OK;
    int64_t ws = (s->sdpa.bwd_ws + 255) / 256 * 256, acc = z->N * z->T * z->C, rows = z->N * z->H * z->T;
    void *scratch;
    if ((st = glia__cuda_scratch(c, (size_t)ws + (size_t)(acc + rows) * sizeof(float), &scratch))) return st;
    float *dq_acc = (float *)((char *)scratch + ws), *sum = dq_acc + acc;
    CUDA_TRY(l->ctx, cudaMemsetAsync(dq_acc, 0, (size_t)acc * sizeof(float), c->stream));
    s->fused_captured = s->fused_captured || glia__cuda_capturing(c);
    CUDNN_TRY(l->ctx, glia__sdpa_backward(c->dnn, &s->sdpa, a->in[0]->data, a->out->data, a->dout->data,
                                          (const float *)s->stats->data, into->data, dq_acc, sum,
                                          (int64_t *)s->rng->data, ws > 0 ? scratch : NULL,
                                          1.0f / sqrtf((float)z->D)));
fail:
    return st;
}

/* A fused run's check compares its first CHECK_SEQS sequences only: each sequence attends to itself alone, so they
 * stand for the batch, and the f32 kernels' probabilities (N, heads, T, T) and scratch for the whole batch are never
 * made (at GPT-2's 32 x 1024, 1.6 GB a layer, which the state would keep). */
#define CHECK_SEQS 2

/* The first n sequences of t (N, T, ...) as a view; NULL on failure (the context says). */
static struct glia_tensor *first_seqs(const struct glia_tensor *t, int64_t n)
{
    struct glia_shape sh = t->shape;
    sh.dim[0] = n;
    struct glia_tensor *v = NULL;
    return glia_tensor_view((struct glia_tensor *)t, 0, &sh, &v) ? NULL : v;
}

/* z of its first n sequences */
static struct dims first_dims(const struct dims *z, int64_t n)
{
    struct dims d = *z;
    d.N = n < z->N ? n : z->N;
    d.B = d.N * d.H;
    return d;
}

/* The f32 kernels' probabilities of a check dropped: the fused backward does not read them. */
static void drop_probs(struct at_state *s)
{
    glia_tensor_release(s->att);
    s->att = NULL;
    s->n_att = 0;
}

/* The first fused forward of this shape (and mode) checked against the f32 kernels on its first sequences; where it
 * is off (the fused path turned off), the f32 kernels' forward of the whole batch stands, with their state. */
static glia_status check_forward(struct glia_layer *l, const struct glia_fwd *a, const struct dims *z)
{
    struct at_state *s = l->state;
    struct dims z0 = first_dims(z, CHECK_SEQS);
    struct glia_tensor *x = first_seqs(a->in[0], z0.N), *y = first_seqs(a->out, z0.N);
    struct glia_tensor *want = y ? as_f32(l, y, false) : NULL;
    glia_status st = x && y && want ? GLIA_OK : GLIA_ENOMEM;
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd f = *a;
    f.in = in;
    f.out = y;
    if (!st) st = forward_via_f32(l, &f, &z0, want);
    bool agree = !st && fused_agrees(l, y, want, a->train ? "training forward" : "forward");
    glia_tensor_release(x);
    glia_tensor_release(y);
    glia_tensor_release(want);
    drop_probs(s);
    if (!st && !agree) st = forward_via_f32(l, a, z, NULL);
    return st;
}

/* The first fused backward of this shape, in `into`, checked against the f32 kernels' forward and backward on its
 * first sequences; where it is off (the fused path turned off), the f32 kernels' gradient of the whole batch goes
 * into `into`. */
static glia_status check_backward(struct glia_layer *l, const struct glia_bwd *a, const struct dims *z,
                                  struct glia_tensor *into)
{
    struct at_state *s = l->state;
    struct dims z0 = first_dims(z, CHECK_SEQS);
    int64_t n = z0.N;
    struct glia_tensor *x = first_seqs(a->in[0], n), *y = first_seqs(a->out, n), *dy = first_seqs(a->dout, n);
    struct glia_tensor *got = first_seqs(into, n), *y32 = y ? as_f32(l, y, false) : NULL;
    struct glia_tensor *want = got ? as_f32(l, got, false) : NULL;
    glia_status st = x && y && dy && got && y32 && want ? GLIA_OK : GLIA_ENOMEM;
    const struct glia_tensor *in[1] = {x};
    struct glia_tensor *din[1] = {got};
    const bool acc[1] = {false};
    struct glia_fwd f = {.in = in, .n_in = 1, .out = y32, .train = true};
    struct glia_bwd b = *a;
    b.in = in;
    b.out = y;
    b.dout = dy;
    b.din = din;
    b.din_accumulate = acc;
    if (!st) st = forward_via_f32(l, &f, &z0, y32);
    if (!st) st = backward_via_f32(l, &b, &z0, want);
    bool agree = !st && fused_agrees(l, got, want, "backward");
    glia_tensor_release(x);
    glia_tensor_release(y);
    glia_tensor_release(dy);
    glia_tensor_release(got);
    glia_tensor_release(y32);
    glia_tensor_release(want);
    drop_probs(s);
    if (st || agree) return st;
    struct glia_tensor *y_all = as_f32(l, a->out, false), *dx_all = as_f32(l, into, false);
    struct glia_fwd fa = {.in = a->in, .n_in = a->n_in, .out = y_all, .train = true};
    st = y_all && dx_all ? GLIA_OK : GLIA_ENOMEM;
    if (!st) st = forward_via_f32(l, &fa, z, y_all);
    if (!st) st = backward_via_f32(l, a, z, dx_all);
    if (!st) st = glia_tensor_convert(into, dx_all, false);
    glia_tensor_release(y_all);
    glia_tensor_release(dx_all);
    return st;
}

static glia_status at_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct at_state *s = l->state;
    struct dims z;
    glia_status st = dims_of(l, a->in[0], &z);
    if (st) return st;
    enum glia_dtype dt = a->in[0]->dtype;
    s->fused_last = false;
    if (dt == GLIA_F32) return forward_f32(l, a, z);
    if ((a->decode && !a->train) || !fused_ready(l, &z, dt, a->train, false)) return forward_via_f32(l, a, &z, NULL);
    if ((st = forward_fused(l, a, &z))) return st;
    if (!s->checked[a->train]) {  /* once per shape: the f32 kernels on the same input agree */
        if ((st = check_forward(l, a, &z)) || s->sdpa_off) return st;
        s->checked[a->train] = true;
    }
    s->fused_last = a->train;
    return GLIA_OK;
}

static glia_status at_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    struct at_state *s = l->state;
    if (!a->din[0]) return GLIA_OK;
    struct dims z;
    glia_status st = dims_of(l, a->in[0], &z);
    if (st) return st;
    enum glia_dtype dt = a->dout->dtype;
    if (dt == GLIA_F32) return backward_f32(l, a, z);
    if (s->fused_last && !fused_ready(l, &z, dt, true, true)) {
        /* cuDNN refused the backward of a fused forward: the f32 kernels' training forward again, for their state */
        struct glia_tensor *y = as_f32(l, a->out, false);
        struct glia_fwd f = {a->in, a->n_in, y, NULL, true, 0, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        st = y ? forward_via_f32(l, &f, &z, y) : GLIA_ENOMEM;
        glia_tensor_release(y);
        s->fused_last = false;
        if (st) return st;
    }
    if (!s->fused_last) return backward_via_f32(l, a, &z, NULL);
    struct glia_tensor *into = a->din[0];
    if (a->din_accumulate[0] && (st = glia_tensor_new(l->backend, dt, &a->din[0]->shape, &into))) return st;
    st = backward_fused(l, a, &z, into);
    if (!st && !s->checked[2]) {  /* once per shape: the f32 kernels' forward and backward on the same input */
        st = check_backward(l, a, &z, into);
        s->checked[2] = !st && !s->sdpa_off;
    }
    if (!st && into != a->din[0]) st = glia_tensor_convert(a->din[0], into, true);
    if (into != a->din[0]) glia_tensor_release(into);
    return st;
}

static const struct glia_kernel at_cuda = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "attention",
    .impl = "cuda",
    .doc = "CUDA: bf16/fp16 through cuDNN's fused flash attention, else cuBLASLt batched GEMMs around a softmax kernel",
    .device_type = GLIA_DEVICE_CUDA,
    /* the fused backward reads the output; capturable: a pass before each capture builds and checks the fused plans
     * (fused_ready), which then stay while the layer lives (fused_captured) */
    .flags = GLIA_KERNEL_DECODE | GLIA_KERNEL_HALF | GLIA_KERNEL_CAPTURABLE,
    .state_size = sizeof(struct at_state),
    .destroy = at_destroy,
    .forward = at_forward,
    .backward = at_backward,
};

glia_status glia__cuda_register_attention(struct glia_registry *r) { return glia_register_kernel(r, &at_cuda); }
