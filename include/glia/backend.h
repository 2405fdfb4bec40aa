/* glia/backend.h — what a device backend provides: memory, copies, and the primitives
 * layers share (GEMM). Not layer code: each layer plugin implements its own ops. */
#ifndef GLIA_BACKEND_H
#define GLIA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct glia_context;
struct glia_backend;

/* How layers on a backend compute (ABI 1.2); set from [runtime] by the core. */
enum glia_precision {
    GLIA_PRECISION_FP32 = 0,  /* IEEE fp32 everywhere (no TF32) */
    GLIA_PRECISION_TF32,      /* fp32 tensors; GEMM and convolution may round inputs to TF32 */
    GLIA_PRECISION_BF16,      /* GEMM and convolution compute in bf16 (fp32 accumulation);
                                 weights, activations between layers and the rest stay fp32 */
    GLIA_PRECISION_FP16       /* the same in fp16; the core scales the loss dynamically */
};

/* The [runtime] settings a backend and its layers follow (ABI 1.2). */
struct glia_runtime_options {
    uint32_t struct_size;             /* sizeof(struct glia_runtime_options) of the builder */
    enum glia_precision precision;
    bool cudnn_benchmark;             /* time convolution algorithms once per shape (on) or take
                                         the library's heuristic choice (off) */
    size_t workspace_limit;           /* bytes a layer may borrow as scratch for a faster algorithm */
    /* ABI 1.8 */
    bool deterministic;               /* only algorithms whose results do not depend on timing (no float
                                         atomics): the same inputs give the same bits every run */
};

/* Device memory held by a backend's allocator (ABI 1.1). */
struct glia_memory_stats {
    size_t current;          /* bytes in tensors now */
    size_t peak;             /* most bytes in tensors at once */
    size_t reserved;         /* bytes held from the driver (in use + cached) */
    uint64_t driver_allocs;  /* allocations from the driver so far (flat after warm-up) */
};

