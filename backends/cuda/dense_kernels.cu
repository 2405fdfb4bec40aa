/* backends/cuda/dense_kernels.cu — kernels of the CUDA linear (bias add, activation and its gradient, bias gradient;
 * f32, f16 or bf16),
 * softmax_cross_entropy (loss rows, mean, gradient; f32, f16 or bf16 logits) and dropout (the CPU kernel's counter-based
 * mask; f32, f16 or bf16 activations). Not GEMMs. Products that the CPU rounds on their own use __fmul_rn, so that
 * no fused multiply-add changes a bit where CPU and GPU must agree exactly (dropout). */
#include "dense_kernels.h"
#include <glia/types/linear.h>

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

/* y(N,O) = acc(N,O) + b(O) rounded once to T: the bias add of a half GEMM that cuBLASLt had no epilogue for (acc
 * its f32 result) */
template <typename T> __global__ void bias_add_round_kernel(T *y, const float *acc, const T *b, int64_t N, int64_t O)
{
    GRID_STRIDE(i, N * O) y[i] = from_float<T>(acc[i] + to_float(b[i % O]));
}

extern "C" cudaError_t glia__cuda_bias_add_round(void *y, enum glia_dtype t, const float *acc, const void *b,
                                                 int64_t N, int64_t O, cudaStream_t s)
{
    if (N * O == 0) return cudaSuccess;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        bias_add_round_kernel<T><<<grid_for(N * O), THREADS, 0, s>>>((T *)y, acc, (const T *)b, N, O);
        return cudaGetLastError();
    });
}

/* y(n) = act(h(n)); y may be h */
template <typename T> __global__ void linear_act_kernel(T *y, const T *h, int act, int64_t n)
{
    GRID_STRIDE(i, n) y[i] = from_float<T>(glia_linear_act(act, to_float(h[i])));
}

extern "C" cudaError_t glia__cuda_linear_act(void *y, const void *h, enum glia_dtype t, int act, int64_t n,
                                             cudaStream_t s)
{
    if (n == 0) return cudaSuccess;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        linear_act_kernel<T><<<grid_for(n), THREADS, 0, s>>>((T *)y, (const T *)h, act, n);
        return cudaGetLastError();
    });
}

/* dh(n) = dy(n) act'(h(n)) */
template <typename T> __global__ void linear_act_grad_kernel(T *dh, const T *dy, const T *h, int act, int64_t n)
{
    GRID_STRIDE(i, n) dh[i] = from_float<T>(to_float(dy[i]) * glia_linear_act_grad(act, to_float(h[i])));
}

extern "C" cudaError_t glia__cuda_linear_act_grad(void *dh, const void *dy, const void *h, enum glia_dtype t, int act,
                                                  int64_t n, cudaStream_t s)
{
    if (n == 0) return cudaSuccess;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        linear_act_grad_kernel<T><<<grid_for(n), THREADS, 0, s>>>((T *)dh, (const T *)dy, (const T *)h, act, n);
        return cudaGetLastError();
    });
}

/* The bias gradient db(O) = sum_n dy(N,O) + beta db in two passes that fill the GPU whatever O is: blocks of 32 x 8
 * threads, each owning 32 columns of one chunk of rows (grid: column groups x row chunks); threadIdx.x walks the
 * columns (coalesced rows), threadIdx.y every 8th row of the chunk, and the 8 partial sums are added in shared memory
 * in a fixed order. With one chunk that is db; with several each chunk's sums go to part(R,O) and a second kernel adds
 * them in chunk order. The chunks depend on N and O only, so the sums (and their rounding) are the same every run:
 * deterministic, no atomics. */
#define COL_SUM_TARGET_BLOCKS 2048  /* enough to fill any current GPU several times over */
#define COL_SUM_MIN_ROWS 64         /* rows a chunk has at least, so that small batches take one pass */

extern "C" int64_t glia__cuda_col_sum_chunks(int64_t N, int64_t O)
{
    int64_t groups = (O + 31) / 32, want = (COL_SUM_TARGET_BLOCKS + groups - 1) / groups;
    int64_t most = (N + COL_SUM_MIN_ROWS - 1) / COL_SUM_MIN_ROWS;
    int64_t r = want < most ? want : most;
    return r < 1 ? 1 : r > 65535 ? 65535 : r;
}

