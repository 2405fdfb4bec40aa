/* core/config.c — INI configuration: parsing, file:line errors, --set, schema checks, getters.
 * Not the meaning of any key: which schemas a section obeys is decided by the model and plugins. */
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

/* ---- splitting lists ----------------------------------------------------------------- */

/* A split list in one allocation: the header, n + 1 item pointers, the split copy of the
 * text, then the text as given and the key it belongs to (for reuse by the getter). */
struct split {
    int n;
    const char *source, *key;
    const char *items[];
};

/* Splits text at sep into trimmed items ("" gives none, "a,,b" an empty second item).
 * key may be NULL. NULL on ENOMEM (not recorded). */
static struct split *split_new(const char *text, char sep, const char *key)
{
    int n = 1;
    for (const char *c = text; *c; c++) n += *c == sep;
    size_t tl = strlen(text) + 1, kl = key ? strlen(key) + 1 : 0;
    size_t head = sizeof(struct split) + (size_t)(n + 1) * sizeof(const char *);
    struct split *sp = malloc(head + 2 * tl + kl);
    if (!sp) return NULL;
    char *copy = (char *)sp + head, *source = copy + tl;
    memcpy(copy, text, tl);
    memcpy(source, text, tl);
    sp->source = source;
    sp->key = key ? memcpy(source + tl, key, kl) : NULL;
    sp->n = 0;
    for (char *item = copy, *next; item; item = next) {
        next = strchr(item, sep);
        if (next) *next++ = '\0';
        sp->items[sp->n++] = glia__trim(item);
    }
    if (sp->n == 1 && !*sp->items[0]) sp->n = 0;
    sp->items[sp->n] = NULL;
    return sp;
}

/* Writes the items joined by ", " into buf (truncated to n bytes). */
static void join(char *buf, size_t n, const char *const *items, int k)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < k && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "", items[i]);
}

/* ---- values -------------------------------------------------------------------------- */

enum { NUM_OK, NUM_BAD, NUM_RANGE, NUM_INFINITE };

static int parse_int(const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end) return NUM_BAD;
    if (errno == ERANGE) return NUM_RANGE;
    *out = x;
    return NUM_OK;
}

/* A decimal number as in C, whatever the program's locale; finite only. */
static int parse_float(const char *v, double *out)
{
    char *end;
    locale_t c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    double x = c ? strtod_l(v, &end, c) : strtod(v, &end);
    if (c) freelocale(c);
    if (end == v || *end) return NUM_BAD;
    if (!isfinite(x)) return NUM_INFINITE;
    *out = x;
    return NUM_OK;
}

/* 1 true, 0 false, -1 neither. */
static int parse_bool(const char *v)
{
    static const char *const yes[] = {"on", "true", "yes", "1"};
    static const char *const no[] = {"off", "false", "no", "0"};
    for (size_t i = 0; i < GLIA__ARRAY_LEN(yes); i++) {
        if (strcasecmp(v, yes[i]) == 0) return 1;
        if (strcasecmp(v, no[i]) == 0) return 0;
    }
    return -1;
}

static bool has_bounds(const struct glia_key *k)
{
    return k->min < k->max;
}

static glia_status out_of_range(const struct glia_section *s, const struct glia_key *k,
                                const char *v)
{
    return glia_section_error(s, k->name, GLIA_ECONFIG, "%s is out of range [%.15g, %.15g]", v,
                              k->min, k->max);
}

static glia_status check_int(const struct glia_section *s, const struct glia_key *k, const char *v)
{
    int64_t x = 0;
    int r = parse_int(v, &x);
    if (r == NUM_BAD)
        return glia_section_error(s, k->name, GLIA_ECONFIG, "expected an integer, got '%s'", v);
    if (r == NUM_OK && (!has_bounds(k) || (x >= k->min && x <= k->max))) return GLIA_OK;
    if (has_bounds(k)) return out_of_range(s, k, v);
    return glia_section_error(s, k->name, GLIA_ECONFIG, "%s does not fit in a 64-bit integer", v);
}

static glia_status check_float(const struct glia_section *s, const struct glia_key *k,
                               const char *v)
{
    double x = 0;
    int r = parse_float(v, &x);
    if (r == NUM_BAD)
        return glia_section_error(s, k->name, GLIA_ECONFIG, "expected a number, got '%s'", v);
    if (r == NUM_INFINITE)
        return glia_section_error(s, k->name, GLIA_ECONFIG, "expected a finite number, got '%s'",
                                  v);
    if (has_bounds(k) && (x < k->min || x > k->max)) return out_of_range(s, k, v);
    return GLIA_OK;
}

