/* tests/test_format.c — memory formats: channels_last tensors and their conversion, the layers
 * that take either format (conv2d, concat, flatten, dropout, the elementwise ones) against
 * themselves in NCHW and through the gradient checker, and whole models trained in both formats.
 * Not batchnorm or pooling: test_bn.c and test_pool.c check their NHWC paths. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "layerutil.h"
#include "modelutil.h"

/* ---- tensors ---- */

static void test_tensor_channels_last(void)
{
    struct glia_context *c;
    struct glia_backend *b;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(c, (struct glia_device){GLIA_DEVICE_CPU, 0}, &b) == GLIA_OK);
    struct glia_shape s = S(4, 2, 3, 4, 5);
    struct glia_tensor *nchw = tensor_as(b, s, GLIA_CONTIGUOUS), *nhwc = tensor_as(b, s, GLIA_CHANNELS_LAST);
    CU_ASSERT_EQUAL(glia_tensor_memory_format(nchw), GLIA_CONTIGUOUS);
    CU_ASSERT_EQUAL(glia_tensor_memory_format(nhwc), GLIA_CHANNELS_LAST);
    CU_ASSERT_FALSE(glia_tensor_is_contiguous(nhwc));
    CU_ASSERT_EQUAL(nhwc->stride[0], 60);
    CU_ASSERT_EQUAL(nhwc->stride[1], 1);
    CU_ASSERT_EQUAL(nhwc->stride[2], 15);
    CU_ASSERT_EQUAL(nhwc->stride[3], 3);
    CU_ASSERT_STRING_EQUAL(glia_memory_format_name(GLIA_CHANNELS_LAST), "channels_last");
    /* element (n,c,h,w) = 1000n + 100c + 10h + w, written in NCHW, read back through NHWC */
    float *x = glia_tensor_f32(nchw);
    for (int i = 0; i < 120; i++) x[i] = (float)(i / 60 * 1000 + i / 20 % 3 * 100 + i / 5 % 4 * 10 + i % 5);
    CU_ASSERT_EQUAL(glia_tensor_convert(nhwc, nchw, false), GLIA_OK);
    const float *y = glia_tensor_f32(nhwc);
    CU_ASSERT_EQUAL(y[0], 0.0f);
    CU_ASSERT_EQUAL(y[1], 100.0f);   /* memory order N, H, W, C: the next channel first */
    CU_ASSERT_EQUAL(y[3], 1.0f);     /* then the next column */
    CU_ASSERT_EQUAL(y[15], 10.0f);   /* then the next row */
    CU_ASSERT_EQUAL(y[60], 1000.0f);
    int bad = 0;
    for (int n = 0; n < 2; n++)
        for (int ch = 0; ch < 3; ch++)
            for (int h = 0; h < 4; h++)
                for (int w = 0; w < 5; w++) bad += at4(nhwc, n, ch, h, w) != n * 1000 + ch * 100 + h * 10 + w;
    CU_ASSERT_EQUAL(bad, 0);
    /* back, accumulating: every element doubles */
    CU_ASSERT_EQUAL(glia_tensor_convert(nchw, nhwc, true), GLIA_OK);
    bad = 0;
    for (int i = 0; i < 120; i++) bad += x[i] != 2.0f * (float)(i / 60 * 1000 + i / 20 % 3 * 100 + i / 5 % 4 * 10 + i % 5);
    CU_ASSERT_EQUAL(bad, 0);
    /* same format: a copy; accumulate adds */
    struct glia_tensor *nhwc2 = tensor_as(b, s, GLIA_CHANNELS_LAST);
    CU_ASSERT_EQUAL(glia_tensor_convert(nhwc2, nhwc, false), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_convert(nhwc2, nhwc, true), GLIA_OK);
    CU_ASSERT_EQUAL(at4(nhwc2, 1, 2, 3, 4), 2.0f * 1234.0f);
    /* mismatched shapes and channels_last of a 2-D shape are refused */
    struct glia_tensor *other = tensor_as(b, S(4, 2, 3, 5, 4), GLIA_CHANNELS_LAST), *v;
    CU_ASSERT_EQUAL(glia_tensor_convert(other, nchw, false), GLIA_EINVAL);
    struct glia_shape s2 = S(2, 6, 20, 0, 0);
    CU_ASSERT_EQUAL(glia_tensor_view_as(nchw, 0, &s2, GLIA_CHANNELS_LAST, &v), GLIA_EINVAL);
    /* a large conversion (the parallel tiled path) with odd sizes */
    struct glia_shape L = S(4, 3, 37, 33, 35);
    struct glia_tensor *a = tensor_as(b, L, GLIA_CONTIGUOUS), *t = tensor_as(b, L, GLIA_CHANNELS_LAST),
                       *r = tensor_as(b, L, GLIA_CONTIGUOUS);
    float *ad = glia_tensor_f32(a);
    for (int64_t i = 0; i < glia_tensor_numel(a); i++) ad[i] = (float)i;
    CU_ASSERT_EQUAL(glia_tensor_convert(t, a, false), GLIA_OK);
    CU_ASSERT_EQUAL(max_diff(a, t), 0.0);
    CU_ASSERT_EQUAL(glia_tensor_convert(r, t, false), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(r), ad, glia_tensor_nbytes(a)), 0);
    struct glia_tensor *all[] = {nchw, nhwc, nhwc2, other, a, t, r};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) glia_tensor_release(all[i]);
    glia_context_free(c);
}

