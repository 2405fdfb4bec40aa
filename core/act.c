/* core/act.c — the activations of a model's steps: their one block, the batch and label buffers and the views a batch
 * size gets, and feeding the loader's batches into them (on the backend's copy stream where it has one). Not the
 * plan of where each activation lies (core/memplan.c) nor the step that fills them (core/train.c). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "loader.h"
#include "parts.h"
#include "act.h"

void glia__model_release_activations(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        glia_tensor_release(nd->out);
        glia_tensor_release(nd->dout);
        nd->out = nd->dout = NULL;
        nd->saved = NULL;  /* it pointed into the block */
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
enum glia_dtype glia__data_dtype(const struct glia_model *m) { return m->data.train.tokens ? GLIA_I32 : GLIA_F32; }

/* Whether the backend queues its work (then batches upload on its copy stream through stage_x/y, during the step
 * before theirs); a backend whose calls run to their end (the CPU) gets them copied in place. */
static bool async_upload(const struct glia_model *m) { return glia__backend_queues(m->backend); }

/* The loss layer's output gradient: 1/accumulate (each micro-batch's loss counts that much),
 * times the loss scale, times the share of the batch this model computed (dp). */
glia_status glia__write_loss_scale(struct glia_model *m)
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
    if (!st) st = glia__scaler_settle(m);  /* the loss scale is written anew from the host's scaler */
    if (st) return st;
    glia__model_release_activations(m);
    int64_t maxb = tb > eb ? tb : eb;
    if ((st = glia__act_plan(m, tb, eb, &m->act.plan)))  /* else a layer's shape error says why */
        return st == GLIA_ENOMEM ? glia_error(m->ctx, st, "out of memory planning the activations") : st;
    glia_context_clear_error(m->ctx);
    st = m->act.plan.len > GLIA__MAX_ELEMENTS ? GLIA_ENOMEM : new_flat(m, m->act.plan.len, &m->act.act_block);
    struct glia_shape xs = glia__data_shape(m, maxb, m->data.train.cols);
    int64_t one[1] = {1};
    struct glia_shape ys = glia__label_shape(m, maxb, m->data.train.cols), s1 = glia_shape_make(1, one);
    if (!st) st = glia_tensor_new(m->backend, glia__data_dtype(m), &xs, &m->act.x_buf);
    if (!st) st = glia_tensor_new(m->backend, GLIA_I32, &ys, &m->act.y_buf);
    if (!st && async_upload(m)) st = glia_tensor_new(m->backend, glia__data_dtype(m), &xs, &m->act.stage_x);
    if (!st && async_upload(m)) st = glia_tensor_new(m->backend, GLIA_I32, &ys, &m->act.stage_y);
    if (!st) st = glia_tensor_new(m->backend, GLIA_F32, &s1, &m->act.loss_scale);
    if (!st) st = glia__write_loss_scale(m);
    if (st) {
        /* the block, the batch and its labels (twice with an upload stage): named by the batch size that makes
         * the larger plan */
        bool train = tb > 0 && m->act.plan.train >= m->act.plan.eval;
        double bytes = 4.0 * ((double)m->act.plan.len + (async_upload(m) ? 2 : 1) * (glia__numel_d(&xs) + glia__numel_d(&ys)));
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
glia_status glia__need_activations(struct glia_model *m, int64_t tb, int64_t eb)
{
    if (m->act.act_batch >= tb && m->act.eval_batch >= eb) return GLIA_OK;
    return alloc_activations(m, tb > m->act.act_batch ? tb : m->act.act_batch, eb > m->act.eval_batch ? eb : m->act.eval_batch);
}

/* *out = the part of the activation block from float off on, of shape s in format f, of values of type t. */
static glia_status view(struct glia_model *m, int64_t off, const struct glia_shape *s, enum glia_memory_format f,
                        enum glia_dtype t, struct glia_tensor **out)
{
    return glia__tensor_view_typed(m->act.act_block, (size_t)off * sizeof(float), t, s, f, out);
}

/* Point every activation view at batch n (n <= act_batch in training, eval_batch in evaluation) of length len
 * (tokens; images: any), where the plan of that mode puts them. */
glia_status glia__set_batch(struct glia_model *m, int64_t n, int64_t len, bool train)
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
        size_t sb = train ? glia__saved_bytes(m, i, shapes, n, len) : 0;
        nd->saved = sb ? (char *)m->act.act_block->data + (size_t)off[GLIA__PLAN_SAVED(i)] * sizeof(float) : NULL;
        st = view(m, off[GLIA__PLAN_VALUE(i, -1)], &shapes[i], nd->out_fmt, nd->out_dtype, &nd->out);
        if (!st && grad) st = view(m, off[GLIA__PLAN_GRAD(i, -1)], &shapes[i], nd->out_fmt, nd->out_dtype, &nd->dout);
        for (int k = 0; k < nd->n_in && !st; k++) {  /* inputs seen in another format or type */
            glia_tensor_release(nd->cin[k]);
            glia_tensor_release(nd->cdin[k]);
            nd->cin[k] = nd->cdin[k] = NULL;
            if (nd->edge[k] == GLIA__EDGE_DIRECT) continue;
            int p = nd->in[k];
            struct glia_shape ps = p < 0 ? glia__data_shape(m, n, len) : shapes[p];
            bool conv = nd->edge[k] == GLIA__EDGE_CONVERT;
            bool pgrad = train && glia__has_grad(m, p);
            enum glia_dtype t = conv ? nd->in_dtype[k] : p < 0 ? glia__data_dtype(m) : m->graph.nodes[p].out_dtype;
            if (conv) st = view(m, off[GLIA__PLAN_VALUE(i, k)], &ps, nd->in_fmt[k], t, &nd->cin[k]);
            else if (p < 0) st = glia_tensor_view_as(m->act.x_buf, 0, &ps, nd->in_fmt[k], &nd->cin[k]);
            else st = view(m, off[GLIA__PLAN_VALUE(p, -1)], &ps, nd->in_fmt[k], t, &nd->cin[k]);
            if (!st && pgrad)
                st = view(m, off[conv ? GLIA__PLAN_GRAD(i, k) : GLIA__PLAN_GRAD(p, -1)], &ps, nd->in_fmt[k], t, &nd->cdin[k]);
        }
    }
    free(shapes);
    glia_tensor_release(m->act.x);
    glia_tensor_release(m->act.y);
    m->act.x = m->act.y = NULL;
    struct glia_shape xs = glia__data_shape(m, n, len);
    struct glia_shape ys = glia__label_shape(m, n, len);
    if (!st) st = glia_tensor_view(m->act.x_buf, 0, &xs, &m->act.x);
    if (!st) st = glia_tensor_view(m->act.y_buf, 0, &ys, &m->act.y);
    m->act.cur_batch = st ? 0 : n;
    m->act.cur_len = st ? 0 : len;
    m->act.cur_train = train;
    return st;
}

