/* backends/cpu/cpu_backend.c — the CPU backend: every slot of the device, memory, stream and math groups on host
 * memory (copies run when called; f32 GEMM through oneDNN's sgemm; the BLAS-1 helpers as OpenMP loops). Not kernels:
 * each layer type's CPU kernel is its own plugin's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <oneapi/dnnl/dnnl.h>
#include <glia/half.h>
#include "internal.h"
#include "loader.h"

/* ---- device ---- */

struct cpu {
    struct glia_context *ctx;
};

static glia_status cpu_open(struct glia_context *ctx, int index, void **priv)
{
    if (index != 0) return glia_error(ctx, GLIA_EDEVICE, "cpu:%d: the CPU backend has one device, cpu", index);
    struct cpu *c = malloc(sizeof *c);
    if (!c) return GLIA_ENOMEM;
    c->ctx = ctx;
    *priv = c;
    return GLIA_OK;
}

static void cpu_close(void *priv) { free(priv); }

/* Computes in fp32 only; autotuning, workspace and determinism have nothing to choose here. */
static glia_status cpu_configure(void *priv, const struct glia_runtime_options *o)
{
    struct cpu *c = priv;
    if (o->precision != GLIA_PRECISION_FP32)
        return glia_error(c->ctx, GLIA_EUNSUPPORTED, "precision %s needs a CUDA device; the cpu backend computes in fp32 only",
                          glia_precision_name(o->precision));
    return GLIA_OK;
}

static void *cpu_queue(void *priv) { return NULL; }  /* work runs when it is called */

static const struct glia_backend_device_ops cpu_device = {
    .struct_size = sizeof(struct glia_backend_device_ops),
    .open = cpu_open,
    .close = cpu_close,
    .configure = cpu_configure,
    .queue = cpu_queue,
};

/* ---- memory: the device's is the host's ---- */

static glia_status cpu_alloc(void *priv, size_t nbytes, void **ptr)
{
    size_t n = (nbytes + 63) & ~(size_t)63;
    *ptr = aligned_alloc(64, n ? n : 64);
    return *ptr ? GLIA_OK : GLIA_ENOMEM;
}

static void cpu_free(void *priv, void *ptr) { free(ptr); }

/* The allocator keeps no figures of its own (malloc's are the process's resident size): an answer, not an error. */
static glia_status cpu_stats(void *priv, struct glia_memory_stats *out) { return GLIA_EUNSUPPORTED; }

static const struct glia_backend_memory_ops cpu_memory = {
    .struct_size = sizeof(struct glia_backend_memory_ops),
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .stats = cpu_stats,
};

/* ---- stream: every call runs to its end ---- */

static glia_status cpu_copy(void *priv, void *dst, bool dst_host, const void *src, bool src_host, size_t nbytes)
{
    memmove(dst, src, nbytes);
    return GLIA_OK;
}

static glia_status cpu_memzero(void *priv, void *ptr, size_t nbytes)
{
    memset(ptr, 0, nbytes);
    return GLIA_OK;
}

static glia_status cpu_sync(void *priv) { return GLIA_OK; }

/* An upload or download is done when it returns: its ticket 0 names nothing left to wait for. */
static glia_status cpu_transfer(void *priv, void *dst, const void *src, size_t nbytes, uint64_t *ticket)
{
    memcpy(dst, src, nbytes);
    *ticket = 0;
    return GLIA_OK;
}

static glia_status cpu_wait_copy(void *priv, uint64_t ticket, bool host) { return GLIA_OK; }

static const struct glia_backend_stream_ops cpu_stream = {
    .struct_size = sizeof(struct glia_backend_stream_ops),
    .copy = cpu_copy,
    .memzero = cpu_memzero,
    .sync = cpu_sync,
    .upload = cpu_transfer,
    .download = cpu_transfer,
    .wait_copy = cpu_wait_copy,
};

/* ---- math ---- */

/* C(M,N) = alpha op(A)(M,K) op(B)(K,N) + beta C, row-major. */
static glia_status cpu_gemm_f32(void *priv, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                                int64_t ldc)
{
    if (M == 0 || N == 0) return GLIA_OK;
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return st == dnnl_success ? GLIA_OK : GLIA_EINTERNAL;
}

