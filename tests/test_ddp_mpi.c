/* tests/test_ddp_mpi.c — DDP over the mpi transport with 2 ranks (the program starts itself
 * through mpirun): training equals one process on the global batch, every rank ends with the
 * same weights, SyncBatchNorm sees the global batch, a different model, different settings or a
 * --resume on one rank only are refused, only rank 0 writes files (checkpoints, metrics, the TensorBoard event
 * file, the profile's trace).
 * Not the transport's own tests (test_comm) and not rank failures (test_ddp_fault). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "parts.h"
#include "modelutil.h"
#include "mpiutil.h"
#include "tbutil.h"
#include "traceutil.h"

static char dir[512];
static char dist_extra[700];         /* more [distributed] keys for the next model */
static bool tokens;                  /* the next model reads the token files, grouped by length */
static struct glia_context *keeper;  /* holds MPI open for the whole program */
static struct glia_comm *world;

static void test_setup(void)
{
    CU_ASSERT_FATAL(glia_context_new(&keeper) == GLIA_OK);
    struct glia_backend *cpu;
    CU_ASSERT_FATAL(glia_backend_get(keeper, (struct glia_device){GLIA_DEVICE_CPU, 0}, &cpu) == GLIA_OK);
    glia_status st = glia_comm_open(keeper, "mpi", cpu, 60, &world);
    if (st) printf("\n  %s\n", glia_context_error(keeper));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(world->info.world, 2);
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("ddp-mpi"));
    if (world->info.rank == 0) {  /* rank 0 writes the data, then everyone reads it */
        char cmd[1200], a[600], b[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
        CU_ASSERT_FATAL(system(cmd) == 0);
        snprintf(a, sizeof a, "%s/tri", dir);
        snprintf(b, sizeof b, "%s/trl", dir);
        CU_ASSERT_FATAL(glia_test_write_idx(a, b, 512, 6, 6, 5, 11) == 0);
        snprintf(a, sizeof a, "%s/tri400", dir);
        snprintf(b, sizeof b, "%s/trl400", dir);
        CU_ASSERT_FATAL(glia_test_write_idx(a, b, 400, 6, 6, 5, 11) == 0);
        snprintf(a, sizeof a, "%s/tei", dir);
        snprintf(b, sizeof b, "%s/tel", dir);
        CU_ASSERT_FATAL(glia_test_write_idx(a, b, 201, 6, 6, 5, 12) == 0);
        snprintf(a, sizeof a, "%s/tok_train", dir);
        CU_ASSERT_FATAL(glia_test_write_tokens(a, 300, 40, 5, 2, 50, 13) == 0);
        snprintf(a, sizeof a, "%s/tok_test", dir);
        CU_ASSERT_FATAL(glia_test_write_tokens(a, 101, 40, 5, 2, 50, 14) == 0);
    }
    uint64_t t;
    CU_ASSERT_FATAL(glia_comm_barrier(world, &t) == GLIA_OK);
    CU_ASSERT_FATAL(glia_comm_wait(world, t, true) == GLIA_OK);
}

/* A small model: ddp with `batch` per rank, or one process with `batch`. extra goes at the end
 * of [train]; layers replace the default MLP when not NULL. */
static const char *model(bool ddp, int batch, int train_samples, const char *extra, const char *layers)
{
    static char buf[8192], files[4096];
    if (tokens)
        snprintf(files, sizeof files, "format = tokens\ntrain = %s/tok_train\ntest = %s/tok_test\nvocab = 40\n"
                 "group_by_length = on\ngroup_size = 2\n", dir, dir);
    else
        snprintf(files, sizeof files, "train_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\n"
                 "test_labels = %s/tel\nmean = 0.2\nstd = 0.3\n", dir, dir, dir, dir);
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 5\n"
             "[data]\n%sbatch_size = %d\ntest_batch_size = 50\ntrain_samples = %d\n"
             "[distributed]\nmode = %s\ntransport = mpi\ntimeout_s = 60\nbucket_mb = 0.001\nfirst_bucket_mb = 0.0005\n%s\n"
             "[train]\nepochs = 2\noptimizer = sgd\nlr = 0.05\n%s\n[optimizer]\nmomentum = 0.9\n%s",
             files, batch, train_samples, ddp ? "ddp" : "none", ddp ? dist_extra : "", extra ? extra : "",
             layers ? layers
                    : "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n[act]\ntype = relu\n"
                      "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n");
    return buf;
}

