/* core/context.c — the context: error message, log, status table, feature registry lookups.
 * Not the loader (core/plugin.c) and not the backends (backends/). */
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

const char *glia_strerror(glia_status s)
{
    switch (s) {
#define GLIA__STATUS_TEXT(name, value, text) case GLIA_##name: return text;
        GLIA_STATUS_MAP(GLIA__STATUS_TEXT)
#undef GLIA__STATUS_TEXT
    }
    return "unknown status";
}

const char *glia_status_name(glia_status s)
{
    switch (s) {
#define GLIA__STATUS_NAME(name, value, text) case GLIA_##name: return "GLIA_" #name;
        GLIA_STATUS_MAP(GLIA__STATUS_NAME)
#undef GLIA__STATUS_NAME
    }
    return "GLIA_UNKNOWN";
}



/* Formatted aside first: an argument may be the context's error itself (a message wrapping the one before). */
glia_status glia_error(struct glia_context *ctx, glia_status s, const char *fmt, ...)
{
    if (!ctx) return s;
    char buf[sizeof ctx->error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(ctx->error, buf, sizeof buf);
    return s;
}

glia_status glia_error_wrap(struct glia_context *ctx, glia_status s, const char *fmt, ...)
{
    if (!ctx) return s;
    char text[sizeof ctx->error], buf[2 * sizeof ctx->error + 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    snprintf(buf, sizeof buf, "%s%s%s", text, ctx->error[0] ? ": " : "", ctx->error);
    size_t n = strlen(buf) < sizeof ctx->error ? strlen(buf) : sizeof ctx->error - 1;  /* cut at the message's size */
    memcpy(ctx->error, buf, n);
    ctx->error[n] = '\0';
    return s;
}

const char *glia_context_error(const struct glia_context *ctx) { return ctx ? ctx->error : ""; }
void glia_context_clear_error(struct glia_context *ctx) { ctx->error[0] = '\0'; }

void glia_log_set(struct glia_context *ctx, FILE *sink, enum glia_log_level level)
{
    ctx->log = sink;
    ctx->level = level;
}

void glia_log(struct glia_context *ctx, enum glia_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"error", "warning", "info", "debug"};
    if (!ctx || !ctx->log || level > ctx->level) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(ctx->log, "glia: %s: ", names[level]);
    vfprintf(ctx->log, fmt, ap);
    fputc('\n', ctx->log);
    va_end(ap);
}

void glia__assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "glia: internal error: %s:%d: assertion '%s' failed\n", file, line, expr);
    abort();
}

/* ---- registry lookups ---- */

const struct glia_layer_type *glia__find_type(struct glia_context *ctx, const char *name)
{
    for (int i = 0; i < ctx->n_features; i++) {
        const struct glia__feature *f = &ctx->features[i];
        if (f->kind == GLIA__FEAT_TYPE && !strcmp(((const struct glia_layer_type *)f->ops)->name, name)) return f->ops;
    }
    return NULL;
}

const struct glia_kernel *glia__find_kernel(struct glia_context *ctx, const char *type, const char *impl)
{
    for (int i = 0; i < ctx->n_features; i++) {
        const struct glia__feature *f = &ctx->features[i];
        if (f->kind != GLIA__FEAT_KERNEL) continue;
        const struct glia_kernel *k = f->ops;
        if (!strcmp(k->type, type) && (!impl || !strcmp(k->impl, impl))) return k;
    }
    return NULL;
}

const struct glia_kernel *glia__find_kernel_for(struct glia_context *ctx, const char *type, enum glia_device_type t)
{
    for (int i = 0; i < ctx->n_features; i++) {
        const struct glia__feature *f = &ctx->features[i];
        const struct glia_kernel *k = f->ops;
        if (f->kind == GLIA__FEAT_KERNEL && !strcmp(k->type, type) && k->device_type == t) return k;
    }
    return NULL;
}

const char *glia__ops_plugin(const struct glia_context *ctx, const void *ops)
{
    for (int i = 0; i < ctx->n_features; i++) {
        const struct glia__feature *f = &ctx->features[i];
        if (f->ops == ops) return f->plugin >= 0 ? ctx->plugins[f->plugin].name : "libglia";
    }
    return "libglia";
}



