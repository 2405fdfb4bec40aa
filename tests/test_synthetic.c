/* tests/test_synthetic.c — [data] format = synthetic (random u8 images and labels made when the model is built:
 * seeds, shape, classes, defaults, key errors, memory) and share/glia/examples/resnet50.ini, which trains on it.
 * Not the file formats (test_data.c, test_cifar.c) and not the loader's ordering (test_loader.c). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <sys/wait.h>
#include "parts.h"
#include "modelutil.h"
#include "testutil.h"

/* A small model on `data` ([data] lines; batch sizes and workers added): conv, relu, linear to `classes`. */
static void model_text(char *buf, size_t n, const char *data, int classes)
{
    snprintf(buf, n,
             "[runtime]\ndevice = cpu\nseed = 3\n"
             "[data]\n%s"
             "batch_size = 8\ntest_batch_size = 16\nworkers = 1\n"
             "[train]\nepochs = 1\noptimizer = sgd\nlr = 0.01\n"
             "[conv]\ntype = conv2d\nfilters = 4\nsize = 3\nstride = 2\n"
             "[relu]\ntype = relu\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = %d\n"
             "[loss]\ntype = softmax_cross_entropy\n",
             data, classes);
}

static void open_data(struct run *r, const char *data, int classes)
{
    char text[4096];
    model_text(text, sizeof text, data, classes);
    open_run(r, text);
}

static int64_t image_bytes(const struct glia__dataset *d)
{
    return d->n * d->channels * d->rows * d->cols;
}

/* The shape and counts the keys ask for, labels within 0 .. classes-1 and every class drawn, pixels spread
 * over 0..255, and the training set unlike the test set. */
static void test_shape_and_labels(void)
{
    struct run r;
    open_data(&r, "format = synthetic\nchannels = 2\nrows = 9\ncols = 7\nclasses = 5\ntrain_samples = 300\n"
                  "test_samples = 40\n", 5);
    const struct glia__dataset *tr = &r.m->data.train, *te = &r.m->data.test;
    CU_ASSERT_EQUAL(tr->n, 300);
    CU_ASSERT_EQUAL(te->n, 40);
    CU_ASSERT(tr->channels == 2 && tr->rows == 9 && tr->cols == 7);
    CU_ASSERT(te->channels == 2 && te->rows == 9 && te->cols == 7);
    CU_ASSERT_FALSE(tr->tokens);
    CU_ASSERT_EQUAL(r.m->data.n_classes, 5);
    int seen[5] = {0}, bad = 0;
    for (int64_t i = 0; i < tr->n; i++) {
        if (tr->labels[i] < 0 || tr->labels[i] >= 5) bad++;
        else seen[tr->labels[i]]++;
    }
    for (int64_t i = 0; i < te->n; i++) bad += te->labels[i] < 0 || te->labels[i] >= 5;
    CU_ASSERT_EQUAL(bad, 0);
    for (int c = 0; c < 5; c++) CU_ASSERT(seen[c] > 20);  /* 60 expected each */
    int64_t hist[256] = {0}, n = image_bytes(tr);
    for (int64_t i = 0; i < n; i++) hist[tr->images[i]]++;
    int empty = 0;
    for (int v = 0; v < 256; v++) empty += hist[v] == 0;
    CU_ASSERT_EQUAL(empty, 0);  /* 37800 pixels: about 148 per value */
    CU_ASSERT(memcmp(tr->images, te->images, (size_t)image_bytes(te)) != 0);
    /* the defaults: uniform pixels' statistics, every channel */
    for (int c = 0; c < 2; c++) {
        CU_ASSERT_EQUAL(r.m->data.norm.mean[c], 0.5f);
        CU_ASSERT_EQUAL(r.m->data.norm.std[c], 0.2898f);
    }
    close_run(&r);
}

