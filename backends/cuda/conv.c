/* backends/cuda/conv.c — conv2d on CUDA through cuDNN's legacy convolution API (impl "cudnn"):
 * forward (+ bias), backward data, backward filter and bias, in fp32 (FMA only), tf32, bf16 and
 * fp16, NCHW or NHWC, with algorithms chosen by cudnnFind*Ex timing (cudnn_benchmark on) or by
 * cuDNN's heuristics (off), remembered per shape in a process-wide cache.
 * Kernels and padding may be rectangular (kh x kw, ph and pw); stride and dilation are square.
 * Not the type (keys, checks, parameters, shapes: plugins/layers/conv2d, whose struct
 * glia_conv2d_attrs this kernel reads), and no transposed convolution or padding that differs
 * between the two sides of a dimension.
 *
 * Shape changes (variable batch or sequence length): the descriptors are set again for the new
 * shape (host calls only); the algorithm choices of every shape seen stay in the process-wide
 * cache, so a shape that comes back is neither timed nor ranked again.
 *
 * Layouts: the weight parameter and its gradient stay (F, C/groups, kh, kw) — KCRS, the checkpoint
 * format — always. With channels_last activations cuDNN gets a KRSC (NHWC) filter, which its
 * fast NHWC kernels need: the weights are transposed into scratch at every call and the filter
 * gradient transposed back (fused with the fp16/bf16 conversion where there is one).
 *
 * Precision: fp32 runs CUDNN_FMA_MATH (no TF32), tf32 CUDNN_TENSOR_OP_MATH on fp32 data; bf16 and
 * fp16 convert x, w and dy into scratch, run cuDNN on that data type with fp32 accumulation
 * (CUDNN_DATA_FLOAT compute, tensor-op math) and convert the results back to fp32, adding where
 * the gradient contract asks. Bias and its gradient are fp32 in every precision. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <glia/types/conv2d.h>
#include "cuda_internal.h"
#include "conv_kernels.h"
#include "cudnn_graph.h"
#include "norm_pool_kernels.h"

enum { FWD = 0, BWD_DATA = 1, BWD_FILTER = 2, N_DIRS = 3 };

static const char *const dir_name[N_DIRS] = {"forward", "backward data", "backward filter"};

#define NONE SIZE_MAX  /* a scratch offset that is not used */
#define MAX_PERF 16    /* more than any direction's algorithm count */

/* Everything an algorithm choice depends on. All fields are int64_t so that the struct has no
 * padding and compares with memcmp. */
struct conv_key {
    int64_t device, dir, precision, nhwc, benchmark, workspace_limit, deterministic;
    int64_t N, C, H, W, F, kh, kw, s, ph, pw, d, g;
    int64_t epi;  /* what the forward's graph adds after the convolution: EPI_* bits (activation = relu, or an
                     evaluation's glia_fwd.affine) */
    int64_t eval; /* an evaluation's forward (glia_fwd.train false): its timing offers at most TUNE_WS_MIN */
};

/* y = relu(a(conv(x, w) + b)), a(v) = (v - mean)*scale + shift with EPI_AFFINE (a batchnorm's evaluation) */
enum { EPI_BIAS = 1, EPI_RELU = 2, EPI_AFFINE = 4 };

/* One direction's algorithm, the math type it runs with and the workspace it needs; and, where cuDNN's graph API is
 * the one that runs (plan >= 0), which of the graph's plans, best first as the heuristics gave them (the legacy
 * algorithm stays chosen: it runs the calls that add into their output, beta 1, whose graphs would differ, and any
 * call while the plan is unverified). workspace covers both. */
struct algo_choice {
    int algo;
    cudnnMathType_t math;
    size_t workspace;
    int plan;          /* -1: the legacy algorithm */
    int64_t plan_src;  /* with a plan: where it came from (PLAN_SRC), so that another layer builds that plan alone */
    bool verified;     /* with a plan: a layer's check of it agreed with the legacy algorithm (others need not check) */
};

/* ---- the process-wide cache of choices (all layers, all devices; keyed by device) ---- */

#define N_CACHED 1024

struct cached_choice {
    bool valid;
    struct conv_key key;
    struct algo_choice choice;
    uint64_t last_use;
};

static struct cached_choice cached[N_CACHED];
static uint64_t cache_uses;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static bool cache_find(const struct conv_key *k, struct algo_choice *out)
{
    bool found = false;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < N_CACHED && !found; i++)
        if (cached[i].valid && !memcmp(&cached[i].key, k, sizeof *k)) {
            cached[i].last_use = ++cache_uses;
            *out = cached[i].choice;
            found = true;
        }
    pthread_mutex_unlock(&cache_lock);
    return found;
}

/* Store a choice, replacing the same key's or the least recently used entry. */
static void cache_put(const struct conv_key *k, const struct algo_choice *ch)
{
    pthread_mutex_lock(&cache_lock);
    struct cached_choice *e = &cached[0];
    for (int i = 0; i < N_CACHED; i++) {
        struct cached_choice *q = &cached[i];
        if (q->valid && !memcmp(&q->key, k, sizeof *k)) {
            e = q;
            break;
        }
        if (!q->valid || (e->valid && q->last_use < e->last_use)) e = q;
    }
    e->valid = true;
    memcpy(&e->key, k, sizeof *k);
    e->choice = *ch;
    e->last_use = ++cache_uses;
    pthread_mutex_unlock(&cache_lock);
}

/* ---- the kernel ---- */

/* ---- cuDNN's graph API: one direction's operation graph at the layer's shapes, and its plans ---- */

#define MAX_GRAPH_PLANS 12  /* plans built per graph: the heuristics' best few, then cuDNN's fallback list's */
#define FALLBACK_PLANS 4    /* of them at most from the fallback list */
#define FUSED_PLANS 2       /* plans built of a fused graph: cuDNN compiles its fusion engines at run time */
#define GRAPH_SETS 16       /* shapes whose graphs a layer keeps */
#define GRAPH_TIMED_RUNS 3  /* runs each plan is timed over, after one untimed */

/* A plan's source: the graph fused or plain, the heuristics' mode, and the position in its list of configurations. */
#define PLAN_SRC(fused, mode, index) ((int64_t)(fused) << 20 | (int64_t)(mode) << 16 | (int64_t)(index))
#define PLAN_SRC_FUSED(src) ((int)((src) >> 20 & 1))
#define PLAN_SRC_MODE(src) ((cudnnBackendHeurMode_t)((src) >> 16 & 15))
#define PLAN_SRC_INDEX(src) ((src) & 0xffff)

/* One direction's graphs at the layer's key, written with beta 0: x (uid 1), w (2) and y (3), which are dx, dw, dy in
 * the gradients' graphs as glia__cg_conv names them; the plain convolution's, and for a forward with an epilogue
 * (key.epi) the fused one, which adds the bias (4), the affine's mean, scale and shift (5, 6, 7) and the relu. Their
 * plans in one list, each marked fused or not by its PLAN_SRC. */
struct conv_graph {
    bool built;                      /* tried at this key: g and plan[0..n) hold what cuDNN gave (n may be 0) */
    struct glia__cg *g[2];           /* the plain graph and the fused one, as made */
    cudnnBackendDescriptor_t plan[2 * MAX_GRAPH_PLANS];
    int64_t ws[2 * MAX_GRAPH_PLANS];
    int64_t src[2 * MAX_GRAPH_PLANS];  /* each plan's PLAN_SRC */
    int n;
    bool verified;                   /* this layer's first run of its chosen plan agreed with the legacy algorithm */
};

/* Whether plan i of q (an index into its list; -1: the legacy algorithm) computes the forward's epilogue too. */
static bool plan_fused(const struct conv_graph *q, int i) { return i >= 0 && i < q->n && PLAN_SRC_FUSED(q->src[i]); }

static void graph_free(struct conv_graph *q)
{
    for (int i = 0; i < q->n; i++) cudnnBackendDestroyDescriptor(q->plan[i]);
    for (int f = 0; f < 2; f++) {
        if (q->g[f]) glia__cg_free(q->g[f]);
        free(q->g[f]);
    }
    memset(q, 0, sizeof *q);
}

/* l->state of the cuDNN kernel. */
struct cuda_conv {
    cudnnTensorDescriptor_t x, y;    /* x / dx and y / dy in cuDNN's data type */
    cudnnTensorDescriptor_t y32;     /* y in fp32 (the bias add) */
    cudnnTensorDescriptor_t bias;    /* (1, F, 1, 1) fp32 */
    cudnnFilterDescriptor_t w;       /* (F, C/groups, kh, kw), KCRS or KRSC, cuDNN's data type */
    cudnnConvolutionDescriptor_t conv[N_DIRS];  /* one per direction: each has its math type */
    bool valid;                      /* the descriptors describe `key` */
    bool epi_done;                   /* the forward now running has its epilogue written (a fused plan, or its check) */
    struct conv_key key;             /* the last call's (dir 0) */
    bool chosen[N_DIRS];
    struct algo_choice choice[N_DIRS];
    /* the graphs of the last GRAPH_SETS keys (shapes) the layer ran, kept while the layer lives, so that a shape that
     * comes back (training and evaluation batches, token lengths) finds its plans; evicted least recently used, after
     * the stream has run what may still use them */
    struct graph_set {
        bool used;
        bool pinned;                 /* a plan of it ran inside a CUDA graph capture: kept for the layer's life */
        struct conv_key key;
        uint64_t last_use;
        struct conv_graph g[N_DIRS];
    } sets[GRAPH_SETS];
    uint64_t set_uses;
    struct graph_set *set;           /* the set of `key`, or NULL when every set is pinned (none: no graph, built) */
    struct conv_graph *graph;        /* its graphs, graph[dir] */
    struct conv_graph none[N_DIRS];
    bool told_unfused;               /* the "no fused plan" notice was given at info level (later shapes: debug) */
    /* W as cuDNN reads it where that is not the fp32 KCRS parameter (a half type, or KRSC for channels_last): each
     * forward converts it here and the backward after it reads it (the optimizer changes W only after backward), as
     * the linear layer keeps its half W; NULL before the first such forward */
    struct glia_tensor *wc;
    bool wc_nhwc;                    /* its layout (its element type is wc's dtype) */
    int wc_id;                       /* its record among the backend's weight copies (params.c; 0: none) */
};