/* ---- [data] resident ---- */

void glia__resident_free(struct glia__resident *r)
{
    glia_tensor_release(r->images);
    glia_tensor_release(r->labels);
    glia_tensor_release(r->order);
    glia_tensor_release(r->table);
    *r = (struct glia__resident){0};
}

/* resident = auto: whether a training set of `bytes` goes on the device; `why` says why not. */
static bool auto_resident(struct glia_model *m, double bytes, char *why, size_t n)
{
    struct glia_backend *b = m->backend;
    size_t free_b, total;
    if (!glia__backend_queues(b)) {  /* the CPU: the loader's threads overlap with the compute */
        snprintf(why, n, "the %s backend computes as it is called; the loader's workers run beside it", b->ops->name);
        return false;
    }
    if (!glia_backend_can_batch_u8(b) || glia_backend_mem_info(b, &free_b, &total) != GLIA_OK) {
        glia_context_clear_error(m->ctx);
        snprintf(why, n, "the %s backend cannot keep it", b->ops->name);
        return false;
    }
    if (bytes >= m->data.resident_share * (double)free_b) {
        char need[32], have[32];
        glia__bytes_str(bytes, need, sizeof need);
        glia__bytes_str((double)free_b, have, sizeof have);
        snprintf(why, n, "its %s of images and labels is not under resident_share %g of the %s free", need,
                 m->data.resident_share, have);
        return false;
    }
    return true;
}

