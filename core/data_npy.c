/* core/data_npy.c — [data] format = npy: images and labels as NumPy .npy files (format 1.0 to 3.0), uint8 or float32
 * images N x H x W, N x C x H x W or N x H x W x C (layout), C order, labels uint8/int32/int64 of N; every header field
 * checked, one line naming the file for what does not fit. Not other element types and not .npz archives. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parts.h"

/* A .npy file's header: element type, order and shape. */
struct npy {
    char descr[8];    /* "|u1", "<i4", "<i8", "<f4", ... */
    bool fortran;
    int nd;
    int64_t dim[8];
    long data_at;     /* the data's first byte */
    int64_t size;     /* the file's bytes */
};

/* The value of 'key': in the header's dict text h, as the text after the colon (NULL when absent). */
static const char *dict_value(const char *h, const char *key)
{
    char k[32];
    snprintf(k, sizeof k, "'%s'", key);
    const char *p = strstr(h, k);
    if (!p) return NULL;
    p += strlen(k);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

/* Reads path's header into *a. */
static glia_status npy_header(struct glia_context *ctx, const char *path, FILE *f, struct npy *a)
{
    unsigned char pre[12];
    memset(a, 0, sizeof *a);
    if (fseek(f, 0, SEEK_END) == 0) a->size = ftell(f);
    rewind(f);
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6))
        return glia_error(ctx, GLIA_EFORMAT, "%s: not a .npy file (no \\x93NUMPY magic)", path);
    int major = pre[6];
    uint32_t hl = pre[8] | (uint32_t)pre[9] << 8;
    long at = 10;
    if (major >= 2) {  /* versions 2 and 3: a 4-byte header length */
        if (fread(pre + 10, 1, 2, f) != 2) return glia_error(ctx, GLIA_EFORMAT, "%s: a .npy header cut short", path);
        hl |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
        at = 12;
    }
    if (major < 1 || major > 3 || hl > 1u << 20 || at + (int64_t)hl > a->size)
        return glia_error(ctx, GLIA_EFORMAT, "%s: a .npy header of version %d.%d and %u bytes in a file of %lld", path,
                          major, pre[7], (unsigned)hl, (long long)a->size);
    char *h = malloc(hl + 1);
    if (!h) return GLIA_ENOMEM;
    if (fread(h, 1, hl, f) != hl) {
        free(h);
        return glia_error(ctx, GLIA_EIO, "cannot read %s: %s", path, strerror(errno));
    }
    h[hl] = 0;
    glia_status st = GLIA_OK;
    const char *d = dict_value(h, "descr"), *fo = dict_value(h, "fortran_order"), *sh = dict_value(h, "shape");
    if (!d || !fo || !sh || *d != '\'' || *sh != '(')
        st = glia_error(ctx, GLIA_EFORMAT, "%s: its header is not a .npy dict with 'descr', 'fortran_order' and 'shape'",
                        path);
    if (!st) {
        size_t n = strcspn(d + 1, "'");
        if (n >= sizeof a->descr) st = glia_error(ctx, GLIA_EFORMAT, "%s: element type %.20s is not one glia reads", path, d);
        else memcpy(a->descr, d + 1, n), a->descr[n] = 0;
    }
    if (!st) a->fortran = !strncmp(fo, "True", 4);
    for (const char *p = st ? "" : sh + 1; *p && *p != ')';) {  /* (n, h, w) or (n,) */
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || a->nd == 8) {
            st = glia_error(ctx, GLIA_EFORMAT, "%s: its shape %.40s is not a tuple of sizes", path, sh);
            break;
        }
        a->dim[a->nd++] = v;
        p = end;
    }
    int64_t total = 1;  /* sizes any array glia could hold: no product overflows */
    for (int i = 0; i < a->nd && !st; i++)
        if (a->dim[i] > ((int64_t)1 << 45) || (a->dim[i] && total > ((int64_t)1 << 45) / a->dim[i]))
            st = glia_error(ctx, GLIA_EFORMAT, "%s: its shape %.40s holds more than 2^45 elements", path, sh);
        else
            total *= a->dim[i];
    free(h);
    a->data_at = at + (long)hl;
    return st;
}

