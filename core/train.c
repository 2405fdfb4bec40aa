/* core/train.c — the training step: forward, layer-level backward (with recomputation), unscaling and clipping, the
 * optimizer, DataParallel's devices, CUDA graph replays, the loss read a step late; and evaluation. Not the loop of
 * epochs (core/run.c), nor steps driven from outside (core/step.c), nor the activations' memory (core/act.c), nor the
 * learning-rate schedules (core/schedule.c) or the loss scaler's rule and device bookkeeping (core/scaler.c). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "loader.h"
#include "parts.h"
#include "act.h"
#include "train.h"
#include <glia/half.h>

/* Profiling with a trace: an event for node's forward or backward that ran from t0 to t1. */
static void trace_layer(struct glia_model *m, enum glia__trace_cat cat, const struct glia__node *nd, double t0, double t1)
{
    struct glia__trace_event *e = m->trainer.trace ? glia__trace_add(m->trainer.trace, cat, nd->layer.name, t0, t1) : NULL;
    if (!e) return;
    e->type = nd->layer.type->name;
    e->impl = nd->layer.kernel->impl;
    if ((cat == GLIA__TRACE_FORWARD || cat == GLIA__TRACE_RECOMPUTE) && nd->out) e->shape = nd->out->shape;
}

/* [runtime] debug_checks: *g = the guards around what a call of nd writes (its output and buffers for a forward,
 * din NULL; else din and its parameters' gradients), filled; *g NULL with debug_checks off. */
static glia_status guards_fill(const struct glia_model *m, const struct glia__node *nd, struct glia_tensor *const *din,
                               struct glia_tensor *out, struct glia__guarded **g, int *n)
{
    *g = NULL;
    *n = 0;
    if (!m->debug_checks) return GLIA_OK;
    const struct glia_layer *l = &nd->layer;
    if (!(*g = malloc(sizeof **g * (size_t)(1 + l->n_buffers + nd->n_in + l->n_params)))) return GLIA_ENOMEM;
    *n = din ? glia__guard_backward(l, din, nd->n_in, *g) : glia__guard_forward(l, out, *g);
    glia_status st = glia__guard_fill(*g, *n);
    if (st) free(*g), *g = NULL;
    return st;
}

/* After the call guards_fill prepared (status st): a write that reached a guard is the error; else the guard floats
 * are zero again (between parameters they are the arenas' padding, which must stay zero) and st stands. Frees g. */
static glia_status guards_check(const struct glia__node *nd, const char *call, struct glia__guarded *g, int n,
                                glia_status st)
{
    if (!g) return st;
    glia_status gs = glia__guard_check(&nd->layer, nd->sec, call, g, n);
    if (!gs) gs = glia__guard_clear(g, n);
    free(g);
    return gs ? gs : st;
}

/* ---- [runtime] detect_anomaly ---- */

/* The first element of t (its storage order) that is NaN or infinite: its index in *at and value in *v; *at = -1 when
 * every one is finite. */