/* Largest |a - b| / max(1, |b|). */
static double rel_diff(const float *a, const float *b, long long n)
{
    double worst = 0;
    for (long long i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / fmax(1.0, fabs(b[i]));
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* Whether every rank holds the same n floats (bit for bit). */
static bool same_on_all_ranks(const float *w, long long n)
{
    double *mx = malloc(sizeof(double) * (size_t)n), *mn = malloc(sizeof(double) * (size_t)n);
    CU_ASSERT_FATAL(mx && mn);
    for (long long i = 0; i < n; i++) mx[i] = mn[i] = w[i];
    CU_ASSERT_FATAL(glia_comm_all_reduce_sync(world, mx, (size_t)n, GLIA_F64, GLIA_REDUCE_MAX) == GLIA_OK);
    CU_ASSERT_FATAL(glia_comm_all_reduce_sync(world, mn, (size_t)n, GLIA_F64, GLIA_REDUCE_MIN) == GLIA_OK);
    bool same = true;
    for (long long i = 0; i < n; i++) same &= mx[i] == mn[i];
    free(mx);
    free(mn);
    return same;
}

/* DDP with batch b per rank against one process with batch 2b, after 2 epochs. */
static void compare_with_global_batch(int b, int train_samples, const char *extra, const char *layers, double tol)
{
    struct run d, one;
    open_run(&d, model(true, b, train_samples, extra, layers));
    open_run(&one, model(false, 2 * b, train_samples, extra, layers));
    CU_ASSERT_EQUAL(d.m->dist.world, 2);
    CU_ASSERT_EQUAL(d.m->dist.rank, world->info.rank);
    struct glia_epoch_result rd[2] = GLIA_TEST_RESULTS, r1[2] = GLIA_TEST_RESULTS;
    glia_status st = glia_model_train(d.m, &quiet, rd, 2);
    if (st) printf("\n  %s\n", glia_context_error(d.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_FATAL(glia_model_train(one.m, &quiet, r1, 2) == GLIA_OK);
    CU_ASSERT_EQUAL(d.m->trainer.step, one.m->trainer.step);
    long long nd, n1;
    float *wd = weights(&d, &nd), *w1 = weights(&one, &n1);
    CU_ASSERT_EQUAL_FATAL(nd, n1);
    double e = rel_diff(wd, w1, nd);
    if (!(e < tol)) printf("\n  weights differ by %g\n", e);
    CU_ASSERT(e < tol);
    CU_ASSERT(same_on_all_ranks(wd, nd));
    for (int k = 0; k < 2; k++) {  /* the figures are the whole job's */
        CU_ASSERT(fabs(rd[k].train_loss - r1[k].train_loss) < 1e-4);
        CU_ASSERT(fabs(rd[k].test_loss - r1[k].test_loss) < 1e-4);
        CU_ASSERT(fabs(rd[k].test_accuracy - r1[k].test_accuracy) < 1e-9);
        CU_ASSERT_EQUAL(rd[k].world, 2);
        CU_ASSERT(rd[k].step_s_max >= rd[k].step_s_min);
        CU_ASSERT(rd[k].comm_wait_s >= 0);
    }
    free(wd);
    free(w1);
    close_run(&d);
    close_run(&one);
}

static void test_ddp_equals_global_batch(void) { compare_with_global_batch(16, 0, NULL, NULL, 2e-5); }

/* Accumulation: the micro-steps before the last keep their sums local; same result. */
static void test_ddp_accumulate(void) { compare_with_global_batch(8, 0, "accumulate = 2", NULL, 2e-5); }

/* A conv net with several buckets and a step schedule. */
static void test_ddp_conv(void)
{
    compare_with_global_batch(8, 256, "schedule = step\ngamma = 0.5",
                              "[conv]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n[act]\ntype = relu\n"
                              "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n"
                              "[loss]\ntype = softmax_cross_entropy\n",
                              1e-4);
}

/* SyncBatchNorm: the statistics of the whole job's batch, as batchnorm sees it in one process. */
static void test_ddp_syncbn(void)
{
    compare_with_global_batch(8, 256, NULL,
                              "[conv]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n"
                              "[bn]\ntype = batchnorm\nsync = on\n[act]\ntype = relu\n"
                              "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n"
                              "[loss]\ntype = softmax_cross_entropy\n",
                              1e-4);
}

/* Token data grouped by length: every rank takes its share of each of the job's sorted batches and
 * pads it to its own longest sample; the result is still the global batch's (a text CNN: the
 * padding adds nothing), and the epoch's padding share is the job's. */
static void test_ddp_tokens_grouped(void)
{
    tokens = true;
    compare_with_global_batch(6, 0, NULL,
                              "[emb]\ntype = embedding\nvocab = 40\ndim = 8\n"
                              "[conv]\ntype = conv2d\nfilters = 6\nsize_h = 1\nsize_w = 3\npadding_h = 0\npadding_w = 1\n"
                              "[act]\ntype = relu\n[pool]\ntype = seq_pool\ninputs = act, input\nmode = max\n"
                              "[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
                              1e-4);
    tokens = false;
}

/* Builds text on every rank, with the assignments of sets (--set's form, NULL-terminated; sets
 * may be NULL) applied on rank 1 only; returns the build's status, its error in err. */
static glia_status build_with_set(const char *text, const char *const *sets, char *err, size_t n)
{
    struct run r = {0};
    CU_ASSERT_FATAL(glia_context_new(&r.ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_parse_string(r.ctx, "t.ini", text, &r.cfg) == GLIA_OK);
    for (int i = 0; sets && sets[i] && world->info.rank == 1; i++) CU_ASSERT_FATAL(glia_config_set(r.cfg, sets[i]) == GLIA_OK);
    glia_status st = glia_model_build(r.ctx, r.cfg, &r.m);
    snprintf(err, n, "%s", glia_context_error(r.ctx));
    close_run(&r);
    return st;
}

/* Every rank must build the same model; the mismatch is named on every rank. */
static void test_ddp_different_models_refused(void)
{
    char layers[256], e[1024];
    snprintf(layers, sizeof layers,
             "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = %d\n[fc2]\ntype = linear\noutputs = 5\n"
             "[loss]\ntype = softmax_cross_entropy\n",
             world->info.rank == 0 ? 16 : 17);
    CU_ASSERT_EQUAL(build_with_set(model(true, 16, 0, NULL, layers), NULL, e, sizeof e), GLIA_ECONFIG);
    if (!strstr(e, "[fc1] outputs: ranks 0 and 1 differ (16 vs 17)")) printf("\n  %s\n", e);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "[fc1] outputs: ranks 0 and 1 differ (16 vs 17)"));
    /* the same sections in another order: another graph */
    snprintf(layers, sizeof layers, "[flat]\ntype = flatten\n%s%s[fc2]\ntype = linear\noutputs = 5\n"
             "[loss]\ntype = softmax_cross_entropy\n",
             world->info.rank == 0 ? "[fc1]\ntype = linear\noutputs = 16\n" : "[act]\ntype = relu\n",
             world->info.rank == 0 ? "[act]\ntype = relu\n" : "[fc1]\ntype = linear\noutputs = 16\n");
    CU_ASSERT_EQUAL(build_with_set(model(true, 16, 0, NULL, layers), NULL, e, sizeof e), GLIA_ECONFIG);
    if (!strstr(e, "t.ini: ranks 0 and 1 list the same sections in a different order")) printf("\n  %s\n", e);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "t.ini: ranks 0 and 1 list the same sections in a different order"));
}

/* Settings that change what the replicas compute must be the same on every rank: one of them
 * different on rank 1 is refused on both ranks at build, naming the key, both values and the ranks
 * (before, the ranks trained apart, or ran into each other's collectives). Per-rank keys, the same
 * value written otherwise, and no difference at all build. */
static void test_ddp_different_settings_refused(void)
{
    static const char *const cases[][2] = {
        {"train.lr=0.1", "[train] lr: ranks 0 and 1 differ (0.05 vs 0.1)"},
        {"runtime.seed=6", "[runtime] seed: ranks 0 and 1 differ (5 vs 6)"},
        {"optimizer.nesterov=on", "[optimizer] nesterov: ranks 0 and 1 differ (off vs on)"},
        {"data.shuffle=off", "[data] shuffle: ranks 0 and 1 differ (on vs off)"},
        {"data.batch_size=8", "[data] batch_size: ranks 0 and 1 differ (16 vs 8)"},
        {"data.train_samples=256", "[data] train_samples: ranks 0 and 1 differ (0 vs 256)"},
        {"graph.fuse_pointwise=off", "[graph] fuse_pointwise: ranks 0 and 1 differ (auto vs off)"},
    };
    const char *text = model(true, 16, 0, NULL, NULL);
    char e[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        glia_status st = build_with_set(text, (const char *const[]){cases[i][0], NULL}, e, sizeof e);
        bool ok = st == GLIA_ECONFIG && strstr(e, cases[i][1]);
        if (!ok) printf("\n  rank %d, --set %s: %s: %s\n", world->info.rank, cases[i][0], glia_status_name(st), e);
        CU_ASSERT(ok);
    }
    /* data files of another size (their paths may differ: the sizes are compared) */
    char images[700], labels[700];
    snprintf(images, sizeof images, "data.train_images=%s/tri400", dir);
    snprintf(labels, sizeof labels, "data.train_labels=%s/trl400", dir);
    CU_ASSERT_EQUAL(build_with_set(text, (const char *const[]){images, labels, NULL}, e, sizeof e), GLIA_ECONFIG);
    const char *want = "ranks 0 and 1 differ in the training set (512 samples of 1x6x6, 5 classes vs 400 samples of "
                       "1x6x6, 5 classes)";
    if (!strstr(e, want)) printf("\n  %s\n", e);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, want));
    static const char *const same[] = {"train.lr=0.050", "data.shuffle=true", "data.workers=0", "runtime.threads=1",
                                       "distributed.timeout_s=30", "data.pin_memory=off", NULL};
    glia_status st = build_with_set(text, same, e, sizeof e);
    if (st) printf("\n  rank %d: %s\n", world->info.rank, e);
    CU_ASSERT_EQUAL(st, GLIA_OK);
}

