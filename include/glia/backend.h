/* glia/backend.h — what a device backend provides, in groups: the device, memory, the stream of work, the math
 * that the core and kernels share, and optionally CUDA graphs. Not kernels: each layer type's kernels are its own. */
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

/* How kernels on a backend compute; set from [runtime] by the core. */
enum glia_precision {
    GLIA_PRECISION_FP32 = 0,  /* IEEE fp32 everywhere (no TF32) */
    GLIA_PRECISION_TF32,      /* fp32 tensors; GEMM and convolution may round inputs to TF32 */
    GLIA_PRECISION_BF16,      /* GEMM and convolution compute in bf16 (fp32 accumulation); activations and their
                                 gradients between layers whose kernels have GLIA_KERNEL_HALF are bf16 ([graph]
                                 half_activations); weights, their gradients, optimizer state, normalization
                                 statistics, softmax and the loss stay fp32 */
    GLIA_PRECISION_FP16       /* the same in fp16; the core scales the loss dynamically */
};

/* The [runtime] settings a backend and its kernels follow. */
struct glia_runtime_options {
    uint32_t struct_size;             /* sizeof(struct glia_runtime_options) of the builder */
    enum glia_precision precision;
    bool cudnn_benchmark;             /* time convolution algorithms once per shape (on) or take
                                         the library's heuristic choice (off) */
    size_t workspace_limit;           /* bytes a kernel may borrow as scratch for a faster algorithm */
    bool deterministic;               /* only algorithms whose results do not depend on timing (no float
                                         atomics): the same inputs give the same bits every run */
};

/* Device memory held by a backend's allocator. */
struct glia_memory_stats {
    size_t current;          /* bytes in tensors now */
    size_t peak;             /* most bytes in tensors at once */
    size_t reserved;         /* bytes held from the driver (in use + cached) */
    uint64_t driver_allocs;  /* allocations from the driver so far (flat after warm-up) */
};

/* A device's peak rates, for glia profile's roofline (ABI 2.1). 0 means unknown. */
struct glia_device_peak {
    uint32_t struct_size;  /* sizeof(struct glia_device_peak) of the caller */
    double bandwidth;      /* bytes a second between the device's memory and its cores */
    double flops[4];       /* floating-point operations a second at each enum glia_precision: dense GEMM and
                              convolution on the units that precision uses (tensor cores for tf32, bf16, fp16) */
    char basis[96];        /* how the figures were found, one line ("HBM 2619 MHz x 5120 bits, 132 SMs x 1980 MHz") */
};

/* ---- what a backend implements: groups of slots, each its own versioned struct ----
 * Every slot of the device, memory, stream and math groups is required (the CPU backend implements each one, so the
 * core and the kernels call them on any device without asking what it is); the graph and data groups are optional.
 * priv is what the device group's open returned. */

/* The device: opening it and the settings it follows. */
struct glia_backend_device_ops {
    uint32_t struct_size;  /* sizeof(struct glia_backend_device_ops) of the builder */
    /* Open device `index` and return its private state. */
    glia_status (*open)(struct glia_context *ctx, int index, void **priv);
    /* Release the private state (after every tensor of the device is freed). */
    void (*close)(void *priv);
    /* Take the [runtime] settings (precision, autotuning, workspace); refuse with the reason in the context error
     * what the device cannot follow (the CPU: any precision but fp32). */
    glia_status (*configure)(void *priv, const struct glia_runtime_options *o);
    /* The native queue all of this backend's work is ordered on (a cudaStream_t for CUDA; see glia/cuda.h), for
     * kernels that launch their own work; NULL for a backend whose work runs when it is called (the CPU). */
    void *(*queue)(void *priv);
    /* ABI 2.1: fill *out with the device's peak bandwidth and FLOP rates (glia profile's fraction of peak).
     * Optional: NULL (the CPU, whose peak no portable call tells) means unknown; profile then prints achieved rates
     * only, unless its caller gives the peak (glia profile --peak-gbs, --peak-tflops). */
    glia_status (*peak)(void *priv, struct glia_device_peak *out);
};

