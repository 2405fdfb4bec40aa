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
