/* backends/cuda/data.c — the CUDA backend's data group (ABI 2.1, [data] resident): batches made on the device from a
 * training set kept there, and the free memory resident = auto weighs. Not the kernel (data_kernels.cu). */
#include "cuda_internal.h"
#include "data_kernels.h"

static glia_status cuda_batch_u8(void *priv, float *x, int32_t *y, const uint8_t *images, const int32_t *labels,
                                 const int64_t *idx, int64_t n, int channels, int rows, int cols, const float *table,
                                 int pad, bool flip, uint64_t seed, int epoch)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, glia__cuda_batch_u8(x, y, images, labels, idx, n, channels, rows, cols, table, pad, flip, seed,
                                         epoch, c->stream));
fail:
    return st;
}

/* The driver's free memory plus the blocks the cache holds unused (an allocation reuses them first). */
static glia_status cuda_mem_info(void *priv, size_t *free_bytes, size_t *total_bytes)
{
    struct glia__cuda *c = priv;
    glia__cuda_use(c);
    glia_status st = GLIA_OK;
    CUDA_TRY(c->ctx, cudaMemGetInfo(free_bytes, total_bytes));
    struct glia__cache_stats s;
    pthread_mutex_lock(&c->lock);
    glia__cache_get_stats(c->cache, &s);
    pthread_mutex_unlock(&c->lock);
    *free_bytes += s.reserved > s.current ? s.reserved - s.current : 0;
fail:
    return st;
}

const struct glia_backend_data_ops glia__cuda_data_ops = {
    .struct_size = sizeof(struct glia_backend_data_ops),
    .batch_u8 = cuda_batch_u8,
    .mem_info = cuda_mem_info,
};
