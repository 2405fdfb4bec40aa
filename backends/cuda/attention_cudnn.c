/* backends/cuda/attention_cudnn.c — the fused attention's operation graphs, as cuDNN's flash engines recognize them
 * (the pattern of its frontend's flash attention samples): forward S = Q Kᵀ, scaled, the causal mask made in the
 * graph (index generation, compare, select), softmax as max, subtract, exp, sum, divide with the statistics max + log
 * sum kept, a Bernoulli(1) dropout, O = P V; backward the probabilities recomputed from the statistics, dV = Pᵀ dO,
 * dP = dO Vᵀ, dS = P (dP - rowsum(dO O)), dQ = dS K (through an f32 accumulator), dK = dSᵀ Q. Tensors are read and
 * written in place in glia's (N, T, 3, H, D) qkv and (N, T, H, D) output. Not the layer (attention.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "attention_cudnn.h"
#include "cudnn_graph.h"

/* Unique ids of the tensors the variant packs name. */
enum {
    U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_MASK_VALUE, U_SEED, U_OFFSET, U_DROP_SCALE,
    U_DQ, U_DK, U_DV, U_DO, U_SUM, U_KEEP_P, U_DQ_ACC,
    U_VIRTUAL = 100  /* virtual tensors from here */
};

/* Dims and strides of the tensors of shape s. */
struct layout {
    int64_t q[4], kt[4], k[4], v[4], vt[4], o[4], s[4], st[4], row[4], one[4];       /* strides */
    int64_t d_q[4], d_kt[4], d_s[4], d_row[4], d_one[4];                             /* dims */
};

static void layout_of(const struct glia__sdpa *s, struct layout *L)
{
    int64_t B = s->B, H = s->H, T = s->T, D = s->D, C3 = 3 * H * D;
    const int64_t q[4] = {T * C3, D, C3, 1}, kt[4] = {T * C3, D, 1, C3}, o[4] = {T * H * D, D, H * D, 1};
    const int64_t S[4] = {H * T * T, T * T, T, 1}, St[4] = {H * T * T, T * T, 1, T}, row[4] = {H * T, T, 1, 1};
    const int64_t one[4] = {1, 1, 1, 1};
    memcpy(L->q, q, sizeof q);
    memcpy(L->k, q, sizeof q);
    memcpy(L->v, q, sizeof q);
    memcpy(L->kt, kt, sizeof kt);
    memcpy(L->vt, kt, sizeof kt);
    memcpy(L->o, o, sizeof o);
    memcpy(L->s, S, sizeof S);
    memcpy(L->st, St, sizeof St);
    memcpy(L->row, row, sizeof row);
    memcpy(L->one, one, sizeof one);
    const int64_t dq[4] = {B, H, T, D}, dkt[4] = {B, H, D, T}, ds[4] = {B, H, T, T}, drow[4] = {B, H, T, 1};
    memcpy(L->d_q, dq, sizeof dq);
    memcpy(L->d_kt, dkt, sizeof dkt);
    memcpy(L->d_s, ds, sizeof ds);
    memcpy(L->d_row, drow, sizeof drow);
    memcpy(L->d_one, one, sizeof one);
}

/* A virtual f32 (B, H, T, T) tensor: the scores, probabilities and their gradients. */
static cudnnBackendDescriptor_t vs(struct glia__cg *g, const struct layout *L, int64_t *uid)
{
    return glia__cg_tensor(g, (*uid)++, CUDNN_DATA_FLOAT, L->d_s, L->s, true, false, false);
}

/* A virtual f32 (B, H, T, 1) tensor: a per-row value. */
static cudnnBackendDescriptor_t vrow(struct glia__cg *g, const struct layout *L, int64_t *uid)
{
    return glia__cg_tensor(g, (*uid)++, CUDNN_DATA_FLOAT, L->d_row, L->row, true, false, false);
}

/* The causal mask on scores x: entries above the diagonal (column > row) become the mask value. Returns the masked
 * scores. */