template <typename T>
__global__ void col_sum_kernel(float *out, const T *dy, int64_t N, int64_t O, int64_t rows, float beta)
{
    __shared__ float part[8][33];
    int64_t o = (int64_t)blockIdx.x * 32 + threadIdx.x, n0 = (int64_t)blockIdx.y * rows;
    int64_t n1 = n0 + rows < N ? n0 + rows : N;
    float s = 0.0f;
    if (o < O)
        for (int64_t n = n0 + threadIdx.y; n < n1; n += 8) s += to_float(dy[n * O + o]);
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && o < O) {
        for (int k = 1; k < 8; k++) s += part[k][threadIdx.x];
        if (gridDim.y > 1) out[blockIdx.y * O + o] = s;  /* a chunk's sums: out is part(R,O) */
        else out[o] = beta != 0.0f ? out[o] + s : s;
    }
}

/* db(O) = sum_r part(R,O) + beta db, in chunk order */
__global__ void col_sum_parts_kernel(float *db, const float *part, int64_t R, int64_t O, float beta)
{
    GRID_STRIDE(o, O)
    {
        float s = 0.0f;
        for (int64_t r = 0; r < R; r++) s += part[r * O + o];
        db[o] = beta != 0.0f ? db[o] + s : s;
    }
}

extern "C" cudaError_t glia__cuda_col_sum(float *db, const void *dy, enum glia_dtype t, int64_t N, int64_t O,
                                          float beta, float *part, cudaStream_t s)
{
    if (O == 0) return cudaSuccess;
    int64_t groups = (O + 31) / 32, R = glia__cuda_col_sum_chunks(N, O), rows = (N + R - 1) / R;
    if (groups > 0x7fffffff) return cudaErrorInvalidConfiguration;
    if (R > 1 && !part) return cudaErrorInvalidValue;
    cudaError_t e = by_type(t, [&](auto v) {
        using T = decltype(v);
        col_sum_kernel<T><<<dim3((unsigned)groups, (unsigned)R), dim3(32, 8), 0, s>>>(R > 1 ? part : db, (const T *)dy,
                                                                                      N, O, rows, beta);
        return cudaGetLastError();
    });
    if (e != cudaSuccess || R == 1) return e;
    col_sum_parts_kernel<<<grid_for(O), THREADS, 0, s>>>(db, part, R, O, beta);
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

/* The gradient of logit v at column j of a row of log-sum-exp lse labelled t: k (softmax - (1-e) onehot - off), the
 * probability's exponential in float of the difference in double; 0 on a row labelled ign, NaN on one whose label is
 * out of [0, C) (the forward flagged it). Both kernels that write the gradient use this, so they give the same bits. */
__device__ __forceinline__ float sce_grad(float v, double lse, int64_t j, int32_t t, int32_t ign, int64_t C, float k,
                                          float e, float off)
{
    if (t == ign) return 0.0f;
    if (t < 0 || t >= C) return __int_as_float(0x7fc00000);
    return __fmul_rn(k, expf((float)((double)v - lse)) - (j == t ? 1.0f - e : 0.0f) - off);
}

/* The labels of y(N) that are not ign, counted by a block of THREADS threads (every thread calls it and gets it). */
__device__ static long long block_count(const int32_t *y, int64_t N, int32_t ign)
{
    __shared__ long long cnt[THREADS];
    long long c = 0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) c += y[i] != ign;
    cnt[threadIdx.x] = c;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) cnt[threadIdx.x] += cnt[threadIdx.x + h];
        __syncthreads();
    }
    c = cnt[0];
    __syncthreads();  /* cnt is written again by the next call */
    return c;
}

/* One logit v into a lane's running max m and sum s of exp(x - m) (the sum rescaled when the max grows; each
 * exponential in float, the sum in double). What two passes give for the special values: a NaN makes the sum NaN, a
 * -inf adds 0. */
__device__ __forceinline__ void sce_online(float v, float &m, double &s)
{
    if (v > m) {
        s = s * (double)expf(m - v) + 1.0;
        m = v;
    } else if (v != -INFINITY || m != -INFINITY) {
        s += (double)expf(v - m);
    }
}

/* A lane's 16-byte loads of a row issued together before the first is used, so that a warp a row keeps enough bytes
 * in flight to stream the logits at the memory's rate (one load at a time left it latency-bound) */
#define SCE_LOADS 4

/* The logits' values one 16-byte load holds: 4 floats, 8 halves */
template <typename T> struct SceVec {
    enum { W = 16 / (int)sizeof(T) };
    typedef Pack<T, W> P;
};

/* q[u] = r[j0 + 32 u] for the u whose index is below n (the others left as they are: never read) */
template <typename P> __device__ __forceinline__ void sce_load(P q[SCE_LOADS], const P *r, int64_t j0, int64_t n)
{
#pragma unroll
    for (int u = 0; u < SCE_LOADS; u++)
        if (j0 + 32 * u < n) q[u] = r[j0 + 32 * u];
}

