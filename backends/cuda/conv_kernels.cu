/* backends/cuda/conv_kernels.cu — the CUDA conv2d's kernels: fp32 <-> fp16/bf16 conversion of
 * activations, filters and gradients around the low-precision cuDNN calls, fused with the
 * filter's KCRS <-> KRSC transpose for channels_last (also the backend's convert slot), the
 * epilogue pass (bias, batchnorm affine, relu) and the relu's backward mask, the elementwise ones
 * 16 or 8 bytes a thread where aligned. Not the convolution (cuDNN, conv.c). */
#include "conv_kernels.h"

#include "half.cuh"
#include "launch.cuh"

/* dst(n) = src(n) (+ dst(n) when beta is 1), converted from Ti to To, W values a thread (one Pack of each: dst and src
 * aligned to them; the caller runs the last n % W with W = 1) */
template <typename To, typename Ti, int W>
__global__ void convert_kernel(To *dst, const Ti *src, int64_t n, float beta)
{
    typedef Pack<To, W> PO;
    typedef Pack<Ti, W> PI;
    int64_t nv = n / W;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += (int64_t)gridDim.x * blockDim.x) {
        PI a = ((const PI *)src)[v];
        PO o;
        if (beta != 0.0f) o = ((PO *)dst)[v];
#pragma unroll
        for (int j = 0; j < W; j++) {
            float x = to_float(a.v[j]);
            o.v[j] = from_float<To>(beta != 0.0f ? to_float(o.v[j]) + x : x);
        }
        ((PO *)dst)[v] = o;
    }
}

/* The elementwise kernel k over n values in packs of 4 where every pointer is aligned to them (16 bytes of f32, 8 of
 * a half type), the rest one by one: launch(w, offset, count) runs it with w values a thread from element offset. */
