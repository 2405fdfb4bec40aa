/* core/model.c — builds a model from a validated INI: core schemas, plugin resolution, the
 * layer graph with shape inference, the flat parameter arena and its seeded init, the summary.
 * Not the training loop (core/train.c) and not the INI parser (core/config.c). */
#include <ctype.h>
#include <glob.h>
#include <libgen.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "model_internal.h"

/* ---- core schemas ---- */

static const struct glia_key runtime_keys[] = {
    GLIA_KEY("device", GLIA_KEY_STRING, "auto", "auto | cpu | cuda | cuda:N (auto: cuda when usable, else cpu)"),
    GLIA_KEY("seed", GLIA_KEY_INT, "1", "seed of weight init, shuffling and random layers", .min = 0, .max = 9.2e18),
    GLIA_KEY("threads", GLIA_KEY_INT, "0", "CPU threads (0: OpenMP default, OMP_NUM_THREADS)", .min = 0, .max = 4096),
    GLIA_KEY("memory_format", GLIA_KEY_ENUM, "contiguous",
             "layout of 4-D activations: contiguous (NCHW) or channels_last (NHWC)", .choices = "contiguous|channels_last"),
    GLIA_KEY("precision", GLIA_KEY_ENUM, "fp32",
             "GEMM/convolution math: fp32, tf32, bf16 or fp16 (fp32 master weights; fp16 scales the loss); CUDA only "
             "beyond fp32", .choices = "fp32|tf32|bf16|fp16"),
    GLIA_KEY("cudnn_benchmark", GLIA_KEY_BOOL, "on",
             "time the convolution algorithms once per shape and keep the fastest (off: heuristics); CUDA only"),
    GLIA_KEY("workspace_mb", GLIA_KEY_INT, "1024", "scratch memory a layer may use for a faster algorithm (MiB)",
             .min = 0, .max = 1 << 20),
    GLIA_KEY("deterministic", GLIA_KEY_BOOL, "off",
             "only algorithms that give the same bits every run: cuDNN convolution algorithms cuDNN marks "
             "deterministic, the CUDA embedding's weight gradient summed in a fixed order (with cudnn_benchmark = off "
             "a run repeats bit for bit); the CPU is deterministic either way"),
    GLIA_KEY("cuda_graph", GLIA_KEY_BOOL, "off",
             "replay each training batch shape's forward and backward from a CUDA graph (one launch) once it has run "
             "once; CUDA only, not with [distributed] mode"),
    GLIA_KEY("debug_checks", GLIA_KEY_BOOL, "off",
             "surround every tensor a layer call writes (outputs, input and parameter gradients, buffers) with guard "
             "values and stop, naming the layer and the tensor, when a call wrote outside one; slower"),
    GLIA_KEY_END};

static const struct glia_key data_keys[] = {
    GLIA_KEY("format", GLIA_KEY_ENUM, "idx",
             "dataset files: idx (images), tokens (lines of a label then token ids), cifar10 or cifar100 (binary batches)",
             .choices = "idx|tokens|cifar10|cifar100"),
    GLIA_KEY("train_images", GLIA_KEY_STRING, NULL, "format = idx: IDX image file for training (raw or .gz); required"),
    GLIA_KEY("train_labels", GLIA_KEY_STRING, NULL, "format = idx: IDX label file for training; required"),
    GLIA_KEY("test_images", GLIA_KEY_STRING, NULL, "format = idx: IDX image file for evaluation; required"),
    GLIA_KEY("test_labels", GLIA_KEY_STRING, NULL, "format = idx: IDX label file for evaluation; required"),
    GLIA_KEY("train", GLIA_KEY_STRING, NULL,
             "format = tokens: token file for training (raw or .gz); cifar10, cifar100: comma-separated batch files; required"),
    GLIA_KEY("test", GLIA_KEY_STRING, NULL, "format = tokens, cifar10, cifar100: the evaluation file(s); required"),
    GLIA_KEY("coarse_labels", GLIA_KEY_BOOL, "off", "format = cifar100: train on the 20 coarse labels instead of the 100 fine ones"),
    GLIA_KEY("vocab", GLIA_KEY_INT, "0", "format = tokens: token ids are 1 .. vocab-1 (0 pads); required", .min = 0,
             .max = 1 << 30),
    GLIA_KEY("max_length", GLIA_KEY_INT, "0", "format = tokens: keep the first N ids of longer samples (0: all)", .min = 0,
             .max = 1 << 24),
    GLIA_KEY("pad_to_multiple", GLIA_KEY_INT, "1", "format = tokens: a batch is padded to a length that is a multiple of N",
             .min = 1, .max = 1 << 16),
    GLIA_KEY("group_by_length", GLIA_KEY_BOOL, "off",
             "format = tokens: batches of samples of similar lengths (runs of group_size batches sorted by length, "
             "then the batches shuffled); evaluation sorted by length"),
    GLIA_KEY("group_size", GLIA_KEY_INT, "50", "group_by_length: batches per sorted run", .min = 1, .max = 1 << 20),
    GLIA_KEY("batch_size", GLIA_KEY_INT, "64", "training mini-batch size", .min = 1, .max = 1 << 20),
    GLIA_KEY("test_batch_size", GLIA_KEY_INT, "1000", "evaluation batch size", .min = 1, .max = 1 << 20),
    GLIA_KEY("shuffle", GLIA_KEY_BOOL, "on", "reshuffle training samples every epoch (seed + epoch)"),
    GLIA_KEY("mean", GLIA_KEY_LIST, NULL,
             "normalization x = (pixel/255 - mean) / std: one value, or one per channel (default: the data set's, "
             "idx 0.2860 (Fashion-MNIST), cifar10 0.4914, 0.4822, 0.4465, cifar100 0.5071, 0.4865, 0.4409)"),
    GLIA_KEY("std", GLIA_KEY_LIST, NULL,
             "normalization divisor: one value, or one per channel (default: idx 0.3530, cifar10 0.2470, 0.2435, 0.2616, "
             "cifar100 0.2673, 0.2564, 0.2762)"),
    GLIA_KEY("workers", GLIA_KEY_INT, "2", "loader threads (0: load in the training thread)", .min = 0, .max = 256),
    GLIA_KEY("prefetch", GLIA_KEY_INT, "2", "batches each worker prepares ahead", .min = 1, .max = 1024),
    GLIA_KEY("persistent_workers", GLIA_KEY_BOOL, "on", "keep loader threads alive between epochs"),
    GLIA_KEY("pin_memory", GLIA_KEY_BOOL, "on", "page-locked batch buffers, copied to the device on a copy stream during the previous step (no effect on the CPU backend)"),
    GLIA_KEY("drop_last", GLIA_KEY_BOOL, "off", "drop the last training batch when it is smaller than batch_size"),
    GLIA_KEY("random_crop_padding", GLIA_KEY_INT, "0", "augment: random crop from the image padded by N zero pixels (0: off)", .min = 0, .max = 1024),
    GLIA_KEY("random_flip", GLIA_KEY_BOOL, "off", "augment: horizontal flip with probability 0.5"),
    GLIA_KEY("train_samples", GLIA_KEY_INT, "0", "use only the first N training samples (0: all)", .min = 0, .max = 1e12),
    GLIA_KEY("test_samples", GLIA_KEY_INT, "0", "use only the first N test samples (0: all)", .min = 0, .max = 1e12),
    GLIA_KEY_END};

static const struct glia_key train_keys[] = {
    GLIA_KEY("epochs", GLIA_KEY_INT, "1", "passes over the training set", .min = 1, .max = 1e9),
    GLIA_KEY("optimizer", GLIA_KEY_STRING, "sgd", "optimizer plugin; its keys go in [optimizer]"),
    GLIA_KEY("lr", GLIA_KEY_FLOAT, "0.01", "base learning rate", .min = 0, .max = 1e6),
    GLIA_KEY("schedule", GLIA_KEY_ENUM, "constant", "learning-rate schedule over epochs", .choices = "constant|step|cosine"),
    GLIA_KEY("gamma", GLIA_KEY_FLOAT, "0.1", "step: multiply lr by gamma every step_epochs epochs", .min = 0, .max = 1e6),
    GLIA_KEY("step_epochs", GLIA_KEY_INT, "1", "step: epochs between decays (StepLR step_size)", .min = 1, .max = 1e9),
    GLIA_KEY("min_lr", GLIA_KEY_FLOAT, "0", "cosine: the lr reached after the last epoch", .min = 0, .max = 1e6),
    GLIA_KEY("warmup_steps", GLIA_KEY_INT, "0", "linear warmup over the first N optimizer steps (lr * k/N)", .min = 0, .max = 1e12),
    GLIA_KEY("clip_grad_norm", GLIA_KEY_FLOAT, "0", "scale gradients so their global L2 norm is at most this (0: off)", .min = 0, .max = 1e30),
    GLIA_KEY("accumulate", GLIA_KEY_INT, "1", "micro-batches per optimizer step (gradients averaged)", .min = 1, .max = 1e6),
    GLIA_KEY("weight_decay_1d", GLIA_KEY_BOOL, "on", "off: the optimizer's weight_decay skips 1-D parameters (biases, "
             "normalization scales and shifts), as many recipes do"),
    GLIA_KEY("metrics", GLIA_KEY_STRING, NULL, "JSON-lines file, one object per epoch (--metrics overrides)"),
    GLIA_KEY("checkpoint_dir", GLIA_KEY_STRING, NULL, "write checkpoints here (every checkpoint_every steps and at the end; made with its parents)"),
    GLIA_KEY("checkpoint_every", GLIA_KEY_INT, "0", "optimizer steps between checkpoints (0: only at the end)", .min = 0, .max = 1e15),
    GLIA_KEY("checkpoint_keep", GLIA_KEY_INT, "2", "the folder's newest step checkpoints kept, whoever wrote them (older ones are deleted; final.ckpt stays)", .min = 1, .max = 1e6),
    GLIA_KEY("max_steps", GLIA_KEY_INT, "0", "stop after this many optimizer steps, with a checkpoint (0: no limit)", .min = 0, .max = 1e15),
    GLIA_KEY("log_every", GLIA_KEY_INT, "100", "steps between progress lines when not on a terminal", .min = 1, .max = 1e9),
    GLIA_KEY_END};

static const struct glia_key plugins_keys[] = {
    GLIA_KEY("path", GLIA_KEY_LIST, NULL, "extra plugin folders, searched first (relative to this file; each must exist)"),
    GLIA_KEY("load", GLIA_KEY_LIST, NULL,
             "plugins to load: a name (looked up in the plugin folders) or a .so file (relative to this file)"),
    GLIA_KEY_END};

static const struct glia_key graph_keys[] = {
    GLIA_KEY("drop_bias_before_norm", GLIA_KEY_BOOL, "on",
             "remove the bias of a layer whose output goes only into a normalization layer"),
    GLIA_KEY("fuse_pointwise", GLIA_KEY_ENUM, "auto",
             "run a chain of elementwise layers (relu, leaky_relu, sigmoid, tanh, gelu, add, dropout, pointwise) as one "
             "pointwise layer, and a batchnorm + relu as a batchnorm with activation = relu: auto (on for CUDA, where it "
             "saves kernels) | on | off", .choices = "auto|on|off"),
    GLIA_KEY("checkpoint_segments", GLIA_KEY_INT, "0",
             "activation checkpointing: cut the model into N segments; a training step keeps only each segment's last "
             "output and runs the rest of its forward again in backward (less memory, more compute; 0: off)",
             .min = 0, .max = GLIA__MAX_NODES),
    GLIA_KEY_END};

static const struct glia_key distributed_keys[] = {
    GLIA_KEY("mode", GLIA_KEY_ENUM, "none",
             "none | ddp: one process per device, started by mpirun or srun, gradients all-reduced in buckets during "
             "backward | dp: one process drives the devices listed in devices", .choices = "none|dp|ddp"),
    GLIA_KEY("transport", GLIA_KEY_STRING, "auto", "auto (nccl for a CUDA device, else mpi) | mpi | nccl | a transport plugin"),
    GLIA_KEY("bucket_mb", GLIA_KEY_FLOAT, "25", "ddp: gradient bucket size in MiB", .min = 1e-6, .max = 1e6),
    GLIA_KEY("first_bucket_mb", GLIA_KEY_FLOAT, "1", "ddp: size of the first bucket (the last layers' gradients), so "
             "communication starts early", .min = 1e-6, .max = 1e6),
    GLIA_KEY("timeout_s", GLIA_KEY_FLOAT, "300", "a collective not done after this long fails the run (a rank died or "
             "stalled)", .min = 0.01, .max = 1e9),
    GLIA_KEY("devices", GLIA_KEY_LIST, NULL, "dp: the devices one process drives, e.g. cuda:0, cuda:1 (N is cuda:N; "
             "cpu, cpu for tests)"),
    GLIA_KEY("rank_log", GLIA_KEY_STRING, NULL, "ddp: every rank writes its progress lines to this file; {rank} is "
             "replaced by the rank (relative to this file)"),
    GLIA_KEY_END};

static const struct glia_key layer_common_keys[] = {
    GLIA_KEY("type", GLIA_KEY_STRING, NULL, "layer type (a plugin feature)", .required = true),
    GLIA_KEY("inputs", GLIA_KEY_LIST, NULL, "input layers by name ('input' is the data); default: the previous layer"),
    GLIA_KEY("impl", GLIA_KEY_STRING, "auto", "implementation: auto or a registered impl (glia plugins)"),
    GLIA_KEY("weight_decay", GLIA_KEY_BOOL, "on", "off: the optimizer's weight_decay skips this layer's parameters "
             "(a PyTorch param group with weight_decay 0)"),
    GLIA_KEY_END};

static const char *const reserved[] = {"runtime", "data", "train", "optimizer", "plugins", "graph", "distributed"};

const struct glia_key *glia__core_schema(const char *section)
{
    if (!strcmp(section, "runtime")) return runtime_keys;
    if (!strcmp(section, "data")) return data_keys;
    if (!strcmp(section, "train")) return train_keys;
    if (!strcmp(section, "plugins")) return plugins_keys;
    if (!strcmp(section, "graph")) return graph_keys;
    if (!strcmp(section, "distributed")) return distributed_keys;
    if (!strcmp(section, "layer")) return layer_common_keys;
    return NULL;
}

static bool is_reserved(const char *name)
{
    for (size_t i = 0; i < GLIA__ARRAY_LEN(reserved); i++)
        if (!strcmp(reserved[i], name)) return true;
    return false;
}

/* ---- paths ---- */

/* A relative path written in the file is relative to the file's folder; one given by --set
 * is relative to the working directory. Returns an owned string. */
char *glia__config_path(const struct glia_section *s, const char *key, const char *value)
{
    const struct glia__entry *e = glia__section_entry(s, key);
    if (!value || value[0] == '/' || (e && e->origin) || !s->cfg->path) return glia__strdup(value);
    while (value[0] == '.' && value[1] == '/') value += 2 + strspn(value + 2, "/");  /* "./x": dir/x, not dir/./x */
    char *copy = glia__strdup(s->cfg->path);
    if (!copy) return NULL;
    const char *dir = dirname(copy);
    size_t n = strlen(dir) + strlen(value) + 2;
    char *out = malloc(n);
    if (out && !strcmp(value, ".")) snprintf(out, n, "%s", dir);
    else if (out) snprintf(out, n, "%s/%s", dir, value);
    free(copy);
    return out;
}