static cudnnBackendDescriptor_t causal(struct glia__cg *g, const struct layout *L, int64_t *uid,
                                       cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t mask_value)
{
    cudnnBackendDescriptor_t r = vs(g, L, uid), c = vs(g, L, uid), y = vs(g, L, uid);
    cudnnBackendDescriptor_t keep = glia__cg_tensor(g, (*uid)++, CUDNN_DATA_BOOLEAN, L->d_s, L->s, true, false, false);
    glia__cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, r, 2);
    glia__cg_pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, c, 3);
    glia__cg_pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, r, c, NULL, keep, -1);
    glia__cg_pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, mask_value, keep, y, -1);
    return y;
}

/* Bernoulli(1) dropout of probabilities p (what the flash engines' pattern has; the layer runs dropout > 0
 * unfused): the mask into *mask, the kept and scaled probabilities in the activations' type returned. */
static cudnnBackendDescriptor_t dropout(struct glia__cg *g, const struct glia__sdpa *s, const struct layout *L,
                                        int64_t *uid, cudnnBackendDescriptor_t p, cudnnBackendDescriptor_t *mask)
{
    cudnnBackendDescriptor_t seed = glia__cg_tensor(g, U_SEED, CUDNN_DATA_INT64, L->d_one, L->one, false, false, false);
    cudnnBackendDescriptor_t offset =
        glia__cg_tensor(g, U_OFFSET, CUDNN_DATA_INT64, L->d_one, L->one, false, false, false);
    cudnnBackendDescriptor_t scale =
        glia__cg_tensor(g, U_DROP_SCALE, s->type, L->d_one, L->one, false, true, false);
    *mask = vs(g, L, uid);
    cudnnBackendDescriptor_t kept = glia__cg_tensor(g, (*uid)++, s->type, L->d_s, L->s, true, false, true);
    cudnnBackendDescriptor_t y = glia__cg_tensor(g, (*uid)++, s->type, L->d_s, L->s, true, false, false);
    glia__cg_bernoulli(g, 1.0, seed, offset, *mask);
    glia__cg_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, p, *mask, NULL, kept, -1);
    glia__cg_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, kept, scale, NULL, y, -1);
    return y;
}

/* A graph's descriptors, kept with its plan (made with calloc: glia__cg_init then fills it). */
static struct glia__cg *graph_new(cudnnHandle_t h)
{
    struct glia__cg *g = calloc(1, sizeof *g);
    if (g) glia__cg_init(g, h);
    return g;
}

static void graph_free(struct glia__cg *g)
{
    if (!g) return;
    glia__cg_free(g);
    free(g);
}

/* The first failure of g into why (and g freed); on success g goes to *keep. Its status. */
static cudnnStatus_t done(struct glia__cg *g, cudnnStatus_t e, const char *which, char *why, size_t n,
                          struct glia__cg **keep)
{
    if (e != CUDNN_STATUS_SUCCESS) {
        snprintf(why, n, "%s graph: %s", which, g->what[0] ? g->what : "refused");
        graph_free(g);
        return e;
    }
    *keep = g;
    return e;
}

