/* core/ini.c — the INI files of glia: reading them into sections and entries with their lines, --set, and the
 * file:line: [section] key: places of messages. Not what a key means nor whether it is valid (core/config.c). */
#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "internal.h"

static const char SYNTAX_ERROR[] = "syntax error: expected [section] or key = value";

static glia_status nomem(struct glia_config *cfg)
{
    return glia_error(cfg->ctx, GLIA_ENOMEM, "out of memory");
}

/* ---- sections and entries ---------------------------------------------------------- */

static void entry_clear(struct glia__entry *e)
{
    free(e->key);
    free(e->value);
    free(e->origin);
}

static void section_free(struct glia_section *s)
{
    for (int i = 0; i < s->n_entries; i++) entry_clear(&s->entries[i]);
    free(s->entries);
    for (int i = 0; i < s->n_list_items; i++) free(s->list_items[i]);
    free(s->list_items);
    free(s->name);
    free(s->origin);
    free(s);
}

void glia_config_free(struct glia_config *cfg)
{
    if (!cfg) return;
    for (int i = 0; i < cfg->n_sections; i++) section_free(cfg->sections[i]);
    free(cfg->sections);
    free(cfg->path);
    free(cfg);
}

/* The section whose name is the len bytes at name, or NULL. */
static struct glia_section *find_n(struct glia_config *cfg, const char *name, size_t len)
{
    for (int i = 0; i < cfg->n_sections; i++) {
        const char *n = cfg->sections[i]->name;
        if (strncmp(n, name, len) == 0 && n[len] == '\0') return cfg->sections[i];
    }
    return NULL;
}

/* Appends an empty section named by the len bytes at name; NULL on ENOMEM (not recorded). */
static struct glia_section *section_add(struct glia_config *cfg, const char *name, size_t len,
                                        int line)
{
    if (glia__grow((void **)&cfg->sections, &cfg->cap_sections, cfg->n_sections + 1,
                   sizeof *cfg->sections) != GLIA_OK)
        return NULL;
    struct glia_section *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->name = glia__strndup(name, len);
    if (!s->name) {
        free(s);
        return NULL;
    }
    s->cfg = cfg;
    s->line = line;
    cfg->sections[cfg->n_sections++] = s;
    return s;
}

struct glia_section *glia__section_new(struct glia_config *cfg, const char *name, int line)
{
    struct glia_section *s = calloc(1, sizeof *s);
    if (!s || !(s->name = glia__strdup(name))) {
        free(s);
        return NULL;
    }
    s->cfg = cfg;
    s->line = line;
    return s;
}

void glia__section_free(struct glia_section *s)
{
    if (s) section_free(s);
}

struct glia_section *glia__config_find(struct glia_config *cfg, const char *name)
{
    return find_n(cfg, name, strlen(name));
}

struct glia_section *glia__config_section(struct glia_config *cfg, const char *name)
{
    struct glia_section *s = glia__config_find(cfg, name);
    if (s) return s;
    s = section_add(cfg, name, strlen(name), 0);
    if (!s) nomem(cfg);
    return s;
}

static struct glia__entry *entry_find(const struct glia_section *s, const char *key)
{
    for (int i = 0; i < s->n_entries; i++)
        if (strcmp(s->entries[i].key, key) == 0) return &s->entries[i];
    return NULL;
}

const struct glia__entry *glia__section_entry(const struct glia_section *s, const char *key)
{
    return entry_find(s, key);
}

/* Appends key = value (copied); returns the new entry, NULL on ENOMEM (not recorded). */
static struct glia__entry *entry_add(struct glia_section *s, const char *key, const char *value,
                                     int line)
{
    if (glia__grow((void **)&s->entries, &s->cap_entries, s->n_entries + 1, sizeof *s->entries) !=
        GLIA_OK)
        return NULL;
    struct glia__entry *e = &s->entries[s->n_entries];
    *e = (struct glia__entry){.key = glia__strdup(key), .value = glia__strdup(value), .line = line};
    if (!e->key || !e->value) {
        entry_clear(e);
        return NULL;
    }
    s->n_entries++;
    return e;
}