/* Unset keys: 3x224x224, 1000 classes, 1024 training and 256 test samples. */
static void test_defaults(void)
{
    struct run r;
    open_data(&r, "format = synthetic\n", 1000);
    const struct glia__dataset *tr = &r.m->data.train;
    CU_ASSERT(tr->channels == 3 && tr->rows == 224 && tr->cols == 224);
    CU_ASSERT_EQUAL(tr->n, 1024);
    CU_ASSERT_EQUAL(r.m->data.test.n, 256);
    CU_ASSERT_EQUAL(r.m->data.n_classes, 1000);
    close_run(&r);
}

/* Whether builds of `a` and `b` (with ta and tb OpenMP threads; 0: as set) hold the same training and test bytes
 * (images and labels). */
static bool same_data_threads(const char *a, int ta, const char *b, int tb)
{
    struct run ra, rb;
    int keep = omp_get_max_threads();
    omp_set_num_threads(ta ? ta : keep);
    open_data(&ra, a, 10);
    omp_set_num_threads(tb ? tb : keep);
    open_data(&rb, b, 10);
    omp_set_num_threads(keep);
    bool same = true;
    const struct glia__dataset *da[2] = {&ra.m->data.train, &ra.m->data.test}, *db[2] = {&rb.m->data.train, &rb.m->data.test};
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL_FATAL(image_bytes(da[i]), image_bytes(db[i]));
        same = same && !memcmp(da[i]->images, db[i]->images, (size_t)image_bytes(da[i])) &&
               !memcmp(da[i]->labels, db[i]->labels, sizeof(int32_t) * (size_t)da[i]->n);
    }
    close_run(&ra);
    close_run(&rb);
    return same;
}

static bool same_data(const char *a, const char *b) { return same_data_threads(a, 0, b, 0); }

/* The same seed gives the same bytes, whatever the thread count; another seed ([data] seed, or [runtime] seed
 * when [data] has none) other bytes. */
static void test_seeds(void)
{
    const char *base = "format = synthetic\nchannels = 3\nrows = 11\ncols = 13\nclasses = 10\ntrain_samples = 50\n"
                       "test_samples = 20\n";
    char a[512], b[512];
    CU_ASSERT(same_data(base, base));
    snprintf(a, sizeof a, "%sseed = 7\n", base);
    CU_ASSERT(same_data(a, a));
    snprintf(b, sizeof b, "%sseed = 8\n", base);
    CU_ASSERT_FALSE(same_data(a, b));
    snprintf(b, sizeof b, "%sseed = 3\n", base);  /* [runtime] seed = 3 in model_text */
    CU_ASSERT(same_data(base, b));
    /* more samples: the first ones unchanged (a sample's bytes depend on its index only) */
    struct run r1, r2;
    open_data(&r1, base, 10);
    open_data(&r2, "format = synthetic\nchannels = 3\nrows = 11\ncols = 13\nclasses = 10\ntrain_samples = 80\n", 10);
    CU_ASSERT_EQUAL(r2.m->data.train.n, 80);
    CU_ASSERT(!memcmp(r1.m->data.train.images, r2.m->data.train.images, (size_t)image_bytes(&r1.m->data.train)));
    close_run(&r1);
    close_run(&r2);
    CU_ASSERT(same_data_threads(base, 1, base, 3));
}

/* A batch of a synthetic set goes through the loader like any image set: normalized by [data] mean and std,
 * cropped and flipped; and a model trains on it with a finite loss. */