/* What one forward or backward call works on. Scratch offsets are NONE when unused. */
struct call {
    bool lp;                         /* bf16 / fp16: cuDNN runs in that type ... */
    bool hio;                        /* ... and x, y, dy, dx are of it already (half activations: GLIA_KERNEL_HALF),
                                        else on converted copies */
    bool nhwc;                       /* channels_last: cuDNN gets a KRSC filter */
    enum glia__conv_type t;          /* cuDNN's data type */
    size_t es;                       /* its element size */
    const float *x, *w, *dy;         /* the fp32 operands (dy NULL in forward) */
    int64_t nx, nw, ny;              /* element counts of x, w, y */
    size_t o_x, o_w, o_dy, o_y, o_dx, o_dw;  /* converted operands and low-precision results */
    void *wc;                        /* W converted into the layer's kept copy (struct cuda_conv.wc) instead of at o_w,
                                        by convert() where wc_convert, else only read there (a backward) */
    bool wc_convert;
    size_t o_db;                     /* the bias gradient's partial sums (bias.S x F floats) */
    struct glia__bn_geom bias;       /* dy as the per-channel sums take it */
    size_t end;                      /* bytes of scratch before the workspace */
    const void *cx, *cw, *cdy;       /* operands as cuDNN reads them (after convert) */
    const float *b;                  /* the bias (fused forward), and where the graph reads it: a 16-byte aligned copy */
    const float *cb;                 /* at o_b when it is not aligned so */
    size_t o_b;
    const float *af, *caf;           /* the evaluation's affine (3, F) (glia_fwd.affine), as read: a copy at o_af */
    size_t o_af;                     /* (rows 16-byte aligned) when its rows are not */
    void *ws;                        /* workspace and its size */
    size_t ws_size;
};

static size_t align_up(size_t n) { return (n + 255) & ~(size_t)255; }

/* Reserve nbytes of scratch at the end of k's layout; returns their offset. */
static size_t carve(struct call *k, size_t nbytes)
{
    size_t o = k->end;
    k->end += align_up(nbytes);
    return o;
}

static cudnnDataType_t data_type(enum glia_precision p)
{
    switch (p) {
    case GLIA_PRECISION_BF16: return CUDNN_DATA_BFLOAT16;
    case GLIA_PRECISION_FP16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
    }
}

static enum glia__conv_type conv_type(enum glia_precision p)
{
    switch (p) {
    case GLIA_PRECISION_BF16: return GLIA__CONV_BF16;
    case GLIA_PRECISION_FP16: return GLIA__CONV_F16;
    default: return GLIA__CONV_F32;
    }
}

/* The math type a precision asks for: fp32 FMA only (no TF32); tf32, bf16, fp16 tensor cores. */
static cudnnMathType_t default_math(enum glia_precision p)
{
    return p == GLIA_PRECISION_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

/* The math type to run an algorithm result of math type m with at precision p; false when it may
 * not run. fp32 never runs TF32: it takes FMA-only results, and runs a result reported as default
 * math (asked for under the FMA-only descriptor) with CUDNN_FMA_MATH set explicitly. */
static bool run_math(enum glia_precision p, cudnnMathType_t m, cudnnMathType_t *out)
{
    if (p != GLIA_PRECISION_FP32) {
        *out = m;
        return true;
    }
    *out = CUDNN_FMA_MATH;
    return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
}

static const char *algo_name(int dir, int algo)
{
    static const char *const fwd[] = {"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct",
                                      "fft", "fft_tiling", "winograd", "winograd_nonfused"};
    static const char *const bwd_data[] = {"algo_0", "algo_1", "fft", "fft_tiling", "winograd", "winograd_nonfused"};
    static const char *const bwd_filter[] = {"algo_0", "algo_1", "fft", "algo_3",
                                             "winograd", "winograd_nonfused", "fft_tiling"};
    if (algo < 0) return "?";
    if (dir == FWD) return algo < (int)(sizeof fwd / sizeof *fwd) ? fwd[algo] : "?";
    if (dir == BWD_DATA) return algo < (int)(sizeof bwd_data / sizeof *bwd_data) ? bwd_data[algo] : "?";
    return algo < (int)(sizeof bwd_filter / sizeof *bwd_filter) ? bwd_filter[algo] : "?";
}

static const char *math_name(cudnnMathType_t m)
{
    switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor_op_allow_conversion";
    case CUDNN_FMA_MATH: return "fma";
    }
    return "?";
}

/* Frees what l->state holds (also what a failed prepare made). */
static void cuda_conv_destroy(struct glia_layer *l)
{
    struct cuda_conv *p = l->state;
    if (p->x) cudnnDestroyTensorDescriptor(p->x);
    if (p->y) cudnnDestroyTensorDescriptor(p->y);
    if (p->y32) cudnnDestroyTensorDescriptor(p->y32);
    if (p->bias) cudnnDestroyTensorDescriptor(p->bias);
    if (p->w) cudnnDestroyFilterDescriptor(p->w);
    for (int i = 0; i < N_DIRS; i++)
        if (p->conv[i]) cudnnDestroyConvolutionDescriptor(p->conv[i]);
    bool plans = false;
    for (int s = 0; s < GRAPH_SETS; s++)
        for (int i = 0; i < N_DIRS; i++) plans = plans || p->sets[s].g[i].n > 0;
    if (plans) cudaStreamSynchronize(glia__cuda_of(l->backend)->stream);  /* queued runs may still use them */
    for (int s = 0; s < GRAPH_SETS; s++)
        for (int i = 0; i < N_DIRS; i++) graph_free(&p->sets[s].g[i]);
    glia__wcopy_drop(glia__cuda_of(l->backend), &p->wc_id);
    glia_tensor_release(p->wc);
    p->wc = NULL;
    memset(p, 0, sizeof *p);
}

/* The graph set of key: its own, or a free one, or the least recently used one that no CUDA graph ran (pinned)
 * emptied (after the stream has run what may still use its plans); NULL when every set is pinned. */
static struct graph_set *graph_set_of(struct glia_layer *l, const struct conv_key *key)
{
    struct cuda_conv *p = l->state;
    struct graph_set *e = NULL;
    for (int s = 0; s < GRAPH_SETS; s++) {
        struct graph_set *q = &p->sets[s];
        if (q->used && !memcmp(&q->key, key, sizeof *key)) {
            q->last_use = ++p->set_uses;
            return q;
        }
        if (!q->pinned && (!e || !q->used || (e->used && q->last_use < e->last_use))) e = q;
    }
    if (!e) return NULL;
    if (e->used) {
        bool plans = false;
        for (int i = 0; i < N_DIRS; i++) plans = plans || e->g[i].n > 0;
        if (plans) cudaStreamSynchronize(glia__cuda_of(l->backend)->stream);
        for (int i = 0; i < N_DIRS; i++) graph_free(&e->g[i]);
    }
    e->used = true;
    e->key = *key;
    e->last_use = ++p->set_uses;
    return e;
}

/* The descriptors; plan sets them for each call's shapes. */
static glia_status cuda_conv_prepare(struct glia_layer *l, const struct glia_shape *in, int n_in)
{
    struct cuda_conv *p = l->state;
    glia_status st = GLIA_OK;
    CUDNN_TRY(l->ctx, cudnnCreateTensorDescriptor(&p->x));
    CUDNN_TRY(l->ctx, cudnnCreateTensorDescriptor(&p->y));
    CUDNN_TRY(l->ctx, cudnnCreateTensorDescriptor(&p->y32));
    CUDNN_TRY(l->ctx, cudnnCreateTensorDescriptor(&p->bias));
    CUDNN_TRY(l->ctx, cudnnCreateFilterDescriptor(&p->w));
    for (int i = 0; i < N_DIRS; i++) CUDNN_TRY(l->ctx, cudnnCreateConvolutionDescriptor(&p->conv[i]));
    return GLIA_OK;
fail:
    cuda_conv_destroy(l);  /* no destroy follows a failed prepare */
    return st;
}

/* ---- checks ---- */

/* Both formats are the same bytes for t (C or H*W is 1): it reads as contiguous. */
static bool either_format(const struct glia_tensor *t)
{
    return t->shape.dim[1] == 1 || t->shape.dim[2] * t->shape.dim[3] == 1;
}

/* The half type of the backend's precision (bf16, fp16), or GLIA_F32. */
static enum glia_dtype half_of(const struct glia_layer *l) { return glia__cuda_half_of(l->backend->options.precision); }

/* The activations' type a call may have, given tensor t of it: f32, or the precision's half type. */
static enum glia_dtype act_dtype(const struct glia_layer *l, const struct glia_tensor *t)
{
    return t->dtype == half_of(l) ? t->dtype : GLIA_F32;
}

/* t (named what) must be a dense CUDA tensor of shape (N, C, H, W) in either format, f32 or (half activations) of the
 * precision's half type. */
static glia_status check_tensor(struct glia_layer *l, const struct glia_tensor *t, const char *what, int64_t N,
                                int64_t C, int64_t H, int64_t W)
{
    char buf[64];
    const struct glia_shape want = glia_shape_make(4, (int64_t[]){N, C, H, W});
    if (t->dtype != act_dtype(l, t) || t->device.type != GLIA_DEVICE_CUDA || !glia_shape_equal(&t->shape, &want) ||
        (glia_tensor_memory_format(t) == GLIA_CONTIGUOUS && !glia_tensor_is_contiguous(t)))
        return glia_error(l->ctx, GLIA_ESHAPE,
                          "[%s] conv2d: %s must be a dense f32 (or, at precision %s, %s) CUDA tensor of shape %s",
                          l->name, what, glia_precision_name(l->backend->options.precision),
                          glia_dtype_name(half_of(l)), glia_shape_str(&want, buf, sizeof buf));
    return GLIA_OK;
}

/* The layout of a call's 4-D tensors t[0..n) (NULL entries skipped): channels_last when any of
 * them is; then the contiguous ones must be those whose bytes are the same in both formats. */
static glia_status call_format(struct glia_layer *l, const struct glia_tensor *const *t, int n, bool *nhwc)
{
    *nhwc = false;
    for (int i = 0; i < n; i++)
        if (t[i] && glia_tensor_memory_format(t[i]) == GLIA_CHANNELS_LAST) *nhwc = true;
    for (int i = 0; i < n && *nhwc; i++)
        if (t[i] && glia_tensor_memory_format(t[i]) == GLIA_CONTIGUOUS && !either_format(t[i]))
            return glia_error(l->ctx, GLIA_EINVAL, "[%s] conv2d: its tensors mix contiguous and channels_last formats",
                              l->name);
    return GLIA_OK;
}

/* ---- descriptors for one call's shapes, format and options ---- */

/* Set the descriptors for input (N, C, H, W) in the given layout under the backend's current
 * options, unless they already hold that; a change forgets the layer's algorithm choices. */
