/* tests/test_cifar.c — the CIFAR binary reader ([data] format = cifar10 | cifar100, raw and gzip
 * files written here), per-channel normalization and augmentation, and a model trained on it.
 * Not the IDX reader (test_data.c) and not the loader's ordering (test_loader.c). */
#include <math.h>
#include <stdint.h>
#include <zlib.h>
#include "loaderutil.h"
#include "parts.h"
#include "modelutil.h"
#include "testutil.h"

#define PIXELS 3072

/* The pixel (channel c, position p) of record i: distinct across records and channels. */
static uint8_t cifar_pixel(int i, int c, int p) { return (uint8_t)((i * 131 + c * 71 + p * 7 + p / 32) % 256); }

/* Record i's bytes: its label(s) then its pixels; CIFAR-100 puts the coarse label first. */
static void record(uint8_t *r, int i, bool cifar100, int label, int coarse)
{
    int k = 0;
    if (cifar100) r[k++] = (uint8_t)coarse;
    r[k++] = (uint8_t)label;
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < 1024; p++) r[k + c * 1024 + p] = cifar_pixel(i, c, p);
}

/* Writes records first .. first+n-1 (label i % 10, or fine i % 100 and coarse i % 20), then
 * `extra` bytes of 7s, raw or gzip. Returns 0 on success. */
static int write_cifar(const char *path, int first, int n, bool cifar100, size_t extra, bool gz)
{
    size_t rec = PIXELS + (cifar100 ? 2 : 1), len = (size_t)n * rec + extra;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return -1;
    for (int i = 0; i < n; i++) record(buf + (size_t)i * rec, first + i, cifar100, (first + i) % (cifar100 ? 100 : 10), (first + i) % 20);
    memset(buf + (size_t)n * rec, 7, extra);
    int bad;
    if (gz) {
        gzFile f = gzopen(path, "wb");
        bad = !f || (len && gzwrite(f, buf, (unsigned)len) != (int)len);
        if (f) bad |= gzclose(f) != Z_OK;
    } else {
        FILE *f = fopen(path, "wb");
        bad = !f || fwrite(buf, 1, len, f) != len;
        if (f) bad |= fclose(f) != 0;
    }
    free(buf);
    return bad ? -1 : 0;
}

static struct glia_context *new_ctx(void)
{
    struct glia_context *ctx;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    return ctx;
}

/* Checks d holds records first .. first+n-1 in order, labelled as write_cifar labels them. */
static void check_records(const struct glia__dataset *d, int first, int n, bool cifar100, bool coarse)
{
    CU_ASSERT_EQUAL_FATAL(d->n, n);
    CU_ASSERT_EQUAL(d->channels, 3);
    CU_ASSERT_EQUAL(d->rows, 32);
    CU_ASSERT_EQUAL(d->cols, 32);
    CU_ASSERT_FALSE(d->tokens);
    CU_ASSERT_EQUAL(d->n_classes, !cifar100 ? 10 : coarse ? 20 : 100);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int r = first + i;
        bad += d->labels[i] != (!cifar100 ? r % 10 : coarse ? r % 20 : r % 100);
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 1024; p++) bad += d->images[(int64_t)i * PIXELS + c * 1024 + p] != cifar_pixel(r, c, p);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Two CIFAR-10 batch files, one gzip, read in the order given, whole or the first records. */
static void test_read_cifar10(void)
{
    struct glia_context *ctx = new_ctx();
    const char *a = glia_test_tmp("cifar-a.bin"), *b = glia_test_tmp("cifar-b.bin.gz");
    CU_ASSERT_FATAL(write_cifar(a, 0, 3, false, 0, false) == 0);
    CU_ASSERT_FATAL(write_cifar(b, 3, 4, false, 0, true) == 0);
    const char *paths[2] = {a, b};
    struct glia__dataset d;
    CU_ASSERT_EQUAL_FATAL(glia__cifar_load(ctx, paths, 2, false, false, 0, &d), GLIA_OK);
    check_records(&d, 0, 7, false, false);
    glia__dataset_free(&d);
    int64_t limits[] = {2, 3, 5, 7, 100};
    for (int k = 0; k < 5; k++) {
        CU_ASSERT_EQUAL_FATAL(glia__cifar_load(ctx, paths, 2, false, false, limits[k], &d), GLIA_OK);
        check_records(&d, 0, limits[k] < 7 ? (int)limits[k] : 7, false, false);
        glia__dataset_free(&d);
    }
    const char *rev[2] = {b, a};  /* the order given is the order kept */
    CU_ASSERT_EQUAL_FATAL(glia__cifar_load(ctx, rev, 2, false, false, 4, &d), GLIA_OK);
    check_records(&d, 3, 4, false, false);
    glia__dataset_free(&d);
    glia_context_free(ctx);
}

