/* tests/test_data.c — tests of the IDX reader (raw and gzip files written here, and the real
 * Fashion-MNIST when installed), batch gathering and seeded shuffling. Not a training test. */
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <zlib.h>
#include "internal.h"
#include "testutil.h"

#define N 5
#define ROWS 3
#define COLS 4
#define PX (ROWS * COLS)

static const int32_t k_labels[N] = {3, 0, 7, 1, 3};

/* The known pixel of image i at j: every value distinct within an image, 0 and 255 seen. */
static uint8_t pixel(int i, int j)
{
    return (uint8_t)(i == 4 ? 255 * (j & 1) : (i * PX + j) * 5);
}

/* ---- writing IDX files ------------------------------------------------------------------ */

struct idx_spec {
    uint32_t magic;
    uint32_t dims[3];
    int ndim;
    const uint8_t *data;
    size_t len;          /* bytes of data written */
    size_t extra;        /* bytes of 0x55 written after it */
};

static size_t idx_bytes(const struct idx_spec *s, uint8_t *buf)
{
    size_t k = 0;
    for (int i = 0; i < 4; i++) buf[k++] = (uint8_t)(s->magic >> (24 - 8 * i));
    for (int d = 0; d < s->ndim; d++)
        for (int i = 0; i < 4; i++) buf[k++] = (uint8_t)(s->dims[d] >> (24 - 8 * i));
    memcpy(buf + k, s->data, s->len);
    k += s->len;
    memset(buf + k, 0x55, s->extra);
    return k + s->extra;
}

/* Writes the file raw, or gzip-compressed when gz. Returns 0 on success. */
static int write_idx(const char *path, int gz, const struct idx_spec *s)
{
    uint8_t *buf = malloc(16 + s->len + s->extra);
    if (!buf) return -1;
    size_t n = idx_bytes(s, buf);
    int rc = -1;
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (f) rc = (gzwrite(f, buf, (unsigned)n) == (int)n) ? 0 : -1;
        if (f && gzclose(f) != Z_OK) rc = -1;
    } else {
        FILE *f = fopen(path, "wb");
        if (f) rc = fwrite(buf, 1, n, f) == n ? 0 : -1;
        if (f && fclose(f) != 0) rc = -1;
    }
    free(buf);
    return rc;
}

static uint8_t g_pixels[N * PX];
static uint8_t g_labels[N];

static void fill_known(void)
{
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < PX; j++) g_pixels[i * PX + j] = pixel(i, j);
        g_labels[i] = (uint8_t)k_labels[i];
    }
}

static struct idx_spec images_spec(void)
{
    fill_known();
    return (struct idx_spec){0x803, {N, ROWS, COLS}, 3, g_pixels, sizeof g_pixels, 0};
}

static struct idx_spec labels_spec(void)
{
    fill_known();
    return (struct idx_spec){0x801, {N, 0, 0}, 1, g_labels, sizeof g_labels, 0};
}

/* Writes the good pair of files under the given names. */
static void write_good(const char *im, const char *lb, int gz)
{
    struct idx_spec a = images_spec(), b = labels_spec();
    CU_ASSERT_EQUAL_FATAL(write_idx(im, gz, &a), 0);
    CU_ASSERT_EQUAL_FATAL(write_idx(lb, gz, &b), 0);
}

static struct glia_context *new_ctx(void)
{
    struct glia_context *ctx = NULL;
    CU_ASSERT_EQUAL_FATAL(glia_context_new(&ctx), GLIA_OK);
    return ctx;
}

/* Asserts a failed load: the status, the file named and each given part of the message,
 * and a dataset left empty. */