/* Memory: the device's and page-locked host memory. */
struct glia_backend_memory_ops {
    uint32_t struct_size;  /* sizeof(struct glia_backend_memory_ops) of the builder */
    /* Allocate nbytes (aligned to 64) of device memory. */
    glia_status (*alloc)(void *priv, size_t nbytes, void **ptr);
    /* Free memory from alloc. */
    void (*free)(void *priv, void *ptr);
    /* Host memory for buffers that are copied to the device (the loader's batches): page-locked where that makes
     * copies faster (CUDA), plain otherwise. */
    glia_status (*host_alloc)(void *priv, size_t nbytes, void **ptr);
    void (*host_free)(void *priv, void *ptr);
    /* Fill *out with the allocator's figures (glia profile's memory line); GLIA_EUNSUPPORTED, with no error
     * message (callers ask on every epoch), from a backend that keeps none (the CPU's). */
    glia_status (*stats)(void *priv, struct glia_memory_stats *out);
};

/* The stream: copies and the order of work. */
struct glia_backend_stream_ops {
    uint32_t struct_size;  /* sizeof(struct glia_backend_stream_ops) of the builder */
    /* Copy nbytes; each side is host or this device as the flags say; ordered after the work queued so far. */
    glia_status (*copy)(void *priv, void *dst, bool dst_host, const void *src, bool src_host, size_t nbytes);
    /* Set nbytes of device memory to zero. */
    glia_status (*memzero)(void *priv, void *ptr, size_t nbytes);
    /* Wait for all queued work on the device. */
    glia_status (*sync)(void *priv);
    /* Start copying nbytes from host memory src (from host_alloc) to device memory dst after the work queued so far,
     * so that the copy may overlap work queued later; *ticket names the copy for wait_copy. A backend without a copy
     * engine copies at once (the CPU). */
    glia_status (*upload)(void *priv, void *dst, const void *src, size_t nbytes, uint64_t *ticket);
    /* The same from device memory src to host memory dst (from host_alloc). */
    glia_status (*download)(void *priv, void *dst, const void *src, size_t nbytes, uint64_t *ticket);
    /* Make work queued from now on wait for copy `ticket` without blocking the host, and when host is true also
     * block the host until it is done (an upload's src may then be reused, a download's dst read). A backend may keep
     * only the last few tickets apart (CUDA: 16); waiting on an older one waits for all queued work. */
    glia_status (*wait_copy)(void *priv, uint64_t ticket, bool host);
};

/* Math on f32 device memory that the core and many kernels share. */
struct glia_backend_math_ops {
    uint32_t struct_size;  /* sizeof(struct glia_backend_math_ops) of the builder */
    /* Row-major GEMM: C(M,N) = alpha * op(A)(M,K) @ op(B)(K,N) + beta * C, where op(X) is X or X^T per trans_*, and
     * lda/ldb/ldc are row strides. beta 0 never reads C. */
    glia_status (*gemm_f32)(void *priv, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                            const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                            int64_t ldc);
    /* Batched transpose: dst(B, cols, rows) = src(B, rows, cols)^T + beta * dst, beta 0 or 1 (NCHW <-> NHWC). */
    glia_status (*transpose_f32)(void *priv, float *dst, const float *src, int64_t B, int64_t rows, int64_t cols,
                                 float beta);
    /* y[i] += a * x[i] over n elements (a = 1: an exact f32 add; DataParallel adds the replicas' gradients). */
    glia_status (*axpy_f32)(void *priv, float *y, const float *x, size_t n, float a);
    /* x[i] *= a over n elements. */
    glia_status (*scale_f32)(void *priv, float *x, size_t n, float a);
    /* *out = sum of x[i]^2 over n elements, accumulated in double; waits for the result. Non-finite when any element
     * is. */
    glia_status (*sumsq_f32)(void *priv, const float *x, size_t n, double *out);
    /* x[i] *= (float)r over n elements when r = max_norm / (sqrt(sum of x[i]^2 in double) + 1e-6) is below 1
     * (torch.nn.utils.clip_grad_norm_), without the host waiting for the norm where the device can decide. */
    glia_status (*clip_f32)(void *priv, float *x, size_t n, double max_norm);
    /* ABI 2.1: batched transpose with a change of element type: dst(B, cols, rows) = src(B, rows, cols)^T (+ dst when
     * beta is 1; beta 0 never reads dst), each side GLIA_F32, GLIA_F16 or GLIA_BF16 (else GLIA_EINVAL); rows or cols
     * 1 is an elementwise conversion of B*rows*cols values. The sum is formed in f32 and rounded once; every rounding
     * to f16 or bf16 is to nearest even. dst and src do not overlap. Optional: NULL (or a smaller struct_size) means
     * the backend keeps activations in f32 only: [graph] half_activations stays off, and glia_tensor_convert refuses
     * tensors of other dtypes (GLIA_EUNSUPPORTED). */
    glia_status (*convert)(void *priv, void *dst, enum glia_dtype dst_dtype, const void *src, enum glia_dtype src_dtype,
                           int64_t B, int64_t rows, int64_t cols, float beta);
};

