/* backends/cuda/pointwise_kernels.cu — the fixed elementwise kernels of the CUDA relu, leaky_relu,
 * sigmoid, tanh, gelu and add: grid-stride loops, float4 when every pointer is 16-byte aligned,
 * the same float expressions as the CPU plugins. Not the `pointwise` layer (NVRTC, pointwise_jit.c). */
#include "pointwise_kernels.h"

#include "launch.cuh"
#define ADD_MAX 8   /* inputs (outputs in backward) per add launch; more take several launches */

#define GELU_INV_SQRT2 0.70710678118654752440f    /* 1 / sqrt(2) */
#define GELU_INV_SQRT2PI 0.39894228040143267794f  /* 1 / sqrt(2 pi) */

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* ---- the activations: fwd(x) and bwd(dy, saved), as in the CPU plugins ---- */

/* NaN passes (forward and gradient) and -0 stays -0, as torch.relu; gradient 0 at y = +-0 */
struct Relu {
    float slope;
    __device__ float fwd(float x) const { return x < 0.0f ? 0.0f : x; }
    __device__ float bwd(float dy, float y) const { return y <= 0.0f ? 0.0f : dy; }
};

struct LeakyRelu {
    float slope;
    __device__ float fwd(float x) const { return x > 0.0f ? x : slope * x; }
    __device__ float bwd(float dy, float x) const { return x > 0.0f ? dy : slope * dy; }
};

/* 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0 with e = exp(-|x|) <= 1: exp never overflows. */
struct Sigmoid {
    float slope;
    __device__ float fwd(float x) const
    {
        float e = expf(-fabsf(x));
        return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
    }
    __device__ float bwd(float dy, float y) const { return dy * y * (1.0f - y); }
};

struct Tanh {
    float slope;
    __device__ float fwd(float x) const { return tanhf(x); }
    __device__ float bwd(float dy, float y) const { return dy * (1.0f - y * y); }
};

/* The erf form; the gradient Phi(x) + x phi(x) needs x. */
struct Gelu {
    float slope;
    __device__ float fwd(float x) const { return 0.5f * x * (1.0f + erff(x * GELU_INV_SQRT2)); }
    __device__ float bwd(float dy, float x) const
    {
        float cdf = 0.5f * (1.0f + erff(x * GELU_INV_SQRT2));
        float pdf = expf(-0.5f * x * x) * GELU_INV_SQRT2PI;
        return dy * (cdf + x * pdf);
    }
};

/* y(n) = op.fwd(x(n)); quads first when vec (every pointer 16-byte aligned), then the tail */
template <class Op>
__global__ void act_forward_kernel(float *y, const float *x, int64_t n, bool vec, Op op)
{
    int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    int64_t n4 = vec ? n / 4 : 0;
    for (int64_t i = start; i < n4; i += step) {
        float4 v = reinterpret_cast<const float4 *>(x)[i];
        v.x = op.fwd(v.x);
        v.y = op.fwd(v.y);
        v.z = op.fwd(v.z);
        v.w = op.fwd(v.w);
        reinterpret_cast<float4 *>(y)[i] = v;
    }
    for (int64_t i = 4 * n4 + start; i < n; i += step) y[i] = op.fwd(x[i]);
}

/* dx(n) (+)= op.bwd(dy(n), saved(n)); dx read only when acc */
template <class Op>
__global__ void act_backward_kernel(float *dx, const float *dy, const float *saved, int64_t n, bool vec, bool acc,
                                    Op op)
{
    int64_t start = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    int64_t n4 = vec ? n / 4 : 0;
    for (int64_t i = start; i < n4; i += step) {
        float4 g = reinterpret_cast<const float4 *>(dy)[i], s = reinterpret_cast<const float4 *>(saved)[i], r;
        r.x = op.bwd(g.x, s.x);
        r.y = op.bwd(g.y, s.y);
        r.z = op.bwd(g.z, s.z);
        r.w = op.bwd(g.w, s.w);
        if (acc) {
            float4 d = reinterpret_cast<const float4 *>(dx)[i];
            r.x = d.x + r.x;
            r.y = d.y + r.y;
            r.z = d.z + r.z;
            r.w = d.w + r.w;
        }
        reinterpret_cast<float4 *>(dx)[i] = r;
    }
    for (int64_t i = 4 * n4 + start; i < n; i += step) {
        float r = op.bwd(dy[i], saved[i]);
        dx[i] = acc ? dx[i] + r : r;
    }
}

template <class Op>
static cudaError_t launch_forward(Op op, float *y, const float *x, int64_t n, cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    bool vec = aligned16(y) && aligned16(x);
    act_forward_kernel<Op><<<grid_for(vec ? (n + 3) / 4 : n), THREADS, 0, s>>>(y, x, n, vec, op);
    return cudaGetLastError();
}

template <class Op>
static cudaError_t launch_backward(Op op, float *dx, const float *dy, const float *saved, int64_t n, bool acc,
                                   cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    bool vec = aligned16(dx) && aligned16(dy) && aligned16(saved);
    act_backward_kernel<Op><<<grid_for(vec ? (n + 3) / 4 : n), THREADS, 0, s>>>(dx, dy, saved, n, vec, acc, op);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_act_forward(enum glia__cuda_act act, float *y, const float *x, int64_t n,
                                              float slope, cudaStream_t s)
{
    switch (act) {
    case GLIA__ACT_RELU: return launch_forward(Relu{slope}, y, x, n, s);
    case GLIA__ACT_LEAKY_RELU: return launch_forward(LeakyRelu{slope}, y, x, n, s);
    case GLIA__ACT_SIGMOID: return launch_forward(Sigmoid{slope}, y, x, n, s);
    case GLIA__ACT_TANH: return launch_forward(Tanh{slope}, y, x, n, s);
    case GLIA__ACT_GELU: return launch_forward(Gelu{slope}, y, x, n, s);
    }
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t glia__cuda_act_backward(enum glia__cuda_act act, float *dx, const float *dy, const float *saved,
                                               int64_t n, float slope, bool accumulate, cudaStream_t s)
{
    switch (act) {
    case GLIA__ACT_RELU: return launch_backward(Relu{slope}, dx, dy, saved, n, accumulate, s);
    case GLIA__ACT_LEAKY_RELU: return launch_backward(LeakyRelu{slope}, dx, dy, saved, n, accumulate, s);
    case GLIA__ACT_SIGMOID: return launch_backward(Sigmoid{slope}, dx, dy, saved, n, accumulate, s);
    case GLIA__ACT_TANH: return launch_backward(Tanh{slope}, dx, dy, saved, n, accumulate, s);
    case GLIA__ACT_GELU: return launch_backward(Gelu{slope}, dx, dy, saved, n, accumulate, s);
    }
    return cudaErrorInvalidValue;
}

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
