/* backends/cuda/cuda_backend.c — the CUDA backend plugin (cuda.so): device memory from a caching
 * allocator, one compute stream per device, copies, f32 GEMM through cuBLASLt, NCHW <-> NHWC
 * transposes; its probe refuses machines without a usable GPU. Not layer code: CUDA layers
 * register their own impls and borrow this backend's stream and memory (glia/cuda.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cache.h"
#include "check.h"
#include "kernels.h"
#include <glia/cuda.h>

#define WORKSPACE_BYTES ((size_t)32 << 20)  /* cuBLASLt workspace (what PyTorch gives it on Hopper) */
#define N_PLANS 64

/* One cuBLASLt GEMM configuration with its chosen algorithm. */
struct plan {
    bool valid;
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    uint64_t last_use;
};

struct cuda {
    struct glia_context *ctx;        /* (borrowed) */
    int device;
    cudaStream_t stream;             /* compute: every kernel and copy of this backend */
    cublasLtHandle_t lt;
    void *workspace;                 /* WORKSPACE_BYTES from the cache */
    struct glia__cache *cache;
    pthread_mutex_t lock;            /* the cache (loader threads may allocate) */
    struct plan plans[N_PLANS];
    uint64_t uses;
};

glia_status glia__cuda_status(struct glia_context *ctx, cudaError_t e, const char *call, const char *file, int line)
{
    return glia_error(ctx, GLIA_EDEVICE, "%s:%d: %s: %s (%s)", file, line, call, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

glia_status glia__cublas_status(struct glia_context *ctx, cublasStatus_t e, const char *call, const char *file,
                                int line)
{
    return glia_error(ctx, GLIA_EDEVICE, "%s:%d: %s: %s", file, line, call, cublasLtGetStatusString(e));
}

/* ---- memory ---- */

static int raw_alloc(void *user, size_t n, void **p)
{
    struct cuda *c = user;
    if (cudaSetDevice(c->device) != cudaSuccess) return 1;
    if (cudaMalloc(p, n) != cudaSuccess) {
        cudaGetLastError();  /* clear the sticky-free out-of-memory error */
        return 1;
    }
    return 0;
}

static void raw_free(void *user, void *p)
{
    struct cuda *c = user;
    cudaSetDevice(c->device);
    cudaDeviceSynchronize();  /* the block may still be read by queued work */
    cudaFree(p);
}

static glia_status cuda_alloc(void *priv, size_t nbytes, void **ptr)
{
    struct cuda *c = priv;
    pthread_mutex_lock(&c->lock);
    int r = glia__cache_alloc(c->cache, nbytes, ptr);
    struct glia__cache_stats s;
    glia__cache_get_stats(c->cache, &s);
    pthread_mutex_unlock(&c->lock);
    if (r)
        return glia_error(c->ctx, GLIA_ENOMEM, "cuda:%d: out of device memory allocating %zu bytes (%zu in tensors, %zu held)",
                          c->device, nbytes, s.current, s.reserved);
    return GLIA_OK;
}

/* Blocks go back to the cache at once: every use of them is queued on the one stream, so the
 * next owner's work runs after the last user's. */
static void cuda_free(void *priv, void *ptr)
{
    struct cuda *c = priv;
    pthread_mutex_lock(&c->lock);
    glia__cache_release(c->cache, ptr);
    pthread_mutex_unlock(&c->lock);
}

static glia_status cuda_memory_stats(void *priv, struct glia_memory_stats *out)
{
    struct cuda *c = priv;
    struct glia__cache_stats s;
    pthread_mutex_lock(&c->lock);
    glia__cache_get_stats(c->cache, &s);
    pthread_mutex_unlock(&c->lock);
    *out = (struct glia_memory_stats){s.current, s.peak, s.reserved, s.raw_allocs};
    return GLIA_OK;
}

/* ---- copies ---- */

static glia_status cuda_copy(void *priv, void *dst, bool dst_host, const void *src, bool src_host, size_t nbytes)
{
    struct cuda *c = priv;
    glia_status st = GLIA_OK;
    if (nbytes == 0) return GLIA_OK;
    if (dst_host && src_host) {
        memmove(dst, src, nbytes);
        return GLIA_OK;
    }
    CUDA_TRY(c->ctx, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, c->stream));
    if (dst_host || src_host) CUDA_TRY(c->ctx, cudaStreamSynchronize(c->stream));  /* the host side is pageable */
fail:
    return st;
}

static glia_status cuda_memzero(void *priv, void *ptr, size_t nbytes)
{
    struct cuda *c = priv;
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, cudaMemsetAsync(ptr, 0, nbytes, c->stream));
fail:
    return st;
}