static void expect_fail(struct glia_context *ctx, const char *im, const char *lb, int64_t limit,
                        glia_status want, const char *file, const char *part1, const char *part2)
{
    struct glia__dataset d;
    memset(&d, 0x5a, sizeof d);
    glia_status st = glia__idx_load(ctx, im, lb, limit, &d);
    const char *msg = glia_context_error(ctx);
    int ok = st == want && strstr(msg, file) && (!part1 || strstr(msg, part1)) &&
             (!part2 || strstr(msg, part2)) && !strchr(msg, '\n');
    if (!ok) printf("\n    got %s: \"%s\"\n", glia_status_name(st), msg);
    CU_ASSERT_EQUAL(st, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, file));
    if (part1) CU_ASSERT_PTR_NOT_NULL(strstr(msg, part1));
    if (part2) CU_ASSERT_PTR_NOT_NULL(strstr(msg, part2));
    CU_ASSERT_PTR_NULL(strchr(msg, '\n'));
    CU_ASSERT_PTR_NULL(d.images);
    CU_ASSERT_PTR_NULL(d.labels);
    CU_ASSERT_EQUAL(d.n, 0);
    if (st == GLIA_OK) glia__dataset_free(&d);
    glia_context_clear_error(ctx);
}

static void check_known(const struct glia__dataset *d, int64_t n, int n_classes)
{
    CU_ASSERT_EQUAL(d->n, n);
    CU_ASSERT_EQUAL(d->rows, ROWS);
    CU_ASSERT_EQUAL(d->cols, COLS);
    CU_ASSERT_EQUAL(d->n_classes, n_classes);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d->images);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d->labels);
    int bad = 0;
    for (int64_t i = 0; i < d->n; i++) {
        for (int j = 0; j < PX; j++) bad += d->images[i * PX + j] != pixel((int)i, j);
        bad += d->labels[i] != k_labels[i];
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* ---- loading ---------------------------------------------------------------------------- */

static void load_known(int gz)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp(gz ? "d-images.gz" : "d-images");
    const char *lb = glia_test_tmp(gz ? "d-labels.gz" : "d-labels");
    write_good(im, lb, gz);
    struct glia__dataset d;
    CU_ASSERT_EQUAL_FATAL(glia__idx_load(ctx, im, lb, 0, &d), GLIA_OK);
    check_known(&d, N, 8);
    glia__dataset_free(&d);
    CU_ASSERT_PTR_NULL(d.images);
    CU_ASSERT_PTR_NULL(d.labels);
    CU_ASSERT_EQUAL(d.n, 0);
    glia__dataset_free(&d);                  /* twice is harmless */
    glia_context_free(ctx);
}

static void test_load_raw(void) { load_known(0); }
static void test_load_gzip(void) { load_known(1); }

static void test_limit(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("l-images.gz"), *lb = glia_test_tmp("l-labels.gz");
    write_good(im, lb, 1);
    struct glia__dataset d;
    CU_ASSERT_EQUAL_FATAL(glia__idx_load(ctx, im, lb, 2, &d), GLIA_OK);
    check_known(&d, 2, 4);                   /* labels 3, 0 */
    glia__dataset_free(&d);
    CU_ASSERT_EQUAL_FATAL(glia__idx_load(ctx, im, lb, 100, &d), GLIA_OK);
    check_known(&d, N, 8);
    glia__dataset_free(&d);
    CU_ASSERT_EQUAL_FATAL(glia__idx_load(ctx, im, lb, -1, &d), GLIA_OK);
    check_known(&d, N, 8);
    glia__dataset_free(&d);
    glia_context_free(ctx);
}

/* A limit does not hide a broken end of the file. */
static void test_limit_still_validates(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("lv-images"), *lb = glia_test_tmp("lv-labels");
    write_good(im, lb, 0);
    struct idx_spec a = images_spec();
    a.len -= 3;
    CU_ASSERT_EQUAL_FATAL(write_idx(im, 0, &a), 0);
    expect_fail(ctx, im, lb, 1, GLIA_EFORMAT, im, "truncated", "expected 60 bytes of pixel data, got 57");
    glia_context_free(ctx);
}

/* ---- gathering -------------------------------------------------------------------------- */

