/* tests/test_train.c — training end to end on the CPU: bit-identical runs for one seed, the
 * loss going down, evaluation leaving weights alone, the metrics file, and a short real
 * Fashion-MNIST run. Not speed: timings belong in bench/. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "loader.h"
#include "modelutil.h"
#include "parts.h"
#include "roofline.h"
#include "traceutil.h"
#include "train.h"

static char dir[512];

static void make_data(void)
{
    CU_ASSERT_FATAL(glia_test_idx_set(dir, sizeof dir, "train-data", 512, 200, 6, 5, 11) == 0);
}

static const char *model_text(unsigned seed, int epochs)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = %u\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\ntest_batch_size = 64\nmean = 0.2\nstd = 0.3\n"
             "[train]\nepochs = %d\noptimizer = sgd\nlr = 0.05\n[optimizer]\nmomentum = 0.9\n"
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n[act]\ntype = relu\n"
             "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             seed, dir, dir, dir, dir, epochs);
    return buf;
}

static void test_same_seed_bit_identical(void)
{
    make_data();
    struct run a, b, c;
    long long na, nb, nc;
    open_run(&a, model_text(7, 2));
    open_run(&b, model_text(7, 2));
    open_run(&c, model_text(8, 2));
    float *wa = weights(&a, &na), *wb = weights(&b, &nb), *wc = weights(&c, &nc);
    CU_ASSERT_EQUAL(na, 36 * 16 + 16 + 16 * 5 + 5);
    CU_ASSERT_EQUAL(memcmp(wa, wb, (size_t)na * 4), 0);   /* init: same seed, same bits */
    CU_ASSERT_NOT_EQUAL(memcmp(wa, wc, (size_t)na * 4), 0);
    free(wa);
    free(wb);
    free(wc);
    struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL(glia_model_train(a.m, &quiet, ra, 2), GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_train(b.m, &quiet, rb, 2), GLIA_OK);
    wa = weights(&a, &na);
    wb = weights(&b, &nb);
    CU_ASSERT_EQUAL(memcmp(wa, wb, (size_t)na * 4), 0);   /* trained: still the same bits */
    CU_ASSERT_EQUAL(ra[1].train_loss, rb[1].train_loss);
    CU_ASSERT_EQUAL(ra[1].test_loss, rb[1].test_loss);
    free(wa);
    free(wb);
    close_run(&a);
    close_run(&b);
    close_run(&c);
}

static void test_loss_goes_down(void)
{
    make_data();
    struct run r;
    open_run(&r, model_text(3, 4));
    double l0, a0;
    CU_ASSERT_EQUAL(glia_model_evaluate(r.m, &l0, &a0), GLIA_OK);
    struct glia_epoch_result res[4] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, res, 4), GLIA_OK);
    CU_ASSERT(res[3].train_loss < res[0].train_loss);
    CU_ASSERT(res[3].test_loss < 0.5 * l0);
    CU_ASSERT(res[3].test_accuracy > 0.9);
    CU_ASSERT(a0 < 0.6);  /* before training it could not already solve the task */
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(res[i].epoch, i + 1);
        CU_ASSERT(res[i].samples_per_s > 0);
        CU_ASSERT(res[i].seconds > 0);
    }
    /* evaluation changes nothing */
    long long n;
    float *w1 = weights(&r, &n);
    double l1, a1, l2, a2;
    CU_ASSERT_EQUAL(glia_model_evaluate(r.m, &l1, &a1), GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_evaluate(r.m, &l2, &a2), GLIA_OK);
    float *w2 = weights(&r, &n);
    CU_ASSERT_EQUAL(memcmp(w1, w2, (size_t)n * 4), 0);
    CU_ASSERT_EQUAL(l1, l2);
    CU_ASSERT_DOUBLE_EQUAL(l1, res[3].test_loss, 1e-12);
    free(w1);
    free(w2);
    close_run(&r);
}

static void test_metrics_file(void)
{
    make_data();
    struct run r;
    open_run(&r, model_text(5, 2));
    const char *path = glia_test_tmp("metrics/run1/m.jsonl");
    struct glia_train_options o = {sizeof(struct glia_train_options), path, -1, NULL, NULL};
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &o, NULL, 0), GLIA_OK);
    FILE *f = fopen(path, "r");
    CU_ASSERT_FATAL(f != NULL);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        static const char *keys[] = {"\"epoch\": ", "\"train_loss\": ", "\"test_loss\": ", "\"test_accuracy\": ",
                                     "\"samples_per_s\": ", "\"seconds\": "};
        for (int k = 0; k < 6; k++) CU_ASSERT_PTR_NOT_NULL(strstr(line, keys[k]));
        CU_ASSERT_EQUAL(line[0], '{');
        CU_ASSERT_PTR_NOT_NULL(strstr(line, "}\n"));
        CU_ASSERT_PTR_NULL(strstr(line, "device_peak_mb"));  /* the CPU backend keeps no device memory */
        int epoch = 0;
        CU_ASSERT_EQUAL(sscanf(line, "{\"epoch\": %d", &epoch), 1);
        CU_ASSERT_EQUAL(epoch, n);
    }
    fclose(f);
    CU_ASSERT_EQUAL(n, 2);
    close_run(&r);
    /* an unwritable metrics path is a clear error before any training */
    open_run(&r, model_text(5, 1));
    struct glia_train_options bad = {sizeof(struct glia_train_options), "/proc/no/such/dir/m.jsonl", -1, NULL, NULL};
    CU_ASSERT_EQUAL(glia_model_train(r.m, &bad, NULL, 0), GLIA_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "cannot write metrics file /proc/no/such/dir/m.jsonl"));
    close_run(&r);
}

/* [train] eval_every = 2 over 5 epochs evaluates after epochs 2, 4 and 5 (the last): the others' results have NaN test
 * figures and their metrics objects no test keys; training is that of eval_every = 1 bit for bit (an evaluation
 * leaves the weights alone), and so are the evaluations made. 0 evaluates after none. */
static void test_eval_every(void)
{
    make_data();
    struct run a, b, c;
    struct glia_epoch_result ra[5], rb[5], rc[5];
    for (int e = 0; e < 5; e++) ra[e] = rb[e] = rc[e] = (struct glia_epoch_result)GLIA_TEST_RESULT;
    char text[4096];
    open_run(&a, model_text(9, 5));
    snprintf(text, sizeof text, "%s", model_text(9, 5));
    char *at = strstr(text, "epochs = 5\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    char rest[4096];
    snprintf(rest, sizeof rest, "%s", at + strlen("epochs = 5\n"));
    snprintf(at, sizeof text - (size_t)(at - text), "epochs = 5\neval_every = 2\n%s", rest);
    open_run(&b, text);
    const char *path = glia_test_tmp("eval_every.jsonl");
    struct glia_train_options o = {sizeof(struct glia_train_options), path, -1, NULL, NULL};
    CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, ra, 5), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(b.m, &o, rb, 5), GLIA_OK);
    for (int e = 0; e < 5; e++) {
        bool evaluated = e == 1 || e == 3 || e == 4;
        CU_ASSERT_EQUAL(rb[e].train_loss, ra[e].train_loss);
        CU_ASSERT_EQUAL(isnan(rb[e].test_loss), !evaluated);
        CU_ASSERT_EQUAL(isnan(rb[e].test_accuracy), !evaluated);
        if (evaluated) CU_ASSERT_EQUAL(rb[e].test_loss, ra[e].test_loss);
        CU_ASSERT(!isnan(ra[e].test_loss));
    }
    FILE *f = fopen(path, "r");
    CU_ASSERT_FATAL(f != NULL);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        bool evaluated = n == 1 || n == 3 || n == 4;
        CU_ASSERT_EQUAL(strstr(line, "\"test_loss\": ") != NULL, evaluated);
        CU_ASSERT_EQUAL(strstr(line, "\"test_accuracy\": ") != NULL, evaluated);
        CU_ASSERT_PTR_NOT_NULL(strstr(line, "\"train_loss\": "));
        n++;
    }
    fclose(f);
    CU_ASSERT_EQUAL(n, 5);
    snprintf(at, sizeof text - (size_t)(at - text), "epochs = 5\neval_every = 0\n%s", rest);
    open_run(&c, text);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(c.m, &quiet, rc, 5), GLIA_OK);
    for (int e = 0; e < 5; e++) {
        CU_ASSERT(isnan(rc[e].test_loss));
        CU_ASSERT_EQUAL(rc[e].train_loss, ra[e].train_loss);
    }
    close_run(&a), close_run(&b), close_run(&c);
}

/* The options and results carry struct_size: options or results without one are refused before any training, and a
 * caller's smaller result struct gets only its part, at its own stride. */
static void test_struct_sizes(void)
{
    make_data();
    struct run r;
    open_run(&r, model_text(5, 2));
    struct glia_train_options o = {.progress = -1};
    CU_ASSERT_EQUAL(glia_model_train(r.m, &o, NULL, 0), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "set struct_size = sizeof(struct glia_train_options)"));
    CU_ASSERT_EQUAL(r.m->trainer.step, 0);
    struct glia_epoch_result none[2] = {{.epoch = 0}};
    CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, none, 2), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "results[0].struct_size is 0"));
    /* an older caller's struct that ends after train_loss: two of them, back to back, and a guard after */
    struct small {
        uint32_t struct_size;
        int epoch;
        double train_loss;
    } res[3];
    memset(res, 0x5a, sizeof res);
    res[0].struct_size = sizeof res[0];
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, (struct glia_epoch_result *)res, 2), GLIA_OK);
    for (int e = 0; e < 2; e++) {
        CU_ASSERT_EQUAL(res[e].struct_size, sizeof res[0]);
        CU_ASSERT_EQUAL(res[e].epoch, e + 1);
        CU_ASSERT(isfinite(res[e].train_loss) && res[e].train_loss > 0);
    }
    const unsigned char *guard = (const unsigned char *)&res[2];
    for (size_t i = 0; i < sizeof res[2]; i++) CU_ASSERT_EQUAL(guard[i], 0x5a);
    close_run(&r);
}

/* A residual block with dropout: `act` feeds both fc2 and the add, so its gradient is the sum
 * of two consumers' gradients (the core's accumulate path). */
static const char *residual_text(unsigned seed)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = %u\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\nmean = 0.2\nstd = 0.3\n"
             "[train]\nepochs = 4\nlr = 0.05\n[optimizer]\nmomentum = 0.9\n"
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n[act]\ntype = relu\n"
             "[fc2]\ntype = linear\noutputs = 16\n[res]\ntype = add\ninputs = act, fc2\n"
             "[drop]\ntype = dropout\np = 0.2\n[fc3]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             seed, dir, dir, dir, dir);
    return buf;
}

static void test_residual_dropout_model(void)
{
    make_data();
    struct run a, b;
    open_run(&a, residual_text(4));
    open_run(&b, residual_text(4));
    struct glia_epoch_result ra[4] = GLIA_TEST_RESULTS, rb[4] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, ra, 4), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(b.m, &quiet, rb, 4), GLIA_OK);
    CU_ASSERT(ra[3].train_loss < ra[0].train_loss);
    CU_ASSERT(ra[3].test_accuracy > 0.9);
    long long n;
    float *wa = weights(&a, &n), *wb = weights(&b, &n);
    CU_ASSERT_EQUAL(memcmp(wa, wb, (size_t)n * 4), 0);  /* dropout masks are seeded too */
    free(wa);
    free(wb);
    close_run(&a);
    close_run(&b);
}

/* The small MLP with extra [train] and [optimizer] lines and a batch size. */
static const char *variant(int epochs, int batch, const char *train_extra, const char *opt_extra)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 9\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = %d\nmean = 0.2\nstd = 0.3\n"
             "[train]\nepochs = %d\nlr = 0.05\n%s[optimizer]\n%s"
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n[act]\ntype = relu\n"
             "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir, batch, epochs, train_extra, opt_extra);
    return buf;
}

static void lr_per_epoch(const char *train_extra, int epochs, double *lr)
{
    struct run r;
    struct glia_epoch_result res[8] = GLIA_TEST_RESULTS;
    open_run(&r, variant(epochs, 32, train_extra, ""));
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, res, epochs), GLIA_OK);
    for (int e = 0; e < epochs; e++) lr[e] = res[e].lr;
    close_run(&r);
}

