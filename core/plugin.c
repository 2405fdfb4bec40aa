/* core/plugin.c — the plugin loader (search path, dlopen, descriptor and ABI checks, probe,
 * init with rollback) and feature registration. Not the features themselves. */
#include <dirent.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "internal.h"


const char *glia_plugin_dir(void) { return GLIA_PLUGIN_DIR; }

struct glia_context *glia_registry_context(struct glia_registry *r) { return r->ctx; }

static const char *plugin_label(struct glia_registry *r)
{
    return r->plugin >= 0 ? r->ctx->plugins[r->plugin].path : "libglia";
}

static glia_status add_feature(struct glia_registry *r, int kind, const void *ops)
{
    struct glia_context *ctx = r->ctx;
    if (glia__grow((void **)&ctx->features, &ctx->cap_features, ctx->n_features + 1,
                   sizeof *ctx->features))
        return GLIA_ENOMEM;
    ctx->features[ctx->n_features++] = (struct glia__feature){kind, ops, r->plugin};
    return GLIA_OK;
}

/* The first key of schema keys whose name an earlier entry (or, for a layer, the core's keys every layer has, in
 * common) declares already, or NULL: the later declaration would never be read (the first match wins), and
 * `glia plugins --describe` would show both. */
static const char *declared_twice(const struct glia_key *keys, const struct glia_key *common)
{
    for (const struct glia_key *k = keys; k && k->name; k++) {
        for (const struct glia_key *c = common; c && c->name; c++)
            if (!strcmp(c->name, k->name)) return k->name;
        for (const struct glia_key *e = keys; e < k; e++)
            if (!strcmp(e->name, k->name)) return k->name;
    }
    return NULL;
}

glia_status glia_register_layer_type(struct glia_registry *r, const struct glia_layer_type *t)
{
    const char *who = plugin_label(r);
    if (!t || t->struct_size < GLIA__END_OF(struct glia_layer_type, pointwise))
        return glia_error(r->ctx, GLIA_EABI, "%s: glia_register_layer_type: struct of %u bytes is smaller than ABI 2.0's %zu",
                          who, t ? t->struct_size : 0, GLIA__END_OF(struct glia_layer_type, pointwise));
    if (!t->name || !t->create || !t->infer_shape)
        return glia_error(r->ctx, GLIA_EINVAL, "%s: layer type '%s': name, create and infer_shape are required", who,
                          t->name ? t->name : "?");
    if (glia__find_type(r->ctx, t->name))
        return glia_error(r->ctx, GLIA_EEXIST, "%s: layer type '%s' is already registered (by %s)", who, t->name,
                          glia__ops_plugin(r->ctx, glia__find_type(r->ctx, t->name)));
    const char *twice = declared_twice(t->keys, NULL);
    if (twice)
        return glia_error(r->ctx, GLIA_EINVAL, "%s: layer type '%s': key '%s' is declared twice in its keys", who,
                          t->name, twice);
    if ((twice = declared_twice(t->keys, glia__core_schema("layer"))))
        return glia_error(r->ctx, GLIA_EINVAL,
                          "%s: layer type '%s': key '%s' is declared again (every layer section has type, "
                          "inputs, impl and weight_decay already)", who, t->name, twice);
    return add_feature(r, GLIA__FEAT_TYPE, t);
}

glia_status glia_register_kernel(struct glia_registry *r, const struct glia_kernel *k)
{
    const char *who = plugin_label(r);
    if (!k || k->struct_size < GLIA__END_OF(struct glia_kernel, backward))
        return glia_error(r->ctx, GLIA_EABI, "%s: glia_register_kernel: struct of %u bytes is smaller than ABI 2.0's %zu",
                          who, k ? k->struct_size : 0, GLIA__END_OF(struct glia_kernel, backward));
    if (!k->type || !k->impl || !k->forward)
        return glia_error(r->ctx, GLIA_EINVAL, "%s: kernel '%s' of layer type '%s': type, impl and forward are required",
                          who, k->impl ? k->impl : "?", k->type ? k->type : "?");
    if (!strcmp(k->impl, "auto"))
        return glia_error(r->ctx, GLIA_EINVAL, "%s: kernel of layer type '%s': impl 'auto' is the core's (the model's "
                          "device picks)", who, k->type);
    if (glia__find_kernel(r->ctx, k->type, k->impl))
        return glia_error(r->ctx, GLIA_EEXIST, "%s: kernel '%s' of layer type '%s' is already registered (by %s)", who,
                          k->impl, k->type, glia__ops_plugin(r->ctx, glia__find_kernel(r->ctx, k->type, k->impl)));
    return add_feature(r, GLIA__FEAT_KERNEL, k);
}

