/* tools/plot.c — `glia plot`: reads the JSON-lines metrics file of `glia train --metrics` and
 * draws loss and test accuracy per epoch as one SVG 1.1 file (two panels side by side).
 * Not a general JSON or plotting library: the parser takes flat objects of numbers and
 * strings, one per line, which is what glia writes. */
#include "plot.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { S_TRAIN, S_TEST, S_ACC, N_SERIES };
static const char *const series_key[N_SERIES] = {"train_loss", "test_loss", "test_accuracy"};
static const char *const series_color[N_SERIES] = {"#1f77b4", "#ff7f0e", "#2ca02c"};

struct row {
    double epoch;
    double v[N_SERIES]; /* NAN: missing, null or not finite */
};

struct metrics {
    struct row *rows;
    size_t n, cap;
    int has[N_SERIES];        /* the key appears on some line */
    size_t dropped[N_SERIES]; /* values present but nan, inf or null */
};

static int fail(char *err, size_t n, const char *fmt, ...)
{
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- a JSON-lines parser for flat objects ---------------------------------------------- */

struct jp {
    const char *s, *p, *end;
    const char *what; /* what was expected, on error */
};

enum { V_NUM, V_NULL, V_OTHER };

static void skip_ws(struct jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n')) j->p++;
}

static int jfail(struct jp *j, const char *what)
{
    j->what = what;
    return -1;
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A string at j->p; its text (escapes other than \uXXXX decoded, truncated) goes to buf. */
static int parse_string(struct jp *j, char *buf, size_t n)
{
    size_t k = 0;
    if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string");
    j->p++;
    for (;;) {
        if (j->p >= j->end) return jfail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') break;
        if (c < 0x20) return jfail(j, "control character in a string");
        if (c == '\\') {
            char e = j->p + 1 < j->end ? j->p[1] : '\0';
            switch (e) {
            case '"': case '\\': case '/': c = (unsigned char)e; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u':
                for (int i = 2; i < 6; i++)
                    if (j->p + i >= j->end || !is_hex(j->p[i])) return jfail(j, "bad \\u escape in a string");
                c = '?'; /* no key glia reads has one */
                j->p += 4;
                break;
            default: return jfail(j, "bad escape in a string");
            }
            j->p += 2;
        } else {
            j->p++;
        }
        if (k + 1 < n) buf[k++] = (char)c;
    }
    j->p++;
    if (n) buf[k < n ? k : n - 1] = '\0';
    return 0;
}

static int match_word(struct jp *j, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) < n || strncasecmp(j->p, w, n)) return 0;
    j->p += n;
    return 1;
}

/* A JSON number, or nan/inf as printf writes them (also NaN, Infinity). */
static int parse_number(struct jp *j, double *v)
{
    const char *start = j->p;
    if (j->p < j->end && (*j->p == '-' || *j->p == '+')) j->p++;
    if (match_word(j, "nan")) {
        *v = NAN;
        return 0;
    }
    if (match_word(j, "infinity") || match_word(j, "inf")) {
        *v = *start == '-' ? -INFINITY : INFINITY;
        return 0;
    }
    if (*start == '+') return jfail(j, "expected a number");
    const char *d = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p == d) return jfail(j, "expected a number");
    if (j->p - d > 1 && *d == '0') return jfail(j, "leading zero in a number");
    if (j->p < j->end && *j->p == '.') {
        d = ++j->p;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
        if (j->p == d) return jfail(j, "expected a digit after '.'");
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '-' || *j->p == '+')) j->p++;
        d = j->p;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
        if (j->p == d) return jfail(j, "expected a digit in the exponent");
    }
    char buf[128];
    size_t len = (size_t)(j->p - start);
    if (len >= sizeof buf) return jfail(j, "number too long");
    memcpy(buf, start, len);
    buf[len] = '\0';
    *v = strtod(buf, NULL);
    return 0;
}

static int parse_value(struct jp *j, int depth, double *v, int *kind);

