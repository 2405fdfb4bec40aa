/* core/train.c — running a built model: activation buffers, forward, layer-level backward,
 * the optimizer step, the training step (glia_model_step), the epoch loop with evaluation.
 * Not model construction (core/model.c), nor what a run prints and writes (core/report.c). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "loader.h"
#include "parts.h"
#include "report.h"

void glia__model_release_activations(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        glia_tensor_release(nd->out);
        glia_tensor_release(nd->dout);
        nd->out = nd->dout = NULL;
        for (int k = 0; k < GLIA__MAX_INPUTS; k++) {
            glia_tensor_release(nd->cin[k]);
            glia_tensor_release(nd->cdin[k]);
            nd->cin[k] = nd->cdin[k] = NULL;
        }
    }
    glia_tensor_release(m->act.act_block);
    glia__act_plan_free(&m->act.plan);
    glia_tensor_release(m->act.x);
    glia_tensor_release(m->act.y);
    glia_tensor_release(m->act.x_buf);
    glia_tensor_release(m->act.y_buf);
    glia_tensor_release(m->act.loss_scale);
    glia_tensor_release(m->act.stage_x);
    glia_tensor_release(m->act.stage_y);
    m->act.act_block = NULL;
    m->act.x = m->act.y = m->act.x_buf = m->act.y_buf = m->act.loss_scale = m->act.stage_x = m->act.stage_y = NULL;
    m->act.act_batch = m->act.eval_batch = m->act.cur_batch = m->act.cur_len = 0;
    glia__model_free_graphs(m);  /* they read and write the activations just given back */
}

/* The data batch's element type: token ids or pixels. */
static enum glia_dtype data_dtype(const struct glia_model *m) { return m->data.train.tokens ? GLIA_I32 : GLIA_F32; }

/* Whether the backend queues its work (then batches upload on its copy stream through stage_x/y, during the step
 * before theirs); a backend whose calls run to their end (the CPU) gets them copied in place. */
static bool async_upload(const struct glia_model *m) { return glia_backend_queue(m->backend) != NULL; }

/* The loss layer's output gradient: 1/accumulate (each micro-batch's loss counts that much),
 * times the loss scale, times the share of the batch this model computed (dp). */
static glia_status write_loss_scale(struct glia_model *m)
{
    float v = (float)(m->trainer.scaler.scale * m->dist.loss_weight / (double)m->trainer.accumulate);
    return glia_tensor_from_host(m->act.loss_scale, &v, sizeof v);
}

/* A new 1-D f32 tensor of n floats (at least one). */
static glia_status new_flat(struct glia_model *m, int64_t n, struct glia_tensor **out)
{
    struct glia_shape flat = glia_shape_make(1, (int64_t[]){n > 0 ? n : 1});
    return glia_tensor_new(m->backend, GLIA_F32, &flat, out);
}

/* Buffers for training batches of up to tb samples (0: none) and evaluation batches of up to eb (0: none): the
 * activation block of glia__act_plan, the data batch and labels (and their upload targets), the loss scale. */
static glia_status alloc_activations(struct glia_model *m, int64_t tb, int64_t eb)
{
    /* Freed blocks go back to the device cache at once; a copy stream could write a reused one
     * before queued work has read it, so let the device drain first. */
    glia_status st = glia_backend_sync(m->backend);
    if (st) return st;
    glia__model_release_activations(m);
    int64_t maxb = tb > eb ? tb : eb;
    if ((st = glia__act_plan(m, tb, eb, &m->act.plan)))  /* else a layer's shape error says why */
        return st == GLIA_ENOMEM ? glia_error(m->ctx, st, "out of memory planning the activations") : st;
    glia_context_clear_error(m->ctx);
    st = m->act.plan.len > GLIA__MAX_ELEMENTS ? GLIA_ENOMEM : new_flat(m, m->act.plan.len, &m->act.act_block);
    struct glia_shape xs = glia__data_shape(m, maxb, m->data.train.cols);
    int64_t d1[1] = {maxb}, one[1] = {1};
    struct glia_shape ys = glia_shape_make(1, d1), s1 = glia_shape_make(1, one);
    if (!st) st = glia_tensor_new(m->backend, data_dtype(m), &xs, &m->act.x_buf);
    if (!st) st = glia_tensor_new(m->backend, GLIA_I32, &ys, &m->act.y_buf);
    if (!st && async_upload(m)) st = glia_tensor_new(m->backend, data_dtype(m), &xs, &m->act.stage_x);
    if (!st && async_upload(m)) st = glia_tensor_new(m->backend, GLIA_I32, &ys, &m->act.stage_y);
    if (!st) st = glia_tensor_new(m->backend, GLIA_F32, &s1, &m->act.loss_scale);
    if (!st) st = write_loss_scale(m);
    if (st) {
        /* the block, the batch and its labels (twice with an upload stage): named by the batch size that makes
         * the larger plan */
        bool train = tb > 0 && m->act.plan.train >= m->act.plan.eval;
        double bytes = 4.0 * ((double)m->act.plan.len + (async_upload(m) ? 2 : 1) * (glia__numel_d(&xs) + (double)maxb));
        glia__model_release_activations(m);
        if (st != GLIA_ENOMEM) return glia_error(m->ctx, st, "cannot allocate activations for batch %lld", (long long)maxb);
        return glia__alloc_error(glia__config_find(m->cfg, "data"), train ? "batch_size" : "test_batch_size", bytes,
                                 "the activations of %s at batch %lld", train ? "a training step" : "evaluation",
                                 (long long)(train ? tb : eb));
    }
    m->act.act_batch = tb;
    m->act.eval_batch = eb;
    return GLIA_OK;
}

/* Buffers for at least tb training and eb evaluation samples per batch (kept when large enough). */
static glia_status need_activations(struct glia_model *m, int64_t tb, int64_t eb)
{
    if (m->act.act_batch >= tb && m->act.eval_batch >= eb) return GLIA_OK;
    return alloc_activations(m, tb > m->act.act_batch ? tb : m->act.act_batch, eb > m->act.eval_batch ? eb : m->act.eval_batch);
}

/* *out = the part of the activation block from offset off, of shape s in format f. */
static glia_status view(struct glia_model *m, int64_t off, const struct glia_shape *s, enum glia_memory_format f,
                        struct glia_tensor **out)
{
    return glia_tensor_view_as(m->act.act_block, off, s, f, out);
}

/* Point every activation view at batch n (n <= act_batch in training, eval_batch in evaluation) of length len
 * (tokens; images: any), where the plan of that mode puts them. */
static glia_status set_batch(struct glia_model *m, int64_t n, int64_t len, bool train)
{
    if (!m->data.train.tokens) len = m->data.train.cols;
    if (n == m->act.cur_batch && len == m->act.cur_len && train == m->act.cur_train) return GLIA_OK;
    if (n > (train ? m->act.act_batch : m->act.eval_batch))
        return glia_error(m->ctx, GLIA_EINVAL, "batch of %lld exceeds the %lld the activations were sized for",
                          (long long)n, (long long)(train ? m->act.act_batch : m->act.eval_batch));
    struct glia_shape *shapes = malloc(sizeof *shapes * (size_t)m->graph.n_nodes);
    if (!shapes) return GLIA_ENOMEM;
    glia_status st = glia__infer_all(m, n, len, shapes);
    const int64_t *off = train ? m->act.plan.train_off : m->act.plan.eval_off;
    for (int i = 0; i < m->graph.n_nodes && !st; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        glia_tensor_release(nd->out);
        glia_tensor_release(nd->dout);
        nd->out = nd->dout = NULL;
        bool grad = train && glia__has_grad(m, i);
        st = view(m, off[GLIA__PLAN_VALUE(i, -1)], &shapes[i], nd->out_fmt, &nd->out);
        if (!st && grad) st = view(m, off[GLIA__PLAN_GRAD(i, -1)], &shapes[i], nd->out_fmt, &nd->dout);
        for (int k = 0; k < nd->n_in && !st; k++) {  /* inputs seen in another format */
            glia_tensor_release(nd->cin[k]);
            glia_tensor_release(nd->cdin[k]);
            nd->cin[k] = nd->cdin[k] = NULL;
            if (nd->edge[k] == GLIA__EDGE_DIRECT) continue;
            int p = nd->in[k];
            struct glia_shape ps = p < 0 ? glia__data_shape(m, n, len) : shapes[p];
            bool conv = nd->edge[k] == GLIA__EDGE_CONVERT;
            bool pgrad = train && glia__has_grad(m, p);
            if (conv) st = view(m, off[GLIA__PLAN_VALUE(i, k)], &ps, nd->in_fmt[k], &nd->cin[k]);
            else if (p < 0) st = glia_tensor_view_as(m->act.x_buf, 0, &ps, nd->in_fmt[k], &nd->cin[k]);
            else st = view(m, off[GLIA__PLAN_VALUE(p, -1)], &ps, nd->in_fmt[k], &nd->cin[k]);
            if (!st && pgrad)
                st = view(m, off[conv ? GLIA__PLAN_GRAD(i, k) : GLIA__PLAN_GRAD(p, -1)], &ps, nd->in_fmt[k], &nd->cdin[k]);
        }
    }
    free(shapes);
    glia_tensor_release(m->act.x);
    glia_tensor_release(m->act.y);
    m->act.x = m->act.y = NULL;
    struct glia_shape xs = glia__data_shape(m, n, len);
    int64_t d1[1] = {n};
    struct glia_shape ys = glia_shape_make(1, d1);
    if (!st) st = glia_tensor_view(m->act.x_buf, 0, &xs, &m->act.x);
    if (!st) st = glia_tensor_view(m->act.y_buf, 0, &ys, &m->act.y);
    m->act.cur_batch = st ? 0 : n;
    m->act.cur_len = st ? 0 : len;
    m->act.cur_train = train;
    return st;
}

