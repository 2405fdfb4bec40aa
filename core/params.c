/* core/params.c — the parameters and buffers of a model: their flat arenas, the weight-decay mask, the
 * seeded initial values. Not the layers that declare them (core/layer.c) nor checkpoint files. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "parts.h"

glia_status glia__arena_plan(struct glia__arena *a, const int64_t *sizes, int count)
{
    return glia__arena_plan_gap(a, sizes, count, 0);
}

glia_status glia__arena_plan_gap(struct glia__arena *a, const int64_t *sizes, int count, int64_t gap)
{
    memset(a, 0, sizeof *a);
    a->off = malloc(sizeof *a->off * (size_t)(count > 0 ? count : 1));
    a->size = malloc(sizeof *a->size * (size_t)(count > 0 ? count : 1));
    if (!a->off || !a->size) {
        glia__arena_free(a);
        return GLIA_ENOMEM;
    }
    a->count = count;
    int64_t at = 0;
    for (int i = 0; i < count; i++) {
        at = (at + (i ? gap : 0) + GLIA__ARENA_ALIGN - 1) / GLIA__ARENA_ALIGN * GLIA__ARENA_ALIGN + gap;
        a->off[i] = at;
        a->size[i] = sizes[i];
        at += sizes[i];
        a->n += sizes[i];
    }
    at += count ? gap : 0;
    a->len = at > 0 ? at : 1;
    return GLIA_OK;
}

void glia__arena_free(struct glia__arena *a)
{
    free(a->off);
    free(a->size);
    memset(a, 0, sizeof *a);
}

void glia__arena_pack(const struct glia__arena *a, const float *full, float *compact)
{
    for (int i = 0; i < a->count; compact += a->size[i], i++)
        memcpy(compact, full + a->off[i], sizeof(float) * (size_t)a->size[i]);
}

void glia__arena_unpack(const struct glia__arena *a, const float *compact, float *full)
{
    memset(full, 0, sizeof(float) * (size_t)a->len);
    for (int i = 0; i < a->count; compact += a->size[i], i++)
        memcpy(full + a->off[i], compact, sizeof(float) * (size_t)a->size[i]);
}

/* The layers' tensors of one kind (params or buffers), in arena order. */
static int arena_tensors(struct glia_model *m, bool buffers, struct glia_param **out)
{
    int k = 0;
    for (int i = 0; i < m->graph.n_nodes; i++) {
        struct glia_layer *l = &m->graph.nodes[i].layer;
        int n = buffers ? l->n_buffers : l->n_params;
        for (int p = 0; p < n; p++, k++)
            if (out) out[k] = buffers ? &l->buffers[p] : &l->params[p];
    }
    return k;
}

/* Index of layer l's parameter called name, or -1. */
static int param_named(const struct glia_layer *l, const char *name)
{
    for (int p = 0; p < l->n_params; p++)
        if (!strcmp(l->params[p].name, name)) return p;
    return -1;
}

/* [layer] tie_weight: each node's tie, tie_node and tie_param. The layer named must come earlier (its backward runs
 * after this layer's, so its gradient is whole when its own backward is done: what ddp's buckets wait for), hold a
 * parameter "weight" of this layer's weight's shape, and own it (no chains). */
static glia_status resolve_ties(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes; i++) m->graph.nodes[i].tie = 0;
    for (int i = 0; i < m->graph.n_nodes; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        const char *name = glia_section_str(nd->sec, "tie_weight");
        if (!name) continue;
        int j = 0;
        while (j < m->graph.n_nodes && strcmp(m->graph.nodes[j].layer.name, name)) j++;
        if (j == m->graph.n_nodes)
            return glia_section_error(nd->sec, "tie_weight", GLIA_ECONFIG, "no layer '%s' in the model", name);
        if (j >= i)
            return glia_section_error(nd->sec, "tie_weight", GLIA_ECONFIG, "'%s' %s: tie a layer's weight to an "
                                      "earlier layer's (as GPT-2's lm_head to wte)", name,
                                      j == i ? "is this layer" : "comes after this layer");
        const struct glia__node *o = &m->graph.nodes[j];
        int p = param_named(&nd->layer, "weight"), q = param_named(&o->layer, "weight");
        char a[64], b[64];
        if (p < 0) return glia_section_error(nd->sec, "tie_weight", GLIA_ECONFIG, "this layer has no parameter 'weight'");
        if (q < 0) return glia_section_error(nd->sec, "tie_weight", GLIA_ECONFIG, "'%s' has no parameter 'weight'", name);
        if (o->tie)
            return glia_section_error(nd->sec, "tie_weight", GLIA_ECONFIG, "'%s' ties its own weight to '%s': tie to "
                                      "'%s' instead", name, m->graph.nodes[o->tie_node].layer.name,
                                      m->graph.nodes[o->tie_node].layer.name);
        if (!glia_shape_equal(&nd->layer.params[p].shape, &o->layer.params[q].shape))
            return glia_section_error(nd->sec, "tie_weight", GLIA_ECONFIG, "this layer's weight is %s, '%s''s is %s: "
                                      "a tied weight has one shape",
                                      glia_shape_str(&nd->layer.params[p].shape, a, sizeof a), name,
                                      glia_shape_str(&o->layer.params[q].shape, b, sizeof b));
        nd->tie = p + 1, nd->tie_node = j, nd->tie_param = q;
    }
    return GLIA_OK;
}

