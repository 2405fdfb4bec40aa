/* core/loader.h — the data loader's private interface (core/loader.c), used by train.c.
 * Not installed. */
#ifndef GLIA_CORE_LOADER_H
#define GLIA_CORE_LOADER_H

#include <pthread.h>
#include "internal.h"

struct glia__loader_options {
    int batch, workers, prefetch;
    bool persistent, drop_last, shuffle, flip;
    int crop_padding;
    struct glia__norm norm;
    uint64_t seed;
    struct glia_backend *pin;      /* batch buffers from its host_alloc (page-locked); NULL: malloc */
    int rank, world;               /* data-parallel: this rank takes its shard of every epoch's order
                                      (glia__shard); world 0 or 1: all samples */
    bool pad;                      /* shards padded to equal size (training); else uneven (evaluation) */
    /* token sets */
    bool group;                    /* group_by_length: batches of similar lengths (glia__group_by_length);
                                      with pad (training) runs of group_batches batches of the whole
                                      job are sorted and the batches shuffled; without (evaluation)
                                      the whole set is sorted */
    int group_batches;
    int pad_multiple;              /* a batch's padded length is a multiple of this (>= 1) */
    bool order_only;               /* images kept on the device ([data] resident): only the order and the batches'
                                      places in it; no buffers, no workers, no samples made */
    struct glia__resident *resident;  /* (borrowed) with order_only: the device copy the batches are made from */
};

/* One batch, valid until glia__loader_release. */
struct glia__batch {
    const void *x;                 /* images: f32 (n, channels, rows, cols) normalized;
                                      tokens: i32 (n, len), each sample's ids then 0s */
    const int32_t *y;              /* labels (n); a language model's (format = token_stream, bytes): the next
                                      tokens (n, len) */
    int64_t n;                     /* samples */
    int64_t len;                   /* tokens: the padded length (the longest sample, rounded up to
                                      pad_multiple); images: cols */
    int64_t first;                 /* where its samples start in the epoch's order (perm) */
};

struct worker;
struct glia__resident;

struct glia__loader {
    struct glia_context *ctx;
    const struct glia__dataset *d;
    int batch, workers, prefetch, crop_padding;
    bool persistent, drop_last, shuffle, flip, order_only;
    uint64_t seed;
    float table[GLIA__MAX_CHANNELS][256]; /* channel, pixel value -> normalized float */
    struct glia__norm norm;               /* the same for float images: (x - mean) / std */
    int64_t *perm;                 /* this epoch's sample order (this rank's share: n of them); a stream's
                                      (d->stream): its windows' starts */
    struct glia__resident *resident;  /* (borrowed) order_only: where the batches are made (core/act.c) */
    int64_t n, n_batches, n_batches_per_epoch, next;
    int epoch;
    int64_t generation;            /* bumped per epoch; workers follow it */
    bool stop, sync_ok;
    double wait_s;                 /* time glia__loader_next waited this epoch */
    struct glia_backend *pin;      /* owner of page-locked batch buffers, or NULL */
    int rank, world;
    bool pad;
    bool group;
    int group_batches, pad_multiple;
    int64_t max_len;               /* tokens: the longest padded length a batch can have */
    int64_t slots, real;           /* tokens: this epoch's batch elements (n * len) and real ids so far */
    struct worker *w;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready, cv_free;
    pthread_mutex_t fault_mu;      /* the first sample that could not be made ([data] format = folder): */
    bool failed;
    char failure[600];             /* what and which file; glia__loader_fault reports it */
};

/* GLIA_EFORMAT with the first sample the loader could not make (a folder image it could not decode), else GLIA_OK. */
glia_status glia__loader_fault(struct glia__loader *L);

/* Image sample idx of epoch `epoch` into x (channels, rows, cols) from its pixels img (channels, rows, cols): a
 * random crop from the image padded by `pad` zero pixels, a random horizontal flip when `flip` (the same for every
 * channel), then table[c * 256 + v] (the normalization); the randomness is drawn from (seed, epoch, idx) as
 * glia/backend.h's data group writes down. The loader's workers and the CPU backend's batch_u8 both call it. */
void glia__augment_sample(const uint8_t *img, int channels, int rows, int cols, const float *table, int pad,
                          bool flip, uint64_t seed, int epoch, int64_t idx, float *x);

/* Out of memory for the batch buffers: GLIA_ENOMEM without a message (the caller knows which key sets
 * their size: glia__loader_bytes). */
glia_status glia__loader_init(struct glia__loader *L, struct glia_context *ctx, const struct glia__dataset *d,
                              const struct glia__loader_options *o);
/* The batches an epoch has on rank `rank` of `world` for n samples (pad: the DistributedSampler padding, every rank
 * ceil(n / world) samples): what glia__loader_init sets n_batches_per_epoch to, and what the lr schedules that
 * need a run's number of optimizer steps count from before any loader exists. */
int64_t glia__loader_batches(int64_t n, int batch, bool drop_last, int world, int rank, bool pad);

/* The bytes of the batch buffers glia__loader_init allocates for d and o, and how many buffers. */
double glia__loader_bytes(const struct glia__dataset *d, const struct glia__loader_options *o, int *buffers);
/* Start an epoch (1-based) at batch first_batch (0 normally; later when resuming): the order
 * is a permutation from seed + epoch when shuffling. */
glia_status glia__loader_start_epoch(struct glia__loader *L, int epoch, int64_t first_batch);
/* The next batch in order, valid until glia__loader_release; false at the end of the epoch. */
bool glia__loader_next(struct glia__loader *L, struct glia__batch *b);
/* Bytes of one sample of batch b's x. */
static inline size_t glia__batch_row_bytes(const struct glia__batch *b, const struct glia__dataset *d)
{
    return 4 * (size_t)(d->tokens ? b->len : (int64_t)d->channels * d->rows * d->cols);
}
void glia__loader_release(struct glia__loader *L);
void glia__loader_free(struct glia__loader *L);
/* Keeps rank's share of order[0..n) in place and returns its length (-1: no memory): every
 * world-th element from position rank; with pad, the order is first extended by repeating its
 * start until its length divides by world, so every rank gets the same count (PyTorch's
 * DistributedSampler with drop_last = False). Pure. */
int64_t glia__shard(int64_t *order, int64_t n, int rank, int world, bool pad);
/* Length-grouped order (group_by_length, a bucketing sampler): order[0..n) is cut into runs of
 * `group` samples, each sorted by decreasing length of d's samples (ties keep their order);
 * then, with shuffle, the whole batches of `batch` consecutive samples are put in an order drawn
 * from seed, a last partial batch staying last. Batches then hold samples of similar lengths
 * while every epoch still sees a new order. GLIA_ENOMEM or GLIA_OK. Pure. */
glia_status glia__group_by_length(int64_t *order, int64_t n, const struct glia__dataset *d, int64_t group,
                                  int64_t batch, bool shuffle, uint64_t seed);


#endif
