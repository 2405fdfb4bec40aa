/* tests/test_guard.c — guard values around what a layer call writes, in glia_layer_gradcheck and in training with
 * [runtime] debug_checks, against the fixture plugin `careless` (a linear layer wrong in one way per type).
 * Not a test of any layer's maths: tests/test_layers.c and the others do that. */
#include <stdio.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include "modelutil.h"
#include "parts.h"

static char dir[512];

static void make_data(void)
{
    CU_ASSERT_FATAL(glia_test_idx_set(dir, sizeof dir, "guard-data", 96, 40, 6, 5, 7) == 0);
}

/* careless.so in the fixtures folder */
static const char *careless(void)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/careless.so", glia_test_fixtures());
    return path;
}

/* glia_layer_gradcheck of "[fc]\ntype = <type>\noutputs = 4\n" on (2, 3) inputs: its status, and its message must be
 * want (NULL: it passes). */
static void gradcheck_case(const char *type, glia_status want_st, const char *want)
{
    struct glia_context *ctx;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_plugin_load(ctx, careless()) == GLIA_OK);
    char ini[128];
    snprintf(ini, sizeof ini, "[fc]\ntype = %s\noutputs = 4\n", type);
    struct glia_shape in = glia_shape_make(2, (int64_t[]){2, 3});
    glia_status st = glia_layer_gradcheck(ctx, ini, &in, 1, 5, 1e-3, NULL);
    const char *msg = glia_context_error(ctx);
    bool ok = st == want_st && (!want || !strcmp(msg, want));
    if (!ok) printf("\n  %s: got %s '%s'\n  want %s '%s'\n", type, glia_status_name(st), msg, glia_status_name(want_st), want);
    CU_ASSERT(ok);
    glia_context_free(ctx);
}

/* The gradient checker surrounds the output, input gradients, parameter gradients and buffers with guard values: a
 * write outside any of them fails the check naming the layer, the tensor and how far it went, where a write into
 * allocator padding used to pass (an infer_shape one element short) or crash later naming nothing. */
static void test_gradcheck_guards(void)
{
    gradcheck_case("careless_ok", GLIA_OK, NULL);
    gradcheck_case("careless_row", GLIA_EPLUGIN,
                   "gradcheck.ini:1: [fc] backward wrote 3 floats past the end of its input gradient (layer 'fc', tensor "
                   "dx, 2x3)");
    gradcheck_case("careless_shape", GLIA_EPLUGIN,
                   "gradcheck.ini:1: [fc] forward wrote 2 floats past the end of its output (layer 'fc', tensor out, 2x3)");
    gradcheck_case("careless_grad", GLIA_EPLUGIN,
                   "gradcheck.ini:1: [fc] backward wrote 1 float past the end of the gradient of its parameter 'weight' "
                   "(layer 'fc', tensor weight.grad, 4x3)");
    gradcheck_case("careless_before", GLIA_EPLUGIN,
                   "gradcheck.ini:1: [fc] forward wrote 1 float before the start of its output (layer 'fc', tensor out, "
                   "2x4)");
    gradcheck_case("careless_buffer", GLIA_EPLUGIN,
                   "gradcheck.ini:1: [fc] forward wrote 1 float past the end of its buffer 'count' (layer 'fc', tensor "
                   "count, 1)");
}

/* A small model whose [fc] is `type` after a linear layer of 64 features (so that its input has a gradient), on the
 * CPU with debug_checks `checks`; `extra` goes into [runtime]. */
static const char *model_text(const char *type, const char *checks, const char *extra)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[plugins]\nload = %s\n"
             "[runtime]\ndevice = cpu\nseed = 3\ndebug_checks = %s\n%s\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 32\ntest_batch_size = 16\nworkers = 0\n"
             "[train]\nepochs = 1\noptimizer = sgd\nlr = 0.05\n[optimizer]\nmomentum = 0.9\n"
             "[flat]\ntype = flatten\n[fc0]\ntype = linear\noutputs = 64\n"
             "[fc]\ntype = %s\noutputs = 8\n"
             "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n",
             careless(), checks, extra, dir, dir, dir, dir, type);
    return buf;
}

/* The line of "[fc]" in text. */
static int fc_line(const char *text)
{
    int line = 1;
    for (const char *q = text; q < strstr(text, "[fc]\n"); q++) line += *q == '\n';
    return line;
}

/* Trains the model of text for an epoch: must fail with GLIA_EPLUGIN and the message "t.ini:<[fc]'s line>: [fc] "
 * followed by want. */
static void expect_train_error(const char *text, const char *want)
{
    struct run r;
    open_run(&r, text);
    glia_status st = glia_model_train(r.m, &quiet, NULL, 0);
    char full[512];
    snprintf(full, sizeof full, "t.ini:%d: [fc] %s", fc_line(text), want);
    const char *msg = glia_context_error(r.ctx);
    if (st != GLIA_EPLUGIN || strcmp(msg, full)) printf("\n  got %s '%s'\n  want '%s'\n", glia_status_name(st), msg, full);
    CU_ASSERT_EQUAL(st, GLIA_EPLUGIN);
    CU_ASSERT_STRING_EQUAL(msg, full);
    close_run(&r);
}