/* Index of node i's parameter p in the weight arena. */
static int arena_index(const struct glia_model *m, int i, int p)
{
    int k = p;
    for (int j = 0; j < i; j++) k += m->graph.nodes[j].layer.n_params;
    return k;
}

/* Plans the arena of the params (or buffers); *list gets them in arena order (free it). A tied parameter has a slot
 * of 0 values (its values are its owner's). */
static glia_status plan_arena(struct glia_model *m, bool buffers, struct glia__arena *a, struct glia_param ***list)
{
    int n = arena_tensors(m, buffers, NULL);
    struct glia_param **ps = malloc(sizeof *ps * (size_t)(n > 0 ? n : 1));
    int64_t *sizes = malloc(sizeof *sizes * (size_t)(n > 0 ? n : 1));
    glia_status st = ps && sizes ? GLIA_OK : GLIA_ENOMEM;
    if (!st) {
        arena_tensors(m, buffers, ps);
        for (int i = 0; i < n; i++) sizes[i] = glia_shape_numel(&ps[i]->shape);
        for (int i = 0; i < m->graph.n_nodes && !buffers; i++)
            if (m->graph.nodes[i].tie) sizes[arena_index(m, i, m->graph.nodes[i].tie - 1)] = 0;
        st = glia__arena_plan_gap(a, sizes, n, m->debug_checks ? GLIA__GUARD : 0);
    }
    free(sizes);
    if (st) free(ps);
    else *list = ps;
    return st;
}

/* The decay mask over the weight arena, when some parameter has decay off. */
static glia_status alloc_decay_mask(struct glia_model *m, struct glia_param **ps)
{
    bool any = false;
    for (int i = 0; i < m->params.wa.count; i++) any |= !ps[i]->decay;
    if (!any || m->dist.like) return GLIA_OK;  /* a dp replica never steps */
    float *host = malloc(sizeof(float) * (size_t)m->params.wa.len);
    if (!host) return GLIA_ENOMEM;
    for (int64_t j = 0; j < m->params.wa.len; j++) host[j] = 1.0f;
    for (int i = 0; i < m->params.wa.count; i++)
        if (!ps[i]->decay)
            for (int64_t j = 0; j < m->params.wa.size[i]; j++) host[m->params.wa.off[i] + j] = 0.0f;
    struct glia_shape flat = glia_shape_make(1, (int64_t[]){m->params.wa.len});
    glia_status st = glia_tensor_new(m->backend, GLIA_F32, &flat, &m->params.decay_mask);
    if (!st) st = glia_tensor_from_host(m->params.decay_mask, host, sizeof(float) * (size_t)m->params.wa.len);
    free(host);
    return st;
}

/* The parameters (or buffers) cannot be allocated: the error names the layer that holds most of them. with says
 * what comes with them ("with their gradients"). */
glia_status glia__arena_error(struct glia_model *m, bool buffers, double bytes, const char *with)
{
    int big = 0;
    int64_t most = -1, all = 0;
    for (int i = 0; i < m->graph.n_nodes; i++) {
        const struct glia_layer *l = &m->graph.nodes[i].layer;
        int64_t n = 0;
        for (int p = 0; p < (buffers ? l->n_buffers : l->n_params); p++)
            n += glia_shape_numel(buffers ? &l->buffers[p].shape : &l->params[p].shape);
        if (n > most) most = n, big = i;
        all += n;
    }
    return glia__alloc_error(m->graph.nodes[big].sec, NULL, bytes, "%lld %s (%lld of them this layer's)%s",
                             (long long)all, buffers ? "buffer values" : "parameters", (long long)most, with);
}

/* The arena's segment table for per-tensor optimizers (glia_opt_step.seg), uploaded once on a device backend. */
static glia_status alloc_segments(struct glia_model *m)
{
    const struct glia__arena *a = &m->params.wa;
    m->params.seg = malloc(sizeof(int64_t) * 2 * (size_t)(a->count > 0 ? a->count : 1));
    if (!m->params.seg) return GLIA_ENOMEM;
    for (int i = 0; i < a->count; i++) {
        m->params.seg[2 * i] = a->off[i];
        m->params.seg[2 * i + 1] = a->size[i];
    }
    if (a->count == 0 || m->backend->ops->device_type == GLIA_DEVICE_CPU) return GLIA_OK;
    struct glia_shape shape = glia_shape_make(1, (int64_t[]){2 * (int64_t)a->count});
    glia_status st = glia_tensor_new(m->backend, GLIA_I64, &shape, &m->params.dev_seg);
    return st ? st : glia_tensor_from_host(m->params.dev_seg, m->params.seg, sizeof(int64_t) * 2 * (size_t)a->count);
}