static void test_gather(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("g-images"), *lb = glia_test_tmp("g-labels");
    write_good(im, lb, 0);
    struct glia__dataset d;
    CU_ASSERT_EQUAL_FATAL(glia__idx_load(ctx, im, lb, 0, &d), GLIA_OK);
    const int64_t idx[3] = {4, 0, 2};
    float x[3 * PX];
    int32_t y[3] = {-1, -1, -1};
    const float mean = 0.25f, std = 0.5f;
    const struct glia__norm nm = {{mean}, {std}};
    glia__dataset_gather(&d, idx, 3, &nm, x, y);
    int bad = 0;
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < PX; j++) {
            float want = ((float)pixel((int)idx[i], j) / 255.0f - mean) / std;
            bad += fabsf(x[i * PX + j] - want) > 1e-6f;
        }
        bad += y[i] != k_labels[idx[i]];
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_DOUBLE_EQUAL(x[0], (0.0 - 0.25) / 0.5, 1e-6);      /* image 4 pixel 0 is 0 */
    CU_ASSERT_DOUBLE_EQUAL(x[1], (1.0 - 0.25) / 0.5, 1e-6);      /* image 4 pixel 1 is 255 */
    glia__dataset_gather(&d, idx, 0, &nm, NULL, NULL);       /* nothing to do */
    glia__dataset_free(&d);
    glia_context_free(ctx);
}

