/* backends/cuda/kernels.cu — the backend's kernels: the batched transpose behind NCHW <-> NHWC
 * conversions, and the sum of squares and scaling behind gradient clipping and loss scaling.
 * Not layer maths. */
#include "kernels.h"

#include <string.h>

#define TILE 32
#define ROWS 8

/* dst(B, cols, rows) = src(B, rows, cols)^T (+ dst when beta is 1): 32x32 tiles through shared
 * memory so that both the reads and the writes are coalesced; blockIdx.z walks the batch and
 * blockIdx.y strides over the row tiles (gridDim.y stops at 65535, rows may need more tiles). */
__global__ void transpose_kernel(float *dst, const float *src, int64_t rows, int64_t cols, float beta)
{
    __shared__ float tile[TILE][TILE + 1];
    int64_t b = blockIdx.z;
    const float *s = src + b * rows * cols;
    float *d = dst + b * rows * cols;
    int64_t c = (int64_t)blockIdx.x * TILE + threadIdx.x;
    for (int64_t r0 = (int64_t)blockIdx.y * TILE; r0 < rows; r0 += (int64_t)gridDim.y * TILE) {
        for (int i = threadIdx.y; i < TILE; i += ROWS) {
            int64_t r = r0 + i;
            if (r < rows && c < cols) tile[i][threadIdx.x] = s[r * cols + c];
        }
        __syncthreads();
        int64_t r = r0 + threadIdx.x;
        for (int i = threadIdx.y; i < TILE; i += ROWS) {
            int64_t cc = (int64_t)blockIdx.x * TILE + i;
            if (r < rows && cc < cols) {
                float v = tile[threadIdx.x][i];
                d[cc * rows + r] = beta != 0.0f ? d[cc * rows + r] + v : v;
            }
        }
        __syncthreads();  /* every read of the tile is done before the next row tile is loaded */
    }
}

/* dst(n) = src(n) + beta * dst(n): the degenerate transpose of 1x1 blocks */
__global__ void axpby_kernel(float *dst, const float *src, int64_t n, float beta)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = beta != 0.0f ? dst[i] + src[i] : src[i];
}

