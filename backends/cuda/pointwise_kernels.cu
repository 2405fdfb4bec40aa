/* backends/cuda/pointwise_kernels.cu — the fixed kernels of the CUDA add: grid-stride loops summing left to
 * right as the CPU kernel does, up to ADD_MAX inputs (outputs in backward) a launch. Not the kernels compiled
 * from expressions (relu, ..., pointwise: pointwise_jit.c). */
#include "pointwise_kernels.h"

#include "launch.cuh"
#define ADD_MAX 8   /* inputs (outputs in backward) per add launch; more take several launches */

/* ---- add ---- */

struct in_ptrs {
    const float *p[ADD_MAX];
};
struct out_ptrs {
    float *p[ADD_MAX];
};

/* y(n) = x_0(n) + ... + x_{m-1}(n), or y(n) + x_0(n) + ... when onto (a later group of inputs);
 * left to right, like the CPU's y = x_0; y += x_1; ... */
__global__ void add_forward_kernel(float *y, in_ptrs x, int m, bool onto, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = onto ? y[i] : x.p[0][i];
#pragma unroll
        for (int k = 0; k < ADD_MAX; k++)
            if (k < m && (onto || k > 0)) v += x.p[k][i];
        y[i] = v;
    }
}

/* dx_k(n) (+)= dy(n) for k < m with dx_k != NULL (bit k of acc: +=), in order of k */
__global__ void add_backward_kernel(out_ptrs dx, unsigned acc, int m, const float *dy, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float g = dy[i];
#pragma unroll
        for (int k = 0; k < ADD_MAX; k++) {
            float *d = dx.p[k];
            if (k < m && d) d[i] = (acc >> k & 1u) ? d[i] + g : g;
        }
    }
}

extern "C" cudaError_t glia__cuda_add_forward(float *y, const float *const *x, int m, int64_t n, cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    if (m < 1) return cudaErrorInvalidValue;
    for (int k0 = 0; k0 < m; k0 += ADD_MAX) {
        in_ptrs g = {};
        int mm = m - k0 < ADD_MAX ? m - k0 : ADD_MAX;
        for (int k = 0; k < mm; k++) g.p[k] = x[k0 + k];
        add_forward_kernel<<<grid_for(n), THREADS, 0, s>>>(y, g, mm, k0 > 0, n);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t glia__cuda_add_backward(float *const *dx, const bool *accumulate, int m, const float *dy,
                                               int64_t n, cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
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
        add_backward_kernel<<<grid_for(n), THREADS, 0, s>>>(g, acc, mm, dy, n);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