cudnnStatus_t glia__sdpa_build_fwd(cudnnHandle_t h, struct glia__sdpa *s, bool train, char *why, size_t n)
{
    struct glia__cg *g = graph_new(h);
    if (!g) {
        snprintf(why, n, "out of host memory");
        return CUDNN_STATUS_ALLOC_FAILED;
    }
    struct layout L;
    int64_t uid = U_VIRTUAL;
    layout_of(s, &L);
    cudnnBackendDescriptor_t q = glia__cg_tensor(g, U_Q, s->type, L.d_q, L.q, false, false, false);
    cudnnBackendDescriptor_t kt = glia__cg_tensor(g, U_K, s->type, L.d_kt, L.kt, false, false, false);
    cudnnBackendDescriptor_t v = glia__cg_tensor(g, U_V, s->type, L.d_q, L.v, false, false, false);
    cudnnBackendDescriptor_t o = glia__cg_tensor(g, U_O, s->type, L.d_q, L.o, false, false, false);
    cudnnBackendDescriptor_t scale = glia__cg_tensor(g, U_SCALE, CUDNN_DATA_FLOAT, L.d_one, L.one, false, true, false);
    cudnnBackendDescriptor_t mask_value =
        glia__cg_tensor(g, U_MASK_VALUE, CUDNN_DATA_FLOAT, L.d_one, L.one, false, true, false);
    cudnnBackendDescriptor_t stats =
        glia__cg_tensor(g, train ? U_STATS : uid++, CUDNN_DATA_FLOAT, L.d_row, L.row, !train, false, false);
    /* S = Q Kᵀ · scale, masked */
    cudnnBackendDescriptor_t S = vs(g, &L, &uid), Ss = vs(g, &L, &uid);
    glia__cg_matmul(g, q, kt, S);
    glia__cg_pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, S, scale, NULL, Ss, -1);
    cudnnBackendDescriptor_t Sm = causal(g, &L, &uid, Ss, mask_value);
    /* softmax, keeping max + log(sum) */
    cudnnBackendDescriptor_t mx = vrow(g, &L, &uid), sub = vs(g, &L, &uid), e = vs(g, &L, &uid);
    cudnnBackendDescriptor_t sum = vrow(g, &L, &uid), lg = vrow(g, &L, &uid);
    cudnnBackendDescriptor_t P = glia__cg_tensor(g, uid++, CUDNN_DATA_FLOAT, L.d_s, L.s, true, false, true);
    glia__cg_reduction(g, CUDNN_REDUCE_TENSOR_MAX, Sm, mx);
    glia__cg_pointwise(g, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, Sm, mx, NULL, sub, -1);
    glia__cg_pointwise(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, sub, NULL, NULL, e, -1);
    glia__cg_reduction(g, CUDNN_REDUCE_TENSOR_ADD, e, sum);
    glia__cg_pointwise(g, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, NULL, NULL, lg, -1);
    glia__cg_pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, mx, lg, NULL, stats, -1);
    glia__cg_pointwise(g, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, sum, NULL, P, -1);
    /* O = dropout(P) V */
    cudnnBackendDescriptor_t mask;
    cudnnBackendDescriptor_t Pd = dropout(g, s, &L, &uid, P, &mask);
    glia__cg_matmul(g, Pd, v, o);
    cudnnStatus_t st = glia__cg_plan(g, s->refuse, &s->fwd[train], &s->fwd_ws[train]);
    return done(g, st, train ? "training forward" : "forward", why, n, &s->graph[train]);
}