template <class L> static cudaError_t by_packs(int64_t n, bool aligned, L launch)
{
    int64_t head = aligned ? n / 4 * 4 : 0;
    if (head > 0) launch(4, (int64_t)0, head);
    if (n > head) launch(1, head, n - head);
    return cudaGetLastError();
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
        return by_packs(n, pack_aligned<To, 4>(dst) && pack_aligned<Ti, 4>(src), [&](int w, int64_t o, int64_t m) {
            if (w == 4)
                convert_kernel<To, Ti, 4><<<grid_for(m / 4), THREADS, 0, s>>>((To *)dst + o, (const Ti *)src + o, m, beta);
            else
                convert_kernel<To, Ti, 1><<<grid_for(m), THREADS, 0, s>>>((To *)dst + o, (const Ti *)src + o, m, beta);
        });
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

/* One job's elements i of block bb of its nb: dst(B, cols, rows) = src(B, rows, cols)^T, as transpose_convert_kernel
 * indexes them (rows == 1 or cols == 1: dst(i) = src(i)). */
template <typename To>
__device__ static void convert_job(const struct glia__convert_job &j, int64_t bb, int64_t nb)
{
    int64_t rows = j.rows, cols = j.cols, n = j.B * rows * cols;
    To *dst = (To *)j.dst;
    if (rows == 1 || cols == 1) {  /* a plain copy (most weights): no index arithmetic */
        for (int64_t i = bb * blockDim.x + threadIdx.x; i < n; i += nb * blockDim.x) dst[i] = from_float<To>(j.src[i]);
        return;
    }
    for (int64_t i = bb * blockDim.x + threadIdx.x; i < n; i += nb * blockDim.x) {
        int64_t r = i % rows, c = i / rows % cols, b = i / (rows * cols);
        dst[i] = from_float<To>(j.src[(b * rows + r) * cols + c]);
    }
}

/* The jobs(n) of glia__conv_convert_many: block b runs the job whose blocks hold it (a binary search over firsts). */
__global__ void convert_many_kernel(const struct glia__convert_job *jobs, int n, int64_t blocks)
{
    int lo = 0, hi = n - 1;
    int64_t b = blockIdx.x;
    while (lo < hi) {  /* the last job whose first <= b */
        int mid = (lo + hi + 1) / 2;
        if (jobs[mid].first <= b) lo = mid;
        else hi = mid - 1;
    }
    const struct glia__convert_job &j = jobs[lo];
    int64_t nb = (lo + 1 < n ? jobs[lo + 1].first : blocks) - j.first;
    switch (j.type) {
    case GLIA__CONV_F32: convert_job<float>(j, b - j.first, nb); break;
    case GLIA__CONV_F16: convert_job<__half>(j, b - j.first, nb); break;
    case GLIA__CONV_BF16: convert_job<__nv_bfloat16>(j, b - j.first, nb); break;
    }
}

#define CONVERT_PER_THREAD 8  /* elements a thread of glia__conv_convert_many */

extern "C" int64_t glia__conv_convert_blocks(int64_t n)
{
    int64_t b = (n + THREADS * CONVERT_PER_THREAD - 1) / (THREADS * CONVERT_PER_THREAD);
    return b < 1 ? 1 : b > 4096 ? 4096 : b;
}

extern "C" cudaError_t glia__conv_convert_many(const struct glia__convert_job *jobs, int n, int64_t blocks,
                                               cudaStream_t s)
{
    if (n <= 0 || blocks <= 0) return cudaSuccess;
    convert_many_kernel<<<(unsigned)blocks, THREADS, 0, s>>>(jobs, n, blocks);
    return cudaGetLastError();
}

/* y(n) = act(a(y(n) + b(c))), c the element's channel: b NULL adds nothing; a(v) = (v - af(0, c))*af(1, c) +
 * af(2, c) with af, else v; act the relu with relu (a negative value becomes 0, NaN stays NaN), else none. W values a
 * thread (one Pack: y aligned to it, and W consecutive values in one channel (NCHW: HW % W == 0) or in W consecutive
 * ones (NHWC: F % W == 0)); I the index type (32 bits where n fits: the channel's division is then cheap) */
template <typename T, int W, typename I>
__global__ void bias_add_kernel(T *y, const float *b, const float *af, I n, I F, I HW, bool nhwc, bool relu)
{
    typedef Pack<T, W> P;
    I nv = n / W;
    for (I v = (I)blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += (I)gridDim.x * blockDim.x) {
        I i = v * W, c0 = nhwc ? i % F : i / HW % F;
        P p = ((P *)y)[v];
#pragma unroll
        for (int j = 0; j < W; j++) {
            I c = nhwc ? c0 + j : c0;
            float x = to_float(p.v[j]) + (b ? b[c] : 0.0f);
            if (af) x = __fadd_rn(__fmul_rn(x - af[c], af[F + c]), af[2 * F + c]);  /* as written: no contraction */
            p.v[j] = from_float<T>(relu && x < 0.0f ? 0.0f : x);
        }
        ((P *)y)[v] = p;
    }
}

template <typename T>
static cudaError_t bias_add_as(T *y, const float *b, const float *af, int64_t n, int64_t F, int64_t HW, bool nhwc,
                               bool relu, cudaStream_t s)
{
    const int W = 16 / sizeof(T);  /* 16 bytes a thread */
    bool vec = pack_aligned<T, W>(y) && (nhwc ? F % W == 0 : HW % W == 0);
    bool narrow = n < ((int64_t)1 << 31);
    if (vec && narrow)
        bias_add_kernel<T, W, uint32_t><<<grid_for(n / W), THREADS, 0, s>>>(y, b, af, (uint32_t)n, (uint32_t)F,
                                                                             (uint32_t)HW, nhwc, relu);
    else if (vec)
        bias_add_kernel<T, W, int64_t><<<grid_for(n / W), THREADS, 0, s>>>(y, b, af, n, F, HW, nhwc, relu);
    else if (narrow)
        bias_add_kernel<T, 1, uint32_t><<<grid_for(n), THREADS, 0, s>>>(y, b, af, (uint32_t)n, (uint32_t)F, (uint32_t)HW,
                                                                         nhwc, relu);
    else
        bias_add_kernel<T, 1, int64_t><<<grid_for(n), THREADS, 0, s>>>(y, b, af, n, F, HW, nhwc, relu);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__conv_bias_add(void *y, enum glia__conv_type t, const float *b, const float *affine,
                                           int64_t n, int64_t F, int64_t HW, bool nhwc, bool relu, cudaStream_t s)
{
    if (n <= 0) return cudaSuccess;
    switch (t) {
    case GLIA__CONV_F32: return bias_add_as((float *)y, b, affine, n, F, HW, nhwc, relu, s);
    case GLIA__CONV_F16: return bias_add_as((__half *)y, b, affine, n, F, HW, nhwc, relu, s);
    case GLIA__CONV_BF16: return bias_add_as((__nv_bfloat16 *)y, b, affine, n, F, HW, nhwc, relu, s);
    default: return cudaErrorInvalidValue;
    }
}

/* d(n) = y(n) <= 0 ? 0 : dy(n), converted from Ti to To: the relu's backward over its output, W values a thread (one
 * Pack of each: the pointers aligned to them; the caller runs the last n % W with W = 1) */
template <typename To, typename Ti, int W>
__global__ void relu_mask_kernel(To *d, const Ti *dy, const Ti *y, int64_t n)
{
    typedef Pack<To, W> PO;
    typedef Pack<Ti, W> PI;
    int64_t nv = n / W;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += (int64_t)gridDim.x * blockDim.x) {
        PI g = ((const PI *)dy)[v], h = ((const PI *)y)[v];
        PO o;
#pragma unroll
        for (int j = 0; j < W; j++) o.v[j] = from_float<To>(to_float(h.v[j]) <= 0.0f ? 0.0f : to_float(g.v[j]));
        ((PO *)d)[v] = o;
    }
}

template <typename To, typename Ti>
static cudaError_t mask_as(To *d, const Ti *dy, const Ti *y, int64_t n, cudaStream_t s)
{
    bool aligned = pack_aligned<To, 4>(d) && pack_aligned<Ti, 4>(dy) && pack_aligned<Ti, 4>(y);
    return by_packs(n, aligned, [&](int w, int64_t o, int64_t m) {
        if (w == 4)
            relu_mask_kernel<To, Ti, 4><<<grid_for(m / 4), THREADS, 0, s>>>(d + o, dy + o, y + o, m);
        else
            relu_mask_kernel<To, Ti, 1><<<grid_for(m), THREADS, 0, s>>>(d + o, dy + o, y + o, m);
    });
}

template <typename To>
static cudaError_t mask_from(void *d, const void *dy, const void *y, enum glia__conv_type src_type, int64_t n,
                             cudaStream_t s)
{
    using B = __nv_bfloat16;
    switch (src_type) {
    case GLIA__CONV_F32: return mask_as((To *)d, (const float *)dy, (const float *)y, n, s);
    case GLIA__CONV_F16: return mask_as((To *)d, (const __half *)dy, (const __half *)y, n, s);
    case GLIA__CONV_BF16: return mask_as((To *)d, (const B *)dy, (const B *)y, n, s);
    default: return cudaErrorInvalidValue;
    }
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

/* out(2) max-reduced by compare_kernel: as unsigned bits, whose order is the floats' for values >= 0 */
template <typename T>
__global__ void compare_kernel(unsigned *out, const T *a, const T *b, int64_t n)
{
    __shared__ float worst[THREADS], big[THREADS];
    float w = 0.0f, g = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float x = to_float(a[i]), e = fabsf(to_float(b[i]) - x);
        if (isnan(e)) e = isnan(x) ? 0.0f : INFINITY;  /* a NaN where the reference has none is as far as can be */
        w = fmaxf(w, e);
        if (!isnan(x)) g = fmaxf(g, fabsf(x));
    }
    worst[threadIdx.x] = w;
    big[threadIdx.x] = g;
    __syncthreads();
    for (int k = THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) {
            worst[threadIdx.x] = fmaxf(worst[threadIdx.x], worst[threadIdx.x + k]);
            big[threadIdx.x] = fmaxf(big[threadIdx.x], big[threadIdx.x + k]);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicMax(&out[0], __float_as_uint(worst[0]));
        atomicMax(&out[1], __float_as_uint(big[0]));
    }
}

extern "C" cudaError_t glia__conv_compare(float *out, const void *a, const void *b, enum glia__conv_type t, int64_t n,
                                          cudaStream_t s)
{
    cudaError_t e = cudaMemsetAsync(out, 0, 2 * sizeof(float), s);
    if (e != cudaSuccess || n <= 0) return e;
    unsigned grid = grid_for(n) < 1024 ? grid_for(n) : 1024;
    switch (t) {
    case GLIA__CONV_F32: compare_kernel<float><<<grid, THREADS, 0, s>>>((unsigned *)out, (const float *)a, (const float *)b, n); break;
    case GLIA__CONV_F16: compare_kernel<__half><<<grid, THREADS, 0, s>>>((unsigned *)out, (const __half *)a, (const __half *)b, n); break;
    case GLIA__CONV_BF16:
        compare_kernel<__nv_bfloat16><<<grid, THREADS, 0, s>>>((unsigned *)out, (const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b, n);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
