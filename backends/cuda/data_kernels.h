/* backends/cuda/data_kernels.h — the kernel that makes a training batch from a training set kept in device memory
 * ([data] resident), its C entry point into data_kernels.cu. Not the backend slot (data.c) nor the order (loader.c). */
#ifndef GLIA_CUDA_DATA_KERNELS_H
#define GLIA_CUDA_DATA_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x(n, C, H, W) f32 and y(n) i32 from images(N, C, H, W) u8, labels(N) i32 by idx(n) i64: glia/backend.h's data
 * group's rule (the loader's crop, flip and table(C, 256)), queued on s with no host wait. */
cudaError_t glia__cuda_batch_u8(float *x, int32_t *y, const uint8_t *images, const int32_t *labels, const int64_t *idx,
                                int64_t n, int C, int H, int W, const float *table, int pad, bool flip, uint64_t seed,
                                int epoch, cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