static void test_lr_schedules(void)
{
    make_data();
    double lr[8];
    lr_per_epoch("", 2, lr);
    CU_ASSERT_DOUBLE_EQUAL(lr[0], 0.05, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(lr[1], 0.05, 1e-12);
    lr_per_epoch("schedule = step\ngamma = 0.5\n", 3, lr);
    CU_ASSERT_DOUBLE_EQUAL(lr[0], 0.05, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(lr[1], 0.025, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(lr[2], 0.0125, 1e-12);
    lr_per_epoch("schedule = step\ngamma = 0.1\nstep_epochs = 2\n", 3, lr);
    CU_ASSERT_DOUBLE_EQUAL(lr[1], 0.05, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(lr[2], 0.005, 1e-12);
    lr_per_epoch("schedule = cosine\nmin_lr = 0.01\n", 4, lr);
    for (int e = 0; e < 4; e++)
        CU_ASSERT_DOUBLE_EQUAL(lr[e], 0.01 + 0.04 * 0.5 * (1 + cos(M_PI * e / 4.0)), 1e-12);
    /* warmup over 64 steps; 512 samples / 32 = 16 steps an epoch */
    lr_per_epoch("schedule = step\ngamma = 0.5\nwarmup_steps = 64\n", 2, lr);
    CU_ASSERT_DOUBLE_EQUAL(lr[0], 0.05 * 16 / 64, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(lr[1], 0.025 * 32 / 64, 1e-12);
}

static char *summary_of(const struct glia_model *m);

/* schedule = poly | linear: lr at optimizer step t (1-based) of T after a warmup of w steps, the formula of
 * docs/model.md written out again. */
static double poly_want(double lr, double min_lr, double power, int64_t w, int64_t T, int64_t t)
{
    if (t <= w) return lr * (double)t / (double)w;
    if (t > T) return min_lr;
    return (lr - min_lr) * pow(1.0 - (double)(t - w) / (double)(T - w), power) + min_lr;
}

/* variant(epochs, batch, train_extra) with [data] drop_last = on when drop_last (in variant's buffer). */
static const char *variant_drop(int epochs, int batch, const char *train_extra, bool drop_last)
{
    char *text = (char *)variant(epochs, batch, train_extra, ""), *at = strstr(text, "mean = 0.2\n");
    const char *add = "drop_last = on\n";
    if (drop_last && at && strlen(text) + strlen(add) < 4096) {
        memmove(at + strlen(add), at, strlen(at) + 1);
        memcpy(at, add, strlen(add));
    }
    return text;
}

/* The model of variant_drop(epochs, batch, train_extra, drop_last) built: its T and its lr at steps 1 .. 3T/2
 * against poly_want. */
static void poly_check(int epochs, int batch, const char *train_extra, bool drop_last, int64_t T, double min_lr,
                       double power, int64_t w)
{
    struct run r;
    open_run(&r, variant_drop(epochs, batch, train_extra, drop_last));
    CU_ASSERT_EQUAL(r.m->trainer.total_steps, T);
    for (int64_t t = 1; t <= T + T / 2; t++) {
        double got = glia__model_lr(r.m, 1 + (int)((t - 1) * epochs / T), t), want = poly_want(0.05, min_lr, power, w, T, t);
        if (fabs(got - want) > 1e-12) printf("\n  %s: step %lld: lr %.17g, want %.17g\n", train_extra, (long long)t, got, want);
        CU_ASSERT_DOUBLE_EQUAL(got, want, 1e-12);
    }
    close_run(&r);
}

/* poly and linear decay per optimizer step over T = epochs x the updates an epoch makes, the warmup their own first
 * part (transformers' get_polynomial_decay_schedule_with_warmup): chosen steps by hand, then every step of runs with
 * and without warmup, power 1 and 2, min_lr, accumulate and drop_last, and past T. */
static void test_lr_poly(void)
{
    make_data();
    struct run r;
    /* 512 samples / 32 = 16 steps an epoch, T = 32: linear to 0 */
    open_run(&r, variant(2, 32, "schedule = linear\n", ""));
    CU_ASSERT_EQUAL(r.m->trainer.total_steps, 32);
    CU_ASSERT_DOUBLE_EQUAL(glia__model_lr(r.m, 1, 1), 0.05 * 31 / 32, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(glia__model_lr(r.m, 1, 16), 0.025, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(glia__model_lr(r.m, 2, 32), 0.0, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(glia__model_lr(r.m, 2, 33), 0.0, 1e-15);
    char *sum = summary_of(r.m);
    CU_ASSERT_PTR_NOT_NULL(strstr(sum, "optimizer sgd, lr 0.05 (linear to 0 at step 32, warmup 0), 2 epochs"));
    free(sum);
    close_run(&r);
    /* power 2 to 0.01 after 8 warmup steps: up to 0.05 at step 8, half way through the decay at step 20 */
    open_run(&r, variant(2, 32, "schedule = poly\npower = 2\nmin_lr = 0.01\nwarmup_steps = 8\n", ""));
    CU_ASSERT_DOUBLE_EQUAL(glia__model_lr(r.m, 1, 1), 0.05 / 8, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(glia__model_lr(r.m, 1, 4), 0.025, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(glia__model_lr(r.m, 1, 8), 0.05, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(glia__model_lr(r.m, 2, 20), 0.01 + 0.04 * 0.25, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(glia__model_lr(r.m, 2, 32), 0.01, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(glia__model_lr(r.m, 2, 100), 0.01, 1e-15);
    close_run(&r);
    poly_check(2, 32, "schedule = linear\n", false, 32, 0, 1, 0);
    poly_check(3, 32, "schedule = linear\nwarmup_steps = 10\nmin_lr = 0.001\n", false, 48, 0.001, 1, 10);
    poly_check(2, 32, "schedule = poly\npower = 2\n", false, 32, 0, 2, 0);
    poly_check(2, 32, "schedule = poly\npower = 0.5\nwarmup_steps = 5\nmin_lr = 0.002\n", false, 32, 0.002, 0.5, 5);
    /* batch 40: 13 batches an epoch (12 with drop_last), in updates of 3: 5 (4) an epoch, the last of 1 (none) */
    poly_check(3, 40, "schedule = poly\npower = 2\naccumulate = 3\nwarmup_steps = 2\n", false, 15, 0, 2, 2);
    poly_check(3, 40, "schedule = poly\npower = 2\naccumulate = 3\nwarmup_steps = 2\n", true, 12, 0, 2, 2);
    poly_check(3, 40, "schedule = linear\ntotal_steps = 100\nwarmup_steps = 7\n", false, 100, 0, 1, 7);
    /* T's count of batches under ddp: each rank's padded shard of ceil(n / world) samples, the same on every rank */
    CU_ASSERT_EQUAL(glia__loader_batches(513, 32, false, 2, 0, true), 9);  /* 257 samples */
    CU_ASSERT_EQUAL(glia__loader_batches(513, 32, false, 2, 1, true), 9);
    CU_ASSERT_EQUAL(glia__loader_batches(513, 32, true, 2, 1, true), 8);
    CU_ASSERT_EQUAL(glia__loader_batches(513, 32, true, 1, 0, true), 16);
    /* a warmup as long as the run: warmup, then min_lr */
    poly_check(1, 32, "schedule = linear\nwarmup_steps = 20\nmin_lr = 0.003\n", false, 16, 0.003, 1, 20);
}

/* The lr training uses follows poly: each epoch's lr (its last update's) in the results and the metrics file, with
 * accumulate and drop_last, equals the formula at that step; the other schedules are not changed by the new keys'
 * defaults (test_lr_schedules). */
static void test_lr_poly_training(void)
{
    make_data();
    /* batch 40, drop_last, accumulate 3: 4 updates an epoch, T = 12 over 3 epochs, warmup 2 */
    const char *extra = "schedule = poly\npower = 2\nmin_lr = 0.001\naccumulate = 3\nwarmup_steps = 2\n"
                        "metrics = %s/poly.jsonl\n";
    char train[1024], path[600];
    snprintf(train, sizeof train, extra, dir);
    snprintf(path, sizeof path, "%s/poly.jsonl", dir);
    remove(path);
    struct run r;
    struct glia_epoch_result res[3] = GLIA_TEST_RESULTS;
    open_run(&r, variant_drop(3, 40, train, true));
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, res, 3), GLIA_OK);
    CU_ASSERT_EQUAL(r.m->trainer.step, 12);
    close_run(&r);
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[2048];
    int e = 0;
    while (fgets(line, sizeof line, f) && e < 3) {
        long long step;
        double lr;
        const char *p = strstr(line, "\"step\": ");
        CU_ASSERT_FATAL(p && sscanf(p, "\"step\": %lld, \"lr\": %lf", &step, &lr) == 2);
        double want = poly_want(0.05, 0.001, 2, 2, 12, 4 * (e + 1));
        CU_ASSERT_EQUAL(step, 4 * (e + 1));
        CU_ASSERT_DOUBLE_EQUAL(res[e].lr, want, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(lr, want, 1e-8);  /* written with 9 digits */
        e++;
    }
    fclose(f);
    CU_ASSERT_EQUAL(e, 3);
    CU_ASSERT_DOUBLE_EQUAL(res[2].lr, 0.001, 1e-15);  /* the last step, T, is at min_lr */
}

/* Bad poly/linear keys: one line naming the file, the line, [train] and the key. */
static void test_lr_poly_errors(void)
{
    make_data();
    /* variant's [train] extra lines start at line 15 */
    expect_build_error(variant(2, 32, "schedule = polynomial\n", ""),
                       "t.ini:15: [train] schedule: expected one of constant, step, cosine, poly, linear, got 'polynomial'");
    expect_build_error(variant(2, 32, "power = 2\nschedule = linear\n", ""),
                       "t.ini:15: [train] power: 'power' applies to schedule = poly, not linear (which is poly with power 1)");
    expect_build_error(variant(2, 32, "power = 2\n", ""), "t.ini:15: [train] power: 'power' applies to schedule = poly, not constant");
    expect_build_error(variant(2, 32, "schedule = cosine\ntotal_steps = 10\n", ""),
                       "t.ini:16: [train] total_steps: 'total_steps' applies to schedule = poly or linear, not cosine");
    expect_build_error(variant(2, 32, "schedule = poly\npower = -1\n", ""), "t.ini:16: [train] power:");
    expect_build_error(variant(2, 32, "schedule = poly\ntotal_steps = -3\n", ""), "t.ini:16: [train] total_steps:");
}

/* distance between the weights before and after one epoch */
static double weight_change(const char *text)
{
    struct run r;
    long long n;
    open_run(&r, text);
    float *w0 = weights(&r, &n);
    CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);
    float *w1 = weights(&r, &n);
    double d = 0;
    for (long long i = 0; i < n; i++) d += ((double)w1[i] - w0[i]) * ((double)w1[i] - w0[i]);
    free(w0);
    free(w1);
    close_run(&r);
    return sqrt(d);
}

static void test_clip_grad_norm(void)
{
    make_data();
    /* plain SGD: each of the 16 steps moves the weights by at most lr * max_norm */
    double clipped = weight_change(variant(1, 32, "clip_grad_norm = 0.001\n", "momentum = 0\n"));
    double free_ = weight_change(variant(1, 32, "", "momentum = 0\n"));
    CU_ASSERT(clipped <= 16 * 0.05 * 0.001 * 1.0001);
    CU_ASSERT(clipped > 0.5 * 16 * 0.05 * 0.001);
    CU_ASSERT(free_ > 10 * clipped);
}

static void test_gradient_accumulation(void)
{
    make_data();
    /* two micro-batches of 16 with averaged gradients = one batch of 32 */
    struct run a, b;
    long long n;
    open_run(&a, variant(1, 32, "", "momentum = 0.9\n"));
    open_run(&b, variant(1, 16, "accumulate = 2\n", "momentum = 0.9\n"));
    CU_ASSERT_EQUAL(glia_model_train(a.m, &quiet, NULL, 0), GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_train(b.m, &quiet, NULL, 0), GLIA_OK);
    float *wa = weights(&a, &n), *wb = weights(&b, &n);
    double maxd = 0;
    for (long long i = 0; i < n; i++) maxd = fmax(maxd, fabs((double)wa[i] - wb[i]));
    if (maxd > 1e-5) printf("\n  max difference %g\n", maxd);
    CU_ASSERT(maxd <= 1e-5);
    free(wa);
    free(wb);
    close_run(&a);
    close_run(&b);
    /* and without accumulation the batch of 16 trains differently (the check can fail) */
    open_run(&a, variant(1, 32, "", "momentum = 0.9\n"));
    open_run(&b, variant(1, 16, "", "momentum = 0.9\n"));
    CU_ASSERT_EQUAL(glia_model_train(a.m, &quiet, NULL, 0), GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_train(b.m, &quiet, NULL, 0), GLIA_OK);
    wa = weights(&a, &n);
    wb = weights(&b, &n);
    maxd = 0;
    for (long long i = 0; i < n; i++) maxd = fmax(maxd, fabs((double)wa[i] - wb[i]));
    CU_ASSERT(maxd > 1e-3);
    free(wa);
    free(wb);
    close_run(&a);
    close_run(&b);
}

static const char *bn_text(const char *graph, const char *extra_consumer)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 21\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\nmean = 0.2\nstd = 0.3\n"
             "[train]\nepochs = 2\nlr = 0.05\n[optimizer]\nmomentum = 0.9\n%s"
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n[bn]\ntype = batchnorm\n[act]\ntype = relu\n%s"
             "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir, graph, extra_consumer);
    return buf;
}

/* The drop_bias_before_norm pass: fc1 feeds only a batchnorm, so its bias goes; the trained
 * model is the same as with the (useless) bias, because the normalization removes it. */
static void test_drop_bias_before_norm(void)
{
    make_data();
    struct run a, b, c;
    open_run(&a, bn_text("", ""));
    open_run(&b, bn_text("[graph]\ndrop_bias_before_norm = off\n", ""));
    CU_ASSERT_EQUAL(glia_model_param_count(a.m), 36 * 16 + 2 * 16 + 16 * 5 + 5);
    CU_ASSERT_EQUAL(glia_model_param_count(b.m), 36 * 16 + 16 + 2 * 16 + 16 * 5 + 5);
    char *txt = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&txt, &len);
    glia_model_summary(a.m, f);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "graph pass drop_bias_before_norm: no bias in fc1 (its output goes only into bn, a batchnorm)"));
    free(txt);
    struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, ra, 2), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(b.m, &quiet, rb, 2), GLIA_OK);
    if (fabs(ra[1].test_loss - rb[1].test_loss) > 1e-3)
        printf("\n  test loss %g with the pass, %g without\n", ra[1].test_loss, rb[1].test_loss);
    CU_ASSERT(fabs(ra[1].test_loss - rb[1].test_loss) <= 1e-3);
    CU_ASSERT(fabs(ra[1].test_accuracy - rb[1].test_accuracy) <= 0.01);
    CU_ASSERT(ra[1].test_accuracy > 0.9);
    close_run(&a);
    close_run(&b);
    /* fc1 also feeding another layer keeps its bias */
    open_run(&c, bn_text("", "[side]\ntype = add\ninputs = fc1, act\n"));
    CU_ASSERT_EQUAL(glia_model_param_count(c.m), 36 * 16 + 16 + 2 * 16 + 16 * 5 + 5);
    close_run(&c);
}

static const char *ckpt_opt = "adam";  /* [train] optimizer of ckpt_text */

static const char *ckpt_text(const char *extra)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 31\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 24\nmean = 0.2\nstd = 0.3\nrandom_flip = on\n"
             "[train]\nepochs = 3\noptimizer = %s\nlr = 0.01\nschedule = cosine\naccumulate = 2\ncheckpoint_dir = %s/ck\n%s"
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n[bn]\ntype = batchnorm\n[act]\ntype = relu\n"
             "[drop]\ntype = dropout\np = 0.3\n[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir, ckpt_opt, dir, extra);
    return buf;
}

static void rm_ckpt(void)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/ck'", dir);
    CU_ASSERT(system(cmd) == 0);
}

/* text with its first `from` replaced by `to` (a static buffer). */
static const char *edited(const char *text, const char *from, const char *to)
{
    static char buf[4096];
    const char *at = strstr(text, from);
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    return buf;
}

/* Stop after `stop` optimizer steps, resume from the checkpoint, and compare everything with
 * the uninterrupted run: epoch losses, accuracies and final weights, bit for bit. */
static void resume_case(int stop)
{
    rm_ckpt();
    struct run a, b, c;
    struct glia_epoch_result ra[3] = GLIA_TEST_RESULTS, rc[3] = GLIA_TEST_RESULTS;
    long long n;
    open_run(&a, ckpt_text(""));
    CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, ra, 3), GLIA_OK);
    float *wa = weights(&a, &n);
    char extra[64], path[700];
    snprintf(extra, sizeof extra, "max_steps = %d\n", stop);
    open_run(&b, ckpt_text(extra));
    CU_ASSERT_EQUAL_FATAL(glia_model_train(b.m, &quiet, NULL, 0), GLIA_OK);
    close_run(&b);
    snprintf(path, sizeof path, "%s/ck/step-%08d.ckpt", dir, stop);
    open_run(&c, ckpt_text(""));
    struct glia_train_options o = {sizeof(struct glia_train_options), NULL, -1, NULL, path};
    memset(rc, 0, sizeof rc);
    rc[0].struct_size = sizeof rc[0];
    glia_status st = glia_model_train(c.m, &o, rc, 3);
    if (st) printf("\n  %s\n", glia_context_error(c.ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    float *wc = weights(&c, &n);
    CU_ASSERT_EQUAL(memcmp(wa, wc, (size_t)n * 4), 0);
    int first = stop / 11 + 1;  /* 512 samples / 24 = 22 batches = 11 steps an epoch */
    for (int e = first; e <= 3; e++) {
        CU_ASSERT_EQUAL(ra[e - 1].train_loss, rc[e - 1].train_loss);
        CU_ASSERT_EQUAL(ra[e - 1].test_loss, rc[e - 1].test_loss);
        CU_ASSERT_EQUAL(ra[e - 1].test_accuracy, rc[e - 1].test_accuracy);
    }
    free(wa);
    free(wc);
    close_run(&a);
    close_run(&c);
}

/* glia_model_request_stop before training: it stops at the first optimizer step (accumulate = 2:
 * after two batches), writes that step's checkpoint and says how to go on; resuming from it gives
 * the uninterrupted run bit for bit. The request is cleared on return. */
static void test_request_stop(void)
{
    make_data();
    rm_ckpt();
    struct run a, b, c;
    long long n;
    open_run(&a, ckpt_text(""));
    CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, NULL, 0), GLIA_OK);
    float *wa = weights(&a, &n);
    open_run(&b, ckpt_text(""));
    glia_model_request_stop(b.m);
    CU_ASSERT_EQUAL(glia_model_train(b.m, &quiet, NULL, 0), GLIA_EINTERRUPTED);
    char want[800], path[700];
    snprintf(path, sizeof path, "%s/ck/step-00000001.ckpt", dir);
    snprintf(want, sizeof want, "interrupted at step 1: continue with --resume %s", path);
    if (strcmp(glia_context_error(b.ctx), want)) printf("\n  got: %s\n", glia_context_error(b.ctx));
    CU_ASSERT_STRING_EQUAL(glia_context_error(b.ctx), want);
    close_run(&b);
    open_run(&c, ckpt_text(""));
    struct glia_train_options o = {sizeof(struct glia_train_options), NULL, -1, NULL, path};
    CU_ASSERT_EQUAL_FATAL(glia_model_train(c.m, &o, NULL, 0), GLIA_OK);
    float *wc = weights(&c, &n);
    CU_ASSERT_EQUAL(memcmp(wa, wc, (size_t)n * 4), 0);
    free(wa), free(wc);
    close_run(&a), close_run(&c);
    /* without a checkpoint_dir it says that nothing was saved; a request does not outlive its run */
    char text[4096], *cd;
    snprintf(text, sizeof text, "%s", ckpt_text(""));
    CU_ASSERT_PTR_NOT_NULL_FATAL(cd = strstr(text, "checkpoint_dir = "));
    memmove(cd, strchr(cd, '\n') + 1, strlen(strchr(cd, '\n') + 1) + 1);
    struct run d;
    open_run(&d, text);
    glia_model_request_stop(d.m);
    CU_ASSERT_EQUAL(glia_model_train(d.m, &quiet, NULL, 0), GLIA_EINTERRUPTED);
    CU_ASSERT_STRING_EQUAL(glia_context_error(d.ctx),
                           "interrupted at step 1: nothing was saved ([train] checkpoint_dir is not set)");
    CU_ASSERT_EQUAL(glia_model_train(d.m, &quiet, NULL, 0), GLIA_OK);
    close_run(&d);
}

static void test_resume_is_bit_exact(void)
{
    make_data();
    resume_case(5);   /* mid-epoch 1 */
    resume_case(11);  /* at the end of epoch 1, before its evaluation */
    resume_case(17);  /* mid-epoch 2 */
    ckpt_opt = "lamb";  /* per-tensor norms and trust ratios over the arena's segments, m and v in the checkpoint */
    resume_case(5);
    resume_case(17);
    ckpt_opt = "lars";  /* the momentum buffer */
    resume_case(5);
    ckpt_opt = "novograd";  /* each tensor's n in the first element of its part of state 1 */
    resume_case(5);
    resume_case(17);
    ckpt_opt = "adam";
}

static void expect_ckpt_error(const char *path, const char *text, glia_status want, const char *msg)
{
    struct run r;
    open_run(&r, text);
    struct glia_train_options o = {sizeof(struct glia_train_options), NULL, -1, NULL, path};
    CU_ASSERT_EQUAL(glia_model_train(r.m, &o, NULL, 0), want);
    if (!strstr(glia_context_error(r.ctx), msg)) printf("\n  got: %s\n", glia_context_error(r.ctx));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), msg));
    close_run(&r);
}

static void test_checkpoint_errors_and_eval(void)
{
    make_data();
    rm_ckpt();
    struct run r;
    struct glia_epoch_result res[3] = GLIA_TEST_RESULTS;
    open_run(&r, ckpt_text(""));
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, res, 3), GLIA_OK);
    close_run(&r);
    char final[700], cmd[2200], p[700];
    snprintf(final, sizeof final, "%s/ck/final.ckpt", dir);
    /* eval from the final checkpoint gives the last epoch's test result */
    open_run(&r, ckpt_text(""));
    double l, a;
    CU_ASSERT_EQUAL(glia_model_load_checkpoint(r.m, final), GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_evaluate(r.m, &l, &a), GLIA_OK);
    CU_ASSERT_EQUAL(l, res[2].test_loss);
    CU_ASSERT_EQUAL(a, res[2].test_accuracy);
    close_run(&r);
    /* no checkpoint_every: no step files, just final.ckpt, and no temporary files */
    snprintf(cmd, sizeof cmd, "test \"$(ls '%s/ck')\" = final.ckpt", dir);
    CU_ASSERT(system(cmd) == 0);
    /* truncated */
    snprintf(p, sizeof p, "%s/ck/trunc.ckpt", dir);
    snprintf(cmd, sizeof cmd, "head -c 1000 '%s' > '%s'", final, p);
    CU_ASSERT(system(cmd) == 0);
    expect_ckpt_error(p, ckpt_text(""), GLIA_EFORMAT, "trunc.ckpt: truncated checkpoint");
    /* one byte flipped in the payload */
    snprintf(p, sizeof p, "%s/ck/flip.ckpt", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && printf '\\377' | dd of='%s' bs=1 seek=500 conv=notrunc 2>/dev/null", final, p, p);
    CU_ASSERT(system(cmd) == 0);
    expect_ckpt_error(p, ckpt_text(""), GLIA_EFORMAT, "flip.ckpt: corrupt checkpoint (CRC mismatch)");
    /* foreign file */
    snprintf(p, sizeof p, "%s/ck/foreign.ckpt", dir);
    CU_ASSERT(glia_test_write(p, "PK\003\004 this is not a checkpoint at all, it is something else") == 0);
    expect_ckpt_error(p, ckpt_text(""), GLIA_EFORMAT, "foreign.ckpt: not a glia checkpoint");
    /* missing */
    snprintf(p, sizeof p, "%s/ck/missing.ckpt", dir);
    expect_ckpt_error(p, ckpt_text(""), GLIA_EIO, "cannot open checkpoint");
    /* another model: fc1 wider */
    char other[4096];
    snprintf(other, sizeof other, "%s", ckpt_text(""));
    char *w = strstr(other, "outputs = 16");
    CU_ASSERT_FATAL(w != NULL);
    memcpy(w, "outputs = 17", 12);
    expect_ckpt_error(final, other, GLIA_EINVAL, "checkpoint of another model");
    /* another optimizer */
    snprintf(other, sizeof other, "%s", ckpt_text(""));
    w = strstr(other, "optimizer = adam");
    memcpy(w, "optimizer = sgd\n", 16);
    expect_ckpt_error(final, other, GLIA_EINVAL, "checkpoint optimizer 'adam', the model's [train] optimizer is 'sgd'");
}

static void test_checkpoint_keep(void)
{
    make_data();
    rm_ckpt();
    struct run r;
    open_run(&r, ckpt_text("checkpoint_every = 3\ncheckpoint_keep = 2\n"));
    CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);
    close_run(&r);
    char cmd[900];  /* 33 steps: kept 30 and 33, plus final */
    snprintf(cmd, sizeof cmd, "test \"$(ls '%s/ck' | tr '\\n' ' ')\" = 'final.ckpt step-00000030.ckpt step-00000033.ckpt '", dir);
    CU_ASSERT(system(cmd) == 0);
}

/* ---- the fp16 loss scaler in checkpoints ----
 * The CPU computes in fp32 only, so these runs switch the model's loss scaling on by hand
 * (m->precision = fp16 is all that precision = fp16 adds to a training step besides the math). */

static void scale_loss(struct run *r, struct glia__scaler s)
{
    r->m->precision = GLIA_PRECISION_FP16;
    r->m->trainer.scaler = s;
}

static bool scaler_is(const struct glia__scaler *s, double scale, int64_t clean, int64_t skipped)
{
    if (s->scale == scale && s->clean == clean && s->skipped == skipped) return true;
    printf("\n  loss scaler %g, %lld clean, %lld skipped; want %g, %lld, %lld\n", s->scale, (long long)s->clean,
           (long long)s->skipped, scale, (long long)clean, (long long)skipped);
    return false;
}

/* A run stopped after 17 steps and resumed goes on with the scaler where it was (1024 with 1990
 * clean steps and 3 skipped at the start: doubled at step 10), not at a fresh 65536, and ends
 * where the uninterrupted run does: scale, counts, epoch results and weights. */