/* ---- feeding batches ----
 * On a backend with its own copy stream (upload), batch k+1 is copied from the loader's
 * (page-locked) buffer into stage_x/stage_y while step k computes: at the start of step k the
 * staged batch k is copied device-to-device into x/y on the compute stream, then batch k+1's
 * upload is started (ordered after that copy, so it cannot overwrite what step k reads), and the
 * loader buffer is given back only once its upload is done. Elsewhere the batch is copied into
 * x/y directly. */
struct feed {
    struct glia__loader *L;
    bool staged;            /* a batch is uploading into stage_x/y (loader buffer still held) */
    struct glia__batch b;   /* its size and length */
    uint64_t ticket;        /* its upload */
    bool train;             /* training batches (else evaluation's): which activations they go into */
};

static glia_status feed_upload(struct glia_model *m, struct feed *f)
{
    f->staged = glia__loader_next(f->L, &f->b);
    if (!f->staged) return GLIA_OK;
    struct glia_backend *b = m->backend;
    size_t row = glia__batch_row_bytes(&f->b, f->L->d);
    /* f->ticket names the last copy queued from the loader's buffer (the copy stream runs in order) */
    glia_status st = glia_backend_upload(b, m->act.stage_x->data, f->b.x, row * (size_t)f->b.n, &f->ticket);
    if (!st) st = glia_backend_upload(b, m->act.stage_y->data, f->b.y, sizeof(int32_t) * (size_t)f->b.n, &f->ticket);
    return st;
}

/* Start feeding an epoch of L (started already), for training or evaluation. */
static glia_status feed_start(struct glia_model *m, struct feed *f, struct glia__loader *L, bool train)
{
    *f = (struct feed){.L = L, .train = train};
    return async_upload(m) ? feed_upload(m, f) : GLIA_OK;
}

/* Put the next batch into m->act.x, m->y (views for its size); *more = false at the epoch's end. */
static glia_status feed_next(struct glia_model *m, struct feed *f, int64_t *n, bool *more)
{
    glia_status st;
    if (!async_upload(m)) {
        struct glia__batch bt;
        if (!(*more = glia__loader_next(f->L, &bt))) return GLIA_OK;
        *n = bt.n;
        st = set_batch(m, bt.n, bt.len, f->train);
        if (!st) st = glia_tensor_from_host(m->act.x, bt.x, glia_tensor_nbytes(m->act.x));
        if (!st) st = glia_tensor_from_host(m->act.y, bt.y, glia_tensor_nbytes(m->act.y));
        glia__loader_release(f->L);
        return st;
    }
    if (!(*more = f->staged)) return GLIA_OK;
    struct glia_backend *b = m->backend;
    *n = f->b.n;
    st = glia_backend_wait_copy(b, f->ticket, true);  /* usually long done */
    glia__loader_release(f->L);
    f->staged = false;
    if (!st) st = set_batch(m, f->b.n, f->b.len, f->train);
    if (!st) st = glia_backend_copy(b, m->act.x->data, false, m->act.stage_x->data, false, glia_tensor_nbytes(m->act.x));
    if (!st) st = glia_backend_copy(b, m->act.y->data, false, m->act.stage_y->data, false, glia_tensor_nbytes(m->act.y));
    if (!st) st = feed_upload(m, f);
    return st;
}

/* Give back a batch still held when a loop stops early, once its upload has stopped reading the
 * loader's buffer (a worker refills the buffer as soon as it is given back). */
static glia_status feed_stop(struct glia_model *m, struct feed *f)
{
    glia_status st = GLIA_OK;
    if (f->staged) {
        st = glia_backend_wait_copy(m->backend, f->ticket, true);
        glia__loader_release(f->L);
    }
    f->staged = false;
    return st;
}

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
                               struct glia__guarded **g, int *n)
{
    *g = NULL;
    *n = 0;
    if (!m->debug_checks) return GLIA_OK;
    const struct glia_layer *l = &nd->layer;
    if (!(*g = malloc(sizeof **g * (size_t)(1 + l->n_buffers + nd->n_in + l->n_params)))) return GLIA_ENOMEM;
    *n = din ? glia__guard_backward(l, din, nd->n_in, *g) : glia__guard_forward(l, nd->out, *g);
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

/* Node i's forward; recompute: a second training forward during backward ([graph] checkpoint_segments). */
static glia_status forward_node(struct glia_model *m, int i, bool train, bool recompute)
{
    struct glia__node *nd = &m->graph.nodes[i];
    const struct glia_tensor *in[GLIA__MAX_INPUTS];
    double t0 = m->trainer.profiling ? glia__now() : 0;
    glia_status st = GLIA_OK;
    for (int k = 0; k < nd->n_in && !st; k++) {
        in[k] = nd->in[k] < 0 ? m->act.x : m->graph.nodes[nd->in[k]].out;
        if (nd->edge[k] == GLIA__EDGE_CONVERT) st = glia_tensor_convert(nd->cin[k], in[k], false);
        if (nd->edge[k] != GLIA__EDGE_DIRECT) in[k] = nd->cin[k];
    }
    /* the layer's key (its name, the run's seed, the rank) and the step give the seed of its masks */
    uint64_t key = glia__hash_str(m->seed + (uint64_t)m->dist.rank * 0xd1b54a32d192ed03ull, nd->layer.name);
    struct glia_fwd a = {in,
                         nd->n_in,
                         nd->out,
                         (nd->layer.type->flags & GLIA_TYPE_LOSS) ? m->act.y : NULL,
                         train,
                         glia_seed(key, m->trainer.step),
                         recompute,
                         key,
                         m->trainer.capturing ? m->trainer.step_dev->data : NULL};
    struct glia__guarded *guards;
    int n_guards;
    if (!st) st = guards_fill(m, nd, NULL, &guards, &n_guards);
    if (!st) {
        st = nd->layer.kernel->forward(&nd->layer, &a);
        st = guards_check(nd, recompute ? "forward (run again in backward)" : "forward", guards, n_guards, st);
    }
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

static glia_status forward(struct glia_model *m, bool train)
{
    glia_status st = GLIA_OK;
    for (int i = 0; i < m->graph.n_nodes && !st; i++) st = forward_node(m, i, train, false);
    return st;
}

static glia_status backward(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes; i++) m->graph.nodes[i].grad_written = false;
    for (int i = m->graph.n_nodes - 1; i >= 0; i--) {
        struct glia__node *nd = &m->graph.nodes[i];
        for (int j = i - nd->recompute_n; j < i; j++) {  /* this segment's dropped outputs, again */
            glia_status st = m->graph.nodes[j].recompute ? forward_node(m, j, true, true) : GLIA_OK;
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
                             is_loss ? m->act.y : NULL};
        double t0 = m->trainer.profiling ? glia__now() : 0;
        struct glia__guarded *guards;
        int n_guards;
        glia_status st = guards_fill(m, nd, din, &guards, &n_guards);
        if (!st) st = guards_check(nd, "backward", guards, n_guards, nd->layer.kernel->backward(&nd->layer, &a));
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
        if (m->dist.ddp && (st = glia__ddp_node_done(m, m->dist.ddp, i))) return st;  /* its buckets may start now */
    }
    return GLIA_OK;
}

double glia__model_lr(const struct glia_model *m, int epoch, int64_t step)
{
    double lr = m->trainer.lr;
    switch (m->trainer.schedule) {
    case GLIA__SCHED_CONSTANT: break;
    case GLIA__SCHED_STEP: lr *= pow(m->trainer.gamma, (double)((epoch - 1) / m->trainer.step_epochs)); break;
    case GLIA__SCHED_COSINE:
        lr = m->trainer.min_lr + (m->trainer.lr - m->trainer.min_lr) * 0.5 * (1.0 + cos(M_PI * (double)(epoch - 1) / (double)m->trainer.epochs));
        break;
    }
    if (m->trainer.warmup_steps > 0 && step <= m->trainer.warmup_steps) lr *= (double)step / (double)m->trainer.warmup_steps;
    return lr;
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

bool glia__scaler_update(struct glia__scaler *s, double sumsq)
{
    if (!isfinite(sumsq)) {
        s->skipped++;
        s->clean = 0;
        s->scale *= 0.5;
        return false;
    }
    if (++s->clean >= 2000) {
        s->clean = 0;
        s->scale *= 2.0;
    }
    return true;
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
        *skip = !glia__scaler_update(&m->trainer.scaler, sq);
        if (*skip)
            glia_log(m->ctx, GLIA_LOG_DEBUG, "fp16: non-finite gradients after step %lld; loss scale now %g",
                     (long long)m->trainer.step, m->trainer.scaler.scale);
        if (m->trainer.scaler.scale != used && (st = write_loss_scale(m))) return st;
        if (*skip) return GLIA_OK;
    }
    double coef = 1.0 / used, norm = sqrt(sq) * coef;
    if (m->trainer.clip_grad_norm > 0 && m->trainer.clip_grad_norm / (norm + 1e-6) < 1.0) coef *= m->trainer.clip_grad_norm / (norm + 1e-6);
    return coef != 1.0 ? grad_scale(m, (float)coef) : GLIA_OK;
}

/* Set-to-none: the next backward writes the parameters' gradients instead of adding to them. */
static void grads_unset(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].layer.n_params; p++) m->graph.nodes[i].layer.params[p].grad_unset = true;
}

