/* core/step.c — the training step driven from outside the loop: glia_model_step on a batch the caller holds, and
 * glia_model_profile's timed steps. Not the step itself (core/train.c) nor the loop (core/run.c). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "loader.h"
#include "parts.h"
#include "act.h"
#include "train.h"
#include "roofline.h"

/* ---- glia_model_step: one training step on a batch the caller holds ---- */


/* Whether shape s is a batch m takes (images: (n, channels, rows, cols); tokens (n, len), len up to the longest
 * padded length), as an error line naming both. */
static glia_status step_check_shape(struct glia_model *m, const struct glia_shape *s, const char *fn)
{
    const struct glia__dataset *d = &m->data.train;
    bool fits = s->ndim == (d->tokens ? 2 : 4) && s->dim[0] >= 1 && s->dim[0] <= m->data.batch;
    if (fits && d->tokens) fits = s->dim[1] >= 1 && s->dim[1] <= d->cols;
    if (fits && !d->tokens) fits = s->dim[1] == d->channels && s->dim[2] == d->rows && s->dim[3] == d->cols;
    if (fits) return GLIA_OK;
    char got[160];
    if (s->ndim < 1 || s->ndim > GLIA_MAX_DIMS) snprintf(got, sizeof got, "of %d dimensions", s->ndim);
    else glia_shape_str(s, got, sizeof got);
    if (d->tokens)
        return glia_error(m->ctx, GLIA_EINVAL,
                          "%s: batch shape %s; the model takes token batches n x len, n from 1 to %d "
                          "([data] batch_size), len from 1 to %d", fn, got, m->data.batch, d->cols);
    return glia_error(m->ctx, GLIA_EINVAL, "%s: batch shape %s; the model takes images n x %d x %d x %d, "
                      "n from 1 to %d ([data] batch_size)", fn, got, d->channels, d->rows, d->cols, m->data.batch);
}

/* Whether the n values of v lie in [0, high); else an error naming the first that does not. */
static glia_status step_check_ids(struct glia_model *m, const int32_t *v, int64_t n, int64_t high, const char *what,
                                  const char *bound, const char *fn)
{
    for (int64_t i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= high)
            return glia_error(m->ctx, GLIA_EINVAL, "%s: %s[%lld] is %d, outside 0 .. %lld (%s)", fn, what,
                              (long long)i, (int)v[i], (long long)high - 1, bound);
    return GLIA_OK;
}

/* Whether b (and r) can be used for m: one error line naming what cannot. */
static glia_status step_check(struct glia_model *m, const struct glia_batch *b, const struct glia_step_result *r)
{
    if (!b) return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: the batch is NULL");
    if (b->struct_size < GLIA__END_OF(struct glia_batch, labels))
        return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: batch struct_size %u is too small (set it to "
                          "sizeof(struct glia_batch))", (unsigned)b->struct_size);
    if (r && r->struct_size < GLIA__END_OF(struct glia_step_result, loss))
        return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: result struct_size %u is too small (set it to "
                          "sizeof(struct glia_step_result))", (unsigned)r->struct_size);
    glia_status st = step_check_shape(m, &b->shape, "glia_model_step");
    if (st) return st;
    bool tok = m->data.train.tokens;
    if (tok ? !b->tokens || b->x : !b->x || b->tokens)
        return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: the model reads %s: set %s, and leave %s NULL",
                          tok ? "token ids" : "images", tok ? "tokens" : "x", tok ? "x" : "tokens");
    if (!b->labels) return glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: labels is NULL");
    int64_t n = b->shape.dim[0];
    const struct glia_shape *ls = &m->graph.nodes[m->graph.nodes[m->graph.n_nodes - 1].in[0]].out_shape;
    int64_t classes = ls->dim[ls->ndim - 1];
    struct glia_shape ys = glia__label_shape(m, n, tok ? b->shape.dim[1] : 1);  /* a language model: n x len */
    st = step_check_ids(m, b->labels, glia_shape_numel(&ys), classes, "labels", "the classes of the loss layer's input",
                        "glia_model_step");
    if (!st && tok)
        st = step_check_ids(m, b->tokens, n * b->shape.dim[1], m->data.vocab, "tokens", "[data] vocab", "glia_model_step");
    if (!st && b->struct_size >= GLIA__END_OF(struct glia_batch, epoch) && (b->epoch < 0 || b->epoch > m->trainer.epochs))
        st = glia_error(m->ctx, GLIA_EINVAL, "glia_model_step: epoch %d is outside 1 .. %d ([train] epochs; 0: the "
                        "model's current)", b->epoch, m->trainer.epochs);
    return st;
}