/* An array or an object (skipped: glia writes none, but a later glia may). */
static int skip_nested(struct jp *j, int depth)
{
    char close = *j->p == '{' ? '}' : ']';
    int obj = close == '}';
    if (depth > 32) return jfail(j, "nested too deeply");
    j->p++;
    skip_ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return 0;
    }
    for (;;) {
        double v;
        int kind;
        char key[8];
        if (obj) {
            if (parse_string(j, key, sizeof key)) return -1;
            skip_ws(j);
            if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':' after a key");
            j->p++;
            skip_ws(j);
        }
        if (parse_value(j, depth + 1, &v, &kind)) return -1;
        skip_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            skip_ws(j);
        } else if (j->p < j->end && *j->p == close) {
            j->p++;
            return 0;
        } else {
            return jfail(j, obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
}

static int parse_value(struct jp *j, int depth, double *v, int *kind)
{
    char tmp[8];
    *v = NAN;
    *kind = V_OTHER;
    if (j->p >= j->end) return jfail(j, "expected a value");
    char c = *j->p;
    if (c == '"') return parse_string(j, tmp, sizeof tmp);
    if (c == '{' || c == '[') return skip_nested(j, depth);
    if (!strncmp(j->p, "true", 4) || !strncmp(j->p, "false", 5)) {
        j->p += c == 't' ? 4 : 5;
        return 0;
    }
    if (!strncmp(j->p, "null", 4)) {
        j->p += 4;
        *kind = V_NULL;
        return 0;
    }
    if (c == '-' || c == '+' || (c >= '0' && c <= '9') || c == 'n' || c == 'N' || c == 'i' || c == 'I') {
        *kind = V_NUM;
        return parse_number(j, v);
    }
    return jfail(j, "expected a value");
}

/* One line: on success fills r and sets the bits of the keys found in *present (bit i:
 * series i, bit N_SERIES: epoch). Returns 0; -1 on a JSON error (j->what, j->p); -2 when
 * key *bad is not a number. */
static int parse_line(struct jp *j, struct row *r, unsigned *present, size_t *dropped, const char **bad)
{
    *present = 0;
    r->epoch = NAN;
    for (int i = 0; i < N_SERIES; i++) r->v[i] = NAN;
    skip_ws(j);
    if (j->p >= j->end || *j->p != '{') return jfail(j, "expected '{'");
    j->p++;
    skip_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
    } else {
        for (;;) {
            char key[32];
            double v;
            int kind;
            if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a key (a string) or '}'");
            if (parse_string(j, key, sizeof key)) return -1;
            skip_ws(j);
            if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':' after a key");
            j->p++;
            skip_ws(j);
            if (parse_value(j, 0, &v, &kind)) return -1;
            int slot = -1;
            if (!strcmp(key, "epoch")) slot = N_SERIES;
            for (int i = 0; i < N_SERIES; i++)
                if (!strcmp(key, series_key[i])) slot = i;
            if (slot == N_SERIES) {
                if (kind != V_NUM || !isfinite(v) || fabs(v) > 1e300) {
                    *bad = "epoch";
                    return -2;
                }
                r->epoch = v;
                *present |= 1u << N_SERIES;
            } else if (slot >= 0) {
                if (kind == V_OTHER) {
                    *bad = series_key[slot];
                    return -2;
                }
                int ok = kind == V_NUM && isfinite(v) && fabs(v) <= 1e300;
                if (*present & (1u << slot) && !isfinite(r->v[slot])) dropped[slot]--; /* a repeated key */
                r->v[slot] = ok ? v : NAN;
                if (!ok) dropped[slot]++;
                *present |= 1u << slot;
            }
            skip_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                skip_ws(j);
                continue;
            }
            if (j->p < j->end && *j->p == '}') {
                j->p++;
                break;
            }
            return jfail(j, "expected ',' or '}'");
        }
    }
    skip_ws(j);
    if (j->p < j->end) return jfail(j, "unexpected text after '}'");
    return 0;
}

