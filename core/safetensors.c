/* core/safetensors.c — a model's weights and buffers as a safetensors file and back: the tensors named as PyTorch's
 * state_dict names them ("<layer>.<parameter>"), the header's JSON written and read strictly (its small grammar by
 * hand), every size and offset checked, one line naming the tensor for what does not fit. Not a checkpoint (no
 * optimizer state: core/checkpoint.c) and not a general JSON library. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "parts.h"
#include <glia/half.h>
#include "train.h"

#define ST_MAX_HEADER ((uint64_t)100 << 20)  /* safetensors' own limit on the header */
#define ST_MAX_DIMS 8

/* A tensor of the file: its name, type, shape and bytes [begin, end) of the data. */
struct st_entry {
    char *name;
    enum glia_dtype dtype;
    int nd;
    int64_t dim[ST_MAX_DIMS];
    int64_t begin, end;
    bool used;
};

struct st_file {
    struct st_entry *e;
    int n, cap;
};

static void st_free(struct st_file *f)
{
    for (int i = 0; i < f->n; i++) free(f->e[i].name);
    free(f->e);
    memset(f, 0, sizeof *f);
}

static const char *dtype_text(enum glia_dtype t)
{
    switch (t) {
    case GLIA_F32: return "F32";
    case GLIA_BF16: return "BF16";
    case GLIA_F16: return "F16";
    case GLIA_I64: return "I64";
    default: return "?";
    }
}

static int64_t dtype_size(enum glia_dtype t) { return t == GLIA_F32 ? 4 : t == GLIA_I64 ? 8 : 2; }

static int64_t numel(const int64_t *dim, int nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= dim[i];
    return n;
}

static void shape_text(const int64_t *dim, int nd, char *buf, size_t n)
{
    if (nd == 0) {
        snprintf(buf, n, "a scalar");
        return;
    }
    size_t k = 0;
    for (int i = 0; i < nd && k < n; i++) k += (size_t)snprintf(buf + k, n - k, i ? "x%lld" : "%lld", (long long)dim[i]);
}

/* ---- the model's tensors, as the file names them ---- */

enum st_kind { ST_PARAM, ST_BUFFER, ST_DROPPED_BIAS, ST_BATCHES };

/* One tensor of the model: a parameter, a buffer, the zeros of a bias [graph] drop_bias_before_norm removed, or
 * PyTorch's num_batches_tracked of a normalization layer with running statistics. */
struct st_tensor {
    char name[160];
    enum st_kind kind;
    int node;
    struct glia_param *p;  /* param, buffer */
    struct glia_shape shape;
};

/* The model's tensors in file order (*n of them; free the array). A tied parameter is its owner's: not listed. */
static glia_status model_tensors(struct glia_model *m, struct st_tensor **out, int *n)
{
    int cap = 16, k = 0;
    struct st_tensor *t = malloc(sizeof *t * (size_t)cap);
    if (!t) return GLIA_ENOMEM;
    for (int i = 0; i < m->graph.n_nodes; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        struct glia_layer *l = &nd->layer;
        int extra = nd->bias_dropped + ((l->type->flags & GLIA_TYPE_NORMALIZATION) && l->n_buffers > 0);
        if (k + l->n_params + l->n_buffers + extra > cap) {
            cap = 2 * (k + l->n_params + l->n_buffers + extra);
            struct st_tensor *g = realloc(t, sizeof *t * (size_t)cap);
            if (!g) {
                free(t);
                return GLIA_ENOMEM;
            }
            t = g;
        }
        for (int p = 0; p < l->n_params; p++) {
            if (nd->tie && p == nd->tie - 1) continue;
            t[k] = (struct st_tensor){.kind = ST_PARAM, .node = i, .p = &l->params[p], .shape = l->params[p].shape};
            snprintf(t[k++].name, sizeof t->name, "%s.%s", l->name, l->params[p].name);
        }
        if (nd->bias_dropped && l->n_params > 0) {
            t[k] = (struct st_tensor){.kind = ST_DROPPED_BIAS, .node = i,
                                      .shape = glia_shape_make(1, (int64_t[]){l->params[0].shape.dim[0]})};
            snprintf(t[k++].name, sizeof t->name, "%s.bias", l->name);
        }
        for (int b = 0; b < l->n_buffers; b++) {
            t[k] = (struct st_tensor){.kind = ST_BUFFER, .node = i, .p = &l->buffers[b], .shape = l->buffers[b].shape};
            snprintf(t[k++].name, sizeof t->name, "%s.%s", l->name, l->buffers[b].name);
        }
        if ((l->type->flags & GLIA_TYPE_NORMALIZATION) && l->n_buffers > 0) {
            t[k] = (struct st_tensor){.kind = ST_BATCHES, .node = i, .shape = {0, {0}}};
            snprintf(t[k++].name, sizeof t->name, "%s.num_batches_tracked", l->name);
        }
    }
    *out = t;
    *n = k;
    return GLIA_OK;
}

