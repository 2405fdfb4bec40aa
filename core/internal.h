/* core/internal.h — libglia's private structures and functions shared between core files.
 * Not installed and not part of the SDK: plugins see only include/glia. */
#ifndef GLIA_CORE_INTERNAL_H
#define GLIA_CORE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "glia/glia.h"

#define GLIA__ERRMSG_MAX 1024
#define GLIA__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* The bytes of struct `type` up to the end of its member `field`: what a struct_size must cover for it. */
#define GLIA__END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
/* The same for a transport's ops. */
#define GLIA__HAS_COMM_SLOT(ops, f) \
    ((ops)->struct_size >= offsetof(struct glia_comm_ops, f) + sizeof((ops)->f) && (ops)->f)

/* ---- context and registry (core/context.c, core/plugin.c) ---- */

#define GLIA__MAX_STATE GLIA_OPTIMIZER_MAX_STATE  /* an optimizer's state arrays (glia_optimizer_type.n_state) */

struct glia__plugin {
    char *name;
    char *path;
    void *handle;                            /* dlopen handle; NULL for built-ins */
    const struct glia_plugin_desc *desc;
};

struct glia__feature {
    int kind;                                /* GLIA__FEAT_* */
    const void *ops;
    int plugin;                              /* index into ctx->plugins; -1 built-in */
};
enum { GLIA__FEAT_TYPE = 1, GLIA__FEAT_KERNEL, GLIA__FEAT_OPTIMIZER, GLIA__FEAT_OPT_KERNEL, GLIA__FEAT_BACKEND,
       GLIA__FEAT_COMM };
/* The name a feature is looked up by (layer type, optimizer, backend or transport name; a kernel's
 * type or optimizer). */
const char *glia__feature_name(const struct glia__feature *f);

struct glia_registry {
    struct glia_context *ctx;
    int plugin;                              /* who is registering */
};

struct glia_context {
    char error[GLIA__ERRMSG_MAX];
    FILE *log;
    enum glia_log_level level;
    struct glia__plugin *plugins;
    int n_plugins, cap_plugins;
    struct glia__feature *features;
    int n_features, cap_features;
    char **paths;                            /* added search dirs */
    int n_paths;
    struct glia_backend **backends;          /* opened devices (any number: DataParallel on 8 GPUs opens 9) */
    int n_backends, cap_backends;
    struct glia_comm **comms;                /* opened communicators, closed last first */
    int n_comms, cap_comms;
};

/* The layer type `name`, or NULL. */
const struct glia_layer_type *glia__find_type(struct glia_context *ctx, const char *name);
/* The kernel `impl` of layer type `type` (the first of any impl when impl is NULL), or NULL. */
const struct glia_kernel *glia__find_kernel(struct glia_context *ctx, const char *type, const char *impl);
/* The first registered kernel of layer type `type` that runs on device type t, or NULL. */
const struct glia_kernel *glia__find_kernel_for(struct glia_context *ctx, const char *type, enum glia_device_type t);
/* The name of the plugin that registered ops (of any feature), or "libglia" for a built-in one. */
const char *glia__ops_plugin(const struct glia_context *ctx, const void *ops);
/* glia__section_misread for the create of layer l or optimizer o from s: names the type or optimizer and its plugin. */
glia_status glia__layer_misread(const struct glia_layer *l, const struct glia_section *s);
glia_status glia__optimizer_misread(const struct glia_optimizer *o, const struct glia_section *s);
/* Writes the registered kernel (impl) names of a layer type, comma separated, into buf; returns their count. */
int glia__layer_impls(struct glia_context *ctx, const char *type, char *buf, size_t n);
/* The optimizer `name`, or NULL. */
const struct glia_optimizer_type *glia__find_optimizer_type(struct glia_context *ctx, const char *name);
/* The kernel of optimizer `name` for device type t (any device when t < 0), or NULL. */
const struct glia_optimizer_kernel *glia__find_optimizer_kernel(struct glia_context *ctx, const char *name, int t);
const struct glia_backend_ops *glia__find_backend(struct glia_context *ctx, enum glia_device_type t);
/* The registered transport `name`, or NULL. */
const struct glia_comm_ops *glia__find_comm(struct glia_context *ctx, const char *name);
/* Closes every open communicator (core/comm.c). */
void glia__comms_close(struct glia_context *ctx);
/* Names of all registered layer types / optimizers (for "did you mean"); returns count. */
int glia__feature_names(struct glia_context *ctx, int kind, const char **names, int max);
/* Registers the CPU backend (built into libglia). */
glia_status glia__cpu_backend_register(struct glia_context *ctx);
/* The built-in "self" transport (core/comm_self.c): one process, rank 0 of 1. */
glia_status glia__self_comm_register(struct glia_context *ctx);
/* The job's size as the launcher that started this process says (mpirun, srun, torchrun-style
 * WORLD_SIZE); 1 when none did. */