cudnnStatus_t glia__sdpa_build_bwd(cudnnHandle_t h, struct glia__sdpa *s, char *why, size_t n)
{
    struct glia__cg *g = graph_new(h);
    if (!g) {
        snprintf(why, n, "out of host memory");
        return CUDNN_STATUS_ALLOC_FAILED;
    }
    struct layout L;
    int64_t uid = U_VIRTUAL;
    layout_of(s, &L);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t q = glia__cg_tensor(g, U_Q, s->type, L.d_q, L.q, false, false, false);
    cudnnBackendDescriptor_t kt = glia__cg_tensor(g, U_K, s->type, L.d_kt, L.kt, false, false, false);
    cudnnBackendDescriptor_t vt = glia__cg_tensor(g, U_V, s->type, L.d_kt, L.vt, false, false, false);
    cudnnBackendDescriptor_t o = glia__cg_tensor(g, U_O, s->type, L.d_q, L.o, false, false, false);
    cudnnBackendDescriptor_t dO = glia__cg_tensor(g, U_DO, s->type, L.d_q, L.o, false, false, false);
    cudnnBackendDescriptor_t dq = glia__cg_tensor(g, U_DQ, s->type, L.d_q, L.q, false, false, false);
    cudnnBackendDescriptor_t dk = glia__cg_tensor(g, U_DK, s->type, L.d_q, L.k, false, false, false);
    cudnnBackendDescriptor_t dv = glia__cg_tensor(g, U_DV, s->type, L.d_q, L.v, false, false, false);
    cudnnBackendDescriptor_t stats = glia__cg_tensor(g, U_STATS, f32, L.d_row, L.row, false, false, false);
    cudnnBackendDescriptor_t sum = glia__cg_tensor(g, U_SUM, f32, L.d_row, L.row, false, false, false);
    cudnnBackendDescriptor_t dq_acc = glia__cg_tensor(g, U_DQ_ACC, f32, L.d_q, L.o, false, false, true);
    cudnnBackendDescriptor_t scale = glia__cg_tensor(g, U_SCALE, f32, L.d_one, L.one, false, true, false);
    cudnnBackendDescriptor_t keep_p = glia__cg_tensor(g, U_KEEP_P, f32, L.d_one, L.one, false, true, false);
    cudnnBackendDescriptor_t mask_value = glia__cg_tensor(g, U_MASK_VALUE, f32, L.d_one, L.one, false, true, false);
    cudnnBackendDescriptor_t drop_scale =
        glia__cg_tensor(g, U_DROP_SCALE, s->type, L.d_one, L.one, false, true, false);
    /* sum = rowsum(dO ∘ O) · (1 - p) */
    cudnnBackendDescriptor_t dOO = glia__cg_tensor(g, uid++, f32, L.d_q, L.o, true, false, false);
    cudnnBackendDescriptor_t red = vrow(g, &L, &uid);
    glia__cg_pointwise(g, CUDNN_POINTWISE_MUL, f32, dO, o, NULL, dOO, -1);
    glia__cg_reduction(g, CUDNN_REDUCE_TENSOR_ADD, dOO, red);
    glia__cg_pointwise(g, CUDNN_POINTWISE_MUL, f32, red, keep_p, NULL, sum, -1);
    /* P = exp(mask(Q Kᵀ · scale) - stats) */
    cudnnBackendDescriptor_t S = vs(g, &L, &uid), Ss = vs(g, &L, &uid);
    glia__cg_matmul(g, q, kt, S);
    glia__cg_pointwise(g, CUDNN_POINTWISE_MUL, f32, S, scale, NULL, Ss, -1);
    cudnnBackendDescriptor_t Sm = causal(g, &L, &uid, Ss, mask_value);
    cudnnBackendDescriptor_t sub = vs(g, &L, &uid), P = vs(g, &L, &uid);
    glia__cg_pointwise(g, CUDNN_POINTWISE_SUB, f32, Sm, stats, NULL, sub, -1);
    glia__cg_pointwise(g, CUDNN_POINTWISE_EXP, f32, sub, NULL, NULL, P, -1);
    cudnnBackendDescriptor_t mask;
    cudnnBackendDescriptor_t Pd = dropout(g, s, &L, &uid, P, &mask);
    /* dV = Pdᵀ dO */
    cudnnBackendDescriptor_t Pdt = glia__cg_tensor(g, uid++, s->type, L.d_s, L.st, true, false, false);
    glia__cg_reshape(g, Pd, Pdt);
    glia__cg_matmul(g, Pdt, dO, dv);
    /* dS = ((dO Vᵀ) ∘ mask - sum) ∘ P · drop scale · scale */
    cudnnBackendDescriptor_t dP = vs(g, &L, &uid), dPm = vs(g, &L, &uid), dPs = vs(g, &L, &uid);
    cudnnBackendDescriptor_t dS = vs(g, &L, &uid), dSd = vs(g, &L, &uid), dSs = vs(g, &L, &uid);
    glia__cg_matmul(g, dO, vt, dP);
    glia__cg_pointwise(g, CUDNN_POINTWISE_MUL, f32, dP, mask, NULL, dPm, -1);
    glia__cg_pointwise(g, CUDNN_POINTWISE_SUB, f32, dPm, sum, NULL, dPs, -1);
    glia__cg_pointwise(g, CUDNN_POINTWISE_MUL, f32, dPs, P, NULL, dS, -1);
    glia__cg_pointwise(g, CUDNN_POINTWISE_MUL, f32, dS, drop_scale, NULL, dSd, -1);
    glia__cg_pointwise(g, CUDNN_POINTWISE_MUL, f32, dSd, scale, NULL, dSs, -1);
    /* dQ = dS K (accumulated in f32, then converted); dK = dSᵀ Q */
    cudnnBackendDescriptor_t k = glia__cg_tensor(g, uid++, s->type, L.d_q, L.k, true, false, false);
    glia__cg_reshape(g, kt, k);
    glia__cg_matmul(g, dSs, k, dq_acc);
    cudnnBackendDescriptor_t dSt = glia__cg_tensor(g, uid++, f32, L.d_s, L.st, true, false, false);
    glia__cg_reshape(g, dSs, dSt);
    glia__cg_matmul(g, dSt, q, dk);
    glia__cg_pointwise(g, CUDNN_POINTWISE_IDENTITY, f32, dq_acc, NULL, NULL, dq, -1);
    cudnnStatus_t st = glia__cg_plan(g, s->refuse, &s->bwd, &s->bwd_ws);
    return done(g, st, "backward", why, n, &s->graph[2]);
}

