/* tests/test_npy.c — [data] format = npy: uint8 and float32 images N x H x W, N x C x H x W and (layout = nhwc)
 * N x H x W x C with uint8/int32/int64 labels, written here and (where /usr/bin/python3 has NumPy) by np.save; the
 * default normalization from the training set; training on them; every malformed or unsupported file refused with one
 * line naming it. Not the loader's other features (test_data). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "modelutil.h"
#include "parts.h"

static char dir[512];

static const char *path_of(const char *name)
{
    static char p[8][700];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("npy"));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CU_ASSERT_FATAL(system(cmd) == 0);
}

/* A .npy file (version 1.0) of descr and shape holding the n bytes of data; fortran sets fortran_order; extra bytes
 * are appended after the data (a damaged file). */
static void write_npy(const char *name, const char *descr, const char *shape, const void *data, size_t n, bool fortran,
                      size_t extra)
{
    char h[256];
    int k = snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
                     fortran ? "True" : "False", shape);
    while ((10 + k + 1) % 64) h[k++] = ' ';
    h[k++] = '\n';
    FILE *f = fopen(path_of(name), "wb");
    CU_ASSERT_FATAL(f != NULL);
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)k, (unsigned char)(k >> 8)};
    fwrite(pre, 1, 10, f);
    fwrite(h, 1, (size_t)k, f);
    fwrite(data, 1, n, f);
    for (size_t i = 0; i < extra; i++) fputc(0, f);
    fclose(f);
}

enum { N = 60, H = 6, W = 6, C = 3 };

/* Images whose class (0, 1 or 2) is the brightest third of the picture, channel c scaled; nhwc lays them out (n, h,
 * w, c). */
static void make_images(uint8_t *x, int64_t *y, int channels, bool nhwc)
{
    for (int i = 0; i < N; i++) {
        y[i] = i % 3;
        for (int c = 0; c < channels; c++)
            for (int r = 0; r < H; r++)
                for (int w = 0; w < W; w++) {
                    int v = (r / 2 == y[i] ? 200 : 30) + (i * 7 + r * 3 + w * 5 + c * 11) % 40 - c * 10;
                    size_t at = nhwc ? (((size_t)i * H + r) * W + w) * channels + c : (((size_t)i * channels + c) * H + r) * W + w;
                    x[at] = (uint8_t)v;
                }
    }
}

static void model_text(char *buf, size_t n, const char *imgs, const char *labels, const char *extra)
{
    snprintf(buf, n,
             "[runtime]\ndevice = cpu\nseed = 2\n[data]\nformat = npy\ntrain_images = %s\ntrain_labels = %s\n"
             "test_images = %s\ntest_labels = %s\nbatch_size = 10\ntest_batch_size = 20\nworkers = 0\n%s"
             "[train]\nepochs = 4\nlr = 0.05\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 3\n"
             "[loss]\ntype = softmax_cross_entropy\n",
             path_of(imgs), path_of(labels), path_of(imgs), path_of(labels), extra);
}

/* N x H x W uint8 images with int64 labels train (the classes are easy: accuracy 1 in 4 epochs); the same images
 * N x C x H x W and N x H x W x C (layout = nhwc) give the same model the same evaluation; the normalization is the
 * training set's own unless [data] mean and std say otherwise. */
