/* tests/test_dp.c — mode = dp in one process: a batch split over several CPU "devices" trains
 * to the weights of one device on the whole batch (even and uneven splits, accumulation, a conv
 * net), and [distributed] devices errors. Not ddp (test_ddp_mpi). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "parts.h"
#include "modelutil.h"

static char dir[512];

static void make_data(void)
{
    CU_ASSERT_FATAL(glia_test_idx_set(dir, sizeof dir, "dp-data", 300, 100, 6, 5, 11) == 0);
}

static const char *model(const char *dist, int batch, const char *train_extra, const char *layers)
{
    static char buf[8192];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 3\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = %d\ntest_batch_size = 40\nmean = 0.2\nstd = 0.3\n"
             "[distributed]\n%s\n[train]\nepochs = 2\noptimizer = sgd\nlr = 0.05\n%s\n[optimizer]\nmomentum = 0.9\n%s",
             dir, dir, dir, dir, batch, dist, train_extra,
             layers ? layers
                    : "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 16\n[act]\ntype = relu\n"
                      "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n");
    return buf;
}

static void compare(const char *devices, int batch, const char *train_extra, const char *layers)
{
    make_data();
    char dist[256];
    snprintf(dist, sizeof dist, "mode = dp\ndevices = %s", devices);
    struct run dp, one;
    open_run(&dp, model(dist, batch, train_extra, layers));
    open_run(&one, model("mode = none", batch, train_extra, layers));
    CU_ASSERT(dp.m->dist.n_replicas > 1);
    for (int r = 1; r < dp.m->dist.n_replicas; r++) {
        CU_ASSERT_EQUAL(dp.m->dist.replica[r]->graph.n_nodes, dp.m->graph.n_nodes);
        CU_ASSERT_EQUAL(dp.m->dist.replica[r]->graph.ckpt_segments, dp.m->graph.ckpt_segments);
        for (int i = 0; i < dp.m->graph.n_nodes; i++)
            CU_ASSERT(dp.m->dist.replica[r]->graph.nodes[i].recompute == dp.m->graph.nodes[i].recompute &&
                      dp.m->dist.replica[r]->graph.nodes[i].cut == dp.m->graph.nodes[i].cut);
    }
    if (layers && strstr(layers, "checkpoint_segments")) CU_ASSERT(dp.m->graph.ckpt_segments > 1);
    struct glia_epoch_result rd[2] = GLIA_TEST_RESULTS, r1[2] = GLIA_TEST_RESULTS;
    glia_status st = glia_model_train(dp.m, &quiet, rd, 2);
    if (st) printf("\n  %s\n", glia_context_error(dp.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_FATAL(glia_model_train(one.m, &quiet, r1, 2) == GLIA_OK);
    double worst = weight_diff(&dp, &one);
    if (!(worst < 2e-5)) printf("\n  weights differ by %g\n", worst);
    CU_ASSERT(worst < 2e-5);
    for (int k = 0; k < 2; k++) {
        CU_ASSERT(fabs(rd[k].train_loss - r1[k].train_loss) < 1e-5);
        CU_ASSERT(fabs(rd[k].test_accuracy - r1[k].test_accuracy) < 1e-9);
    }
    close_run(&dp);
    close_run(&one);
}

static void test_two_devices(void) { compare("cpu, cpu", 32, "", NULL); }
/* batch 10 over 3: chunks 4, 4, 2, with gradients accumulated over 2 batches */
static void test_three_devices_uneven(void) { compare("cpu, cpu, cpu", 10, "accumulate = 2", NULL); }
/* batch 7 over 4 devices: chunks 2, 2, 2, 1; the last batch (300 % 7 = 6 rows) leaves one device idle */
static void test_idle_device(void) { compare("cpu, cpu, cpu, cpu", 7, "", NULL); }

static void test_conv_dropout_free_net(void)
{
    compare("cpu, cpu", 16, "schedule = step\ngamma = 0.5",
            "[conv]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n[act]\ntype = relu\n[pool]\ntype = maxpool2d\n"
            "size = 2\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n");
}

/* a residual add + relu fused into one pointwise layer on every device */
static void test_fused_residual(void)
{
    compare("cpu, cpu", 16, "",
            "[graph]\nfuse_pointwise = on\n[conv]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n"
            "[c2]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n[sum]\ntype = add\ninputs = conv, c2\n"
            "[act]\ntype = relu\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n"
            "[loss]\ntype = softmax_cross_entropy\n");
}

/* relus fused into conv2d layers (activation = relu) in the model and every replica alike: the replicas find the key
 * set in the sections they share with the model and fuse the same layers, so their layers pair up */
static void test_fused_activations(void)
{
    compare("cpu, cpu, cpu", 16, "",
            "[graph]\nfuse_pointwise = on\n[conv]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n"
            "[act]\ntype = relu\n[c2]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n"
            "[a2]\ntype = relu\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n"
            "[loss]\ntype = softmax_cross_entropy\n");
}

