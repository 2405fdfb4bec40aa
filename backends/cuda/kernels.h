/* backends/cuda/kernels.h — the backend's own CUDA kernels, launched on a given stream (C entry
 * points into kernels.cu). Not layer kernels: those belong to the layers' CUDA code. */
#ifndef GLIA_CUDA_KERNELS_H
#define GLIA_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <glia/backend.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst(B, cols, rows) = src(B, rows, cols)^T + beta * dst, beta 0 or 1. */
cudaError_t glia__cuda_transpose(float *dst, const float *src, int64_t B, int64_t rows, int64_t cols, float beta,
                                 cudaStream_t s);

/* out[0] = sum of x(n)^2, in double, in an order fixed by n (the same bits every run); out is device memory of
 * 1 + GLIA__SUMSQ_BLOCKS doubles (the rest: the blocks' partial sums). */
#define GLIA__SUMSQ_BLOCKS 1024
cudaError_t glia__cuda_sumsq(double *out, const float *x, int64_t n, cudaStream_t s);
/* x(n) *= (float)r where r = max_norm / (sqrt(sum x^2) + 1e-6) < 1, the sum as glia__cuda_sumsq's into
 * work (its size); the host never waits */
cudaError_t glia__cuda_clip(float *x, int64_t n, double max_norm, double *work, cudaStream_t s);
/* x(n) *= a */
cudaError_t glia__cuda_scale(float *x, int64_t n, float a, cudaStream_t s);
/* y(n) += a x(n) */
cudaError_t glia__cuda_axpy(float *y, const float *x, int64_t n, float a, cudaStream_t s);
/* dst(1) = v, v carried by the launch */
cudaError_t glia__cuda_write_u64(uint64_t *dst, uint64_t v, cudaStream_t s);
/* dst(n bytes) = src(n), n a multiple of 8 up to GLIA_BACKEND_WRITE_MAX, the bytes carried by the launch */
cudaError_t glia__cuda_write(void *dst, const void *src, size_t n, cudaStream_t s);
/* fp16's loss scaler (the graph group's scaler_step): the sum of squares of a->g into work (glia__cuda_sumsq's
 * size), s updated from it, a->g unscaled and clipped, *a->loss_scale written; the host never waits */
cudaError_t glia__cuda_scaler_step(struct glia_loss_scaler *sc, const struct glia_scaler_args *a, double *work,
                                   cudaStream_t s);
/* dst(words) = row *key - table[0] of the table[1] rows of `words` words after table[0..1], when it exists */
cudaError_t glia__cuda_select(int64_t *dst, const int64_t *table, const int64_t *key, size_t words, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
