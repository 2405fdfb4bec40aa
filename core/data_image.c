/* core/data_image.c — the IDX (MNIST, Fashion-MNIST) and CIFAR readers, raw or gzip, and batch gathering.
 * Not a data pipeline: u8 images and labels, loaded whole into memory. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAX_PIXELS ((uint64_t)1 << 24)       /* rows * cols */
#define IDX_MAX_SAMPLES ((uint64_t)1 << 31)
#define IDX_FIRST_ALLOC ((int64_t)1 << 20)       /* the data buffer grows from here */
#define CIFAR_PIXELS (3 * 32 * 32)                /* a record's planar RGB image */

/* One open IDX file. */
struct idx_file {
    struct glia_context *ctx;
    const char *path;
    const char *kind;         /* "image" or "label", for messages */
    struct glia__zfile *zf;
    uint32_t dims[3];
    int ndim;
};

/* ---- reading ---------------------------------------------------------------------------- */

/* Reads up to want bytes into buf; *got < want only at the end of the data. */
static glia_status idx_read(struct idx_file *f, uint8_t *buf, int64_t want, int64_t *got)
{
    size_t n = 0;
    glia_status st = glia__zfile_read(f->zf, buf, (size_t)want, &n);
    *got = (int64_t)n;
    return st;
}

/* Reads and drops up to want bytes; *got says how many there were. */
static glia_status idx_skip(struct idx_file *f, int64_t want, int64_t *got)
{
    uint8_t buf[1 << 16];
    *got = 0;
    while (*got < want) {
        int64_t ask = want - *got < (int64_t)sizeof buf ? want - *got : (int64_t)sizeof buf;
        int64_t n;
        glia_status st = idx_read(f, buf, ask, &n);
        if (st != GLIA_OK) return st;
        *got += n;
        if (n < ask) break;
    }
    return GLIA_OK;
}

/* Reads up to want bytes into a new buffer that grows as data arrives, so that a corrupt
 * header claiming a huge size gives "truncated" rather than a huge allocation. */
static glia_status idx_read_alloc(struct idx_file *f, int64_t want, const char *what,
                                  uint8_t **out, int64_t *got)
{
    uint8_t *buf = NULL;
    int64_t cap = 0;
    *out = NULL;
    *got = 0;
    while (*got < want) {
        if (*got == cap) {
            int64_t next = cap < IDX_FIRST_ALLOC ? IDX_FIRST_ALLOC : cap * 2;
            if (next > want) next = want;
            uint8_t *p = (uint64_t)next > SIZE_MAX ? NULL : realloc(buf, (size_t)next);
            if (!p) {
                free(buf);
                return glia_error(f->ctx, GLIA_ENOMEM, "%s: cannot allocate %lld bytes of %s",
                                  f->path, (long long)next, what);
            }
            buf = p;
            cap = next;
        }
        int64_t n;
        glia_status st = idx_read(f, buf + *got, cap - *got, &n);
        if (st != GLIA_OK) {
            free(buf);
            return st;
        }
        *got += n;
        if (*got < cap) break;
    }
    *out = buf;
    return GLIA_OK;
}

/* ---- files and headers ------------------------------------------------------------------ */

static glia_status idx_open(struct glia_context *ctx, const char *path, const char *kind,
                            struct idx_file *f)
{
    memset(f, 0, sizeof *f);
    f->ctx = ctx;
    f->path = path;
    f->kind = kind;
    return glia__zfile_open(ctx, path, &f->zf);
}

static void idx_close(struct idx_file *f)
{
    glia__zfile_close(f->zf);
    f->zf = NULL;
}

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* Reads the magic number and checks it is the one of this kind of file. */
static glia_status idx_magic(struct idx_file *f, uint32_t expected)
{
    uint8_t b[4];
    int64_t got;
    glia_status st = idx_read(f, b, 4, &got);
    if (st != GLIA_OK) return st;
    if (got == 0)
        return glia_error(f->ctx, GLIA_EFORMAT, "%s: empty file (expected an IDX %s file)",
                          f->path, f->kind);
    if (got < 4)
        return glia_error(f->ctx, GLIA_EFORMAT,
                          "%s: truncated IDX header: expected 4 bytes of magic number, got %lld",
                          f->path, (long long)got);
    uint32_t magic = be32(b);
    if (magic == expected) return GLIA_OK;
    const char *hint = "";
    if (magic == IDX_MAGIC_IMAGES) hint = "; it looks like an image file";
    if (magic == IDX_MAGIC_LABELS) hint = "; it looks like a label file";
    return glia_error(f->ctx, GLIA_EFORMAT, "%s: not an IDX %s file (magic 0x%08x, expected 0x%08x%s)",
                      f->path, f->kind, magic, expected, hint);
}