/* ---- writing ---- */

/* A growing string. */
struct buf {
    char *s;
    size_t len, cap;
    bool oom;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = 2 * (b->cap + (size_t)n + 64);
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* A JSON string: glia's names are printable ASCII; anything else is escaped. */
static void put_json_string(struct buf *b, const char *s)
{
    put(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') put(b, "\\%c", c);
        else if (c < 0x20) put(b, "\\u%04x", c);
        else put(b, "%c", c);
    }
    put(b, "\"");
}

/* The values of tensor t as n f32 into v (host memory). */
static glia_status tensor_values(struct glia_model *m, const struct st_tensor *t, float *v, int64_t n)
{
    if (t->kind == ST_DROPPED_BIAS) {
        memset(v, 0, sizeof *v * (size_t)n);
        return GLIA_OK;
    }
    return glia_tensor_to_host(t->p->value, v, sizeof *v * (size_t)n);
}

static glia_status write_all(struct glia_model *m, FILE *f, const char *path, const void *p, size_t n)
{
    if (n && fwrite(p, 1, n, f) != n)
        return glia_error(m->ctx, GLIA_EIO, "cannot write %s: %s", path, strerror(errno ? errno : EIO));
    return GLIA_OK;
}

glia_status glia_model_export_safetensors(struct glia_model *m, const char *path, enum glia_dtype dtype)
{
    if (!m || !path) return GLIA_EINVAL;
    if (dtype != GLIA_F32 && dtype != GLIA_BF16 && dtype != GLIA_F16)
        return glia_error(m->ctx, GLIA_EINVAL, "%s: safetensors weights are written as f32, bf16 or f16, not %s", path,
                          glia_dtype_name(dtype));
    struct st_tensor *t;
    int n;
    glia_status st = model_tensors(m, &t, &n);
    if (st) return glia_error(m->ctx, st, "%s: out of memory", path);
    /* the header: metadata, then each tensor at its offset in the data, in model order */
    struct buf h = {0};
    put(&h, "{\"__metadata__\":{\"format\":\"pt\",\"writer\":\"glia %s\"}", GLIA_VERSION_STRING);
    int64_t off = 0, most = 1;
    for (int i = 0; i < n; i++) {
        enum glia_dtype dt = t[i].kind == ST_BATCHES ? GLIA_I64 : dtype;
        int64_t bytes = glia_shape_numel(&t[i].shape) * dtype_size(dt);
        put(&h, ",");
        put_json_string(&h, t[i].name);
        put(&h, ":{\"dtype\":\"%s\",\"shape\":[", dtype_text(dt));
        for (int d = 0; d < t[i].shape.ndim; d++) put(&h, d ? ",%lld" : "%lld", (long long)t[i].shape.dim[d]);
        put(&h, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + bytes));
        off += bytes;
        if (glia_shape_numel(&t[i].shape) > most) most = glia_shape_numel(&t[i].shape);
    }
    put(&h, "}");
    while (!h.oom && h.len % 8) put(&h, " ");  /* the data starts 8-byte aligned */
    float *v = malloc(sizeof *v * (size_t)most);
    void *out = malloc((size_t)most * 4);
    if (h.oom || !v || !out) st = glia_error(m->ctx, GLIA_ENOMEM, "%s: out of memory", path);
    /* written to a temporary beside it, renamed once whole: a failed export leaves no partial file */
    char *tmp = st ? NULL : glia__checkpoint_tmp_name(path, (long)getpid());
    FILE *f = tmp ? fopen(tmp, "wb") : NULL;
    if (!st && !f) st = glia_error(m->ctx, GLIA_EIO, "cannot write %s: %s", path, strerror(tmp ? errno : ENOMEM));
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    if (!st) st = write_all(m, f, path, len8, 8);
    if (!st) st = write_all(m, f, path, h.s, h.len);
    for (int i = 0; i < n && !st; i++) {
        int64_t k = glia_shape_numel(&t[i].shape);
        if (t[i].kind == ST_BATCHES) {  /* glia does not count the batches its statistics saw: 0 */
            const unsigned char zero[8] = {0};
            st = write_all(m, f, path, zero, 8);
            continue;
        }
        if ((st = tensor_values(m, &t[i], v, k))) break;
        unsigned char *o = out;
        for (int64_t j = 0; j < k; j++) {  /* little-endian, as the format is */
            uint32_t u = dtype == GLIA_F32 ? glia_f32_bits(v[j])
                         : dtype == GLIA_BF16 ? glia_f32_to_bf16(v[j]) : glia_f32_to_f16(v[j]);
            int64_t es = dtype_size(dtype);
            for (int64_t q = 0; q < es; q++) o[j * es + q] = (unsigned char)(u >> (8 * q));
        }
        st = write_all(m, f, path, out, (size_t)(k * dtype_size(dtype)));
    }
    if (f && fclose(f) && !st) st = glia_error(m->ctx, GLIA_EIO, "cannot write %s: %s", path, strerror(errno));
    if (!st && rename(tmp, path)) st = glia_error(m->ctx, GLIA_EIO, "cannot write %s: %s", path, strerror(errno));
    if (st && tmp) unlink(tmp);
    free(tmp);
    free(h.s);
    free(v);
    free(out);
    free(t);
    return st;
}

