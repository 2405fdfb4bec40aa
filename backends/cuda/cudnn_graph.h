/* backends/cuda/cudnn_graph.h — a small C builder over cuDNN's backend (graph) API: 4-D tensors, pointwise, reduction,
 * matmul, Bernoulli rng, reshape and convolution (forward, data and filter gradients) operations, the operation graph
 * made into execution plans by the heuristics' configurations, and their execution with a variant pack. Not cuDNN's C++ frontend, and not a cache of plans: callers
 * keep the plans they build (building is slow; running is not). */
#ifndef GLIA_CUDA_CUDNN_GRAPH_H
#define GLIA_CUDA_CUDNN_GRAPH_H

#include <stdbool.h>
#include <stdint.h>
#include <cudnn.h>

#define GLIA__CG_MAX_DESC 192  /* descriptors one graph may make */
#define GLIA__CG_MAX_OPS 64    /* operations one graph may hold */

/* A graph under construction. Every call after a failure does nothing; the first failure stays in err and what. */
struct glia__cg {
    cudnnHandle_t handle;                         /* (borrowed) */
    cudnnBackendDescriptor_t desc[GLIA__CG_MAX_DESC];  /* every descriptor made, destroyed by glia__cg_free */
    int n_desc;
    cudnnBackendDescriptor_t ops[GLIA__CG_MAX_OPS];
    int n_ops;
    cudnnBackendDescriptor_t graph;               /* the operation graph, once made (glia__cg_plans) */
    cudnnStatus_t err;                            /* CUDNN_STATUS_SUCCESS until a call fails */
    int n_compiled;                               /* plans made of engines cuDNN compiles at run time */
    char what[192];                               /* which call failed, and on what */
};

void glia__cg_init(struct glia__cg *g, cudnnHandle_t handle);
/* Destroys every descriptor the graph made (not a plan glia__cg_plan handed out). */
void glia__cg_free(struct glia__cg *g);

/* A tensor of element type t, dims and strides (4 each), unique id uid: virtual (lives inside the graph), by value (a
 * host scalar in the variant pack), f16x16 (cuDNN's F16x16 reordering, as the fused attention's probabilities
 * have). 16-byte aligned. NULL after a failure. */
cudnnBackendDescriptor_t glia__cg_tensor(struct glia__cg *g, int64_t uid, cudnnDataType_t t, const int64_t dim[4],
                                         const int64_t stride[4], bool is_virtual, bool by_value, bool f16x16);
/* y = mode(x[, b[, t]]) computed in prec (b, t NULL for fewer operands; axis >= 0 for GEN_INDEX: the dimension whose
 * index each element gets). */
void glia__cg_pointwise(struct glia__cg *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                        cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                        int64_t axis);
/* y = op over the dimensions where y has 1 and x more, in f32 */
void glia__cg_reduction(struct glia__cg *g, cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x,
                        cudnnBackendDescriptor_t y);
/* c = a b, batched over the first two dimensions, in f32 */
void glia__cg_matmul(struct glia__cg *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                     cudnnBackendDescriptor_t c);
/* y = Bernoulli(p_one) draws from the seed and offset tensors (1 element of i64 each, on the device) */
void glia__cg_bernoulli(struct glia__cg *g, double p_one, cudnnBackendDescriptor_t seed,
                        cudnnBackendDescriptor_t offset, cudnnBackendDescriptor_t y);
/* y = x seen with y's dims and strides (a transpose) */
void glia__cg_reshape(struct glia__cg *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);

/* The three convolutions of a 2-D cross-correlation (as conv2d: x (N,C,H,W), w (K,C/groups,R,S), y (N,K,P,Q); the
 * groups follow from C and w's second dimension), computed in f32:
 *   GLIA__CG_CONV_FWD         y  = alpha conv(x, w) + beta y
 *   GLIA__CG_CONV_BWD_DATA    dx = alpha conv^T(dy, w) + beta dx   (x is dx, y is dy)
 *   GLIA__CG_CONV_BWD_FILTER  dw = alpha conv'(x, dy) + beta dw    (w is dw, y is dy) */
enum glia__cg_conv_dir { GLIA__CG_CONV_FWD = 0, GLIA__CG_CONV_BWD_DATA, GLIA__CG_CONV_BWD_FILTER };
void glia__cg_conv(struct glia__cg *g, enum glia__cg_conv_dir dir, cudnnBackendDescriptor_t x,
                   cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y, const int64_t pad[2],
                   const int64_t stride[2], const int64_t dilation[2], float alpha, float beta);

/* The operations so far as one graph, made into an execution plan by the first of the heuristics' (mode A)
 * configurations that finalizes and whose engine has no numerical note in refuse (as glia__cg_plans): *plan (owned:
 * cudnnBackendDestroyDescriptor) and the *workspace bytes it runs with. The graph's first failure, or
 * CUDNN_STATUS_NOT_SUPPORTED when no configuration works (what says so). */
cudnnStatus_t glia__cg_plan(struct glia__cg *g, uint32_t refuse, cudnnBackendDescriptor_t *plan, int64_t *workspace);

/* The operations so far as one graph (made once; later calls reuse it), and up to max execution plans from the
 * configurations the heuristics of mode give, best first (CUDNN_HEUR_MODE_A: instant; CUDNN_HEUR_MODE_B: the fuller
 * ranking; CUDNN_HEUR_MODE_FALLBACK: engines that work for more graphs, seldom fast), skipping those that do not
 * finalize, those whose workspace exceeds max_workspace and the engines with a numerical note in refuse (bit 1 << note:
 * GLIA__CG_NOTE(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) for [runtime] deterministic, TENSOR_CORE and
 * DOWN_CONVERT_INPUTS for strict fp32; GLIA__CG_RUNTIME_COMPILED, the engines compiled at run time): plans[0 .. *n) (owned: cudnnBackendDestroyDescriptor) with their workspace
 * bytes, and where index is not NULL each one's position in the heuristics' list in index[0 .. *n); only >= 0 looks
 * at that position alone (a plan chosen before, built again without the others). *n may be 0 (CUDNN_STATUS_SUCCESS:
 * the heuristics offered nothing that fits); the graph's first failure otherwise. */
#define GLIA__CG_NOTE(note) (1u << (unsigned)(note))
/* In refuse beside the numerical notes: the engines cuDNN compiles when their plan is made
 * (CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION: seconds a plan, where a precompiled engine's takes milliseconds). */
#define GLIA__CG_RUNTIME_COMPILED (1u << 31)
cudnnStatus_t glia__cg_plans(struct glia__cg *g, cudnnBackendHeurMode_t mode, uint32_t refuse, int64_t max_workspace,
                             int max, int64_t only, cudnnBackendDescriptor_t *plans, int64_t *workspace, int64_t *index,
                             int *n);

/* Runs plan on handle's stream with the n tensors whose unique ids are uids at ptrs (device memory, or host scalars
 * for by-value tensors) and the workspace. */
cudnnStatus_t glia__cg_execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, int n, const int64_t *uids,
                               void *const *ptrs, void *workspace);

#endif
