/* core/report.c — a training run's output: progress lines, per-epoch lines, the metrics file, the TensorBoard event
 * file, per-rank logs. Not the run itself (core/train.c), which hands over the figures and prints nothing, nor the
 * event file's encoding (core/tensorboard.c). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include "report.h"

/* rank 0 with a rank log: its output goes to the caller's stream and the log both */
static ssize_t tee_write(void *cookie, const char *buf, size_t n)
{
    FILE **f = cookie;
    fwrite(buf, 1, n, f[0]);
    fwrite(buf, 1, n, f[1]);
    return (ssize_t)n;
}

static int tee_close(void *cookie)
{
    free(cookie);
    return 0;
}

glia_status glia__report_open(struct glia__report *r, const struct glia_model *m, const struct glia_train_options *opt)
{
    *r = (struct glia__report){.out = opt->out ? opt->out : stdout, .progress = opt->progress, .shown_k = -1};
    if (!m->dist.rank_log || opt->progress < 0) {
        if (m->dist.rank != 0) r->progress = -1;
        return GLIA_OK;
    }
    if (!(r->rank_log = fopen(m->dist.rank_log, opt->resume ? "a" : "w")))
        return glia_error(m->ctx, GLIA_EIO, "cannot write the rank log %s: %s", m->dist.rank_log, strerror(errno));
    r->progress = 0;
    r->out = r->rank_log;
    FILE **pair = m->dist.rank == 0 ? malloc(2 * sizeof *pair) : NULL;
    if (pair) {
        pair[0] = opt->out ? opt->out : stdout;
        pair[1] = r->rank_log;
        r->tee = fopencookie(pair, "w", (cookie_io_functions_t){NULL, tee_write, NULL, tee_close});
        if (r->tee) {
            setvbuf(r->tee, NULL, _IOLBF, 0);
            r->out = r->tee;
        } else {
            free(pair);
        }
    }
    return GLIA_OK;
}

glia_status glia__report_metrics_open(struct glia__report *r, struct glia_model *m, const char *path, bool append)
{
    if (m->dist.rank != 0) return GLIA_OK;  /* ddp: rank 0 writes for all */
    struct glia_section *t = glia__config_find(m->cfg, "train");
    char *p = path ? glia__strdup(path) : glia__config_path(t, "metrics", glia_section_str(t, "metrics"));
    if (!p) return GLIA_OK;
    glia__mkdir_parents(p);  /* what fails is said by fopen */
    glia_status st = GLIA_OK;
    if (!(r->metrics = fopen(p, append ? "a" : "w")))
        st = glia_error(m->ctx, GLIA_EIO, "cannot write metrics file %s: %s", p, strerror(errno));
    free(p);
    return st;
}

glia_status glia__report_tensorboard_open(struct glia__report *r, struct glia_model *m)
{
    struct glia_section *t = glia__config_find(m->cfg, "train");
    const char *v = glia_section_str(t, "tensorboard");
    if (!v || m->dist.rank != 0) return GLIA_OK;  /* ddp: rank 0 writes for all */
    char *dir = glia__config_path(t, "tensorboard", v);
    if (!dir) return GLIA_ENOMEM;
    int err = glia__tb_open(&r->tb, dir);
    glia_status st = GLIA_OK;
    if (err)
        st = glia_section_error(t, "tensorboard", GLIA_EIO, "cannot write the event file %s: %s",
                                r->tb.path ? r->tb.path : dir, strerror(err));
    free(dir);
    if (err) glia__tb_free(&r->tb);
    return st;
}

void glia__report_close(struct glia__report *r)
{
    glia__tb_free(&r->tb);
    if (r->metrics) fclose(r->metrics);
    if (r->tee) fclose(r->tee);
    if (r->rank_log) fclose(r->rank_log);
    r->metrics = r->tee = r->rank_log = NULL;
}

