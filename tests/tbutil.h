/* tests/tbutil.h — a TensorBoard event file reader of the tests' own: TFRecord framing with both masked CRC32Cs
 * checked, and the Event, Summary and Value fields decoded from the protobuf wire format. Not glia's writer
 * (core/tensorboard.c), which it checks: it shares no code with it. */
#ifndef GLIA_TBUTIL_H
#define GLIA_TBUTIL_H

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tb_value {
    char tag[64];
    float v;
};

struct tb_event {
    double wall;
    bool has_wall, has_step;
    int64_t step;
    char version[32];  /* file_version, "" when absent */
    int n_values;
    struct tb_value values[4];
};

/* Why a file does not read (tb_read's result). */
enum { TB_OK = 0, TB_SHORT = -1, TB_HEADER_CRC = -2, TB_DATA_CRC = -3, TB_PROTO = -4, TB_FULL = -5 };

/* CRC-32C from a table built here (glia's computes it bit by bit). */
static inline uint32_t tb_crc32c(const uint8_t *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
    uint32_t crc = 0xFFFFFFFFu;
    while (n--) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

static inline uint32_t tb_masked(const uint8_t *p, size_t n)
{
    uint32_t c = tb_crc32c(p, n);
    return (uint32_t)(((c >> 15) | (c << 17)) + 0xa282ead8u);
}

static inline uint64_t tb_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static inline bool tb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* A length-delimited field's bytes: [*s, *s + *n). */
static inline bool tb_bytes(const uint8_t **p, const uint8_t *end, const uint8_t **s, size_t *n)
{
    uint64_t len;
    if (!tb_varint(p, end, &len) || len > (uint64_t)(end - *p)) return false;
    *s = *p, *n = (size_t)len;
    *p += len;
    return true;
}

static inline bool tb_value_decode(const uint8_t *p, const uint8_t *end, struct tb_value *v)
{
    bool tag = false, val = false;
    while (p < end) {
        uint64_t key;
        const uint8_t *s;
        size_t n;
        if (!tb_varint(&p, end, &key)) return false;
        if (key == (1 << 3 | 2)) {  /* tag: string */
            if (!tb_bytes(&p, end, &s, &n) || n >= sizeof v->tag) return false;
            memcpy(v->tag, s, n), v->tag[n] = '\0', tag = true;
        } else if (key == (2 << 3 | 5) && end - p >= 4) {  /* simple_value: float, fixed32 */
            uint32_t u = (uint32_t)tb_le(p, 4);
            memcpy(&v->v, &u, 4), p += 4, val = true;
        } else {
            return false;  /* glia writes nothing else */
        }
    }
    return tag && val;
}

static inline bool tb_summary_decode(const uint8_t *p, const uint8_t *end, struct tb_event *e)
{
    while (p < end) {
        uint64_t key;
        const uint8_t *s;
        size_t n;
        if (!tb_varint(&p, end, &key) || key != (1 << 3 | 2) || !tb_bytes(&p, end, &s, &n)) return false;
        if (e->n_values == 4 || !tb_value_decode(s, s + n, &e->values[e->n_values++])) return false;
    }
    return true;
}

static inline bool tb_event_decode(const uint8_t *p, size_t len, struct tb_event *e)
{
    const uint8_t *end = p + len;
    memset(e, 0, sizeof *e);
    while (p < end) {
        uint64_t key, v;
        const uint8_t *s;
        size_t n;
        if (!tb_varint(&p, end, &key)) return false;
        if (key == (1 << 3 | 1) && end - p >= 8) {  /* wall_time: double, fixed64 */
            v = tb_le(p, 8);
            memcpy(&e->wall, &v, 8), p += 8, e->has_wall = true;
        } else if (key == (2 << 3 | 0) && tb_varint(&p, end, &v)) {  /* step: int64 */
            e->step = (int64_t)v, e->has_step = true;
        } else if (key == (3 << 3 | 2) && tb_bytes(&p, end, &s, &n) && n < sizeof e->version) {  /* file_version */
            memcpy(e->version, s, n), e->version[n] = '\0';
        } else if (key == (5 << 3 | 2) && tb_bytes(&p, end, &s, &n)) {  /* summary */
            if (!tb_summary_decode(s, s + n, e)) return false;
        } else {
            return false;
        }
    }
    return true;
}

/* The records of an event file's n bytes into ev (at most max; *count of them): TB_OK or why not. */
static inline int tb_parse(const uint8_t *buf, size_t n, struct tb_event *ev, int max, int *count)
{
    *count = 0;
    for (size_t at = 0; at < n;) {
        if (n - at < 12) return TB_SHORT;
        uint64_t len = tb_le(buf + at, 8);
        if ((uint32_t)tb_le(buf + at + 8, 4) != tb_masked(buf + at, 8)) return TB_HEADER_CRC;
        if (n - at < 16 || len > n - at - 16) return TB_SHORT;
        const uint8_t *data = buf + at + 12;
        if ((uint32_t)tb_le(data + len, 4) != tb_masked(data, (size_t)len)) return TB_DATA_CRC;
        if (*count == max) return TB_FULL;
        if (!tb_event_decode(data, (size_t)len, &ev[*count])) return TB_PROTO;
        ++*count;
        at += 16 + (size_t)len;
    }
    return TB_OK;
}

/* A whole file, malloc'ed (*n bytes); NULL when it does not read. */
static inline uint8_t *tb_slurp(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + *n, 1, cap - *n, f)) > 0;)
        if ((*n += got) == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    fclose(f);
    return buf;
}

static inline int tb_name_cmp(const void *a, const void *b) { return strcmp(a, b); }

/* The names of dir's event files (events.out.tfevents.*), sorted, into names (at most max): how many; -1 when dir
 * does not open. */
static inline int tb_list(const char *dir, char names[][256], int max)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (!strncmp(de->d_name, "events.out.tfevents.", 20) && n < max) snprintf(names[n++], 256, "%s", de->d_name);
    closedir(d);
    qsort(names, (size_t)n, 256, tb_name_cmp);
    return n;
}

/* The value tagged `tag` of event e; NULL when it has none. */
static inline const float *tb_find(const struct tb_event *e, const char *tag)
{
    for (int i = 0; i < e->n_values; i++)
        if (!strcmp(e->values[i].tag, tag)) return &e->values[i].v;
    return NULL;
}

/* The scalars tagged `tag` of the one event file in folder dir, in file order: their steps and values into step[],
 * v[] (at most max); how many, or -1 when dir does not hold exactly one event file or it does not read. */
static inline int tb_dir_scalars(const char *dir, const char *tag, int64_t *step, float *v, int max)
{
    char names[2][256], path[1024];
    if (tb_list(dir, names, 2) != 1) return -1;
    snprintf(path, sizeof path, "%s/%s", dir, names[0]);
    size_t n;
    uint8_t *buf = tb_slurp(path, &n);
    struct tb_event *ev = malloc(8192 * sizeof *ev);
    int count = 0, rc = buf && ev ? tb_parse(buf, n, ev, 8192, &count) : TB_SHORT, got = 0;
    for (int i = 0; i < count && !rc; i++) {
        const float *x = tb_find(&ev[i], tag);
        if (x && got < max) step[got] = ev[i].step, v[got] = *x;
        got += x != NULL;
    }
    free(buf);
    free(ev);
    return rc ? -1 : got;
}

#endif
