/* glia/cuda.h — what CUDA kernels in plugins need from the CUDA backend: its stream. Installed only
 * when glia is built with CUDA. Not a CUDA wrapper: plugins call the CUDA runtime themselves. */
#ifndef GLIA_CUDA_H
#define GLIA_CUDA_H

#include <stddef.h>
#include <cuda_runtime_api.h>
#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The stream every kernel of backend b must run on (work on it is ordered); NULL when b is not a
 * CUDA backend. Device memory comes from glia_tensor_new or glia_backend_alloc, never cudaMalloc. */
static inline cudaStream_t glia_cuda_stream(struct glia_backend *b)
{
    if (!b || b->ops->device_type != GLIA_DEVICE_CUDA) return NULL;
    return (cudaStream_t)glia_backend_queue(b);
}

#ifdef __cplusplus
}
#endif
#endif
