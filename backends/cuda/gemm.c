/* backends/cuda/gemm.c — GEMM through cuBLASLt: plans cached per shape, element types, precision, epilogue and
 * pointer alignment; the backend's gemm_f32 slot, and glia__cuda_gemm_ex / glia__cuda_gemm_typed (gemm.h) with a
 * bias, tanh GELU or bias-gradient epilogue, on f32 or half (f16, bf16) operands. Not the linear layer (dense.c), which builds on these plans. */
#include <string.h>
#include "gemm.h"

/* The cuBLASLt compute type of a precision (fp32 tensors throughout; the FAST types round the
 * inputs to TF32, bf16 or fp16 inside the tensor cores and accumulate in fp32). */
static cublasComputeType_t compute_type(enum glia_precision p)
{
    switch (p) {
    case GLIA_PRECISION_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GLIA_PRECISION_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case GLIA_PRECISION_FP16: return CUBLAS_COMPUTE_32F_FAST_16F;
    default: return CUBLAS_COMPUTE_32F;
    }
}

/* The cuBLASLt type of a glia element type (f32, f16 or bf16). */
static cudaDataType_t lt_type(enum glia_dtype t)
{
    return t == GLIA_BF16 ? CUDA_R_16BF : t == GLIA_F16 ? CUDA_R_16F : CUDA_R_32F;
}

static cublasLtEpilogue_t lt_epilogue(enum glia__gemm_epilogue ep)
{
    switch (ep) {
    case GLIA__GEMM_BIAS: return CUBLASLT_EPILOGUE_BIAS;
    case GLIA__GEMM_BGRAD_A: return CUBLASLT_EPILOGUE_BGRADB;  /* our A is cuBLASLt's B (see get_plan) */
    case GLIA__GEMM_GELU: return CUBLASLT_EPILOGUE_GELU;
    case GLIA__GEMM_GELU_BIAS: return CUBLASLT_EPILOGUE_GELU_BIAS;
    case GLIA__GEMM_GELU_AUX: return CUBLASLT_EPILOGUE_GELU_AUX;
    case GLIA__GEMM_GELU_AUX_BIAS: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GLIA__GEMM_DGELU: return CUBLASLT_EPILOGUE_DGELU;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
    }
}

/* Whether epilogue ep reads or writes the vector (bias, bias gradient), whether it writes or reads an aux matrix. */
static bool ep_has_vec(enum glia__gemm_epilogue ep)
{
    return ep == GLIA__GEMM_BIAS || ep == GLIA__GEMM_BGRAD_A || ep == GLIA__GEMM_GELU_BIAS || ep == GLIA__GEMM_GELU_AUX_BIAS;
}
static bool ep_has_aux(enum glia__gemm_epilogue ep)
{
    return ep == GLIA__GEMM_GELU_AUX || ep == GLIA__GEMM_GELU_AUX_BIAS || ep == GLIA__GEMM_DGELU;
}

/* The alignment in bytes (a power of two, at most 256) that pointer p is known to have. cuBLASLt's
 * heuristic assumes 256 unless told: parameters are views into a packed arena, so A, B, C or the
 * bias may be aligned to 4 bytes only. */
static uint32_t alignment_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (!a) return 256;
    a &= ~a + 1;  /* the lowest set bit */
    return a > 256 ? 256 : (uint32_t)a;
}

static int log2_of(uint32_t v)
{
    int lg = 0;
    while ((1u << lg) < v) lg++;
    return lg;
}

/* A plan's `epilogue` field holds the epilogue (0 without one), from bit 16 log2 of the alignment
 * of A, B and C the plan was chosen for, from bit 20 log2 of the epilogue vector's: all are part
 * of its key (the heuristic may pick a kernel that needs more alignment than a later call has). */
static int plan_tag(enum glia__gemm_epilogue ep, uint32_t align, uint32_t vec_align)
{
    return (ep == GLIA__GEMM_PLAIN ? 0 : (int)lt_epilogue(ep)) | log2_of(align) << 16 | log2_of(vec_align) << 20;
}

/* A valid plan whose desc is NULL records that cuBLASLt has no algorithm for its epilogue. */
static void plan_free(struct glia__cuda_plan *p)
{
    if (!p->valid) return;
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->c) cublasLtMatrixLayoutDestroy(p->c);
    memset(p, 0, sizeof *p);
}

/* The GEMM a plan is for. */
struct gemm_key {
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    int compute, tag;
    int ab_type, c_type;  /* cudaDataType_t of A and B, of C */
    enum glia__gemm_epilogue ep;
    uint32_t align;
};

static bool plan_matches(const struct glia__cuda_plan *q, const struct gemm_key *k)
{
    return q->valid && q->ta == k->ta && q->tb == k->tb && q->M == k->M && q->N == k->N && q->K == k->K &&
           q->lda == k->lda && q->ldb == k->ldb && q->ldc == k->ldc && q->compute == k->compute &&
           q->epilogue == k->tag && q->ab_type == k->ab_type && q->c_type == k->c_type;
}

/* Turn plan p into the record that its epilogue has no algorithm (the caller takes a slower way: the debug log says
 * so, once a shape, since the record is cached). */