static glia_status optimizer_step(struct glia_model *m, int epoch)
{
    /* ddp: the gradients are the average over ranks once every bucket is in */
    if (m->dist.ddp) {
        double t0 = glia__now();
        glia_status st = glia__ddp_finish(m, m->dist.ddp);
        if (st) return st;
        if (m->trainer.profiling && m->trainer.trace) glia__trace_add(m->trainer.trace, GLIA__TRACE_COMM, "gradient wait", t0, glia__now());
    }
    /* A parameter whose gradient no layer wrote this step has gradient zero. */
    for (int i = 0; i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].layer.n_params; p++) {
            struct glia_param *pa = &m->graph.nodes[i].layer.params[p];
            if (pa->grad_unset) {
                glia_status st = glia_tensor_fill_zero(pa->grad);
                if (st) return st;
            }
        }
    bool skip;
    glia_status st = unscale_and_clip(m, &skip);
    if (!st && !skip) {
        float *state[GLIA__MAX_STATE] = {0};  /* past n_state: NULL, never stack garbage */
        for (int k = 0; k < m->trainer.opt.type->n_state; k++) state[k] = m->params.state[k]->data;
        m->trainer.step++;
        m->trainer.cur_lr = glia__model_lr(m, epoch, m->trainer.step);
        struct glia_opt_step s = {m->params.w->data, m->params.g->data, state, (size_t)m->params.wa.len,
                                  m->params.decay_mask ? m->params.decay_mask->data : NULL, m->trainer.cur_lr, m->trainer.step, m->backend};
        double t0 = m->trainer.profiling ? glia__now() : 0;
        st = m->params.wa.n ? m->trainer.opt.kernel->step(&m->trainer.opt, &s) : GLIA_OK;
        if (m->trainer.profiling) {
            glia_backend_sync(m->backend);
            double t1 = glia__now();
            m->trainer.t_opt += t1 - t0;
            if (m->trainer.trace) glia__trace_add(m->trainer.trace, GLIA__TRACE_OPTIMIZER, m->trainer.opt.type->name, t0, t1);
        }
    }
    if (st) return glia_error(m->ctx, st, "optimizer '%s' step %lld failed: %s", m->trainer.opt.type->name,
                              (long long)m->trainer.step, glia_context_error(m->ctx));
    grads_unset(m);
    return GLIA_OK;
}

void glia_model_request_stop(struct glia_model *m)
{
    if (m) m->trainer.stop_requested = 1;
}

void glia_model_request_stop_code(struct glia_model *m, int code)
{
    if (m) m->trainer.stop_requested = code < 1 ? 1 : code > 255 ? 255 : code;
}

int glia_model_stop_code(const struct glia_model *m) { return m ? m->trainer.stop_code : 0; }

#define STOP_POLL 10  /* ddp: the ranks agree on a stop request every this many optimizer steps */

/* Whether training stops after this optimizer step for glia_model_request_stop: at once in one
 * process; under ddp with several ranks every STOP_POLL-th step, when any rank asked (a one-int
 * all-reduce of the codes, the largest wins; with nccl it waits for the queued work, once in
 * STOP_POLL steps), so that all ranks stop at the same step with the same code. */
static bool stop_agreed(struct glia_model *m, glia_status *st)
{
    bool ranks = m->dist.ddp && m->dist.world > 1;
    if (ranks && m->trainer.step % STOP_POLL) return false;
    int32_t code = m->trainer.stop_requested;
    if (ranks && (*st = glia__comm_all_reduce_host(m->dist.comm, &code, 1, GLIA_I32, GLIA_REDUCE_MAX))) return false;
    m->trainer.stop_code = code;
    return code != 0;
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
        st = need_activations(p, most, 0);
        if (!st) st = set_batch(p, m->dist.chunk[r], m->act.cur_len, true);
        if (!st && p->dist.weights_step != m->trainer.step) st = dp_copy(p->params.w, m->params.w);  /* changed by a step */
        if (!st) p->dist.weights_step = m->trainer.step;
        if (!st && m->params.ba.n) st = dp_copy(p->params.buf, m->params.buf);  /* changed by every forward */
        struct glia_tensor *xs = NULL, *ys = NULL;
        if (!st) st = glia_tensor_view(m->act.x_buf, r * per * row, &p->act.x->shape, &xs);
        if (!st) st = glia_tensor_view(m->act.y_buf, r * per, &p->act.y->shape, &ys);
        if (!st) st = dp_copy(p->act.x, xs);
        if (!st) st = dp_copy(p->act.y, ys);
        glia_tensor_release(xs);
        glia_tensor_release(ys);
        p->dist.loss_weight = (double)m->dist.chunk[r] / (double)n;
        p->trainer.scaler = m->trainer.scaler;
        p->trainer.step = m->trainer.step;
        if (!st) st = write_loss_scale(p);
    }
    m->dist.loss_weight = (double)m->dist.chunk[0] / (double)n;
    if (!st) st = set_batch(m, m->dist.chunk[0], m->act.cur_len, true);
    if (!st) st = write_loss_scale(m);
    for (int r = 0; r < R && !st; r++)
        if (m->dist.chunk[r]) st = forward(r ? m->dist.replica[r] : m, true);
    return st;
}

/* The replicas copy the model's weights at their next forward (they were loaded or broadcast). */
static void dp_weights_changed(struct glia_model *m)
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
                if (src->grad_unset) continue;  /* nothing written there */
                st = dst->grad_unset ? dp_copy(dst->grad, src->grad) : add_into(m, dst->grad, src->grad);
                dst->grad_unset = false;
                src->grad_unset = true;  /* the replica writes afresh next time */
            }
    }
    return st;
}

/* ---- [runtime] cuda_graph: training passes replayed from CUDA graphs ----
 * Each batch shape (n, len), with the parameters' gradients unset or being accumulated, runs its
 * first training pass (forward and backward) as it comes: that sizes the buffers layers make
 * lazily, compiles kernels and times convolution algorithms. Its second pass is captured into a
 * graph, and every pass from then on is one launch of it. The graph reads the batch from x and y
 * and keeps the activations where the views of that shape put them (fixed while the activations
 * are: freeing them frees the graphs); random layers draw from the step in step_dev, written
 * before each launch. A pass that cannot be captured runs as it comes, with a notice, and its
 * shape is not tried again. The optimizer step stays outside: it is one launch already, and its
 * scalars (learning rate, bias corrections) change every step. */

void glia__model_free_graphs(struct glia_model *m)
{
    for (int i = 0; i < m->trainer.n_graphs; i++) {
        struct glia__graph *g = &m->trainer.graphs[i];
        if (g->exec) glia_backend_graph_free(m->backend, g->exec);
        free(g->written);
    }
    m->trainer.n_graphs = 0;
}

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

