/* glia/model.h — the embedding API: load a model INI, check it, train it (or step it batch by batch)
 * and evaluate it. Not the CLI: `glia` is a thin program over these functions. */
#ifndef GLIA_MODEL_H
#define GLIA_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "status.h"
#include "log.h"
#include "config.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct glia_config;
struct glia_model;

/* Read and parse an INI file (syntax only). *out is (owned). */
glia_status glia_config_load(struct glia_context *ctx, const char *path, struct glia_config **out);
/* Parse INI text (tests); `name` stands for the file name in messages. */
glia_status glia_config_parse_string(struct glia_context *ctx, const char *name, const char *text,
                                     struct glia_config **out);
/* Apply "section.key=value" (the CLI's --set); later overrides win. */
glia_status glia_config_set(struct glia_config *cfg, const char *assignment);
void glia_config_free(struct glia_config *cfg);
/* ABI 2.3: the value of [section] key as the file or a glia_config_set wrote it (borrowed: valid while cfg lives),
 * NULL when it is not there (defaults are not filled in). */
const char *glia_config_value(struct glia_config *cfg, const char *section, const char *key);
/* Apply cfg's [plugins] section to ctx as glia_model_build does: each `path` folder joins
 * the search path (a folder that does not exist is an error) and each `load` plugin is loaded.
 * Relative paths written in the file are relative to its folder, ones given by --set to the working
 * directory. Loading a plugin runs its code: see docs/model.md, "Plugins are code". */
glia_status glia_config_load_plugins(struct glia_context *ctx, struct glia_config *cfg);
/* The core's key schema of a global section ("runtime", "data", "train", "plugins") or of the
 * keys every layer section has ("layer"); NULL for other names. */
const struct glia_key *glia_config_schema(const char *section);

/* Validate every section against its schema (loading plugins the model names), build the
 * layer graph, infer shapes, allocate and initialize parameters from [runtime] seed.
 * The config must outlive the model. *out is (owned). */
glia_status glia_model_build(struct glia_context *ctx, struct glia_config *cfg,
                             struct glia_model **out);
void glia_model_free(struct glia_model *m);

/* Print the layer table (name, type, impl, output shape, params, FLOPs). */
void glia_model_summary(const struct glia_model *m, FILE *f);
/* This process's rank in a data-parallel job (0 when there is none); *world (may be NULL) gets
 * the number of ranks. Programs print only on rank 0. */
int glia_model_rank(const struct glia_model *m, int *world);
/* Total number of parameter elements. */
long long glia_model_param_count(const struct glia_model *m);
/* Copy all weights (flat fp32, in arena order) to dst of n floats; returns the count. */
long long glia_model_weights(const struct glia_model *m, float *dst, long long n);

/* Zero it, then set struct_size. */
struct glia_train_options {
    uint32_t struct_size;      /* sizeof(struct glia_train_options) of the caller */
    const char *metrics_path;  /* overrides [train] metrics when non-NULL */
    int progress;              /* 1: redraw one line (terminal), 0: plain lines, -1: quiet */
    FILE *out;                 /* progress and summary (default stdout) */
    const char *resume;        /* checkpoint to continue from (NULL: start fresh) */
};

/* What glia_model_train tells of each epoch. The caller sets struct_size in the first element of the array it
 * hands over: the core writes each result's first struct_size bytes, struct_size apart. */
struct glia_epoch_result {
    uint32_t struct_size;      /* sizeof(struct glia_epoch_result) of the caller */
    int epoch;
    double train_loss, test_loss, test_accuracy, samples_per_s, seconds;  /* a language model's ([data] format =
                                  token_stream, bytes): test_loss per token (its perplexity is exp(test_loss)),
                                  test_accuracy NaN (not counted); an epoch [train] eval_every does not evaluate:
                                  test_loss and test_accuracy NaN */
    double lr;                 /* learning rate of the epoch's last step */
    double data_wait_s;        /* time training steps waited for the data loader */
    int64_t skipped_steps;     /* precision = fp16: steps skipped for inf/NaN gradients, in all */
    double loss_scale;         /* precision = fp16: the loss scale at the epoch's end; else 1 */
    int world;                 /* ranks training together (1 unless [distributed] mode = ddp) */
    double comm_wait_s;        /* ddp: the most time a rank's steps waited for gradient all-reduces */
    double step_s_min, step_s_max;  /* mean step time without the comm waits, of the fastest and of
                                       the slowest rank (a spread means the ranks are unbalanced) */
};

