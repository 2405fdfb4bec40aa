/* tests/test_folder.c — [data] format = folder: an ImageFolder tree of PNG and JPEG files written here (libpng,
 * libjpeg): classes from the sorted folder names, the decoded and normalized pixels, the crops (RandomResizedCrop's
 * bounds, the same for the same seed, epoch and sample; evaluation's centre), training on them, class names in the
 * model's summary, and every bad tree or file refused with one line naming it, a file corrupt past its header when
 * its batch is made. Not the other formats (test_data, test_npy). */
#include <math.h>
#include <png.h>
#include <jpeglib.h>
#include <stdio.h>
#include <string.h>
#include "modelutil.h"
#include "parts.h"

static char dir[512];

static const char *path_of(const char *name)
{
    static char p[8][800];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void sh(const char *fmt, const char *arg)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, fmt, arg);
    CU_ASSERT_FATAL(system(cmd) == 0);
}

/* A w x h RGB PNG of colour c (a gradient along x when ramp). */
static void write_png(const char *name, int w, int h, const uint8_t c[3], bool ramp)
{
    uint8_t *px = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++)
        for (int k = 0; k < 3; k++) px[i * 3 + k] = ramp ? (uint8_t)(255 * (i % w) / (w - 1)) : c[k];
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = PNG_FORMAT_RGB;
    CU_ASSERT_FATAL(png_image_write_to_file(&im, path_of(name), 0, px, 0, NULL));
    free(px);
}

/* A w x h JPEG of colour c, quality 95. */
static void write_jpeg(const char *name, int w, int h, const uint8_t c[3])
{
    FILE *f = fopen(path_of(name), "wb");
    CU_ASSERT_FATAL(f != NULL);
    struct jpeg_compress_struct j;
    struct jpeg_error_mgr e;
    j.err = jpeg_std_error(&e);
    jpeg_create_compress(&j);
    jpeg_stdio_dest(&j, f);
    j.image_width = (JDIMENSION)w;
    j.image_height = (JDIMENSION)h;
    j.input_components = 3;
    j.in_color_space = JCS_RGB;
    jpeg_set_defaults(&j);
    jpeg_set_quality(&j, 95, TRUE);
    jpeg_start_compress(&j, TRUE);
    uint8_t *row = malloc((size_t)w * 3);
    for (int i = 0; i < w; i++) memcpy(row + 3 * i, c, 3);
    while (j.next_scanline < j.image_height) jpeg_write_scanlines(&j, &row, 1);
    jpeg_finish_compress(&j);
    jpeg_destroy_compress(&j);
    fclose(f);
    free(row);
}

static const uint8_t colours[3][3] = {{20, 40, 230}, {30, 200, 60}, {220, 30, 40}};  /* blue, green, red */
static const char *names[3] = {"blue", "green", "red"};

/* train/ and test/ with the three classes (folders made in another order than sorted), PNGs and JPEGs of several sizes,
 * a file that is no image (left out) */
static void make_tree(void)
{
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("folder"));
    sh("rm -rf '%s'", dir);
    sh("mkdir -p '%s'", dir);
    for (int s = 0; s < 2; s++)
        for (int c = 2; c >= 0; c--) {
            char sub[64], name[96];
            snprintf(sub, sizeof sub, "%s/%s", s ? "test" : "train", names[c]);
            sh("mkdir -p '%s'", path_of(sub));
            for (int i = 0; i < (s ? 3 : 8); i++) {
                snprintf(name, sizeof name, "%s/img%d.%s", sub, i, i % 2 ? "jpg" : "png");
                if (i % 2) write_jpeg(name, 20 + 3 * i, 30 - i, colours[c]);
                else write_png(name, 25 + i, 18 + 2 * i, colours[c], false);
            }
            snprintf(name, sizeof name, "%s/notes.txt", sub);
            FILE *f = fopen(path_of(name), "w");
            fputs("not an image\n", f);
            fclose(f);
        }
}

static void model_text(char *buf, size_t n, const char *extra)
{
    snprintf(buf, n,
             "[runtime]\ndevice = cpu\nseed = 3\n[data]\nformat = folder\ntrain_dir = %s\ntest_dir = %s\nimage_size = 12\n"
             "batch_size = 6\ntest_batch_size = 9\nworkers = 2\n%s[train]\nepochs = 3\nlr = 0.05\n"
             "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 3\n[loss]\ntype = softmax_cross_entropy\n",
             path_of("train"), path_of("test"), extra);
}

/* The classes are the sorted folder names, every image found (the text file left out), PNG pixels decoded exactly
 * and JPEG's within its loss, normalized by ImageNet's statistics by default; glia check lists the classes; a colour
 * per class trains to accuracy 1. */