/* The graph entry of this pass: NULL (a pass to run as it comes) when the shape is new (then remembered, while
 * there is room). */
static struct glia__graph *graph_entry(struct glia_model *m, int64_t n)
{
    bool acc = false;  /* a micro-step after the first of an accumulation: the backward adds */
    for (int i = 0; i < m->graph.n_nodes && !acc; i++)
        for (int p = 0; p < m->graph.nodes[i].layer.n_params; p++) acc |= !m->graph.nodes[i].layer.params[p].grad_unset;
    for (int i = 0; i < m->trainer.n_graphs; i++) {
        struct glia__graph *g = &m->trainer.graphs[i];
        if (g->n == n && g->len == m->act.cur_len && g->acc == acc) return g;
    }
    if (m->trainer.n_graphs < GLIA__MAX_GRAPHS)
        m->trainer.graphs[m->trainer.n_graphs++] = (struct glia__graph){.n = n, .len = m->act.cur_len, .acc = acc, .state = GLIA__GRAPH_SEEN};
    return NULL;
}

static glia_status forward(struct glia_model *m, bool train);
static glia_status backward(struct glia_model *m);

/* Capture the training pass of g's shape; g->state says whether it worked. The host-side state a pass changes (the
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
        st = forward(m, true);
        if (!st) st = backward(m);
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

/* One launch of g's graph for this step. */
static glia_status graph_replay(struct glia_model *m, struct glia__graph *g)
{
    struct glia_backend *b = m->backend;
    glia_status st = glia_backend_write_u64(b, m->trainer.step_dev->data, (uint64_t)m->trainer.step);
    if (!st) st = glia_backend_graph_launch(b, g->exec);
    if (st) return glia_error(m->ctx, st, "cuda_graph: replaying the training pass of a batch of %lld failed: %s",
                              (long long)g->n, glia_context_error(m->ctx));
    int k = 0;
    for (int i = 0; i < m->graph.n_nodes; i++)
        for (int p = 0; p < m->graph.nodes[i].layer.n_params; p++, k++)
            if (g->written[k]) m->graph.nodes[i].layer.params[p].grad_unset = false;
    m->trainer.graph_replays++;
    return GLIA_OK;
}

/* The training forward and backward of the batch in m->x (n rows) with cuda_graph on: replayed, captured now and
 * replayed, or run as it comes. */
static glia_status train_pass(struct glia_model *m, int64_t n)
{
    struct glia__graph *g = graph_entry(m, n);
    glia_status st = GLIA_OK;
    if (g && g->state == GLIA__GRAPH_SEEN) st = graph_capture(m, g);
    if (st) return st;
    if (g && g->state == GLIA__GRAPH_READY) return graph_replay(m, g);
    st = forward(m, true);
    return st ? st : backward(m);
}

/* A training forward of the batch in m->x (n rows), on one device or split over dp's. */
static glia_status train_forward(struct glia_model *m, int64_t n)
{
    return m->dist.n_replicas > 1 ? dp_forward(m, n) : forward(m, true);
}

static glia_status train_backward(struct glia_model *m)
{
    return m->dist.n_replicas > 1 ? dp_backward(m) : backward(m);
}

/* ---- the training step, and its loss read without stalling the device ----
 * On a backend that downloads without blocking, step k's loss is copied to page-locked memory
 * behind step k's work and read once step k+1 is queued, so the device always has the next step
 * to run while the host waits. Elsewhere the loss is read right after the forward. */
struct lagged_loss {
    float *host;            /* one float from host_alloc; NULL: read synchronously */
    bool pending;           /* a download is in flight */
    int64_t k, nb;          /* its step (0-based in the epoch) and batch size */
    uint64_t ticket;
};

/* A training loss that became known: step k's, of a batch of nb. */
struct loss_read {
    bool have;
    double l;
    int64_t k, nb;
};

static glia_status lagged_init(struct glia_model *m, struct lagged_loss *q)
{
    struct glia_backend *b = m->backend;
    *q = (struct lagged_loss){0};
    if (m->dist.n_replicas > 1) return GLIA_OK;  /* dp: the loss is summed over the devices' chunks */
    if (!glia_backend_queue(b)) return GLIA_OK;  /* the loss is there when the step returns: read it then */
    return glia_backend_host_alloc(b, sizeof(float), (void **)&q->host);
}

static void lagged_free(struct glia_model *m, struct lagged_loss *q)
{
    if (q->host) glia_backend_host_free(m->backend, q->host);
    q->host = NULL;
}

/* Start reading step k's loss (batch nb). */
static glia_status lagged_start(struct glia_model *m, struct lagged_loss *q, int64_t k, int64_t nb)
{
    struct glia_backend *b = m->backend;
    q->k = k, q->nb = nb;
    q->pending = true;
    return glia_backend_download(b, q->host, m->graph.nodes[m->graph.n_nodes - 1].out->data, sizeof(float), &q->ticket);
}

/* The pending loss, once its download is done. */
static glia_status lagged_finish(struct glia_model *m, struct lagged_loss *q, double *loss)
{
    q->pending = false;
    glia_status st = glia_backend_wait_copy(m->backend, q->ticket, true);
    *loss = *q->host;
    return st;
}

/* Step k's loss l (batch nb) into *got; a non-finite loss stops training. */
static glia_status loss_known(struct glia_model *m, double l, int64_t nb, int epoch, int64_t k, struct loss_read *got)
{
    if (!isfinite(l))
        return glia_error(m->ctx, GLIA_ENUMERIC, "loss is %g at epoch %d step %lld; lower [train] lr", l, epoch,
                          (long long)k + 1);
    *got = (struct loss_read){true, l, k, nb};
    return GLIA_OK;
}

/* Wait for the pending loss, if any, into *got (have: there was one). */
static glia_status lagged_drain(struct glia_model *m, struct lagged_loss *q, int epoch, struct loss_read *got)
{
    got->have = false;
    if (!q->pending) return GLIA_OK;
    double l;
    glia_status st = lagged_finish(m, q, &l);
    return st ? st : loss_known(m, l, q->nb, epoch, q->k, got);
}

/* Step k's loss now (the host waits for the device). */
static glia_status loss_now(struct glia_model *m, int64_t nb, int epoch, int64_t k, struct loss_read *got)
{
    double l;
    glia_status st = read_loss(m, &l);
    return st ? st : loss_known(m, l, nb, epoch, k, got);
}

/* The training step of the batch in m->act.x, m->y (nb rows), which glia_model_train and glia_model_step both run:
 * forward, backward and, when `update`, the optimizer step at the learning rate of `epoch` (else the gradients add
 * up: [train] accumulate). With cuda_graph the forward and backward are one pass replayed from a graph. *got gets
 * the loss that became known: with a lag (lag->host set) the previous step's, this one's download being started;
 * else this step's, read after its forward (after the pass with cuda_graph). k labels the step in *got and in the
 * error of a non-finite loss. */
static glia_status train_step(struct glia_model *m, int64_t nb, int epoch, int64_t k, bool update,
                              struct lagged_loss *lag, struct loss_read *got)
{
    bool lagged = lag && lag->host;
    glia_status st;
    got->have = false;
    if (m->trainer.cuda_graph) {
        st = train_pass(m, nb);
        if (!st && !lagged) st = loss_now(m, nb, epoch, k, got);
    } else {
        st = train_forward(m, nb);
        if (!st && !lagged) st = loss_now(m, nb, epoch, k, got);
        if (m->dist.ddp) glia__ddp_begin(m->dist.ddp, update);  /* micro-steps before the last keep local sums */
        if (!st) st = train_backward(m);
    }
    if (!st && update) st = optimizer_step(m, epoch);
    if (!st && lagged) {  /* the previous step's loss, while this one runs; then start this one's */
        st = lagged_drain(m, lag, epoch, got);
        if (!st) st = lagged_start(m, lag, k, nb);
    }
    return st;
}