/* row(N) = (1-e)(lse - x[n, y_n]) + e mean_c (lse - x[n, c]) (0 where y_n = ign) and lse(N) = log sum_c exp x[n, c]
 * from x(N,C) of type T (f32, f16 or bf16: the logits of a half model; each value read as f32), y(N), reading the row
 * once for lse (twice with label smoothing) and once more for dx: one warp per row (the loop bound is the same for
 * the whole warp, so every shuffle has its 32 lanes), 16 bytes a load where vec (C a multiple of a load's values, x
 * and dx 16-byte aligned; SCE_LOADS of them in flight, each lane's values used in the same order), the exponentials
 * in float and the sums in double (the CPU kernel's are in double: the two differ by float rounding). A bad label:
 * NaN and *bad lowered. With dx (of type T), also the row's gradient as sce_backward_kernel computes it (sce_grad,
 * rounded once to T: the same bits), k = dout[0] / count, written over the row once the warp has read it (dx may be
 * x); count is *count (counted before), or with self_count each block's own count of the N labels (a small batch: N
 * values from L2 a block cost less than a launch). */
template <typename T>
__global__ void sce_rows_kernel(double *row, double *lse_out, unsigned long long *bad, T *dx, const T *x,
                                const int32_t *y, int64_t N, int64_t C, float e, int32_t ign, const float *dout,
                                const double *count, float off, bool vec, bool self_count)
{
    typedef typename SceVec<T>::P P;
    const int W = SceVec<T>::W;
    float k = 0.0f;
    if (dx && self_count) {  /* uniform over the block */
        double c = (double)block_count(y, N, ign);
        k = c > 0.0 ? dout[0] / (float)c : 0.0f;
    } else if (dx) {
        k = *count > 0.0 ? dout[0] / (float)*count : 0.0f;
    }
    int lane = threadIdx.x & 31;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    int64_t nv = C / W; /* the row's loads where vec */
    for (int64_t n = warp; n < N; n += warps) {
        const T *r = x + n * C;
        /* the max and the sum of exponentials in one pass over the row, then each lane's sum moved to the warp's
         * max; an infinite max (all -inf, or a +inf: exp(inf - inf)) makes lse NaN, as two passes would */
        float m = -INFINITY;
        double s = 0.0;
        if (vec) {  /* SCE_LOADS loads in flight a lane, then used in the order of one at a time */
            for (int64_t j0 = lane; j0 < nv; j0 += 32 * SCE_LOADS) {
                P q[SCE_LOADS];
                sce_load(q, (const P *)r, j0, nv);
#pragma unroll
                for (int u = 0; u < SCE_LOADS; u++) {
                    if (j0 + 32 * u >= nv) break;
#pragma unroll
                    for (int w = 0; w < W; w++) sce_online(to_float(q[u].v[w]), m, s);
                }
            }
        } else {
            for (int64_t j = lane; j < C; j += 32) sce_online(to_float(r[j]), m, s);
        }
        float mx = warp_max(m);
        if (m != -INFINITY) s *= (double)expf(m - mx);
        double lse = log(warp_sum(s)) + mx, mean_nll = 0.0;
        if (isinf(mx)) lse = __longlong_as_double(0x7ff8000000000000LL);
        if (e > 0.0f) {
            for (int64_t j = lane; j < C; j += 32) mean_nll += lse - to_float(r[j]);
            mean_nll = warp_sum(mean_nll) / (double)C;
        }
        if (lane == 0) {
            int32_t t = y[n];
            if (t == ign) {
                row[n] = 0.0;
            } else if (t < 0 || t >= C) {
                unsigned long long at = n < 0xfffffffeLL ? (unsigned long long)n : 0xfffffffeull;
                atomicMin(bad, at << 32 | (unsigned long long)(uint32_t)t);
                row[n] = __longlong_as_double(0x7ff8000000000000LL);  /* NaN */
            } else {
                row[n] = (1.0 - (double)e) * (lse - to_float(r[t])) + (double)e * mean_nll;
            }
            if (lse_out) lse_out[n] = lse;
        }
        if (!dx) continue;
        __syncwarp();  /* lane 0 has read x[n, t] */
        int32_t t = y[n];
        if (vec) {
            for (int64_t j0 = lane; j0 < nv; j0 += 32 * SCE_LOADS) {
                P q[SCE_LOADS];
                sce_load(q, (const P *)r, j0, nv);
#pragma unroll
                for (int u = 0; u < SCE_LOADS; u++) {
                    int64_t j = j0 + 32 * u, c = W * j;
                    if (j >= nv) break;
                    P g;
#pragma unroll
                    for (int w = 0; w < W; w++)
                        g.v[w] = from_float<T>(sce_grad(to_float(q[u].v[w]), lse, c + w, t, ign, C, k, e, off));
                    ((P *)(dx + n * C))[j] = g;
                }
            }
        } else {
            for (int64_t j = lane; j < C; j += 32)
                dx[n * C + j] = from_float<T>(sce_grad(to_float(r[j]), lse, j, t, ign, C, k, e, off));
        }
    }
}