/* ---- layers: NHWC against NCHW, and gradient checks with NHWC tensors ---- */

static void same_both_ways(const char *ini, const struct glia_shape *in, int n_in, double tol)
{
    for (int acc = 0; acc < 2; acc++) {
        double d = format_diff(ini, in, n_in, acc, 5 + (uint64_t)acc);
        if (!(d <= tol)) printf("\n  %s(accumulate %d): NHWC differs from NCHW by %g\n", ini, acc, d);
        CU_ASSERT(d <= tol);
    }
}

static void test_conv2d_nhwc(void)
{
    static const char *confs[] = {
        "[c]\ntype = conv2d\nfilters = 8\n",
        "[c]\ntype = conv2d\nfilters = 6\nsize = 3\nstride = 2\npadding = 1\n",
        "[c]\ntype = conv2d\nfilters = 4\nsize = 3\ndilation = 2\npadding = 2\nbias = off\n",
        "[c]\ntype = conv2d\nfilters = 6\nsize = 3\ngroups = 3\npadding = 1\n",
        "[c]\ntype = conv2d\nfilters = 16\nsize = 1\n",
    };
    struct glia_shape in[] = {S(4, 2, 3, 7, 6), S(4, 3, 3, 9, 8), S(4, 2, 2, 8, 8), S(4, 2, 6, 5, 5), S(4, 2, 16, 4, 4)};
    for (size_t i = 0; i < sizeof confs / sizeof confs[0]; i++) {
        same_both_ways(confs[i], &in[i], 1, 1e-4);
        gradcheck_nhwc(confs[i], &in[i], 1, 30 + i, 2e-2);
    }
    struct glia_shape one = S(4, 2, 1, 6, 6);  /* one input channel: both formats are the same bytes */
    same_both_ways("[c]\ntype = conv2d\nfilters = 5\n", &one, 1, 1e-4);
}

static void test_concat_nhwc(void)
{
    struct glia_shape ch[3] = {S(4, 2, 3, 4, 5), S(4, 2, 1, 4, 5), S(4, 2, 4, 4, 5)};
    same_both_ways("[j]\ntype = concat\ninputs = a, b, c\n", ch, 3, 0);
    gradcheck_nhwc("[j]\ntype = concat\ninputs = a, b, c\n", ch, 3, 41, 1e-2);
    struct glia_shape hh[2] = {S(4, 2, 3, 2, 5), S(4, 2, 3, 4, 5)};
    same_both_ways("[j]\ntype = concat\naxis = 2\ninputs = a, b\n", hh, 2, 0);
    struct glia_shape ww[2] = {S(4, 2, 3, 4, 1), S(4, 2, 3, 4, 3)};
    same_both_ways("[j]\ntype = concat\naxis = 3\ninputs = a, b\n", ww, 2, 0);
    gradcheck_nhwc("[j]\ntype = concat\naxis = 3\ninputs = a, b\n", ww, 2, 42, 1e-2);
}

static void test_flatten_nhwc(void)
{
    struct glia_shape in = S(4, 3, 4, 3, 5);  /* the output is NCHW-ordered in both cases */
    same_both_ways("[f]\ntype = flatten\n", &in, 1, 0);
    gradcheck_nhwc("[f]\ntype = flatten\n", &in, 1, 51, 1e-2);
}

