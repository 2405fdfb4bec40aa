/* core/memplan.c — where a model's activations and their gradients live: one block, in which buffers whose
 * lifetimes overlap never share bytes and the others do, planned once for a training step and once for an
 * evaluation forward (they never run at once). Plans only (offsets and sizes); core/train.c allocates the block and
 * points the layers' tensors into it. */
#include <stdlib.h>
#include "parts.h"

static int64_t aligned(int64_t n) { return (n + GLIA__ARENA_ALIGN - 1) / GLIA__ARENA_ALIGN * GLIA__ARENA_ALIGN; }

struct span {
    int64_t lo, hi;  /* floats [lo, hi) */
};

static int by_lo(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Whether buffers i and j are alive at a common moment (either life of each). */
static bool meet(int i, int j, const int *first, const int *last, const int *first2, const int *last2)
{
    int fi[2] = {first[i], first2 ? first2[i] : -1}, li[2] = {last[i], last2 ? last2[i] : -1};
    int fj[2] = {first[j], first2 ? first2[j] : -1}, lj[2] = {last[j], last2 ? last2[j] : -1};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            if (fi[a] >= 0 && fj[b] >= 0 && fj[b] <= li[a] && fi[a] <= lj[b]) return true;
    return false;
}

int64_t glia__memplan(int n, const int64_t *size, const int *first, const int *last, const int *first2,
                      const int *last2, int64_t *off)
{
    int *order = malloc(sizeof *order * (size_t)(n > 0 ? n : 1));
    struct span *busy = malloc(sizeof *busy * (size_t)(n > 0 ? n : 1));
    if (!order || !busy) return free(order), free(busy), -1;
    int m = 0;
    for (int i = 0; i < n; i++) {
        off[i] = 0;
        if (size[i] > 0) order[m++] = i;
    }
    for (int a = 1; a < m; a++) {  /* largest first; equal sizes in index order (stable: the plan is reproducible) */
        int v = order[a], b = a;
        for (; b > 0 && size[order[b - 1]] < size[v]; b--) order[b] = order[b - 1];
        order[b] = v;
    }
    int64_t total = 0;
    for (int a = 0; a < m; a++) {
        int i = order[a], nb = 0;
        for (int c = 0; c < a; c++) {  /* the placed buffers alive at some moment of i's life */
            int j = order[c];
            if (meet(i, j, first, last, first2, last2)) busy[nb++] = (struct span){off[j], off[j] + aligned(size[j])};
        }
        qsort(busy, (size_t)nb, sizeof *busy, by_lo);
        int64_t at = 0, need = aligned(size[i]);
        for (int c = 0; c < nb && busy[c].lo < at + need; c++)  /* the lowest gap that fits */
            if (busy[c].hi > at) at = busy[c].hi;
        off[i] = at;
        if (at + need > total) total = at + need;
    }
    free(order);
    free(busy);
    return total;
}

glia_status glia__infer_all(struct glia_model *m, int64_t n, int64_t len, struct glia_shape *shapes)
{
    for (int i = 0; i < m->graph.n_nodes; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        struct glia_shape in[GLIA__MAX_INPUTS];
        for (int k = 0; k < nd->n_in; k++) in[k] = nd->in[k] < 0 ? glia__data_shape(m, n, len) : shapes[nd->in[k]];
        glia_status st = nd->layer.type->infer_shape(&nd->layer, in, nd->n_in, &shapes[i]);
        if (st) {
            if (m->data.train.tokens)
                return glia_section_error(nd->sec, NULL, st, "shape inference failed for batch %lld of length %lld",
                                          (long long)n, (long long)len);
            return glia_section_error(nd->sec, NULL, st, "shape inference failed for batch %lld", (long long)n);
        }
    }
    return GLIA_OK;
}

/* Floats that n values of dtype t take (half types: two to a float). */
static int64_t floats_of(int64_t n, enum glia_dtype t)
{
    int64_t bytes = n * (int64_t)glia_dtype_size(t);
    return (bytes + (int64_t)sizeof(float) - 1) / (int64_t)sizeof(float);
}

static void grow(int *last, int t)
{
    if (*last < t) *last = t;
}

/* Sizes (floats, whatever their dtype: two f16 or bf16 values to a float) and lifetimes (moments, inclusive) of the
 * buffers of one plan at batch n (shapes), in slots GLIA__PLAN_VALUE(i, k) (node i's output, k = -1, or its converted
 * input k) and GLIA__PLAN_GRAD(i, k) (their gradients). Evaluation: node i's forward is moment i; an output lives from
 * its forward to its last reader's, the loss and the logits to moment N (they are read after the forward). Training: forward i at moment i, then the
 * backward walk from moment N: backward j at B[j], and where a checkpointed segment ends at j, first the forward of
 * its recompute nodes again, k at R[k] (without checkpointing B[j] = 2N-1-j). An output lives until the backwards and
 * recomputations that read it (its own and its consumers'), the loss to the end of the step; a recompute node's
 * output instead lives from its forward to its last forward reader's, and again from R to its last reader in the
 * walk (its second life, first2/last2). A gradient lives from the backward of its last consumer (the first to write
 * it) to its own. */
static void lifetimes(const struct glia_model *m, const struct glia_shape *shapes, int64_t n, bool train,
                      int64_t *size, int *first, int *last, int *first2, int *last2, int *B, int *R)
{
    int ip = train ? glia__grad_in_place(m) : -1;
    int N = m->graph.n_nodes, t = N;
    for (int j = N - 1; j >= 0 && train; j--) {
        for (int k = j - m->graph.nodes[j].recompute_n; k < j; k++)
            if (m->graph.nodes[k].recompute) R[k] = t++;
        B[j] = t++;
    }
    int end = train ? t : N;  /* after the step: the loss (and logits) are read then */
    for (int s = 0; s < N * GLIA__PLAN_SLOTS; s++) size[s] = 0, first[s] = last[s] = 0, first2[s] = last2[s] = -1;
    struct glia_shape xs = glia__data_shape(m, n, m->data.train.cols);
    for (int i = 0; i < N; i++) {
        const struct glia__node *nd = &m->graph.nodes[i];
        bool again = train && nd->recompute;  /* its forward runs again at R[i] */
        int T = train ? B[i] : 0;
        int o = GLIA__PLAN_VALUE(i, -1), g = GLIA__PLAN_GRAD(i, -1);
        size[o] = floats_of(glia_shape_numel(&shapes[i]), nd->out_dtype);
        first[o] = last[o] = i;
        if (!train && nd->folded_by) first[o] = nd->folded_by - 1;  /* written by that node's eval forward */
        if (nd->res_by) first[o] = nd->res_by - 1;                     /* written in its input's forward */
        if (!train && nd->norm_fold) size[o] = 0;  /* never written: a view of the normalization's (plan_one) */
        if (again) first2[o] = last2[o] = R[i];
        int *walk = again ? &last2[o] : &last[o];  /* the life that the backward walk's readers extend */
        if (i == N - 1) last[o] = end;
        if (train && glia__bwd_reads_out(m, i)) grow(walk, T);
        if (train && glia__has_grad(m, i)) {
            size[g] = size[o];
            first[g] = T;  /* lowered below by each consumer */
            last[g] = T;
        }
        for (int k = 0; k < nd->n_in; k++) {
            int p = nd->in[k];
            bool conv = nd->edge[k] == GLIA__EDGE_CONVERT;
            if (p >= 0) {
                int po = GLIA__PLAN_VALUE(p, -1), pg = GLIA__PLAN_GRAD(p, -1);
                int *pwalk = train && m->graph.nodes[p].recompute ? &last2[po] : &last[po];
                grow(&last[po], i == N - 1 ? end : i);  /* the loss's inputs: read after it too */
                if (again) grow(pwalk, R[i]);
                if (train && !conv && glia__bwd_reads_in(m, i)) grow(pwalk, T);
                if (train && glia__has_grad(m, p) && first[pg] > T) first[pg] = T;
            }
            if (!conv) continue;
            int c = GLIA__PLAN_VALUE(i, k), cg = GLIA__PLAN_GRAD(i, k);
            size[c] = floats_of(glia_shape_numel(p < 0 ? &xs : &shapes[p]), nd->in_dtype[k]);
            first[c] = last[c] = i;
            if (again) first2[c] = last2[c] = R[i];
            if (train && glia__bwd_reads_in(m, i)) grow(again ? &last2[c] : &last[c], T);
            if (train && glia__has_grad(m, p)) {
                size[cg] = size[c];
                first[cg] = last[cg] = T;
            }
        }
    }
    for (int i = 0; i < N && train; i++) {  /* the kernels' saved memory: from the forward (again) to the backward */
        size_t b = glia__saved_bytes(m, i, shapes, n, m->data.train.cols);
        int s = GLIA__PLAN_SAVED(i);
        if (!b) continue;
        size[s] = (int64_t)((b + sizeof(float) - 1) / sizeof(float));
        first[s] = m->graph.nodes[i].res_by ? m->graph.nodes[i].res_by - 1 : i;  /* written in its input's forward */
        last[s] = m->graph.nodes[i].recompute ? i : B[i];
        if (m->graph.nodes[i].recompute) first2[s] = R[i], last2[s] = B[i];
    }
    if (ip >= 0) {  /* the logits' gradient is written over them: one buffer, alive until the gradient's last reader */
        int po = GLIA__PLAN_VALUE(ip, -1), pg = GLIA__PLAN_GRAD(ip, -1);
        grow(&last[po], last[pg]);
        size[pg] = 0;
    }
}

size_t glia__saved_bytes(const struct glia_model *m, int i, const struct glia_shape *shapes, int64_t n, int64_t len)
{
    const struct glia__node *nd = &m->graph.nodes[i];
    if (!nd->needs_grad) return 0;  /* no backward runs */
    struct glia_shape in[GLIA__MAX_INPUTS];
    for (int k = 0; k < nd->n_in; k++) in[k] = nd->in[k] < 0 ? glia__data_shape(m, n, len) : shapes[nd->in[k]];
    return glia_kernel_saved_size(nd->layer.kernel, &nd->layer, in, nd->n_in, nd->out_dtype);
}

int glia__grad_in_place(const struct glia_model *m)
{
    int N = m->graph.n_nodes;
    const struct glia__node *L = N > 0 ? &m->graph.nodes[N - 1] : NULL;
    if (!L || !(glia_layer_kernel_flags(&L->layer) & GLIA_KERNEL_GRAD_IN_PLACE) || L->n_in < 1) return -1;
    int p = L->in[0];
    if (p < 0 || L->edge[0] != GLIA__EDGE_DIRECT || m->graph.nodes[p].n_consumers != 1 || m->graph.nodes[p].recompute ||
        !glia__has_grad(m, p) || glia__bwd_reads_out(m, p))
        return -1;
    for (int k = 1; k < L->n_in; k++)
        if (L->in[k] == p) return -1;
    return p;
}

/* The buffers of one plan at batch n: lifetimes' output. */
struct lives {
    int S;                            /* slots: n_nodes * GLIA__PLAN_SLOTS */
    int64_t *size;
    int *first, *last, *first2, *last2;
};

static void lives_free(struct lives *L)
{
    free(L->size);
    free(L->first);
    free(L->last);
    free(L->first2);
    free(L->last2);
}

/* *L for a training step or an evaluation forward at batch n (the longest length). */
static glia_status lives_of(struct glia_model *m, int64_t n, bool train, struct lives *L)
{
    int N = m->graph.n_nodes, S = N * GLIA__PLAN_SLOTS;
    *L = (struct lives){S, malloc(sizeof *L->size * (size_t)S), malloc(sizeof(int) * (size_t)S),
                        malloc(sizeof(int) * (size_t)S), malloc(sizeof(int) * (size_t)S), malloc(sizeof(int) * (size_t)S)};
    struct glia_shape *shapes = malloc(sizeof *shapes * (size_t)N);
    int *moments = malloc(sizeof *moments * (size_t)(2 * N));  /* B and R of lifetimes */
    glia_status st = shapes && moments && L->size && L->first && L->last && L->first2 && L->last2 ? GLIA_OK : GLIA_ENOMEM;
    if (!st) st = glia__infer_all(m, n, m->data.train.cols, shapes);  /* activations grow with the length: the longest */
    if (!st) lifetimes(m, shapes, n, train, L->size, L->first, L->last, L->first2, L->last2, moments, moments + N);
    free(shapes);
    free(moments);
    if (st) lives_free(L);
    return st;
}

/* One plan (training or evaluation) at batch n into off; *len its block, *sum the floats without sharing. With
 * [runtime] debug_checks each buffer gets GLIA__GUARD floats of its own on either side, for the guard values around
 * what a layer writes (core/guard.c): nothing else alive at the same moment lies there. */
static glia_status plan_one(struct glia_model *m, int64_t n, bool train, int64_t *off, int64_t *len, int64_t *sum)
{
    struct lives L;
    glia_status st = lives_of(m, n, train, &L);
    if (st) return st;
    int64_t guard = m->debug_checks ? GLIA__GUARD : 0;
    *sum = 0;
    for (int s = 0; s < L.S; s++) {
        if (L.size[s] > 0) L.size[s] += 2 * guard;
        *sum += L.size[s] > 0 ? aligned(L.size[s]) : 0;
    }
    *len = glia__memplan(L.S, L.size, L.first, L.last, L.first2, L.last2, off);
    for (int s = 0; s < L.S; s++)
        if (L.size[s] > 0) off[s] += guard;
    int ip = train ? glia__grad_in_place(m) : -1;
    if (ip >= 0) off[GLIA__PLAN_GRAD(ip, -1)] = off[GLIA__PLAN_VALUE(ip, -1)];
    for (int i = 0; i < m->graph.n_nodes && !train; i++)  /* a folded producer's output: the normalization's bytes */
        if (m->graph.nodes[i].norm_fold)
            off[GLIA__PLAN_VALUE(i, -1)] = off[GLIA__PLAN_VALUE(m->graph.nodes[i].norm_fold - 1, -1)];
    lives_free(&L);
    return *len < 0 ? GLIA_ENOMEM : GLIA_OK;
}

int64_t glia__train_plan_len(struct glia_model *m, int64_t n)
{
    int64_t *off = malloc(sizeof *off * (size_t)m->graph.n_nodes * GLIA__PLAN_SLOTS), len = -1, sum;
    if (off && plan_one(m, n, true, off, &len, &sum)) len = -1;
    free(off);
    return len;
}

int64_t glia__train_live_peak(struct glia_model *m, int64_t n, double *area)
{
    int T = 3 * m->graph.n_nodes + 2;  /* moments: N forwards, N backwards, N recomputes */
    int64_t *delta = calloc((size_t)T + 1, sizeof *delta), peak = -1, live = 0;
    struct lives L;
    if (!delta || lives_of(m, n, true, &L)) return free(delta), -1;
    *area = 0;
    for (int s = 0; s < L.S; s++) {
        if (L.size[s] <= 0) continue;
        int64_t a = aligned(L.size[s]);
        delta[L.first[s]] += a, delta[L.last[s] + 1] -= a;
        *area += (double)a * (L.last[s] - L.first[s] + 1);
        if (L.first2[s] < 0) continue;
        delta[L.first2[s]] += a, delta[L.last2[s] + 1] -= a;
        *area += (double)a * (L.last2[s] - L.first2[s] + 1);
    }
    peak = 0;
    for (int t = 0; t <= T; t++)
        if ((live += delta[t]) > peak) peak = live;
    lives_free(&L);
    free(delta);
    return peak;
}

glia_status glia__act_plan(struct glia_model *m, int64_t train_batch, int64_t eval_batch, struct glia__act_plan *p)
{
    *p = (struct glia__act_plan){0};
    size_t S = (size_t)m->graph.n_nodes * GLIA__PLAN_SLOTS;
    p->train_off = calloc(S ? S : 1, sizeof *p->train_off);
    p->eval_off = calloc(S ? S : 1, sizeof *p->eval_off);
    if (!p->train_off || !p->eval_off) return glia__act_plan_free(p), GLIA_ENOMEM;
    glia_status st = GLIA_OK;
    if (train_batch > 0) st = plan_one(m, train_batch, true, p->train_off, &p->train, &p->train_unshared);
    if (!st && eval_batch > 0) st = plan_one(m, eval_batch, false, p->eval_off, &p->eval, &p->eval_unshared);
    p->len = p->train > p->eval ? p->train : p->eval;
    if (st) glia__act_plan_free(p);
    return st;
}

void glia__act_plan_free(struct glia__act_plan *p)
{
    free(p->train_off);
    free(p->eval_off);
    p->train_off = p->eval_off = NULL;
}