/* The training set's images, labels and room for an epoch's order and the table, on the device. */
static glia_status resident_upload(struct glia_model *m, struct glia__resident *r)
{
    const struct glia__dataset *d = &m->data.train;
    struct glia_backend *b = m->backend;
    int64_t n = d->n > 0 ? d->n : 1;
    struct glia_shape is = glia_shape_make(4, (int64_t[]){n, d->channels, d->rows, d->cols});
    struct glia_shape ls = glia_shape_make(1, (int64_t[]){n}), ts = glia_shape_make(2, (int64_t[]){d->channels, 256});
    glia_status st = glia_tensor_new(b, GLIA_U8, &is, &r->images);
    if (!st) st = glia_tensor_new(b, GLIA_I32, &ls, &r->labels);
    if (!st) st = glia_tensor_new(b, GLIA_I64, &ls, &r->order);
    if (!st) st = glia_tensor_new(b, GLIA_F32, &ts, &r->table);
    size_t px = (size_t)d->n * (size_t)d->channels * (size_t)d->rows * (size_t)d->cols;
    if (!st) st = glia_tensor_from_host(r->images, d->images, px);
    if (!st) st = glia_tensor_from_host(r->labels, d->labels, sizeof(int32_t) * (size_t)d->n);
    return st;
}

glia_status glia__resident_init(struct glia_model *m, struct glia__resident *r, bool *on)
{
    *r = (struct glia__resident){0};
    *on = false;
    const struct glia__dataset *d = &m->data.train;
    struct glia_backend *b = m->backend;
    if (m->data.resident == GLIA__RESIDENT_OFF || d->tokens) return GLIA_OK;  /* tokens with on: refused by data.c */
    struct glia_section *s = glia__config_find(m->cfg, "data");
    if (d->fimages || d->folder) return GLIA_OK;  /* auto: the loader makes their batches (on: refused by data.c) */
    char dev[32], why[200];
    glia_device_str(b->device, dev, sizeof dev);
    double bytes = (double)d->n * d->channels * d->rows * d->cols + 4.0 * (double)d->n;
    if (m->data.resident == GLIA__RESIDENT_ON && !glia_backend_can_batch_u8(b))
        return glia_section_error(s, "resident", GLIA_EUNSUPPORTED, "resident = on, but the %s backend cannot make "
                                  "batches on the device (set auto or off)", b->ops->name);
    if (m->data.resident == GLIA__RESIDENT_AUTO && !auto_resident(m, bytes, why, sizeof why)) {
        glia_log(m->ctx, glia__backend_queues(b) ? GLIA_LOG_INFO : GLIA_LOG_DEBUG,
                 "data: training batches made on the host by the loader (resident = auto: %s)", why);
        return GLIA_OK;
    }
    glia_context_clear_error(m->ctx);
    glia_status st = resident_upload(m, r);
    if (st) {
        glia__resident_free(r);
        if (st != GLIA_ENOMEM) return st;
        return glia__alloc_error(s, "resident", bytes + 8.0 * (double)d->n, "the training set on %s", dev);
    }
    char human[32];
    glia__bytes_str(bytes, human, sizeof human);
    glia_log(m->ctx, GLIA_LOG_INFO, "data: resident on %s (%s of images and labels; training batches made there)", dev,
             human);
    *on = true;
    return GLIA_OK;
}

/* An epoch starts on the device: its order (this rank's share) and the normalization table, after the work queued so
 * far (the last epoch's batches). */
static glia_status resident_epoch(struct glia_model *m, struct glia__loader *L)
{
    struct glia__resident *r = L->resident;
    glia_status st = glia_backend_copy(m->backend, r->order->data, false, L->perm, true, sizeof(int64_t) * (size_t)L->n);
    if (!st) st = glia_backend_copy(m->backend, r->table->data, false, &L->table[0][0], true,
                                    sizeof(float) * 256 * (size_t)L->d->channels);
    return st;
}

