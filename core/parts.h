/* core/parts.h — the model in parts (graph, data, parameters, activations, trainer, distributed attachment)
 * and the functions the core files that build and run it share. Not installed: a model's public face is glia/model.h. */
#ifndef GLIA_CORE_PARTS_H
#define GLIA_CORE_PARTS_H

#include <signal.h>
#include "internal.h"

#define GLIA__MAX_SEGMENTS (1 << 20)  /* [graph] checkpoint_segments at most */
#define GLIA__MAX_INPUTS 16
#define GLIA__MAX_REPLICAS 16
#define GLIA__MAX_GRAPHS 8    /* training passes (batch shape, gradient state, update) replayed from CUDA graphs
                                 ([runtime] cuda_graph) */
/* [runtime] cuda_graph: what a replay is handed on the device, in 8-byte words: the step its random layers draw
 * from, then the optimizer's scalars for the step it takes (GLIA_OPT_SCALARS_MAX bytes at most). */
#define GLIA__STEP_DEV_WORDS (1 + GLIA_OPT_SCALARS_MAX / 8)

/* Dynamic loss scaling (precision = fp16), torch.cuda.amp.GradScaler's rule: the loss is
 * multiplied by `scale` before backward; a step whose gradients are not all finite is skipped
 * and halves the scale; 2000 clean steps in a row double it. */
struct glia__scaler {
    double scale;        /* starts at 65536 */
    int64_t clean;       /* clean steps since the scale last changed */
    int64_t skipped;     /* steps skipped, in all */
};
#define GLIA__SCALER_GROWTH 2000  /* clean steps that double the loss scale */
/* Account for one step whose gradient sum of squares is sumsq; false: skip the step. */
bool glia__scaler_update(struct glia__scaler *s, double sumsq);
/* The same with `growth` clean steps doubling the scale. */
bool glia__scaler_update_every(struct glia__scaler *s, double sumsq, int64_t growth);
/* [runtime] cuda_graph with fp16: the rows of step words a replay picks from by the device's step count (updates
 * launched whose outcome the host has not read, plus one), at most */
#define GLIA__SCALER_ROWS 4
/* The words of the device's scaler state (struct glia_loss_scaler) at the start of trainer.scaler_dev, then the
 * table of rows glia_backend_select reads */
#define GLIA__SCALER_STATE_WORDS (sizeof(struct glia_loss_scaler) / 8)
#define GLIA__SCALER_DEV_WORDS (GLIA__SCALER_STATE_WORDS + 2 + GLIA__SCALER_ROWS * GLIA__STEP_DEV_WORDS)

enum glia__schedule { GLIA__SCHED_CONSTANT = 0, GLIA__SCHED_STEP, GLIA__SCHED_COSINE, GLIA__SCHED_POLY,
                     GLIA__SCHED_LINEAR /* poly with power 1 */ };
enum glia__dist_mode { GLIA__DIST_NONE = 0, GLIA__DIST_DP, GLIA__DIST_DDP };
/* [data] resident: where training batches are made (core/act.c) */
enum glia__resident_mode { GLIA__RESIDENT_AUTO = 0, GLIA__RESIDENT_ON, GLIA__RESIDENT_OFF };

/* ---- the profile's Chrome trace (core/trace.c) ----
 * glia profile --trace records one complete event per layer forward and backward, input,
 * gradient wait (ddp), optimizer step and enclosing step, and writes them as a Chrome trace. */
enum glia__trace_cat { GLIA__TRACE_STEP = 0, GLIA__TRACE_INPUT, GLIA__TRACE_FORWARD, GLIA__TRACE_BACKWARD,
                       GLIA__TRACE_COMM, GLIA__TRACE_OPTIMIZER, GLIA__TRACE_RECOMPUTE };
struct glia__trace_event {
    enum glia__trace_cat cat;
    const char *name;            /* (borrowed) a layer's or the optimizer's name; NULL: the category's */
    const char *type, *impl;     /* (borrowed) the layer's, or NULL */
    struct glia_shape shape;     /* forward: the output's shape; ndim 0: none */
    int64_t step;                /* the counted step it belongs to, from 1 */
    int64_t batch;               /* step events: the batch's samples */
    double t0, t1;               /* glia__now() seconds */
};
struct glia__trace {
    double t_base;               /* glia__now() when the first counted step began: ts 0 */
    int64_t step;                /* the step being recorded */
    struct glia__trace_event *ev;  /* (owned) */
    size_t n, cap;
    bool lost;                   /* an event could not be stored (out of memory) */
};
glia_status glia__trace_reserve(struct glia__trace *t, size_t n);
/* Appends an event of the current step; NULL (and t->lost) when out of memory. */
struct glia__trace_event *glia__trace_add(struct glia__trace *t, enum glia__trace_cat cat, const char *name,
                                          double t0, double t1);
