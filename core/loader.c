/* core/loader.c — the data loader: worker threads filling per-worker rings of prefetched
 * batches (normalized, optionally augmented), consumed in batch order, with the consumer's
 * wait time measured. Not a file reader (core/data_image.c) and not device upload (train.c).
 *
 * Batch b is made by worker b % W into slot (b / W) % prefetch of its ring, and each sample's
 * augmentation is drawn from (seed, epoch, sample index): the batches, their order and their
 * contents do not depend on the number of workers. A language model's epoch order (perm) holds window starts in
 * its token stream instead of sample indices. */
#include <stdlib.h>
#include <string.h>
#include "loader.h"

struct slot {
    void *x;         /* f32 images or i32 token ids */
    int32_t *y;
    int64_t batch;   /* which batch it holds; -1: free */
    int64_t len;     /* tokens: the batch's padded length */
    int64_t real;    /* tokens: ids in it that are not padding */
    bool ready;
};

struct worker {
    struct glia__loader *L;
    int index;
    pthread_t thread;
    bool running;
    struct slot *ring;
};

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Sample idx's crop offset (dy, dx in -pad .. pad) and flip (0 or 1) in epoch `epoch`: the loader's rule. */
static void augment_draw(uint64_t seed, int epoch, int64_t idx, int pad, bool flip, int *dy, int *dx, int *f)
{
    uint64_t r = mix(seed ^ mix((uint64_t)epoch * 0x9e3779b97f4a7c15ull + (uint64_t)idx + 1));
    *dy = *dx = *f = 0;
    if (pad > 0) {
        *dy = (int)(r % (uint64_t)(2 * pad + 1)) - pad;
        *dx = (int)((r >> 16) % (uint64_t)(2 * pad + 1)) - pad;
    }
    if (flip) *f = (int)((r >> 40) & 1);
}

void glia__augment_sample(const uint8_t *img, int channels, int rows, int cols, const float *table, int pad,
                          bool flip, uint64_t seed, int epoch, int64_t idx, float *x)
{
    const int64_t px = (int64_t)rows * cols;
    int dy, dx, f;
    augment_draw(seed, epoch, idx, pad, flip, &dy, &dx, &f);
    for (int c = 0; c < channels; c++, img += px, x += px, table += 256)
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) {
                int si = i + dy, sj = (f ? cols - 1 - j : j) + dx;
                uint8_t v = (si >= 0 && si < rows && sj >= 0 && sj < cols) ? img[si * cols + sj] : 0;
                x[i * cols + j] = table[v];
            }
}

/* glia__augment_sample for float images: the same crop and flip, each value normalized by (v - mean[c]) / std[c]. */
static void augment_sample_f32(const float *img, int channels, int rows, int cols, const struct glia__norm *nm, int pad,
                               bool flip, uint64_t seed, int epoch, int64_t idx, float *x)
{
    const int64_t px = (int64_t)rows * cols;
    int dy, dx, f;
    augment_draw(seed, epoch, idx, pad, flip, &dy, &dx, &f);
    for (int c = 0; c < channels; c++, img += px, x += px)
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) {
                int si = i + dy, sj = (f ? cols - 1 - j : j) + dx;
                float v = (si >= 0 && si < rows && sj >= 0 && sj < cols) ? img[si * cols + sj] : 0.0f;
                x[i * cols + j] = (v - nm->mean[c]) / nm->std[c];
            }
}

/* One sample of the loader's data set into x (channels, rows, cols) and its label into *y. */
static void make_sample(struct glia__loader *L, int64_t idx, float *x, int32_t *y)
{
    const struct glia__dataset *d = L->d;
    if (d->folder) {  /* decoded here, in a worker; a file that cannot be decoded stops the run at its batch */
        char why[600];
        if (!glia__folder_sample(d, idx, d->random_crop, L->flip, L->seed, L->epoch, &L->norm, x, why, sizeof why)) {
            pthread_mutex_lock(&L->fault_mu);
            if (!L->failed) snprintf(L->failure, sizeof L->failure, "%s", why);
            L->failed = true;
            pthread_mutex_unlock(&L->fault_mu);
        }
        *y = d->labels[idx];
        return;
    }
    if (d->fimages) {
        augment_sample_f32(d->fimages + idx * d->channels * (int64_t)d->rows * d->cols, d->channels, d->rows, d->cols,
                           &L->norm, L->crop_padding, L->flip, L->seed, L->epoch, idx, x);
        *y = d->labels[idx];
        return;
    }
    const uint8_t *img = d->images + idx * d->channels * (int64_t)d->rows * d->cols;
    glia__augment_sample(img, d->channels, d->rows, d->cols, &L->table[0][0], L->crop_padding, L->flip, L->seed,
                         L->epoch, idx, x);
    *y = d->labels[idx];
}

