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
#include "loader.h"
#include "parts.h"

/* ---- paths ---- */


/* ---- plugins the file names ---- */


/* Loads the plugin that key's value names: a file is relative to the model file's folder (or to
 * the working directory when --set gave it; never looked up by dlopen), a name is looked up in
 * the search folders. A failure is the key's error. */
static glia_status load_named(struct glia_context *ctx, const struct glia_section *s, const char *key, const char *value)
{
    char *p = glia__plugin_is_file(value) ? glia__config_path(s, key, value) : glia__strdup(value);
    if (!p) return GLIA_ENOMEM;
    glia_status st = glia_plugin_load(ctx, p);
    free(p);
    return st ? glia_section_error_wrap(s, key, st) : GLIA_OK;
}

glia_status glia_config_load_plugins(struct glia_context *ctx, struct glia_config *cfg)
{
    struct glia_section *s = glia__config_section(cfg, "plugins");
    if (!s) return GLIA_ENOMEM;
    const struct glia_key *sch[] = {glia__core_schema("plugins")};
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
                          : glia__is_reserved(s->name)     ? NULL
                                                     : "type";
        const struct glia__entry *e = key ? glia__section_entry(s, key) : NULL;
        if (e && glia__plugin_is_file(e->value)) st = load_named(m->ctx, s, key, e->value);
    }
    return st;
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
        if (glia__is_reserved(m->cfg->sections[i]->name) || !t) continue;
        char fb[256];
        const char *type = glia__feature_of(t->value, fb, sizeof fb);
        if (!glia__find_type(m->ctx, type)) glia_plugin_load(m->ctx, type);
        if (!glia__find_kernel_for(m->ctx, type, GLIA_DEVICE_CUDA)) {
            snprintf(why, n, "layer type '%s' of [%s] has no CUDA kernel", type, m->cfg->sections[i]->name);
            return false;
        }
    }
    struct glia_section *t = glia__config_find(m->cfg, "train");
    char fb[256];
    const char *name = t ? glia__feature_of(glia_section_str(t, "optimizer"), fb, sizeof fb) : "sgd";
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
    int index = m->dist.mode == GLIA__DIST_DDP ? launcher_local_rank() : 0;
    if (m->dist.forced) {
        m->device = m->dist.forced_device;
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
    if (st) return glia_section_error_wrap(s, "device", GLIA_EDEVICE);
    int threads = (int)glia_section_int(s, "threads");
    if (threads > 0) omp_set_num_threads(threads);
    m->seed = (uint64_t)glia_section_int(s, "seed");
    m->graph.format = strcmp(glia_section_str(s, "memory_format"), "channels_last") ? GLIA_CONTIGUOUS : GLIA_CHANNELS_LAST;
    const char *p = glia_section_str(s, "precision");
    struct glia_runtime_options o = {sizeof o, GLIA_PRECISION_FP32, glia_section_bool(s, "cudnn_benchmark"),
                                     (size_t)glia_section_int(s, "workspace_mb") << 20,
                                     glia_section_bool(s, "deterministic")};
    for (int i = GLIA_PRECISION_FP32; i <= GLIA_PRECISION_FP16; i++)
        if (!strcmp(p, glia_precision_name((enum glia_precision)i))) o.precision = (enum glia_precision)i;
    m->detect_anomaly = glia_section_bool(s, "detect_anomaly");
    m->nvtx = glia_section_bool(s, "nvtx");
    if (m->nvtx && !glia__backend_can_trace(m->backend))
        return glia_section_error(s, "nvtx", GLIA_ECONFIG, "the %s backend names no profiler ranges (NVTX is CUDA's; "
                                  "set nvtx = off or device = cuda)", m->backend->ops->name);
    if (m->detect_anomaly && o.precision == GLIA_PRECISION_FP16)
        return glia_section_error(s, "detect_anomaly", GLIA_ECONFIG, "not with precision = fp16: its loss scaling "
                                  "overflows gradients on purpose and skips those steps (use bf16 or fp32)");
    if ((st = glia_backend_configure(m->backend, &o))) return glia_section_error_wrap(s, "precision", st);
    m->precision = o.precision;
    m->debug_checks = glia_section_bool(s, "debug_checks");
    m->trainer.scaler = (struct glia__scaler){o.precision == GLIA_PRECISION_FP16 ? 65536.0 : 1.0, 0, 0};
    m->trainer.scaler_growth = GLIA__SCALER_GROWTH;
    if (m->device.type == GLIA_DEVICE_CUDA && o.deterministic && o.cudnn_benchmark)
        glia_log(m->ctx, GLIA_LOG_INFO,
                 "[runtime] deterministic = on with cudnn_benchmark = on: every algorithm chosen is deterministic, but "
                 "the timing may choose others in another run; cudnn_benchmark = off repeats a run bit for bit");
    return GLIA_OK;
}