static glia_status check_enum(const struct glia_section *s, const struct glia_key *k, const char *v)
{
    if (!k->choices)
        return glia_section_error(s, k->name, GLIA_EINTERNAL, "schema error: enum without choices");
    struct split *c = split_new(k->choices, '|', NULL);
    if (!c) return nomem(s->cfg);
    glia_status st = GLIA_OK;
    int i = 0;
    while (i < c->n && strcmp(c->items[i], v) != 0) i++;
    if (i == c->n) {
        char list[GLIA__ERRMSG_MAX / 2];
        join(list, sizeof list, c->items, c->n);
        const char *near = glia__did_you_mean(v, c->items, c->n);
        st = glia_section_error(s, k->name, GLIA_ECONFIG, "expected one of %s, got '%s'%s%s%s",
                                list, v, near ? "; did you mean '" : "", near ? near : "",
                                near ? "'?" : "");
    }
    free(c);
    return st;
}

static glia_status check_list(const struct glia_section *s, const struct glia_key *k,
                              const char *v)
{
    struct split *l = split_new(v, ',', NULL);
    if (!l) return nomem(s->cfg);
    int empty = 0;
    while (empty < l->n && *l->items[empty]) empty++;
    int n = l->n;
    free(l);
    if (n == 0)
        return glia_section_error(s, k->name, GLIA_ECONFIG,
                                  "expected a comma-separated list, got ''");
    if (empty < n)
        return glia_section_error(s, k->name, GLIA_ECONFIG, "list item %d is empty in '%s'",
                                  empty + 1, v);
    return GLIA_OK;
}

static glia_status check_value(const struct glia_section *s, const struct glia_key *k,
                               const char *v)
{
    switch (k->type) {
    case GLIA_KEY_INT: return check_int(s, k, v);
    case GLIA_KEY_FLOAT: return check_float(s, k, v);
    case GLIA_KEY_BOOL:
        if (parse_bool(v) >= 0) return GLIA_OK;
        return glia_section_error(s, k->name, GLIA_ECONFIG, "expected on or off, got '%s'", v);
    case GLIA_KEY_ENUM: return check_enum(s, k, v);
    case GLIA_KEY_LIST: return check_list(s, k, v);
    case GLIA_KEY_STRING:
        if (*v) return GLIA_OK;
        return glia_section_error(s, k->name, GLIA_ECONFIG, "empty value");
    }
    return glia_section_error(s, k->name, GLIA_EINTERNAL, "schema error: unknown key type %d",
                              (int)k->type);
}

/* ---- validation ---------------------------------------------------------------------- */

static const struct glia_key *key_in(const struct glia_key *const *schemas, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        for (const struct glia_key *k = schemas[i]; k->name; k++)
            if (strcmp(k->name, key) == 0) return k;
    return NULL;
}

/* The distinct key names of the schemas (malloc'd array, count in *count); NULL on ENOMEM. */
static const char **key_names(const struct glia_key *const *schemas, int n, int *count)
{
    int total = 0;
    for (int i = 0; i < n; i++)
        for (const struct glia_key *k = schemas[i]; k->name; k++) total++;
    const char **names = calloc((size_t)total + 1, sizeof *names);
    if (!names) return NULL;
    *count = 0;
    for (int i = 0; i < n; i++)
        for (const struct glia_key *k = schemas[i]; k->name; k++)
            if (key_in(schemas, i, k->name) == NULL && key_in(&schemas[i], 1, k->name) == k)
                names[(*count)++] = k->name;
    return names;
}

static glia_status unknown_key(const struct glia_section *s, const struct glia_key *const *schemas,
                               int n, const char *key)
{
    int count = 0;
    const char **names = key_names(schemas, n, &count);
    if (!names) return nomem(s->cfg);
    const char *near = glia__did_you_mean(key, names, count);
    glia_status st;
    if (near) {
        st = glia_section_error(s, key, GLIA_ECONFIG, "unknown key; did you mean '%s'?", near);
    } else if (count == 0) {
        st = glia_section_error(s, key, GLIA_ECONFIG, "unknown key (this section takes no keys)");
    } else {
        char list[GLIA__ERRMSG_MAX / 2];
        join(list, sizeof list, names, count);
        st = glia_section_error(s, key, GLIA_ECONFIG, "unknown key (valid: %s)", list);
    }
    free(names);
    return st;
}

static glia_status check_required(const struct glia_section *s,
                                  const struct glia_key *const *schemas, int n)
{
    for (int i = 0; i < n; i++)
        for (const struct glia_key *k = schemas[i]; k->name; k++) {
            if (!k->required || entry_find(s, k->name)) continue;
            if (k->doc && *k->doc)
                return glia_section_error(s, k->name, GLIA_ECONFIG,
                                          "missing required key (%s)", k->doc);
            return glia_section_error(s, k->name, GLIA_ECONFIG, "missing required key");
        }
    return GLIA_OK;
}

