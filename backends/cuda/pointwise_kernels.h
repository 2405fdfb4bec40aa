/* backends/cuda/pointwise_kernels.h — C entry points into pointwise_kernels.cu: the fixed kernels of the CUDA
 * add, launched on a given stream. Not the kernels generated and compiled at run time (pointwise_jit.h). */
#ifndef GLIA_CUDA_POINTWISE_KERNELS_H
#define GLIA_CUDA_POINTWISE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <glia/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y(n) = x_0(n) + x_1(n) + ... + x_{m-1}(n), summed left to right in f32; m >= 1. x is a host array
 * of m device pointers; every operand holds values of type t (f32, f16 or bf16; the sum rounded once per 8 inputs,
 * one launch's). */
cudaError_t glia__cuda_add_forward(void *y, const void *const *x, enum glia_dtype t, int m, int64_t n, cudaStream_t s);

/* dx_k(n) = dy(n), or dx_k(n) += dy(n) when accumulate[k], for k < m; NULL dx_k are skipped.
 * dx and accumulate are host arrays of m entries; values of type t. Outputs are written in order k = 0, 1, ...
 * per element, so two dx_k may be the same tensor (an input fed twice). */
cudaError_t glia__cuda_add_backward(void *const *dx, const bool *accumulate, enum glia_dtype t, int m, const void *dy,
                                    int64_t n, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