static void plan_mark_unsupported(struct glia__cuda *c, struct glia__cuda_plan *p, const struct gemm_key *k)
{
    glia_log(c->ctx, GLIA_LOG_DEBUG,
             "cuda:%d: cuBLASLt has no algorithm for epilogue %d on a %lldx%lldx%lld %s GEMM (%s result, %u-byte "
             "alignment); it runs as the plain GEMM and a kernel", c->device, (int)lt_epilogue(k->ep),
             (long long)k->M, (long long)k->N, (long long)k->K,
             k->ab_type == CUDA_R_16BF ? "bf16" : k->ab_type == CUDA_R_16F ? "f16" : "f32",
             k->c_type == k->ab_type ? "same-type" : "f32", (unsigned)k->align);
    plan_free(p);
    *p = (struct glia__cuda_plan){.valid = true, .ta = k->ta, .tb = k->tb, .M = k->M, .N = k->N, .K = k->K,
                                  .lda = k->lda, .ldb = k->ldb, .ldc = k->ldc, .compute = k->compute,
                                  .epilogue = k->tag, .ab_type = k->ab_type, .c_type = k->c_type,
                                  .last_use = ++c->uses};
}

/* Build plan p for k: descriptors and the heuristic's first algorithm. With an epilogue that has
 * no algorithm, p becomes the "unsupported" record and the result is GLIA_EUNSUPPORTED with no
 * context error. vec is the epilogue's vector (its alignment matters to the heuristic), of D's type
 * (cuBLASLt's default bias type, the one PyTorch and llm.c give it: a half D takes a half bias).
 * Row-major C(M,N) = op(A) op(B) is column-major C^T(N,M) = op(B)^T op(A)^T, so cuBLASLt gets
 * B as its first operand and A as its second. */
static glia_status plan_build(struct glia__cuda *c, struct glia__cuda_plan *p, const struct gemm_key *k, void *vec)
{
    glia_status st = GLIA_OK;
    plan_free(p);
    *p = (struct glia__cuda_plan){.ta = k->ta, .tb = k->tb, .M = k->M, .N = k->N, .K = k->K, .lda = k->lda,
                                  .ldb = k->ldb, .ldc = k->ldc, .compute = k->compute, .epilogue = k->tag,
                                  .ab_type = k->ab_type, .c_type = k->c_type};
    p->valid = true;  /* from here plan_free releases what was made */
    cublasOperation_t opb = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = NULL;
    CUBLAS_TRY(c->ctx, cublasLtMatmulDescCreate(&p->desc, (cublasComputeType_t)k->compute, CUDA_R_32F));
    CUBLAS_TRY(c->ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opb, sizeof opb));
    CUBLAS_TRY(c->ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opa, sizeof opa));
    if (k->ep != GLIA__GEMM_PLAIN) {
        cublasLtEpilogue_t e = lt_epilogue(k->ep);
        CUBLAS_TRY(c->ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
        if (ep_has_vec(k->ep))
            CUBLAS_TRY(c->ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof vec));
        if (ep_has_aux(k->ep)) {  /* aux: D's type and layout; its pointer is set per call */
            int64_t ld = k->ldc;
            CUBLAS_TRY(c->ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        }
    }
    /* stored column-major: B is (N x K) untransposed or (K x N) transposed, A likewise */
    cudaDataType_t ab = (cudaDataType_t)k->ab_type, ct = (cudaDataType_t)k->c_type;
    CUBLAS_TRY(c->ctx, cublasLtMatrixLayoutCreate(&p->a, ab, k->tb ? k->K : k->N, k->tb ? k->N : k->K, k->ldb));
    CUBLAS_TRY(c->ctx, cublasLtMatrixLayoutCreate(&p->b, ab, k->ta ? k->M : k->K, k->ta ? k->K : k->M, k->lda));
    CUBLAS_TRY(c->ctx, cublasLtMatrixLayoutCreate(&p->c, ct, k->N, k->M, k->ldc));
    size_t ws = GLIA__CUDA_LT_WORKSPACE;
    uint32_t al = k->align;
    CUBLAS_TRY(c->ctx, cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_TRY(c->ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                            sizeof ws));
    static const cublasLtMatmulPreferenceAttributes_t aligns[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) CUBLAS_TRY(c->ctx, cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &al, sizeof al));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &h, &found);
    if (k->ep != GLIA__GEMM_PLAIN && (hs != CUBLAS_STATUS_SUCCESS || found < 1)) {  /* the caller has another way */
        plan_mark_unsupported(c, p, k);
        st = GLIA_EUNSUPPORTED;
        cublasLtMatmulPreferenceDestroy(pref);
        return st;
    }
    CUBLAS_TRY(c->ctx, hs);
    if (found < 1) {
        st = glia_error(c->ctx, GLIA_EUNSUPPORTED, "cuda:%d: cuBLASLt has no algorithm for a %lldx%lldx%lld %s GEMM%s",
                        c->device, (long long)k->M, (long long)k->N, (long long)k->K,
                        k->ab_type == CUDA_R_16BF ? "bf16" : k->ab_type == CUDA_R_16F ? "f16" : "f32",
                        k->c_type != k->ab_type ? " with an f32 result" : "");
        goto fail;
    }
    p->algo = h.algo;
    p->last_use = ++c->uses;
    cublasLtMatmulPreferenceDestroy(pref);
    return GLIA_OK;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    plan_free(p);
    return st;
}