void glia__trace_free(struct glia__trace *t);
/* {"traceEvents":[...],"displayTimeUnit":"ms"}: ts and dur in microseconds after t_base with 3
 * decimals, pid the rank; -1 when writing f failed. */
int glia__trace_write(const struct glia__trace *t, FILE *f, int pid);
/* s as a JSON string, quotes included: '"', '\\' and control characters escaped. */
void glia__json_string(FILE *f, const char *s);

struct glia__node {
    struct glia_layer layer;
    struct glia_section *sec;        /* (borrowed) */
    bool created;                    /* create succeeded: destroy is owed */
    int n_in;
    int in[GLIA__MAX_INPUTS];        /* producer node index; -1 is the data batch */
    int n_consumers;
    bool needs_grad;                 /* it or a layer feeding it has parameters: backward runs */
    struct glia_shape out_shape;     /* at the configured batch size */
    uint64_t flops;                  /* at the configured batch size */
    struct glia_tensor *out, *dout;  /* views into the model's act_block for the current batch: the output
                                        and its gradient (NULL in evaluation and where no gradient flows) */
    void *saved;                     /* in training, the kernel's saved memory in act_block (glia_kernel.saved_size)
                                        for the current batch; NULL when it asks for none */
    bool grad_written;               /* dout written during this backward */
    bool grad_preact;                /* ... as the gradient of its pre-activation (din_act, below) */
    double t_fwd, t_bwd;             /* seconds spent, when profiling */
    /* memory formats (see [runtime] memory_format) */
    enum glia_memory_format out_fmt; /* of out and dout */
    enum glia__edge { GLIA__EDGE_DIRECT = 0,  /* input k is the producer's tensor */
                      GLIA__EDGE_RETAG,       /* the same memory seen in the other format (C or H*W is 1) */
                      GLIA__EDGE_CONVERT      /* converted into cin[k]; its gradient back from cdin[k] */
    } edge[GLIA__MAX_INPUTS];
    enum glia_memory_format in_fmt[GLIA__MAX_INPUTS];   /* what the layer gets */
    /* element types ([graph] half_activations): of out and dout, and what the layer gets as input k (and writes as
     * its gradient); where in_dtype[k] is not the producer's, edge[k] converts */
    enum glia_dtype out_dtype;
    enum glia_dtype in_dtype[GLIA__MAX_INPUTS];
    struct glia_tensor *cin[GLIA__MAX_INPUTS], *cdin[GLIA__MAX_INPUTS];  /* views (RETAG, CONVERT) into act_block
                                                                             (cin of the data batch: into x_buf) */
    bool bias_dropped;               /* by the drop_bias_before_norm pass ... */
    bool act_fused;                  /* a layer that the activation after it became part of ([graph] fuse_pointwise:
                                        GLIA_TYPE_FUSIBLE_ACTIVATION) */
    int bias_dropped_for;            /* ... because this node normalizes its output */
    struct glia_section *own_sec;    /* (owned) sec, when a graph pass made it (fuse_pointwise); else NULL */
    /* pass checkpoint_segments: a training step drops this node's output after the forward and runs its forward
     * again during backward (recompute) ... */
    bool recompute;
    bool cut;                        /* a segment ends here */
    int recompute_n;                 /* ... the recompute nodes among the recompute_n before this one, which ends a
                                        segment, run again just before this node's backward; 0: none */
    /* [layer] tie_weight (set by glia__alloc_params): this layer's parameter tie - 1 is node tie_node's parameter
     * tie_param, one tensor (an arena slot of 0 values here); tie = 0: none */
    int tie, tie_node, tie_param;
    /* [graph] fuse_pointwise, evaluation only (glia__pass_fold_norm_eval): norm_fold = j + 1 where the normalization
     * node j alone reads this node, and this node's eval forward computes j's output too (GLIA_KERNEL_EVAL_AFFINE:
     * glia_fwd.affine, from j's glia_kernel.eval_affine into fold_affine); at node j, folded_by = this node + 1, and
     * its eval forward does not run. 0: none. */
    int norm_fold, folded_by;
    struct glia_tensor *fold_affine; /* (owned) (3, C) f32 on the model's device: j's mean, scale and shift */
    /* [graph] fuse_pointwise, training (glia__pass_fuse_dact): din_act = p + 1 where node p computes act(pre)
     * (GLIA_KERNEL_DOUT_PREACT) and this node alone reads it, and this node's backward applies act's gradient to p's
     * output gradient (glia_bwd.din_act, glia_kernel.din_act); at node p, dout_preact = this node + 1, and its backward
     * finds dout_preact set. 0: none. */
    int din_act, dout_preact;
    /* [graph] fuse_pointwise (glia__pass_fuse_residual): res_norm = j + 1 where this node adds two tensors (x + y) and
     * node j (GLIA_KERNEL_RESIDUAL_IN: layernorm) reads its output, and this node's forward runs j's kernel with the
     * sum's inputs, writing both outputs (glia_fwd.residual, sum); at node j, res_by = this node + 1, and its forward
     * (but for a recomputation, which runs both as written) does not run. 0: none. */
    int res_norm, res_by;
};

