/* core/report.h — what a training run prints and writes (core/report.c): progress lines, the per-epoch
 * lines, the metrics file (JSON lines), per-rank logs (ddp). Not what it measures: train.c computes the figures. */
#ifndef GLIA_CORE_REPORT_H
#define GLIA_CORE_REPORT_H

#include "parts.h"
#include "tensorboard.h"

struct glia__report {
    FILE *out;             /* progress and summaries: the caller's, a rank's log, or both through tee (borrowed) */
    int progress;          /* as glia_train_options.progress, after the ranks' rule: 1 a line redrawn, 0 plain
                              lines, -1 quiet */
    FILE *metrics;         /* rank 0's metrics file, or NULL (owned) */
    struct glia__tb tb;    /* rank 0's TensorBoard event file ([train] tensorboard; tb.f NULL: none) (owned) */
    FILE *rank_log, *tee;  /* [distributed] rank_log, and rank 0's output copied into it (owned) */
    bool line_open;        /* a redrawn progress line waits for its end */
    int64_t shown_k;       /* the epoch's step (0-based) whose progress line was shown last; -1: none */
    double t_start;        /* when the run began to train (the done line's seconds) */
};

/* Where the run's output goes: rank 0 prints as a single process does; the other ranks print nothing, unless
 * [distributed] rank_log is set: then every rank writes plain progress lines to its own file (appended when
 * opt->resume is set), rank 0 to its file and its usual output both. */
glia_status glia__report_open(struct glia__report *r, const struct glia_model *m, const struct glia_train_options *opt);
/* The metrics file (rank 0): path, else [train] metrics (none: no file); appended when resuming. Its missing
 * folders are made; one that cannot be written is an error naming it. */
glia_status glia__report_metrics_open(struct glia__report *r, struct glia_model *m, const char *path, bool append);
/* The TensorBoard event file (rank 0): a new one in [train] tensorboard (none: no file), the folder made with its
 * parents; one that cannot be written is an error naming the key, before the first step. */
glia_status glia__report_tensorboard_open(struct glia__report *r, struct glia_model *m);
/* Closes what report_open, metrics_open and tensorboard_open opened (after report_finish, or instead of it on a failed
 * start). */
void glia__report_close(struct glia__report *r);

/* A resumed run that has nothing left to do: why (m is at the checkpoint's step, rs its position). */
void glia__report_nothing_left(struct glia__report *r, const struct glia_model *m, const char *resume,
                               const struct glia__resume *rs);
void glia__report_resuming(struct glia__report *r, const struct glia_model *m, const char *resume,
                           const struct glia__resume *rs);
void glia__report_epoch_start(struct glia__report *r);
/* A training loss that became known: of batch k (0-based in the epoch; < 0: none yet), and the optimizer step
 * count and learning rate once that batch's update (if it ended one) was taken. */
struct glia__report_loss {
    int64_t k;
    double loss;
    int64_t step;
    double lr;
};

/* The progress line of batch l->k (of steps) with its loss: redrawn in place on a terminal, every [train] log_every
 * steps otherwise; each step's line at most once (a lagged loss comes a step late, and a step before the first
 * loss, k < 0, has none). Every log_every steps the event file gets train/loss and train/lr at l->step. The rate is
 * of the `samples` trained since t0; the ETA is for the `left` steps still to run. */
void glia__report_step(struct glia__report *r, const struct glia_model *m, int epoch, const struct glia__report_loss *l,
                       int64_t steps, int64_t samples, double t0, int64_t left);
/* At an epoch's end: the line of its last loss when that came after the last step (plain lines only: a
 * terminal's redrawn line is replaced by the epoch's), and its train/loss when due. */
void glia__report_epoch_last_step(struct glia__report *r, const struct glia_model *m, int epoch,
                                  const struct glia__report_loss *l, int64_t steps, int64_t samples, double t0);
/* The run stopped within the epoch: at [train] max_steps (said, with the checkpoint to resume from), or for a
 * stop request (interrupted: the caller's error says it). */
void glia__report_stopped(struct glia__report *r, const struct glia_model *m, int epoch, bool interrupted);
/* An epoch's lines, metrics record and event-file scalars (at the step it ended, flushed); pad_frac: tokens, the share
 * of its batches' elements that was padding; evaluated: the epoch has test figures ([train] eval_every), else they
 * are left out. */
void glia__report_epoch(struct glia__report *r, const struct glia_model *m, const struct glia_epoch_result *e,
                        double pad_frac, bool evaluated);
/* The run's end with status st: a redrawn line left open gets its end (the caller's error follows on a line of its
 * own), the metrics and event files are closed (a failed write is the error when st is not), and a finished run
 * (finished: every epoch done) prints its done line, with the last evaluation's figures (evaluated: there was
 * one). Returns st or that error. */
glia_status glia__report_finish(struct glia__report *r, const struct glia_model *m, glia_status st, bool finished,
                                bool evaluated, double test_loss, double test_acc);

#endif