static glia_status cuda_sync(void *priv)
{
    struct cuda *c = priv;
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, cudaStreamSynchronize(c->stream));
fail:
    return st;
}

static glia_status cuda_transpose(void *priv, float *dst, const float *src, int64_t B, int64_t rows, int64_t cols,
                                  float beta)
{
    struct cuda *c = priv;
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__cuda_transpose(dst, src, B, rows, cols, beta, c->stream));
fail:
    return st;
}

/* ---- GEMM ---- */

static void plan_free(struct plan *p)
{
    if (!p->valid) return;
    cublasLtMatmulDescDestroy(p->desc);
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    memset(p, 0, sizeof *p);
}

/* The plan for this GEMM: a cached one, or a new one (evicting the least recently used).
 * Row-major C(M,N) = op(A) op(B) is column-major C^T(N,M) = op(B)^T op(A)^T, so cuBLASLt gets
 * B as its first operand and A as its second. */
static glia_status get_plan(struct cuda *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                            int64_t ldb, int64_t ldc, struct plan **out)
{
    glia_status st = GLIA_OK;
    struct plan *p = &c->plans[0];
    for (int i = 0; i < N_PLANS; i++) {
        struct plan *q = &c->plans[i];
        if (q->valid && q->ta == ta && q->tb == tb && q->M == M && q->N == N && q->K == K && q->lda == lda &&
            q->ldb == ldb && q->ldc == ldc) {
            q->last_use = ++c->uses;
            *out = q;
            return GLIA_OK;
        }
        if (!q->valid || (p->valid && q->last_use < p->last_use)) p = q;
    }
    plan_free(p);
    *p = (struct plan){.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc};
    cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulPreference_t pref = NULL;
    CUBLAS_TRY(c->ctx, cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_TRY(c->ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opb, sizeof opb));
    CUBLAS_TRY(c->ctx, cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opa, sizeof opa));
    /* stored column-major: B is (N x K) untransposed or (K x N) transposed, A likewise */
    CUBLAS_TRY(c->ctx, cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, tb ? K : N, tb ? N : K, ldb));
    CUBLAS_TRY(c->ctx, cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, ta ? M : K, ta ? K : M, lda));
    CUBLAS_TRY(c->ctx, cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, N, M, ldc));
    p->valid = true;
    size_t ws = WORKSPACE_BYTES;
    CUBLAS_TRY(c->ctx, cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_TRY(c->ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                            sizeof ws));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    CUBLAS_TRY(c->ctx, cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->a, p->b, p->c, p->c, pref, 1, &h, &found));
    if (found < 1) {
        st = glia_error(c->ctx, GLIA_EUNSUPPORTED, "cuda:%d: cuBLASLt has no algorithm for a %lldx%lldx%lld f32 GEMM",
                        c->device, (long long)M, (long long)N, (long long)K);
        goto fail;
    }
    p->algo = h.algo;
    p->last_use = ++c->uses;
    cublasLtMatmulPreferenceDestroy(pref);
    *out = p;
    return GLIA_OK;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    plan_free(p);
    return st;
}