glia_status glia_register_optimizer_type(struct glia_registry *r, const struct glia_optimizer_type *t)
{
    const char *who = plugin_label(r);
    if (!t || t->struct_size < GLIA__END_OF(struct glia_optimizer_type, destroy))
        return glia_error(r->ctx, GLIA_EABI, "%s: glia_register_optimizer_type: struct too small for ABI 2.0", who);
    if (!t->name || !t->create || t->n_state < 0)
        return glia_error(r->ctx, GLIA_EINVAL, "%s: optimizer '%s': name and create are required, n_state >= 0", who,
                          t->name ? t->name : "?");
    if (t->n_state > GLIA__MAX_STATE)
        return glia_error(r->ctx, GLIA_EINVAL, "%s: optimizer '%s': n_state %d, at most %d state arrays are supported",
                          who, t->name, t->n_state, GLIA__MAX_STATE);
    const char *twice = declared_twice(t->keys, NULL);
    if (twice)
        return glia_error(r->ctx, GLIA_EINVAL, "%s: optimizer '%s': key '%s' is declared twice in its keys", who,
                          t->name, twice);
    if (glia__find_optimizer_type(r->ctx, t->name))
        return glia_error(r->ctx, GLIA_EEXIST, "%s: optimizer '%s' is already registered", who, t->name);
    return add_feature(r, GLIA__FEAT_OPTIMIZER, t);
}

glia_status glia_register_optimizer_kernel(struct glia_registry *r, const struct glia_optimizer_kernel *k)
{
    const char *who = plugin_label(r);
    if (!k || k->struct_size < GLIA__END_OF(struct glia_optimizer_kernel, step))
        return glia_error(r->ctx, GLIA_EABI, "%s: glia_register_optimizer_kernel: struct too small for ABI 2.0", who);
    if (!k->type || !k->step)
        return glia_error(r->ctx, GLIA_EINVAL, "%s: optimizer kernel: type and step are required", who);
    if (glia__find_optimizer_kernel(r->ctx, k->type, (int)k->device_type))
        return glia_error(r->ctx, GLIA_EEXIST, "%s: a kernel of optimizer '%s' for device type %d is already registered",
                          who, k->type, (int)k->device_type);
    return add_feature(r, GLIA__FEAT_OPT_KERNEL, k);
}

/* The first slot a backend group lacks ("device" when the group itself is missing, "struct_size" when it is of
 * another SDK), or NULL when it has every slot: the groups' slots are all required (glia/backend.h). */
#define GLIA__GROUP_SIZE(g, T, last) ((g) && (g)->struct_size >= GLIA__END_OF(T, last))
static const char *backend_lacks(const struct glia_backend_ops *o)
{
    const struct glia_backend_device_ops *d = o->device;
    const struct glia_backend_memory_ops *m = o->memory;
    const struct glia_backend_stream_ops *s = o->stream;
    const struct glia_backend_math_ops *x = o->math;
    const struct glia_backend_graph_ops *g = o->graph;
    if (!GLIA__GROUP_SIZE(d, struct glia_backend_device_ops, queue)) return "device";
    if (!d->open || !d->close || !d->configure || !d->queue) return "device.open, close, configure or queue";
    if (!GLIA__GROUP_SIZE(m, struct glia_backend_memory_ops, stats)) return "memory";
    if (!m->alloc || !m->free || !m->host_alloc || !m->host_free || !m->stats)
        return "memory.alloc, free, host_alloc, host_free or stats";
    if (!GLIA__GROUP_SIZE(s, struct glia_backend_stream_ops, wait_copy)) return "stream";
    if (!s->copy || !s->memzero || !s->sync || !s->upload || !s->download || !s->wait_copy)
        return "stream.copy, memzero, sync, upload, download or wait_copy";
    if (!GLIA__GROUP_SIZE(x, struct glia_backend_math_ops, clip_f32)) return "math";
    if (!x->gemm_f32 || !x->transpose_f32 || !x->axpy_f32 || !x->scale_f32 || !x->sumsq_f32 || !x->clip_f32)
        return "math.gemm_f32, transpose_f32, axpy_f32, scale_f32, sumsq_f32 or clip_f32";
    if (g && !GLIA__GROUP_SIZE(g, struct glia_backend_graph_ops, write_u64)) return "graph (its struct_size)";
    if (g && (!g->capture_begin || !g->capture_end || !g->launch || !g->free || !g->write_u64))
        return "graph.capture_begin, capture_end, launch, free or write_u64 (the group is all or nothing)";
    return NULL;
}

