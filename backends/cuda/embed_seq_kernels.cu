/* backends/cuda/embed_seq_kernels.cu — the kernels of the CUDA position_embedding (the table's rows added along T,
 * the input gradient copied or added, the table's gradient summed over the batch). Not layer logic: embed_seq.c
 * decides what to launch. The table's gradient adds in the CPU kernel's order (n ascending, in float), so its
 * results are the CPU's bits. */
#include "embed_seq_kernels.h"

#include "launch.cuh"

/* Everything but the C entry points has internal linkage (an unnamed namespace), so that kernels and
 * helpers cannot clash with those of the other .cu files of cuda.so. */
namespace {

/* y(N, T, C) = x(N, T, C) + w(P, C)[t]. One thread per element of y. */
__global__ void pe_fwd(float *y, const float *x, const float *w, int64_t n, int64_t T, int64_t C)
{
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = j / C, c = j - r * C;
        y[j] = __fadd_rn(x[j], w[(r % T) * C + c]);
    }
}

/* dx(n) = dy(n), or dx += dy with add. One thread per element. */
__global__ void pe_dx(float *dx, const float *dy, int64_t n, bool add)
{
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (int64_t)gridDim.x * blockDim.x)
        dx[j] = add ? __fadd_rn(dx[j], dy[j]) : dy[j];
}

/* dw(P, C)[t] (+)= sum over n of dy(N, T, C)[n, t], n ascending. One thread per (t, c) with t < T: neighbouring
 * threads read neighbouring c. */
__global__ void pe_dw(float *dw, const float *dy, int64_t N, int64_t T, int64_t C, bool add)
{
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < T * C; j += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int64_t k = 0; k < N; k++) s = __fadd_rn(s, dy[k * T * C + j]);
        dw[j] = add ? __fadd_rn(dw[j], s) : s;
    }
}

}  // namespace

extern "C" cudaError_t glia__cuda_pos_embedding_forward(float *y, const float *x, const float *w, int64_t N, int64_t T,
                                                        int64_t C, cudaStream_t st)
{
    int64_t n = N * T * C;
    if (n == 0) return cudaSuccess;
    pe_fwd<<<grid_for(n), THREADS, 0, st>>>(y, x, w, n, T, C);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_pos_embedding_dx(float *dx, const float *dy, int64_t n, bool add, cudaStream_t st)
{
    if (n == 0) return cudaSuccess;
    pe_dx<<<grid_for(n), THREADS, 0, st>>>(dx, dy, n, add);
    return cudaGetLastError();
}

extern "C" cudaError_t glia__cuda_pos_embedding_dw(float *dw, const float *dy, int64_t N, int64_t T, int64_t C,
                                                   bool add, cudaStream_t st)
{
    if (T * C == 0) return cudaSuccess;
    pe_dw<<<grid_for(T * C), THREADS, 0, st>>>(dw, dy, N, T, C, add);
    return cudaGetLastError();
}
