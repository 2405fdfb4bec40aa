/* backends/cuda/attention_kernels.h — C entry points into attention_kernels.cu: the kernels of the CUDA attention
 * (heads split and merged, the row softmax with its causal mask and dropout, and its backward), launched on a given
 * stream. Not the layer logic nor the GEMMs (attention.c); each returns the launch's error. */
#ifndef GLIA_CUDA_ATTENTION_KERNELS_H
#define GLIA_CUDA_ATTENTION_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <glia/types/dropout.h>  /* struct glia_seed_at */

#ifdef __cplusplus
extern "C" {
#endif

/* dst(P, N, H, T, D) = src(N, T, P, H, D): the P parts (3: q, k, v; 1: an output gradient) of each head as their own
 * (T, D) matrices */
cudaError_t glia__cuda_attn_split(float *dst, const float *src, int64_t N, int64_t T, int64_t P, int64_t H, int64_t D,
                                  cudaStream_t st);
/* dst(N, T, P, H, D) (+ with add)= src(P, N, H, T, D): the heads concatenated again */
cudaError_t glia__cuda_attn_merge(float *dst, bool add, const float *src, int64_t N, int64_t T, int64_t P, int64_t H,
                                  int64_t D, cudaStream_t st);
/* att(B, T, T) = softmax over j of the scores att(b, i, j) (already scaled), keys j > i masked with causal (their
 * probability 0); with p > 0 also z(B, T, T) = att dropped (glia_attention_keep with the seed of at, b = n·H + h) and
 * scaled by 1/(1-p); z is not written when p is 0 */
cudaError_t glia__cuda_attn_softmax(float *att, float *z, int64_t B, int64_t T, bool causal, float p,
                                    struct glia_seed_at at, cudaStream_t st);
/* z(B, T, T) = att dropped and scaled by 1/(1-p) (what the forward multiplied v by), p > 0 */
cudaError_t glia__cuda_attn_dropped(float *z, const float *att, int64_t B, int64_t T, float p, struct glia_seed_at at,
                                    cudaStream_t st);
/* dz(B, T, T) = scale · att ∘ (dP − rowsum(att ∘ dP)) in place, dP = dz dropped and scaled by 1/(1-p) when p > 0
 * (dz holds dY Vᵀ on entry, the score gradient times scale on return); masked entries give 0 */
cudaError_t glia__cuda_attn_softmax_backward(float *dz, const float *att, int64_t B, int64_t T, bool causal, float p,
                                             struct glia_seed_at at, float scale, cudaStream_t st);
/* kv(N, H, 2, kv_t, D) positions pos .. pos + T - 1 = the keys and values of qkv(N, T, 3C) (a cached decode) */
cudaError_t glia__cuda_attn_kv_store(float *kv, const float *qkv, int64_t N, int64_t T, int64_t H, int64_t D,
                                     int64_t kv_t, int64_t pos, cudaStream_t st);
/* y(N, T, C) = softmax(q kᵀ · scale) v of the queries of qkv(N, T, 3C) at positions pos .. pos + T - 1, each against
 * the keys and values of kv(N, H, 2, kv_t, D) at positions 0 .. its own; sc is room for N·H·T·(pos + T) floats */
cudaError_t glia__cuda_attn_decode(float *y, float *sc, const float *qkv, const float *kv, int64_t N, int64_t T,
                                   int64_t H, int64_t D, int64_t kv_t, int64_t pos, float scale, cudaStream_t st);

#ifdef __cplusplus
}
#endif
#endif
