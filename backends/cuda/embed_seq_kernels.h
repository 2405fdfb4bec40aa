/* backends/cuda/embed_seq_kernels.h — C entry points into embed_seq_kernels.cu: the kernels of the CUDA
 * position_embedding, launched on a given stream. Not the layer logic (embed_seq.c checks shapes and picks the
 * arguments); each returns the launch's error. */
#ifndef GLIA_CUDA_EMBED_SEQ_KERNELS_H
#define GLIA_CUDA_EMBED_SEQ_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- position_embedding ----
 * x, y, dx, dy (N, T, C) contiguous; w, dw (P, C) with T <= P (rows t >= T are not touched). */

/* y = x + w[t] */
cudaError_t glia__cuda_pos_embedding_forward(float *y, const float *x, const float *w, int64_t N, int64_t T, int64_t C,
                                             cudaStream_t st);
/* dx = dy, or dx += dy with add */
cudaError_t glia__cuda_pos_embedding_dx(float *dx, const float *dy, int64_t n, bool add, cudaStream_t st);
/* dw[t] = (add: dw[t] +) the float sum over n ascending of dy[n, t], for t < T: the CPU kernel's bits */
cudaError_t glia__cuda_pos_embedding_dw(float *dw, const float *dy, int64_t N, int64_t T, int64_t C, bool add,
                                        cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
