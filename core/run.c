/* core/run.c — glia_model_train: the loop of epochs as feed -> step -> maybe checkpoint -> report, resuming, the
 * ranks' agreement on stopping and on each epoch's figures. Not the step itself (core/train.c) nor what a run prints
 * (core/report.c). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "loader.h"
#include "parts.h"
#include "act.h"
#include "report.h"
#include "train.h"

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
    struct glia__scratch s;
    struct glia__resume rs;      /* where the run starts */
    struct glia__lagged_loss lag;
    int64_t steps;               /* batches per epoch */
    double test_loss, test_acc;  /* of the last evaluation */
    bool evaluated;              /* there was one ([train] eval_every) */
    bool done;                   /* a resume that leaves nothing to do: the run ends before it starts */
    bool stopped;                /* within an epoch, at [train] max_steps or ... */
    bool interrupted;            /* ... by glia_model_request_stop */
};

/* Where a batch's step count and learning rate are: as the host knew them after its step, or, when its fp16 update's
 * outcome was still on its way from the device, in row `row` of the scaler's copies (-1: not). */
struct step_at {
    int64_t step;
    double lr;
    int row;
};

/* An epoch's running figures. */
struct epoch_run {
    int n;                       /* from 1 */
    double t0, loss_sum;         /* when it began; its training loss sum (with a resumed part's) */
    int64_t k0;                  /* its first batch (a resume's position, else 0) */
    int64_t samples, samples0;   /* samples trained in it, and those a resume began with */
    struct glia__report_loss l;  /* the last loss read, of batch l.k (a lagged loss is a step late; -1: none yet) */
    struct step_at at[2];        /* where the step count and lr of batch k's loss come from, at [k % 2] */
};

/* After batch k's training step: the step count and learning rate its loss will be reported at. A lagged loss
 * arrives with the next batch's step, when the count may have moved on, so the last two batches' are kept. With
 * fp16's loss scaler on the device (cuda_graph) the outcome of batch k's update may be unread still (the only one
 * pending then): its row of the scaler's copies will hold the device's step count, read before the loss arrives
 * and not overwritten before (the next update takes the next row). */
static void epoch_mark_step(const struct glia_model *m, struct epoch_run *e, int64_t k)
{
    const struct glia__model_trainer *t = &m->trainer;
    int row = t->scaler_pending ? (t->scaler_first + t->scaler_pending - 1) % GLIA__SCALER_ROWS : -1;
    e->at[k & 1] = (struct step_at){t->step, t->cur_lr, row};
}

static void epoch_add_loss(const struct glia_model *m, struct epoch_run *e, const struct glia__loss_read *got)
{
    if (!got->have) return;
    const struct step_at *a = &e->at[got->k & 1];
    e->loss_sum += got->l * (double)got->nb;
    e->l = (struct glia__report_loss){got->k, got->l, a->step, a->lr};
    if (a->row >= 0) {  /* the update's outcome, read by now, as the trainer took it: a skipped one changed nothing */
        const struct glia_loss_scaler *d = &m->trainer.scaler_host[a->row];
        e->l.step = d->step;
        if (!d->found_inf) e->l.lr = glia__model_lr(m, m->trainer.scaler_epoch[a->row], d->step);
    }
}

/* The set-up: output, loaders and activations, a resume's state, ddp's start (same model and step everywhere, rank
 * 0's weights), the checkpoint folder, the metrics file and the event file. Releases what it took when it fails and
 * when a resume leaves nothing to do (t->done). */