void glia__report_nothing_left(struct glia__report *r, const struct glia_model *m, const char *resume,
                               const struct glia__resume *rs)
{
    if (r->progress < 0) return;
    bool steps = m->trainer.max_steps > 0 && m->trainer.step >= m->trainer.max_steps;
    fprintf(r->out, "nothing to do: %s is at step %lld, ", resume, (long long)m->trainer.step);
    if (steps) fprintf(r->out, "[train] max_steps = %lld", (long long)m->trainer.max_steps);
    else if (rs->batch == 0) fprintf(r->out, "after epoch %d, and [train] epochs = %d", rs->epoch - 1, m->trainer.epochs);
    else fprintf(r->out, "in epoch %d, past [train] epochs = %d", rs->epoch, m->trainer.epochs);
    fprintf(r->out, " (raise it to train on)\n");
}

void glia__report_resuming(struct glia__report *r, const struct glia_model *m, const char *resume,
                           const struct glia__resume *rs)
{
    if (r->progress >= 0)
        fprintf(r->out, "resuming from %s: epoch %d, batch %lld, step %lld\n", resume, rs->epoch, (long long)rs->batch,
                (long long)m->trainer.step);
}

void glia__report_epoch_start(struct glia__report *r) { r->shown_k = -1; }

static void fmt_time(double s, char *buf, size_t n)
{
    long t = (long)(s + 0.5);
    snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void progress_line(const struct glia__report *r, const struct glia_model *m, int epoch, int64_t k,
                          int64_t steps, double l, int64_t samples, double t0, int64_t left)
{
    if (r->progress < 0 || (r->progress == 0 && (k + 1) % m->trainer.log_every != 0)) return;
    double el = glia__now() - t0, rate = (double)samples / (el > 0 ? el : 1e-9);
    char eta[32];
    fmt_time((double)left * m->data.batch / rate, eta, sizeof eta);
    if (r->progress > 0)
        fprintf(r->out, "\repoch %d/%d  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %s   ", epoch, m->trainer.epochs,
                (long long)k + 1, (long long)steps, l, rate, eta);
    else
        fprintf(r->out, "epoch %d/%d step %lld/%lld loss %.4f samples/s %.0f eta %s\n", epoch, m->trainer.epochs,
                (long long)k + 1, (long long)steps, l, rate, eta);
    fflush(r->out);
}

/* The event file's scalars of a loss, on the steps whose plain progress line is due (whatever the output is). */
static void step_scalars(struct glia__report *r, const struct glia_model *m, const struct glia__report_loss *l)
{
    if ((l->k + 1) % m->trainer.log_every != 0) return;
    glia__tb_scalar(&r->tb, "train/loss", l->step, l->loss);
    glia__tb_scalar(&r->tb, "train/lr", l->step, l->lr);
}

void glia__report_step(struct glia__report *r, const struct glia_model *m, int epoch, const struct glia__report_loss *l,
                       int64_t steps, int64_t samples, double t0, int64_t left)
{
    if (l->k <= r->shown_k) return;
    progress_line(r, m, epoch, l->k, steps, l->loss, samples, t0, left);
    step_scalars(r, m, l);
    r->shown_k = l->k;
    r->line_open = r->progress > 0;
}

void glia__report_epoch_last_step(struct glia__report *r, const struct glia_model *m, int epoch,
                                  const struct glia__report_loss *l, int64_t steps, int64_t samples, double t0)
{
    if (l->k <= r->shown_k) return;
    if (r->progress == 0) progress_line(r, m, epoch, l->k, steps, l->loss, samples, t0, 0);
    step_scalars(r, m, l);
}

/* The end of a redrawn line, before a line of another kind. */
static void end_line(struct glia__report *r)
{
    if (r->progress > 0) fprintf(r->out, "\r\033[K");
    r->line_open = false;
}

void glia__report_stopped(struct glia__report *r, const struct glia_model *m, int epoch, bool interrupted)
{
    end_line(r);
    if (interrupted || r->progress < 0) return;
    if (m->trainer.checkpoint_dir)
        fprintf(r->out, "stopped at max_steps = %lld (epoch %d); continue with --resume %s/" GLIA__STEP_CKPT "\n",
                (long long)m->trainer.max_steps, epoch, m->trainer.checkpoint_dir, (long long)m->trainer.step);
    else
        fprintf(r->out, "stopped at max_steps = %lld (epoch %d); nothing was saved ([train] checkpoint_dir is not set)\n",
                (long long)m->trainer.max_steps, epoch);
}

static void epoch_lines(struct glia__report *r, const struct glia_model *m, const struct glia_epoch_result *e,
                        double pad_frac, bool evaluated)
{
    FILE *out = r->out;
    if (!evaluated)  /* [train] eval_every: no test figures this epoch */
        fprintf(out, "epoch %d/%d train_loss %.4f lr %.4g samples/s %.0f seconds %.2f\n", e->epoch, m->trainer.epochs,
                e->train_loss, e->lr, e->samples_per_s, e->seconds);
    else if (m->data.lm)  /* a language model: the loss per token and its perplexity; no accuracy */
        fprintf(out, "epoch %d/%d train_loss %.4f val_loss %.4f perplexity %.4g lr %.4g samples/s %.0f seconds %.2f\n",
                e->epoch, m->trainer.epochs, e->train_loss, e->test_loss, exp(e->test_loss), e->lr, e->samples_per_s,
                e->seconds);
    else
        fprintf(out, "epoch %d/%d train_loss %.4f test_loss %.4f test_accuracy %.4f lr %.4g samples/s %.0f seconds %.2f\n",
                e->epoch, m->trainer.epochs, e->train_loss, e->test_loss, e->test_accuracy, e->lr, e->samples_per_s,
                e->seconds);
    if (m->precision == GLIA_PRECISION_FP16)
        fprintf(out, "epoch %d/%d loss_scale %g skipped_steps %lld\n", e->epoch, m->trainer.epochs, e->loss_scale,
                (long long)e->skipped_steps);
    if (m->data.train.tokens && !m->data.lm)
        fprintf(out, "epoch %d/%d padding %.1f%% of the batches' tokens\n", e->epoch, m->trainer.epochs, 100 * pad_frac);
    if (m->dist.ddp)
        fprintf(out, "epoch %d/%d ddp world %d comm_wait_s %.3f step_ms min %.2f max %.2f\n", e->epoch, m->trainer.epochs,
                e->world, e->comm_wait_s, 1e3 * e->step_s_min, 1e3 * e->step_s_max);
}

/* One JSON object per epoch (README, Command line: --metrics). */
static void metrics_record(FILE *f, const struct glia_model *m, const struct glia_epoch_result *e, double pad_frac,
                           bool evaluated)
{
    fprintf(f, "{\"epoch\": %d, \"step\": %lld, \"lr\": %.9g, \"train_loss\": %.9g", e->epoch,
            (long long)m->trainer.step, e->lr, e->train_loss);
    if (evaluated) fprintf(f, ", \"test_loss\": %.9g", e->test_loss);  /* [train] eval_every: absent when not */
    if (evaluated && m->data.lm)  /* a language model counts no accuracy: its loss per token and perplexity instead */
        fprintf(f, ", \"val_loss\": %.9g, \"perplexity\": %.9g", e->test_loss, exp(e->test_loss));
    else if (evaluated)
        fprintf(f, ", \"test_accuracy\": %.9g", e->test_accuracy);
    fprintf(f, ", \"samples_per_s\": %.6g, \"seconds\": %.6g, \"data_wait_s\": %.6g", e->samples_per_s, e->seconds,
            e->data_wait_s);
    if (m->data.train.tokens && !m->data.lm) fprintf(f, ", \"pad_frac\": %.6g", pad_frac);
    if (m->precision == GLIA_PRECISION_FP16)
        fprintf(f, ", \"loss_scale\": %.9g, \"skipped_steps\": %lld", e->loss_scale, (long long)e->skipped_steps);
    if (m->dist.ddp)
        fprintf(f, ", \"world\": %d, \"comm_wait_s\": %.6g, \"step_s_min\": %.6g, \"step_s_max\": %.6g", e->world,
                e->comm_wait_s, e->step_s_min, e->step_s_max);
    struct glia_memory_stats ms;  /* a device backend: the most memory its tensors held so far */
    if (glia_backend_memory_stats(m->backend, &ms) == GLIA_OK) fprintf(f, ", \"device_peak_mb\": %.6g", ms.peak / 1048576.0);
    fprintf(f, "}\n");
    fflush(f);
}

/* An epoch's scalars in the event file, at the step it ended, as the epoch line reports them; flushed, so that a
 * running TensorBoard shows the epoch. */
static void epoch_scalars(struct glia__tb *tb, const struct glia_model *m, const struct glia_epoch_result *e,
                          bool evaluated)
{
    int64_t step = m->trainer.step;
    glia__tb_scalar(tb, "epoch/train_loss", step, e->train_loss);
    if (!evaluated) {  /* [train] eval_every: no test figures this epoch */
    } else if (m->data.lm) {  /* a language model: the loss per token and its perplexity; no accuracy */
        glia__tb_scalar(tb, "epoch/val_loss", step, e->test_loss);
        glia__tb_scalar(tb, "epoch/perplexity", step, exp(e->test_loss));
    } else {
        glia__tb_scalar(tb, "epoch/test_loss", step, e->test_loss);
        glia__tb_scalar(tb, "epoch/test_accuracy", step, e->test_accuracy);
    }
    glia__tb_scalar(tb, "epoch/samples_per_s", step, e->samples_per_s);
    glia__tb_scalar(tb, "epoch/data_wait_s", step, e->data_wait_s);
    glia__tb_flush(tb);
}

void glia__report_epoch(struct glia__report *r, const struct glia_model *m, const struct glia_epoch_result *e,
                        double pad_frac, bool evaluated)
{
    end_line(r);
    if (r->progress >= 0) epoch_lines(r, m, e, pad_frac, evaluated);
    if (r->metrics) metrics_record(r->metrics, m, e, pad_frac, evaluated);
    epoch_scalars(&r->tb, m, e, evaluated);
}

/* The event file's end: closed; a failed write, or close, is the run's error when it has none. */
static glia_status tensorboard_finish(struct glia__report *r, const struct glia_model *m, glia_status st)
{
    int err = glia__tb_close(&r->tb);
    if (err && !st)
        st = glia_error(m->ctx, GLIA_EIO, "writing the TensorBoard event file %s failed: %s", r->tb.path,
                        strerror(err));
    glia__tb_free(&r->tb);
    return st;
}

glia_status glia__report_finish(struct glia__report *r, const struct glia_model *m, glia_status st, bool finished,
                                bool evaluated, double test_loss, double test_acc)
{
    if (st && r->line_open) {  /* the caller's error message goes on a line of its own */
        fputc('\n', r->out);
        fflush(r->out);
    }
    r->line_open = false;
    FILE *f = r->metrics;
    r->metrics = NULL;
    if (f && fclose(f) && !st) st = glia_error(m->ctx, GLIA_EIO, "writing the metrics file failed");
    st = tensorboard_finish(r, m, st);
    if (!st && finished && r->progress >= 0 && !evaluated)  /* [train] eval_every = 0 */
        fprintf(r->out, "done: %d epochs, %lld steps, not evaluated, %.1f s\n", m->trainer.epochs,
                (long long)m->trainer.step, glia__now() - r->t_start);
    else if (!st && finished && r->progress >= 0 && m->data.lm)
        fprintf(r->out, "done: %d epochs, %lld steps, val_loss %.4f, perplexity %.4g, %.1f s\n", m->trainer.epochs,
                (long long)m->trainer.step, test_loss, exp(test_loss), glia__now() - r->t_start);
    else if (!st && finished && r->progress >= 0)
        fprintf(r->out, "done: %d epochs, %lld steps, test_loss %.4f, test_accuracy %.4f, %.1f s\n", m->trainer.epochs,
                (long long)m->trainer.step, test_loss, test_acc, glia__now() - r->t_start);
    return st;
}