/* What a step needs on each call: the training activations; under ddp, once, the ranks' start (same model and
 * step everywhere, rank 0's weights); under dp, the replicas copy the model's weights anew (they may have been
 * loaded since the last step). */
static glia_status step_ready(struct glia_model *m)
{
    glia_status st = glia__need_activations(m, m->data.batch, 0);
    if (!st && m->dist.ddp && !m->dist.ddp_started) {
        st = glia__ddp_start(m, m->dist.ddp);
        m->dist.ddp_started = !st;
    }
    glia__dp_weights_changed(m);
    return st;
}

/* b's data into m->act.x, m->y (it was checked). */
static glia_status step_feed(struct glia_model *m, const struct glia_batch *b)
{
    int64_t n = b->shape.dim[0];
    glia_status st = glia__set_batch(m, n, m->data.train.tokens ? b->shape.dim[1] : m->data.train.cols, true);
    const void *x = m->data.train.tokens ? (const void *)b->tokens : (const void *)b->x;
    if (!st) st = glia_tensor_from_host(m->act.x, x, glia_tensor_nbytes(m->act.x));
    if (!st) st = glia_tensor_from_host(m->act.y, b->labels, glia_tensor_nbytes(m->act.y));
    return st;
}

glia_status glia_model_step(struct glia_model *m, const struct glia_batch *b, struct glia_step_result *r)
{
    if (!m) return GLIA_EINVAL;
    glia_status st = step_check(m, b, r);
    if (!st) st = step_ready(m);
    if (!st) st = step_feed(m, b);
    if (st) return st;
    int want = b->struct_size >= GLIA__END_OF(struct glia_batch, epoch) ? b->epoch : 0;
    int epoch = m->trainer.epoch = want > 0 ? want : m->trainer.epoch > 0 ? m->trainer.epoch : 1;
    if (m->trainer.micro == 0) glia__grads_unset(m);  /* a new accumulation: what a failed step left is not added to it */
    bool now = b->struct_size >= GLIA__END_OF(struct glia_batch, update_now) && b->update_now;
    bool update = ++m->trainer.micro >= m->trainer.accumulate || now;
    int64_t skipped = m->trainer.scaler.skipped;
    struct glia__loss_read got;
    st = glia__train_step(m, b->shape.dim[0], epoch, m->trainer.step, update, NULL, &got);
    if (update || st) m->trainer.micro = 0;  /* after an error the next call starts a new accumulation */
    if (st || !r) return st;
    bool skip = m->trainer.scaler.skipped > skipped;
    struct glia_step_result v = {r->struct_size, got.l, update && !skip, skip,
                                 update && !skip ? m->trainer.cur_lr : glia__model_lr(m, epoch, m->trainer.step + 1), m->trainer.step,
                                 m->trainer.scaler.scale};
    memcpy(r, &v, r->struct_size < sizeof v ? r->struct_size : sizeof v);  /* what the caller's struct has */
    return GLIA_OK;
}

/* ---- glia_model_logits: the model's output on a batch the caller holds ---- */

/* Checks b for glia_model_logits / _decode (fn) and returns in *want the floats of its logits. */
static glia_status logits_check(struct glia_model *m, const struct glia_batch *b, size_t n, const char *fn,
                                size_t *want)
{
    if (!b || b->struct_size < GLIA__END_OF(struct glia_batch, labels))
        return glia_error(m->ctx, GLIA_EINVAL, "%s: %s", fn, b ? "batch struct_size is too small (set it to "
                          "sizeof(struct glia_batch))" : "the batch is NULL");
    glia_status st = step_check_shape(m, &b->shape, fn);
    bool tok = m->data.train.tokens;
    if (!st && (tok ? !b->tokens || b->x : !b->x || b->tokens))
        st = glia_error(m->ctx, GLIA_EINVAL, "%s: the model reads %s: set %s, and leave %s NULL", fn,
                        tok ? "token ids" : "images", tok ? "tokens" : "x", tok ? "x" : "tokens");
    int64_t rows = b->shape.dim[0], len = tok && !st ? b->shape.dim[1] : 1;
    if (!st && tok) st = step_check_ids(m, b->tokens, rows * len, m->data.vocab, "tokens", "[data] vocab", fn);
    if (st) return st;
    const struct glia__node *lg = &m->graph.nodes[m->graph.nodes[m->graph.n_nodes - 1].in[0]];  /* the loss's input */
    *want = (size_t)(rows * (m->data.lm ? len : 1) * lg->out_shape.dim[lg->out_shape.ndim - 1]);
    if (n < *want) return glia_error(m->ctx, GLIA_EINVAL, "%s: room for %zu floats; the batch's logits are %zu", fn, n,
                                     *want);
    return GLIA_OK;
}