static glia_status run_begin(struct glia_model *m, const struct glia_train_options *opt, struct run *t)
{
    *t = (struct run){.rs = {1, 0, 0, 0}};
    glia_status st = glia__report_open(&t->rep, m, opt);
    if (st) return st;
    st = glia__scratch_alloc(m, &t->s, true, true);
    if (!st && opt->resume) st = glia__checkpoint_load(m, opt->resume, true, &t->rs);
    if ((t->done = !st && opt->resume && nothing_left(m, &t->rs)))
        glia__report_nothing_left(&t->rep, m, opt->resume, &t->rs);
    if (!st && opt->resume && !t->done) {  /* what derives from the loaded state: the data order, the loss scale */
        t->s.train.seed = t->s.test.seed = m->seed;
        st = glia__write_loss_scale(m);
    }
    /* also when there is nothing to do, so that a rank resumed from another step fails with the others instead of
     * leaving them waiting */
    if (!st && m->dist.ddp) st = glia__ddp_start(m, m->dist.ddp);
    if (m->dist.ddp) m->dist.ddp_started = !st;
    glia__dp_weights_changed(m);
    if (!st && !t->done) st = checkpoint_dir_ready(m);
    if (!st && !t->done) st = glia__report_metrics_open(&t->rep, m, opt->metrics_path, opt->resume != NULL);
    if (!st && !t->done) st = glia__report_tensorboard_open(&t->rep, m);
    if (!st && !t->done) st = glia__lagged_init(m, &t->lag);
    if (st || t->done) {
        glia__scratch_free(&t->s);
        glia__report_close(&t->rep);
        return st;
    }
    if (opt->resume) glia__report_resuming(&t->rep, m, opt->resume, &t->rs);
    glia__grads_unset(m);  /* what glia_model_step accumulated without an update is not this run's */
    m->trainer.micro = 0;
    t->steps = t->s.train.n_batches_per_epoch;
    t->rep.t_start = glia__now();
    return GLIA_OK;
}

/* Epoch `epoch` begins: its figures (a resume's part of it included), its loader and feed. */
static glia_status epoch_begin(struct glia_model *m, struct run *t, int epoch, struct epoch_run *e, struct glia__feed *f)
{
    bool resumed = epoch == t->rs.epoch && t->rs.batch > 0;
    *e = (struct epoch_run){.n = epoch, .t0 = glia__now(), .loss_sum = resumed ? t->rs.loss_sum : 0,
                        .k0 = resumed ? t->rs.batch : 0, .samples = resumed ? t->rs.samples : 0, .l.k = -1};
    e->samples0 = e->samples;
    m->trainer.epoch = epoch;
    glia__report_epoch_start(&t->rep);
    glia_status st = glia__loader_start_epoch(&t->s.train, epoch, e->k0);
    return st ? st : glia__feed_start(m, f, &t->s.train, true);
}

/* After the optimizer step that batch k (0-based in e) ended: whether the run stops there ([train] max_steps, a
 * stop request the ranks agree on), and the step's checkpoint when one is due. */
static glia_status after_update(struct glia_model *m, struct run *t, struct epoch_run *e, int64_t k)
{
    glia_status st = glia__steps_settle(m);  /* fp16's scaler in a CUDA graph: the step count, exact where it matters */
    if (st) return st;
    if (m->trainer.max_steps > 0 && m->trainer.step >= m->trainer.max_steps) t->stopped = true;
    else if (stop_agreed(m, &st)) t->stopped = t->interrupted = true;
    bool save = (m->trainer.checkpoint_every > 0 && m->trainer.step % m->trainer.checkpoint_every == 0) || t->stopped;
    if (st || !save) return st;
    struct glia__loss_read got;
    if ((st = glia__lagged_drain(m, &t->lag, e->n, &got))) return st;  /* the checkpoint holds every loss */
    epoch_add_loss(m, e, &got);
    char name[64];
    snprintf(name, sizeof name, GLIA__STEP_CKPT, (long long)m->trainer.step);
    return save_checkpoint(m, name, e->n, k + 1, e->loss_sum, e->samples, true);
}

/* The end of epoch e, whose batches ended with status st: the feed stopped and the last loss read; then, unless the
 * run stopped within the epoch (it is not finished, so it is not evaluated), the ranks' figures, the evaluation,
 * the epoch's result (into results) and its report. */
