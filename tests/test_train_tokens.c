/* tests/test_train_tokens.c — training on variable-length token data: a text model learns the
 * synthetic task with and without group_by_length (which pads less), the result does not depend
 * on how much a batch is padded, a resumed run equals the uninterrupted one bit for bit, and dp
 * replicas equal one device. Not the reader or the sampler alone (test_tokens.c). */
#include <math.h>
#include <string.h>
#include "modelutil.h"
#include "parts.h"

static char dir[512];
static const char *runtime_extra = "";  /* more [runtime] keys for the next model */
static int run_seed = 3;                /* [runtime] seed of the next model */

static void make_data(void)
{
    snprintf(dir, sizeof dir, "%s", glia_test_tmp("train-tokens"));
    char cmd[1200], a[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CU_ASSERT_FATAL(system(cmd) == 0);
    snprintf(a, sizeof a, "%s/train.txt", dir);
    CU_ASSERT_FATAL(glia_test_write_tokens(a, 600, 40, 4, 3, 60, 21) == 0);
    snprintf(a, sizeof a, "%s/test.txt", dir);
    CU_ASSERT_FATAL(glia_test_write_tokens(a, 200, 40, 4, 3, 60, 22) == 0);
}

/* The model: emb -> (conv) -> pool -> fc; data and extra keys appended to [data] and [train]. */
static const char *text(const char *data, const char *train, bool conv, const char *pool_mode)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = %d\n%s\n"
             "[data]\nformat = tokens\ntrain = %s/train.txt\ntest = %s/test.txt\nvocab = 40\nbatch_size = 16\n"
             "test_batch_size = 50\n%s\n"
             "[train]\noptimizer = adam\nlr = 0.01\n%s\n"
             "[emb]\ntype = embedding\nvocab = 40\ndim = 12\n%s"
             "[pool]\ntype = seq_pool\ninputs = %s, input\nmode = %s\n"
             "[fc]\ntype = linear\noutputs = 4\n[loss]\ntype = softmax_cross_entropy\n",
             run_seed, runtime_extra, dir, dir, data, train,
             conv ? "[conv]\ntype = conv2d\nfilters = 16\nsize_h = 1\nsize_w = 3\npadding_h = 0\npadding_w = 1\n"
                    "[act]\ntype = relu\n"
                  : "",
             conv ? "act" : "emb", pool_mode);
    return buf;
}

/* The pad_frac of the last record of a metrics file. */
static double last_pad_frac(const char *path)
{
    FILE *f = fopen(path, "r");
    CU_ASSERT_FATAL(f != NULL);
    char line[2048], last[2048] = "";
    while (fgets(line, sizeof line, f)) strcpy(last, line);
    fclose(f);
    const char *p = strstr(last, "\"pad_frac\": ");
    CU_ASSERT_FATAL(p != NULL);
    return atof(p + 12);
}

