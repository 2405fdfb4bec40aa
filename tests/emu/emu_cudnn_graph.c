/* tests/emu/emu_cudnn_graph.c — cuDNN's backend (graph) API for the emulation: descriptors keep their attributes,
 * finalizing checks what each kind needs, the heuristics give one configuration whose plan interprets the operation
 * graph on the host (matmul, pointwise with broadcasting, relu among its modes, reductions, reshapes as views,
 * Bernoulli draws), tensor by tensor through their dims and strides, in f32/bf16/f16/i64/bool, each virtual tensor in a buffer of its own.
 * Execution copies the variant pack (by-value scalars by value) and queues the interpretation on the handle's stream.
 * GLIA_EMU_CUDNN_MAX_OPS=N refuses the plan of every graph of more than N operations (the callers' fallbacks).
 * Convolutions (forward, data and filter gradients; groups, strides, dilations) run as direct loops.
 * GLIA_EMU_CUDNN_NONDET=1 notes every engine nondeterministic (the callers' deterministic filters);
 * GLIA_EMU_CUDNN_RTC=1 notes every engine compiled at run time (conv2d's GLIA_CUDA_CONV_RTC=off);
 * GLIA_EMU_CUDNN_CONV_SKEW=1 makes every convolution's result 1.5 times too large (the callers' checks of a plan);
 * GLIA_EMU_CUDNN_MATMUL_SKEW=N makes every matrix product of a graph of more than N operations 1.5 times too large (0:
 * attention's forward and backward graphs, 20: its backward only; the layer's check of a fused run);
 * GLIA_EMU_CUDNN_NO_INSTANT=1 makes the instant heuristics (mode A) give no configuration.
 * Event timing (glia_emu_sim_advance): a run of a graph with a convolution takes 0.8 simulated ms, or
 * GLIA_EMU_CUDNN_FUSED_MS (default 0.5) where the graph also holds other operations (a fused convolution), so that
 * callers timing plans (conv2d's autotuner) meet both a fused plan faster than the plain one and one slower.
 * Destroyed descriptors are kept, marked dead: a queued or captured run of a plan whose graph is gone aborts.
 * Not cuDNN's engines: no fusion, no pattern matching (a graph cuDNN would refuse may run here), loops in double. */
#include <cudnn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

#define MAXD 8     /* dimensions of a tensor */
#define MAXOPS 96  /* operations of a graph */