extern "C" cudaError_t glia__cuda_transpose(float *dst, const float *src, int64_t B, int64_t rows, int64_t cols,
                                            float beta, cudaStream_t s)
{
    if (B == 0 || rows == 0 || cols == 0) return cudaSuccess;
    if (rows == 1 || cols == 1) {  /* the same memory order */
        int64_t n = B * rows * cols, blocks = (n + 255) / 256;
        axpby_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(dst, src, n, beta);
        return cudaGetLastError();
    }
    int64_t row_tiles = (rows + TILE - 1) / TILE;
    for (int64_t b0 = 0; b0 < B; b0 += 65535) {  /* gridDim.z */
        int64_t nb = B - b0 < 65535 ? B - b0 : 65535;
        dim3 grid((unsigned)((cols + TILE - 1) / TILE), (unsigned)(row_tiles < 65535 ? row_tiles : 65535), (unsigned)nb);
        transpose_kernel<<<grid, dim3(TILE, ROWS), 0, s>>>(dst + b0 * rows * cols, src + b0 * rows * cols, rows, cols,
                                                          beta);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* The sum of the 256 threads' s in a fixed tree order, in thread 0 (the others get their subtree's). */
__device__ static double block_sum_256(double s)
{
    __shared__ double sh[256];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = 128; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    return sh[threadIdx.x];
}

/* part(gridDim.x) = sum x[i]^2 in double per block of 256 threads (a grid-stride loop, then a tree). */
__global__ void sumsq_part_kernel(double *part, const float *x, int64_t n)
{
    double s = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        s += (double)x[i] * x[i];
    s = block_sum_256(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

/* out[0] = sum of part(nb), one block of 256 threads in a fixed order (no atomics: the same bits every run) */
__global__ void sumsq_total_kernel(double *out, const double *part, int nb)
{
    double s = 0;
    for (int i = (int)threadIdx.x; i < nb; i += (int)blockDim.x) s += part[i];
    s = block_sum_256(s);
    if (threadIdx.x == 0) out[0] = s;
}

extern "C" cudaError_t glia__cuda_sumsq(double *out, const float *x, int64_t n, cudaStream_t s)
{
    if (n == 0) return cudaMemsetAsync(out, 0, sizeof *out, s);
    int64_t blocks = (n + 255) / 256;
    int nb = (int)(blocks < GLIA__SUMSQ_BLOCKS ? blocks : GLIA__SUMSQ_BLOCKS);
    sumsq_part_kernel<<<(unsigned)nb, 256, 0, s>>>(out + 1, x, n);
    sumsq_total_kernel<<<1, 256, 0, s>>>(out, out + 1, nb);
    return cudaGetLastError();
}

/* x(n) *= (float)r when r = max_norm / (sqrt(sum[0]) + 1e-6) < 1 (in double, as the host computes it; a NaN
 * sum leaves x as it is) */
__global__ void clip_kernel(float *x, int64_t n, const double *sum, double max_norm)
{
    double r = max_norm / (sqrt(sum[0]) + 1e-6);
    if (!(r < 1.0)) return;
    float c = (float)r;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= c;
}

extern "C" cudaError_t glia__cuda_clip(float *x, int64_t n, double max_norm, double *work, cudaStream_t s)
{
    cudaError_t e = glia__cuda_sumsq(work, x, n, s);
    if (e != cudaSuccess || n == 0) return e;
    int64_t blocks = (n + 255) / 256;
    clip_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(x, n, work, max_norm);
    return cudaGetLastError();
}

/* fp16's loss scaler, one thread: from sum[0] (the gradients' sum of squares), s updated as core/train.c's
 * glia__scaler_update and unscale_and_clip do on the host, in double without contraction (__d*_rn) so that each
 * figure has the host's bits; sum[1] = the gradients' factor (1: leave them); *loss_scale = the next step's. */
__global__ void scaler_update_kernel(struct glia_loss_scaler *s, double *sum, double max_norm, int64_t growth,
                                     float *loss_scale, double mul, double div)
{
    double sq = sum[0], used = s->scale, coef = 1.0;
    if (!isfinite(sq)) {
        s->found_inf = 1;
        s->skipped++;
        s->clean = 0;
        s->scale = __dmul_rn(s->scale, 0.5);
    } else {
        s->found_inf = 0;
        s->step++;
        if (++s->clean >= growth) {
            s->clean = 0;
            s->scale = __dmul_rn(s->scale, 2.0);
        }
        coef = 1.0 / used;
        double norm = __dmul_rn(sqrt(sq), coef);
        if (max_norm > 0) {
            double r = max_norm / __dadd_rn(norm, 1e-6);
            if (r < 1.0) coef = __dmul_rn(coef, r);
        }
    }
    sum[1] = coef;
    *loss_scale = (float)(__dmul_rn(s->scale, mul) / div);
}

/* x(n) *= (float)c[0] unless c[0] is 1 */
__global__ void scale_by_kernel(float *x, int64_t n, const double *c)
{
    if (c[0] == 1.0) return;
    float a = (float)c[0];
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= a;
}

extern "C" cudaError_t glia__cuda_scaler_step(struct glia_loss_scaler *sc, const struct glia_scaler_args *a,
                                              double *work, cudaStream_t s)
{
    int64_t n = (int64_t)a->n;
    cudaError_t e = glia__cuda_sumsq(work, a->g, n, s);
    if (e != cudaSuccess) return e;
    scaler_update_kernel<<<1, 1, 0, s>>>(sc, work, a->max_norm, a->growth, a->loss_scale, a->loss_mul, a->loss_div);
    if ((e = cudaGetLastError()) != cudaSuccess || n == 0) return e;
    int64_t blocks = (n + 255) / 256;
    scale_by_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(a->g, n, work + 1);
    return cudaGetLastError();
}

/* dst(words) = table[2 + r * words ...] for r = key[0] - table[0] when 0 <= r < table[1] */
__global__ void select_kernel(long long *dst, const long long *table, const long long *key, int words)
{
    long long r = key[0] - table[0];
    if (r < 0 || r >= table[1]) return;
    for (int i = (int)threadIdx.x; i < words; i += (int)blockDim.x) dst[i] = table[2 + r * words + i];
}

extern "C" cudaError_t glia__cuda_select(int64_t *dst, const int64_t *table, const int64_t *key, size_t words,
                                         cudaStream_t s)
{
    select_kernel<<<1, 32, 0, s>>>((long long *)dst, (const long long *)table, (const long long *)key, (int)words);
    return cudaGetLastError();
}

/* x(n) *= a */
__global__ void scale_kernel(float *x, int64_t n, float a)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= a;
}

extern "C" cudaError_t glia__cuda_scale(float *x, int64_t n, float a, cudaStream_t s)
{
    if (n == 0) return cudaSuccess;
    int64_t blocks = (n + 255) / 256;
    scale_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(x, n, a);
    return cudaGetLastError();
}

/* y(n) += a x(n); a = 1 adds exactly (y + x, one rounding) */
__global__ void axpy_kernel(float *y, const float *x, int64_t n, float a)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a == 1.0f ? y[i] + x[i] : fmaf(a, x[i], y[i]);
}

extern "C" cudaError_t glia__cuda_axpy(float *y, const float *x, int64_t n, float a, cudaStream_t s)
{
    if (n == 0) return cudaSuccess;
    int64_t blocks = (n + 255) / 256;
    axpy_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(y, x, n, a);
    return cudaGetLastError();
}

/* dst(1) = v: a value handed to work queued later (a graph replay's step) without host memory */
__global__ void write_u64_kernel(unsigned long long *dst, unsigned long long v) { *dst = v; }

extern "C" cudaError_t glia__cuda_write_u64(uint64_t *dst, uint64_t v, cudaStream_t s)
{
    write_u64_kernel<<<1, 1, 0, s>>>((unsigned long long *)dst, (unsigned long long)v);
    return cudaGetLastError();
}

/* The words of glia__cuda_write, carried by value in the launch's parameters. */
struct write_words {
    unsigned long long w[GLIA_BACKEND_WRITE_MAX / 8];
};

/* dst(nw) = v.w(nw), one thread per word: what a replay is handed (its step and the optimizer's scalars) */
__global__ void write_kernel(unsigned long long *dst, struct write_words v, int nw)
{
    if ((int)threadIdx.x < nw) dst[threadIdx.x] = v.w[threadIdx.x];
}

extern "C" cudaError_t glia__cuda_write(void *dst, const void *src, size_t n, cudaStream_t s)
{
    struct write_words v;
    int nw = (int)(n / 8);
    if (nw <= 0) return cudaSuccess;
    memcpy(v.w, src, (size_t)nw * 8);
    write_kernel<<<1, GLIA_BACKEND_WRITE_MAX / 8, 0, s>>>((unsigned long long *)dst, v, nw);
    return cudaGetLastError();
}