static void test_dropout_nhwc(void)
{
    struct glia_shape in = S(4, 3, 5, 4, 6);  /* the mask follows the logical index */
    same_both_ways("[d]\ntype = dropout\np = 0.4\n", &in, 1, 0);
    gradcheck_nhwc("[d]\ntype = dropout\np = 0.4\n", &in, 1, 61, 1e-2);
}

static void test_elementwise_nhwc(void)
{
    struct glia_shape in = S(4, 2, 3, 4, 5), two[2] = {S(4, 2, 3, 4, 5), S(4, 2, 3, 4, 5)};
    static const char *one_in[] = {"[a]\ntype = relu\n", "[a]\ntype = sigmoid\n", "[a]\ntype = tanh\n",
                                   "[a]\ntype = gelu\n", "[a]\ntype = leaky_relu\n",
                                   "[a]\ntype = pointwise\nexpr = x * sigmoid(x)\n"};
    for (size_t i = 0; i < sizeof one_in / sizeof one_in[0]; i++) {
        same_both_ways(one_in[i], &in, 1, 0);
        gradcheck_nhwc(one_in[i], &in, 1, 70 + i, 2e-2);
    }
    same_both_ways("[s]\ntype = add\ninputs = a, b\n", two, 2, 0);
    same_both_ways("[s]\ntype = pointwise\nexpr = x * y + exp(y)\ninputs = a, b\n", two, 2, 0);
    gradcheck_nhwc("[s]\ntype = add\ninputs = a, b\n", two, 2, 81, 1e-2);
}

static void test_gradcheck_refuses_nchw_only_layer(void)
{
    struct glia_context *c;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    struct glia_shape in = S(2, 4, 6, 0, 0);
    struct glia_gradcheck_options o = {.struct_size = sizeof o, .memory_format = GLIA_CHANNELS_LAST};
    CU_ASSERT_EQUAL(glia_layer_gradcheck_ex(c, "[l]\ntype = linear\noutputs = 3\n", &in, 1, &o, 1, 1e-2, NULL),
                    GLIA_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(c), "does not take channels_last"));
    glia_context_free(c);
}

/* ---- models: the same training in both formats ---- */

static char dir[512];

static void make_data(void)
{
    CU_ASSERT_FATAL(glia_test_idx_set(dir, sizeof dir, "format-data", 256, 96, 8, 4, 21) == 0);
}

/* A residual CNN with every layer that takes either format, and flatten + linear after it. */
static const char *model_text(const char *format)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "[runtime]\ndevice = cpu\nseed = 3\nmemory_format = %s\n"
             "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
             "batch_size = 16\ntest_batch_size = 40\nmean = 0.2\nstd = 0.3\nworkers = 0\n"
             "[train]\nepochs = 2\noptimizer = adam\nlr = 0.003\n"
             "[c1]\ntype = conv2d\nfilters = 6\npadding = 1\n[b1]\ntype = batchnorm\n[r1]\ntype = relu\n"
             "[c2]\ntype = conv2d\nfilters = 6\npadding = 1\n[b2]\ntype = batchnorm\n"
             "[sum]\ntype = add\ninputs = r1, b2\n[r2]\ntype = pointwise\nexpr = x * sigmoid(x)\n"
             "[cat]\ntype = concat\ninputs = r2, r1\n[pool]\ntype = maxpool2d\n[drop]\ntype = dropout\np = 0.2\n"
             "[avg]\ntype = avgpool2d\n[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n"
             "[loss]\ntype = softmax_cross_entropy\n",
             format, dir, dir, dir, dir);
    return buf;
}