/* Uneven shards (500 samples over 2 ranks of batch 16 is padded); only rank 0 writes the
 * checkpoints, metrics and event file; each rank writes its own log. */
static void test_ddp_files_and_padding(void)
{
    char extra[1800];
    snprintf(extra, sizeof extra, "checkpoint_dir = %s/ckpt\nmetrics = %s/metrics.jsonl\ntensorboard = %s/tb\n", dir, dir,
             dir);
    snprintf(dist_extra, sizeof dist_extra, "rank_log = %s/rank-{rank}.log", dir);
    struct run d;
    open_run(&d, model(true, 16, 500, extra, NULL));
    dist_extra[0] = '\0';
    struct glia_train_options o = quiet;
    o.progress = 0;
    o.out = fopen("/dev/null", "w");
    CU_ASSERT_FATAL(glia_model_train(d.m, &o, NULL, 0) == GLIA_OK);
    fclose(o.out);
    CU_ASSERT_EQUAL(d.m->trainer.step, 2 * 16);  /* 250 samples a rank: 16 batches an epoch */
    uint64_t t;
    CU_ASSERT_FATAL(glia_comm_barrier(world, &t) == GLIA_OK);
    CU_ASSERT_FATAL(glia_comm_wait(world, t, true) == GLIA_OK);
    char path[700];
    struct stat sb;
    snprintf(path, sizeof path, "%s/ckpt/final.ckpt", dir);
    CU_ASSERT_EQUAL(stat(path, &sb), 0);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    int lines = 0;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        lines++;
        CU_ASSERT_PTR_NOT_NULL(strstr(line, "\"world\": 2"));
        CU_ASSERT_PTR_NOT_NULL(strstr(line, "\"comm_wait_s\""));
    }
    fclose(f);
    CU_ASSERT_EQUAL(lines, 2);  /* one writer, one line an epoch */
    snprintf(path, sizeof path, "%s/tb", dir);
    int64_t step[4];
    float v[4];
    CU_ASSERT_EQUAL(tb_dir_scalars(path, "epoch/train_loss", step, v, 4), 2);  /* one event file, one record an epoch */
    CU_ASSERT(step[0] == 16 && step[1] == 32);
    for (int r = 0; r < 2; r++) {
        snprintf(path, sizeof path, "%s/rank-%d.log", dir, r);
        f = fopen(path, "r");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        bool epoch_line = false;
        while (fgets(line, sizeof line, f)) epoch_line |= strstr(line, "epoch 2/2 train_loss") != NULL;
        fclose(f);
        CU_ASSERT(epoch_line);
    }
    CU_ASSERT_FATAL(glia_comm_barrier(world, &t) == GLIA_OK);  /* rank 0 checks before anyone moves on */
    CU_ASSERT_FATAL(glia_comm_wait(world, t, true) == GLIA_OK);
    close_run(&d);
}