static void test_layouts_train(void)
{
    make_dir();
    static uint8_t x1[N * H * W], xc[N * C * H * W], xh[N * C * H * W];
    int64_t y[N];
    int32_t y32[N];
    uint8_t y8[N];
    make_images(x1, y, 1, false);
    make_images(xc, y, C, false);
    make_images(xh, y, C, true);
    for (int i = 0; i < N; i++) y32[i] = (int32_t)y[i], y8[i] = (uint8_t)y[i];
    char shape[64];
    snprintf(shape, sizeof shape, "(%d, %d, %d)", N, H, W);
    write_npy("x1.npy", "|u1", shape, x1, sizeof x1, false, 0);
    snprintf(shape, sizeof shape, "(%d, %d, %d, %d)", N, C, H, W);
    write_npy("xc.npy", "|u1", shape, xc, sizeof xc, false, 0);
    snprintf(shape, sizeof shape, "(%d, %d, %d, %d)", N, H, W, C);
    write_npy("xh.npy", "|u1", shape, xh, sizeof xh, false, 0);
    snprintf(shape, sizeof shape, "(%d,)", N);
    write_npy("y64.npy", "<i8", shape, y, sizeof y, false, 0);
    write_npy("y32.npy", "<i4", shape, y32, sizeof y32, false, 0);
    write_npy("y8.npy", "|u1", shape, y8, sizeof y8, false, 0);
    char text[2048];
    model_text(text, sizeof text, "x1.npy", "y64.npy", "");
    struct run r;
    open_run(&r, text);
    CU_ASSERT_EQUAL(r.m->data.train.channels, 1);
    CU_ASSERT_EQUAL(r.m->data.n_classes, 3);
    double sum = 0, sq = 0;  /* the default normalization: the images' own mean and std */
    for (int i = 0; i < N * H * W; i++) sum += x1[i] / 255.0, sq += (x1[i] / 255.0) * (x1[i] / 255.0);
    double mu = sum / (N * H * W);
    CU_ASSERT(fabs(r.m->data.norm.mean[0] - mu) < 1e-6);
    CU_ASSERT(fabs(r.m->data.norm.std[0] - sqrt(sq / (N * H * W) - mu * mu)) < 1e-6);
    struct glia_epoch_result res[4] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, res, 4), GLIA_OK);
    printf("\n  npy: test accuracy %.3f after 4 epochs", res[3].test_accuracy);
    CU_ASSERT(res[3].test_accuracy > 0.9);
    close_run(&r);
    double loss[3], acc[3];
    const char *cases[3][3] = {{"xc.npy", "y32.npy", ""}, {"xh.npy", "y8.npy", "layout = nhwc\n"},
                               {"xc.npy", "y64.npy", "layout = nchw\nmean = 0.5\nstd = 0.25\n"}};
    for (int k = 0; k < 3; k++) {
        model_text(text, sizeof text, cases[k][0], cases[k][1], cases[k][2]);
        open_run(&r, text);
        CU_ASSERT_EQUAL(r.m->data.train.channels, C);
        CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(r.m, &loss[k], &acc[k]), GLIA_OK);
        close_run(&r);
    }
    CU_ASSERT_EQUAL(loss[0], loss[1]);  /* nchw and nhwc: the same images */
    CU_ASSERT_EQUAL(acc[0], acc[1]);
    CU_ASSERT_NOT_EQUAL(loss[0], loss[2]);  /* another normalization */
    /* float32 images of the bytes / 255 (nhwc), normalized by the bytes' mean and std: the same batches and
     * evaluation as the bytes, bit for bit; trained, with the same loss */
    static float xf[N * C * H * W];
    for (int i = 0; i < N * C * H * W; i++) xf[i] = xh[i] / 255.0f;
    snprintf(shape, sizeof shape, "(%d, %d, %d, %d)", N, H, W, C);
    write_npy("xf.npy", "<f4", shape, xf, sizeof xf, false, 0);
    model_text(text, sizeof text, "xh.npy", "y8.npy", "layout = nhwc\n");
    open_run(&r, text);
    char stats[200];
    snprintf(stats, sizeof stats, "layout = nhwc\nmean = %.9g, %.9g, %.9g\nstd = %.9g, %.9g, %.9g\n",
             r.m->data.norm.mean[0], r.m->data.norm.mean[1], r.m->data.norm.mean[2], r.m->data.norm.std[0],
             r.m->data.norm.std[1], r.m->data.norm.std[2]);
    close_run(&r);
    struct run rb, rf;
    model_text(text, sizeof text, "xh.npy", "y8.npy", stats);
    open_run(&rb, text);
    model_text(text, sizeof text, "xf.npy", "y8.npy", stats);
    open_run(&rf, text);
    CU_ASSERT_PTR_NOT_NULL(rf.m->data.train.fimages);
    struct glia_epoch_result eb[4] = GLIA_TEST_RESULTS, ef[4] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(rb.m, &quiet, eb, 4), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(rf.m, &quiet, ef, 4), GLIA_OK);
    CU_ASSERT_EQUAL(ef[3].train_loss, eb[3].train_loss);
    CU_ASSERT_EQUAL(ef[3].test_loss, eb[3].test_loss);
    CU_ASSERT(same_weights(&rb, &rf));
    close_run(&rb);
    close_run(&rf);
}

/* Each bad file: the build fails with one line naming the file and what is wrong. */
static void expect_refused(const char *imgs, const char *labels, const char *extra, const char *want)
{
    char text[2048];
    model_text(text, sizeof text, imgs, labels, extra);
    expect_build_error(text, want);
}