static glia_status first_nonfinite(struct glia_model *m, const struct glia_tensor *t, int64_t *at, float *v)
{
    int64_t n = glia_tensor_numel(t);
    size_t es = t->dtype == GLIA_F32 ? 4 : 2;
    const void *host = t->dtype == GLIA_F32 ? glia_tensor_f32(t) : NULL;  /* the CPU's f32 in place */
    void *copy = NULL;
    *at = -1;
    if (!host) {
        if (t->dtype != GLIA_F32 && t->dtype != GLIA_BF16 && t->dtype != GLIA_F16) return GLIA_OK;
        if (!(copy = malloc(es * (size_t)(n > 0 ? n : 1)))) return GLIA_ENOMEM;
        glia_status st = glia_tensor_to_host(t, copy, es * (size_t)n);
        if (st) {
            free(copy);
            return st;
        }
        host = copy;
    }
    if (t->dtype == GLIA_F32) {  /* a pass that vectorizes first: x * 0 is NaN exactly when x is NaN or infinite */
        const float *f = host;
        float z = 0.0f;
#pragma omp parallel for simd reduction(+ : z) schedule(static)
        for (int64_t i = 0; i < n; i++) z += f[i] * 0.0f;
        if (z == 0.0f) {
            free(copy);
            return GLIA_OK;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        float x = glia_load_f32(host, t->dtype, i);
        if (!isfinite(x)) {
            *at = i;
            *v = x;
            break;
        }
    }
    free(copy);
    return GLIA_OK;
}

/* GLIA_ENUMERIC naming node nd, the call and the tensor (what) when t holds a NaN or inf; GLIA_OK otherwise. */
static glia_status anomaly_check(struct glia_model *m, const struct glia__node *nd, const char *call,
                                 const struct glia_tensor *t, const char *what)
{
    int64_t at;
    float v = 0;
    glia_status st = t ? first_nonfinite(m, t, &at, &v) : GLIA_OK;
    if (st || !t || at < 0) return st;
    return glia_section_error(nd->sec, NULL, GLIA_ENUMERIC, "detect_anomaly: the %s at step %lld wrote %s into %s "
                              "(element %lld of %lld): the first layer to make one", call,
                              (long long)m->trainer.step + 1, isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf", what,
                              (long long)at, (long long)glia_tensor_numel(t));
}

/* After node nd's backward: its input gradients din and its parameters' gradients. */
static glia_status anomaly_backward(struct glia_model *m, const struct glia__node *nd, struct glia_tensor *const *din)
{
    char what[160];
    glia_status st = GLIA_OK;
    for (int k = 0; k < nd->n_in && !st; k++) {
        if (!din[k]) continue;
        snprintf(what, sizeof what, "the gradient of its input %d ([%s]'s output)", k,
                 m->graph.nodes[nd->in[k]].layer.name);
        st = anomaly_check(m, nd, "backward", din[k], what);
    }
    for (int p = 0; p < nd->layer.n_params && !st; p++) {
        if (nd->tie && p == nd->tie - 1) continue;  /* its owner's gradient: checked with the owner */
        snprintf(what, sizeof what, "the gradient of its parameter %s", nd->layer.params[p].name);
        st = anomaly_check(m, nd, "backward", nd->layer.params[p].grad, what);
    }
    return st;
}

/* The key of node nd's random masks (glia_fwd.seed_key): its name, the run's seed and the rank; with the step it gives
 * the seed of a forward's masks. */
static uint64_t mask_key(const struct glia_model *m, const struct glia__node *nd)
{
    return glia__hash_str(m->seed + (uint64_t)m->dist.rank * 0xd1b54a32d192ed03ull, nd->layer.name);
}

/* Whether node nd's forward runs with its [graph] fuse_pointwise residual partner (res_norm, res_by): not when it runs
 * again during backward (each runs as written then), nor under debug_checks or detect_anomaly, which check each layer's
 * call alone. */
static bool residual_fused(const struct glia_model *m, const struct glia__node *nd, bool recompute)
{
    return (nd->res_norm || nd->res_by) && !recompute && !m->debug_checks && !m->detect_anomaly;
}

/* Node i's forward; recompute: a second training forward during backward ([graph] checkpoint_segments); pos >= 0:
 * an eval forward of a cached decode at positions pos.. (glia_model_decode), -1 otherwise. */
static glia_status forward_node(struct glia_model *m, int i, bool train, bool recompute, int64_t pos)
{
    struct glia__node *nd = &m->graph.nodes[i];
    const struct glia_tensor *in[GLIA__MAX_INPUTS];
    if (!train && nd->folded_by) return GLIA_OK;  /* its evaluation ran in that node's forward */
    if (residual_fused(m, nd, recompute) && nd->res_by) return GLIA_OK;  /* it ran in its input's forward */
    double t0 = m->trainer.profiling ? glia__now() : 0;
    glia_status st = GLIA_OK;
    for (int k = 0; k < nd->n_in && !st; k++) {
        in[k] = nd->in[k] < 0 ? m->act.x : m->graph.nodes[nd->in[k]].out;
        if (nd->edge[k] == GLIA__EDGE_CONVERT) st = glia_tensor_convert(nd->cin[k], in[k], false);
        if (nd->edge[k] != GLIA__EDGE_DIRECT) in[k] = nd->cin[k];
    }
    uint64_t key = mask_key(m, nd);
    struct glia_fwd a = {in,
                         nd->n_in,
                         nd->out,
                         (nd->layer.type->flags & GLIA_TYPE_LOSS) ? m->act.y : NULL,
                         train,
                         glia_seed(key, m->trainer.step),
                         recompute,
                         key,
                         m->trainer.capturing ? m->trainer.step_dev->data : NULL,
                         pos >= 0,
                         pos >= 0 ? pos : 0,
                         NULL,
                         NULL,
                         train ? nd->saved : NULL, NULL, false, NULL, NULL};
    if (train && i == m->graph.n_nodes - 1 && (glia_layer_kernel_flags(&nd->layer) & GLIA_KERNEL_GRAD_IN_FORWARD) &&
        nd->in[0] >= 0 && glia__grad_in_place(m) == nd->in[0]) {  /* the loss's gradient, over the logits, in the forward's pass */
        a.din = m->graph.nodes[nd->in[0]].dout;
        a.dout = m->act.loss_scale;
    }
    struct glia__node *run = nd;  /* whose kernel runs */
    if (nd->res_norm && residual_fused(m, nd, recompute) && !st) {  /* the sum inside the normalization's forward */
        struct glia__node *nj = &m->graph.nodes[nd->res_norm - 1];
        a.n_in = 1;
        a.out = nj->out;
        a.residual = in[1];
        a.sum = nd->out;
        a.saved = train ? nj->saved : NULL;
        a.seed_key = mask_key(m, nj);
        a.seed = glia_seed(a.seed_key, m->trainer.step);
        run = nj;
    }
    if (!train && nd->norm_fold && !st) {  /* and the normalization's evaluation after it, into that one's output */
        struct glia__node *nj = &m->graph.nodes[nd->norm_fold - 1];
        bool relu = false;
        st = glia_kernel_eval_affine(nj->layer.kernel)(&nj->layer, nd->fold_affine, &relu);
        a.out = nj->out;
        a.affine = nd->fold_affine;
        a.affine_relu = relu;
    }
    struct glia__guarded *guards = NULL;
    int n_guards = 0;
    if (!st) st = guards_fill(m, nd, NULL, a.out, &guards, &n_guards);
    if (m->nvtx) glia__range_push(m->backend, "[%s] %s", nd->layer.name, recompute ? "forward again" : "forward");
    if (!st) {
        st = run->layer.kernel->forward(&run->layer, &a);
        st = guards_check(nd, recompute ? "forward (run again in backward)" : "forward", guards, n_guards, st);
        if (!st && train && m->detect_anomaly) st = anomaly_check(m, nd, "forward", nd->out, "its output");
    }
    if (m->nvtx) glia__range_pop(m->backend);
    if (m->trainer.profiling) {  /* a recomputation is part of the backward */
        glia_backend_sync(m->backend);
        double t1 = glia__now();
        *(recompute ? &nd->t_bwd : &nd->t_fwd) += t1 - t0;
        trace_layer(m, recompute ? GLIA__TRACE_RECOMPUTE : GLIA__TRACE_FORWARD, nd, t0, t1);
    }
    if (st && !glia_context_error(m->ctx)[0])
        glia_section_error(nd->sec, NULL, st, "%s failed (%s)", recompute ? "forward run again in backward" : "forward",
                           glia_strerror(st));
    return st;
}

/* The backend told that a forward pass over m's parameters begins (what it derives from them, refreshed at once). */
static glia_status pass_begin(struct glia_model *m)
{
    const struct glia_tensor *w = m->params.w;
    return w ? glia__backend_pass_begin(m->backend, w->data, glia_tensor_nbytes(w)) : GLIA_OK;
}

/* A forward pass: the backend told first, then each layer. */
static glia_status forward(struct glia_model *m, bool train)
{
    glia_status st = pass_begin(m);
    if (st) glia_error_wrap(m->ctx, st, "%s forward: the backend's pass_begin", train ? "training" : "evaluation");
    for (int i = 0; i < m->graph.n_nodes && !st; i++) st = forward_node(m, i, train, false, -1);
    return st;
}

/* The parameter node nd's tied weight is ([layer] tie_weight), or NULL. */
static struct glia_param *tie_owner(struct glia_model *m, const struct glia__node *nd)
{
    return nd->tie ? &m->graph.nodes[nd->tie_node].layer.params[nd->tie_param] : NULL;
}

static glia_status backward(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes; i++) m->graph.nodes[i].grad_written = m->graph.nodes[i].grad_preact = false;
    for (int i = m->graph.n_nodes - 1; i >= 0; i--) {
        struct glia__node *nd = &m->graph.nodes[i];
        for (int j = i - nd->recompute_n; j < i; j++) {  /* this segment's dropped outputs, again */
            glia_status st = m->graph.nodes[j].recompute ? forward_node(m, j, true, true, -1) : GLIA_OK;
            if (st) return st;
        }
        if (!nd->needs_grad) continue;
        const struct glia_tensor *in[GLIA__MAX_INPUTS];
        struct glia_tensor *din[GLIA__MAX_INPUTS];
        bool acc[GLIA__MAX_INPUTS], acc_conv[GLIA__MAX_INPUTS];
        for (int k = 0; k < nd->n_in; k++) {
            int p = nd->in[k];
            in[k] = nd->edge[k] != GLIA__EDGE_DIRECT ? nd->cin[k] : p < 0 ? m->act.x : m->graph.nodes[p].out;
            din[k] = p >= 0 && m->graph.nodes[p].needs_grad ? m->graph.nodes[p].dout : NULL;
            acc[k] = p >= 0 && m->graph.nodes[p].grad_written;
            for (int j = 0; j < k; j++) acc[k] |= din[k] && nd->in[j] == p;
            if (din[k] && nd->edge[k] != GLIA__EDGE_DIRECT) din[k] = nd->cdin[k];
            acc_conv[k] = acc[k];  /* a converted gradient is written whole, then added or written */
            if (nd->edge[k] == GLIA__EDGE_CONVERT) acc[k] = false;
        }
        bool is_loss = nd->layer.type->flags & GLIA_TYPE_LOSS;
        struct glia_bwd a = {in, nd->n_in, nd->out, is_loss ? m->act.loss_scale : nd->dout, din, acc,
                             is_loss ? m->act.y : NULL, nd->saved, NULL, NULL, false};
        const struct glia__node *np = nd->din_act ? &m->graph.nodes[nd->din_act - 1] : NULL;
        if (np && din[0] && !acc[0] && np->saved) {  /* the producer's activation gradient, applied as din[0] is written */
            a.din_act = glia_section_str(np->sec, "activation");
            a.din_act_pre = np->saved;
            m->graph.nodes[nd->din_act - 1].grad_preact = true;
        }
        a.dout_preact = nd->grad_preact;
        struct glia_param *owner = tie_owner(m, nd);
        if (owner) nd->layer.params[nd->tie - 1].grad_unset = owner->grad_unset;  /* one gradient: write or add */
        double t0 = m->trainer.profiling ? glia__now() : 0;
        struct glia__guarded *guards;
        int n_guards;
        glia_status st = guards_fill(m, nd, din, NULL, &guards, &n_guards);
        if (m->nvtx) glia__range_push(m->backend, "[%s] backward", nd->layer.name);
        if (!st) st = guards_check(nd, "backward", guards, n_guards, nd->layer.kernel->backward(&nd->layer, &a));
        if (m->nvtx) glia__range_pop(m->backend);
        if (!st && m->detect_anomaly) st = anomaly_backward(m, nd, din);
        for (int k = 0; k < nd->n_in && !st; k++)
            if (din[k] && nd->edge[k] == GLIA__EDGE_CONVERT)
                st = glia_tensor_convert(m->graph.nodes[nd->in[k]].dout, din[k], acc_conv[k]);
        if (m->trainer.profiling) {
            glia_backend_sync(m->backend);
            double t1 = glia__now();
            nd->t_bwd += t1 - t0;
            trace_layer(m, GLIA__TRACE_BACKWARD, nd, t0, t1);
        }
        if (st) {
            if (!glia_context_error(m->ctx)[0])
                glia_section_error(nd->sec, NULL, st, "backward failed (%s)", glia_strerror(st));
            return st;
        }
        for (int k = 0; k < nd->n_in; k++)
            if (din[k]) m->graph.nodes[nd->in[k]].grad_written = true;
        for (int p = 0; p < nd->layer.n_params; p++) nd->layer.params[p].grad_unset = false;
        if (owner) owner->grad_unset = false;
        if (m->dist.ddp && (st = glia__ddp_node_done(m, m->dist.ddp, i))) return st;  /* its buckets may start now */
    }
    return GLIA_OK;
}