static int64_t npy_numel(const struct npy *a)
{
    int64_t n = 1;
    for (int i = 0; i < a->nd; i++) n *= a->dim[i];
    return n;
}

/* The data of a (es bytes an element) into a new buffer; the file must hold exactly that. */
static glia_status npy_data(struct glia_context *ctx, const char *path, FILE *f, const struct npy *a, size_t es,
                            void **out)
{
    int64_t n = npy_numel(a), want = a->data_at + n * (int64_t)es;
    if (want != a->size)
        return glia_error(ctx, GLIA_EFORMAT, "%s: shape and type need %lld bytes of data; the file holds %lld (%s)",
                          path, (long long)(n * (int64_t)es), (long long)(a->size - a->data_at),
                          want > a->size ? "cut short?" : "bytes after the array");
    void *b = malloc((size_t)(n > 0 ? n : 1) * es);
    if (!b) return glia_error(ctx, GLIA_ENOMEM, "%s: out of memory for %lld elements", path, (long long)n);
    if (fseek(f, a->data_at, SEEK_SET) || fread(b, es, (size_t)n, f) != (size_t)n) {
        free(b);
        return glia_error(ctx, GLIA_EIO, "cannot read %s: %s", path, strerror(errno));
    }
    *out = b;
    return GLIA_OK;
}

/* The images of path into d (first `keep` samples, all when keep <= 0): uint8, (n, h, w), (n, c, h, w) or, with
 * nhwc, (n, h, w, c), stored (n, c, h, w). */
static glia_status npy_images(struct glia_context *ctx, const char *path, bool nhwc, int64_t keep,
                              struct glia__dataset *d)
{
    FILE *f = fopen(path, "rb");
    if (!f) return glia_error(ctx, GLIA_EIO, "cannot open %s: %s", path, strerror(errno));
    struct npy a;
    glia_status st = npy_header(ctx, path, f, &a);
    bool f32 = !strcmp(a.descr, "<f4");
    if (!st && !f32 && strcmp(a.descr, "|u1") && strcmp(a.descr, "<u1"))
        st = glia_error(ctx, GLIA_EFORMAT, "%s: images of type '%s'; glia reads uint8 ('|u1') or float32 ('<f4') "
                        "images: save x.astype(np.float32)", path, a.descr);
    if (!st && a.fortran)
        st = glia_error(ctx, GLIA_EFORMAT, "%s: fortran_order is True; save np.ascontiguousarray(x) (C order)", path);
    if (!st && (a.nd < 3 || a.nd > 4 || (a.nd == 3 && nhwc)))
        st = glia_error(ctx, GLIA_EFORMAT, "%s: images of %d dimensions; glia reads N x H x W, N x C x H x W or (layout "
                        "= nhwc) N x H x W x C", path, a.nd);
    int64_t c = a.nd == 3 ? 1 : nhwc ? a.dim[3] : a.dim[1], h = a.dim[a.nd == 3 ? 1 : nhwc ? 1 : 2],
            w = a.dim[a.nd == 3 ? 2 : nhwc ? 2 : 3];
    if (!st && (a.dim[0] < 1 || c < 1 || c > GLIA__MAX_CHANNELS || h < 1 || w < 1 || h > 65536 || w > 65536))
        st = glia_error(ctx, GLIA_EFORMAT, "%s: %lld images of %lld channels of %lldx%lld: not a data set glia reads (1 "
                        "to %d channels)", path, (long long)a.dim[0], (long long)c, (long long)h, (long long)w,
                        GLIA__MAX_CHANNELS);
    void *raw = NULL;
    size_t es = f32 ? 4 : 1;
    if (!st) st = npy_data(ctx, path, f, &a, es, &raw);
    fclose(f);
    if (st) return st;
    int64_t n = keep > 0 && keep < a.dim[0] ? keep : a.dim[0], px = h * w;
    for (int64_t i = 0; f32 && i < n * c * px; i++)
        if (!isfinite(((const float *)raw)[i])) {
            double v = ((const float *)raw)[i];
            free(raw);
            return glia_error(ctx, GLIA_EFORMAT, "%s: element %lld is %g: images must be finite", path, (long long)i, v);
        }
    d->n = n;
    d->channels = (int)c;
    d->rows = (int)h;
    d->cols = (int)w;
    void *img = raw;  /* (n, c, h, w) as it is; the samples after keep stay unused */
    if (nhwc) {
        if (!(img = malloc((size_t)(n * c * px) * es))) {
            free(raw);
            return glia_error(ctx, GLIA_ENOMEM, "%s: out of memory", path);
        }
        for (int64_t i = 0; i < n; i++)  /* (h, w, c) -> (c, h, w) */
            for (int64_t p = 0; p < px; p++)
                for (int64_t k = 0; k < c; k++)
                    memcpy((char *)img + ((i * c + k) * px + p) * (int64_t)es,
                           (const char *)raw + ((i * px + p) * c + k) * (int64_t)es, es);
        free(raw);
    }
    if (f32) d->fimages = img;
    else d->images = img;
    return GLIA_OK;
}

