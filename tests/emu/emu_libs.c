/* tests/emu/emu_libs.c — reference implementations, on the CPU, of the cuDNN and cuBLASLt calls the
 * CUDA backend makes, following their documented semantics (column-major cuBLASLt with transposes,
 * bias and bias-gradient epilogues, strided batches; cuDNN's legacy convolution API with NCHW/NHWC descriptors,
 * groups, alpha/beta), checking that the descriptors agree with each other and saying on stderr what
 * does not. Each computing call checks its arguments when called, copies what it needs (descriptors
 * by value, alpha and beta from their host pointers, data pointers) and queues the computation on its
 * stream, so that it runs in the stream's order and can be captured into a CUDA graph and launched
 * again; cudnnFind*AlgorithmEx synchronize and so fail on a capturing stream. GLIA_EMU_CUDNN_WINOGRAD=1 lists a
 * nonfused Winograd algorithm first, whose results are less exact. Not fast and not cuDNN: two "algorithms" that
 * compute alike (three with that one), no workspace use, loops in double. */
#include <cublasLt.h>
#include <cudnn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

/* ---- element access for the three data types ---- */

static double load(int type, const void *p, int64_t i)
{
    switch (type) {
    case 1: {  /* bf16 */
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    case 2: return (double)((const _Float16 *)p)[i];
    default: return ((const float *)p)[i];
    }
}

/* Element i of p (just stored from v) rounded to its other neighbor around v instead, when v falls between two
 * values of the type: what a different order of additions can give. */
static void round_other_way(int type, void *p, int64_t i, double v)
{
    double got = load(type, p, i);
    if (got == v || got == 0 || !isfinite(got) || !isfinite(v) || (got < 0) != (v < 0)) return;
    if (type == 1 || type == 2) {  /* bf16, half: sign and magnitude, so the magnitude's next or previous bits */
        uint16_t *h = (uint16_t *)p + i;
        *h = (uint16_t)(fabs(v) > fabs(got) ? *h + 1 : *h - 1);
    } else {
        float *f = (float *)p + i;
        *f = nextafterf(*f, v > got ? INFINITY : -INFINITY);
    }
}

/* Bytes of an element of the type (lt_type). */
static size_t elem_size(int type) { return type == 0 ? 4 : 2; }

static void store(int type, void *p, int64_t i, double v)
{
    switch (type) {
    case 1: {  /* bf16, round to nearest even */
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        if ((u & 0x7fffffffu) > 0x7f800000u) u = 0x7fc00000u;
        else u += 0x7fffu + ((u >> 16) & 1u);
        ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
        break;
    }
    case 2: ((_Float16 *)p)[i] = (_Float16)v; break;
    default: ((float *)p)[i] = (float)v; break;
    }
}

/* A heap copy of the n bytes at p: a call's arguments for its queued computation, freed with free(). */
static void *dup_args(const void *p, size_t n)
{
    void *q = malloc(n);
    if (q) memcpy(q, p, n);
    return q;
}

/* The doubles a queued computation accumulates into: there is no status to return by then. */
static double *alloc_acc(const char *call, int64_t n, bool zero)
{
    size_t k = (size_t)(n > 0 ? n : 1);
    double *p = zero ? calloc(k, sizeof *p) : malloc(k * sizeof *p);
    if (!p) {
        fprintf(stderr, "emu: %s: out of memory for %lld doubles\n", call, (long long)n);
        abort();
    }
    return p;
}

/* ---- cuBLASLt ---- */

struct cublasLtContext {
    int dummy;
};
struct emu_desc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t ta, tb;
    cublasLtEpilogue_t epilogue;
    void *bias;
    int32_t bias_type;  /* cudaDataType_t of the bias (gradient) vector; -1: D's type */
    void *aux;          /* the GELU_AUX epilogues' matrix: D's type, column-major with leading dimension aux_ld */
    int64_t aux_ld;
};
struct emu_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;   /* CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT (1) */
    int64_t stride;  /* CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, in elements (0) */
};