static void test_learns_and_grouping_pads_less(void)
{
    make_data();
    double pad[2];
    for (int g = 0; g < 2; g++) {
        struct run r;
        open_run(&r, text(g ? "group_by_length = on\ngroup_size = 4" : "", "epochs = 3", true, "max"));
        struct glia_epoch_result res[3] = GLIA_TEST_RESULTS;
        const char *metrics = glia_test_tmp(g ? "tokens-metrics-1.jsonl" : "tokens-metrics-0.jsonl");
        struct glia_train_options o = quiet;
        o.metrics_path = metrics;
        glia_status st = glia_model_train(r.m, &o, res, 3);
        if (st) printf("\n  %s\n", glia_context_error(r.ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        printf("\n  group_by_length %s: test accuracy %.3f, loss %.3f -> %.3f", g ? "on" : "off", res[2].test_accuracy,
               res[0].train_loss, res[2].train_loss);
        CU_ASSERT(res[2].test_accuracy > 0.9);  /* chance is 0.25 */
        CU_ASSERT(res[2].train_loss < res[0].train_loss);
        pad[g] = last_pad_frac(metrics);
        close_run(&r);
    }
    printf("; padding %.3f random, %.3f grouped\n", pad[0], pad[1]);
    CU_ASSERT(pad[0] > 0.3);
    CU_ASSERT(pad[1] < pad[0] / 2);
}

/* Padding to a multiple of 16 instead of 1 changes every batch's length, not the result: the
 * embedding's padding row (token 0) starts at zero and gets no gradient, so padding reads zero
 * vectors, and seq_pool skips it. Without a convolution the sums run
 * in the same order: bit for bit; with one, within float rounding. */
static void test_padding_does_not_change_results(void)
{
    make_data();
    for (int conv = 0; conv < 2; conv++)
        for (int mode = 0; mode < 2; mode++) {
            float *w[2];
            long long n;
            for (int k = 0; k < 2; k++) {
                struct run r;
                open_run(&r, text(k ? "pad_to_multiple = 16\ngroup_by_length = on" : "group_by_length = on", "epochs = 1",
                                  conv, mode ? "max" : "mean"));
                CU_ASSERT_FATAL(glia_model_train(r.m, &quiet, NULL, 0) == GLIA_OK);
                w[k] = weights(&r, &n);
                close_run(&r);
            }
            double worst = 0;
            for (long long i = 0; i < n; i++) worst = fmax(worst, fabs((double)w[0][i] - w[1][i]));
            if (!conv) CU_ASSERT_EQUAL(memcmp(w[0], w[1], (size_t)n * sizeof(float)), 0);
            if (!(worst < 1e-5)) printf("\n  conv %d mode %d: weights differ by %g\n", conv, mode, worst);
            CU_ASSERT(worst < 1e-5);
            free(w[0]);
            free(w[1]);
        }
}

/* The embedding's padding_idx row (token 0, the tokens format's padding) as nn.Embedding keeps it: zero at
 * init and still zero after an epoch of adam (it gets no gradient), while the other rows are drawn and learn. */
static void test_padding_row_stays_zero(void)
{
    make_data();
    struct run r;
    open_run(&r, text("", "epochs = 1", false, "mean"));
    long long n;
    float *w0 = weights(&r, &n);  /* emb's weight (40, 12) comes first */
    CU_ASSERT_FATAL(glia_model_train(r.m, &quiet, NULL, 0) == GLIA_OK);
    float *w1 = weights(&r, &n);
    int zero0 = 0, zero1 = 0, moved = 0;
    for (int i = 0; i < 12; i++) zero0 += w0[i] == 0.0f, zero1 += w1[i] == 0.0f;
    for (int i = 12; i < 40 * 12; i++) moved += w0[i] != w1[i] && w0[i] != 0.0f;
    CU_ASSERT_EQUAL(zero0, 12);
    CU_ASSERT_EQUAL(zero1, 12);
    CU_ASSERT(moved > 100);
    free(w0);
    free(w1);
    close_run(&r);
}

/* Stop after some steps, resume from the checkpoint: the same weights as the uninterrupted run
 * (the grouped order is a function of seed and epoch), even when the resuming configuration names
 * another seed (the checkpoint's is used, for the data order too). */
static void test_resume_is_bit_exact(void)
{
    make_data();
    char ck[700], train[800], path[800];
    snprintf(ck, sizeof ck, "%s/ck", dir);
    struct run a, b, c;
    open_run(&a, text("group_by_length = on\ngroup_size = 3", "epochs = 2", true, "max"));
    CU_ASSERT_FATAL(glia_model_train(a.m, &quiet, NULL, 0) == GLIA_OK);
    long long n;
    float *wa = weights(&a, &n);
    snprintf(train, sizeof train, "epochs = 2\ncheckpoint_dir = %s\nmax_steps = 50", ck);  /* 38 steps an epoch */
    open_run(&b, text("group_by_length = on\ngroup_size = 3", train, true, "max"));
    CU_ASSERT_FATAL(glia_model_train(b.m, &quiet, NULL, 0) == GLIA_OK);
    close_run(&b);
    snprintf(path, sizeof path, "%s/step-%08d.ckpt", ck, 50);
    run_seed = 4;
    open_run(&c, text("group_by_length = on\ngroup_size = 3", "epochs = 2", true, "max"));
    run_seed = 3;
    struct glia_train_options o = quiet;
    o.resume = path;
    glia_status st = glia_model_train(c.m, &o, NULL, 0);
    if (st) printf("\n  %s\n", glia_context_error(c.ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    float *wc = weights(&c, &n);
    CU_ASSERT_EQUAL(memcmp(wa, wc, (size_t)n * sizeof(float)), 0);
    free(wa);
    free(wc);
    close_run(&a);
    close_run(&c);
}

/* [distributed] mode = dp over 3 CPU replicas: every replica runs its chunk at the batch's
 * padded length; the weights equal one device's within float rounding. */
static void test_dp_replicas(void)
{
    make_data();
    float *w[2];
    long long n;
    for (int k = 0; k < 2; k++) {
        char train[256];
        snprintf(train, sizeof train, "epochs = 1\n%s", k ? "[distributed]\nmode = dp\ndevices = cpu, cpu, cpu\n" : "");
        struct run r;
        open_run(&r, text("group_by_length = on", train, true, "max"));
        CU_ASSERT_FATAL(glia_model_train(r.m, &quiet, NULL, 0) == GLIA_OK);
        w[k] = weights(&r, &n);
        close_run(&r);
    }
    double worst = 0;
    for (long long i = 0; i < n; i++) worst = fmax(worst, fabs((double)w[0][i] - w[1][i]) / fmax(1, fabs(w[0][i])));
    if (!(worst < 1e-4)) printf("\n  dp weights differ by %g\n", worst);
    CU_ASSERT(worst < 1e-4);
    free(w[0]);
    free(w[1]);
}

/* memory_format = channels_last: the embedding writes (N, L, dim) rows, the convolution runs NHWC,
 * the token batch reaches seq_pool untouched; the weights equal the contiguous run's. */
static void test_channels_last(void)
{
    make_data();
    float *w[2];
    long long n;
    for (int k = 0; k < 2; k++) {
        struct run r;
        runtime_extra = k ? "memory_format = channels_last" : "";
        open_run(&r, text("group_by_length = on", "epochs = 1", true, "max"));
        runtime_extra = "";
        CU_ASSERT_FATAL(glia_model_train(r.m, &quiet, NULL, 0) == GLIA_OK);
        w[k] = weights(&r, &n);
        close_run(&r);
    }
    double worst = 0;
    for (long long i = 0; i < n; i++) worst = fmax(worst, fabs((double)w[0][i] - w[1][i]) / fmax(1, fabs(w[0][i])));
    if (!(worst < 1e-4)) printf("\n  channels_last weights differ by %g\n", worst);
    CU_ASSERT(worst < 1e-4);
    free(w[0]);
    free(w[1]);
}

/* A run that fails while a progress line is drawn (its checkpoint cannot be written at step 3: a
 * folder has the file's name) ends that line, so that the caller's error message starts a line of its own. And an embedding
 * whose table is smaller than the data's vocab is refused when the model is built. */
static void test_error_ends_progress_line(void)
{
    make_data();
    char path[700], text[4096];
    snprintf(path, sizeof path, "%s/late.txt", dir);
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    for (int i = 0; i < 40; i++) fprintf(f, "%d 1 2 %d\n", i % 2, i == 37 ? 30 : 3);
    fclose(f);
    static const char *fmt =
        "[runtime]\ndevice = cpu\n[data]\nformat = tokens\ntrain = %s\ntest = %s\nvocab = 40\nbatch_size = 8\n"
        "shuffle = off\n[train]\ncheckpoint_dir = %s/late-ck\ncheckpoint_every = 3\n[emb]\ntype = embedding\nvocab = %d\n"
        "dim = 4\n[pool]\ntype = seq_pool\ninputs = emb, input\n[fc]\ntype = linear\noutputs = 2\n"
        "[loss]\ntype = softmax_cross_entropy\n";
    snprintf(text, sizeof text, fmt, path, path, dir, 10);  /* the data's ids reach 39 */
    struct glia_context *c;
    struct glia_config *cfg;
    struct glia_model *bad = NULL;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_parse_string(c, "t.ini", text, &cfg) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_build(c, cfg, &bad), GLIA_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(c), "t.ini:15: [emb] vocab: 10 is smaller than [data] vocab = 40"));
    glia_config_free(cfg);
    glia_context_free(c);
    snprintf(text, sizeof text, fmt, path, path, dir, 40);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/late-ck' && mkdir -p '%s/late-ck/step-00000003.ckpt'", dir, dir);
    CU_ASSERT_FATAL(system(cmd) == 0);
    struct run r;
    open_run(&r, text);
    char *txt = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&txt, &len);
    struct glia_train_options o = {sizeof(struct glia_train_options), NULL, 1, out, NULL};
    CU_ASSERT_NOT_EQUAL(glia_model_train(r.m, &o, NULL, 0), GLIA_OK);
    fclose(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "late-ck/step-00000003.ckpt: Is a directory"));
    CU_ASSERT_PTR_NOT_NULL(strstr(txt, "\repoch 1/1  step 2/5"));
    CU_ASSERT(len > 0 && txt[len - 1] == '\n');
    free(txt);
    close_run(&r);
}

