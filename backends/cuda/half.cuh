/* backends/cuda/half.cuh — device loads and stores of f32, f16 and bf16 values through f32 (rounding to nearest even),
 * what the backend's kernels that take half activations share. Not a kernel and not a public header. */
#ifndef GLIA_CUDA_HALF_CUH
#define GLIA_CUDA_HALF_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <glia/tensor.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/* W values of type T that one vector instruction loads or stores (W*sizeof(T) = 8 or 16 bytes, the pointer aligned to
 * that): Pack<__half, 8> is one 16-byte load of 8 halves, Pack<float, 4> one of 4 floats (as a float4). */
template <typename T, int W> struct alignas(sizeof(T) * W) Pack {
    enum { width = W };
    T v[W];
};

/* Whether p is aligned to a Pack<T, W> (W*sizeof(T) bytes); NULL is. */
template <typename T, int W> static inline bool pack_aligned(const void *p) { return (uintptr_t)p % (sizeof(T) * W) == 0; }

/* Calls f(T()) with T the element type of t (f32, f16 or bf16): a launch for that type; cudaErrorInvalidValue for
 * another. */
template <class F> static cudaError_t by_type(enum glia_dtype t, F f)
{
    switch (t) {
    case GLIA_F32: return f(float());
    case GLIA_BF16: return f(__nv_bfloat16());
    case GLIA_F16: return f(__half());
    default: return cudaErrorInvalidValue;
    }
}

#endif