/* A layer section of the model file as declared, before graph passes merged any: the model's
 * fingerprint (checkpoints, ddp's same-model check) hashes these, so a model with fused layers
 * and the same model without fusion read each other's checkpoints. */
struct glia__decl {
    const char *name, *type;         /* (borrowed: the config's section, the layer's ops) */
    int node;                        /* the node that computes it now */
};

/* A flat arena of `count` tensors with `n` values in all: tensor i lies at off[i] (a multiple of
 * GLIA__ARENA_ALIGN floats, 256 bytes, what cuDNN and cuBLASLt's vectorized kernels want); the
 * padding between them is zero and stays zero (no layer writes it, a zero gradient never moves it).
 * Checkpoints and glia_model_weights hold the n values packed, in arena order. */
#define GLIA__ARENA_ALIGN 64
struct glia__arena {
    int count;
    int64_t n, len;          /* values; floats including the padding (at least 1) */
    int64_t *off, *size;     /* count each (owned) */
};
glia_status glia__arena_plan(struct glia__arena *a, const int64_t *sizes, int count);
/* The same with at least `gap` floats of padding (a multiple of GLIA__ARENA_ALIGN) before each tensor and after it
 * that belong to no other tensor: room for guard values ([runtime] debug_checks). */
glia_status glia__arena_plan_gap(struct glia__arena *a, const int64_t *sizes, int count, int64_t gap);
void glia__arena_free(struct glia__arena *a);
/* compact(n) = the values of full(len), in order */
void glia__arena_pack(const struct glia__arena *a, const float *full, float *compact);
/* full(len) = compact(n) spread to the offsets, zero padding */
void glia__arena_unpack(const struct glia__arena *a, const float *compact, float *full);

/* Plan slots per node: its output (k = -1) and each converted input k, then the gradients of the same. */
#define GLIA__PLAN_SLOTS (2 * (GLIA__MAX_INPUTS + 1) + 1)
#define GLIA__PLAN_VALUE(i, k) ((i) * GLIA__PLAN_SLOTS + 1 + (k))
#define GLIA__PLAN_GRAD(i, k) ((i) * GLIA__PLAN_SLOTS + GLIA__MAX_INPUTS + 2 + (k))
#define GLIA__PLAN_SAVED(i) ((i) * GLIA__PLAN_SLOTS + 2 * (GLIA__MAX_INPUTS + 1))  /* the kernel's saved memory */
/* Where a model's activations live, in floats: one block of len, which a training step at the training batch uses
 * as train_off says (its outputs, converted inputs and their gradients; train floats, train_unshared if each had its
 * own) and an evaluation forward at the evaluation batch as eval_off says (eval, eval_unshared). */
struct glia__act_plan {
    int64_t len, train, train_unshared, eval, eval_unshared;
    int64_t *train_off, *eval_off;   /* n_nodes * GLIA__PLAN_SLOTS each (owned) */
};
/* [runtime] cuda_graph: the training forward and backward of one batch shape (n, len) and gradient state (acc:
 * the parameters' gradients are being accumulated), and with upd the optimizer step after them, run once as it
 * comes, then captured, then replayed. */
struct glia__graph {
    int64_t n, len;
    bool acc, upd;
    enum { GLIA__GRAPH_SEEN, GLIA__GRAPH_READY, GLIA__GRAPH_FAILED } state;
    void *exec;                      /* READY: the backend's graph (owned) */
    bool *written;                   /* READY: per parameter (in node order), whether the captured backward
                                        wrote its gradient (a replay leaves it set) (owned) */
};

/* The layer graph: its nodes after the graph passes, the layers as declared, how activations are laid out and cut
 * (core/node.c, core/graph.c, core/memplan.c). */
struct glia__model_graph {
    struct glia__node *nodes;        /* (owned) room for cap_nodes: one per section of the file at most */
    int n_nodes, cap_nodes;
    struct glia__decl *decl;         /* (owned) the layers as declared, cap_nodes of room */
    int n_decl;
    enum glia_memory_format format;  /* of 4-D activations between layers that take either */
    enum glia_dtype half;            /* of activations between layers that take it ([graph] half_activations: bf16,
                                        f16); GLIA_F32: all f32 */
    int ckpt_asked, ckpt_segments;   /* [graph] checkpoint_segments, and as cut (1: no checkpointing) */
    int64_t ckpt_plan[2];            /* the training plan at the configured batch without and with the cuts (floats) */
};