/* Many samples through the parallel loop: every one lands in its own row, every time. */
static void test_gather_parallel(void)
{
    enum { M = 1000, R = 7, C = 5 };
    struct glia__dataset d = {.n = M, .channels = 1, .rows = R, .cols = C, .images = malloc(M * R * C), .labels = malloc(M * sizeof(int32_t)), .n_classes = 10};
    int64_t *idx = malloc(2 * M * sizeof *idx);
    float *x = malloc(2 * M * R * C * sizeof *x), *x2 = malloc(2 * M * R * C * sizeof *x2);
    int32_t *y = malloc(2 * M * sizeof *y);
    CU_ASSERT_FATAL(d.images && d.labels && idx && x && x2 && y);
    for (int i = 0; i < M * R * C; i++) d.images[i] = (uint8_t)(i * 7 + i / 13);
    for (int i = 0; i < M; i++) d.labels[i] = i % 10;
    for (int i = 0; i < 2 * M; i++) idx[i] = (i * 389) % M;
    const struct glia__norm nm = {{0.1307f}, {0.3081f}};
    glia__dataset_gather(&d, idx, 2 * M, &nm, x, y);
    glia__dataset_gather(&d, idx, 2 * M, &nm, x2, NULL);
    int bad = 0;
    for (int i = 0; i < 2 * M; i++) {
        for (int j = 0; j < R * C; j++) {
            float want = ((float)d.images[idx[i] * R * C + j] / 255.0f - 0.1307f) / 0.3081f;
            bad += x[i * R * C + j] != want;
        }
        bad += y[i] != (int32_t)(idx[i] % 10);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(memcmp(x, x2, 2 * M * R * C * sizeof *x), 0);
    free(idx);
    free(x);
    free(x2);
    free(y);
    glia__dataset_free(&d);
}

/* ---- refusals --------------------------------------------------------------------------- */

static void test_missing_file(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("m-images"), *lb = glia_test_tmp("m-labels");
    const char *none = glia_test_tmp("no-such-dir/train-images-idx3-ubyte.gz");
    write_good(im, lb, 0);
    expect_fail(ctx, none, lb, 0, GLIA_EIO, none, "cannot open ", "No such file or directory");
    expect_fail(ctx, im, none, 0, GLIA_EIO, none, "cannot open ", "No such file or directory");
    glia_context_free(ctx);
}

static void test_directory(void)
{
    struct glia_context *ctx = new_ctx();
    const char *dir = glia_test_tmp("d-dir"), *lb = glia_test_tmp("dd-labels");
    const char *im = glia_test_tmp("dd-images");
    mkdir(dir, 0755);
    write_good(im, lb, 0);
    expect_fail(ctx, dir, lb, 0, GLIA_EIO, dir, "cannot read ", "Is a directory");
    glia_context_free(ctx);
}

static void test_wrong_magic(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("w-images.gz"), *lb = glia_test_tmp("w-labels.gz");
    write_good(im, lb, 1);
    expect_fail(ctx, lb, lb, 0, GLIA_EFORMAT, lb, "not an IDX image file",
                "(magic 0x00000801, expected 0x00000803");
    expect_fail(ctx, im, im, 0, GLIA_EFORMAT, im, "not an IDX label file",
                "(magic 0x00000803, expected 0x00000801");
    const char *bad = glia_test_tmp("w-float");
    struct idx_spec a = images_spec();
    a.magic = 0x00000d03;                    /* float pixels */
    CU_ASSERT_EQUAL_FATAL(write_idx(bad, 0, &a), 0);
    expect_fail(ctx, bad, lb, 0, GLIA_EFORMAT, bad, "magic 0x00000d03", NULL);
    CU_ASSERT_EQUAL_FATAL(glia_test_write(bad, "hello, world\n"), 0);
    expect_fail(ctx, bad, lb, 0, GLIA_EFORMAT, bad, "not an IDX image file", "0x68656c6c");
    glia_context_free(ctx);
}

static void test_truncated(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("t-images.gz"), *lb = glia_test_tmp("t-labels.gz");
    write_good(im, lb, 1);
    struct idx_spec a = images_spec();
    a.len = 50;
    CU_ASSERT_EQUAL_FATAL(write_idx(im, 1, &a), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, im, ": truncated: ",
                "expected 60 bytes of pixel data, got 50");
    write_good(im, lb, 1);
    struct idx_spec b = labels_spec();
    b.len = 4;
    CU_ASSERT_EQUAL_FATAL(write_idx(lb, 1, &b), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, lb, "truncated", "expected 5 bytes of labels, got 4");
    /* a header cut inside the sizes, and an empty file */
    FILE *f = fopen(lb, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fwrite("\0\0\x08\x01\0\0", 1, 6, f);
    fclose(f);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, lb, "truncated IDX header", NULL);
    CU_ASSERT_EQUAL_FATAL(glia_test_write(lb, ""), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, lb, "empty file", NULL);
    glia_context_free(ctx);
}

/* Reads a whole file; *n its size. NULL on failure. */
static uint8_t *slurp(const char *path, long *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = ftell(f);
    rewind(f);
    uint8_t *b = malloc((size_t)*n + 1);
    if (b && fread(b, 1, (size_t)*n, f) != (size_t)*n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static int spit(const char *path, const uint8_t *b, long n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int rc = fwrite(b, 1, (size_t)n, f) == (size_t)n ? 0 : -1;
    return fclose(f) || rc ? -1 : 0;
}

/* A gzip file of a larger image set with noisy pixels, so that deflate makes real blocks. */
static void write_big_gzip(const char *im, const char *lb)
{
    enum { M = 64 };
    static uint8_t px[M * 16 * 16], lab[M];
    uint32_t s = 12345;
    for (size_t i = 0; i < sizeof px; i++) {
        s = s * 1103515245u + 12345u;
        px[i] = (uint8_t)((s >> 16) & 0x3f);
    }
    for (int i = 0; i < M; i++) lab[i] = (uint8_t)(i % 10);
    struct idx_spec a = {0x803, {M, 16, 16}, 3, px, sizeof px, 0};
    struct idx_spec b = {0x801, {M, 0, 0}, 1, lab, sizeof lab, 0};
    CU_ASSERT_EQUAL_FATAL(write_idx(im, 1, &a), 0);
    CU_ASSERT_EQUAL_FATAL(write_idx(lb, 0, &b), 0);
}

static void test_corrupt_gzip(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("c-images.gz"), *lb = glia_test_tmp("c-labels");
    write_big_gzip(im, lb);
    struct glia__dataset d;
    CU_ASSERT_EQUAL_FATAL(glia__idx_load(ctx, im, lb, 0, &d), GLIA_OK);
    CU_ASSERT_EQUAL(d.n, 64);
    glia__dataset_free(&d);
    long n = 0;
    uint8_t *good = slurp(im, &n), *b = malloc((size_t)n);
    CU_ASSERT_FATAL(good && b && n > 200);
    /* bytes flipped in the middle of the deflate stream */
    memcpy(b, good, (size_t)n);
    for (long i = n / 2; i < n / 2 + 8; i++) b[i] ^= 0xa5;
    CU_ASSERT_EQUAL_FATAL(spit(im, b, n), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, im, ": corrupt gzip data (", NULL);
    expect_fail(ctx, im, lb, 10, GLIA_EFORMAT, im, ": corrupt gzip data (", NULL);
    /* the stream cut in half */
    CU_ASSERT_EQUAL_FATAL(spit(im, good, n / 2), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, im, ": corrupt gzip data (", "unexpected end of file");
    /* a wrong CRC in the trailer: only reading to the end finds it */
    memcpy(b, good, (size_t)n);
    b[n - 6] ^= 0x01;
    CU_ASSERT_EQUAL_FATAL(spit(im, b, n), 0);
    expect_fail(ctx, im, lb, 1, GLIA_EFORMAT, im, ": corrupt gzip data (", "incorrect data check");
    free(good);
    free(b);
    glia_context_free(ctx);
}

static void test_count_mismatch(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("cm-images"), *lb = glia_test_tmp("cm-labels");
    write_good(im, lb, 0);
    struct idx_spec b = labels_spec();
    b.dims[0] = b.len = 4;
    CU_ASSERT_EQUAL_FATAL(write_idx(lb, 0, &b), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, im, "images (5) and labels (4) counts differ", lb);
    expect_fail(ctx, im, lb, 2, GLIA_EFORMAT, lb, "counts differ", NULL);
    glia_context_free(ctx);
}

static void test_trailing_data(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("td-images.gz"), *lb = glia_test_tmp("td-labels");
    write_good(im, lb, 0);
    struct idx_spec a = images_spec();
    a.extra = 7;
    CU_ASSERT_EQUAL_FATAL(write_idx(im, 1, &a), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, im, ": 7 bytes of trailing data", NULL);
    write_good(im, lb, 0);
    struct idx_spec b = labels_spec();
    b.extra = 1;
    CU_ASSERT_EQUAL_FATAL(write_idx(lb, 0, &b), 0);
    expect_fail(ctx, im, lb, 3, GLIA_EFORMAT, lb, ": 1 byte of trailing data", NULL);
    glia_context_free(ctx);
}

/* The bytes of a gzip file of b[0..n): one member (gzopen's). *len its size; NULL on failure. */
static uint8_t *gzip_member(const uint8_t *b, size_t n, long *len)
{
    const char *tmp = glia_test_tmp("member.gz");
    gzFile f = gzopen(tmp, "wb");
    if (!f) return NULL;
    int ok = gzwrite(f, b, (unsigned)n) == (int)n;
    if (gzclose(f) != Z_OK || !ok) return NULL;
    return slurp(tmp, len);
}

/* gzip files made of several members read as their concatenation (as gzip -d does); bytes after
 * the last member that do not start another are refused, naming the file and how many there are. */
static void test_gzip_members(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("gm-images.gz"), *lb = glia_test_tmp("gm-labels.gz");
    write_good(im, lb, 0);
    long n_im, n_lb;
    uint8_t *raw_im = slurp(im, &n_im), *raw_lb = slurp(lb, &n_lb);
    CU_ASSERT_FATAL(raw_im && raw_lb && n_im > 40);
    /* the image file in three members (the header split in two), the labels in two */
    long cut[4] = {0, 5, n_im / 2, n_im}, k1, k2, k3;
    uint8_t *m1 = gzip_member(raw_im + cut[0], (size_t)(cut[1] - cut[0]), &k1);
    uint8_t *m2 = gzip_member(raw_im + cut[1], (size_t)(cut[2] - cut[1]), &k2);
    uint8_t *m3 = gzip_member(raw_im + cut[2], (size_t)(cut[3] - cut[2]), &k3);
    CU_ASSERT_FATAL(m1 && m2 && m3);
    uint8_t *all = malloc((size_t)(k1 + k2 + k3 + 16));
    CU_ASSERT_FATAL(all != NULL);
    memcpy(all, m1, (size_t)k1), memcpy(all + k1, m2, (size_t)k2), memcpy(all + k1 + k2, m3, (size_t)k3);
    CU_ASSERT_EQUAL_FATAL(spit(im, all, k1 + k2 + k3), 0);
    long l1, l2;
    uint8_t *n1 = gzip_member(raw_lb, 3, &l1), *n2 = gzip_member(raw_lb + 3, (size_t)(n_lb - 3), &l2);
    CU_ASSERT_FATAL(n1 && n2);
    uint8_t *labels = malloc((size_t)(l1 + l2));
    CU_ASSERT_FATAL(labels != NULL);
    memcpy(labels, n1, (size_t)l1), memcpy(labels + l1, n2, (size_t)l2);
    CU_ASSERT_EQUAL_FATAL(spit(lb, labels, l1 + l2), 0);
    struct glia__dataset d;
    CU_ASSERT_EQUAL_FATAL(glia__idx_load(ctx, im, lb, 0, &d), GLIA_OK);
    check_known(&d, N, 8);
    glia__dataset_free(&d);
    /* then bytes that are no gzip member: junk, one byte of the magic, zeros */
    static const struct {
        const char *bytes;
        long n;
        const char *want;
    } tails[] = {
        {"junk!", 5, ": 5 bytes of trailing data after the gzip data (not another gzip member)"},
        {"\x1f", 1, ": 1 byte of trailing data after the gzip data"},
        {"\0\0\0\0", 4, ": 4 bytes of trailing data after the gzip data"},
        {"\x1f\x8b\x08junk", 7, ": corrupt gzip data ("},  /* starts like a member: read as one */
    };
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        memcpy(all + k1 + k2 + k3, tails[i].bytes, (size_t)tails[i].n);
        CU_ASSERT_EQUAL_FATAL(spit(im, all, k1 + k2 + k3 + tails[i].n), 0);
        expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, im, tails[i].want, NULL);
    }
    /* a single member with junk after it, and after the labels (read whole even with a limit) */
    CU_ASSERT_EQUAL_FATAL(spit(im, m3, k3), 0);
    write_good(im, lb, 1);
    long g;
    uint8_t *good = slurp(lb, &g), *bad = malloc((size_t)g + 3);
    CU_ASSERT_FATAL(good && bad);
    memcpy(bad, good, (size_t)g), memcpy(bad + g, "\n\n\n", 3);
    CU_ASSERT_EQUAL_FATAL(spit(lb, bad, g + 3), 0);
    expect_fail(ctx, im, lb, 2, GLIA_EFORMAT, lb, ": 3 bytes of trailing data after the gzip data", NULL);
    free(good), free(bad), free(all), free(labels);
    free(m1), free(m2), free(m3), free(n1), free(n2), free(raw_im), free(raw_lb);
    glia_context_free(ctx);
}

static void test_zero_dims(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("z-images"), *lb = glia_test_tmp("z-labels");
    write_good(im, lb, 0);
    for (int k = 0; k < 3; k++) {
        struct idx_spec a = images_spec();
        a.dims[k] = 0;
        a.len = 0;
        CU_ASSERT_EQUAL_FATAL(write_idx(im, 0, &a), 0);
        expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, im, "zero size", NULL);
    }
    write_good(im, lb, 0);
    struct idx_spec b = labels_spec();
    b.dims[0] = 0;
    b.len = 0;
    CU_ASSERT_EQUAL_FATAL(write_idx(lb, 0, &b), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, lb, "zero size", NULL);
    glia_context_free(ctx);
}