struct desc {
    cudnnBackendDescriptorType_t type;
    bool final;
    /* tensor */
    cudnnDataType_t dtype;
    int nd;
    int64_t dim[MAXD], stride[MAXD], uid, align;
    bool virt, byval;
    /* pointwise, reduction, rng descriptors */
    cudnnPointwiseMode_t mode;
    int64_t axis;
    cudnnReduceTensorOp_t red;
    double p;
    /* convolution descriptor */
    int64_t pad[2], post[2], cstride[2], dil[2], spatial;
    /* operations: their descriptor and tensors (a convolution's x, w, y: dx, dw, dy in the gradients') */
    struct desc *sub, *x, *b, *t, *y, *seed, *offset, *w;
    double alpha, beta;
    /* graph, heuristics, configuration, plan */
    struct desc *ops[MAXOPS];
    int n_ops;
    struct desc *graph;
    cudnnHandle_t handle;
    /* variant pack */
    int n;
    int64_t uids[64];
    void *ptrs[64];
    cudnnBackendHeurMode_t heur;  /* heuristics: the mode */
    bool dead;  /* destroyed: kept, so that a run queued or captured before finds it dead instead of freed memory */
};

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t t, cudnnBackendDescriptor_t *d)
{
    GLIA_EMU_GUARD;
    struct desc *e = calloc(1, sizeof *e);
    if (!e) return CUDNN_STATUS_ALLOC_FAILED;
    e->type = t;
    e->axis = -1;
    *d = e;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d)
{
    GLIA_EMU_GUARD;
    ((struct desc *)d)->dead = true;  /* never freed: a CUDA graph's replay of a plan whose graph is gone is caught */
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t bad(const char *why, int what)
{
    fprintf(stderr, "emu: cudnnBackend: %s (%d)\n", why, what);
    return CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                                       cudnnBackendAttributeType_t t, int64_t n, const void *v)
{
    GLIA_EMU_GUARD;
    struct desc *e = d;
    const int64_t *i64 = v;
    struct desc *const *ds = v;
    if (e->final) return bad("attribute set on a finalized descriptor", (int)a);
    switch (a) {
    case CUDNN_ATTR_TENSOR_DATA_TYPE: e->dtype = *(const cudnnDataType_t *)v; break;
    case CUDNN_ATTR_TENSOR_DIMENSIONS:
        if (n > MAXD) return bad("too many dimensions", (int)n);
        e->nd = (int)n;
        memcpy(e->dim, v, (size_t)n * sizeof(int64_t));
        break;
    case CUDNN_ATTR_TENSOR_STRIDES: memcpy(e->stride, v, (size_t)n * sizeof(int64_t)); break;
    case CUDNN_ATTR_TENSOR_UNIQUE_ID: e->uid = *i64; break;
    case CUDNN_ATTR_TENSOR_IS_VIRTUAL: e->virt = *(const bool *)v; break;
    case CUDNN_ATTR_TENSOR_IS_BY_VALUE: e->byval = *(const bool *)v; break;
    case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT: e->align = *i64; break;
    case CUDNN_ATTR_TENSOR_REORDERING_MODE:
    case CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1:
    case CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2:
    case CUDNN_ATTR_MATMUL_COMP_TYPE:
    case CUDNN_ATTR_REDUCTION_COMP_TYPE:
    case CUDNN_ATTR_POINTWISE_MATH_PREC:
    case CUDNN_ATTR_RNG_DISTRIBUTION:
    case CUDNN_ATTR_ENGINEHEUR_MODE: e->heur = *(const cudnnBackendHeurMode_t *)v; break;
    case CUDNN_ATTR_POINTWISE_MODE: e->mode = *(const cudnnPointwiseMode_t *)v; break;
    case CUDNN_ATTR_POINTWISE_AXIS: e->axis = *i64; break;
    case CUDNN_ATTR_REDUCTION_OPERATOR: e->red = *(const cudnnReduceTensorOp_t *)v; break;
    case CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY: e->p = *(const double *)v; break;
    case CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR:
    case CUDNN_ATTR_OPERATION_REDUCTION_DESC:
    case CUDNN_ATTR_OPERATION_MATMUL_DESC:
    case CUDNN_ATTR_OPERATION_RNG_DESC: e->sub = ds[0]; break;
    case CUDNN_ATTR_OPERATION_POINTWISE_XDESC:
    case CUDNN_ATTR_OPERATION_REDUCTION_XDESC:
    case CUDNN_ATTR_OPERATION_MATMUL_ADESC:
    case CUDNN_ATTR_OPERATION_RESHAPE_XDESC: e->x = ds[0]; break;
    case CUDNN_ATTR_OPERATION_POINTWISE_BDESC:
    case CUDNN_ATTR_OPERATION_MATMUL_BDESC: e->b = ds[0]; break;
    case CUDNN_ATTR_OPERATION_POINTWISE_TDESC: e->t = ds[0]; break;
    case CUDNN_ATTR_OPERATION_POINTWISE_YDESC:
    case CUDNN_ATTR_OPERATION_REDUCTION_YDESC:
    case CUDNN_ATTR_OPERATION_MATMUL_CDESC:
    case CUDNN_ATTR_OPERATION_RNG_YDESC:
    case CUDNN_ATTR_OPERATION_RESHAPE_YDESC: e->y = ds[0]; break;
    case CUDNN_ATTR_OPERATION_RNG_SEED: e->seed = ds[0]; break;
    case CUDNN_ATTR_CONVOLUTION_COMP_TYPE:
    case CUDNN_ATTR_CONVOLUTION_CONV_MODE:
        if (a == CUDNN_ATTR_CONVOLUTION_CONV_MODE && *(const cudnnConvolutionMode_t *)v != CUDNN_CROSS_CORRELATION)
            return bad("only cross-correlation is emulated", 0);
        break;
    case CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS: e->spatial = *i64; break;
    case CUDNN_ATTR_CONVOLUTION_DILATIONS:
    case CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES:
    case CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS:
    case CUDNN_ATTR_CONVOLUTION_POST_PADDINGS:
        if (n != 2) return bad("a convolution attribute of other than 2 values", (int)a);
        memcpy(a == CUDNN_ATTR_CONVOLUTION_DILATIONS ? e->dil : a == CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES ? e->cstride
               : a == CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS ? e->pad : e->post, v, 2 * sizeof(int64_t));
        break;
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA: {
        double s = t == CUDNN_TYPE_DOUBLE ? *(const double *)v : *(const float *)v;
        bool is_alpha = a == CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA ||
                        a == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA ||
                        a == CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA;
        *(is_alpha ? &e->alpha : &e->beta) = s;
        break;
    }
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC: e->sub = ds[0]; break;
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW: e->w = ds[0]; break;
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X: e->x = ds[0]; break;
    case CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY:
    case CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY: e->y = ds[0]; break;
    case CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC: e->offset = ds[0]; break;
    case CUDNN_ATTR_OPERATIONGRAPH_OPS:
        if (n > MAXOPS) return bad("too many operations", (int)n);
        e->n_ops = (int)n;
        memcpy(e->ops, v, (size_t)n * sizeof(void *));
        break;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    case CUDNN_ATTR_OPERATIONGRAPH_HANDLE:
    case CUDNN_ATTR_EXECUTION_PLAN_HANDLE: e->handle = *(const cudnnHandle_t *)v; break;
#pragma GCC diagnostic pop
    case CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH: e->graph = ds[0]; break;
    case CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG: e->graph = ds[0]->graph; break;
    case CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS:
        if (n > 64) return bad("too many tensors in a variant pack", (int)n);
        e->n = (int)n;
        memcpy(e->uids, v, (size_t)n * sizeof(int64_t));
        break;
    case CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS: memcpy(e->ptrs, v, (size_t)n * sizeof(void *)); break;
    case CUDNN_ATTR_VARIANT_PACK_WORKSPACE: break;
    default: return bad("attribute not emulated", (int)a);
    }
    (void)t;
    return CUDNN_STATUS_SUCCESS;
}

/* Execution plans finalized since the last reset (glia_emu_cudnn_plans_built, found with dlsym): on a GPU building
 * a plan is what costs (cuDNN compiles some engines at run time). */
static long plans_built;

long glia_emu_cudnn_plans_built(bool reset)
{
    return glia_emu_count_take(&plans_built, reset);
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d)
{
    GLIA_EMU_GUARD;
    struct desc *e = d;
    switch (e->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
        if (e->nd < 1 || e->uid == 0) return bad("a tensor needs dimensions and a unique id", (int)e->uid);
        break;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR:
        if (!e->sub || !e->x || !e->y) return bad("an operation without its descriptor, x or y", (int)e->type);
        break;
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR:
        if (!e->sub || !e->x || !e->b || !e->y) return bad("a matmul without a, b or c", 0);
        if (e->x->dim[3] != e->b->dim[2] || e->x->dim[2] != e->y->dim[2] || e->b->dim[3] != e->y->dim[3])
            return bad("matmul shapes do not agree", (int)e->x->uid);
        break;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
        if (e->spatial != 2 || e->cstride[0] < 1 || e->cstride[1] < 1 || e->dil[0] < 1 || e->dil[1] < 1 ||
            e->pad[0] != e->post[0] || e->pad[1] != e->post[1])
            return bad("a convolution other than 2-D with symmetric padding is not emulated", (int)e->spatial);
        break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: {
        const struct desc *c = e->sub, *x = e->x, *w = e->w, *y = e->y;
        if (!c || !x || !w || !y || x->nd != 4 || w->nd != 4 || y->nd != 4)
            return bad("a convolution needs its descriptor and 4-D x, w and y", (int)e->type);
        int64_t g = w->dim[1] > 0 ? x->dim[1] / w->dim[1] : 0;
        int64_t P = (x->dim[2] + 2 * c->pad[0] - c->dil[0] * (w->dim[2] - 1) - 1) / c->cstride[0] + 1;
        int64_t Q = (x->dim[3] + 2 * c->pad[1] - c->dil[1] * (w->dim[3] - 1) - 1) / c->cstride[1] + 1;
        if (g < 1 || x->dim[1] != g * w->dim[1] || w->dim[0] % g || y->dim[0] != x->dim[0] || y->dim[1] != w->dim[0] ||
            y->dim[2] != P || y->dim[3] != Q)
            return bad("convolution shapes do not agree", (int)x->uid);
        break;
    }
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
        if (e->n_ops < 1 || !e->handle) return bad("a graph needs operations and a handle", e->n_ops);
        break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
        if (!e->graph || !e->handle) return bad("a plan needs an engine configuration and a handle", 0);
        const char *most = getenv("GLIA_EMU_CUDNN_MAX_OPS");  /* tests: a graph cuDNN refuses, as it may */
        if (most && e->graph->n_ops > atoi(most)) return CUDNN_STATUS_NOT_SUPPORTED;
        __atomic_fetch_add(&plans_built, 1, __ATOMIC_RELAXED);
        break;
    }
    default: break;
    }
    e->final = true;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const d, cudnnBackendAttributeName_t a,
                                       cudnnBackendAttributeType_t t, int64_t requested, int64_t *count, void *v)
{
    GLIA_EMU_GUARD;
    const struct desc *e = d;
    (void)t;
    if (a == CUDNN_ATTR_ENGINEHEUR_RESULTS) {  /* one configuration: the interpreter; none from the instant mode with
                                                   GLIA_EMU_CUDNN_NO_INSTANT=1 (the callers' other sources) */
        *count = e->heur == CUDNN_HEUR_MODE_A && getenv("GLIA_EMU_CUDNN_NO_INSTANT") ? 0 : 1;
        if (*count == 0) return CUDNN_STATUS_SUCCESS;
        if (requested >= 1 && v) ((struct desc **)v)[0]->graph = e->graph;
        return CUDNN_STATUS_SUCCESS;
    }
    if (a == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
        if (count) *count = 1;
        *(int64_t *)v = 0;
        return CUDNN_STATUS_SUCCESS;
    }
    if (a == CUDNN_ATTR_ENGINECFG_ENGINE) {  /* the interpreter's one engine */
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    if (a == CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE) {  /* none; GLIA_EMU_CUDNN_RTC=1: compiled at run time */
        bool rtc = getenv("GLIA_EMU_CUDNN_RTC") != NULL;
        *count = rtc ? 1 : 0;
        if (rtc && requested >= 1 && v) ((cudnnBackendBehaviorNote_t *)v)[0] = CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
        return CUDNN_STATUS_SUCCESS;
    }
    if (a == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE) {  /* none; GLIA_EMU_CUDNN_NONDET=1: nondeterministic, as atomics make */
        bool nd = getenv("GLIA_EMU_CUDNN_NONDET") != NULL;
        *count = nd ? 1 : 0;
        if (nd && requested >= 1 && v) ((cudnnBackendNumericalNote_t *)v)[0] = CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
        return CUDNN_STATUS_SUCCESS;
    }
    return bad("attribute read not emulated", (int)a);
}

/* ---- the interpretation ---- */

/* A tensor's storage during a run: device memory, a by-value scalar copied, or a virtual buffer of doubles. */
struct store {
    const struct desc *t;
    void *p;        /* memory in t's dtype, or doubles (virtual) */
    bool dbl;       /* p holds doubles */
};

struct run {
    const struct desc *graph;
    int n;
    int64_t uids[64];
    void *ptrs[64];
    unsigned char values[64][8];  /* by-value scalars, copied at execution */
    struct store st[4 * MAXOPS];
    int n_st;
};

static int64_t span(const struct desc *t)
{
    int64_t s = 1;
    for (int i = 0; i < t->nd; i++) s += (t->dim[i] - 1) * t->stride[i];
    return s;
}

static double get(const struct store *s, int64_t off)
{
    if (s->dbl) return ((const double *)s->p)[off];
    switch (s->t->dtype) {
    case CUDNN_DATA_FLOAT: return ((const float *)s->p)[off];
    case CUDNN_DATA_HALF: return (double)((const _Float16 *)s->p)[off];
    case CUDNN_DATA_BFLOAT16: {
        uint32_t u = (uint32_t)((const uint16_t *)s->p)[off] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    case CUDNN_DATA_INT64: return (double)((const int64_t *)s->p)[off];
    default: return ((const float *)s->p)[off];
    }
}

static void put(struct store *s, int64_t off, double v)
{
    if (s->dbl) {
        ((double *)s->p)[off] = s->t->dtype == CUDNN_DATA_BOOLEAN ? (v != 0) : v;
        return;
    }
    switch (s->t->dtype) {
    case CUDNN_DATA_HALF: ((_Float16 *)s->p)[off] = (_Float16)v; break;
    case CUDNN_DATA_BFLOAT16: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        if ((u & 0x7fffffffu) > 0x7f800000u) u = 0x7fc00000u;
        else u += 0x7fffu + ((u >> 16) & 1u);
        ((uint16_t *)s->p)[off] = (uint16_t)(u >> 16);
        break;
    }
    case CUDNN_DATA_INT64: ((int64_t *)s->p)[off] = (int64_t)v; break;
    default: ((float *)s->p)[off] = (float)v; break;
    }
}

/* The storage of tensor t in run r: made on first use (a virtual tensor's buffer, a pack entry otherwise). */
static struct store *store_of(struct run *r, const struct desc *t)
{
    for (int i = 0; i < r->n_st; i++)
        if (r->st[i].t->uid == t->uid) return &r->st[i];
    struct store *s = &r->st[r->n_st++];
    s->t = t;
    if (t->virt) {
        s->p = calloc((size_t)span(t), sizeof(double));
        s->dbl = true;
        return s;
    }
    for (int i = 0; i < r->n; i++)
        if (r->uids[i] == t->uid) s->p = t->byval ? (void *)r->values[i] : r->ptrs[i];
    if (!s->p) fprintf(stderr, "emu: cudnnBackendExecute: tensor %lld is not in the variant pack\n", (long long)t->uid);
    return s;
}

/* Offset in t of the element at 4-D index ix, broadcasting t's dimensions of 1. */
static int64_t at(const struct desc *t, const int64_t ix[4])
{
    int64_t o = 0;
    for (int i = 0; i < t->nd && i < 4; i++) o += (t->dim[i] == 1 ? 0 : ix[i]) * t->stride[i];
    return o;
}

#define FOR4(d) \
    for (int64_t i0 = 0; i0 < (d)[0]; i0++) for (int64_t i1 = 0; i1 < (d)[1]; i1++) \
    for (int64_t i2 = 0; i2 < (d)[2]; i2++) for (int64_t i3 = 0; i3 < (d)[3]; i3++)

static double pointwise(cudnnPointwiseMode_t m, double x, double b, double t, const int64_t ix[4], int64_t axis)
{
    switch (m) {
    case CUDNN_POINTWISE_ADD: return x + b;
    case CUDNN_POINTWISE_SUB: return x - b;
    case CUDNN_POINTWISE_MUL: return x * b;
    case CUDNN_POINTWISE_DIV: return x / b;
    case CUDNN_POINTWISE_EXP: return exp(x);
    case CUDNN_POINTWISE_LOG: return log(x);
    case CUDNN_POINTWISE_IDENTITY: return x;
    case CUDNN_POINTWISE_RELU_FWD: return x > 0 ? x : isnan(x) ? x : 0;
    case CUDNN_POINTWISE_CMP_GE: return x >= b;
    case CUDNN_POINTWISE_CMP_GT: return x > b;
    case CUDNN_POINTWISE_CMP_LT: return x < b;
    case CUDNN_POINTWISE_BINARY_SELECT: return t != 0 ? x : b;
    case CUDNN_POINTWISE_GEN_INDEX: return (double)ix[axis];
    default: fprintf(stderr, "emu: cudnnBackendExecute: pointwise mode %d not emulated\n", (int)m); return NAN;
    }
}

/* splitmix64 of the seed, offset and element: the Bernoulli draws */
static double unit(uint64_t seed, uint64_t i)
{
    uint64_t z = seed + i * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

/* A convolution of op (x (N,C,H,W), w (K,C/g,R,S), y (N,K,P,Q)), into the tensor it writes: y, x (data gradient)
 * or w (filter gradient), as alpha times the sum over its terms plus beta times what it held, the sums in double. */
static long conv_graph_runs;

long glia_emu_cudnn_conv_graph_runs(bool reset)
{
    return glia_emu_count_take(&conv_graph_runs, reset);
}

static void run_conv(struct run *r, const struct desc *op)
{
    double skew = getenv("GLIA_EMU_CUDNN_CONV_SKEW") ? 1.5 : 1.0;  /* tests: a plan whose results are off */
    conv_graph_runs++;
    const struct desc *c = op->sub, *X = op->x, *W = op->w, *Y = op->y;
    int fwd = op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        bwd_data = op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR;
    struct store *x = store_of(r, X), *w = store_of(r, W), *y = store_of(r, Y);
    const struct desc *O = fwd ? Y : bwd_data ? X : W;
    struct store *o = fwd ? y : bwd_data ? x : w;
    int64_t N = X->dim[0], C = X->dim[1], H = X->dim[2], Wd = X->dim[3], K = W->dim[0], Cg = W->dim[1],
            R = W->dim[2], S = W->dim[3], P = Y->dim[2], Q = Y->dim[3], G = C / Cg, Kg = K / G;
    double *acc = calloc((size_t)(O->dim[0] * O->dim[1] * O->dim[2] * O->dim[3]), sizeof *acc);
    if (!acc) {
        fprintf(stderr, "emu: cudnnBackendExecute: out of memory for a convolution\n");
        return;
    }
#define OIX(a, b, cc, d) ((((a) * O->dim[1] + (b)) * O->dim[2] + (cc)) * O->dim[3] + (d))
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t p = 0; p < P; p++)
                for (int64_t q = 0; q < Q; q++) {
                    int64_t g = k / Kg, yo = at(Y, (int64_t[]){n, k, p, q});
                    double dy = fwd ? 0 : get(y, yo), s = 0;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t rr = 0; rr < R; rr++)
                            for (int64_t ss = 0; ss < S; ss++) {
                                int64_t h = p * c->cstride[0] - c->pad[0] + rr * c->dil[0];
                                int64_t v = q * c->cstride[1] - c->pad[1] + ss * c->dil[1], ch = g * Cg + ci;
                                if (h < 0 || h >= H || v < 0 || v >= Wd) continue;
                                int64_t xo = at(X, (int64_t[]){n, ch, h, v}), wo = at(W, (int64_t[]){k, ci, rr, ss});
                                if (fwd) s += get(x, xo) * get(w, wo);
                                else if (bwd_data) acc[OIX(n, ch, h, v)] += dy * get(w, wo);
                                else acc[OIX(k, ci, rr, ss)] += dy * get(x, xo);
                            }
                    if (fwd) acc[OIX(n, k, p, q)] = s;
                }
    FOR4(O->dim) {
        int64_t ix[4] = {i0, i1, i2, i3}, oo = at(O, ix);
        put(o, oo, skew * op->alpha * acc[OIX(i0, i1, i2, i3)] + (op->beta != 0 ? op->beta * get(o, oo) : 0));
    }
#undef OIX
    free(acc);
}