glia_status glia_register_backend(struct glia_registry *r, const struct glia_backend_ops *ops)
{
    const char *who = plugin_label(r);
    if (!ops || ops->struct_size < GLIA__END_OF(struct glia_backend_ops, graph))
        return glia_error(r->ctx, GLIA_EABI, "%s: glia_register_backend: ops struct too small for ABI 2.0", who);
    const char *lacks = ops->name ? backend_lacks(ops) : "name";
    if (lacks)
        return glia_error(r->ctx, GLIA_EINVAL, "%s: backend %s: no %s (every slot of the device, memory, stream and "
                          "math groups is required)", who, ops->name ? ops->name : "?", lacks);
    if (glia__find_backend(r->ctx, ops->device_type))
        return glia_error(r->ctx, GLIA_EEXIST, "%s: a backend for device type %d is already registered",
                          who, (int)ops->device_type);
    return add_feature(r, GLIA__FEAT_BACKEND, ops);
}

glia_status glia_register_comm(struct glia_registry *r, const struct glia_comm_ops *ops)
{
    const char *who = plugin_label(r);
    if (!ops || ops->struct_size < GLIA__END_OF(struct glia_comm_ops, wait))
        return glia_error(r->ctx, GLIA_EABI, "%s: glia_register_comm: ops struct too small for ABI 1.3", who);
    if (!ops->name || !ops->open || !ops->close || !ops->all_reduce || !ops->broadcast || !ops->all_gather ||
        !ops->reduce_scatter || !ops->barrier || !ops->wait)
        return glia_error(r->ctx, GLIA_EINVAL,
                          "%s: transport: name, open, close, all_reduce, broadcast, all_gather, reduce_scatter, barrier "
                          "and wait are required", who);
    if ((ops->group_begin == NULL) != (ops->group_end == NULL))
        return glia_error(r->ctx, GLIA_EINVAL, "%s: transport %s: group_begin and group_end go together", who, ops->name);
    if (glia__find_comm(r->ctx, ops->name))
        return glia_error(r->ctx, GLIA_EEXIST, "%s: transport '%s' is already registered", who, ops->name);
    return add_feature(r, GLIA__FEAT_COMM, ops);
}

glia_status glia__load_cuda(struct glia_context *ctx)
{
    if (glia__find_backend(ctx, GLIA_DEVICE_CUDA)) return GLIA_OK;
    glia_status st = glia_plugin_load(ctx, "cuda");
    if (st == GLIA_ENOTFOUND)
        return glia_error(ctx, st, "this build of glia has no CUDA backend (plugin cuda.so not found)");
    if (st) return st;  /* the probe's refusal, in the context error */
    if (!glia__find_backend(ctx, GLIA_DEVICE_CUDA))
        return glia_error(ctx, GLIA_EDEVICE, "plugin cuda.so registers no CUDA backend");
    return GLIA_OK;
}

/* ---- search path ---- */

glia_status glia_plugin_add_path(struct glia_context *ctx, const char *dir)
{
    for (int i = 0; i < ctx->n_paths; i++)
        if (strcmp(ctx->paths[i], dir) == 0) return GLIA_OK;
    char **p = realloc(ctx->paths, (size_t)(ctx->n_paths + 1) * sizeof *p);
    if (!p) return GLIA_ENOMEM;
    ctx->paths = p;
    if (!(p[ctx->n_paths] = glia__strdup(dir))) return GLIA_ENOMEM;
    ctx->n_paths++;
    return GLIA_OK;
}

/* Calls fn(dir, arg) for each folder of a colon-separated list until it returns non-zero. */
static int each_listed(const char *list, int (*fn)(const char *dir, void *arg), void *arg)
{
    char *copy = glia__strdup(list), *save = NULL;
    int found = 0;
    if (!copy) return 0;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save))
        if (*d) found = fn(d, arg);
    free(copy);
    return found;
}