static void test_tree_and_training(void)
{
    make_tree();
    char text[2048];
    model_text(text, sizeof text, "");
    struct run r;
    open_run(&r, text);
    const struct glia__dataset *d = &r.m->data.train;
    CU_ASSERT_EQUAL(d->n, 24);
    CU_ASSERT_EQUAL(r.m->data.test.n, 9);
    CU_ASSERT_EQUAL_FATAL(d->n_classes, 3);
    for (int c = 0; c < 3; c++) CU_ASSERT_STRING_EQUAL(d->class_names[c], names[c]);
    CU_ASSERT(d->channels == 3 && d->rows == 12 && d->cols == 12);
    float x[3 * 12 * 12];
    int32_t y;
    for (int64_t i = 0; i < d->n; i++) {
        glia__dataset_gather(d, &i, 1, &r.m->data.norm, x, &y);
        CU_ASSERT_EQUAL(y, i / 8);  /* the tree's order: class by class, files sorted */
        bool png = strstr(d->files[i], ".png") != NULL;
        double worst = 0;
        for (int k = 0; k < 3; k++) {
            double want = (colours[y][k] / 255.0 - r.m->data.norm.mean[k]) / r.m->data.norm.std[k];
            for (int p = 0; p < 144; p++) worst = fmax(worst, fabs(x[k * 144 + p] - want));
        }
        CU_ASSERT(worst < (png ? 1e-5 : 4.0 / 255 / 0.224));
    }
    CU_ASSERT(fabsf(r.m->data.norm.mean[0] - 0.485f) < 1e-7 && fabsf(r.m->data.norm.std[2] - 0.225f) < 1e-7);
    char *sum = NULL;
    size_t len;
    FILE *f = open_memstream(&sum, &len);
    glia_model_summary(r.m, f);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(sum, "\nclasses: 0 blue, 1 green, 2 red\n"));
    free(sum);
    struct glia_epoch_result res[3] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, res, 3), GLIA_OK);
    printf("\n  folder: test accuracy %.3f after 3 epochs", res[2].test_accuracy);
    CU_ASSERT_EQUAL(res[2].test_accuracy, 1.0);
    close_run(&r);
}

/* RandomResizedCrop: 8-100% of the area, aspect 3/4 to 4/3 (the fallback when ten draws miss), inside the image, the
 * same for the same (seed, epoch, sample) and another for another epoch; evaluation: the centre square that Resize to
 * size / 0.875 and CenterCrop(size) take, no flip. */
static void test_crops(void)
{
    int differ = 0, flips = 0;
    for (int64_t i = 0; i < 400; i++) {
        int w = 30 + (int)(i % 50), h = 20 + (int)(i % 37);
        double r[4], r2[4];
        bool f, f2;
        glia__folder_crop(w, h, 16, true, 7, 1, i, r, &f);
        glia__folder_crop(w, h, 16, true, 7, 1, i, r2, &f2);
        CU_ASSERT(!memcmp(r, r2, sizeof r) && f == f2);
        glia__folder_crop(w, h, 16, true, 7, 2, i, r2, &f2);
        differ += memcmp(r, r2, sizeof r) != 0;
        flips += f;
        double area = r[2] * r[3] / ((double)w * h), ratio = r[2] / r[3];
        CU_ASSERT(r[0] >= 0 && r[1] >= 0 && r[0] + r[2] <= w && r[1] + r[3] <= h);
        bool ok = area > 0.07 && area <= 1.0 && ratio > 0.70 && ratio < 1.43;  /* 0.08, 3/4, 4/3 less rounding */
        if (!ok) printf("\n  %dx%d: crop %gx%g at %g,%g (area %.3f, aspect %.3f)", w, h, r[2], r[3], r[0], r[1], area, ratio);
        CU_ASSERT(ok);
    }
    CU_ASSERT(differ > 390);
    CU_ASSERT(flips > 150 && flips < 250);
    double r[4];
    bool f;
    glia__folder_crop(64, 48, 28, false, 7, 1, 0, r, &f);  /* Resize(32): 48 -> 32, CenterCrop(28): 28/32 of 48 */
    CU_ASSERT(fabs(r[2] - 42.0) < 1e-9 && fabs(r[3] - 42.0) < 1e-9 && fabs(r[0] - 11.0) < 1e-9 && fabs(r[1] - 3.0) < 1e-9);
}

/* A training image that is a horizontal ramp: flipped samples read it mirrored (the training loader's flips), and
 * evaluation's never is. */