static void test_refusals(void)
{
    make_dir();
    static uint8_t x[N * H * W];
    static float xf[N * H * W];
    int64_t y[N];
    make_images(x, y, 1, false);
    char shape[64], lshape[32];
    snprintf(shape, sizeof shape, "(%d, %d, %d)", N, H, W);
    snprintf(lshape, sizeof lshape, "(%d,)", N);
    write_npy("ok.npy", "|u1", shape, x, sizeof x, false, 0);
    write_npy("y.npy", "<i8", lshape, y, sizeof y, false, 0);
    write_npy("f64.npy", "<f8", shape, x, sizeof x / 8 * 8, false, 0);
    expect_refused("f64.npy", "y.npy", "", "f64.npy: images of type '<f8'; glia reads uint8 ('|u1') or float32");
    for (int i = 0; i < N * H * W; i++) xf[i] = x[i] / 255.0f;
    xf[77] = NAN;
    write_npy("nan.npy", "<f4", shape, xf, sizeof xf, false, 0);
    expect_refused("nan.npy", "y.npy", "", "nan.npy: element 77 is nan: images must be finite");
    xf[77] = 0;
    write_npy("f32.npy", "<f4", shape, xf, sizeof xf, false, 0);
    char mixed[1400];
    model_text(mixed, sizeof mixed, "f32.npy", "y.npy", "");
    char *t = strstr(mixed, "test_images = ");
    CU_ASSERT_FATAL(t != NULL);
    char rest[1400];
    snprintf(rest, sizeof rest, "test_images = %s\n%s", path_of("ok.npy"), strchr(t, '\n') + 1);
    strcpy(t, rest);
    expect_build_error(mixed, "test images are uint8, training images float32");
    expect_refused("f32.npy", "y.npy", "resident = on\n", "resident = on makes batches of byte images on the device");
    write_npy("fort.npy", "|u1", shape, x, sizeof x, true, 0);
    expect_refused("fort.npy", "y.npy", "", "fort.npy: fortran_order is True; save np.ascontiguousarray(x)");
    char s2[32];
    snprintf(s2, sizeof s2, "(%d, %d)", N, H * W);
    write_npy("flat.npy", "|u1", s2, x, sizeof x, false, 0);
    expect_refused("flat.npy", "y.npy", "", "flat.npy: images of 2 dimensions; glia reads N x H x W");
    expect_refused("ok.npy", "y.npy", "layout = nhwc\n", "ok.npy: images of 3 dimensions");
    write_npy("cut.npy", "|u1", shape, x, sizeof x - 5, false, 0);
    expect_refused("cut.npy", "y.npy", "", "cut.npy: shape and type need 2160 bytes of data; the file holds 2155 (cut short?)");
    write_npy("long.npy", "|u1", shape, x, sizeof x, false, 3);
    expect_refused("long.npy", "y.npy", "", "(bytes after the array)");
    snprintf(s2, sizeof s2, "(%d,)", N - 1);
    write_npy("few.npy", "<i8", s2, y, sizeof y - 8, false, 0);
    expect_refused("ok.npy", "few.npy", "", "few.npy: 59 labels for 60 images");
    write_npy("fy.npy", "<f8", lshape, y, sizeof y, false, 0);
    expect_refused("ok.npy", "fy.npy", "", "fy.npy: labels of type '<f8'; glia reads uint8, int32 or int64");
    int64_t neg[N];
    memcpy(neg, y, sizeof y);
    neg[7] = -1;
    write_npy("neg.npy", "<i8", lshape, neg, sizeof neg, false, 0);
    expect_refused("ok.npy", "neg.npy", "", "neg.npy: label -1 at index 7 is out of range 0..65535");
    FILE *f = fopen(path_of("bad.npy"), "wb");
    fputs("PK\x03\x04 not numpy", f);
    fclose(f);
    expect_refused("bad.npy", "y.npy", "", "bad.npy: not a .npy file");
    expect_refused("nosuch.npy", "y.npy", "", "cannot open");
    expect_refused("ok.npy", "y.npy", "vocab = 5\n", "[data] vocab");
}

/* Files NumPy writes itself (np.save; its header layout, int64 labels), where /usr/bin/python3 has NumPy. */
static void test_numpy_files(void)
{
    make_dir();
    char cmd[1500];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import numpy as np; r = np.random.RandomState(0); "
             "y = np.arange(40) %% 3; x = (r.rand(40, 5, 5, 2) * 60 + (y[:, None, None, None] * 50)).astype(np.uint8); "
             "np.save('%s', x); np.save('%s', y.astype(np.int64))\" 2>/dev/null",
             path_of("np_x.npy"), path_of("np_y.npy"));
    if (system(cmd) != 0) {
        printf("(no /usr/bin/python3 with NumPy: skipped) ");
        return;
    }
    char text[2048];
    model_text(text, sizeof text, "np_x.npy", "np_y.npy", "layout = nhwc\n");
    struct run r;
    open_run(&r, text);
    CU_ASSERT_EQUAL(r.m->data.train.n, 40);
    CU_ASSERT_EQUAL(r.m->data.train.channels, 2);
    CU_ASSERT_EQUAL(r.m->data.train.rows, 5);
    CU_ASSERT_EQUAL(r.m->data.train.cols, 5);
    CU_ASSERT_EQUAL(r.m->data.n_classes, 3);
    struct glia_epoch_result res[4] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, res, 4), GLIA_OK);
    CU_ASSERT(res[3].train_loss < res[0].train_loss);
    close_run(&r);
}

GLIA_TEST_MAIN("npy", GLIA_TEST(test_layouts_train), GLIA_TEST(test_refusals), GLIA_TEST(test_numpy_files))