/* Sum of squares of the gradient arena, in double (non-finite when any gradient is). */
static glia_status grad_sumsq(struct glia_model *m, double *out)
{
    return glia_backend_sumsq_f32(m->backend, m->params.g->data, (size_t)m->params.wa.len, out);
}

/* g *= c over the gradient arena. */
static glia_status grad_scale(struct glia_model *m, float c)
{
    return glia_backend_scale_f32(m->backend, m->params.g->data, (size_t)m->params.wa.len, c);
}

/* The gradients were computed for the loss times the loss scale. Unscale them, and clip them so
 * that their global L2 norm is at most clip_grad_norm (torch.nn.utils.clip_grad_norm_:
 * coefficient max_norm / (norm + 1e-6), capped at 1), in one pass. With fp16 loss scaling a
 * non-finite gradient skips the step (*skip), which the host must know; without it the backend's
 * clip_f32 clips on the device, the host not waiting for the norm. */
static glia_status unscale_and_clip(struct glia_model *m, bool *skip)
{
    *skip = false;
    bool scaling = m->precision == GLIA_PRECISION_FP16;
    if (!scaling && m->trainer.clip_grad_norm <= 0) return GLIA_OK;
    struct glia_backend *b = m->backend;
    if (!scaling)  /* on the device: no wait for the norm */
        return glia_backend_clip_f32(b, m->params.g->data, (size_t)m->params.wa.len, m->trainer.clip_grad_norm);
    double sq, used = m->trainer.scaler.scale;
    glia_status st = grad_sumsq(m, &sq);
    if (st) return st;
    if (scaling) {
        *skip = !glia__scaler_update_every(&m->trainer.scaler, sq, m->trainer.scaler_growth);
        if (*skip)
            glia_log(m->ctx, GLIA_LOG_DEBUG, "fp16: non-finite gradients after step %lld; loss scale now %g",
                     (long long)m->trainer.step, m->trainer.scaler.scale);
        if (m->trainer.scaler.scale != used && (st = glia__write_loss_scale(m))) return st;
        if (*skip) return GLIA_OK;
    }
    double coef = 1.0 / used, norm = sqrt(sq) * coef;
    if (m->trainer.clip_grad_norm > 0 && m->trainer.clip_grad_norm / (norm + 1e-6) < 1.0) coef *= m->trainer.clip_grad_norm / (norm + 1e-6);
    return coef != 1.0 ? grad_scale(m, (float)coef) : GLIA_OK;
}

/* Set-to-none: the next backward writes the parameters' gradients instead of adding to them. */
void glia__grads_unset(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].layer.n_params; p++) m->graph.nodes[i].layer.params[p].grad_unset = true;
}

/* A parameter whose gradient no layer wrote this step has gradient zero. */
static glia_status grads_zero_unset(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].layer.n_params; p++) {
            struct glia_param *pa = &m->graph.nodes[i].layer.params[p];
            if (pa->grad_unset && m->graph.nodes[i].tie != p + 1) {  /* a tied weight's owner decides */
                glia_status st = glia_tensor_fill_zero(pa->grad);
                if (st) return st;
            }
        }
    return GLIA_OK;
}

/* The optimizer's step number `step` at learning rate lr over the arenas; state: GLIA__MAX_STATE of room. */
static struct glia_opt_step opt_args(struct glia_model *m, float **state, double lr, int64_t step)
{
    for (int k = 0; k < GLIA__MAX_STATE; k++)  /* past n_state: NULL, never stack garbage */
        state[k] = k < m->trainer.opt.type->n_state ? m->params.state[k]->data : NULL;
    return (struct glia_opt_step){m->params.w->data, m->params.g->data, state, (size_t)m->params.wa.len,
                                  m->params.decay_mask ? m->params.decay_mask->data : NULL, lr, step, m->backend, NULL,
                                  NULL, m->params.wa.count, m->params.seg,
                                  m->params.dev_seg ? m->params.dev_seg->data : NULL};
}

glia_status glia__optimizer_step(struct glia_model *m, int epoch)
{
    /* ddp: the gradients are the average over ranks once every bucket is in */
    if (m->dist.ddp) {
        double t0 = glia__now();
        if (m->nvtx) glia__range_push(m->backend, "gradient wait");
        glia_status st = glia__ddp_finish(m, m->dist.ddp);
        if (m->nvtx) glia__range_pop(m->backend);
        if (st) return st;
        if (m->trainer.profiling && m->trainer.trace) glia__trace_add(m->trainer.trace, GLIA__TRACE_COMM, "gradient wait", t0, glia__now());
    }
    bool skip;
    glia_status st = glia__scaler_settle(m);  /* the host's scaler and step decide this one */
    if (!st) st = grads_zero_unset(m);
    if (!st) st = unscale_and_clip(m, &skip);
    if (!st && !skip) {
        float *state[GLIA__MAX_STATE];
        m->trainer.step++;
        m->trainer.cur_lr = glia__model_lr(m, epoch, m->trainer.step);
        struct glia_opt_step s = opt_args(m, state, m->trainer.cur_lr, m->trainer.step);
        double t0 = m->trainer.profiling ? glia__now() : 0;
        if (m->nvtx) glia__range_push(m->backend, "optimizer %s", m->trainer.opt.type->name);
        st = m->params.wa.n ? m->trainer.opt.kernel->step(&m->trainer.opt, &s) : GLIA_OK;
        if (m->nvtx) glia__range_pop(m->backend);
        if (m->trainer.cuda_graph) m->trainer.opt_outside++;
        if (m->trainer.profiling) {
            glia_backend_sync(m->backend);
            double t1 = glia__now();
            m->trainer.t_opt += t1 - t0;
            if (m->trainer.trace) glia__trace_add(m->trainer.trace, GLIA__TRACE_OPTIMIZER, m->trainer.opt.type->name, t0, t1);
        }
    }
    if (st) return glia_error(m->ctx, st, "optimizer '%s' step %lld failed: %s", m->trainer.opt.type->name,
                              (long long)m->trainer.step, glia_context_error(m->ctx));
    glia__grads_unset(m);
    return GLIA_OK;
}