/* Calls fn(dir, arg) for each search directory in order until it returns non-zero: the added
 * ones, $GLIA_PLUGIN_PATH's, then the installed folder, or $GLIA_PLUGIN_SYSTEM_PATH's folders
 * instead of it when that is set (set and empty: none, so a build tree never sees an
 * installed glia). */
static int each_dir(struct glia_context *ctx, int (*fn)(const char *dir, void *arg), void *arg)
{
    for (int i = 0; i < ctx->n_paths; i++)
        if (fn(ctx->paths[i], arg)) return 1;
    const char *env = getenv("GLIA_PLUGIN_PATH");
    if (env && each_listed(env, fn, arg)) return 1;
    const char *sys = getenv("GLIA_PLUGIN_SYSTEM_PATH");
    return sys ? each_listed(sys, fn, arg) : fn(GLIA_PLUGIN_DIR, arg);
}

struct find_arg {
    const char *name;
    char path[4096];
    char searched[2048];
};

/* Appends dir to a comma-separated list (cut at the buffer's end, never overrun). */
static void list_append(char *list, size_t size, const char *dir)
{
    size_t n = strlen(list);
    if (n + 1 < size) snprintf(list + n, size - n, "%s%s", n ? ", " : "", dir);
}

static int find_in(const char *dir, void *argp)
{
    struct find_arg *a = argp;
    struct stat st;
    snprintf(a->path, sizeof a->path, "%s/%s.so", dir, a->name);
    if (stat(a->path, &st) == 0) return 1;
    list_append(a->searched, sizeof a->searched, dir);
    return 0;
}

struct searched_arg {
    char *buf;
    size_t n;
};

static int add_searched(const char *dir, void *argp)
{
    struct searched_arg *a = argp;
    list_append(a->buf, a->n, dir);
    return 0;
}

void glia__plugin_searched(struct glia_context *ctx, char *buf, size_t n)
{
    buf[0] = '\0';
    struct searched_arg a = {buf, n};
    each_dir(ctx, add_searched, &a);
}

/* Whether file name e is a plugin's (ends in ".so" after at least one character). */
static bool is_so_name(const char *e)
{
    size_t len = strlen(e);
    return len > 3 && strcmp(e + len - 3, ".so") == 0;
}

bool glia__plugin_is_file(const char *name_or_path)
{
    return strchr(name_or_path, '/') || is_so_name(name_or_path);
}

/* The .so files of one folder in name order (plugins load in the same order on every machine,
 * so which of two plugins registering one name wins does not depend on the file system). *out
 * is owned (free each entry, then the array); a folder that cannot be read has none. */
static int so_files(const char *dir, struct dirent ***out)
{
    int n = scandir(dir, out, NULL, alphasort);
    if (n < 0) return *out = NULL, 0;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (is_so_name((*out)[i]->d_name)) (*out)[k++] = (*out)[i];
        else free((*out)[i]);
    return k;
}

struct names_arg {
    char **names;          /* owned */
    int n, cap;
};

static int collect_names(const char *dir, void *argp)
{
    struct names_arg *a = argp;
    struct dirent **files;
    int n = so_files(dir, &files);
    for (int i = 0; i < n; i++) {
        if (!glia__grow((void **)&a->names, &a->cap, a->n + 1, sizeof *a->names) &&
            (a->names[a->n] = strndup(files[i]->d_name, strlen(files[i]->d_name) - 3)))
            a->n++;
        free(files[i]);
    }
    free(files);
    return 0;
}

bool glia__plugin_file_near(struct glia_context *ctx, const char *word, char *out, size_t n)
{
    struct names_arg a = {NULL, 0, 0};
    each_dir(ctx, collect_names, &a);
    const char *near = glia__did_you_mean(word, (const char *const *)a.names, a.n);
    if (near) snprintf(out, n, "%s", near);
    for (int i = 0; i < a.n; i++) free(a.names[i]);
    free(a.names);
    return near != NULL;
}

static int loaded_index(struct glia_context *ctx, const char *name)
{
    for (int i = 0; i < ctx->n_plugins; i++)
        if (strcmp(ctx->plugins[i].name, name) == 0) return i;
    return -1;
}

