/* core/ddp.c — DistributedDataParallel: gradient buckets over the flat gradient arena, each
 * all-reduced (average) as soon as backward has written its last gradient; the start-of-training
 * model check and broadcast. Not a transport (plugins/comm/), not the data sharding (loader.c). */
#include <stdlib.h>
#include <string.h>
#include "parts.h"

int glia__ddp_buckets(const int64_t *sizes, int n, size_t elem_bytes, size_t first_bytes, size_t bytes, int *bucket_of)
{
    int b = 0;
    size_t filled = 0;
    bool open = false;
    for (int i = n - 1; i >= 0; i--) {  /* backward writes the last parameters first */
        bucket_of[i] = b;
        filled += (size_t)sizes[i] * elem_bytes;
        open = true;
        if (filled >= (b == 0 ? first_bytes : bytes)) {
            b++;
            filled = 0;
            open = false;
        }
    }
    return b + (open ? 1 : 0);
}

struct glia__ddp_bucket {
    int64_t off, n;          /* its range of the gradient arena (elements) */
    int params, pending;     /* parameters in it; those backward has not written yet */
    bool launched;
    uint64_t ticket;
};

struct glia__ddp {
    struct glia_comm *comm;
    int n_buckets, n_params;
    struct glia__ddp_bucket *b;
    int *bucket_of;          /* per parameter, in arena order */
    int *param0;             /* per node: the arena index of its first parameter */
    bool stage;              /* the transport takes host memory only: gradients go through host */
    float *host;             /* staging copy of the gradient arena (stage) */
    bool active;             /* this backward's gradients are all-reduced */
    double wait_s;           /* time the host waited for buckets, this epoch */
};

void glia__ddp_free(struct glia__ddp *d)
{
    if (!d) return;
    free(d->b);
    free(d->bucket_of);
    free(d->param0);
    free(d->host);
    free(d);
}

glia_status glia__ddp_new(struct glia_model *m, struct glia_comm *comm, double bucket_mb, double first_mb,
                          struct glia__ddp **out)
{
    struct glia__ddp *d = calloc(1, sizeof *d);
    if (!d) return GLIA_ENOMEM;
    d->comm = comm;
    d->n_params = m->params.wa.count;  /* the arena holds the parameters in order, with their sizes */
    d->bucket_of = malloc(sizeof *d->bucket_of * (size_t)(d->n_params > 0 ? d->n_params : 1));
    d->param0 = malloc(sizeof *d->param0 * (size_t)(m->graph.n_nodes > 0 ? m->graph.n_nodes : 1));
    d->stage = m->backend->device.type != GLIA_DEVICE_CPU && !(comm->ops->memory & GLIA_COMM_DEVICE_MEMORY);
    if (d->stage) d->host = malloc(sizeof(float) * (size_t)m->params.wa.len);
    if (!d->bucket_of || !d->param0 || (d->stage && !d->host)) {
        glia__ddp_free(d);
        return GLIA_ENOMEM;
    }
    for (int i = 0, k = 0; i < m->graph.n_nodes; k += m->graph.nodes[i].layer.n_params, i++) d->param0[i] = k;
    d->n_buckets = glia__ddp_buckets(m->params.wa.size, d->n_params, sizeof(float), (size_t)(first_mb * 1048576.0),
                                     (size_t)(bucket_mb * 1048576.0), d->bucket_of);
    d->b = calloc((size_t)(d->n_buckets > 0 ? d->n_buckets : 1), sizeof *d->b);
    if (!d->b) {
        glia__ddp_free(d);
        return GLIA_ENOMEM;
    }
    for (int i = 0; i < d->n_params; i++) {  /* a bucket is a contiguous range: its params are adjacent */
        struct glia__ddp_bucket *b = &d->b[d->bucket_of[i]];
        if (b->params++ == 0) b->off = m->params.wa.off[i];
        b->n = m->params.wa.off[i] + m->params.wa.size[i] - b->off;  /* the zero padding between them included */
    }
    *out = d;
    return GLIA_OK;
}

int glia__ddp_n_buckets(const struct glia__ddp *d) { return d->n_buckets; }

/* Start bucket k's all-reduce (average). */
static glia_status launch(struct glia_model *m, struct glia__ddp *d, int k)
{
    struct glia__ddp_bucket *b = &d->b[k];
    float *g = (float *)m->params.g->data + b->off;
    b->launched = true;
    if (!d->stage) return glia_comm_all_reduce(d->comm, g, (size_t)b->n, GLIA_F32, GLIA_REDUCE_AVG, &b->ticket);
    struct glia_backend *be = m->backend;  /* through the host: the copy waits for backward so far */
    glia_status st = glia_backend_copy(be, d->host + b->off, true, g, false, sizeof(float) * (size_t)b->n);
    if (!st) st = glia_backend_sync(be);
    if (!st) st = glia_comm_all_reduce(d->comm, d->host + b->off, (size_t)b->n, GLIA_F32, GLIA_REDUCE_AVG, &b->ticket);
    return st;
}