/* glia_model_request_stop on rank 1 only: both ranks stop at the same step (they agree every 10
 * optimizer steps), rank 0 writes that step's checkpoint, and resuming from it on both ranks ends
 * with the weights of the uninterrupted run. */
static void test_ddp_request_stop(void)
{
    char extra[800], path[900];
    snprintf(extra, sizeof extra, "checkpoint_dir = %s/stopck\n", dir);
    struct run a, b, c;
    open_run(&a, model(true, 16, 500, extra, NULL));
    CU_ASSERT_FATAL(glia_model_train(a.m, &quiet, NULL, 0) == GLIA_OK);
    long long n;
    float *wa = weights(&a, &n);
    open_run(&b, model(true, 16, 500, extra, NULL));
    if (world->info.rank == 1) glia_model_request_stop(b.m);
    glia_status st = glia_model_train(b.m, &quiet, NULL, 0);
    CU_ASSERT_EQUAL(st, GLIA_EINTERRUPTED);
    CU_ASSERT_EQUAL(b.m->trainer.step, 10);
    snprintf(path, sizeof path, "%s/stopck/step-00000010.ckpt", dir);
    char want[1000];
    snprintf(want, sizeof want, "interrupted at step 10: continue with --resume %s", path);
    if (strcmp(glia_context_error(b.ctx), want)) printf("\n  rank %d: %s\n", world->info.rank, glia_context_error(b.ctx));
    CU_ASSERT_STRING_EQUAL(glia_context_error(b.ctx), want);
    close_run(&b);
    uint64_t t;
    CU_ASSERT_FATAL(glia_comm_barrier(world, &t) == GLIA_OK);  /* rank 0 has written it */
    CU_ASSERT_FATAL(glia_comm_wait(world, t, true) == GLIA_OK);
    open_run(&c, model(true, 16, 500, extra, NULL));
    struct glia_train_options o = quiet;
    o.resume = path;
    st = glia_model_train(c.m, &o, NULL, 0);
    if (st) printf("\n  %s\n", glia_context_error(c.ctx));
    CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
    float *wc = weights(&c, &n);
    double e = rel_diff(wc, wa, n);
    if (e != 0) printf("\n  resumed weights differ by %g\n", e);
    CU_ASSERT_EQUAL(e, 0);
    free(wa), free(wc);
    close_run(&a), close_run(&c);
}

