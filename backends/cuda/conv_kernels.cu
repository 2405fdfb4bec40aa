/* backends/cuda/conv_kernels.cu — the CUDA conv2d's kernels: fp32 <-> fp16/bf16 conversion of
 * activations, filters and gradients around the low-precision cuDNN calls, fused with the
 * filter's KCRS <-> KRSC transpose for channels_last; the bias gradient (deterministic, and
 * much faster than cudnnConvolutionBackwardBias). Not the convolution (cuDNN, conv.c). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "conv_kernels.h"

#include "launch.cuh"

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

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

/* ---- the bias gradient: db(F) (+)= the sum of dy over N and the output positions ---- */

#define BG_PLANE_SPLIT 4096  /* dy values a planes block sums */
#define BG_ROW_SPLIT 512     /* rows a rows block sums */
#define BG_MAX_BLOCKS 4096   /* splits are capped so that the grid stays about this size */
#define BG_TILE_C 32         /* channels of a rows block (threadIdx.x) */
#define BG_TILE_R 8          /* row lanes of a rows block (threadIdx.y) */

/* The sum of v over a block of THREADS threads in a fixed tree order; valid in thread 0. */
__device__ static float block_sum(float v)
{
    __shared__ float warp_part[THREADS / 32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) warp_part[warp] = v;
    __syncthreads();
    v = 0.0f;
    if (warp == 0) {
        v = lane < THREADS / 32 ? warp_part[lane] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    }
    return v;
}

/* part(S, F): split s = blockIdx.y of channel f = blockIdx.x of dy(N, F, L), L > 1; the split's
 * values j = n*L + i in [s*M/S, (s+1)*M/S), M = N*L, THREADS apart per thread. */
__global__ void bias_grad_planes(float *part, const float *dy, int64_t N, int64_t F, int64_t L, int S)
{
    int64_t f = blockIdx.x, s = blockIdx.y, M = N * L;
    int64_t j0 = s * M / S + threadIdx.x, j1 = (s + 1) * M / S;
    int64_t n = j0 / L, i = j0 % L, dn = THREADS / L, di = THREADS % L;
    float v = 0.0f;
    for (int64_t j = j0; j < j1; j += THREADS) {
        v += dy[(n * F + f) * L + i];
        n += dn, i += di;
        if (i >= L) i -= L, n++;
    }
    v = block_sum(v);
    if (threadIdx.x == 0) part[s * F + f] = v;
}

/* part(S, F) for rows dy(M, F): block (BG_TILE_C, BG_TILE_R) takes channels blockIdx.x*BG_TILE_C +
 * threadIdx.x and rows threadIdx.y, + BG_TILE_R, ... of split s = blockIdx.y (a warp reads 32
 * consecutive channels of a row); the row lanes add in order 0, 1, ... */
__global__ void bias_grad_rows(float *part, const float *dy, int64_t M, int64_t F, int S)
{
    __shared__ float lane_part[BG_TILE_R][BG_TILE_C];
    int64_t f = (int64_t)blockIdx.x * BG_TILE_C + threadIdx.x, s = blockIdx.y;
    int64_t r1 = (s + 1) * M / S;
    float v = 0.0f;
    if (f < F)
        for (int64_t r = s * M / S + threadIdx.y; r < r1; r += BG_TILE_R) v += dy[r * F + f];
    lane_part[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0 && f < F) {
        for (int y = 1; y < BG_TILE_R; y++) v += lane_part[y][threadIdx.x];
        part[s * F + f] = v;
    }
}

/* db(F) = the splits of part(S, F) added in order in double (+ db when beta is 1): a thread a channel. */
__global__ void bias_grad_total(float *db, const float *part, int64_t F, int S, float beta)
{
    int64_t f = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= F) return;
    double t = 0.0;
    for (int s = 0; s < S; s++) t += part[(int64_t)s * F + f];
    db[f] = beta != 0.0f ? (float)((double)db[f] + t) : (float)t;
}

extern "C" int glia__conv_bias_splits(int64_t N, int64_t F, int64_t L, bool nhwc)
{
    int64_t M = N * L, per_split = nhwc || L == 1 ? BG_ROW_SPLIT : BG_PLANE_SPLIT;
    int64_t across = nhwc || L == 1 ? (F + BG_TILE_C - 1) / BG_TILE_C : F;  /* blocks of one split */
    int64_t s = (M + per_split - 1) / per_split;
    int64_t cap = BG_MAX_BLOCKS / (across > 0 ? across : 1);
    if (s > cap) s = cap;
    if (s > 65535) s = 65535;
    return s < 1 ? 1 : (int)s;
}

extern "C" cudaError_t glia__conv_bias_grad(float *db, float *part, const float *dy, int64_t N, int64_t F, int64_t L,
                                            bool nhwc, int S, float beta, cudaStream_t s)
{
    if (F <= 0) return cudaSuccess;
    if (S < 1 || S > 65535 || F > 0x7fffffff) return cudaErrorInvalidValue;
    if (N * L == 0) {
        if (beta == 0.0f) return cudaMemsetAsync(db, 0, (size_t)F * sizeof(float), s);
        return cudaSuccess;
    }
    if (nhwc || L == 1) {
        dim3 grid((unsigned)((F + BG_TILE_C - 1) / BG_TILE_C), (unsigned)S), block(BG_TILE_C, BG_TILE_R);
        bias_grad_rows<<<grid, block, 0, s>>>(part, dy, N * L, F, S);
    } else
        bias_grad_planes<<<dim3((unsigned)F, (unsigned)S), THREADS, 0, s>>>(part, dy, N, F, L, S);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    bias_grad_total<<<(unsigned)((F + THREADS - 1) / THREADS), THREADS, 0, s>>>(db, part, F, S, beta);
    return cudaGetLastError();
}