/* With debug_checks = on, training stops at the first layer call that wrote outside a tensor, naming the file, line,
 * section, layer, tensor and shape: an input gradient one row too long, an output longer than infer_shape said,
 * a parameter gradient (in the gradient arena) or a buffer (in the buffer arena) one float too long. Without it the
 * row too many trains on silently, which is what the setting is for. */
static void test_debug_checks_catch_writes(void)
{
    make_data();
    expect_train_error(model_text("careless_row", "on", ""),
                       "backward wrote 64 floats past the end of its input gradient (layer 'fc', tensor dx, 32x64)");
    expect_train_error(model_text("careless_shape", "on", ""),
                       "forward wrote 32 floats past the end of its output (layer 'fc', tensor out, 32x7)");
    expect_train_error(model_text("careless_grad", "on", ""),
                       "backward wrote 1 float past the end of the gradient of its parameter 'weight' (layer 'fc', tensor "
                       "weight.grad, 8x64)");
    expect_train_error(model_text("careless_buffer", "on", ""),
                       "forward wrote 1 float past the end of its buffer 'count' (layer 'fc', tensor count, 1)");
    expect_train_error(model_text("careless_before", "on", "memory_format = channels_last"),
                       "forward wrote 1 float before the start of its output (layer 'fc', tensor out, 32x8)");
    /* evaluation's forward is checked too (its own plan) */
    struct run r;
    const char *text = model_text("careless_shape", "on", "");
    open_run(&r, text);
    double loss, acc;
    CU_ASSERT_EQUAL(glia_model_evaluate(r.m, &loss, &acc), GLIA_EPLUGIN);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "tensor out, 16x7)"));
    close_run(&r);
    open_run(&r, model_text("careless_row", "off", ""));
    CU_ASSERT_EQUAL(glia_model_train(r.m, &quiet, NULL, 0), GLIA_OK);
    close_run(&r);
}

/* debug_checks changes where tensors lie, never what training computes: a model with a residual, batchnorm,
 * dropout and the careless_ok layer ends with the same weights bit for bit with it on and off, also with activation
 * checkpointing, channels_last and dp; its activation block and parameter arena grow by the guards; a checkpoint
 * written with it on loads into the model with it off. */
static void test_debug_checks_change_no_result(void)
{
    make_data();
    static const char *fmt =
        "[plugins]\nload = %s\n"
        "[runtime]\ndevice = cpu\nseed = 5\ndebug_checks = %s\nmemory_format = %s\n"
        "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
        "batch_size = 20\ntest_batch_size = 16\nworkers = 0\nmean = 0.2\nstd = 0.3\n"
        "[train]\nepochs = 1\noptimizer = adam\nlr = 0.01\ncheckpoint_dir = %s\n"
        "[graph]\ncheckpoint_segments = %d\n[distributed]\nmode = %s\ndevices = cpu, cpu\n"
        "[c1]\ntype = conv2d\nfilters = 4\npadding = 1\n[bn1]\ntype = batchnorm\n[r1]\ntype = relu\n"
        "[c2]\ntype = conv2d\nfilters = 4\npadding = 1\n[sum]\ntype = add\ninputs = r1, c2\n[drop]\ntype = dropout\n"
        "p = 0.2\n[flat]\ntype = flatten\n[fc0]\ntype = linear\noutputs = 12\n[fc]\ntype = careless_ok\noutputs = 6\n"
        "[fc2]\ntype = linear\noutputs = 5\n[loss]\ntype = softmax_cross_entropy\n";
    static const struct {
        const char *format, *mode;
        int segments;
    } cases[] = {{"contiguous", "none", 0}, {"channels_last", "none", 2}, {"contiguous", "dp", 0}};
    char text[8192], ck[600];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        struct run on, off;
        snprintf(ck, sizeof ck, "%s/ck-on", dir);
        snprintf(text, sizeof text, fmt, careless(), "on", cases[c].format, dir, dir, dir, dir, ck, cases[c].segments,
                 cases[c].mode);
        open_run(&on, text);
        snprintf(ck, sizeof ck, "%s/ck-off", dir);
        snprintf(text, sizeof text, fmt, careless(), "off", cases[c].format, dir, dir, dir, dir, ck, cases[c].segments,
                 cases[c].mode);
        open_run(&off, text);
        struct glia_epoch_result ra[1] = GLIA_TEST_RESULTS, rb[1] = GLIA_TEST_RESULTS;
        glia_status st = glia_model_train(on.m, &quiet, ra, 1);
        if (st) printf("\n  case %zu: %s\n", c, glia_context_error(on.ctx));
        CU_ASSERT_EQUAL_FATAL(st, GLIA_OK);
        CU_ASSERT_EQUAL_FATAL(glia_model_train(off.m, &quiet, rb, 1), GLIA_OK);
        if (!same_weights(&on, &off)) printf("\n  case %zu: weights differ by %g\n", c, weight_diff(&on, &off));
        CU_ASSERT(same_weights(&on, &off));
        CU_ASSERT_EQUAL(ra[0].test_loss, rb[0].test_loss);
        CU_ASSERT(on.m->act.plan.len > off.m->act.plan.len);
        CU_ASSERT(on.m->params.wa.len > off.m->params.wa.len && on.m->params.wa.n == off.m->params.wa.n);
        /* the arenas' padding is zero again after every check (the optimizer, clipping and ddp read it) */
        const float *g = glia_tensor_f32(on.m->params.g);
        int64_t nonzero = 0;
        for (int k = 0; k <= on.m->params.wa.count; k++) {
            int64_t from = k ? on.m->params.wa.off[k - 1] + on.m->params.wa.size[k - 1] : 0, to = k < on.m->params.wa.count ? on.m->params.wa.off[k] : on.m->params.wa.len;
            for (int64_t i = from; i < to; i++) nonzero += g[i] != 0.0f;
        }
        CU_ASSERT_EQUAL(nonzero, 0);
        if (c == 0) {  /* the checkpoint format does not see the guards */
            snprintf(ck, sizeof ck, "%s/ck-on/final.ckpt", dir);
            struct run back;
            snprintf(text, sizeof text, fmt, careless(), "off", cases[c].format, dir, dir, dir, dir, dir, 0, "none");
            open_run(&back, text);
            CU_ASSERT_EQUAL(glia_model_load_checkpoint(back.m, ck), GLIA_OK);
            CU_ASSERT(same_weights(&back, &on));
            close_run(&back);
        }
        close_run(&on), close_run(&off);
    }
}