static glia_status plan(struct glia_layer *l, int64_t N, int64_t H, int64_t W, bool nhwc, int64_t epi, bool eval)
{
    struct cuda_conv *p = l->state;
    const struct glia_conv2d_attrs *g = l->attrs;
    const struct glia_runtime_options *o = &l->backend->options;
    glia_status st = GLIA_OK;
    const struct conv_key key = {.device = glia__cuda_of(l->backend)->device, .precision = o->precision,
                                 .nhwc = nhwc, .benchmark = o->cudnn_benchmark,
                                 .workspace_limit = (int64_t)o->workspace_limit, .deterministic = o->deterministic,
                                 .N = N, .C = g->C, .H = H, .W = W, .F = g->F, .kh = g->kh, .kw = g->kw, .s = g->s,
                                 .ph = g->ph, .pw = g->pw, .d = g->d, .g = g->g, .epi = epi, .eval = eval};
    if (p->valid && !memcmp(&key, &p->key, sizeof key)) return GLIA_OK;
    p->valid = false;
    memset(p->chosen, 0, sizeof p->chosen);
    p->graph = NULL;
    p->set = NULL;
    int64_t OH = glia_conv2d_out_h(g, H), OW = glia_conv2d_out_w(g, W);
    if (N * g->C * H * W > INT_MAX || N * g->F * OH * OW > INT_MAX)
        return glia_error(l->ctx, GLIA_EUNSUPPORTED,
                          "[%s] conv2d: cuDNN takes at most %d elements per tensor (input %lldx%lldx%lldx%lld, "
                          "output %lldx%lldx%lldx%lld); use a smaller batch",
                          l->name, INT_MAX, (long long)N, (long long)g->C, (long long)H, (long long)W, (long long)N,
                          (long long)g->F, (long long)OH, (long long)OW);
    cudnnDataType_t dt = data_type(o->precision);
    cudnnTensorFormat_t fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CUDNN_TRY(l->ctx, cudnnSetTensor4dDescriptor(p->x, fmt, dt, (int)N, (int)g->C, (int)H, (int)W));
    CUDNN_TRY(l->ctx, cudnnSetTensor4dDescriptor(p->y, fmt, dt, (int)N, (int)g->F, (int)OH, (int)OW));
    CUDNN_TRY(l->ctx, cudnnSetTensor4dDescriptor(p->y32, fmt, CUDNN_DATA_FLOAT, (int)N, (int)g->F, (int)OH, (int)OW));
    CUDNN_TRY(l->ctx, cudnnSetTensor4dDescriptor(p->bias, fmt, CUDNN_DATA_FLOAT, 1, (int)g->F, 1, 1));
    CUDNN_TRY(l->ctx,
              cudnnSetFilter4dDescriptor(p->w, dt, fmt, (int)g->F, (int)(g->C / g->g), (int)g->kh, (int)g->kw));
    for (int i = 0; i < N_DIRS; i++) {
        CUDNN_TRY(l->ctx, cudnnSetConvolution2dDescriptor(p->conv[i], (int)g->ph, (int)g->pw, (int)g->s, (int)g->s,
                                                          (int)g->d, (int)g->d, CUDNN_CROSS_CORRELATION,
                                                          CUDNN_DATA_FLOAT));
        CUDNN_TRY(l->ctx, cudnnSetConvolutionGroupCount(p->conv[i], (int)g->g));
        CUDNN_TRY(l->ctx, cudnnSetConvolutionMathType(p->conv[i], default_math(o->precision)));
    }
    p->key = key;
    p->set = graph_set_of(l, &key);
    if (!p->set) {  /* every set holds plans a CUDA graph may run: this shape takes the legacy algorithm */
        memset(p->none, 0, sizeof p->none);
        for (int i = 0; i < N_DIRS; i++) p->none[i].built = true;
    }
    p->graph = p->set ? p->set->g : p->none;
    p->valid = true;
fail:
    return st;
}

/* ---- algorithm choice ---- */

/* One result of cudnnGet*_v7 or cudnnFind*Ex, whichever direction. */
struct perf {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnMathType_t math;
    bool deterministic;  /* cuDNN says the algorithm gives the same bits every run (no atomics) */
    float ms;            /* cudnnFind*Ex's time (heuristics: not timed) */
};

/* r[0..n) = the direction-specific results f[0..n) */
#define COPY_PERF(r, f, n)                                                                                  \
    do {                                                                                                    \
        for (int i_ = 0; i_ < (n); i_++)                                                                    \
            (r)[i_] = (struct perf){(int)(f)[i_].algo, (f)[i_].status, (f)[i_].memory, (f)[i_].mathType,   \
                                    (f)[i_].determinism == CUDNN_DETERMINISTIC, (f)[i_].time};             \
    } while (0)

/* Workspace bytes that algo needs in direction dir with conv[dir]'s current math type. */
static cudnnStatus_t workspace_of(struct glia__cuda *c, struct cuda_conv *p, int dir, int algo, size_t *out)
{
    switch (dir) {
    case FWD:
        return cudnnGetConvolutionForwardWorkspaceSize(c->dnn, p->x, p->w, p->conv[FWD], p->y,
                                                       (cudnnConvolutionFwdAlgo_t)algo, out);
    case BWD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(c->dnn, p->w, p->y, p->conv[BWD_DATA], p->x,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, out);
    default:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(c->dnn, p->x, p->y, p->conv[BWD_FILTER], p->w,
                                                              (cudnnConvolutionBwdFilterAlgo_t)algo, out);
    }
}

/* cuDNN's heuristic ranking for dir (no device work). */
static glia_status heuristics(struct glia_layer *l, int dir, struct perf *r, int *n)
{
    struct cuda_conv *p = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st = GLIA_OK;
    *n = 0;
    if (dir == FWD) {
        cudnnConvolutionFwdAlgoPerf_t f[MAX_PERF];
        CUDNN_TRY(l->ctx,
                  cudnnGetConvolutionForwardAlgorithm_v7(c->dnn, p->x, p->w, p->conv[FWD], p->y, MAX_PERF, n, f));
        COPY_PERF(r, f, *n);
    } else if (dir == BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t f[MAX_PERF];
        CUDNN_TRY(l->ctx, cudnnGetConvolutionBackwardDataAlgorithm_v7(c->dnn, p->w, p->y, p->conv[BWD_DATA], p->x,
                                                                      MAX_PERF, n, f));
        COPY_PERF(r, f, *n);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t f[MAX_PERF];
        CUDNN_TRY(l->ctx, cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->dnn, p->x, p->y, p->conv[BWD_FILTER], p->w,
                                                                        MAX_PERF, n, f));
        COPY_PERF(r, f, *n);
    }
fail:
    return st;
}

/* The most workspace the timing offers cuDNN: [runtime] workspace_mb, but at most TUNE_WS_CAP (and tune_cap's). The
 * algorithms that want more are the FFT ones (GiBs at ResNet-50 shapes), which seldom win on tensor cores; offering their
 * workspace made the timing's scratch the largest allocation of a small model's run (the device memory peak).
 * The runs themselves may use up to workspace_mb (heuristics off the timing). */
#define TUNE_WS_CAP ((size_t)256 << 20)
#define TUNE_CANDIDATES 10  /* heuristic candidates whose workspace the timing offers (PyTorch's benchmark_limit) */
/* Below TUNE_WS_CAP, a small layer's timing offers at most TUNE_WS_PER_DATA times the bytes of its operands (x, w and
 * y in cuDNN's type), and at least TUNE_WS_MIN: an algorithm that wants far more scratch than the data it reads (FFT
 * tiling) seldom wins, and the timing's scratch was the largest allocation of fmnist-cnn's run (293.5 MB on an H200,
 * the model's peak 1.27x PyTorch's). Layers of ResNet-50's sizes keep TUNE_WS_CAP. */
#define TUNE_WS_PER_DATA 8
#define TUNE_WS_MIN ((size_t)32 << 20)

/* The workspace cap of the timing of l's shape (p->key): workspace_mb, TUNE_WS_CAP and its TUNE_WS_PER_DATA, the
 * least; an evaluation's forward (key.eval) at most TUNE_WS_MIN: it runs a few batches an epoch, and its larger batch
 * (fmnist's 1000) timed with up to TUNE_WS_CAP made the timing's scratch the largest allocation of fmnist-cnn's run
 * (293.5 MB, the peak 1.27x PyTorch's on an H200) */
static size_t tune_cap(const struct glia_layer *l)
{
    const struct cuda_conv *p = l->state;
    const struct glia_conv2d_attrs *g = l->attrs;
    const struct conv_key *k = &p->key;
    const struct glia_runtime_options *o = &l->backend->options;
    int64_t n = k->N * g->C * k->H * k->W + g->F * (g->C / g->g) * g->kh * g->kw +
                k->N * g->F * glia_conv2d_out_h(g, k->H) * glia_conv2d_out_w(g, k->W);
    size_t es = glia_dtype_size(glia__cuda_half_of((enum glia_precision)k->precision));
    size_t data = (size_t)n * es * TUNE_WS_PER_DATA, cap = TUNE_WS_CAP;
    if (data < cap) cap = data > TUNE_WS_MIN ? data : TUNE_WS_MIN;
    if (k->eval && cap > TUNE_WS_MIN) cap = TUNE_WS_MIN;
    return o->workspace_limit < cap ? o->workspace_limit : cap;
}

/* The workspace to time dir's algorithms with: the largest that one of the first TUNE_CANDIDATES algorithms of
 * cuDNN's heuristic ranking (cudnnGet*_v7, best first, no device work) that fit within cap needs, so that those
 * are timed (cudnnFind*Ex skips what does not fit) and the timing's scratch is no larger than they need. */
static glia_status tune_workspace(struct glia_layer *l, int dir, size_t cap, size_t *out)
{
    struct perf r[MAX_PERF];
    int n = 0, k = 0;
    glia_status st = heuristics(l, dir, r, &n);
    *out = 0;
    for (int i = 0; i < n && k < TUNE_CANDIDATES && !st; i++) {
        if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > cap) continue;
        k++;
        if (r[i].memory > *out) *out = r[i].memory;
    }
    return st;
}

/* cuDNN's timed ranking for dir: runs every algorithm on k's prepared operands, writing into
 * probe (scratch the size of dir's output, never a real tensor), with ws_size bytes of
 * workspace at ws. Blocks until the timings are done. */