static void test_resume_keeps_loss_scaler(void)
{
    make_data();
    rm_ckpt();
    const struct glia__scaler start = {1024.0, 1990, 3}, fresh = {65536.0, 0, 0};
    struct run a, b, c;
    struct glia_epoch_result ra[3] = GLIA_TEST_RESULTS, rc[3] = GLIA_TEST_RESULTS;
    long long n;
    open_run(&a, ckpt_text(""));
    scale_loss(&a, start);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, ra, 3), GLIA_OK);
    CU_ASSERT(scaler_is(&a.m->trainer.scaler, 2048.0, 23, 3));  /* 33 steps */
    open_run(&b, ckpt_text("max_steps = 17\n"));
    scale_loss(&b, start);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(b.m, &quiet, NULL, 0), GLIA_OK);
    CU_ASSERT(scaler_is(&b.m->trainer.scaler, 2048.0, 7, 3));
    close_run(&b);
    char path[700];
    snprintf(path, sizeof path, "%s/ck/step-00000017.ckpt", dir);
    open_run(&c, ckpt_text(""));
    scale_loss(&c, fresh);
    struct glia_train_options o = {sizeof(struct glia_train_options), NULL, -1, NULL, path};
    glia_status st = glia_model_train(c.m, &o, rc, 3);
    if (st) printf("\n  %s\n", glia_context_error(c.ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    CU_ASSERT(scaler_is(&c.m->trainer.scaler, 2048.0, 23, 3));
    for (int e = 2; e <= 3; e++) {
        CU_ASSERT_EQUAL(rc[e - 1].loss_scale, ra[e - 1].loss_scale);
        CU_ASSERT_EQUAL(rc[e - 1].skipped_steps, ra[e - 1].skipped_steps);
        CU_ASSERT_EQUAL(rc[e - 1].train_loss, ra[e - 1].train_loss);
    }
    float *wa = weights(&a, &n), *wc = weights(&c, &n);
    CU_ASSERT_EQUAL(memcmp(wa, wc, (size_t)n * 4), 0);  /* the loss was scaled by the restored scale */
    free(wa);
    free(wc);
    close_run(&a);
    close_run(&c);
}

/* CRC-32 (zlib's) of n bytes. */
static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

/* Sets a version 3 header's CRC (bytes 28-31: CRC-32 of the other 36 header bytes). */
static void fix_header_crc(unsigned char *h)
{
    unsigned char t[36];
    memcpy(t, h, 28);
    memcpy(t + 28, h + 32, 8);
    uint32_t c = crc32_of(t, sizeof t);
    memcpy(h + 28, &c, 4);
}

/* The file at path (*n bytes), malloc'ed. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    unsigned char *b = malloc(*n);
    CU_ASSERT_FATAL(b && fread(b, 1, *n, f) == *n);
    fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_FATAL(fwrite(b, 1, n, f) == n);
    fclose(f);
}

/* Saved and loaded directly: the scaler comes back only into a run that scales its loss, from a
 * run that did; a version 2 file (no header CRC) and a version 1 file (no scaler either) still
 * load, the latter leaving the scaler as it starts; a newer version is refused. */
static void test_checkpoint_loss_scaler(void)
{
    make_data();
    rm_ckpt();
    char cmd[700], p16[700], p32[700], pv1[700], pv2[700], pv4[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/ck'", dir);
    CU_ASSERT_FATAL(system(cmd) == 0);
    snprintf(p16, sizeof p16, "%s/ck/fp16.ckpt", dir);
    snprintf(p32, sizeof p32, "%s/ck/fp32.ckpt", dir);
    snprintf(pv1, sizeof pv1, "%s/ck/v1.ckpt", dir);
    snprintf(pv2, sizeof pv2, "%s/ck/v2.ckpt", dir);
    snprintf(pv4, sizeof pv4, "%s/ck/v4.ckpt", dir);
    const struct glia__scaler saved = {512.0, 37, 5}, fresh = {65536.0, 0, 0};
    struct run r;
    struct glia__resume rs;
    open_run(&r, ckpt_text(""));
    scale_loss(&r, saved);
    r.m->trainer.step = 42;
    float *wm = glia_tensor_f32(r.m->params.w);  /* weights no fresh model has */
    for (int t = 0; t < r.m->params.wa.count; t++)
        for (int64_t i = r.m->params.wa.off[t]; i < r.m->params.wa.off[t] + r.m->params.wa.size[t]; i++) wm[i] = 0.25f * wm[i] + 0.001f * (float)(i % 7);
    CU_ASSERT_EQUAL_FATAL(glia__checkpoint_save(r.m, p16, 2, 6, 1.5, 144), GLIA_OK);
    r.m->precision = GLIA_PRECISION_FP32;
    CU_ASSERT_EQUAL_FATAL(glia__checkpoint_save(r.m, p32, 2, 6, 1.5, 144), GLIA_OK);
    long long n;
    float *w0 = weights(&r, &n);
    close_run(&r);
    /* fp16 -> fp16: restored, with the training position */
    open_run(&r, ckpt_text(""));
    scale_loss(&r, fresh);
    CU_ASSERT_EQUAL(glia__checkpoint_load(r.m, p16, true, &rs), GLIA_OK);
    CU_ASSERT(scaler_is(&r.m->trainer.scaler, 512.0, 37, 5));
    CU_ASSERT(r.m->trainer.step == 42 && rs.epoch == 2 && rs.batch == 6 && rs.loss_sum == 1.5 && rs.samples == 144);
    close_run(&r);
    /* fp16 -> fp32 run, and fp32 -> fp16 run: each keeps its own start */
    open_run(&r, ckpt_text(""));
    CU_ASSERT_EQUAL(glia__checkpoint_load(r.m, p16, true, &rs), GLIA_OK);
    CU_ASSERT(scaler_is(&r.m->trainer.scaler, 1.0, 0, 0));
    close_run(&r);
    open_run(&r, ckpt_text(""));
    scale_loss(&r, fresh);
    CU_ASSERT_EQUAL(glia__checkpoint_load(r.m, p32, true, &rs), GLIA_OK);
    CU_ASSERT(scaler_is(&r.m->trainer.scaler, 65536.0, 0, 0));
    close_run(&r);
    /* version 2: the same file with bytes 28-31 zero (a header CRC there is refused) */
    size_t len;
    unsigned char *b = slurp(p16, &len);
    const size_t header = 40, meta = 104, rec = 32;
    CU_ASSERT_FATAL(len > header + meta + rec);
    uint32_t v = 3, crc, zero = 0;
    uint64_t payload;
    CU_ASSERT_EQUAL(memcmp(b + 8, &v, 4), 0);
    v = 2;
    memcpy(b + 8, &v, 4);
    spit(pv2, b, len);
    expect_ckpt_error(pv2, ckpt_text(""), GLIA_EFORMAT, "v2.ckpt: corrupt checkpoint header (version 2, but bytes 28-31 are not zero)");
    memcpy(b + 28, &zero, 4);
    spit(pv2, b, len);
    open_run(&r, ckpt_text(""));
    scale_loss(&r, fresh);
    CU_ASSERT_EQUAL(glia__checkpoint_load(r.m, pv2, true, &rs), GLIA_OK);
    CU_ASSERT(scaler_is(&r.m->trainer.scaler, 512.0, 37, 5));
    CU_ASSERT(r.m->trainer.step == 42 && rs.epoch == 2 && rs.batch == 6 && rs.samples == 144);
    close_run(&r);
    /* version 1: version 2 without the 32 scaler bytes after the 104 of the position */
    memmove(b + header + meta, b + header + meta + rec, len - header - meta - rec);
    len -= rec;
    v = 1;
    payload = len - header;
    crc = crc32_of(b + header, payload);
    memcpy(b + 8, &v, 4);
    memcpy(b + 16, &payload, 8);
    memcpy(b + 24, &crc, 4);
    spit(pv1, b, len);
    /* a newer version, its header whole */
    v = 4;
    memcpy(b + 8, &v, 4);
    fix_header_crc(b);
    spit(pv4, b, len);
    free(b);
    open_run(&r, ckpt_text(""));
    scale_loss(&r, fresh);
    glia_status st = glia__checkpoint_load(r.m, pv1, true, &rs);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(scaler_is(&r.m->trainer.scaler, 65536.0, 0, 0));
    CU_ASSERT(r.m->trainer.step == 42 && rs.epoch == 2 && rs.batch == 6 && rs.samples == 144);
    float *w1 = weights(&r, &n);
    CU_ASSERT_EQUAL(memcmp(w0, w1, (size_t)n * 4), 0);
    free(w1);
    close_run(&r);
    expect_ckpt_error(pv4, ckpt_text(""), GLIA_EFORMAT, "v4.ckpt: checkpoint format version 4, this glia reads versions 1 to 3");
    free(w0);
}

/* Writes b (len bytes) to path with value v (n bytes) at payload offset off, the CRCs fixed. */
static void spit_patched(const char *path, const unsigned char *b, size_t len, size_t off, const void *v, size_t n)
{
    const size_t header = 40;
    unsigned char *c = malloc(len);
    CU_ASSERT_FATAL(c != NULL);
    memcpy(c, b, len);
    memcpy(c + header + off, v, n);
    uint32_t crc = crc32_of(c + header, len - header);
    memcpy(c + 24, &crc, 4);
    fix_header_crc(c);
    spit(path, c, len);
    free(c);
}

/* Checkpoints that are whole (their CRC matches) but hold what no run writes: a payload size
 * beyond the file is refused before it is allocated, and a training position or loss scaler
 * out of range before a resumed run uses it (a negative batch indexed the data order before
 * it, a very negative epoch ran for ever). */
static void test_checkpoint_corrupt_fields(void)
{
    make_data();
    rm_ckpt();
    char cmd[700], p[700], bad[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/ck'", dir);
    CU_ASSERT_FATAL(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/ck/pos.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/ck/bad.ckpt", dir);
    struct run r;
    open_run(&r, ckpt_text(""));
    scale_loss(&r, (struct glia__scaler){512.0, 37, 5});
    r.m->trainer.step = 42;
    CU_ASSERT_EQUAL_FATAL(glia__checkpoint_save(r.m, p, 2, 6, 1.5, 144), GLIA_OK);
    size_t len;
    unsigned char *b = slurp(p, &len);
    /* the header's payload size: 512 GiB, in a file of a few KiB (the header's CRC matching) */
    uint64_t huge = (uint64_t)1 << 39;
    memcpy(cmd, b, 40);
    memcpy(b + 16, &huge, 8);
    fix_header_crc(b);
    spit(bad, b, len);
    memcpy(b, cmd, 40);
    char want[200];
    snprintf(want, sizeof want, "bad.ckpt: truncated checkpoint (549755813888 payload bytes expected, %zu present)", len - 40);
    CU_ASSERT_EQUAL(glia_model_load_checkpoint(r.m, bad), GLIA_EFORMAT);
    if (!strstr(glia_context_error(r.ctx), want)) printf("\n  got: %s\n", glia_context_error(r.ctx));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), want));
    close_run(&r);
    expect_ckpt_error(bad, ckpt_text(""), GLIA_EFORMAT, want);
    /* the position (payload offsets: step 56, epoch 64, batch 72, samples 96) */
    int64_t neg = -5, big = INT64_MAX;
    int32_t epoch = INT32_MIN + 1;
    spit_patched(bad, b, len, 72, &neg, 8);
    expect_ckpt_error(bad, ckpt_text(""), GLIA_EFORMAT, "bad.ckpt: corrupt checkpoint (epoch 2, batch -5, samples 144, step 42)");
    spit_patched(bad, b, len, 64, &epoch, 4);
    expect_ckpt_error(bad, ckpt_text(""), GLIA_EFORMAT, "bad.ckpt: corrupt checkpoint (epoch -2147483647, batch 6,");
    spit_patched(bad, b, len, 96, &neg, 8);
    expect_ckpt_error(bad, ckpt_text(""), GLIA_EFORMAT, "samples -5, step 42)");
    spit_patched(bad, b, len, 56, &big, 8);
    expect_ckpt_error(bad, ckpt_text(""), GLIA_EFORMAT, "step 9223372036854775807)");
    /* the loss scaler (offset 104) of a run that scaled its loss */
    double scale = -1;
    spit_patched(bad, b, len, 104, &scale, 8);
    expect_ckpt_error(bad, ckpt_text(""), GLIA_EFORMAT, "bad.ckpt: corrupt checkpoint (loss scale -1, 37 clean and 5 skipped steps)");
    scale = NAN;
    spit_patched(bad, b, len, 104, &scale, 8);
    expect_ckpt_error(bad, ckpt_text(""), GLIA_EFORMAT, "bad.ckpt: corrupt checkpoint (loss scale nan,");
    /* unpatched, it resumes */
    struct run c;
    open_run(&c, ckpt_text(""));
    struct glia_train_options o = {sizeof(struct glia_train_options), NULL, -1, NULL, p};
    CU_ASSERT_EQUAL(glia_model_train(c.m, &o, NULL, 0), GLIA_OK);
    close_run(&c);
    free(b);
}

/* Every header byte is checked (format version 3 gives the header a CRC of its own): any one bit
 * flipped in the 40 is refused, in the signature as not a checkpoint, elsewhere as a corrupt
 * header, before its payload size or fingerprint is believed (bytes 28-31 were not read at all,
 * and a flipped fingerprint read as another model's). */
static void test_checkpoint_header_bits(void)
{
    make_data();
    rm_ckpt();
    char cmd[700], p[700], bad[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/ck'", dir);
    CU_ASSERT_FATAL(system(cmd) == 0);
    snprintf(p, sizeof p, "%s/ck/h.ckpt", dir);
    snprintf(bad, sizeof bad, "%s/ck/hbad.ckpt", dir);
    struct run r;
    open_run(&r, ckpt_text(""));
    CU_ASSERT_EQUAL_FATAL(glia__checkpoint_save(r.m, p, 2, 6, 1.5, 144), GLIA_OK);
    size_t len;
    unsigned char *b = slurp(p, &len);
    int missed = 0;
    for (int byte = 0; byte < 40; byte++)
        for (int bit = 0; bit < 8; bit++) {
            b[byte] ^= (unsigned char)(1u << bit);
            spit(bad, b, len);
            b[byte] ^= (unsigned char)(1u << bit);
            glia_status st = glia_model_load_checkpoint(r.m, bad);
            const char *want = byte < 8 ? "hbad.ckpt: not a glia checkpoint" : "hbad.ckpt: corrupt checkpoint header";
            if (st != GLIA_EFORMAT || !strstr(glia_context_error(r.ctx), want)) {
                if (!missed++) printf("\n  byte %d bit %d: %s (%s)\n", byte, bit, glia_strerror(st), glia_context_error(r.ctx));
            }
        }
    CU_ASSERT_EQUAL(missed, 0);
    CU_ASSERT_EQUAL(glia_model_load_checkpoint(r.m, p), GLIA_OK);
    close_run(&r);
    /* resuming says the same: the fingerprint's first byte */
    b[32] ^= 1;
    spit(bad, b, len);
    expect_ckpt_error(bad, ckpt_text(""), GLIA_EFORMAT, "hbad.ckpt: corrupt checkpoint header (CRC mismatch)");
    free(b);
}

/* A checkpoint_dir whose parent folders do not exist is made with them; one that cannot be
 * written is refused, naming the key and the folder, before the first step (it was found when
 * final.ckpt was written, after the whole run). */
static void test_checkpoint_dir_made(void)
{
    make_data();
    rm_ckpt();
    char ck[700], file[800], want[1000];
    snprintf(ck, sizeof ck, "%s/ck/a/b", dir);
    struct run r;
    open_run(&r, edited(ckpt_text("max_steps = 3\n"), "/ck\n", "/ck/a/b\n"));
    glia_status st = glia_model_train(r.m, &quiet, NULL, 0);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    close_run(&r);
    snprintf(file, sizeof file, "%s/step-00000003.ckpt", ck);
    CU_ASSERT_EQUAL(access(file, R_OK), 0);
    /* a regular file where a folder should be */
    snprintf(file, sizeof file, "%s/ck/a/file", dir);
    CU_ASSERT_FATAL(glia_test_write(file, "not a folder\n") == 0);
    open_run(&r, edited(ckpt_text(""), "/ck\n", "/ck/a/file/sub\n"));
    CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_EIO);
    snprintf(want, sizeof want, "t.ini:19: [train] checkpoint_dir: cannot write checkpoints into %s/sub: Not a directory", file);
    if (strcmp(glia_context_error(r.ctx), want)) printf("\n  got: %s\n", glia_context_error(r.ctx));
    CU_ASSERT_STRING_EQUAL(glia_context_error(r.ctx), want);
    CU_ASSERT_EQUAL(r.m->trainer.step, 0);  /* not one step was trained */
    close_run(&r);
}

/* checkpoint_keep keeps the folder's newest step files whoever wrote them (a resumed run left the
 * stopped run's: they piled up); a later step's file stays. Temporaries that a killed glia of
 * this host left are removed (also one of this process's number, from an earlier run); those of
 * live processes and of other hosts stay, and so do recent ones of the name without a host. */
static void test_checkpoint_sweep(void)
{
    make_data();
    rm_ckpt();
    const char *every = "checkpoint_every = 3\ncheckpoint_keep = 2\n";
    char extra[200], path[1200];
    snprintf(extra, sizeof extra, "%smax_steps = 17\n", every);
    struct run r;
    open_run(&r, ckpt_text(extra));
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);  /* step-15, step-17 */
    close_run(&r);
    pid_t dead = fork();  /* a process that is gone */
    CU_ASSERT_FATAL(dead >= 0);
    if (!dead) _exit(0);
    CU_ASSERT_FATAL(waitpid(dead, NULL, 0) == dead);
    struct {
        char name[300];
        bool stays;
    } f[7] = {{"", false}, {"", true}, {"", true}, {"", false}, {"", true}, {"step-00000099.ckpt", true}, {"", false}};
    snprintf(path, sizeof path, "%s/ck/step-00000016.ckpt", dir);
    char *mine = glia__checkpoint_tmp_name(path, (long)dead), *live = glia__checkpoint_tmp_name(path, (long)getppid()),
         *own = glia__checkpoint_tmp_name(path, (long)getpid());
    CU_ASSERT_FATAL(mine && live && own);
    char tail[32];
    snprintf(tail, sizeof tail, ".%ld", (long)dead);
    CU_ASSERT_PTR_NOT_NULL(strstr(mine, ".ckpt.tmp."));  /* <path>.tmp.<host>.<pid> */
    CU_ASSERT_STRING_EQUAL(mine + strlen(mine) - strlen(tail), tail);
    snprintf(f[0].name, sizeof f[0].name, "%s", strrchr(mine, '/') + 1);
    snprintf(f[1].name, sizeof f[1].name, "%s", strrchr(live, '/') + 1);
    snprintf(f[2].name, sizeof f[2].name, "step-00000016.ckpt.tmp.glia-test-other-host.%ld", (long)dead);
    snprintf(f[3].name, sizeof f[3].name, "step-00000014.ckpt.tmp%ld", (long)dead);  /* two days old */
    snprintf(f[4].name, sizeof f[4].name, "step-00000013.ckpt.tmp%ld", (long)dead);
    snprintf(f[6].name, sizeof f[6].name, "%s", strrchr(own, '/') + 1);  /* an earlier process of this number */
    free(mine);
    free(live);
    free(own);
    for (int i = 0; i < 7; i++) {
        snprintf(path, sizeof path, "%s/ck/%.299s", dir, f[i].name);
        CU_ASSERT_FATAL(glia_test_write(path, "x") == 0);
        if (i == 3) {
            struct timespec t[2] = {{time(NULL) - 2 * 86400, 0}, {time(NULL) - 2 * 86400, 0}};
            CU_ASSERT_FATAL(utimensat(AT_FDCWD, path, t, 0) == 0);
        }
    }
    snprintf(path, sizeof path, "%s/ck/step-00000017.ckpt", dir);
    open_run(&r, ckpt_text(every));
    struct glia_train_options o = {sizeof(struct glia_train_options), NULL, -1, NULL, path};
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &o, NULL, 0), GLIA_OK);  /* on to step 33 */
    close_run(&r);
    static const char *const steps[] = {"15", "17", "27", "30", "33"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/ck/step-000000%s.ckpt", dir, steps[i]);
        if ((access(path, F_OK) == 0) != (i >= 3)) printf("\n  %s %s\n", path, i >= 3 ? "missing" : "kept");
        CU_ASSERT((access(path, F_OK) == 0) == (i >= 3));
    }
    for (int i = 0; i < 7; i++) {
        snprintf(path, sizeof path, "%s/ck/%.299s", dir, f[i].name);
        if ((access(path, F_OK) == 0) != f[i].stays) printf("\n  %s %s\n", path, f[i].stays ? "removed" : "kept");
        CU_ASSERT((access(path, F_OK) == 0) == f[i].stays);
    }
}

/* What glia_model_train printed (progress 0) resuming from ckpt with the model of text; its
 * status in *st. Malloc'ed. */
static char *resume_output(const char *text, const char *ckpt, struct glia_epoch_result *res, glia_status *st)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    struct run r;
    open_run(&r, text);
    struct glia_train_options o = {sizeof(struct glia_train_options), NULL, 0, f, ckpt};
    *st = glia_model_train(r.m, &o, res, 3);
    if (*st) printf("\n  %s\n", glia_context_error(r.ctx));
    close_run(&r);
    fclose(f);
    return out;
}

/* Resuming a run that the settings leave nothing to do (--set train.epochs=1 on an epoch-2
 * checkpoint; the end of its epochs or max_steps reached) says so in one line and trains,
 * evaluates, prints and writes nothing: it printed "done: 1 epochs ... test_accuracy 0.0000" and
 * wrote a final.ckpt. Also: max_steps without checkpoint_dir says that nothing was saved. */