int glia__launcher_world(void);
/* Blocking all-reduce of count values of dt in HOST memory p over c, whatever memory c's
 * transport takes (a transport of device memory only gets a copy on c's backend). */
glia_status glia__comm_all_reduce_host(struct glia_comm *c, void *p, size_t count, enum glia_dtype dt,
                                       enum glia_reduce_op op);
/* The same for a broadcast from rank root. */
glia_status glia__comm_broadcast_host(struct glia_comm *c, void *p, size_t count, enum glia_dtype dt, int root);
void glia__backends_close(struct glia_context *ctx);
/* A view of t's storage of another dtype (activations of f16/bf16 in the f32 activation block): from byte_offset after
 * t->data (a multiple of dtype's size), shaped and laid out as glia_tensor_view_as's. *out is (owned). */
glia_status glia__tensor_view_typed(struct glia_tensor *t, size_t byte_offset, enum glia_dtype dtype,
                                    const struct glia_shape *shape, enum glia_memory_format f, struct glia_tensor **out);
/* t's n values (its element count; f32, f16 or bf16, dense) into dst as floats: the logits the host reads of a model
 * whose loss takes half logits. GLIA_EINVAL for another count or type. */
glia_status glia__tensor_to_host_f32(const struct glia_tensor *t, float *dst, size_t n);
/* Whether backend b queues its work (a CUDA stream) rather than running each call to its end (the CPU): then
 * batches upload during the step before theirs, and the loss is read a step late. */
bool glia__backend_queues(struct glia_backend *b);
/* [runtime] nvtx: whether backend b names ranges for a profiler (its trace group); a named range opened and closed on
 * it (no-ops without the group). */
