/* backends/cuda/pointwise_kernels.h — C entry points into pointwise_kernels.cu: the fixed kernels
 * of the CUDA relu, leaky_relu, sigmoid, tanh, gelu and add, launched on a given stream.
 * Not the `pointwise` layer's kernels: those are generated and compiled at run time (pointwise_jit). */
#ifndef GLIA_CUDA_POINTWISE_KERNELS_H
#define GLIA_CUDA_POINTWISE_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

enum glia__cuda_act {
    GLIA__ACT_RELU = 0,    /* backward reads y */
    GLIA__ACT_LEAKY_RELU,  /* backward reads x (with slope 0, y = 0 would not tell the sides apart) */
    GLIA__ACT_SIGMOID,     /* backward reads y */
    GLIA__ACT_TANH,        /* backward reads y */
    GLIA__ACT_GELU         /* backward reads x */
};

/* Whether the backward of act reads the forward input x (else the output y). */
static inline bool glia__cuda_act_reads_input(enum glia__cuda_act act)
{
    return act == GLIA__ACT_LEAKY_RELU || act == GLIA__ACT_GELU;
}

/* y(n) = act(x(n)); slope is leaky_relu's negative_slope (ignored by the others). */
cudaError_t glia__cuda_act_forward(enum glia__cuda_act act, float *y, const float *x, int64_t n, float slope,
                                   cudaStream_t s);

/* dx(n) = dy(n) * act'(saved(n)), or dx(n) += that when accumulate; saved is x or y as
 * glia__cuda_act_reads_input says. dx is only read when accumulating. */
cudaError_t glia__cuda_act_backward(enum glia__cuda_act act, float *dx, const float *dy, const float *saved, int64_t n,
                                    float slope, bool accumulate, cudaStream_t s);

/* y(n) = x_0(n) + x_1(n) + ... + x_{m-1}(n), summed left to right; m >= 1. x is a host array
 * of m device pointers. */
cudaError_t glia__cuda_add_forward(float *y, const float *const *x, int m, int64_t n, cudaStream_t s);

/* dx_k(n) = dy(n), or dx_k(n) += dy(n) when accumulate[k], for k < m; NULL dx_k are skipped.
 * dx and accumulate are host arrays of m entries. Outputs are written in order k = 0, 1, ...
 * per element, so two dx_k may be the same tensor (an input fed twice). */
cudaError_t glia__cuda_add_backward(float *const *dx, const bool *accumulate, int m, const float *dy, int64_t n,
                                    cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