void glia__sdpa_free(struct glia__sdpa *s)
{
    for (int i = 0; i < 2; i++)
        if (s->fwd[i]) cudnnBackendDestroyDescriptor(s->fwd[i]);
    if (s->bwd) cudnnBackendDestroyDescriptor(s->bwd);
    s->fwd[0] = s->fwd[1] = s->bwd = NULL;
    for (int i = 0; i < 3; i++) {
        graph_free(s->graph[i]);
        s->graph[i] = NULL;
    }
}

/* 1 in the activations' type, as the dropout scale's by-value bits (bf16 0x3f80, fp16 0x3c00). */
static uint16_t one_bits(cudnnDataType_t t) { return t == CUDNN_DATA_BFLOAT16 ? 0x3f80 : 0x3c00; }

/* Bytes of one element of the activations. */
#define ELEM 2

cudnnStatus_t glia__sdpa_forward(cudnnHandle_t h, const struct glia__sdpa *s, bool train, const void *qkv, void *o,
                                 float *stats, int64_t *rng, void *ws, float scale)
{
    int64_t C = s->H * s->D;
    float mask_value = -1.0e20f;
    uint16_t drop_scale = one_bits(s->type);
    const char *x = qkv;
    int64_t uids[] = {U_Q, U_K, U_V, U_O, U_SCALE, U_MASK_VALUE, U_SEED, U_OFFSET, U_DROP_SCALE, U_STATS};
    void *ptrs[] = {(void *)x, (void *)(x + C * ELEM), (void *)(x + 2 * C * ELEM), o, &scale, &mask_value, rng,
                    rng + 2, &drop_scale, stats};
    return glia__cg_execute(h, s->fwd[train], train ? 10 : 9, uids, ptrs, ws);
}

cudnnStatus_t glia__sdpa_backward(cudnnHandle_t h, const struct glia__sdpa *s, const void *qkv, const void *o,
                                  const void *dout, const float *stats, void *dqkv, float *dq_acc, float *sum,
                                  int64_t *rng, void *ws, float scale)
{
    int64_t C = s->H * s->D;
    float mask_value = -1.0e20f, keep_p = 1.0f;
    uint16_t drop_scale = one_bits(s->type);
    const char *x = qkv;
    char *dx = dqkv;
    int64_t uids[] = {U_Q,     U_K,     U_V,    U_O,          U_DO,    U_DQ,         U_DK,         U_DV,
                      U_STATS, U_SUM,   U_DQ_ACC, U_SCALE,    U_KEEP_P, U_MASK_VALUE, U_DROP_SCALE, U_SEED,
                      U_OFFSET};
    void *ptrs[] = {(void *)x,        (void *)(x + C * ELEM), (void *)(x + 2 * C * ELEM), (void *)o,
                    (void *)dout,     dx,                     dx + C * ELEM,              dx + 2 * C * ELEM,
                    (void *)stats,    sum,                    dq_acc,                     &scale,
                    &keep_p,          &mask_value,            &drop_scale,                rng,
                    rng + 2};
    return glia__cg_execute(h, s->bwd, (int)(sizeof uids / sizeof uids[0]), uids, ptrs, ws);
}