/* ---- reading: the header's JSON ---- */

struct jp {
    const char *s, *end, *start;
    char err[200];
};

/* The first failure's line: where in the header, and what. */
static bool jfail(struct jp *j, const char *what)
{
    if (!j->err[0])
        snprintf(j->err, sizeof j->err, "its header is not the JSON of a safetensors file (byte %ld of it): %s",
                 (long)(j->s - j->start), what);
    return false;
}

static void ws(struct jp *j)
{
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r')) j->s++;
}

static bool lit(struct jp *j, char c)
{
    ws(j);
    if (j->s < j->end && *j->s == c) {
        j->s++;
        return true;
    }
    return false;
}

static int hex(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

/* A JSON string into out (cap bytes, NUL-terminated; \u escapes as UTF-8, no surrogates). */
static bool jstring(struct jp *j, char *out, size_t cap)
{
    if (!lit(j, '"')) return jfail(j, "a string expected");
    size_t k = 0;
    while (j->s < j->end && *j->s != '"') {
        unsigned c = (unsigned char)*j->s++;
        if (c < 0x20) return jfail(j, "a control character in a string");
        if (c == '\\') {
            if (j->s >= j->end) return jfail(j, "an escape cut short");
            char e = *j->s++;
            const char *map = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *at = strchr(map, e);
            if (e && at) c = (unsigned char)to[at - map];
            else if (e == 'u' && j->end - j->s >= 4) {
                c = 0;
                for (int i = 0; i < 4; i++) {
                    int x = hex(*j->s++);
                    if (x < 0) return jfail(j, "a bad \\u escape");
                    c = c * 16 + (unsigned)x;
                }
                if (c >= 0xd800 && c < 0xe000) return jfail(j, "a surrogate \\u escape");
                if (c >= 0x80) {  /* UTF-8 */
                    unsigned char u[3];
                    int n = c < 0x800 ? 2 : 3;
                    if (n == 2) u[0] = (unsigned char)(0xc0 | (c >> 6)), u[1] = (unsigned char)(0x80 | (c & 0x3f));
                    else u[0] = (unsigned char)(0xe0 | (c >> 12)), u[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f)),
                        u[2] = (unsigned char)(0x80 | (c & 0x3f));
                    for (int i = 0; i < n; i++)
                        if (k + 1 < cap) out[k++] = (char)u[i];
                    continue;
                }
            } else {
                return jfail(j, "a bad escape");
            }
        }
        if (k + 1 >= cap) return jfail(j, "a string too long");
        out[k++] = (char)c;
    }
    if (j->s >= j->end) return jfail(j, "a string not closed");
    j->s++;
    out[k] = 0;
    return true;
}