/* The data of [data]: the datasets and how the loader batches them (core/data.c, core/loader.c). */
struct glia__model_data {
    struct glia__dataset train, test;
    int batch, test_batch, n_classes;
    bool shuffle, persistent, drop_last, flip, pin_memory;
    struct glia__norm norm;          /* images: [data] mean, std per channel */
    int workers, prefetch, crop_padding;
    int pad_multiple, group_size;    /* tokens: [data] pad_to_multiple, group_size */
    int64_t vocab;                   /* tokens: [data] vocab (ids are below it) */
    bool group_by_length;            /* tokens: [data] group_by_length */
    bool lm;                         /* a language model's data (format = token_stream, bytes): labels are the next
                                        token at every position, (n, len); evaluation reports perplexity */
    enum glia__resident_mode resident;  /* [data] resident */
    double resident_share;           /* [data] resident_share: auto's part of the device's free memory */
};

/* The parameters and buffers: flat arenas, each parameter at a multiple of GLIA__ARENA_ALIGN floats
 * (core/params.c; saved by core/checkpoint.c). */
struct glia__model_params {
    struct glia__arena wa;           /* where each parameter lies in w, g and state[]; wa.n values */
    struct glia_tensor *w, *g, *state[GLIA__MAX_STATE];
    struct glia_tensor *decay_mask;  /* wa.len flags, 0 where a parameter has decay off; NULL: all on */
    int64_t *seg;                    /* 2 wa.count: wa.off[i], wa.size[i] interleaved (glia_opt_step.seg) */
    struct glia_tensor *dev_seg;     /* the same on a device backend (glia_opt_step.dev_seg); NULL on the CPU */
    struct glia__arena ba;           /* where each buffer lies in buf; ba.n values */
    struct glia_tensor *buf;         /* buffer arena (running statistics) */
};

/* The activations of a step and the batch they are views for (core/train.c, planned by core/memplan.c). */
struct glia__model_act {
    int64_t act_batch;               /* training batch the buffers were sized for (0: none) */
    int64_t eval_batch;              /* evaluation batch the evaluation block was sized for (0: none) */
    int64_t cur_batch;               /* batch the views currently have */
    int64_t cur_len;                 /* tokens: the padded length they have */
    bool cur_train;                  /* the views are training's (else evaluation's) */
    struct glia__act_plan plan;      /* where each activation lies in act_block (core/memplan.c) */
    struct glia_tensor *act_block;   /* the activations and their gradients (NULL: none yet) */
    struct glia_tensor *x_buf, *y_buf, *x, *y, *loss_scale;
    struct glia_tensor *stage_x, *stage_y;  /* upload targets when the backend copies on its own
                                               stream: the next batch lands here during a step */
    int64_t decode_next, decode_rows;  /* glia_model_decode: the positions its layers cache (0 .. decode_next - 1)
                                          of decode_rows sequences; 0: none */
};