static int64_t batch_size_of(const struct glia__loader *L, int64_t b)
{
    int64_t start = b * L->batch, left = L->n - start;
    return left < L->batch ? left : L->batch;
}

/* A token batch into s: (n, len) ids padded with 0, len the longest sample rounded up to
 * pad_multiple (at least 1). */
static void fill_tokens(const struct glia__loader *L, const int64_t *idx, int64_t n, struct slot *s)
{
    const struct glia__dataset *d = L->d;
    int64_t len = 1, real = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = glia__sample_len(d, idx[i]);
        real += k;
        if (k > len) len = k;
    }
    len = (len + L->pad_multiple - 1) / L->pad_multiple * L->pad_multiple;
    if (len > L->max_len) len = L->max_len;
    int32_t *x = s->x;
    for (int64_t i = 0; i < n; i++) {
        int64_t k = glia__sample_len(d, idx[i]);
        memcpy(x + i * len, d->ids + d->offsets[idx[i]], sizeof(int32_t) * (size_t)k);
        memset(x + i * len + k, 0, sizeof(int32_t) * (size_t)(len - k));
        s->y[i] = d->labels[idx[i]];
    }
    s->len = len;
    s->real = real;
}

/* A language model's batch into s: x(n, T) the windows' inputs, y(n, T) their next tokens (idx: their starts). */
static void fill_stream(const struct glia__loader *L, const int64_t *idx, int64_t n, struct slot *s)
{
    glia__stream_fill(L->d, idx, n, s->x, s->y);
    s->len = L->d->cols;
    s->real = n * L->d->cols;
}