static glia_status count_correct(struct glia_model *m, int32_t *hy, float *buf, int64_t *correct)
{
    const struct glia__node *loss = &m->graph.nodes[m->graph.n_nodes - 1];
    const struct glia_tensor *logits = m->graph.nodes[loss->in[0]].out;
    int64_t n = logits->shape.dim[0], c = logits->shape.dim[1];
    glia_status st = glia_tensor_to_host(logits, buf, glia_tensor_nbytes(logits));
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

struct scratch {
    float *logits;
    int32_t *hy;
    struct glia__loader train, test;
    bool have_train, have_test;
};

static void scratch_free(struct scratch *s)
{
    free(s->logits);
    free(s->hy);
    if (s->have_train) glia__loader_free(&s->train);
    if (s->have_test) glia__loader_free(&s->test);
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
static glia_status scratch_alloc(struct glia_model *m, struct scratch *s, bool training, bool evaluating)
{
    int64_t maxb = m->data.batch > m->data.test_batch ? m->data.batch : m->data.test_batch;
    int64_t classes = m->graph.nodes[m->graph.nodes[m->graph.n_nodes - 1].in[0]].out_shape.dim[1];
    s->logits = malloc(sizeof(float) * (size_t)(maxb * classes));
    s->hy = malloc(sizeof(int32_t) * (size_t)maxb);
    glia_context_clear_error(m->ctx);
    glia_status st = s->logits && s->hy ? GLIA_OK : glia__alloc_error(
        glia__config_find(m->cfg, "data"), m->data.batch >= m->data.test_batch ? "batch_size" : "test_batch_size",
        4.0 * (double)maxb * ((double)classes + 1), "host copies of the logits and labels of a batch of %lld", (long long)maxb);
    struct glia__loader_options o = {m->data.test_batch, m->data.workers, m->data.prefetch, m->data.persistent, false, false, false, 0,
                                     m->data.norm, m->seed, m->data.pin_memory ? m->backend : NULL, m->dist.rank, m->dist.world, false,
                                     m->data.group_by_length, m->data.group_size, m->data.pad_multiple};
    if (evaluating && !st) {
        st = loader_error(m, glia__loader_init(&s->test, m->ctx, &m->data.test, &o), &m->data.test, &o, "test_batch_size");
        s->have_test = !st;
    }
    if (training && !st) {
        o = (struct glia__loader_options){m->data.batch, m->data.workers, m->data.prefetch, m->data.persistent, m->data.drop_last, m->data.shuffle,
                                          m->data.flip, m->data.crop_padding, m->data.norm, m->seed,
                                          m->data.pin_memory ? m->backend : NULL, m->dist.rank, m->dist.world, true,
                                          m->data.group_by_length, m->data.group_size, m->data.pad_multiple};
        st = loader_error(m, glia__loader_init(&s->train, m->ctx, &m->data.train, &o), &m->data.train, &o, "batch_size");
        s->have_train = !st;
    }
    if (!st) st = need_activations(m, training ? m->data.batch : 0, evaluating ? m->data.test_batch : 0);
    return st;
}

static glia_status evaluate(struct glia_model *m, struct scratch *s, double *loss, double *acc)
{
    double sum = 0;
    int64_t correct = 0, n = 0, nb;
    struct feed f = {0};  /* feed_stop reads it when the epoch fails to start */
    bool more = true;
    m->dist.loss_weight = 1;  /* dp: evaluation runs whole batches on the model's device */
    glia_status st = glia__loader_start_epoch(&s->test, 1, 0);
    if (!st) st = feed_start(m, &f, &s->test, false);
    while (!st && !(st = feed_next(m, &f, &nb, &more)) && more) {
        st = forward(m, false);
        double l;
        int64_t c;
        if (!st) st = read_loss(m, &l);
        if (!st) st = count_correct(m, s->hy, s->logits, &c);
        if (st) break;
        sum += l * (double)nb;
        correct += c;
        n += nb;
    }
    glia_status fs = feed_stop(m, &f);
    if (!st) st = fs;
    double tot[3] = {sum, (double)correct, (double)n};  /* ddp: each rank evaluated its shard */
    if (!st && m->dist.comm) st = glia__comm_all_reduce_host(m->dist.comm, tot, 3, GLIA_F64, GLIA_REDUCE_SUM);
    *loss = tot[2] > 0 ? tot[0] / tot[2] : 0;
    *acc = tot[2] > 0 ? tot[1] / tot[2] : 0;
    return st;
}

glia_status glia_model_evaluate(struct glia_model *m, double *loss, double *accuracy)
{
    struct scratch s = {0};
    glia_status st = scratch_alloc(m, &s, false, true);
    if (!st) st = evaluate(m, &s, loss, accuracy);
    scratch_free(&s);
    return st;
}

/* A resumed run that the settings leave nothing to do (the checkpoint is at or past [train] epochs
 * or max_steps, e.g. --set train.epochs=1 on a later checkpoint) says so, and trains, evaluates
 * and writes nothing: what it would print as the run's results would not be any run's. As
 * Lightning, which stops at once when max_epochs or max_steps is reached. */
static bool nothing_left(const struct glia_model *m, const struct glia__resume *rs)
{
    return rs->epoch > m->trainer.epochs || (m->trainer.max_steps > 0 && m->trainer.step >= m->trainer.max_steps);
}

/* Before the first step: checkpoint_dir exists (made with its parents) and takes files, so a
 * folder that cannot be written fails now, not at the end of the run; and the temporaries that
 * killed runs left in it are removed. */
static glia_status checkpoint_dir_ready(struct glia_model *m)
{
    if (!m->trainer.checkpoint_dir || m->dist.rank != 0) return GLIA_OK;  /* ddp: rank 0 writes for all */
    size_t n = strlen(m->trainer.checkpoint_dir) + 16;
    char *probe = malloc(n), *tmp = NULL;
    if (probe) snprintf(probe, n, "%s/probe.ckpt", m->trainer.checkpoint_dir);
    if (probe) tmp = glia__checkpoint_tmp_name(probe, (long)getpid());  /* a sweep removes it if we die */
    free(probe);
    if (!tmp) return GLIA_ENOMEM;
    int err = glia__mkdir_parents(tmp), fd = -1;
    if (!err && (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0) err = errno;
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    free(tmp);
    if (err)
        return glia_section_error(glia__config_find(m->cfg, "train"), "checkpoint_dir", GLIA_EIO,
                                  "cannot write checkpoints into %s: %s", m->trainer.checkpoint_dir, strerror(err));
    glia__checkpoint_sweep(m, m->trainer.checkpoint_dir, 0, 0);
    return GLIA_OK;
}

/* Writes <checkpoint_dir>/<name>; a step file (step) leaves the newest checkpoint_keep of the
 * folder's step files. */
static glia_status save_checkpoint(struct glia_model *m, const char *name, int epoch, int64_t batch,
                                   double loss_sum, int64_t samples, bool step)
{
    if (!m->trainer.checkpoint_dir || m->dist.rank != 0) return GLIA_OK;  /* ddp: rank 0 writes for all */
    glia_status st = m->dist.ddp ? glia__ddp_settle(m->dist.ddp) : GLIA_OK;
    if (st) return st;
    size_t n = strlen(m->trainer.checkpoint_dir) + strlen(name) + 2;
    char *path = malloc(n);
    if (!path) return GLIA_ENOMEM;
    snprintf(path, n, "%s/%s", m->trainer.checkpoint_dir, name);
    glia__mkdir_parents(path);  /* removed while the run went on: made again (what fails is said below) */
    st = glia__checkpoint_save(m, path, epoch, batch, loss_sum, samples);
    free(path);
    if (!st && step) glia__checkpoint_sweep(m, m->trainer.checkpoint_dir, m->trainer.step, m->trainer.checkpoint_keep);
    return st;
}

/* An epoch's figures over all ranks (one rank: its own). */
struct dist_epoch {
    double loss_sum, samples;      /* training loss sum and samples, all ranks */
    double run_samples;            /* samples trained in this run of the epoch (not before a resume) */
    double comm_wait_s;            /* the most any rank waited for gradient buckets */
    double step_s_min, step_s_max; /* mean step time without comm waits, fastest and slowest rank */
    double pad_frac;               /* tokens: the share of the batches' elements that was padding */
};

static glia_status dist_epoch(struct glia_model *m, const struct glia__loader *L, double loss_sum, int64_t samples,
                              int64_t run_samples, double train_s, int64_t steps, struct dist_epoch *e)
{
    /* a rank's own work per step: its waits for the others left out, so a slow rank stands out */
    double wait = m->dist.ddp ? glia__ddp_take_wait(m->dist.ddp) : 0, step_s = steps > 0 ? (train_s - wait) / (double)steps : 0;
    double sums[5] = {loss_sum, (double)samples, (double)run_samples, (double)L->slots, (double)L->real};
    double maxs[3] = {step_s, -step_s, wait};
    glia_status st = GLIA_OK;
    if (m->dist.comm) st = glia__comm_all_reduce_host(m->dist.comm, sums, 5, GLIA_F64, GLIA_REDUCE_SUM);
    if (!st && m->dist.comm) st = glia__comm_all_reduce_host(m->dist.comm, maxs, 3, GLIA_F64, GLIA_REDUCE_MAX);
    *e = (struct dist_epoch){sums[0], sums[1], sums[2], maxs[2], -maxs[1], maxs[0],
                             sums[3] > 0 ? 1 - sums[4] / sums[3] : 0};
    return st;
}

/* ---- the training loop (glia_model_train) ----
 * Each batch is fed, stepped (train_step), maybe checkpointed and reported; each epoch ends with the ranks'
 * figures, an evaluation and its report. What it prints and writes is core/report.c's. */

/* A run's state between its parts. */
struct run {
    struct glia__report rep;
    struct scratch s;
    struct glia__resume rs;      /* where the run starts */
    struct lagged_loss lag;
    int64_t steps;               /* batches per epoch */
    double test_loss, test_acc;  /* of the last evaluation */
    bool done;                   /* a resume that leaves nothing to do: the run ends before it starts */
    bool stopped;                /* within an epoch, at [train] max_steps or ... */
    bool interrupted;            /* ... by glia_model_request_stop */
};

/* An epoch's running figures. */
struct epoch_run {
    int n;                       /* from 1 */
    double t0, loss_sum;         /* when it began; its training loss sum (with a resumed part's) */
    int64_t k0;                  /* its first batch (a resume's position, else 0) */
    int64_t samples, samples0;   /* samples trained in it, and those a resume began with */
    double l;                    /* the last loss read ... */
    int64_t l_k;                 /* ... and its step (a lagged loss is a step late; -1: none yet) */
};

static void epoch_add_loss(struct epoch_run *e, const struct loss_read *got)
{
    if (!got->have) return;
    e->loss_sum += got->l * (double)got->nb;
    e->l = got->l;
    e->l_k = got->k;
}

/* The set-up: output, loaders and activations, a resume's state, ddp's start (same model and step everywhere, rank
 * 0's weights), the checkpoint folder and the metrics file. Releases what it took when it fails and when a resume
 * leaves nothing to do (t->done). */
static glia_status run_begin(struct glia_model *m, const struct glia_train_options *opt, struct run *t)
{
    *t = (struct run){.rs = {1, 0, 0, 0}};
    glia_status st = glia__report_open(&t->rep, m, opt);
    if (st) return st;
    st = scratch_alloc(m, &t->s, true, true);
    if (!st && opt->resume) st = glia__checkpoint_load(m, opt->resume, true, &t->rs);
    if ((t->done = !st && opt->resume && nothing_left(m, &t->rs)))
        glia__report_nothing_left(&t->rep, m, opt->resume, &t->rs);
    if (!st && opt->resume && !t->done) {  /* what derives from the loaded state: the data order, the loss scale */
        t->s.train.seed = t->s.test.seed = m->seed;
        st = write_loss_scale(m);
    }
    /* also when there is nothing to do, so that a rank resumed from another step fails with the others instead of
     * leaving them waiting */
    if (!st && m->dist.ddp) st = glia__ddp_start(m, m->dist.ddp);
    if (m->dist.ddp) m->dist.ddp_started = !st;
    dp_weights_changed(m);
    if (!st && !t->done) st = checkpoint_dir_ready(m);
    if (!st && !t->done) st = glia__report_metrics_open(&t->rep, m, opt->metrics_path, opt->resume != NULL);
    if (!st && !t->done) st = lagged_init(m, &t->lag);
    if (st || t->done) {
        scratch_free(&t->s);
        glia__report_close(&t->rep);
        return st;
    }
    if (opt->resume) glia__report_resuming(&t->rep, m, opt->resume, &t->rs);
    grads_unset(m);  /* what glia_model_step accumulated without an update is not this run's */
    m->trainer.micro = 0;
    t->steps = t->s.train.n_batches_per_epoch;
    t->rep.t_start = glia__now();
    return GLIA_OK;
}

/* Epoch `epoch` begins: its figures (a resume's part of it included), its loader and feed. */
static glia_status epoch_begin(struct glia_model *m, struct run *t, int epoch, struct epoch_run *e, struct feed *f)
{
    bool resumed = epoch == t->rs.epoch && t->rs.batch > 0;
    *e = (struct epoch_run){.n = epoch, .t0 = glia__now(), .loss_sum = resumed ? t->rs.loss_sum : 0,
                        .k0 = resumed ? t->rs.batch : 0, .samples = resumed ? t->rs.samples : 0, .l_k = -1};
    e->samples0 = e->samples;
    m->trainer.epoch = epoch;
    glia__report_epoch_start(&t->rep);
    glia_status st = glia__loader_start_epoch(&t->s.train, epoch, e->k0);
    return st ? st : feed_start(m, f, &t->s.train, true);
}

/* After the optimizer step that batch k (0-based in e) ended: whether the run stops there ([train] max_steps, a
 * stop request the ranks agree on), and the step's checkpoint when one is due. */
static glia_status after_update(struct glia_model *m, struct run *t, struct epoch_run *e, int64_t k)
{
    glia_status st = GLIA_OK;
    if (m->trainer.max_steps > 0 && m->trainer.step >= m->trainer.max_steps) t->stopped = true;
    else if (stop_agreed(m, &st)) t->stopped = t->interrupted = true;
    bool save = (m->trainer.checkpoint_every > 0 && m->trainer.step % m->trainer.checkpoint_every == 0) || t->stopped;
    if (st || !save) return st;
    struct loss_read got;
    if ((st = lagged_drain(m, &t->lag, e->n, &got))) return st;  /* the checkpoint holds every loss */
    epoch_add_loss(e, &got);
    char name[64];
    snprintf(name, sizeof name, GLIA__STEP_CKPT, (long long)m->trainer.step);
    return save_checkpoint(m, name, e->n, k + 1, e->loss_sum, e->samples, true);
}

/* The end of epoch e, whose batches ended with status st: the feed stopped and the last loss read; then, unless the
 * run stopped within the epoch (it is not finished, so it is not evaluated), the ranks' figures, the evaluation,
 * the epoch's result (into results) and its report. */
static glia_status epoch_end(struct glia_model *m, struct run *t, struct epoch_run *e, struct feed *f, glia_status st,
                             struct glia_epoch_result *results, int max_results)
{
    glia_status fs = feed_stop(m, f);
    struct loss_read got = {0};
    if (!st) st = fs;
    if (!st) st = lagged_drain(m, &t->lag, e->n, &got);  /* the epoch's last loss */
    epoch_add_loss(e, &got);
    t->lag.pending = false;
    if (st || t->stopped) {
        if (!st) glia__report_stopped(&t->rep, m, e->n, t->interrupted);
        return st;
    }
    glia__report_epoch_last_step(&t->rep, m, e->n, e->l_k, t->steps, e->l, e->samples - e->samples0, e->t0);
    double train_s = glia__now() - e->t0, wait_s = t->s.train.wait_s;
    struct dist_epoch de;
    st = dist_epoch(m, &t->s.train, e->loss_sum, e->samples, e->samples - e->samples0, train_s, t->steps - e->k0, &de);
    if (!st) st = evaluate(m, &t->s, &t->test_loss, &t->test_acc);
    if (st) return st;
    struct glia_epoch_result r = {sizeof r, e->n, de.samples ? de.loss_sum / de.samples : 0, t->test_loss, t->test_acc,
                                  de.run_samples / (train_s > 0 ? train_s : 1e-9), glia__now() - e->t0, m->trainer.cur_lr, wait_s,
                                  m->trainer.scaler.skipped, m->trainer.scaler.scale, m->dist.world, de.comm_wait_s, de.step_s_min,
                                  de.step_s_max};
    if (results && e->n <= max_results) {  /* the caller's part of r, at the caller's stride */
        size_t stride = m->trainer.results_size, n = stride < sizeof r ? stride : sizeof r;
        r.struct_size = (uint32_t)n;
        memcpy((char *)results + (size_t)(e->n - 1) * stride, &r, n);
    }
    glia__report_epoch(&t->rep, m, &r, de.pad_frac);
    return GLIA_OK;
}

/* [runtime] cuda_graph after a run: how many passes were replayed (a log line), and the graphs freed, so that what
 * they held goes back to the allocator. */
static void graphs_done(struct glia_model *m)
{
    int ready = 0;
    for (int i = 0; i < m->trainer.n_graphs; i++) ready += m->trainer.graphs[i].state == GLIA__GRAPH_READY;
    glia_log(m->ctx, GLIA_LOG_INFO, "cuda_graph: %lld training passes replayed from %d graph%s", (long long)m->trainer.graph_replays,
             ready, ready == 1 ? "" : "s");
    glia__model_free_graphs(m);
}

/* The run's end with status st: a stop request's error, the final checkpoint, the report's end, what it held. */
static glia_status run_end(struct glia_model *m, struct run *t, glia_status st)
{
    if (t->lag.pending) glia_backend_sync(m->backend);  /* stopped by an error: let the download land */
    lagged_free(m, &t->lag);
    if (!st && t->interrupted && m->trainer.checkpoint_dir)
        st = glia_error(m->ctx, GLIA_EINTERRUPTED, "interrupted at step %lld: continue with --resume %s/" GLIA__STEP_CKPT,
                        (long long)m->trainer.step, m->trainer.checkpoint_dir, (long long)m->trainer.step);
    else if (!st && t->interrupted)
        st = glia_error(m->ctx, GLIA_EINTERRUPTED,
                        "interrupted at step %lld: nothing was saved ([train] checkpoint_dir is not set)", (long long)m->trainer.step);
    if (!st && !t->stopped) st = save_checkpoint(m, "final.ckpt", m->trainer.epochs + 1, 0, 0, 0, false);
    st = glia__report_finish(&t->rep, m, st, !t->stopped, t->test_loss, t->test_acc);
    if (m->trainer.cuda_graph) graphs_done(m);
    scratch_free(&t->s);
    glia__report_close(&t->rep);
    return st;
}

static glia_status train_run(struct glia_model *m, const struct glia_train_options *opt,
                             struct glia_epoch_result *results, int max_results)
{
    struct run t;
    glia_status st = run_begin(m, opt, &t);
    if (st || t.done) return st;
    for (int epoch = t.rs.epoch; epoch <= m->trainer.epochs && !st && !t.stopped; epoch++) {
        struct epoch_run e;
        struct feed f = {0};
        int64_t nb;
        bool more = true;
        st = epoch_begin(m, &t, epoch, &e, &f);
        for (int64_t k = e.k0; !st && !(st = feed_next(m, &f, &nb, &more)) && more; k++) {
            bool update = (k + 1) % m->trainer.accumulate == 0 || k == t.steps - 1;  /* an epoch ends with an update */
            struct loss_read got;
            st = train_step(m, nb, epoch, k, update, &t.lag, &got);
            epoch_add_loss(&e, &got);
            e.samples += nb;
            if (!st && update) st = after_update(m, &t, &e, k);
            if (st || t.stopped) break;
            glia__report_step(&t.rep, m, epoch, e.l_k, t.steps, e.l, e.samples - e.samples0, e.t0, t.steps - k - 1);
        }
        st = epoch_end(m, &t, &e, &f, st, results, max_results);
    }
    return run_end(m, &t, st);
}

glia_status glia_model_train(struct glia_model *m, const struct glia_train_options *opt,
                             struct glia_epoch_result *results, int max_results)
{
    static const struct glia_train_options dflt = {.struct_size = sizeof dflt};
    if (opt && opt->struct_size < GLIA__END_OF(struct glia_train_options, resume))
        return glia_error(m->ctx, GLIA_EINVAL, "glia_model_train: the options' struct_size is %u: zero the struct and set "
                          "struct_size = sizeof(struct glia_train_options)", (unsigned)opt->struct_size);
    if (results && max_results > 0 && results[0].struct_size < GLIA__END_OF(struct glia_epoch_result, epoch))
        return glia_error(m->ctx, GLIA_EINVAL, "glia_model_train: results[0].struct_size is %u: set it to "
                          "sizeof(struct glia_epoch_result)", (unsigned)results[0].struct_size);
    m->trainer.stop_code = 0;
    m->trainer.results_size = results && max_results > 0 ? results[0].struct_size : 0;
    glia_status st = train_run(m, opt ? opt : &dflt, results, max_results);
    m->trainer.stop_requested = 0;
    return st;
}

/* ---- glia_model_step: one training step on a batch the caller holds ---- */


/* Whether shape s is a batch m takes (images: (n, channels, rows, cols); tokens (n, len), len up to the longest
 * padded length), as an error line naming both. */
static glia_status step_check_shape(struct glia_model *m, const struct glia_shape *s)
{
    const struct glia__dataset *d = &m->data.train;
    bool fits = s->ndim == (d->tokens ? 2 : 4) && s->dim[0] >= 1 && s->dim[0] <= m->data.batch;
    if (fits && d->tokens) fits = s->dim[1] >= 1 && s->dim[1] <= d->cols;
    if (fits && !d->tokens) fits = s->dim[1] == d->channels && s->dim[2] == d->rows && s->dim[3] == d->cols;
    if (fits) return GLIA_OK;
    char got[160];
    if (s->ndim < 1 || s->ndim > GLIA_MAX_DIMS) snprintf(got, sizeof got, "of %d dimensions", s->ndim);
    else glia_shape_str(s, got, sizeof got);
    if (d->tokens)
        return glia_error(m->ctx, GLIA_EINVAL,
                          "glia_model_step: batch shape %s; the model takes token batches n x len, n from 1 to %d "
                          "([data] batch_size), len from 1 to %d", got, m->data.batch, d->cols);
    return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: batch shape %s; the model takes images n x %d x %d x %d, "
                      "n from 1 to %d ([data] batch_size)", got, d->channels, d->rows, d->cols, m->data.batch);
}

/* Whether the n values of v lie in [0, high); else an error naming the first that does not. */
static glia_status step_check_ids(struct glia_model *m, const int32_t *v, int64_t n, int64_t high, const char *what,
                                  const char *bound)
{
    for (int64_t i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= high)
            return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: %s[%lld] is %d, outside 0 .. %lld (%s)", what,
                              (long long)i, (int)v[i], (long long)high - 1, bound);
    return GLIA_OK;
}

/* Whether b (and r) can be used for m: one error line naming what cannot. */
static glia_status step_check(struct glia_model *m, const struct glia_batch *b, const struct glia_step_result *r)
{
    if (!b) return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: the batch is NULL");
    if (b->struct_size < GLIA__END_OF(struct glia_batch, labels))
        return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: batch struct_size %u is too small (set it to "
                          "sizeof(struct glia_batch))", (unsigned)b->struct_size);
    if (r && r->struct_size < GLIA__END_OF(struct glia_step_result, loss))
        return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: result struct_size %u is too small (set it to "
                          "sizeof(struct glia_step_result))", (unsigned)r->struct_size);
    glia_status st = step_check_shape(m, &b->shape);
    if (st) return st;
    bool tok = m->data.train.tokens;
    if (tok ? !b->tokens || b->x : !b->x || b->tokens)
        return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: the model reads %s: set %s, and leave %s NULL",
                          tok ? "token ids" : "images", tok ? "tokens" : "x", tok ? "x" : "tokens");
    if (!b->labels) return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: labels is NULL");
    int64_t n = b->shape.dim[0];
    int64_t classes = m->graph.nodes[m->graph.nodes[m->graph.n_nodes - 1].in[0]].out_shape.dim[1];
    st = step_check_ids(m, b->labels, n, classes, "labels", "the classes of the loss layer's input");
    if (!st && tok) st = step_check_ids(m, b->tokens, n * b->shape.dim[1], m->data.vocab, "tokens", "[data] vocab");
    if (!st && b->struct_size >= GLIA__END_OF(struct glia_batch, epoch) && (b->epoch < 0 || b->epoch > m->trainer.epochs))
        st = glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: epoch %d is outside 1 .. %d ([train] epochs; 0: the "
                        "model's current)", b->epoch, m->trainer.epochs);
    return st;
}