static int read_metrics(const char *in, struct metrics *m, char *err, size_t errlen)
{
    FILE *f = fopen(in, "r");
    if (!f) return fail(err, errlen, "cannot open %s: %s", in, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    int rc = 0;
    errno = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        struct jp j = {line, line, line + len, NULL};
        skip_ws(&j);
        if (j.p == j.end) continue; /* a blank line */
        j.p = line;
        struct row r;
        unsigned present;
        size_t dropped[N_SERIES] = {0};
        const char *bad = NULL;
        int st = parse_line(&j, &r, &present, dropped, &bad);
        if (st == -1) {
            rc = fail(err, errlen, "%s:%ld: invalid JSON at column %ld: %s", in, lineno,
                      (long)(j.p - line) + 1, j.what);
            break;
        }
        if (st == -2) {
            rc = fail(err, errlen, "%s:%ld: \"%s\" is not a %snumber", in, lineno, bad,
                      !strcmp(bad, "epoch") ? "finite " : "");
            break;
        }
        if (!(present & (1u << N_SERIES))) {
            rc = fail(err, errlen, "%s:%ld: missing key \"epoch\"", in, lineno);
            break;
        }
        if (!(present & ((1u << N_SERIES) - 1))) {
            rc = fail(err, errlen, "%s:%ld: no \"train_loss\", \"test_loss\" or \"test_accuracy\" key", in, lineno);
            break;
        }
        if (m->n == m->cap) {
            size_t nc = m->cap ? 2 * m->cap : 64;
            struct row *nr = realloc(m->rows, nc * sizeof *nr);
            if (!nr) {
                rc = fail(err, errlen, "%s:%ld: out of memory", in, lineno);
                break;
            }
            m->rows = nr;
            m->cap = nc;
        }
        m->rows[m->n++] = r;
        for (int i = 0; i < N_SERIES; i++) {
            m->has[i] |= !!(present & (1u << i));
            m->dropped[i] += dropped[i];
        }
    }
    if (!rc && ferror(f)) rc = fail(err, errlen, "cannot read %s: %s", in, strerror(errno ? errno : EIO));
    if (!rc && !m->n) rc = fail(err, errlen, "%s: empty file, no metrics to plot", in);
    free(line);
    fclose(f);
    return rc;
}

/* ---- axes --------------------------------------------------------------------------------- */

struct axis {
    double lo, hi, step; /* the range shown (hi > lo); ticks at k * step, k0 <= k <= k1 */
    long k0, k1;
    double px0, px1; /* the pixel range lo..hi maps to */
};

static void axis_make(struct axis *a, double mn, double mx, int target, int integral)
{
    if (!(mx - mn > 1e-9 * fmax(fabs(mn), fabs(mx)))) {
        double pad = integral ? 0.5 : mn != 0 ? 0.1 * fabs(mn) : 1;
        mn -= pad;
        mx += pad;
    }
    double raw = (mx - mn) / (target - 1), b = pow(10, floor(log10(raw))), f = raw / b;
    a->step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * b;
    if (integral && a->step < 1) a->step = 1;
    a->k0 = (long)floor(mn / a->step + 1e-9);
    a->k1 = (long)ceil(mx / a->step - 1e-9);
    if (a->k1 <= a->k0) a->k1 = a->k0 + 1;
    double pad = 0.03 * (a->k1 - a->k0) * a->step; /* keeps points off the frame */
    a->lo = a->k0 * a->step - pad;
    a->hi = a->k1 * a->step + pad;
}

static double axis_px(const struct axis *a, double v)
{
    return a->px0 + (v - a->lo) / (a->hi - a->lo) * (a->px1 - a->px0);
}

static double axis_tick(const struct axis *a, long k)
{
    double v = k * a->step;
    return fabs(v) < a->step * 1e-6 ? 0 : v;
}

static void fmt_tick(char *buf, size_t n, const struct axis *a, double v)
{
    double big = fmax(fabs(a->lo), fabs(a->hi));
    int d = a->step >= 1 ? 0 : (int)ceil(-log10(a->step) - 1e-9);
    if (big >= 1e6 || big < 1e-3 || d > 7) {
        int p = (int)ceil(log10(big / a->step)) + 1;
        snprintf(buf, n, "%.*g", p < 2 ? 2 : p > 15 ? 15 : p, v);
    } else {
        snprintf(buf, n, "%.*f", d, v);
    }
}