static void fill(struct glia__loader *L, int64_t b, struct slot *s)
{
    int64_t n = batch_size_of(L, b), per = (int64_t)L->d->channels * L->d->rows * L->d->cols;
    const int64_t *idx = L->perm + b * L->batch;
    if (L->d->stream) return fill_stream(L, idx, n, s);
    if (L->d->tokens) return fill_tokens(L, idx, n, s);
    if (L->workers == 0) {  /* the caller's thread: use OpenMP over the batch */
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) make_sample(L, idx[i], (float *)s->x + i * per, s->y + i);
    } else {
        for (int64_t i = 0; i < n; i++) make_sample(L, idx[i], (float *)s->x + i * per, s->y + i);
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct glia__loader *L = w->L;
    pthread_mutex_lock(&L->mu);
    int64_t gen = -1;
    for (;;) {
        while (!L->stop && L->generation == gen) pthread_cond_wait(&L->cv_work, &L->mu);
        if (L->stop) break;
        gen = L->generation;
        int64_t W = L->workers, first = L->next;  /* resumed epochs start at batch `first` */
        int64_t b0 = first + ((w->index - first % W) % W + W) % W;
        for (int64_t b = b0; b < L->n_batches && !L->stop && L->generation == gen; b += L->workers) {
            struct slot *s = &w->ring[(b / L->workers) % L->prefetch];
            while (!L->stop && L->generation == gen && s->batch != -1) pthread_cond_wait(&L->cv_free, &L->mu);
            if (L->stop || L->generation != gen) break;
            s->batch = b;
            pthread_mutex_unlock(&L->mu);
            fill(L, b, s);
            pthread_mutex_lock(&L->mu);
            s->ready = true;
            pthread_cond_broadcast(&L->cv_ready);
        }
        if (!L->persistent) break;
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

int64_t glia__shard(int64_t *order, int64_t n, int rank, int world, bool pad)
{
    if (world <= 1 || n == 0) return world <= 1 ? n : 0;
    int64_t total = pad ? (n + world - 1) / world * world : n, k = 0;
    /* padded order: order[0..n) then order[0], order[1], ... again; rank r takes every world-th */
    int64_t *mine = malloc(sizeof *mine * (size_t)(total / world + 1));
    if (!mine) return -1;
    for (int64_t i = rank; i < total; i += world) mine[k++] = order[i % n];
    memcpy(order, mine, sizeof *mine * (size_t)k);
    free(mine);
    return k;
}

struct keyed {
    int64_t len, pos, sample;
};

static int by_length(const void *a, const void *b)
{
    const struct keyed *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;  /* longest first */
    return (x->pos > y->pos) - (x->pos < y->pos);            /* stable */
}

glia_status glia__group_by_length(int64_t *order, int64_t n, const struct glia__dataset *d, int64_t group,
                                  int64_t batch, bool shuffle, uint64_t seed)
{
    if (n <= 1) return GLIA_OK;
    if (group < 1) group = 1;
    if (batch < 1) batch = 1;
    int64_t run = group < n ? group : n, whole = n / batch;
    struct keyed *k = malloc(sizeof *k * (size_t)run);
    int64_t *perm = shuffle && whole > 1 ? malloc(sizeof *perm * (size_t)whole) : NULL;
    int64_t *copy = perm ? malloc(sizeof *copy * (size_t)(whole * batch)) : NULL;
    if (!k || (shuffle && whole > 1 && (!perm || !copy))) {
        free(k), free(perm), free(copy);
        return GLIA_ENOMEM;
    }
    for (int64_t start = 0; start < n; start += group) {
        int64_t m = n - start < group ? n - start : group;
        for (int64_t i = 0; i < m; i++) k[i] = (struct keyed){glia__sample_len(d, order[start + i]), i, order[start + i]};
        qsort(k, (size_t)m, sizeof *k, by_length);
        for (int64_t i = 0; i < m; i++) order[start + i] = k[i].sample;
    }
    if (perm) {
        glia__permutation(perm, whole, seed);
        memcpy(copy, order, sizeof *copy * (size_t)(whole * batch));
        for (int64_t b = 0; b < whole; b++)
            memcpy(order + b * batch, copy + perm[b] * batch, sizeof *copy * (size_t)batch);
    }
    free(k), free(perm), free(copy);
    return GLIA_OK;
}

/* The longest padded length of a token batch (images: cols). */
static int64_t max_len_of(const struct glia__dataset *d, const struct glia__loader_options *o)
{
    int64_t mult = o->pad_multiple > 0 ? o->pad_multiple : 1;
    return d->tokens ? ((int64_t)d->cols + mult - 1) / mult * mult : d->cols;
}

/* Floats (or ids) of one batch buffer's x. */
static size_t slot_floats(const struct glia__dataset *d, const struct glia__loader_options *o)
{
    return (size_t)o->batch * (size_t)(d->tokens ? max_len_of(d, o) : (int64_t)d->channels * d->rows * d->cols);
}

/* Labels of one batch buffer's y: one per sample, or a language model's one per position. */
static size_t slot_labels(const struct glia__dataset *d, const struct glia__loader_options *o)
{
    return (size_t)o->batch * (size_t)(d->stream ? d->cols : 1);
}

double glia__loader_bytes(const struct glia__dataset *d, const struct glia__loader_options *o, int *buffers)
{
    if (o->order_only && !d->tokens) return *buffers = 0, 0.0;
    *buffers = o->workers > 0 ? o->workers * (o->prefetch > 1 ? o->prefetch : 1) : 1;
    return *buffers * (4.0 * (double)slot_floats(d, o) + 4.0 * (double)slot_labels(d, o));
}

int64_t glia__loader_batches(int64_t n, int batch, bool drop_last, int world, int rank, bool pad)
{
    int64_t local = world <= 1 ? n : pad ? (n + world - 1) / world : (n - rank + world - 1) / world;
    return drop_last ? local / batch : (local + batch - 1) / batch;
}

glia_status glia__loader_init(struct glia__loader *L, struct glia_context *ctx, const struct glia__dataset *d,
                              const struct glia__loader_options *o)
{
    memset(L, 0, sizeof *L);
    L->ctx = ctx;
    L->d = d;
    L->batch = o->batch;
    L->workers = o->workers;
    L->prefetch = o->prefetch < 1 ? 1 : o->prefetch;
    L->persistent = o->persistent;
    L->drop_last = o->drop_last;
    L->shuffle = o->shuffle;
    L->crop_padding = o->crop_padding;
    L->flip = o->flip;
    L->order_only = o->order_only && !d->tokens;
    L->resident = L->order_only ? o->resident : NULL;
    L->seed = o->seed;
    L->pin = o->pin;
    L->world = o->world > 1 ? o->world : 1;
    L->rank = L->world > 1 ? o->rank : 0;
    L->pad = o->pad;
    L->group = o->group && d->tokens;
    L->group_batches = o->group_batches > 0 ? o->group_batches : 1;
    L->pad_multiple = o->pad_multiple > 0 ? o->pad_multiple : 1;
    L->max_len = max_len_of(d, o);
    L->n_batches_per_epoch = glia__loader_batches(d->n, o->batch, o->drop_last, L->world, L->rank, L->pad);
    for (int c = 0; c < d->channels && !d->tokens; c++)
        for (int v = 0; v < 256; v++) L->table[c][v] = ((float)v / 255.0f - o->norm.mean[c]) / o->norm.std[c];
    L->norm = o->norm;
    L->perm = malloc(sizeof(int64_t) * (size_t)(d->n + L->world));  /* room for the padding (group) */
    int nw = L->workers > 0 ? L->workers : 1, ns = L->workers > 0 ? L->prefetch : 1;
    if (L->order_only) L->workers = 0, nw = 0;  /* the batches are made elsewhere: no rings */
    L->w = calloc(nw > 0 ? (size_t)nw : 1, sizeof *L->w);
    if (!L->perm || !L->w)
        return glia__loader_free(L), glia_error(ctx, GLIA_ENOMEM, "loader: cannot allocate the order of %lld samples",
                                                (long long)d->n);
    size_t per = slot_floats(d, o);
    for (int i = 0; i < nw; i++) {
        L->w[i].L = L;
        L->w[i].index = i;
        L->w[i].ring = calloc((size_t)ns, sizeof(struct slot));
        if (!L->w[i].ring) return glia__loader_free(L), GLIA_ENOMEM;
        for (int k = 0; k < ns; k++) {
            struct slot *s = &L->w[i].ring[k];
            s->batch = -1;
            if (L->pin) {
                glia_status st = glia_backend_host_alloc(L->pin, per * sizeof(float), (void **)&s->x);
                if (!st) st = glia_backend_host_alloc(L->pin, sizeof(int32_t) * slot_labels(d, o), (void **)&s->y);
                if (st) return glia__loader_free(L), st;
                continue;
            }
            s->x = aligned_alloc(64, ((per * sizeof(float)) + 63) & ~(size_t)63);
            s->y = malloc(sizeof(int32_t) * slot_labels(d, o));
            if (!s->x || !s->y) return glia__loader_free(L), GLIA_ENOMEM;
        }
    }
    pthread_mutex_init(&L->mu, NULL);
    pthread_mutex_init(&L->fault_mu, NULL);
    pthread_cond_init(&L->cv_work, NULL);
    pthread_cond_init(&L->cv_ready, NULL);
    pthread_cond_init(&L->cv_free, NULL);
    L->sync_ok = true;
    L->generation = -1;
    return GLIA_OK;
}

static void join_workers(struct glia__loader *L)
{
    for (int i = 0; i < L->workers; i++)
        if (L->w[i].running) {
            pthread_join(L->w[i].thread, NULL);
            L->w[i].running = false;
        }
}

glia_status glia__loader_start_epoch(struct glia__loader *L, int epoch, int64_t first_batch)
{
    if (L->d->stream) glia__stream_starts(L->d, L->shuffle && L->d->random_windows, L->seed, epoch, L->perm);
    else if (L->shuffle) glia__permutation(L->perm, L->d->n, L->seed + (uint64_t)epoch);
    else for (int64_t i = 0; i < L->d->n; i++) L->perm[i] = i;
    int64_t n = L->d->n;
    if (L->group) {  /* pad first, sort runs of the job's batches, then each rank its share of each */
        int64_t total = L->pad && n > 0 ? (n + L->world - 1) / L->world * L->world : n;
        for (int64_t i = n; i < total; i++) L->perm[i] = L->perm[i % n];
        int64_t job_batch = (int64_t)L->batch * L->world;
        glia_status st = glia__group_by_length(L->perm, total, L->d, L->pad ? L->group_batches * job_batch : total,
                                               job_batch, L->shuffle && L->pad,
                                               mix(L->seed ^ mix((uint64_t)epoch + 0x51ed27ull)));
        if (st) return glia_error(L->ctx, st, "loader: cannot group %lld samples by length: out of memory", (long long)total);
        n = glia__shard(L->perm, total, L->rank, L->world, false);
    } else {
        n = glia__shard(L->perm, n, L->rank, L->world, L->pad);
    }
    if (n < 0) return glia_error(L->ctx, GLIA_ENOMEM, "loader: cannot shard %lld samples: out of memory", (long long)L->d->n);
    pthread_mutex_lock(&L->mu);
    L->epoch = epoch;
    L->n = n;
    L->n_batches = L->n_batches_per_epoch;
    L->next = first_batch < L->n_batches ? first_batch : L->n_batches;
    L->wait_s = 0;
    L->slots = L->real = 0;
    for (int i = 0; i < (L->order_only ? 0 : L->workers > 0 ? L->workers : 1); i++)
        for (int k = 0; k < (L->workers > 0 ? L->prefetch : 1); k++) {
            L->w[i].ring[k].batch = -1;
            L->w[i].ring[k].ready = false;
        }
    L->generation++;
    pthread_mutex_unlock(&L->mu);
    if (L->workers == 0) return GLIA_OK;
    if (!L->persistent) join_workers(L);
    for (int i = 0; i < L->workers; i++) {
        if (L->w[i].running) continue;
        if (pthread_create(&L->w[i].thread, NULL, worker_main, &L->w[i]))
            return glia_error(L->ctx, GLIA_EINTERNAL, "cannot start data loader worker %d", i);
        L->w[i].running = true;
    }
    pthread_mutex_lock(&L->mu);
    pthread_cond_broadcast(&L->cv_work);
    pthread_mutex_unlock(&L->mu);
    return GLIA_OK;
}

bool glia__loader_next(struct glia__loader *L, struct glia__batch *out)
{
    if (L->next >= L->n_batches) return false;
    int64_t b = L->next;
    if (L->order_only) {
        *out = (struct glia__batch){NULL, NULL, batch_size_of(L, b), L->d->cols, b * L->batch};
        return true;
    }
    struct slot *s;
    double t0 = glia__now();
    if (L->workers == 0) {
        s = &L->w[0].ring[0];
        fill(L, b, s);  /* without workers the step waits for all loading */
    } else {
        s = &L->w[b % L->workers].ring[(b / L->workers) % L->prefetch];
        pthread_mutex_lock(&L->mu);
        while (!(s->ready && s->batch == b)) pthread_cond_wait(&L->cv_ready, &L->mu);
        pthread_mutex_unlock(&L->mu);
    }
    L->wait_s += glia__now() - t0;
    *out = (struct glia__batch){s->x, s->y, batch_size_of(L, b), L->d->tokens ? s->len : L->d->cols, b * L->batch};
    if (L->d->tokens) {
        L->slots += out->n * out->len;
        L->real += s->real;
    }
    return true;
}

void glia__loader_release(struct glia__loader *L)
{
    int64_t b = L->next++;
    if (L->workers == 0 || L->order_only) return;
    struct slot *s = &L->w[b % L->workers].ring[(b / L->workers) % L->prefetch];
    pthread_mutex_lock(&L->mu);
    s->ready = false;
    s->batch = -1;
    pthread_cond_broadcast(&L->cv_free);
    pthread_mutex_unlock(&L->mu);
}

void glia__loader_free(struct glia__loader *L)
{
    if (L->sync_ok) {
        pthread_mutex_lock(&L->mu);
        L->stop = true;
        pthread_cond_broadcast(&L->cv_work);
        pthread_cond_broadcast(&L->cv_free);
        pthread_mutex_unlock(&L->mu);
        join_workers(L);
        pthread_mutex_destroy(&L->mu);
        pthread_mutex_destroy(&L->fault_mu);
        pthread_cond_destroy(&L->cv_work);
        pthread_cond_destroy(&L->cv_ready);
        pthread_cond_destroy(&L->cv_free);
    }
    int nw = L->order_only ? 0 : L->workers > 0 ? L->workers : 1, ns = L->workers > 0 ? L->prefetch : 1;
    for (int i = 0; L->w && i < nw; i++) {
        for (int k = 0; L->w[i].ring && k < ns; k++) {
            struct slot *s = &L->w[i].ring[k];
            if (L->pin) {
                if (s->x) glia_backend_host_free(L->pin, s->x);
                if (s->y) glia_backend_host_free(L->pin, s->y);
            } else {
                free(s->x);
                free(s->y);
            }
        }
        free(L->w[i].ring);
    }
    free(L->w);
    free(L->perm);
    memset(L, 0, sizeof *L);
}

glia_status glia__loader_fault(struct glia__loader *L)
{
    pthread_mutex_lock(&L->fault_mu);
    glia_status st = L->failed ? glia_error(L->ctx, GLIA_EFORMAT, "%s", L->failure) : GLIA_OK;
    pthread_mutex_unlock(&L->fault_mu);
    return st;
}
