/* core/act.h — what core/act.c gives the step, the loop and glia_model_step: the activation buffers sized for a
 * batch, the views of one batch, and the feed of the loader's batches into them. Not installed. */
#ifndef GLIA_CORE_ACT_H
#define GLIA_CORE_ACT_H

#include "loader.h"
#include "parts.h"

/* The data batch's element type: token ids or pixels. */
enum glia_dtype glia__data_dtype(const struct glia_model *m);
/* The loss layer's output gradient written anew (1/accumulate, times the loss scale and the model's share). */
glia_status glia__write_loss_scale(struct glia_model *m);
/* The activation block and the batch buffers, sized for training batches of tb and evaluation batches of eb (0:
 * none), allocated anew only when they grow. */
glia_status glia__need_activations(struct glia_model *m, int64_t tb, int64_t eb);
/* Views of every node's tensors for a batch of n (tokens: padded to len), training's or evaluation's. */
glia_status glia__set_batch(struct glia_model *m, int64_t n, int64_t len, bool train);

/* ---- [data] resident: the training set in device memory ----
 * The uint8 images and int32 labels are copied to the device once, when a run starts; at each epoch's start the
 * loader's order (this rank's share) and its normalization table follow them, and each training batch is made on the
 * device by the backend's batch_u8 with the loader's augmentation: the batches of the loader, bit for bit, with
 * nothing made or copied by the host. Evaluation batches still come from the loader. */
struct glia__resident {
    struct glia_tensor *images;   /* (N, channels, rows, cols) u8 */
    struct glia_tensor *labels;   /* (N) i32 */
    struct glia_tensor *order;    /* (N) i64: the epoch's order, its first loader->n used */
    struct glia_tensor *table;    /* (channels, 256) f32: pixel value -> input */
};
/* Whether the training batches of a run of m are made on the device ([data] resident: on; auto: on a backend that
 * queues its work, with batch_u8 and mem_info, when the images and labels take under resident_share of its free
 * memory); when so, *on and the training set copied into r, which the training loader then borrows
 * (glia__loader_options.resident). The choice is logged once. */
glia_status glia__resident_init(struct glia_model *m, struct glia__resident *r, bool *on);
void glia__resident_free(struct glia__resident *r);

/* ---- feeding batches ----
 * On a backend with its own copy stream (upload), batch k+1 is copied from the loader's
 * (page-locked) buffer into stage_x/stage_y while step k computes: at the start of step k the
 * staged batch k is copied device-to-device into x/y on the compute stream, then batch k+1's
 * upload is started (ordered after that copy, so it cannot overwrite what step k reads), and the
 * loader buffer is given back only once its upload is done. Elsewhere the batch is copied into
 * x/y directly. */
struct glia__feed {
    struct glia__loader *L;
    bool staged;            /* a batch is uploading into stage_x/y (loader buffer still held) */
    struct glia__batch b;   /* its size and length */
    uint64_t ticket;        /* its upload */
    bool train;             /* training batches (else evaluation's): which activations they go into */
};

/* Start feeding an epoch of L (started already), for training or evaluation. */
glia_status glia__feed_start(struct glia_model *m, struct glia__feed *f, struct glia__loader *L, bool train);
/* Put the next batch into m->act.x, m->act.y (views for its size); *more = false at the epoch's end. */
glia_status glia__feed_next(struct glia_model *m, struct glia__feed *f, int64_t *n, bool *more);
/* Give back a batch still held when a loop stops early. */
glia_status glia__feed_stop(struct glia_model *m, struct glia__feed *f);

#endif