static glia_status read_loss(struct glia_model *m, double *loss)
{
    float v;
    glia_status st = glia_tensor_to_host(m->graph.nodes[m->graph.n_nodes - 1].out, &v, sizeof v);
    *loss = v;
    if (m->dist.n_replicas > 1 && m->dist.loss_weight < 1) {  /* dp: the whole batch's mean over the chunks */
        *loss = v * m->dist.loss_weight;
        for (int r = 1; r < m->dist.n_replicas && !st; r++) {
            struct glia_model *p = m->dist.replica[r];
            if (!m->dist.chunk[r]) continue;
            st = glia_tensor_to_host(p->graph.nodes[p->graph.n_nodes - 1].out, &v, sizeof v);
            *loss += v * p->dist.loss_weight;
        }
    }
    return st;
}

/* ---- mode = dp: one process, several devices ----
 * A training batch is split into chunks of ceil(n / devices) rows (torch.nn.DataParallel's
 * scatter); the model computes the first chunk on its device and each replica the next ones
 * on its own, with its loss weighted by its share of the batch, so that the gradients added
 * into the model's are those of the whole batch. The replicas start every step from the model's
 * weights and buffers (their own running statistics are dropped, as in DataParallel). */

/* dst = src between the model and a replica. glia_tensor_copy stays within one device (or copies
 * to or from the host); between two devices the bytes go through the host: reading src waits for
 * the work queued on its device, and the write is done before this returns. */
static glia_status dp_copy(struct glia_tensor *dst, const struct glia_tensor *src)
{
    if (dst->device.type == GLIA_DEVICE_CPU || src->device.type == GLIA_DEVICE_CPU ||
        glia_tensor_backend(dst) == glia_tensor_backend(src))
        return glia_tensor_copy(dst, src);
    size_t n = glia_tensor_nbytes(src);
    if (dst->dtype != src->dtype || glia_tensor_numel(dst) != glia_tensor_numel(src)) return GLIA_EINVAL;
    void *h = malloc(n ? n : 1);
    if (!h) return GLIA_ENOMEM;
    glia_status st = glia_tensor_to_host(src, h, n);
    if (!st) st = glia_tensor_from_host(dst, h, n);
    free(h);
    return st;
}

/* dst += src over the f32 elements of a parameter gradient (src brought to dst's device first). */
static glia_status add_into(struct glia_model *m, struct glia_tensor *dst, struct glia_tensor *src)
{
    glia_status st = GLIA_OK;
    struct glia_tensor *tmp = NULL;
    if (src->device.type != dst->device.type || src->device.index != dst->device.index) {
        if (!(st = glia_tensor_new(m->backend, GLIA_F32, &dst->shape, &tmp))) st = dp_copy(tmp, src);
        src = tmp;
    }
    if (!st) st = glia_backend_axpy_f32(m->backend, dst->data, src->data, (size_t)glia_tensor_numel(dst), 1.0f);
    glia_tensor_release(tmp);
    return st;
}

/* Split batch n (in m->act.x, m->act.y) over the devices and run every chunk's forward. */
static glia_status dp_forward(struct glia_model *m, int64_t n)
{
    int R = m->dist.n_replicas;
    int64_t per = (n + R - 1) / R, row = glia_shape_numel(&m->act.x->shape) / (n > 0 ? n : 1);
    glia_status st = GLIA_OK;
    for (int r = 0; r < R; r++) m->dist.chunk[r] = r * per >= n ? 0 : (n - r * per < per ? n - r * per : per);
    for (int r = 1; r < R && !st; r++) {
        struct glia_model *p = m->dist.replica[r];
        if (!m->dist.chunk[r]) continue;
        int64_t most = (m->data.batch + R - 1) / R;  /* its largest chunk */
        st = glia__need_activations(p, most, 0);
        if (!st) st = glia__set_batch(p, m->dist.chunk[r], m->act.cur_len, true);
        if (!st && p->dist.weights_step != m->trainer.step) st = dp_copy(p->params.w, m->params.w);  /* changed by a step */
        if (!st) p->dist.weights_step = m->trainer.step;
        if (!st && m->params.ba.n) st = dp_copy(p->params.buf, m->params.buf);  /* changed by every forward */
        struct glia_tensor *xs = NULL, *ys = NULL;
        if (!st) st = glia_tensor_view(m->act.x_buf, r * per * row, &p->act.x->shape, &xs);
        if (!st) st = glia_tensor_view(m->act.y_buf, r * per * (m->data.lm ? m->act.cur_len : 1), &p->act.y->shape, &ys);
        if (!st) st = dp_copy(p->act.x, xs);
        if (!st) st = dp_copy(p->act.y, ys);
        glia_tensor_release(xs);
        glia_tensor_release(ys);
        p->dist.loss_weight = (double)m->dist.chunk[r] / (double)n;
        p->trainer.scaler = m->trainer.scaler;
        p->trainer.step = m->trainer.step;
        if (!st) st = glia__write_loss_scale(p);
    }
    m->dist.loss_weight = (double)m->dist.chunk[0] / (double)n;
    if (!st) st = glia__set_batch(m, m->dist.chunk[0], m->act.cur_len, true);
    if (!st) st = glia__write_loss_scale(m);
    for (int r = 0; r < R && !st; r++)
        if (m->dist.chunk[r]) st = forward(r ? m->dist.replica[r] : m, true);
    return st;
}

/* The replicas copy the model's weights at their next forward (they were loaded or broadcast). */
void glia__dp_weights_changed(struct glia_model *m)
{
    for (int r = 1; r < m->dist.n_replicas; r++) m->dist.replica[r]->dist.weights_step = -1;
}

/* Every chunk's backward, then the replicas' gradients added into the model's. */
static glia_status dp_backward(struct glia_model *m)
{
    glia_status st = GLIA_OK;
    for (int r = 0; r < m->dist.n_replicas && !st; r++)
        if (m->dist.chunk[r]) st = backward(r ? m->dist.replica[r] : m);
    for (int r = 1; r < m->dist.n_replicas && !st; r++) {
        struct glia_model *p = m->dist.replica[r];
        if (!m->dist.chunk[r]) continue;
        for (int i = 0; i < m->graph.n_nodes && !st; i++)
            for (int k = 0; k < m->graph.nodes[i].layer.n_params && !st; k++) {
                struct glia_param *dst = &m->graph.nodes[i].layer.params[k], *src = &p->graph.nodes[i].layer.params[k];
                if (src->grad_unset || m->graph.nodes[i].tie == k + 1) continue;  /* nothing written; its owner's */
                st = dst->grad_unset ? dp_copy(dst->grad, src->grad) : add_into(m, dst->grad, src->grad);
                dst->grad_unset = false;
                src->grad_unset = true;  /* the replica writes afresh next time */
            }
    }
    return st;
}