static glia_status benchmark(struct glia_layer *l, const struct call *k, int dir, void *probe, void *ws,
                             size_t ws_size, struct perf *r, int *n)
{
    struct cuda_conv *p = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st = GLIA_OK;
    *n = 0;
    if (dir == FWD) {
        cudnnConvolutionFwdAlgoPerf_t f[MAX_PERF];
        CUDNN_TRY(l->ctx, cudnnFindConvolutionForwardAlgorithmEx(c->dnn, p->x, k->cx, p->w, k->cw, p->conv[FWD], p->y,
                                                                 probe, MAX_PERF, n, f, ws, ws_size));
        COPY_PERF(r, f, *n);
    } else if (dir == BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t f[MAX_PERF];
        CUDNN_TRY(l->ctx, cudnnFindConvolutionBackwardDataAlgorithmEx(c->dnn, p->w, k->cw, p->y, k->cdy,
                                                                      p->conv[BWD_DATA], p->x, probe, MAX_PERF, n, f,
                                                                      ws, ws_size));
        COPY_PERF(r, f, *n);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t f[MAX_PERF];
        CUDNN_TRY(l->ctx, cudnnFindConvolutionBackwardFilterAlgorithmEx(c->dnn, p->x, k->cx, p->y, k->cdy,
                                                                        p->conv[BWD_FILTER], p->w, probe, MAX_PERF, n,
                                                                        f, ws, ws_size));
        COPY_PERF(r, f, *n);
    }
fail:
    return st;
}

/* Whether dir's legacy algorithm is one whose sums are less exact than fp32 FMA math: the Winograd transforms that
 * are not fused (large tiles: on an H200 a 5x5 data gradient came out 2e-3 of its largest value off). */
static bool reduced_precision_algo(int dir, int algo)
{
    return dir == FWD        ? algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED
           : dir == BWD_DATA ? algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED
                             : algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/* The first of r[0..n) (best first) that succeeded, runs at this precision (fp32: no algorithm of reduced precision),
 * is deterministic when [runtime] deterministic asks for it, and whose workspace (asked again for its math type) fits
 * in limit; *ms its time (when r was timed). */
static bool pick(struct glia_layer *l, int dir, const struct perf *r, int n, size_t limit, struct algo_choice *out,
                 float *ms)
{
    struct cuda_conv *p = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    enum glia_precision prec = l->backend->options.precision;
    for (int i = 0; i < n; i++) {
        size_t need = 0;
        cudnnMathType_t math;
        if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > limit || !run_math(prec, r[i].math, &math) ||
            (prec == GLIA_PRECISION_FP32 && reduced_precision_algo(dir, r[i].algo)) ||
            (l->backend->options.deterministic && !r[i].deterministic))
            continue;
        if (cudnnSetConvolutionMathType(p->conv[dir], math) != CUDNN_STATUS_SUCCESS ||
            workspace_of(c, p, dir, r[i].algo, &need) != CUDNN_STATUS_SUCCESS || need > limit)
            continue;
        *out = (struct algo_choice){r[i].algo, math, need > r[i].memory ? need : r[i].memory, -1, -1,
                                    false};
        *ms = r[i].ms;
        return true;
    }
    return false;
}

/* ---- cuDNN's graph API ---- */

/* The numerical notes an engine may not have here: strict fp32 refuses tensor cores, inputs rounded down (TF32),
 * reductions of reduced precision and the large-tile Winograd transforms, as the legacy algorithms it runs are FMA
 * math without Winograd's nonfused kind (reduced_precision_algo); [runtime] deterministic refuses the nondeterministic
 * ones (atomics). GLIA_CUDA_CONV_RTC=off refuses, in a plain convolution's graph (not a fused one's), the engines cuDNN
 * compiles at run time: a measure of what they cost at the start and give in the step (docs/cuda.md). */
static uint32_t refused_notes(const struct glia_runtime_options *o, bool fused)
{
    uint32_t r = 0;
    if (o->precision == GLIA_PRECISION_FP32)
        r |= GLIA__CG_NOTE(CUDNN_NUMERICAL_NOTE_TENSOR_CORE) | GLIA__CG_NOTE(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) |
             GLIA__CG_NOTE(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) |
             GLIA__CG_NOTE(CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4) | GLIA__CG_NOTE(CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6) |
             GLIA__CG_NOTE(CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13);
    if (o->deterministic) r |= GLIA__CG_NOTE(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC);
    const char *rtc = getenv("GLIA_CUDA_CONV_RTC");  /* off: a plain convolution's engines all precompiled (docs/cuda.md) */
    if (!fused && rtc && !strcmp(rtc, "off")) r |= GLIA__CG_RUNTIME_COMPILED;
    return r;
}

/* The strides of a (d0, d1, d2, d3) tensor in NCHW, or with nhwc in NHWC (KRSC for a filter) */
static void strides4(const int64_t d[4], bool nhwc, int64_t s[4])
{
    s[0] = d[1] * d[2] * d[3];
    s[1] = nhwc ? 1 : d[2] * d[3];
    s[2] = nhwc ? d[3] * d[1] : d[3];
    s[3] = nhwc ? d[1] : 1;
}

/* Seconds on a monotonic clock. */
static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void graph_build_plans(struct glia_layer *l, int d, int64_t src);

/* Direction d's graphs at the layer's key, built once: with src -1 their plans from the heuristics of the fuller mode
 * (B) when the autotuner times them (up to MAX_GRAPH_PLANS - FALLBACK_PLANS a graph, then up to FALLBACK_PLANS from
 * cuDNN's fallback list, as PyTorch's two sources), else the instant mode's (A) first, or where it makes none the
 * fallback list's first: each within the workspace the legacy choice may take (the timing's cap, or [runtime]
 * workspace_mb), best first. A forward with an epilogue (key.epi: relu and bias in training, a batchnorm's affine in
 * evaluation) has two graphs, the fused one's plans listed first: the autotuner times both, each plain plan with the
 * epilogue's second pass added, since cuDNN's fused engines can be slower than the plain convolution and that pass.
 * Of the fused graph only the heuristics' first FUSED_PLANS: its engines compile at run time (a small model's first
 * epoch took 7x as long with the fusions and CUDA graphs as without either, on an H200). Without the autotuner only
 * the plain graph is built (nothing measured says a fused plan would pay). With src a PLAN_SRC (a choice another
 * layer of the key made, from the cache), that plan alone: building plans is what costs, and a network repeats its
 * shapes. A graph cuDNN refuses leaves no plan: the legacy algorithm runs. The debug log says how many plans it built
 * and in what time. */
static void graph_build(struct glia_layer *l, int d, int64_t src)
{
    struct conv_graph *q = &((struct cuda_conv *)l->state)->graph[d];
    if (q->built) return;
    double t0 = seconds_now();
    graph_build_plans(l, d, src);
    int nf = 0, nc = 0;
    for (int i = 0; i < q->n; i++) nf += plan_fused(q, i);
    for (int f = 0; f < 2; f++) nc += q->g[f] ? q->g[f]->n_compiled : 0;
    glia_log(l->ctx, GLIA_LOG_DEBUG, "[%s] conv2d %s: %d graph plan%s (%d fused, %d compiled at run time) built in %.1f ms%s",
             l->name, dir_name[d], q->n, q->n == 1 ? "" : "s", nf, nc, 1e3 * (seconds_now() - t0),
             src >= 0 ? " (the cached choice's alone)" : "");
}

/* graph_build's work: graph `fused` (0 or 1) of direction d made in q->g[fused], its plans appended to q's list. */
static cudnnStatus_t graph_make(struct glia_layer *l, int d, int fused, int64_t src)
{
    struct cuda_conv *p = l->state;
    const struct glia_conv2d_attrs *g = l->attrs;
    const struct glia_runtime_options *o = &l->backend->options;
    struct conv_graph *q = &p->graph[d];
    const struct conv_key *k = &p->key;
    bool one = src >= 0;
    if (!(q->g[fused] = malloc(sizeof *q->g[fused]))) return CUDNN_STATUS_ALLOC_FAILED;
    struct glia__cg *cg = q->g[fused];
    glia__cg_init(cg, glia__cuda_of(l->backend)->dnn);
    cudnnDataType_t dt = data_type((enum glia_precision)k->precision);
    int64_t xd[4] = {k->N, g->C, k->H, k->W}, wd[4] = {g->F, g->C / g->g, g->kh, g->kw};
    int64_t yd[4] = {k->N, g->F, glia_conv2d_out_h(g, k->H), glia_conv2d_out_w(g, k->W)}, xs[4], ws[4], ys[4];
    strides4(xd, k->nhwc, xs);
    strides4(wd, k->nhwc, ws);
    strides4(yd, k->nhwc, ys);
    size_t cap = o->cudnn_benchmark ? tune_cap(l) : o->workspace_limit;
    const int64_t pad[2] = {g->ph, g->pw}, stride[2] = {g->s, g->s}, dil[2] = {g->d, g->d};
    cudnnBackendDescriptor_t x = glia__cg_tensor(cg, 1, dt, xd, xs, false, false, false);
    cudnnBackendDescriptor_t w = glia__cg_tensor(cg, 2, dt, wd, ws, false, false, false);
    cudnnBackendDescriptor_t y = glia__cg_tensor(cg, 3, dt, yd, ys, false, false, false);
    if (!fused) {
        glia__cg_conv(cg, (enum glia__cg_conv_dir)d, x, w, y, pad, stride, dil, 1.0f, 0.0f);
    } else {  /* conv -> f32 (virtual) [+ b] [- mean, * scale, + shift] [relu] -> y, the vectors (1, F, 1, 1) */
        const int64_t bd[4] = {1, g->F, 1, 1};
        int64_t bs[4];
        strides4(bd, k->nhwc, bs);  /* in the activations' layout, as cuDNN's fusion samples give it */
        cudnnPointwiseMode_t mode[5];
        int64_t operand[5];  /* the uid of each operation's second operand, 0: none */
        int n_pw = 0;
        if (k->epi & EPI_BIAS) mode[n_pw] = CUDNN_POINTWISE_ADD, operand[n_pw++] = 4;
        if (k->epi & EPI_AFFINE) {
            mode[n_pw] = CUDNN_POINTWISE_SUB, operand[n_pw++] = 5;
            mode[n_pw] = CUDNN_POINTWISE_MUL, operand[n_pw++] = 6;
            mode[n_pw] = CUDNN_POINTWISE_ADD, operand[n_pw++] = 7;
        }
        if (k->epi & EPI_RELU) mode[n_pw] = CUDNN_POINTWISE_RELU_FWD, operand[n_pw++] = 0;
        cudnnBackendDescriptor_t v = glia__cg_tensor(cg, 10, CUDNN_DATA_FLOAT, yd, ys, true, false, false);
        glia__cg_conv(cg, GLIA__CG_CONV_FWD, x, w, v, pad, stride, dil, 1.0f, 0.0f);
        for (int j = 0; j < n_pw; j++) {  /* each into a virtual f32 tensor of its own, the last into y */
            cudnnBackendDescriptor_t b =
                operand[j] ? glia__cg_tensor(cg, operand[j], CUDNN_DATA_FLOAT, bd, bs, false, false, false) : NULL;
            cudnnBackendDescriptor_t out =
                j == n_pw - 1 ? y : glia__cg_tensor(cg, 11 + j, CUDNN_DATA_FLOAT, yd, ys, true, false, false);
            glia__cg_pointwise(cg, mode[j], CUDNN_DATA_FLOAT, v, b, NULL, out, -1);
            v = out;
        }
    }
    cudnnBackendHeurMode_t mode = one ? PLAN_SRC_MODE(src) : o->cudnn_benchmark ? CUDNN_HEUR_MODE_B : CUDNN_HEUR_MODE_A;
    int64_t index[MAX_GRAPH_PLANS];
    int got = 0, more = 0;
    int max = one || !o->cudnn_benchmark ? 1 : fused ? FUSED_PLANS : MAX_GRAPH_PLANS - FALLBACK_PLANS;
    cudnnStatus_t e = glia__cg_plans(cg, mode, refused_notes(o, fused), (int64_t)cap, max, one ? PLAN_SRC_INDEX(src) : -1,
                                     q->plan + q->n, q->ws + q->n, index, &got);
    for (int j = 0; j < got; j++) q->src[q->n + j] = PLAN_SRC(fused, mode, index[j]);
    q->n += got;
    if (!one && e == CUDNN_STATUS_SUCCESS && ((o->cudnn_benchmark && !fused) || got == 0)) {
        /* PyTorch's second source of configurations: timed beside the heuristics' with the autotuner (a plain graph),
         * else where the heuristics' made no plan */
        cudnnStatus_t f = glia__cg_plans(cg, CUDNN_HEUR_MODE_FALLBACK, refused_notes(o, fused), (int64_t)cap,
                                         o->cudnn_benchmark && !fused ? FALLBACK_PLANS : 1, -1, q->plan + q->n,
                                         q->ws + q->n, index, &more);
        for (int j = 0; j < more; j++) q->src[q->n + j] = PLAN_SRC(fused, CUDNN_HEUR_MODE_FALLBACK, index[j]);
        q->n += more;
        if (got + more == 0) e = f;
    }
    return e != CUDNN_STATUS_SUCCESS ? e : got + more == 0 ? CUDNN_STATUS_NOT_SUPPORTED : CUDNN_STATUS_SUCCESS;
}