static void test_resume_nothing_left(void)
{
    make_data();
    rm_ckpt();
    struct run r;
    open_run(&r, ckpt_text(""));
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);  /* final.ckpt: step 33 */
    close_run(&r);
    open_run(&r, ckpt_text("max_steps = 17\n"));  /* step-00000017.ckpt: in epoch 2 */
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);
    close_run(&r);
    char final[700], step[700], text[4096], want[1000];
    snprintf(final, sizeof final, "%s/ck/final.ckpt", dir);
    snprintf(step, sizeof step, "%s/ck/step-00000017.ckpt", dir);
    size_t n0, n1;
    unsigned char *before = slurp(final, &n0);
    struct {
        const char *ckpt, *from, *to, *says;
    } c[] = {
        {final, "epochs = 3", "epochs = 2", "is at step 33, after epoch 3, and [train] epochs = 2"},
        {final, "epochs = 3", "epochs = 3", "is at step 33, after epoch 3, and [train] epochs = 3"},
        {step, "epochs = 3", "epochs = 1", "is at step 17, in epoch 2, past [train] epochs = 1"},
        {step, "epochs = 3", "epochs = 3\nmax_steps = 17", "is at step 17, [train] max_steps = 17"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        snprintf(text, sizeof text, "%s", edited(ckpt_text(""), c[i].from, c[i].to));
        struct glia_epoch_result res[3] = {{.struct_size = sizeof(struct glia_epoch_result), .epoch = -7}};
        glia_status st;
        char *out = resume_output(text, c[i].ckpt, res, &st);
        snprintf(want, sizeof want, "nothing to do: %s %s (raise it to train on)\n", c[i].ckpt, c[i].says);
        if (strcmp(out, want)) printf("\n  got: %s", out);
        CU_ASSERT_EQUAL(st, GLIA_OK);
        CU_ASSERT_STRING_EQUAL(out, want);
        CU_ASSERT_EQUAL(res[0].epoch, -7);  /* no results: none was made */
        free(out);
    }
    unsigned char *after = slurp(final, &n1);  /* final.ckpt was not written again */
    CU_ASSERT(n0 == n1 && !memcmp(before, after, n0));
    free(before);
    free(after);
    snprintf(step, sizeof step, "%s/ck/step-00000018.ckpt", dir);
    CU_ASSERT_NOT_EQUAL(access(step, F_OK), 0);
    /* max_steps without checkpoint_dir: nothing to resume from */
    snprintf(text, sizeof text, "%s", ckpt_text("max_steps = 5\n"));
    char *cd = strstr(text, "checkpoint_dir = ");
    memmove(cd, strchr(cd, '\n') + 1, strlen(strchr(cd, '\n') + 1) + 1);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    open_run(&r, text);
    struct glia_train_options o = {sizeof(struct glia_train_options), NULL, 0, f, NULL};
    CU_ASSERT_EQUAL(glia_model_train(r.m, &o, NULL, 0), GLIA_OK);
    close_run(&r);
    fclose(f);
    const char *said = "stopped at max_steps = 5 (epoch 1); nothing was saved ([train] checkpoint_dir is not set)\n";
    if (strcmp(out, said)) printf("\n  got: %s", out);
    CU_ASSERT_STRING_EQUAL(out, said);
    free(out);
}

/* share/glia/examples/fmnist-resnet-large-batch.ini builds (what glia check does) with `sets` on the CPU, and its
 * summary holds `want`. */
static void large_batch_example(const char *const *sets, const char *want)
{
    struct run r;
    CU_ASSERT_FATAL(glia_context_new(&r.ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_load(r.ctx, glia_test_src("share/glia/examples/fmnist-resnet-large-batch.ini"), &r.cfg) == GLIA_OK);
    CU_ASSERT(glia_config_set(r.cfg, "runtime.device=cpu") == GLIA_OK);
    for (int i = 0; sets[i]; i++) CU_ASSERT(glia_config_set(r.cfg, sets[i]) == GLIA_OK);
    glia_status st = glia_model_build(r.ctx, r.cfg, &r.m);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_EQUAL(r.m->data.batch, 4096);
    CU_ASSERT_STRING_EQUAL(r.m->trainer.opt.type->name, "lamb");
    char *sum = summary_of(r.m);
    if (!strstr(sum, want)) printf("\n  summary has no '%s':\n%s", want, sum);
    CU_ASSERT_PTR_NOT_NULL(strstr(sum, want));
    free(sum);
    close_run(&r);
}

/* The large-batch example: batch 4096, poly decay after two epochs of warmup, lamb; on IDX files of 9000 28x28
 * samples (2 steps an epoch with drop_last, T = 20), and on Fashion-MNIST when it is installed (14 steps an epoch,
 * T = 140). */
static void test_large_batch_example(void)
{
    char d[512], a[4][600];
    CU_ASSERT_FATAL(glia_test_idx_set(d, sizeof d, "large-batch", 9000, 100, 28, 10, 3) == 0);
    const char *files[4] = {"tri", "trl", "tei", "tel"}, *keys[4] = {"train_images", "train_labels", "test_images", "test_labels"};
    for (int i = 0; i < 4; i++) snprintf(a[i], sizeof a[i], "data.%s=%s/%s", keys[i], d, files[i]);
    const char *small[] = {a[0], a[1], a[2], a[3], NULL};
    large_batch_example(small, "optimizer lamb, lr 0.04 (poly power 2 to 0 at step 20, warmup 28), 10 epochs");
    FILE *f = fopen("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", "rb");
    if (!f) {
        printf("(Fashion-MNIST not installed: apt-get install dataset-fashion-mnist) ");
        return;
    }
    fclose(f);
    const char *none[] = {NULL};
    large_batch_example(none, "60000 training samples, 10000 test samples, 28x28, 10 classes; optimizer lamb, lr 0.04 "
                              "(poly power 2 to 0 at step 140, warmup 28), 10 epochs");
}

static void test_fashion_mnist_subset(void)
{
    const char *d = "/usr/share/datasets/fashion-mnist";
    char probe[256];
    snprintf(probe, sizeof probe, "%s/train-images-idx3-ubyte.gz", d);
    FILE *f = fopen(probe, "rb");
    if (!f) {
        printf("(Fashion-MNIST not installed: apt-get install dataset-fashion-mnist) ");
        return;
    }
    fclose(f);
    struct run r;
    CU_ASSERT_FATAL(glia_context_new(&r.ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_load(r.ctx, glia_test_src("share/glia/examples/fmnist-mlp.ini"), &r.cfg) == GLIA_OK);
    CU_ASSERT(glia_config_set(r.cfg, "data.train_samples=6000") == GLIA_OK);
    CU_ASSERT(glia_config_set(r.cfg, "data.test_samples=2000") == GLIA_OK);
    CU_ASSERT(glia_config_set(r.cfg, "train.epochs=1") == GLIA_OK);
    CU_ASSERT(glia_config_set(r.cfg, "runtime.device=cpu") == GLIA_OK);
    glia_status st = glia_model_build(r.ctx, r.cfg, &r.m);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    struct glia_epoch_result res[1] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, res, 1), GLIA_OK);
    printf("(test_accuracy %.4f after 6000 samples) ", res[0].test_accuracy);
    CU_ASSERT(res[0].test_accuracy > 0.70);
    CU_ASSERT(res[0].train_loss < 1.0);
    close_run(&r);
}

/* fp16 loss scaling: 2000 clean steps double the scale, a non-finite gradient halves it and skips
 * the step, and the count of clean steps starts again after either. */
static void test_loss_scaler(void)
{
    struct glia__scaler s = {65536.0, 0, 0};
    for (int i = 0; i < 1999; i++) CU_ASSERT_TRUE(glia__scaler_update(&s, 1.0 + i));
    CU_ASSERT_EQUAL(s.scale, 65536.0);
    CU_ASSERT_TRUE(glia__scaler_update(&s, 0.0));
    CU_ASSERT_EQUAL(s.scale, 131072.0);
    CU_ASSERT_EQUAL(s.clean, 0);
    CU_ASSERT_FALSE(glia__scaler_update(&s, INFINITY));
    CU_ASSERT_FALSE(glia__scaler_update(&s, NAN));
    CU_ASSERT_EQUAL(s.scale, 32768.0);
    CU_ASSERT_EQUAL(s.skipped, 2);
    for (int i = 0; i < 1999; i++) glia__scaler_update(&s, 1.0);
    CU_ASSERT_FALSE(glia__scaler_update(&s, -NAN));  /* a skip resets the clean run */
    for (int i = 0; i < 1999; i++) glia__scaler_update(&s, 1.0);
    CU_ASSERT_EQUAL(s.scale, 16384.0);
    CU_ASSERT_TRUE(glia__scaler_update(&s, 1.0));
    CU_ASSERT_EQUAL(s.scale, 32768.0);
    CU_ASSERT_EQUAL(s.skipped, 3);
}

/* precision other than fp32 is refused on the CPU, naming the key. */
static void test_precision_needs_cuda(void)
{
    make_data();
    struct glia_context *c;
    struct glia_config *cfg;
    struct glia_model *m = NULL;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_parse_string(c, "t.ini", model_text(1, 1), &cfg) == GLIA_OK);
    CU_ASSERT(glia_config_set(cfg, "runtime.precision=bf16") == GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_build(c, cfg, &m), GLIA_EUNSUPPORTED);
    const char *e = glia_context_error(c);
    if (!strstr(e, "[runtime] precision: precision bf16 needs a CUDA device")) printf("\n  got: %s\n", e);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "[runtime] precision: precision bf16 needs a CUDA device"));
    glia_model_free(m);
    glia_config_free(cfg);
    glia_context_free(c);
}

/* glia_model_profile_trace: the Chrome trace has, for each counted step, the step, the input, every
 * layer's forward, the backward of every layer whose backward runs (not the flatten before the
 * first layer with parameters: nothing needs its input gradient) and the optimizer, inside the
 * step; a layer name with a quote and a backslash comes out escaped. */
static void test_profile_trace(void)
{
    make_data();
    char text[4096];
    snprintf(text, sizeof text,
             "[runtime]\ndevice = cpu\nseed = 4\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\n[train]\noptimizer = sgd\nlr = 0.05\n"
             "[flat]\ntype = flatten\n[fc\"1\\x]\ntype = linear\noutputs = 16\n[act]\ntype = relu\n"
             "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir);
    struct run r;
    open_run(&r, text);
    const char *path = glia_test_tmp("profile-trace.json");
    remove(path);
    char *table = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&table, &len);
    glia_status st = glia_model_profile_trace(r.m, 3, 5, f, path);
    fclose(f);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    char want[800];
    snprintf(want, sizeof want, "trace: 36 events in %s\n", path);  /* 3 x (5 + 4 + 3) */
    CU_ASSERT_PTR_NOT_NULL(strstr(table, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(table, "profile: 3 training steps of batch 32 after 5 warm-up steps"));
    free(table);
    static const char *const fwd[] = {"flat", "fc\"1\\x", "act", "fc2", "loss"};
    static const char *const bwd[] = {"loss", "fc2", "act", "fc\"1\\x"};
    struct trace_expect e = {3, 5, fwd, 4, bwd, "sgd", false, 0, 0, NULL};
    CU_ASSERT_EQUAL(trace_check(path, &e), 0);
    char *raw = json_read_file(path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
    CU_ASSERT_PTR_NOT_NULL(strstr(raw, "{\"name\":\"fc\\\"1\\\\x\",\"cat\":\"forward\",\"ph\":\"X\","));
    CU_ASSERT_PTR_NOT_NULL(strstr(raw, "\"args\":{\"step\":1,\"type\":\"linear\",\"impl\":\"cpu\",\"output\":\"32x16\"}"));
    free(raw);
    /* a trace path that cannot be written: one line naming it, before any step is taken */
    int64_t steps_before = r.m->trainer.step;
    long long n;
    float *w0 = weights(&r, &n);
    char bad[700];
    snprintf(bad, sizeof bad, "%s/no-such-folder/t.json", dir);
    CU_ASSERT_EQUAL(glia_model_profile_trace(r.m, 3, 5, stdout, bad), GLIA_EIO);
    const char *msg = glia_context_error(r.ctx);
    snprintf(want, sizeof want, "cannot write trace file %s: ", bad);
    if (!strstr(msg, want)) printf("\n  got: %s\n", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
    CU_ASSERT_PTR_NULL(strchr(msg, '\n'));
    CU_ASSERT_EQUAL(r.m->trainer.step, steps_before);
    float *w1 = weights(&r, &n);
    CU_ASSERT_EQUAL(memcmp(w0, w1, (size_t)n * sizeof *w0), 0);
    free(w0);
    free(w1);
    /* the table alone, as before: no trace */
    f = fopen("/dev/null", "w");
    CU_ASSERT_EQUAL(glia_model_profile(r.m, 2, 1, f), GLIA_OK);
    fclose(f);
    CU_ASSERT_EQUAL(r.m->trainer.step, steps_before + 3);
    close_run(&r);
}

/* The row of layer `name` in a profile table: its fields split on blanks (at most 16), or 0 fields when absent. */
static int table_row(const char *table, const char *name, char fields[16][32])
{
    char key[64];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(table, key);
    if (!p) return 0;
    int n = 0;
    for (p++; *p && *p != '\n' && n < 16;) {
        while (*p == ' ') p++;
        int k = 0;
        while (*p && *p != ' ' && *p != '\n') {
            if (k < 31) fields[n][k++] = *p;
            p++;
        }
        fields[n][k] = 0;
        if (k) n++;
        else break;
    }
    return n;
}

/* glia profile's roofline: the bytes and FLOPs of each layer a step follow the formulae of docs/benchmarks.md (here
 * worked out by hand for a flatten and two linear layers at batch 32, 36 -> 16 -> 5), the optimizer's bytes are 4 x (3 + 2 x its state arrays) per arena value; the table shows the fraction
 * of peak only when a peak is known (the CPU tells none: given here), and bad options are refused in one line. */
static void test_profile_roofline(void)
{
    make_data();
    char text[4096];
    snprintf(text, sizeof text,
             "[runtime]\ndevice = cpu\nseed = 4\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\n[train]\noptimizer = sgd\nlr = 0.05\n"
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n[act]\ntype = relu\n"
             "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir);
    struct run r;
    open_run(&r, text);
    char *table = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&table, &len);
    struct glia_profile_options o = {sizeof o, 3, 2, NULL, 0, 0};
    glia_status st = glia_model_profile_with(r.m, &o, f);
    fclose(f);
    if (st) printf("\n  %s\n", glia_context_error(r.ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    struct glia__cost c;
    glia__node_cost(r.m, 0, 32, &c);  /* flat: a copy of x 32x1x6x6; no backward (nothing before it learns) */
    CU_ASSERT_EQUAL(c.fwd_bytes, 4 * 2 * 32 * 36);
    CU_ASSERT_EQUAL(c.bwd_bytes, 0);
    CU_ASSERT_FALSE(c.flops_known);
    glia__node_cost(r.m, 1, 32, &c);  /* fc1: x 32x36, W 16x36 + b 16, y 32x16; no input gradient (nothing before it
                                         learns) */
    CU_ASSERT_EQUAL(c.fwd_bytes, 4 * (32 * 36 + 16 * 37 + 32 * 16));
    CU_ASSERT_EQUAL(c.bwd_bytes, 4 * (32 * 16 + 32 * 36 + 16 * 37));  /* dy, x, dW: no y read (BWD_NO_OUTPUT) */
    CU_ASSERT_EQUAL(c.fwd_flops, 2 * 32 * 36 * 16);
    CU_ASSERT_EQUAL(c.bwd_flops, 2 * 32 * 36 * 16);
    glia__node_cost(r.m, 3, 32, &c);  /* fc2: the input gradient too */
    CU_ASSERT_EQUAL(c.fwd_bytes, 4 * (32 * 16 + 5 * 17 + 32 * 5));
    CU_ASSERT_EQUAL(c.bwd_bytes, 4 * (32 * 5 + 32 * 16 + 5 * 17 + 32 * 16 + 5 * 17));  /* dy, x, W, dx, dW */
    CU_ASSERT_EQUAL(c.fwd_flops, 2 * 32 * 16 * 5);
    CU_ASSERT_EQUAL(c.bwd_flops, 2 * 2 * 32 * 16 * 5);
    glia__node_cost(r.m, 3, 8, &c);   /* a smaller batch moves the activations' share less */
    CU_ASSERT_EQUAL(c.fwd_bytes, 4 * (8 * 16 + 5 * 17 + 8 * 5));
    CU_ASSERT_TRUE(c.flops_known);
    CU_ASSERT_EQUAL(glia__optimizer_bytes(r.m), 4.0 * (double)r.m->params.wa.n * (3 + 2 * r.m->trainer.opt.type->n_state));
    char row[16][32];
    CU_ASSERT_EQUAL_FATAL(table_row(table, "fc2", row), 10);  /* name type fwd bwd share MB GFLOP GB/s TFLOP/s peak */
    CU_ASSERT_STRING_EQUAL(row[1], "linear");
    CU_ASSERT_STRING_EQUAL(row[5], "0.01");    /* (3028 + 5416) bytes */
    CU_ASSERT_STRING_EQUAL(row[6], "0.000");   /* 15360 FLOPs */
    CU_ASSERT_STRING_EQUAL(row[9], "-");       /* the CPU tells no peak */
    CU_ASSERT_EQUAL(table_row(table, "flat", row), 10);
    CU_ASSERT_STRING_EQUAL(row[6], "-");       /* flatten counts no FLOPs */
    CU_ASSERT_EQUAL_FATAL(table_row(table, "(input)", row), 12);  /* "loader wait + copy" is four fields */
    CU_ASSERT_STRING_EQUAL(row[7], "-");       /* the input's bytes are not counted */
    CU_ASSERT_PTR_NOT_NULL(strstr(table, "peak of cpu: bandwidth unknown, FLOP/s unknown at fp32 (the device tells none: "
                                         "give glia profile --peak-gbs and --peak-tflops)\n"));
    free(table);
    /* a peak given: every layer that moves bytes gets its fraction, the larger of memory and math */
    f = open_memstream(&table, &len);
    o.peak_bandwidth = 1e9, o.peak_flops = 1e6;
    CU_ASSERT_EQUAL_FATAL(glia_model_profile_with(r.m, &o, f), GLIA_OK);
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(table_row(table, "fc1", row), 11);  /* the fraction and its kind: two fields */
    CU_ASSERT_STRING_EQUAL(row[10], "math");  /* 73728 FLOPs a step at 1 MFLOP/s outweigh 36 KB at 1 GB/s */
    CU_ASSERT_EQUAL_FATAL(table_row(table, "(optimizer)", row), 10);  /* name type ms share MB - GB/s - peak kind */
    CU_ASSERT_STRING_EQUAL(row[9], "mem");
    CU_ASSERT_PTR_NOT_NULL(strstr(table, "peak of cpu: 1 GB/s, 0.00 TFLOP/s at fp32 (given)\n"));
    free(table);
    /* bad options: one line each, and no step taken */
    int64_t steps_before = r.m->trainer.step;
    o.peak_flops = -1;
    CU_ASSERT_EQUAL(glia_model_profile_with(r.m, &o, stdout), GLIA_EINVAL);
    CU_ASSERT_STRING_EQUAL(glia_context_error(r.ctx), "profile: peak bandwidth and FLOP/s must be finite and 0 or more "
                                                      "(got 1e+09 and -1)");
    o.struct_size = 8;
    CU_ASSERT_EQUAL(glia_model_profile_with(r.m, &o, stdout), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "options struct_size 8 is too small"));
    CU_ASSERT_EQUAL(r.m->trainer.step, steps_before);
    close_run(&r);
}

/* The trace's JSON strings: quote, backslash and control characters escaped; read back the same. */
static void test_json_string(void)
{
    static const char *const cases[][2] = {
        {"plain", "\"plain\""},
        {"a\"b\\c", "\"a\\\"b\\\\c\""},
        {"t\tn\nr\r\x01\x1f\x7f", "\"t\\tn\\nr\\r\\u0001\\u001f\\u007f\""},
        {"caf\xc3\xa9", "\"caf\xc3\xa9\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        glia__json_string(f, cases[i][0]);
        fclose(f);
        CU_ASSERT_STRING_EQUAL(out, cases[i][1]);
        struct jv v;
        CU_ASSERT_FATAL(json_parse(out, &v));
        CU_ASSERT_EQUAL(v.t, J_STR);
        CU_ASSERT_STRING_EQUAL(v.str, cases[i][0]);
        jv_free(&v);
        free(out);
    }
    /* the reader the trace tests rely on refuses what is not JSON */
    static const char *const bad[] = {"{\"a\":1,}", "[1 2]", "\"a\tb\"", "\"\\x\"", "01", "{\"a\"}", "[1]x", "\"open", "-", "1.", "nul"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct jv v;
        CU_ASSERT_FALSE(json_parse(bad[i], &v));
    }
}

/* The arena plan: each tensor at a multiple of GLIA__ARENA_ALIGN floats, zero padding between,
 * pack and unpack inverse to each other. */
static void test_arena_plan(void)
{
    const int64_t sizes[] = {10, 64, 1, 0, 130}, off[] = {0, 64, 128, 192, 192};
    struct glia__arena a;
    CU_ASSERT_EQUAL_FATAL(glia__arena_plan(&a, sizes, 5), GLIA_OK);
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(a.off[i], off[i]);
    CU_ASSERT_EQUAL(a.n, 205);
    CU_ASSERT_EQUAL(a.len, 322);
    float packed[205], full[322], back[205];
    bool used[322] = {false};
    for (int i = 0; i < 205; i++) packed[i] = (float)i + 1;
    for (int i = 0; i < 322; i++) full[i] = -1;
    glia__arena_unpack(&a, packed, full);
    int k = 0;
    for (int i = 0; i < 5; i++)
        for (int64_t j = 0; j < sizes[i]; j++, k++) {
            CU_ASSERT_EQUAL(full[off[i] + j], packed[k]);
            used[off[i] + j] = true;
        }
    for (int i = 0; i < 322; i++)
        if (!used[i]) CU_ASSERT_EQUAL(full[i], 0.0f);
    glia__arena_pack(&a, full, back);
    CU_ASSERT_EQUAL(memcmp(back, packed, sizeof packed), 0);
    glia__arena_free(&a);
    CU_ASSERT_EQUAL_FATAL(glia__arena_plan(&a, NULL, 0), GLIA_OK);
    CU_ASSERT(a.n == 0 && a.len == 1);
    glia__arena_free(&a);
}

/* Whether buffers i and j, each alive in [f, l] and again in [f2, l2] when f2 >= 0, live at a common moment. */
static bool lives_meet(int i, int j, const int *f, const int *l, const int *f2, const int *l2)
{
    if (f[j] <= l[i] && f[i] <= l[j]) return true;
    if (!f2) return false;
    return (f2[i] >= 0 && f[j] <= l2[i] && f2[i] <= l[j]) || (f2[j] >= 0 && f2[j] <= l[i] && f[i] <= l2[j]) ||
           (f2[i] >= 0 && f2[j] >= 0 && f2[j] <= l2[i] && f2[i] <= l2[j]);
}

/* Whether memplan's offsets keep every two buffers alive at a common moment apart, are aligned, and fit in len. */
static bool plan_ok(int n, const int64_t *size, const int *first, const int *last, const int *first2, const int *last2,
                    const int64_t *off, int64_t len)
{
    int64_t need = 0;
    for (int i = 0; i < n; i++) {
        if (size[i] <= 0) continue;
        if (off[i] % GLIA__ARENA_ALIGN || off[i] < 0 || off[i] + size[i] > len) return false;
        need = size[i] > need ? size[i] : need;
        for (int j = 0; j < i; j++)
            if (size[j] > 0 && lives_meet(i, j, first, last, first2, last2) && off[i] < off[j] + size[j] &&
                off[j] < off[i] + size[i])
                return false;
    }
    return len >= need;
}

/* A chain (each buffer alive from its moment to the next) needs two buffers' worth; buffers alive at one moment
 * need the sum; none needs nothing. */
static void test_memplan_shapes(void)
{
    int64_t size[6] = {100, 100, 100, 100, 100, 100}, off[6];
    int first[6], last[6];
    for (int i = 0; i < 6; i++) first[i] = i, last[i] = i + 1;
    int64_t len = glia__memplan(6, size, first, last, NULL, NULL, off);
    CU_ASSERT_EQUAL(len, 2 * 128);  /* 100 floats round up to 128 */
    CU_ASSERT(plan_ok(6, size, first, last, NULL, NULL, off, len));
    for (int i = 0; i < 6; i++) first[i] = 0, last[i] = 5;
    len = glia__memplan(6, size, first, last, NULL, NULL, off);
    CU_ASSERT_EQUAL(len, 6 * 128);
    CU_ASSERT(plan_ok(6, size, first, last, NULL, NULL, off, len));
    int64_t zero[3] = {0, 0, 0};
    CU_ASSERT_EQUAL(glia__memplan(3, zero, first, last, NULL, NULL, off), 0);
    CU_ASSERT(off[0] == 0 && off[1] == 0 && off[2] == 0);
    /* a small buffer fits in the gap that a large one's death leaves under a long-lived one */
    int64_t s2[3] = {1000, 64, 64}, o2[3];
    int f2[3] = {0, 0, 2}, l2[3] = {1, 3, 3};
    len = glia__memplan(3, s2, f2, l2, NULL, NULL, o2);
    CU_ASSERT(plan_ok(3, s2, f2, l2, NULL, NULL, o2, len));
    CU_ASSERT_EQUAL(len, 1024 + 64);
    CU_ASSERT_EQUAL(o2[2], 0);
}

/* Random sizes and lifetimes, some buffers with a second life (a recomputed activation): the rules hold, and the
 * plan is never larger than no sharing. */
static void test_memplan_random(void)
{
    enum { N = 60 };
    uint64_t r = 12345;
    for (int t = 0; t < 400; t++) {
        int64_t size[N], off[N], sum = 0;
        int first[N], last[N], first2[N], last2[N];
        int n = 1 + t % N;
        bool two = t >= 200;
        for (int i = 0; i < n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            size[i] = (int64_t)(r >> 33) % 5000 * ((r >> 20) % 7 != 0);  /* some zero */
            first[i] = (int)((r >> 13) % 40);
            last[i] = first[i] + (int)((r >> 7) % 8);
            first2[i] = (r >> 3) % 3 ? -1 : last[i] + 1 + (int)((r >> 26) % 30);
            last2[i] = first2[i] + (int)((r >> 40) % 6);
            sum += (size[i] + GLIA__ARENA_ALIGN - 1) / GLIA__ARENA_ALIGN * GLIA__ARENA_ALIGN;
        }
        const int *f2 = two ? first2 : NULL, *l2 = two ? last2 : NULL;
        int64_t len = glia__memplan(n, size, first, last, f2, l2, off);
        CU_ASSERT(plan_ok(n, size, first, last, f2, l2, off, len));
        CU_ASSERT(len <= sum);
        int64_t again[N];
        CU_ASSERT_EQUAL(glia__memplan(n, size, first, last, f2, l2, again), len);
        CU_ASSERT_EQUAL(memcmp(again, off, sizeof(int64_t) * (size_t)n), 0);
    }
}

/* A buffer with two lives shares bytes with one alive in the gap between them, and not with one alive in either. */
static void test_memplan_two_lives(void)
{
    int64_t size[3] = {128, 128, 128}, off[3];
    int first[3] = {0, 2, 1}, last[3] = {1, 2, 4}, first2[3] = {3, -1, -1}, last2[3] = {5, -1, -1};
    int64_t len = glia__memplan(3, size, first, last, first2, last2, off);
    CU_ASSERT(plan_ok(3, size, first, last, first2, last2, off, len));
    CU_ASSERT_EQUAL(len, 2 * 128);  /* 0 and 1 share: 1 lives at 2, between 0's lives; 2 meets both */
    CU_ASSERT_EQUAL(off[0], off[1]);
    CU_ASSERT_NOT_EQUAL(off[0], off[2]);
    last[1] = 3;  /* now 1 meets 0's second life */
    len = glia__memplan(3, size, first, last, first2, last2, off);
    CU_ASSERT(plan_ok(3, size, first, last, first2, last2, off, len));
    CU_ASSERT_EQUAL(len, 3 * 128);
}

static const char *memory_model_text(int test_batch)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 3\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\ntest_batch_size = %d\nworkers = 0\n"
             "[train]\nepochs = 1\noptimizer = sgd\nlr = 0.05\n"
             "[c1]\ntype = conv2d\nfilters = 4\npadding = 1\n[r1]\ntype = relu\n"
             "[c2]\ntype = conv2d\nfilters = 4\npadding = 1\n[r2]\ntype = relu\n"
             "[c3]\ntype = conv2d\nfilters = 4\npadding = 1\n[sum]\ntype = add\ninputs = r1, c3\n[r3]\ntype = relu\n"
             "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir, test_batch);
    return buf;
}

/* Activations and gradients share one block by lifetime, training's and evaluation's: training gives the same
 * weights whatever the evaluation batch, evaluation the same loss and accuracy, and each plan is smaller than its
 * buffers one by one. Evaluating a model that never trained plans no training step. */
static void test_activation_memory_shared(void)
{
    make_data();
    struct run a, b, c;
    struct glia_epoch_result ra = GLIA_TEST_RESULT, rb = GLIA_TEST_RESULT;
    open_run(&a, memory_model_text(7));    /* evaluation batches smaller than training's */
    open_run(&b, memory_model_text(200));  /* the whole test set at once */
    CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, &ra, 1), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(b.m, &quiet, &rb, 1), GLIA_OK);
    long long na, nb;
    float *wa = weights(&a, &na), *wb = weights(&b, &nb);
    CU_ASSERT_EQUAL_FATAL(na, nb);
    CU_ASSERT_EQUAL(memcmp(wa, wb, sizeof(float) * (size_t)na), 0);
    CU_ASSERT_EQUAL(ra.train_loss, rb.train_loss);
    CU_ASSERT(fabs(ra.test_loss - rb.test_loss) <= 1e-5 * fmax(1, ra.test_loss));
    CU_ASSERT_EQUAL(ra.test_accuracy, rb.test_accuracy);
    const struct glia__act_plan *p = &b.m->act.plan;
    CU_ASSERT(p->train > 0 && p->train < p->train_unshared);
    CU_ASSERT(p->eval > 0 && p->eval < p->eval_unshared);
    CU_ASSERT_EQUAL(p->len, p->train > p->eval ? p->train : p->eval);
    CU_ASSERT_EQUAL(glia_tensor_numel(b.m->act.act_block), p->len);
    CU_ASSERT(b.m->act.act_batch == 32 && b.m->act.eval_batch == 200);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    glia_model_summary(b.m, f);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "activation memory: "));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "shared by a training step at batch 32 ("));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "evaluation at batch 200 ("));
    free(text);
    open_run(&c, memory_model_text(200));  /* evaluation only: the same numbers as b's before training */
    double loss, acc;
    CU_ASSERT_EQUAL(glia_model_evaluate(c.m, &loss, &acc), GLIA_OK);
    CU_ASSERT(c.m->act.act_batch == 0 && c.m->act.plan.train == 0 && c.m->act.plan.len == c.m->act.plan.eval);
    free(wa);
    free(wb);
    close_run(&a);
    close_run(&b);
    close_run(&c);
}