/* The logits of batch b (checked; want floats) into logits: an evaluation forward, a cached decode's at pos >= 0. */
static glia_status logits_run(struct glia_model *m, const struct glia_batch *b, int64_t pos, float *logits,
                              size_t want)
{
    bool tok = m->data.train.tokens;
    int64_t rows = b->shape.dim[0];
    glia_status st = glia__need_activations(m, 0, rows);
    if (!st) st = glia__set_batch(m, rows, tok ? b->shape.dim[1] : m->data.train.cols, false);
    const void *x = tok ? (const void *)b->tokens : (const void *)b->x;
    if (!st) st = glia_tensor_from_host(m->act.x, x, glia_tensor_nbytes(m->act.x));
    if (!st) st = glia__logits_forward(m, pos);
    const struct glia__node *lg = &m->graph.nodes[m->graph.nodes[m->graph.n_nodes - 1].in[0]];
    if (!st) st = glia__tensor_to_host_f32(lg->out, logits, want);  /* half logits widened */
    return st;
}

glia_status glia_model_logits(struct glia_model *m, const struct glia_batch *b, float *logits, size_t n)
{
    if (!m) return GLIA_EINVAL;
    size_t want;
    glia_status st = logits_check(m, b, logits ? n : 0, "glia_model_logits", &want);
    return st ? st : logits_run(m, b, -1, logits, want);
}

/* ---- glia_model_decode: logits a few positions at a time, the layers caching the earlier ones ---- */

/* GLIA_EUNSUPPORTED naming the first layer but the loss whose kernel cannot decode; GLIA_OK when none. */
static glia_status decode_kernels(struct glia_model *m)
{
    for (int i = 0; i < m->graph.n_nodes - 1; i++) {
        const struct glia_layer *l = &m->graph.nodes[i].layer;
        if (!(glia_layer_kernel_flags(l) & GLIA_KERNEL_DECODE))
            return glia_error(m->ctx, GLIA_EUNSUPPORTED, "glia_model_decode: [%s] (%s, impl %s) cannot decode a few "
                              "positions at a time (its kernel has no GLIA_KERNEL_DECODE)", l->name, l->type->name,
                              l->kernel->impl);
    }
    return GLIA_OK;
}

glia_status glia_model_decode(struct glia_model *m, const struct glia_batch *b, int64_t pos, float *logits, size_t n)
{
    const char *fn = "glia_model_decode";
    if (!m) return GLIA_EINVAL;
    if (!m->data.lm)
        return glia_error(m->ctx, GLIA_EINVAL, "%s: the model is not a language model ([data] format = token_stream or "
                          "bytes)", fn);
    size_t want;
    glia_status st = logits_check(m, b, logits ? n : 0, fn, &want);
    if (st) return st;
    struct glia__model_act *a = &m->act;
    int64_t rows = b->shape.dim[0], len = b->shape.dim[1];
    if (pos < 0 || pos > a->decode_next)
        return glia_error(m->ctx, GLIA_EINVAL, "%s: position %lld: the layers hold positions 0 .. %lld (pos 0 starts "
                          "new sequences)", fn, (long long)pos, (long long)a->decode_next - 1);
    if (pos > 0 && rows != a->decode_rows)
        return glia_error(m->ctx, GLIA_EINVAL, "%s: %lld rows; the sequences begun at position 0 are %lld", fn,
                          (long long)rows, (long long)a->decode_rows);
    if (pos + len > m->data.train.cols)
        return glia_error(m->ctx, GLIA_EINVAL, "%s: positions %lld .. %lld; the model takes %lld ([data] seq_len)", fn,
                          (long long)pos, (long long)(pos + len - 1), (long long)m->data.train.cols);
    if ((st = decode_kernels(m))) return st;
    a->decode_next = 0;  /* what a failed call leaves in the caches is nothing to go on from */
    st = logits_run(m, b, pos, logits, want);
    if (st) return st;
    a->decode_next = pos + len;
    a->decode_rows = rows;
    return GLIA_OK;
}

