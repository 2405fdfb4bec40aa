/* backends/cuda/attention_kernels.cu — the kernels of the CUDA attention: the heads of qkv split into their own
 * matrices and merged back, the row softmax (scale already in the scores, causal mask, dropout with the CPU kernel's
 * counter-based mask) and its backward, one warp per row of the (N·heads, T, T) probabilities. Not layer logic and
 * not the GEMMs: attention.c runs those through cuBLASLt. */
#include <math.h>
#include <glia/types/attention.h>
#include "attention_kernels.h"

#include "launch.cuh"

/* Everything but the C entry points has internal linkage (an unnamed namespace), so that kernels and
 * helpers cannot clash with those of the other .cu files of cuda.so. */
namespace {

/* dst(P, N, H, T, D) = src(N, T, P, H, D). One thread per element of dst. */
__global__ void split_kernel(float *dst, const float *src, int64_t N, int64_t T, int64_t P, int64_t H, int64_t D)
{
    int64_t n_all = P * N * H * T * D;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t d = i % D, r = i / D, t = r % T;
        r /= T;
        int64_t h = r % H;
        r /= H;
        int64_t n = r % N, part = r / N;
        dst[i] = src[((n * T + t) * P + part) * H * D + h * D + d];
    }
}

/* dst(N, T, P, H, D) (+)= src(P, N, H, T, D). One thread per element of dst. */
__global__ void merge_kernel(float *dst, bool add, const float *src, int64_t N, int64_t T, int64_t P, int64_t H,
                             int64_t D)
{
    int64_t n_all = N * T * P * H * D;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t d = i % D, r = i / D, h = r % H;
        r /= H;
        int64_t part = r % P;
        r /= P;
        int64_t t = r % T, n = r / T;
        float v = src[(((part * N + n) * H + h) * T + t) * D + d];
        dst[i] = add ? dst[i] + v : v;
    }
}

__device__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ uint64_t seed_of(struct glia_seed_at at) { return at.step_at ? glia_seed(at.key, *at.step_at) : at.seed; }

/* The rows of (B, T, T) a warp takes: warp w of all, every all-th. The loop bound is the same for the whole warp, so
 * every shuffle has its 32 lanes. */
#define FOR_EACH_ROW(r, rows)                                                                    \
    int lane = threadIdx.x & 31;                                                                 \
    int64_t warp_ = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;                       \
    int64_t warps_ = ((int64_t)gridDim.x * blockDim.x) >> 5;                                     \
    for (int64_t r = warp_; r < (rows); r += warps_)

/* att(B, T, T) = softmax of the scores per row, keys after the query masked with causal; z(B, T, T) = att dropped
 * and scaled when p > 0. One warp per row. */
__global__ void softmax_kernel(float *att, float *z, int64_t B, int64_t T, bool causal, float p, struct glia_seed_at at)
{
    uint64_t seed = seed_of(at);
    float ks = 1.0f / (1.0f - p);
    FOR_EACH_ROW(r, B * T)
    {
        int64_t i = r % T, b = r / T, jn = causal ? i + 1 : T;
        float *a = att + r * T;
        float mx = -INFINITY, s = 0.0f;
        for (int64_t j = lane; j < jn; j += 32) mx = fmaxf(mx, a[j]);
        mx = warp_max(mx);
        for (int64_t j = lane; j < jn; j += 32) s += expf(a[j] - mx);
        float inv = 1.0f / warp_sum(s);
        for (int64_t j = lane; j < T; j += 32) {
            float pr = j < jn ? expf(a[j] - mx) * inv : 0.0f;
            a[j] = pr;
            if (p > 0.0f) z[r * T + j] = glia_attention_keep(seed, p, b, i, j, T) ? pr * ks : 0.0f;
        }
    }
}

/* z(B, T, T) = att dropped and scaled. One thread per element. */
__global__ void dropped_kernel(float *z, const float *att, int64_t B, int64_t T, float p, struct glia_seed_at at)
{
    uint64_t seed = seed_of(at);
    float ks = 1.0f / (1.0f - p);
    int64_t n_all = B * T * T;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n_all; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = e % T, r = e / T;
        z[e] = glia_attention_keep(seed, p, r / T, r % T, j, T) ? att[e] * ks : 0.0f;
    }
}

/* dz(B, T, T) = scale · att ∘ (dP − rowsum(att ∘ dP)), dP = dz dropped and scaled when p > 0. One warp per row. */
__global__ void softmax_backward_kernel(float *dz, const float *att, int64_t B, int64_t T, bool causal, float p,
                                        struct glia_seed_at at, float scale)
{
    uint64_t seed = seed_of(at);
    float ks = 1.0f / (1.0f - p);
    FOR_EACH_ROW(r, B * T)
    {
        int64_t i = r % T, b = r / T, jn = causal ? i + 1 : T;
        const float *a = att + r * T;
        float *g = dz + r * T, s = 0.0f;
        for (int64_t j = lane; j < jn; j += 32) {
            float dp = p > 0.0f ? (glia_attention_keep(seed, p, b, i, j, T) ? g[j] * ks : 0.0f) : g[j];
            g[j] = dp;
            s += a[j] * dp;
        }
        s = warp_sum(s);
        for (int64_t j = lane; j < T; j += 32) g[j] = j < jn ? scale * a[j] * (g[j] - s) : 0.0f;
    }
}

/* kv(N, H, 2, kv_t, D) positions pos .. pos + T - 1 = the keys and values of qkv(N, T, 3, H, D). One thread per
 * element written. */