/* A non-negative integer (no sign, fraction or exponent), at most 2^53. */
static bool jint(struct jp *j, int64_t *v)
{
    ws(j);
    const char *s0 = j->s;
    int64_t x = 0;
    while (j->s < j->end && *j->s >= '0' && *j->s <= '9') {
        if (x > ((int64_t)1 << 53) / 10) return jfail(j, "an integer too large");
        x = 10 * x + (*j->s++ - '0');
    }
    if (j->s == s0) return jfail(j, "a non-negative integer expected");
    if (j->s < j->end && (*j->s == '.' || *j->s == 'e' || *j->s == 'E')) return jfail(j, "an integer expected");
    *v = x;
    return true;
}

/* [int, ...] into v (at most max; *n of them). */
static bool jints(struct jp *j, int64_t *v, int max, int *n)
{
    *n = 0;
    if (!lit(j, '[')) return jfail(j, "an array expected");
    if (lit(j, ']')) return true;
    do {
        if (*n == max) return jfail(j, "an array too long");
        if (!jint(j, &v[(*n)++])) return false;
    } while (lit(j, ','));
    return lit(j, ']') ? true : jfail(j, "',' or ']' expected");
}

/* "__metadata__": an object of strings, read and left alone. */
static bool jmetadata(struct jp *j)
{
    char s[1024];
    if (!lit(j, '{')) return jfail(j, "__metadata__ must be an object");
    if (lit(j, '}')) return true;
    do {
        if (!jstring(j, s, sizeof s) || !lit(j, ':') || !jstring(j, s, sizeof s))
            return jfail(j, "__metadata__ holds strings only");
    } while (lit(j, ','));
    return lit(j, '}') ? true : jfail(j, "',' or '}' expected");
}

/* One tensor's object: dtype, shape, data_offsets (each once, nothing else). */
static bool jtensor(struct jp *j, struct st_entry *e)
{
    char key[32], dt[16];
    bool seen[3] = {false, false, false};
    int64_t off[2];
    int n;
    if (!lit(j, '{')) return jfail(j, "a tensor's entry must be an object");
    do {
        if (!jstring(j, key, sizeof key) || !lit(j, ':')) return jfail(j, "a key and ':' expected");
        int k = !strcmp(key, "dtype") ? 0 : !strcmp(key, "shape") ? 1 : !strcmp(key, "data_offsets") ? 2 : -1;
        if (k < 0 || seen[k]) return jfail(j, k < 0 ? "a tensor's keys are dtype, shape and data_offsets" : "a key twice");
        seen[k] = true;
        if (k == 0 && !jstring(j, dt, sizeof dt)) return false;
        if (k == 1 && !jints(j, e->dim, ST_MAX_DIMS, &e->nd)) return false;
        if (k == 2 && (!jints(j, off, 2, &n) || n != 2)) return jfail(j, "data_offsets is [begin, end]");
    } while (lit(j, ','));
    if (!lit(j, '}')) return jfail(j, "',' or '}' expected");
    if (!seen[0] || !seen[1] || !seen[2]) return jfail(j, "a tensor needs dtype, shape and data_offsets");
    e->dtype = !strcmp(dt, "F32") ? GLIA_F32 : !strcmp(dt, "BF16") ? GLIA_BF16 : !strcmp(dt, "F16") ? GLIA_F16
             : !strcmp(dt, "I64") ? GLIA_I64 : GLIA_U8;
    if (e->dtype == GLIA_U8) {
        snprintf(j->err, sizeof j->err, "tensor '%.100s': dtype %.15s (glia reads F32, BF16, F16; I64 for num_batches_tracked)",
                 e->name, dt);
        return false;
    }
    e->begin = off[0];
    e->end = off[1];
    return true;
}

/* The header's object into f; a failure's line in j->err. */
static bool parse_header(struct jp *j, struct st_file *f)
{
    char name[512];
    if (!lit(j, '{')) return jfail(j, "an object expected");
    if (lit(j, '}')) goto end;
    do {
        if (!jstring(j, name, sizeof name) || !lit(j, ':')) return jfail(j, "a name and ':' expected");
        if (!strcmp(name, "__metadata__")) {
            if (!jmetadata(j)) return false;
            continue;
        }
        for (int i = 0; i < f->n; i++)
            if (!strcmp(f->e[i].name, name)) {
                snprintf(j->err, sizeof j->err, "tensor '%.150s' is in its header twice", name);
                return false;
            }
        if (f->n == f->cap) {
            int cap = f->cap ? 2 * f->cap : 64;
            struct st_entry *e = realloc(f->e, sizeof *e * (size_t)cap);
            if (!e) return jfail(j, "out of memory");
            f->e = e;
            f->cap = cap;
        }
        struct st_entry *e = &f->e[f->n];
        memset(e, 0, sizeof *e);
        if (!(e->name = glia__strdup(name))) return jfail(j, "out of memory");
        f->n++;
        if (!jtensor(j, e)) return false;
    } while (lit(j, ','));
    if (!lit(j, '}')) return jfail(j, "',' or '}' expected");
end:
    ws(j);
    if (j->s != j->end) return jfail(j, "bytes after the header's object (only spaces may pad it)");
    return true;
}

