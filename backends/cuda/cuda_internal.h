/* backends/cuda/cuda_internal.h — the CUDA backend's private state, shared by the files of
 * cuda.so: the backend itself and the CUDA impls of layers and optimizers it registers.
 * Not installed: out-of-tree CUDA plugins see only glia/cuda.h. */
#ifndef GLIA_CUDA_INTERNAL_H
#define GLIA_CUDA_INTERNAL_H

#include <pthread.h>
#include <cudnn.h>
#include <glia/glia.h>
#include <glia/cuda.h>
#include "cache.h"
#include "check.h"
#include "conv_kernels.h"

#define GLIA__CUDA_LT_WORKSPACE ((size_t)32 << 20)  /* cuBLASLt workspace (PyTorch's on Hopper) */
#define GLIA__CUDA_N_PLANS 64

/* One cuBLASLt GEMM configuration with its chosen algorithm (gemm.c). */
struct glia__cuda_plan {
    bool valid;
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    int compute;                     /* cublasComputeType_t */
    int epilogue;                    /* cublasLtEpilogue_t */
    int ab_type, c_type;             /* cudaDataType_t of A and B, of C (and D) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
    uint64_t last_use;
};

struct glia__cuda {
    struct glia_context *ctx;        /* (borrowed) */
    int device;
    int cc_major, cc_minor;          /* compute capability */
    cudaStream_t stream;             /* compute: every kernel of this backend and its layers */
    cudaStream_t copy_stream;        /* host -> device input copies (upload) */
    cudaEvent_t copy_events[16];     /* ring: one per upload/download ticket in flight */
    uint64_t n_uploads;
    cublasLtHandle_t lt;
    cudnnHandle_t dnn;               /* bound to `stream` */
    void *lt_workspace;              /* GLIA__CUDA_LT_WORKSPACE from the cache */
    void *scratch;                   /* glia__cuda_scratch: grows; glia__cuda_scratch_shrink after autotuning */
    size_t scratch_size;
    struct glia__cache *cache;
    pthread_mutex_t lock;            /* the cache (loader threads may allocate) */
    struct glia__cuda_plan plans[GLIA__CUDA_N_PLANS];
    uint64_t uses;
    double *reduce;                  /* device memory for sumsq_f32: the sum, then the blocks' parts */
    struct glia__cuda_kept *opt_scratch;  /* glia__cuda_opt_scratch's blocks, newest first */
    struct glia__wcopies *wcopies;        /* params.c: the layers' weight copies; NULL: each layer converts its own */
    struct glia_runtime_options options;
};

/* Makes c's device the calling thread's current one, as every launch, copy and library call on
 * c's streams needs when one process drives several GPUs (mode = dp); a no-op on one device. */
static inline void glia__cuda_use(const struct glia__cuda *c)
{
    int d;
    if (cudaGetDevice(&d) != cudaSuccess || d != c->device) cudaSetDevice(c->device);
}

/* The CUDA state behind backend b (which must be this plugin's), its device made current. */
static inline struct glia__cuda *glia__cuda_of(const struct glia_backend *b)
{
    struct glia__cuda *c = (struct glia__cuda *)b->priv;
    glia__cuda_use(c);
    return c;
}

/* glia__conv_convert's name for element type t (f32, f16 or bf16). */
static inline enum glia__conv_type glia__cuda_conv_type(enum glia_dtype t)
{
    return t == GLIA_BF16 ? GLIA__CONV_BF16 : t == GLIA_F16 ? GLIA__CONV_F16 : GLIA__CONV_F32;
}

/* The half type activations take under precision p (bf16, fp16), or GLIA_F32. */
static inline enum glia_dtype glia__cuda_half_of(enum glia_precision p)
{
    return p == GLIA_PRECISION_BF16 ? GLIA_BF16 : p == GLIA_PRECISION_FP16 ? GLIA_F16 : GLIA_F32;
}

/* A device block kept until the backend closes (the cache frees its memory then). */
struct glia__cuda_kept {
    struct glia__cuda_kept *next;
    void *p;
    size_t size;
};

/* Device memory of at least nbytes for an optimizer step's per-tensor norms, which a captured step keeps using at
 * every replay: a larger request takes a new block and keeps the old one (a graph may hold it) until the backend
 * closes; never reused by anything else. */
glia_status glia__cuda_opt_scratch(struct glia__cuda *c, size_t nbytes, void **out);

/* ---- params.c: the layers' weight copies, refreshed for a whole pass by the params group's pass_begin ---- */
extern const struct glia_backend_params_ops glia__cuda_params_ops;
glia_status glia__wcopies_open(struct glia__cuda *c);  /* GLIA_CUDA_WCOPY=off: none (each layer converts its own) */
void glia__wcopies_close(struct glia__cuda *c);
/* Before a capture: the table of the copies of the last pass's parameters made where it is missing (a captured
 * pass_begin only finds one). */