/* *count = the rows whose label y(N) is not ign (a double), one block, before sce_rows_kernel writes gradients */
__global__ void sce_count_kernel(double *count, const int32_t *y, int64_t N, int32_t ign)
{
    long long c = block_count(y, N, ign);
    if (threadIdx.x == 0) *count = (double)c;
}

/* loss(1) = sum_n row(N) / count and *count = count, the rows whose label y(N) is not ign, one block, in a fixed
 * order (deterministic); count 0 gives 0 as on the CPU. */
__global__ void sce_mean_kernel(float *loss, double *count, const double *row, const int32_t *y, int64_t N, int32_t ign)
{
    __shared__ double part[THREADS];
    __shared__ long long cnt[THREADS];
    double s = 0.0;
    long long c = 0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) {
        s += row[i];
        c += y[i] != ign;
    }
    part[threadIdx.x] = s;
    cnt[threadIdx.x] = c;
    __syncthreads();
    for (int k = THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) {
            part[threadIdx.x] += part[threadIdx.x + k];
            cnt[threadIdx.x] += cnt[threadIdx.x + k];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        loss[0] = cnt[0] > 0 ? (float)(part[0] / (double)cnt[0]) : 0.0f;
        *count = (double)cnt[0];
    }
}

/* Batches of at most this many rows: sce_rows_kernel's blocks count the labels themselves (no sce_count_kernel) */
#define SCE_SELF_COUNT 2048

extern "C" cudaError_t glia__cuda_sce_forward(float *loss, double *lse, double *row, void *count,
                                              unsigned long long *bad, void *dx, const float *dout, const void *x,
                                              enum glia_dtype t, const int32_t *y, int64_t N, int64_t C, float e,
                                              int32_t ign, cudaStream_t s)
{
    bool self_count = N <= SCE_SELF_COUNT;
    if (dx && !self_count) {
        sce_count_kernel<<<1, THREADS, 0, s>>>((double *)count, y, N, ign);
        cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return err;
    }
    if (N > 0) {
        cudaError_t err = by_type(t, [&](auto v) {
            using T = decltype(v);
            bool vec = C % SceVec<T>::W == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)dx % 16 == 0;
            sce_rows_kernel<T><<<grid_for(N * 32), THREADS, 0, s>>>(row, lse, bad, (T *)dx, (const T *)x, y, N, C, e,
                                                                    ign, dout, (const double *)count, e / (float)C, vec,
                                                                    self_count);
            return cudaGetLastError();
        });
        if (err != cudaSuccess) return err;
    }
    sce_mean_kernel<<<1, THREADS, 0, s>>>(loss, (double *)count, row, y, N, ign);
    return cudaGetLastError();
}

/* dx(N,C) = k (softmax(x) - (1-e) onehot(y) - off) + beta dx with k = dout[0] / count (the CPU's float
 * expressions; count 0: k = 0), 0 on rows labelled ign; softmax from the forward's lse(N) by sce_grad; x and dx of
 * type T, the sum in f32 rounded once. */
template <typename T>
__global__ void sce_backward_kernel(T *dx, const T *x, const double *lse, const double *count, const int32_t *y,
                                    const float *dout, int64_t N, int64_t C, float e, int32_t ign, float off,
                                    float beta)
{
    float k = *count > 0.0 ? dout[0] / (float)*count : 0.0f;
    GRID_STRIDE(i, N * C)
    {
        int64_t n = i / C;
        float g = sce_grad(to_float(x[i]), lse[n], i % C, y[n], ign, C, k, e, off);
        dx[i] = from_float<T>(beta != 0.0f ? to_float(dx[i]) + g : g);
    }
}

extern "C" cudaError_t glia__cuda_sce_backward(void *dx, const void *x, enum glia_dtype t, const double *lse,
                                               const void *count, const int32_t *y, const float *dout, int64_t N,
                                               int64_t C, float e, int32_t ign, float beta, cudaStream_t s)
{
    if (N * C == 0) return cudaSuccess;
    float off = e / (float)C;
    return by_type(t, [&](auto v) {
        using T = decltype(v);
        sce_backward_kernel<T><<<grid_for(N * C), THREADS, 0, s>>>((T *)dx, (const T *)x, lse, (const double *)count,
                                                                   y, dout, N, C, e, ign, off, beta);
        return cudaGetLastError();
    });
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