/* The next batch made on the device from the resident set into m->act.x, m->act.y. */
static glia_status resident_next(struct glia_model *m, struct glia__feed *f, int64_t *n, bool *more)
{
    struct glia__loader *L = f->L;
    struct glia__batch bt;
    if (!(*more = glia__loader_next(L, &bt))) return GLIA_OK;
    *n = bt.n;
    const struct glia__resident *r = L->resident;
    const struct glia__dataset *d = L->d;
    glia_status st = glia__set_batch(m, bt.n, bt.len, f->train);
    if (!st)
        st = glia_backend_batch_u8(m->backend, m->act.x->data, m->act.y->data, r->images->data, r->labels->data,
                                   (const int64_t *)r->order->data + bt.first, bt.n, d->channels, d->rows, d->cols,
                                   r->table->data, L->crop_padding, L->flip, L->seed, L->epoch);
    glia__loader_release(L);
    return st;
}

/* ---- feeding batches ---- */

static glia_status feed_upload(struct glia_model *m, struct glia__feed *f)
{
    f->staged = glia__loader_next(f->L, &f->b);
    if (!f->staged) return GLIA_OK;
    struct glia_backend *b = m->backend;
    size_t row = glia__batch_row_bytes(&f->b, f->L->d);
    /* f->ticket names the last copy queued from the loader's buffer (the copy stream runs in order) */
    glia_status st = glia_backend_upload(b, m->act.stage_x->data, f->b.x, row * (size_t)f->b.n, &f->ticket);
    struct glia_shape ys = glia__label_shape(m, f->b.n, f->b.len);
    if (!st) st = glia_backend_upload(b, m->act.stage_y->data, f->b.y, sizeof(int32_t) * (size_t)glia_shape_numel(&ys), &f->ticket);
    return st;
}

/* Start feeding an epoch of L (started already), for training or evaluation. */
glia_status glia__feed_start(struct glia_model *m, struct glia__feed *f, struct glia__loader *L, bool train)
{
    *f = (struct glia__feed){.L = L, .train = train};
    if (L->resident) return resident_epoch(m, L);
    return async_upload(m) ? feed_upload(m, f) : GLIA_OK;
}

static glia_status feed_next(struct glia_model *m, struct glia__feed *f, int64_t *n, bool *more);

/* Put the next batch into m->act.x, m->y (views for its size); *more = false at the epoch's end. */
glia_status glia__feed_next(struct glia_model *m, struct glia__feed *f, int64_t *n, bool *more)
{
    if (m->nvtx) glia__range_push(m->backend, "input");
    glia_status st = feed_next(m, f, n, more);
    if (m->nvtx) glia__range_pop(m->backend);
    if (!st && *more && m->data.train.folder) st = glia__loader_fault(f->L);  /* an image it could not decode */
    return st;
}

static glia_status feed_next(struct glia_model *m, struct glia__feed *f, int64_t *n, bool *more)
{
    glia_status st;
    if (f->L->resident) return resident_next(m, f, n, more);
    if (!async_upload(m)) {
        struct glia__batch bt;
        if (!(*more = glia__loader_next(f->L, &bt))) return GLIA_OK;
        *n = bt.n;
        st = glia__set_batch(m, bt.n, bt.len, f->train);
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
    if (!st) st = glia__set_batch(m, f->b.n, f->b.len, f->train);
    if (!st) st = glia_backend_copy(b, m->act.x->data, false, m->act.stage_x->data, false, glia_tensor_nbytes(m->act.x));
    if (!st) st = glia_backend_copy(b, m->act.y->data, false, m->act.stage_y->data, false, glia_tensor_nbytes(m->act.y));
    if (!st) st = feed_upload(m, f);
    return st;
}

/* Give back a batch still held when a loop stops early, once its upload has stopped reading the
 * loader's buffer (a worker refills the buffer as soon as it is given back). */
glia_status glia__feed_stop(struct glia_model *m, struct glia__feed *f)
{
    glia_status st = GLIA_OK;
    if (f->staged) {
        st = glia_backend_wait_copy(m->backend, f->ticket, true);
        glia__loader_release(f->L);
    }
    f->staged = false;
    return st;
}


/* [runtime] cuda_graph: frees the graphs (train.c makes them), which read and write the activations. */
void glia__model_free_graphs(struct glia_model *m)
{
    for (int i = 0; i < m->trainer.n_graphs; i++) {
        struct glia__graph *g = &m->trainer.graphs[i];
        if (g->exec) glia_backend_graph_free(m->backend, g->exec);
        free(g->written);
    }
    m->trainer.n_graphs = 0;
}