/* A model with a chain of every elementwise layer the fuse_pointwise pass merges: sig -> p -> sum
 * -> lr -> g -> t -> j -> k, fed by the convolutions a and b and by r2, a relu that feeds two
 * layers (so it stays a layer of its own). lr_extra goes into lr's section. */
static const char *fuse_model_text(const char *graph, const char *lr_extra)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 9\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\ntest_batch_size = 64\nworkers = 0\nmean = 0.2\nstd = 0.3\n"
             "[train]\nepochs = 1\noptimizer = sgd\nlr = 0.05\n[optimizer]\nmomentum = 0.9\n%s"
             "[a]\ntype = conv2d\nfilters = 3\npadding = 1\n"
             "[b]\ntype = conv2d\nfilters = 3\npadding = 1\ninputs = input\n"
             "[sig]\ntype = sigmoid\ninputs = a\n"
             "[p]\ntype = pointwise\nexpr = x * 2 - y / (1 + w * w)\ninputs = sig, b, a, b\n"
             "[sum]\ntype = add\ninputs = p, b\n"
             "[lr]\ntype = leaky_relu\nnegative_slope = 0.1\n%s"
             "[g]\ntype = gelu\n[t]\ntype = tanh\n"
             "[r2]\ntype = relu\ninputs = b\n"
             "[j]\ntype = add\ninputs = r2, t\n[k]\ntype = add\ninputs = j, r2, a\n"
             "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir, graph, lr_extra);
    return buf;
}

/* layers on the test data, fuse_pointwise = mode; runtime and graph: more lines of those sections */
static const char *fuse_text_in(const char *runtime, const char *mode, const char *graph, const char *layers)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "[runtime]\ndevice = cpu\n%s[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\n"
             "test_images = %s/tei\ntest_labels = %s/tel\nbatch_size = 32\n[graph]\nfuse_pointwise = %s\n%s%s", runtime, dir,
             dir, dir, dir, mode, graph, layers);
    return buf;
}

static const char *fuse_small_text(const char *mode, const char *layers) { return fuse_text_in("", mode, "", layers); }

static char *summary_of(const struct glia_model *m)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CU_ASSERT_FATAL(f != NULL);
    glia_model_summary(m, f);
    fclose(f);
    return text;
}

/* A loss kernel with GLIA_KERNEL_GRAD_IN_PLACE (softmax_cross_entropy) gets the logits' gradient in the logits' own
 * memory in a training step: the plan gives both one offset and counts the gradient's bytes no more; not when the
 * logits' producer reads its output in backward (sigmoid), and never in evaluation. The trained weights are those of
 * a model whose gradient has a buffer of its own (the sigmoid model's twin without the sigmoid is not that; the
 * layer and optimizer tests against PyTorch train through the in-place gradient). */
static void test_grad_in_place(void)
{
    make_data();
    static const char *tail[2] = {"", "[sig]\ntype = sigmoid\n"};
    for (int k = 0; k < 2; k++) {
        char text[4096];
        snprintf(text, sizeof text,
                 "[runtime]\ndevice = cpu\nseed = 3\n"
                 "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
                 "batch_size = 32\ntest_batch_size = 64\nworkers = 0\nmean = 0.2\nstd = 0.3\n"
                 "[train]\nepochs = 1\noptimizer = sgd\nlr = 0.05\n"
                 "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 6\n%s[loss]\ntype = softmax_cross_entropy\n",
                 dir, dir, dir, dir, tail[k]);
        struct run r;
        open_run(&r, text);
        CU_ASSERT_TRUE_FATAL(r.m->graph.nodes[r.m->graph.n_nodes - 1].layer.kernel->flags & GLIA_KERNEL_GRAD_IN_PLACE);
        int lg = r.m->graph.n_nodes - 2;  /* the logits: fc, or sig */
        CU_ASSERT_EQUAL(glia__grad_in_place(r.m), k ? -1 : lg);
        struct glia__act_plan p;
        CU_ASSERT_EQUAL_FATAL(glia__act_plan(r.m, 32, 64, &p), GLIA_OK);
        bool same = p.train_off[GLIA__PLAN_GRAD(lg, -1)] == p.train_off[GLIA__PLAN_VALUE(lg, -1)];
        CU_ASSERT_EQUAL(same, k == 0);
        glia__act_plan_free(&p);
        struct glia_epoch_result res = GLIA_TEST_RESULT;
        CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, &res, 1), GLIA_OK);
        if (k == 0) {  /* the step's views: the gradient over the logits */
            CU_ASSERT_EQUAL_FATAL(glia__set_batch(r.m, 32, 0, true), GLIA_OK);
            CU_ASSERT_PTR_EQUAL(r.m->graph.nodes[lg].dout->data, r.m->graph.nodes[lg].out->data);
        }
        CU_ASSERT(res.train_loss < log(6.0));
        close_run(&r);
    }
}

/* A kernel's saved memory (glia_kernel.saved_size: linear with activation = gelu keeps its pre-activation) is planned
 * with the activations: a view for the training batch, none in evaluation or for a kernel that asks for none, the
 * plan's unshared total grows by its bytes, and the model trains. */
static void test_saved_memory(void)
{
    make_data();
    size_t unshared[2];
    for (int k = 0; k < 2; k++) {
        char text[4096];
        snprintf(text, sizeof text,
                 "[runtime]\ndevice = cpu\nseed = 3\n"
                 "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
                 "batch_size = 32\ntest_batch_size = 64\nworkers = 0\nmean = 0.2\nstd = 0.3\n"
                 "[train]\nepochs = 1\noptimizer = sgd\nlr = 0.05\n"
                 "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 64\nactivation = %s\n"
                 "[fc2]\ntype = linear\noutputs = 6\n[loss]\ntype = softmax_cross_entropy\n",
                 dir, dir, dir, dir, k ? "gelu" : "none");
        struct run r;
        open_run(&r, text);
        struct glia__act_plan p;
        CU_ASSERT_EQUAL_FATAL(glia__act_plan(r.m, 32, 64, &p), GLIA_OK);
        unshared[k] = (size_t)p.train_unshared;
        glia__act_plan_free(&p);
        struct glia_epoch_result res = GLIA_TEST_RESULT;
        CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, &res, 1), GLIA_OK);
        CU_ASSERT(res.train_loss < log(6.0));
        CU_ASSERT_EQUAL_FATAL(glia__set_batch(r.m, 32, 0, true), GLIA_OK);
        CU_ASSERT((r.m->graph.nodes[1].saved != NULL) == (k == 1));  /* fc */
        CU_ASSERT_PTR_NULL(r.m->graph.nodes[2].saved);                 /* fc2: no activation */
        CU_ASSERT_EQUAL_FATAL(glia__set_batch(r.m, 64, 0, false), GLIA_OK);
        CU_ASSERT_PTR_NULL(r.m->graph.nodes[1].saved);
        close_run(&r);
    }
    CU_ASSERT_EQUAL(unshared[1], unshared[0] + 32 * 64);  /* fc's pre-activation: 32 x 64 floats */
}

/* The fuse_pointwise pass: the chain runs as one pointwise layer that trains like the layers it
 * replaces (within float rounding), the model keeps its fingerprint (checkpoints of either load in
 * the other), and it leaves alone a layer with two consumers, a layer whose impl is chosen, and a
 * chain with more than four inputs. auto fuses only on a GPU. */
