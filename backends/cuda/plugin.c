/* backends/cuda/plugin.c — the plugin cuda.so: its probe (a machine without a usable GPU says no) and its init,
 * a short list of registrations: the CUDA backend, then the CUDA kernels of each op family. Not the backend itself
 * (cuda_backend.c) nor any kernel: this file sits above them all, and none of them calls it. */
#include <stdio.h>
#include "cuda_internal.h"

/* A machine without a driver, or without a device, is refused with the runtime's reason. */
static glia_status cuda_probe(struct glia_context *ctx, char *why, size_t why_size)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, why_size, "no usable CUDA device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return GLIA_EPROBE;
    }
    if (n == 0) {
        snprintf(why, why_size, "no CUDA device on this machine");
        return GLIA_EPROBE;
    }
    return GLIA_OK;
}

glia_status glia__cuda_register_layernorm(struct glia_registry *r); /* layernorm.c: layernorm */
glia_status glia__cuda_register_embed_seq(struct glia_registry *r);  /* embed_seq.c: position_embedding */

static glia_status cuda_init(struct glia_registry *r)
{
    glia_status st = glia_register_backend(r, &glia__cuda_ops);
    if (!st) st = glia__cuda_register_conv(r);
    if (!st) st = glia__cuda_register_dense(r);
    if (!st) st = glia__cuda_register_norm_pool(r);
    if (!st) st = glia__cuda_register_pointwise(r);
    if (!st) st = glia__cuda_register_optim(r);
    if (!st) st = glia__cuda_register_seq(r);
    if (!st) st = glia__cuda_register_attention(r);
    if (!st) st = glia__cuda_register_layernorm(r);
    if (!st) st = glia__cuda_register_embed_seq(r);
    return st;
}

GLIA_PLUGIN_DEFINE_PROBE(cuda, "2.0", "MIT", "CUDA backend: caching allocator, streams, cuBLASLt, cuDNN; CUDA layers and optimizers", cuda_init,
                         cuda_probe)
