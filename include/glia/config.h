/* glia/config.h — INI configuration: key schemas and read access to a validated section.
 * Not the parser: the core reads the file, validates every key against the schema
 * of its owner (core or plugin), and only then hands sections to plugins. */
#ifndef GLIA_CONFIG_H
#define GLIA_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include "status.h"
#include "log.h"

#ifdef __cplusplus
extern "C" {
#endif

enum glia_key_type {
    GLIA_KEY_INT = 1,   /* 64-bit integer, optional [min,max] bounds */
    GLIA_KEY_FLOAT,     /* double, optional [min,max] bounds */
    GLIA_KEY_BOOL,      /* on|off|true|false|yes|no|1|0 */
    GLIA_KEY_STRING,    /* any text */
    GLIA_KEY_ENUM,      /* one of `choices`, written "a|b|c" */
    GLIA_KEY_LIST       /* comma-separated names ("a, b") */
};

/* One declared key. Schemas are arrays ending with an entry whose name is NULL. */
struct glia_key {
    const char *name;
    enum glia_key_type type;
    const char *default_value;  /* text as in a file; NULL: no default */
    const char *doc;            /* one line, shown by `glia plugins --describe` */
    bool required;              /* must be present (then default_value is NULL) */
    const char *choices;        /* GLIA_KEY_ENUM only: "a|b|c" */
    double min, max;            /* INT/FLOAT bounds; checked only when min < max */
};

/* Schema entries without -Wmissing-field-initializers noise:
 *   GLIA_KEY("outputs", GLIA_KEY_INT, NULL, "output features", .required = true, .min = 1, .max = 1e9)
 * and GLIA_KEY_END last. */
#define GLIA_KEY(name_, type_, default_, doc_, ...) \
    { .name = (name_), .type = (type_), .default_value = (default_), .doc = (doc_), __VA_ARGS__ }
#define GLIA_KEY_END { .name = NULL }

/* A validated section of the configuration (borrowed from the config, read-only). */
struct glia_section;

const char *glia_section_name(const struct glia_section *s);
/* Whether the key was written in the file or by --set (not just defaulted); a key the schema
 * does not declare marks the section as the getters do. */
bool glia_section_has(const struct glia_section *s, const char *key);
/* Typed values; a key not written gives its schema default. A getter that cannot answer
 * (a key the section's schema does not declare, a key of another type, a schema default that
 * does not parse) returns 0, false or NULL (a list: no items) and marks the section with its
 * first such call: the core then refuses the plugin call that asked (create), with one line
 * naming the file, the [section], the key, the layer type or optimizer, and its plugin.
 * glia_section_float also reads int keys; glia_section_str any key; glia_section_list list and
 * string keys. */
int64_t glia_section_int(const struct glia_section *s, const char *key);
double glia_section_float(const struct glia_section *s, const char *key);
bool glia_section_bool(const struct glia_section *s, const char *key);
/* String/enum value (borrowed; NULL if neither written nor defaulted). */
const char *glia_section_str(const struct glia_section *s, const char *key);
/* List value: item i of n (borrowed). Returns the number of items. */
int glia_section_list(const struct glia_section *s, const char *key, const char ***items);

/* Records an error that names the place of `key` in its file ("model.ini:12: [fc] outputs:
 * msg"; key may be NULL for the section itself) and returns status. */
glia_status glia_section_error(const struct glia_section *s, const char *key, glia_status status,
                               const char *fmt, ...) GLIA_PRINTF(4, 5);
/* Places the context's error (of a call that failed because of what key says) at key: "model.ini:12: [fc] outputs:
 * <error>" (the status's text when there was none). Returns status. */
glia_status glia_section_error_wrap(const struct glia_section *s, const char *key, glia_status status);

#ifdef __cplusplus
}
#endif
#endif