/* [data] resident = on keeps images on the device: a token set is refused on one line naming the key; auto and off
 * train as before. */
static void test_resident_refused(void)
{
    make_data();
    expect_build_error(text("resident = on", "", false, "mean"), "t.ini:12: [data] resident: resident = on keeps images");
    struct run r;
    open_run(&r, text("resident = auto", "epochs = 1", false, "mean"));
    CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);
    close_run(&r);
}

/* A GPT-shaped model on fixed-length sequences (N, T = 8): token and position embeddings as (N, T, C), linear on
 * the last dim, gelu into a residual add into dropout (fuse_pointwise = on makes them one pointwise layer), then a
 * flatten and a classifier. It learns the task, fused or not with the same weights within float rounding, and
 * memory_format = channels_last (which only 4-D tensors take) changes no bit. */
static const char *seq_text(const char *runtime, const char *graph)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 4\n%s\n[graph]\n%s\n"
             "[data]\nformat = tokens\ntrain = %s/seq-train.txt\ntest = %s/seq-test.txt\nvocab = 40\nbatch_size = 16\n"
             "test_batch_size = 50\n"
             "[train]\noptimizer = adamw\nlr = 0.003\nepochs = 3\n"
             "[wte]\ntype = embedding\nvocab = 40\ndim = 16\npadding_idx = -1\noutput = sequence\ninit_std = 0.02\n"
             "[wpe]\ntype = position_embedding\nmax_positions = 8\n"
             "[fc1]\ntype = linear\noutputs = 16\n[act]\ntype = gelu\n[res]\ntype = add\ninputs = act, wpe\n"
             "[drop]\ntype = dropout\np = 0.1\n[fc2]\ntype = linear\noutputs = 16\n[flat]\ntype = flatten\n"
             "[head]\ntype = linear\noutputs = 4\n[loss]\ntype = softmax_cross_entropy\n",
             runtime, graph, dir, dir);
    return buf;
}

