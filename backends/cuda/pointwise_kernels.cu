/* backends/cuda/pointwise_kernels.cu — the fixed kernels of the CUDA add: grid-stride loops summing left to
 * right as the CPU kernel does (in f32 for f16 and bf16 values too), up to ADD_MAX inputs (outputs in backward) a
 * launch. Not the kernels compiled
 * from expressions (relu, ..., pointwise: pointwise_jit.c). */
#include "pointwise_kernels.h"

#include "half.cuh"
#include "launch.cuh"
#define ADD_MAX 8   /* inputs (outputs in backward) per add launch; more take several launches */

/* ---- add ----
 * Values of type T (f32, f16 or bf16) are summed in f32 and stored rounded once (to nearest even). */

struct in_ptrs {
    const void *p[ADD_MAX];
};
struct out_ptrs {
    void *p[ADD_MAX];
};

/* y(n) = x_0(n) + ... + x_{m-1}(n), or y(n) + x_0(n) + ... when onto (a later group of inputs);
 * left to right, like the CPU's y = x_0; y += x_1; ... */
template <typename T>
__global__ void add_forward_kernel(T *y, in_ptrs x, int m, bool onto, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = to_float(onto ? y[i] : ((const T *)x.p[0])[i]);
#pragma unroll
        for (int k = 0; k < ADD_MAX; k++)
            if (k < m && (onto || k > 0)) v += to_float(((const T *)x.p[k])[i]);
        y[i] = from_float<T>(v);
    }
}

/* dx_k(n) (+)= dy(n) for k < m with dx_k != NULL (bit k of acc: +=), in order of k */
template <typename T>
__global__ void add_backward_kernel(out_ptrs dx, unsigned acc, int m, const T *dy, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float g = to_float(dy[i]);
#pragma unroll
        for (int k = 0; k < ADD_MAX; k++) {
            T *d = (T *)dx.p[k];
            if (k < m && d) d[i] = (acc >> k & 1u) ? from_float<T>(to_float(d[i]) + g) : dy[i];
        }
    }
}

template <typename T>
static cudaError_t add_forward(void *y, const void *const *x, int m, int64_t n, cudaStream_t s)
{
    for (int k0 = 0; k0 < m; k0 += ADD_MAX) {
        in_ptrs g = {};
        int mm = m - k0 < ADD_MAX ? m - k0 : ADD_MAX;
        for (int k = 0; k < mm; k++) g.p[k] = x[k0 + k];
        add_forward_kernel<T><<<grid_for(n), THREADS, 0, s>>>((T *)y, g, mm, k0 > 0, n);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

template <typename T>
static cudaError_t add_backward(void *const *dx, const bool *accumulate, int m, const void *dy, int64_t n,
                                cudaStream_t s)
{
    for (int k0 = 0; k0 < m; k0 += ADD_MAX) {
        out_ptrs g = {};
        unsigned acc = 0;
        bool any = false;
        int mm = m - k0 < ADD_MAX ? m - k0 : ADD_MAX;
        for (int k = 0; k < mm; k++) {
            g.p[k] = dx[k0 + k];
            if (accumulate[k0 + k]) acc |= 1u << k;
            any = any || g.p[k];
        }
        if (!any) continue;
        add_backward_kernel<T><<<grid_for(n), THREADS, 0, s>>>(g, acc, mm, (const T *)dy, n);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t glia__cuda_add_forward(void *y, const void *const *x, enum glia_dtype t, int m, int64_t n,
                                              cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    if (m < 1) return cudaErrorInvalidValue;
    switch (t) {
    case GLIA_F32: return add_forward<float>(y, x, m, n, s);
    case GLIA_BF16: return add_forward<__nv_bfloat16>(y, x, m, n, s);
    case GLIA_F16: return add_forward<__half>(y, x, m, n, s);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t glia__cuda_add_backward(void *const *dx, const bool *accumulate, enum glia_dtype t, int m,
                                               const void *dy, int64_t n, cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    switch (t) {
    case GLIA_F32: return add_backward<float>(dx, accumulate, m, dy, n, s);
    case GLIA_BF16: return add_backward<__nv_bfloat16>(dx, accumulate, m, dy, n, s);
    case GLIA_F16: return add_backward<__half>(dx, accumulate, m, dy, n, s);
    default: return cudaErrorInvalidValue;
    }
}