__global__ void kv_store_kernel(float *kv, const float *qkv, int64_t N, int64_t T, int64_t H, int64_t D, int64_t kv_t,
                                int64_t pos)
{
    int64_t n_all = N * H * 2 * T * D;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_all; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t d = i % D, r = i / D, t = r % T;
        r /= T;
        int64_t part = r % 2;
        r /= 2;
        int64_t h = r % H, n = r / H;
        kv[(((n * H + h) * 2 + part) * kv_t + pos + t) * D + d] = qkv[((n * T + t) * 3 + 1 + part) * H * D + h * D + d];
    }
}

/* y(N, T, H, D): the query of qkv(N, T, 3, H, D) at position pos + r against keys and values kv(N, H, 2, kv_t, D) 0 ..
 * pos + r, its scores and then their exponentials in sc(N·H·T, pos + T). One block of one warp per (n, h, r): the
 * lanes take every 32nd key, then every 32nd of the D outputs, __syncthreads between. */
__global__ void decode_kernel(float *y, float *sc, const float *qkv, const float *kv, int64_t N, int64_t T, int64_t H,
                              int64_t D, int64_t kv_t, int64_t pos, float scale)
{
    int lane = threadIdx.x;
    int64_t end = pos + T;
    for (int64_t row = blockIdx.x; row < N * H * T; row += gridDim.x) {
        int64_t r = row % T, b = row / T, h = b % H, n = b / H, nk = pos + r + 1;
        const float *q = qkv + (n * T + r) * 3 * H * D + h * D, *K = kv + b * 2 * kv_t * D, *V = K + kv_t * D;
        float *s = sc + row * end, mx = -INFINITY, sum = 0.0f;
        for (int64_t j = lane; j < nk; j += 32) {
            float a = 0.0f;
            for (int64_t d = 0; d < D; d++) a += q[d] * K[j * D + d];
            s[j] = a * scale;
            mx = fmaxf(mx, s[j]);
        }
        mx = warp_max(mx);
        for (int64_t j = lane; j < nk; j += 32) {
            float e = expf(s[j] - mx);
            s[j] = e;
            sum += e;
        }
        float inv = 1.0f / warp_sum(sum);
        __syncthreads();  /* every lane's exponentials are written before any lane reads them all */
        for (int64_t d = lane; d < D; d += 32) {
            float acc = 0.0f;
            for (int64_t j = 0; j < nk; j++) acc += s[j] * V[j * D + d];
            y[(n * T + r) * H * D + h * D + d] = acc * inv;
        }
        __syncthreads();  /* and read before the next row of this block writes sc */
    }
}

/* Blocks of THREADS for one warp per row. */
unsigned grid_rows(int64_t rows) { return grid_for(rows * 32); }

}  // namespace

extern "C" cudaError_t glia__cuda_attn_split(float *dst, const float *src, int64_t N, int64_t T, int64_t P, int64_t H,
                                             int64_t D, cudaStream_t st)
{
    int64_t n = P * N * H * T * D;
    if (n == 0) return cudaSuccess;
    split_kernel<<<grid_for(n), THREADS, 0, st>>>(dst, src, N, T, P, H, D);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_attn_merge(float *dst, bool add, const float *src, int64_t N, int64_t T, int64_t P,
                                             int64_t H, int64_t D, cudaStream_t st)
{
    int64_t n = P * N * H * T * D;
    if (n == 0) return cudaSuccess;
    merge_kernel<<<grid_for(n), THREADS, 0, st>>>(dst, add, src, N, T, P, H, D);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_attn_softmax(float *att, float *z, int64_t B, int64_t T, bool causal, float p,
                                               struct glia_seed_at at, cudaStream_t st)
{
    if (B * T == 0) return cudaSuccess;
    softmax_kernel<<<grid_rows(B * T), THREADS, 0, st>>>(att, z, B, T, causal, p, at);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_attn_dropped(float *z, const float *att, int64_t B, int64_t T, float p,
                                               struct glia_seed_at at, cudaStream_t st)
{
    if (B * T == 0) return cudaSuccess;
    dropped_kernel<<<grid_for(B * T * T), THREADS, 0, st>>>(z, att, B, T, p, at);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_attn_softmax_backward(float *dz, const float *att, int64_t B, int64_t T, bool causal,
                                                        float p, struct glia_seed_at at, float scale, cudaStream_t st)
{
    if (B * T == 0) return cudaSuccess;
    softmax_backward_kernel<<<grid_rows(B * T), THREADS, 0, st>>>(dz, att, B, T, causal, p, at, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_attn_kv_store(float *kv, const float *qkv, int64_t N, int64_t T, int64_t H, int64_t D,
                                               int64_t kv_t, int64_t pos, cudaStream_t st)
{
    int64_t n = N * H * 2 * T * D;
    if (n == 0) return cudaSuccess;
    kv_store_kernel<<<grid_for(n), THREADS, 0, st>>>(kv, qkv, N, T, H, D, kv_t, pos);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_attn_decode(float *y, float *sc, const float *qkv, const float *kv, int64_t N,
                                             int64_t T, int64_t H, int64_t D, int64_t kv_t, int64_t pos, float scale,
                                             cudaStream_t st)
{
    int64_t rows = N * H * T;
    if (rows == 0) return cudaSuccess;
    decode_kernel<<<(unsigned)(rows < MAX_BLOCKS ? rows : MAX_BLOCKS), 32, 0, st>>>(y, sc, qkv, kv, N, T, H, D, kv_t,
                                                                                   pos, scale);
    return cudaGetLastError();
}
