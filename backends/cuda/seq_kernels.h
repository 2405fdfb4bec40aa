/* backends/cuda/seq_kernels.h — C entry points into seq_kernels.cu: the kernels of the CUDA embedding and
 * seq_pool, launched on a given stream. Not the layer logic (seq.c checks dtypes and formats, keeps state and
 * picks the arguments); each returns the launch's error. */
#ifndef GLIA_CUDA_SEQ_KERNELS_H
#define GLIA_CUDA_SEQ_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- embedding ----
 * tok(N, L) i32; w, dw (V, D); y, dy (N, D, 1, L), or with nhwc (N, 1, L, D) in memory (the same as the
 * (N, L, D) of output = sequence). A token equal to pad
 * (-1: none) reads its row like any other and gets no gradient (nn.Embedding's padding_idx); a token outside
 * [0, V) reads as zeros and gets no gradient (the CPU impl refuses it: a kernel cannot report it without a
 * synchronization). */

/* y = w[tok] per position, zeros for out-of-range tokens */
cudaError_t glia__cuda_embedding_forward(float *y, const float *w, const int32_t *tok, int64_t N, int64_t L, int64_t V,
                                         int64_t D, bool nhwc, cudaStream_t st);
/* dw[tok] += dy per position: with atomicAdd (the order of the additions to one row varies from run to run), or
 * deterministic, in position order as the CPU impl adds (its bits) */
cudaError_t glia__cuda_embedding_backward(float *dw, const float *dy, const int32_t *tok, int64_t N, int64_t L,
                                          int64_t V, int64_t D, int64_t pad, bool nhwc, bool deterministic,
                                          cudaStream_t st);

/* ---- seq_pool ----
 * x, dx (N, C, 1, L), or with nhwc (N, 1, L, C) in memory; tok(N, L) i32; y, dy (N, C). Position l of sample n
 * is valid when tok(n, l) != pad. */

/* count(N) = valid positions of each sample */
cudaError_t glia__cuda_seq_count(int32_t *count, const int32_t *tok, int64_t N, int64_t L, int64_t pad,
                                 cudaStream_t st);
/* y(N, C) = without is_max, the float sum in l order over valid l of x, divided by count(n) (0 when count(n) is
 * 0); with is_max, the max over valid l (the first maximal l, the first NaN winning; 0 without valid l), and its
 * l (-1 without) in arg(N, C) unless arg is NULL. count is read only without is_max. */
cudaError_t glia__cuda_seq_pool_forward(float *y, int32_t *arg, const float *x, const int32_t *tok,
                                        const int32_t *count, int64_t N, int64_t C, int64_t L, int64_t pad, bool is_max,
                                        bool nhwc, cudaStream_t st);
/* dx (+)= for valid l: dy(n, c) / count(n) (without is_max) or dy(n, c) where l == arg(n, c) (with is_max);
 * else 0 */
cudaError_t glia__cuda_seq_pool_backward(float *dx, bool add, const float *dy, const int32_t *arg, const int32_t *tok,
                                         const int32_t *count, int64_t N, int64_t C, int64_t L, int64_t pad, bool is_max,
                                         bool nhwc, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
