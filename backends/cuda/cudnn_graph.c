/* backends/cuda/cudnn_graph.c — the builder of cudnn_graph.h: each call makes its backend descriptors, sets their
 * attributes and finalizes them, keeping every descriptor for glia__cg_free; the first failure stops the rest and
 * says where. Not a plan cache and not any particular graph (attention_cudnn.c builds the fused attention's). */
#include <stdio.h>
#include <string.h>
#include "cudnn_graph.h"

void glia__cg_init(struct glia__cg *g, cudnnHandle_t handle)
{
    memset(g, 0, sizeof *g);
    g->handle = handle;
    g->err = CUDNN_STATUS_SUCCESS;
}

void glia__cg_free(struct glia__cg *g)
{
    for (int i = g->n_desc - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(g->desc[i]);
    g->n_desc = g->n_ops = 0;
}

/* Records the first failure: status e of what. Returns whether e is a success. */
static bool ok(struct glia__cg *g, cudnnStatus_t e, const char *what)
{
    if (e == CUDNN_STATUS_SUCCESS) return true;
    if (g->err == CUDNN_STATUS_SUCCESS) {
        g->err = e;
        snprintf(g->what, sizeof g->what, "%s: %s", what, cudnnGetErrorString(e));
    }
    return false;
}

/* A new descriptor of type t, kept for glia__cg_free; NULL after a failure. */
static cudnnBackendDescriptor_t make(struct glia__cg *g, cudnnBackendDescriptorType_t t, const char *what)
{
    if (g->err != CUDNN_STATUS_SUCCESS) return NULL;
    if (g->n_desc == GLIA__CG_MAX_DESC) {
        ok(g, CUDNN_STATUS_NOT_SUPPORTED, "too many descriptors for one graph");
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    if (!ok(g, cudnnBackendCreateDescriptor(t, &d), what)) return NULL;
    g->desc[g->n_desc++] = d;
    return d;
}

/* Sets n values of attribute a (type t) on d; a no-op after a failure. */
static void set(struct glia__cg *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what)
{
    if (g->err == CUDNN_STATUS_SUCCESS && d) ok(g, cudnnBackendSetAttribute(d, a, t, n, v), what);
}

static void finalize(struct glia__cg *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (g->err == CUDNN_STATUS_SUCCESS && d) ok(g, cudnnBackendFinalize(d), what);
}

static void add_op(struct glia__cg *g, cudnnBackendDescriptor_t op)
{
    if (g->err != CUDNN_STATUS_SUCCESS || !op) return;
    if (g->n_ops == GLIA__CG_MAX_OPS) {
        ok(g, CUDNN_STATUS_NOT_SUPPORTED, "too many operations for one graph");
        return;
    }
    g->ops[g->n_ops++] = op;
}

cudnnBackendDescriptor_t glia__cg_tensor(struct glia__cg *g, int64_t uid, cudnnDataType_t t, const int64_t dim[4],
                                         const int64_t stride[4], bool is_virtual, bool by_value, bool f16x16)
{
    char what[64];
    snprintf(what, sizeof what, "tensor %lld", (long long)uid);
    cudnnBackendDescriptor_t d = make(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    int64_t align = 16;
    set(g, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t, what);
    set(g, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, what);
    set(g, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride, what);
    set(g, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    set(g, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
    set(g, d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
    if (by_value) set(g, d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
    if (f16x16) {
        cudnnBackendTensorReordering_t r = CUDNN_TENSOR_REORDERING_F16x16;
        set(g, d, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &r, what);
    }
    finalize(g, d, what);
    return g->err == CUDNN_STATUS_SUCCESS ? d : NULL;
}

void glia__cg_pointwise(struct glia__cg *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                        cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                        int64_t axis)
{
    char what[64];
    snprintf(what, sizeof what, "pointwise mode %d", (int)mode);
    cudnnBackendDescriptor_t pw = make(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, what);
    if (axis >= 0) set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
    finalize(g, pw, what);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    float one = 1.0f;
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, what);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, what);
    set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, what);
    if (b) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
    if (t) set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, what);
    finalize(g, op, what);
    add_op(g, op);
}

void glia__cg_reduction(struct glia__cg *g, cudnnReduceTensorOp_t op_kind, cudnnBackendDescriptor_t x,
                        cudnnBackendDescriptor_t y)
{
    const char *what = "reduction";
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = make(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
    set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op_kind, what);
    finalize(g, r, what);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, what);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    finalize(g, op, what);
    add_op(g, op);
}

void glia__cg_matmul(struct glia__cg *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                     cudnnBackendDescriptor_t c)
{
    const char *what = "matmul";
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t m = make(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    set(g, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
    finalize(g, m, what);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, what);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, what);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, what);
    set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, what);
    finalize(g, op, what);
    add_op(g, op);
}