/* Train per [train], evaluating on the test set after each epoch. If results is not NULL
 * it receives up to max_results epoch results. */
glia_status glia_model_train(struct glia_model *m, const struct glia_train_options *opt,
                             struct glia_epoch_result *results, int max_results);
/* Ask a running glia_model_train to stop at the next optimizer step: it writes that step's
 * checkpoint (where [train] checkpoint_dir is set) and returns GLIA_EINTERRUPTED with a message
 * naming the checkpoint to --resume from. Under ddp a request on any rank stops every rank at the
 * same step: the ranks agree every 10 optimizer steps. Only sets a flag, so it may be called from
 * a signal handler or another thread; the flag is cleared when glia_model_train returns. */
void glia_model_request_stop(struct glia_model *m);
/* glia_model_request_stop with a code from 1 to 255 (the glia command passes the signal's
 * number). Under ddp the ranks agree on the largest code any of them asked with. */
void glia_model_request_stop_code(struct glia_model *m, int code);
/* The code of the request that stopped the last glia_model_train (it returned
 * GLIA_EINTERRUPTED): 1 for glia_model_request_stop; under ddp the largest code any rank asked
 * with, the same on every rank, so that every rank can exit alike. 0 when no request stopped it.
 * */
int glia_model_stop_code(const struct glia_model *m);

/* ---- one training step from the caller's own loop (ABI 2.0) ---- */

/* A batch in host memory (borrowed for the call). */
struct glia_batch {
    uint32_t struct_size;      /* sizeof(struct glia_batch) */
    struct glia_shape shape;   /* of the input: images n x channels x rows x cols as [data] gives them; tokens
                                  n x len, len from 1 to the longest padded length; n from 1 to [data] batch_size */
    const float *x;            /* images: f32 in that shape, normalized as the loader would ([data] mean, std);
                                  NULL for a token model */
    const int32_t *tokens;     /* tokens: ids in that shape, 0 (padding) to [data] vocab - 1; NULL for images */
    const int32_t *labels;     /* n class indices, 0 to the width of the loss layer's input - 1; a language model's
                                  ([data] format = token_stream, bytes): n x len, the next token at each position */
    int epoch;                 /* the epoch (1 to [train] epochs) whose learning rate [train] schedule gives this
                                  step; it stays the model's until changed. 0: the model's (1 at first, then that
                                  of the last training step, glia_model_train's included) */
    int update_now;            /* [train] accumulate > 1: 1 updates the weights after this batch although fewer
                                  than accumulate batches were added (glia_model_train does so at an epoch's end) */
};

/* What a glia_model_step did. */
struct glia_step_result {
    uint32_t struct_size;      /* set by the caller: sizeof(struct glia_step_result) */
    double loss;               /* this batch's mean loss, always (under ddp this rank's batch's) */
    int updated;               /* 1: the weights were updated after this batch; 0: accumulating, or skipped */
    int skipped;               /* precision = fp16: the update was skipped for inf/NaN gradients (weights
                                  unchanged, loss scale halved) */
    double lr;                 /* the learning rate of this update; without one, that of the next */
    int64_t step;              /* the model's optimizer steps so far (what checkpoints and max_steps count) */
    double loss_scale;         /* precision = fp16: the loss scale now; else 1 */
};