/* ABI 2.1: fp16's dynamic loss scaler as it lies in device memory (the graph group's scaler_step). */
struct glia_loss_scaler {
    double scale;       /* the loss scale */
    int64_t clean;      /* clean steps since it last changed */
    int64_t skipped;    /* steps skipped, in all */
    int64_t step;       /* optimizer steps applied, in all */
    int32_t found_inf;  /* 1: the last step's gradients were not all finite: its update is skipped */
    int32_t reserved;   /* 0 */
};

/* ABI 2.1: what scaler_step works on; captured as they are when the call is. */
struct glia_scaler_args {
    float *g;           /* the gradients (device memory) */
    size_t n;
    double max_norm;    /* clip_grad_norm; 0: no clipping */
    int64_t growth;     /* clean steps that double the scale (2000) */
    float *loss_scale;  /* one f32 of device memory: the loss's output gradient for the next step */
    double loss_mul, loss_div;
};

/* CUDA graphs ([runtime] cuda_graph): capturing queued work once and replaying it. */
struct glia_backend_graph_ops {
    uint32_t struct_size;  /* sizeof(struct glia_backend_graph_ops) of the builder */
    /* Start capturing the work queued from now on into a graph instead of running it. */
    glia_status (*capture_begin)(void *priv);
    /* End the capture: *graph = a graph of the work queued since capture_begin, to replay. On an error (some of it
     * cannot be captured) none of that work has run, and queueing works as before. Memory in use during a capture is
     * not given to anything else while any graph lives. */
    glia_status (*capture_end)(void *priv, void **graph);
    /* Queue a replay of graph: its work runs again, on the same memory. */
    glia_status (*launch)(void *priv, void *graph);
    /* Free graph once its queued replays are done. */
    void (*free)(void *priv, void *graph);
    /* Queue *(uint64_t *)dst = v, v carried by the call (dst: 8 bytes of device memory; how the core hands a replay
     * its step). */
    glia_status (*write_u64)(void *priv, void *dst, uint64_t v);
    /* ABI 2.1: queue memcpy(dst, src, n) to device memory, the n <= GLIA_BACKEND_WRITE_MAX bytes carried by the call
     * (src may change once it returns; a capture keeps them as they were): one launch for what a replay is handed.
     * Optional: NULL (or a smaller struct_size) and glia_backend_write writes 8 bytes at a time with write_u64. */
    glia_status (*write)(void *priv, void *dst, const void *src, size_t n);
    /* ABI 2.1: fp16's dynamic loss scaler on the stream, the host not waiting (so a CUDA graph holds it): with sq the
     * sum of squares of a->g as sumsq_f32 forms it and used = s->scale, a non-finite sq sets found_inf = 1, skipped++,
     * clean = 0, scale *= 0.5 and leaves g; else found_inf = 0, step++, clean++ (reaching a->growth: clean = 0,
     * scale *= 2) and g *= (float)c unless c is 1, c = 1 / used times r when a->max_norm > 0 and r = max_norm /
     * (sqrt(sq) / used + 1e-6) is below 1, in double without contraction (the core's host path, bit for bit); then
     * *a->loss_scale = (float)(scale * loss_mul / loss_div). Optional, with select: NULL (or a smaller struct_size)
     * keeps the optimizer step of a precision = fp16 run outside the CUDA graph, the host deciding each step. */
    glia_status (*scaler_step)(void *priv, struct glia_loss_scaler *s, const struct glia_scaler_args *a);
    /* ABI 2.1: queue dst(words) = row r = *key - table[0] of the table[1] rows of `words` 8-byte words that follow,
     * when 0 <= r < table[1] (else dst stays as it is); key and table are device memory read when the work runs (a
     * replay picks what it is handed by a count only the device knows). Optional, with scaler_step. */
    glia_status (*select)(void *priv, int64_t *dst, const int64_t *table, const int64_t *key, size_t words);
};