/* The plan for k: a cached one, or a new one in the least recently used slot. */
static glia_status get_plan(struct glia__cuda *c, const struct gemm_key *k, void *vec, struct glia__cuda_plan **out)
{
    struct glia__cuda_plan *p = &c->plans[0];
    for (int i = 0; i < GLIA__CUDA_N_PLANS; i++) {
        struct glia__cuda_plan *q = &c->plans[i];
        if (plan_matches(q, k)) {
            q->last_use = ++c->uses;
            *out = q;
            return q->desc ? GLIA_OK : GLIA_EUNSUPPORTED;
        }
        if (!q->valid || (p->valid && q->last_use < p->last_use)) p = q;
    }
    *out = p;
    return plan_build(c, p, k, vec);
}

glia_status glia__cuda_gemm_aux(struct glia__cuda *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                const void *A, int64_t lda, const void *B, int64_t ldb, enum glia_dtype ab, float beta,
                                void *C, int64_t ldc, enum glia_dtype ct, enum glia__gemm_epilogue ep, void *vec,
                                void *aux)
{
    glia_status st = GLIA_OK;
    if ((ab != GLIA_F32 && ab != GLIA_F16 && ab != GLIA_BF16) || (ct != ab && ct != GLIA_F32))
        return glia_error(c->ctx, GLIA_EINVAL, "cuda:%d: a GEMM of %s operands with a %s result", c->device,
                          glia_dtype_name(ab), glia_dtype_name(ct));
    if (ep_has_aux(ep) && (ldc % 8 || !aux)) return GLIA_EUNSUPPORTED;
    if (M == 0 || N == 0) return GLIA_OK;
    uint32_t al = alignment_of(A), x;
    if ((x = alignment_of(B)) < al) al = x;
    if ((x = alignment_of(C)) < al) al = x;
    if (ep_has_aux(ep) && (x = alignment_of(aux)) < al) al = x;  /* the aux matrix is read as D is */
    struct gemm_key k = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc,
                         .compute = (int)(ab == GLIA_F32 ? compute_type(c->options.precision) : CUBLAS_COMPUTE_32F),
                         .ab_type = (int)lt_type(ab), .c_type = (int)lt_type(ct), .ep = ep, .align = al};
    k.tag = plan_tag(ep, al, ep_has_vec(ep) ? alignment_of(vec) : 1);
    struct glia__cuda_plan *p = NULL;
    if ((st = get_plan(c, &k, vec, &p))) return st;
    if (ep_has_vec(ep))
        CUBLAS_TRY(c->ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec, sizeof vec));
    if (ep_has_aux(ep))
        CUBLAS_TRY(c->ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                          sizeof aux));
    cublasStatus_t ms = cublasLtMatmul(c->lt, p->desc, &alpha, B, p->a, A, p->b, &beta, C, p->c, C, p->c, &p->algo,
                                       c->lt_workspace, GLIA__CUDA_LT_WORKSPACE, c->stream);
    if (ep != GLIA__GEMM_PLAIN && (ms == CUBLAS_STATUS_NOT_SUPPORTED || ms == CUBLAS_STATUS_INVALID_VALUE)) {
        /* refused before launch (nothing was queued): the caller takes the plain GEMM */
        plan_mark_unsupported(c, p, &k);
        return GLIA_EUNSUPPORTED;
    }
    CUBLAS_TRY(c->ctx, ms);
fail:
    return st;
}

glia_status glia__cuda_gemm_typed(struct glia__cuda *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                  const void *A, int64_t lda, const void *B, int64_t ldb, enum glia_dtype ab,
                                  float beta, void *C, int64_t ldc, enum glia_dtype ct, enum glia__gemm_epilogue ep,
                                  void *vec)
{
    return glia__cuda_gemm_aux(c, ta, tb, M, N, K, alpha, A, lda, B, ldb, ab, beta, C, ldc, ct, ep, vec, NULL);
}

glia_status glia__cuda_gemm_ex(struct glia__cuda *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                               int64_t ldc, enum glia__gemm_epilogue ep, float *vec)
{
    return glia__cuda_gemm_typed(c, ta, tb, M, N, K, alpha, A, lda, B, ldb, GLIA_F32, beta, C, ldc, GLIA_F32, ep, vec);
}

/* C(M,N) = alpha op(A)(M,K) op(B)(K,N) + beta C, row-major, on the compute stream. */
glia_status glia__cuda_gemm_f32(void *priv, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                                 int64_t ldc)
{
    glia__cuda_use(priv);
    return glia__cuda_gemm_ex(priv, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, GLIA__GEMM_PLAIN, NULL);
}

void glia__cuda_gemm_close(struct glia__cuda *c)
{
    for (int i = 0; i < GLIA__CUDA_N_PLANS; i++) plan_free(&c->plans[i]);
}