int glia__layer_impls(struct glia_context *ctx, const char *type, char *buf, size_t n)
{
    int count = 0;
    buf[0] = '\0';
    for (int i = 0; i < ctx->n_features; i++) {
        const struct glia__feature *f = &ctx->features[i];
        if (f->kind != GLIA__FEAT_KERNEL) continue;
        const struct glia_kernel *k = f->ops;
        if (strcmp(k->type, type) != 0) continue;
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s", count ? ", " : "", k->impl);
        count++;
    }
    return count;
}

const struct glia_optimizer_type *glia__find_optimizer_type(struct glia_context *ctx, const char *name)
{
    for (int i = 0; i < ctx->n_features; i++) {
        const struct glia__feature *f = &ctx->features[i];
        if (f->kind == GLIA__FEAT_OPTIMIZER && !strcmp(((const struct glia_optimizer_type *)f->ops)->name, name))
            return f->ops;
    }
    return NULL;
}

const struct glia_optimizer_kernel *glia__find_optimizer_kernel(struct glia_context *ctx, const char *name, int t)
{
    for (int i = 0; i < ctx->n_features; i++) {
        const struct glia__feature *f = &ctx->features[i];
        const struct glia_optimizer_kernel *k = f->ops;
        if (f->kind == GLIA__FEAT_OPT_KERNEL && !strcmp(k->type, name) && (t < 0 || (int)k->device_type == t))
            return k;
    }
    return NULL;
}

const struct glia_backend_ops *glia__find_backend(struct glia_context *ctx, enum glia_device_type t)
{
    for (int i = 0; i < ctx->n_features; i++) {
        const struct glia__feature *f = &ctx->features[i];
        if (f->kind == GLIA__FEAT_BACKEND &&
            ((const struct glia_backend_ops *)f->ops)->device_type == t)
            return f->ops;
    }
    return NULL;
}

const char *glia__feature_name(const struct glia__feature *f)
{
    switch (f->kind) {
    case GLIA__FEAT_TYPE: return ((const struct glia_layer_type *)f->ops)->name;
    case GLIA__FEAT_KERNEL: return ((const struct glia_kernel *)f->ops)->type;
    case GLIA__FEAT_OPTIMIZER: return ((const struct glia_optimizer_type *)f->ops)->name;
    case GLIA__FEAT_OPT_KERNEL: return ((const struct glia_optimizer_kernel *)f->ops)->type;
    case GLIA__FEAT_BACKEND: return ((const struct glia_backend_ops *)f->ops)->name;
    default: return ((const struct glia_comm_ops *)f->ops)->name;
    }
}

const struct glia_comm_ops *glia__find_comm(struct glia_context *ctx, const char *name)
{
    for (int i = 0; i < ctx->n_features; i++) {
        const struct glia__feature *f = &ctx->features[i];
        if (f->kind == GLIA__FEAT_COMM && strcmp(((const struct glia_comm_ops *)f->ops)->name, name) == 0) return f->ops;
    }
    return NULL;
}

int glia__feature_names(struct glia_context *ctx, int kind, const char **names, int max)
{
    int n = 0;
    for (int i = 0; i < ctx->n_features && n < max; i++) {
        const struct glia__feature *f = &ctx->features[i];
        if (f->kind != kind) continue;
        const char *name = glia__feature_name(f);
        int dup = 0;
        for (int j = 0; j < n; j++) dup |= strcmp(names[j], name) == 0;
        if (!dup) names[n++] = name;
    }
    return n;
}

