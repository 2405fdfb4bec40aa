/* backends/cuda/pointwise_jit.h — the `pointwise` layer's kernels, generated as CUDA C from the
 * expression IR (plugins/layers/pointwise/expr.h), compiled with NVRTC and loaded through the
 * CUDA runtime (cudaLibraryLoadData), cached for the process by expression. Not the layer
 * (pointwise.c) and not a fuser of other layers. */
#ifndef GLIA_CUDA_POINTWISE_JIT_H
#define GLIA_CUDA_POINTWISE_JIT_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <glia/glia.h>
#include "../../plugins/layers/pointwise/pointwise_desc.h"

/* The compiled kernels of one expression (borrowed from the process-wide cache: they stay loaded
 * until the process ends). */
struct glia__pw_kernels {
    cudaKernel_t forward;    /* out = f(x0..x3) */
    cudaKernel_t backward;   /* d_k (+)= dy * df/dx_k(x0..x3) for every non-NULL d_k */
    int forward_threads;     /* per block: 256, or fewer where the kernel's registers allow fewer */
    int backward_threads;
};

/* The generated CUDA C source of p's kernels into a new string (free it), NULL when out of
 * memory. Deterministic: equal expressions give equal text. */
char *glia__pw_jit_source(const struct glia__pointwise *p);

/* Compiles src (glia__pw_jit_source's text) with NVRTC for a device of architecture device_arch
 * (cc_major * 10 + cc_minor) into a new image at *image (free it) of *size bytes: CUBIN (*cubin
 * true) when this NVRTC knows that architecture, else NUL-terminated PTX for the newest older one
 * (the driver finishes it). Needs no GPU. On error writes one line to err. */
glia_status glia__pw_jit_compile(const char *src, int device_arch, void **image, size_t *size, bool *cubin, char *err,
                                 size_t err_size);

/* The kernels of p for a device of compute capability cc_major.cc_minor: from the cache, or
 * generated, compiled and loaded (then cached); loaded on the calling thread's current device. On error writes one line to err (NVRTC's
 * status and the first line of its log, or the failed load). Thread-safe. */
glia_status glia__pw_jit_get(const struct glia__pointwise *p, int cc_major, int cc_minor, struct glia__pw_kernels *out,
                             char *err, size_t err_size);

/* out(n) = f(x_0(n), ...) on stream s; x holds EXPR_MAX_VARS pointers (unused ones may be NULL);
 * site: where dropout() draws its mask (expr.h). */
cudaError_t glia__pw_jit_forward(const struct glia__pw_kernels *k, float *out, const float *const *x, int64_t n,
                                 const struct expr_site *site, cudaStream_t s);

/* d_k(n) = dy(n) * df/dx_k(x_0(n), ...) (+= when acc[k]) for each k with d[k] != NULL; d, acc and x
 * hold EXPR_MAX_VARS entries; site as for forward (training). One pass: each element's inputs are read once, the d_k written in
 * order of k (two d_k may be the same tensor). */
cudaError_t glia__pw_jit_backward(const struct glia__pw_kernels *k, float *const *d, const bool *acc, const float *dy,
                                  const float *const *x, int64_t n, const struct expr_site *site, cudaStream_t s);

#endif