static void test_fuse_pointwise(void)
{
    make_data();
    struct run on, off, au, pin, wide, wide_off;
    open_run(&on, fuse_model_text("[graph]\nfuse_pointwise = on\n", ""));
    open_run(&off, fuse_model_text("[graph]\nfuse_pointwise = off\n", ""));
    open_run(&au, fuse_model_text("", ""));
    CU_ASSERT_EQUAL(off.m->graph.n_nodes, 14);
    CU_ASSERT_EQUAL(au.m->graph.n_nodes, 14);  /* auto on the CPU */
    CU_ASSERT_EQUAL(on.m->graph.n_nodes, 7);   /* a b r2 k flat fc loss */
    CU_ASSERT_STRING_EQUAL(on.m->graph.nodes[3].layer.name, "k");
    CU_ASSERT_STRING_EQUAL(on.m->graph.nodes[3].layer.type->name, "pointwise");
    CU_ASSERT_EQUAL(on.m->graph.nodes[3].n_in, 3);
    CU_ASSERT_STRING_EQUAL(on.m->graph.nodes[2].layer.type->name, "relu");
    CU_ASSERT_EQUAL(glia__model_fingerprint(on.m), glia__model_fingerprint(off.m));
    char *text = summary_of(on.m);
    const char *want = "graph pass fuse_pointwise: sig (sigmoid) + p (pointwise) + sum (add) + lr (leaky_relu) + g (gelu) "
                       "+ t (tanh) + j (add) + k (add) run as one pointwise layer k = ";
    if (!strstr(text, want)) printf("\n%s", text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, " of x = r2, y = a, z = b\n"));
    free(text);
    struct glia_epoch_result ra = GLIA_TEST_RESULT, rb = GLIA_TEST_RESULT;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(on.m, &quiet, &ra, 1), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(off.m, &quiet, &rb, 1), GLIA_OK);
    double worst = weight_diff(&on, &off);
    if (!(worst <= 1e-4)) printf("\n  fused and unfused weights differ by %g\n", worst);
    CU_ASSERT(worst <= 1e-4);
    CU_ASSERT(worst > 0 || ra.train_loss == rb.train_loss);
    CU_ASSERT(fabs(ra.test_loss - rb.test_loss) <= 1e-4 * fmax(1, rb.test_loss));
    char path[600];
    snprintf(path, sizeof path, "%s/fused.ckpt", dir);
    CU_ASSERT_EQUAL(glia__checkpoint_save(on.m, path, 1, 0, 0, 0), GLIA_OK);
    glia_status st = glia_model_load_checkpoint(au.m, path);
    if (st) printf("\n  %s\n", glia_context_error(au.ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(same_weights(&au, &on));
    remove(path);
    close_run(&on), close_run(&off), close_run(&au);
    /* lr's impl is chosen: sig p sum become one layer, g t j k another, lr stays between them */
    open_run(&pin, fuse_model_text("[graph]\nfuse_pointwise = on\n", "impl = cpu\n"));
    CU_ASSERT_EQUAL(pin.m->graph.n_nodes, 9);
    text = summary_of(pin.m);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "fuse_pointwise: sig (sigmoid) + p (pointwise) + sum (add) run as one pointwise "
                                        "layer sum = (sigmoid(x) * 2 - y / (1 + y * y)) + y of x = a, y = b\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "fuse_pointwise: g (gelu) + t (tanh) + j (add) + k (add) run as one"));
    free(text);
    close_run(&pin);
    /* a relu of a five-input sum would take five inputs: left as it is */
    static const char five[] = "[c1]\ntype = conv2d\nfilters = 1\nsize = 1\ninputs = input\n"
                               "[c2]\ntype = conv2d\nfilters = 1\nsize = 1\ninputs = input\n"
                               "[c3]\ntype = conv2d\nfilters = 1\nsize = 1\ninputs = input\n"
                               "[c4]\ntype = conv2d\nfilters = 1\nsize = 1\ninputs = input\n"
                               "[c5]\ntype = conv2d\nfilters = 1\nsize = 1\ninputs = input\n"
                               "[s5]\ntype = add\ninputs = c1, c2, c3, c4, c5\n[rr]\ntype = relu\n"
                               "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n";
    open_run(&wide, fuse_small_text("on", five));
    open_run(&wide_off, fuse_small_text("off", five));
    CU_ASSERT_EQUAL(wide.m->graph.n_nodes, wide_off.m->graph.n_nodes);
    close_run(&wide), close_run(&wide_off);
    struct glia_context *ctx;
    struct glia_config *cfg;
    struct glia_model *m = NULL;
    /* without a pointwise plugin, on cannot make the fused layer: a clear error; off builds */
    const char *plugins = getenv("GLIA_PLUGIN_PATH");
    CU_ASSERT_PTR_NOT_NULL_FATAL(plugins);
    char *saved = strdup(plugins), pdir[600], from[1200], to[1200];
    snprintf(pdir, sizeof pdir, "%s/plugins-no-pointwise", dir);
    mkdir(pdir, 0755);
    static const char *const keep[] = {"conv2d", "sigmoid", "tanh", "flatten", "linear", "softmax_cross_entropy", "sgd"};
    for (int i = 0; i < 7; i++) {
        snprintf(from, sizeof from, "%s/%s.so", saved, keep[i]);
        snprintf(to, sizeof to, "%s/%s.so", pdir, keep[i]);
        unlink(to);
        CU_ASSERT_EQUAL(symlink(from, to), 0);
    }
    setenv("GLIA_PLUGIN_PATH", pdir, 1);
    static const char chain[] = "[a]\ntype = conv2d\nfilters = 2\n[s]\ntype = sigmoid\n[t]\ntype = tanh\n"
                                "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n";
    for (int on = 0; on < 2; on++) {
        CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
        CU_ASSERT_FATAL(glia_config_parse_string(ctx, "t.ini", fuse_small_text(on ? "on" : "off", chain), &cfg) == GLIA_OK);
        glia_status st = glia_model_build(ctx, cfg, &m);
        if (on) {
            CU_ASSERT_NOT_EQUAL(st, GLIA_OK);
            const char *msg = glia_context_error(ctx);
            if (!strstr(msg, "[t] type: unknown layer type 'pointwise'") ||
                !strstr(msg, "(a layer made by [graph] fuse_pointwise; off runs the layers one by one)"))
                printf("\n  %s\n", msg);
            CU_ASSERT_PTR_NOT_NULL(strstr(msg, "[t] type: unknown layer type 'pointwise'"));
            CU_ASSERT_PTR_NOT_NULL(strstr(msg, "(a layer made by [graph] fuse_pointwise; off runs the layers one by one)"));
        } else {
            CU_ASSERT_EQUAL(st, GLIA_OK);
            glia_model_free(m);
        }
        m = NULL;
        glia_config_free(cfg);
        glia_context_free(ctx);
    }
    setenv("GLIA_PLUGIN_PATH", saved, 1);
    free(saved);
    /* a value other than auto, on, off is refused with the key named */
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "t.ini", fuse_model_text("[graph]\nfuse_pointwise = yes\n", ""), &cfg) ==
                    GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_build(ctx, cfg, &m), GLIA_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "[graph] fuse_pointwise"));
    glia_config_free(cfg);
    glia_context_free(ctx);
}

/* Dropout in fused chains: tanh + a pointwise layer with dropout() (and relu + dropout below) fused
 * under the dropout's name, so they draw the masks the layers draw unfused and train to the same
 * weights (within float rounding), beside a dropout left alone after a relu that became its conv2d's
 * activation; a layer with dropout ends its chain (j + pr fuse after them, not into them). */
static void test_fuse_dropout(void)
{
    make_data();
    static const char layers[] = "[a]\ntype = conv2d\nfilters = 3\npadding = 1\n[r]\ntype = relu\n[d]\ntype = dropout\np = 0.4\n"
                                 "[b]\ntype = conv2d\nfilters = 3\npadding = 1\ninputs = input\n[t]\ntype = tanh\n"
                                 "[pd]\ntype = pointwise\nexpr = dropout(x * 2, 0.3)\n"
                                 "[j]\ntype = add\ninputs = d, pd\n[pr]\ntype = relu\n"
                                 "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n"
                                 "[loss]\ntype = softmax_cross_entropy\n";
    struct run on, off;
    open_run(&on, fuse_small_text("on", layers));
    open_run(&off, fuse_small_text("off", layers));
    CU_ASSERT_EQUAL(off.m->graph.n_nodes, 11);
    CU_ASSERT_EQUAL_FATAL(on.m->graph.n_nodes, 8);  /* a d b pd pr flat fc loss */
    char *text = summary_of(on.m);
    static const char *const want[] = {
        "fuse_pointwise: a (conv2d) + r (relu) run as conv2d a with activation = relu\n",
        "fuse_pointwise: t (tanh) + pd (pointwise) run as one pointwise layer pd = dropout(tanh(x) * 2, 0.3) of x = b\n",
        "fuse_pointwise: j (add) + pr (relu) run as one pointwise layer pr = relu(x + y) of x = d, y = pd\n"};
    for (int k = 0; k < 3; k++) {
        if (!strstr(text, want[k])) printf("\n  want: %s%s", want[k], text);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, want[k]));
    }
    free(text);
    struct glia_epoch_result ra = GLIA_TEST_RESULT, rb = GLIA_TEST_RESULT;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(on.m, &quiet, &ra, 1), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(off.m, &quiet, &rb, 1), GLIA_OK);
    double worst = weight_diff(&on, &off);
    if (!(worst <= 1e-5)) printf("\n  fused and unfused weights differ by %g\n", worst);
    CU_ASSERT(worst <= 1e-5);
    CU_ASSERT(fabs(ra.train_loss - rb.train_loss) <= 1e-5 * fmax(1, rb.train_loss));
    close_run(&on), close_run(&off);
    /* channels_last, with the fused layers recomputed in backward ([graph] checkpoint_segments):
     * the recomputation draws the forward's mask (tanh + dropout; e is a conv2d with activation = relu) */
    static const char deep[] = "[a]\ntype = conv2d\nfilters = 4\npadding = 1\n[r]\ntype = tanh\n[d]\ntype = dropout\np = 0.4\n"
                               "[c]\ntype = conv2d\nfilters = 4\npadding = 1\n[r2]\ntype = tanh\n[d2]\ntype = dropout\np = 0.3\n"
                               "[e]\ntype = conv2d\nfilters = 4\npadding = 1\n[r3]\ntype = relu\n[flat]\ntype = flatten\n"
                               "[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n";
    open_run(&on, fuse_text_in("memory_format = channels_last\n", "on", "checkpoint_segments = 2\n", deep));
    open_run(&off, fuse_text_in("memory_format = channels_last\n", "off", "checkpoint_segments = 2\n", deep));
    CU_ASSERT(on.m->graph.ckpt_segments > 1 && off.m->graph.ckpt_segments > 1);
    int recomputed = 0;
    for (int i = 0; i < on.m->graph.n_nodes; i++)
        recomputed += on.m->graph.nodes[i].recompute && !strcmp(on.m->graph.nodes[i].layer.type->name, "pointwise");
    CU_ASSERT(recomputed > 0);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(on.m, &quiet, &ra, 1), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(off.m, &quiet, &rb, 1), GLIA_OK);
    worst = weight_diff(&on, &off);
    if (!(worst <= 1e-5)) printf("\n  channels_last, checkpointed: fused and unfused weights differ by %g\n", worst);
    CU_ASSERT(worst <= 1e-5);
    close_run(&on), close_run(&off);
    /* dropout() spelled with a space stays under its layer's name too, and a pointwise layer with
     * dropout() feeding relu + dropout builds (no two masks in one expression) and trains alike */
    static const char spaced[] = "[a]\ntype = conv2d\nfilters = 3\npadding = 1\n"
                                 "[pd]\ntype = pointwise\nexpr = dropout (x * 2, 0.5)\n[r]\ntype = relu\n"
                                 "[d2]\ntype = dropout\np = 0.2\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n"
                                 "[loss]\ntype = softmax_cross_entropy\n";
    open_run(&on, fuse_small_text("on", spaced));
    open_run(&off, fuse_small_text("off", spaced));
    CU_ASSERT_EQUAL(on.m->graph.n_nodes, off.m->graph.n_nodes - 1);  /* a pd d2 flat fc loss */
    text = summary_of(on.m);
    const char *want2 = "fuse_pointwise: r (relu) + d2 (dropout) run as one pointwise layer d2 = "
                        "dropout(relu(x), 0.2) of x = pd\n";
    if (!strstr(text, want2)) printf("\n  want: %s%s", want2, text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, want2));
    free(text);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(on.m, &quiet, &ra, 1), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(off.m, &quiet, &rb, 1), GLIA_OK);
    worst = weight_diff(&on, &off);
    if (!(worst <= 1e-5)) printf("\n  fused and unfused weights differ by %g\n", worst);
    CU_ASSERT(worst <= 1e-5);
    close_run(&on), close_run(&off);
}

/* m's summary (glia check) has the line want (printed when it has not) and none of the texts absent (NULL-ended). */
static void expect_summary(const struct glia_model *m, const char *want, const char *const *absent)
{
    char *sum = summary_of(m);
    if (!strstr(sum, want)) printf("\n  want: %s%s", want, sum);
    CU_ASSERT_PTR_NOT_NULL(strstr(sum, want));
    for (; *absent; absent++) CU_ASSERT_PTR_NULL(strstr(sum, *absent));
    free(sum);
}

/* Three runs of layers with [graph] fuse_pointwise on (on, and bare, whose fusions the caller clears) and off, graph
 * after the mode in [graph]. */
static void open_fused_runs(struct run *on, struct run *bare, struct run *off, const char *graph, const char *layers)
{
    open_run(on, fuse_text_in("", "on", graph, layers));
    open_run(bare, fuse_text_in("", "on", graph, layers));
    open_run(off, fuse_text_in("", "off", graph, layers));
}

/* One epoch of the fused model on and the model as written off: the same weights within 1e-6 and test loss, and the
 * fused run's checkpoint loads into the other with its weights; both runs closed. label names the case. */
static void fused_trains_as_apart(struct run *on, struct run *off, const char *label)
{
    struct glia_epoch_result ra = GLIA_TEST_RESULT, rb = GLIA_TEST_RESULT;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(on->m, &quiet, &ra, 1), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(off->m, &quiet, &rb, 1), GLIA_OK);
    double worst = weight_diff(on, off);
    if (!(worst <= 1e-6)) printf("\n  %s: fused and unfused weights differ by %g\n", label, worst);
    CU_ASSERT(worst <= 1e-6);
    CU_ASSERT(fabs(ra.test_loss - rb.test_loss) <= 1e-6 * fmax(1, rb.test_loss));
    char path[600];
    snprintf(path, sizeof path, "%s/fused.ckpt", dir);
    CU_ASSERT_EQUAL(glia__checkpoint_save(on->m, path, 1, 0, 0, 0), GLIA_OK);
    glia_status st = glia_model_load_checkpoint(off->m, path);
    if (st) printf("\n  %s\n", glia_context_error(off->ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(same_weights(off, on));  /* the fused run's weights, loaded */
    remove(path);
    close_run(on), close_run(off);
}

/* A relu read after a batchnorm that nothing else reads becomes the batchnorm's activation = relu:
 * the same losses and weights as the layers apart (the fused layer computes their bits), in both
 * memory formats, and checkpoints move between the two; a batchnorm read by two layers, and a relu
 * whose impl is chosen, stay as written. */
static void test_fuse_bn_relu(void)
{
    make_data();
    static const char layers[] = "[c1]\ntype = conv2d\nfilters = 4\npadding = 1\n[b1]\ntype = batchnorm\n[r1]\ntype = relu\n"
                                 "[c2]\ntype = conv2d\nfilters = 4\npadding = 1\n[b2]\ntype = batchnorm\n[r2]\ntype = relu\n"
                                 "[s]\ntype = concat\ninputs = b2, r2\n"                /* b2 is read twice: stays */
                                 "[c3]\ntype = conv2d\nfilters = 4\npadding = 1\n[b3]\ntype = batchnorm\n"
                                 "[r3]\ntype = relu\nimpl = cpu\n"                      /* its impl chosen: stays */
                                 "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n"
                                 "[loss]\ntype = softmax_cross_entropy\n";
    for (int f = 0; f < 2; f++) {
        const char *fmt = f ? "memory_format = channels_last\n" : "memory_format = contiguous\n";
        struct run on, off;
        open_run(&on, fuse_text_in(fmt, "on", "", layers));
        open_run(&off, fuse_text_in(fmt, "off", "", layers));
        CU_ASSERT_EQUAL(off.m->graph.n_nodes, 13);
        CU_ASSERT_EQUAL_FATAL(on.m->graph.n_nodes, 12);  /* r1 is part of b1 */
        CU_ASSERT_STRING_EQUAL(on.m->graph.nodes[1].layer.name, "b1");
        CU_ASSERT_STRING_EQUAL(on.m->graph.nodes[3].layer.name, "b2");
        CU_ASSERT_STRING_EQUAL(on.m->graph.nodes[7].layer.name, "b3");
        CU_ASSERT(on.m->graph.nodes[1].act_fused && !on.m->graph.nodes[3].act_fused && !on.m->graph.nodes[7].act_fused);
        CU_ASSERT_EQUAL(on.m->graph.nodes[2].in[0], 1);  /* c2 reads b1 */
        CU_ASSERT_EQUAL(glia__model_fingerprint(on.m), glia__model_fingerprint(off.m));
        expect_summary(on.m, "graph pass fuse_pointwise: b1 (batchnorm) + r1 (relu) run as batchnorm b1 with "
                             "activation = relu\n",
                       (const char *[]){"b2 (batchnorm) +", "b3 (batchnorm) +", NULL});
        fused_trains_as_apart(&on, &off, f ? "channels_last" : "contiguous");
    }
}

/* A relu read after a conv2d that nothing else reads becomes the conv2d's activation = relu (oneDNN's post-op; the
 * backward masks by the output, which the fused layer therefore keeps): the same losses and weights as the layers
 * apart, in both memory formats (test_fuse_dropout recomputes one under checkpoint_segments), and checkpoints move
 * between the two; a conv2d read by two layers stays as written. */
static void test_fuse_conv_relu(void)
{
    make_data();
    static const char layers[] = "[c1]\ntype = conv2d\nfilters = 4\npadding = 1\n[r1]\ntype = relu\n"
                                 "[c2]\ntype = conv2d\nfilters = 4\npadding = 1\nstride = 2\n[r2]\ntype = relu\n"
                                 "[c3]\ntype = conv2d\nfilters = 4\npadding = 1\nbias = off\n[r3]\ntype = relu\n"
                                 "[s]\ntype = concat\ninputs = c3, r3\n"                /* c3 is read twice: stays */
                                 "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n"
                                 "[loss]\ntype = softmax_cross_entropy\n";
    for (int f = 0; f < 2; f++) {
        const char *fmt = f ? "memory_format = channels_last\n" : "memory_format = contiguous\n";
        struct run on, off;
        open_run(&on, fuse_text_in(fmt, "on", "", layers));
        open_run(&off, fuse_text_in(fmt, "off", "", layers));
        CU_ASSERT_EQUAL(off.m->graph.n_nodes, 10);
        CU_ASSERT_EQUAL_FATAL(on.m->graph.n_nodes, 8);  /* c1 c2 c3 r3 s flat fc loss */
        CU_ASSERT_STRING_EQUAL(on.m->graph.nodes[0].layer.name, "c1");
        CU_ASSERT_STRING_EQUAL(on.m->graph.nodes[1].layer.name, "c2");
        CU_ASSERT(on.m->graph.nodes[0].act_fused && on.m->graph.nodes[1].act_fused && !on.m->graph.nodes[2].act_fused);
        CU_ASSERT_EQUAL(on.m->graph.nodes[1].in[0], 0);  /* c2 reads c1 */
        /* the fused layer's backward reads its output (the relu's mask), the plain one's does not */
        CU_ASSERT(glia__bwd_reads_out(on.m, 0) && !glia__bwd_reads_out(off.m, 0) && !glia__bwd_reads_out(on.m, 2));
        CU_ASSERT_EQUAL(glia__model_fingerprint(on.m), glia__model_fingerprint(off.m));
        expect_summary(on.m, "graph pass fuse_pointwise: c1 (conv2d) + r1 (relu) run as conv2d c1 with "
                             "activation = relu\n",
                       (const char *[]){"c3 (conv2d) +", NULL});
        fused_trains_as_apart(&on, &off, f ? "channels_last" : "contiguous");
    }
}

/* The fusion runs of test_fuse_dact and test_fuse_residual, each with its model's layers: on (fused) trains to the
 * same weights and losses bit for bit as bare (the same model built the same way, its pairs then cleared by the
 * caller), and learns; then a fresh fused run trains like off (the layers as written, [graph] fuse_pointwise = off).
 * When cut, the model's checkpoint_segments recompute some layers. Every run closed. */
static void fused_trains_as_cleared(struct run *on, struct run *bare, struct run *off, const char *text, bool cut,
                                    const char *label)
{
    if (cut) {
        int recomputed = 0;
        for (int i = 0; i < on->m->graph.n_nodes; i++) recomputed += on->m->graph.nodes[i].recompute;
        CU_ASSERT(on->m->graph.ckpt_segments > 1 && recomputed > 0);
    }
    struct glia_epoch_result ra = GLIA_TEST_RESULT, rb = GLIA_TEST_RESULT;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(on->m, &quiet, &ra, 1), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(bare->m, &quiet, &rb, 1), GLIA_OK);
    CU_ASSERT(same_weights(on, bare));
    CU_ASSERT_EQUAL(ra.train_loss, rb.train_loss);
    CU_ASSERT_EQUAL(ra.test_loss, rb.test_loss);
    if (!(ra.train_loss < log(6.0))) printf("\n  %s: train loss %g\n", label, ra.train_loss);
    CU_ASSERT(ra.train_loss < log(6.0));
    close_run(bare), close_run(on);
    open_run(on, text);
    fused_trains_as_apart(on, off, label);
}

/* A linear whose activation (gelu, gelu_tanh; fused or written) only the next linear reads hands the activation's
 * gradient to that one's backward (GLIA_KERNEL_DOUT_PREACT, glia_kernel.din_act), which applies it as it writes the
 * input gradient: with [graph] fuse_pointwise on, not off; not for an output read twice. Training with the hand-off
 * gives the same weights bit for bit as the same fused model without it (also with checkpoint_segments recomputing the
 * producers), and the model trains like the layers as written. */