/* ---- SVG ----------------------------------------------------------------------------------- */

enum { W = 960, H = 446, PANEL_W = 480, TOP = 108, BOTTOM = 384, FONT = 12 };

static double text_w(const char *s, double font)
{
    return 0.6 * font * (double)strlen(s);
}

/* Writes s as XML character data: markup characters escaped, control characters and bytes
 * that are not UTF-8 written as '?'. At most max bytes; a longer s keeps its end after "...". */
static void xml_text(FILE *f, const char *s, size_t max)
{
    size_t len = strlen(s);
    if (len > max) {
        s += len - (max - 3);
        while ((*s & 0xC0) == 0x80) s++;
        fputs("...", f);
    }
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        unsigned cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
        for (int i = 1; i < n; i++) {
            if ((p[i] & 0xC0) != 0x80) {
                n = 0;
                break;
            }
            cp = cp << 6 | (p[i] & 0x3F);
        }
        static const unsigned min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (!n || cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFFFE || cp == 0xFFFF ||
            (cp < 0x20 && cp != '\t')) {
            fputc('?', f);
            p += n ? n : 1;
            continue;
        }
        switch (c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fwrite(p, 1, (size_t)n, f);
        }
        p += n;
    }
}

/* The legend, right-aligned at (right, y): a line with a marker and the key per series. */
static void legend(FILE *f, const int *series, int ns, double right, double y)
{
    double w = 0;
    for (int i = 0; i < ns; i++) w += 30 + text_w(series_key[series[i]], FONT) + (i ? 16 : 0);
    double x = right - w;
    fprintf(f, "<g class=\"legend\" font-size=\"%d\">\n", FONT);
    for (int i = 0; i < ns; i++) {
        const char *c = series_color[series[i]];
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"/>"
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" fill=\"#333\">%s</text>\n",
                x, y - 4, x + 24, y - 4, c, x + 12, y - 4, c, x + 30, y, series_key[series[i]]);
        x += 30 + text_w(series_key[series[i]], FONT) + 16;
    }
    fputs("</g>\n", f);
}