/* Reads the ndim sizes after the magic number and checks none is zero. */
static glia_status idx_dims(struct idx_file *f, int ndim)
{
    uint8_t b[12];
    int64_t got;
    glia_status st = idx_read(f, b, 4 * ndim, &got);
    if (st != GLIA_OK) return st;
    if (got < 4 * ndim)
        return glia_error(f->ctx, GLIA_EFORMAT,
                          "%s: truncated IDX header: expected %d bytes of sizes, got %lld", f->path,
                          4 * ndim, (long long)got);
    f->ndim = ndim;
    for (int i = 0; i < ndim; i++) f->dims[i] = be32(b + 4 * i);
    for (int i = 0; i < ndim; i++) {
        if (f->dims[i] != 0) continue;
        if (ndim == 3)
            return glia_error(f->ctx, GLIA_EFORMAT,
                              "%s: IDX header has a zero size (%u images of %u x %u)", f->path,
                              f->dims[0], f->dims[1], f->dims[2]);
        return glia_error(f->ctx, GLIA_EFORMAT, "%s: IDX header has a zero size (%u labels)",
                          f->path, f->dims[0]);
    }
    return GLIA_OK;
}

/* Checks the sizes are ones a real data set could have. */
static glia_status idx_plausible(const struct idx_file *f)
{
    if (f->dims[0] > IDX_MAX_SAMPLES)
        return glia_error(f->ctx, GLIA_EFORMAT,
                          "%s: IDX header claims %u %ss, more than %llu: the file is corrupt",
                          f->path, f->dims[0], f->kind, (unsigned long long)IDX_MAX_SAMPLES);
    if (f->ndim == 3 && (uint64_t)f->dims[1] * f->dims[2] > IDX_MAX_PIXELS)
        return glia_error(f->ctx, GLIA_EFORMAT,
                          "%s: IDX header claims %u x %u images, more than %llu pixels each: "
                          "the file is corrupt",
                          f->path, f->dims[1], f->dims[2], (unsigned long long)IDX_MAX_PIXELS);
    return GLIA_OK;
}

static glia_status idx_open_header(struct glia_context *ctx, const char *path, bool images,
                                   struct idx_file *f)
{
    glia_status st = idx_open(ctx, path, images ? "image" : "label", f);
    if (st == GLIA_OK) st = idx_magic(f, images ? IDX_MAGIC_IMAGES : IDX_MAGIC_LABELS);
    if (st == GLIA_OK) st = idx_dims(f, images ? 3 : 1);
    if (st == GLIA_OK) st = idx_plausible(f);
    return st;
}

/* ---- data ------------------------------------------------------------------------------- */

/* Reads the first keep of the file's samples (of sample bytes each) into *out, then reads the
 * rest to check the file holds exactly what its header says (and, for gzip, its checksum). */