static int lt_type(cudaDataType_t t)
{
    return t == CUDA_R_16BF ? 1 : t == CUDA_R_16F ? 2 : t == CUDA_R_32F ? 0 : -1;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    GLIA_EMU_GUARD;
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    GLIA_EMU_GUARD;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}
const char *cublasLtGetStatusString(cublasStatus_t s)
{
    GLIA_EMU_GUARD;
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_INVALID_VALUE";
    }
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale)
{
    GLIA_EMU_GUARD;
    struct emu_desc *e = calloc(1, sizeof *e);
    if (!e) return CUBLAS_STATUS_ALLOC_FAILED;
    e->compute = compute;
    e->scale = scale;
    e->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    e->bias_type = -1;
    *d = (cublasLtMatmulDesc_t)(void *)e;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    GLIA_EMU_GUARD;
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t size)
{
    GLIA_EMU_GUARD;
    struct emu_desc *e = (struct emu_desc *)(void *)d;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        if (size != sizeof e->ta) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&e->ta, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (size != sizeof e->tb) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&e->tb, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (size != sizeof e->epilogue) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&e->epilogue, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (size != sizeof e->bias) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&e->bias, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (size != sizeof e->bias_type) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&e->bias_type, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if (size != sizeof e->aux) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&e->aux, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if (size != sizeof e->aux_ld) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&e->aux_ld, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    default:
        fprintf(stderr, "emu: cublasLtMatmulDescSetAttribute: attribute %d not emulated\n", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld)
{
    GLIA_EMU_GUARD;
    if (lt_type(type) < 0 || ld < (int64_t)(rows ? rows : 1)) {
        fprintf(stderr, "emu: cublasLtMatrixLayoutCreate: type %d, %llu x %llu with ld %lld\n", (int)type,
                (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    struct emu_layout *e = malloc(sizeof *e);
    if (!e) return CUBLAS_STATUS_ALLOC_FAILED;
    *e = (struct emu_layout){type, rows, cols, ld, 1, 0};
    *l = (cublasLtMatrixLayout_t)(void *)e;
    return CUBLAS_STATUS_SUCCESS;
}
/* The strided batch of a layout: its count (int32_t, at least 1) and the elements from one matrix to the next
 * (int64_t); other attributes are not emulated. */
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size)
{
    GLIA_EMU_GUARD;
    struct emu_layout *e = (struct emu_layout *)(void *)l;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
        if (size != sizeof e->batch) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&e->batch, buf, size);
        if (e->batch < 1) {
            fprintf(stderr, "emu: cublasLtMatrixLayoutSetAttribute: batch count %d\n", (int)e->batch);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
        if (size != sizeof e->stride) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&e->stride, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    default:
        fprintf(stderr, "emu: cublasLtMatrixLayoutSetAttribute: attribute %d not emulated\n", (int)attr);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    GLIA_EMU_GUARD;
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}
struct emu_pref {
    int dummy;
};
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    GLIA_EMU_GUARD;
    *p = (cublasLtMatmulPreference_t)calloc(1, 64);
    return *p ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    GLIA_EMU_GUARD;
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size)
{
    GLIA_EMU_GUARD;
    (void)p;
    (void)buf;
    (void)attr;
    return size == 4 || size == 8 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

/* m, n, k of D = op(A) op(B) from the layouts, or -1 (after a message) when they disagree. */
static int lt_shape(const struct emu_desc *e, const struct emu_layout *a, const struct emu_layout *b,
                    const struct emu_layout *c, const struct emu_layout *d, int64_t *m, int64_t *n, int64_t *k)
{
    *m = (int64_t)d->rows;
    *n = (int64_t)d->cols;
    int64_t am = e->ta == CUBLAS_OP_N ? (int64_t)a->rows : (int64_t)a->cols;
    int64_t ak = e->ta == CUBLAS_OP_N ? (int64_t)a->cols : (int64_t)a->rows;
    int64_t bk = e->tb == CUBLAS_OP_N ? (int64_t)b->rows : (int64_t)b->cols;
    int64_t bn = e->tb == CUBLAS_OP_N ? (int64_t)b->cols : (int64_t)b->rows;
    *k = ak;
    if (a->batch != d->batch || b->batch != d->batch || c->batch != d->batch) {
        fprintf(stderr, "emu: cublasLtMatmul: batch counts A %d, B %d, C %d, D %d differ\n", (int)a->batch,
                (int)b->batch, (int)c->batch, (int)d->batch);
        return -1;
    }
    if (am != *m || bn != *n || ak != bk || c->rows != d->rows || c->cols != d->cols) {
        fprintf(stderr, "emu: cublasLtMatmul: op(A) %lldx%lld, op(B) %lldx%lld, C %llux%llu, D %llux%llu do not agree\n",
                (long long)am, (long long)ak, (long long)bk, (long long)bn, (unsigned long long)c->rows,
                (unsigned long long)c->cols, (unsigned long long)d->rows, (unsigned long long)d->cols);
        return -1;
    }
    return 0;
}

/* What an epilogue emulated does: adds the bias vector, applies the GELU (tanh form), writes aux, sums for a bias
 * gradient (of A's rows or B's columns); false for every flag: not emulated (or DEFAULT). */
struct lt_ep {
    bool bias, gelu, aux, bgrada, bgradb;
    bool dgelu;  /* D times the tanh-form GELU's derivative at aux (read) */
};
static struct lt_ep lt_ep_of(cublasLtEpilogue_t ep)
{
    switch (ep) {
    case CUBLASLT_EPILOGUE_BIAS: return (struct lt_ep){.bias = true};
    case CUBLASLT_EPILOGUE_BGRADA: return (struct lt_ep){.bgrada = true};
    case CUBLASLT_EPILOGUE_BGRADB: return (struct lt_ep){.bgradb = true};
    case CUBLASLT_EPILOGUE_GELU: return (struct lt_ep){.gelu = true};
    case CUBLASLT_EPILOGUE_GELU_BIAS: return (struct lt_ep){.bias = true, .gelu = true};
    case CUBLASLT_EPILOGUE_GELU_AUX: return (struct lt_ep){.gelu = true, .aux = true};
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return (struct lt_ep){.bias = true, .gelu = true, .aux = true};
    case CUBLASLT_EPILOGUE_DGELU: return (struct lt_ep){.dgelu = true};
    default: return (struct lt_ep){0};
    }
}

/* The bias vector's element type (lt_type) for D of layout d. */
static int lt_bias_type(const struct emu_desc *e, const struct emu_layout *d)
{
    return lt_type(e->bias_type == -1 ? d->type : (cudaDataType_t)e->bias_type);
}

/* Whether cuBLASLt has kernels for these types (its table for the types emulated: f32 A and B with f32 C and D
 * and any f32 compute type; f16 or bf16 A and B, alike, with C and D of that type or f32 and CUBLAS_COMPUTE_32F;
 * scale f32; a bias vector of D's type or f32), after a message when not. */
static bool lt_types_ok(const struct emu_desc *e, const struct emu_layout *a, const struct emu_layout *b,
                        const struct emu_layout *c, const struct emu_layout *d)
{
    bool half = a->type != CUDA_R_32F, ok = a->type == b->type && c->type == d->type && e->scale == CUDA_R_32F;
    if (half) ok = ok && (d->type == a->type || d->type == CUDA_R_32F) && e->compute == CUBLAS_COMPUTE_32F;
    else ok = ok && d->type == CUDA_R_32F;
    if (e->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        int bt = lt_bias_type(e, d);
        ok = ok && (bt == 0 || bt == lt_type(d->type));
    }
    if (!ok)
        fprintf(stderr, "emu: cublasLtMatmul: types A %d, B %d, C %d, D %d, compute %d, scale %d, bias %d not supported\n",
                (int)a->type, (int)b->type, (int)c->type, (int)d->type, (int)e->compute, (int)e->scale,
                (int)e->bias_type);
    return ok;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                              cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t r[],
                                              int *found)
{
    GLIA_EMU_GUARD;
    (void)h;
    (void)pref;
    int64_t m, n, k;
    const struct emu_desc *e = (const struct emu_desc *)(void *)desc;
    if (requested < 1 || lt_shape(e, (void *)A, (void *)B, (void *)C, (void *)D, &m, &n, &k)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!lt_types_ok(e, (void *)A, (void *)B, (void *)C, (void *)D)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (e->epilogue != CUBLASLT_EPILOGUE_DEFAULT && getenv("GLIA_EMU_NO_EPILOGUE")) {  /* tests: the fallbacks */
        *found = 0;
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    memset(&r[0], 0, sizeof r[0]);
    r[0].state = CUBLAS_STATUS_SUCCESS;
    r[0].wavesCount = 1.0f;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* A cublasLtMatmul's arguments as they were at the call. */
struct lt_call {
    struct emu_desc e;
    struct emu_layout la, lb, lc, ld;
    double al, be;
    const void *A, *B, *C;
    void *D;
    int64_t m, n, k;
};

/* D = alpha op(A) op(B) + beta C (+ bias), then the bias gradient the epilogue asks for. A, B, C and the bias are
 * read as their declared types (f32, f16, bf16); the sums run in double where cuBLASLt's run in f32 (exact products
 * of half inputs either way; the order of additions is cuBLASLt's choice, so no emulation can match it bit for bit),
 * and D is rounded to f32 (the accumulator's type) and then, for a half D, once more to that type, to nearest even,
 * as cuBLASLt stores its f32 result. The bias gradient is written in the bias vector's type likewise. */
/* The inner loop of lt_product, built for speed (the rest of the emulator is built -O1): o (n) += a * b (n), in
 * order, with no contraction into fused multiply-adds, so each sum is the one the plain triple loop gives. */
__attribute__((optimize("O3", "fp-contract=off"))) static void axpy(double *restrict o, double a,
                                                                   const double *restrict b, int64_t n)
{
    for (int64_t j = 0; j < n; j++) o[j] += a * b[j];
}

/* op(A) (m x k) times op(B) (k x n) in doubles, row-major (m x n): each element the sum over p = 0 .. k - 1 in order of
 * the products of the elements as loaded (exact in double), as a triple loop gives it, but with op(A) and op(B)
 * read once into doubles and the sums made a row at a time (GPT-sized products in seconds, not hours). */
static double *lt_product(int ta, const void *A, bool a_n, int64_t lda, int tb, const void *B, bool b_n, int64_t ldb,
                          int64_t m, int64_t n, int64_t k)
{
    double *a = alloc_acc("cublasLtMatmul", m * k, false), *b = alloc_acc("cublasLtMatmul", k * n, false);
    double *o = alloc_acc("cublasLtMatmul", m * n, true);
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p++) a[i * k + p] = load(ta, A, a_n ? i + p * lda : p + i * lda);
    for (int64_t p = 0; p < k; p++)
        for (int64_t j = 0; j < n; j++) b[p * n + j] = load(tb, B, b_n ? p + j * ldb : j + p * ldb);
    enum { J = 1024 };  /* a block of columns: its rows of b and o stay in cache across p */
    for (int64_t j0 = 0; j0 < n; j0 += J)
        for (int64_t i = 0; i < m; i++)
            for (int64_t p = 0; p < k; p++)
                axpy(o + i * n + j0, a[i * k + p], b + p * n + j0, n - j0 < J ? n - j0 : J);
    free(a);
    free(b);
    return o;
}

static void lt_exec(void *arg)
{
    const struct lt_call *c = arg;
    const struct emu_desc *e = &c->e;
    const struct emu_layout *la = &c->la, *lb = &c->lb, *lc = &c->lc, *ld = &c->ld;
    const void *A = c->A, *B = c->B, *C = c->C;
    int64_t m = c->m, n = c->n, k = c->k;
    double al = c->al, be = c->be;
    int ta = lt_type(la->type), tb = lt_type(lb->type), tc = lt_type(lc->type), td = lt_type(ld->type);
    struct lt_ep ep = lt_ep_of(e->epilogue);
    bool bias = ep.bias, bgrada = ep.bgrada, bgradb = ep.bgradb;
    int tv = lt_bias_type(e, ld);
    if (ld->batch > 1) {  /* a strided batch: each matrix alone (the epilogues are refused with batches) */
        struct lt_call one = *c;
        one.la.batch = one.lb.batch = one.lc.batch = one.ld.batch = 1;
        for (int32_t b = 0; b < ld->batch; b++) {
            one.A = (const char *)c->A + b * la->stride * elem_size(ta);
            one.B = (const char *)c->B + b * lb->stride * elem_size(tb);
            one.C = (const char *)c->C + b * lc->stride * elem_size(tc);
            one.D = (char *)c->D + b * ld->stride * elem_size(td);
            lt_exec(&one);
        }
        return;
    }
    double *out = alloc_acc("cublasLtMatmul", m * n, false);
    double *prod = lt_product(ta, A, e->ta == CUBLAS_OP_N, la->ld, tb, B, e->tb == CUBLAS_OP_N, lb->ld, m, n, k);
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) {
            double acc = prod[i * n + j];
            double v = al * acc + (be != 0 ? be * load(tc, C, i + j * lc->ld) : 0);
            if (bias) v += load(tv, e->bias, i);
            if (ep.aux) store(td, e->aux, i + j * e->aux_ld, (float)v);  /* the f32 value, rounded as D is */
            if (ep.gelu) {  /* cuBLASLt's GELU: the tanh form, on the f32 value */
                float h = (float)v;
                v = 0.5 * h * (1.0 + tanh(0.7978845608028654 * (h + 0.044715 * (double)h * h * h)));
            }
            if (ep.dgelu) {  /* its derivative at the GELU's input that aux holds, times the f32 value */
                double h = load(td, e->aux, i + j * e->aux_ld), u = 0.7978845608028654 * (h + 0.044715 * h * h * h);
                double th = tanh(u);
                v = (float)v * (0.5 * (1.0 + th) + 0.5 * h * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 0.134145 * h * h));
            }
            out[i + j * m] = v;
        }
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) store(td, c->D, i + j * ld->ld, (float)out[i + j * m]);
    free(out);
    free(prod);
    /* bias gradients: the sum over the GEMM's k of op(A) (one per row of D) or op(B) (one per column) */
    if (bgrada)
        for (int64_t i = 0; i < m; i++) {
            double acc = 0;
            for (int64_t p = 0; p < k; p++) acc += load(ta, A, e->ta == CUBLAS_OP_N ? i + p * la->ld : p + i * la->ld);
            store(tv, e->bias, i, acc);
        }
    if (bgradb)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0;
            for (int64_t p = 0; p < k; p++) acc += load(tb, B, e->tb == CUBLAS_OP_N ? p + j * lb->ld : j + p * lb->ld);
            store(tv, e->bias, j, acc);
        }
}

static long lt_dgelu_runs;  /* DGELU epilogues queued (atomic) */

long glia_emu_lt_dgelu_runs(bool reset)
{
    return reset ? __atomic_exchange_n(&lt_dgelu_runs, 0, __ATOMIC_SEQ_CST) : __atomic_load_n(&lt_dgelu_runs, __ATOMIC_SEQ_CST);
}

/* Checks the call now and queues lt_exec on s with a copy of everything it reads. */
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_size, cudaStream_t s)
{
    GLIA_EMU_GUARD;
    (void)h;
    (void)algo;
    (void)ws;
    (void)ws_size;
    const struct emu_desc *e = (const struct emu_desc *)(void *)desc;
    const struct emu_layout *la = (void *)Adesc, *lb = (void *)Bdesc, *lc = (void *)Cdesc, *ld = (void *)Ddesc;
    struct lt_call c = {.e = *e, .la = *la, .lb = *lb, .lc = *lc, .ld = *ld, .A = A, .B = B, .C = C, .D = D};
    if (lt_shape(e, la, lb, lc, ld, &c.m, &c.n, &c.k)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!lt_types_ok(e, la, lb, lc, ld)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (C != D && lc->ld != ld->ld) return CUBLAS_STATUS_NOT_SUPPORTED;
    struct lt_ep ep = lt_ep_of(e->epilogue);
    bool bias = ep.bias, bgrada = ep.bgrada, bgradb = ep.bgradb;
    if (e->epilogue != CUBLASLT_EPILOGUE_DEFAULT && !bias && !bgrada && !bgradb && !ep.gelu && !ep.dgelu) {
        fprintf(stderr, "emu: cublasLtMatmul: epilogue %d not emulated\n", (int)e->epilogue);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (e->epilogue != CUBLASLT_EPILOGUE_DEFAULT && ld->batch > 1) {
        fprintf(stderr, "emu: cublasLtMatmul: epilogue %d with a batch of %d not emulated\n", (int)e->epilogue,
                (int)ld->batch);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if ((bias || bgrada || bgradb) && !e->bias) {
        fprintf(stderr, "emu: cublasLtMatmul: epilogue %d without a bias pointer\n", (int)e->epilogue);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if ((ep.aux || ep.dgelu) && (!e->aux || e->aux_ld % 8 || e->aux_ld < (int64_t)ld->rows)) {  /* cublasLt.h: divisible by 8, >= rows */
        fprintf(stderr, "emu: cublasLtMatmul: GELU aux pointer %p with leading dimension %lld for %llu rows\n", e->aux,
                (long long)e->aux_ld, (unsigned long long)ld->rows);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (ep.dgelu) __atomic_add_fetch(&lt_dgelu_runs, 1, __ATOMIC_SEQ_CST);
    c.al = *(const float *)alpha;  /* host scalars: read now, as cuBLASLt does */
    c.be = *(const float *)beta;
    void *arg = dup_args(&c, sizeof c);
    if (!arg) return CUBLAS_STATUS_ALLOC_FAILED;
    return glia_emu_submit_host("cublasLtMatmul", s, lt_exec, arg, free) ? CUBLAS_STATUS_EXECUTION_FAILED
                                                                         : CUBLAS_STATUS_SUCCESS;
}

/* ---- cuDNN ---- */

struct cudnnContext {
    cudaStream_t stream;  /* every call computes after what is queued there */
};
struct cudnnTensorStruct {
    int set, type;
    cudnnTensorFormat_t format;
    int n, c, h, w;
};
struct cudnnFilterStruct {
    int set, type;
    cudnnTensorFormat_t format;
    int k, c, h, w;
};
struct cudnnConvolutionStruct {
    int set, pad_h, pad_w, u, v, dil_h, dil_w, groups;
    cudnnConvolutionMode_t mode;
    cudnnDataType_t compute;
    cudnnMathType_t math;
};

static int dnn_type(cudnnDataType_t t)
{
    return t == CUDNN_DATA_BFLOAT16 ? 1 : t == CUDNN_DATA_HALF ? 2 : t == CUDNN_DATA_FLOAT ? 0 : -1;
}

const char *cudnnGetErrorString(cudnnStatus_t s)
{
    GLIA_EMU_GUARD;
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED: return "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED";
    case CUDNN_STATUS_EXECUTION_FAILED_CUDART: return "CUDNN_STATUS_EXECUTION_FAILED_CUDART";
    default: return "CUDNN_STATUS_BAD_PARAM";
    }
}
cudaStream_t glia_emu_cudnn_stream(cudnnHandle_t h) { return h->stream; }

cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
    GLIA_EMU_GUARD;
    *h = calloc(1, sizeof **h);
    return *h ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h)
{
    GLIA_EMU_GUARD;
    free(h);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
    GLIA_EMU_GUARD;
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d)
{
    GLIA_EMU_GUARD;
    *d = calloc(1, sizeof **d);
    return *d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d)
{
    GLIA_EMU_GUARD;
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d)
{
    GLIA_EMU_GUARD;
    *d = calloc(1, sizeof **d);
    return *d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d)
{
    GLIA_EMU_GUARD;
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d)
{
    GLIA_EMU_GUARD;
    *d = calloc(1, sizeof **d);
    if (*d) (*d)->groups = 1;
    return *d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d)
{
    GLIA_EMU_GUARD;
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t, int n, int c,
                                         int h, int w)
{
    GLIA_EMU_GUARD;
    if (dnn_type(t) < 0 || (f != CUDNN_TENSOR_NCHW && f != CUDNN_TENSOR_NHWC) || n < 1 || c < 1 || h < 1 || w < 1)
        return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnTensorStruct){1, dnn_type(t), f, n, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int k, int c,
                                         int h, int w)
{
    GLIA_EMU_GUARD;
    if (dnn_type(t) < 0 || (f != CUDNN_TENSOR_NCHW && f != CUDNN_TENSOR_NHWC) || k < 1 || c < 1 || h < 1 || w < 1)
        return CUDNN_STATUS_BAD_PARAM;
    *d = (struct cudnnFilterStruct){1, dnn_type(t), f, k, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v, int dil_h,
                                              int dil_w, cudnnConvolutionMode_t mode, cudnnDataType_t compute)
{
    GLIA_EMU_GUARD;
    if (pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dil_h < 1 || dil_w < 1 || dnn_type(compute) < 0) return CUDNN_STATUS_BAD_PARAM;
    d->set = 1;
    d->pad_h = pad_h;
    d->pad_w = pad_w;
    d->u = u;
    d->v = v;
    d->dil_h = dil_h;
    d->dil_w = dil_w;
    d->mode = mode;
    d->compute = compute;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int g)
{
    GLIA_EMU_GUARD;
    if (g < 1) return CUDNN_STATUS_BAD_PARAM;
    d->groups = g;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m)
{
    GLIA_EMU_GUARD;
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}

/* Offsets of element (n, c, h, w) of a tensor and (k, c, r, s) of a filter in their formats. */
static int64_t toff(const struct cudnnTensorStruct *t, int64_t n, int64_t c, int64_t h, int64_t w)
{
    return t->format == CUDNN_TENSOR_NHWC ? ((n * t->h + h) * t->w + w) * t->c + c : ((n * t->c + c) * t->h + h) * t->w + w;
}
static int64_t foff(const struct cudnnFilterStruct *f, int64_t k, int64_t c, int64_t r, int64_t s)
{
    return f->format == CUDNN_TENSOR_NHWC ? ((k * f->h + r) * f->w + s) * f->c + c : ((k * f->c + c) * f->h + r) * f->w + s;
}

/* Checks that x, w, y and the convolution agree (y as cudnnGetConvolution2dForwardOutputDim gives it). */
static int conv_check(const char *call, const struct cudnnTensorStruct *x, const struct cudnnFilterStruct *w,
                      const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *y)
{
    if (!x->set || !w->set || !cv->set || !y->set) {
        fprintf(stderr, "emu: %s: a descriptor was never set\n", call);
        return -1;
    }
    int oh = (x->h + 2 * cv->pad_h - (cv->dil_h * (w->h - 1) + 1)) / cv->u + 1;
    int ow = (x->w + 2 * cv->pad_w - (cv->dil_w * (w->w - 1) + 1)) / cv->v + 1;
    if (x->c != w->c * cv->groups || w->k % cv->groups || y->n != x->n || y->c != w->k || y->h != oh || y->w != ow ||
        x->type != y->type || x->type != w->type) {
        fprintf(stderr,
                "emu: %s: x (%d,%d,%d,%d) type %d, w (%d,%d,%d,%d) type %d, groups %d, pad %d,%d stride %d,%d dilation %d,%d "
                "give y (%d,%d,%d,%d), not (%d,%d,%d,%d) type %d\n",
                call, x->n, x->c, x->h, x->w, x->type, w->k, w->c, w->h, w->w, w->type, cv->groups, cv->pad_h, cv->pad_w, cv->u,
                cv->v, cv->dil_h, cv->dil_w, x->n, w->k, oh, ow, y->n, y->c, y->h, y->w, y->type);
        return -1;
    }
    if (x->format != y->format) {
        fprintf(stderr, "emu: %s: x and y in different formats\n", call);
        return -1;
    }
    return 0;
}

enum conv_dir { FWD, BWD_DATA, BWD_FILTER };

/* One pass over every (n, k, oh, ow, c, r, s) term, accumulating into the destination's doubles. */
static void conv_terms(enum conv_dir dir, const struct cudnnTensorStruct *x, const struct cudnnFilterStruct *w,
                       const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *y, const void *px,
                       const void *pw, const void *py, double *acc)
{
    int kg = w->k / cv->groups;
    for (int n = 0; n < x->n; n++)
        for (int k = 0; k < w->k; k++) {
            int g = k / kg;
            for (int oh = 0; oh < y->h; oh++)
                for (int ow = 0; ow < y->w; ow++) {
                    int64_t yo = toff(y, n, k, oh, ow);
                    double yv = dir == FWD ? 0 : load(y->type, py, yo), sum = 0;
                    for (int c = 0; c < w->c; c++)
                        for (int r = 0; r < w->h; r++)
                            for (int s = 0; s < w->w; s++) {
                                int ih = oh * cv->u - cv->pad_h + r * cv->dil_h, iw = ow * cv->v - cv->pad_w + s * cv->dil_w;
                                if (ih < 0 || ih >= x->h || iw < 0 || iw >= x->w) continue;
                                /* CUDNN_CONVOLUTION flips the filter; CROSS_CORRELATION does not */
                                int fr = cv->mode == CUDNN_CONVOLUTION ? w->h - 1 - r : r;
                                int fs = cv->mode == CUDNN_CONVOLUTION ? w->w - 1 - s : s;
                                int64_t xo = toff(x, n, g * w->c + c, ih, iw), wo = foff(w, k, c, fr, fs);
                                if (dir == FWD) sum += load(x->type, px, xo) * load(w->type, pw, wo);
                                else if (dir == BWD_DATA) acc[xo] += yv * load(w->type, pw, wo);
                                else acc[wo] += yv * load(x->type, px, xo);
                            }
                    if (dir == FWD) acc[yo] = sum;
                }
        }
}

/* A convolution's arguments as they were at the call. */
struct conv_call {
    enum conv_dir dir;
    bool racy;      /* an algorithm cuDNN calls non-deterministic (see conv_exec) */
    bool winograd;  /* a nonfused Winograd algorithm: sums less exact than fp32's (see conv_exec) */
    struct cudnnTensorStruct x, y;
    struct cudnnFilterStruct w;
    struct cudnnConvolutionStruct cv;
    double al, be;
    const void *px, *pw, *py;
    void *dst;
};

static const char *const conv_names[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                         "cudnnConvolutionBackwardFilter"};

/* dst = alpha conv + beta dst, for the direction's destination (y, dx or dw). */
static void conv_exec(void *arg)
{
    const struct conv_call *c = arg;
    enum conv_dir dir = c->dir;
    const struct cudnnTensorStruct *x = &c->x, *y = &c->y;
    const struct cudnnFilterStruct *w = &c->w;
    int64_t n = dir == FWD ? (int64_t)y->n * y->c * y->h * y->w
                : dir == BWD_DATA ? (int64_t)x->n * x->c * x->h * x->w
                                  : (int64_t)w->k * w->c * w->h * w->w;
    int type = dir == BWD_FILTER ? w->type : dir == FWD ? y->type : x->type;
    double *acc = alloc_acc(conv_names[dir], n, true);
    conv_terms(dir, x, w, &c->cv, y, c->px, c->pw, c->py, acc);
    /* a non-deterministic algorithm (float atomics on a GPU) rounds differently from run to run: here each
     * call of one rounds about a quarter of the inexact elements, picked by a hash of the call's number and the
     * element's, the other way */
    static uint64_t racy_calls;
    uint64_t call = c->racy ? __atomic_fetch_add(&racy_calls, 1, __ATOMIC_RELAXED) : 0;
    /* a nonfused Winograd algorithm's large tiles: each element off by up to 2e-3 of the largest (seen on a GPU) */
    double big = 0;
    for (int64_t i = 0; c->winograd && i < n; i++) big = fmax(big, fabs(acc[i]));
    for (int64_t i = 0; c->winograd && i < n; i++) acc[i] += (i % 3 - 1) * 2e-3 * big;
    for (int64_t i = 0; i < n; i++) {
        double v = c->al * acc[i] + (c->be != 0 ? c->be * load(type, c->dst, i) : 0);
        store(type, c->dst, i, v);
        if (c->racy) {
            uint64_t z = (call << 32 ^ (uint64_t)i) + 0x9e3779b97f4a7c15u;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
            if (((z ^ (z >> 31)) & 3) == 0) round_other_way(type, c->dst, i, v);
        }
    }
    free(acc);
}

/* Checks the descriptors now and queues conv_exec on h's stream with a copy of them. */
static long emu_winograd_runs, emu_legacy_runs;

/* Convolutions run through the legacy API (cudnnConvolution*) since the last reset (glia_emu_cudnn_legacy_conv_runs,
 * found with dlsym). */
long glia_emu_cudnn_legacy_conv_runs(bool reset)
{
    GLIA_EMU_GUARD;
    return glia_emu_count_take(&emu_legacy_runs, reset);
}

/* Runs of a nonfused Winograd algorithm since the last reset (glia_emu_cudnn_winograd_runs, found with dlsym). */
long glia_emu_cudnn_winograd_runs(bool reset)
{
    GLIA_EMU_GUARD;
    return glia_emu_count_take(&emu_winograd_runs, reset);
}

static cudnnStatus_t conv_run(cudnnHandle_t h, enum conv_dir dir, bool racy, bool winograd, const void *alpha,
                              const void *beta,
                              const struct cudnnTensorStruct *x, const void *px, const struct cudnnFilterStruct *w,
                              const void *pw, const struct cudnnConvolutionStruct *cv, const struct cudnnTensorStruct *y,
                              const void *py, void *dst)
{
    if (conv_check(conv_names[dir], x, w, cv, y)) return CUDNN_STATUS_BAD_PARAM;
    /* alpha and beta are float for float, half and bf16 data (double only for double data); host
     * scalars, read now */
    struct conv_call c = {dir, racy, winograd, *x, *y, *w, *cv, *(const float *)alpha, *(const float *)beta, px, pw, py, dst};
    if (winograd) __atomic_fetch_add(&emu_winograd_runs, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&emu_legacy_runs, 1, __ATOMIC_RELAXED);
    void *arg = dup_args(&c, sizeof c);
    if (!arg) return CUDNN_STATUS_ALLOC_FAILED;
    return glia_emu_submit_host(conv_names[dir], h->stream, conv_exec, arg, free) ? CUDNN_STATUS_EXECUTION_FAILED_CUDART
                                                                                  : CUDNN_STATUS_SUCCESS;
}

/* The largest workspace handed to a convolution or an algorithm search since the last reset: what a test
 * holds against [runtime] workspace_mb (glia_emu_cudnn_workspace_seen, found with dlsym). A workspace that is
 * not device memory of that size is refused, as a GPU would fault on it. */
static size_t emu_ws_seen;

size_t glia_emu_cudnn_workspace_seen(bool reset)
{
    GLIA_EMU_GUARD;
    size_t n = emu_ws_seen;
    if (reset) emu_ws_seen = 0;
    return n;
}

static bool ws_bad(const char *call, const void *ws, size_t n)
{
    if (n > emu_ws_seen) emu_ws_seen = n;
    if (n == 0 || glia_emu_is_device(ws, n)) return false;
    fprintf(stderr, "emu: %s: workspace %p of %zu bytes is not device memory\n", call, ws, n);
    return true;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
                                      const cudnnFilterDescriptor_t wd, const void *w, const cudnnConvolutionDescriptor_t cd,
                                      cudnnConvolutionFwdAlgo_t algo, void *ws, size_t ws_size, const void *beta,
                                      const cudnnTensorDescriptor_t yd, void *y)
{
    GLIA_EMU_GUARD;
    if (ws_bad("cudnnConvolutionForward", ws, ws_size)) return CUDNN_STATUS_BAD_PARAM;
    return conv_run(h, FWD, false, algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, alpha, beta, xd, x, wd, w, cd,
                    yd, NULL, y);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd, const void *w,
                                           const cudnnTensorDescriptor_t dyd, const void *dy, const cudnnConvolutionDescriptor_t cd,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *ws, size_t ws_size, const void *beta,
                                           const cudnnTensorDescriptor_t dxd, void *dx)
{
    GLIA_EMU_GUARD;
    if (ws_bad("cudnnConvolutionBackwardData", ws, ws_size)) return CUDNN_STATUS_BAD_PARAM;
    return conv_run(h, BWD_DATA, algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                    algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED, alpha, beta, dxd, NULL, wd, w, cd, dyd, dy, dx);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
                                             const cudnnTensorDescriptor_t dyd, const void *dy,
                                             const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdFilterAlgo_t algo, void *ws,
                                             size_t ws_size, const void *beta, const cudnnFilterDescriptor_t dwd, void *dw)
{
    GLIA_EMU_GUARD;
    if (ws_bad("cudnnConvolutionBackwardFilter", ws, ws_size)) return CUDNN_STATUS_BAD_PARAM;
    return conv_run(h, BWD_FILTER,
                    algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
                    algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED, alpha, beta, xd, x, dwd, NULL, cd, dyd, dy, dw);
}

/* A cudnnAddTensor's or cudnnConvolutionBackwardBias's arguments as they were at the call. */
struct tensor_call {
    struct cudnnTensorStruct a, c;  /* A and C, or dy and db */
    double al, be;
    const void *pa;
    void *pc;
};

static void *tensor_args(const struct cudnnTensorStruct *a, const void *pa, const struct cudnnTensorStruct *c, void *pc,
                         const void *alpha, const void *beta)
{
    struct tensor_call t = {*a, *c, *(const float *)alpha, *(const float *)beta, pa, pc};
    return dup_args(&t, sizeof t);
}

static void add_tensor_exec(void *arg)
{
    const struct tensor_call *t = arg;
    const struct cudnnTensorStruct *ad = &t->a, *cd = &t->c;
    for (int n = 0; n < cd->n; n++)
        for (int c = 0; c < cd->c; c++)
            for (int y = 0; y < cd->h; y++)
                for (int x = 0; x < cd->w; x++) {
                    int64_t o = toff(cd, n, c, y, x);
                    double a = load(ad->type, t->pa, toff(ad, ad->n == 1 ? 0 : n, ad->c == 1 ? 0 : c, ad->h == 1 ? 0 : y, ad->w == 1 ? 0 : x));
                    store(cd->type, t->pc, o, t->al * a + (t->be != 0 ? t->be * load(cd->type, t->pc, o) : 0));
                }
}

/* C = alpha A + beta C, A broadcast over dimensions where it has size 1 */
cudnnStatus_t cudnnAddTensor(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t ad, const void *A,
                             const void *beta, const cudnnTensorDescriptor_t cd, void *C)
{
    GLIA_EMU_GUARD;
    if ((ad->n != 1 && ad->n != cd->n) || (ad->c != 1 && ad->c != cd->c) || (ad->h != 1 && ad->h != cd->h) ||
        (ad->w != 1 && ad->w != cd->w)) {
        fprintf(stderr, "emu: cudnnAddTensor: A (%d,%d,%d,%d) does not broadcast to C (%d,%d,%d,%d)\n", ad->n, ad->c, ad->h, ad->w,
                cd->n, cd->c, cd->h, cd->w);
        return CUDNN_STATUS_BAD_PARAM;
    }
    void *arg = tensor_args(ad, A, cd, C, alpha, beta);
    if (!arg) return CUDNN_STATUS_ALLOC_FAILED;
    return glia_emu_submit_host("cudnnAddTensor", h->stream, add_tensor_exec, arg, free) ? CUDNN_STATUS_EXECUTION_FAILED_CUDART
                                                                                         : CUDNN_STATUS_SUCCESS;
}

static void bias_grad_exec(void *arg)
{
    const struct tensor_call *t = arg;
    const struct cudnnTensorStruct *dyd = &t->a, *dbd = &t->c;
    for (int c = 0; c < dyd->c; c++) {
        double s = 0;
        for (int n = 0; n < dyd->n; n++)
            for (int y = 0; y < dyd->h; y++)
                for (int x = 0; x < dyd->w; x++) s += load(dyd->type, t->pa, toff(dyd, n, c, y, x));
        store(dbd->type, t->pc, c, t->al * s + (t->be != 0 ? t->be * load(dbd->type, t->pc, c) : 0));
    }
}

/* db(1,C,1,1) = alpha sum over n, h, w of dy + beta db */
cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t dyd, const void *dy,
                                           const void *beta, const cudnnTensorDescriptor_t dbd, void *db)
{
    GLIA_EMU_GUARD;
    if (dbd->n != 1 || dbd->c != dyd->c || dbd->h != 1 || dbd->w != 1) {
        fprintf(stderr, "emu: cudnnConvolutionBackwardBias: db (%d,%d,%d,%d) for dy (%d,%d,%d,%d)\n", dbd->n, dbd->c, dbd->h,
                dbd->w, dyd->n, dyd->c, dyd->h, dyd->w);
        return CUDNN_STATUS_BAD_PARAM;
    }
    void *arg = tensor_args(dyd, dy, dbd, db, alpha, beta);
    if (!arg) return CUDNN_STATUS_ALLOC_FAILED;
    return glia_emu_submit_host("cudnnConvolutionBackwardBias", h->stream, bias_grad_exec, arg, free)
               ? CUDNN_STATUS_EXECUTION_FAILED_CUDART
               : CUDNN_STATUS_SUCCESS;
}

/* ---- algorithm choice: two algorithms; Find*Ex synchronizes its stream (so a capturing one refuses it)
 * and clobbers its output buffer as cuDNN may ---- */

#define EMU_WS 4096
#define EMU_WS_FFT ((size_t)64 << 20)

/* An algorithm's workspace: none for the one without, much more for the FFT ones (never among the
 * results here), as on a GPU: autotuning offers cuDNN the largest an algorithm asks for. */
static size_t emu_ws(bool none, bool fft) { return none ? 0 : fft ? EMU_WS_FFT : EMU_WS; }

static void clobber(void *p, int64_t bytes) { memset(p, 0xff, (size_t)bytes); }  /* NaN in every type */

static int64_t tbytes(const struct cudnnTensorStruct *t) { return (int64_t)t->n * t->c * t->h * t->w * (t->type ? 2 : 4); }
static int64_t fbytes(const struct cudnnFilterStruct *f) { return (int64_t)f->k * f->c * f->h * f->w * (f->type ? 2 : 4); }

/* Two results, as cuDNN gives several, fastest first: for the forward one that needs EMU_WS bytes of
 * workspace, then one that needs none (cuDNN always has one); for the backward directions algorithm 0,
 * which needs none and which cuDNN calls non-deterministic (float atomics; it often wins on small shapes),
 * then algorithm 1, deterministic, with EMU_WS. */
#define PERF_TWO(r, n, got, fast, slow, cv, fast_ws, fast_det)                                        \
    do {                                                                                              \
        if ((n) < 1) return CUDNN_STATUS_BAD_PARAM;                                                   \
        *(got) = (n) < 2 ? 1 : 2;                                                                     \
        for (int i_ = 0; i_ < *(got); i_++) {                                                         \
            memset(&(r)[i_], 0, sizeof(r)[i_]);                                                       \
            (r)[i_].algo = i_ ? (slow) : (fast);                                                      \
            (r)[i_].status = CUDNN_STATUS_SUCCESS;                                                    \
            (r)[i_].time = i_ ? 2.0f : 1.0f;                                                          \
            (r)[i_].memory = i_ ? EMU_WS - (fast_ws) : (fast_ws);                                     \
            (r)[i_].determinism = i_ || (fast_det) ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC; \
            (r)[i_].mathType = (cv)->math;                                                            \
        }                                                                                             \
    } while (0)

/* With GLIA_EMU_CUDNN_WINOGRAD=1 (and room for three) the direction's nonfused Winograd algorithm comes first, fastest,
 * deterministic, with EMU_WS of workspace, before PERF_TWO's two (its results are less exact: conv_exec). */
#define WINOGRAD_FIRST(r, n, got, winograd, cv)                                       \
    do {                                                                              \
        if (!getenv("GLIA_EMU_CUDNN_WINOGRAD") || (n) < 3) break;                     \
        memmove(&(r)[1], &(r)[0], sizeof(r)[0] * (size_t)*(got));                     \
        memset(&(r)[0], 0, sizeof(r)[0]);                                             \
        (r)[0].algo = (winograd);                                                     \
        (r)[0].status = CUDNN_STATUS_SUCCESS;                                         \
        (r)[0].time = 0.5f;                                                           \
        (r)[0].memory = EMU_WS;                                                       \
        (r)[0].determinism = CUDNN_DETERMINISTIC;                                     \
        (r)[0].mathType = (cv)->math;                                                 \
        *(got) += 1;                                                                  \
    } while (0)

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                     const cudnnFilterDescriptor_t wd, const cudnnConvolutionDescriptor_t cd,
                                                     const cudnnTensorDescriptor_t yd, const int n, int *got,
                                                     cudnnConvolutionFwdAlgoPerf_t *r)
{
    GLIA_EMU_GUARD;
    (void)h;
    if (conv_check("cudnnGetConvolutionForwardAlgorithm_v7", xd, wd, cd, yd)) return CUDNN_STATUS_BAD_PARAM;
    PERF_TWO(r, n, got, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, cd,
             EMU_WS, true);
    const char *fws = getenv("GLIA_EMU_CUDNN_FWD_WS");  /* tests: the fastest algorithm wants this much workspace */
    if (fws) r[0].memory = (size_t)strtoull(fws, NULL, 10);
    WINOGRAD_FIRST(r, n, got, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, cd);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t wd,
                                                          const cudnnTensorDescriptor_t dyd, const cudnnConvolutionDescriptor_t cd,
                                                          const cudnnTensorDescriptor_t dxd, const int n, int *got,
                                                          cudnnConvolutionBwdDataAlgoPerf_t *r)
{
    GLIA_EMU_GUARD;
    (void)h;
    if (conv_check("cudnnGetConvolutionBackwardDataAlgorithm_v7", dxd, wd, cd, dyd)) return CUDNN_STATUS_BAD_PARAM;
    PERF_TWO(r, n, got, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, cd, 0, false);
    WINOGRAD_FIRST(r, n, got, CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED, cd);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                            const cudnnTensorDescriptor_t dyd, const cudnnConvolutionDescriptor_t cd,
                                                            const cudnnFilterDescriptor_t dwd, const int n, int *got,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t *r)
{
    GLIA_EMU_GUARD;
    (void)h;
    if (conv_check("cudnnGetConvolutionBackwardFilterAlgorithm_v7", xd, dwd, cd, dyd)) return CUDNN_STATUS_BAD_PARAM;
    PERF_TWO(r, n, got, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, cd, 0, false);
    WINOGRAD_FIRST(r, n, got, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED, cd);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
                                                     const cudnnFilterDescriptor_t wd, const void *w,
                                                     const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t yd, void *y,
                                                     const int n, int *got, cudnnConvolutionFwdAlgoPerf_t *r, void *ws,
                                                     size_t ws_size)
{
    GLIA_EMU_GUARD;
    if (glia_emu_host_sync(h->stream, "cudnnFindConvolutionForwardAlgorithmEx")) return CUDNN_STATUS_EXECUTION_FAILED_CUDART;
    if (ws_bad("cudnnFindConvolutionForwardAlgorithmEx", ws, ws_size)) return CUDNN_STATUS_BAD_PARAM;
    (void)x;
    (void)w;
    cudnnStatus_t st = cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, n, got, r);
    if (!st) clobber(y, tbytes(yd));
    return st;
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t h, const cudnnFilterDescriptor_t wd, const void *w,
                                                          const cudnnTensorDescriptor_t dyd, const void *dy,
                                                          const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t dxd,
                                                          void *dx, const int n, int *got, cudnnConvolutionBwdDataAlgoPerf_t *r,
                                                          void *ws, size_t ws_size)
{
    GLIA_EMU_GUARD;
    if (glia_emu_host_sync(h->stream, "cudnnFindConvolutionBackwardDataAlgorithmEx")) return CUDNN_STATUS_EXECUTION_FAILED_CUDART;
    if (ws_bad("cudnnFindConvolutionBackwardDataAlgorithmEx", ws, ws_size)) return CUDNN_STATUS_BAD_PARAM;
    (void)w;
    (void)dy;
    cudnnStatus_t st = cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, dyd, cd, dxd, n, got, r);
    if (!st) clobber(dx, tbytes(dxd));
    return st;
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t xd, const void *x,
                                                            const cudnnTensorDescriptor_t dyd, const void *y,
                                                            const cudnnConvolutionDescriptor_t cd,
                                                            const cudnnFilterDescriptor_t dwd, void *dw, const int n, int *got,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t *r, void *ws, size_t ws_size)
{
    GLIA_EMU_GUARD;
    if (glia_emu_host_sync(h->stream, "cudnnFindConvolutionBackwardFilterAlgorithmEx")) return CUDNN_STATUS_EXECUTION_FAILED_CUDART;
    if (ws_bad("cudnnFindConvolutionBackwardFilterAlgorithmEx", ws, ws_size)) return CUDNN_STATUS_BAD_PARAM;
    (void)x;
    (void)y;
    cudnnStatus_t st = cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, dyd, cd, dwd, n, got, r);
    if (!st) clobber(dw, fbytes(dwd));
    return st;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                      const cudnnFilterDescriptor_t wd, const cudnnConvolutionDescriptor_t cd,
                                                      const cudnnTensorDescriptor_t yd, cudnnConvolutionFwdAlgo_t algo, size_t *size)
{
    GLIA_EMU_GUARD;
    (void)h;
    if (conv_check("cudnnGetConvolutionForwardWorkspaceSize", xd, wd, cd, yd)) return CUDNN_STATUS_BAD_PARAM;
    *size = emu_ws(algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                   algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT || algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t wd,
                                                           const cudnnTensorDescriptor_t dyd, const cudnnConvolutionDescriptor_t cd,
                                                           const cudnnTensorDescriptor_t dxd, cudnnConvolutionBwdDataAlgo_t algo,
                                                           size_t *size)
{
    GLIA_EMU_GUARD;
    (void)h;
    if (conv_check("cudnnGetConvolutionBackwardDataWorkspaceSize", dxd, wd, cd, dyd)) return CUDNN_STATUS_BAD_PARAM;
    *size = emu_ws(algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                   algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                             const cudnnTensorDescriptor_t dyd,
                                                             const cudnnConvolutionDescriptor_t cd,
                                                             const cudnnFilterDescriptor_t dwd, cudnnConvolutionBwdFilterAlgo_t algo,
                                                             size_t *size)
{
    GLIA_EMU_GUARD;
    (void)h;
    if (conv_check("cudnnGetConvolutionBackwardFilterWorkspaceSize", xd, dwd, cd, dyd)) return CUDNN_STATUS_BAD_PARAM;
    *size = emu_ws(algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                   algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING);
    return CUDNN_STATUS_SUCCESS;
}