glia_status glia__section_validate(struct glia_section *s, const struct glia_key *const *schemas,
                                   int n_schemas)
{
    const struct glia_key *use[GLIA__MAX_SCHEMAS];
    int n = 0;
    for (int i = 0; i < n_schemas; i++) {
        if (!schemas[i]) continue;
        GLIA_ASSERT(n < GLIA__MAX_SCHEMAS);
        use[n++] = schemas[i];
    }
    for (int i = 0; i < s->n_entries; i++) {
        const struct glia__entry *e = &s->entries[i];
        const struct glia_key *k = key_in(use, n, e->key);
        glia_status st = k ? check_value(s, k, e->value) : unknown_key(s, use, n, e->key);
        if (st != GLIA_OK) return st;
    }
    glia_status st = check_required(s, use, n);
    if (st != GLIA_OK) return st;
    for (int i = 0; i < n; i++) s->schemas[i] = use[i];
    s->n_schemas = n;
    return GLIA_OK;
}

/* ---- getters ------------------------------------------------------------------------- */

/* Marks s with the first getter call that cannot be answered: the key, and what went wrong. The getter then returns
 * 0, false or NULL, and the core refuses the plugin call that asked (glia__section_misread). */
static void misread(const struct glia_section *s, const char *key, const char *fmt, ...) GLIA_PRINTF(3, 4);
static void misread(const struct glia_section *s, const char *key, const char *fmt, ...)
{
    struct glia_section *w = (struct glia_section *)s;  /* sections are never const objects */
    if (w->misread[0]) return;
    snprintf(w->misread_key, sizeof w->misread_key, "%s", key ? key : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->misread, sizeof w->misread, fmt, ap);
    va_end(ap);
}

static const char *const type_names[] = {"?", "int", "float", "bool", "string", "enum", "list"};

static const char *type_name(enum glia_key_type t)
{
    return t >= GLIA_KEY_INT && t <= GLIA_KEY_LIST ? type_names[t] : type_names[0];
}

/* The text of key (written, else its default, else NULL) and its schema entry, when the schemas of s declare key
 * with one of the types getter reads (a bit mask of 1 << GLIA_KEY_*); else NULL, with s marked. */
static const char *value_of(const struct glia_section *s, const char *key, const char *getter, unsigned types,
                            const struct glia_key **k)
{
    *k = key ? key_in(s->schemas, s->n_schemas, key) : NULL;
    if (!*k) {
        misread(s, key, "%s reads key '%s', which is not among the keys it declares", getter, key ? key : "(null)");
        return NULL;
    }
    if (!(types >> (*k)->type & 1u)) {
        misread(s, key, "%s reads key '%s', which it declares as %s", getter, key, type_name((*k)->type));
        *k = NULL;
        return NULL;
    }
    const struct glia__entry *e = entry_find(s, key);
    return e ? e->value : (*k)->default_value;
}

/* Marks s when the text v of key k does not parse (only a schema's default can get here: written values are
 * checked when the section is validated); true when it parsed. */
static bool parsed(const struct glia_section *s, const struct glia_key *k, const char *v, bool ok)
{
    if (!ok) misread(s, k->name, "key '%s' has default '%s', which is not a valid %s", k->name, v, type_name(k->type));
    return ok;
}

bool glia_section_has(const struct glia_section *s, const char *key)
{
    if (key && !key_in(s->schemas, s->n_schemas, key))
        misread(s, key, "glia_section_has asks for key '%s', which is not among the keys it declares", key);
    return key && entry_find(s, key) != NULL;
}

int64_t glia_section_int(const struct glia_section *s, const char *key)
{
    const struct glia_key *k;
    const char *v = value_of(s, key, "glia_section_int", 1u << GLIA_KEY_INT, &k);
    int64_t x = 0;
    if (v && !parsed(s, k, v, parse_int(v, &x) == NUM_OK)) x = 0;
    return x;
}

double glia_section_float(const struct glia_section *s, const char *key)
{
    const struct glia_key *k;
    const char *v = value_of(s, key, "glia_section_float", 1u << GLIA_KEY_FLOAT | 1u << GLIA_KEY_INT, &k);
    double x = 0;
    if (v && !parsed(s, k, v, parse_float(v, &x) == NUM_OK)) x = 0;
    return x;
}

bool glia_section_bool(const struct glia_section *s, const char *key)
{
    const struct glia_key *k;
    const char *v = value_of(s, key, "glia_section_bool", 1u << GLIA_KEY_BOOL, &k);
    int b = v ? parse_bool(v) : 0;
    return v && parsed(s, k, v, b >= 0) && b == 1;
}

const char *glia_section_str(const struct glia_section *s, const char *key)
{
    const struct glia_key *k;
    return value_of(s, key, "glia_section_str", ~0u, &k);
}

