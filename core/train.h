/* core/train.h — what core/train.c gives the loop (core/run.c) and glia_model_step (core/step.c): the training step
 * and its parts, the lagged loss, evaluation. Not installed. */
#ifndef GLIA_CORE_TRAIN_H
#define GLIA_CORE_TRAIN_H

#include "act.h"
#include "parts.h"

/* The training loss read without stalling the device. On a backend that downloads without blocking, step k's loss is copied to page-locked memory
 * behind step k's work and read once step k+1 is queued, so the device always has the next step
 * to run while the host waits. Elsewhere the loss is read right after the forward. */
struct glia__lagged_loss {
    float *host;            /* one float from host_alloc; NULL: read synchronously */
    bool pending;           /* a download is in flight */
    int64_t k, nb;          /* its step (0-based in the epoch) and batch size */
    uint64_t ticket;
};

/* A training loss that became known: step k's, of a batch of nb. */
struct glia__loss_read {
    bool have;
    double l;
    int64_t k, nb;
};

/* What a run holds: the loaders, and the host copies of an evaluation batch's logits and labels. */
struct glia__scratch {
    float *logits;
    int32_t *hy;
    struct glia__loader train, test;
    bool have_train, have_test;
    struct glia__resident resident;  /* [data] resident: the training set on the device (its loader orders it) */
};

/* Set-to-none: the next backward writes the parameters' gradients instead of adding to them. */
void glia__grads_unset(struct glia_model *m);
/* The optimizer step on the gradients of the batches since the last one (unscaled, clipped; ddp: averaged over the
 * ranks), at the learning rate of `epoch`. */
glia_status glia__optimizer_step(struct glia_model *m, int epoch);
/* The replicas copy the model's weights at their next forward (they were loaded or broadcast). */
void glia__dp_weights_changed(struct glia_model *m);
/* A training forward of the batch in m->x (n rows), on one device or split over dp's. */
glia_status glia__train_forward(struct glia_model *m, int64_t n);
/* An evaluation forward of the batch in m->act.x up to the logits (glia__set_batch in evaluation mode first): every
 * layer but the loss, which needs no labels then. pos >= 0: a cached decode's, the batch at positions pos.. (every
 * kernel has GLIA_KERNEL_DECODE); -1: an ordinary one. */
glia_status glia__logits_forward(struct glia_model *m, int64_t pos);
/* Its backward (dp: each device's, then the gradients added into this model's). */
glia_status glia__train_backward(struct glia_model *m);
/* A lagged loss for m (q->host stays NULL where the backend runs its work when called: the loss is read at once). */
glia_status glia__lagged_init(struct glia_model *m, struct glia__lagged_loss *q);
void glia__lagged_free(struct glia_model *m, struct glia__lagged_loss *q);
/* Wait for the pending loss, if any, into *got (have: there was one). */
glia_status glia__lagged_drain(struct glia_model *m, struct glia__lagged_loss *q, int epoch, struct glia__loss_read *got);
/* The training step of the batch in m->act.x, m->act.y (nb rows), which glia_model_train and glia_model_step both run:
 * forward, backward and, when `update`, the optimizer step at the learning rate of `epoch` (else the gradients add
 * up: [train] accumulate). With cuda_graph the forward and backward are one pass replayed from a graph. *got gets
 * the loss that became known: with a lag (lag->host set) the previous step's, this one's download being started;
 * else this step's, read after its forward (after the pass with cuda_graph). k labels the step in *got and in the
 * error of a non-finite loss. */
glia_status glia__train_step(struct glia_model *m, int64_t nb, int epoch, int64_t k, bool update,
                             struct glia__lagged_loss *lag, struct glia__loss_read *got);
void glia__scratch_free(struct glia__scratch *s);
/* What a run needs: the loaders, the host copies of logits and labels, and the activations, for training and/or
 * evaluation. */
glia_status glia__scratch_alloc(struct glia_model *m, struct glia__scratch *s, bool training, bool evaluating);
/* The mean loss and the accuracy over the evaluation set. */
glia_status glia__evaluate(struct glia_model *m, struct glia__scratch *s, double *loss, double *acc);

#endif