/* The labels of path into d: 1-D, uint8, int32 or int64, at least d->n of them, each in 0 .. 65535. */
static glia_status npy_labels(struct glia_context *ctx, const char *path, struct glia__dataset *d)
{
    FILE *f = fopen(path, "rb");
    if (!f) return glia_error(ctx, GLIA_EIO, "cannot open %s: %s", path, strerror(errno));
    struct npy a;
    glia_status st = npy_header(ctx, path, f, &a);
    size_t es = !strcmp(a.descr, "|u1") || !strcmp(a.descr, "<u1") ? 1 : !strcmp(a.descr, "<i4") ? 4
              : !strcmp(a.descr, "<i8") ? 8 : 0;
    if (!st && !es)
        st = glia_error(ctx, GLIA_EFORMAT, "%s: labels of type '%s'; glia reads uint8, int32 or int64 class indices",
                        path, a.descr);
    if (!st && (a.nd != 1 || a.fortran))
        st = glia_error(ctx, GLIA_EFORMAT, "%s: labels must be one dimension of N class indices, got %d dimensions", path,
                        a.nd);
    if (!st && a.dim[0] < d->n)
        st = glia_error(ctx, GLIA_EFORMAT, "%s: %lld labels for %lld images", path, (long long)a.dim[0], (long long)d->n);
    void *raw = NULL;
    if (!st) st = npy_data(ctx, path, f, &a, es, &raw);
    fclose(f);
    if (!st && !(d->labels = malloc(sizeof *d->labels * (size_t)(d->n > 0 ? d->n : 1))))
        st = glia_error(ctx, GLIA_ENOMEM, "%s: out of memory", path);
    int64_t most = -1;
    for (int64_t i = 0; i < d->n && !st; i++) {
        int64_t v = es == 1 ? ((const uint8_t *)raw)[i] : es == 4 ? ((const int32_t *)raw)[i] : ((const int64_t *)raw)[i];
        if (v < 0 || v > 65535) {
            st = glia_error(ctx, GLIA_EFORMAT, "%s: label %lld at index %lld is out of range 0..65535", path,
                            (long long)v, (long long)i);
            break;
        }
        d->labels[i] = (int32_t)v;
        if (v > most) {
            most = v;
            free(d->classes_why);
            char why[600];
            snprintf(why, sizeof why, "label %lld at index %lld of %s", (long long)v, (long long)i, path);
            d->classes_why = glia__strdup(why);
        }
    }
    free(raw);
    d->n_classes = (int)(most + 1);
    return st;
}

glia_status glia__npy_load(struct glia_context *ctx, const char *images, const char *labels, bool nhwc, int64_t keep,
                           struct glia__dataset *out)
{
    memset(out, 0, sizeof *out);
    glia_status st = npy_images(ctx, images, nhwc, keep, out);
    if (!st) st = npy_labels(ctx, labels, out);
    if (st) glia__dataset_free(out);
    return st;
}