static glia_status setup_optimizer(struct glia_model *m)
{
    struct glia_section *t = glia__config_find(m->cfg, "train");
    char fb[256];
    const char *name = glia__feature_of(glia_section_str(t, "optimizer"), fb, sizeof fb);
    if (!glia__find_optimizer_type(m->ctx, name)) {
        glia_status ls = glia_plugin_load(m->ctx, name);
        if (ls && ls != GLIA_ENOTFOUND) return glia_section_error_wrap(t, "optimizer", ls);
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
        glia__unknown_why(m->ctx, GLIA__FEAT_OPTIMIZER, "optimizer", name, why, sizeof why);
        return glia_section_error(t, "optimizer", GLIA_ECONFIG, "unknown optimizer '%s'%s", name, why);
    }
    struct glia_section *o = glia__config_section(m->cfg, "optimizer");
    if (!o) return GLIA_ENOMEM;
    const struct glia_key *sch[] = {ot->keys};
    glia_status st = glia__section_validate(o, sch, 1);
    if (st) return st;
    if ((st = glia__optimizer_create(&m->trainer.opt, ot, ok, m->ctx, o))) return st;
    m->trainer.epochs = (int)glia_section_int(t, "epochs");
    m->trainer.lr = glia_section_float(t, "lr");
    const char *sched = glia_section_str(t, "schedule");
    m->trainer.schedule = !strcmp(sched, "step") ? GLIA__SCHED_STEP : !strcmp(sched, "cosine") ? GLIA__SCHED_COSINE
                        : !strcmp(sched, "poly") ? GLIA__SCHED_POLY : !strcmp(sched, "linear") ? GLIA__SCHED_LINEAR
                        : GLIA__SCHED_CONSTANT;
    m->trainer.gamma = glia_section_float(t, "gamma");
    m->trainer.step_epochs = (int)glia_section_int(t, "step_epochs");
    m->trainer.min_lr = glia_section_float(t, "min_lr");
    m->trainer.warmup_steps = glia_section_int(t, "warmup_steps");
    m->trainer.clip_grad_norm = glia_section_float(t, "clip_grad_norm");
    m->trainer.accumulate = (int)glia_section_int(t, "accumulate");
    m->trainer.eval_every = (int)glia_section_int(t, "eval_every");
    m->trainer.decay_1d = glia_section_bool(t, "weight_decay_1d");
    m->trainer.log_every = (int)glia_section_int(t, "log_every");
    m->trainer.checkpoint_every = glia_section_int(t, "checkpoint_every");
    m->trainer.checkpoint_keep = (int)glia_section_int(t, "checkpoint_keep");
    m->trainer.max_steps = glia_section_int(t, "max_steps");
    if (glia_section_str(t, "checkpoint_dir") &&
        !(m->trainer.checkpoint_dir = glia__config_path(t, "checkpoint_dir", glia_section_str(t, "checkpoint_dir"))))
        return GLIA_ENOMEM;
    return GLIA_OK;
}
/* [train] schedule = poly | linear: the exponent, and T, the optimizer steps the decay spans: total_steps, else
 * epochs x the updates an epoch of the training set makes (its batches as the loader counts them, drop_last and
 * ddp's padded shard included, in groups of accumulate, an epoch ending with an update). After glia__load_data: a
 * number the data alone decides, known before any loader exists, so glia_model_step follows it too. power and
 * total_steps are refused with the schedules that do not read them, so that a setting that changes nothing is
 * said. A dp replica takes its model's. */
