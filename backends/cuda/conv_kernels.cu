/* backends/cuda/conv_kernels.cu — the CUDA conv2d's kernels: fp32 <-> fp16/bf16 conversion of
 * activations, filters and gradients around the low-precision cuDNN calls, fused with the
 * filter's KCRS <-> KRSC transpose for channels_last (also the backend's convert slot), and the
 * bias add on half activations. Not the convolution (cuDNN, conv.c). */
#include "conv_kernels.h"

#include "half.cuh"
#include "launch.cuh"

/* dst(n) = src(n) (+ dst(n) when beta is 1), converted from Ti to To */
template <typename To, typename Ti>
__global__ void convert_kernel(To *dst, const Ti *src, int64_t n, float beta)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = to_float(src[i]);
        dst[i] = from_float<To>(beta != 0.0f ? to_float(dst[i]) + v : v);
    }
}

/* dst(B, cols, rows) = src(B, rows, cols)^T (+ dst when beta is 1), converted from Ti to To: one
 * thread per dst element (coalesced writes, gathered reads; filters are small) */
template <typename To, typename Ti>
__global__ void transpose_convert_kernel(To *dst, const Ti *src, int64_t B, int64_t rows, int64_t cols, float beta)
{
    int64_t n = B * rows * cols;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i % rows, c = i / rows % cols, b = i / (rows * cols);
        float v = to_float(src[(b * rows + r) * cols + c]);
        dst[i] = from_float<To>(beta != 0.0f ? to_float(dst[i]) + v : v);
    }
}

template <typename To, typename Ti>
static cudaError_t launch(void *dst, const void *src, int64_t B, int64_t rows, int64_t cols, float beta,
                          cudaStream_t s)
{
    int64_t n = B * rows * cols;
    unsigned grid = grid_for(n);
    if (rows == 1 || cols == 1)
        convert_kernel<To, Ti><<<grid, THREADS, 0, s>>>((To *)dst, (const Ti *)src, n, beta);
    else
        transpose_convert_kernel<To, Ti><<<grid, THREADS, 0, s>>>((To *)dst, (const Ti *)src, B, rows, cols, beta);
    return cudaGetLastError();
}

template <typename To>
static cudaError_t launch_from(void *dst, const void *src, enum glia__conv_type src_type, int64_t B, int64_t rows,
                               int64_t cols, float beta, cudaStream_t s)
{
    switch (src_type) {
    case GLIA__CONV_F32: return launch<To, float>(dst, src, B, rows, cols, beta, s);
    case GLIA__CONV_F16: return launch<To, __half>(dst, src, B, rows, cols, beta, s);
    case GLIA__CONV_BF16: return launch<To, __nv_bfloat16>(dst, src, B, rows, cols, beta, s);
    }
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t glia__conv_convert(void *dst, enum glia__conv_type dst_type, const void *src,
                                          enum glia__conv_type src_type, int64_t B, int64_t rows, int64_t cols,
                                          float beta, cudaStream_t s)
{
    if (B <= 0 || rows <= 0 || cols <= 0) return cudaSuccess;
    switch (dst_type) {
    case GLIA__CONV_F32: return launch_from<float>(dst, src, src_type, B, rows, cols, beta, s);
    case GLIA__CONV_F16: return launch_from<__half>(dst, src, src_type, B, rows, cols, beta, s);
    case GLIA__CONV_BF16: return launch_from<__nv_bfloat16>(dst, src, src_type, B, rows, cols, beta, s);
    }
    return cudaErrorInvalidValue;
}

/* y(n) = act(a(y(n) + b(c))), c the element's channel: b NULL adds nothing; a(v) = (v - af(0, c))*af(1, c) +
 * af(2, c) with af, else v; act the relu with relu (a negative value becomes 0, NaN stays NaN), else none */
template <typename T>
__global__ void bias_add_kernel(T *y, const float *b, const float *af, int64_t n, int64_t F, int64_t HW, bool nhwc,
                                bool relu)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = nhwc ? i % F : i / HW % F;
        float v = to_float(y[i]) + (b ? b[c] : 0.0f);
        if (af) v = __fadd_rn(__fmul_rn(v - af[c], af[F + c]), af[2 * F + c]);  /* as written: no contraction */
        y[i] = from_float<T>(relu && v < 0.0f ? 0.0f : v);
    }
}

extern "C" cudaError_t glia__conv_bias_add(void *y, enum glia__conv_type t, const float *b, const float *affine,
                                           int64_t n, int64_t F, int64_t HW, bool nhwc, bool relu, cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    const float *af = affine;
    switch (t) {
    case GLIA__CONV_F32:
        bias_add_kernel<float><<<grid_for(n), THREADS, 0, s>>>((float *)y, b, af, n, F, HW, nhwc, relu);
        break;
    case GLIA__CONV_F16:
        bias_add_kernel<__half><<<grid_for(n), THREADS, 0, s>>>((__half *)y, b, af, n, F, HW, nhwc, relu);
        break;
    case GLIA__CONV_BF16:
        bias_add_kernel<__nv_bfloat16><<<grid_for(n), THREADS, 0, s>>>((__nv_bfloat16 *)y, b, af, n, F, HW, nhwc, relu);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* d(n) = y(n) <= 0 ? 0 : dy(n), converted from Ti to To: the relu's backward over its output */
template <typename To, typename Ti>
__global__ void relu_mask_kernel(To *d, const Ti *dy, const Ti *y, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        d[i] = from_float<To>(to_float(y[i]) <= 0.0f ? 0.0f : to_float(dy[i]));
}

template <typename To>
static cudaError_t mask_from(void *d, const void *dy, const void *y, enum glia__conv_type src_type, int64_t n,
                             cudaStream_t s)
{
    using B = __nv_bfloat16;
    switch (src_type) {
    case GLIA__CONV_F32:
        relu_mask_kernel<To, float><<<grid_for(n), THREADS, 0, s>>>((To *)d, (const float *)dy, (const float *)y, n);
        break;
    case GLIA__CONV_F16:
        relu_mask_kernel<To, __half><<<grid_for(n), THREADS, 0, s>>>((To *)d, (const __half *)dy, (const __half *)y, n);
        break;
    case GLIA__CONV_BF16:
        relu_mask_kernel<To, B><<<grid_for(n), THREADS, 0, s>>>((To *)d, (const B *)dy, (const B *)y, n);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t glia__conv_relu_mask(void *d, enum glia__conv_type dst_type, const void *dy, const void *y,
                                            enum glia__conv_type src_type, int64_t n, cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    switch (dst_type) {
    case GLIA__CONV_F32: return mask_from<float>(d, dy, y, src_type, n, s);
    case GLIA__CONV_F16: return mask_from<__half>(d, dy, y, src_type, n, s);
    case GLIA__CONV_BF16: return mask_from<__nv_bfloat16>(d, dy, y, src_type, n, s);
    }
    return cudaErrorInvalidValue;
}