/* ---- parsing ------------------------------------------------------------------------- */

/* The INI dialect inih reads, parsed here one line at a time so that a line may be long (up to
 * GLIA__CONFIG_LINE_MAX characters), nothing is read past the first error, and errors carry
 * their line: a line starting with ';' or '#' is a comment, "[name]" a section, "key = value" (or
 * "key: value") an entry; a ';' after a blank starts an inline comment. Leading blanks are
 * dropped, so an indented "key = value" is a key, not a continuation of the value above. */
struct parse {
    struct glia_config *cfg;
    FILE *file;                    /* the input: a file, or */
    const char *text;              /* the rest of a string */
    char *buf;                     /* the current line (owned): GLIA__CONFIG_LINE_MAX + 2 bytes */
    int line;                      /* its number */
    struct glia_section *section;  /* the current section; NULL before the first header */
};

static glia_status parse_fail(struct parse *p, glia_status status, const char *fmt, ...)
    GLIA_PRINTF(3, 4);
static glia_status parse_fail(struct parse *p, glia_status status, const char *fmt, ...)
{
    char msg[GLIA__ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return glia_error(p->cfg->ctx, status, "%s:%d: %s", p->cfg->path, p->line, msg);
}

static int next_char(struct parse *p)
{
    if (p->file) return getc(p->file);
    return *p->text ? (unsigned char)*p->text++ : EOF;
}

/* Reads the next line into p->buf without its line ending ("\n" or "\r\n"); *len < 0 at the
 * end of the input. Reads no further than the limit: a stream without a newline (/dev/zero, a
 * binary file) ends in an error, not in all of memory. */
static glia_status next_line(struct parse *p, ptrdiff_t *len)
{
    const size_t max = GLIA__CONFIG_LINE_MAX;
    size_t n = 0;
    int c;
    errno = 0;
    p->line++;
    while ((c = next_char(p)) != EOF && c != '\n') {
        if (c == '\0') return parse_fail(p, GLIA_ECONFIG, "a NUL byte: this is not a text (INI) file");
        if ((c < 0x20 && !strchr("\t\r\f\v", c)) || c == 0x7f)  /* binary data, not text */
            return parse_fail(p, GLIA_ECONFIG, "a control byte (0x%02x): this is not a text (INI) file", c);
        if (n == max + 1)  /* max characters and a '\r' that was not the line ending */
            return parse_fail(p, GLIA_ECONFIG, "line longer than %zu characters", max);
        p->buf[n++] = (char)c;
    }
    if (c == EOF && p->file && ferror(p->file)) {
        int e = errno ? errno : EIO;
        return glia_error(p->cfg->ctx, e == ENOMEM ? GLIA_ENOMEM : GLIA_EIO, "cannot read %s: %s", p->cfg->path,
                          strerror(e));
    }
    if (c == EOF && n == 0) {
        p->line--;
        *len = -1;
        return GLIA_OK;
    }
    if (n && p->buf[n - 1] == '\r') n--;
    if (n > max) return parse_fail(p, GLIA_ECONFIG, "line longer than %zu characters", max);
    p->buf[n] = '\0';
    *len = (ptrdiff_t)n;
    return GLIA_OK;
}

/* Where a section name (chars "]") or a key (chars "=:") ends: at one of chars, or where an
 * inline comment starts (a ';' after a blank), or at the end of s. */
static char *find_end(char *s, const char *chars)
{
    bool was_space = false;
    while (*s && !(chars && strchr(chars, *s)) && !(was_space && *s == ';')) {
        was_space = isspace((unsigned char)*s);
        s++;
    }
    return s;
}

/* A "[name]" line: starts a new section. */
static glia_status section_header(struct parse *p, char *line)
{
    char *name = line + 1, *close = find_end(name, "]");
    if (*close != ']') return parse_fail(p, GLIA_ECONFIG, "%s", SYNTAX_ERROR);
    const char *rest = close + 1;
    while (isspace((unsigned char)*rest)) rest++;
    while (name < close && isspace((unsigned char)*name)) name++;
    size_t len = (size_t)(close - name);
    while (len && isspace((unsigned char)name[len - 1])) len--;
    if (len == 0) return parse_fail(p, GLIA_ECONFIG, "syntax error: empty section name");
    if (*rest && *rest != ';' && *rest != '#')
        return parse_fail(p, GLIA_ECONFIG, "syntax error: unexpected text after [%.*s]", (int)len, name);
    const struct glia_section *old = find_n(p->cfg, name, len);
    if (old)
        return parse_fail(p, GLIA_ECONFIG, "duplicate section [%s] (first at line %d)", old->name, old->line);
    p->section = section_add(p->cfg, name, len, p->line);
    return p->section ? GLIA_OK : parse_fail(p, GLIA_ENOMEM, "out of memory");
}

/* A "name = value" line (name and value trimmed, the value without its inline comment). */
static glia_status entry_line(struct parse *p, char *line)
{
    char *end = find_end(line, "=:");
    if (*end != '=' && *end != ':') return parse_fail(p, GLIA_ECONFIG, "%s", SYNTAX_ERROR);
    *end = '\0';
    char *name = glia__trim(line), *value = end + 1;
    *find_end(value, NULL) = '\0';
    value = glia__trim(value);
    if (!*name) return parse_fail(p, GLIA_ECONFIG, "%s", SYNTAX_ERROR);
    if (!p->section) return parse_fail(p, GLIA_ECONFIG, "key '%s' is outside any [section]", name);
    const struct glia__entry *old = entry_find(p->section, name);
    if (old)
        return parse_fail(p, GLIA_ECONFIG, "[%s] %s: duplicate key (first at line %d)", p->section->name, name,
                          old->line);
    if (!entry_add(p->section, name, value, p->line)) return parse_fail(p, GLIA_ENOMEM, "out of memory");
    return GLIA_OK;
}

/* Parses every line; stops at the first error. */
static glia_status parse_lines(struct parse *p)
{
    for (;;) {
        ptrdiff_t len = -1;
        glia_status st = next_line(p, &len);
        if (st || len < 0) return st;
        char *s = p->buf;
        if (p->line == 1 && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3;  /* a UTF-8 byte-order mark */
        while (isspace((unsigned char)*s)) s++;
        if (!*s || *s == ';' || *s == '#') continue;
        st = *s == '[' ? section_header(p, s) : entry_line(p, s);
        if (st) return st;
    }
}

static glia_status parse(struct glia_context *ctx, const char *name, FILE *file, const char *text,
                         struct glia_config **out)
{
    *out = NULL;
    struct glia_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return glia_error(ctx, GLIA_ENOMEM, "cannot read %s: out of memory", name);
    cfg->ctx = ctx;
    cfg->path = glia__strdup(name);
    struct parse p = {.cfg = cfg, .file = file, .text = text, .buf = malloc(GLIA__CONFIG_LINE_MAX + 2)};
    glia_status st = cfg->path && p.buf ? parse_lines(&p)
                                        : glia_error(ctx, GLIA_ENOMEM, "cannot read %s: out of memory", name);
    free(p.buf);
    if (st != GLIA_OK) {
        glia_config_free(cfg);
        return st;
    }
    *out = cfg;
    return GLIA_OK;
}

glia_status glia_config_load(struct glia_context *ctx, const char *path, struct glia_config **out)
{
    GLIA_ASSERT(ctx && path && out);
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (!f) return glia_error(ctx, GLIA_EIO, "cannot open %s: %s", path, strerror(errno));
    glia_status st = parse(ctx, path, f, NULL, out);
    fclose(f);
    return st;
}

glia_status glia_config_parse_string(struct glia_context *ctx, const char *name, const char *text,
                                     struct glia_config **out)
{
    GLIA_ASSERT(ctx && text && out);
    return parse(ctx, name ? name : "<string>", NULL, text, out);
}

/* ---- --set ------------------------------------------------------------------------- */

/* An assignment as messages show it: whole, or its start and "..." when longer than an error
 * line can hold beside the message. */
#define SET_SHOWN 100
static void shown(const char *assignment, char *buf, size_t n)
{
    size_t len = strlen(assignment);
    if (len <= SET_SHOWN) snprintf(buf, n, "%s", assignment);
    else snprintf(buf, n, "%.*s...", SET_SHOWN - 3, assignment);
}

/* Sets key = value in section (created if absent), remembering origin ("--set a.b=c", owned,
 * taken); a section it creates keeps a copy, so that messages about it point at this --set. */
static glia_status set_value(struct glia_config *cfg, const char *section, const char *key,
                             const char *value, char *origin)
{
    struct glia_section *s = glia__config_find(cfg, section);
    if (!s) {
        if (!(s = glia__config_section(cfg, section))) return GLIA_ENOMEM;
        if (!(s->origin = glia__strdup(origin))) return nomem(cfg);
    }
    struct glia__entry *e = entry_find(s, key);
    if (e) {
        char *v = glia__strdup(value);
        if (!v) return nomem(cfg);
        free(e->value);
        e->value = v;
    } else if (!(e = entry_add(s, key, value, 0))) {
        return nomem(cfg);
    }
    e->line = 0;
    free(e->origin);
    e->origin = origin;
    return GLIA_OK;
}

/* a is a writable copy of the assignment "section.key=value". */
static glia_status set_split(struct glia_config *cfg, char *a, const char *assignment)
{
    char *eq = strchr(a, '=');
    char *dot = eq ? memchr(a, '.', (size_t)(eq - a)) : NULL;
    if (!dot) goto bad;
    *dot = *eq = '\0';
    const char *section = glia__trim(a), *key = glia__trim(dot + 1), *value = glia__trim(eq + 1);
    if (!*section || !*key) goto bad;
    size_t n = strlen(section) + strlen(key) + strlen(value) + sizeof "--set .=";
    char *full = malloc(n), *origin = malloc(SET_SHOWN + 1);
    if (!full || !origin) return free(full), free(origin), nomem(cfg);
    snprintf(full, n, "--set %s.%s=%s", section, key, value);
    shown(full, origin, SET_SHOWN + 1);
    free(full);
    glia_status st = set_value(cfg, section, key, value, origin);
    if (st != GLIA_OK) free(origin);
    return st;
bad:;
    char show[SET_SHOWN + 1];
    shown(assignment, show, sizeof show);
    return glia_error(cfg->ctx, GLIA_EINVAL, "--set %s: expected section.key=value", show);
}

glia_status glia_config_set(struct glia_config *cfg, const char *assignment)
{
    GLIA_ASSERT(cfg && assignment);
    if (strlen(assignment) > GLIA__CONFIG_LINE_MAX) {
        char show[SET_SHOWN + 1];
        shown(assignment, show, sizeof show);
        return glia_error(cfg->ctx, GLIA_EINVAL, "--set %s: longer than %d characters", show,
                          GLIA__CONFIG_LINE_MAX);
    }
    char *a = glia__strdup(assignment);
    if (!a) return nomem(cfg);
    glia_status st = set_split(cfg, a, assignment);
    free(a);
    return st;
}

/* ---- places and messages ------------------------------------------------------------- */

void glia__where(const struct glia_section *s, const char *key, char *buf, size_t n)
{
    const char *path = s->cfg->path;
    const struct glia__entry *e = key ? entry_find(s, key) : NULL;
    if (e && e->origin) {
        snprintf(buf, n, "%s: [%s] %s: ", e->origin, s->name, key);
    } else if (e && e->line > 0) {
        snprintf(buf, n, "%s:%d: [%s] %s: ", path, e->line, s->name, key);
    } else if (s->origin) {  /* a section made by --set: that --set */
        if (key)
            snprintf(buf, n, "%s: [%s] %s: ", s->origin, s->name, key);
        else
            snprintf(buf, n, "%s: [%s] ", s->origin, s->name);
    } else {
        /* the section header; a section the core made has no line */
        char at[24] = "";
        if (s->line > 0) snprintf(at, sizeof at, ":%d", s->line);
        if (key)
            snprintf(buf, n, "%s%s: [%s] %s: ", path, at, s->name, key);
        else
            snprintf(buf, n, "%s%s: [%s] ", path, at, s->name);
    }
}

glia_status glia_section_error(const struct glia_section *s, const char *key, glia_status status,
                               const char *fmt, ...)
{
    char buf[GLIA__ERRMSG_MAX];
    glia__where(s, key, buf, sizeof buf);
    size_t len = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, sizeof buf - len, fmt, ap);
    va_end(ap);
    return glia_error(s->cfg->ctx, status, "%s", buf);
}

glia_status glia_section_error_wrap(const struct glia_section *s, const char *key, glia_status status)
{
    const char *e = glia_context_error(s->cfg->ctx);
    return glia_section_error(s, key, status, "%s", e[0] ? e : glia_strerror(status));  /* formatted aside first */
}

glia_status glia__alloc_error(const struct glia_section *s, const char *key, double bytes, const char *fmt, ...)
{
    char what[GLIA__ERRMSG_MAX], why[GLIA__ERRMSG_MAX], human[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(why, sizeof why, "%s", glia_context_error(s->cfg->ctx));
    glia__bytes_str(bytes, human, sizeof human);
    return glia_section_error(s, key, GLIA_ENOMEM, "%s need %.0f bytes (%s): cannot allocate%s%s%s", what, bytes, human,
                              *why ? " (" : "", why, *why ? ")" : "");
}

const char *glia_section_name(const struct glia_section *s)
{
    return s->name;
}

/* Levenshtein distance of a and b, ignoring case; row holds strlen(b) + 1 elements. */
/* Optimal-string-alignment distance (Levenshtein plus adjacent transpositions, so "trian"
 * is one edit from "train"), case-insensitive. row holds 3 * (strlen(b) + 1) entries. */
static size_t edit_distance(const char *a, const char *b, size_t *row)
{
    size_t lb = strlen(b), w = lb + 1;
    size_t *prev2 = row, *prev = row + w, *cur = row + 2 * w;
    for (size_t j = 0; j <= lb; j++) prev[j] = j;
    for (size_t i = 1; a[i - 1]; i++) {
        cur[0] = i;
        int ca = tolower((unsigned char)a[i - 1]);
        for (size_t j = 1; j <= lb; j++) {
            int cb = tolower((unsigned char)b[j - 1]);
            size_t best = prev[j - 1] + (ca != cb);
            if (prev[j] + 1 < best) best = prev[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && prev2[j - 2] + 1 < best)
                best = prev2[j - 2] + 1;
            cur[j] = best;
        }
        size_t *t = prev2;
        prev2 = prev;
        prev = cur;
        cur = t;
    }
    return prev[lb];
}

const char *glia__did_you_mean(const char *word, const char *const *candidates, int n)
{
    size_t wl = strlen(word), limit = wl / 3 > 1 ? wl / 3 : 1, longest = 0;
    for (int i = 0; i < n; i++)
        if (candidates[i] && strlen(candidates[i]) > longest) longest = strlen(candidates[i]);
    size_t *row = malloc(3 * (longest + 1) * sizeof *row);
    if (!row) return NULL;
    const char *best = NULL;
    size_t best_d = limit + 1;
    for (int i = 0; i < n; i++) {
        if (!candidates[i]) continue;
        size_t cl = strlen(candidates[i]);
        if ((cl > wl ? cl - wl : wl - cl) >= best_d) continue;  /* cannot be nearer */
        size_t d = edit_distance(word, candidates[i], row);
        if (d < best_d) {
            best = candidates[i];
            best_d = d;
        }
    }
    free(row);
    return best;
}