/* One training step on batch b: the step glia_model_train runs for each batch (forward, backward, and with
 * [train] accumulate = k after every k-th batch the update: loss scaling, clipping, the optimizer at the
 * schedule's learning rate, dp and ddp, [runtime] cuda_graph), on the caller's data. The model's step counter
 * advances as in training (warmup_steps, schedule = poly | linear, whose decay ends at [train] total_steps, by
 * default the optimizer steps glia_model_train would take, and a later glia_model_train's max_steps and
 * checkpoints count it); it
 * writes no checkpoint and no metrics, and ignores max_steps and stop requests. Under ddp every rank calls it
 * with its own batch; the first call checks the ranks and gives them rank 0's weights, as training does.
 * r (may be NULL) gets what happened; the loss is read after this batch's forward, so the call waits for the
 * device (glia_model_train instead reads each loss a step late). A batch that does not fit the model (shape,
 * NULL data, a label or token id out of range, a bad struct_size) is GLIA_EINVAL with one line naming it, and
 * changes nothing; a non-finite loss is GLIA_ENUMERIC, as in training. glia_model_train drops an accumulation
 * left unfinished by this function. Not to be called while glia_model_train runs on the same model. */
glia_status glia_model_step(struct glia_model *m, const struct glia_batch *b, struct glia_step_result *r);

/* Run warmup + steps training steps and print per-layer forward/backward times, the
 * optimizer's and the input's, to f. The model's weights change as in training. */
glia_status glia_model_profile(struct glia_model *m, int steps, int warmup, FILE *f);
/* glia_model_profile, and when trace_path is not NULL also a Chrome trace (Trace Event Format
 * JSON, for chrome://tracing or ui.perfetto.dev) written to trace_path: one complete event per
 * counted step ("step", enclosing the rest), input wait and copy ("input"), layer forward
 * ("forward"; args type, impl, output shape) and backward ("backward"; layers whose backward
 * runs), ddp gradient wait ("comm") and optimizer step ("optimizer"; none for a step that fp16
 * loss scaling skips); ts and dur in microseconds from the first counted step's start; pid is the
 * rank. trace_path (borrowed) is opened before the run (a path that cannot be written fails at
 * once, naming it) and removed if the run fails. Under ddp only rank 0 writes it; the other
 * ranks ignore trace_path. */
glia_status glia_model_profile_trace(struct glia_model *m, int steps, int warmup, FILE *f, const char *trace_path);

/* ---- glia_model_profile with its options (ABI 2.1) ---- */
struct glia_profile_options {
    uint32_t struct_size;    /* sizeof(struct glia_profile_options) of the caller */
    int steps, warmup;       /* as glia_model_profile's */
    const char *trace_path;  /* as glia_model_profile_trace's; NULL: no trace */
    double peak_bandwidth;   /* bytes a second the device's memory moves, for the fraction of peak; 0: the device's
                                own figure (glia_backend_peak; the CPU has none: no fraction is printed) */
    double peak_flops;       /* FLOP/s at the run's precision; 0: the device's own figure */
};
/* glia_model_profile_trace, its table also giving each layer's roofline: bytes moved and FLOPs a step (forward +
 * backward), the rates achieved and their fraction of the device's peak (docs/benchmarks.md gives the formulae). */
glia_status glia_model_profile_with(struct glia_model *m, const struct glia_profile_options *o, FILE *f);
/* Load weights and buffers from a checkpoint written by training this model. */
glia_status glia_model_load_checkpoint(struct glia_model *m, const char *path);

/* ABI 2.2: the model's output on batch b in evaluation mode (no dropout, batchnorm's running statistics): the input
 * of its loss layer, the logits, copied to logits[0 .. n): rows x classes floats, or for a language model
 * ([data] format = token_stream, bytes) rows x len x vocab, position t's row the prediction of the token after
 * b->tokens[t]. b as for glia_model_step, whose labels are not read (may be NULL). What glia sample runs. A batch
 * that does not fit the model, or n too small, is GLIA_EINVAL with one line naming it. */
glia_status glia_model_logits(struct glia_model *m, const struct glia_batch *b, float *logits, size_t n);