void glia__ddp_begin(struct glia__ddp *d, bool reduce)
{
    d->active = reduce;
    for (int k = 0; k < d->n_buckets; k++) {
        d->b[k].pending = d->b[k].params;
        d->b[k].launched = false;
    }
}

glia_status glia__ddp_node_done(struct glia_model *m, struct glia__ddp *d, int node)
{
    if (!d->active) return GLIA_OK;
    const struct glia_layer *l = &m->graph.nodes[node].layer;
    for (int p = 0; p < l->n_params; p++) {
        int k = d->bucket_of[d->param0[node] + p];
        if (--d->b[k].pending == 0) {
            glia_status st = launch(m, d, k);
            if (st) return st;
        }
    }
    return GLIA_OK;
}

glia_status glia__ddp_finish(struct glia_model *m, struct glia__ddp *d)
{
    if (!d->active) return GLIA_OK;
    glia_status st = GLIA_OK;
    /* Buckets with parameters no layer wrote this step (they count as zero), in bucket order. */
    for (int k = 0; k < d->n_buckets && !st; k++) {
        if (d->b[k].launched) continue;
        for (int i = 0; i < m->graph.n_nodes && !st; i++)
            for (int p = 0; p < m->graph.nodes[i].layer.n_params && !st; p++) {
                struct glia_param *pa = &m->graph.nodes[i].layer.params[p];
                if (d->bucket_of[d->param0[i] + p] == k && pa->grad_unset && m->graph.nodes[i].tie != p + 1) {
                    st = glia_tensor_fill_zero(pa->grad);
                    pa->grad_unset = false;
                }
            }
        if (!st) st = launch(m, d, k);
    }
    double t0 = glia__now();
    struct glia_backend *be = m->backend;
    for (int k = 0; k < d->n_buckets && !st; k++) {
        struct glia__ddp_bucket *b = &d->b[k];
        st = glia_comm_wait(d->comm, b->ticket, d->stage || be->device.type == GLIA_DEVICE_CPU);
        if (!st && d->stage)
            st = glia_backend_copy(be, (float *)m->params.g->data + b->off, false, d->host + b->off, true,
                               sizeof(float) * (size_t)b->n);
    }
    if (!st && d->stage) st = glia_backend_sync(be);  /* the staging buffer is reused next step */
    d->wait_s += glia__now() - t0;
    d->active = false;
    return st;
}

glia_status glia__ddp_settle(struct glia__ddp *d)
{
    glia_status st = GLIA_OK;
    for (int k = 0; k < d->n_buckets && !st; k++)
        if (d->b[k].ticket) st = glia_comm_wait(d->comm, d->b[k].ticket, true);
    return st;
}

double glia__ddp_take_wait(struct glia__ddp *d)
{
    double w = d->wait_s;
    d->wait_s = 0;
    return w;
}

glia_status glia__ddp_start(struct glia_model *m, struct glia__ddp *d)
{
    struct glia_comm *c = d->comm;
    int world = c->info.world;
    /* an all-gather of (fingerprint, size, step) as a sum of slots that only their rank fills:
     * host memory, through whatever memory the transport takes */
    int64_t *all = calloc(3 * (size_t)world, sizeof *all);
    if (!all) return GLIA_ENOMEM;
    all[3 * c->info.rank] = (int64_t)glia__model_fingerprint(m);
    all[3 * c->info.rank + 1] = m->params.wa.n;
    all[3 * c->info.rank + 2] = m->trainer.step;
    glia_status st = glia__comm_all_reduce_host(c, all, 3 * (size_t)world, GLIA_I64, GLIA_REDUCE_SUM);
    for (int r = 1; r < world && !st; r++)
        if (all[3 * r] != all[0] || all[3 * r + 1] != all[1])
            st = glia_error(m->ctx, GLIA_ECONFIG,
                            "rank %d built a different model than rank 0 (%lld parameters against %lld, layers or shapes "
                            "differ): every rank must train the same model file",
                            r, (long long)all[3 * r + 1], (long long)all[1]);
        else if (all[3 * r + 2] != all[2])  /* a --resume on some ranks only, or from other checkpoints */
            st = glia_error(m->ctx, GLIA_ECONFIG,
                            "rank %d starts at step %lld, rank 0 at step %lld: every rank must --resume from the same "
                            "checkpoint, or none",
                            r, (long long)all[3 * r + 2], (long long)all[2]);
    free(all);
    if (!st && m->params.wa.n) st = glia_comm_broadcast_sync(c, m->params.w->data, (size_t)m->params.wa.len, GLIA_F32, 0);
    if (!st && m->params.ba.n) st = glia_comm_broadcast_sync(c, m->params.buf->data, (size_t)m->params.ba.len, GLIA_F32, 0);
    return st;
}