static void test_sequence_model(void)
{
    make_data();
    char a[600];
    snprintf(a, sizeof a, "%s/seq-train.txt", dir);
    CU_ASSERT_FATAL(glia_test_write_tokens(a, 600, 40, 4, 8, 8, 31) == 0);
    snprintf(a, sizeof a, "%s/seq-test.txt", dir);
    CU_ASSERT_FATAL(glia_test_write_tokens(a, 200, 40, 4, 8, 8, 32) == 0);
    static const char *const variants[][2] = {{"", "fuse_pointwise = off"}, {"", "fuse_pointwise = on"},
                                              {"memory_format = channels_last", "fuse_pointwise = on"}};
    float *w[3];
    long long n = 0;
    for (int v = 0; v < 3; v++) {
        struct run r;
        open_run(&r, seq_text(variants[v][0], variants[v][1]));
        CU_ASSERT_EQUAL(r.m->graph.n_nodes, v ? 8 : 10);  /* act, res, drop: one pointwise layer when fused */
        struct glia_epoch_result res[3] = GLIA_TEST_RESULTS;
        glia_status st = glia_model_train(r.m, &quiet, res, 3);
        if (st) printf("\n  %s\n", glia_context_error(r.ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        if (v == 0) printf("\n  sequence model: test accuracy %.3f, loss %.3f -> %.3f", res[2].test_accuracy,
                           res[0].train_loss, res[2].train_loss);
        CU_ASSERT(res[2].test_accuracy > 0.9);  /* chance is 0.25 */
        CU_ASSERT(res[2].train_loss < res[0].train_loss);
        w[v] = weights(&r, &n);
        close_run(&r);
    }
    double worst = 0;  /* the fused backward multiplies the chain's derivatives in another order */
    for (long long i = 0; i < n; i++) worst = fmax(worst, fabs((double)w[0][i] - w[1][i]));
    if (!(worst <= 1e-5)) printf("\n  fused and unfused weights differ by %g\n", worst);
    CU_ASSERT(worst <= 1e-5);
    CU_ASSERT_EQUAL(memcmp(w[1], w[2], (size_t)n * sizeof(float)), 0);
    for (int v = 0; v < 3; v++) free(w[v]);
}

GLIA_TEST_MAIN("train_tokens", GLIA_TEST(test_learns_and_grouping_pads_less), GLIA_TEST(test_padding_does_not_change_results),
               GLIA_TEST(test_padding_row_stays_zero),
               GLIA_TEST(test_resume_is_bit_exact), GLIA_TEST(test_dp_replicas), GLIA_TEST(test_channels_last),
               GLIA_TEST(test_error_ends_progress_line), GLIA_TEST(test_resident_refused), GLIA_TEST(test_sequence_model))
