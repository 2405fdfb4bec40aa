/* backends/cuda/dense_kernels.cu — kernels of the CUDA linear (bias add, bias gradient),
 * softmax_cross_entropy (loss rows, mean, gradient) and dropout (the CPU kernel's counter-based
 * mask; f32, f16 or bf16 activations). Not GEMMs. Products that the CPU rounds on their own use __fmul_rn, so that
 * no fused multiply-add changes a bit where CPU and GPU must agree exactly (dropout). */
#include "dense_kernels.h"

#include "half.cuh"
#include "launch.cuh"

#define GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* y(N,O) += b(O) */
__global__ void bias_add_kernel(float *y, const float *b, int64_t N, int64_t O)
{
    GRID_STRIDE(i, N * O) y[i] += b[i % O];
}

extern "C" cudaError_t glia__cuda_bias_add(float *y, const float *b, int64_t N, int64_t O, cudaStream_t s)
{
    if (N * O == 0) return cudaSuccess;
    bias_add_kernel<<<grid_for(N * O), THREADS, 0, s>>>(y, b, N, O);
    return cudaGetLastError();
}

/* db(O) = sum_n dy(N,O) + beta db: a block of 32 x 8 threads per 32 columns; threadIdx.x walks
 * the columns (coalesced rows), threadIdx.y every 8th row, then the 8 partial sums are added in
 * shared memory in a fixed order (deterministic). */
__global__ void col_sum_kernel(float *db, const float *dy, int64_t N, int64_t O, float beta)
{
    __shared__ float part[8][33];
    int64_t o = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (o < O)
        for (int64_t n = threadIdx.y; n < N; n += 8) s += dy[n * O + o];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && o < O) {
        for (int k = 1; k < 8; k++) s += part[k][threadIdx.x];
        db[o] = beta != 0.0f ? db[o] + s : s;
    }
}

extern "C" cudaError_t glia__cuda_col_sum(float *db, const float *dy, int64_t N, int64_t O, float beta,
                                          cudaStream_t s)
{
    if (O == 0) return cudaSuccess;
    int64_t blocks = (O + 31) / 32;
    if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
    col_sum_kernel<<<(unsigned)blocks, dim3(32, 8), 0, s>>>(db, dy, N, O, beta);
    return cudaGetLastError();
}

__device__ static double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* row(N) = (1-e)(lse - x[n, y_n]) + e mean_c (lse - x[n, c]) and lse(N) = log sum_c exp x[n, c]
 * from x(N,C), y(N): one warp per row (the loop bound is the same for the whole warp, so every
 * shuffle has its 32 lanes), in double like the CPU kernel. A bad label: NaN and *bad lowered. */
__global__ void sce_rows_kernel(double *row, double *lse_out, unsigned long long *bad, const float *x,
                                const int32_t *y, int64_t N, int64_t C, float e)
{
    int lane = threadIdx.x & 31;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t n = warp; n < N; n += warps) {
        const float *r = x + n * C;
        float mx = -INFINITY;
        for (int64_t j = lane; j < C; j += 32) mx = fmaxf(mx, r[j]);
        mx = warp_max(mx);
        double s = 0.0;
        for (int64_t j = lane; j < C; j += 32) s += exp((double)(r[j] - mx));
        double lse = log(warp_sum(s)) + mx, mean_nll = 0.0;
        if (e > 0.0f) {
            for (int64_t j = lane; j < C; j += 32) mean_nll += lse - r[j];
            mean_nll = warp_sum(mean_nll) / (double)C;
        }
        if (lane == 0) {
            int32_t t = y[n];
            if (t < 0 || t >= C) {
                unsigned long long at = n < 0xfffffffeLL ? (unsigned long long)n : 0xfffffffeull;
                atomicMin(bad, at << 32 | (unsigned long long)(uint32_t)t);
                row[n] = __longlong_as_double(0x7ff8000000000000LL);  /* NaN */
            } else {
                row[n] = (1.0 - (double)e) * (lse - r[t]) + (double)e * mean_nll;
            }
            if (lse_out) lse_out[n] = lse;
        }
    }
}