const char *glia__plugin_path(struct glia_context *ctx, const char *name)
{
    int i = loaded_index(ctx, name);
    return i < 0 ? NULL : ctx->plugins[i].path;
}

/* Drop every feature that plugin idx registered (rollback of a failed init). */
static void remove_features(struct glia_context *ctx, int idx)
{
    int k = 0;
    for (int i = 0; i < ctx->n_features; i++)
        if (ctx->features[i].plugin != idx) ctx->features[k++] = ctx->features[i];
    ctx->n_features = k;
}

static glia_status open_checked(struct glia_context *ctx, const char *path, const char *name,
                                void **handle_out, const struct glia_plugin_desc **desc_out)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return glia_error(ctx, GLIA_EPLUGIN, "%s: cannot load plugin: %s", path, dlerror());
    glia_plugin_entry_fn entry = (glia_plugin_entry_fn)dlsym(h, GLIA_PLUGIN_ENTRY_SYMBOL);
    const struct glia_plugin_desc *d = entry ? entry() : NULL;
    glia_status s = GLIA_OK;
    size_t min = GLIA__END_OF(struct glia_plugin_desc, init);
    if (!entry)
        s = glia_error(ctx, GLIA_EPLUGIN, "%s: symbol %s not found: not a glia plugin", path,
                       GLIA_PLUGIN_ENTRY_SYMBOL);
    else if (!d)
        s = glia_error(ctx, GLIA_EPLUGIN, "%s: %s returned no descriptor", path, GLIA_PLUGIN_ENTRY_SYMBOL);
    else if (d->struct_size < 3 * sizeof(uint32_t))
        s = glia_error(ctx, GLIA_EABI, "%s: %s: descriptor of %u bytes is too small", path,
                       GLIA_PLUGIN_ENTRY_SYMBOL, d->struct_size);
    else if (d->abi_major != GLIA_ABI_MAJOR || d->abi_minor > GLIA_ABI_MINOR)
        s = glia_error(ctx, GLIA_EABI, "%s: %s: plugin ABI %u.%u, core ABI %d.%d (%s)", path,
                       GLIA_PLUGIN_ENTRY_SYMBOL, d->abi_major, d->abi_minor, GLIA_ABI_MAJOR,
                       GLIA_ABI_MINOR,
                       d->abi_major != GLIA_ABI_MAJOR ? "major versions differ: rebuild the plugin against this glia"
                                                      : "the plugin needs a newer glia");
    else if (d->struct_size < min)
        s = glia_error(ctx, GLIA_EABI, "%s: %s: descriptor of %u bytes is smaller than ABI %d.0's %zu",
                       path, GLIA_PLUGIN_ENTRY_SYMBOL, d->struct_size, GLIA_ABI_MAJOR, min);
    else if (!d->name || strcmp(d->name, name) != 0)
        s = glia_error(ctx, GLIA_EPLUGIN, "%s: %s: descriptor name '%s' does not match file name '%s'",
                       path, GLIA_PLUGIN_ENTRY_SYMBOL, d->name ? d->name : "(null)", name);
    else if (!d->init)
        s = glia_error(ctx, GLIA_EPLUGIN, "%s: %s: descriptor has no init function", path,
                       GLIA_PLUGIN_ENTRY_SYMBOL);
    if (s) {
        dlclose(h);
        return s;
    }
    *handle_out = h;
    *desc_out = d;
    return GLIA_OK;
}

static glia_status load_path(struct glia_context *ctx, const char *path, const char *name)
{
    if (loaded_index(ctx, name) >= 0) return GLIA_OK;
    void *h = NULL;
    const struct glia_plugin_desc *d = NULL;
    glia_status s = open_checked(ctx, path, name, &h, &d);
    if (s) return s;
    if (d->struct_size >= GLIA__END_OF(struct glia_plugin_desc, probe) && d->probe) {
        char why[512] = "";
        s = d->probe(ctx, why, sizeof why);
        if (s) {
            dlclose(h);
            return glia_error(ctx, GLIA_EPROBE, "%s: plugin '%s' refused this machine: %s", path, name,
                              why[0] ? why : glia_strerror(s));
        }
    }
    if (glia__grow((void **)&ctx->plugins, &ctx->cap_plugins, ctx->n_plugins + 1, sizeof *ctx->plugins)) {
        dlclose(h);
        return GLIA_ENOMEM;
    }
    int idx = ctx->n_plugins;
    struct glia__plugin *p = &ctx->plugins[idx];
    *p = (struct glia__plugin){glia__strdup(name), glia__strdup(path), h, d};
    if (!p->name || !p->path) {
        free(p->name);
        free(p->path);
        dlclose(h);
        return GLIA_ENOMEM;
    }
    ctx->n_plugins++;
    glia_context_clear_error(ctx);
    struct glia_registry r = {ctx, idx};
    s = d->init(&r);
    if (s) {
        char detail[GLIA__ERRMSG_MAX];
        snprintf(detail, sizeof detail, "%s", ctx->error[0] ? ctx->error : glia_strerror(s));
        remove_features(ctx, idx);
        ctx->n_plugins--;
        free(p->name);
        free(p->path);
        dlclose(h);
        return glia_error(ctx, s, "%s: plugin '%s' init failed (%s): %s", path, name, glia_status_name(s), detail);
    }
    return GLIA_OK;
}