static void test_trains(void)
{
    struct run r;
    open_data(&r, "format = synthetic\nchannels = 3\nrows = 8\ncols = 8\nclasses = 4\ntrain_samples = 32\n"
                  "test_samples = 16\nmean = 0.25\nstd = 0.5\nrandom_crop_padding = 2\nrandom_flip = on\n", 4);
    CU_ASSERT_EQUAL(r.m->data.crop_padding, 2);
    CU_ASSERT(r.m->data.flip);
    float x[3 * 64];
    int32_t y;
    int64_t idx = 5;
    glia__dataset_gather(&r.m->data.train, &idx, 1, &r.m->data.norm, x, &y);
    CU_ASSERT_EQUAL(y, r.m->data.train.labels[5]);
    int bad = 0;
    for (int k = 0; k < 3 * 64; k++) bad += fabsf(x[k] - ((float)r.m->data.train.images[5 * 192 + k] / 255.0f - 0.25f) / 0.5f) > 1e-6f;
    CU_ASSERT_EQUAL(bad, 0);
    struct glia_epoch_result res[1] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, res, 1), GLIA_OK);
    CU_ASSERT(isfinite(res[0].train_loss) && isfinite(res[0].test_loss));
    CU_ASSERT(res[0].test_accuracy >= 0 && res[0].test_accuracy <= 1);
    close_run(&r);
}