static int by_begin(const void *a, const void *b)
{
    const struct st_entry *x = *(const struct st_entry *const *)a, *y = *(const struct st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Every tensor's bytes match its dtype and shape, and together they fill the data exactly (data bytes), in any
 * order. A failure's line in why. */
static bool check_layout(struct st_file *f, int64_t data, char *why, size_t n)
{
    struct st_entry **o = malloc(sizeof *o * (size_t)(f->n ? f->n : 1));
    if (!o) return snprintf(why, n, "out of memory"), false;
    bool ok = true;
    for (int i = 0; i < f->n && ok; i++) {
        struct st_entry *e = &f->e[i];
        o[i] = e;
        int64_t want = numel(e->dim, e->nd) * dtype_size(e->dtype);
        if (e->end < e->begin || e->end - e->begin != want) {
            char s[96];
            shape_text(e->dim, e->nd, s, sizeof s);
            snprintf(why, n, "tensor '%s': data_offsets [%lld, %lld] hold %lld bytes; %s %s takes %lld", e->name,
                     (long long)e->begin, (long long)e->end, (long long)(e->end - e->begin), dtype_text(e->dtype), s,
                     (long long)want);
            ok = false;
        }
    }
    if (ok) qsort(o, (size_t)f->n, sizeof *o, by_begin);
    int64_t at = 0;
    for (int i = 0; i < f->n && ok; i++) {
        if (o[i]->begin != at) {
            snprintf(why, n, "tensor '%s' starts at byte %lld of the data, not at %lld (%s)", o[i]->name,
                     (long long)o[i]->begin, (long long)at, o[i]->begin < at ? "it overlaps another" : "a gap before it");
            ok = false;
        }
        at = o[i]->end;
    }
    if (ok && at != data) {
        snprintf(why, n, at > data ? "its tensors need %lld bytes of data; the file holds %lld (cut short?)"
                                   : "its tensors take %lld bytes of data; the file holds %lld (bytes after them)",
                 (long long)at, (long long)data);
        ok = false;
    }
    free(o);
    return ok;
}

/* Opens path and reads its header and layout into f; *data_at: the data's first byte in the file. */
static glia_status st_open(struct glia_context *ctx, const char *path, FILE **fp, struct st_file *f, int64_t *data_at)
{
    FILE *fh = fopen(path, "rb");
    if (!fh) return glia_error(ctx, GLIA_EIO, "cannot open %s: %s", path, strerror(errno));
    unsigned char len8[8];
    glia_status st = GLIA_OK;
    char *h = NULL;
    int64_t size = -1;
    if (fseek(fh, 0, SEEK_END) == 0) size = ftell(fh);
    rewind(fh);
    uint64_t hn = 0;
    if (size < 8 || fread(len8, 1, 8, fh) != 8)
        st = glia_error(ctx, GLIA_EFORMAT, "%s: not a safetensors file (%lld bytes: no 8-byte header length)", path,
                        (long long)(size < 0 ? 0 : size));
    for (int i = 0; i < 8 && !st; i++) hn |= (uint64_t)len8[i] << (8 * i);
    if (!st && (hn < 2 || hn > ST_MAX_HEADER || hn > (uint64_t)(size - 8)))
        st = glia_error(ctx, GLIA_EFORMAT, "%s: not a safetensors file (a header of %llu bytes in a file of %lld)", path,
                        (unsigned long long)hn, (long long)size);
    if (!st && !(h = malloc((size_t)hn))) st = glia_error(ctx, GLIA_ENOMEM, "%s: out of memory", path);
    if (!st && fread(h, 1, (size_t)hn, fh) != hn)
        st = glia_error(ctx, GLIA_EIO, "cannot read %s: %s", path, ferror(fh) ? strerror(errno) : "cut short");
    if (!st) {
        struct jp j = {h, h + hn, h, ""};
        if (!parse_header(&j, f)) st = glia_error(ctx, GLIA_EFORMAT, "%s: %s", path, j.err);
    }
    char why[300];
    if (!st && !check_layout(f, size - 8 - (int64_t)hn, why, sizeof why))
        st = glia_error(ctx, GLIA_EFORMAT, "%s: %s", path, why);
    free(h);
    if (st) {
        fclose(fh);
        st_free(f);
        return st;
    }
    *fp = fh;
    *data_at = 8 + (int64_t)hn;
    return GLIA_OK;
}

static struct st_entry *find(struct st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name)) return &f->e[i];
    return NULL;
}

