/* backends/cpu/cpu_backend.c — the CPU backend: aligned host memory, copies, and f32 GEMM
 * through oneDNN's sgemm. Not layer code: layers run their own OpenMP loops. */
#include <stdlib.h>
#include <string.h>
#include <oneapi/dnnl/dnnl.h>
#include "internal.h"

static glia_status cpu_open(struct glia_context *ctx, int index, void **priv)
{
    if (index != 0) return glia_error(ctx, GLIA_EDEVICE, "cpu:%d: the CPU backend has one device, cpu", index);
    *priv = NULL;
    return GLIA_OK;
}

static glia_status cpu_alloc(void *priv, size_t nbytes, void **ptr)
{
    size_t n = (nbytes + 63) & ~(size_t)63;
    *ptr = aligned_alloc(64, n ? n : 64);
    return *ptr ? GLIA_OK : GLIA_ENOMEM;
}

static void cpu_free(void *priv, void *ptr) { free(ptr); }

static glia_status cpu_copy(void *priv, void *dst, bool dst_host, const void *src, bool src_host,
                            size_t nbytes)
{
    memmove(dst, src, nbytes);
    return GLIA_OK;
}

static glia_status cpu_memzero(void *priv, void *ptr, size_t nbytes)
{
    memset(ptr, 0, nbytes);
    return GLIA_OK;
}

/* C(M,N) = alpha op(A)(M,K) op(B)(K,N) + beta C, row-major. */
static glia_status cpu_gemm_f32(void *priv, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                                float alpha, const float *A, int64_t lda, const float *B,
                                int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M == 0 || N == 0) return GLIA_OK;
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                  beta, C, ldc);
    return st == dnnl_success ? GLIA_OK : GLIA_EINTERNAL;
}

static const struct glia_backend_ops cpu_ops = {
    .struct_size = sizeof(struct glia_backend_ops),
    .name = "cpu",
    .device_type = GLIA_DEVICE_CPU,
    .open = cpu_open,
    .close = NULL,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .memzero = cpu_memzero,
    .gemm_f32 = cpu_gemm_f32,
    .sync = NULL,
};

glia_status glia__cpu_backend_register(struct glia_context *ctx)
{
    struct glia_registry r = {ctx, -1};
    return glia_register_backend(&r, &cpu_ops);
}