static void run_op(struct run *r, const struct desc *op)
{
    if (op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
        op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
        op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR) {
        run_conv(r, op);
        return;
    }
    const int64_t *d = op->y->dim;
    if (op->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR) {  /* y views x's memory with its dims and strides */
        struct store *x = store_of(r, op->x), *y = &r->st[r->n_st++];
        *y = (struct store){op->y, x->p, x->dbl};
        return;
    }
    struct store *y = store_of(r, op->y);
    switch (op->type) {
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: {
        struct store *x = store_of(r, op->x), *b = op->b ? store_of(r, op->b) : NULL, *t = op->t ? store_of(r, op->t) : NULL;
        FOR4(d) {
            int64_t ix[4] = {i0, i1, i2, i3};
            double v = pointwise(op->sub->mode, get(x, at(op->x, ix)), b ? get(b, at(op->b, ix)) : 0,
                                 t ? get(t, at(op->t, ix)) : 0, ix, op->sub->axis);
            put(y, at(op->y, ix), v);
        }
        break;
    }
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: {
        struct store *x = store_of(r, op->x);
        bool mx = op->sub->red == CUDNN_REDUCE_TENSOR_MAX;
        FOR4(d) put(y, at(op->y, (int64_t[]){i0, i1, i2, i3}), mx ? -INFINITY : 0);
        FOR4(op->x->dim) {
            int64_t ix[4] = {i0, i1, i2, i3}, oy = at(op->y, ix);
            double v = get(x, at(op->x, ix)), w = get(y, oy);
            put(y, oy, mx ? (v > w ? v : w) : w + v);
        }
        break;
    }
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: {
        struct store *a = store_of(r, op->x), *b = store_of(r, op->b);
        int64_t K = op->x->dim[3];
        const char *sk = getenv("GLIA_EMU_CUDNN_MATMUL_SKEW");  /* tests: attention's check of a plan */
        double skew = sk && r->graph->n_ops > atoi(sk) ? 1.5 : 1.0;
        FOR4(d) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += get(a, at(op->x, (int64_t[]){i0, i1, i2, k})) * get(b, at(op->b, (int64_t[]){i0, i1, k, i3}));
            put(y, at(op->y, (int64_t[]){i0, i1, i2, i3}), s * skew);
        }
        break;
    }
    case CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR: {
        struct store *sd = store_of(r, op->seed), *of = store_of(r, op->offset);
        uint64_t seed = (uint64_t)get(sd, 0) * 0x100000001b3ull + (uint64_t)get(of, 0);
        int64_t i = 0;
        FOR4(d) put(y, at(op->y, (int64_t[]){i0, i1, i2, i3}), unit(seed, (uint64_t)i++) < op->sub->p ? 1.0 : 0.0);
        break;
    }
    default: fprintf(stderr, "emu: cudnnBackendExecute: operation %d not emulated\n", (int)op->type);
    }
}