static void panel(FILE *f, const struct metrics *m, int x0, const char *title, const char *ylabel, const int *series,
                  int ns)
{
    size_t npts = 0, shown[N_SERIES] = {0};
    int any_key = 0;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    int integral = 1;
    for (size_t r = 0; r < m->n; r++) {
        const struct row *row = &m->rows[r];
        if (row->epoch != floor(row->epoch)) integral = 0;
        xmin = fmin(xmin, row->epoch);
        xmax = fmax(xmax, row->epoch);
        for (int i = 0; i < ns; i++)
            if (isfinite(row->v[series[i]])) {
                npts++;
                shown[i]++;
                ymin = fmin(ymin, row->v[series[i]]);
                ymax = fmax(ymax, row->v[series[i]]);
            }
    }
    for (int i = 0; i < ns; i++) any_key |= m->has[series[i]];
    if (!npts) ymin = 0, ymax = 1;

    struct axis ax, ay;
    axis_make(&ax, xmin, xmax, 7, integral);
    axis_make(&ay, ymin, ymax, 6, 0);
    char buf[64];
    double lw = 0; /* the widest y tick label */
    for (long k = ay.k0; k <= ay.k1; k++) {
        fmt_tick(buf, sizeof buf, &ay, axis_tick(&ay, k));
        lw = fmax(lw, text_w(buf, 11));
    }
    double left = x0 + 34 + fmax(lw, 24) + 8, right = x0 + PANEL_W - 24;
    ax.px0 = left, ax.px1 = right;
    ay.px0 = BOTTOM, ay.px1 = TOP;

    fprintf(f, "<g class=\"panel\">\n");
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"15\" font-weight=\"bold\" fill=\"#222\">", left, TOP - 12);
    xml_text(f, title, 64);
    fputs("</text>\n", f);
    int drawn[N_SERIES], nd = 0; /* the legend names the series that have points */
    for (int i = 0; i < ns; i++)
        if (shown[i]) drawn[nd++] = series[i];
    if (nd) legend(f, drawn, nd, right, TOP - 12);

    /* the grid, the frame, the ticks and their labels */
    fprintf(f, "<g class=\"grid\" stroke=\"#e8e8e8\" stroke-width=\"1\">\n");
    for (long k = ax.k0; k <= ax.k1; k++) {
        double x = axis_px(&ax, axis_tick(&ax, k));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", x, TOP, x, BOTTOM);
    }
    for (long k = ay.k0; k <= ay.k1; k++) {
        double y = axis_px(&ay, axis_tick(&ay, k));
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", left, y, right, y);
    }
    fputs("</g>\n", f);
    fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", left, TOP,
            right - left, BOTTOM - TOP);
    fprintf(f, "<g class=\"x-axis\" font-size=\"11\" fill=\"#444\" text-anchor=\"middle\">\n");
    for (long k = ax.k0; k <= ax.k1; k++) {
        double v = axis_tick(&ax, k), x = axis_px(&ax, v);
        fmt_tick(buf, sizeof buf, &ax, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#888\"/><text x=\"%.1f\" y=\"%d\">%s</text>\n",
                x, BOTTOM, x, BOTTOM + 4, x, BOTTOM + 17, buf);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-size=\"%d\" fill=\"#222\">epoch</text>\n", (left + right) / 2,
            BOTTOM + 40, FONT + 1);
    fputs("</g>\n", f);
    fprintf(f, "<g class=\"y-axis\" font-size=\"11\" fill=\"#444\" text-anchor=\"end\">\n");
    for (long k = ay.k0; k <= ay.k1; k++) {
        double v = axis_tick(&ay, k), y = axis_px(&ay, v);
        fmt_tick(buf, sizeof buf, &ay, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                left - 4, y, left, y, left - 6, y + 4, buf);
    }
    double ym = (TOP + BOTTOM) / 2.0;
    fprintf(f,
            "<text x=\"%d\" y=\"%.1f\" font-size=\"%d\" fill=\"#222\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 %d %.1f)\">%s</text>\n",
            x0 + 22, ym, FONT + 1, x0 + 22, ym, ylabel);
    fputs("</g>\n", f);

    if (!npts) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" fill=\"#999\" text-anchor=\"middle\">%s</text>\n",
                (left + right) / 2, ym, any_key ? "no finite values" : "no data");
        fputs("</g>\n", f);
        return;
    }

    /* the series: a polyline per run of finite points with rising epochs, a circle per point */
    double radius = m->n <= 50 ? 3 : m->n <= 120 ? 2 : m->n <= 300 ? 1.5 : 1, width = m->n <= 120 ? 2 : 1.5;
    for (int i = 0; i < ns; i++) {
        int s = series[i];
        fprintf(f, "<g class=\"%s\" stroke=\"%s\" fill=\"%s\">\n", series_key[s], series_color[s], series_color[s]);
        size_t r = 0;
        while (r < m->n) {
            while (r < m->n && !isfinite(m->rows[r].v[s])) r++;
            if (r == m->n) break;
            size_t e = r + 1;
            while (e < m->n && isfinite(m->rows[e].v[s]) && m->rows[e].epoch > m->rows[e - 1].epoch) e++;
            if (e - r >= 2) {
                fprintf(f, "<polyline fill=\"none\" stroke-width=\"%g\" stroke-linejoin=\"round\" points=\"", width);
                for (size_t q = r; q < e; q++)
                    fprintf(f, "%s%.1f,%.1f", q > r ? " " : "", axis_px(&ax, m->rows[q].epoch),
                            axis_px(&ay, m->rows[q].v[s]));
                fputs("\"/>\n", f);
            }
            r = e;
        }
        for (r = 0; r < m->n; r++) {
            const struct row *row = &m->rows[r];
            if (!isfinite(row->v[s])) continue;
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%g\" stroke-width=\"0\"><title>epoch %.9g: %s %.6g</title></circle>\n",
                    axis_px(&ax, row->epoch), axis_px(&ay, row->v[s]), radius, row->epoch, series_key[s], row->v[s]);
        }
        fputs("</g>\n", f);
    }
    fputs("</g>\n", f);
}