glia_status glia__alloc_params(struct glia_model *m)
{
    struct glia_param **ps;
    glia_status st = resolve_ties(m);
    if (!st) st = plan_arena(m, false, &m->params.wa, &ps);
    if (st) return st;
    struct glia_shape flat = glia_shape_make(1, (int64_t[]){m->params.wa.len});
    int ns = m->dist.like ? 0 : m->trainer.opt.type->n_state;  /* a dp replica never steps: no optimizer state */
    glia_context_clear_error(m->ctx);
    if (m->params.wa.len > GLIA__MAX_ELEMENTS) st = GLIA_ENOMEM;  /* one tensor: see GLIA__MAX_ELEMENTS */
    if (!st) st = glia_tensor_new(m->backend, GLIA_F32, &flat, &m->params.w);
    if (!st) st = glia_tensor_zeros(m->backend, GLIA_F32, &flat, &m->params.g);  /* the padding's gradient is zero */
    for (int k = 0; k < ns && !st; k++) st = glia_tensor_zeros(m->backend, GLIA_F32, &flat, &m->params.state[k]);
    if (!st) st = alloc_decay_mask(m, ps);
    if (!st) st = alloc_segments(m);
    float *host = st ? NULL : calloc((size_t)m->params.wa.len, sizeof(float));
    if (st || !host) {
        free(ps);
        if (st && st != GLIA_ENOMEM) return st;
        char with[64] = " with their gradients";
        if (ns) snprintf(with, sizeof with, " with their gradients and %d optimizer state%s", ns, ns > 1 ? "s" : "");
        return glia__arena_error(m, false, 4.0 * (double)m->params.wa.len * (2 + ns), with);
    }
    int k = 0;
    for (int i = 0; i < m->graph.n_nodes && !st; i++) {
        struct glia_layer *l = &m->graph.nodes[i].layer;
        for (int p = 0; p < l->n_params && !st; p++, k++) {
            struct glia_param *pa = ps[k];
            const struct glia__node *nd = &m->graph.nodes[i];
            bool tied = nd->tie == p + 1;
            int64_t at = m->params.wa.off[tied ? arena_index(m, nd->tie_node, nd->tie_param) : k];
            if ((st = glia_tensor_view(m->params.w, at, &pa->shape, &pa->value)) ||
                (st = glia_tensor_view(m->params.g, at, &pa->shape, &pa->grad)))
                break;
            pa->grad_unset = true;
            if (tied) continue;  /* its owner draws the values */
            glia__init_param(l, p, host + m->params.wa.off[k],
                             glia__hash_str(glia__hash_str(m->seed * 0x9e3779b97f4a7c15ull + 1, l->name), pa->name));
        }
    }
    if (!st) st = glia_tensor_from_host(m->params.w, host, (size_t)m->params.wa.len * sizeof(float));
    free(host);
    free(ps);
    return st;
}
/* Buffers: one arena, views, initialized from their declared init. */
glia_status glia__alloc_buffers(struct glia_model *m)
{
    struct glia_param **bs;
    glia_status st = plan_arena(m, true, &m->params.ba, &bs);
    if (st) return st;
    if (m->params.ba.n == 0) {
        free(bs);
        return GLIA_OK;
    }
    struct glia_shape flat = glia_shape_make(1, (int64_t[]){m->params.ba.len});
    glia_context_clear_error(m->ctx);
    st = m->params.ba.len > GLIA__MAX_ELEMENTS ? GLIA_ENOMEM : glia_tensor_new(m->backend, GLIA_F32, &flat, &m->params.buf);
    float *host = st ? NULL : calloc((size_t)m->params.ba.len, sizeof(float));
    if (!st && !host) st = GLIA_ENOMEM;
    if (st == GLIA_ENOMEM) st = glia__arena_error(m, true, 4.0 * (double)m->params.ba.len, "");
    for (int k = 0; k < m->params.ba.count && !st; k++) {
        st = glia_tensor_view(m->params.buf, m->params.ba.off[k], &bs[k]->shape, &bs[k]->value);
        glia__init_values(host + m->params.ba.off[k], m->params.ba.size[k], bs[k]->init, 0);
    }
    if (!st) st = glia_tensor_from_host(m->params.buf, host, (size_t)m->params.ba.len * sizeof(float));
    free(host);
    free(bs);
    return st;
}
