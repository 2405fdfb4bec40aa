/* core/scaler.c — fp16's dynamic loss scaler on the host: its rule, and with [runtime] cuda_graph the bookkeeping of
 * the scaler kept on the device (each update's outcome downloaded, then read into the trainer). Not the unscaling and
 * clipping of a step (core/train.c), nor the device's side (the backend's scaler_step). */
#include <math.h>
#include "parts.h"

bool glia__scaler_update(struct glia__scaler *s, double sumsq)
{
    return glia__scaler_update_every(s, sumsq, GLIA__SCALER_GROWTH);
}

bool glia__scaler_update_every(struct glia__scaler *s, double sumsq, int64_t growth)
{
    if (!isfinite(sumsq)) {
        s->skipped++;
        s->clean = 0;
        s->scale *= 0.5;
        return false;
    }
    if (++s->clean >= growth) {
        s->clean = 0;
        s->scale *= 2.0;
    }
    return true;
}

/* fp16's loss scaler on the device: the oldest update whose outcome is unread, read into the trainer once its
 * download is done (the step count, the learning rate of a step taken, the scaler), as glia__optimizer_step would
 * have left them. */
static glia_status scaler_read(struct glia_model *m)
{
    struct glia__model_trainer *t = &m->trainer;
    int i = t->scaler_first;
    glia_status st = glia_backend_wait_copy(m->backend, t->scaler_ticket[i], true);
    t->scaler_first = (i + 1) % GLIA__SCALER_ROWS;
    t->scaler_pending--;
    if (st) return st;
    const struct glia_loss_scaler *d = &t->scaler_host[i];
    if (d->step != t->step + !d->found_inf)
        return glia_error(m->ctx, GLIA_EINTERNAL, "fp16: the loss scaler on the device is at step %lld, the host at %lld",
                          (long long)d->step, (long long)t->step);
    if (d->found_inf)
        glia_log(m->ctx, GLIA_LOG_DEBUG, "fp16: non-finite gradients after step %lld; loss scale now %g",
                 (long long)t->step, d->scale);
    else {
        t->cur_lr = glia__model_lr(m, t->scaler_epoch[i], d->step);
        t->graph_updates++;
    }
    t->step = d->step;
    t->scaler = (struct glia__scaler){d->scale, d->clean, d->skipped};
    return GLIA_OK;
}

glia_status glia__scaler_drain(struct glia_model *m, int keep)
{
    glia_status st = GLIA_OK;
    while (!st && m->trainer.scaler_pending > keep) st = scaler_read(m);
    return st;
}

glia_status glia__scaler_settle(struct glia_model *m) { return glia__scaler_drain(m, 0); }

glia_status glia__steps_settle(struct glia_model *m)
{
    const struct glia__model_trainer *t = &m->trainer;
    int64_t lo = t->step, hi = t->step + t->scaler_pending, ce = t->checkpoint_every;
    bool due = t->stop_requested || (t->max_steps > 0 && hi >= t->max_steps) ||
               (ce > 0 && (lo % ce == 0 || hi / ce != lo / ce));  /* a step count it may be is a checkpoint's */
    return t->scaler_pending && due ? glia__scaler_settle(m) : GLIA_OK;
}

glia_status glia__scaler_outcome(struct glia_model *m, int epoch)
{
    struct glia__model_trainer *t = &m->trainer;
    int i = (t->scaler_first + t->scaler_pending) % GLIA__SCALER_ROWS;
    glia_status st = glia_backend_download(m->backend, &t->scaler_host[i], t->scaler_dev->data,
                                           sizeof(struct glia_loss_scaler), &t->scaler_ticket[i]);
    if (st) return st;
    t->scaler_epoch[i] = epoch;
    t->scaler_pending++;
    return GLIA_OK;
}