/* The trainer: the optimizer, the schedule, the loss scaler, the step and its CUDA graphs (core/train.c). */
struct glia__model_trainer {
    struct glia_optimizer opt;
    int epochs, log_every;
    char *checkpoint_dir;            /* (owned) NULL: no checkpoints */
    int64_t checkpoint_every, max_steps;
    volatile sig_atomic_t stop_requested;  /* glia_model_request_stop's code (a signal handler may set it) */
    int stop_code;                         /* the code that stopped the last training (all ranks agree) */
    int checkpoint_keep;
    double lr;                       /* base learning rate */
    double cur_lr;                   /* learning rate of the last step */
    enum glia__schedule schedule;
    double gamma, min_lr, clip_grad_norm;
    bool decay_1d;                   /* [train] weight_decay_1d */
    int step_epochs, accumulate;
    int eval_every;                  /* [train] eval_every: evaluate after epochs k*eval_every and the last; 0: never */
    int64_t warmup_steps;
    double power;                    /* poly: the decay's exponent (linear: 1) */
    int64_t total_steps;             /* poly: the run's optimizer steps T, the decay's end (0: other schedules) */
    int64_t step;                    /* optimizer steps taken */
    struct glia__scaler scaler;      /* precision = fp16; else its scale stays 1 */
    bool profiling;
    double t_opt;
    struct glia__trace *trace;       /* (borrowed) while profiling with a trace: events go here */
    int epoch;                       /* the epoch of the last training step, whose lr schedule a glia_model_step
                                        follows by default (0: none yet, the first) */
    int micro;                       /* glia_model_step: batches added since the last optimizer update */
    size_t results_size;             /* glia_model_train: the caller's sizeof(struct glia_epoch_result) (0: none) */
    /* [runtime] cuda_graph */
    bool cuda_graph;                 /* on, and this model can be captured */
    bool capturing;                  /* a training step is being captured: forwards get step_at */
    struct glia__graph graphs[GLIA__MAX_GRAPHS];
    int n_graphs;
    struct glia_tensor *step_dev;    /* i64 (GLIA__STEP_DEV_WORDS) on the device: [0] the step a replay draws its
                                        seeds from, then the optimizer's scalars of the step it takes */
    int64_t graph_replays;           /* training passes replayed so far */
    int64_t graph_updates;           /* of those, replays that took the optimizer step too */
    int64_t opt_outside;             /* optimizer steps run as they come (not from a graph), with cuda_graph on */
    int opt_in_graph;                /* whether the optimizer step is captured with the pass: 0 not known yet, 1 yes,
                                        -1 no (said once in the log) */
    /* precision = fp16 with the optimizer step in the graph: the loss scaler lives on the device (core/train.c) */
    int64_t scaler_growth;           /* clean steps that double the loss scale (GLIA__SCALER_GROWTH; tests set fewer) */
    bool dev_scaler;                 /* the captured update's loss scaler runs on the device */
    int scaler_words;                /* words of a row of the table: the step, then the optimizer's scalars */
    struct glia_tensor *scaler_dev;  /* i64 (GLIA__SCALER_DEV_WORDS) on the device: struct glia_loss_scaler, then
                                        the table (base step, rows, rows of scaler_words) */
    struct glia_loss_scaler *scaler_host;  /* GLIA__SCALER_ROWS page-locked copies of the state after an update */
    uint64_t scaler_ticket[GLIA__SCALER_ROWS];
    int scaler_epoch[GLIA__SCALER_ROWS];   /* the epoch each of those updates ran in (its learning rate) */
    int scaler_first, scaler_pending;      /* the oldest unread copy; updates launched whose outcome is unread */
};

/* The distributed attachment of [distributed] (core/ddp.c, core/ddp_check.c; dp in core/train.c). */
struct glia__model_dist {
    enum glia__dist_mode mode;
    struct glia_comm *comm;          /* mode = ddp (borrowed from the context) */
    struct glia__ddp *ddp;           /* mode = ddp (owned) */
    bool ddp_started;                /* ddp: glia__ddp_start ran (the ranks hold the same weights) */
    int rank, world;                 /* this process in the job: 0 and 1 unless ddp */
    char *rank_log;                  /* (owned) per-rank log file, or NULL */
    /* mode = dp: this model computes chunk[0] of each batch on its device, replica[r] (owned)
     * chunk[r] on device r; gradients are added into this model's, which steps and hands its
     * weights and buffers back to the replicas */
    int n_replicas;                  /* devices driven (1 without dp) */
    struct glia_model *replica[GLIA__MAX_REPLICAS];  /* [0] unused */
    int64_t chunk[GLIA__MAX_REPLICAS];
    int64_t weights_step;            /* in a replica: the model's step its weights were copied at (-1: stale) */
    double loss_weight;              /* the share of the batch this model's loss stands for */
    bool forced;                     /* build on forced_device, not [runtime] device (dp) */
    struct glia_device forced_device;
    const struct glia_model *like;   /* while a replica builds: the model whose data it borrows */
};

/* A model: where it runs, and its parts. */
struct glia_model {
    struct glia_context *ctx;
    struct glia_config *cfg;
    struct glia_device device;
    struct glia_backend *backend;
    char *device_notice;             /* (owned) why device = auto chose the CPU; NULL: it did not */
    uint64_t seed;
    enum glia_precision precision;   /* [runtime] precision */
    bool debug_checks;               /* [runtime] debug_checks: guard values around what every layer call writes */
    bool detect_anomaly;             /* [runtime] detect_anomaly: NaN/inf looked for after every training layer call */
    bool nvtx;                       /* [runtime] nvtx: named ranges around layers, optimizer, input, gradient wait */
    struct glia__model_graph graph;
    struct glia__model_data data;
    struct glia__model_params params;
    struct glia__model_act act;
    struct glia__model_trainer trainer;
    struct glia__model_dist dist;
};

/* The most elements one tensor of a model may have: 2^45, 140 TB of f32, beyond any machine. A model
 * with a larger parameter or layer output is refused when it is built, which also keeps every sum of
 * sizes the core computes (arenas, activation plans) within int64. */
#define GLIA__MAX_ELEMENTS ((int64_t)1 << 45)
#define GLIA__MAX_ELEMENTS_TEXT "2^45"

/* The element count of s, as a double: no overflow, whatever the dims. */
static inline double glia__numel_d(const struct glia_shape *s)
{
    double n = 1;
    for (int i = 0; i < s->ndim; i++) n *= (double)s->dim[i];
    return n;
}