/* Backend vtable. Every slot says whether it is optional and what the core does if NULL. */
struct glia_backend_ops {
    uint32_t struct_size;                 /* sizeof(struct glia_backend_ops) of the builder */
    const char *name;                     /* "cpu", "cuda" */
    enum glia_device_type device_type;    /* the devices this backend drives */
    /* ABI 1.0 */
    /* Open device `index` and return its private state. Required. */
    glia_status (*open)(struct glia_context *ctx, int index, void **priv);
    /* Release the private state. Optional: NULL means nothing to release. */
    void (*close)(void *priv);
    /* Allocate nbytes (aligned to 64) of device memory. Required. */
    glia_status (*alloc)(void *priv, size_t nbytes, void **ptr);
    /* Free memory from alloc. Required. */
    void (*free)(void *priv, void *ptr);
    /* Copy nbytes; each side is host or this device as the flags say. Required. */
    glia_status (*copy)(void *priv, void *dst, bool dst_host, const void *src, bool src_host,
                        size_t nbytes);
    /* Set nbytes to zero. Optional: NULL makes the core copy zeros from the host. */
    glia_status (*memzero)(void *priv, void *ptr, size_t nbytes);
    /* Row-major f32 GEMM: C(M,N) = alpha * op(A)(M,K) @ op(B)(K,N) + beta * C, where
     * op(X) is X or X^T per trans_*, and lda/ldb/ldc are row strides. Required. */
    glia_status (*gemm_f32)(void *priv, bool trans_a, bool trans_b, int64_t M, int64_t N,
                            int64_t K, float alpha, const float *A, int64_t lda, const float *B,
                            int64_t ldb, float beta, float *C, int64_t ldc);
    /* Wait for all queued work on the device. Optional: NULL means work is synchronous. */
    glia_status (*sync)(void *priv);
    /* ABI 1.1 */
    /* Batched f32 transpose: dst(B, cols, rows) = src(B, rows, cols)^T + beta * dst, beta 0 or
     * 1 (NCHW <-> NHWC conversions). Optional: NULL makes the core loop over host memory
     * (and refuse device memory). */
    glia_status (*transpose_f32)(void *priv, float *dst, const float *src, int64_t B, int64_t rows,
                                 int64_t cols, float beta);
    /* Fill *out with the allocator's figures. Optional: NULL means the backend keeps none
     * (glia profile then prints no memory line). */
    glia_status (*memory_stats)(void *priv, struct glia_memory_stats *out);
    /* The native queue all of this backend's work is ordered on (a cudaStream_t for CUDA; see
     * glia/cuda.h), for layers that launch their own work. Optional: NULL for backends whose
     * work is synchronous. */
    void *(*queue)(void *priv);
    /* ABI 1.2 */
    /* Take the [runtime] settings (precision, autotuning, workspace). Optional: NULL means the
     * backend computes in fp32 only; the core then refuses other precisions. */
    glia_status (*configure)(void *priv, const struct glia_runtime_options *o);
    /* *out = sum of x[i]^2 over n f32 elements, accumulated in double; waits for the result.
     * Non-finite when any element is. Optional: NULL makes the core read host memory (and
     * refuse device memory). */
    glia_status (*sumsq_f32)(void *priv, const float *x, size_t n, double *out);
    /* x[i] *= a over n f32 elements. Optional: NULL as for sumsq_f32. */
    glia_status (*scale_f32)(void *priv, float *x, size_t n, float a);
    /* Page-locked host memory for buffers that are copied to the device (the loader's batches).
     * Optional: NULL makes the core use malloc. host_free is required when host_alloc is set. */
    glia_status (*host_alloc)(void *priv, size_t nbytes, void **ptr);
    void (*host_free)(void *priv, void *ptr);
    /* Start copying nbytes from host memory src (from host_alloc) to device memory dst on a copy
     * stream, after the work queued so far, so that the copy overlaps work queued later; *ticket
     * names the copy for wait_copy. Optional: NULL makes the core copy with `copy`. */
    glia_status (*upload)(void *priv, void *dst, const void *src, size_t nbytes, uint64_t *ticket);
    /* Make work queued from now on wait for copy `ticket` (from upload or download) without
     * blocking the host, and when host is true also block the host until it is done (an upload's
     * src may then be reused, a download's dst read). A backend may keep only the last few
     * tickets apart (CUDA: 16); waiting on an older one waits for all queued work. Required when
     * upload or download is set. */
    glia_status (*wait_copy)(void *priv, uint64_t ticket, bool host);
    /* Start copying nbytes of device memory src to host memory dst (from host_alloc) after the
     * work queued so far, without blocking; *ticket names the copy for wait_copy (host = true:
     * dst is then valid). Optional: NULL makes the core read results with `copy`. */
    glia_status (*download)(void *priv, void *dst, const void *src, size_t nbytes, uint64_t *ticket);
    /* ABI 1.7: CUDA graphs ([runtime] cuda_graph); the five slots are set together or not at all. */
    /* Start capturing the work queued from now on into a graph instead of running it. Optional:
     * NULL means the backend cannot capture; the core then runs every step as it comes. */
    glia_status (*capture_begin)(void *priv);
    /* End the capture: *graph = a graph of the work queued since capture_begin, to replay. On an
     * error (some of it cannot be captured) none of that work has run, and queueing works as
     * before. Memory in use during a capture is not given to anything else while any graph
     * lives. Required with capture_begin. */
    glia_status (*capture_end)(void *priv, void **graph);
    /* Queue a replay of graph: its work runs again, on the same memory. Required with capture_begin. */
    glia_status (*graph_launch)(void *priv, void *graph);
    /* Free graph once its queued replays are done. Required with capture_begin. */
    void (*graph_free)(void *priv, void *graph);
    /* Queue *(uint64_t *)dst = v, v carried by the call (dst: 8 bytes of device memory; how the
     * core hands a replay its step). Required with capture_begin. */
    glia_status (*write_u64)(void *priv, void *dst, uint64_t v);
    /* ABI 1.8 */
    /* x[i] *= (float)r over n f32 elements when r = max_norm / (sqrt(sum of x[i]^2 in double) + 1e-6)
     * is below 1 (torch.nn.utils.clip_grad_norm_), all on the device: the host does not wait for
     * the norm. Optional: NULL makes the core read the norm (sumsq_f32) and scale (scale_f32). */
    glia_status (*clip_f32)(void *priv, float *x, size_t n, double max_norm);
};

/* An opened device: ops + private state. Owned by the context; plugins borrow it. */
struct glia_backend {
    const struct glia_backend_ops *ops;
    void *priv;
    struct glia_device device;
    struct glia_context *ctx;  /* (borrowed) */
    /* ABI 1.2 */
    struct glia_runtime_options options;  /* what layers on this device follow (read-only) */
};

/* The opened backend for a device; opened on first use and owned by ctx. */
glia_status glia_backend_get(struct glia_context *ctx, struct glia_device dev,
                             struct glia_backend **out /* (borrowed) */);

/* Convenience wrappers over the vtable. */
glia_status glia_backend_gemm_f32(struct glia_backend *b, bool trans_a, bool trans_b, int64_t M,
                                  int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
glia_status glia_backend_sync(struct glia_backend *b);
/* The allocator's figures; GLIA_EUNSUPPORTED when the backend keeps none. (ABI 1.1) */
glia_status glia_backend_memory_stats(struct glia_backend *b, struct glia_memory_stats *out);

/* Store o as b->options and hand it to the backend's configure; GLIA_EUNSUPPORTED (with the
 * reason in the context error) when the backend cannot follow it. (ABI 1.2) */
glia_status glia_backend_configure(struct glia_backend *b, const struct glia_runtime_options *o);
/* "fp32", "tf32", "bf16", "fp16". (ABI 1.2) */
const char *glia_precision_name(enum glia_precision p);

/* Parse "cpu", "cuda", "cuda:1" into a device. */
glia_status glia_device_parse(const char *s, struct glia_device *out);
/* "cpu", "cuda:0" into buf; returns buf. */
char *glia_device_str(struct glia_device d, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
