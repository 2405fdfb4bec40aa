/* backends/cuda/data_kernels.cu — a training batch made on the device from its uint8 training set ([data] resident):
 * gather by the epoch's order, random crop with zero padding, flip, normalization table. Not the order itself (the
 * core's loader draws it and copies it here) and not evaluation batches (the loader's). */
#include "data_kernels.h"
#include "launch.cuh"

/* splitmix64's finalizer: the loader's (core/loader.c), so that the draws are the same bits */
__device__ static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* x(n, C, H, W) f32, y(n) i32 <- images(N, C, H, W) u8, labels(N) i32, idx(n) i64, table(C, 256) f32.
 * One thread per element of x, grid-stride: consecutive threads write consecutive columns (coalesced) and read one
 * row of the source image; each recomputes its sample's draw (two mixes) rather than sharing it through memory.
 * The thread of a sample's first element writes its label. */
__global__ void batch_u8_kernel(float *__restrict__ x, int32_t *__restrict__ y, const uint8_t *__restrict__ images,
                                const int32_t *__restrict__ labels, const int64_t *__restrict__ idx, int64_t total,
                                int C, int H, int W, const float *__restrict__ table, int pad, bool flip,
                                uint64_t seed, int epoch)
{
    const int64_t px = (int64_t)H * W, per = (int64_t)C * px;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e / per, rem = e - i * per;
        int c = (int)(rem / px);
        int64_t p = rem - c * px;
        int r = (int)(p / W), col = (int)(p - (int64_t)r * W);
        int64_t s = idx[i];
        uint64_t z = mix(seed ^ mix((uint64_t)epoch * 0x9e3779b97f4a7c15ull + (uint64_t)s + 1));
        int dy = 0, dx = 0, f = 0;
        if (pad > 0) {
            dy = (int)(z % (uint64_t)(2 * pad + 1)) - pad;
            dx = (int)((z >> 16) % (uint64_t)(2 * pad + 1)) - pad;
        }
        if (flip) f = (int)((z >> 40) & 1);
        int si = r + dy, sj = (f ? W - 1 - col : col) + dx;
        uint8_t v = (si >= 0 && si < H && sj >= 0 && sj < W) ? images[s * per + c * px + (int64_t)si * W + sj] : 0;
        x[e] = table[c * 256 + v];
        if (rem == 0) y[i] = labels[s];
    }
}

extern "C" cudaError_t glia__cuda_batch_u8(float *x, int32_t *y, const uint8_t *images, const int32_t *labels,
                                           const int64_t *idx, int64_t n, int C, int H, int W, const float *table,
                                           int pad, bool flip, uint64_t seed, int epoch, cudaStream_t s)
{
    int64_t total = n * C * H * W;
    if (total == 0) return cudaSuccess;
    batch_u8_kernel<<<grid_for(total), THREADS, 0, s>>>(x, y, images, labels, idx, total, C, H, W, table, pad, flip,
                                                        seed, epoch);
    return cudaGetLastError();
}
