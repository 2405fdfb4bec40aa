/* backends/cuda/seq_kernels.cu — the kernels of the CUDA embedding (row gather, atomicAdd or ordered scatter of the
 * weight gradient) and seq_pool (masked mean or max per (n, c), the gradient as one thread per element). Not layer
 * logic: seq.c decides what to launch.
 * seq_pool adds in the CPU impl's order (l ascending, in float) and divides by the count as it does, so its
 * results are the CPU's bits; the embedding's weight gradient adds in a varying order, or with [runtime]
 * deterministic in the CPU's (its bits). */
#include <math.h>
#include "seq_kernels.h"

#include "launch.cuh"

/* Everything but the C entry points has internal linkage (an unnamed namespace), so that kernels and
 * helpers cannot clash with those of the other .cu files of cuda.so. */
namespace {

/* Element j of y(N, D, 1, L) (nhwc: y(N, 1, L, D)) as its position p = n*L + l and feature d. */
__device__ static void emb_index(int64_t j, int64_t L, int64_t D, bool nhwc, int64_t *p, int64_t *d)
{
    if (nhwc) {
        *p = j / D;
        *d = j - *p * D;
    } else {
        int64_t nd = j / L, n = nd / D;
        *d = nd - n * D;
        *p = n * L + (j - nd * L);
    }
}

/* y(N, D, 1, L) = w(V, D)[tok(N, L)] (padding_idx's row like any other, as nn.Embedding); zeros for out-of-range
 * tokens. One thread per element of y. */
__global__ void emb_fwd(float *y, const float *w, const int32_t *tok, int64_t n, int64_t L, int64_t V, int64_t D,
                        bool nhwc)
{
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t p, d;
        emb_index(j, L, D, nhwc, &p, &d);
        int64_t t = tok[p];
        y[j] = t >= 0 && t < V ? w[t * D + d] : 0.0f;
    }
}

/* dw(V, D)[tok(N, L)] += dy(N, D, 1, L) for valid tokens. One thread per element of dy. */
__global__ void emb_bwd(float *dw, const float *dy, const int32_t *tok, int64_t n, int64_t L, int64_t V, int64_t D,
                        int64_t pad, bool nhwc)
{
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t p, d;
        emb_index(j, L, D, nhwc, &p, &d);
        int64_t t = tok[p];
        if (t != pad && t >= 0 && t < V) atomicAdd(&dw[t * D + d], dy[j]);
    }
}

/* dw(V, D)[tok(N, L)] += dy(N, D, 1, L) for valid tokens, in position order: one thread per (d, slice), where
 * slice s of S owns the rows v with v % S == s and walks every position, adding those of its rows. */
__global__ void emb_bwd_ordered(float *dw, const float *dy, const int32_t *tok, int64_t P, int64_t L, int64_t V,
                                int64_t D, int64_t S, int64_t pad, bool nhwc)
{
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < D * S; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t s = j / D, d = j - s * D;
        for (int64_t p = 0; p < P; p++) {
            int64_t t = tok[p];
            if (t == pad || t < 0 || t >= V || t % S != s) continue;
            int64_t n = p / L;
            dw[t * D + d] += dy[nhwc ? p * D + d : (n * D + d) * L + (p - n * L)];
        }
    }
}

/* count(N) = the positions l of tok(N, L) != pad. One thread per sample. */
__global__ void seq_count(int32_t *count, const int32_t *tok, int64_t N, int64_t L, int64_t pad)
{
    for (int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; n < N; n += (int64_t)gridDim.x * blockDim.x) {
        const int32_t *tn = tok + n * L;
        int32_t k = 0;
        for (int64_t i = 0; i < L; i++) k += tn[i] != pad;
        count[n] = k;
    }
}

/* Whether v takes the max from best (arg < 0: none yet): larger, or the first NaN (which then stays). */
__device__ static bool takes_max(float v, float best, int32_t arg)
{
    return arg < 0 || v > best || (isnan(v) && !isnan(best));
}

/* y(N, C) = masked mean or max over l of x(N, C, 1, L) (nhwc: x(N, 1, L, C)). One thread per (n, c), positions
 * in l order. */
