/* backends/cuda/check.h — CUDA and cuBLAS calls turned into glia statuses: the failed call, its
 * error string, file and line go into the context's error. Not for kernels' own checks. */
#ifndef GLIA_CUDA_CHECK_H
#define GLIA_CUDA_CHECK_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <glia/glia.h>

/* GLIA_OK when e is cudaSuccess; else GLIA_EDEVICE with "file:line: call: error string". */
glia_status glia__cuda_status(struct glia_context *ctx, cudaError_t e, const char *call, const char *file, int line);
glia_status glia__cublas_status(struct glia_context *ctx, cublasStatus_t e, const char *call, const char *file,
                                int line);

/* Evaluate a CUDA runtime call; on failure set st and jump to `fail`. */
#define CUDA_TRY(ctx, call)                                                        \
    do {                                                                           \
        cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) {                                                   \
            st = glia__cuda_status((ctx), e_, #call, __FILE__, __LINE__);          \
            goto fail;                                                             \
        }                                                                          \
    } while (0)

#define CUBLAS_TRY(ctx, call)                                                      \
    do {                                                                           \
        cublasStatus_t e_ = (call);                                                \
        if (e_ != CUBLAS_STATUS_SUCCESS) {                                         \
            st = glia__cublas_status((ctx), e_, #call, __FILE__, __LINE__);        \
            goto fail;                                                             \
        }                                                                          \
    } while (0)

#endif