/* The data batch's shape: images (n, channels, rows, cols); tokens (n, len). */
static inline struct glia_shape glia__data_shape(const struct glia_model *m, int64_t n, int64_t len)
{
    if (m->data.train.tokens) return glia_shape_make(2, (int64_t[]){n, len});
    return glia_shape_make(4, (int64_t[]){n, m->data.train.channels, m->data.train.rows, m->data.train.cols});
}

/* The labels' shape of a batch: (n), or a language model's next tokens (n, len). */
static inline struct glia_shape glia__label_shape(const struct glia_model *m, int64_t n, int64_t len)
{
    if (m->data.lm) return glia_shape_make(2, (int64_t[]){n, len});
    return glia_shape_make(1, (int64_t[]){n});
}


/* ---- the core's schemas (core/schema.c) ---- */
/* The names of the sections that are not layers. */
extern const char *const glia__reserved[];
enum { GLIA__N_RESERVED = 7 };
bool glia__is_reserved(const char *name);

/* ---- layers of the graph (core/node.c) ---- */
/* The feature a layer's type, [train] optimizer or [distributed] transport value names: the value, or for a plugin
 * file the plugin's name (its file name without ".so"), into buf. */
const char *glia__feature_of(const char *v, char *buf, size_t n);
/* The tail of the error line for an unknown feature `name` of kind (GLIA__FEAT_TYPE, GLIA__FEAT_OPTIMIZER; what:
 * "layer type", "optimizer"): the nearest known name, and where its plugin was looked for. Nothing is loaded. */
void glia__unknown_why(struct glia_context *ctx, int kind, const char *what, const char *name, char *buf, size_t n);
/* The type and kernel section s names into l (loading the type's plugin unless the type is registered). */
glia_status glia__resolve_layer(struct glia_model *m, const struct glia_section *s, struct glia_layer *l);
/* Phase 1: resolve the layer of s, validate its keys, wire its inputs: node m->graph.n_nodes. */
glia_status glia__declare_layer(struct glia_model *m, struct glia_section *s);
/* The shape producer (-1: the data batch) gives a node, at batch size batch. */
struct glia_shape glia__in_shape_of(const struct glia_model *m, int producer, int64_t batch);
/* Phase 3: create node nd's layer with its input shapes and infer its output shape. */
glia_status glia__create_layer(struct glia_model *m, struct glia__node *nd);
/* Destroys node nd's layer if it was created (its parameters and buffers go with it). */
void glia__destroy_layer(struct glia__node *nd);
/* The outputs at the evaluation batch, where it is larger than the training batch. */
glia_status glia__check_eval_sizes(struct glia_model *m);

/* ---- the data of [data] (core/data.c) ---- */
glia_status glia__load_data(struct glia_model *m);

/* ---- graph passes of [graph] (core/graph.c), in the order glia_model_build runs them ---- */
glia_status glia__pass_drop_bias(struct glia_model *m);
/* The graph as written: a loss last, every layer trainable through, the edges linked. */
glia_status glia__check_graph(struct glia_model *m);
/* [graph] fuse_pointwise: 0 no fusion; 1 fuse where the fused layer can be made (auto on a GPU); 2 fuse (on). */
int glia__fuse_pointwise_mode(const struct glia_model *m, const struct glia_section *graph);
glia_status glia__pass_fuse_activation(struct glia_model *m);
glia_status glia__pass_fuse_pointwise(struct glia_model *m, bool on);
/* [graph] fuse_pointwise, after the memory formats and dtypes are planned: a normalization layer (a kernel with
 * eval_affine that can) that alone reads a layer whose kernel has GLIA_KERNEL_EVAL_AFFINE, through a direct edge,
 * evaluates through that layer's forward (norm_fold, folded_by); training runs both as written. */
glia_status glia__pass_fold_norm_eval(struct glia_model *m);
/* [graph] fuse_pointwise, after the dtypes are planned: a layer whose kernel has GLIA_KERNEL_DOUT_PREACT and whose
 * output one layer alone reads, through a direct edge, in its own type, by a kernel whose din_act slot takes its
 * activation: that consumer's backward applies the activation's gradient (din_act, dout_preact). */
glia_status glia__pass_fuse_dact(struct glia_model *m);
/* [graph] fuse_pointwise, after the dtypes are planned: a layer computing x + y of two inputs whose output a layer with
 * GLIA_KERNEL_RESIDUAL_IN reads through a direct edge, in its type, format and shape: the sum is computed in that
 * layer's forward (res_norm, res_by). */
glia_status glia__pass_fuse_residual(struct glia_model *m);
void glia__plan_formats(struct glia_model *m);
/* The half type that [graph] half_activations gives m (its precision's, where the backend converts), or GLIA_F32. */
enum glia_dtype glia__half_of(const struct glia_model *m, const struct glia_section *graph);
/* After glia__plan_formats: each node's output dtype and its edges' conversions for activations of type half (GLIA_F32:
 * all f32), as core/graph.c writes down. Plans nothing else: the activation block is planned when it is next needed. */
