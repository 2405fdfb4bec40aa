/* tests/jsonutil.h — a strict JSON reader for the tests (RFC 8259: no trailing commas, no bare
 * control characters, exact number grammar) that builds a small tree. Not for the library. */
#ifndef GLIA_JSONUTIL_H
#define GLIA_JSONUTIL_H

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
struct jv {
    enum jtype t;
    double num;          /* J_NUM, J_BOOL (0 or 1) */
    char *str;           /* J_STR: decoded (UTF-8) */
    int n;               /* J_ARR, J_OBJ: items */
    struct jv *items;
    char **keys;         /* J_OBJ: decoded keys */
};

struct jparse {
    const char *p;
    int depth;
};

static void jv_free(struct jv *v)
{
    for (int i = 0; i < v->n; i++) {
        jv_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    *v = (struct jv){0};
}

static void jskip(struct jparse *j)
{
    while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r') j->p++;
}

static int jhex(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string at j->p (the opening quote), decoded into a new buffer; NULL when malformed. */
static char *jstring(struct jparse *j)
{
    if (*j->p != '"') return NULL;
    j->p++;
    size_t cap = 16, k = 0;
    char *out = malloc(cap);
    while (out) {
        unsigned char c = (unsigned char)*j->p++;
        if (k + 5 > cap) {
            char *o = realloc(out, cap *= 2);
            if (!o) break;
            out = o;
        }
        if (c == '"') {
            out[k] = '\0';
            return out;
        }
        if (c < 0x20) break;  /* bare control character, or the end of the text */
        if (c != '\\') {
            out[k++] = (char)c;
            continue;
        }
        char e = *j->p++;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            out[k++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
        } else if (e == 'u') {
            unsigned u = 0;
            for (int i = 0; i < 4; i++) {
                int h = jhex(j->p[i]);
                if (h < 0) goto bad;
                u = u * 16 + (unsigned)h;
            }
            j->p += 4;
            if (u < 0x80) {
                out[k++] = (char)u;
            } else if (u < 0x800) {
                out[k++] = (char)(0xc0 | u >> 6);
                out[k++] = (char)(0x80 | (u & 0x3f));
            } else {
                out[k++] = (char)(0xe0 | u >> 12);
                out[k++] = (char)(0x80 | ((u >> 6) & 0x3f));
                out[k++] = (char)(0x80 | (u & 0x3f));
            }
        } else {
            break;
        }
    }
bad:
    free(out);
    return NULL;
}

static bool jvalue(struct jparse *j, struct jv *v);

static bool jcontainer(struct jparse *j, struct jv *v, bool obj)
{
    char close = obj ? '}' : ']';
    j->p++;
    jskip(j);
    if (*j->p == close) {
        j->p++;
        return true;
    }
    for (;;) {
        if (!(v->n & (v->n - 1)) || !v->n) {  /* grow at 0, 1, 2, 4, 8, ... */
            int cap = v->n ? 2 * v->n : 1;
            struct jv *it = realloc(v->items, (size_t)cap * sizeof *it);
            if (!it) return false;
            v->items = it;
            if (obj) {
                char **ks = realloc(v->keys, (size_t)cap * sizeof *ks);
                if (!ks) return false;
                v->keys = ks;
            }
        }
        v->items[v->n] = (struct jv){0};
        if (obj) {
            jskip(j);
            if (!(v->keys[v->n] = jstring(j))) return false;
            jskip(j);
            if (*j->p++ != ':') {
                free(v->keys[v->n]);
                return false;
            }
        }
        v->n++;
        if (!jvalue(j, &v->items[v->n - 1])) return false;
        jskip(j);
        if (*j->p == ',') {
            j->p++;
            jskip(j);
            continue;
        }
        if (*j->p++ != close) return false;
        return true;
    }
}

static bool jnumber(struct jparse *j, struct jv *v)
{
    const char *s = j->p, *q = s;
    if (*q == '-') q++;
    if (*q == '0') q++;
    else if (*q >= '1' && *q <= '9') while (isdigit((unsigned char)*q)) q++;
    else return false;
    if (*q == '.') {
        if (!isdigit((unsigned char)*++q)) return false;
        while (isdigit((unsigned char)*q)) q++;
    }
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-') q++;
        if (!isdigit((unsigned char)*q)) return false;
        while (isdigit((unsigned char)*q)) q++;
    }
    v->t = J_NUM;
    v->num = strtod(s, NULL);
    j->p = q;
    return true;
}

static bool jvalue(struct jparse *j, struct jv *v)
{
    if (++j->depth > 64) return false;
    jskip(j);
    bool ok;
    char c = *j->p;
    if (c == '{' || c == '[') {
        v->t = c == '{' ? J_OBJ : J_ARR;
        ok = jcontainer(j, v, c == '{');
    } else if (c == '"') {
        v->t = J_STR;
        ok = (v->str = jstring(j)) != NULL;
    } else if (!strncmp(j->p, "true", 4) || !strncmp(j->p, "null", 4)) {
        v->t = c == 't' ? J_BOOL : J_NULL;
        v->num = c == 't';
        j->p += 4;
        ok = true;
    } else if (!strncmp(j->p, "false", 5)) {
        v->t = J_BOOL;
        j->p += 5;
        ok = true;
    } else {
        ok = jnumber(j, v);
    }
    j->depth--;
    return ok;
}

/* Parses the whole of text (one value, then only blanks) into *v; false (and *v empty) when it
 * is not valid JSON. */
static bool json_parse(const char *text, struct jv *v)
{
    struct jparse j = {text, 0};
    *v = (struct jv){0};
    bool ok = jvalue(&j, v);
    if (ok) {
        jskip(&j);
        ok = *j.p == '\0';
    }
    if (!ok) jv_free(v);
    return ok;
}

/* The member key of object v, or NULL. */
static const struct jv *json_get(const struct jv *v, const char *key)
{
    if (!v || v->t != J_OBJ) return NULL;
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->keys[i], key)) return &v->items[i];
    return NULL;
}

/* A whole file as a string (malloc'd), or NULL. */
static char *json_read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0, k;
    char *buf = malloc(cap);
    while (buf && (k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (n + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

#endif