void glia__cg_bernoulli(struct glia__cg *g, double p_one, cudnnBackendDescriptor_t seed,
                        cudnnBackendDescriptor_t offset, cudnnBackendDescriptor_t y)
{
    const char *what = "rng";
    cudnnRngDistribution_t dist = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
    cudnnBackendDescriptor_t r = make(g, CUDNN_BACKEND_RNG_DESCRIPTOR, what);
    set(g, r, CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, 1, &dist, what);
    set(g, r, CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, CUDNN_TYPE_DOUBLE, 1, &p_one, what);
    finalize(g, r, what);
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR, what);
    set(g, op, CUDNN_ATTR_OPERATION_RNG_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    set(g, op, CUDNN_ATTR_OPERATION_RNG_SEED, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &seed, what);
    set(g, op, CUDNN_ATTR_OPERATION_RNG_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, what);
    set(g, op, CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &offset, what);
    finalize(g, op, what);
    add_op(g, op);
}

void glia__cg_reshape(struct glia__cg *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y)
{
    const char *what = "reshape";
    cudnnBackendDescriptor_t op = make(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    finalize(g, op, what);
    add_op(g, op);
}

void glia__cg_conv(struct glia__cg *g, enum glia__cg_conv_dir dir, cudnnBackendDescriptor_t x,
                   cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y, const int64_t pad[2],
                   const int64_t stride[2], const int64_t dilation[2], float alpha, float beta)
{
    static const char *const names[] = {"convolution forward", "convolution data gradient",
                                        "convolution filter gradient"};
    const char *what = names[dir];
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t dims = 2;
    cudnnBackendDescriptor_t c = make(g, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, what);
    set(g, c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
    set(g, c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, what);
    set(g, c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims, what);
    set(g, c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation, what);
    set(g, c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride, what);
    set(g, c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad, what);
    set(g, c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad, what);
    finalize(g, c, what);
    static const cudnnBackendDescriptorType_t kinds[] = {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                                         CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                                                         CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    /* each direction's attributes: alpha, beta, the convolution, then its w, x and y in that order */
    static const cudnnBackendAttributeName_t attrs[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY}};
    const cudnnBackendAttributeName_t *at = attrs[dir];
    cudnnBackendDescriptor_t op = make(g, kinds[dir], what);
    set(g, op, at[0], CUDNN_TYPE_FLOAT, 1, &alpha, what);
    set(g, op, at[1], CUDNN_TYPE_FLOAT, 1, &beta, what);
    set(g, op, at[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, what);
    set(g, op, at[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w, what);
    set(g, op, at[4], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    set(g, op, at[5], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    finalize(g, op, what);
    add_op(g, op);
}

/* g's operation graph, made on the first call */
static cudnnBackendDescriptor_t op_graph(struct glia__cg *g)
{
    if (g->graph || g->err != CUDNN_STATUS_SUCCESS) return g->graph;
    const char *what = "operation graph";
    cudnnBackendDescriptor_t graph = make(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what);
    set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops, what);
    set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle, what);
    finalize(g, graph, what);
    if (g->err == CUDNN_STATUS_SUCCESS) g->graph = graph;
    return g->graph;
}

/* Whether engine configuration cfg's engine has a numerical note in refuse (an error reads as so: not kept), or
 * (GLIA__CG_RUNTIME_COMPILED in refuse) is compiled at run time; *compiled: whether it is (false where cuDNN does not
 * say). */
static bool refused(cudnnBackendDescriptor_t cfg, uint32_t refuse, bool *compiled)
{
    cudnnBackendDescriptor_t eng = NULL;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    int64_t n = 0;
    bool no = refuse != 0, got = false;
    *compiled = false;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return no;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) ==
        CUDNN_STATUS_SUCCESS) {
        got = true;
        if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                     CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, behavior) == CUDNN_STATUS_SUCCESS)
            for (int64_t i = 0; i < n; i++) *compiled = *compiled || behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    }
    if (got && refuse && cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                                  CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) == CUDNN_STATUS_SUCCESS) {
        no = *compiled && (refuse & GLIA__CG_RUNTIME_COMPILED);
        for (int64_t i = 0; i < n; i++) no = no || (notes[i] < 31 && (refuse & GLIA__CG_NOTE(notes[i])));
    }
    cudnnBackendDestroyDescriptor(eng);
    return no;
}