static void graph_build_plans(struct glia_layer *l, int d, int64_t src)
{
    struct cuda_conv *p = l->state;
    struct conv_graph *q = &p->graph[d];
    const struct conv_key *k = &p->key;
    bool fused = d == FWD && k->epi && (src >= 0 ? PLAN_SRC_FUSED(src) : l->backend->options.cudnn_benchmark);
    q->built = true;
    if (fused && graph_make(l, d, 1, src) != CUDNN_STATUS_SUCCESS && src < 0) {
        glia_log(l->ctx, p->told_unfused ? GLIA_LOG_DEBUG : GLIA_LOG_INFO,
                 "[%s] conv2d: cuDNN's graph API has no fused plan for the convolution%s%s%s at this shape (%s); they "
                 "run as a second pass over the output", l->name, k->epi & EPI_BIAS ? " + bias" : "",
                 k->epi & EPI_AFFINE ? " + batchnorm (evaluation)" : "", k->epi & EPI_RELU ? " + relu" : "",
                 q->g[1] && q->g[1]->err != CUDNN_STATUS_SUCCESS ? q->g[1]->what : "no plan");
        p->told_unfused = true;  /* once a layer: its other shapes (evaluation batches, a last short batch) say it at debug level */
    }
    if (src >= 0 && PLAN_SRC_FUSED(src)) return;
    cudnnStatus_t e = graph_make(l, d, 0, src);
    if (e != CUDNN_STATUS_SUCCESS)
        glia_log(l->ctx, GLIA_LOG_DEBUG, "[%s] conv2d %s: cuDNN's graph API made no plan for the plain convolution (%s); "
                 "%s", l->name, dir_name[d], q->g[0] && q->g[0]->err != CUDNN_STATUS_SUCCESS ? q->g[0]->what
                 : "none within the workspace", q->n ? "its fused plans are timed" : "the legacy API runs");
}

/* Whether p is NULL or 16-byte aligned, as the graph's tensors say they are (parameters are views into a packed arena:
 * fp32 weights read in place may be aligned to 4 bytes only). */
static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Row r (mean, scale, shift) of the affine as the graph reads it (k->caf: rows of F floats, or of F rounded up to
 * 256 bytes in the aligned copy). */
static const float *affine_row(const struct call *k, int64_t F, int r)
{
    size_t row = k->o_af != NONE ? align_up((size_t)F * sizeof(float)) : (size_t)F * sizeof(float);
    return k->caf ? (const float *)((const char *)k->caf + (size_t)r * row) : NULL;
}

/* Whether direction d's graph plan i can run on k's operands into out with workspace ws: all 16-byte aligned. */
static bool graph_aligned(const struct glia_layer *l, const struct call *k, int d, int i, const void *out,
                          const void *ws)
{
    const struct cuda_conv *p = l->state;
    bool fused = plan_fused(&p->graph[d], i);
    const void *t1 = d == BWD_DATA ? out : k->cx, *t2 = d == BWD_FILTER ? out : k->cw, *t3 = d == FWD ? out : k->cdy;
    return aligned16(t1) && aligned16(t2) && aligned16(t3) && aligned16(ws) &&
           (!fused || !(p->key.epi & EPI_BIAS) || aligned16(k->cb)) &&
           (!fused || !(p->key.epi & EPI_AFFINE) || aligned16(k->caf));  /* graph_run's uids 1 to 7 (affine_row) */
}

/* Direction d's graph plan i on k's operands into out (y, dx or dw), with workspace ws. */
static cudnnStatus_t graph_run(struct glia_layer *l, const struct call *k, int d, int i, void *out, void *ws)
{
    struct cuda_conv *p = l->state;
    const struct glia_conv2d_attrs *g = l->attrs;
    int64_t uids[7] = {1, 2, 3};
    void *ptrs[7] = {(void *)k->cx, (void *)k->cw, out};  /* FWD: x, w, y */
    int n = 3;
    if (d == BWD_DATA) ptrs[0] = out, ptrs[2] = (void *)k->cdy;
    if (d == BWD_FILTER) ptrs[1] = out, ptrs[2] = (void *)k->cdy;
    bool fused = plan_fused(&p->graph[d], i);
    if (fused && (p->key.epi & EPI_BIAS)) uids[n] = 4, ptrs[n++] = (void *)k->cb;
    for (int r = 0; r < 3 && fused && (p->key.epi & EPI_AFFINE); r++)
        uids[n] = 5 + r, ptrs[n++] = (void *)affine_row(k, g->F, r);
    return glia__cg_execute(glia__cuda_of(l->backend)->dnn, p->graph[d].plan[i], n, uids, ptrs, ws);
}

/* The milliseconds of direction d's graph plan i (GRAPH_TIMED_RUNS runs after one untimed), writing into probe with
 * workspace ws; a negative value when it fails. Blocks until done. */