void glia__plan_dtypes(struct glia_model *m, enum glia_dtype half);
glia_status glia__pass_checkpoint(struct glia_model *m, const struct glia_section *graph);

/* ---- parameters and buffers (core/params.c) ---- */
glia_status glia__alloc_params(struct glia_model *m);
glia_status glia__alloc_buffers(struct glia_model *m);
/* The error of an arena (parameters, or buffers) that does not fit: bytes, and what else it needed (with). */
glia_status glia__arena_error(struct glia_model *m, bool buffers, double bytes, const char *with);
void glia__model_release_activations(struct glia_model *m);
/* Frees the CUDA graphs of [runtime] cuda_graph (core/train.c). */
void glia__model_free_graphs(struct glia_model *m);
/* [runtime] cuda_graph with fp16's loss scaler on the device: the outcomes of the updates launched so far (step,
 * learning rate, scaler) read into the trainer, waiting for the device (core/scaler.c); nothing to do otherwise. */
glia_status glia__scaler_settle(struct glia_model *m);
/* The same for all but the last `keep` updates launched. */
glia_status glia__scaler_drain(struct glia_model *m, int keep);
/* The same where the step count decides something after this update ([train] max_steps or checkpoint_every may be
 * reached, a stop was requested); else the outcomes stay unread. */
glia_status glia__steps_settle(struct glia_model *m);
/* After a replay of an update at `epoch`: the device scaler's state downloaded, for glia__scaler_drain to read. */
glia_status glia__scaler_outcome(struct glia_model *m, int epoch);

/* ---- activation memory (core/memplan.c) ---- */
/* Offsets off[i] (floats, multiples of GLIA__ARENA_ALIGN) for n buffers of size[i] floats (0: none, offset 0), each
 * alive from moment first[i] to last[i] inclusive and, when first2 is not NULL and first2[i] >= 0, again from
 * first2[i] to last2[i] (a recomputed activation: [graph] checkpoint_segments), such that two buffers alive at a
 * common moment never overlap; returns the block's length in floats (-1: out of memory). Largest first, each at the
 * lowest offset that fits. Pure. */
int64_t glia__memplan(int n, const int64_t *size, const int *first, const int *last, const int *first2,
                      const int *last2, int64_t *off);
/* The floats of a training step's activation plan at batch n (the longest length) as the nodes are marked now; -1 on
 * an error. */
int64_t glia__train_plan_len(struct glia_model *m, int64_t n);
/* The most floats (aligned) alive at one moment of that training step, which no plan can go below, in O(nodes); -1 on
 * an error. *area: the sum over its buffers of floats times moments alive. */
int64_t glia__train_live_peak(struct glia_model *m, int64_t n, double *area);
/* Output shapes of every node for a data batch of shape (n, len) (tokens) or n images, through each layer's
 * infer_shape. */
glia_status glia__infer_all(struct glia_model *m, int64_t n, int64_t len, struct glia_shape *shapes);
/* Whether node i's output gradient is ever written: it or a layer before it has parameters, and it is not the loss
 * (whose output gradient is the loss scale); false for the data batch (i < 0). */
static inline bool glia__has_grad(const struct glia_model *m, int i)
{
    return i >= 0 && i < m->graph.n_nodes - 1 && m->graph.nodes[i].needs_grad;
}
/* Whether node j's backward runs and reads its output; its inputs (glia/layer.h: GLIA_KERNEL_BWD_NO_...). */
static inline bool glia__bwd_reads_out(const struct glia_model *m, int j)
{
    return m->graph.nodes[j].needs_grad &&
           !(glia_layer_kernel_flags(&m->graph.nodes[j].layer) & GLIA_KERNEL_BWD_NO_OUTPUT);
}
static inline bool glia__bwd_reads_in(const struct glia_model *m, int j)
{
    return m->graph.nodes[j].needs_grad &&
           !(glia_layer_kernel_flags(&m->graph.nodes[j].layer) & GLIA_KERNEL_BWD_NO_INPUT);
}
/* The bytes node i's kernel keeps for its backward (glia_kernel.saved_size) when its output is shapes[i] and its inputs
 * those of shapes (the data batch's shape for input -1: n samples of length len). */
size_t glia__saved_bytes(const struct glia_model *m, int i, const struct glia_shape *shapes, int64_t n, int64_t len);
/* The node whose output gradient a training step writes over its output (the logits, given to a loss kernel with
 * GLIA_KERNEL_GRAD_IN_PLACE under the conditions glia/layer.h names), or -1. */