glia_status glia_model_io_info(const struct glia_model *m, struct glia_model_io *io)
{
    if (!m || !io || io->struct_size < GLIA__END_OF(struct glia_model_io, classes)) return GLIA_EINVAL;
    const struct glia_shape *ls = &m->graph.nodes[m->graph.nodes[m->graph.n_nodes - 1].in[0]].out_shape;
    const char *fmt = glia_section_str(glia__config_find(m->cfg, "data"), "format");
    struct glia_model_io v = {io->struct_size, m->data.train.tokens, m->data.lm, fmt && !strcmp(fmt, "bytes"),
                              m->data.train.tokens ? m->data.train.cols : 0, m->data.train.tokens ? m->data.vocab : 0,
                              ls->dim[ls->ndim - 1], m->data.batch};
    memcpy(io, &v, io->struct_size < sizeof v ? io->struct_size : sizeof v);
    return GLIA_OK;
}

glia_status glia_model_profile(struct glia_model *m, int steps, int warmup, FILE *f)
{
    return glia_model_profile_trace(m, steps, warmup, f, NULL);
}

glia_status glia_model_profile_trace(struct glia_model *m, int steps, int warmup, FILE *f, const char *trace_path)
{
    struct glia_profile_options o = {sizeof o, steps, warmup, trace_path, 0, 0};
    return glia_model_profile_with(m, &o, f);
}

/* One row of the profile's table: times per step, share of the step, and the roofline of bytes and flops a step
 * (flops < 0: unknown). */
static void profile_row(FILE *f, const struct glia__peak *pk, const char *name, const char *type, double fwd_s,
                        const char *bwd, double s, double t_all, double bytes, double flops)
{
    char gbs[16] = "-", tfs[16] = "-", share[24] = "-", mb[16] = "-", gfl[16] = "-";
    if (bytes > 0) snprintf(mb, sizeof mb, "%.2f", bytes / 1e6);
    if (bytes > 0 && s > 0) snprintf(gbs, sizeof gbs, "%.1f", bytes / s / 1e9);
    if (flops >= 0) snprintf(gfl, sizeof gfl, "%.3f", flops / 1e9);
    if (flops > 0 && s > 0) snprintf(tfs, sizeof tfs, "%.3f", flops / s / 1e12);
    if (bytes > 0) glia__peak_share(pk, bytes, flops > 0 ? flops : 0, s, share, sizeof share);
    fprintf(f, "%-16s %-22s %11.3f %11s %6.1f%% %10s %9s %8s %8s %11s\n", name, type, 1e3 * fwd_s, bwd, 100 * s / t_all,
            mb, gfl, gbs, tfs, share);
}

/* The table of a profile of `steps` steps over `samples` samples that took t_all seconds, t_input of it the input
 * (made on the device when `resident`). */