static float graph_time(struct glia_layer *l, const struct call *k, int d, int i, void *probe, void *ws)
{
    struct glia__cuda *c = glia__cuda_of(l->backend);
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms = -1.0f;
    bool ok = cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess &&
              graph_run(l, k, d, i, probe, ws) == CUDNN_STATUS_SUCCESS &&
              cudaEventRecord(e0, c->stream) == cudaSuccess;
    for (int r = 0; r < GRAPH_TIMED_RUNS && ok; r++) ok = graph_run(l, k, d, i, probe, ws) == CUDNN_STATUS_SUCCESS;
    if (ok && cudaEventRecord(e1, c->stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
        cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess)
        ms /= GRAPH_TIMED_RUNS;
    else
        ms = -1.0f;
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaGetLastError();  /* a failed plan leaves nothing behind for the next call */
    return ms;
}

/* The forward's epilogue over out (cuDNN's type): out = relu(a(out + b)) with the key's bias (k->b), affine (k->af)
 * and relu; none without them. */
static cudaError_t epilogue(struct glia_layer *l, const struct call *k, void *out)
{
    const struct glia_conv2d_attrs *g = l->attrs;
    const struct conv_key *key = &((struct cuda_conv *)l->state)->key;
    int64_t HW = glia_conv2d_out_h(g, key->H) * glia_conv2d_out_w(g, key->W);
    if (!key->epi) return cudaSuccess;
    return glia__conv_bias_add(out, k->t, key->epi & EPI_BIAS ? k->b : NULL, key->epi & EPI_AFFINE ? k->af : NULL, k->ny,
                               g->F, HW, k->nhwc, key->epi & EPI_RELU, glia__cuda_of(l->backend)->stream);
}

/* The milliseconds of the forward's epilogue over probe (GRAPH_TIMED_RUNS runs), what a fused plan saves beside the
 * legacy algorithm's time; 0 when it cannot be timed. Blocks until done. */
static float epilogue_time(struct glia_layer *l, const struct call *k, void *probe)
{
    struct glia__cuda *c = glia__cuda_of(l->backend);
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms = 0.0f;
    bool ok = cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess &&
              cudaEventRecord(e0, c->stream) == cudaSuccess;
    for (int r = 0; r < GRAPH_TIMED_RUNS && ok; r++) ok = epilogue(l, k, probe) == cudaSuccess;
    if (ok && cudaEventRecord(e1, c->stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
        cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess)
        ms /= GRAPH_TIMED_RUNS;
    else
        ms = 0.0f;
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaGetLastError();
    return ms;
}

/* Bytes of dir's output (what cudnnFind*Ex writes). */
static size_t output_bytes(const struct call *k, int dir)
{
    return (size_t)(dir == FWD ? k->ny : dir == BWD_DATA ? k->nx : k->nw) * k->es;
}

/* Convert the operands k's layout puts in scratch at base; point cx, cw, cdy at what cuDNN reads. */
static glia_status convert(struct glia_layer *l, struct call *k, char *base)
{
    const struct glia_conv2d_attrs *g = l->attrs;
    cudaStream_t s = glia__cuda_of(l->backend)->stream;
    glia_status st = GLIA_OK;
    k->cx = k->x, k->cw = k->w, k->cdy = k->dy;
    if (k->o_x != NONE) {
        CUDA_TRY(l->ctx, glia__conv_convert(base + k->o_x, k->t, k->x, GLIA__CONV_F32, 1, 1, k->nx, 0.0f, s));
        k->cx = base + k->o_x;
    }
    if (k->o_w != NONE || k->wc_convert) {  /* KCRS (F, C/g, kh*kw) -> KRSC (F, kh*kw, C/g) for NHWC, else a copy */
        int64_t B = k->nhwc ? g->F : 1, rows = k->nhwc ? g->C / g->g : 1, cols = k->nw / B / rows;
        void *to = k->wc_convert ? k->wc : base + k->o_w;
        /* the kept copy: made already where this pass's start made every layer's (params.c) */
        bool made = k->wc_convert &&
                    glia__wcopy_take(glia__cuda_of(l->backend), &((struct cuda_conv *)l->state)->wc_id, k->w, to, k->t,
                                     B, rows, cols);
        if (!made) CUDA_TRY(l->ctx, glia__conv_convert(to, k->t, k->w, GLIA__CONV_F32, B, rows, cols, 0.0f, s));
        k->cw = to;
    } else if (k->wc) {
        k->cw = k->wc;
    }
    if (k->o_dy != NONE) {
        CUDA_TRY(l->ctx, glia__conv_convert(base + k->o_dy, k->t, k->dy, GLIA__CONV_F32, 1, 1, k->ny, 0.0f, s));
        k->cdy = base + k->o_dy;
    }
    k->cb = k->b;
    if (k->o_b != NONE) {  /* the bias as a fused graph reads it: 16-byte aligned */
        CUDA_TRY(l->ctx, cudaMemcpyAsync(base + k->o_b, k->b, (size_t)g->F * sizeof(float), cudaMemcpyDeviceToDevice, s));
        k->cb = (const float *)(base + k->o_b);
    }
    k->caf = k->af;
    if (k->o_af != NONE) {  /* its three rows, each 16-byte aligned */
        size_t row = align_up((size_t)g->F * sizeof(float));
        for (int r = 0; r < 3; r++)
            CUDA_TRY(l->ctx, cudaMemcpyAsync(base + k->o_af + (size_t)r * row, k->af + r * g->F,
                                             (size_t)g->F * sizeof(float), cudaMemcpyDeviceToDevice, s));
        k->caf = (const float *)(base + k->o_af);
    }
fail:
    return st;
}

static void log_choice(struct glia_layer *l, int dir, const struct conv_key *key, const struct algo_choice *ch)
{
    glia_log(l->ctx, GLIA_LOG_DEBUG,
             "[%s] conv2d %s: cuDNN %s chose %s%s (%s math, %zu bytes of workspace)%s for input %lldx%lldx%lldx%lld "
             "%s %s, %lld filters %lldx%lld stride %lld padding %lldx%lld dilation %lld groups %lld, "
             "workspace limit %lld",
             l->name, dir_name[dir], key->benchmark ? "benchmark" : "heuristics",
             key->deterministic ? "deterministic " : "", algo_name(dir, ch->algo), math_name(ch->math), ch->workspace,
             ch->plan < 0 ? "" : PLAN_SRC_FUSED(ch->plan_src) ? ", run through its graph API's fused plan instead"
                                                               : ", run through its graph API's plan instead",
             (long long)key->N, (long long)key->C, (long long)key->H, (long long)key->W,
             key->nhwc ? "channels_last" : "contiguous", glia_precision_name((enum glia_precision)key->precision),
             (long long)key->F, (long long)key->kh,
             (long long)key->kw, (long long)key->s, (long long)key->ph, (long long)key->pw, (long long)key->d,
             (long long)key->g, (long long)key->workspace_limit);
}

static glia_status no_algorithm(struct glia_layer *l, int dir)
{
    return glia_error(l->ctx, GLIA_EUNSUPPORTED,
                      "[%s] conv2d %s: cuDNN has no %salgorithm for this shape at precision %s within a workspace "
                      "limit of %zu bytes",
                      l->name, dir_name[dir], l->backend->options.deterministic ? "deterministic " : "",
                      glia_precision_name(l->backend->options.precision), l->backend->options.workspace_limit);
}

/* Record dir's choice (made now, or found in the cache) and set its math type. */
static glia_status use_choice(struct glia_layer *l, int dir, const struct algo_choice *ch)
{
    struct cuda_conv *p = l->state;
    glia_status st = GLIA_OK;
    CUDNN_TRY(l->ctx, cudnnSetConvolutionMathType(p->conv[dir], ch->math));
    p->choice[dir] = *ch;
    p->chosen[dir] = true;
fail:
    return st;
}

/* Make sure each direction in dirs (a bit mask) has its algorithm: from the layer, the cache, the
 * heuristics, or timing (cudnn_benchmark, whose larger scratch is then given back); then take
 * scratch for k's layout and the largest workspace those algorithms need, and prepare the
 * operands in it. *base: the scratch. */
static glia_status setup(struct glia_layer *l, struct call *k, unsigned dirs, char **base)
{
    struct cuda_conv *p = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    const struct glia_runtime_options *o = &l->backend->options;
    glia_status st = GLIA_OK;
    unsigned tune = 0;
    size_t tune_ws[N_DIRS] = {0}, tune_bytes = 0;
    for (int d = 0; d < N_DIRS; d++) {
        if (!(dirs & (1u << d)) || p->chosen[d]) continue;
        struct conv_key key = p->key;
        struct algo_choice ch;
        key.dir = d;
        if (cache_find(&key, &ch)) {
            if ((st = use_choice(l, d, &ch))) return st;
            continue;
        }
        CUDNN_TRY(l->ctx, cudnnSetConvolutionMathType(p->conv[d], default_math(o->precision)));
        if (o->cudnn_benchmark) {  /* timed below, once the operands are in scratch */
            tune |= 1u << d;
            if ((st = tune_workspace(l, d, tune_cap(l), &tune_ws[d])))
                return st;
            graph_build(l, d, -1);  /* its plans are timed too, within the same cap */
            for (int i = 0; i < p->graph[d].n; i++)
                if ((size_t)p->graph[d].ws[i] > tune_ws[d]) tune_ws[d] = (size_t)p->graph[d].ws[i];
            size_t need = align_up(output_bytes(k, d)) + tune_ws[d];
            if (need > tune_bytes) tune_bytes = need;
            continue;
        }
        struct perf r[MAX_PERF];
        int n = 0;
        float ms;
        if ((st = heuristics(l, d, r, &n))) return st;
        if (!pick(l, d, r, n, o->workspace_limit, &ch, &ms)) return no_algorithm(l, d);
        graph_build(l, d, -1);  /* the graph heuristics' first plan, as PyTorch runs a convolution without its benchmark */
        if (p->graph[d].n > 0) {
            ch.plan = 0;
            ch.plan_src = p->graph[d].src[0];
            if ((size_t)p->graph[d].ws[0] > ch.workspace) ch.workspace = (size_t)p->graph[d].ws[0];
        }
        cache_put(&key, &ch);
        log_choice(l, d, &key, &ch);
        if ((st = use_choice(l, d, &ch))) return st;
    }
    char *b = NULL;
    if (tune) {
        if ((st = glia__cuda_scratch_exact(c, k->end + tune_bytes, (void **)&b)) || (st = convert(l, k, b))) return st;
        for (int d = 0; d < N_DIRS; d++) {
            if (!(tune & (1u << d))) continue;
            struct conv_key key = p->key;
            struct algo_choice ch;
            struct perf r[MAX_PERF];
            int n = 0;
            char *probe = b + k->end, *ws = probe + align_up(output_bytes(k, d));
            key.dir = d;
            float best;
            double t0 = seconds_now();
            if ((st = benchmark(l, k, d, probe, tune_ws[d] ? ws : NULL, tune_ws[d], r, &n))) return st;
            double t1 = seconds_now();
            if (!pick(l, d, r, n, tune_ws[d], &ch, &best)) return no_algorithm(l, d);
            /* the second pass a forward's epilogue takes after the legacy algorithm or a plain plan */
            float epi = d == FWD && p->key.epi ? epilogue_time(l, k, probe) : 0.0f;
            best += epi;
            for (int i = 0; i < p->graph[d].n; i++) {  /* a faster graph plan runs */
                if (!graph_aligned(l, k, d, i, probe, ws)) continue;
                float t = graph_time(l, k, d, i, probe, tune_ws[d] ? ws : NULL);
                if (t < 0.0f) continue;  /* it did not run */
                if (!plan_fused(&p->graph[d], i)) t += epi;
                if (t < best) best = t, ch.plan = i;
            }
            glia_log(l->ctx, GLIA_LOG_DEBUG, "[%s] conv2d %s: timed %d legacy algorithm%s in %.1f ms and %d graph plan%s in "
                     "%.1f ms", l->name, dir_name[d], n, n == 1 ? "" : "s", 1e3 * (t1 - t0), p->graph[d].n,
                     p->graph[d].n == 1 ? "" : "s", 1e3 * (seconds_now() - t1));
            if (ch.plan >= 0) ch.plan_src = p->graph[d].src[ch.plan];
            if (ch.plan >= 0 && (size_t)p->graph[d].ws[ch.plan] > ch.workspace)
                ch.workspace = (size_t)p->graph[d].ws[ch.plan];
            cache_put(&key, &ch);
            log_choice(l, d, &key, &ch);
            if ((st = use_choice(l, d, &ch))) return st;
        }
    }
    size_t ws = 0;
    for (int d = 0; d < N_DIRS; d++)
        if ((dirs & (1u << d)) && p->choice[d].workspace > ws) ws = p->choice[d].workspace;
    char *run = NULL;
    bool kept = tune && !glia__cuda_scratch_shrink(c, k->end + ws);  /* the timing's scratch, unless given back */
    if (k->end + ws && (st = glia__cuda_scratch(c, k->end + ws, (void **)&run))) return st;
    if ((!kept || run != b) && (st = convert(l, k, run))) return st;  /* a kept one holds the timing's copies */
    k->ws = ws ? run + k->end : NULL;
    k->ws_size = ws;
    *base = run;
fail:
    return st;
}

/* ---- running a direction: the chosen graph plan or the legacy algorithm ---- */

/* Direction d's legacy algorithm on k's operands: out = conv + *beta out. */
static glia_status legacy_run(struct glia_layer *l, const struct call *k, int d, const float *beta, void *out)
{
    struct cuda_conv *p = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    glia_status st = GLIA_OK;
    const float one = 1.0f;
    int a = p->choice[d].algo;
    if (d == FWD)
        CUDNN_TRY(l->ctx, cudnnConvolutionForward(c->dnn, &one, p->x, k->cx, p->w, k->cw, p->conv[FWD],
                                                  (cudnnConvolutionFwdAlgo_t)a, k->ws, k->ws_size, beta, p->y, out));
    else if (d == BWD_DATA)
        CUDNN_TRY(l->ctx, cudnnConvolutionBackwardData(c->dnn, &one, p->w, k->cw, p->y, k->cdy, p->conv[BWD_DATA],
                                                       (cudnnConvolutionBwdDataAlgo_t)a, k->ws, k->ws_size, beta, p->x,
                                                       out));
    else
        CUDNN_TRY(l->ctx, cudnnConvolutionBackwardFilter(c->dnn, &one, p->x, k->cx, p->y, k->cdy, p->conv[BWD_FILTER],
                                                         (cudnnConvolutionBwdFilterAlgo_t)a, k->ws, k->ws_size, beta,
                                                         p->w, out));
fail:
    return st;
}

/* The first run of direction d's graph plan at this shape (its first layer: the others take it as checked), checked:
 * the plan writes out, the legacy algorithm a copy (through the epilogue where the plan is fused), and the two must
 * agree within what different algorithms' sums differ by (relative to the largest value: 1e-4 at fp32, 2e-2 where
 * tensor cores round the inputs), compared on the device (two floats come back). The output is the plan's, as on every
 * later run; if they do not agree, the legacy algorithm's instead, one warning, and this shape runs the legacy
 * algorithm from now on (every layer: the cached choice says so); likewise where the plan does not run. Waits for the
 * device. */
static glia_status graph_verify(struct glia_layer *l, const struct call *k, int d, void *out)
{
    struct cuda_conv *p = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    struct conv_graph *q = &p->graph[d];
    int i = p->choice[d].plan;
    const float zero = 0.0f;
    int64_t n = d == FWD ? k->ny : d == BWD_DATA ? k->nx : k->nw;
    bool fused = plan_fused(q, i);
    struct conv_key key = p->key;
    key.dir = d;
    cudnnStatus_t ran = graph_run(l, k, d, i, out, k->ws);
    if (ran != CUDNN_STATUS_SUCCESS) {
        cudaGetLastError();  /* refused at launch: nothing ran */
        glia_log(l->ctx, GLIA_LOG_WARN, "[%s] conv2d %s: cuDNN's graph plan %d did not run (%s); this shape runs the "
                 "legacy API", l->name, dir_name[d], i, cudnnGetErrorString(ran));
        p->choice[d].plan = -1;
        cache_put(&key, &p->choice[d]);
        return legacy_run(l, k, d, &zero, out);  /* the second pass adds a fused plan's epilogue (epi_done is false) */
    }
    if (fused) p->epi_done = true;
    struct glia_tensor *t = NULL;
    size_t half = align_up((size_t)n * k->es);  /* the legacy algorithm's output, then the comparison's two floats */
    glia_status st =
        glia_tensor_new(l->backend, GLIA_F32, &(struct glia_shape){1, {(int64_t)(half / sizeof(float)) + 2}}, &t);
    if (!st) st = legacy_run(l, k, d, &zero, t->data);
    if (!st && fused) CUDA_TRY(l->ctx, epilogue(l, k, t->data));
    if (!st) {
        float *r = (float *)((char *)t->data + half), h[2];
        CUDA_TRY(l->ctx, glia__conv_compare(r, t->data, out, k->t, n, c->stream));
        CUDA_TRY(l->ctx, cudaMemcpyAsync(h, r, sizeof h, cudaMemcpyDeviceToHost, c->stream));
        CUDA_TRY(l->ctx, cudaStreamSynchronize(c->stream));
        double worst = h[0], big = h[1];
        double tol = (l->backend->options.precision == GLIA_PRECISION_FP32 ? 1e-4 : 2e-2) * big + 1e-6;
        if (worst <= tol) {
            q->verified = true;
            p->choice[d].verified = true;  /* the other layers of this shape take the plan as checked */
        } else {
            glia_log(l->ctx, GLIA_LOG_WARN,
                     "[%s] conv2d %s: cuDNN's graph plan %d differs from the legacy algorithm (%s) by %.3g (largest "
                     "value %.3g); this shape runs the legacy API", l->name, dir_name[d], i,
                     algo_name(d, p->choice[d].algo), worst, big);
            CUDA_TRY(l->ctx, cudaMemcpyAsync(out, t->data, (size_t)n * k->es, cudaMemcpyDeviceToDevice, c->stream));
            p->choice[d].plan = -1;
        }
        cache_put(&key, &p->choice[d]);
    }
fail:
    glia_tensor_release(t);
    return st;
}

/* Direction d into out, adding *beta times what it holds: the graph plan chosen for it where beta is 0 and its tensors
 * are 16-byte aligned (its first run in the layer checked against the legacy algorithm), the legacy algorithm
 * otherwise. Under a CUDA graph capture ([runtime] cuda_graph) only a plan already built and checked runs (building
 * and checking are not capturable; the pass before a capture does both), and its set is pinned: a replay may run the
 * plan for as long as the layer lives, so the set is never evicted. */
static glia_status run_dir(struct glia_layer *l, const struct call *k, int d, const float *beta, void *out)
{
    struct cuda_conv *p = l->state;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    struct conv_graph *q = &p->graph[d];
    glia_status st = GLIA_OK;
    int i = p->choice[d].plan;
    bool capturing = glia__cuda_capturing(c);
    if (i >= 0 && !capturing && !q->built) {  /* a choice from the cache (another layer's): that plan alone, built here */
        graph_build(l, d, p->choice[d].plan_src);
        /* the legacy algorithm where cuDNN gave no plan there this time, or one that needs more workspace than chosen */
        i = p->choice[d].plan = q->n > 0 && (size_t)q->ws[0] <= p->choice[d].workspace ? 0 : -1;
        q->verified = i == 0 && p->choice[d].verified;  /* another layer checked it */
    }
    bool aligned = graph_aligned(l, k, d, i, out, k->ws);
    if (*beta != 0.0f || i < 0 || i >= q->n || !aligned || (capturing && !q->verified))
        return legacy_run(l, k, d, beta, out);
    if (!q->verified) return graph_verify(l, k, d, out);
    if (capturing && p->set) p->set->pinned = true;
    CUDNN_TRY(l->ctx, graph_run(l, k, d, i, out, k->ws));
    if (plan_fused(q, i)) p->epi_done = true;
fail:
    return st;
}

/* ---- forward and backward ---- */

/* Whether a call on activations of x's type computes on converted copies (bf16/fp16 precision, f32 activations):
 * then a fused graph would round its epilogue's result to the half type, which the second pass computes in f32 on
 * the f32 output, so no epilogue goes into the graph. */
static bool on_copies(const struct glia_layer *l, const struct glia_tensor *x)
{
    enum glia_precision p = l->backend->options.precision;
    return (p == GLIA_PRECISION_BF16 || p == GLIA_PRECISION_FP16) && x->dtype == GLIA_F32;
}

/* The epilogue a training forward of the layer adds (its backward's key too): its relu, with its bias. */
static int64_t train_epi(const struct glia_layer *l, const struct glia_tensor *x)
{
    const struct glia_conv2d_attrs *g = l->attrs;
    return g->act == GLIA_CONV2D_ACT_RELU && !on_copies(l, x) ? EPI_RELU | (g->b >= 0 ? EPI_BIAS : 0) : 0;
}

/* A call's tensors checked (the input x, the output y, and in backward the output gradient dy and the input
 * gradient dx, which may be NULL: dense f32 CUDA tensors of the layer's shapes, in one format, which *nhwc gives),
 * and the descriptors set for them. */
static glia_status begin_call(struct glia_layer *l, const struct glia_tensor *x, const struct glia_tensor *y,
                              const struct glia_tensor *dy, const struct glia_tensor *dx, int64_t epi, bool eval,
                              bool *nhwc)
{
    const struct glia_conv2d_attrs *g = l->attrs;
    glia_status st;
    if (x->shape.ndim != 4)
        return glia_error(l->ctx, GLIA_ESHAPE, "[%s] conv2d: needs a 4-D (N, %lld, H, W) input", l->name,
                          (long long)g->C);
    int64_t N = x->shape.dim[0], H = x->shape.dim[2], W = x->shape.dim[3];
    int64_t OH = glia_conv2d_out_h(g, H), OW = glia_conv2d_out_w(g, W);
    if (y->dtype != x->dtype || (dy && dy->dtype != x->dtype) || (dx && dx->dtype != x->dtype))
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] conv2d: the input is %s but another tensor of the call is not",
                          l->name, glia_dtype_name(x->dtype));
    if ((st = check_tensor(l, x, "the input", N, g->C, H, W)) ||
        (st = check_tensor(l, y, "the output", N, g->F, OH, OW)) ||
        (dy && (st = check_tensor(l, dy, "the output gradient", N, g->F, OH, OW))) ||
        (dx && (st = check_tensor(l, dx, "the input gradient", N, g->C, H, W))) ||
        (st = call_format(l, (const struct glia_tensor *[]){x, y, dy, dx}, 4, nhwc)))
        return st;
    return plan(l, N, H, W, *nhwc, epi, eval);
}