glia_status glia_backend_get(struct glia_context *ctx, struct glia_device dev,
                             struct glia_backend **out)
{
    for (int i = 0; i < ctx->n_backends; i++) {
        struct glia_backend *b = ctx->backends[i];
        if (b->device.type == dev.type && b->device.index == dev.index) {
            *out = b;
            return GLIA_OK;
        }
    }
    char name[32];
    glia_device_str(dev, name, sizeof name);
    const struct glia_backend_ops *ops = glia__find_backend(ctx, dev.type);
    if (!ops) return glia_error(ctx, GLIA_EDEVICE, "no backend for device %s is loaded", name);
    if (glia__grow((void **)&ctx->backends, &ctx->cap_backends, ctx->n_backends + 1, sizeof *ctx->backends))
        return GLIA_ENOMEM;
    struct glia_backend *b = calloc(1, sizeof *b);
    if (!b) return GLIA_ENOMEM;
    b->ops = ops;
    b->device = dev;
    b->ctx = ctx;
    b->options = (struct glia_runtime_options){sizeof b->options, GLIA_PRECISION_FP32, true, (size_t)1 << 30, false};
    glia_status s = ops->open(ctx, dev.index, &b->priv);
    if (s) {
        free(b);
        return s;
    }
    if (GLIA__HAS_SLOT(ops, configure) && (s = ops->configure(b->priv, &b->options))) {  /* the defaults */
        if (ops->close) ops->close(b->priv);
        free(b);
        return s;
    }
    ctx->backends[ctx->n_backends++] = b;
    *out = b;
    return GLIA_OK;
}

void glia__backends_close(struct glia_context *ctx)
{
    for (int i = 0; i < ctx->n_backends; i++) {
        struct glia_backend *b = ctx->backends[i];
        if (b->ops->close) b->ops->close(b->priv);
        free(b);
    }
    free(ctx->backends);
    ctx->backends = NULL;
    ctx->n_backends = ctx->cap_backends = 0;
}

glia_status glia_backend_gemm_f32(struct glia_backend *b, bool trans_a, bool trans_b, int64_t M,
                                  int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    return b->ops->gemm_f32(b->priv, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

glia_status glia_backend_sync(struct glia_backend *b)
{
    return b->ops->sync ? b->ops->sync(b->priv) : GLIA_OK;
}

glia_status glia_backend_memory_stats(struct glia_backend *b, struct glia_memory_stats *out)
{
    if (!GLIA__HAS_SLOT(b->ops, memory_stats)) return GLIA_EUNSUPPORTED;
    return b->ops->memory_stats(b->priv, out);
}


glia_status glia_backend_configure(struct glia_backend *b, const struct glia_runtime_options *o)
{
    bool has = GLIA__HAS_SLOT(b->ops, configure);
    if (!has && o->precision != GLIA_PRECISION_FP32)
        return glia_error(b->ctx, GLIA_EUNSUPPORTED, "precision %s needs a CUDA device; the %s backend computes in fp32 only",
                          glia_precision_name(o->precision), b->ops->name);
    glia_status st = has ? b->ops->configure(b->priv, o) : GLIA_OK;
    if (st) return st;
    b->options = *o;
    b->options.struct_size = sizeof b->options;
    return GLIA_OK;
}

const char *glia_precision_name(enum glia_precision p)
{
    switch (p) {
    case GLIA_PRECISION_FP32: return "fp32";
    case GLIA_PRECISION_TF32: return "tf32";
    case GLIA_PRECISION_BF16: return "bf16";
    case GLIA_PRECISION_FP16: return "fp16";
    }
    return "?";
}

glia_status glia_device_parse(const char *s, struct glia_device *out)
{
    if (strcmp(s, "cpu") == 0) {
        *out = (struct glia_device){GLIA_DEVICE_CPU, 0};
        return GLIA_OK;
    }
    if (strncmp(s, "cuda", 4) == 0) {
        int idx = 0;
        if (s[4] == ':') {
            char *end;
            long v = strtol(s + 5, &end, 10);
            if (end == s + 5 || *end || v < 0 || v > 255) return GLIA_EINVAL;
            idx = (int)v;
        } else if (s[4]) {
            return GLIA_EINVAL;
        }
        *out = (struct glia_device){GLIA_DEVICE_CUDA, idx};
        return GLIA_OK;
    }
    return GLIA_EINVAL;
}

char *glia_device_str(struct glia_device d, char *buf, size_t n)
{
    if (d.type == GLIA_DEVICE_CPU) snprintf(buf, n, "cpu");
    else snprintf(buf, n, "cuda:%d", d.index);
    return buf;
}