/* Entry e's values as f32 into v (numel of them); raw is room for its bytes. */
static glia_status read_values(struct glia_context *ctx, const char *path, FILE *fh, int64_t data_at,
                               const struct st_entry *e, float *v, unsigned char *raw)
{
    int64_t n = numel(e->dim, e->nd), bytes = e->end - e->begin;
    if (fseek(fh, data_at + e->begin, SEEK_SET) || fread(raw, 1, (size_t)bytes, fh) != (size_t)bytes)
        return glia_error(ctx, GLIA_EIO, "cannot read %s: tensor '%s': %s", path, e->name,
                          ferror(fh) ? strerror(errno) : "cut short");
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *p = raw + i * dtype_size(e->dtype);
        uint32_t u = e->dtype == GLIA_F32 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                                                (uint32_t)p[3] << 24
                                          : (uint32_t)p[0] | (uint32_t)p[1] << 8;
        v[i] = e->dtype == GLIA_F32 ? glia_bits_f32(u) : e->dtype == GLIA_BF16 ? glia_bf16_to_f32((uint16_t)u)
                                                                               : glia_f16_to_f32((uint16_t)u);
    }
    return GLIA_OK;
}

/* Subtracts bias b (n values) from the running mean of the normalization node that reads node i's output: what the
 * bias [graph] drop_bias_before_norm removed did in evaluation. */
static glia_status fold_bias(struct glia_model *m, const char *path, int i, const float *b, int64_t n, const char *name)
{
    struct glia_layer *bn = &m->graph.nodes[m->graph.nodes[i].bias_dropped_for].layer;
    struct glia_param *rm = NULL;
    for (int k = 0; k < bn->n_buffers; k++)
        if (!strcmp(bn->buffers[k].name, "running_mean")) rm = &bn->buffers[k];
    bool zero = true;
    for (int64_t k = 0; k < n; k++) zero = zero && b[k] == 0;
    if (zero) return GLIA_OK;
    if (!rm || glia_shape_numel(&rm->shape) != n)
        return glia_error(m->ctx, GLIA_EFORMAT, "%s: tensor '%s': glia dropped this bias before [%s] (graph "
                          "drop_bias_before_norm = on) and cannot fold a non-zero one into it; load with the pass off",
                          path, name, bn->name);
    float *v = malloc(sizeof *v * (size_t)n);
    if (!v) return GLIA_ENOMEM;
    glia_status st = glia_tensor_to_host(rm->value, v, sizeof *v * (size_t)n);
    for (int64_t k = 0; k < n && !st; k++) v[k] -= b[k];
    if (!st) st = glia_tensor_from_host(rm->value, v, sizeof *v * (size_t)n);
    free(v);
    return st;
}