/* glia_model_gradcheck_layer (glia gradcheck): the checker on a layer of a model as the model configures it, at its
 * shapes with the batch asked: careless_ok passes; careless_grad is caught naming the layer and the tensor; the CLI
 * exits 0 and 1 and says so; a name that is no layer is refused naming it. */
static void test_model_gradcheck_layer(void)
{
    char text[2048];
    for (int k = 0; k < 2; k++) {
        snprintf(text, sizeof text,
                 "[plugins]\nload = %s\n[runtime]\ndevice = cpu\n[data]\nformat = synthetic\nchannels = 1\n"
                 "rows = 3\ncols = 3\nclasses = 4\ntrain_samples = 8\ntest_samples = 4\n[f]\ntype = flatten\n"
                 "[fc]\ntype = %s\noutputs = 4\n[loss]\ntype = softmax_cross_entropy\n",
                 careless(), k ? "careless_grad" : "careless_ok");
        struct run r;
        open_run(&r, text);
        struct glia_gradcheck_report rep;
        glia_status st = glia_model_gradcheck_layer(r.m, "fc", 3, 7, 1e-3, &rep);
        if (k == 0) {
            CU_ASSERT_EQUAL(st, GLIA_OK);
            CU_ASSERT_EQUAL(rep.n_checked, 3 * 9 + 4 * 9);  /* the input (3 x 9) and the weight (4 x 9) */
        } else {
            CU_ASSERT_EQUAL(st, GLIA_EPLUGIN);
            CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "[fc] backward wrote 1 float past the end of the "
                                                                    "gradient of its parameter 'weight'"));
        }
        CU_ASSERT_EQUAL(glia_model_gradcheck_layer(r.m, "nosuch", 2, 7, 1e-3, &rep), GLIA_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(r.ctx), "gradcheck: no layer [nosuch] in the model"));
        close_run(&r);
        /* the command line */
        char ini[600], cmd[2048], out[2048] = "";
        snprintf(ini, sizeof ini, "%s/gradcheck-%d.ini", glia_test_tmp("guard-data"), k);
        FILE *f = fopen(ini, "w");
        CU_ASSERT_FATAL(f != NULL);
        fputs(text, f);
        fclose(f);
        const char *bin = getenv("GLIA_BIN");
        snprintf(cmd, sizeof cmd, "'%s' gradcheck '%s' --layer fc --batch 3 2>&1", bin ? bin : "tools/glia", ini);
        FILE *p = popen(cmd, "r");
        CU_ASSERT_FATAL(p != NULL);
        size_t got = fread(out, 1, sizeof out - 1, p);
        out[got] = 0;
        int rc = pclose(p);
        CU_ASSERT(WIFEXITED(rc) && WEXITSTATUS(rc) == (k ? 1 : 0));
        CU_ASSERT_PTR_NOT_NULL(strstr(out, k ? "[fc] backward wrote 1 float past" : "[fc] at batch 3: 63 gradient elements "
                                                                                    "checked"));
        if (!k) CU_ASSERT_PTR_NOT_NULL(strstr(out, "): ok\n"));
    }
}

GLIA_TEST_MAIN("guard", GLIA_TEST(test_gradcheck_guards), GLIA_TEST(test_debug_checks_catch_writes),
               GLIA_TEST(test_debug_checks_change_no_result), GLIA_TEST(test_model_gradcheck_layer))