int glia__grad_in_place(const struct glia_model *m);
/* The plan for a training batch of train_batch (0: no training) and an evaluation batch of eval_batch (0: none),
 * at the longest token length. */
glia_status glia__act_plan(struct glia_model *m, int64_t train_batch, int64_t eval_batch, struct glia__act_plan *p);
void glia__act_plan_free(struct glia__act_plan *p);

/* ---- checkpoints (core/checkpoint.c) ---- */
struct glia__resume {
    int epoch;          /* the epoch in progress (1-based) */
    int64_t batch;      /* the next batch of that epoch */
    double loss_sum;    /* that epoch's training loss sum so far */
    int64_t samples;    /* that epoch's samples so far */
};
uint64_t glia__model_fingerprint(const struct glia_model *m);
glia_status glia__checkpoint_save(struct glia_model *m, const char *path, int epoch, int64_t batch,
                                  double loss_sum, int64_t samples);
/* training: also optimizer state and position (into *out); else weights and buffers only. */
glia_status glia__checkpoint_load(struct glia_model *m, const char *path, bool training, struct glia__resume *out);
/* A step checkpoint's file name in checkpoint_dir (glia__checkpoint_sweep reads any step-<digits>.ckpt). */
#define GLIA__STEP_CKPT "step-%08lld.ckpt"
/* The temporary a checkpoint at path is written to by process pid of this host (owned; NULL: no memory). */
char *glia__checkpoint_tmp_name(const char *path, long pid);
/* In folder dir: removes the temporaries that dead writers of this host left, and, keep > 0, the
 * step files beyond the newest `keep` of those at step <= `step`, whoever wrote them. Files of
 * later steps (a run resumed from an earlier checkpoint finds them) stay until its steps pass them.
 * Not while this process writes a checkpoint into dir: its own temporaries count as left over. */
void glia__checkpoint_sweep(struct glia_model *m, const char *dir, int64_t step, int keep);
/* Fill dst with n values drawn per init from a generator seeded with seed. */
void glia__init_values(float *dst, int64_t n, struct glia_param_init init, uint64_t seed);
/* Fill dst with the initial values of l's parameter p: its declared init drawn from seed, then
 * adjusted by the layer's init_param slot when it has one. */
void glia__init_param(const struct glia_layer *l, int p, float *dst, uint64_t seed);
/* The learning rate of optimizer step `step` (1-based) in epoch `epoch` (1-based) (core/schedule.c). */
double glia__model_lr(const struct glia_model *m, int epoch, int64_t step);

/* ---- data-parallel training (core/ddp.c) ---- */
struct glia__ddp;
/* Assigns n parameters (sizes in elements, in arena order) to buckets, walking from the last
 * parameter to the first (the order backward writes them): a bucket closes once it holds at
 * least first_bytes (bucket 0) or bytes (the others). Writes each parameter's bucket; returns the
 * number of buckets. Pure. */
int glia__ddp_buckets(const int64_t *sizes, int n, size_t elem_bytes, size_t first_bytes, size_t bytes, int *bucket_of);
glia_status glia__ddp_new(struct glia_model *m, struct glia_comm *comm, double bucket_mb, double first_mb,
                          struct glia__ddp **out);
void glia__ddp_free(struct glia__ddp *d);
int glia__ddp_n_buckets(const struct glia__ddp *d);
/* Checks that every rank built the same model from the same point (the step a --resume gave),
 * then broadcasts rank 0's weights and buffers. */
glia_status glia__ddp_start(struct glia_model *m, struct glia__ddp *d);
/* Checks that every rank of m's job runs with the same settings (core/ddp_check.c); on every rank
 * a difference fails with one line naming the first differing key, its two values and the ranks. */
glia_status glia__ddp_check_settings(struct glia_model *m);
/* Per-rank key i of that check (the keys it skips): its section, and its name in *key; NULL past
 * the last. */
const char *glia__ddp_per_rank_key(int i, const char **key);
/* Before a backward: reduce says whether its gradients are all-reduced (the last micro-step). */
void glia__ddp_begin(struct glia__ddp *d, bool reduce);
/* After node's backward: starts the buckets whose last gradient it wrote. */
glia_status glia__ddp_node_done(struct glia_model *m, struct glia__ddp *d, int node);
/* Before the optimizer: starts what is left, then waits for every bucket. */
glia_status glia__ddp_finish(struct glia_model *m, struct glia__ddp *d);
/* Seconds the host waited for buckets since the last call. */
/* Waits on the host until the last step's bucket all-reduces are done, and fails if any failed or
 * timed out (a checkpoint is written only from weights updated with fully reduced gradients). */
glia_status glia__ddp_settle(struct glia__ddp *d);
double glia__ddp_take_wait(struct glia__ddp *d);

#endif