static void profile_table(struct glia_model *m, FILE *f, const struct glia__peak *pk, int steps, double samples,
                          double t_all, double t_input, bool resident)
{
    double per = samples / steps, sum_layers = 0, all_bytes = 0, all_flops = 0;
    int64_t batch = (int64_t)(per + 0.5);
    fprintf(f, "%-16s %-22s %11s %11s %7s %10s %9s %8s %8s %11s\n", "layer", "type", "forward ms", "backward ms", "share",
            "MB", "GFLOP", "GB/s", "TFLOP/s", "of peak");
    for (int i = 0; i < m->graph.n_nodes; i++) {
        const struct glia__node *nd = &m->graph.nodes[i];
        struct glia__cost c;
        glia__node_cost(m, i, batch, &c);
        double s = (nd->t_fwd + nd->t_bwd) / steps, bytes = c.fwd_bytes + c.bwd_bytes;
        double flops = c.flops_known ? c.fwd_flops + c.bwd_flops : -1;
        char bwd[16];
        snprintf(bwd, sizeof bwd, "%.3f", 1e3 * nd->t_bwd / steps);
        profile_row(f, pk, nd->layer.name, nd->layer.type->name, nd->t_fwd / steps, bwd, s, t_all / steps, bytes, flops);
        sum_layers += nd->t_fwd + nd->t_bwd;
        all_bytes += bytes;
        all_flops += flops > 0 ? flops : 0;
    }
    double ob = glia__optimizer_bytes(m);
    profile_row(f, pk, "(optimizer)", m->trainer.opt.type->name, m->trainer.t_opt / steps, "", m->trainer.t_opt / steps,
                t_all / steps, ob, -1);
    profile_row(f, pk, "(input)", resident ? "batch made on device" : "loader wait + copy", t_input / steps, "", t_input / steps, t_all / steps, 0, -1);
    double rest = t_all - sum_layers - m->trainer.t_opt - t_input;
    profile_row(f, pk, "(other)", "core", rest / steps, "", rest / steps, t_all / steps, 0, -1);
    profile_row(f, pk, "(step)", "all of the above", t_all / steps, "", t_all / steps, t_all / steps, all_bytes + ob,
                all_flops);
    char bw[32] = "bandwidth unknown", fl[32] = "FLOP/s unknown";
    if (pk->bandwidth > 0) snprintf(bw, sizeof bw, "%.0f GB/s", pk->bandwidth / 1e9);
    if (pk->flops > 0) snprintf(fl, sizeof fl, "%.2f TFLOP/s", pk->flops / 1e12);
    fprintf(f, "peak of %s: %s, %s at %s (%s)\n", m->backend->ops->name, bw, fl,
            glia_precision_name(m->backend->options.precision),
            pk->basis[0] ? pk->basis : "the device tells none: give glia profile --peak-gbs and --peak-tflops");
}