static void test_absurd_sizes(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("a-images"), *lb = glia_test_tmp("a-labels");
    write_good(im, lb, 0);
    struct idx_spec a = images_spec();
    a.dims[1] = a.dims[2] = 4097;            /* just over 1 << 24 pixels */
    CU_ASSERT_EQUAL_FATAL(write_idx(im, 0, &a), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, im, "4097 x 4097 images", "corrupt");
    a = images_spec();
    a.dims[0] = 0x80000001u;
    CU_ASSERT_EQUAL_FATAL(write_idx(im, 0, &a), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, im, "2147483649 images", "corrupt");
    /* large but allowed sizes in a small file: truncated, without a huge allocation */
    a = images_spec();
    a.dims[0] = 1u << 31;
    a.dims[1] = a.dims[2] = 4096;
    CU_ASSERT_EQUAL_FATAL(write_idx(im, 0, &a), 0);
    struct idx_spec b = labels_spec();
    b.dims[0] = 1u << 31;
    CU_ASSERT_EQUAL_FATAL(write_idx(lb, 0, &b), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, im, "truncated", "got 60");
    glia_context_free(ctx);
}

static void test_label_range(void)
{
    struct glia_context *ctx = new_ctx();
    const char *im = glia_test_tmp("r-images"), *lb = glia_test_tmp("r-labels");
    write_good(im, lb, 0);
    struct idx_spec b = labels_spec();
    g_labels[2] = 255;
    CU_ASSERT_EQUAL_FATAL(write_idx(lb, 0, &b), 0);
    expect_fail(ctx, im, lb, 0, GLIA_EFORMAT, lb, ": label 255 at index 2 is out of range 0..254", NULL);
    struct glia__dataset d;                 /* the bad label lies past the limit */
    CU_ASSERT_EQUAL_FATAL(glia__idx_load(ctx, im, lb, 2, &d), GLIA_OK);
    CU_ASSERT_EQUAL(d.n_classes, 4);
    glia__dataset_free(&d);
    g_labels[2] = 254;
    CU_ASSERT_EQUAL_FATAL(write_idx(lb, 0, &b), 0);
    CU_ASSERT_EQUAL_FATAL(glia__idx_load(ctx, im, lb, 0, &d), GLIA_OK);
    CU_ASSERT_EQUAL(d.n_classes, 255);
    CU_ASSERT_EQUAL(d.labels[2], 254);
    char want[600];  /* where the class count comes from, for the model's messages */
    snprintf(want, sizeof want, "label 254 at index 2 of %s", lb);
    CU_ASSERT(d.classes_why && !strcmp(d.classes_why, want));
    glia__dataset_free(&d);
    glia_context_free(ctx);
}