/* ---- [runtime] cuda_graph: training steps replayed from CUDA graphs ----
 * Each batch shape (n, len), with the parameters' gradients unset or being accumulated, and with or
 * without the optimizer update after it, runs its first training pass (forward and backward, and the
 * update) as it comes: that sizes the buffers layers make lazily, compiles kernels and times
 * convolution algorithms. Its second pass is captured into a graph, and every pass from then on is
 * one launch of it. The graph reads the batch from x and y and keeps the activations where the views
 * of that shape put them (fixed while the activations are: freeing them frees the graphs). What
 * changes from step to step reaches it through step_dev, written by the host in one write before
 * each launch: the step random layers draw from, and the optimizer's scalars (learning rate, bias
 * corrections: the bytes its kernel's `scalars` computes on the host as for a step run as it comes,
 * so a replay updates bit for bit the same). The update is captured with the zeroing of unwritten
 * gradients and clipping (clip_f32 decides on the device), where the optimizer's kernel can read
 * its scalars from the device (`scalars`); else the update runs after the replay, as it comes. A
 * pass that cannot be captured runs as it comes, with a notice, and its entry is not tried again.
 *
 * With precision = fp16 the loss scaler is captured too, where the backend keeps it on the device
 * (scaler_step, select) and the optimizer's kernel can leave a skipped step's weights and state
 * alone (GLIA_OPT_KERNEL_SKIP): scaler_dev holds the scaler's state (scale, clean and skipped steps,
 * the step count, found_inf), which the device updates after each backward as the host would, and
 * every graph begins by picking what it is handed by the device's step count, which the host knows
 * only once it reads the update's outcome (with the lagged loss, a step late). So the host hands
 * rows for each count it could be, T .. T+P (T: its step count, P: updates launched whose outcome it
 * has not read; with P = 0 the state itself too, the host's being exact): the step random layers
 * draw from (a skipped step does not advance it) and the optimizer's scalars of the step after it.
 * Each update's state is downloaded after its replay and read into the trainer (step, learning
 * rate, scaler) with the loss, or right after the pass without a lag (glia_model_step), and
 * before anything reads them: a pass run as it comes, a checkpoint, an epoch's end, and an update
 * after which the step count may stop the run or save a checkpoint. */

/* Number of parameters of the model (in node order: the order of glia__graph.written). */
static int n_params(const struct glia_model *m)
{
    int n = 0;
    for (int i = 0; i < m->graph.n_nodes; i++) n += m->graph.nodes[i].layer.n_params;
    return n;
}

/* Copy the parameters' grad_unset flags out of (save) or into the model. */
static void grad_flags(struct glia_model *m, bool *flags, bool save)
{
    int k = 0;
    for (int i = 0; i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].layer.n_params; p++, k++) {
            bool *u = &m->graph.nodes[i].layer.params[p].grad_unset;
            if (save) flags[k] = *u;
            else *u = flags[k];
        }
}

/* Why the optimizer step of m cannot be captured with the pass, or NULL where it can (*need: its scalars' bytes). */
static const char *opt_outside_why(struct glia_model *m, char *buf, size_t n, size_t *need_out)
{
    const struct glia_optimizer_kernel *k = m->trainer.opt.kernel;
    if (m->dist.n_replicas > 1 || m->dist.ddp) return "its gradients come from more than one device";
    if (k->struct_size < GLIA__END_OF(struct glia_optimizer_kernel, scalars) || !k->scalars)
        return "its kernel does not read its scalars from the device (no `scalars` slot)";
    float *state[GLIA__MAX_STATE];
    unsigned char probe[GLIA_OPT_SCALARS_MAX];
    struct glia_opt_step s = opt_args(m, state, m->trainer.lr, m->trainer.step + 1);
    size_t need = k->scalars(&m->trainer.opt, &s, probe, sizeof probe);
    if (need == 0) return "its kernel cannot read this step's scalars from the device";
    if (need > sizeof probe) {
        snprintf(buf, n, "its scalars take %zu bytes, more than GLIA_OPT_SCALARS_MAX (%d)", need, GLIA_OPT_SCALARS_MAX);
        return buf;
    }
    *need_out = need;
    if (m->precision != GLIA_PRECISION_FP16) return NULL;
    if (!m->trainer.scaler_dev)
        return "precision = fp16: the backend keeps no loss scaler on the device (no scaler_step): the host decides "
               "whether a step is skipped";
    if (k->struct_size < GLIA__END_OF(struct glia_optimizer_kernel, flags) || !(k->flags & GLIA_OPT_KERNEL_SKIP))
        return "precision = fp16: its kernel cannot skip a step on the device (no GLIA_OPT_KERNEL_SKIP): the host "
               "decides whether a step is skipped";
    return NULL;
}

/* Whether the optimizer step is captured with the pass (decided once; the reason it is not, logged once). */
static bool opt_in_graph(struct glia_model *m)
{
    if (m->trainer.opt_in_graph) return m->trainer.opt_in_graph > 0;
    char buf[160];
    size_t need = 0;
    const char *why = opt_outside_why(m, buf, sizeof buf, &need);
    m->trainer.opt_in_graph = why ? -1 : 1;
    m->trainer.dev_scaler = !why && m->precision == GLIA_PRECISION_FP16;
    m->trainer.scaler_words = 1 + (int)((need + 7) / 8);
    if (why)
        glia_log(m->ctx, GLIA_LOG_INFO, "cuda_graph: the optimizer step of '%s' runs outside the graph: %s",
                 m->trainer.opt.type->name, why);
    return !why;
}

/* The graph entry of this pass (upd: with the optimizer step): NULL (a pass to run as it comes) when it is new
 * (then remembered, while there is room). */
static struct glia__graph *graph_entry(struct glia_model *m, int64_t n, bool upd)
{
    bool acc = false;  /* a micro-step after the first of an accumulation: the backward adds */
    for (int i = 0; i < m->graph.n_nodes && !acc; i++)
        for (int p = 0; p < m->graph.nodes[i].layer.n_params; p++) acc |= !m->graph.nodes[i].layer.params[p].grad_unset;
    for (int i = 0; i < m->trainer.n_graphs; i++) {
        struct glia__graph *g = &m->trainer.graphs[i];
        if (g->n == n && g->len == m->act.cur_len && g->acc == acc && g->upd == upd) return g;
    }
    if (m->trainer.n_graphs < GLIA__MAX_GRAPHS)
        m->trainer.graphs[m->trainer.n_graphs++] =
            (struct glia__graph){.n = n, .len = m->act.cur_len, .acc = acc, .upd = upd, .state = GLIA__GRAPH_SEEN};
    return NULL;
}

static glia_status forward(struct glia_model *m, bool train);
static glia_status backward(struct glia_model *m);

/* fp16's loss scaler on the device: its state (struct glia_loss_scaler) in scaler_dev. */
static struct glia_loss_scaler *scaler_state(struct glia_model *m) { return m->trainer.scaler_dev->data; }

/* The device's part of the optimizer step, captured after the backward: the unwritten gradients zeroed, clipping
 * (with fp16, the loss scaler's step on the device, which may skip the update), the update reading its scalars from
 * step_dev (written before each replay; nothing on the host changes here). */