/* CIFAR-100 records carry a coarse then a fine label: fine by default, coarse when asked. */
static void test_read_cifar100(void)
{
    struct glia_context *ctx = new_ctx();
    const char *a = glia_test_tmp("cifar100.bin");
    CU_ASSERT_FATAL(write_cifar(a, 0, 120, true, 0, false) == 0);
    struct glia__dataset d;
    for (int coarse = 0; coarse < 2; coarse++) {
        CU_ASSERT_EQUAL_FATAL(glia__cifar_load(ctx, &a, 1, true, coarse, 0, &d), GLIA_OK);
        check_records(&d, 0, 120, true, coarse);
        glia__dataset_free(&d);
    }
    glia_context_free(ctx);
}

/* Bad files give one line naming the file and what is wrong, and leave the set empty. */
static void test_cifar_errors(void)
{
    struct glia_context *ctx = new_ctx();
    const char *p = glia_test_tmp("cifar-bad.bin");
    char want[600];
    struct glia__dataset d;
    struct {
        int n;
        bool cifar100_file, read_as_100, gz;
        size_t extra;
        uint8_t poke_at_1;   /* if nonzero: record 1's first byte becomes this - 1 */
        glia_status st;
        const char *msg;
    } cases[] = {
        {0, false, false, false, 0, 0, GLIA_EFORMAT, "%s: empty file (expected CIFAR-10 records of 3073 bytes)"},
        {2, false, false, false, 100, 0, GLIA_EFORMAT,
         "%s: 6246 bytes are not a whole number of 3073-byte CIFAR-10 records (the last has 100 bytes)"},
        {3, true, false, false, 0, 0, GLIA_EFORMAT,
         "%s: 9222 bytes are not a whole number of 3073-byte CIFAR-10 records (the last has 3 bytes); it looks like "
         "CIFAR-100: format = cifar100"},
        {3, false, true, true, 0, 0, GLIA_EFORMAT,
         "%s: 9219 bytes are not a whole number of 3074-byte CIFAR-100 records (the last has 3071 bytes); it looks "
         "like CIFAR-10: format = cifar10"},
        {3, false, false, true, 0, 11, GLIA_EFORMAT, "%s: record 1 has label 10, out of range 0..9"},
        {3, true, true, false, 0, 21, GLIA_EFORMAT, "%s: record 1 has coarse label 20, out of range 0..19"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CU_ASSERT_FATAL(write_cifar(p, 0, cases[i].n, cases[i].cifar100_file, cases[i].extra, cases[i].gz) == 0);
        if (cases[i].poke_at_1) {  /* rewrite record 1's first label byte */
            size_t rec = PIXELS + (cases[i].cifar100_file ? 2 : 1);
            uint8_t *buf = malloc(rec * (size_t)cases[i].n);
            CU_ASSERT_FATAL(buf != NULL);
            for (int r = 0; r < cases[i].n; r++) record(buf + r * rec, r, cases[i].cifar100_file, r % 10, r % 20);
            buf[rec] = (uint8_t)(cases[i].poke_at_1 - 1);
            gzFile f = gzopen(p, cases[i].gz ? "wb" : "wbT");
            CU_ASSERT_FATAL(f != NULL);
            CU_ASSERT(gzwrite(f, buf, (unsigned)(rec * (size_t)cases[i].n)) == (int)(rec * (size_t)cases[i].n));
            gzclose(f);
            free(buf);
        }
        glia_status st = glia__cifar_load(ctx, &p, 1, cases[i].read_as_100, false, 0, &d);
        snprintf(want, sizeof want, cases[i].msg, p);
        if (st != cases[i].st || strcmp(glia_context_error(ctx), want))
            printf("\n  case %zu: got %d '%s', want '%s'\n", i, st, glia_context_error(ctx), want);
        CU_ASSERT_EQUAL(st, cases[i].st);
        CU_ASSERT_STRING_EQUAL(glia_context_error(ctx), want);
        CU_ASSERT_EQUAL(d.n, 0);
        CU_ASSERT_PTR_NULL(d.images);
    }
    /* a fine label of 100 */
    uint8_t rec[PIXELS + 2];
    record(rec, 0, true, 100, 3);
    FILE *f = fopen(p, "wb");
    CU_ASSERT_FATAL(f != NULL);
    fwrite(rec, 1, sizeof rec, f);
    fclose(f);
    CU_ASSERT_EQUAL(glia__cifar_load(ctx, &p, 1, true, true, 0, &d), GLIA_EFORMAT);
    snprintf(want, sizeof want, "%s: record 0 has fine label 100, out of range 0..99", p);
    CU_ASSERT_STRING_EQUAL(glia_context_error(ctx), want);
    /* a later file is checked even when the earlier ones give all the records kept */
    const char *good = glia_test_tmp("cifar-good.bin"), *missing = glia_test_tmp("cifar-missing.bin");
    CU_ASSERT_FATAL(write_cifar(good, 0, 2, false, 0, false) == 0);
    remove(missing);
    const char *two[2] = {good, missing};
    CU_ASSERT_EQUAL(glia__cifar_load(ctx, two, 2, false, false, 1, &d), GLIA_EIO);
    snprintf(want, sizeof want, "cannot open %s: No such file or directory", missing);
    CU_ASSERT_STRING_EQUAL(glia_context_error(ctx), want);
    CU_ASSERT_EQUAL(d.n, 0);
    glia_context_free(ctx);
}

/* Gathering and the loader normalize each channel with its own mean and std; crop and flip move
 * every channel the same way. */
static void test_channels_normalized_and_augmented(void)
{
    struct glia_context *ctx = new_ctx();
    const char *a = glia_test_tmp("cifar-aug.bin");
    enum { n = 40 };
    CU_ASSERT_FATAL(write_cifar(a, 0, n, false, 0, false) == 0);
    struct glia__dataset d;
    CU_ASSERT_EQUAL_FATAL(glia__cifar_load(ctx, &a, 1, false, false, 0, &d), GLIA_OK);
    const struct glia__norm nm = {{0.1f, 0.5f, 0.9f}, {0.2f, 0.4f, 0.8f}};
    float *x = malloc(sizeof(float) * n * PIXELS);
    int32_t y[n];
    int64_t idx[n];
    for (int i = 0; i < n; i++) idx[i] = (i * 7) % n;
    CU_ASSERT_FATAL(x != NULL);
    glia__dataset_gather(&d, idx, n, &nm, x, y);
    int bad = 0;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 1024; p++) {
                float want = ((float)cifar_pixel((int)idx[i], c, p) / 255.0f - nm.mean[c]) / nm.std[c];
                bad += fabsf(x[(int64_t)i * PIXELS + c * 1024 + p] - want) > 1e-6f;
            }
    CU_ASSERT_EQUAL(bad, 0);

    struct glia__loader_options o = {n, 2, 2, true, false, false, true, 3, nm, 5, NULL, 0, 1, false, false, 0, 0, false, NULL};
    struct glia__loader L;
    CU_ASSERT_FATAL(glia__loader_init(&L, ctx, &d, &o) == GLIA_OK);
    CU_ASSERT_FATAL(glia__loader_start_epoch(&L, 1, 0) == GLIA_OK);
    const float *bx = NULL;
    const int32_t *by = NULL;
    int64_t nb = 0;
    CU_ASSERT_FATAL(next_batch(&L, &bx, &by, &nb));
    CU_ASSERT_EQUAL_FATAL(nb, n);
    int flipped = 0, shifted = 0, unmatched = 0;  /* no shuffling: sample s is record s */
    for (int s = 0; s < n; s++) {
        const float *v = bx + (int64_t)s * PIXELS;
        int matched = 0;
        for (int dy = -3; dy <= 3 && !matched; dy++)
            for (int dx = -3; dx <= 3 && !matched; dx++)
                for (int flip = 0; flip < 2 && !matched; flip++) {
                    int ok = 1;
                    for (int c = 0; c < 3 && ok; c++)
                        for (int i = 0; i < 32 && ok; i++)
                            for (int j = 0; j < 32 && ok; j++) {
                                int si = i + dy, sj = (flip ? 31 - j : j) + dx;
                                int px = si >= 0 && si < 32 && sj >= 0 && sj < 32 ? cifar_pixel(s, c, si * 32 + sj) : 0;
                                ok = fabsf(v[c * 1024 + i * 32 + j] - ((float)px / 255.0f - nm.mean[c]) / nm.std[c]) <= 1e-6f;
                            }
                    if (ok) matched = 1, flipped += flip, shifted += dy || dx;
                }
        unmatched += !matched;
        CU_ASSERT_EQUAL(by[s], s % 10);
    }
    CU_ASSERT_EQUAL(unmatched, 0);
    CU_ASSERT(flipped > 0 && flipped < n);
    CU_ASSERT(shifted > n / 2);
    glia__loader_release(&L);
    glia__loader_free(&L);
    free(x);
    glia__dataset_free(&d);
    glia_context_free(ctx);
}