/* C(M,N) = alpha op(A)(M,K) op(B)(K,N) + beta C, row-major, on the compute stream. */
static glia_status cuda_gemm_f32(void *priv, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                                 int64_t ldc)
{
    struct cuda *c = priv;
    glia_status st = GLIA_OK;
    if (M == 0 || N == 0) return GLIA_OK;
    struct plan *p = NULL;
    if ((st = get_plan(c, ta, tb, M, N, K, lda, ldb, ldc, &p))) return st;
    CUBLAS_TRY(c->ctx, cublasLtMatmul(c->lt, p->desc, &alpha, B, p->a, A, p->b, &beta, C, p->c, C, p->c, &p->algo,
                                      c->workspace, WORKSPACE_BYTES, c->stream));
fail:
    return st;
}

/* ---- device ---- */

static void cuda_close(void *priv)
{
    struct cuda *c = priv;
    if (!c) return;
    cudaSetDevice(c->device);
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int i = 0; i < N_PLANS; i++) plan_free(&c->plans[i]);
    if (c->lt) cublasLtDestroy(c->lt);
    if (c->stream) cudaStreamDestroy(c->stream);
    glia__cache_free(c->cache);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static glia_status cuda_open(struct glia_context *ctx, int index, void **priv)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return glia__cuda_status(ctx, e, "cudaGetDeviceCount(&n)", __FILE__, __LINE__);
    if (index < 0 || index >= n)
        return glia_error(ctx, GLIA_EDEVICE, "cuda:%d: this machine has %d CUDA device%s", index, n, n == 1 ? "" : "s");
    glia_status st = GLIA_OK;
    struct cuda *c = calloc(1, sizeof *c);
    if (!c) return GLIA_ENOMEM;
    c->ctx = ctx;
    c->device = index;
    pthread_mutex_init(&c->lock, NULL);
    *priv = c;
    CUDA_TRY(ctx, cudaSetDevice(index));
    CUDA_TRY(ctx, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUBLAS_TRY(ctx, cublasLtCreate(&c->lt));
    if (!(c->cache = glia__cache_new(raw_alloc, raw_free, c))) {
        st = GLIA_ENOMEM;
        goto fail;
    }
    if ((st = cuda_alloc(c, WORKSPACE_BYTES, &c->workspace))) goto fail;
    struct cudaDeviceProp prop;
    CUDA_TRY(ctx, cudaGetDeviceProperties(&prop, index));
    glia_log(ctx, GLIA_LOG_DEBUG, "cuda:%d: %s, compute capability %d.%d, %.1f GiB", index, prop.name, prop.major,
             prop.minor, prop.totalGlobalMem / 1073741824.0);
    return GLIA_OK;
fail:
    cuda_close(c);
    *priv = NULL;
    return st;
}

static void *cuda_queue(void *priv) { return ((struct cuda *)priv)->stream; }

static const struct glia_backend_ops cuda_ops = {
    .struct_size = sizeof(struct glia_backend_ops),
    .name = "cuda",
    .device_type = GLIA_DEVICE_CUDA,
    .open = cuda_open,
    .close = cuda_close,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .memzero = cuda_memzero,
    .gemm_f32 = cuda_gemm_f32,
    .sync = cuda_sync,
    .transpose_f32 = cuda_transpose,
    .memory_stats = cuda_memory_stats,
    .queue = cuda_queue,
};

/* A machine without a driver, or without a device, is refused with the runtime's reason. */
static glia_status cuda_probe(struct glia_context *ctx, char *why, size_t why_size)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, why_size, "no usable CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return GLIA_EPROBE;
    }
    if (n == 0) {
        snprintf(why, why_size, "no CUDA device on this machine");
        return GLIA_EPROBE;
    }
    return GLIA_OK;
}

static glia_status cuda_init(struct glia_registry *r) { return glia_register_backend(r, &cuda_ops); }

GLIA_PLUGIN_DEFINE_PROBE(cuda, "1.0", "MIT", "CUDA backend: caching allocator, streams, cuBLASLt", cuda_init,
                         cuda_probe)