static glia_status opt_capture(struct glia_model *m)
{
    bool skip;  /* never: the host's loss scaler is not here (opt_in_graph) */
    glia_status st = grads_zero_unset(m);
    if (!st && m->trainer.dev_scaler) {
        struct glia_scaler_args a = {m->params.g->data, (size_t)m->params.wa.len, m->trainer.clip_grad_norm,
                                     m->trainer.scaler_growth, m->act.loss_scale->data, m->dist.loss_weight,
                                     (double)m->trainer.accumulate};  /* glia__write_loss_scale's figure */
        st = glia_backend_scaler_step(m->backend, scaler_state(m), &a);
    } else if (!st)
        st = unscale_and_clip(m, &skip);
    if (st || !m->params.wa.n) return st;
    float *state[GLIA__MAX_STATE];
    struct glia_opt_step s = opt_args(m, state, m->trainer.lr, m->trainer.step + 1);
    s.dev_scalars = (const int64_t *)m->trainer.step_dev->data + 1;
    if (m->trainer.dev_scaler) s.dev_skip = &scaler_state(m)->found_inf;
    return m->trainer.opt.kernel->step(&m->trainer.opt, &s);
}

/* Capture the training pass of g; g->state says whether it worked. The host-side state a pass changes (the
 * gradients' flags) is put back as it was: the captured work has not run. Only out of memory is an error. */
static glia_status graph_capture(struct glia_model *m, struct glia__graph *g)
{
    struct glia_backend *b = m->backend;
    int np = n_params(m);
    bool *before = malloc(sizeof *before * (size_t)(np ? np : 1));
    g->written = malloc(sizeof *g->written * (size_t)(np ? np : 1));
    if (!before || !g->written) {
        free(before);
        return GLIA_ENOMEM;
    }
    grad_flags(m, before, true);
    glia_status st = glia_backend_capture_begin(b);
    if (!st) {
        m->trainer.capturing = true;
        if (m->trainer.dev_scaler)  /* first, what this replay is handed: the row of the device's step count */
            st = glia_backend_select(b, m->trainer.step_dev->data, (const int64_t *)m->trainer.scaler_dev->data +
                                     GLIA__SCALER_STATE_WORDS, &scaler_state(m)->step, (size_t)m->trainer.scaler_words);
        if (!st) st = forward(m, true);
        if (!st) st = backward(m);
        if (!st && g->upd) st = opt_capture(m);
        m->trainer.capturing = false;
        glia_status se = glia_backend_capture_end(b, &g->exec);  /* ends it whatever happened */
        if (!st) st = se;
    }
    grad_flags(m, g->written, true);  /* unset flags after the pass: written is their negation */
    for (int k = 0; k < np; k++) g->written[k] = !g->written[k];
    grad_flags(m, before, false);
    free(before);
    if (!st) {
        g->state = GLIA__GRAPH_READY;
        return GLIA_OK;
    }
    if (g->exec) glia_backend_graph_free(b, g->exec);
    g->exec = NULL;
    g->state = GLIA__GRAPH_FAILED;
    glia_log(m->ctx, GLIA_LOG_WARN, "cuda_graph: the training pass of a batch of %lld could not be captured (%s); "
                                    "it runs without a graph",
             (long long)g->n, glia_context_error(m->ctx)[0] ? glia_context_error(m->ctx) : glia_strerror(st));
    glia_context_clear_error(m->ctx);
    return GLIA_OK;
}

_Static_assert(8 * GLIA__STEP_DEV_WORDS <= GLIA_BACKEND_WRITE_MAX, "a replay's words are one glia_backend_write");

/* What a replay of g at epoch is handed, into words (GLIA__STEP_DEV_WORDS): the step, and with the update the
 * optimizer's scalars for the next step at *lr; *n = the bytes to write. */
static glia_status replay_words(struct glia_model *m, const struct glia__graph *g, int epoch, int64_t *words,
                                size_t *n, double *lr)
{
    words[0] = m->trainer.step;
    *n = sizeof *words;
    if (!g->upd) return GLIA_OK;
    float *state[GLIA__MAX_STATE];
    *lr = glia__model_lr(m, epoch, m->trainer.step + 1);
    struct glia_opt_step s = opt_args(m, state, *lr, m->trainer.step + 1);
    size_t k = m->trainer.opt.kernel->scalars(&m->trainer.opt, &s, words + 1, GLIA_OPT_SCALARS_MAX);
    if (k == 0 || k > GLIA_OPT_SCALARS_MAX)
        return glia_error(m->ctx, GLIA_EPLUGIN, "optimizer '%s': its kernel's scalars gave %zu bytes for step %lld "
                                                "(1 to %d)", m->trainer.opt.type->name, k,
                          (long long)m->trainer.step + 1, GLIA_OPT_SCALARS_MAX);
    *n += (k + 7) / 8 * 8;
    return GLIA_OK;
}

/* What a replay of g at epoch is handed with fp16's loss scaler on the device, written into scaler_dev: a row for
 * each step count the device may be at (T = trainer.step .. T + P, P updates unread): the step, and with the update
 * the optimizer's scalars of the step after it; with P = 0 the host's scaler state before them (it is exact). */
static glia_status scaler_rows(struct glia_model *m, const struct glia__graph *g, int epoch)
{
    struct glia__model_trainer *t = &m->trainer;
    glia_status st = t->scaler_pending >= GLIA__SCALER_ROWS ? glia__scaler_drain(m, GLIA__SCALER_ROWS - 1) : GLIA_OK;
    if (st) return st;
    int64_t words[GLIA__SCALER_DEV_WORDS] = {0};
    int S = (int)GLIA__SCALER_STATE_WORDS, W = t->scaler_words, P = t->scaler_pending;
    struct glia_loss_scaler host = {t->scaler.scale, t->scaler.clean, t->scaler.skipped, t->step, 0, 0};
    memcpy(words, &host, sizeof host);
    words[S] = t->step;
    words[S + 1] = P + 1;
    for (int r = 0; r <= P && !st; r++) {
        int64_t *row = words + S + 2 + r * W, next = t->step + r + 1;
        row[0] = next - 1;
        if (!g->upd) continue;
        float *state[GLIA__MAX_STATE];
        struct glia_opt_step a = opt_args(m, state, glia__model_lr(m, epoch, next), next);
        size_t k = t->opt.kernel->scalars(&t->opt, &a, row + 1, (size_t)(W - 1) * 8);
        if (k == 0 || k > (size_t)(W - 1) * 8)
            st = glia_error(m->ctx, GLIA_EPLUGIN, "optimizer '%s': its kernel's scalars gave %zu bytes for step %lld "
                                                  "(1 to %d)", t->opt.type->name, k, (long long)next, (W - 1) * 8);
    }
    size_t from = P ? (size_t)S : 0, end = (size_t)(S + 2 + (P + 1) * W);
    for (size_t i = from; i < end && !st; i += GLIA_BACKEND_WRITE_MAX / 8) {
        size_t nw = end - i < GLIA_BACKEND_WRITE_MAX / 8 ? end - i : GLIA_BACKEND_WRITE_MAX / 8;
        st = glia_backend_write(m->backend, (int64_t *)t->scaler_dev->data + i, words + i, nw * 8);
    }
    return st;
}