bool glia__backend_can_trace(const struct glia_backend *b);
void glia__range_push(struct glia_backend *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void glia__range_pop(struct glia_backend *b);
/* The backend's params group's pass_begin over the parameter arena [params, params + bytes) (NULL: none), where it has
 * one (ABI 2.6). */
glia_status glia__backend_pass_begin(struct glia_backend *b, const void *params, size_t bytes);
/* Loads the CUDA backend plugin (cuda.so) unless a CUDA backend is registered; on failure the
 * context error says why (not built, or the probe's refusal). */
glia_status glia__load_cuda(struct glia_context *ctx);
void glia__plugins_unload(struct glia_context *ctx);
/* The search folders in order, comma separated, into buf (what a plugin looked up by name was
 * looked for in). */
void glia__plugin_searched(struct glia_context *ctx, char *buf, size_t n);
/* The plugin file name (without ".so") in the search folders nearest to word, into out, for a
 * "did you mean": read from the folders' listings, nothing is loaded. False when none is near. */
bool glia__plugin_file_near(struct glia_context *ctx, const char *word, char *out, size_t n);
/* The file a loaded plugin came from, or NULL when no plugin of that name is loaded. */
const char *glia__plugin_path(struct glia_context *ctx, const char *name);
/* Whether a value naming a plugin names its file (it has a '/' or ends in ".so", as
 * glia_plugin_load reads it) rather than a name looked up in the search folders. */
bool glia__plugin_is_file(const char *name_or_path);
/* A plugin's name from its name or file: the file name without ".so", into out (cut at n - 1
 * characters, never overrun). */
void glia__plugin_base_name(const char *path, char *out, size_t n);

/* ---- configuration (core/config.c) ---- */

/* The longest line of a model file, and the longest --set, in characters (line ending excluded);
 * a longer one is an error, so reading never holds more than this of a file that has no newline. */
#define GLIA__CONFIG_LINE_MAX 65536
/* The keys of core section `section` ("runtime", "data", ...; "layer": the keys every layer section has), or NULL
 * (core/model.c). */
const struct glia_key *glia__core_schema(const char *section);

struct glia__entry {
    char *key;
    char *value;
    int line;                /* 0 when set from the command line */
    char *origin;            /* "--set train.epochs=1" when from the command line, else NULL */
};

#define GLIA__MAX_SCHEMAS 4

struct glia_section {
    struct glia_config *cfg;
    char *name;
    int line;                            /* line of the [header]; 0 if made by --set or core */
    char *origin;                        /* the --set that made it ("--set fc.type=linear"), else NULL */
    struct glia__entry *entries;
    int n_entries, cap_entries;
    const struct glia_key *schemas[GLIA__MAX_SCHEMAS];  /* set by glia__section_validate */
    int n_schemas;
    char **list_items;                   /* storage for glia_section_list (owned) */
    int n_list_items;
    /* the first getter call that could not be answered (a key its schemas do not declare, a getter of another type,
     * a default that does not parse): what it asked, and the key; "" when none (glia__section_misread) */
    char misread[192];
    char misread_key[64];
};

struct glia_config {
    struct glia_context *ctx;
    char *path;                          /* file name used in messages */
    struct glia_section **sections;
    int n_sections, cap_sections;
};

/* The section named `name`, or NULL. */
struct glia_section *glia__config_find(struct glia_config *cfg, const char *name);
/* The effective value of key k of validated section s as text that is the same wherever the value
 * is: integers and floats printed again (0.10 is 0.1), booleans on or off, list items trimmed and
 * joined by ", ", other text as written. *out (owned) is NULL when the key is neither written nor
 * defaulted. */
glia_status glia__section_canonical(const struct glia_section *s, const struct glia_key *k, char **out);
/* The section named `name`, created empty (line 0) if absent. NULL only on ENOMEM. */
struct glia_section *glia__config_section(struct glia_config *cfg, const char *name);
/* A section of cfg's file that is not in cfg (a graph pass's layer; line: where its messages
 * point), or NULL when out of memory; free it with glia__section_free. */
struct glia_section *glia__section_new(struct glia_config *cfg, const char *name, int line);
void glia__section_free(struct glia_section *s);

/* Destroys layer l (its ops' destroy, when created) and frees its parameters and buffers, which
 * it leaves empty. */
void glia__layer_release(struct glia_layer *l, bool created);
/* Creates layer l (its type and kernel set) from s, as glia/layer.h promises: allocates l->attrs, runs the type's
 * create, then allocates l->state and runs the kernel's prepare. On failure nothing is owed (what the create or prepare
 * left is undone here, including the type's destroy after a create that succeeded) and *created is false; a create
 * that read s with a getter that could not answer fails too (glia__layer_misread), even when it returned GLIA_OK. */
glia_status glia__layer_create(struct glia_layer *l, struct glia_section *s, const struct glia_shape *in, int n_in,
                               bool *created);
/* *o = optimizer `type` with `kernel`, created from s (ctx: its context), as glia/optimizer.h promises: after a
 * failure (also a create that read s wrongly) *o is zero and nothing is owed. */
glia_status glia__optimizer_create(struct glia_optimizer *o, const struct glia_optimizer_type *type,
                                   const struct glia_optimizer_kernel *kernel, struct glia_context *ctx,
                                   struct glia_section *s);
/* Undoes a successful glia__optimizer_create (nothing for a zero *o). */
void glia__optimizer_release(struct glia_optimizer *o);
/* A path that key of s gives, as an owned string: relative to the INI file's folder when written in the file,
 * to the working directory when --set gave it (core/config.c). */
char *glia__config_path(const struct glia_section *s, const char *key, const char *value);
/* The entry for key in s, or NULL. */
const struct glia__entry *glia__section_entry(const struct glia_section *s, const char *key);
/* Check every entry of s against the union of the given schemas: unknown keys (with a
 * "did you mean"), values that do not parse or are out of range, missing required keys.
 * On success the schemas are remembered for the getters. On failure the context error is
 * one line naming file:line, [section] and key. */
glia_status glia__section_validate(struct glia_section *s, const struct glia_key *const *schemas,
                                   int n_schemas);
/* A plugin call (create) read s with a getter that could not answer (a key its schemas do not declare, the getter of
 * another type, a default that does not parse): GLIA_EPLUGIN with one line naming file:line, [section], the key, who
 * (the layer type or optimizer and its plugin) and what it asked; else GLIA_OK. */
glia_status glia__section_misread(const struct glia_section *s, const char *who);
/* Forgets the mark, before a plugin call that reads s. */
void glia__section_misread_clear(struct glia_section *s);
/* The candidate nearest to word by edit distance if it is near enough, else NULL. */
const char *glia__did_you_mean(const char *word, const char *const *candidates, int n);
/* "file:line: " (or "--set a.b=c: ") prefix for key in s (key NULL: the section header). */
void glia__where(const struct glia_section *s, const char *key, char *buf, size_t n);
/* An allocation that a configuration value scales failed (or cannot be asked for): records
 * "WHERE: WHAT need B bytes (H): cannot allocate (WHY)", WHERE as glia_section_error names s and
 * key, WHAT from fmt, B the bytes, H them readable ("365.2 GB"), WHY the context's message when it
 * has one (the backend's reason: clear it before the allocation), and returns GLIA_ENOMEM. */
glia_status glia__alloc_error(const struct glia_section *s, const char *key, double bytes, const char *fmt, ...)
    GLIA_PRINTF(4, 5);

/* ---- guard values (core/guard.c) ----
 * The gradient checker and [runtime] debug_checks surround every tensor a layer call writes with GLIA__GUARD floats on
 * each side, which the tensor's allocation leaves free (the activation plan, the arenas and the checker's own tensors
 * do): glia__guard_fill writes guard values there before the call, glia__guard_check reads them back after it and names
 * the layer and tensor that a write reached, glia__guard_clear puts zeros back (an arena's padding must stay zero). */
#define GLIA__GUARD 256         /* floats on each side (a multiple of GLIA__ARENA_ALIGN: tensors stay aligned) */
#define GLIA__GUARD_TEXT 96
struct glia__guarded {
    struct glia_tensor *t;              /* (borrowed) */
    char role[GLIA__GUARD_TEXT];        /* in messages: "its output", "the gradient of its parameter 'weight'" */
    char name[GLIA__GUARD_TEXT];        /* "out", "dx", "weight.grad" */
};
/* What layer l's forward writes (out, its buffers) into g (1 + l->n_buffers entries); returns how many. */
int glia__guard_forward(const struct glia_layer *l, struct glia_tensor *out, struct glia__guarded *g);
/* What its backward writes (the non-NULL din, its parameters' gradients) into g (n_in + l->n_params entries). */
int glia__guard_backward(const struct glia_layer *l, struct glia_tensor *const *din, int n_in, struct glia__guarded *g);
glia_status glia__guard_fill(const struct glia__guarded *g, int n);
glia_status glia__guard_clear(const struct glia__guarded *g, int n);
/* GLIA_EPLUGIN when call ("forward", "backward") of l reached a guard: one line naming s's file:line and [section],
 * how far the write went, the layer and the tensor with its shape. */
glia_status glia__guard_check(const struct glia_layer *l, const struct glia_section *s, const char *call,
                              const struct glia__guarded *g, int n);

/* ---- random numbers (core/rng.c) ---- */

struct glia_rng {
    uint64_t s[4];
};
void glia__rng_seed(struct glia_rng *r, uint64_t seed);
uint64_t glia__rng_next(struct glia_rng *r);
double glia__rng_uniform(struct glia_rng *r);          /* [0, 1) */
double glia__rng_normal(struct glia_rng *r);           /* N(0, 1) */
uint64_t glia__hash_str(uint64_t h, const char *s);    /* FNV-1a step */
/* Fisher-Yates permutation of 0..n-1 from seed. */
void glia__permutation(int64_t *perm, int64_t n, uint64_t seed);

/* ---- data (core/data_image.c, core/data_tokens.c) ---- */

#define GLIA__MAX_CHANNELS 3   /* image channels a data set may have (IDX: 1, CIFAR: 3) */

/* A classification set held in memory as loaded: images (u8 pixels, planar channels) or, for
 * format = tokens, variable-length sequences of token ids. */
struct glia__dataset {
    int64_t n;            /* samples */
    int channels;         /* images: 1 (IDX) or 3 (CIFAR); tokens: 1 */
    int rows, cols;       /* images: a sample is channels x rows x cols; tokens: rows = 1, cols = the
                             longest sample (the padded length a batch can reach) */
    uint8_t *images;      /* n * channels * rows * cols (owned); NULL for tokens and float images */
    float *fimages;       /* format = npy of float32 images: n * channels * rows * cols as the file holds them, normalized
                             by (x - mean) / std without the /255 of bytes (owned); NULL otherwise */
    bool folder;          /* format = folder: each sample decoded from files[i] when a batch is made */
    bool random_crop;     /* folder, training set: RandomResizedCrop (else the evaluation's resize and center crop) */
    char **files;         /* folder: n_files image paths (owned), the first n used */
    int64_t n_files;
    char **class_names;   /* folder, training set: n_classes folder names, sorted (owned); NULL otherwise */
    int32_t *labels;      /* n (owned) */
    int n_classes;        /* max label + 1 */
    char *classes_why;    /* where n_classes comes from, for messages: "label 9 at index 17 of PATH",
                             "PATH:18", "CIFAR-10 has 10 classes" (owned; NULL when out of memory) */
    bool tokens;          /* format = tokens */
    int64_t *offsets;     /* tokens: sample i is ids[offsets[i] .. offsets[i+1]) (n + 1, owned) */
    int32_t *ids;         /* tokens: every sample's ids, 1 .. vocab-1; 0 is padding (owned) */
    /* format = token_stream, bytes (tokens is set too): one stream of tokens that samples are windows of; a sample
     * is cols = T input ids and the T next ids as its labels; n is the windows an epoch takes */
    bool stream;
    uint16_t *tok;        /* n_tok tokens, every file's in order (owned) */
    int64_t n_tok;
    int64_t *shard_end;   /* n_shards: where each file's tokens end in tok; no window crosses one (owned) */
    int n_shards;
    bool random_windows;  /* windows start anywhere, drawn per epoch; else sequential, non-overlapping */
};

/* Length of sample i of a token set. */
static inline int64_t glia__sample_len(const struct glia__dataset *d, int64_t i)
{
    return d->offsets[i + 1] - d->offsets[i];
}

/* A data file opened for reading (core/zfile.c): raw, or gzip of one or more members, decompressed
 * as it is read. Every error is one line naming the file (opening, reading, corrupt or truncated
 * gzip data, bytes after the gzip data that are not another member). */
struct glia__zfile;
glia_status glia__zfile_open(struct glia_context *ctx, const char *path, struct glia__zfile **out);
/* Reads up to want bytes of data into buf; *got < want only at the end of the data. */
glia_status glia__zfile_read(struct glia__zfile *f, void *buf, size_t want, size_t *got);
void glia__zfile_close(struct glia__zfile *f);

/* Load a token file (raw or gzip): one sample per line, the label then the sample's token ids,
 * all decimal integers separated by blanks; blank lines and lines starting with '#' are
 * skipped. Ids are 1 .. vocab-1 (0 is the padding id); samples longer than max_length
 * (> 0) keep their first max_length ids; limit > 0 keeps the first `limit` samples. Bad lines
 * give one line naming file:line and what is wrong. */
glia_status glia__tokens_load(struct glia_context *ctx, const char *path, int64_t vocab, int64_t max_length,
                              int64_t limit, struct glia__dataset *out);

/* Load the files paths[0..n_paths) in order as one token stream (a shard per file): llm.c token files (a header
 * of 256 little-endian int32: magic 20240520, version 1, the token count; then that many little-endian uint16
 * tokens, each below vocab when vocab > 0), or with `bytes` any files, a token per byte. A bad file gives one line
 * naming it and what is wrong. out->n and out->cols are left 0 (glia__stream_count, the caller's choice). */
glia_status glia__stream_load(struct glia_context *ctx, const char *const *paths, int n_paths, bool bytes,
                              int64_t vocab, struct glia__dataset *out);
/* Moves the last `fraction` of all's tokens into *tail (its shards those of the files they came from) and keeps the
 * rest in all. GLIA_ENOMEM (no message) or GLIA_OK. */
glia_status glia__stream_split(struct glia__dataset *all, double fraction, struct glia__dataset *tail);
/* Windows of T + 1 tokens d's shards hold: sequential ones (starting 0, T, 2T, ... in each shard), or every start. */
int64_t glia__stream_count(const struct glia__dataset *d, int64_t T, bool sequential);
/* The d->n window starts of an epoch of d (T = d->cols) into starts: random ones, uniform over every start in every
 * shard, drawn from (seed, epoch, index); else the sequential windows in order (again from the first when d->n is
 * more). Pure. */
void glia__stream_starts(const struct glia__dataset *d, bool random, uint64_t seed, int epoch, int64_t *starts);
/* The windows at starts[0..n): x(n, T) their first T tokens, y(n, T) the T after the first (the next tokens). */
void glia__stream_fill(const struct glia__dataset *d, const int64_t *starts, int64_t n, int32_t *x, int32_t *y);

/* Load an IDX image file (magic 0x00000803) and label file (0x00000801), raw or gzip.
 * limit > 0 keeps only the first `limit` samples. Missing, unreadable, truncated or
 * inconsistent files give one line naming the file and what is wrong. */
struct glia__norm;
/* [data] format = folder (core/data_folder.c): the ImageFolder tree at dir, every file's header checked; classes_of
 * NULL: the training set, whose sorted folder names are the classes; else the test set, its folders those classes.
 * keep > 0: the first keep samples. */
glia_status glia__folder_load(struct glia_context *ctx, const char *dir, int size, const struct glia__dataset *classes_of,
                              int64_t keep, struct glia__dataset *out);
/* Sample idx of a folder set decoded into x (3, size, size): random, training's crop (RandomResizedCrop) and, with
 * flip_ok, its flip, drawn from (seed, epoch, idx); else evaluation's resize and center crop; normalized by nm. False
 * (x zeros, why naming the file) when the file cannot be decoded. */
bool glia__folder_sample(const struct glia__dataset *d, int64_t idx, bool random, bool flip_ok, uint64_t seed,
                         int epoch, const struct glia__norm *nm, float *x, char *why, size_t n);
/* The crop of a w x h image the sample takes (x0, y0, width, height in pixels of the image) and its flip. */
void glia__folder_crop(int w, int h, int size, bool random, uint64_t seed, int epoch, int64_t idx, double rect[4],
                       bool *flip);
/* [data] format = npy: the images and labels files (core/data_npy.c); nhwc: 4-D images are (n, h, w, c); keep > 0:
 * the first keep samples. */
glia_status glia__npy_load(struct glia_context *ctx, const char *images, const char *labels, bool nhwc, int64_t keep,
                           struct glia__dataset *out);
glia_status glia__idx_load(struct glia_context *ctx, const char *images_path,
                           const char *labels_path, int64_t limit, struct glia__dataset *out);
/* Load CIFAR binary batch files (raw or gzip) in the order given: records of a label byte
 * (CIFAR-10) or a coarse and a fine label byte (cifar100), then 3072 bytes of 3x32x32 planar RGB
 * pixels. cifar100 keeps the fine labels (0..99) or, with coarse, the coarse ones (0..19);
 * n_classes is 10, 100 or 20 whatever labels occur. limit > 0 keeps the first `limit` records of
 * the files taken together; every file is still read whole and checked. A file that is not a
 * whole number of records, or a label out of range, gives one line naming the file and record. */
glia_status glia__cifar_load(struct glia_context *ctx, const char *const *paths, int n_paths, bool cifar100,
                             bool coarse, int64_t limit, struct glia__dataset *out);
void glia__dataset_free(struct glia__dataset *d);

/* Per-channel normalization of u8 pixels: x = (pixel/255 - mean[c]) / std[c]. */
struct glia__norm {
    float mean[GLIA__MAX_CHANNELS], std[GLIA__MAX_CHANNELS];
};
/* Gather samples idx[0..n) into x (n, channels, rows, cols), normalized by nm, and y. */
void glia__dataset_gather(const struct glia__dataset *d, const int64_t *idx, int64_t n,
                          const struct glia__norm *nm, float *x, int32_t *y);

/* ---- time ---- */
double glia__now(void);   /* monotonic seconds */

/* ---- string and file helpers (core/util.c) ---- */
/* Whether t is a floating-point activation type: f32, f16 or bf16 (what glia_tensor_convert and the backend's
 * convert take). */
bool glia__float_dtype(enum glia_dtype t);
char *glia__strdup(const char *s);
char *glia__strndup(const char *s, size_t n);
char *glia__trim(char *s);  /* in place */
/* mkdir -p of the folders on the way to path's last '/' ("a/b/c.txt" and "a/b/" make a and a/b);
 * 0, or the errno of the first folder that could not be made. */
int glia__mkdir_parents(const char *path);
/* bytes in decimal units, as the model summary writes them: "512 bytes", "6.2 GB". */
void glia__bytes_str(double bytes, char *buf, size_t n);
/* A new string formatted as printf does (owned); NULL when out of memory. */
char *glia__printf(const char *fmt, ...) GLIA_PRINTF(1, 2);
/* Grow *p (of *cap elements of size sz) to hold at least need elements. */
glia_status glia__grow(void **p, int *cap, int need, size_t sz);

#endif
