/* core/data_tokens.c — the token-file reader ([data] format = tokens): labelled variable-length
 * sequences of token ids, text (raw or gzip), loaded whole into memory. Not a tokenizer. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

#define TOK_MAX_LABEL 65535          /* labels are class indices */
#define TOK_MAX_SAMPLES ((int64_t)1 << 31)

struct reader {
    struct glia_context *ctx;
    const char *path;
    struct glia__zfile *zf;
    char *line;
    size_t cap;
    int64_t lineno;
    char in[1 << 16];     /* read ahead: in[at .. have) */
    size_t at, have;
    bool end;             /* the file has no more */
};

/* Next line into r->line (without its newline); *eof at the end. */
static glia_status next_line(struct reader *r, bool *eof)
{
    size_t len = 0;
    *eof = false;
    for (;;) {
        if (r->at == r->have) {
            if (r->end) break;
            glia_status st = glia__zfile_read(r->zf, r->in, sizeof r->in, &r->have);
            if (st) return st;
            r->at = 0;
            r->end = r->have < sizeof r->in;
            if (r->have == 0) break;
        }
        const char *s = r->in + r->at, *nl = memchr(s, '\n', r->have - r->at);
        size_t k = nl ? (size_t)(nl - s) + 1 : r->have - r->at;
        if (len + k + 1 > r->cap) {
            size_t cap = r->cap ? r->cap : 4096;
            while (cap < len + k + 1) cap *= 2;
            char *p = realloc(r->line, cap);
            if (!p) return glia_error(r->ctx, GLIA_ENOMEM, "%s:%lld: out of memory reading a line", r->path, (long long)r->lineno + 1);
            r->line = p, r->cap = cap;
        }
        memcpy(r->line + len, s, k);
        len += k;
        r->at += k;
        if (nl) break;
    }
    if (len == 0) return *eof = true, GLIA_OK;  /* a last line without a newline is still a line */
    r->line[len] = '\0';
    if (memchr(r->line, '\0', len))
        return glia_error(r->ctx, GLIA_EFORMAT, "%s:%lld: a NUL byte: not a token file", r->path, (long long)r->lineno + 1);
    r->lineno++;
    while (len > 0 && (r->line[len - 1] == '\n' || r->line[len - 1] == '\r')) r->line[--len] = '\0';
    return GLIA_OK;
}

/* Parses the next decimal integer at *p; false at the end of the line. */
static glia_status next_int(struct reader *r, char **p, long long *v, bool *got, const char *what)
{
    char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    *got = *s != '\0';
    if (!*got) return GLIA_OK;
    errno = 0;
    char *end;
    *v = strtoll(s, &end, 10);
    if (end == s || (*end && *end != ' ' && *end != '\t') || errno == ERANGE) {
        int n = (int)strcspn(s, " \t");
        return glia_error(r->ctx, GLIA_EFORMAT, "%s:%lld: %s '%.*s' is not an integer", r->path, (long long)r->lineno, what,
                          n > 40 ? 40 : n, s);
    }
    *p = end;
    return GLIA_OK;
}

static glia_status grow(void **p, int64_t *cap, int64_t need, size_t sz)
{
    if (need <= *cap) return GLIA_OK;
    int64_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q) return GLIA_ENOMEM;
    *p = q, *cap = c;
    return GLIA_OK;
}

glia_status glia__tokens_load(struct glia_context *ctx, const char *path, int64_t vocab, int64_t max_length,
                              int64_t limit, struct glia__dataset *out)
{
    memset(out, 0, sizeof *out);
    struct reader r = {.ctx = ctx, .path = path};
    glia_status st = glia__zfile_open(ctx, path, &r.zf);
    if (st) return st;
    int64_t cap_s = 0, cap_o = 0, cap_t = 0, n = 0, total = 0, longest = 0;
    int max_label = -1;
    int64_t max_line = 0;
    out->tokens = true;
    while (!st && (limit <= 0 || n < limit)) {
        bool eof, got;
        if ((st = next_line(&r, &eof)) || eof) break;
        char *p = r.line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '#') continue;
        long long v;
        if ((st = next_int(&r, &p, &v, &got, "label"))) break;
        if (v < 0 || v > TOK_MAX_LABEL) {
            st = glia_error(ctx, GLIA_EFORMAT, "%s:%lld: label %lld is out of range 0..%d", path, (long long)r.lineno, v,
                            TOK_MAX_LABEL);
            break;
        }
        if (n + 1 >= TOK_MAX_SAMPLES) {
            st = glia_error(ctx, GLIA_EFORMAT, "%s:%lld: more than %lld samples", path, (long long)r.lineno,
                            (long long)TOK_MAX_SAMPLES - 1);
            break;
        }
        if (grow((void **)&out->labels, &cap_s, n + 1, sizeof *out->labels) ||
            grow((void **)&out->offsets, &cap_o, n + 2, sizeof *out->offsets)) {  /* offsets: n + 1 entries */
            st = glia_error(ctx, GLIA_ENOMEM, "%s: cannot allocate %lld samples", path, (long long)n + 1);
            break;
        }
        out->offsets[n] = total;
        out->labels[n] = (int32_t)v;
        if ((int)v > max_label) {
            max_label = (int)v;
            max_line = r.lineno;
        }
        int64_t len = 0;
        for (;;) {
            if ((st = next_int(&r, &p, &v, &got, "token id")) || !got) break;
            if (v < 1 || v >= vocab) {
                st = glia_error(ctx, GLIA_EFORMAT, "%s:%lld: token id %lld is out of range 1..%lld (%s)", path,
                                (long long)r.lineno, v, (long long)vocab - 1,
                                v == 0 ? "0 is the padding id" : "[data] vocab sets the range");
                break;
            }
            if (max_length > 0 && len >= max_length) continue;  /* truncated */
            if (grow((void **)&out->ids, &cap_t, total + 1, sizeof *out->ids)) {
                st = glia_error(ctx, GLIA_ENOMEM, "%s: cannot allocate %lld token ids", path, (long long)total + 1);
                break;
            }
            out->ids[total++] = (int32_t)v;
            len++;
        }
        if (len > longest) longest = len;
        n++;
        out->offsets[n] = total;
    }
    glia__zfile_close(r.zf);
    free(r.line);
    if (!st && n == 0) st = glia_error(ctx, GLIA_EFORMAT, "%s: no samples (expected lines 'label id id ...')", path);
    if (!st && !out->ids && !(out->ids = malloc(sizeof *out->ids)))  /* every sample empty: still a valid pointer */
        st = glia_error(ctx, GLIA_ENOMEM, "%s: out of memory", path);
    if (!st && longest > INT_MAX) st = glia_error(ctx, GLIA_EFORMAT, "%s: a sample of %lld ids is too long", path, (long long)longest);
    if (st) {
        glia__dataset_free(out);
        return st;
    }
    out->n = n;
    out->channels = 1;
    out->rows = 1;
    out->cols = (int)(longest > 0 ? longest : 1);
    out->n_classes = max_label + 1;
    out->classes_why = glia__printf("label %d at %s:%lld", max_label, path, (long long)max_line);
    return GLIA_OK;
}