static glia_status setup_schedule(struct glia_model *m)
{
    struct glia_section *t = glia__config_find(m->cfg, "train");
    const char *sched = glia_section_str(t, "schedule");
    bool poly = !strcmp(sched, "poly"), linear = !strcmp(sched, "linear");
    if (glia__section_entry(t, "power") && !poly)
        return glia_section_error(t, "power", GLIA_ECONFIG, "'power' applies to schedule = poly, not %s%s", sched,
                                  linear ? " (which is poly with power 1)" : "");
    if (glia__section_entry(t, "total_steps") && !poly && !linear)
        return glia_section_error(t, "total_steps", GLIA_ECONFIG, "'total_steps' applies to schedule = poly or linear, "
                                  "not %s", sched);
    if (!poly && !linear) return GLIA_OK;
    m->trainer.power = poly ? glia_section_float(t, "power") : 1.0;
    if (m->dist.like) return m->trainer.total_steps = m->dist.like->trainer.total_steps, GLIA_OK;
    if ((m->trainer.total_steps = glia_section_int(t, "total_steps")) > 0) return GLIA_OK;
    int64_t batches = glia__loader_batches(m->data.train.n, m->data.batch, m->data.drop_last, m->dist.world,
                                           m->dist.rank, true);
    int64_t updates = (batches + m->trainer.accumulate - 1) / m->trainer.accumulate;
    if (updates < 1)
        return glia_section_error(t, "schedule", GLIA_ECONFIG, "schedule = %s decays over the run's optimizer steps, "
                                  "and the training set has no batch to count them by: set total_steps", sched);
    if (updates > INT64_MAX / m->trainer.epochs)
        return glia_section_error(t, "epochs", GLIA_ECONFIG, "%d epochs of %lld optimizer steps overflow the step count "
                                  "of schedule = %s: set total_steps", m->trainer.epochs, (long long)updates, sched);
    m->trainer.total_steps = (int64_t)m->trainer.epochs * updates;
    return GLIA_OK;
}

