/* core/glia.c — a context's life: created with libglia's own features (the CPU backend, the "self" transport),
 * freed with everything opened through it (communicators, devices, plugins). Not the context's errors, log and
 * registry (core/context.c): this file sits above every other part of libglia, and nothing in libglia calls it. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* The log level $GLIA_LOG_LEVEL names (error, warning, info or debug), else info. */
static enum glia_log_level env_log_level(void)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    const char *v = getenv("GLIA_LOG_LEVEL");
    for (int i = 0; v && i < 4; i++)
        if (!strcmp(v, names[i])) return (enum glia_log_level)i;
    return GLIA_LOG_INFO;
}

glia_status glia_context_new(struct glia_context **out)
{
    struct glia_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return GLIA_ENOMEM;
    ctx->log = stderr;
    ctx->level = env_log_level();
    glia_status s = glia__cpu_backend_register(ctx);
    if (!s) s = glia__self_comm_register(ctx);
    if (s) {
        free(ctx->features);
        free(ctx);
        return s;
    }
    *out = ctx;
    return GLIA_OK;
}

void glia_context_free(struct glia_context *ctx)
{
    if (!ctx) return;
    glia__comms_close(ctx);
    glia__backends_close(ctx);
    glia__plugins_unload(ctx);
    for (int i = 0; i < ctx->n_paths; i++) free(ctx->paths[i]);
    free(ctx->paths);
    free(ctx->features);
    free(ctx);
}