/* The fields of k every call has: precision, layout, operands, sizes; no scratch yet. */
static void call_init(struct glia_layer *l, struct call *k, bool nhwc, const struct glia_tensor *x,
                      const struct glia_tensor *y, const struct glia_tensor *dy)
{
    const struct glia_conv2d_attrs *g = l->attrs;
    enum glia_precision prec = l->backend->options.precision;
    memset(k, 0, sizeof *k);
    k->lp = prec == GLIA_PRECISION_BF16 || prec == GLIA_PRECISION_FP16;
    k->hio = k->lp && x->dtype != GLIA_F32;  /* begin_call checked it is the precision's */
    k->nhwc = nhwc;
    k->t = conv_type(prec);
    k->es = k->lp ? 2 : 4;
    k->x = x->data;  /* f32, or with hio already cuDNN's type */
    k->w = l->params[g->w].value->data;
    k->dy = dy ? dy->data : NULL;
    k->nx = glia_tensor_numel(x);
    k->nw = glia_tensor_numel(l->params[g->w].value);
    k->ny = glia_tensor_numel(y);
    k->o_x = k->o_w = k->o_dy = k->o_y = k->o_dx = k->o_dw = k->o_db = k->o_b = k->o_af = NONE;
}

/* The layer's kept copy of W for call k (a half type, or KRSC): made on the first forward that needs one (and again
 * if the type or layout changes), converted by that forward's convert(); a backward reads it where the forward before
 * it made it so (*ready), else converts into scratch as before (st: an allocation that failed). */