/* x in the fewest digits that read back as x (0.1, not 0.10000000000000001). */
static void shortest(char *buf, size_t n, double x)
{
    double back;
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, x);
        if (parse_float(buf, &back) == NUM_OK && back == x) return;
    }
}

glia_status glia__section_canonical(const struct glia_section *s, const struct glia_key *k, char **out)
{
    const struct glia__entry *e = entry_find(s, k->name);
    const char *v = e ? e->value : k->default_value;
    char num[64];
    *out = NULL;
    if (!v) return GLIA_OK;
    int64_t i;
    double x;
    int b;
    if (k->type == GLIA_KEY_INT && parse_int(v, &i) == NUM_OK) snprintf(num, sizeof num, "%lld", (long long)i), v = num;
    else if (k->type == GLIA_KEY_FLOAT && parse_float(v, &x) == NUM_OK) shortest(num, sizeof num, x), v = num;
    else if (k->type == GLIA_KEY_BOOL && (b = parse_bool(v)) >= 0) v = b ? "on" : "off";
    if (k->type != GLIA_KEY_LIST) return (*out = glia__strdup(v)) ? GLIA_OK : GLIA_ENOMEM;
    struct split *sp = split_new(v, ',', NULL);
    size_t n = strlen(v) + 2 * (sp ? (size_t)sp->n : 0) + 1;  /* ", " between trimmed items */
    if (sp && (*out = malloc(n))) join(*out, n, sp->items, sp->n);
    free(sp);
    return *out ? GLIA_OK : GLIA_ENOMEM;
}

/* Splits are kept until the config is freed, so items from earlier calls stay valid; a
 * repeated call for the same key and text returns the same split. Returns -1 (error
 * recorded, *items NULL) on ENOMEM. */
int glia_section_list(const struct glia_section *s, const char *key, const char ***items)
{
    const struct glia_key *k;
    const char *v = value_of(s, key, "glia_section_list", 1u << GLIA_KEY_LIST | 1u << GLIA_KEY_STRING, &k);
    *items = NULL;
    if (!v) return 0;
    struct glia_section *w = (struct glia_section *)s;  /* sections are never const objects */
    for (int i = 0; i < w->n_list_items; i++) {
        struct split *sp = (struct split *)w->list_items[i];
        if (strcmp(sp->key, key) == 0 && strcmp(sp->source, v) == 0) {
            *items = sp->items;
            return sp->n;
        }
    }
    char **grown = realloc(w->list_items, (size_t)(w->n_list_items + 1) * sizeof *grown);
    struct split *sp = grown ? split_new(v, ',', key) : NULL;
    if (grown) w->list_items = grown;
    if (!sp) {
        nomem(w->cfg);
        return -1;
    }
    w->list_items[w->n_list_items++] = (char *)sp;
    *items = sp->items;
    return sp->n;
}

glia_status glia__section_misread(const struct glia_section *s, const char *who)
{
    if (!s || !s->misread[0]) return GLIA_OK;
    return glia_section_error(s, s->misread_key[0] ? s->misread_key : NULL, GLIA_EPLUGIN, "%s: %s", who, s->misread);
}

void glia__section_misread_clear(struct glia_section *s)
{
    if (s) s->misread[0] = s->misread_key[0] = '\0';
}

glia_status glia__layer_misread(const struct glia_layer *l, const struct glia_section *s)
{
    char who[256];
    snprintf(who, sizeof who, "layer type '%s' (plugin %s)", l->type->name, glia__ops_plugin(l->ctx, l->type));
    return glia__section_misread(s, who);
}

glia_status glia__optimizer_misread(const struct glia_optimizer *o, const struct glia_section *s)
{
    char who[256];
    snprintf(who, sizeof who, "optimizer '%s' (plugin %s)", o->type->name, glia__ops_plugin(o->ctx, o->type));
    return glia__section_misread(s, who);
}

/* A relative path written in the file is relative to the file's folder; one given by --set
 * is relative to the working directory. Returns an owned string. */
char *glia__config_path(const struct glia_section *s, const char *key, const char *value)
{
    const struct glia__entry *e = glia__section_entry(s, key);
    if (!value || value[0] == '/' || (e && e->origin) || !s->cfg->path) return glia__strdup(value);
    while (value[0] == '.' && value[1] == '/') value += 2 + strspn(value + 2, "/");  /* "./x": dir/x, not dir/./x */
    char *copy = glia__strdup(s->cfg->path);
    if (!copy) return NULL;
    const char *dir = dirname(copy);
    size_t n = strlen(dir) + strlen(value) + 2;
    char *out = malloc(n);
    if (out && !strcmp(value, ".")) snprintf(out, n, "%s", dir);
    else if (out) snprintf(out, n, "%s/%s", dir, value);
    free(copy);
    return out;
}
