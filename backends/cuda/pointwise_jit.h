/* backends/cuda/pointwise_jit.h — elementwise kernels generated as CUDA C from expressions (glia/expr.h),
 * compiled with NVRTC and loaded through the CUDA runtime (cudaLibraryLoadData), cached for the process by
 * their source: the pointwise type's (its expression and derivatives) and the activations' (their type's
 * expression and its gradient). Not the kernels' layer code (pointwise.c), not a fuser of layers. */
#ifndef GLIA_CUDA_POINTWISE_JIT_H
#define GLIA_CUDA_POINTWISE_JIT_H

#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <glia/glia.h>
#include <glia/expr.h>

/* What to generate: a forward kernel out = f(x0..x3), and a backward kernel that writes (or adds onto) d_k
 * for each input k < n_in whose d_k is given. */
struct glia__pw_spec {
    const struct glia_expr *f;                        /* (borrowed) */
    const struct glia_expr *df[GLIA_EXPR_MAX_VARS];   /* per input k < n_in (borrowed) */
    int n_in;
    /* false: d_k (+)= dy * df[k], df[k] the derivative d f / d x_k (the pointwise type's);
     * true: n_in is 1 and d_0 (+)= df[0](x0, dy), a gradient over variable 0 (the input, or the output when
     * x0 is handed the output) and variable 1 (dy) (glia_expr_grad: relu's dy where y > 0, else 0) */
    bool grad;
    /* of the tensors the kernels read and write: GLIA_F32 (0), or GLIA_BF16 / GLIA_F16 (half activations: each
     * value loaded into float, the expression evaluated in float as for f32, the result stored rounded to nearest
     * even, an accumulated gradient added in float and rounded once; one element at a time) */
    enum glia_dtype dtype;
};

/* The compiled kernels of one spec (borrowed from the process-wide cache: they stay loaded until the
 * process ends). */
struct glia__pw_kernels {
    cudaKernel_t forward;    /* out = f(x0..x3) */
    cudaKernel_t backward;   /* d_k (+)= ... for every non-NULL d_k */
    int forward_threads;     /* per block: 256, or fewer where the kernel's registers allow fewer */
    int backward_threads;
};

/* The generated CUDA C source of s's kernels into a new string (free it), NULL when out of memory.
 * Deterministic: equal specs give equal text. Each element follows glia/expr.h's value semantics node by
 * node in float; elements go four at a time (float4) when every pointer a kernel uses is 16-byte aligned,
 * which changes no value. */
char *glia__pw_jit_source(const struct glia__pw_spec *s);

/* Compiles src (glia__pw_jit_source's text) with NVRTC for a device of architecture device_arch
 * (cc_major * 10 + cc_minor) into a new image at *image (free it) of *size bytes: CUBIN (*cubin
 * true) when this NVRTC knows that architecture, else NUL-terminated PTX for the newest older one
 * (the driver finishes it). Needs no GPU. On error writes one line to err. */
glia_status glia__pw_jit_compile(const char *src, int device_arch, void **image, size_t *size, bool *cubin, char *err,
                                 size_t err_size);

/* The kernels of s for a device of compute capability cc_major.cc_minor: from the cache, or generated,
 * compiled and loaded (then cached); loaded on the calling thread's current device. On error writes one
 * line to err (NVRTC's status and the first line of its log, or the failed load). Thread-safe. */
glia_status glia__pw_jit_get(const struct glia__pw_spec *s, int cc_major, int cc_minor, struct glia__pw_kernels *out,
                             char *err, size_t err_size);

/* out(n) = f(x_0(n), ...) on stream s; x holds GLIA_EXPR_MAX_VARS pointers (unused ones may be NULL), every
 * tensor of the spec's dtype; site: where dropout() draws its mask (glia/expr.h; NULL: eval). */
cudaError_t glia__pw_jit_forward(const struct glia__pw_kernels *k, void *out, const void *const *x, int64_t n,
                                 const struct glia_expr_site *site, cudaStream_t s);

/* d_k(n) = dy(n) * df/dx_k(x_0(n), ...) (+= when acc[k]) for each k with d[k] != NULL (a grad spec: d_0(n)
 * (+)= grad(x_0(n), dy(n))); d, acc and x hold GLIA_EXPR_MAX_VARS entries; site as for forward (training).
 * One pass: each element's inputs are read once, the d_k written in order of k (two d_k may be the same
 * tensor). */
cudaError_t glia__pw_jit_backward(const struct glia__pw_kernels *k, void *const *d, const bool *acc, const void *dy,
                                  const void *const *x, int64_t n, const struct glia_expr_site *site, cudaStream_t s);

#endif