static glia_status kept_w(struct glia_layer *l, struct call *k, bool forward, bool *ready)
{
    struct cuda_conv *p = l->state;
    enum glia_dtype dt = k->t == GLIA__CONV_BF16 ? GLIA_BF16 : k->t == GLIA__CONV_F16 ? GLIA_F16 : GLIA_F32;
    bool match = p->wc && p->wc->dtype == dt && p->wc_nhwc == k->nhwc && glia_tensor_numel(p->wc) == k->nw;
    *ready = false;
    if (!forward) {
        if (match) k->wc = p->wc->data, *ready = true;
        return GLIA_OK;
    }
    if (!match) {
        glia__wcopy_drop(glia__cuda_of(l->backend), &p->wc_id);
        glia_tensor_release(p->wc);
        p->wc = NULL;
        glia_status st = glia_tensor_new(l->backend, dt, &(struct glia_shape){1, {k->nw}}, &p->wc);
        if (st) return st;
        p->wc_nhwc = k->nhwc;
    }
    k->wc = p->wc->data;
    k->wc_convert = *ready = true;
    return GLIA_OK;
}

static glia_status cuda_conv_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    struct cuda_conv *p = l->state;
    const struct glia_conv2d_attrs *g = l->attrs;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    const struct glia_tensor *x = a->in[0], *y = a->out;
    bool nhwc;
    const float *bias = g->b >= 0 ? l->params[g->b].value->data : NULL;
    bool relu = g->act == GLIA_CONV2D_ACT_RELU || (a->affine && a->affine_relu);
    int64_t epi = !a->affine ? train_epi(l, x)
                  : on_copies(l, x) ? 0 : EPI_AFFINE | (bias ? EPI_BIAS : 0) | (a->affine_relu ? EPI_RELU : 0);
    if (a->affine && (glia_tensor_numel(a->affine) != 3 * g->F || a->affine->dtype != GLIA_F32 ||
                      a->affine->device.type != GLIA_DEVICE_CUDA))
        return glia_error(l->ctx, GLIA_EINVAL, "[%s] conv2d: the evaluation's affine must be a (3, %lld) f32 CUDA tensor",
                          l->name, (long long)g->F);
    glia_status st = begin_call(l, x, y, NULL, NULL, epi, !a->train, &nhwc);
    if (st) return st;
    struct call k;
    call_init(l, &k, nhwc, x, y, NULL);
    bool copies = k.lp && !k.hio;  /* x in, y out through converted copies */
    k.b = bias;
    k.af = a->affine ? a->affine->data : NULL;
    /* what a fused graph reads, where it is not 16-byte aligned: copies */
    if ((epi & EPI_BIAS) && ((uintptr_t)bias & 15u)) k.o_b = carve(&k, (size_t)g->F * sizeof(float));
    if ((epi & EPI_AFFINE) && (((uintptr_t)k.af & 15u) || g->F % 4))
        k.o_af = carve(&k, 3 * align_up((size_t)g->F * sizeof(float)));
    p->epi_done = false;
    if (copies) k.o_x = carve(&k, (size_t)k.nx * k.es);
    bool made;  /* W converted into the layer's kept copy (always, where it is converted at all) */
    if ((k.lp || k.nhwc) && (st = kept_w(l, &k, true, &made))) return st;
    if (copies) k.o_y = carve(&k, (size_t)k.ny * k.es);
    char *base;
    if ((st = setup(l, &k, 1u << FWD, &base))) return st;
    const float one = 1.0f, zero = 0.0f;
    void *out = copies ? base + k.o_y : y->data;
    if ((st = run_dir(l, &k, FWD, &zero, out))) return st;
    if (copies) CUDA_TRY(l->ctx, glia__conv_convert(y->data, GLIA__CONV_F32, out, k.t, 1, 1, k.ny, 0.0f, c->stream));
    bool second = !p->epi_done;  /* else a fused plan (or its check) wrote the epilogue */
    if (second && ((bias && k.hio) || relu || k.af))  /* y(N, F, OH, OW) = act(a(y + b(F))) in y's type, rounded once */
        CUDA_TRY(l->ctx, glia__conv_bias_add(y->data, k.hio ? k.t : GLIA__CONV_F32, bias, k.af, glia_tensor_numel(y),
                                             g->F, y->shape.dim[2] * y->shape.dim[3], k.nhwc, relu, c->stream));
    else if (second && bias)
        CUDNN_TRY(l->ctx, cudnnAddTensor(c->dnn, &one, p->bias, bias, &one, p->y32, y->data));
fail:
    return st;
}

static glia_status cuda_conv_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    const struct glia_conv2d_attrs *g = l->attrs;
    struct glia__cuda *c = glia__cuda_of(l->backend);
    const struct glia_tensor *x = a->in[0], *y = a->out, *dy = a->dout;
    struct glia_tensor *dx = a->din[0];
    bool nhwc;
    glia_status st = begin_call(l, x, y, dy, dx, train_epi(l, x), false, &nhwc);
    if (st) return st;
    int64_t N = x->shape.dim[0], OH = y->shape.dim[2], OW = y->shape.dim[3];
    struct glia_param *pw = &l->params[g->w], *pb = g->b >= 0 ? &l->params[g->b] : NULL;
    struct call k;
    call_init(l, &k, nhwc, x, y, dy);
    bool copies = k.lp && !k.hio;  /* x, dy in and dx out through converted copies */
    size_t o_dy32 = NONE;          /* hio: dy in f32 for the bias gradient's sums */
    bool relu = g->act == GLIA_CONV2D_ACT_RELU;
    enum glia__conv_type dyt = k.hio ? k.t : GLIA__CONV_F32;  /* dy's type, and y's */
    size_t o_dym = relu ? carve(&k, (size_t)k.ny * (k.hio ? k.es : sizeof(float))) : NONE;  /* dy past the relu */
    if (copies) k.o_dy = carve(&k, (size_t)k.ny * k.es);
    bool kept = false;  /* W as the forward converted it */
    if (dx && (k.lp || k.nhwc) && (st = kept_w(l, &k, false, &kept))) return st;
    if (dx && (k.lp || k.nhwc) && !kept) k.o_w = carve(&k, (size_t)k.nw * k.es);
    if (copies) k.o_x = carve(&k, (size_t)k.nx * k.es);
    if (dx && copies) k.o_dx = carve(&k, (size_t)k.nx * k.es);
    if (k.lp || k.nhwc) k.o_dw = carve(&k, (size_t)k.nw * k.es);
    if (pb) {
        k.bias = k.nhwc ? glia__cuda_bn_geom(N * OH * OW, g->F, 1) : glia__cuda_bn_geom(N, g->F, OH * OW);
        k.o_db = carve(&k, (size_t)k.bias.S * (size_t)g->F * sizeof(float));
        if (k.hio) o_dy32 = carve(&k, (size_t)k.ny * sizeof(float));
    }
    char *base;
    if ((st = setup(l, &k, (1u << BWD_FILTER) | (dx ? 1u << BWD_DATA : 0u), &base))) return st;
    const float zero = 0.0f;
    const void *dyb = dy->data;  /* the output gradient through the activation's backward: dy where y > 0 */
    if (relu) {
        dyb = base + o_dym;
        CUDA_TRY(l->ctx, glia__conv_relu_mask(base + o_dym, dyt, dy->data, y->data, dyt, k.ny, c->stream));
        if (copies)  /* the converted copy cuDNN reads, masked too */
            CUDA_TRY(l->ctx, glia__conv_relu_mask(base + k.o_dy, k.t, dy->data, y->data, dyt, k.ny, c->stream));
        else
            k.cdy = dyb;
    }
    /* bias: summed over N, OH, OW of the fp32 output gradient, in a fixed order (the batchnorm's reduction) */
    if (pb && k.hio)
        CUDA_TRY(l->ctx, glia__conv_convert(base + o_dy32, GLIA__CONV_F32, dyb, k.t, 1, 1, k.ny, 0.0f, c->stream));
    if (pb)
        CUDA_TRY(l->ctx, glia__cuda_channel_sum(pb->grad->data, (float *)(base + k.o_db),
                                                k.hio ? (const float *)(base + o_dy32) : (const float *)dyb, k.bias,
                                                glia_param_beta(pb), c->stream));
    /* input gradient: cuDNN adds (beta 1) into an fp32 one, or one of its own type; one through a copy is added when
     * converted */
    if (dx) {
        const float beta = a->din_accumulate[0] ? 1.0f : 0.0f;
        void *out = copies ? base + k.o_dx : dx->data;
        if ((st = run_dir(l, &k, BWD_DATA, copies ? &zero : &beta, out))) return st;
        if (copies)
            CUDA_TRY(l->ctx, glia__conv_convert(dx->data, GLIA__CONV_F32, out, k.t, 1, 1, k.nx, beta, c->stream));
    }
    /* filter gradient: straight into the fp32 KCRS gradient, or through scratch (KRSC and/or low
     * precision), transposed and converted back with the contract's beta */
    const float beta = glia_param_beta(pw);
    void *out = k.o_dw != NONE ? base + k.o_dw : pw->grad->data;
    if ((st = run_dir(l, &k, BWD_FILTER, k.o_dw != NONE ? &zero : &beta, out))) return st;
    if (k.o_dw != NONE) {  /* KRSC (F, kh*kw, C/g) -> KCRS (F, C/g, kh*kw), or a plain conversion */
        int64_t B = k.nhwc ? g->F : 1, rows = k.nhwc ? g->kh * g->kw : 1, cols = k.nw / B / rows;
        CUDA_TRY(l->ctx, glia__conv_convert(pw->grad->data, GLIA__CONV_F32, out, k.t, B, rows, cols, beta, c->stream));
    }
fail:
    return st;
}

/* activation = relu reads the output in backward (its mask); without an activation the eval forward takes a
 * following batchnorm's affine */
static uint32_t cuda_conv_layer_flags(const struct glia_layer *l)
{
    const struct glia_conv2d_attrs *g = l->attrs;
    uint32_t f = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_HALF;
    return g->act ? f & ~(uint32_t)GLIA_KERNEL_BWD_NO_OUTPUT : f | GLIA_KERNEL_EVAL_AFFINE;
}

static const struct glia_kernel cuda_conv_kernel = {
    .struct_size = sizeof(struct glia_kernel),
    .type = "conv2d",
    .impl = "cudnn",
    .doc = "cuDNN",
    .device_type = GLIA_DEVICE_CUDA,
    .flags = GLIA_KERNEL_CHANNELS_LAST | GLIA_KERNEL_BWD_NO_OUTPUT | GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_HALF,
    .state_size = sizeof(struct cuda_conv),
    .prepare = cuda_conv_prepare,
    .destroy = cuda_conv_destroy,
    .forward = cuda_conv_forward,
    .backward = cuda_conv_backward,
    .layer_flags = cuda_conv_layer_flags,
};

glia_status glia__cuda_register_conv(struct glia_registry *r) { return glia_register_kernel(r, &cuda_conv_kernel); }