/* What a step needs on each call: the training activations; under ddp, once, the ranks' start (same model and
 * step everywhere, rank 0's weights); under dp, the replicas copy the model's weights anew (they may have been
 * loaded since the last step). */
static glia_status step_ready(struct glia_model *m)
{
    glia_status st = need_activations(m, m->data.batch, 0);
    if (!st && m->dist.ddp && !m->dist.ddp_started) {
        st = glia__ddp_start(m, m->dist.ddp);
        m->dist.ddp_started = !st;
    }
    dp_weights_changed(m);
    return st;
}

/* b's data into m->act.x, m->y (it was checked). */
static glia_status step_feed(struct glia_model *m, const struct glia_batch *b)
{
    int64_t n = b->shape.dim[0];
    glia_status st = set_batch(m, n, m->data.train.tokens ? b->shape.dim[1] : m->data.train.cols, true);
    const void *x = m->data.train.tokens ? (const void *)b->tokens : (const void *)b->x;
    if (!st) st = glia_tensor_from_host(m->act.x, x, glia_tensor_nbytes(m->act.x));
    if (!st) st = glia_tensor_from_host(m->act.y, b->labels, glia_tensor_nbytes(m->act.y));
    return st;
}

glia_status glia_model_step(struct glia_model *m, const struct glia_batch *b, struct glia_step_result *r)
{
    if (!m) return GLIA_EINVAL;
    glia_status st = step_check(m, b, r);
    if (!st) st = step_ready(m);
    if (!st) st = step_feed(m, b);
    if (st) return st;
    int want = b->struct_size >= GLIA__END_OF(struct glia_batch, epoch) ? b->epoch : 0;
    int epoch = m->trainer.epoch = want > 0 ? want : m->trainer.epoch > 0 ? m->trainer.epoch : 1;
    if (m->trainer.micro == 0) grads_unset(m);  /* a new accumulation: what a failed step left is not added to it */
    bool now = b->struct_size >= GLIA__END_OF(struct glia_batch, update_now) && b->update_now;
    bool update = ++m->trainer.micro >= m->trainer.accumulate || now;
    int64_t skipped = m->trainer.scaler.skipped;
    struct loss_read got;
    st = train_step(m, b->shape.dim[0], epoch, m->trainer.step, update, NULL, &got);
    if (update || st) m->trainer.micro = 0;  /* after an error the next call starts a new accumulation */
    if (st || !r) return st;
    bool skip = m->trainer.scaler.skipped > skipped;
    struct glia_step_result v = {r->struct_size, got.l, update && !skip, skip,
                                 update && !skip ? m->trainer.cur_lr : glia__model_lr(m, epoch, m->trainer.step + 1), m->trainer.step,
                                 m->trainer.scaler.scale};
    memcpy(r, &v, r->struct_size < sizeof v ? r->struct_size : sizeof v);  /* what the caller's struct has */
    return GLIA_OK;
}