/* ABI 2.1: a training set kept in device memory ([data] resident): batches made there from its uint8 images, drawing
 * the same augmentation as the core's loader, so both paths give the same batches bit for bit. The group is optional
 * (NULL: the core makes every batch on the host); one without batch_u8 counts as none; mem_info is optional.
 *
 * The augmentation of sample idx in epoch e, with seed s (the [runtime] seed) and mix() splitmix64's finalizer
 * (z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb; z ^= z >> 31), all in uint64:
 *   r = mix(s ^ mix(e * 0x9e3779b97f4a7c15 + idx + 1))
 *   dy = r % (2 pad + 1) - pad, dx = (r >> 16) % (2 pad + 1) - pad    (both 0 when pad is 0)
 *   f = flip ? (r >> 40) & 1 : 0
 *   x[c][i][j] = table[c][v], v = image[c][i + dy][(f ? cols - 1 - j : j) + dx], 0 outside the image. */
struct glia_backend_data_ops {
    uint32_t struct_size;  /* sizeof(struct glia_backend_data_ops) of the builder */
    /* Queue the making of a batch: x(n, channels, rows, cols) f32 and y(n) i32, where sample i is image idx[i] of
     * images(N, channels, rows, cols) u8 augmented as above and mapped through table(channels, 256) f32, and y[i] =
     * labels[idx[i]]. Every pointer is device memory; idx is int64 (the batch's part of the epoch's order). No host
     * wait, so the work can be captured in a CUDA graph. */
    glia_status (*batch_u8)(void *priv, float *x, int32_t *y, const uint8_t *images, const int32_t *labels,
                            const int64_t *idx, int64_t n, int channels, int rows, int cols, const float *table,
                            int pad, bool flip, uint64_t seed, int epoch);
    /* Optional: the bytes of device memory that allocations can still get (*free, the allocator's cached blocks
     * included) and the device's total. NULL: unknown, and [data] resident = auto stays off. */
    glia_status (*mem_info)(void *priv, size_t *free_bytes, size_t *total_bytes);
};

/* The most bytes one glia_backend_write carries (ABI 2.1). */
#define GLIA_BACKEND_WRITE_MAX 256

/* A backend: its name, its device type and its groups. */
/* ABI 2.3: named ranges for a profiler's timeline ([runtime] nvtx: NVTX on CUDA, what Nsight Systems shows). */
struct glia_backend_trace_ops {
    uint32_t struct_size;                                  /* sizeof(struct glia_backend_trace_ops) of the builder */
    /* Opens a range named name (copied; nested ranges close innermost first). Required in the group. */
    void (*range_push)(void *priv, const char *name);
    /* Closes the innermost open range. Required in the group. */
    void (*range_pop)(void *priv);
};