glia_status glia_model_profile_with(struct glia_model *m, const struct glia_profile_options *o, FILE *f)
{
    if (!m) return GLIA_EINVAL;
    if (!o || o->struct_size < GLIA__END_OF(struct glia_profile_options, peak_flops))
        return glia_error(m->ctx, GLIA_EINVAL, "profile: options struct_size %u is too small (set it to "
                          "sizeof(struct glia_profile_options))", o ? (unsigned)o->struct_size : 0u);
    int steps = o->steps, warmup = o->warmup;
    const char *trace_path = o->trace_path;
    if (o->peak_bandwidth < 0 || o->peak_flops < 0 || !isfinite(o->peak_bandwidth) || !isfinite(o->peak_flops))
        return glia_error(m->ctx, GLIA_EINVAL, "profile: peak bandwidth and FLOP/s must be finite and 0 or more (got %g "
                          "and %g)", o->peak_bandwidth, o->peak_flops);
    if (steps < 1 || warmup < 0)
        return glia_error(m->ctx, GLIA_EINVAL, "profile: steps must be 1 or more and warm-up 0 or more (got %d and %d)",
                          steps, warmup);
    struct glia__trace trace = {0};
    FILE *tf = NULL;
    if (trace_path && m->dist.rank == 0) {  /* ddp: rank 0 writes for all; opened first, so a bad path costs no run */
        if (!(tf = fopen(trace_path, "w")))
            return glia_error(m->ctx, GLIA_EIO, "cannot write trace file %s: %s", trace_path, strerror(errno));
        size_t per_step = 2 * (size_t)m->graph.n_nodes + 4;
        size_t want = steps > 0 ? (size_t)steps * per_step : 0;
        if (glia__trace_reserve(&trace, want < ((size_t)1 << 16) ? want : (size_t)1 << 16)) {
            fclose(tf);
            return glia_error(m->ctx, GLIA_ENOMEM, "profile: out of memory for the trace");
        }
    }
    struct glia__scratch s = {0};
    glia_status st = glia__scratch_alloc(m, &s, true, false);
    if (!st && m->dist.ddp) st = glia__ddp_start(m, m->dist.ddp);  /* as training does: same model, rank 0's weights */
    glia__dp_weights_changed(m);
    if (!st) st = glia__loader_start_epoch(&s.train, 1, 0);
    int64_t total = s.have_train ? s.train.n_batches_per_epoch : 0;
    if (!st && warmup + steps > total)
        st = glia_error(m->ctx, GLIA_EINVAL, "profile: %d warm-up + %d steps, but an epoch has %lld batches", warmup, steps,
                        (long long)total);
    double t_all = 0, wait = 0, t_other = 0, samples = 0;
    struct glia__feed fd = {0};
    if (!st) st = glia__feed_start(m, &fd, &s.train, true);
    for (int k = 0; !st && k < warmup + steps; k++) {
        if (k == warmup) {  /* start counting */
            for (int i = 0; i < m->graph.n_nodes; i++) m->graph.nodes[i].t_fwd = m->graph.nodes[i].t_bwd = 0;
            m->trainer.t_opt = 0;
            m->trainer.profiling = true;
            wait = s.train.wait_s;
            t_all = glia__now();
            if (tf) m->trainer.trace = &trace;
        }
        int64_t nb;
        bool more;
        double t0 = glia__now();
        size_t step_ev = trace.n;  /* the step's own event comes first, its end filled in below */
        if (m->trainer.trace) {
            trace.step = k - warmup + 1;
            if (trace.step == 1) trace.t_base = t0;
            glia__trace_add(&trace, GLIA__TRACE_STEP, NULL, t0, t0);
        }
        if ((st = glia__feed_next(m, &fd, &nb, &more)) || !more) {
            trace.n = step_ev;
            break;
        }
        if (m->trainer.profiling) samples += (double)nb;
        if (m->trainer.profiling) {
            glia_backend_sync(m->backend);
            double t1 = glia__now();
            t_other += t1 - t0;
            if (m->trainer.trace) glia__trace_add(&trace, GLIA__TRACE_INPUT, "input", t0, t1);
        }
        if (!st) st = glia__train_forward(m, nb);
        if (m->dist.ddp) glia__ddp_begin(m->dist.ddp, true);
        if (!st) st = glia__train_backward(m);
        if (!st) st = glia__optimizer_step(m, 1);
        if (m->trainer.trace && step_ev < trace.n && trace.ev[step_ev].cat == GLIA__TRACE_STEP) {
            trace.ev[step_ev].t1 = glia__now();
            trace.ev[step_ev].batch = nb;
        }
    }
    glia_status fs = glia__feed_stop(m, &fd);
    if (!st) st = fs;
    if (!st) st = glia_backend_sync(m->backend);
    double t_end = glia__now();
    m->trainer.profiling = false;
    m->trainer.trace = NULL;
    if (!st && trace.lost) st = glia_error(m->ctx, GLIA_ENOMEM, "profile: out of memory recording the trace");
    if (tf) {
        if (!st && glia__trace_write(&trace, tf, m->dist.rank))
            st = glia_error(m->ctx, GLIA_EIO, "writing trace file %s failed", trace_path);
        if (fclose(tf) && !st) st = glia_error(m->ctx, GLIA_EIO, "writing trace file %s failed", trace_path);
        if (st) remove(trace_path);  /* no half-written trace left behind */
    }
    size_t n_events = trace.n;
    glia__trace_free(&trace);
    if (!st) {
        t_all = t_end - t_all;
        wait = s.train.wait_s - wait;
        fprintf(f, "profile: %d training steps of batch %d after %d warm-up steps, %.1f ms a step, %.0f samples/s\n",
                steps, m->data.batch, warmup, 1e3 * t_all / steps, samples / t_all);
        if (m->graph.ckpt_segments > 1)
            fprintf(f, "([graph] checkpoint_segments: a recomputed layer's backward ms includes its forward run again)\n");
        struct glia__peak pk;
        glia__peak_of(m, o->peak_bandwidth, o->peak_flops, &pk);
        profile_table(m, f, &pk, steps, samples, t_all, t_other, s.resident.images != NULL);
        struct glia_memory_stats ms;
        if (glia_backend_memory_stats(m->backend, &ms) == GLIA_OK)
            fprintf(f, "device memory: %.1f MiB in tensors (peak %.1f), %.1f MiB held, %llu driver allocations\n",
                    ms.current / 1048576.0, ms.peak / 1048576.0, ms.reserved / 1048576.0,
                    (unsigned long long)ms.driver_allocs);
        if (tf) fprintf(f, "trace: %zu events in %s\n", n_events, trace_path);
        (void)wait;
    }
    glia__scratch_free(&s);
    return st;
}