/* Training with [train] checkpoint_dir plus `more`, rank `resuming` alone resumed from step 10 (the
 * checkpoint of test_ddp_request_stop): refused on both ranks with `want`. */
static void resume_mismatch_refused(const char *more, int resuming, const char *want)
{
    char extra[800], path[900];
    snprintf(extra, sizeof extra, "checkpoint_dir = %s/stopck\n%s", dir, more);
    snprintf(path, sizeof path, "%s/stopck/step-00000010.ckpt", dir);
    struct run d;
    open_run(&d, model(true, 16, 500, extra, NULL));
    struct glia_train_options o = quiet;
    o.resume = world->info.rank == resuming ? path : NULL;
    glia_status st = glia_model_train(d.m, &o, NULL, 0);
    if (!strstr(glia_context_error(d.ctx), want)) printf("\n  %s\n", glia_context_error(d.ctx));
    CU_ASSERT_EQUAL(st, GLIA_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(d.ctx), want));
    close_run(&d);
}

/* A --resume on rank 1 only: the ranks would start at different steps and meet in different
 * collectives; refused on both ranks when training starts. */
static void test_ddp_resume_on_one_rank_refused(void)
{
    resume_mismatch_refused("", 1, "rank 1 starts at step 10, rank 0 at step 0: every rank must --resume from the "
                                   "same checkpoint");
}