static void test_flip_ramp(void)
{
    make_tree();
    const uint8_t none[3] = {0, 0, 0};
    write_png("train/red/img0.png", 40, 40, none, true);
    char text[2048];
    model_text(text, sizeof text, "random_resized_crop = off\nrandom_flip = on\n");
    struct run r;
    open_run(&r, text);
    const struct glia__dataset *d = &r.m->data.train;
    int64_t i = 16;  /* train/red/img0.png */
    CU_ASSERT_PTR_NOT_NULL_FATAL(strstr(d->files[i], "red/img0.png"));
    float x[3 * 144];
    char why[64];
    int up = 0, down = 0;
    for (int e = 1; e <= 20; e++) {
        CU_ASSERT_FATAL(glia__folder_sample(d, i, false, true, 11, e, &r.m->data.norm, x, why, sizeof why));
        if (x[0] < x[11]) up++;
        else down++;
    }
    CU_ASSERT(up > 0 && down > 0);  /* flipped in some epochs, not in others */
    CU_ASSERT_FATAL(glia__folder_sample(d, i, false, false, 11, 1, &r.m->data.norm, x, why, sizeof why));
    CU_ASSERT(x[0] < x[11]);  /* no flip: the ramp rises left to right */
    close_run(&r);
}

static void test_refusals(void)
{
    make_tree();
    char text[2048];
    model_text(text, sizeof text, "");
    sh("mkdir -p '%s'", path_of("test/purple"));
    write_png("test/purple/a.png", 8, 8, colours[0], false);
    expect_build_error(text, "test/purple: a class the training folder does not have");
    sh("rm -rf '%s'", path_of("test/purple"));
    sh("mkdir -p '%s'", path_of("train/empty"));
    expect_build_error(text, "train/empty: no .png, .jpg or .jpeg images in it");
    sh("rm -rf '%s'", path_of("train/empty"));
    FILE *f = fopen(path_of("train/green/broken.png"), "wb");
    fputs("\x89PNG\r\n\x1a\n not really", f);
    fclose(f);
    expect_build_error(text, "train/green/broken.png: not a PNG glia can read");
    f = fopen(path_of("train/green/broken.png"), "wb");
    fputs("GIF89a", f);
    fclose(f);
    sh("mv '%s' \"$(dirname '%1$s')/broken.jpg\"", path_of("train/green/broken.png"));
    expect_build_error(text, "train/green/broken.jpg: not a JPEG glia can read");
    sh("rm -f '%s'", path_of("train/green/broken.jpg"));
    char bad[2048];
    snprintf(bad, sizeof bad, "%s", text);
    char *p = strstr(bad, "image_size = 12\n");
    memmove(p, p + 16, strlen(p + 16) + 1);
    expect_build_error(bad, "image_size: missing required key (format = folder)");
    model_text(bad, sizeof bad, "resident = on\n");
    expect_build_error(bad, "resident = on makes batches of byte images on the device; these images are decoded");
    model_text(bad, sizeof bad, "random_crop_padding = 2\n");
    expect_build_error(bad, "random_crop_padding");
    snprintf(bad, sizeof bad, "[runtime]\ndevice = cpu\n[data]\nformat = folder\ntrain_dir = %s\ntest_dir = %s\n"
             "image_size = 8\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 3\n[loss]\ntype = softmax_cross_entropy\n",
             path_of("nosuch"), path_of("test"));
    expect_build_error(bad, "cannot open the folder");
}

/* A PNG whose header reads but whose data is cut short is found when its batch is made: training stops with one line
 * naming the file. */
static void test_corrupt_data_stops_training(void)
{
    make_tree();
    const uint8_t c[3] = {1, 2, 3};
    write_png("train/blue/img2.png", 64, 64, c, true);
    FILE *f = fopen(path_of("train/blue/img2.png"), "r+b");
    CU_ASSERT_FATAL(f != NULL);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    CU_ASSERT_FATAL(truncate(path_of("train/blue/img2.png"), n / 2) == 0);
    char text[2048];
    model_text(text, sizeof text, "");
    struct run r;
    open_run(&r, text);
    struct glia_epoch_result res[3] = GLIA_TEST_RESULTS;
    glia_status st = glia_model_train(r.m, &quiet, res, 3);
    CU_ASSERT_EQUAL(st, GLIA_EFORMAT);
    const char *msg = glia_context_error(r.ctx);
    if (!strstr(msg, "train/blue/img2.png: its PNG data is corrupt")) printf("\n  %s\n", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "train/blue/img2.png: its PNG data is corrupt"));
    close_run(&r);
}

GLIA_TEST_MAIN("folder", GLIA_TEST(test_tree_and_training), GLIA_TEST(test_crops), GLIA_TEST(test_flip_ramp),
               GLIA_TEST(test_refusals), GLIA_TEST(test_corrupt_data_stops_training))