/* ABI 2.3: glia_model_logits for positions pos .. pos + len - 1 of a language model's sequences, with a cache: b
 * holds (rows, len) token ids at those positions, positions 0 .. pos - 1 being what the previous calls gave (pos 0
 * starts rows new sequences; later calls keep rows). Each attention layer keeps its keys and values, so a token
 * costs one position's forward, not the whole prefix's (as a KV cache). Writes rows x len x vocab logits, position
 * pos + t's row the prediction of the token after b->tokens[t], what glia_model_logits gives there over the whole
 * prefix. GLIA_EINVAL naming the cause for pos beyond the positions given, pos + len beyond the model's len, rows
 * changing or a model that is not a language model; GLIA_EUNSUPPORTED naming the layer when a layer's kernel cannot
 * decode (no GLIA_KERNEL_DECODE, or attention with causal = off): glia_model_logits still works there. */
glia_status glia_model_decode(struct glia_model *m, const struct glia_batch *b, int64_t pos, float *logits, size_t n);

/* ABI 2.3: the model's weights and buffers written to path as a safetensors file (an 8-byte little-endian header
 * length, the JSON header with each tensor's dtype, shape and data_offsets and __metadata__, padded to 8 bytes, then
 * the data), each tensor named as PyTorch's state_dict names it: "<layer>.<parameter>" ("conv1.weight", "bn.running_mean"),
 * a normalization layer with running statistics also "<layer>.num_batches_tracked" (I64 0: glia does not count), a
 * bias [graph] drop_bias_before_norm removed as zeros, a tied parameter once (its owner's name). Values in dtype
 * GLIA_F32, GLIA_BF16 or GLIA_F16 (rounded to nearest even). Written to a temporary and renamed: a failure leaves no
 * file. What `glia export` runs. */
glia_status glia_model_export_safetensors(struct glia_model *m, const char *path, enum glia_dtype dtype);
/* ABI 2.3: the model's weights and buffers read from a safetensors file ([train] init_from): every parameter and
 * buffer by its name, of its shape, in F32, BF16 or F16; num_batches_tracked and zero biases of dropped biases may be
 * there or not; a dropped bias that is not zero is folded into the running mean of the normalization after it. A file
 * that is not well formed (header, offsets, sizes, trailing bytes), a tensor missing, of another shape, or not in the
 * model is GLIA_EFORMAT with one line naming the file and the tensor; the model's weights are then undefined. */
glia_status glia_model_load_safetensors(struct glia_model *m, const char *path);

/* ABI 2.2: what a model reads and predicts, for programs that feed it batches (glia sample). */
struct glia_model_io {
    uint32_t struct_size;  /* set by the caller: sizeof(struct glia_model_io) */
    int tokens;            /* 1: token ids (n, len); 0: images (n, channels, rows, cols) */
    int lm;                /* 1: a language model ([data] format = token_stream, bytes): the logits predict the next
                              token at every position */
    int bytes;             /* 1: [data] format = bytes: token id = the byte's value */
    int64_t len;           /* tokens: the longest len a batch may have (a language model's [data] seq_len) */
    int64_t vocab;         /* tokens: ids are 0 .. vocab - 1 */
    int64_t classes;       /* the last dimension of the logits (a language model's vocabulary) */
    int64_t batch;         /* the largest n of a batch ([data] batch_size) */
};
/* Fills *io (as much of it as io->struct_size covers). GLIA_EINVAL for a struct_size below its first fields. */
glia_status glia_model_io_info(const struct glia_model *m, struct glia_model_io *io);
/* Evaluate on the test set: the mean loss and the accuracy; a language model's ([data] format = token_stream,
 * bytes) loss is the mean per token (perplexity exp(*loss)) and *accuracy NaN (not counted). */
glia_status glia_model_evaluate(struct glia_model *m, double *loss, double *accuracy);

#ifdef __cplusplus
}
#endif
#endif