#define CG_MAX_CONFIGS 64  /* heuristic results looked at */

cudnnStatus_t glia__cg_plans(struct glia__cg *g, cudnnBackendHeurMode_t mode, uint32_t refuse, int64_t max_workspace,
                             int max, int64_t only, cudnnBackendDescriptor_t *plans, int64_t *workspace, int64_t *index,
                             int *n)
{
    *n = 0;
    cudnnBackendDescriptor_t graph = op_graph(g);
    const char *what = "heuristics";
    cudnnBackendDescriptor_t heur = make(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what);
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, what);
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, what);
    finalize(g, heur, what);
    if (g->err != CUDNN_STATUS_SUCCESS) return g->err;
    int64_t count = 0, got = 0;
    if (!ok(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                        NULL), what))
        return g->err;
    if (count > CG_MAX_CONFIGS) count = CG_MAX_CONFIGS;
    cudnnBackendDescriptor_t cfg[CG_MAX_CONFIGS];
    for (int64_t i = 0; i < count; i++) cfg[i] = make(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, what);
    if (g->err == CUDNN_STATUS_SUCCESS && count > 0)
        ok(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                       cfg), what);
    if (g->err != CUDNN_STATUS_SUCCESS) return g->err;
    for (int64_t i = only >= 0 ? only : 0; i < got && *n < max && (only < 0 || i == only); i++) {
        bool compiled;
        if (refused(cfg[i], refuse, &compiled)) continue;
        cudnnBackendDescriptor_t p = NULL;
        int64_t ws = 0, k = 0;
        cudnnStatus_t e = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p);
        if (e == CUDNN_STATUS_SUCCESS)
            e = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &g->handle);
        if (e == CUDNN_STATUS_SUCCESS)
            e = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                         &cfg[i]);
        if (e == CUDNN_STATUS_SUCCESS) e = cudnnBackendFinalize(p);
        if (e == CUDNN_STATUS_SUCCESS)
            e = cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &k, &ws);
        if (e == CUDNN_STATUS_SUCCESS && ws <= max_workspace) {
            plans[*n] = p;
            if (index) index[*n] = i;
            workspace[(*n)++] = ws;
            g->n_compiled += compiled;
        } else if (p) {
            cudnnBackendDestroyDescriptor(p);
        }
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t glia__cg_plan(struct glia__cg *g, uint32_t refuse, cudnnBackendDescriptor_t *plan, int64_t *workspace)
{
    int n = 0;
    *plan = NULL;
    *workspace = 0;
    cudnnStatus_t e = glia__cg_plans(g, CUDNN_HEUR_MODE_A, refuse, INT64_MAX, 1, -1, plan, workspace, NULL, &n);
    if (e == CUDNN_STATUS_SUCCESS && n == 0) {
        ok(g, CUDNN_STATUS_NOT_SUPPORTED, refuse & GLIA__CG_NOTE(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
                                              ? "no deterministic engine the heuristics gave makes a plan"
                                              : "no engine the heuristics gave makes a plan");
        return g->err;
    }
    return e;
}

cudnnStatus_t glia__cg_execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, int n, const int64_t *uids,
                               void *const *ptrs, void *workspace)
{
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t e = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (e == CUDNN_STATUS_SUCCESS)
        e = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (e == CUDNN_STATUS_SUCCESS)
        e = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (e == CUDNN_STATUS_SUCCESS)
        e = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    if (e == CUDNN_STATUS_SUCCESS) e = cudnnBackendFinalize(vp);
    if (e == CUDNN_STATUS_SUCCESS) e = cudnnBackendExecute(handle, plan, vp);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    return e;
}