/* ABI 2.6: what a backend derives from a model's parameters (copies in another type or layout). */
struct glia_backend_params_ops {
    uint32_t struct_size;  /* sizeof(struct glia_backend_params_ops) of the builder */
    /* A forward pass over a model whose parameters lie in [params, params + bytes) (device memory) begins: the
     * backend may refresh now, at once, what its kernels derive from them, which the layers of this pass then take
     * instead of deriving it each. Required in the group. The core calls it before each training and evaluation
     * forward of a model (inside a CUDA graph capture too); a layer run without it derives what it needs itself. */
    glia_status (*pass_begin)(void *priv, const void *params, size_t bytes);
};

struct glia_backend_ops {
    uint32_t struct_size;                         /* sizeof(struct glia_backend_ops) of the builder */
    const char *name;                             /* "cpu", "cuda" */
    enum glia_device_type device_type;            /* the devices this backend drives */
    const struct glia_backend_device_ops *device; /* required */
    const struct glia_backend_memory_ops *memory; /* required */
    const struct glia_backend_stream_ops *stream; /* required */
    const struct glia_backend_math_ops *math;     /* required */
    const struct glia_backend_graph_ops *graph;   /* optional: NULL means the backend cannot capture; the core then
                                                     runs every training step as it comes */
    /* ABI 2.1: optional: NULL (or a struct_size that ends before it) means no device-resident training set; the
     * core then makes every batch on the host ([data] resident = auto is off, on is refused) */
    const struct glia_backend_data_ops *data;
    /* ABI 2.3: optional: NULL (or a struct_size that ends before it) means no profiler ranges ([runtime] nvtx = on is
     * refused) */
    const struct glia_backend_trace_ops *trace;
    /* ABI 2.6: optional: NULL (or a struct_size that ends before it) means nothing is derived from the parameters
     * ahead of a pass (each layer converts its own weights as it runs) */
    const struct glia_backend_params_ops *params;
};

/* An opened device: ops + private state. Owned by the context; plugins borrow it and call it through the functions
 * below. */
struct glia_backend {
    const struct glia_backend_ops *ops;
    void *priv;
    struct glia_device device;
    struct glia_context *ctx;             /* (borrowed) */
    struct glia_runtime_options options;  /* what kernels on this device follow (read-only) */
};

/* The opened backend for a device; opened on first use and owned by ctx. */
glia_status glia_backend_get(struct glia_context *ctx, struct glia_device dev,
                             struct glia_backend **out /* (borrowed) */);

/* ---- using a backend: one function per slot (the slots' comments above say what each does) ---- */
void *glia_backend_queue(struct glia_backend *b);
glia_status glia_backend_alloc(struct glia_backend *b, size_t nbytes, void **ptr);
void glia_backend_free(struct glia_backend *b, void *ptr);
glia_status glia_backend_host_alloc(struct glia_backend *b, size_t nbytes, void **ptr);
void glia_backend_host_free(struct glia_backend *b, void *ptr);
glia_status glia_backend_memory_stats(struct glia_backend *b, struct glia_memory_stats *out);
/* The device's peak rates; GLIA_EUNSUPPORTED, with no error message, from a backend without the slot (ABI 2.1). */
glia_status glia_backend_peak(struct glia_backend *b, struct glia_device_peak *out);
glia_status glia_backend_copy(struct glia_backend *b, void *dst, bool dst_host, const void *src, bool src_host,
                              size_t nbytes);