static void test_fuse_dact(void)
{
    make_data();
    static const char layers[] = "[flat]\ntype = flatten\n"
                                 "[fc1]\ntype = linear\noutputs = 24\n[g1]\ntype = gelu\n"
                                 "[fc2]\ntype = linear\noutputs = 24\n[g2]\ntype = gelu\napproximate = tanh\n"
                                 "[fc3]\ntype = linear\noutputs = 24\nactivation = gelu_tanh\n"
                                 "[fc4]\ntype = linear\noutputs = 24\n"
                                 "[a]\ntype = add\ninputs = fc3, fc4\n"                  /* fc3 is read twice */
                                 "[fc5]\ntype = linear\noutputs = 6\n[loss]\ntype = softmax_cross_entropy\n";
    for (int ck = 0; ck < 2; ck++) {
        const char *graph = ck ? "checkpoint_segments = 2\n[train]\noptimizer = sgd\nlr = 0.1\n[optimizer]\nmomentum = 0.9\n"
                               : "[train]\noptimizer = sgd\nlr = 0.1\n[optimizer]\nmomentum = 0.9\n";
        struct run on, bare, off;
        open_fused_runs(&on, &bare, &off, graph, layers);
        CU_ASSERT_EQUAL_FATAL(on.m->graph.n_nodes, 8);  /* flat fc1 fc2 fc3 fc4 a fc5 loss */
        const struct glia__node *n = on.m->graph.nodes;
        CU_ASSERT(n[2].din_act == 2 && n[1].dout_preact == 3);  /* fc2 applies fc1's gelu gradient */
        CU_ASSERT(n[3].din_act == 3 && n[2].dout_preact == 4);  /* fc3, fc2's gelu_tanh */
        CU_ASSERT(n[4].din_act == 0 && n[3].dout_preact == 0);  /* fc3's output is read twice */
        CU_ASSERT(n[6].din_act == 0 && n[5].dout_preact == 0);
        for (int i = 0; i < off.m->graph.n_nodes; i++)
            CU_ASSERT(off.m->graph.nodes[i].din_act == 0 && off.m->graph.nodes[i].dout_preact == 0);
        expect_summary(on.m, "graph pass fuse_pointwise: in training fc3 (linear) applies the gradient of fc2's "
                             "activation (gelu_tanh) as it writes that layer's output gradient\n",
                       (const char *[]){"in training fc4", NULL});
        for (int i = 0; i < bare.m->graph.n_nodes; i++) bare.m->graph.nodes[i].din_act = bare.m->graph.nodes[i].dout_preact = 0;
        fused_trains_as_cleared(&on, &bare, &off, fuse_text_in("", "on", graph, layers), ck,
                                ck ? "gelu hand-off, checkpointed" : "gelu hand-off");
    }
}

/* A layernorm reading a residual add (two inputs, x + y) computes the sum in its own forward and writes both
 * (GLIA_KERNEL_RESIDUAL_IN, glia_fwd.residual and sum), with [graph] fuse_pointwise on; an add of three stays. Training
 * and evaluation give the same bits as the same model with the pairs cleared, also with checkpoint_segments
 * recomputing them apart, and the model trains like the layers as written. */
static void test_fuse_residual(void)
{
    make_data();
    static const char layers[] = "[flat]\ntype = flatten\n[e]\ntype = linear\noutputs = 16\n"
                                 "[f1]\ntype = linear\noutputs = 16\n[r1]\ntype = add\ninputs = e, f1\n[ln1]\ntype = layernorm\n"
                                 "[f2]\ntype = linear\noutputs = 16\n[r2]\ntype = add\ninputs = r1, f2\n[ln2]\ntype = layernorm\n"
                                 "[r3]\ntype = add\ninputs = ln2, f2, r2\n[ln3]\ntype = layernorm\n"  /* three inputs */
                                 "[out]\ntype = linear\noutputs = 6\n[loss]\ntype = softmax_cross_entropy\n";
    for (int ck = 0; ck < 2; ck++) {
        const char *graph = ck ? "checkpoint_segments = 2\n[train]\noptimizer = sgd\nlr = 0.1\n"
                               : "[train]\noptimizer = sgd\nlr = 0.1\n";
        struct run on, bare, off;
        open_fused_runs(&on, &bare, &off, graph, layers);
        CU_ASSERT_EQUAL_FATAL(on.m->graph.n_nodes, 12);
        const struct glia__node *n = on.m->graph.nodes;
        CU_ASSERT(n[3].res_norm == 5 && n[4].res_by == 4);  /* r1 in ln1 */
        CU_ASSERT(n[6].res_norm == 8 && n[7].res_by == 7);  /* r2 in ln2 */
        CU_ASSERT(n[8].res_norm == 0 && n[9].res_by == 0);  /* r3 adds three */
        for (int i = 0; i < off.m->graph.n_nodes; i++) CU_ASSERT(off.m->graph.nodes[i].res_norm == 0);
        expect_summary(on.m, "graph pass fuse_pointwise: ln1 (layernorm) computes the sum r1 (add) in the same pass\n",
                       (const char *[]){"sum r3", NULL});
        for (int i = 0; i < bare.m->graph.n_nodes; i++) bare.m->graph.nodes[i].res_norm = bare.m->graph.nodes[i].res_by = 0;
        fused_trains_as_cleared(&on, &bare, &off, fuse_text_in("", "on", graph, layers), ck,  /* test loss: fused too */
                                ck ? "residual in layernorm, checkpointed" : "residual in layernorm");
    }
}

/* In evaluation a batchnorm (on its running statistics) that alone reads a conv2d runs in the conv2d's forward, one
 * pass over its output (glia_fwd.affine; with its fused relu too): the same evaluation bit for bit as the two layers
 * apart, in both memory formats; training runs both layers as written; the plan keeps the batchnorm's output alive
 * from the conv2d's forward. A batchnorm without running statistics, a conv2d with its own relu, and one read twice
 * are left as written. */
static void test_fold_bn_eval(void)
{
    make_data();
    static const char layers[] = "[c1]\ntype = conv2d\nfilters = 4\npadding = 1\n[b1]\ntype = batchnorm\n[r1]\ntype = relu\n"
                                 "[c2]\ntype = conv2d\nfilters = 4\npadding = 1\nstride = 2\n[b2]\ntype = batchnorm\n"
                                 "[c3]\ntype = conv2d\nfilters = 4\npadding = 1\n[b3]\ntype = batchnorm\n"
                                 "track_running_stats = off\n"                               /* batch statistics: stays */
                                 "[c4]\ntype = conv2d\nfilters = 4\npadding = 1\n[r4]\ntype = relu\n[b4]\ntype = batchnorm\n"
                                 "[s]\ntype = concat\ninputs = b4, c4\n"
                                 "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n"
                                 "[loss]\ntype = softmax_cross_entropy\n";
    for (int f = 0; f < 2; f++) {
        const char *fmt = f ? "memory_format = channels_last\n" : "memory_format = contiguous\n";
        struct run on;
        open_run(&on, fuse_text_in(fmt, "on", "", layers));
        struct glia_model *m = on.m;
        int folds = 0;
        for (int i = 0; i < m->graph.n_nodes; i++) {
            const struct glia__node *nd = &m->graph.nodes[i];
            if (!nd->norm_fold) continue;
            folds++;
            CU_ASSERT(!strcmp(nd->layer.name, "c1") || !strcmp(nd->layer.name, "c2"));
            CU_ASSERT_EQUAL(m->graph.nodes[nd->norm_fold - 1].folded_by, i + 1);
        }
        CU_ASSERT_EQUAL(folds, 2);  /* c1 + b1 (its relu fused), c2 + b2; not c3 + b3, c4 (relu) + b4 */
        char *sum = summary_of(m);
        const char *want = "graph pass fuse_pointwise: in evaluation c1 (conv2d) computes b1 (batchnorm) too, in the "
                           "same pass over its output\n";
        if (!strstr(sum, want)) printf("\n  want: %s%s", want, sum);
        CU_ASSERT_PTR_NOT_NULL(strstr(sum, want));
        free(sum);
        struct glia_epoch_result r = GLIA_TEST_RESULT;
        CU_ASSERT_EQUAL_FATAL(glia_model_train(m, &quiet, &r, 1), GLIA_OK);  /* moves the running statistics */
        double loss[2], acc[2];
        CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(m, &loss[0], &acc[0]), GLIA_OK);
        /* the evaluation's views: c2's output is b2's bytes (never written), b2's output apart from c2's input (b1's
         * output, which c2 reads while it writes b2's) */
        const struct glia__node *c2 = &m->graph.nodes[2], *b2 = &m->graph.nodes[c2->norm_fold - 1];
        CU_ASSERT_STRING_EQUAL(b2->layer.name, "b2");
        CU_ASSERT_PTR_EQUAL(c2->out->data, b2->out->data);
        const char *lo = b2->out->data, *hi = lo + glia_tensor_nbytes(b2->out), *x = m->graph.nodes[1].out->data;
        CU_ASSERT(hi <= x || x + glia_tensor_nbytes(m->graph.nodes[1].out) <= lo);
        for (int i = 0; i < m->graph.n_nodes; i++) m->graph.nodes[i].norm_fold = m->graph.nodes[i].folded_by = 0;
        glia__model_release_activations(m);  /* planned again without the folds */
        CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(m, &loss[1], &acc[1]), GLIA_OK);  /* the layers apart */
        CU_ASSERT_PTR_NOT_EQUAL(m->graph.nodes[0].out->data, m->graph.nodes[1].out->data);
        if (loss[0] != loss[1]) printf("\n  %s: eval loss %.9g folded, %.9g apart\n", fmt, loss[0], loss[1]);
        CU_ASSERT(loss[0] == loss[1] && acc[0] == acc[1]);
        CU_ASSERT(loss[0] > 0 && isfinite(loss[0]));
        close_run(&on);
    }
}

/* An optimizer without state (n_state = 0: the fixture plugin good's fixture_opt, w -= lr g, as a user writes plain
 * SGD) trains: the same weights bit for bit as sgd without momentum, through gradient accumulation, clipping, dp and
 * a checkpoint resumed in the middle of the run. */
static void test_stateless_optimizer(void)
{
    make_data();
    static const char *fmt =
        "[plugins]\nload = %s/good.so\n[runtime]\ndevice = cpu\nseed = 9\n"
        "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
        "batch_size = 32\nworkers = 0\nmean = 0.2\nstd = 0.3\n"
        "[train]\nepochs = 2\noptimizer = %s\nlr = 0.05\naccumulate = 2\nclip_grad_norm = 0.5\nmax_steps = %d\n"
        "checkpoint_dir = %s/%s\n[distributed]\nmode = %s\ndevices = cpu, cpu\n"
        "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n[act]\ntype = relu\n"
        "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n";
    const char *fix = glia_test_fixtures(), *modes[] = {"none", "dp"};
    char text[8192], ck[700];
    for (int k = 0; k < 2; k++) {
        struct run a, b, c;
        snprintf(text, sizeof text, fmt, fix, dir, dir, dir, dir, "sgd", 0, dir, "ck-sgd", modes[k]);
        open_run(&a, text);
        CU_ASSERT_EQUAL_FATAL(a.m->trainer.opt.type->n_state, 1);
        CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, NULL, 0), GLIA_OK);
        /* the same run in two halves: 5 steps, then resumed from the checkpoint of step 5 */
        snprintf(text, sizeof text, fmt, fix, dir, dir, dir, dir, "fixture_opt", 5, dir, "ck-plain", modes[k]);
        open_run(&b, text);
        CU_ASSERT_EQUAL_FATAL(b.m->trainer.opt.type->n_state, 0);
        glia_status st = glia_model_train(b.m, &quiet, NULL, 0);
        if (st) printf("\n  %s\n", glia_context_error(b.ctx));
        CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
        snprintf(text, sizeof text, fmt, fix, dir, dir, dir, dir, "fixture_opt", 0, dir, "ck-plain", modes[k]);
        open_run(&c, text);
        snprintf(ck, sizeof ck, "%s/ck-plain/step-00000005.ckpt", dir);
        struct glia_train_options o = {sizeof(struct glia_train_options), NULL, -1, NULL, ck};
        st = glia_model_train(c.m, &o, NULL, 0);
        if (st) printf("\n  %s\n", glia_context_error(c.ctx));
        CU_ASSERT_EQUAL(st, GLIA_OK);
        if (!same_weights(&a, &c)) printf("\n  mode %s: weights differ by %g\n", modes[k], weight_diff(&c, &a));
        CU_ASSERT(same_weights(&a, &c));
        close_run(&a), close_run(&b), close_run(&c);
    }
}

/* A model with batchnorm, a residual, dropout and forward_counter (a fixture with a buffer that counts its training
 * forwards, not their recomputations), checkpointed into `segments`. */
static const char *ckpt_model_text(int segments)
{
    static char buf[4096];
    const char *fix = glia_test_fixtures();
    snprintf(buf, sizeof buf,
             "[plugins]\npath = %s\n[runtime]\ndevice = cpu\nseed = 5\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\nworkers = 0\nmean = 0.2\nstd = 0.3\n"
             "[train]\nepochs = 1\noptimizer = sgd\nlr = 0.05\n[optimizer]\nmomentum = 0.9\n"
             "[graph]\ncheckpoint_segments = %d\n"
             "[c1]\ntype = conv2d\nfilters = 4\npadding = 1\n[bn1]\ntype = batchnorm\n[r1]\ntype = relu\n"
             "[cnt]\ntype = forward_counter\n[c2]\ntype = conv2d\nfilters = 4\npadding = 1\n[bn2]\ntype = batchnorm\n"
             "[sum]\ntype = add\ninputs = cnt, bn2\n[r2]\ntype = relu\n[drop]\ntype = dropout\np = 0.2\n"
             "[c2b]\ntype = conv2d\nfilters = 4\npadding = 1\n[c3]\ntype = conv2d\nfilters = 4\npadding = 1\n[r3]\ntype = relu\n"
             "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             fix, dir, dir, dir, dir, segments);
    return buf;
}

static int node_named(const struct glia_model *m, const char *name)
{
    for (int i = 0; i < m->graph.n_nodes; i++)
        if (!strcmp(m->graph.nodes[i].layer.name, name)) return i;
    CU_FAIL("no such node");
    return 0;
}

/* The model's buffers (running statistics, counters), in node order, malloc'ed; *n of them. */
static float *buffers(const struct glia_model *m, int64_t *n)
{
    *n = 0;
    for (int i = 0; i < m->graph.n_nodes; i++)
        for (int b = 0; b < m->graph.nodes[i].layer.n_buffers; b++) *n += glia_tensor_numel(m->graph.nodes[i].layer.buffers[b].value);
    float *v = malloc(sizeof *v * (size_t)(*n ? *n : 1)), *at = v;
    CU_ASSERT_FATAL(v != NULL);
    for (int i = 0; i < m->graph.n_nodes; i++)
        for (int b = 0; b < m->graph.nodes[i].layer.n_buffers; b++) {
            const struct glia_tensor *t = m->graph.nodes[i].layer.buffers[b].value;
            memcpy(at, glia_tensor_f32(t), sizeof *v * (size_t)glia_tensor_numel(t));
            at += glia_tensor_numel(t);
        }
    return v;
}

/* Activation checkpointing changes memory, not results: the same weights and running statistics bit for bit with
 * 0 and at most 2 and 5 segments (batchnorm's recomputation moves no statistic twice, dropout draws the same mask
 * again, a counter counts each step once), the cuts never fall inside the residual,
 * the training plan shrinks, and the profile's trace shows each recomputation inside the backward. */
static void test_checkpoint_segments(void)
{
    make_data();
    const int segs[3] = {0, 2, 5};
    struct run r[3];
    float *w[3], *buf[3];
    long long nw[3];
    int64_t nb[3];
    for (int v = 0; v < 3; v++) {
        open_run(&r[v], ckpt_model_text(segs[v]));
        CU_ASSERT_EQUAL_FATAL(glia_model_train(r[v].m, &quiet, NULL, 1), GLIA_OK);
        w[v] = weights(&r[v], &nw[v]);
        buf[v] = buffers(r[v].m, &nb[v]);
        CU_ASSERT(v ? r[v].m->graph.ckpt_segments > 1 && r[v].m->graph.ckpt_segments <= segs[v] : r[v].m->graph.ckpt_segments == 1);
        /* forward_counter's buffer counts one training forward per step */
        const struct glia_model *m = r[v].m;
        CU_ASSERT_EQUAL(glia_tensor_f32(m->graph.nodes[node_named(m, "cnt")].layer.buffers[0].value)[0], (float)(512 / 32));
        for (int c = 0; c < m->graph.n_nodes; c++) {  /* a cut: no edge from before it to after it but its own */
            if (!m->graph.nodes[c].cut) continue;
            for (int i = c + 1; i < m->graph.n_nodes; i++)
                for (int k = 0; k < m->graph.nodes[i].n_in; k++) CU_ASSERT(m->graph.nodes[i].in[k] < 0 || m->graph.nodes[i].in[k] >= c);
        }
        for (int i = node_named(m, "cnt") + 1; i <= node_named(m, "bn2"); i++) CU_ASSERT(!m->graph.nodes[i].cut);
    }
    for (int v = 1; v < 3; v++) {
        CU_ASSERT_EQUAL_FATAL(nw[v], nw[0]);
        CU_ASSERT_EQUAL(memcmp(w[v], w[0], sizeof(float) * (size_t)nw[0]), 0);
        CU_ASSERT_EQUAL_FATAL(nb[v], nb[0]);
        CU_ASSERT_EQUAL(memcmp(buf[v], buf[0], sizeof(float) * (size_t)nb[0]), 0);
        CU_ASSERT(r[v].m->act.plan.train < r[0].m->act.plan.train);
        CU_ASSERT(r[v].m->graph.ckpt_plan[1] == r[v].m->act.plan.train && r[v].m->graph.ckpt_plan[0] == r[0].m->act.plan.train);
    }
    /* what the test relies on: with 2 segments the counter sits inside a recomputed run, run again too (its buffer
     * still counts once a step: it leaves lasting state alone when recompute is set); with 5, dropout and a batchnorm
     * run again */
    const struct glia_model *m2 = r[1].m, *m5 = r[2].m;
    CU_ASSERT(m2->graph.nodes[node_named(m2, "r1")].recompute && m2->graph.nodes[node_named(m2, "c2")].recompute);
    CU_ASSERT(m2->graph.nodes[node_named(m2, "cnt")].recompute && !m2->graph.nodes[node_named(m2, "cnt")].cut);
    CU_ASSERT(m5->graph.nodes[node_named(m5, "drop")].recompute && m5->graph.nodes[node_named(m5, "bn1")].recompute);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    glia_model_summary(r[1].m, f);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "graph pass checkpoint_segments: 2 segments, cut after sum; a training step runs "
                                        "the forward of c1 .. c2 (5 layers) again in backward: "));
    free(text);
    /* the trace: 2 segments recompute c1, bn1, r1, cnt and c2 just before sum's backward (not bn2: only sum reads it,
     * and add's backward reads no input) */
    const char *path = glia_test_tmp("ckpt-trace.json");
    f = fopen("/dev/null", "w");
    glia_status st = glia_model_profile_trace(r[1].m, 2, 1, f, path);
    fclose(f);
    if (st) printf("\n  %s\n", glia_context_error(r[1].ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    static const char *const fwd[] = {"c1", "bn1", "r1", "cnt", "c2", "bn2", "sum", "r2", "drop", "c2b", "c3", "r3", "flat", "fc", "loss"};
    static const char *const bwd[] = {"loss", "fc", "flat", "r3", "c3", "c2b", "drop", "r2", "sum", "bn2", "c2", "cnt", "r1", "bn1", "c1"};
    static const char *const rec[] = {"c1", "bn1", "r1", "cnt", "c2"};
    struct trace_expect e = {2, 15, fwd, 15, bwd, "sgd", false, 0, 5, rec};
    CU_ASSERT_EQUAL(trace_check(path, &e), 0);
    remove(path);
    for (int v = 0; v < 3; v++) {
        free(w[v]);
        free(buf[v]);
        close_run(&r[v]);
    }
    /* a negative count is refused with the key named */
    struct glia_context *ctx;
    struct glia_config *cfg;
    struct glia_model *m = NULL;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_parse_string(ctx, "t.ini", ckpt_model_text(-1), &cfg) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_build(ctx, cfg, &m), GLIA_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "checkpoint_segments"));
    glia_config_free(cfg);
    glia_context_free(ctx);
}

/* A pointwise layer fed twice by one layer (its gradients share a buffer) trains like add on the
 * same inputs: inputs 1 and 3 have equal derivatives, and 3's must not be read from the buffer
 * that input 2 has added into. */