/* ---- models --------------------------------------------------------------------------------- */

/* Writes n CIFAR-10 records a small model can learn: record i is of class i % 10, dark noise with
 * channel (class % 3) bright in the band of rows 8 * (class / 3) .. +7. Returns 0 on success. */
static int write_learnable(const char *path, int n, unsigned seed)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    for (int i = 0; i < n; i++) {
        int c = i % 10;
        fputc(c, f);
        for (int ch = 0; ch < 3; ch++)
            for (int p = 0; p < 1024; p++) {
                seed = seed * 1103515245u + 12345u;
                int noise = (int)((seed >> 16) % 60);
                fputc(ch == c % 3 && p / 32 / 8 == c / 3 ? 170 + noise : noise, f);
            }
    }
    return fclose(f) ? -1 : 0;
}

/* The INI text of a small convolutional model over [data] lines `data`: a size x size convolution
 * of stride size, and `classes` outputs. */
static void model_text(char *buf, size_t n, const char *data, int size, int classes)
{
    snprintf(buf, n,
             "[runtime]\ndevice = cpu\nseed = 3\n"
             "[data]\n%s"
             "batch_size = 25\ntest_batch_size = 50\nworkers = 1\n"
             "[train]\nepochs = 3\noptimizer = adam\nlr = 0.01\n"
             "[conv]\ntype = conv2d\nfilters = 8\nsize = %d\nstride = %d\n"
             "[relu]\ntype = relu\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = %d\n"
             "[loss]\ntype = softmax_cross_entropy\n",
             data, size, size, classes);
}