void glia__wcopies_prepare(struct glia__cuda *c);
/* A layer's forward about to make its copy dst of parameter src (f32) in type t, dst(B, cols, rows) = src(B, rows,
 * cols)^T (B = rows = 1: plain), as glia__conv_convert would: true when this pass's pass_begin made it already and no
 * forward took it since (it is taken now: convert nothing); false otherwise, the copy then registered (or its record
 * brought up to date) under *id (the layer's; 0 at first) for the next passes, and the caller converts it itself. */
bool glia__wcopy_take(struct glia__cuda *c, int *id, const float *src, void *dst, enum glia__conv_type t, int64_t B,
                      int64_t rows, int64_t cols);
/* The copy of *id is freed or made anew: no pass makes it any more; *id = 0. */
void glia__wcopy_drop(struct glia__cuda *c, int *id);

/* Scratch device memory of at least nbytes, valid until the next call (all users are ordered on
 * the one stream, so a layer may use it for the duration of its forward or backward). */
glia_status glia__cuda_scratch(struct glia__cuda *c, size_t nbytes, void **out);
/* glia__cuda_scratch without the room to grow it takes beside nbytes: for a one-off need larger than a step's (the
 * autotuner's timing), which glia__cuda_scratch_shrink gives back after; the most device memory in use at once is its
 * size. */
glia_status glia__cuda_scratch_exact(struct glia__cuda *c, size_t nbytes, void **out);
/* Give the scratch back to the driver when it is more than twice nbytes (the next glia__cuda_scratch
 * takes a block of the size asked then); true when it did. For after autotuning, whose workspace
 * may be far larger than what the chosen algorithms run with; it waits for the device, so never
 * in a step after warm-up. */
bool glia__cuda_scratch_shrink(struct glia__cuda *c, size_t nbytes);

/* cuDNN calls turned into glia statuses, like CUDA_TRY. */
glia_status glia__cudnn_status(struct glia_context *ctx, cudnnStatus_t e, const char *call, const char *file, int line);
#define CUDNN_TRY(ctx, call)                                                       \
    do {                                                                           \
        cudnnStatus_t e_ = (call);                                                 \
        if (e_ != CUDNN_STATUS_SUCCESS) {                                          \
            st = glia__cudnn_status((ctx), e_, #call, __FILE__, __LINE__);         \
            goto fail;                                                             \
        }                                                                          \
    } while (0)

/* A kernel launch's error (launch configuration, earlier asynchronous fault) as a status. */
#define CUDA_LAUNCH_TRY(ctx, what) CUDA_TRY(ctx, ((void)(what), cudaGetLastError()))

/* ---- GEMM (gemm.c) ---- */
/* The backend's gemm_f32 slot; computes in the precision of c->options. */
glia_status glia__cuda_gemm_f32(void *priv, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                                int64_t ldc);
void glia__cuda_gemm_close(struct glia__cuda *c);

/* ---- what each op family registers (one file each) ---- */
/* The CUDA backend's slots (cuda_backend.c), registered by plugin.c. */
extern const struct glia_backend_ops glia__cuda_ops;
extern const struct glia_backend_data_ops glia__cuda_data_ops;  /* data.c: [data] resident */
extern double glia__cuda_mixed_min_flop;  /* dense.c: the least forward FLOPs of a linear whose f32 activations multiply in
                                            the half type of precision bf16 or fp16 */
/* Each op family's CUDA kernels, registered by plugin.c: */
glia_status glia__cuda_register_conv(struct glia_registry *r);        /* conv.c: conv2d (cuDNN) */
glia_status glia__cuda_register_dense(struct glia_registry *r);       /* dense.c: linear, softmax_cross_entropy,
                                                                         flatten, dropout */
glia_status glia__cuda_register_norm_pool(struct glia_registry *r);   /* norm_pool.c: batchnorm, maxpool2d,
                                                                         avgpool2d, global_avgpool, concat */
glia_status glia__cuda_register_pointwise(struct glia_registry *r);   /* pointwise.c: relu, leaky_relu, sigmoid,
                                                                         tanh, gelu, add, pointwise (NVRTC) */
glia_status glia__cuda_register_optim(struct glia_registry *r);       /* optim.c: sgd, adam, adamw, adadelta, lamb */
glia_status glia__cuda_register_seq(struct glia_registry *r);         /* seq.c: embedding, seq_pool */
glia_status glia__cuda_register_attention(struct glia_registry *r);   /* attention.c: attention */

/* Whether work queued now on c's compute stream is being captured into a CUDA graph ([runtime] cuda_graph). */
static inline bool glia__cuda_capturing(struct glia__cuda *c)
{
    enum cudaStreamCaptureStatus s = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(c->stream, &s) == cudaSuccess && s != cudaStreamCaptureStatusNone;
}

#endif
