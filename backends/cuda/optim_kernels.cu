/* backends/cuda/optim_kernels.cu — the fused optimizer step kernels: one grid-stride pass over the
 * arena that reads each element's weight, gradient, state and decay flag once and writes the new
 * weight and state. Not the scalars' computation: the host does it in double, as the CPU kernels do
 * (glia/types/optimizers.h); each kernel takes them by value, or reads them from device memory (dk not NULL)
 * where the host wrote them before a CUDA graph's replay. With a.skip set and nonzero (fp16's loss scaler found the
 * gradients not finite) every thread returns at once.
 *
 * Every operation is an IEEE fp32 one in the CPU plugins' order (__f*_rn: no FMA contraction), so
 * a step gives the CPU's results bit for bit when the CPU code is not contracted either. */
#include "optim_kernels.h"

#include "launch.cuh"

static __device__ __forceinline__ float rn_add(float a, float b) { return __fadd_rn(a, b); }
static __device__ __forceinline__ float rn_sub(float a, float b) { return __fsub_rn(a, b); }
static __device__ __forceinline__ float rn_mul(float a, float b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ float rn_div(float a, float b) { return __fdiv_rn(a, b); }
static __device__ __forceinline__ float rn_sqrt(float a) { return __fsqrt_rn(a); }

/* The decay flag of element i: mask[i], or 1 without a mask. */
static __device__ __forceinline__ float flag(const float *mask, int64_t i) { return mask ? mask[i] : 1.0f; }

/* g' = g + wd w;  buf = g' (first step) or mu buf + (1 - damp) g';
 * d = nesterov ? g' + mu buf : buf (or g' without momentum);  w -= lr d
 * w(n), buf = s0(n) from g(n), mask(n) */
static __global__ void sgd_kernel(struct glia__cuda_opt_arrays a, struct glia_sgd_coef k, const struct glia_sgd_coef *dk)
{
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    float undamped = rn_sub(1.0f, k.damp);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
        float w = a.w[i];
        float d = rn_add(a.g[i], rn_mul(rn_mul(flag(a.mask, i), k.wd), w));
        if (k.mu != 0.0f) {
            float b = k.first ? d : rn_add(rn_mul(k.mu, a.s0[i]), rn_mul(undamped, d));
            a.s0[i] = b;
            d = k.nesterov ? rn_add(d, rn_mul(k.mu, b)) : b;
        }
        a.w[i] = rn_sub(w, rn_mul(k.lr, d));
    }
}

/* w -= step_size * (m / (sqrt(v) / bc2_sqrt + eps)), torch's order of operations */
static __device__ __forceinline__ float adam_delta(float step_size, float m, float v, float bc2_sqrt, float eps)
{
    return rn_mul(step_size, rn_div(m, rn_add(rn_div(rn_sqrt(v), bc2_sqrt), eps)));
}

/* adam (decoupled false): g' = g + wd w;  adamw (decoupled true): w *= keep where the flag is not 0; then
 * m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;  w -= adam_delta
 * w(n), m = s0(n), v = s1(n) from g(n), mask(n) */
template <bool decoupled>
static __global__ void adam_kernel(struct glia__cuda_opt_arrays a, struct glia_adam_coef k, const struct glia_adam_coef *dk)
{
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
        float w = a.w[i], g = a.g[i];
        if (decoupled)
            w = a.mask && a.mask[i] == 0.0f ? w : rn_mul(w, k.keep);
        else
            g = rn_add(g, rn_mul(rn_mul(flag(a.mask, i), k.wd), w));
        float m = rn_add(rn_mul(k.b1, a.s0[i]), rn_mul(k.c1, g));
        float v = rn_add(rn_mul(k.b2, a.s1[i]), rn_mul(rn_mul(k.c2, g), g));
        a.s0[i] = m;
        a.s1[i] = v;
        a.w[i] = rn_sub(w, adam_delta(k.step_size, m, v, k.bc2_sqrt, k.eps));
    }
}

/* g' = g + wd w;  sq = rho sq + (1 - rho) g'^2;  d = sqrt(acc + eps) / sqrt(sq + eps) g';
 * acc = rho acc + (1 - rho) d^2;  w -= lr d
 * w(n), sq = s0(n), acc = s1(n) from g(n), mask(n) */
static __global__ void adadelta_kernel(struct glia__cuda_opt_arrays a, struct glia_adadelta_coef k,
                                       const struct glia_adadelta_coef *dk)
{
    if (a.skip && *a.skip) return;
    if (dk) k = *dk;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
        float w = a.w[i], acc = a.s1[i];
        float g = rn_add(a.g[i], rn_mul(rn_mul(flag(a.mask, i), k.wd), w));
        float sq = rn_add(rn_mul(k.rho, a.s0[i]), rn_mul(rn_mul(k.c, g), g));
        float d = rn_mul(rn_div(rn_sqrt(rn_add(acc, k.eps)), rn_sqrt(rn_add(sq, k.eps))), g);
        a.s0[i] = sq;
        a.s1[i] = rn_add(rn_mul(k.rho, acc), rn_mul(rn_mul(k.c, d), d));
        a.w[i] = rn_sub(w, rn_mul(k.lr, d));
    }
}

extern "C" cudaError_t glia__cuda_sgd_step(struct glia__cuda_opt_arrays a, struct glia_sgd_coef k,
                                           const struct glia_sgd_coef *dk, cudaStream_t s)
{
    if (a.n <= 0) return cudaSuccess;
    sgd_kernel<<<grid_for(a.n), THREADS, 0, s>>>(a, k, dk);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_adam_step(struct glia__cuda_opt_arrays a, struct glia_adam_coef k,
                                            const struct glia_adam_coef *dk, bool decoupled, cudaStream_t s)
{
    if (a.n <= 0) return cudaSuccess;
    if (decoupled)
        adam_kernel<true><<<grid_for(a.n), THREADS, 0, s>>>(a, k, dk);
    else
        adam_kernel<false><<<grid_for(a.n), THREADS, 0, s>>>(a, k, dk);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_adadelta_step(struct glia__cuda_opt_arrays a, struct glia_adadelta_coef k,
                                                const struct glia_adadelta_coef *dk, cudaStream_t s)
{
    if (a.n <= 0) return cudaSuccess;
    adadelta_kernel<<<grid_for(a.n), THREADS, 0, s>>>(a, k, dk);
    return cudaGetLastError();
}