/* The line under the title: how many epochs, the last values and the best accuracy. */
static void summary(FILE *f, const struct metrics *m)
{
    const struct row *last = &m->rows[m->n - 1];
    fprintf(f, "%zu epoch%s", m->n, m->n == 1 ? "" : "s");
    const char *sep = "; last (epoch ";
    for (int i = 0; i < N_SERIES; i++)
        if (isfinite(last->v[i])) {
            if (*sep == ';') fprintf(f, "%s%.9g): ", sep, last->epoch);
            else fputs(sep, f);
            fprintf(f, "%s %.4g", series_key[i], last->v[i]);
            sep = ", ";
        }
    const struct row *best = NULL;
    for (size_t r = 0; r < m->n; r++)
        if (isfinite(m->rows[r].v[S_ACC]) && (!best || m->rows[r].v[S_ACC] > best->v[S_ACC])) best = &m->rows[r];
    if (best) fprintf(f, "; best test_accuracy %.4g (epoch %.9g)", best->v[S_ACC], best->epoch);
}

static void write_svg(FILE *f, const char *in, const struct metrics *m)
{
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n<title>glia metrics: ",
            W, H, W, H);
    xml_text(f, in, 200);
    fprintf(f, "</title>\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", W, H);
    fputs("<text class=\"title\" x=\"24\" y=\"30\" font-size=\"17\" font-weight=\"bold\" fill=\"#111\">", f);
    xml_text(f, in, 80);
    fputs("</text>\n<text class=\"summary\" x=\"24\" y=\"50\" font-size=\"12\" fill=\"#555\">", f);
    summary(f, m);
    fputs("</text>\n", f);
    size_t dropped = m->dropped[0] + m->dropped[1] + m->dropped[2];
    if (dropped) {
        fprintf(f, "<text class=\"note\" x=\"24\" y=\"68\" font-size=\"12\" fill=\"#b22222\">note: %zu value%s "
                   "(nan, inf or null) not drawn:", dropped, dropped == 1 ? "" : "s");
        for (int i = 0, first = 1; i < N_SERIES; i++)
            if (m->dropped[i]) {
                fprintf(f, "%s %s %zu", first ? "" : ",", series_key[i], m->dropped[i]);
                first = 0;
            }
        fputs("</text>\n", f);
    }
    static const int loss[] = {S_TRAIN, S_TEST}, acc[] = {S_ACC};
    panel(f, m, 0, "loss", "loss", loss, 2);
    panel(f, m, PANEL_W, "test accuracy", "accuracy", acc, 1);
    fputs("</svg>\n", f);
}

int glia_plot(const char *in, const char *out, char *err, size_t errlen)
{
    struct metrics m = {0};
    if (err && errlen) err[0] = '\0';
    int rc = read_metrics(in, &m, err, errlen);
    if (!rc) {
        FILE *f = fopen(out, "w");
        if (!f) {
            rc = fail(err, errlen, "cannot write %s: %s", out, strerror(errno));
        } else {
            write_svg(f, in, &m);
            int bad = ferror(f);
            if (fclose(f) || bad) rc = fail(err, errlen, "cannot write %s: %s", out, strerror(errno ? errno : EIO));
        }
    }
    free(m.rows);
    return rc;
}

int glia_plot_output_name(const char *in, char *out, size_t outlen)
{
    size_t n = strlen(in);
    const char *dot = strrchr(in, '.'), *slash = strrchr(in, '/');
    if (dot && (!slash || dot > slash + 1) && (!strcmp(dot, ".jsonl") || !strcmp(dot, ".json"))) n = (size_t)(dot - in);
    int k = snprintf(out, outlen, "%.*s.svg", (int)n, in);
    return k < 0 || (size_t)k >= outlen ? -1 : 0;
}