static void test_pointwise_shared_input(void)
{
    make_data();
    char text[4096];
    float *w[2];
    long long n[2];
    for (int v = 0; v < 2; v++) {
        snprintf(text, sizeof text, "[runtime]\ndevice = cpu\nseed = 4\n"
                 "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
                 "batch_size = 32\nworkers = 0\nmean = 0.2\nstd = 0.3\n"
                 "[train]\nepochs = 1\noptimizer = sgd\nlr = 0.05\n"
                 "[c1]\ntype = conv2d\nfilters = 2\npadding = 1\n[c2]\ntype = conv2d\nfilters = 2\npadding = 1\ninputs = input\n"
                 "[s]\n%s\ninputs = c1, c1, c2\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n"
                 "[loss]\ntype = softmax_cross_entropy\n", dir, dir, dir, dir,
                 v ? "type = pointwise\nexpr = x + y + z" : "type = add");
        struct run r;
        struct glia_epoch_result res = GLIA_TEST_RESULT;
        open_run(&r, text);
        CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, &res, 1), GLIA_OK);
        w[v] = weights(&r, &n[v]);
        close_run(&r);
    }
    CU_ASSERT_EQUAL_FATAL(n[0], n[1]);
    double worst = 0;
    for (long long i = 0; i < n[0]; i++) worst = fmax(worst, fabs((double)w[0][i] - w[1][i]));
    if (!(worst <= 1e-6)) printf("\n  pointwise and add differ by %g\n", worst);
    CU_ASSERT(worst <= 1e-6);
    free(w[0]), free(w[1]);
}

/* floats of arena tensor t's padding that are not zero (a->len of them in full) */
static int nonzero_padding(const struct glia__arena *a, const float *full)
{
    int bad = 0;
    for (int i = 0; i <= a->count; i++) {
        int64_t from = i ? a->off[i - 1] + a->size[i - 1] : 0, to = i < a->count ? a->off[i] : a->len;
        for (int64_t j = from; j < to; j++) bad += full[j] != 0.0f;
    }
    return bad;
}

/* Every parameter, gradient and buffer starts on a 256-byte boundary of its arena (the CPU
 * allocator gives the arena 64 bytes); the padding stays zero through training. */
static void test_arena_alignment(void)
{
    make_data();
    struct run r;
    open_run(&r, bn_text("", ""));
    struct glia_model *m = r.m;
    CU_ASSERT_EQUAL((uintptr_t)m->params.w->data % 64, 0);
    int n = 0;
    for (int i = 0; i < m->graph.n_nodes; i++) {
        const struct glia_layer *l = &m->graph.nodes[i].layer;
        for (int p = 0; p < l->n_params; p++, n++) {
            CU_ASSERT_EQUAL(((char *)l->params[p].value->data - (char *)m->params.w->data) % 256, 0);
            CU_ASSERT_EQUAL(((char *)l->params[p].grad->data - (char *)m->params.g->data) % 256, 0);
        }
        for (int p = 0; p < l->n_buffers; p++)
            CU_ASSERT_EQUAL(((char *)l->buffers[p].value->data - (char *)m->params.buf->data) % 256, 0);
    }
    CU_ASSERT_EQUAL(n, m->params.wa.count);
    CU_ASSERT(m->params.wa.len > m->params.wa.n && m->params.ba.len > m->params.ba.n);  /* this model has padding to check */
    CU_ASSERT_PTR_NULL(m->params.decay_mask);  /* weight decay everywhere: no mask */
    CU_ASSERT_EQUAL(glia_model_train(m, &quiet, NULL, 0), GLIA_OK);
    CU_ASSERT_EQUAL(nonzero_padding(&m->params.wa, glia_tensor_f32(m->params.w)), 0);
    CU_ASSERT_EQUAL(nonzero_padding(&m->params.wa, glia_tensor_f32(m->params.g)), 0);
    CU_ASSERT_EQUAL(nonzero_padding(&m->params.wa, glia_tensor_f32(m->params.state[0])), 0);
    CU_ASSERT_EQUAL(nonzero_padding(&m->params.ba, glia_tensor_f32(m->params.buf)), 0);
    close_run(&r);
}

/* The weights after one optimizer step of `opt` with weight_decay = wd; `train` and `fc1` are extra
 * lines of [train] and [fc1]. A decay mask is there when `masked`. */
static float *one_step(const char *opt, const char *wd, const char *train, const char *fc1, bool masked, long long *n)
{
    char text[4096];
    snprintf(text, sizeof text,
             "[runtime]\ndevice = cpu\nseed = 9\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\nmean = 0.2\nstd = 0.3\n"
             "[train]\nepochs = 1\nmax_steps = 1\noptimizer = %s\nlr = 0.05\n%s[optimizer]\nweight_decay = %s\n"
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n%s[act]\ntype = relu\n"
             "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir, opt, train, wd, fc1);
    struct run r;
    open_run(&r, text);
    CU_ASSERT_EQUAL(r.m->params.decay_mask != NULL, masked);
    CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);
    CU_ASSERT_EQUAL(r.m->trainer.step, 1);
    float *w = weights(&r, n);
    close_run(&r);
    return w;
}

/* Whether floats [from, to) of a and b are the same bits. */
static bool same(const float *a, const float *b, int from, int to)
{
    return !memcmp(a + from, b + from, sizeof(float) * (size_t)(to - from));
}

/* Parameters a decay mask leaves alone move after one step as in a run without weight decay, and
 * the others do not: [fc1] weight_decay = off, then [train] weight_decay_1d = off (the biases). */
static void test_weight_decay_off(void)
{
    make_data();
    /* not lars: a tensor without decay also goes without its trust ratio, which weight_decay = 0 keeps (test_optim) */
    const char *opts[] = {"sgd", "adam", "adamw", "adadelta", "lamb", "novograd"};
    enum { W1 = 0, B1 = 576, W2 = 592, B2 = 672, END = 677 };  /* fc1 weight, bias; fc2 weight, bias (packed) */
    for (int i = 0; i < 6; i++) {
        long long n0, n1, n2, n3;
        float *none = one_step(opts[i], "0", "", "", false, &n0), *on = one_step(opts[i], "0.5", "", "", false, &n1),
              *fc1 = one_step(opts[i], "0.5", "", "weight_decay = off\n", true, &n2),
              *d1 = one_step(opts[i], "0.5", "weight_decay_1d = off\n", "", true, &n3);
        CU_ASSERT_FATAL(n0 == END && n1 == END && n2 == END && n3 == END);
        CU_ASSERT(same(fc1, none, W1, W2));   /* fc1: no decay */
        CU_ASSERT(!same(fc1, none, W2, B2));  /* fc2: decay */
        CU_ASSERT(same(fc1, on, W2, END));    /* fc2 decays as with no mask */
        CU_ASSERT(!same(on, none, W1, B1) && !same(on, none, B1, W2) && !same(on, none, B2, END));
        CU_ASSERT(same(d1, none, B1, W2) && same(d1, none, B2, END));  /* the biases: no decay */
        CU_ASSERT(same(d1, on, W1, B1) && same(d1, on, W2, B2));       /* the weights: decay */
        free(none);
        free(on);
        free(fc1);
        free(d1);
    }
    /* glia check lists the parameters left alone */
    for (int k = 0; k < 2; k++) {
        char text[4096], *txt = NULL;
        size_t len = 0;
        snprintf(text, sizeof text,
                 "[runtime]\ndevice = cpu\n[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\n"
                 "test_labels = %s/tel\n[train]\n%s"
                 "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n%s[fc2]\ntype = linear\noutputs = 5\n"
                 "[loss]\ntype = softmax_cross_entropy\n",
                 dir, dir, dir, dir, k ? "weight_decay_1d = off\n" : "", k ? "weight_decay = off\n" : "");
        struct run r;
        open_run(&r, text);
        FILE *f = open_memstream(&txt, &len);
        glia_model_summary(r.m, f);
        fclose(f);
        if (k) CU_ASSERT_PTR_NOT_NULL(strstr(txt, "\nno weight decay: fc1.weight fc1.bias fc2.bias\n"))
        else CU_ASSERT_PTR_NULL(strstr(txt, "no weight decay"));
        free(txt);
        close_run(&r);
    }
}

/* [data] resident (core/act.c): a convolution net on 6x5 images with crop padding and flip, reshuffled, data keys
 * and [train] keys added. */
static const char *resident_text(const char *data_extra, const char *train_extra)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 5\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 24\ntest_batch_size = 64\nmean = 0.2\nstd = 0.3\nrandom_crop_padding = 2\nrandom_flip = on\n%s\n"
             "[train]\nepochs = 3\noptimizer = sgd\nlr = 0.05\n%s\n[optimizer]\nmomentum = 0.9\n"
             "[conv]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n[act]\ntype = relu\n"
             "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             dir, dir, dir, dir, data_extra, train_extra);
    return buf;
}

/* Where a run's training batches are made: the scratch of a training run of text. */
static void resident_choice(const char *text, bool want_on)
{
    struct run r;
    struct glia__scratch s = {0};
    open_run(&r, text);
    CU_ASSERT_EQUAL_FATAL(glia__scratch_alloc(r.m, &s, true, false), GLIA_OK);
    CU_ASSERT_EQUAL(s.train.order_only, want_on);
    CU_ASSERT_EQUAL(s.resident.images != NULL, want_on);
    CU_ASSERT_EQUAL(s.train.workers, want_on ? 0 : 2);
    glia__scratch_free(&s);
    close_run(&r);
}

/* resident = on trains to the same losses and weights, bit for bit, as the host loader (off), also with
 * accumulation and without shuffling; auto is off on the CPU backend. */
static void test_resident_same_bits(void)
{
    make_data();
    resident_choice(resident_text("", ""), false);  /* auto on the CPU: the loader */
    resident_choice(resident_text("resident = auto\nresident_share = 1", ""), false);
    resident_choice(resident_text("resident = off", ""), false);
    resident_choice(resident_text("resident = on", ""), true);
    static const char *const cases[][2] = {{"", ""}, {"", "accumulate = 2"}, {"shuffle = off\nworkers = 0", ""},
                                           {"drop_last = on", "accumulate = 3"}};
    for (size_t i = 0; i < GLIA__ARRAY_LEN(cases); i++) {
        char on[256], off[256];
        snprintf(on, sizeof on, "%s\nresident = on", cases[i][0]);
        snprintf(off, sizeof off, "%s\nresident = off", cases[i][0]);
        struct run a, b;
        struct glia_epoch_result ra[3] = GLIA_TEST_RESULTS, rb[3] = GLIA_TEST_RESULTS;
        open_run(&a, resident_text(on, cases[i][1]));
        open_run(&b, resident_text(off, cases[i][1]));
        CU_ASSERT_EQUAL(glia_model_train(a.m, &quiet, ra, 3), GLIA_OK);
        CU_ASSERT_EQUAL(glia_model_train(b.m, &quiet, rb, 3), GLIA_OK);
        for (int e = 0; e < 3; e++) {
            if (ra[e].train_loss != rb[e].train_loss)
                printf("\n  case %zu epoch %d: %.9g vs %.9g\n", i, e + 1, ra[e].train_loss, rb[e].train_loss);
            CU_ASSERT_EQUAL(ra[e].train_loss, rb[e].train_loss);
            CU_ASSERT_EQUAL(ra[e].test_loss, rb[e].test_loss);
        }
        CU_ASSERT(same_weights(&a, &b));
        close_run(&a);
        close_run(&b);
    }
    /* the losses see the batches: another seed of the augmentation trains differently */
    struct run a, b;
    struct glia_epoch_result ra[3] = GLIA_TEST_RESULTS, rb[3] = GLIA_TEST_RESULTS;
    open_run(&a, resident_text("resident = on", ""));
    open_run(&b, edited(resident_text("resident = off", ""), "seed = 5", "seed = 6"));
    CU_ASSERT_EQUAL(glia_model_train(a.m, &quiet, ra, 3), GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_train(b.m, &quiet, rb, 3), GLIA_OK);
    CU_ASSERT_NOT_EQUAL(ra[2].train_loss, rb[2].train_loss);
    close_run(&a);
    close_run(&b);
}

/* Bad [data] resident and resident_share values: one line naming the file, line, section and key. */
static void test_resident_config_errors(void)
{
    make_data();
    expect_build_error(resident_text("resident = always", ""), "t.ini:");
    expect_build_error(resident_text("resident = always", ""), "[data] resident");
    expect_build_error(resident_text("resident_share = 1.5", ""), "[data] resident_share");
}

/* [runtime] detect_anomaly: a layer whose forward makes NaN (log of negatives) or whose backward does (sqrt at 0) stops
 * training at step 1 with one line naming it, the call and the tensor; off, the same model stops only when its loss
 * is NaN, a step later, naming no layer; on, a
 * healthy model trains to the same weights as off; refused with fp16's loss scaling. */
static void test_detect_anomaly(void)
{
    const char *base = "[runtime]\ndevice = cpu\n%s[data]\nformat = synthetic\nchannels = 1\nrows = 4\ncols = 4\n"
                       "classes = 3\ntrain_samples = 32\ntest_samples = 8\nbatch_size = 8\n[train]\nepochs = 1\n"
                       "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 5\n[odd]\ntype = pointwise\n"
                       "expr = %s\n[fc2]\ntype = linear\noutputs = 3\n[loss]\ntype = softmax_cross_entropy\n";
    struct {
        const char *runtime, *expr, *want;  /* want NULL: trains */
    } cases[] = {
        {"detect_anomaly = on\n", "log(x)",
         "t.ini:20: [odd] detect_anomaly: the forward at step 1 wrote NaN into its output (element 0 of 40)"},
        {"detect_anomaly = on\n", "sqrt(relu(x))",
         "t.ini:20: [odd] detect_anomaly: the backward at step 1 wrote NaN into the gradient of its input 0 ([fc1]'s "
         "output)"},
        {"", "sqrt(relu(x))", "at epoch 1 step 2; lower [train] lr"},  /* off: only the loss, a step later */
    };
    char text[2048];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text, base, cases[i].runtime, cases[i].expr);
        struct run r;
        open_run(&r, text);
        struct glia_epoch_result res[1] = GLIA_TEST_RESULTS;
        glia_status st = glia_model_train(r.m, &quiet, res, 1);
        if (cases[i].want) {
            CU_ASSERT_NOT_EQUAL(st, GLIA_OK);
            CU_ASSERT_EQUAL(!strstr(glia_context_error(r.ctx), "detect_anomaly"), !*cases[i].runtime);
            if (!strstr(glia_context_error(r.ctx), cases[i].want)) printf("\n  %s\n", glia_context_error(r.ctx));
            CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), cases[i].want));
        } else {
            CU_ASSERT_EQUAL(st, GLIA_OK);
        }
        close_run(&r);
    }
    struct run a, b;  /* a healthy model: the checks change nothing */
    snprintf(text, sizeof text, base, "detect_anomaly = on\nseed = 4\n", "tanh(x)");
    open_run(&a, text);
    snprintf(text, sizeof text, base, "seed = 4\n", "tanh(x)");
    open_run(&b, text);
    struct glia_epoch_result ra[1] = GLIA_TEST_RESULTS, rb[1] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL(glia_model_train(a.m, &quiet, ra, 1), GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_train(b.m, &quiet, rb, 1), GLIA_OK);
    CU_ASSERT(same_weights(&a, &b));
    close_run(&a);
    close_run(&b);
    snprintf(text, sizeof text, base, "detect_anomaly = on\nprecision = fp16\n", "tanh(x)");
    expect_build_error(text, "[runtime] detect_anomaly: not with precision = fp16");
    snprintf(text, sizeof text, base, "nvtx = on\n", "tanh(x)");  /* NVTX ranges: CUDA's (test_cuda sees them) */
    expect_build_error(text, "[runtime] nvtx: the cpu backend names no profiler ranges");
}

/* The backend's params group (ABI 2.6): the core calls pass_begin once before each forward of the model, training
 * steps and evaluation batches alike, with the model's parameter arena, and not for the forwards a backward runs again
 * (checkpoint_segments); a backend whose ops end before the group (built for ABI 2.5) is never called. The CPU
 * backend's own ops, with the group added, stand in for a device's. */
static long n_passes;
static const void *pass_params;
static size_t pass_bytes;
static glia_status count_pass(void *priv, const void *params, size_t bytes)
{
    (void)priv;
    n_passes++;
    pass_params = params;
    pass_bytes = bytes;
    return GLIA_OK;
}

static void test_pass_begin(void)
{
    make_data();
    for (int v = 0; v < 3; v++) {  /* 0: 2 epochs; 1: checkpoint segments, 1 epoch; 2: ops of ABI 2.5 */
        struct run r;
        open_run(&r, v == 1 ? ckpt_model_text(3) : model_text(7, 2));
        int epochs = v == 1 ? 1 : 2;
        if (v == 1) CU_ASSERT(r.m->graph.ckpt_segments > 1);
        struct glia_backend_params_ops group = {.struct_size = sizeof group, .pass_begin = count_pass};
        struct glia_backend_ops ops = *r.m->backend->ops;
        ops.params = &group;
        if (v == 2) ops.struct_size = offsetof(struct glia_backend_ops, params);
        const struct glia_backend_ops *own = r.m->backend->ops;
        r.m->backend->ops = &ops;
        n_passes = 0;
        pass_params = NULL;
        CU_ASSERT_EQUAL_FATAL(glia_model_train(r.m, &quiet, NULL, epochs), GLIA_OK);
        long trained = n_passes;
        double loss, acc;
        CU_ASSERT_EQUAL_FATAL(glia_model_evaluate(r.m, &loss, &acc), GLIA_OK);
        long eval = n_passes - trained;  /* one evaluation's batches */
        if (v == 2) {
            CU_ASSERT_EQUAL(n_passes, 0);
        } else {
            CU_ASSERT(eval > 0);
            /* every training step, and each epoch's evaluation (eval_every = 1) */
            if (trained != r.m->trainer.step + epochs * eval)
                printf("\n  case %d: %ld passes begun in training, %lld steps, %ld a evaluation\n", v, trained,
                       (long long)r.m->trainer.step, eval);
            CU_ASSERT_EQUAL(trained, r.m->trainer.step + epochs * eval);
            CU_ASSERT_PTR_EQUAL(pass_params, r.m->params.w->data);
            CU_ASSERT_EQUAL(pass_bytes, glia_tensor_nbytes(r.m->params.w));
        }
        r.m->backend->ops = own;
        close_run(&r);
    }
}

GLIA_TEST_MAIN("train", GLIA_TEST(test_loss_scaler), GLIA_TEST(test_struct_sizes), GLIA_TEST(test_stateless_optimizer), GLIA_TEST(test_precision_needs_cuda), GLIA_TEST(test_json_string),
               GLIA_TEST(test_profile_trace), GLIA_TEST(test_profile_roofline), GLIA_TEST(test_same_seed_bit_identical), GLIA_TEST(test_loss_goes_down),
               GLIA_TEST(test_metrics_file), GLIA_TEST(test_eval_every), GLIA_TEST(test_residual_dropout_model),
               GLIA_TEST(test_lr_schedules), GLIA_TEST(test_lr_poly), GLIA_TEST(test_lr_poly_training), GLIA_TEST(test_lr_poly_errors), GLIA_TEST(test_large_batch_example), GLIA_TEST(test_clip_grad_norm), GLIA_TEST(test_arena_plan), GLIA_TEST(test_memplan_shapes), GLIA_TEST(test_memplan_random), GLIA_TEST(test_memplan_two_lives),
               GLIA_TEST(test_activation_memory_shared), GLIA_TEST(test_grad_in_place), GLIA_TEST(test_saved_memory), GLIA_TEST(test_fuse_pointwise), GLIA_TEST(test_fuse_dropout), GLIA_TEST(test_fuse_bn_relu), GLIA_TEST(test_fuse_conv_relu), GLIA_TEST(test_fuse_dact), GLIA_TEST(test_fuse_residual), GLIA_TEST(test_fold_bn_eval), GLIA_TEST(test_checkpoint_segments), GLIA_TEST(test_pointwise_shared_input),
               GLIA_TEST(test_arena_alignment), GLIA_TEST(test_weight_decay_off), GLIA_TEST(test_gradient_accumulation),
               GLIA_TEST(test_drop_bias_before_norm),
               GLIA_TEST(test_resume_is_bit_exact), GLIA_TEST(test_request_stop), GLIA_TEST(test_checkpoint_errors_and_eval), GLIA_TEST(test_checkpoint_keep),
               GLIA_TEST(test_resume_keeps_loss_scaler), GLIA_TEST(test_checkpoint_loss_scaler),
               GLIA_TEST(test_checkpoint_corrupt_fields), GLIA_TEST(test_checkpoint_header_bits),
               GLIA_TEST(test_checkpoint_dir_made), GLIA_TEST(test_checkpoint_sweep), GLIA_TEST(test_resume_nothing_left),
               GLIA_TEST(test_fashion_mnist_subset), GLIA_TEST(test_resident_same_bits), GLIA_TEST(test_resident_config_errors),
               GLIA_TEST(test_detect_anomaly), GLIA_TEST(test_pass_begin))