static void test_model_same_in_both_formats(void)
{
    make_data();
    struct run a, b;
    struct glia_epoch_result ra[2] = GLIA_TEST_RESULTS, rb[2] = GLIA_TEST_RESULTS;
    open_run(&a, model_text("contiguous"));
    open_run(&b, model_text("channels_last"));
    CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, ra, 2), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(b.m, &quiet, rb, 2), GLIA_OK);
    for (int e = 0; e < 2; e++) {
        CU_ASSERT(fabs(ra[e].train_loss - rb[e].train_loss) <= 1e-4 * fmax(1, ra[e].train_loss));
        CU_ASSERT(fabs(ra[e].test_loss - rb[e].test_loss) <= 1e-4 * fmax(1, ra[e].test_loss));
        CU_ASSERT(fabs(ra[e].test_accuracy - rb[e].test_accuracy) <= 1.5 / 96);
    }
    CU_ASSERT(ra[1].train_loss < ra[0].train_loss);  /* it trained */
    long long n, nb;
    float *wa = weights(&a, &n), *wb = weights(&b, &nb);
    CU_ASSERT_EQUAL_FATAL(n, nb);
    double worst = 0;
    for (long long i = 0; i < n; i++) worst = fmax(worst, fabs((double)wa[i] - wb[i]));
    if (!(worst <= 1e-3)) printf("\n  weights differ by %g\n", worst);
    CU_ASSERT(worst <= 1e-3);
    free(wa);
    free(wb);
    /* the summary names the format; no edge converts: every 4-D layer here takes channels_last */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    glia_model_summary(b.m, f);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "memory format channels_last"));
    CU_ASSERT_PTR_NULL(strstr(text, "converts its input"));  /* every 4-D layer takes channels_last */
    free(text);
    close_run(&a);
    close_run(&b);
}

/* A layer that only takes NCHW between channels_last ones: the core converts at its edges. */
static void test_model_converts_for_nchw_only_layer(void)
{
    make_data();
    static const char *fmt =
        "[plugins]\npath = %s\n[runtime]\ndevice = cpu\nseed = 4\nmemory_format = %s\n"
        "[data]\ntrain_images = %s/tri\ntrain_labels = %s/trl\ntest_images = %s/tei\ntest_labels = %s/tel\n"
        "batch_size = 16\nworkers = 0\n[train]\nepochs = 1\noptimizer = sgd\nlr = 0.05\n"
        "[c1]\ntype = conv2d\nfilters = 4\npadding = 1\n[sm]\ntype = nchw_softsign\n"
        "[c2]\ntype = conv2d\nfilters = 4\npadding = 1\n[sum]\ntype = add\ninputs = sm, c2\n"
        "[flat]\ntype = flatten\n[fc]\ntype = linear\noutputs = 4\n[loss]\ntype = softmax_cross_entropy\n";
    char ta[4096], tb[4096];
    const char *fix = glia_test_fixtures();
    snprintf(ta, sizeof ta, fmt, fix, "contiguous", dir, dir, dir, dir);
    snprintf(tb, sizeof tb, fmt, fix, "channels_last", dir, dir, dir, dir);
    struct run a, b;
    struct glia_epoch_result ra = GLIA_TEST_RESULT, rb = GLIA_TEST_RESULT;
    open_run(&a, ta);
    open_run(&b, tb);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    glia_model_summary(b.m, f);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "memory format: sm converts its input from c1 (channels_last -> contiguous)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "memory format: sum converts its input from sm (contiguous -> channels_last)"));
    free(text);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(a.m, &quiet, &ra, 1), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_model_train(b.m, &quiet, &rb, 1), GLIA_OK);
    CU_ASSERT(fabs(ra.train_loss - rb.train_loss) <= 1e-4 * fmax(1, ra.train_loss));
    CU_ASSERT(fabs(ra.test_loss - rb.test_loss) <= 1e-4 * fmax(1, ra.test_loss));
    close_run(&a);
    close_run(&b);
}

static void test_memory_format_key_checked(void)
{
    struct glia_context *c;
    struct glia_config *cfg;
    struct glia_model *m;
    make_data();
    char text[4096];
    snprintf(text, sizeof text, "%s", model_text("nhwc_please"));
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    CU_ASSERT_FATAL(glia_config_parse_string(c, "t.ini", text, &cfg) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_model_build(c, cfg, &m), GLIA_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(c), "t.ini:4: [runtime] memory_format"));
    glia_config_free(cfg);
    glia_context_free(c);
}

GLIA_TEST_MAIN("format", GLIA_TEST(test_tensor_channels_last), GLIA_TEST(test_conv2d_nhwc),
               GLIA_TEST(test_concat_nhwc), GLIA_TEST(test_flatten_nhwc), GLIA_TEST(test_dropout_nhwc),
               GLIA_TEST(test_elementwise_nhwc), GLIA_TEST(test_gradcheck_refuses_nchw_only_layer),
               GLIA_TEST(test_model_same_in_both_formats), GLIA_TEST(test_model_converts_for_nchw_only_layer),
               GLIA_TEST(test_memory_format_key_checked))