void glia__plugin_base_name(const char *path, char *out, size_t n)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t len = strlen(b);
    if (len >= n) len = n - 1;  /* names are short; a longer one is cut, never overrun */
    memcpy(out, b, len);
    out[len] = '\0';
    if (len > 3 && strcmp(out + len - 3, ".so") == 0) out[len - 3] = '\0';
}

glia_status glia_plugin_load(struct glia_context *ctx, const char *name_or_path)
{
    char name[256];
    bool is_path = glia__plugin_is_file(name_or_path);
    glia__plugin_base_name(name_or_path, name, sizeof name);
    if (loaded_index(ctx, name) >= 0) return GLIA_OK;
    if (is_path) {
        /* dlopen looks a name without a '/' up in LD_LIBRARY_PATH and the system's library
         * folders: "x.so" is the file x.so of the working directory, so it gets its "./". */
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s%s", strchr(name_or_path, '/') ? "" : "./", name_or_path) >=
            sizeof path)
            return glia_error(ctx, GLIA_EINVAL, "plugin path %.64s... is too long", name_or_path);
        struct stat st;
        if (stat(path, &st) != 0)
            return glia_error(ctx, GLIA_ENOTFOUND, "plugin file %s not found", path);
        return load_path(ctx, path, name);
    }
    struct find_arg *a = calloc(1, sizeof *a);
    if (!a) return GLIA_ENOMEM;
    a->name = name;
    glia_status s;
    if (each_dir(ctx, find_in, a)) s = load_path(ctx, a->path, name);
    else s = glia_error(ctx, GLIA_ENOTFOUND, "plugin '%s' not found (searched: %s)", name, a->searched);
    free(a);
    return s;
}

static int load_dir(const char *dir, void *ctxp)
{
    struct glia_context *ctx = ctxp;
    struct dirent **files;
    int n = so_files(dir, &files);
    char path[4096], name[256];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]->d_name);
        free(files[i]);
        glia__plugin_base_name(path, name, sizeof name);
        if (loaded_index(ctx, name) >= 0) continue;
        glia_status st = load_path(ctx, path, name);
        /* a probe refusal (the CUDA plugin on a machine without a GPU) is normal: debug only */
        if (st) glia_log(ctx, st == GLIA_EPROBE ? GLIA_LOG_DEBUG : GLIA_LOG_WARN, "%s", ctx->error);
    }
    free(files);
    return 0;
}

glia_status glia_plugin_load_all(struct glia_context *ctx)
{
    each_dir(ctx, load_dir, ctx);
    glia_context_clear_error(ctx);
    return GLIA_OK;
}

void glia__plugins_unload(struct glia_context *ctx)
{
    for (int i = ctx->n_plugins - 1; i >= 0; i--) {
        struct glia__plugin *p = &ctx->plugins[i];
        if (p->handle && !getenv("GLIA_NO_DLCLOSE")) dlclose(p->handle);
        free(p->name);
        free(p->path);
    }
    free(ctx->plugins);
    ctx->plugins = NULL;
    ctx->n_plugins = 0;
}

/* ---- describing what is loaded ---- */

static const char *device_type_name(enum glia_device_type t) { return t == GLIA_DEVICE_CUDA ? "cuda" : "cpu"; }