/* [distributed]: the mode, and for ddp the communicator (rank, world) and per-rank log. */
static glia_status setup_distributed(struct glia_model *m)
{
    struct glia_section *s = glia__config_find(m->cfg, "distributed");
    m->dist.world = 1;
    if (m->dist.mode == GLIA__DIST_NONE) return GLIA_OK;
    if (m->dist.mode == GLIA__DIST_DP) return GLIA_OK;  /* devices: see dp_devices */
    char fb[256];
    const char *tr = glia__feature_of(glia_section_str(s, "transport"), fb, sizeof fb);
    glia_status st = glia_comm_open(m->ctx, tr, m->backend, glia_section_float(s, "timeout_s"), &m->dist.comm);
    if (st) return glia_section_error_wrap(s, "transport", st);
    m->dist.rank = m->dist.comm->info.rank;
    m->dist.world = m->dist.comm->info.world;
    const char *log = glia_section_str(s, "rank_log");
    if (log) {
        char *path = glia__config_path(s, "rank_log", log), *at = path ? strstr(path, "{rank}") : NULL;
        if (!path) return GLIA_ENOMEM;
        size_t n = strlen(path) + 16;
        if (!(m->dist.rank_log = malloc(n))) return free(path), GLIA_ENOMEM;
        if (at) snprintf(m->dist.rank_log, n, "%.*s%d%s", (int)(at - path), path, m->dist.rank, at + 6);
        else snprintf(m->dist.rank_log, n, "%s.%d", path, m->dist.rank);
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
    if (m->dist.like || !glia_section_bool(s, "cuda_graph")) return GLIA_OK;  /* dp replicas never capture */
    if (!glia_backend_can_capture(m->backend)) {
        if (m->device_notice) {  /* said with it, in its line */
            static const char more[] = "; cuda_graph = on has nothing to capture there";
            char *n = realloc(m->device_notice, strlen(m->device_notice) + sizeof more);
            if (!n) return GLIA_ENOMEM;
            m->device_notice = strcat(n, more);
            return GLIA_OK;
        }
        return glia_section_error(s, "cuda_graph", GLIA_ECONFIG,
                                  "the %s backend cannot capture CUDA graphs (set cuda_graph = off or device = cuda)",
                                  m->backend->ops->name);
    }
    if (m->debug_checks || m->detect_anomaly)
        return glia_section_error(s, "cuda_graph", GLIA_ECONFIG,
                                  "not with %s = on: a replayed step would run without its checks (set "
                                  "cuda_graph = off or %s = off)", m->debug_checks ? "debug_checks" : "detect_anomaly",
                                  m->debug_checks ? "debug_checks" : "detect_anomaly");
    if (m->dist.mode != GLIA__DIST_NONE)
        return glia_section_error(s, "cuda_graph", GLIA_ECONFIG,
                                  "not with [distributed] mode = %s: its communication runs between the layers (set "
                                  "cuda_graph = off)",
                                  m->dist.mode == GLIA__DIST_DDP ? "ddp" : "dp");
    for (int i = 0; i < m->graph.n_nodes; i++) {
        const struct glia_layer *l = &m->graph.nodes[i].layer;
        if (!(glia_layer_kernel_flags(l) & GLIA_KERNEL_CAPTURABLE))
            return glia_section_error(m->graph.nodes[i].sec, NULL, GLIA_ECONFIG,
                                      "layer type %s (impl %s) cannot be captured into a CUDA graph; set [runtime] "
                                      "cuda_graph = off",
                                      l->type->name, l->kernel->impl);
    }
    struct glia_shape words = glia_shape_make(1, (int64_t[]){GLIA__STEP_DEV_WORDS});
    glia_status st = glia_tensor_new(m->backend, GLIA_I64, &words, &m->trainer.step_dev);
    if (!st && m->precision == GLIA_PRECISION_FP16 && glia_backend_can_scale(m->backend)) {  /* the scaler's */
        struct glia_shape sw = glia_shape_make(1, (int64_t[]){GLIA__SCALER_DEV_WORDS});
        st = glia_tensor_new(m->backend, GLIA_I64, &sw, &m->trainer.scaler_dev);
        if (!st) st = glia_backend_host_alloc(m->backend, GLIA__SCALER_ROWS * sizeof(struct glia_loss_scaler),
                                              (void **)&m->trainer.scaler_host);
    }
    m->trainer.cuda_graph = !st;
    return st;
}

static glia_status build(struct glia_context *ctx, struct glia_config *cfg, const struct glia_model *like,
                         const struct glia_device *dev, struct glia_model **out);

/* [train] init_from: the weights of a safetensors file instead of the drawn ones (one line naming the key and the
 * tensor when they do not fit). */
static glia_status init_from(struct glia_model *m)
{
    struct glia_section *t = glia__config_find(m->cfg, "train");
    const char *v = t ? glia_section_str(t, "init_from") : NULL;
    if (!v) return GLIA_OK;
    char *path = glia__config_path(t, "init_from", v);
    if (!path) return GLIA_ENOMEM;
    glia_status st = glia_model_load_safetensors(m, path);
    free(path);
    if (!st) return GLIA_OK;
    char why[1024];
    snprintf(why, sizeof why, "%s", glia_context_error(m->ctx));
    return glia_section_error(t, "init_from", st, "%s", why);
}

glia_status glia_model_build(struct glia_context *ctx, struct glia_config *cfg, struct glia_model **out)
{
    glia_status st = build(ctx, cfg, NULL, NULL, out);
    if (!st && (st = init_from(*out))) {
        glia_model_free(*out);
        *out = NULL;
    }
    return st;
}

/* Builds the model of cfg; a dp replica (like set) on device *dev with like's data settings. */
static glia_status build(struct glia_context *ctx, struct glia_config *cfg, const struct glia_model *like,
                         const struct glia_device *dev, struct glia_model **out)
{
    struct glia_model *m = calloc(1, sizeof *m);
    if (!m) return GLIA_ENOMEM;
    m->ctx = ctx;
    m->cfg = cfg;
    m->dist.like = like;
    m->dist.n_replicas = 1;
    m->dist.loss_weight = 1;
    m->dist.weights_step = -1;
    if (dev) m->dist.forced = true, m->dist.forced_device = *dev;
    struct glia_device devs[GLIA__MAX_REPLICAS];
    int n_devs = 0;
    m->graph.cap_nodes = cfg->n_sections;
    m->graph.nodes = calloc((size_t)(m->graph.cap_nodes ? m->graph.cap_nodes : 1), sizeof *m->graph.nodes);
    m->graph.decl = calloc((size_t)(m->graph.cap_nodes ? m->graph.cap_nodes : 1), sizeof *m->graph.decl);
    glia_status st = m->graph.nodes && m->graph.decl ? setup_plugins(m) : GLIA_ENOMEM;
    static const char *globals[] = {"runtime", "data", "train", "distributed"};
    for (int i = 0; i < 4 && !st; i++) {
        struct glia_section *s = glia__config_section(cfg, globals[i]);
        const struct glia_key *sch[] = {glia__core_schema(globals[i])};
        st = s ? glia__section_validate(s, sch, 1) : GLIA_ENOMEM;
    }
    if (!st) {
        const char *mode = glia_section_str(glia__config_find(cfg, "distributed"), "mode");
        m->dist.mode = !strcmp(mode, "ddp") ? GLIA__DIST_DDP : !strcmp(mode, "dp") ? GLIA__DIST_DP : GLIA__DIST_NONE;
        if (like) m->dist.mode = GLIA__DIST_NONE;  /* a replica is driven by its model */
    }
    if (!st && m->dist.mode == GLIA__DIST_DP && !(st = dp_devices(m, devs, &n_devs))) {
        m->dist.forced = true;
        m->dist.forced_device = devs[0];
    }
    if (!st) st = setup_device(m);
    if (!st) st = setup_distributed(m);
    if (!st) st = setup_optimizer(m);
    if (!st) st = glia__load_data(m);
    if (!st) st = setup_schedule(m);
    for (int i = 0; i < cfg->n_sections && !st; i++)
        if (!glia__is_reserved(cfg->sections[i]->name)) st = glia__declare_layer(m, cfg->sections[i]);
    struct glia_section *graph = st ? NULL : glia__config_section(cfg, "graph");
    if (!st && !graph) st = GLIA_ENOMEM;
    if (!st) {
        const struct glia_key *sch[] = {glia__core_schema("graph")};
        st = glia__section_validate(graph, sch, 1);
    }
    if (!st && glia_section_bool(graph, "drop_bias_before_norm")) st = glia__pass_drop_bias(m);
    for (int i = 0; i < m->graph.n_nodes && !st; i++) st = glia__create_layer(m, &m->graph.nodes[i]);
    if (!st) st = glia__check_graph(m);
    if (!st) st = glia__check_eval_sizes(m);
    int fuse = st ? 0 : glia__fuse_pointwise_mode(m, graph);
    if (fuse) st = glia__pass_fuse_activation(m);
    if (fuse && !st) st = glia__pass_fuse_pointwise(m, fuse == 2);
    if (!st) glia__plan_formats(m);
    if (!st) glia__plan_dtypes(m, glia__half_of(m, graph));
    if (fuse && !st) st = glia__pass_fold_norm_eval(m);
    if (fuse && !st) st = glia__pass_fuse_dact(m);
    if (fuse && !st) st = glia__pass_fuse_residual(m);
    if (!st) st = glia__pass_checkpoint(m, graph);  /* plans memory: after the edges' conversions are known */
    if (!st) st = setup_cuda_graph(m);
    if (!st) st = glia__alloc_params(m);
    if (!st) st = glia__alloc_buffers(m);
    if (!st && m->dist.comm) {
        struct glia_section *d = glia__config_find(cfg, "distributed");
        glia_context_clear_error(m->ctx);
        st = glia__ddp_new(m, m->dist.comm, glia_section_float(d, "bucket_mb"), glia_section_float(d, "first_bucket_mb"), &m->dist.ddp);
        if (st == GLIA_ENOMEM && !glia_context_error(ctx)[0])  /* mostly its host copy of the gradients */
            st = glia__arena_error(m, false, 4.0 * (double)m->params.wa.len, " with a host copy of their gradients for the all-reduce");
    }
    if (!st && m->dist.comm && m->dist.world > 1) st = glia__ddp_check_settings(m);  /* before any rank exchanges more */
    /* dp: the other devices' copies, built after every pass of this model ran: they follow its fusions (graph.c) */
    for (int r = 1; r < n_devs && !st; r++) {
        if (!(st = build(ctx, cfg, m, &devs[r], &m->dist.replica[r]))) {
            m->dist.replica[r]->dist.rank = r;  /* its own dropout masks */
            m->dist.n_replicas = r + 1;
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
    glia_tensor_release(m->trainer.step_dev);
    glia_tensor_release(m->trainer.scaler_dev);
    if (m->trainer.scaler_host) glia_backend_host_free(m->backend, m->trainer.scaler_host);
    for (int i = 0; i < m->graph.n_nodes; i++) {
        glia__destroy_layer(&m->graph.nodes[i]);
        glia__section_free(m->graph.nodes[i].own_sec);
    }
    glia_tensor_release(m->params.buf);
    glia__ddp_free(m->dist.ddp);
    for (int r = 1; r < m->dist.n_replicas; r++) glia_model_free(m->dist.replica[r]);
    free(m->dist.rank_log);
    free(m->trainer.checkpoint_dir);
    free(m->device_notice);
    glia__optimizer_release(&m->trainer.opt);
    glia_tensor_release(m->params.w);
    glia_tensor_release(m->params.g);
    glia_tensor_release(m->params.decay_mask);
    glia_tensor_release(m->params.dev_seg);
    free(m->params.seg);
    glia__arena_free(&m->params.wa);
    glia__arena_free(&m->params.ba);
    for (int k = 0; k < GLIA__MAX_STATE; k++) glia_tensor_release(m->params.state[k]);
    glia__dataset_free(&m->data.train);
    glia__dataset_free(&m->data.test);
    free(m->graph.nodes);
    free(m->graph.decl);
    free(m);
}

long long glia_model_param_count(const struct glia_model *m) { return m->params.wa.n; }

int glia_model_rank(const struct glia_model *m, int *world)
{
    if (world) *world = m->dist.world;
    return m->dist.rank;
}

long long glia_model_weights(const struct glia_model *m, float *dst, long long n)
{
    long long k = m->params.wa.n < n ? m->params.wa.n : n;
    if (k <= 0) return 0;
    float *full = malloc(sizeof(float) * (size_t)(m->params.wa.len + m->params.wa.n));
    if (!full) return -1;
    float *packed = full + m->params.wa.len;
    if (glia_tensor_to_host(m->params.w, full, sizeof(float) * (size_t)m->params.wa.len)) k = -1;
    else {
        glia__arena_pack(&m->params.wa, full, packed);
        memcpy(dst, packed, (size_t)k * sizeof(float));
    }
    free(full);
    return k;
}