/* activation checkpointing in the model and every replica, cut at the same places; 3 devices, uneven chunks */
static void test_checkpointed(void)
{
    compare("cpu, cpu, cpu", 10, "",
            "[graph]\ncheckpoint_segments = 3\n[conv]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n"
            "[act]\ntype = relu\n[c2]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n[sum]\ntype = add\n"
            "inputs = act, c2\n[a2]\ntype = relu\n[c3]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n"
            "[a3]\ntype = relu\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 5\n"
            "[loss]\ntype = softmax_cross_entropy\n");
}

/* glia_model_step on a dp model splits the caller's batch as training does: after a checkpoint is loaded (the
 * replicas must compute with its weights, not those they last copied), steps on three devices leave the weights
 * that one device's steps on the same batches leave (float rounding apart), with accumulation and an early
 * update (update_now). */
static void test_step(void)
{
    make_data();
    const char *ckpt = glia_test_tmp("dp-step-ckpt");
    char train[600];
    snprintf(train, sizeof train, "accumulate = 2\ncheckpoint_dir = %s", ckpt);
    struct run src, dp, one;
    open_run(&src, model("mode = none", 10, train, NULL));
    CU_ASSERT_FATAL(glia_model_train(src.m, &quiet, NULL, 0) == GLIA_OK);
    char path[700];
    snprintf(path, sizeof path, "%s/final.ckpt", ckpt);
    open_run(&dp, model("mode = dp\ndevices = cpu, cpu, cpu", 10, "accumulate = 2", NULL));
    open_run(&one, model("mode = none", 10, "accumulate = 2", NULL));
    const struct glia__dataset *d = &one.m->data.train;
    int64_t per = (int64_t)d->channels * d->rows * d->cols, idx[10];
    float x[10 * 36];
    int32_t y[10];
    CU_ASSERT_FATAL(per == 36);
    struct run *runs[2] = {&dp, &one};
    for (int k = 0; k < 5; k++) {
        for (int i = 0; i < 10; i++) idx[i] = k * 10 + i;
        glia__dataset_gather(d, idx, 10, &one.m->data.norm, x, y);
        struct glia_batch b = {.struct_size = sizeof b, .shape = glia_shape_make(4, (int64_t[]){10, 1, 6, 6}), .x = x,
                               .labels = y, .update_now = k == 4};
        for (int r = 0; r < 2; r++) {
            if (k == 1) CU_ASSERT_EQUAL(glia_model_load_checkpoint(runs[r]->m, path), GLIA_OK);
            struct glia_step_result res = {.struct_size = sizeof res};
            glia_status st = glia_model_step(runs[r]->m, &b, &res);
            if (st) printf("\n  %s\n", glia_context_error(runs[r]->ctx));
            CU_ASSERT_EQUAL(st, GLIA_OK);
            CU_ASSERT_EQUAL(res.updated, k % 2 == 1 || k == 4);
        }
    }
    CU_ASSERT_EQUAL(dp.m->trainer.step, 3);
    double worst = weight_diff(&dp, &one);
    if (!(worst < 2e-5)) printf("\n  weights differ by %g\n", worst);
    CU_ASSERT(worst < 2e-5);
    close_run(&src);
    close_run(&dp);
    close_run(&one);
}

static void expect_error(const char *dist, const char *want)
{
    make_data();
    expect_build_error(model(dist, 8, "", NULL), want);
}

static void test_errors(void)
{
    expect_error("mode = dp", "t.ini:14: [distributed] mode: mode = dp needs devices");
    expect_error("mode = dp\ndevices = cpu, gpu", "t.ini:15: [distributed] devices: expected cpu, cuda, cuda:N or N, got 'gpu'");
    expect_error("mode = dp\ndevices = cpu, 0", "must all be of one type");
}

/* [data] resident = on with dp: the batch made on the first device and split over the replicas trains to the bits
 * of the host loader's batches (off), with crop padding and flip, and accumulation. */
static void test_resident(void)
{
    make_data();
    struct run on, off;
    char a[8192], b[8192];
    for (int k = 0; k < 2; k++) {
        const char *text = model("mode = dp\ndevices = cpu, cpu, cpu", 10, "accumulate = 2", NULL);
        const char *at = strstr(text, "std = 0.3\n");
        CU_ASSERT_PTR_NOT_NULL_FATAL(at);
        snprintf(k ? b : a, sizeof a, "%.*srandom_flip = on\nrandom_crop_padding = 1\nresident = %s\n%s", (int)(at - text),
                 text, k ? "off" : "on", at);
    }
    open_run(&on, a);
    open_run(&off, b);
    struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
    CU_ASSERT_EQUAL_FATAL(glia_model_train(on.m, &quiet, ra, 2), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(off.m, &quiet, rb, 2), GLIA_OK);
    for (int e = 0; e < 2; e++) CU_ASSERT_EQUAL(ra[e].train_loss, rb[e].train_loss);
    CU_ASSERT(same_weights(&on, &off));
    close_run(&on);
    close_run(&off);
}

GLIA_TEST_MAIN("dp", GLIA_TEST(test_two_devices), GLIA_TEST(test_three_devices_uneven), GLIA_TEST(test_idle_device),
               GLIA_TEST(test_conv_dropout_free_net), GLIA_TEST(test_fused_residual), GLIA_TEST(test_fused_activations), GLIA_TEST(test_checkpointed),
               GLIA_TEST(test_step), GLIA_TEST(test_errors), GLIA_TEST(test_resident))
