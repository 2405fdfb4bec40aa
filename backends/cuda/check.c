/* backends/cuda/check.c — the failed CUDA, cuDNN and cuBLAS calls of cuda.so as glia statuses (check.h): file, line,
 * call and the library's error string. At the bottom of cuda.so: it calls nothing of it. */
#include "cuda_internal.h"

glia_status glia__cuda_status(struct glia_context *ctx, cudaError_t e, const char *call, const char *file, int line)
{
    return glia_error(ctx, GLIA_EDEVICE, "%s:%d: %s: %s (%s)", file, line, call, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

glia_status glia__cudnn_status(struct glia_context *ctx, cudnnStatus_t e, const char *call, const char *file, int line)
{
    return glia_error(ctx, GLIA_EDEVICE, "%s:%d: %s: %s", file, line, call, cudnnGetErrorString(e));
}

glia_status glia__cublas_status(struct glia_context *ctx, cublasStatus_t e, const char *call, const char *file,
                                int line)
{
    return glia_error(ctx, GLIA_EDEVICE, "%s:%d: %s: %s", file, line, call, cublasLtGetStatusString(e));
}