static glia_status idx_data(struct idx_file *f, int64_t keep, int64_t sample, const char *what,
                            uint8_t **out)
{
    int64_t total = (int64_t)f->dims[0] * sample, got, rest, extra;
    glia_status st = idx_read_alloc(f, keep * sample, what, out, &got);
    if (st == GLIA_OK && got == keep * sample) st = idx_skip(f, total - got, &rest);
    else rest = 0;
    if (st == GLIA_OK && got + rest < total)
        st = glia_error(f->ctx, GLIA_EFORMAT, "%s: truncated: expected %lld bytes of %s, got %lld",
                        f->path, (long long)total, what, (long long)(got + rest));
    if (st == GLIA_OK) st = idx_skip(f, INT64_MAX, &extra);
    if (st == GLIA_OK && extra > 0)
        st = glia_error(f->ctx, GLIA_EFORMAT,
                        "%s: %lld byte%s of trailing data after the %u %ss its header announces",
                        f->path, (long long)extra, extra == 1 ? "" : "s", f->dims[0], f->kind);
    if (st != GLIA_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

/* Widens the kept labels to int32 and sets n_classes; 255 is refused (it would make 256). */
static glia_status idx_labels(const struct idx_file *f, const uint8_t *raw,
                              struct glia__dataset *d)
{
    d->labels = malloc((size_t)d->n * sizeof *d->labels);
    if (!d->labels)
        return glia_error(f->ctx, GLIA_ENOMEM, "%s: cannot allocate %lld labels", f->path,
                          (long long)d->n);
    int max = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < d->n; i++) {
        if (raw[i] == 255)
            return glia_error(f->ctx, GLIA_EFORMAT, "%s: label 255 at index %lld is out of range 0..254", f->path,
                              (long long)i);
        d->labels[i] = raw[i];
        if (raw[i] > max) max = raw[i], at = i;
    }
    d->n_classes = max + 1;
    d->classes_why = glia__printf("label %d at index %lld of %s", max, (long long)at, f->path);
    return GLIA_OK;
}

static glia_status idx_same_count(struct glia_context *ctx, const struct idx_file *im,
                                  const struct idx_file *lb)
{
    if (im->dims[0] == lb->dims[0]) return GLIA_OK;
    return glia_error(ctx, GLIA_EFORMAT, "images (%u) and labels (%u) counts differ: %s vs %s",
                      im->dims[0], lb->dims[0], im->path, lb->path);
}

glia_status glia__idx_load(struct glia_context *ctx, const char *images_path,
                           const char *labels_path, int64_t limit, struct glia__dataset *out)
{
    struct idx_file im, lb;
    uint8_t *raw_labels = NULL;
    memset(out, 0, sizeof *out);
    memset(&lb, 0, sizeof lb);
    glia_status st = idx_open_header(ctx, images_path, true, &im);
    if (st == GLIA_OK) st = idx_open_header(ctx, labels_path, false, &lb);
    if (st == GLIA_OK) st = idx_same_count(ctx, &im, &lb);
    if (st == GLIA_OK) {
        out->n = limit > 0 && limit < (int64_t)im.dims[0] ? limit : (int64_t)im.dims[0];
        out->channels = 1;
        out->rows = (int)im.dims[1];
        out->cols = (int)im.dims[2];
        st = idx_data(&im, out->n, (int64_t)out->rows * out->cols, "pixel data", &out->images);
    }
    if (st == GLIA_OK) st = idx_data(&lb, out->n, 1, "labels", &raw_labels);
    if (st == GLIA_OK) st = idx_labels(&lb, raw_labels, out);
    free(raw_labels);
    idx_close(&im);
    idx_close(&lb);
    if (st != GLIA_OK) glia__dataset_free(out);
    return st;
}

/* ---- CIFAR ------------------------------------------------------------------------------ */

/* A record's label bytes, in order: CIFAR-10's one, CIFAR-100's coarse then fine. */
struct cifar_label {
    int classes;
    const char *name;  /* in messages */
};
static const struct cifar_label cifar10_labels[1] = {{10, ""}}, cifar100_labels[2] = {{20, "coarse "}, {100, "fine "}};

/* Checks the labels of the n records of rec bytes each in buf and appends their images and the
 * labels at byte `keep` of each to d. */
static glia_status cifar_append(struct glia_context *ctx, const char *path, const uint8_t *buf, int64_t n,
                                int rec, int keep, struct glia__dataset *d)
{
    if (n == 0) return GLIA_OK;
    int n_labels = rec - CIFAR_PIXELS;
    const struct cifar_label *lab = n_labels == 1 ? cifar10_labels : cifar100_labels;
    uint8_t *im = realloc(d->images, (size_t)(d->n + n) * CIFAR_PIXELS);
    if (im) d->images = im;
    int32_t *lb = im ? realloc(d->labels, (size_t)(d->n + n) * sizeof *lb) : NULL;
    if (lb) d->labels = lb;
    if (!im || !lb) return glia_error(ctx, GLIA_ENOMEM, "%s: cannot allocate %lld CIFAR images", path, (long long)(d->n + n));
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *r = buf + i * rec;
        for (int k = 0; k < n_labels; k++)
            if (r[k] >= lab[k].classes)
                return glia_error(ctx, GLIA_EFORMAT, "%s: record %lld has %slabel %u, out of range 0..%d", path,
                                  (long long)i, lab[k].name, r[k], lab[k].classes - 1);
        d->labels[d->n + i] = r[keep];
        memcpy(d->images + (d->n + i) * CIFAR_PIXELS, r + n_labels, CIFAR_PIXELS);
    }
    d->n += n;
    return GLIA_OK;
}

