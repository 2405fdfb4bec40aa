/* glia/log.h — the context, its error message and its log.
 * Not a logging framework: one sink (a FILE*), one level. */
#ifndef GLIA_LOG_H
#define GLIA_LOG_H

#include <stdarg.h>
#include <stdio.h>
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define GLIA_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define GLIA_PRINTF(f, a)
#endif

/* A context owns the registry of features (layers, optimizers, backends), the loaded
 * plugins and the last error message. One per program is usual; not thread-safe. */
struct glia_context;

enum glia_log_level { GLIA_LOG_ERROR = 0, GLIA_LOG_WARN, GLIA_LOG_INFO, GLIA_LOG_DEBUG };

glia_status glia_context_new(struct glia_context **out /* (owned) */);
void glia_context_free(struct glia_context *ctx);

/* Records a one-line error message ("model.ini:12: [fc] outputs: ...") and returns s,
 * so that `return glia_error(ctx, GLIA_ECONFIG, "...")` reads naturally. An argument may be
 * glia_context_error(ctx): the message then wraps the one before it. */
glia_status glia_error(struct glia_context *ctx, glia_status s, const char *fmt, ...)
    GLIA_PRINTF(3, 4);
/* Adds what the caller was doing before the context's error, the error of a call that failed: the message becomes
 * "<formatted text>: <error>" (the text alone when there was none). Returns s. */
glia_status glia_error_wrap(struct glia_context *ctx, glia_status s, const char *fmt, ...) GLIA_PRINTF(3, 4);
/* The last error message (borrowed; "" when none). */
const char *glia_context_error(const struct glia_context *ctx);
void glia_context_clear_error(struct glia_context *ctx);

/* Log sink and level; defaults: stderr, GLIA_LOG_INFO. */
void glia_log_set(struct glia_context *ctx, FILE *sink /* (borrowed) */, enum glia_log_level level);
void glia_log(struct glia_context *ctx, enum glia_log_level level, const char *fmt, ...)
    GLIA_PRINTF(3, 4);

/* Internal invariants only (never user input): prints and aborts. */
#define GLIA_ASSERT(cond)                                                        \
    do {                                                                         \
        if (!(cond)) glia__assert_fail(#cond, __FILE__, __LINE__);               \
    } while (0)
void glia__assert_fail(const char *expr, const char *file, int line);

#ifdef __cplusplus
}
#endif
#endif