/* format = cifar10 end to end: two training files named by a pattern and a test file,
 * three-channel input to the first convolution, per-channel normalization from the file, and a
 * model that learns. */
static void test_model_trains_on_cifar10(void)
{
    char dir[512], a[600], b[600], t[600], data[4096], text[8192];
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("cifar-set"));
    CU_ASSERT_FATAL(mkdir(dir, 0777) == 0 || errno == EEXIST);
    snprintf(a, sizeof a, "%s/data_batch_1.bin", dir);
    snprintf(b, sizeof b, "%s/data_batch_2.bin", dir);
    snprintf(t, sizeof t, "%s/test_batch.bin", dir);
    CU_ASSERT_FATAL(write_learnable(a, 200, 1) == 0 && write_learnable(b, 200, 2) == 0 && write_learnable(t, 100, 3) == 0);
    snprintf(data, sizeof data, "format = cifar10\ntrain = %s/data_batch_*.bin\ntest = %s\nmean = 0.1, 0.2, 0.3\n"
             "std = 0.3\nrandom_flip = on\n", dir, t);
    model_text(text, sizeof text, data, 4, 10);
    struct run r;
    open_run(&r, text);
    const struct glia_model *m = r.m;
    CU_ASSERT_EQUAL(m->data.train.n, 400);
    CU_ASSERT_EQUAL(m->data.test.n, 100);
    CU_ASSERT_EQUAL(m->data.n_classes, 10);
    const float mean[3] = {0.1f, 0.2f, 0.3f};
    for (int c = 0; c < 3; c++) {
        CU_ASSERT_EQUAL(m->data.norm.mean[c], mean[c]);
        CU_ASSERT_EQUAL(m->data.norm.std[c], 0.3f);
    }
    CU_ASSERT_EQUAL(glia_model_param_count(r.m), 8 * 3 * 4 * 4 + 8 + 8 * 8 * 8 * 10 + 10);  /* 3 input channels */
    char *sum = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&sum, &len);
    CU_ASSERT_FATAL(f != NULL);
    glia_model_summary(r.m, f);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(sum, "data: 400 training samples, 100 test samples, 3x32x32, 10 classes"));
    free(sum);
    double loss0, acc0, loss, acc;
    CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(r.m, &loss0, &acc0), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(r.m, &loss, &acc), GLIA_OK);
    printf(" (accuracy %.3f -> %.3f, loss %.3f -> %.3f) ", acc0, acc, loss0, loss);
    CU_ASSERT(acc >= 0.9);
    CU_ASSERT(loss < loss0 / 2);
    close_run(&r);
}