static const char *key_type_name(enum glia_key_type t)
{
    switch (t) {
    case GLIA_KEY_INT: return "int";
    case GLIA_KEY_FLOAT: return "float";
    case GLIA_KEY_BOOL: return "bool";
    case GLIA_KEY_STRING: return "string";
    case GLIA_KEY_ENUM: return "enum";
    case GLIA_KEY_LIST: return "list";
    }
    return "?";
}

void glia_keys_print(FILE *f, const struct glia_key *keys)
{
    for (const struct glia_key *k = keys; k && k->name; k++) {
        char def[160];
        if (k->required) snprintf(def, sizeof def, "required");
        else if (k->default_value) snprintf(def, sizeof def, "default %s", k->default_value);
        else snprintf(def, sizeof def, "optional");
        fprintf(f, "      %-18s %-6s %-18s %s", k->name, key_type_name(k->type), def, k->doc ? k->doc : "");
        if (k->type == GLIA_KEY_ENUM && k->choices) fprintf(f, " (%s)", k->choices);
        fputc('\n', f);
    }
}

glia_status glia_plugin_print(struct glia_context *ctx, FILE *f, const char *only)
{
    /* libglia's own features first, then the plugins by name (not in the order they loaded) */
    int *order = malloc(((size_t)ctx->n_plugins + 1) * sizeof *order);
    if (!order) return GLIA_ENOMEM;
    order[0] = -1;
    for (int i = 0; i < ctx->n_plugins; i++) {  /* insertion sort: a few dozen plugins */
        int k = i + 1;
        for (; k > 1 && strcmp(ctx->plugins[order[k - 1]].name, ctx->plugins[i].name) > 0; k--) order[k] = order[k - 1];
        order[k] = i;
    }
    int shown = 0;
    for (int oi = 0; oi <= ctx->n_plugins; oi++) {
        int pi = order[oi];
        const char *pname = pi < 0 ? "libglia" : ctx->plugins[pi].name;
        bool want_plugin = !only || strcmp(only, pname) == 0;
        bool header = false;
        for (int i = 0; i < ctx->n_features; i++) {
            const struct glia__feature *ft = &ctx->features[i];
            if (ft->plugin != pi) continue;
            const char *fname = glia__feature_name(ft);
            if (!want_plugin && strcmp(only, fname) != 0) continue;
            if (!header) {
                if (pi < 0) fprintf(f, "libglia (built in)\n");
                else {
                    const struct glia_plugin_desc *d = ctx->plugins[pi].desc;
                    fprintf(f, "%s %s (%s) — %s\n    %s\n", d->name, d->version ? d->version : "",
                            d->license ? d->license : "?", d->description ? d->description : "",
                            ctx->plugins[pi].path);
                }
                header = true;
            }
            shown++;
            if (ft->kind == GLIA__FEAT_TYPE) {
                const struct glia_layer_type *t = ft->ops;
                fprintf(f, "  layer %s: %s\n", t->name, t->doc ? t->doc : "");
                if (only) glia_keys_print(f, t->keys);
            } else if (ft->kind == GLIA__FEAT_KERNEL) {
                const struct glia_kernel *k = ft->ops;
                fprintf(f, "  kernel %s impl %s (%s)%s%s\n", k->type, k->impl, device_type_name(k->device_type),
                        k->doc ? ": " : "", k->doc ? k->doc : "");
            } else if (ft->kind == GLIA__FEAT_OPTIMIZER) {
                const struct glia_optimizer_type *t = ft->ops;
                fprintf(f, "  optimizer %s: %s\n", t->name, t->doc ? t->doc : "");
                if (only) glia_keys_print(f, t->keys);
            } else if (ft->kind == GLIA__FEAT_OPT_KERNEL) {
                const struct glia_optimizer_kernel *k = ft->ops;
                fprintf(f, "  optimizer kernel %s (%s)%s%s\n", k->type, device_type_name(k->device_type),
                        k->doc ? ": " : "", k->doc ? k->doc : "");
            } else if (ft->kind == GLIA__FEAT_COMM) {
                const struct glia_comm_ops *o = ft->ops;
                fprintf(f, "  transport %s: %s\n", o->name, o->description ? o->description : "");
            } else {
                fprintf(f, "  backend %s\n", fname);
            }
        }
    }
    free(order);
    if (only && !shown) return glia_error(ctx, GLIA_ENOTFOUND, "no plugin or feature named '%s' is loaded", only);
    return GLIA_OK;
}
