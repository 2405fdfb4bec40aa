/* core/trace.c — the events glia profile records for a Chrome trace (Trace Event Format, complete
 * "X" events) and the JSON writer for them. Not the timing itself: core/train.c measures. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "parts.h"

static const char *const cat_name[] = {"step", "input", "forward", "backward", "comm", "optimizer", "recompute"};

glia_status glia__trace_reserve(struct glia__trace *t, size_t n)
{
    if (n <= t->cap) return GLIA_OK;
    struct glia__trace_event *e = realloc(t->ev, n * sizeof *e);
    if (!e) return GLIA_ENOMEM;
    t->ev = e;
    t->cap = n;
    return GLIA_OK;
}

struct glia__trace_event *glia__trace_add(struct glia__trace *t, enum glia__trace_cat cat, const char *name,
                                          double t0, double t1)
{
    if (t->n == t->cap && glia__trace_reserve(t, t->cap ? 2 * t->cap : 256)) {
        t->lost = true;
        return NULL;
    }
    struct glia__trace_event *e = &t->ev[t->n++];
    *e = (struct glia__trace_event){.cat = cat, .name = name, .step = t->step, .t0 = t0, .t1 = t1};
    return e;
}

void glia__trace_free(struct glia__trace *t)
{
    free(t->ev);
    *t = (struct glia__trace){0};
}

void glia__json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
            else fputc(*p, f);
        }
    }
    fputc('"', f);
}

/* Seconds after base as whole nanoseconds, so that an event's start and end round the same way
 * and an event inside another stays inside it in the file. */
static long long ns_after(double t, double base)
{
    double d = t > base ? (t - base) * 1e9 : 0;
    return llround(d);
}

int glia__trace_write(const struct glia__trace *t, FILE *f, int pid)
{
    fputs("{\"traceEvents\":[\n", f);
    for (size_t i = 0; i < t->n; i++) {
        const struct glia__trace_event *e = &t->ev[i];
        long long a = ns_after(e->t0, t->t_base), b = ns_after(e->t1, t->t_base);
        if (b < a) b = a;
        fputs("{\"name\":", f);
        if (e->cat == GLIA__TRACE_STEP) fprintf(f, "\"step %lld\"", (long long)e->step);
        else glia__json_string(f, e->name ? e->name : cat_name[e->cat]);
        fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%lld.%03lld,\"dur\":%lld.%03lld,\"pid\":%d,\"tid\":0,\"args\":{",
                cat_name[e->cat], a / 1000, a % 1000, (b - a) / 1000, (b - a) % 1000, pid);
        fprintf(f, "\"step\":%lld", (long long)e->step);
        if (e->cat == GLIA__TRACE_STEP) fprintf(f, ",\"batch\":%lld", (long long)e->batch);
        if (e->type) {
            fputs(",\"type\":", f);
            glia__json_string(f, e->type);
        }
        if (e->impl) {
            fputs(",\"impl\":", f);
            glia__json_string(f, e->impl);
        }
        if (e->shape.ndim > 0) {
            char shp[256];
            fprintf(f, ",\"output\":\"%s\"", glia_shape_str(&e->shape, shp, sizeof shp));
        }
        fprintf(f, "}}%s\n", i + 1 < t->n ? "," : "");
    }
    fputs("],\"displayTimeUnit\":\"ms\"}\n", f);
    return ferror(f) ? -1 : 0;
}