/* The example share/glia/examples/cifar10-resnet.ini builds on CIFAR-10 files named from the
 * command line, takes 3x32x32 images and evaluates. */
static void test_example_builds(void)
{
    char dir[512], set[700];
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("cifar-example"));
    CU_ASSERT_FATAL(mkdir(dir, 0777) == 0 || errno == EEXIST);
    const char *names[3] = {"data_batch_1.bin", "data_batch_2.bin", "test_batch.bin"};
    for (int i = 0; i < 3; i++) {
        snprintf(set, sizeof set, "%s/%s", dir, names[i]);
        CU_ASSERT_FATAL(write_learnable(set, 60, (unsigned)i) == 0);
    }
    struct run r;
    CU_ASSERT_FATAL(glia_context_new(&r.ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_load(r.ctx, glia_test_src("share/glia/examples/cifar10-resnet.ini"), &r.cfg) == GLIA_OK);
    snprintf(set, sizeof set, "data.train=%s/data_batch_*.bin", dir);
    CU_ASSERT_FATAL(glia_config_set(r.cfg, set) == GLIA_OK);
    snprintf(set, sizeof set, "data.test=%s/test_batch.bin", dir);
    CU_ASSERT_FATAL(glia_config_set(r.cfg, set) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_set(r.cfg, "runtime.device=cpu") == GLIA_OK);
    glia_status st = glia_model_build(r.ctx, r.cfg, &r.m);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_EQUAL(r.m->data.train.n, 120);
    CU_ASSERT_EQUAL(r.m->data.test.n, 60);
    CU_ASSERT_EQUAL(r.m->data.crop_padding, 4);
    CU_ASSERT(r.m->data.flip);
    struct glia_shape in = glia__data_shape(r.m, 7, 0);
    CU_ASSERT(in.ndim == 4 && in.dim[0] == 7 && in.dim[1] == 3 && in.dim[2] == 32 && in.dim[3] == 32);
    double loss, acc;
    CU_ASSERT_EQUAL(glia_model_evaluate(r.m, &loss, &acc), GLIA_OK);
    CU_ASSERT(isfinite(loss) && acc >= 0 && acc <= 1);
    close_run(&r);
}

/* Without mean and std, each format normalizes with its data set's statistics; one value is
 * every channel's. */