/* One launch of g's graph for this step (at epoch's learning rate when it updates). */
static glia_status graph_replay(struct glia_model *m, struct glia__graph *g, int epoch)
{
    struct glia_backend *b = m->backend;
    int64_t words[GLIA__STEP_DEV_WORDS] = {0};
    size_t n;
    double lr = 0;
    glia_status st;
    if (m->trainer.dev_scaler) {
        st = scaler_rows(m, g, epoch);
    } else {
        st = replay_words(m, g, epoch, words, &n, &lr);
        if (!st) st = glia_backend_write(b, m->trainer.step_dev->data, words, n);
    }
    if (!st) st = glia_backend_graph_launch(b, g->exec);
    if (!st && g->upd && m->trainer.dev_scaler) st = glia__scaler_outcome(m, epoch);
    if (st) return glia_error(m->ctx, st, "cuda_graph: replaying the training pass of a batch of %lld failed: %s",
                              (long long)g->n, glia_context_error(m->ctx));
    m->trainer.graph_replays++;
    if (g->upd) {  /* what the update does on the host, as glia__optimizer_step (fp16: when its outcome is read) */
        if (!m->trainer.dev_scaler) {
            m->trainer.step++;
            m->trainer.cur_lr = lr;
            m->trainer.graph_updates++;
        }
        glia__grads_unset(m);
        return GLIA_OK;
    }
    int k = 0;
    for (int i = 0; i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].layer.n_params; p++, k++)
            if (g->written[k]) m->graph.nodes[i].layer.params[p].grad_unset = false;
    return GLIA_OK;
}

/* The training forward and backward of the batch in m->x (n rows) with cuda_graph on, and with `update` the
 * optimizer step at epoch's learning rate where it is captured too (*updated): replayed, captured now and
 * replayed, or run as it comes. */
static glia_status train_pass(struct glia_model *m, int64_t n, int epoch, bool update, bool *updated)
{
    bool in = opt_in_graph(m), upd = update && in;  /* decided before any capture: fp16's graphs pick their step */
    struct glia__graph *g = graph_entry(m, n, upd);
    glia_status st = GLIA_OK;
    *updated = false;
    if (g && g->state == GLIA__GRAPH_SEEN) st = graph_capture(m, g);
    if (st) return st;
    if (g && g->state == GLIA__GRAPH_READY) {
        *updated = upd;
        return graph_replay(m, g, epoch);
    }
    if ((st = glia__scaler_settle(m))) return st;  /* as it comes: from the host's step and scaler */
    st = forward(m, true);
    return st ? st : backward(m);
}

/* A training forward of the batch in m->x (n rows), on one device or split over dp's. */
glia_status glia__train_forward(struct glia_model *m, int64_t n)
{
    return m->dist.n_replicas > 1 ? dp_forward(m, n) : forward(m, true);
}

glia_status glia__train_backward(struct glia_model *m)
{
    return m->dist.n_replicas > 1 ? dp_backward(m) : backward(m);
}



glia_status glia__lagged_init(struct glia_model *m, struct glia__lagged_loss *q)
{
    struct glia_backend *b = m->backend;
    *q = (struct glia__lagged_loss){0};
    if (m->dist.n_replicas > 1) return GLIA_OK;  /* dp: the loss is summed over the devices' chunks */
    if (!glia__backend_queues(b)) return GLIA_OK;  /* the loss is there when the step returns: read it then */
    return glia_backend_host_alloc(b, sizeof(float), (void **)&q->host);
}

void glia__lagged_free(struct glia_model *m, struct glia__lagged_loss *q)
{
    if (q->host) glia_backend_host_free(m->backend, q->host);
    q->host = NULL;
}

/* Start reading step k's loss (batch nb). */
static glia_status lagged_start(struct glia_model *m, struct glia__lagged_loss *q, int64_t k, int64_t nb)
{
    struct glia_backend *b = m->backend;
    q->k = k, q->nb = nb;
    q->pending = true;
    return glia_backend_download(b, q->host, m->graph.nodes[m->graph.n_nodes - 1].out->data, sizeof(float), &q->ticket);
}

/* The pending loss, once its download is done. */
static glia_status lagged_finish(struct glia_model *m, struct glia__lagged_loss *q, double *loss)
{
    q->pending = false;
    glia_status st = glia_backend_wait_copy(m->backend, q->ticket, true);
    *loss = *q->host;
    return st;
}

/* Step k's loss l (batch nb) into *got; a non-finite loss stops training. */
static glia_status loss_known(struct glia_model *m, double l, int64_t nb, int epoch, int64_t k, struct glia__loss_read *got)
{
    if (!isfinite(l))
        return glia_error(m->ctx, GLIA_ENUMERIC, "loss is %g at epoch %d step %lld; lower [train] lr", l, epoch,
                          (long long)k + 1);
    *got = (struct glia__loss_read){true, l, k, nb};
    return GLIA_OK;
}

/* Wait for the pending loss, if any, into *got (have: there was one). */
static glia_status loss_drain(struct glia_model *m, struct glia__lagged_loss *q, int epoch, struct glia__loss_read *got)
{
    got->have = false;
    if (!q->pending) return GLIA_OK;
    double l;
    glia_status st = lagged_finish(m, q, &l);
    return st ? st : loss_known(m, l, q->nb, epoch, q->k, got);
}

/* The pending loss, and the outcome of every update launched (fp16's scaler on the device): all is exact after. */
glia_status glia__lagged_drain(struct glia_model *m, struct glia__lagged_loss *q, int epoch, struct glia__loss_read *got)
{
    glia_status st = loss_drain(m, q, epoch, got);
    return st ? st : glia__scaler_settle(m);
}

/* Step k's loss now (the host waits for the device). */
static glia_status loss_now(struct glia_model *m, int64_t nb, int epoch, int64_t k, struct glia__loss_read *got)
{
    double l;
    glia_status st = read_loss(m, &l);
    return st ? st : loss_known(m, l, nb, epoch, k, got);
}

/* The training step of the batch in m->act.x, m->y (nb rows), which glia_model_train and glia_model_step both run:
 * forward, backward and, when `update`, the optimizer step at the learning rate of `epoch` (else the gradients add
 * up: [train] accumulate). With cuda_graph the forward and backward, and the update where it can be captured, are
 * one pass replayed from a graph. *got gets
 * the loss that became known: with a lag (lag->host set) the previous step's, this one's download being started;
 * else this step's, read after its forward (after the pass with cuda_graph). k labels the step in *got and in the
 * error of a non-finite loss. */
glia_status glia__train_step(struct glia_model *m, int64_t nb, int epoch, int64_t k, bool update,
                              struct glia__lagged_loss *lag, struct glia__loss_read *got)
{
    bool lagged = lag && lag->host, updated = false;
    glia_status st;
    got->have = false;
    if (m->trainer.cuda_graph) {
        st = train_pass(m, nb, epoch, update, &updated);
        if (!st && !lagged) st = glia__scaler_settle(m);  /* the update's outcome, with the loss */
        if (!st && !lagged) st = loss_now(m, nb, epoch, k, got);
    } else {
        st = glia__train_forward(m, nb);
        if (!st && !lagged) st = loss_now(m, nb, epoch, k, got);
        if (m->dist.ddp) glia__ddp_begin(m->dist.ddp, update);  /* micro-steps before the last keep local sums */
        if (!st) st = glia__train_backward(m);
    }
    if (!st && update && !updated) st = glia__optimizer_step(m, epoch);
    if (!st && lagged) {  /* the previous step's loss and update, while this one runs; then start this one's loss */
        st = loss_drain(m, lag, epoch, got);
        if (!st) st = glia__scaler_drain(m, updated && m->trainer.dev_scaler);
        if (!st) st = lagged_start(m, lag, k, nb);
    }
    return st;
}