static glia_status epoch_end(struct glia_model *m, struct run *t, struct epoch_run *e, struct glia__feed *f, glia_status st,
                             struct glia_epoch_result *results, int max_results)
{
    glia_status fs = glia__feed_stop(m, f);
    struct glia__loss_read got = {0};
    if (!st) st = fs;
    if (!st) st = glia__lagged_drain(m, &t->lag, e->n, &got);  /* the epoch's last loss */
    epoch_add_loss(m, e, &got);
    t->lag.pending = false;
    if (st || t->stopped) {
        if (!st) glia__report_stopped(&t->rep, m, e->n, t->interrupted);
        return st;
    }
    glia__report_epoch_last_step(&t->rep, m, e->n, &e->l, t->steps, e->samples - e->samples0, e->t0);
    double train_s = glia__now() - e->t0, wait_s = t->s.train.wait_s;
    struct dist_epoch de;
    st = dist_epoch(m, &t->s.train, e->loss_sum, e->samples, e->samples - e->samples0, train_s, t->steps - e->k0, &de);
    int every = m->trainer.eval_every;
    bool eval = every > 0 && (e->n % every == 0 || e->n == m->trainer.epochs);
    if (!st && eval) st = glia__evaluate(m, &t->s, &t->test_loss, &t->test_acc);
    if (st) return st;
    t->evaluated |= eval;
    struct glia_epoch_result r = {sizeof r, e->n, de.samples ? de.loss_sum / de.samples : 0,
                                  eval ? t->test_loss : NAN, eval ? t->test_acc : NAN,
                                  de.run_samples / (train_s > 0 ? train_s : 1e-9), glia__now() - e->t0, m->trainer.cur_lr, wait_s,
                                  m->trainer.scaler.skipped, m->trainer.scaler.scale, m->dist.world, de.comm_wait_s, de.step_s_min,
                                  de.step_s_max};
    if (results && e->n <= max_results) {  /* the caller's part of r, at the caller's stride */
        size_t stride = m->trainer.results_size, n = stride < sizeof r ? stride : sizeof r;
        r.struct_size = (uint32_t)n;
        memcpy((char *)results + (size_t)(e->n - 1) * stride, &r, n);
    }
    glia__report_epoch(&t->rep, m, &r, de.pad_frac, eval);
    return GLIA_OK;
}

/* [runtime] cuda_graph after a run: how many passes were replayed and optimizer steps taken inside them or as they
 * came (a log line), and the graphs freed, so that what
 * they held goes back to the allocator. */
static void graphs_done(struct glia_model *m)
{
    int ready = 0;
    for (int i = 0; i < m->trainer.n_graphs; i++) ready += m->trainer.graphs[i].state == GLIA__GRAPH_READY;
    glia_log(m->ctx, GLIA_LOG_INFO, "cuda_graph: %lld training passes replayed from %d graph%s; optimizer steps: %lld inside "
             "them, %lld outside", (long long)m->trainer.graph_replays, ready, ready == 1 ? "" : "s",
             (long long)m->trainer.graph_updates, (long long)m->trainer.opt_outside);
    glia__model_free_graphs(m);
}

/* The run's end with status st: a stop request's error, the final checkpoint, the report's end, what it held. */
static glia_status run_end(struct glia_model *m, struct run *t, glia_status st)
{
    if (t->lag.pending) glia_backend_sync(m->backend);  /* stopped by an error: let the download land */
    glia__lagged_free(m, &t->lag);
    glia_status ss = glia__scaler_settle(m);  /* stopped by an error: the updates' outcomes, so the model is exact */
    if (!st) st = ss;
    if (!st && t->interrupted && m->trainer.checkpoint_dir)
        st = glia_error(m->ctx, GLIA_EINTERRUPTED, "interrupted at step %lld: continue with --resume %s/" GLIA__STEP_CKPT,
                        (long long)m->trainer.step, m->trainer.checkpoint_dir, (long long)m->trainer.step);
    else if (!st && t->interrupted)
        st = glia_error(m->ctx, GLIA_EINTERRUPTED,
                        "interrupted at step %lld: nothing was saved ([train] checkpoint_dir is not set)", (long long)m->trainer.step);
    if (!st && !t->stopped) st = save_checkpoint(m, "final.ckpt", m->trainer.epochs + 1, 0, 0, 0, false);
    st = glia__report_finish(&t->rep, m, st, !t->stopped, t->evaluated, t->test_loss, t->test_acc);
    if (m->trainer.cuda_graph) graphs_done(m);
    glia__scratch_free(&t->s);
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
        struct glia__feed f = {0};
        int64_t nb;
        bool more = true;
        st = epoch_begin(m, &t, epoch, &e, &f);
        for (int64_t k = e.k0; !st && !(st = glia__feed_next(m, &f, &nb, &more)) && more; k++) {
            bool update = (k + 1) % m->trainer.accumulate == 0 || k == t.steps - 1;  /* an epoch ends with an update */
            struct glia__loss_read got;
            st = glia__train_step(m, nb, epoch, k, update, &t.lag, &got);
            epoch_mark_step(m, &e, k);
            epoch_add_loss(m, &e, &got);
            e.samples += nb;
            if (!st && update) st = after_update(m, &t, &e, k);
            if (st || t.stopped) break;
            glia__report_step(&t.rep, m, epoch, &e.l, t.steps, e.samples - e.samples0, e.t0, t.steps - k - 1);
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