__global__ void sp_fwd(float *y, int32_t *arg, const float *x, const int32_t *tok, const int32_t *count, int64_t N,
                       int64_t C, int64_t L, int64_t pad, bool is_max, bool nhwc)
{
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < N * C; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = j / C, c = j - n * C;
        const int32_t *tn = tok + n * L;
        const float *xp = nhwc ? x + n * L * C + c : x + j * L;
        int64_t step = nhwc ? C : 1;
        float acc = 0.0f;
        int32_t bi = -1;
        for (int64_t i = 0; i < L; i++) {
            if (tn[i] == pad) continue;
            float v = xp[i * step];
            if (!is_max) acc = __fadd_rn(acc, v);
            else if (takes_max(v, acc, bi)) acc = v, bi = (int32_t)i;
        }
        if (!is_max) {
            int32_t k = count[n];
            y[j] = k > 0 ? __fdiv_rn(acc, (float)k) : 0.0f;
        } else {
            y[j] = acc;  /* 0 when no position is valid */
            if (arg) arg[j] = bi;
        }
    }
}

/* dx(N, C, 1, L) (nhwc: dx(N, 1, L, C)) (+)= for valid l: dy / count (mean) or dy at the max (max); else 0.
 * One thread per element of dx. */
__global__ void sp_bwd(float *dx, bool add, const float *dy, const int32_t *arg, const int32_t *tok,
                       const int32_t *count, int64_t N, int64_t C, int64_t L, int64_t pad, bool is_max, bool nhwc)
{
    int64_t total = N * C * L;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < total; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t n, c, i;
        if (nhwc) {
            int64_t r = j / C;
            c = j - r * C;
            n = r / L;
            i = r - n * L;
        } else {
            int64_t pl = j / L;
            i = j - pl * L;
            n = pl / C;
            c = pl - n * C;
        }
        float g = 0.0f;
        if (tok[n * L + i] != pad) {
            float d = dy[n * C + c];
            g = is_max ? (arg[n * C + c] == i ? d : 0.0f) : __fdiv_rn(d, (float)count[n]);
        }
        dx[j] = add ? __fadd_rn(dx[j], g) : g;
    }
}

}  // namespace

/* ---- the C entry points ---- */

extern "C" cudaError_t glia__cuda_embedding_forward(float *y, const float *w, const int32_t *tok, int64_t N, int64_t L,
                                                    int64_t V, int64_t D, bool nhwc, cudaStream_t st)
{
    int64_t n = N * D * L;
    if (n == 0) return cudaSuccess;
    emb_fwd<<<grid_for(n), THREADS, 0, st>>>(y, w, tok, n, L, V, D, nhwc);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_embedding_backward(float *dw, const float *dy, const int32_t *tok, int64_t N,
                                                     int64_t L, int64_t V, int64_t D, int64_t pad, bool nhwc,
                                                     bool deterministic, cudaStream_t st)
{
    int64_t n = N * D * L;
    if (n == 0) return cudaSuccess;
    if (deterministic) {  /* slices enough for about 8192 threads, at most one per row */
        int64_t S = (8192 + D - 1) / D;
        if (S > V) S = V;
        emb_bwd_ordered<<<grid_for(D * S), THREADS, 0, st>>>(dw, dy, tok, N * L, L, V, D, S, pad, nhwc);
    } else {
        emb_bwd<<<grid_for(n), THREADS, 0, st>>>(dw, dy, tok, n, L, V, D, pad, nhwc);
    }
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_seq_count(int32_t *count, const int32_t *tok, int64_t N, int64_t L, int64_t pad,
                                            cudaStream_t st)
{
    if (N == 0) return cudaSuccess;
    seq_count<<<grid_for(N), THREADS, 0, st>>>(count, tok, N, L, pad);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_seq_pool_forward(float *y, int32_t *arg, const float *x, const int32_t *tok,
                                                   const int32_t *count, int64_t N, int64_t C, int64_t L, int64_t pad,
                                                   bool is_max, bool nhwc, cudaStream_t st)
{
    if (N * C == 0) return cudaSuccess;
    sp_fwd<<<grid_for(N * C), THREADS, 0, st>>>(y, arg, x, tok, count, N, C, L, pad, is_max, nhwc);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_seq_pool_backward(float *dx, bool add, const float *dy, const int32_t *arg,
                                                    const int32_t *tok, const int32_t *count, int64_t N, int64_t C,
                                                    int64_t L, int64_t pad, bool is_max, bool nhwc, cudaStream_t st)
{
    if (N * C * L == 0) return cudaSuccess;
    sp_bwd<<<grid_for(N * C * L), THREADS, 0, st>>>(dx, add, dy, arg, tok, count, N, C, L, pad, is_max, nhwc);
    return cudaGetLastError();
}
