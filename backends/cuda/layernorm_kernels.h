/* backends/cuda/layernorm_kernels.h — C entry points into layernorm_kernels.cu: the kernels of the CUDA layernorm,
 * launched on a given stream. Not the layer logic (layernorm.c checks dtypes, keeps the statistics and picks the
 * arguments); each returns the launch's error. */
#ifndef GLIA_CUDA_LAYERNORM_KERNELS_H
#define GLIA_CUDA_LAYERNORM_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <glia/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A layernorm tensor is x(R, C) in memory: every dimension of the input but the last is a row. x, y, dy and dx hold
 * values of type t, f32, f16 or bf16 (all alike), read as f32 and, when written, rounded once (to nearest even);
 * the statistics mean(R), rstd(R), the weight and bias (C) and their gradients are f32 for every t. Every sum runs in
 * an order fixed by the shape alone (no atomics): the same bits on every run. */

/* y(R, C) = (x(R, C) - mean)*rstd*w(C) + b(C) per row (w, b NULL: 1, 0), mean (about the row's first value: exact
 * for a constant row) and biased variance of the row in float (two passes, one warp per row), rstd = 1/sqrt(var +
 * eps); mean(R), rstd(R) kept unless NULL (eval). With res (R, C) the row is x + res, computed in f32 and rounded to t,
 * written to sum(R, C) first and normalized from there (res, sum NULL: none). */
cudaError_t glia__cuda_layernorm_forward(void *y, float *mean, float *rstd, const void *x, const void *res, void *sum,
                                         enum glia_dtype t, const float *w, const float *b, int64_t R, int64_t C,
                                         float eps, cudaStream_t st);

/* dx(R, C) (+= with add) = rstd*(g - mean(g) - x_hat*mean(g*x_hat)) per row, x_hat = (x - mean)*rstd from the kept
 * mean(R), rstd(R), g = dy*w (dy when w is NULL); one warp per row. */
cudaError_t glia__cuda_layernorm_dx(void *dx, bool add, const void *x, const void *dy, enum glia_dtype t,
                                    const float *mean, const float *rstd, const float *w, int64_t R, int64_t C,
                                    cudaStream_t st);

/* Floats of scratch glia__cuda_layernorm_dparams needs for R rows of C features. */
size_t glia__cuda_layernorm_dparams_scratch(int64_t R, int64_t C);

/* dw(C) (+= with add_w, else =) sum over rows of dy*x_hat, db(C) (likewise with add_b) sum of dy: per split of rows
 * into partials in part (glia__cuda_layernorm_dparams_scratch floats), then a second kernel adds each column's
 * partials in split order (in double). */
cudaError_t glia__cuda_layernorm_dparams(float *dw, bool add_w, float *db, bool add_b, float *part, const void *x,
                                         const void *dy, enum glia_dtype t, const float *mean, const float *rstd,
                                         int64_t R, int64_t C, cudaStream_t st);

/* Whether glia__cuda_layernorm_backward takes rows of C features (its column sums fit in a block's shared memory:
 * C up to 6144). */
bool glia__cuda_layernorm_fused_ok(int64_t C);

/* glia__cuda_layernorm_dx and glia__cuda_layernorm_dparams in one pass over x and dy (and a second kernel over the
 * partials): the same results up to the order of the column sums (partials per block of rows, then in block
 * order, in double). dx, dw and db not NULL; part glia__cuda_layernorm_dparams_scratch floats; C as
 * glia__cuda_layernorm_fused_ok allows (cudaErrorInvalidValue otherwise). */
cudaError_t glia__cuda_layernorm_backward(void *dx, bool add, float *dw, bool add_w, float *db, bool add_b, float *part,
                                          const void *x, const void *dy, enum glia_dtype t, const float *mean,
                                          const float *rstd, const float *w, int64_t R, int64_t C, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