glia_status glia_model_profile(struct glia_model *m, int steps, int warmup, FILE *f)
{
    return glia_model_profile_trace(m, steps, warmup, f, NULL);
}

glia_status glia_model_profile_trace(struct glia_model *m, int steps, int warmup, FILE *f, const char *trace_path)
{
    if (steps < 1 || warmup < 0)
        return glia_error(m->ctx, GLIA_EINVAL, "profile: steps must be 1 or more and warm-up 0 or more (got %d and %d)",
                          steps, warmup);
    struct glia__trace trace = {0};
    FILE *tf = NULL;
    if (trace_path && m->dist.rank == 0) {  /* ddp: rank 0 writes for all; opened first, so a bad path costs no run */
        if (!(tf = fopen(trace_path, "w")))
            return glia_error(m->ctx, GLIA_EIO, "cannot write trace file %s: %s", trace_path, strerror(errno));
        size_t per_step = 2 * (size_t)m->graph.n_nodes + 4;
        size_t want = steps > 0 ? (size_t)steps * per_step : 0;
        if (glia__trace_reserve(&trace, want < ((size_t)1 << 16) ? want : (size_t)1 << 16)) {
            fclose(tf);
            return glia_error(m->ctx, GLIA_ENOMEM, "profile: out of memory for the trace");
        }
    }
    struct scratch s = {0};
    glia_status st = scratch_alloc(m, &s, true, false);
    if (!st && m->dist.ddp) st = glia__ddp_start(m, m->dist.ddp);  /* as training does: same model, rank 0's weights */
    dp_weights_changed(m);
    if (!st) st = glia__loader_start_epoch(&s.train, 1, 0);
    int64_t total = s.have_train ? s.train.n_batches_per_epoch : 0;
    if (!st && warmup + steps > total)
        st = glia_error(m->ctx, GLIA_EINVAL, "profile: %d warm-up + %d steps, but an epoch has %lld batches", warmup, steps,
                        (long long)total);
    double t_all = 0, wait = 0, t_other = 0;
    struct feed fd = {0};
    if (!st) st = feed_start(m, &fd, &s.train, true);
    for (int k = 0; !st && k < warmup + steps; k++) {
        if (k == warmup) {  /* start counting */
            for (int i = 0; i < m->graph.n_nodes; i++) m->graph.nodes[i].t_fwd = m->graph.nodes[i].t_bwd = 0;
            m->trainer.t_opt = 0;
            m->trainer.profiling = true;
            wait = s.train.wait_s;
            t_all = glia__now();
            if (tf) m->trainer.trace = &trace;
        }
        int64_t nb;
        bool more;
        double t0 = glia__now();
        size_t step_ev = trace.n;  /* the step's own event comes first, its end filled in below */
        if (m->trainer.trace) {
            trace.step = k - warmup + 1;
            if (trace.step == 1) trace.t_base = t0;
            glia__trace_add(&trace, GLIA__TRACE_STEP, NULL, t0, t0);
        }
        if ((st = feed_next(m, &fd, &nb, &more)) || !more) {
            trace.n = step_ev;
            break;
        }
        if (m->trainer.profiling) {
            glia_backend_sync(m->backend);
            double t1 = glia__now();
            t_other += t1 - t0;
            if (m->trainer.trace) glia__trace_add(&trace, GLIA__TRACE_INPUT, "input", t0, t1);
        }
        if (!st) st = train_forward(m, nb);
        if (m->dist.ddp) glia__ddp_begin(m->dist.ddp, true);
        if (!st) st = train_backward(m);
        if (!st) st = optimizer_step(m, 1);
        if (m->trainer.trace && step_ev < trace.n && trace.ev[step_ev].cat == GLIA__TRACE_STEP) {
            trace.ev[step_ev].t1 = glia__now();
            trace.ev[step_ev].batch = nb;
        }
    }
    glia_status fs = feed_stop(m, &fd);
    if (!st) st = fs;
    if (!st) st = glia_backend_sync(m->backend);
    double t_end = glia__now();
    m->trainer.profiling = false;
    m->trainer.trace = NULL;
    if (!st && trace.lost) st = glia_error(m->ctx, GLIA_ENOMEM, "profile: out of memory recording the trace");
    if (tf) {
        if (!st && glia__trace_write(&trace, tf, m->dist.rank))
            st = glia_error(m->ctx, GLIA_EIO, "writing trace file %s failed", trace_path);
        if (fclose(tf) && !st) st = glia_error(m->ctx, GLIA_EIO, "writing trace file %s failed", trace_path);
        if (st) remove(trace_path);  /* no half-written trace left behind */
    }
    size_t n_events = trace.n;
    glia__trace_free(&trace);
    if (!st) {
        t_all = t_end - t_all;
        wait = s.train.wait_s - wait;
        double sum_layers = 0;
        for (int i = 0; i < m->graph.n_nodes; i++) sum_layers += m->graph.nodes[i].t_fwd + m->graph.nodes[i].t_bwd;
        fprintf(f, "profile: %d training steps of batch %d after %d warm-up steps, %.1f ms a step, %.0f samples/s\n",
                steps, m->data.batch, warmup, 1e3 * t_all / steps, (double)steps * m->data.batch / t_all);
        if (m->graph.ckpt_segments > 1)
            fprintf(f, "([graph] checkpoint_segments: a recomputed layer's backward ms includes its forward run again)\n");
        fprintf(f, "%-16s %-22s %11s %11s %7s\n", "layer", "type", "forward ms", "backward ms", "share");
        for (int i = 0; i < m->graph.n_nodes; i++) {
            const struct glia__node *nd = &m->graph.nodes[i];
            fprintf(f, "%-16s %-22s %11.3f %11.3f %6.1f%%\n", nd->layer.name, nd->layer.type->name, 1e3 * nd->t_fwd / steps,
                    1e3 * nd->t_bwd / steps, 100 * (nd->t_fwd + nd->t_bwd) / t_all);
        }
        fprintf(f, "%-16s %-22s %11.3f %11s %6.1f%%\n", "(optimizer)", m->trainer.opt.type->name, 1e3 * m->trainer.t_opt / steps, "",
                100 * m->trainer.t_opt / t_all);
        fprintf(f, "%-16s %-22s %11.3f %11s %6.1f%%\n", "(input)", "loader wait + copy", 1e3 * t_other / steps, "",
                100 * t_other / t_all);
        double rest = t_all - sum_layers - m->trainer.t_opt - t_other;
        fprintf(f, "%-16s %-22s %11.3f %11s %6.1f%%\n", "(other)", "core", 1e3 * rest / steps, "", 100 * rest / t_all);
        struct glia_memory_stats ms;
        if (glia_backend_memory_stats(m->backend, &ms) == GLIA_OK)
            fprintf(f, "device memory: %.1f MiB in tensors (peak %.1f), %.1f MiB held, %llu driver allocations\n",
                    ms.current / 1048576.0, ms.peak / 1048576.0, ms.reserved / 1048576.0,
                    (unsigned long long)ms.driver_allocs);
        if (tf) fprintf(f, "trace: %zu events in %s\n", n_events, trace_path);
        (void)wait;
    }
    scratch_free(&s);
    return st;
}