/* ---- plugins the file names ---- */

/* The feature a layer's type, [train] optimizer or [distributed] transport value names: the value,
 * or for a plugin file the plugin's name (its file name without ".so"), into buf. */
static const char *feature_of(const char *v, char *buf, size_t n)
{
    if (!v || !glia__plugin_is_file(v)) return v;
    glia__plugin_base_name(v, buf, n);
    return buf;
}

/* Loads the plugin that key's value names: a file is relative to the model file's folder (or to
 * the working directory when --set gave it; never looked up by dlopen), a name is looked up in
 * the search folders. A failure is the key's error. */
static glia_status load_named(struct glia_context *ctx, const struct glia_section *s, const char *key, const char *value)
{
    char *p = glia__plugin_is_file(value) ? glia__config_path(s, key, value) : glia__strdup(value);
    if (!p) return GLIA_ENOMEM;
    glia_status st = glia_plugin_load(ctx, p);
    free(p);
    if (!st) return GLIA_OK;
    char why[GLIA__ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", glia_context_error(ctx));
    return glia_section_error(s, key, st, "%s", why);
}

glia_status glia_config_load_plugins(struct glia_context *ctx, struct glia_config *cfg)
{
    struct glia_section *s = glia__config_section(cfg, "plugins");
    if (!s) return GLIA_ENOMEM;
    const struct glia_key *sch[] = {plugins_keys};
    glia_status st = glia__section_validate(s, sch, 1);
    if (st) return st;
    const char **items;
    int n = glia_section_list(s, "path", &items);
    for (int i = 0; i < n && !st; i++) {
        char *dir = glia__config_path(s, "path", items[i]);
        if (!dir) return GLIA_ENOMEM;
        struct stat sb;
        /* a folder that is not there is a typo or a step not done: searching on without it would
         * find another plugin of the same name, or none with a misleading message */
        if (stat(dir, &sb) != 0) st = glia_section_error(s, "path", GLIA_ENOTFOUND, "folder %s does not exist", dir);
        else if (!S_ISDIR(sb.st_mode)) st = glia_section_error(s, "path", GLIA_ENOTFOUND, "%s is not a folder", dir);
        else st = glia_plugin_add_path(ctx, dir);
        free(dir);
    }
    n = glia_section_list(s, "load", &items);
    for (int i = 0; i < n && !st; i++) st = load_named(ctx, s, "load", items[i]);
    return st;
}

/* [plugins], then each plugin file that a layer's type, [train] optimizer or [distributed]
 * transport names (all of them, whatever the run needs: a model file names its code up front). */
static glia_status setup_plugins(struct glia_model *m)
{
    glia_status st = glia_config_load_plugins(m->ctx, m->cfg);
    for (int i = 0; i < m->cfg->n_sections && !st; i++) {
        struct glia_section *s = m->cfg->sections[i];
        const char *key = !strcmp(s->name, "train") ? "optimizer" : !strcmp(s->name, "distributed") ? "transport"
                          : is_reserved(s->name)     ? NULL
                                                     : "type";
        const struct glia__entry *e = key ? glia__section_entry(s, key) : NULL;
        if (e && glia__plugin_is_file(e->value)) st = load_named(m->ctx, s, key, e->value);
    }
    return st;
}

/* ---- resolving features ---- */

/* The tail of the error line for an unknown feature `name` (a layer type or an optimizer: what):
 * the nearest known name, and where its plugin was looked for. Nothing is loaded for the hint:
 * it comes from the registered features, else from the .so file names in the search folders. */
static void unknown_why(struct glia_context *ctx, int kind, const char *what, const char *name, char *buf, size_t n)
{
    const char *names[256], *from = glia__plugin_path(ctx, name);
    char near[256] = "";
    const char *hit = glia__did_you_mean(name, names, glia__feature_names(ctx, kind, names, 256));
    if (hit) snprintf(near, sizeof near, "%s", hit);
    else if (!glia__plugin_file_near(ctx, name, near, sizeof near) || !strcmp(near, name)) near[0] = '\0';
    /* the hint first: a long folder list may be cut at the message's end */
    int k = near[0] ? snprintf(buf, n, "; did you mean '%s'?", near) : 0;
    if (k < 0 || (size_t)k >= n) return;
    if (from) {
        snprintf(buf + k, n - (size_t)k, " (plugin %s registers no %s '%s')", from, what, name);
    } else {
        char dirs[GLIA__ERRMSG_MAX];
        glia__plugin_searched(ctx, dirs, sizeof dirs);
        if (snprintf(buf + k, n - (size_t)k, " (no loaded plugin registers it, and there is no %s.so in %s)", name,
                     dirs) >= (int)(n - (size_t)k))
            glia_log(ctx, GLIA_LOG_DEBUG, "searched for %s.so in %s", name, dirs);  /* the whole list, cut above */
    }
}

/* The type and kernel a layer section names (its type =, its impl = or the model's device), loading the plugin
 * named like the type unless a loaded one registers the type already. */
static glia_status resolve_layer(struct glia_model *m, const struct glia_section *s, struct glia_layer *l)
{
    char fb[256];
    const char *type = feature_of(glia_section_str(s, "type"), fb, sizeof fb);
    const char *impl = glia_section_str(s, "impl");
    if (!glia__find_type(m->ctx, type)) {
        glia_status ls = glia_plugin_load(m->ctx, type);
        if (ls && ls != GLIA_ENOTFOUND) {  /* the plugin exists but was refused: say why */
            char why[GLIA__ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", glia_context_error(m->ctx));
            return glia_section_error(s, "type", ls, "%s", why);
        }
    }
    const struct glia_layer_type *t = glia__find_type(m->ctx, type);
    if (!t) {
        char why[GLIA__ERRMSG_MAX];
        unknown_why(m->ctx, GLIA__FEAT_TYPE, "layer type", type, why, sizeof why);
        return glia_section_error(s, "type", GLIA_ECONFIG, "unknown layer type '%s'%s", type, why);
    }
    const struct glia_kernel *k =
        strcmp(impl, "auto") ? glia__find_kernel(m->ctx, type, impl) : glia__find_kernel_for(m->ctx, type, m->device.type);
    char have[256], dev[32];
    glia__layer_impls(m->ctx, type, have, sizeof have);
    if (!k)
        return glia_section_error(s, "impl", GLIA_ECONFIG, "no kernel '%s' of layer type '%s' for device %s (available: %s)",
                                  impl, type, glia_device_str(m->device, dev, sizeof dev), have[0] ? have : "none");
    if (k->device_type != m->device.type)
        return glia_section_error(s, "impl", GLIA_ECONFIG, "impl '%s' of '%s' does not run on device %s",
                                  impl, type, glia_device_str(m->device, dev, sizeof dev));
    l->type = t;
    l->kernel = k;
    return GLIA_OK;
}

/* ---- building ---- */

/* The CUDA backend is the plugin cuda.so: loaded on demand; on a machine without a usable GPU its
 * probe refuses it. Returns GLIA_OK when a CUDA backend is registered, else the reason in why. */
static glia_status load_cuda(struct glia_model *m, char *why, size_t n)
{
    glia_status st = glia__load_cuda(m->ctx);
    if (st) snprintf(why, n, "%s", glia_context_error(m->ctx));
    return st;
}

/* Whether every layer type and the optimizer the file names has an impl for CUDA (loading their
 * plugins); if not, why not. */
static bool fits_cuda(struct glia_model *m, char *why, size_t n)
{
    for (int i = 0; i < m->cfg->n_sections; i++) {
        const struct glia__entry *t = glia__section_entry(m->cfg->sections[i], "type");
        if (is_reserved(m->cfg->sections[i]->name) || !t) continue;
        char fb[256];
        const char *type = feature_of(t->value, fb, sizeof fb);
        if (!glia__find_type(m->ctx, type)) glia_plugin_load(m->ctx, type);
        if (!glia__find_kernel_for(m->ctx, type, GLIA_DEVICE_CUDA)) {
            snprintf(why, n, "layer type '%s' of [%s] has no CUDA kernel", type, m->cfg->sections[i]->name);
            return false;
        }
    }
    struct glia_section *t = glia__config_find(m->cfg, "train");
    char fb[256];
    const char *name = t ? feature_of(glia_section_str(t, "optimizer"), fb, sizeof fb) : "sgd";
    if (!glia__find_optimizer_type(m->ctx, name)) glia_plugin_load(m->ctx, name);
    if (glia__find_optimizer_type(m->ctx, name) && !glia__find_optimizer_kernel(m->ctx, name, GLIA_DEVICE_CUDA)) {
        snprintf(why, n, "optimizer '%s' has no CUDA kernel", name);
        return false;
    }
    return true;
}

/* This process's index among the ranks on its machine, from the launcher (0 when there is none). */
static int launcher_local_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"};
    for (size_t i = 0; i < GLIA__ARRAY_LEN(vars); i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

static glia_status setup_device(struct glia_model *m)
{
    struct glia_section *s = glia__config_section(m->cfg, "runtime");
    if (!s) return GLIA_ENOMEM;
    const char *dev = glia_section_str(s, "device");
    char why[GLIA__ERRMSG_MAX];
    /* ddp: one process per GPU, so a bare "cuda" (or auto) means this rank's GPU on its machine */
    int index = m->dist == GLIA__DIST_DDP ? launcher_local_rank() : 0;
    if (m->forced) {
        m->device = m->forced_device;
    } else if (!strcmp(dev, "auto")) {
        /* CUDA when its backend loads and the device opens; else the CPU, saying why in one line. */
        struct glia_device cuda = {GLIA_DEVICE_CUDA, index};
        struct glia_backend *b;
        glia_status st = load_cuda(m, why, sizeof why);
        if (!st && (st = glia_backend_get(m->ctx, cuda, &b))) snprintf(why, sizeof why, "%s", glia_context_error(m->ctx));
        if (!st && !fits_cuda(m, why, sizeof why)) st = GLIA_EUNSUPPORTED;
        m->device = st ? (struct glia_device){GLIA_DEVICE_CPU, 0} : cuda;
        if (st && !(m->device_notice = malloc(strlen(why) + 40))) return GLIA_ENOMEM;
        if (st) sprintf(m->device_notice, "device = auto: using cpu (%s)", why);  /* said once the model builds */
        glia_context_clear_error(m->ctx);
    } else if (glia_device_parse(dev, &m->device)) {
        return glia_section_error(s, "device", GLIA_ECONFIG, "expected auto, cpu, cuda or cuda:N, got '%s'", dev);
    } else if (!strcmp(dev, "cuda")) {
        m->device.index = index;
    }
    if (m->device.type == GLIA_DEVICE_CUDA && load_cuda(m, why, sizeof why))
        return glia_section_error(s, "device", GLIA_EDEVICE, "%s", why);
    glia_status st = glia_backend_get(m->ctx, m->device, &m->backend);
    if (st) {
        snprintf(why, sizeof why, "%s", glia_context_error(m->ctx));
        return glia_section_error(s, "device", GLIA_EDEVICE, "%s", why);
    }
    int threads = (int)glia_section_int(s, "threads");
    if (threads > 0) omp_set_num_threads(threads);
    m->seed = (uint64_t)glia_section_int(s, "seed");
    m->format = strcmp(glia_section_str(s, "memory_format"), "channels_last") ? GLIA_CONTIGUOUS : GLIA_CHANNELS_LAST;
    const char *p = glia_section_str(s, "precision");
    struct glia_runtime_options o = {sizeof o, GLIA_PRECISION_FP32, glia_section_bool(s, "cudnn_benchmark"),
                                     (size_t)glia_section_int(s, "workspace_mb") << 20,
                                     glia_section_bool(s, "deterministic")};
    for (int i = GLIA_PRECISION_FP32; i <= GLIA_PRECISION_FP16; i++)
        if (!strcmp(p, glia_precision_name((enum glia_precision)i))) o.precision = (enum glia_precision)i;
    if ((st = glia_backend_configure(m->backend, &o))) {
        snprintf(why, sizeof why, "%s", glia_context_error(m->ctx));
        return glia_section_error(s, "precision", st, "%s", why);
    }
    m->precision = o.precision;
    m->debug_checks = glia_section_bool(s, "debug_checks");
    m->scaler = (struct glia__scaler){o.precision == GLIA_PRECISION_FP16 ? 65536.0 : 1.0, 0, 0};
    if (m->device.type == GLIA_DEVICE_CUDA && o.deterministic && o.cudnn_benchmark)
        glia_log(m->ctx, GLIA_LOG_INFO,
                 "[runtime] deterministic = on with cudnn_benchmark = on: every algorithm chosen is deterministic, but "
                 "the timing may choose others in another run; cudnn_benchmark = off repeats a run bit for bit");
    return GLIA_OK;
}

/* A dp replica computes on batches the model it copies hands it: same settings, no samples. */
static void borrow_data(struct glia_model *m, const struct glia_model *like)
{
    m->train = (struct glia__dataset){.n = like->train.n, .channels = like->train.channels, .rows = like->train.rows,
                                      .cols = like->train.cols, .n_classes = like->train.n_classes,
                                      .tokens = like->train.tokens};
    m->test = (struct glia__dataset){.n = like->test.n, .channels = like->test.channels, .rows = like->test.rows,
                                     .cols = like->test.cols, .n_classes = like->test.n_classes,
                                     .tokens = like->test.tokens};
    m->batch = like->batch;
    m->test_batch = like->test_batch;
    m->n_classes = like->n_classes;
    m->vocab = like->vocab;
    m->norm = like->norm;
    m->workers = 0;
}

/* [data] format: what the files are. */
enum data_format { FMT_IDX, FMT_TOKENS, FMT_CIFAR10, FMT_CIFAR100, N_FORMATS };
static const char *const format_names[N_FORMATS] = {"idx", "tokens", "cifar10", "cifar100"};
#define IMAGE_FORMATS (1u << FMT_IDX | 1u << FMT_CIFAR10 | 1u << FMT_CIFAR100)
#define CIFAR_FORMATS (1u << FMT_CIFAR10 | 1u << FMT_CIFAR100)

/* The keys of [data] that only some formats read (setting one for another format is an error),
 * and those some formats require. */
static const struct format_key {
    const char *key;
    unsigned formats, required;  /* masks of 1 << format */
} format_keys[] = {
    {"train_images", 1u << FMT_IDX, 1u << FMT_IDX},
    {"train_labels", 1u << FMT_IDX, 1u << FMT_IDX},
    {"test_images", 1u << FMT_IDX, 1u << FMT_IDX},
    {"test_labels", 1u << FMT_IDX, 1u << FMT_IDX},
    {"train", 1u << FMT_TOKENS | CIFAR_FORMATS, 1u << FMT_TOKENS | CIFAR_FORMATS},
    {"test", 1u << FMT_TOKENS | CIFAR_FORMATS, 1u << FMT_TOKENS | CIFAR_FORMATS},
    {"vocab", 1u << FMT_TOKENS, 1u << FMT_TOKENS},
    {"max_length", 1u << FMT_TOKENS, 0},
    {"pad_to_multiple", 1u << FMT_TOKENS, 0},
    {"group_by_length", 1u << FMT_TOKENS, 0},
    {"group_size", 1u << FMT_TOKENS, 0},
    {"coarse_labels", 1u << FMT_CIFAR100, 0},
    {"mean", IMAGE_FORMATS, 0},
    {"std", IMAGE_FORMATS, 0},
    {"random_crop_padding", IMAGE_FORMATS, 0},
    {"random_flip", IMAGE_FORMATS, 0},
};

/* "idx", "idx or cifar10", "idx, cifar10 or cifar100" from a mask of formats. */
static void format_list(unsigned mask, char *buf, size_t size)
{
    int n = 0, total = 0;
    for (int f = 0; f < N_FORMATS; f++) total += (mask >> f) & 1;
    buf[0] = 0;
    for (int f = 0; f < N_FORMATS; f++)
        if ((mask >> f) & 1) {
            size_t at = strlen(buf);
            snprintf(buf + at, size - at, "%s%s", n == 0 ? "" : n == total - 1 ? " or " : ", ", format_names[f]);
            n++;
        }
}

static glia_status check_format_keys(struct glia_section *s, enum data_format fmt)
{
    for (size_t i = 0; i < GLIA__ARRAY_LEN(format_keys); i++) {
        const struct format_key *k = &format_keys[i];
        if (glia__section_entry(s, k->key) && !((k->formats >> fmt) & 1)) {
            char list[64];
            format_list(k->formats, list, sizeof list);
            return glia_section_error(s, k->key, GLIA_ECONFIG, "'%s' applies to format = %s, not %s", k->key, list,
                                      format_names[fmt]);
        }
    }
    for (size_t i = 0; i < GLIA__ARRAY_LEN(format_keys); i++)
        if (!glia__section_entry(s, format_keys[i].key) && ((format_keys[i].required >> fmt) & 1))
            return glia_section_error(s, format_keys[i].key, GLIA_ECONFIG, "missing required key (format = %s)",
                                      format_names[fmt]);
    if (fmt == FMT_TOKENS && glia_section_int(s, "vocab") < 2)
        return glia_section_error(s, "vocab", GLIA_ECONFIG, "vocab must be at least 2 (id 0 is padding)");
    return GLIA_OK;
}

/* [data] mean or std into v[0..channels): one number for every channel or one per channel; the
 * data set's own values (def) when the key is not written. */
static glia_status norm_values(struct glia_section *s, const char *key, int channels, const float *def, float *v)
{
    const char **items;
    int n = glia__section_entry(s, key) ? glia_section_list(s, key, &items) : 0;
    if (n < 0) return GLIA_ENOMEM;
    if (n == 0) return memcpy(v, def, sizeof(float) * (size_t)channels), GLIA_OK;
    bool is_std = !strcmp(key, "std");
    if (n != 1 && n != channels) {
        if (channels == 1)
            return glia_section_error(s, key, GLIA_ECONFIG, "expected 1 value (the images have one channel), got %d", n);
        return glia_section_error(s, key, GLIA_ECONFIG, "expected 1 value or %d (one per channel), got %d", channels, n);
    }
    for (int c = 0; c < n; c++) {
        char *end;
        double x = strtod(items[c], &end);
        if (end == items[c] || *end || !isfinite(x))
            return glia_section_error(s, key, GLIA_ECONFIG, "'%s' is not a number", items[c]);
        if (is_std ? !(x >= 1e-12 && x <= 1e12) : fabs(x) > 1e12)
            return glia_section_error(s, key, GLIA_ECONFIG, "%s is out of range [%g, %g]", items[c], is_std ? 1e-12 : -1e12,
                                      1e12);
        v[c] = (float)x;
    }
    for (int c = n; c < channels; c++) v[c] = v[0];  /* one value: every channel's */
    return GLIA_OK;
}

/* The normalization of every image format when [data] does not give one: each data set's
 * training-set statistics (Fashion-MNIST for idx; pixel/255 per channel). */
static const float default_mean[N_FORMATS][GLIA__MAX_CHANNELS] = {
    [FMT_IDX] = {0.2860f}, [FMT_CIFAR10] = {0.4914f, 0.4822f, 0.4465f}, [FMT_CIFAR100] = {0.5071f, 0.4865f, 0.4409f}};
static const float default_std[N_FORMATS][GLIA__MAX_CHANNELS] = {
    [FMT_IDX] = {0.3530f}, [FMT_CIFAR10] = {0.2470f, 0.2435f, 0.2616f}, [FMT_CIFAR100] = {0.2673f, 0.2564f, 0.2762f}};

/* A growing list of owned paths. */
struct paths {
    char **p;
    int n, cap;
};

static bool paths_add(struct paths *l, char *path)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        char **p = realloc(l->p, sizeof *p * (size_t)cap);
        if (!p) return free(path), false;
        l->p = p, l->cap = cap;
    }
    l->p[l->n++] = path;
    return true;
}

static void paths_free(struct paths *l)
{
    for (int i = 0; i < l->n; i++) free(l->p[i]);
    free(l->p);
}

/* The files a [data] key lists (comma-separated, relative to the file's folder), each item that
 * holds *, ? or [ replaced by the files it matches, in name order. */
static glia_status file_list(struct glia_section *s, const char *key, struct paths *out)
{
    const char **items;
    int n = glia_section_list(s, key, &items);
    if (n < 0) return GLIA_ENOMEM;
    for (int k = 0; k < n; k++) {
        if (!*items[k]) return glia_section_error(s, key, GLIA_ECONFIG, "list item %d is empty", k + 1);
        char *path = glia__config_path(s, key, items[k]);
        if (!path) return GLIA_ENOMEM;
        if (!strpbrk(items[k], "*?[")) {
            if (!paths_add(out, path)) return GLIA_ENOMEM;
            continue;
        }
        glob_t g;
        int r = glob(path, GLOB_ERR, NULL, &g);
        glia_status st = GLIA_OK;
        if (r == GLOB_NOMATCH) st = glia_section_error(s, key, GLIA_ECONFIG, "no file matches '%s'", path);
        else if (r == GLOB_NOSPACE) st = GLIA_ENOMEM;
        else if (r) st = glia_section_error(s, key, GLIA_EIO, "cannot read the folders of '%s'", path);
        for (size_t f = 0; !st && f < g.gl_pathc; f++) {
            char *one = glia__strdup(g.gl_pathv[f]);
            if (!one || !paths_add(out, one)) st = GLIA_ENOMEM;
        }
        globfree(&g);
        free(path);
        if (st) return st;
    }
    return GLIA_OK;
}

static glia_status load_cifar(struct glia_model *m, struct glia_section *s, bool cifar100)
{
    static const char *const keys[2] = {"train", "test"};
    struct glia__dataset *sets[2] = {&m->train, &m->test};
    bool coarse = cifar100 && glia_section_bool(s, "coarse_labels");
    glia_status st = GLIA_OK;
    for (int i = 0; i < 2 && !st; i++) {
        struct paths l = {0};
        st = file_list(s, keys[i], &l);
        if (!st)
            st = glia__cifar_load(m->ctx, (const char *const *)l.p, l.n, cifar100, coarse,
                                  glia_section_int(s, i == 0 ? "train_samples" : "test_samples"), sets[i]);
        paths_free(&l);
    }
    return st;
}

static glia_status load_tokens(struct glia_model *m, struct glia_section *s)
{
    char *paths[2] = {glia__config_path(s, "train", glia_section_str(s, "train")),
                      glia__config_path(s, "test", glia_section_str(s, "test"))};
    int64_t vocab = glia_section_int(s, "vocab"), max_length = glia_section_int(s, "max_length");
    glia_status st = paths[0] && paths[1] ? GLIA_OK : GLIA_ENOMEM;
    if (!st) st = glia__tokens_load(m->ctx, paths[0], vocab, max_length, glia_section_int(s, "train_samples"), &m->train);
    if (!st) st = glia__tokens_load(m->ctx, paths[1], vocab, max_length, glia_section_int(s, "test_samples"), &m->test);
    free(paths[0]);
    free(paths[1]);
    if (st) return st;
    /* one padded length bounds every batch of both sets: activations are sized for it */
    int64_t mult = glia_section_int(s, "pad_to_multiple"), longest = m->train.cols > m->test.cols ? m->train.cols : m->test.cols;
    longest = (longest + mult - 1) / mult * mult;
    if (longest > INT32_MAX) return glia_section_error(s, "pad_to_multiple", GLIA_ECONFIG, "a padded length of %lld is too long", (long long)longest);
    m->train.cols = m->test.cols = (int)longest;
    m->pad_multiple = (int)mult;
    m->vocab = vocab;
    m->group_by_length = glia_section_bool(s, "group_by_length");
    m->group_size = (int)glia_section_int(s, "group_size");
    return GLIA_OK;
}

static glia_status load_idx(struct glia_model *m, struct glia_section *s)
{
    char *paths[4] = {0};
    static const char *keys[4] = {"train_images", "train_labels", "test_images", "test_labels"};
    glia_status st = GLIA_OK;
    for (int i = 0; i < 4 && !st; i++)
        if (!(paths[i] = glia__config_path(s, keys[i], glia_section_str(s, keys[i])))) st = GLIA_ENOMEM;
    if (!st) st = glia__idx_load(m->ctx, paths[0], paths[1], glia_section_int(s, "train_samples"), &m->train);
    if (!st) st = glia__idx_load(m->ctx, paths[2], paths[3], glia_section_int(s, "test_samples"), &m->test);
    if (!st && (m->train.rows != m->test.rows || m->train.cols != m->test.cols))
        st = glia_section_error(s, "test_images", GLIA_EFORMAT, "test images are %dx%d, training images %dx%d",
                                m->test.rows, m->test.cols, m->train.rows, m->train.cols);
    for (int i = 0; i < 4; i++) free(paths[i]);
    return st;
}

static glia_status load_data(struct glia_model *m)
{
    if (m->like) return borrow_data(m, m->like), GLIA_OK;
    struct glia_section *s = glia__config_find(m->cfg, "data");
    enum data_format fmt = FMT_IDX;
    while (fmt < N_FORMATS - 1 && strcmp(glia_section_str(s, "format"), format_names[fmt])) fmt++;
    glia_status st = check_format_keys(s, fmt);
    if (st) return st;
    int channels = fmt == FMT_IDX ? 1 : 3;  /* of the image formats */
    if (fmt != FMT_TOKENS && !(st = norm_values(s, "mean", channels, default_mean[fmt], m->norm.mean)))
        st = norm_values(s, "std", channels, default_std[fmt], m->norm.std);
    if (st) return st;
    if (fmt == FMT_TOKENS) st = load_tokens(m, s);
    else if (fmt == FMT_IDX) st = load_idx(m, s);
    else st = load_cifar(m, s, fmt == FMT_CIFAR100);
    if (st) return st;
    m->batch = (int)glia_section_int(s, "batch_size");
    m->test_batch = (int)glia_section_int(s, "test_batch_size");
    m->shuffle = glia_section_bool(s, "shuffle");
    m->workers = (int)glia_section_int(s, "workers");
    m->prefetch = (int)glia_section_int(s, "prefetch");
    m->persistent = glia_section_bool(s, "persistent_workers");
    m->pin_memory = glia_section_bool(s, "pin_memory");
    m->drop_last = glia_section_bool(s, "drop_last");
    m->crop_padding = (int)glia_section_int(s, "random_crop_padding");
    m->flip = glia_section_bool(s, "random_flip");
    if (m->drop_last && m->train.n < m->batch)
        return glia_section_error(s, "drop_last", GLIA_ECONFIG, "drop_last with %lld training samples and batch_size %d leaves no batch",
                                  (long long)m->train.n, m->batch);
    m->n_classes = m->train.n_classes > m->test.n_classes ? m->train.n_classes : m->test.n_classes;
    return GLIA_OK;
}

static glia_status setup_optimizer(struct glia_model *m)
{
    struct glia_section *t = glia__config_find(m->cfg, "train");
    char fb[256];
    const char *name = feature_of(glia_section_str(t, "optimizer"), fb, sizeof fb);
    if (!glia__find_optimizer_type(m->ctx, name)) {
        glia_status ls = glia_plugin_load(m->ctx, name);
        if (ls && ls != GLIA_ENOTFOUND) {
            char why[GLIA__ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", glia_context_error(m->ctx));
            return glia_section_error(t, "optimizer", ls, "%s", why);
        }
    }
    const struct glia_optimizer_type *ot = glia__find_optimizer_type(m->ctx, name);
    const struct glia_optimizer_kernel *ok = glia__find_optimizer_kernel(m->ctx, name, (int)m->device.type);
    if (ot && !ok) {
        char dev[32];
        return glia_section_error(t, "optimizer", GLIA_ECONFIG, "optimizer '%s' has no kernel for device %s", name,
                                  glia_device_str(m->device, dev, sizeof dev));
    }
    if (!ot) {
        char why[GLIA__ERRMSG_MAX];
        unknown_why(m->ctx, GLIA__FEAT_OPTIMIZER, "optimizer", name, why, sizeof why);
        return glia_section_error(t, "optimizer", GLIA_ECONFIG, "unknown optimizer '%s'%s", name, why);
    }
    struct glia_section *o = glia__config_section(m->cfg, "optimizer");
    if (!o) return GLIA_ENOMEM;
    const struct glia_key *sch[] = {ot->keys};
    glia_status st = glia__section_validate(o, sch, 1);
    if (st) return st;
    if ((st = glia__optimizer_create(&m->opt, ot, ok, m->ctx, o))) return st;
    m->epochs = (int)glia_section_int(t, "epochs");
    m->lr = glia_section_float(t, "lr");
    const char *sched = glia_section_str(t, "schedule");
    m->schedule = !strcmp(sched, "step") ? GLIA__SCHED_STEP : !strcmp(sched, "cosine") ? GLIA__SCHED_COSINE : GLIA__SCHED_CONSTANT;
    m->gamma = glia_section_float(t, "gamma");
    m->step_epochs = (int)glia_section_int(t, "step_epochs");
    m->min_lr = glia_section_float(t, "min_lr");
    m->warmup_steps = glia_section_int(t, "warmup_steps");
    m->clip_grad_norm = glia_section_float(t, "clip_grad_norm");
    m->accumulate = (int)glia_section_int(t, "accumulate");
    m->decay_1d = glia_section_bool(t, "weight_decay_1d");
    m->log_every = (int)glia_section_int(t, "log_every");
    m->checkpoint_every = glia_section_int(t, "checkpoint_every");
    m->checkpoint_keep = (int)glia_section_int(t, "checkpoint_keep");
    m->max_steps = glia_section_int(t, "max_steps");
    if (glia_section_str(t, "checkpoint_dir") &&
        !(m->checkpoint_dir = glia__config_path(t, "checkpoint_dir", glia_section_str(t, "checkpoint_dir"))))
        return GLIA_ENOMEM;
    return GLIA_OK;
}

static int node_index(const struct glia_model *m, const char *name)
{
    for (int i = 0; i < m->n_nodes; i++)
        if (!strcmp(m->nodes[i].layer.name, name)) return i;
    return -1;
}

static glia_status wire_inputs(struct glia_model *m, struct glia__node *nd, const struct glia_section *s)
{
    const struct glia_layer_type *ops = nd->layer.type;
    const char **items;
    int n = glia_section_list(s, "inputs", &items);
    if (n == 0) {
        nd->n_in = 1;
        nd->in[0] = m->n_nodes - 1;  /* the previous layer, or -1: the data */
    } else {
        if (n > GLIA__MAX_INPUTS)
            return glia_section_error(s, "inputs", GLIA_ECONFIG, "%d inputs; at most %d are supported", n, GLIA__MAX_INPUTS);
        for (int i = 0; i < n; i++) {
            if (!strcmp(items[i], "input")) {
                nd->in[i] = -1;
                continue;
            }
            int k = node_index(m, items[i]);
            if (k < 0) {
                const char *names[GLIA__MAX_NODES + 1];
                int c = 0;
                for (int j = 0; j < m->n_nodes; j++) names[c++] = m->nodes[j].layer.name;
                names[c++] = "input";
                const char *near = glia__did_you_mean(items[i], names, c);
                bool later = false;
                for (int j = 0; j < m->cfg->n_sections; j++)
                    later |= !strcmp(m->cfg->sections[j]->name, items[i]) && !is_reserved(items[i]);
                if (later)
                    return glia_section_error(s, "inputs", GLIA_ECONFIG, "layer '%s' is defined later; inputs must name earlier layers", items[i]);
                if (near)
                    return glia_section_error(s, "inputs", GLIA_ECONFIG, "unknown layer '%s'; did you mean '%s'?", items[i], near);
                return glia_section_error(s, "inputs", GLIA_ECONFIG, "unknown layer '%s'", items[i]);
            }
            nd->in[i] = k;
        }
        nd->n_in = n;
    }
    if (nd->n_in < ops->min_inputs || (ops->max_inputs >= 0 && nd->n_in > ops->max_inputs)) {
        if (ops->max_inputs < 0)
            return glia_section_error(s, "inputs", GLIA_ECONFIG, "layer type '%s' takes at least %d inputs, got %d", ops->name, ops->min_inputs, nd->n_in);
        return glia_section_error(s, "inputs", GLIA_ECONFIG, "layer type '%s' takes %d..%d inputs, got %d",
                                  ops->name, ops->min_inputs, ops->max_inputs, nd->n_in);
    }
    return GLIA_OK;
}

static struct glia_shape in_shape_of(const struct glia_model *m, int producer, int64_t batch)
{
    if (producer < 0) return glia__data_shape(m, batch, m->train.cols);
    return m->nodes[producer].out_shape;
}

/* Phase 1: resolve the layer's type and impl, validate its keys, wire its inputs. */
static glia_status declare_layer(struct glia_model *m, struct glia_section *s)
{
    glia_status st;
    if (!strcmp(s->name, "input"))  /* inputs = input is the data batch: a layer so named would hide it */
        return glia_section_error(s, NULL, GLIA_ECONFIG, "'input' is reserved: `inputs = input` names the data batch; "
                                  "give this layer another name");
    if (!glia__section_entry(s, "type")) {
        const char *near = glia__did_you_mean(s->name, reserved, (int)GLIA__ARRAY_LEN(reserved));
        if (near)
            return glia_section_error(s, NULL, GLIA_ECONFIG, "unknown section; did you mean [%s]?", near);
        return glia_section_error(s, NULL, GLIA_ECONFIG, "a layer section needs a type = key (or is it a misspelt section?)");
    }
    if (m->n_nodes == GLIA__MAX_NODES)
        return glia_section_error(s, NULL, GLIA_ECONFIG, "more than %d layers", GLIA__MAX_NODES);
    /* type and impl are strings: readable before full validation. */
    s->schemas[0] = layer_common_keys;
    s->n_schemas = 1;
    struct glia_layer rl = {0};
    if ((st = resolve_layer(m, s, &rl))) return st;
    const struct glia_key *sch[] = {layer_common_keys, rl.type->keys};
    if ((st = glia__section_validate(s, sch, 2))) return st;
    struct glia__node *nd = &m->nodes[m->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->sec = s;
    nd->layer.name = s->name;
    nd->layer.type = rl.type;
    nd->layer.kernel = rl.kernel;
    nd->layer.ctx = m->ctx;
    nd->layer.backend = m->backend;
    if ((st = wire_inputs(m, nd, s))) return st;
    m->decl[m->n_decl++] = (struct glia__decl){.name = s->name, .type = rl.type->name, .node = m->n_nodes};
    m->n_nodes++;
    return GLIA_OK;
}

/* Refuses a parameter or buffer of the layer that has more elements than a tensor may have. */
static glia_status check_param_sizes(const struct glia__node *nd)
{
    const struct glia_layer *l = &nd->layer;
    glia_context_clear_error(l->ctx);
    for (int p = 0; p < l->n_params + l->n_buffers; p++) {
        const struct glia_param *pa = p < l->n_params ? &l->params[p] : &l->buffers[p - l->n_params];
        double n = glia__numel_d(&pa->shape);
        if (n <= (double)GLIA__MAX_ELEMENTS) continue;
        char shp[256];
        return glia__alloc_error(nd->sec, NULL, 4 * n, "%s '%s', %s, has %.4g elements, more than a tensor may have (%s); "
                                 "its values would", p < l->n_params ? "parameter" : "buffer", pa->name,
                                 glia_shape_str(&pa->shape, shp, sizeof shp), n, GLIA__MAX_ELEMENTS_TEXT);
    }
    return GLIA_OK;
}

/* Refuses an output s of node nd with more elements than a tensor may have, at the batch that [data] key sets. */
static glia_status check_output_size(struct glia_model *m, const struct glia__node *nd, const struct glia_shape *s,
                                     int64_t batch, const char *key)
{
    double n = glia__numel_d(s);
    if (n <= (double)GLIA__MAX_ELEMENTS) return GLIA_OK;
    glia_context_clear_error(m->ctx);
    char shp[256];
    glia_shape_str(s, shp, sizeof shp);
    return glia__alloc_error(nd->sec, NULL, 4 * n, "its output at batch %lld ([data] %s), %s, has %.4g elements, more "
                             "than a tensor may have (%s); it would", (long long)batch, key, shp, n,
                             GLIA__MAX_ELEMENTS_TEXT);
}

/* The outputs at the evaluation batch, where it is larger than the training batch (create_layer checked those). */
static glia_status check_eval_sizes(struct glia_model *m)
{
    if (m->test_batch <= m->batch) return GLIA_OK;
    struct glia_shape *shapes = malloc(sizeof *shapes * (size_t)m->n_nodes);
    if (!shapes) return GLIA_ENOMEM;
    glia_status st = glia__infer_all(m, m->test_batch, m->train.cols, shapes);
    for (int i = 0; i < m->n_nodes && !st; i++) st = check_output_size(m, &m->nodes[i], &shapes[i], m->test_batch, "test_batch_size");
    free(shapes);
    return st;
}

/* Phase 3: create the layer with its input shapes and infer its output shape. */
static glia_status create_layer(struct glia_model *m, struct glia__node *nd)
{
    const struct glia_layer_type *ops = nd->layer.type;
    struct glia_section *s = nd->sec;
    struct glia_shape in[GLIA__MAX_INPUTS];
    for (int i = 0; i < nd->n_in; i++) in[i] = in_shape_of(m, nd->in[i], m->batch);
    for (int k = 0; k < nd->n_in && m->train.tokens; k++)  /* the token batch holds ids, not floats */
        if (nd->in[k] < 0 && !(ops->flags & GLIA_TYPE_TOKEN_INPUT))
            return glia_section_error(s, glia__section_entry(s, "inputs") ? "inputs" : NULL, GLIA_ECONFIG,
                                      "layer type '%s' cannot read the token batch of [data] format = tokens (I32 ids); "
                                      "start with an embedding layer", ops->name);
    if (m->train.tokens && (ops->flags & GLIA_TYPE_TOKEN_INPUT) && glia__section_entry(s, "vocab") &&
        glia_section_int(s, "vocab") < m->vocab)  /* a table too small for the data's ids */
        return glia_section_error(s, "vocab", GLIA_ECONFIG, "%lld is smaller than [data] vocab = %lld: ids up to %lld "
                                  "would be out of range", (long long)glia_section_int(s, "vocab"), (long long)m->vocab,
                                  (long long)m->vocab - 1);
    glia_context_clear_error(m->ctx);
    nd->layer.comm = m->comm;  /* SyncBatchNorm's ranks */
    glia_status st = glia__layer_create(&nd->layer, s, in, nd->n_in, &nd->created);
    if (st) {
        if (!glia_context_error(m->ctx)[0])
            glia_section_error(s, NULL, st, "layer type '%s' refused this configuration (%s)", ops->name, glia_strerror(st));
        return st;
    }
    if ((st = check_param_sizes(nd))) return st;
    bool decay = glia_section_bool(s, "weight_decay");  /* off: a PyTorch param group with weight_decay 0 */
    for (int p = 0; p < nd->layer.n_params; p++)
        if (!decay || (!m->decay_1d && nd->layer.params[p].shape.ndim == 1)) nd->layer.params[p].decay = false;
    st = ops->infer_shape(&nd->layer, in, nd->n_in, &nd->out_shape);
    if (st) {
        if (!glia_context_error(m->ctx)[0])
            glia_section_error(s, NULL, st, "shape inference failed (%s)", glia_strerror(st));
        return st;
    }
    if ((st = check_output_size(m, nd, &nd->out_shape, m->batch, "batch_size"))) return st;
    nd->flops = ops->flops ? ops->flops(&nd->layer, in, nd->n_in) : 0;
    return GLIA_OK;
}

/* Sets key = value in s on behalf of the core (a graph pass); origin names the pass. */
static glia_status override_key(struct glia_section *s, const char *key, const char *value, const char *origin)
{
    for (int i = 0; i < s->n_entries; i++) {
        struct glia__entry *e = &s->entries[i];
        if (strcmp(e->key, key)) continue;
        char *v = glia__strdup(value), *o = glia__strdup(origin);
        if (!v || !o) return free(v), free(o), GLIA_ENOMEM;
        free(e->value);
        free(e->origin);
        e->value = v;
        e->origin = o;
        return GLIA_OK;
    }
    if (glia__grow((void **)&s->entries, &s->cap_entries, s->n_entries + 1, sizeof *s->entries)) return GLIA_ENOMEM;
    struct glia__entry *e = &s->entries[s->n_entries];
    e->key = glia__strdup(key);
    e->value = glia__strdup(value);
    e->origin = glia__strdup(origin);
    e->line = 0;
    if (!e->key || !e->value || !e->origin) return free(e->key), free(e->value), free(e->origin), GLIA_ENOMEM;
    s->n_entries++;
    return GLIA_OK;
}

/* The key called name in keys, or NULL. */
static const struct glia_key *find_key(const struct glia_key *keys, const char *name)
{
    for (const struct glia_key *k = keys; k && k->name; k++)
        if (!strcmp(k->name, name)) return k;
    return NULL;
}

static bool has_bool_key(const struct glia_key *keys, const char *name)
{
    const struct glia_key *k = find_key(keys, name);
    return k && k->type == GLIA_KEY_BOOL;
}

/* Phase 2, pass drop_bias_before_norm: a layer with a `bias` key whose output goes only into
 * one normalization layer loses its bias (the normalization subtracts it again). */
static glia_status pass_drop_bias(struct glia_model *m)
{
    for (int i = 0; i < m->n_nodes; i++) {
        struct glia__node *nd = &m->nodes[i];
        if (!has_bool_key(nd->layer.type->keys, "bias") || !glia_section_bool(nd->sec, "bias")) continue;
        int consumer = -1, uses = 0;
        for (int j = i + 1; j < m->n_nodes; j++)
            for (int k = 0; k < m->nodes[j].n_in; k++)
                if (m->nodes[j].in[k] == i) {
                    consumer = j;
                    uses++;
                }
        if (uses != 1 || !(m->nodes[consumer].layer.type->flags & GLIA_TYPE_NORMALIZATION)) continue;
        glia_status st = override_key(nd->sec, "bias", "off", "[graph] drop_bias_before_norm");
        if (st) return st;
        nd->bias_dropped_for = consumer;
        nd->bias_dropped = true;
    }
    return GLIA_OK;
}

/* Each node's consumer count, and whether a gradient flows through it. */
static void link_nodes(struct glia_model *m)
{
    for (int i = 0; i < m->n_nodes; i++) m->nodes[i].n_consumers = 0;
    for (int i = 0; i < m->n_nodes; i++) {  /* inputs come before their consumers */
        struct glia__node *nd = &m->nodes[i];
        nd->needs_grad = nd->layer.n_params > 0;
        for (int k = 0; k < nd->n_in; k++)
            if (nd->in[k] >= 0) {
                m->nodes[nd->in[k]].n_consumers++;
                nd->needs_grad |= m->nodes[nd->in[k]].needs_grad;
            }
    }
}

static glia_status check_graph(struct glia_model *m)
{
    if (m->n_nodes == 0)
        return glia_error(m->ctx, GLIA_ECONFIG, "%s: the model has no layers (add sections with type = ...)", m->cfg->path);
    struct glia__node *last = &m->nodes[m->n_nodes - 1];
    if (!(last->layer.type->flags & GLIA_TYPE_LOSS))
        return glia_section_error(last->sec, "type", GLIA_ECONFIG,
                                  "the last layer must be a loss layer (for example type = softmax_cross_entropy), got '%s'",
                                  last->layer.type->name);
    link_nodes(m);
    for (int i = 0; i < m->n_nodes - 1; i++) {
        struct glia__node *nd = &m->nodes[i];
        if (nd->layer.type->flags & GLIA_TYPE_LOSS)
            return glia_section_error(nd->sec, "type", GLIA_ECONFIG, "a loss layer must be the last layer");
        if (nd->n_consumers == 0)
            return glia_section_error(nd->sec, NULL, GLIA_ECONFIG, "the output of this layer is not used by any later layer");
        if (!nd->layer.kernel->backward)
            return glia_section_error(nd->sec, "type", GLIA_EUNSUPPORTED, "layer type '%s' (kernel %s) has no backward; it "
                                      "cannot be trained through", nd->layer.type->name, nd->layer.kernel->impl);
    }
    const struct glia_shape *logits = &m->nodes[last->in[0] >= 0 ? last->in[0] : 0].out_shape;
    if (last->in[0] < 0 || logits->ndim != 2)
        return glia_section_error(last->sec, NULL, GLIA_ESHAPE, "the loss expects (N, classes) logits");
    if (logits->dim[1] < m->n_classes) {  /* name a label it cannot give */
        const struct glia__dataset *d = m->train.n_classes >= m->test.n_classes ? &m->train : &m->test;
        return glia_section_error(last->sec, NULL, GLIA_ESHAPE, "the model outputs %lld classes but the data has %d labels%s%s%s",
                                  (long long)logits->dim[1], m->n_classes, d->classes_why ? " (" : "",
                                  d->classes_why ? d->classes_why : "", d->classes_why ? ")" : "");
    }
    return GLIA_OK;
}

/* ---- pass fuse_pointwise ---------------------------------------------------------------- */

/* A chain of elementwise layers whose intermediate outputs feed only the next one becomes one
 * `pointwise` layer: its expression is the layers' own, nested. While it is built the text names
 * producers as {k} (node k; {-1}: the data batch); the layer gets them as x, y, z, w. */
#define FUSE_MAX_TEXT 2000   /* characters of a fused expression */
#define FUSE_MAX_DEPTH 60    /* its parentheses' nesting (the parser takes 200) */
#define FUSE_MAX_VARS 4      /* the pointwise layer's inputs */
static const char fuse_origin[] = "[graph] fuse_pointwise";
static const char fuse_vars[] = "xyzw";  /* the pointwise layer's inputs 1..4 */

/* The text written to f, a stream of open_memstream(text, ...) (f NULL: it could not be opened):
 * *text (owned), or NULL when out of memory. */
static char *fuse_close(FILE *f, char **text)
{
    if (!f) return NULL;
    bool bad = ferror(f);
    if (fclose(f) || bad) {
        free(*text);
        return NULL;
    }
    return *text;
}

/* Node i's function of its producers as text over {k}: its type's pointwise expression (glia/layer.h) with x, y,
 * z, w (inputs 0..3) replaced by its producers; NULL when it is not a layer the pass fuses (*st = GLIA_OK) or out of
 * memory (*st set). A layer with an impl chosen in its section keeps it, and one with parameters or buffers is more
 * than its expression. */
static char *fuse_text(const struct glia_model *m, int i, glia_status *st)
{
    const struct glia__node *nd = &m->nodes[i];
    const struct glia_layer_type *t = nd->layer.type;
    *st = GLIA_OK;
    if (!t->pointwise || nd->n_in > (int)sizeof fuse_vars - 1 || nd->own_sec ||
        strcmp(glia_section_str(nd->sec, "impl"), "auto") || nd->layer.n_params || nd->layer.n_buffers)
        return NULL;
    int need = t->pointwise(&nd->layer, nd->n_in, NULL, 0);
    if (need < 0) return NULL;
    char *e = malloc((size_t)need + 1), *text = NULL;
    size_t len;
    FILE *f = e ? open_memstream(&text, &len) : NULL;
    if (f && t->pointwise(&nd->layer, nd->n_in, e, (size_t)need + 1) != need) {  /* not pure: the pass keeps it */
        fclose(f);
        free(text);
        free(e);
        return NULL;
    }
    for (const char *c = e; f && *c;) {  /* its variables x y z w become its producers */
        size_t w = 0;
        while (isalnum((unsigned char)c[w]) || c[w] == '_' || c[w] == '.') w++;
        const char *v = w == 1 ? strchr(fuse_vars, c[0]) : NULL;
        if (v && v - fuse_vars < nd->n_in) fprintf(f, "{%d}", nd->in[v - fuse_vars]);
        else fwrite(c, 1, w ? w : 1, f);
        c += w ? w : 1;
    }
    free(e);
    char *r = fuse_close(f, &text);
    if (!r) *st = GLIA_ENOMEM;
    return r;
}

/* Reads the token at t ("{k}"): its producer, and the text after it in *end. */
static int fuse_token(const char *t, const char **end)
{
    char *e;
    long k = strtol(t + 1, &e, 10);
    *end = e + 1;  /* past '}' */
    return (int)k;
}

/* with is a call f(...) or a token {k}: it needs no parentheses as an operand */
static bool fuse_atomic(const char *with)
{
    const char *t = with;
    if (*t == '{') return strchr(t, '}') && !strchr(t, '}')[1];
    while (isalpha((unsigned char)*t)) t++;
    if (t == with || *t != '(') return false;
    int depth = 0;
    for (; *t; t++) {
        depth += (*t == '(') - (*t == ')');
        if (depth == 0) return !t[1];
    }
    return false;
}

/* text with each {i} replaced by (with); NULL when out of memory. */
static char *fuse_subst(const char *text, int i, const char *with)
{
    char *out = NULL;
    size_t len;
    FILE *f = open_memstream(&out, &len);
    for (const char *t = text; f && *t;) {
        const char *end;
        if (*t == '{' && fuse_token(t, &end) == i) {
            /* a whole argument of a call needs no parentheses of its own */
            bool arg = t > text && (t[-1] == '(' || (t[-1] == ' ' && t - 1 > text && t[-2] == ',')) &&
                       (*end == ')' || *end == ',');
            arg |= fuse_atomic(with);
            fprintf(f, arg ? "%s" : "(%s)", with);
            t = end;
        } else {
            fputc(*t++, f);
        }
    }
    return fuse_close(f, &out);
}

/* The distinct producers named in text, in order of appearance (at most max; returns how many
 * there are, which may be more). */
static int fuse_producers(const char *text, int *prod, int max)
{
    int n = 0;
    for (const char *t = text; (t = strchr(t, '{'));) {
        int k = fuse_token(t, &t), seen = 0;
        for (int j = 0; j < n && j < max; j++) seen |= prod[j] == k;
        if (seen) continue;
        if (n < max) prod[n] = k;
        n++;
    }
    return n;
}

static bool fuse_fits(const char *text)
{
    int depth = 0, deepest = 0, prod[FUSE_MAX_VARS];
    for (const char *t = text; *t; t++) {
        depth += (*t == '(') - (*t == ')');
        if (depth > deepest) deepest = depth;
    }
    return strlen(text) <= FUSE_MAX_TEXT && deepest <= FUSE_MAX_DEPTH &&
           fuse_producers(text, prod, FUSE_MAX_VARS) <= FUSE_MAX_VARS;
}

/* Whether a chain's text calls dropout(), however spaced ("dropout (x, 0.5)" parses too). */
static bool fuse_has_dropout(const char *text)
{
    for (const char *t = text; (t = strstr(t, "dropout")); t += 7) {
        const char *e = t + 7;
        while (isspace((unsigned char)*e)) e++;
        bool word = t == text || !(isalnum((unsigned char)t[-1]) || t[-1] == '_');
        if (word && *e == '(') return true;
    }
    return false;
}

/* The one node that reads node i's output (possibly more than once), or -1. */
static int only_consumer(const struct glia_model *m, int i)
{
    int c = -1;
    for (int j = i + 1; j < m->n_nodes; j++)
        for (int k = 0; k < m->nodes[j].n_in; k++)
            if (m->nodes[j].in[k] == i) {
                if (c >= 0 && c != j) return -1;
                c = j;
            }
    return c;
}

static void destroy_layer(struct glia__node *nd)
{
    glia__layer_release(&nd->layer, nd->created);
    nd->created = false;
}

/* Node j becomes a pointwise layer computing text (over {k}), in its place and under its name.
 * On failure node j is as it was. */
static glia_status make_fused(struct glia_model *m, int j, const char *text)
{
    struct glia__node *nd = &m->nodes[j], f = *nd;
    int prod[FUSE_MAX_VARS], n = fuse_producers(text, prod, FUSE_MAX_VARS);
    char *expr = NULL;
    size_t len;
    FILE *fe = open_memstream(&expr, &len);
    for (const char *t = text; fe && *t;) {
        if (*t != '{') {
            fputc(*t++, fe);
            continue;
        }
        int k = fuse_token(t, &t), v = 0;
        while (prod[v] != k) v++;
        fputc(fuse_vars[v], fe);
    }
    expr = fuse_close(fe, &expr);
    struct glia_section *s = expr ? glia__section_new(m->cfg, nd->sec->name, nd->sec->line) : NULL;
    glia_status st = s ? GLIA_OK : GLIA_ENOMEM;
    if (!st) st = override_key(s, "type", "pointwise", fuse_origin);
    if (!st) st = override_key(s, "expr", expr, fuse_origin);
    free(expr);
    if (s) {  /* type and impl readable before validation */
        s->schemas[0] = layer_common_keys;
        s->n_schemas = 1;
    }
    struct glia_layer rl = {0};
    if (!st) st = resolve_layer(m, s, &rl);
    if (!st) {
        const struct glia_key *sch[] = {layer_common_keys, rl.type->keys};
        st = glia__section_validate(s, sch, 2);
    }
    if (!st) {
        f.layer = (struct glia_layer){.name = s->name, .type = rl.type, .kernel = rl.kernel, .ctx = m->ctx,
                                      .backend = m->backend};
        f.sec = f.own_sec = s;
        f.created = false;
        f.n_in = n;
        memcpy(f.in, prod, sizeof *prod * (size_t)n);
        if ((st = create_layer(m, &f))) destroy_layer(&f);
    }
    if (st) {
        glia__section_free(s);
        return st;
    }
    destroy_layer(nd);  /* the chain's last layer, replaced */
    *nd = f;            /* layers keep no pointer to their struct (layer.h) */
    return GLIA_OK;
}

/* Whether m has a fused layer named name. */
static bool fused_in(const struct glia_model *m, const char *name)
{
    for (int i = 0; i < m->n_nodes; i++)
        if (m->nodes[i].own_sec && !strcmp(m->nodes[i].layer.name, name)) return true;
    return false;
}

/* 0: no fusion; 1: fuse where the fused layer can be made (auto on a GPU); 2: fuse (on) */
static int fuse_pointwise_mode(const struct glia_model *m, const struct glia_section *graph)
{
    const char *v = glia_section_str(graph, "fuse_pointwise");
    return !strcmp(v, "on") ? 2 : !strcmp(v, "auto") && m->device.type != GLIA_DEVICE_CPU ? 1 : 0;
}

/* Removes every node i with into[i] >= 0, merged into node into[i] (a chain: into[into[i]] may be
 * set too): whatever read node i now reads the node its chain ends in, declarations follow, and
 * the others move up. */
static void drop_nodes(struct glia_model *m, const int *into)
{
    int n = m->n_nodes, map[GLIA__MAX_NODES], w = 0;
    for (int i = 0; i < n; i++) {
        if (into[i] >= 0) {
            destroy_layer(&m->nodes[i]);
            map[i] = -1;
            continue;
        }
        map[i] = w;
        if (w != i) m->nodes[w] = m->nodes[i];  /* layers keep no pointer to their struct (layer.h) */
        w++;
    }
    for (int i = 0; i < n; i++) {
        int r = i;
        while (into[r] >= 0) r = into[r];
        map[i] = map[r];
    }
    m->n_nodes = w;
    for (int i = 0; i < w; i++) {
        struct glia__node *nd = &m->nodes[i];
        for (int k = 0; k < nd->n_in; k++)
            if (nd->in[k] >= 0) nd->in[k] = map[nd->in[k]];
        if (nd->bias_dropped) nd->bias_dropped_for = map[nd->bias_dropped_for];
    }
    for (int d = 0; d < m->n_decl; d++) m->decl[d].node = map[m->decl[d].node];
    link_nodes(m);
}

/* Whether section s sets one of the keys of its type (keys), beyond those every layer has. */
static bool layer_sets_keys(const struct glia_section *s, const struct glia_key *keys)
{
    for (const struct glia_key *k = keys; k && k->name; k++)
        if (glia__section_entry(s, k->name)) return true;
    return false;
}

/* Whether enum key `key` of keys offers the choice `value`. */
static bool key_has_choice(const struct glia_key *keys, const char *key, const char *value)
{
    const struct glia_key *k = find_key(keys, key);
    if (!k || k->type != GLIA_KEY_ENUM || !k->choices) return false;
    size_t n = strlen(value);
    for (const char *c = k->choices; c;) {
        if (!strncmp(c, value, n) && (c[n] == '|' || c[n] == '\0')) return true;
        c = strchr(c, '|');
        if (c) c++;
    }
    return false;
}

/* Phase 3, before the chains below: a layer whose input is a layer of a type with GLIA_TYPE_FUSIBLE_ACTIVATION
 * (batchnorm) that nothing else reads, and whose own type that one's `activation` key offers (relu), becomes its
 * activation (one pass over the data instead of two, forward and backward, and no activation output kept); the
 * producer keeps its name, its parameters and its place, and what read the activation reads it. An activation with an
 * impl or any other key set in its section stays. The key is set in the producer's section (a dp replica, built from
 * the same file, fuses it too). */
static glia_status pass_fuse_activation(struct glia_model *m)
{
    int n = m->n_nodes, into[GLIA__MAX_NODES], fused = 0;
    glia_status st = GLIA_OK;
    for (int j = 0; j < GLIA__MAX_NODES; j++) into[j] = -1;
    for (int j = 0; j < n && !st; j++) {
        const struct glia__node *r = &m->nodes[j];
        int i = r->in[0];
        if (r->own_sec || strcmp(glia_section_str(r->sec, "impl"), "auto") || r->n_in != 1 || i < 0 ||
            !(m->nodes[i].layer.type->flags & GLIA_TYPE_FUSIBLE_ACTIVATION) || only_consumer(m, i) != j ||
            m->nodes[i].own_sec || !key_has_choice(m->nodes[i].layer.type->keys, "activation", r->layer.type->name) ||
            layer_sets_keys(r->sec, r->layer.type->keys) || strcmp(glia_section_str(m->nodes[i].sec, "activation"), "none"))
            continue;
        struct glia__node *b = &m->nodes[i];
        if ((st = override_key(b->sec, "activation", r->layer.type->name, fuse_origin))) break;
        destroy_layer(b);
        if ((st = create_layer(m, b))) break;
        b->act_fused = true;
        into[j] = i;
        fused++;
    }
    if (!st && fused) drop_nodes(m, into);
    return st;
}

/* Phase 3, after the graph is checked as written: chains of fusible layers, each feeding only
 * the next, become one pointwise layer named like the chain's last; the others move up. A
 * dropout (or a pointwise layer with dropout()) only ends a chain: the fused layer then has its
 * name, so it draws the mask that layer draws unfused (the step's seed hashed with the name). */
static glia_status pass_fuse_pointwise(struct glia_model *m, bool on)
{
    int n = m->n_nodes, into[GLIA__MAX_NODES];
    char **text = calloc((size_t)n, sizeof *text);
    bool *grew = calloc((size_t)n, sizeof *grew);
    glia_status st = text && grew ? GLIA_OK : GLIA_ENOMEM;
    for (int j = 0; j < GLIA__MAX_NODES; j++) into[j] = -1;
    for (int j = 0; j < n && !st; j++) {  /* producers first: text[i] is i's whole chain */
        into[j] = -1;
        if (!(text[j] = fuse_text(m, j, &st))) continue;
        for (int k = 0; k < m->nodes[j].n_in && !st; k++) {
            int i = m->nodes[j].in[k];
            if (i < 0 || !text[i] || into[i] >= 0 || only_consumer(m, i) != j || fuse_has_dropout(text[i])) continue;
            char *t = fuse_subst(text[j], i, text[i]);
            if (!t) st = GLIA_ENOMEM;
            else if (!fuse_fits(t)) free(t);
            else {
                free(text[j]);
                text[j] = t;
                into[i] = j;
                grew[j] = true;
            }
        }
    }
    for (int j = 0; j < n && !st; j++) {
        if (!grew[j] || into[j] >= 0) continue;
        bool follow = m->like != NULL;  /* a dp replica fuses what its model fused, so their layers pair up */
        if (follow && !fused_in(m->like, m->nodes[j].layer.name)) st = GLIA_EUNSUPPORTED;
        else if (!(st = make_fused(m, j, text[j]))) continue;
        if (st == GLIA_ENOMEM || on || (follow && st != GLIA_EUNSUPPORTED)) {
            char why[GLIA__ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", glia_context_error(m->ctx));
            glia_error(m->ctx, st, "%s (a layer made by %s; off runs the layers one by one)", why, fuse_origin);
            break;
        }
        /* auto: the chain stays as written */
        if (!follow)
            glia_log(m->ctx, GLIA_LOG_WARN, "%s = auto leaves the layers before [%s] as they are: %s", fuse_origin,
                     m->nodes[j].layer.name, glia_context_error(m->ctx));
        glia_context_clear_error(m->ctx);
        st = GLIA_OK;
        for (int i = 0; i < j; i++) {
            int r = i;
            while (into[r] >= 0) r = into[r];
            if (r == j) into[i] = -1;  /* left in place, unfused */
        }
    }
    if (!st) drop_nodes(m, into);
    for (int j = 0; text && j < n; j++) free(text[j]);
    free(text);
    free(grew);
    return st;
}

/* ---- pass checkpoint_segments ------------------------------------------------------------ */

static const char ckpt_origin[] = "[graph] checkpoint_segments";

/* Marks the segments that the cuts cut[0..n) (node indices, ascending) make: in each but the last, the nodes before
 * the cut whose output something in backward reads (their own backward, a consumer's backward through a direct or
 * retagged edge, a consumer's second forward) run forward again, those that can; the others' outputs die after the
 * forward. */
static void mark_segments(struct glia_model *m, const int *cut, int n)
{
    for (int i = 0; i < m->n_nodes; i++) {
        m->nodes[i].recompute = m->nodes[i].cut = false;
        m->nodes[i].recompute_n = 0;
    }
    for (int k = 0, prev = -1; k < n; prev = cut[k++]) {
        m->nodes[cut[k]].recompute_n = cut[k] - prev - 1;
        m->nodes[cut[k]].cut = true;
        for (int j = cut[k] - 1; j > prev; j--) {  /* consumers first: only the segment and its cut read j */
            bool needed = glia__bwd_reads_out(m, j);
            for (int i = j + 1; i <= cut[k] && !needed; i++)
                for (int e = 0; e < m->nodes[i].n_in; e++)
                    if (m->nodes[i].in[e] == j &&
                        (m->nodes[i].recompute || (m->nodes[i].edge[e] != GLIA__EDGE_CONVERT && glia__bwd_reads_in(m, i))))
                        needed = true;
            m->nodes[j].recompute = needed;
        }
    }
}

/* A training step's activation cost with the nodes marked as now: the real plan (real) or the most floats alive at
 * once (the plan's floor, in O(nodes)), with *area the floats times moments alive; -1 when out of memory. */
static int64_t ckpt_cost(struct glia_model *m, bool real, double *area)
{
    return real ? glia__train_plan_len(m, m->batch) : glia__train_live_peak(m, m->batch, area);
}

/* Drops, last first, each of the *n cuts whose loss leaves the cost (ckpt_cost) at most *best; the nodes stay marked
 * for the cuts left. */
static void drop_unneeded_cuts(struct glia_model *m, int *cut, int *n, int64_t *best, bool real)
{
    double area;
    for (int k = *n - 1; k >= 0 && *best >= 0; k--) {
        int trial[GLIA__MAX_NODES];
        memcpy(trial, cut, sizeof *cut * (size_t)k);
        memcpy(trial + k, cut + k + 1, sizeof *cut * (size_t)(*n - k - 1));
        mark_segments(m, trial, *n - 1);
        int64_t c = ckpt_cost(m, real, &area);
        if (c >= 0 && c <= *best) memcpy(cut, trial, sizeof *cut * (size_t)--*n), *best = c;
    }
    mark_segments(m, cut, *n);
}

/* Phase 4, activation checkpointing (as torch.utils.checkpoint.checkpoint_sequential): cut the graph into at most
 * `checkpoint_segments` segments, each cut after a layer whose output alone carries everything the later layers read
 * (the data batch aside). In every segment but the last, a training step keeps only the output of the segment's last
 * layer; the others' forward runs again just before that layer's backward. The cuts are chosen by the training step's
 * activation plan (core/memplan.c); a cut that saves nothing is not made. A dp replica cuts where its model did. */
static glia_status pass_checkpoint(struct glia_model *m, const struct glia_section *graph)
{
    int want = (int)glia_section_int(graph, "checkpoint_segments"), n = m->n_nodes;
    m->ckpt_segments = 1;
    m->ckpt_asked = want;
    if (want < 2) return GLIA_OK;
    if (m->like) {
        for (int i = 0; i < n; i++) {
            m->nodes[i].recompute = m->like->nodes[i].recompute;
            m->nodes[i].recompute_n = m->like->nodes[i].recompute_n;
            m->nodes[i].cut = m->like->nodes[i].cut;
        }
        m->ckpt_segments = m->like->ckpt_segments;
        memcpy(m->ckpt_plan, m->like->ckpt_plan, sizeof m->ckpt_plan);
        return GLIA_OK;
    }
    int last_reader[GLIA__MAX_NODES], cut[GLIA__MAX_NODES] = {0}, n_cut = 0, n_can = 0;
    bool can[GLIA__MAX_NODES];  /* a cut may follow node c */
    for (int i = 0; i < n; i++) {
        last_reader[i] = i;
        for (int k = 0; k < m->nodes[i].n_in; k++)
            if (m->nodes[i].in[k] >= 0) last_reader[m->nodes[i].in[k]] = i;
    }
    for (int c = 0, reach = -1; c < n; c++) {  /* reach: the last reader of any node before c */
        can[c] = c + 1 < n && reach <= c;
        n_can += can[c];
        if (last_reader[c] > reach) reach = last_reader[c];
    }
    if (n_can == 0)
        return glia_section_error(graph, "checkpoint_segments", GLIA_EINVAL,
                                  "no layer's output alone carries what the layers after it read: nothing to cut "
                                  "(0 turns checkpointing off)");
    /* Greedy on the most floats alive at once (the plan's floor, cheap to find): add the cut that gives the smallest
     * peak, and of equal peaks the smallest area (shorter lives: the peak often falls only once two cuts are made);
     * then drop each cut whose loss leaves the peak as low. */
    double area, best_area;
    int64_t best = ckpt_cost(m, false, &best_area);
    while (best >= 0 && n_cut + 1 < want) {
        int pick = -1, at = 0;
        int64_t pick_peak = best;
        double pick_area = best_area;
        for (int c = 0; c < n; c++) {
            if (!can[c]) continue;
            int k = 0, trial[GLIA__MAX_NODES];
            while (k < n_cut && cut[k] < c) trial[k] = cut[k], k++;
            if (k < n_cut && cut[k] == c) continue;
            trial[k] = c;
            memcpy(trial + k + 1, cut + k, sizeof *cut * (size_t)(n_cut - k));
            mark_segments(m, trial, n_cut + 1);
            int64_t peak = ckpt_cost(m, false, &area);
            if (peak < 0) return glia_error(m->ctx, GLIA_ENOMEM, "%s: out of memory planning the activations", ckpt_origin);
            if (peak < pick_peak || (peak == pick_peak && area < pick_area))
                pick_peak = peak, pick_area = area, pick = c, at = k;
        }
        if (pick < 0) break;
        memmove(cut + at + 1, cut + at, sizeof *cut * (size_t)(n_cut - at));
        cut[at] = pick;
        n_cut++;
        best = pick_peak, best_area = pick_area;
    }
    drop_unneeded_cuts(m, cut, &n_cut, &best, false);
    /* the plans themselves, without and with the cuts; then cuts the plan does not need go too, and cuts that do not
     * make the plan smaller are not made */
    mark_segments(m, cut, 0);
    m->ckpt_plan[0] = best < 0 ? -1 : ckpt_cost(m, true, &area);
    mark_segments(m, cut, n_cut);
    m->ckpt_plan[1] = m->ckpt_plan[0] < 0 ? -1 : ckpt_cost(m, true, &area);
    drop_unneeded_cuts(m, cut, &n_cut, &m->ckpt_plan[1], true);
    if (m->ckpt_plan[1] < 0) return glia_error(m->ctx, GLIA_ENOMEM, "%s: out of memory planning the activations", ckpt_origin);
    if (m->ckpt_plan[1] >= m->ckpt_plan[0]) n_cut = 0, m->ckpt_plan[1] = m->ckpt_plan[0];
    mark_segments(m, cut, n_cut);
    m->ckpt_segments = n_cut + 1;
    for (int j = 0; n_cut && j < cut[n_cut - 1]; j++)  /* in a checkpointed segment, yet kept */
    if (m->ckpt_segments < want)
        glia_log(m->ctx, GLIA_LOG_WARN, "%s = %d: %d segment%s; %s", ckpt_origin, want, m->ckpt_segments,
                 m->ckpt_segments > 1 ? "s" : "",
                 m->ckpt_segments > 1 ? "another cut would not make the activations smaller"
                                      : "no cut makes a training step's activations smaller in this model");
    return GLIA_OK;
}

/* Memory formats: a layer that takes either format (GLIA_KERNEL_CHANNELS_LAST) works in the
 * model's; any other layer, and the data batch, in contiguous NCHW. Where producer and
 * consumer disagree on a 4-D tensor the edge converts, unless C or H*W is 1 (both formats
 * are then the same bytes, and the edge only retags them). */
static void plan_formats(struct glia_model *m)
{
    for (int i = 0; i < m->n_nodes; i++) {
        struct glia__node *nd = &m->nodes[i];
        bool any = m->format == GLIA_CHANNELS_LAST && (nd->layer.kernel->flags & GLIA_KERNEL_CHANNELS_LAST);
        nd->out_fmt = any && nd->out_shape.ndim == 4 ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
        for (int k = 0; k < nd->n_in; k++) {
            struct glia_shape s = in_shape_of(m, nd->in[k], m->batch);
            enum glia_memory_format have = nd->in[k] < 0 ? GLIA_CONTIGUOUS : m->nodes[nd->in[k]].out_fmt;
            nd->in_fmt[k] = any && s.ndim == 4 ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
            if (nd->in_fmt[k] == have) nd->edge[k] = GLIA__EDGE_DIRECT;
            else if (s.dim[1] == 1 || s.dim[2] * s.dim[3] == 1) nd->edge[k] = GLIA__EDGE_RETAG;
            else nd->edge[k] = GLIA__EDGE_CONVERT;
        }
    }
}

glia_status glia__arena_plan(struct glia__arena *a, const int64_t *sizes, int count)
{
    return glia__arena_plan_gap(a, sizes, count, 0);
}

glia_status glia__arena_plan_gap(struct glia__arena *a, const int64_t *sizes, int count, int64_t gap)
{
    memset(a, 0, sizeof *a);
    a->off = malloc(sizeof *a->off * (size_t)(count > 0 ? count : 1));
    a->size = malloc(sizeof *a->size * (size_t)(count > 0 ? count : 1));
    if (!a->off || !a->size) {
        glia__arena_free(a);
        return GLIA_ENOMEM;
    }
    a->count = count;
    int64_t at = 0;
    for (int i = 0; i < count; i++) {
        at = (at + (i ? gap : 0) + GLIA__ARENA_ALIGN - 1) / GLIA__ARENA_ALIGN * GLIA__ARENA_ALIGN + gap;
        a->off[i] = at;
        a->size[i] = sizes[i];
        at += sizes[i];
        a->n += sizes[i];
    }
    at += count ? gap : 0;
    a->len = at > 0 ? at : 1;
    return GLIA_OK;
}

void glia__arena_free(struct glia__arena *a)
{
    free(a->off);
    free(a->size);
    memset(a, 0, sizeof *a);
}

void glia__arena_pack(const struct glia__arena *a, const float *full, float *compact)
{
    for (int i = 0; i < a->count; compact += a->size[i], i++)
        memcpy(compact, full + a->off[i], sizeof(float) * (size_t)a->size[i]);
}

void glia__arena_unpack(const struct glia__arena *a, const float *compact, float *full)
{
    memset(full, 0, sizeof(float) * (size_t)a->len);
    for (int i = 0; i < a->count; compact += a->size[i], i++)
        memcpy(full + a->off[i], compact, sizeof(float) * (size_t)a->size[i]);
}

/* The layers' tensors of one kind (params or buffers), in arena order. */
static int arena_tensors(struct glia_model *m, bool buffers, struct glia_param **out)
{
    int k = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        struct glia_layer *l = &m->nodes[i].layer;
        int n = buffers ? l->n_buffers : l->n_params;
        for (int p = 0; p < n; p++, k++)
            if (out) out[k] = buffers ? &l->buffers[p] : &l->params[p];
    }
    return k;
}

/* Plans the arena of the params (or buffers); *list gets them in arena order (free it). */
static glia_status plan_arena(struct glia_model *m, bool buffers, struct glia__arena *a, struct glia_param ***list)
{
    int n = arena_tensors(m, buffers, NULL);
    struct glia_param **ps = malloc(sizeof *ps * (size_t)(n > 0 ? n : 1));
    int64_t *sizes = malloc(sizeof *sizes * (size_t)(n > 0 ? n : 1));
    glia_status st = ps && sizes ? GLIA_OK : GLIA_ENOMEM;
    if (!st) {
        arena_tensors(m, buffers, ps);
        for (int i = 0; i < n; i++) sizes[i] = glia_shape_numel(&ps[i]->shape);
        st = glia__arena_plan_gap(a, sizes, n, m->debug_checks ? GLIA__GUARD : 0);
    }
    free(sizes);
    if (st) free(ps);
    else *list = ps;
    return st;
}

/* The decay mask over the weight arena, when some parameter has decay off. */
static glia_status alloc_decay_mask(struct glia_model *m, struct glia_param **ps)
{
    bool any = false;
    for (int i = 0; i < m->wa.count; i++) any |= !ps[i]->decay;
    if (!any || m->like) return GLIA_OK;  /* a dp replica never steps */
    float *host = malloc(sizeof(float) * (size_t)m->wa.len);
    if (!host) return GLIA_ENOMEM;
    for (int64_t j = 0; j < m->wa.len; j++) host[j] = 1.0f;
    for (int i = 0; i < m->wa.count; i++)
        if (!ps[i]->decay)
            for (int64_t j = 0; j < m->wa.size[i]; j++) host[m->wa.off[i] + j] = 0.0f;
    struct glia_shape flat = glia_shape_make(1, (int64_t[]){m->wa.len});
    glia_status st = glia_tensor_new(m->backend, GLIA_F32, &flat, &m->decay_mask);
    if (!st) st = glia_tensor_from_host(m->decay_mask, host, sizeof(float) * (size_t)m->wa.len);
    free(host);
    return st;
}

/* The parameters (or buffers) cannot be allocated: the error names the layer that holds most of them. with says
 * what comes with them ("with their gradients"). */
static glia_status arena_error(struct glia_model *m, bool buffers, double bytes, const char *with)
{
    int big = 0;
    int64_t most = -1, all = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const struct glia_layer *l = &m->nodes[i].layer;
        int64_t n = 0;
        for (int p = 0; p < (buffers ? l->n_buffers : l->n_params); p++)
            n += glia_shape_numel(buffers ? &l->buffers[p].shape : &l->params[p].shape);
        if (n > most) most = n, big = i;
        all += n;
    }
    return glia__alloc_error(m->nodes[big].sec, NULL, bytes, "%lld %s (%lld of them this layer's)%s",
                             (long long)all, buffers ? "buffer values" : "parameters", (long long)most, with);
}

static glia_status alloc_params(struct glia_model *m)
{
    struct glia_param **ps;
    glia_status st = plan_arena(m, false, &m->wa, &ps);
    if (st) return st;
    struct glia_shape flat = glia_shape_make(1, (int64_t[]){m->wa.len});
    int ns = m->like ? 0 : m->opt.type->n_state;  /* a dp replica never steps: no optimizer state */
    glia_context_clear_error(m->ctx);
    if (m->wa.len > GLIA__MAX_ELEMENTS) st = GLIA_ENOMEM;  /* one tensor: see GLIA__MAX_ELEMENTS */
    if (!st) st = glia_tensor_new(m->backend, GLIA_F32, &flat, &m->w);
    if (!st) st = glia_tensor_zeros(m->backend, GLIA_F32, &flat, &m->g);  /* the padding's gradient is zero */
    for (int k = 0; k < ns && !st; k++) st = glia_tensor_zeros(m->backend, GLIA_F32, &flat, &m->state[k]);
    if (!st) st = alloc_decay_mask(m, ps);
    float *host = st ? NULL : calloc((size_t)m->wa.len, sizeof(float));
    if (st || !host) {
        free(ps);
        if (st && st != GLIA_ENOMEM) return st;
        char with[64] = " with their gradients";
        if (ns) snprintf(with, sizeof with, " with their gradients and %d optimizer state%s", ns, ns > 1 ? "s" : "");
        return arena_error(m, false, 4.0 * (double)m->wa.len * (2 + ns), with);
    }
    int k = 0;
    for (int i = 0; i < m->n_nodes && !st; i++) {
        struct glia_layer *l = &m->nodes[i].layer;
        for (int p = 0; p < l->n_params && !st; p++, k++) {
            struct glia_param *pa = ps[k];
            if ((st = glia_tensor_view(m->w, m->wa.off[k], &pa->shape, &pa->value)) ||
                (st = glia_tensor_view(m->g, m->wa.off[k], &pa->shape, &pa->grad)))
                break;
            pa->grad_unset = true;
            glia__init_param(l, p, host + m->wa.off[k],
                             glia__hash_str(glia__hash_str(m->seed * 0x9e3779b97f4a7c15ull + 1, l->name), pa->name));
        }
    }
    if (!st) st = glia_tensor_from_host(m->w, host, (size_t)m->wa.len * sizeof(float));
    free(host);
    free(ps);
    return st;
}

static glia_status add_entry(struct glia_param **arr, int *n, const char *name, const struct glia_shape *shape,
                             struct glia_param_init init, int *index)
{
    struct glia_param *p = realloc(*arr, (size_t)(*n + 1) * sizeof *p);
    if (!p) return GLIA_ENOMEM;
    *arr = p;
    struct glia_param *np = &p[*n];
    memset(np, 0, sizeof *np);
    if (!(np->name = glia__strdup(name))) return GLIA_ENOMEM;
    np->shape = *shape;
    np->init = init;
    np->decay = true;
    np->grad_unset = true;
    if (index) *index = *n;
    (*n)++;
    return GLIA_OK;
}

/* Undoes a successful type create: the type's destroy, then its attrs. */
static void type_release(struct glia_layer *l)
{
    if (l->type->destroy) l->type->destroy(l);
    free(l->attrs);
    l->attrs = NULL;
}

static void params_release(struct glia_layer *l)
{
    for (int p = 0; p < l->n_params; p++) {
        free((char *)l->params[p].name);
        glia_tensor_release(l->params[p].value);
        glia_tensor_release(l->params[p].grad);
    }
    free(l->params);
    for (int p = 0; p < l->n_buffers; p++) {
        free((char *)l->buffers[p].name);
        glia_tensor_release(l->buffers[p].value);
    }
    free(l->buffers);
    l->params = l->buffers = NULL;
    l->n_params = l->n_buffers = 0;
}

void glia__layer_release(struct glia_layer *l, bool created)
{
    if (created) {
        if (l->kernel->destroy) l->kernel->destroy(l);
        free(l->state);
        l->state = NULL;
        type_release(l);
    }
    params_release(l);
}

glia_status glia__layer_create(struct glia_layer *l, struct glia_section *s, const struct glia_shape *in, int n_in,
                               bool *created)
{
    *created = false;
    l->attrs = l->state = NULL;
    if (l->type->attrs_size && !(l->attrs = calloc(1, l->type->attrs_size)))
        return glia_section_error(s, NULL, GLIA_ENOMEM, "out of memory for the attributes of layer type '%s'",
                                  l->type->name);
    glia__section_misread_clear(s);
    glia_status st = l->type->create(l, s, in, n_in);
    glia_status mis = glia__layer_misread(l, s);  /* the wrong read, not what followed from it, is the error */
    if (!st && mis) type_release(l);              /* destroy was owed: it runs now */
    if (st) {  /* no destroy after a failed create (layer.h) */
        free(l->attrs);
        l->attrs = NULL;
    }
    if (st || mis) {
        params_release(l);
        return mis ? mis : st;
    }
    if (l->kernel->state_size && !(l->state = calloc(1, l->kernel->state_size)))
        st = glia_section_error(s, NULL, GLIA_ENOMEM, "out of memory for the state of kernel '%s' of layer type '%s'",
                                l->kernel->impl, l->type->name);
    if (!st && l->kernel->prepare) st = l->kernel->prepare(l, in, n_in);
    if (st) {  /* no kernel destroy after a failed prepare */
        free(l->state);
        l->state = NULL;
        type_release(l);
        params_release(l);
        return st;
    }
    *created = true;
    return GLIA_OK;
}

glia_status glia__optimizer_create(struct glia_optimizer *o, const struct glia_optimizer_type *type,
                                   const struct glia_optimizer_kernel *kernel, struct glia_context *ctx,
                                   struct glia_section *s)
{
    *o = (struct glia_optimizer){.type = type, .kernel = kernel, .ctx = ctx};
    if (type->attrs_size && !(o->attrs = calloc(1, type->attrs_size)))
        return glia_section_error(s, NULL, GLIA_ENOMEM, "out of memory for the settings of optimizer '%s'", type->name);
    glia__section_misread_clear(s);
    glia_status st = type->create(o, s);
    glia_status mis = glia__optimizer_misread(o, s);
    if (!st && mis && type->destroy) type->destroy(o);
    if (st || mis) {
        free(o->attrs);
        *o = (struct glia_optimizer){0};  /* no destroy after a failed create (optimizer.h) */
    }
    return mis ? mis : st;
}

void glia__optimizer_release(struct glia_optimizer *o)
{
    if (o->type && o->type->destroy) o->type->destroy(o);
    free(o->attrs);
    *o = (struct glia_optimizer){0};
}

glia_status glia_layer_add_param(struct glia_layer *l, const char *name, const struct glia_shape *shape,
                                 struct glia_param_init init, int *index)
{
    return add_entry(&l->params, &l->n_params, name, shape, init, index);
}

glia_status glia_layer_add_buffer(struct glia_layer *l, const char *name, const struct glia_shape *shape,
                                  struct glia_param_init init, int *index)
{
    return add_entry(&l->buffers, &l->n_buffers, name, shape, init, index);
}

void glia__init_values(float *dst, int64_t n, struct glia_param_init init, uint64_t seed)
{
    struct glia_rng r;
    glia__rng_seed(&r, seed);
    for (int64_t j = 0; j < n; j++) {
        double v = 0;
        switch (init.kind) {
        case GLIA_INIT_ZEROS: v = 0; break;
        case GLIA_INIT_CONST: v = init.a; break;
        case GLIA_INIT_UNIFORM: v = (2.0 * glia__rng_uniform(&r) - 1.0) * init.a; break;
        case GLIA_INIT_NORMAL: v = glia__rng_normal(&r) * init.a; break;
        }
        dst[j] = (float)v;
    }
}

void glia__init_param(const struct glia_layer *l, int p, float *dst, uint64_t seed)
{
    glia__init_values(dst, glia_shape_numel(&l->params[p].shape), l->params[p].init, seed);
    if (l->type->init_param) l->type->init_param(l, p, dst);
}

/* Buffers: one arena, views, initialized from their declared init. */
static glia_status alloc_buffers(struct glia_model *m)
{
    struct glia_param **bs;
    glia_status st = plan_arena(m, true, &m->ba, &bs);
    if (st) return st;
    if (m->ba.n == 0) {
        free(bs);
        return GLIA_OK;
    }
    struct glia_shape flat = glia_shape_make(1, (int64_t[]){m->ba.len});
    glia_context_clear_error(m->ctx);
    st = m->ba.len > GLIA__MAX_ELEMENTS ? GLIA_ENOMEM : glia_tensor_new(m->backend, GLIA_F32, &flat, &m->buf);
    float *host = st ? NULL : calloc((size_t)m->ba.len, sizeof(float));
    if (!st && !host) st = GLIA_ENOMEM;
    if (st == GLIA_ENOMEM) st = arena_error(m, true, 4.0 * (double)m->ba.len, "");
    for (int k = 0; k < m->ba.count && !st; k++) {
        st = glia_tensor_view(m->buf, m->ba.off[k], &bs[k]->shape, &bs[k]->value);
        glia__init_values(host + m->ba.off[k], m->ba.size[k], bs[k]->init, 0);
    }
    if (!st) st = glia_tensor_from_host(m->buf, host, (size_t)m->ba.len * sizeof(float));
    free(host);
    free(bs);
    return st;
}

/* [distributed]: the mode, and for ddp the communicator (rank, world) and per-rank log. */
static glia_status setup_distributed(struct glia_model *m)
{
    struct glia_section *s = glia__config_find(m->cfg, "distributed");
    m->world = 1;
    if (m->dist == GLIA__DIST_NONE) return GLIA_OK;
    if (m->dist == GLIA__DIST_DP) return GLIA_OK;  /* devices: see dp_devices */
    char fb[256];
    const char *tr = feature_of(glia_section_str(s, "transport"), fb, sizeof fb);
    glia_status st = glia_comm_open(m->ctx, tr, m->backend, glia_section_float(s, "timeout_s"), &m->comm);
    if (st) {
        char why[GLIA__ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", glia_context_error(m->ctx));
        return glia_section_error(s, "transport", st, "%s", why);
    }
    m->rank = m->comm->info.rank;
    m->world = m->comm->info.world;
    const char *log = glia_section_str(s, "rank_log");
    if (log) {
        char *path = glia__config_path(s, "rank_log", log), *at = path ? strstr(path, "{rank}") : NULL;
        if (!path) return GLIA_ENOMEM;
        size_t n = strlen(path) + 16;
        if (!(m->rank_log = malloc(n))) return free(path), GLIA_ENOMEM;
        if (at) snprintf(m->rank_log, n, "%.*s%d%s", (int)(at - path), path, m->rank, at + 6);
        else snprintf(m->rank_log, n, "%s.%d", path, m->rank);
        free(path);
    }
    return GLIA_OK;
}

/* mode = dp: [distributed] devices into devs ("cpu", "cuda", "cuda:N", or N for cuda:N). */
static glia_status dp_devices(struct glia_model *m, struct glia_device *devs, int *n)
{
    struct glia_section *s = glia__config_find(m->cfg, "distributed");
    const char **items;
    *n = glia_section_list(s, "devices", &items);
    if (*n < 1)
        return glia_section_error(s, "mode", GLIA_ECONFIG, "mode = dp needs devices = (e.g. cuda:0, cuda:1, or cpu, cpu)");
    if (*n > GLIA__MAX_REPLICAS)
        return glia_section_error(s, "devices", GLIA_ECONFIG, "%d devices; dp drives at most %d", *n, GLIA__MAX_REPLICAS);
    for (int i = 0; i < *n; i++) {
        char *end;
        long k = strtol(items[i], &end, 10);
        if (items[i][0] >= '0' && items[i][0] <= '9' && !*end && k < 1024) devs[i] = (struct glia_device){GLIA_DEVICE_CUDA, (int)k};
        else if (glia_device_parse(items[i], &devs[i]))
            return glia_section_error(s, "devices", GLIA_ECONFIG, "expected cpu, cuda, cuda:N or N, got '%s'", items[i]);
        if (i > 0 && devs[i].type != devs[0].type)
            return glia_section_error(s, "devices", GLIA_ECONFIG, "dp devices must all be of one type ('%s' and '%s')",
                                      items[0], items[i]);
    }
    return GLIA_OK;
}

/* [runtime] cuda_graph = on: set up where it can work, else a clear refusal (or, where device = auto fell back to
 * the CPU, a notice that it has nothing to do). */
static glia_status setup_cuda_graph(struct glia_model *m)
{
    struct glia_section *s = glia__config_section(m->cfg, "runtime");
    if (!s) return GLIA_ENOMEM;
    if (m->like || !glia_section_bool(s, "cuda_graph")) return GLIA_OK;  /* dp replicas never capture */
    const struct glia_backend_ops *b = m->backend->ops;
    if (!GLIA__HAS_SLOT(b, capture_begin) || !b->capture_begin) {
        if (m->device_notice) {  /* said with it, in its line */
            static const char more[] = "; cuda_graph = on has nothing to capture there";
            char *n = realloc(m->device_notice, strlen(m->device_notice) + sizeof more);
            if (!n) return GLIA_ENOMEM;
            m->device_notice = strcat(n, more);
            return GLIA_OK;
        }
        return glia_section_error(s, "cuda_graph", GLIA_ECONFIG,
                                  "the %s backend cannot capture CUDA graphs (set cuda_graph = off or device = cuda)",
                                  b->name);
    }
    if (m->debug_checks)
        return glia_section_error(s, "cuda_graph", GLIA_ECONFIG,
                                  "not with debug_checks = on: a replayed step would run without its checks (set "
                                  "cuda_graph = off or debug_checks = off)");
    if (m->dist != GLIA__DIST_NONE)
        return glia_section_error(s, "cuda_graph", GLIA_ECONFIG,
                                  "not with [distributed] mode = %s: its communication runs between the layers (set "
                                  "cuda_graph = off)",
                                  m->dist == GLIA__DIST_DDP ? "ddp" : "dp");
    for (int i = 0; i < m->n_nodes; i++) {
        const struct glia_layer *l = &m->nodes[i].layer;
        if (!(l->kernel->flags & GLIA_KERNEL_CAPTURABLE))
            return glia_section_error(m->nodes[i].sec, NULL, GLIA_ECONFIG,
                                      "layer type %s (impl %s) cannot be captured into a CUDA graph; set [runtime] "
                                      "cuda_graph = off",
                                      l->type->name, l->kernel->impl);
    }
    struct glia_shape one = glia_shape_make(1, (int64_t[]){1});
    glia_status st = glia_tensor_new(m->backend, GLIA_I64, &one, &m->step_dev);
    m->cuda_graph = !st;
    return st;
}

static glia_status build(struct glia_context *ctx, struct glia_config *cfg, const struct glia_model *like,
                         const struct glia_device *dev, struct glia_model **out);

glia_status glia_model_build(struct glia_context *ctx, struct glia_config *cfg, struct glia_model **out)
{
    return build(ctx, cfg, NULL, NULL, out);
}

/* Builds the model of cfg; a dp replica (like set) on device *dev with like's data settings. */
static glia_status build(struct glia_context *ctx, struct glia_config *cfg, const struct glia_model *like,
                         const struct glia_device *dev, struct glia_model **out)
{
    struct glia_model *m = calloc(1, sizeof *m);
    if (!m) return GLIA_ENOMEM;
    m->ctx = ctx;
    m->cfg = cfg;
    m->like = like;
    m->n_replicas = 1;
    m->loss_weight = 1;
    m->weights_step = -1;
    if (dev) m->forced = true, m->forced_device = *dev;
    struct glia_device devs[GLIA__MAX_REPLICAS];
    int n_devs = 0;
    glia_status st = setup_plugins(m);
    static const char *globals[] = {"runtime", "data", "train", "distributed"};
    for (int i = 0; i < 4 && !st; i++) {
        struct glia_section *s = glia__config_section(cfg, globals[i]);
        const struct glia_key *sch[] = {glia__core_schema(globals[i])};
        st = s ? glia__section_validate(s, sch, 1) : GLIA_ENOMEM;
    }
    if (!st) {
        const char *mode = glia_section_str(glia__config_find(cfg, "distributed"), "mode");
        m->dist = !strcmp(mode, "ddp") ? GLIA__DIST_DDP : !strcmp(mode, "dp") ? GLIA__DIST_DP : GLIA__DIST_NONE;
        if (like) m->dist = GLIA__DIST_NONE;  /* a replica is driven by its model */
    }
    if (!st && m->dist == GLIA__DIST_DP && !(st = dp_devices(m, devs, &n_devs))) {
        m->forced = true;
        m->forced_device = devs[0];
    }
    if (!st) st = setup_device(m);
    if (!st) st = setup_distributed(m);
    if (!st) st = setup_optimizer(m);
    if (!st) st = load_data(m);
    for (int i = 0; i < cfg->n_sections && !st; i++)
        if (!is_reserved(cfg->sections[i]->name)) st = declare_layer(m, cfg->sections[i]);
    struct glia_section *graph = st ? NULL : glia__config_section(cfg, "graph");
    if (!st && !graph) st = GLIA_ENOMEM;
    if (!st) {
        const struct glia_key *sch[] = {graph_keys};
        st = glia__section_validate(graph, sch, 1);
    }
    if (!st && glia_section_bool(graph, "drop_bias_before_norm")) st = pass_drop_bias(m);
    for (int i = 0; i < m->n_nodes && !st; i++) st = create_layer(m, &m->nodes[i]);
    if (!st) st = check_graph(m);
    if (!st) st = check_eval_sizes(m);
    int fuse = st ? 0 : fuse_pointwise_mode(m, graph);
    if (fuse) st = pass_fuse_activation(m);
    if (fuse && !st) st = pass_fuse_pointwise(m, fuse == 2);
    if (!st) plan_formats(m);
    if (!st) st = pass_checkpoint(m, graph);  /* plans memory: after the edges' conversions are known */
    if (!st) st = setup_cuda_graph(m);
    if (!st) st = alloc_params(m);
    if (!st) st = alloc_buffers(m);
    if (!st && m->comm) {
        struct glia_section *d = glia__config_find(cfg, "distributed");
        glia_context_clear_error(m->ctx);
        st = glia__ddp_new(m, m->comm, glia_section_float(d, "bucket_mb"), glia_section_float(d, "first_bucket_mb"), &m->ddp);
        if (st == GLIA_ENOMEM && !glia_context_error(ctx)[0])  /* mostly its host copy of the gradients */
            st = arena_error(m, false, 4.0 * (double)m->wa.len, " with a host copy of their gradients for the all-reduce");
    }
    if (!st && m->comm && m->world > 1) st = glia__ddp_check_settings(m);  /* before any rank exchanges more */
    for (int r = 1; r < n_devs && !st; r++) {  /* dp: the other devices' copies */
        if (!(st = build(ctx, cfg, m, &devs[r], &m->replica[r]))) {
            m->replica[r]->rank = r;  /* its own dropout masks */
            m->n_replicas = r + 1;
        }
    }
    if (st) {
        glia_model_free(m);
        return st;
    }
    if (m->device_notice) glia_log(ctx, GLIA_LOG_INFO, "%s", m->device_notice);
    *out = m;
    return GLIA_OK;
}

void glia_model_free(struct glia_model *m)
{
    if (!m) return;
    if (m->backend) glia_backend_sync(m->backend);  /* queued work and copies may still use its memory */
    glia__model_release_activations(m);  /* and the graphs that use them */
    glia_tensor_release(m->step_dev);
    for (int i = 0; i < m->n_nodes; i++) {
        destroy_layer(&m->nodes[i]);
        glia__section_free(m->nodes[i].own_sec);
    }
    glia_tensor_release(m->buf);
    glia__ddp_free(m->ddp);
    for (int r = 1; r < m->n_replicas; r++) glia_model_free(m->replica[r]);
    glia_tensor_release(m->one);
    free(m->rank_log);
    free(m->checkpoint_dir);
    free(m->device_notice);
    glia__optimizer_release(&m->opt);
    glia_tensor_release(m->w);
    glia_tensor_release(m->g);
    glia_tensor_release(m->decay_mask);
    glia__arena_free(&m->wa);
    glia__arena_free(&m->ba);
    for (int k = 0; k < GLIA__MAX_STATE; k++) glia_tensor_release(m->state[k]);
    glia__dataset_free(&m->train);
    glia__dataset_free(&m->test);
    free(m);
}

long long glia_model_param_count(const struct glia_model *m) { return m->wa.n; }

int glia_model_rank(const struct glia_model *m, int *world)
{
    if (world) *world = m->world;
    return m->rank;
}

long long glia_model_weights(const struct glia_model *m, float *dst, long long n)
{
    long long k = m->wa.n < n ? m->wa.n : n;
    if (k <= 0) return 0;
    float *full = malloc(sizeof(float) * (size_t)(m->wa.len + m->wa.n));
    if (!full) return -1;
    float *packed = full + m->wa.len;
    if (glia_tensor_to_host(m->w, full, sizeof(float) * (size_t)m->wa.len)) k = -1;
    else {
        glia__arena_pack(&m->wa, full, packed);
        memcpy(dst, packed, (size_t)k * sizeof(float));
    }
    free(full);
    return k;
}

static void human(double v, char *buf, size_t n)
{
    if (v >= 1e9) snprintf(buf, n, "%.2fG", v / 1e9);
    else if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1e3) snprintf(buf, n, "%.1fk", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

/* "graph pass fuse_pointwise: a (type) + b (type)": the layers as written that node i computes */
static void fused_layers(FILE *f, const struct glia_model *m, int i)
{
    fprintf(f, "graph pass fuse_pointwise:");
    for (int d = 0, first = 1; d < m->n_decl; d++)
        if (m->decl[d].node == i) {
            fprintf(f, "%s %s (%s)", first ? "" : " +", m->decl[d].name, m->decl[d].type);
            first = 0;
        }
}

void glia_model_summary(const struct glia_model *m, FILE *f)
{
    char dev[32], shp[96], fl[32];
    fprintf(f, "model %s on %s, batch %d, memory format %s, precision %s\n", m->cfg->path ? m->cfg->path : "(string)",
            glia_device_str(m->device, dev, sizeof dev), m->batch, glia_memory_format_name(m->format),
            glia_precision_name(m->precision));
    if (m->n_replicas > 1) {
        fprintf(f, "dp: batch %d split over %d devices:", m->batch, m->n_replicas);
        for (int r = 0; r < m->n_replicas; r++)
            fprintf(f, " %s", glia_device_str(r ? m->replica[r]->device : m->device, dev, sizeof dev));
        fprintf(f, "\n");
    }
    if (m->ddp)
        fprintf(f, "ddp: rank %d of %d over %s, batch %d per rank (%d in all), %d gradient buckets\n", m->rank, m->world,
                m->comm->ops->name, m->batch, m->batch * m->world, glia__ddp_n_buckets(m->ddp));
    fprintf(f, "%-16s %-22s %-6s %-16s %10s %10s\n", "layer", "type", "impl", "output", "params", "FLOPs");
    struct glia_shape in = in_shape_of(m, -1, 1);
    struct glia_shape per = in;
    per.ndim--;
    memmove(per.dim, in.dim + 1, sizeof(int64_t) * (size_t)per.ndim);
    fprintf(f, "%-16s %-22s %-6s %-16s %10s %10s\n", "input", "data", "-", glia_shape_str(&per, shp, sizeof shp), "0", "-");
    double total_flops = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const struct glia__node *nd = &m->nodes[i];
        long long np = 0;
        for (int p = 0; p < nd->layer.n_params; p++) np += glia_shape_numel(&nd->layer.params[p].shape);
        struct glia_shape o = nd->out_shape;
        if (!(nd->layer.type->flags & GLIA_TYPE_LOSS) && o.ndim > 0) {
            o.ndim--;
            memmove(o.dim, nd->out_shape.dim + 1, sizeof(int64_t) * (size_t)o.ndim);
        }
        double per_sample = nd->layer.type->flops ? (double)nd->flops / m->batch : -1;
        if (per_sample >= 0) {
            human(per_sample, fl, sizeof fl);
            total_flops += per_sample;
        } else {
            snprintf(fl, sizeof fl, "-");
        }
        fprintf(f, "%-16s %-22s %-6s %-16s %10lld %10s\n", nd->layer.name, nd->layer.type->name,
                nd->layer.kernel->impl, glia_shape_str(&o, shp, sizeof shp), np, fl);
    }
    for (int i = 0; i < m->n_nodes; i++)
        if (m->nodes[i].bias_dropped)
            fprintf(f, "graph pass drop_bias_before_norm: no bias in %s (its output goes only into %s, a %s)\n",
                    m->nodes[i].layer.name, m->nodes[m->nodes[i].bias_dropped_for].layer.name,
                    m->nodes[m->nodes[i].bias_dropped_for].layer.type->name);
    for (int i = 0; i < m->n_nodes; i++)
        if (m->nodes[i].act_fused) {
            fused_layers(f, m, i);
            fprintf(f, " run as %s %s with activation = %s\n", m->nodes[i].layer.type->name, m->nodes[i].layer.name,
                    glia_section_str(m->nodes[i].sec, "activation"));
        }
    for (int i = 0; i < m->n_nodes; i++) {
        const struct glia__node *nd = &m->nodes[i];
        if (!nd->own_sec) continue;
        fused_layers(f, m, i);
        fprintf(f, " run as one pointwise layer %s = %s of", nd->layer.name, glia_section_str(nd->sec, "expr"));
        for (int k = 0; k < nd->n_in; k++)
            fprintf(f, "%s %c = %s", k ? "," : "", "xyzw"[k], nd->in[k] < 0 ? "input" : m->nodes[nd->in[k]].layer.name);
        fprintf(f, "\n");
    }
    if (m->ckpt_asked > 1 && m->ckpt_segments == 1)
        fprintf(f, "graph pass checkpoint_segments: no cut makes a training step's activations smaller than %.1f MB "
                "(batch %d); none made\n", 4e-6 * (double)m->ckpt_plan[0], m->batch);
    if (m->ckpt_segments > 1) {
        fprintf(f, "graph pass checkpoint_segments: %d segments, cut after", m->ckpt_segments);
        for (int i = 0, cuts = 0; i < m->n_nodes; i++)
            if (m->nodes[i].cut) fprintf(f, "%s %s", cuts++ ? "," : "", m->nodes[i].layer.name);
        fprintf(f, "; a training step runs the forward of");
        int any = 0;
        for (int i = 0; i < m->n_nodes; i++)
            if (m->nodes[i].recompute) {
                int j = i;
                while (j + 1 < m->n_nodes && m->nodes[j + 1].recompute) j++;
                fprintf(f, "%s %s", any++ ? "," : "", m->nodes[i].layer.name);
                if (j > i) fprintf(f, " .. %s (%d layers)", m->nodes[j].layer.name, j - i + 1);
                i = j;
            }
        fprintf(f, "%s again in backward: %.1f MB of activations instead of %.1f MB (batch %d)\n", any ? "" : " no layer",
                4e-6 * (double)m->ckpt_plan[1], 4e-6 * (double)m->ckpt_plan[0], m->batch);
    }
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++)
            if (m->nodes[i].edge[k] == GLIA__EDGE_CONVERT) {
                const struct glia__node *nd = &m->nodes[i];
                fprintf(f, "memory format: %s converts its input from %s (%s -> %s)\n", nd->layer.name,
                        nd->in[k] < 0 ? "input" : m->nodes[nd->in[k]].layer.name,
                        glia_memory_format_name(nd->in_fmt[k] == GLIA_CONTIGUOUS ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS),
                        glia_memory_format_name(nd->in_fmt[k]));
            }
    if (m->decay_mask) {  /* which parameters the optimizer's weight_decay skips */
        fprintf(f, "no weight decay:");
        for (int i = 0; i < m->n_nodes; i++)
            for (int p = 0; p < m->nodes[i].layer.n_params; p++)
                if (!m->nodes[i].layer.params[p].decay)
                    fprintf(f, " %s.%s", m->nodes[i].layer.name, m->nodes[i].layer.params[p].name);
        fprintf(f, "\n");
    }
    struct glia__act_plan pl;  /* shape inference only: the model does not change */
    if (glia__act_plan((struct glia_model *)m, m->batch, m->test_batch, &pl)) {
        glia_context_clear_error(m->ctx);  /* the line is left out; training reports the error */
    } else {
        fprintf(f, "activation memory: %.1f MB, shared by a training step at batch %d (%.1f MB; %.1f MB if nothing "
                "were shared) and evaluation at batch %d (%.1f MB; %.1f MB)\n", pl.len * 4e-6, m->batch, pl.train * 4e-6,
                pl.train_unshared * 4e-6, m->test_batch, pl.eval * 4e-6, pl.eval_unshared * 4e-6);
        glia__act_plan_free(&pl);
    }
    human(total_flops, fl, sizeof fl);
    char at[48] = "";
    if (m->train.tokens) snprintf(at, sizeof at, " at the longest length (%d)", m->train.cols);
    fprintf(f, "total: %d layers, %lld parameters (%.2f MB fp32), %s FLOPs per sample forward%s\n",
            m->n_nodes, (long long)m->wa.n, m->wa.n * 4.0 / 1e6, fl, at);
    static const char *sched[] = {"constant", "step", "cosine"};
    char shape[64];
    if (m->train.tokens)
        snprintf(shape, sizeof shape, "token sequences up to %d%s", m->train.cols,
                 m->group_by_length ? ", grouped by length" : "");
    else if (m->train.channels > 1)
        snprintf(shape, sizeof shape, "%dx%dx%d", m->train.channels, m->train.rows, m->train.cols);
    else
        snprintf(shape, sizeof shape, "%dx%d", m->train.rows, m->train.cols);
    fprintf(f, "data: %lld training samples, %lld test samples, %s, %d classes; optimizer %s, lr %g (%s), %d epochs\n",
            (long long)m->train.n, (long long)m->test.n, shape, m->n_classes, m->opt.type->name, m->lr, sched[m->schedule],
            m->epochs);
}

const struct glia_key *glia_config_schema(const char *section) { return glia__core_schema(section); }