/* Wrong keys and values: one line naming the file, line, section and key. */
static void test_config_errors(void)
{
    static const struct {
        const char *data, *want;
    } cases[] = {
        {"format = synthetic\nchannels = 4\n", "t.ini:6: [data] channels: 4 is out of range [1, 3]"},
        {"format = synthetic\nrows = 0\n", "t.ini:6: [data] rows: 0 is out of range [1, 65536]"},
        {"format = synthetic\ncols = wide\n", "t.ini:6: [data] cols: "},
        {"format = synthetic\nclasses = 0\n", "t.ini:6: [data] classes: 0 is out of range [1, 16777216]"},
        {"format = synthetic\nseed = -1\n", "t.ini:6: [data] seed: -1 is out of range"},
        {"format = synthetic\ntrain = x.bin\n",
         "t.ini:6: [data] train: 'train' applies to format = tokens, cifar10 or cifar100, not synthetic"},
        {"format = synthetic\ntrain_images = x\n", "t.ini:6: [data] train_images: 'train_images' applies to format = idx or npy, not synthetic"},
        {"format = synthetic\nmean = 0.1, 0.2\n", "t.ini:6: [data] mean: expected 1 value or 3 (one per channel), got 2"},
        {"format = synthetic\nchannels = 1\nstd = 0.1, 0.2, 0.3\n",
         "t.ini:7: [data] std: expected 1 value (the images have one channel), got 3"},
        {"format = cifar10\ntrain = a\ntest = b\nclasses = 10\n",
         "t.ini:8: [data] classes: 'classes' applies to format = synthetic, not cifar10"},
        {"format = idx\nrows = 28\n", "t.ini:6: [data] rows: 'rows' applies to format = synthetic, not idx"},
        {"format = synthetik\n", "t.ini:5: [data] format: "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[4096];
        model_text(text, sizeof text, cases[i].data, 10);
        expect_build_error(text, cases[i].want);
    }
}

/* Runs `glia check` on `ini` and `args` with the address space limited to 1 GB (ulimit -v), so that a set of
 * many GB cannot be had on any machine; returns its exit status and its stderr in err. */
static int check_1gb(const char *ini, const char *args, char *err, size_t n)
{
    const char *bin = getenv("GLIA_BIN");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "ulimit -v 1000000 && %s check %s %s 2>%s >/dev/null", bin ? bin : "tools/glia", ini, args,
             glia_test_tmp("synth.err"));
    int rc = system(cmd);
    FILE *f = fopen(glia_test_tmp("synth.err"), "r");
    size_t k = f ? fread(err, 1, n - 1, f) : 0;
    err[k] = '\0';
    if (f) fclose(f);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* A set too large for memory: one line naming [data] train_samples (or test_samples) and the bytes. */
static void test_out_of_memory(void)
{
    char ini[600], text[4096], err[4096];
    snprintf(ini, sizeof ini, "%s", glia_test_tmp("synth-oom.ini"));
    model_text(text, sizeof text, "format = synthetic\ntrain_samples = 100000\n", 1000);
    CU_ASSERT_FATAL(glia_test_write(ini, text) == 0);
    static const struct {
        const char *args, *want;
    } cases[] = {
        {"", "synth-oom.ini:6: [data] train_samples: 100000 synthetic training images of 3x224x224 and their labels need "
             "15053200000 bytes (15.1 GB): cannot allocate\n"},
        {"--set data.train_samples=10 --set data.test_samples=1000000000000",
         "--set data.test_samples=1000000000000: [data] test_samples: 1000000000000 synthetic test images of 3x224x224 "
         "and their labels need 150532000000000000 bytes (150.5 PB): cannot allocate\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = check_1gb(ini, cases[i].args, err, sizeof err);
        char *nl = strchr(err, '\n');
        bool ok = rc == 1 && nl && !nl[1] && strstr(err, cases[i].want);
        if (!ok) printf("\n  case %zu: exit %d, got %s  want %s\n", i, rc, err, cases[i].want);
        CU_ASSERT(ok);
    }
}

/* share/glia/examples/resnet50.ini with `sets` (NULL-terminated "section.key=value" overrides) on the CPU in
 * fp32, built. */
static void open_resnet50(struct run *r, const char *const *sets)
{
    CU_ASSERT_FATAL(glia_context_new(&r->ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_load(r->ctx, glia_test_src("share/glia/examples/resnet50.ini"), &r->cfg) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_set(r->cfg, "runtime.device=cpu") == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_set(r->cfg, "runtime.precision=fp32") == GLIA_OK);
    for (; *sets; sets++) CU_ASSERT_FATAL(glia_config_set(r->cfg, *sets) == GLIA_OK);
    glia_status st = glia_model_build(r->ctx, r->cfg, &r->m);
    if (st) printf("\n  %s\n", glia_context_error(r->ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
}

/* The example at its own shape (3x224x224, 1000 classes) has the parameters of torchvision's resnet50. */
static void test_resnet50_parameters(void)
{
    static const char *const sets[] = {"data.train_samples=2", "data.test_samples=2", NULL};
    struct run r;
    open_resnet50(&r, sets);
    CU_ASSERT(r.m->data.train.channels == 3 && r.m->data.train.rows == 224 && r.m->data.train.cols == 224);
    CU_ASSERT_EQUAL(r.m->data.n_classes, 1000);
    long long n = glia_model_param_count(r.m);
    printf(" (%lld parameters) ", n);
    CU_ASSERT_EQUAL(n, 25557032);  /* torchvision.models.resnet50(): 25,557,032 */
    close_run(&r);
}

/* The example at a small shape trains two steps on the CPU with a finite loss. At 64x64 the last stage is 2x2,
 * so that batchnorm's running statistics of two steps at batch 2 are of 8 values a channel (at 32x32, of 2: the
 * evaluation's variance can be ~0 and its loss overflow). */
static void test_resnet50_trains(void)
{
    static const char *const sets[] = {"data.rows=64", "data.cols=64", "data.classes=10", "fc.outputs=10",
                                       "data.train_samples=4", "data.test_samples=2", "data.batch_size=2",
                                       "data.test_batch_size=2", "data.workers=0", "train.lr=0.01", NULL};
    struct run r;
    open_resnet50(&r, sets);
    CU_ASSERT_EQUAL(r.m->data.n_classes, 10);
    struct glia_epoch_result res[1] = GLIA_TEST_RESULTS;
    glia_status st = glia_model_train(r.m, &quiet, res, 1);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    printf(" (train loss %.4f, test loss %.4f) ", res[0].train_loss, res[0].test_loss);
    CU_ASSERT(isfinite(res[0].train_loss) && res[0].train_loss > 0);
    CU_ASSERT(isfinite(res[0].test_loss));
    close_run(&r);
}

GLIA_TEST_MAIN("synthetic", GLIA_TEST(test_shape_and_labels), GLIA_TEST(test_defaults), GLIA_TEST(test_seeds),
               GLIA_TEST(test_trains), GLIA_TEST(test_config_errors), GLIA_TEST(test_out_of_memory),
               GLIA_TEST(test_resnet50_parameters), GLIA_TEST(test_resnet50_trains))
