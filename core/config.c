/* core/config.c — the keys of INI sections: schema checks, values, getters, and what a plugin's getter misread.
 * Not the INI syntax (core/ini.c); which schemas a section obeys is decided by the model and plugins. */
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

static glia_status nomem(struct glia_config *cfg) { return glia_error(cfg->ctx, GLIA_ENOMEM, "out of memory"); }
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
            if (!k->required || glia__section_entry(s, k->name)) continue;
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
    const struct glia__entry *e = glia__section_entry(s, key);
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
    return key && glia__section_entry(s, key) != NULL;
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
    const struct glia__entry *e = glia__section_entry(s, k->name);
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

const char *glia_config_value(struct glia_config *cfg, const char *section, const char *key)
{
    struct glia_section *s = cfg && section && key ? glia__config_find(cfg, section) : NULL;
    const struct glia__entry *e = s ? glia__section_entry(s, key) : NULL;
    return e ? e->value : NULL;
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