glia_status glia_backend_memzero(struct glia_backend *b, void *ptr, size_t nbytes);
glia_status glia_backend_sync(struct glia_backend *b);
glia_status glia_backend_upload(struct glia_backend *b, void *dst, const void *src, size_t nbytes, uint64_t *ticket);
glia_status glia_backend_download(struct glia_backend *b, void *dst, const void *src, size_t nbytes, uint64_t *ticket);
glia_status glia_backend_wait_copy(struct glia_backend *b, uint64_t ticket, bool host);
glia_status glia_backend_gemm_f32(struct glia_backend *b, bool trans_a, bool trans_b, int64_t M,
                                  int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
glia_status glia_backend_transpose_f32(struct glia_backend *b, float *dst, const float *src, int64_t B, int64_t rows,
                                       int64_t cols, float beta);
glia_status glia_backend_axpy_f32(struct glia_backend *b, float *y, const float *x, size_t n, float a);
glia_status glia_backend_scale_f32(struct glia_backend *b, float *x, size_t n, float a);
glia_status glia_backend_sumsq_f32(struct glia_backend *b, const float *x, size_t n, double *out);
glia_status glia_backend_clip_f32(struct glia_backend *b, float *x, size_t n, double max_norm);
/* ABI 2.1: whether the backend has the math group's convert; glia_backend_convert needs it (GLIA_EUNSUPPORTED, with a
 * message, otherwise). */
bool glia_backend_can_convert(const struct glia_backend *b);
glia_status glia_backend_convert(struct glia_backend *b, void *dst, enum glia_dtype dst_dtype, const void *src,
                                 enum glia_dtype src_dtype, int64_t B, int64_t rows, int64_t cols, float beta);
/* Whether the backend can capture CUDA graphs (it has the graph group); the five functions after it need it
 * (GLIA_EUNSUPPORTED otherwise; glia_backend_graph_free does nothing). */
bool glia_backend_can_capture(const struct glia_backend *b);
glia_status glia_backend_capture_begin(struct glia_backend *b);
glia_status glia_backend_capture_end(struct glia_backend *b, void **graph);
glia_status glia_backend_graph_launch(struct glia_backend *b, void *graph);
void glia_backend_graph_free(struct glia_backend *b, void *graph);
glia_status glia_backend_write_u64(struct glia_backend *b, void *dst, uint64_t v);
/* ABI 2.1: whether the backend makes batches from a resident training set (it has the data group);
 * glia_backend_batch_u8 needs it (GLIA_EUNSUPPORTED, with a message, otherwise). glia_backend_mem_info answers
 * GLIA_EUNSUPPORTED without a message when the backend cannot tell. */
bool glia_backend_can_batch_u8(const struct glia_backend *b);
glia_status glia_backend_batch_u8(struct glia_backend *b, float *x, int32_t *y, const uint8_t *images,
                                  const int32_t *labels, const int64_t *idx, int64_t n, int channels, int rows,
                                  int cols, const float *table, int pad, bool flip, uint64_t seed, int epoch);
glia_status glia_backend_mem_info(struct glia_backend *b, size_t *free_bytes, size_t *total_bytes);
/* ABI 2.1: the graph group's write; n a multiple of 8, at most GLIA_BACKEND_WRITE_MAX (else GLIA_EINVAL). */
glia_status glia_backend_write(struct glia_backend *b, void *dst, const void *src, size_t n);
/* ABI 2.1: whether the backend has the graph group's scaler_step and select; the two functions after it need them
 * (GLIA_EUNSUPPORTED, with a message, otherwise). */
bool glia_backend_can_scale(const struct glia_backend *b);
glia_status glia_backend_scaler_step(struct glia_backend *b, struct glia_loss_scaler *s, const struct glia_scaler_args *a);
glia_status glia_backend_select(struct glia_backend *b, int64_t *dst, const int64_t *table, const int64_t *key,
                                size_t words);

/* Store o as b->options and hand it to the backend's configure; GLIA_EUNSUPPORTED (with the
 * reason in the context error) when the backend cannot follow it. */
glia_status glia_backend_configure(struct glia_backend *b, const struct glia_runtime_options *o);
/* "fp32", "tf32", "bf16", "fp16". */
const char *glia_precision_name(enum glia_precision p);

/* Parse "cpu", "cuda", "cuda:1" into a device. */
glia_status glia_device_parse(const char *s, struct glia_device *out);
/* "cpu", "cuda:0" into buf; returns buf. */
char *glia_device_str(struct glia_device d, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