/* ---- shuffling -------------------------------------------------------------------------- */

static int is_permutation(const int64_t *p, int64_t n)
{
    char *seen = calloc((size_t)n, 1);
    int ok = seen != NULL;
    for (int64_t i = 0; ok && i < n; i++) {
        ok = p[i] >= 0 && p[i] < n && !seen[p[i]];
        if (ok) seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_permutation(void)
{
    enum { M = 1000 };
    int64_t *a = malloc(M * sizeof *a), *b = malloc(M * sizeof *b), *c = malloc(M * sizeof *c);
    CU_ASSERT_FATAL(a && b && c);
    glia__permutation(a, M, 42);
    glia__permutation(b, M, 42);
    glia__permutation(c, M, 43);
    CU_ASSERT(is_permutation(a, M));
    CU_ASSERT(is_permutation(c, M));
    CU_ASSERT_EQUAL(memcmp(a, b, M * sizeof *a), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, c, M * sizeof *a), 0);
    int fixed = 0;                           /* a shuffle, not the identity */
    for (int i = 0; i < M; i++) fixed += a[i] == i;
    CU_ASSERT(fixed < M / 10);
    glia__permutation(a, 1, 7);
    CU_ASSERT_EQUAL(a[0], 0);
    free(a);
    free(b);
    free(c);
}

/* ---- the real data set ------------------------------------------------------------------ */

#define FMNIST "/usr/share/datasets/fashion-mnist/"

static void check_fmnist(struct glia_context *ctx, const char *set, int64_t n)
{
    char im[256], lb[256];
    snprintf(im, sizeof im, FMNIST "%s-images-idx3-ubyte.gz", set);
    snprintf(lb, sizeof lb, FMNIST "%s-labels-idx1-ubyte.gz", set);
    struct glia__dataset d;
    glia_status st = glia__idx_load(ctx, im, lb, 0, &d);
    if (st != GLIA_OK) printf("\n    %s\n", glia_context_error(ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    CU_ASSERT_EQUAL(d.n, n);
    CU_ASSERT_EQUAL(d.rows, 28);
    CU_ASSERT_EQUAL(d.cols, 28);
    CU_ASSERT_EQUAL(d.n_classes, 10);
    int64_t count[10] = {0};
    for (int64_t i = 0; i < d.n; i++)
        if (d.labels[i] >= 0 && d.labels[i] < 10) count[d.labels[i]]++;
    for (int c = 0; c < 10; c++) CU_ASSERT_EQUAL(count[c], n / 10);
    uint64_t sum = 0;                        /* pixels are not all zero */
    for (int64_t i = 0; i < d.n * 28 * 28; i++) sum += d.images[i];
    CU_ASSERT(sum > (uint64_t)d.n * 28 * 28 * 30);
    glia__dataset_free(&d);
}

static void test_fashion_mnist(void)
{
    struct stat sb;
    if (stat(FMNIST "train-images-idx3-ubyte.gz", &sb) != 0) {
        printf("(skipped: " FMNIST " absent; Debian: apt-get install dataset-fashion-mnist) ");
        CU_PASS("Fashion-MNIST not installed");
        return;
    }
    struct glia_context *ctx = new_ctx();
    check_fmnist(ctx, "train", 60000);
    check_fmnist(ctx, "t10k", 10000);
    struct glia__dataset d;
    CU_ASSERT_EQUAL_FATAL(glia__idx_load(ctx, FMNIST "t10k-images-idx3-ubyte.gz",
                                         FMNIST "t10k-labels-idx1-ubyte.gz", 100, &d),
                          GLIA_OK);
    CU_ASSERT_EQUAL(d.n, 100);
    glia__dataset_free(&d);
    expect_fail(ctx, FMNIST "train-images-idx3-ubyte.gz", FMNIST "t10k-labels-idx1-ubyte.gz", 0,
                GLIA_EFORMAT, FMNIST "train-images-idx3-ubyte.gz",
                "images (60000) and labels (10000) counts differ", NULL);
    glia_context_free(ctx);
}

GLIA_TEST_MAIN("data", GLIA_TEST(test_load_raw), GLIA_TEST(test_load_gzip), GLIA_TEST(test_limit),
               GLIA_TEST(test_limit_still_validates), GLIA_TEST(test_gather),
               GLIA_TEST(test_gather_parallel), GLIA_TEST(test_missing_file),
               GLIA_TEST(test_directory), GLIA_TEST(test_wrong_magic), GLIA_TEST(test_truncated),
               GLIA_TEST(test_corrupt_gzip), GLIA_TEST(test_count_mismatch),
               GLIA_TEST(test_trailing_data), GLIA_TEST(test_gzip_members), GLIA_TEST(test_zero_dims),
               GLIA_TEST(test_absurd_sizes), GLIA_TEST(test_label_range),
               GLIA_TEST(test_permutation), GLIA_TEST(test_fashion_mnist))