/* Graphs run that hold a convolution and other operations (a fused convolution: conv2d's bias and relu) */
static long fused_conv_runs;

long glia_emu_cudnn_fused_conv_runs(bool reset)
{
    return glia_emu_count_take(&fused_conv_runs, reset);
}

static void run_graph(void *arg)
{
    struct run *r = arg;
    bool conv = false, dead = r->graph->dead;
    for (int i = 0; i < r->graph->n_ops; i++) dead = dead || r->graph->ops[i]->dead;
    if (dead) {  /* on a GPU: freed memory read by a kernel launch, anything may happen */
        fprintf(stderr, "emu: cudnnBackendExecute: a queued or captured run of a plan whose graph was destroyed\n");
        abort();
    }
    for (int i = 0; i < r->graph->n_ops; i++) {
        cudnnBackendDescriptorType_t t = r->graph->ops[i]->type;
        conv = conv || t == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR;
        run_op(r, r->graph->ops[i]);
    }
    if (conv && r->graph->n_ops > 1) fused_conv_runs++;
}

static void run_free(void *arg)
{
    struct run *r = arg;
    for (int i = 0; i < r->n_st; i++)
        if (r->st[i].t->virt && r->st[i].t->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR) {
            bool owner = true;  /* a reshape's view shares its source's buffer */
            for (int j = 0; j < i; j++) owner = owner && r->st[j].p != r->st[i].p;
            if (owner) free(r->st[i].p);
        }
    free(r);
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack)
{
    GLIA_EMU_GUARD;
    const struct desc *p = plan, *v = pack;
    if (!p->final || !v->final) return bad("execute with a plan or variant pack not finalized", 0);
    struct run *r = calloc(1, sizeof *r);
    if (!r) return CUDNN_STATUS_ALLOC_FAILED;
    r->graph = p->graph;
    r->n = v->n;
    memcpy(r->uids, v->uids, sizeof r->uids);
    memcpy(r->ptrs, v->ptrs, sizeof r->ptrs);
    for (int o = 0; o < r->graph->n_ops; o++) {  /* by-value scalars now, device pointers checked */
        const struct desc *op = r->graph->ops[o];
        const struct desc *ts[] = {op->x, op->b, op->t, op->y, op->seed, op->offset, op->w};
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
            const struct desc *t = ts[k];
            if (!t || t->virt) continue;
            int i = 0;
            while (i < r->n && r->uids[i] != t->uid) i++;
            if (i == r->n) {
                free(r);
                return bad("a tensor of the graph is not in the variant pack", (int)t->uid);
            }
            size_t es = t->dtype == CUDNN_DATA_INT64 ? 8 : t->dtype == CUDNN_DATA_FLOAT ? 4 : 2;
            if (t->byval) memcpy(r->values[i], r->ptrs[i], es);
            else if (t->align > 0 && (uintptr_t)r->ptrs[i] % (uintptr_t)t->align) {
                fprintf(stderr, "emu: cudnnBackendExecute: tensor %lld at %p, declared %lld-byte aligned\n",
                        (long long)t->uid, r->ptrs[i], (long long)t->align);
                free(r);
                return bad("a tensor's pointer is not aligned as its descriptor says", (int)t->uid);
            } else if (!glia_emu_is_device(r->ptrs[i], (size_t)span(t) * es)) {
                fprintf(stderr, "emu: cudnnBackendExecute: tensor %lld at %p, %zu bytes\n", (long long)t->uid,
                        r->ptrs[i], (size_t)span(t) * es);
                free(r);
                return bad("a tensor's elements are not all in one block of device memory", (int)t->uid);
            }
        }
    }
    bool conv = false;
    for (int o = 0; o < r->graph->n_ops; o++) {
        cudnnBackendDescriptorType_t t = r->graph->ops[o]->type;
        conv = conv || t == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
               t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
               t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
    }
    const char *fms = getenv("GLIA_EMU_CUDNN_FUSED_MS");
    if (conv) glia_emu_sim_advance(r->graph->n_ops > 1 ? (fms ? atof(fms) : 0.5) : 0.8);
    return glia_emu_submit_host("cudnnBackendExecute", glia_emu_cudnn_stream(handle), run_graph, r, run_free)
               ? CUDNN_STATUS_EXECUTION_FAILED
               : CUDNN_STATUS_SUCCESS;
}