/* loss(1) = sum_n row(N) / N, one block, in a fixed order (deterministic); N = 0 gives NaN as on
 * the CPU. */
__global__ void sce_mean_kernel(float *loss, const double *row, int64_t N)
{
    __shared__ double part[THREADS];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) s += row[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int k = THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = (float)(part[0] / (double)N);
}

extern "C" cudaError_t glia__cuda_sce_forward(float *loss, double *lse, double *row, unsigned long long *bad,
                                              const float *x, const int32_t *y, int64_t N, int64_t C, float e,
                                              cudaStream_t s)
{
    if (N > 0) {
        sce_rows_kernel<<<grid_for(N * 32), THREADS, 0, s>>>(row, lse, bad, x, y, N, C, e);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return err;
    }
    sce_mean_kernel<<<1, THREADS, 0, s>>>(loss, row, N);
    return cudaGetLastError();
}

/* dx(N,C) = k (softmax(x) - (1-e) onehot(y) - off) + beta dx with k = dout[0] / N (the CPU's float
 * expressions); softmax from the forward's lse(N) in double, rounded to float like the CPU's
 * stored probabilities. */
__global__ void sce_backward_kernel(float *dx, const float *x, const double *lse, const int32_t *y, const float *dout,
                                    int64_t N, int64_t C, float e, float off, float beta)
{
    float k = dout[0] / (float)N;
    GRID_STRIDE(i, N * C)
    {
        int64_t n = i / C, j = i % C;
        int32_t t = y[n];
        float g;
        if (t < 0 || t >= C) {
            g = __int_as_float(0x7fc00000);  /* NaN: the forward flagged this row */
        } else {
            float prob = (float)exp((double)x[i] - lse[n]);
            g = __fmul_rn(k, prob - (j == t ? 1.0f - e : 0.0f) - off);
        }
        dx[i] = beta != 0.0f ? dx[i] + g : g;
    }
}

extern "C" cudaError_t glia__cuda_sce_backward(float *dx, const float *x, const double *lse, const int32_t *y,
                                               const float *dout, int64_t N, int64_t C, float e, float beta,
                                               cudaStream_t s)
{
    if (N * C == 0) return cudaSuccess;
    float off = e / (float)C;
    sce_backward_kernel<<<grid_for(N * C), THREADS, 0, s>>>(dx, x, lse, y, dout, N, C, e, off, beta);
    return cudaGetLastError();
}

/* y(n) = (keep(j) ? x * scale : 0) + beta y, j the logical NCHW index of offset i; x and y of type T, the product and
 * sum in f32, stored rounded to nearest even */
template <typename T>
__global__ void dropout_kernel(T *y, const T *x, int64_t n, bool cl, int64_t C, int64_t HW, struct glia_seed_at at,
                               float p, float scale, float beta)
{
    uint64_t seed = at.step_at ? glia_seed(at.key, *at.step_at) : at.seed;
    GRID_STRIDE(i, n)
    {
        int64_t j = cl ? glia_dropout_nchw_index(i, C, HW) : i;
        float g = glia_dropout_uniform(seed, j) >= p ? __fmul_rn(to_float(x[i]), scale) : 0.0f;
        y[i] = from_float<T>(beta != 0.0f ? __fadd_rn(to_float(y[i]), g) : g);
    }
}

extern "C" cudaError_t glia__cuda_dropout(void *y, const void *x, enum glia_dtype t, int64_t n, bool channels_last,
                                          int64_t C, int64_t HW, struct glia_seed_at seed, float p, float scale,
                                          float beta, cudaStream_t s)
{
    if (n == 0) return cudaSuccess;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        dropout_kernel<T><<<grid_for(n), THREADS, 0, s>>>((T *)y, (const T *)x, n, channels_last, C, HW, seed, p, scale,
                                                          beta);
        return cudaGetLastError();
    });
}