static glia_status count_correct(struct glia_model *m, int32_t *hy, float *buf, int64_t *correct)
{
    const struct glia__node *loss = &m->graph.nodes[m->graph.n_nodes - 1];
    const struct glia_tensor *logits = m->graph.nodes[loss->in[0]].out;
    int64_t n = logits->shape.dim[0], c = logits->shape.dim[1];
    glia_status st = glia__tensor_to_host_f32(logits, buf, (size_t)glia_tensor_numel(logits));
    if (!st) st = glia_tensor_to_host(m->act.y, hy, glia_tensor_nbytes(m->act.y));
    if (st) return st;
    int64_t ok = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *r = buf + i * c;
        int64_t best = 0;
        for (int64_t j = 1; j < c; j++)
            if (r[j] > r[best]) best = j;
        ok += best == hy[i];
    }
    *correct = ok;
    return GLIA_OK;
}


void glia__scratch_free(struct glia__scratch *s)
{
    free(s->logits);
    free(s->hy);
    if (s->have_train) glia__loader_free(&s->train);
    if (s->have_test) glia__loader_free(&s->test);
    glia__resident_free(&s->resident);
}

/* The loader of d and o that glia__loader_init could not make (st): out of memory for its batch buffers names the
 * [data] key that sets their size. */
static glia_status loader_error(struct glia_model *m, glia_status st, const struct glia__dataset *d,
                                const struct glia__loader_options *o, const char *key)
{
    if (st != GLIA_ENOMEM || glia_context_error(m->ctx)[0]) return st;
    int n;
    double bytes = glia__loader_bytes(d, o, &n);
    char how[80] = "";
    if (o->workers > 0) snprintf(how, sizeof how, " (%d worker%s x prefetch %d)", o->workers, o->workers > 1 ? "s" : "", o->prefetch);
    return glia__alloc_error(glia__config_find(m->cfg, "data"), key, bytes, "the loader's %d batch buffer%s%s of %d samples",
                             n, n > 1 ? "s" : "", how, o->batch);
}

/* What a run needs: the loaders, the host copies of logits and labels, and the activations, for training and/or
 * evaluation. */
glia_status glia__scratch_alloc(struct glia_model *m, struct glia__scratch *s, bool training, bool evaluating)
{
    int64_t maxb = m->data.batch > m->data.test_batch ? m->data.batch : m->data.test_batch;
    const struct glia_shape *ls = &m->graph.nodes[m->graph.nodes[m->graph.n_nodes - 1].in[0]].out_shape;
    int64_t classes = ls->dim[ls->ndim - 1];
    /* a language model counts no accuracy: no host copy of its (N, T, vocab) logits */
    s->logits = malloc(sizeof(float) * (size_t)(m->data.lm ? 1 : maxb * classes));
    s->hy = malloc(sizeof(int32_t) * (size_t)maxb);
    glia_context_clear_error(m->ctx);
    glia_status st = s->logits && s->hy ? GLIA_OK : glia__alloc_error(
        glia__config_find(m->cfg, "data"), m->data.batch >= m->data.test_batch ? "batch_size" : "test_batch_size",
        4.0 * (double)maxb * ((double)classes + 1), "host copies of the logits and labels of a batch of %lld", (long long)maxb);
    struct glia__loader_options o = {m->data.test_batch, m->data.workers, m->data.prefetch, m->data.persistent, false, false, false, 0,
                                     m->data.norm, m->seed, m->data.pin_memory ? m->backend : NULL, m->dist.rank, m->dist.world, false,
                                     m->data.group_by_length, m->data.group_size, m->data.pad_multiple, false, NULL};
    if (evaluating && !st) {
        st = loader_error(m, glia__loader_init(&s->test, m->ctx, &m->data.test, &o), &m->data.test, &o, "test_batch_size");
        s->have_test = !st;
    }
    if (training && !st) {
        o = (struct glia__loader_options){m->data.batch, m->data.workers, m->data.prefetch, m->data.persistent, m->data.drop_last, m->data.shuffle,
                                          m->data.flip, m->data.crop_padding, m->data.norm, m->seed,
                                          m->data.pin_memory ? m->backend : NULL, m->dist.rank, m->dist.world, true,
                                          m->data.group_by_length, m->data.group_size, m->data.pad_multiple, false, NULL};
        st = glia__resident_init(m, &s->resident, &o.order_only);
        o.resident = &s->resident;
        if (!st) st = loader_error(m, glia__loader_init(&s->train, m->ctx, &m->data.train, &o), &m->data.train, &o, "batch_size");
        s->have_train = !st;
    }
    if (!st) st = glia__need_activations(m, training ? m->data.batch : 0, evaluating ? m->data.test_batch : 0);
    return st;
}

glia_status glia__evaluate(struct glia_model *m, struct glia__scratch *s, double *loss, double *acc)
{
    double sum = 0;
    int64_t correct = 0, n = 0, nb;
    struct glia__feed f = {0};  /* glia__feed_stop reads it when the epoch fails to start */
    bool more = true;
    m->dist.loss_weight = 1;  /* dp: evaluation runs whole batches on the model's device */
    glia_status st = glia__loader_start_epoch(&s->test, 1, 0);
    if (!st) st = glia__feed_start(m, &f, &s->test, false);
    while (!st && !(st = glia__feed_next(m, &f, &nb, &more)) && more) {
        st = forward(m, false);
        double l;
        int64_t c = 0, w = m->data.lm ? nb * m->act.cur_len : nb;  /* a language model's mean is per token */
        if (!st) st = read_loss(m, &l);
        if (!st && !m->data.lm) st = count_correct(m, s->hy, s->logits, &c);
        if (st) break;
        sum += l * (double)w;
        correct += c;
        n += w;
    }
    glia_status fs = glia__feed_stop(m, &f);
    if (!st) st = fs;
    double tot[3] = {sum, (double)correct, (double)n};  /* ddp: each rank evaluated its shard */
    if (!st && m->dist.comm) st = glia__comm_all_reduce_host(m->dist.comm, tot, 3, GLIA_F64, GLIA_REDUCE_SUM);
    *loss = tot[2] > 0 ? tot[0] / tot[2] : 0;
    *acc = m->data.lm ? NAN : tot[2] > 0 ? tot[1] / tot[2] : 0;
    return st;
}

glia_status glia__logits_forward(struct glia_model *m, int64_t pos)
{
    glia_status st = pass_begin(m);
    if (st) glia_error_wrap(m->ctx, st, "decode forward: the backend's pass_begin");
    for (int i = 0; i < m->graph.n_nodes - 1 && !st; i++) st = forward_node(m, i, false, false, pos);  /* the loss is last */
    return st;
}

glia_status glia_model_evaluate(struct glia_model *m, double *loss, double *accuracy)
{
    struct glia__scratch s = {0};
    glia_status st = glia__scratch_alloc(m, &s, false, true);
    if (!st) st = glia__evaluate(m, &s, loss, accuracy);
    glia__scratch_free(&s);
    return st;
}