/* The same when rank 0's checkpoint leaves it nothing to do (at max_steps) and rank 1 starts
 * afresh: rank 0 must not return alone and leave rank 1 waiting for it. */
static void test_ddp_resume_done_on_one_rank_refused(void)
{
    resume_mismatch_refused("max_steps = 10\n", 0, "rank 1 starts at step 0, rank 0 at step 10: every rank must "
                                                   "--resume from the same checkpoint");
}

/* glia profile --trace under ddp: rank 0 writes the trace, with the gradient wait between the
 * last backward and the optimizer in every step; rank 1 writes nothing. */
static void test_ddp_profile_trace(void)
{
    struct run d;
    open_run(&d, model(true, 16, 0, NULL, NULL));
    int rank = world->info.rank;
    char path[700], mine[700];
    snprintf(path, sizeof path, "%s/trace-rank%%d.json", dir);
    snprintf(mine, sizeof mine, path, rank);
    remove(mine);
    FILE *f = fopen("/dev/null", "w");
    glia_status st = glia_model_profile_trace(d.m, 3, 2, f, mine);
    fclose(f);
    if (st) printf("\n  %s\n", glia_context_error(d.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    struct stat sb;
    if (rank == 0) {
        static const char *const fwd[] = {"flat", "fc1", "act", "fc2", "loss"};
        static const char *const bwd[] = {"loss", "fc2", "act", "fc1"};
        struct trace_expect e = {3, 5, fwd, 4, bwd, "sgd", true, 0, 0, NULL};
        CU_ASSERT_EQUAL(trace_check(mine, &e), 0);
    } else {
        CU_ASSERT_NOT_EQUAL(stat(mine, &sb), 0);  /* rank 0 writes for the job */
    }
    uint64_t t;
    CU_ASSERT_FATAL(glia_comm_barrier(world, &t) == GLIA_OK);
    CU_ASSERT_FATAL(glia_comm_wait(world, t, true) == GLIA_OK);
    close_run(&d);
}

static void test_teardown(void) { glia_context_free(keeper); }

GLIA_MPI_TEST_MAIN("ddp_mpi", 2, GLIA_TEST(test_setup), GLIA_TEST(test_ddp_equals_global_batch),
                   GLIA_TEST(test_ddp_accumulate), GLIA_TEST(test_ddp_conv), GLIA_TEST(test_ddp_syncbn), GLIA_TEST(test_ddp_tokens_grouped),
                   GLIA_TEST(test_ddp_different_models_refused), GLIA_TEST(test_ddp_different_settings_refused),
                   GLIA_TEST(test_ddp_files_and_padding),
                   GLIA_TEST(test_ddp_profile_trace), GLIA_TEST(test_ddp_request_stop),
                   GLIA_TEST(test_ddp_resume_on_one_rank_refused),
                   GLIA_TEST(test_ddp_resume_done_on_one_rank_refused),
                   GLIA_TEST(test_teardown))