/* Reads one batch file whole: keeps its first `keep` records (< 0: all) and checks it is a whole
 * number of records. */
static glia_status cifar_file(struct glia_context *ctx, const char *path, bool cifar100, bool coarse, int64_t keep,
                              struct glia__dataset *d)
{
    const int rec = CIFAR_PIXELS + (cifar100 ? 2 : 1), other = CIFAR_PIXELS + (cifar100 ? 1 : 2);
    struct idx_file f;
    uint8_t *buf = NULL;
    int64_t got = 0, rest = 0;
    glia_status st = idx_open(ctx, path, "CIFAR batch", &f);
    if (!st) st = idx_read_alloc(&f, keep < 0 ? INT64_MAX / 2 : keep * rec, "CIFAR records", &buf, &got);
    if (!st) st = idx_skip(&f, INT64_MAX, &rest);
    int64_t total = got + rest;
    if (!st && total == 0)
        st = glia_error(ctx, GLIA_EFORMAT, "%s: empty file (expected CIFAR-%d records of %d bytes)", path,
                        cifar100 ? 100 : 10, rec);
    if (!st && total % rec)
        st = glia_error(ctx, GLIA_EFORMAT, "%s: %lld bytes are not a whole number of %d-byte CIFAR-%d records "
                        "(the last has %lld bytes)%s", path, (long long)total, rec, cifar100 ? 100 : 10,
                        (long long)(total % rec), total % other ? "" : cifar100 ? "; it looks like CIFAR-10: format = cifar10"
                        : "; it looks like CIFAR-100: format = cifar100");
    if (!st) st = cifar_append(ctx, path, buf, got / rec, rec, cifar100 && !coarse ? 1 : 0, d);
    free(buf);
    idx_close(&f);
    return st;
}

glia_status glia__cifar_load(struct glia_context *ctx, const char *const *paths, int n_paths, bool cifar100,
                             bool coarse, int64_t limit, struct glia__dataset *out)
{
    *out = (struct glia__dataset){.channels = 3, .rows = 32, .cols = 32, .n_classes = !cifar100 ? 10 : coarse ? 20 : 100};
    out->classes_why = glia__printf("CIFAR-%s has %d classes", cifar100 ? coarse ? "100 (coarse labels)" : "100" : "10",
                                    out->n_classes);
    glia_status st = GLIA_OK;
    for (int i = 0; i < n_paths && !st; i++)
        st = cifar_file(ctx, paths[i], cifar100, coarse, limit > 0 ? (out->n < limit ? limit - out->n : 0) : -1, out);
    if (st) glia__dataset_free(out);
    return st;
}

/* ---- batches ---------------------------------------------------------------------------- */

void glia__dataset_gather(const struct glia__dataset *d, const int64_t *idx, int64_t n,
                          const struct glia__norm *nm, float *x, int32_t *y)
{
    float table[GLIA__MAX_CHANNELS][256];    /* every u8 value, normalized once per channel */
    for (int c = 0; c < d->channels; c++)
        for (int v = 0; v < 256; v++) table[c][v] = ((float)v / 255.0f - nm->mean[c]) / nm->std[c];
    const int64_t px = (int64_t)d->rows * d->cols, per = d->channels * px;
    if (d->folder) {  /* decoded as evaluation sees them (a file that cannot be read gives zeros) */
#pragma omp parallel for schedule(dynamic)
        for (int64_t i = 0; i < n; i++) {
            char why[8];
            if (x) glia__folder_sample(d, idx[i], false, false, 0, 0, nm, x + i * per, why, sizeof why);
            if (y) y[i] = d->labels[idx[i]];
        }
        return;
    }
    if (d->fimages) {  /* float images: (x - mean) / std */
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            const float *src = d->fimages + idx[i] * per;
            if (x)
                for (int c = 0; c < d->channels; c++)
                    for (int64_t j = 0; j < px; j++)
                        x[i * per + c * px + j] = (src[c * px + j] - nm->mean[c]) / nm->std[c];
            if (y) y[i] = d->labels[idx[i]];
        }
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *src = d->images + idx[i] * per;
        if (x) {
            float *dst = x + i * per;
            for (int c = 0; c < d->channels; c++)
                for (int64_t j = 0; j < px; j++) dst[c * px + j] = table[c][src[c * px + j]];
        }
        if (y) y[i] = d->labels[idx[i]];
    }
}