/* dst(B, cols, rows) = src(B, rows, cols)^T (+ dst when beta is 1), in 32x32 tiles; beta 0 never reads dst. */
static glia_status cpu_transpose_f32(void *priv, float *dst, const float *src, int64_t B, int64_t rows, int64_t cols,
                                     float beta)
{
    enum { T = 32 };
    int64_t tr = (rows + T - 1) / T, tc = (cols + T - 1) / T;
#pragma omp parallel for schedule(static) if (B * rows * cols > 32768)
    for (int64_t job = 0; job < B * tr * tc; job++) {
        int64_t b = job / (tr * tc), r0 = job / tc % tr * T, c0 = job % tc * T;
        int64_t r1 = r0 + T < rows ? r0 + T : rows, c1 = c0 + T < cols ? c0 + T : cols;
        const float *s = src + b * rows * cols;
        float *d = dst + b * rows * cols;
        for (int64_t c = c0; c < c1; c++)
            for (int64_t r = r0; r < r1; r++) {
                float v = s[r * cols + c];
                d[c * rows + r] = beta != 0.0f ? d[c * rows + r] + v : v;
            }
    }
    return GLIA_OK;
}

/* y(n) += a x(n) */
static glia_status cpu_axpy_f32(void *priv, float *y, const float *x, size_t n, float a)
{
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) y[i] += a * x[i];
    return GLIA_OK;
}

/* x(n) *= a */
static glia_status cpu_scale_f32(void *priv, float *x, size_t n, float a)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= a;
    return GLIA_OK;
}

/* sum x(n)^2 in double */
static glia_status cpu_sumsq_f32(void *priv, const float *x, size_t n, double *out)
{
    double s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    *out = s;
    return GLIA_OK;
}

/* torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1 */
static glia_status cpu_clip_f32(void *priv, float *x, size_t n, double max_norm)
{
    double s;
    cpu_sumsq_f32(priv, x, n, &s);
    double r = max_norm / (sqrt(s) + 1e-6);
    return r < 1.0 ? cpu_scale_f32(priv, x, n, (float)r) : GLIA_OK;
}

/* dst(B, cols, rows) = src(B, rows, cols)^T (+ dst when beta is 1) between f32, f16 and bf16: each value through
 * f32, the sum formed there and rounded once to nearest even. */
static glia_status cpu_convert(void *priv, void *dst, enum glia_dtype dt, const void *src, enum glia_dtype st,
                               int64_t B, int64_t rows, int64_t cols, float beta)
{
    int64_t n = B * rows * cols;
    bool flat = rows == 1 || cols == 1;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {  /* i: dst's element (b, c, r) */
        int64_t r = i % rows, c = i / rows % cols, b = i / (rows * cols);
        float v = glia_load_f32(src, st, flat ? i : (b * rows + r) * cols + c);
        glia_store_f32(dst, dt, i, beta != 0.0f ? glia_load_f32(dst, dt, i) + v : v);
    }
    return GLIA_OK;
}

static const struct glia_backend_math_ops cpu_math = {
    .struct_size = sizeof(struct glia_backend_math_ops),
    .gemm_f32 = cpu_gemm_f32,
    .transpose_f32 = cpu_transpose_f32,
    .axpy_f32 = cpu_axpy_f32,
    .scale_f32 = cpu_scale_f32,
    .sumsq_f32 = cpu_sumsq_f32,
    .clip_f32 = cpu_clip_f32,
    .convert = cpu_convert,
};

/* ---- data: batches from a resident training set, made by the loader's own per-sample code ---- */

/* x(n, C, H, W) and y(n) from images(N, C, H, W) u8 by idx(n): glia__augment_sample, one sample a thread. */
static glia_status cpu_batch_u8(void *priv, float *x, int32_t *y, const uint8_t *images, const int32_t *labels,
                                const int64_t *idx, int64_t n, int channels, int rows, int cols, const float *table,
                                int pad, bool flip, uint64_t seed, int epoch)
{
    const int64_t per = (int64_t)channels * rows * cols;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        glia__augment_sample(images + idx[i] * per, channels, rows, cols, table, pad, flip, seed, epoch, idx[i],
                             x + i * per);
        y[i] = labels[idx[i]];
    }
    return GLIA_OK;
}

/* mem_info stays NULL: the host's free memory is no budget for a copy of the data set ([data] resident = auto is
 * off here; the loader's threads overlap with the compute instead). */
static const struct glia_backend_data_ops cpu_data = {
    .struct_size = sizeof(struct glia_backend_data_ops),
    .batch_u8 = cpu_batch_u8,
    .mem_info = NULL,
};

static const struct glia_backend_ops cpu_ops = {
    .struct_size = sizeof(struct glia_backend_ops),
    .name = "cpu",
    .device_type = GLIA_DEVICE_CPU,
    .device = &cpu_device,
    .memory = &cpu_memory,
    .stream = &cpu_stream,
    .math = &cpu_math,
    .graph = NULL,  /* CUDA graphs are CUDA's */
    .data = &cpu_data,
};

glia_status glia__cpu_backend_register(struct glia_context *ctx)
{
    struct glia_registry r = {ctx, -1};
    return glia_register_backend(&r, &cpu_ops);
}