glia_status glia_model_load_safetensors(struct glia_model *m, const char *path)
{
    if (!m || !path) return GLIA_EINVAL;
    struct st_file f = {0};
    FILE *fh = NULL;
    int64_t data_at = 0;
    glia_status st = st_open(m->ctx, path, &fh, &f, &data_at);
    if (st) return st;
    struct st_tensor *t = NULL;
    int n = 0;
    if ((st = model_tensors(m, &t, &n))) st = glia_error(m->ctx, st, "%s: out of memory", path);
    int64_t most = 1;
    for (int i = 0; i < f.n; i++)
        if (numel(f.e[i].dim, f.e[i].nd) > most) most = numel(f.e[i].dim, f.e[i].nd);
    float *v = st ? NULL : malloc(sizeof *v * (size_t)most);
    unsigned char *raw = st ? NULL : malloc((size_t)most * 8);
    if (!st && (!v || !raw)) st = glia_error(m->ctx, GLIA_ENOMEM, "%s: out of memory", path);
    char a[96], b[96];
    /* every tensor of the model is in the file, of its shape; what the file has beyond them is refused */
    for (int i = 0; i < n && !st; i++) {
        struct st_entry *e = find(&f, t[i].name);
        if (!e && (t[i].kind == ST_DROPPED_BIAS || t[i].kind == ST_BATCHES)) continue;  /* PyTorch has them, not glia */
        if (!e) {
            shape_text(t[i].shape.dim, t[i].shape.ndim, a, sizeof a);
            st = glia_error(m->ctx, GLIA_EFORMAT, "%s: no tensor '%s' (the model's [%s] has %s %s)", path, t[i].name,
                            m->graph.nodes[t[i].node].layer.name, t[i].kind == ST_BUFFER ? "a buffer of" : "a parameter of",
                            a);
            break;
        }
        e->used = true;
        if (t[i].kind == ST_BATCHES) {  /* PyTorch's count of the statistics' batches: glia keeps none */
            if (e->dtype != GLIA_I64 || e->nd != 0)
                st = glia_error(m->ctx, GLIA_EFORMAT, "%s: tensor '%s' should be an I64 scalar", path, e->name);
            continue;
        }
        if (e->dtype == GLIA_I64 || e->nd != t[i].shape.ndim || memcmp(e->dim, t[i].shape.dim, sizeof *e->dim * (size_t)e->nd)) {
            shape_text(e->dim, e->nd, a, sizeof a);
            shape_text(t[i].shape.dim, t[i].shape.ndim, b, sizeof b);
            st = glia_error(m->ctx, GLIA_EFORMAT, "%s: tensor '%s' is %s %s; the model's is %s", path, e->name,
                            dtype_text(e->dtype), a, b);
            break;
        }
        if (t[i].kind == ST_DROPPED_BIAS) continue;  /* folded below, once the running means are in */
        if ((st = read_values(m->ctx, path, fh, data_at, e, v, raw))) break;
        st = glia_tensor_from_host(t[i].p->value, v, sizeof *v * (size_t)glia_shape_numel(&t[i].shape));
    }
    for (int i = 0; i < n && !st; i++) {
        struct st_entry *e = t[i].kind == ST_DROPPED_BIAS ? find(&f, t[i].name) : NULL;
        if (e && !(st = read_values(m->ctx, path, fh, data_at, e, v, raw)))
            st = fold_bias(m, path, t[i].node, v, glia_shape_numel(&t[i].shape), e->name);
    }
    /* a tied parameter's own name may be there too (PyTorch's state_dict lists both): it must be its owner's values */
    for (int i = 0; i < m->graph.n_nodes && !st; i++) {
        struct glia__node *nd = &m->graph.nodes[i];
        if (!nd->tie) continue;
        char name[160];
        snprintf(name, sizeof name, "%s.%s", nd->layer.name, nd->layer.params[nd->tie - 1].name);
        struct st_entry *e = find(&f, name);
        if (!e) continue;
        const struct glia_layer *o = &m->graph.nodes[nd->tie_node].layer;
        char owner[160];
        snprintf(owner, sizeof owner, "%s.%s", o->name, o->params[nd->tie_param].name);
        struct st_entry *w = find(&f, owner);
        int64_t k = numel(e->dim, e->nd);
        e->used = true;
        bool same = w && w->nd == e->nd && !memcmp(w->dim, e->dim, sizeof *e->dim * (size_t)e->nd);
        float *wv = same ? malloc(sizeof *wv * (size_t)k) : NULL;
        if (same && !wv) st = GLIA_ENOMEM;
        if (same && !st) st = read_values(m->ctx, path, fh, data_at, w, wv, raw);
        if (same && !st) st = read_values(m->ctx, path, fh, data_at, e, v, raw);
        for (int64_t q = 0; same && !st && q < k; q++) same = v[q] == wv[q];
        free(wv);
        if (!st && !same)
            st = glia_error(m->ctx, GLIA_EFORMAT, "%s: tensor '%s' differs from '%s', to which [%s] tie_weight ties it",
                            path, name, owner, nd->layer.name);
    }
    for (int i = 0; i < f.n && !st; i++)
        if (!f.e[i].used)
            st = glia_error(m->ctx, GLIA_EFORMAT, "%s: tensor '%s' is not in the model (its tensors are named "
                            "<layer>.<parameter>, as `glia export` writes them)", path, f.e[i].name);
    if (!st) glia__dp_weights_changed(m);
    free(v);
    free(raw);
    free(t);
    st_free(&f);
    fclose(fh);
    return st;
}