static void test_default_normalization(void)
{
    char a[600], data[4096], text[8192];
    snprintf(a, sizeof a, "%s", glia_test_tmp("cifar100-n.bin"));
    CU_ASSERT_FATAL(write_cifar(a, 0, 30, true, 0, false) == 0);
    struct {
        const char *extra;
        float mean[3], std[3];
        int classes;
    } cases[] = {
        {"format = cifar100\n", {0.5071f, 0.4865f, 0.4409f}, {0.2673f, 0.2564f, 0.2762f}, 100},
        {"format = cifar100\ncoarse_labels = on\nmean = 0.5\n", {0.5f, 0.5f, 0.5f}, {0.2673f, 0.2564f, 0.2762f}, 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(data, sizeof data, "%strain = %s\ntest = %s\n", cases[i].extra, a, a);
        model_text(text, sizeof text, data, 4, 100);
        struct run r;
        open_run(&r, text);
        for (int c = 0; c < 3; c++) {
            CU_ASSERT_EQUAL(r.m->data.norm.mean[c], cases[i].mean[c]);
            CU_ASSERT_EQUAL(r.m->data.norm.std[c], cases[i].std[c]);
        }
        CU_ASSERT_EQUAL(r.m->data.n_classes, cases[i].classes);
        close_run(&r);
    }
    /* idx keeps its one-channel default */
    char dir[512];
    CU_ASSERT_FATAL(glia_test_idx_set(dir, sizeof dir, "cifar-idx", 20, 10, 8, 10, 1) == 0);
    snprintf(data, sizeof data, "train_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n",
             dir, dir, dir, dir);
    model_text(text, sizeof text, data, 2, 10);
    struct run r;
    open_run(&r, text);
    CU_ASSERT_EQUAL(r.m->data.train.channels, 1);
    CU_ASSERT_EQUAL(r.m->data.norm.mean[0], 0.2860f);
    CU_ASSERT_EQUAL(r.m->data.norm.std[0], 0.3530f);
    close_run(&r);
}

/* Wrong [data] keys for the CIFAR formats give one line naming the file, line, section and key. */
static void test_cifar_config_errors(void)
{
    char a[600], data[4096], text[8192];
    snprintf(a, sizeof a, "%s", glia_test_tmp("cifar-cfg.bin"));
    CU_ASSERT_FATAL(write_cifar(a, 0, 10, false, 0, false) == 0);
    struct {
        const char *data, *want;
    } cases[] = {
        {"format = cifar10\ntrain = %s\n", "t.ini:4: [data] test: missing required key (format = cifar10)"},
        {"format = cifar10\ntrain = %s\ntest = %s\nmean = 0.1, 0.2\n",
         "t.ini:8: [data] mean: expected 1 value or 3 (one per channel), got 2"},
        {"format = cifar10\ntrain = %s\ntest = %s\nstd = 0.2, 0, 0.2\n",
         "t.ini:8: [data] std: 0 is out of range [1e-12, 1e+12]"},
        {"format = cifar10\ntrain = %s\ntest = %s\nmean = 0.1, half, 0.2\n", "t.ini:8: [data] mean: 'half' is not a number"},
        {"format = cifar10\ntrain = %s\ntest = %s\ncoarse_labels = on\n",
         "t.ini:8: [data] coarse_labels: 'coarse_labels' applies to format = cifar100, not cifar10"},
        {"format = cifar10\ntrain = %s\ntest = %s\nvocab = 9\n", "t.ini:8: [data] vocab: 'vocab' applies to format = tokens or token_stream, not cifar10"},
        {"format = cifar100\ntrain = %s\ntest = %s\n",
         "30730 bytes are not a whole number of 3074-byte CIFAR-100 records (the last has 3064 bytes); it looks like "
         "CIFAR-10: format = cifar10"},
        {"format = cifar10\ntrain = %s, \ntest = %s\n", "t.ini:6: [data] train: list item 2 is empty"},
        {"format = cifar10\ntrain = %s\ntest = %s.none*\n", "t.ini:7: [data] test: no file matches '"},
        {"format = cifar10\ntrain = %s, %s\ntest = %s.none\n", ".none: No such file or directory"},
        {"format = idx\ntrain = %s\ntest = %s\n", "t.ini:6: [data] train: 'train' applies to format = tokens, cifar10 or cifar100, not idx"},
        {"train_images = %s\ntrain_labels = %s\ntest_images = a\ntest_labels = b\nmean = 0.1, 0.2, 0.3\n",
         "t.ini:9: [data] mean: expected 1 value (the images have one channel), got 3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(data, sizeof data, cases[i].data, a, a, a);
        model_text(text, sizeof text, data, 4, 10);
        expect_build_error(text, cases[i].want);
    }
}

GLIA_TEST_MAIN("cifar", GLIA_TEST(test_read_cifar10), GLIA_TEST(test_read_cifar100), GLIA_TEST(test_cifar_errors),
               GLIA_TEST(test_channels_normalized_and_augmented), GLIA_TEST(test_model_trains_on_cifar10), GLIA_TEST(test_example_builds),
               GLIA_TEST(test_default_normalization), GLIA_TEST(test_cifar_config_errors))
