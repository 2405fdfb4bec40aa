/* tests/test_layer_run.c — the single-layer runner of `glia bench` (glia_layer_run_*): values of a
 * forward and backward against hand computation, write-not-accumulate gradients, seeding, refusals,
 * and (only where a GPU is usable) the CUDA conv2d against the CPU one. Not a benchmark: nothing is timed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "layerutil.h"
#include <glia/glia.h>

static const struct glia_device cpu = {GLIA_DEVICE_CPU, 0};

/* The values of t (on any device) in a new host array. */
static float *host_copy(const struct glia_tensor *t)
{
    float *h = malloc(glia_tensor_nbytes(t) + 1);
    CU_ASSERT_FATAL(h != NULL);
    CU_ASSERT_FATAL(glia_tensor_to_host(t, h, glia_tensor_nbytes(t)) == GLIA_OK);
    return h;
}

static struct glia_layer_run *run_new(struct glia_context *c, const char *ini, struct glia_device dev, struct glia_shape in,
                                      enum glia_memory_format fmt, uint64_t seed)
{
    struct glia_layer_run *r = NULL;
    glia_status st = glia_layer_run_new(c, ini, dev, &in, 1, fmt, seed, &r);
    if (st) printf("\n  %s\n", glia_context_error(c));
    CU_ASSERT_FATAL(st == GLIA_OK);
    return r;
}

/* y = x W^T + b, dx = dy W, dW = dy^T x, db = sum of dy; gradients written, not added. */
static void test_linear_values(void)
{
    struct glia_context *c;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    const int N = 3, I = 5, O = 4;
    struct glia_layer_run *r = run_new(c, "[fc]\ntype = linear\noutputs = 4\n", cpu, S(2, N, I, 0, 0), GLIA_CONTIGUOUS, 7);
    struct glia_layer *l = glia_layer_run_layer(r);
    CU_ASSERT_STRING_EQUAL(l->kernel->impl, "cpu");
    CU_ASSERT_EQUAL(glia_layer_run_backend(r)->device.type, GLIA_DEVICE_CPU);
    CU_ASSERT_EQUAL_FATAL(l->n_params, 2);
    CU_ASSERT_PTR_NULL(glia_layer_run_input(r, 1));
    CU_ASSERT_PTR_NULL(glia_layer_run_input_grad(r, -1));
    CU_ASSERT_EQUAL(glia_layer_run_backward(r), GLIA_EINVAL);  /* no training forward yet */
    CU_ASSERT_EQUAL(glia_layer_run_forward(r, true), GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_run_backward(r), GLIA_OK);
    float *gw1 = host_copy(l->params[0].grad);
    CU_ASSERT_EQUAL(glia_layer_run_forward(r, true), GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_run_backward(r), GLIA_OK);  /* written again, not added */
    CU_ASSERT_EQUAL(glia_layer_run_sync(r), GLIA_OK);
    float *x = host_copy(glia_layer_run_input(r, 0)), *y = host_copy(glia_layer_run_output(r));
    float *dy = host_copy(glia_layer_run_output_grad(r)), *dx = host_copy(glia_layer_run_input_grad(r, 0));
    float *w = host_copy(l->params[0].value), *b = host_copy(l->params[1].value);
    float *gw = host_copy(l->params[0].grad), *gb = host_copy(l->params[1].grad);
    double worst = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = b[o];
            for (int i = 0; i < I; i++) s += (double)x[n * I + i] * w[o * I + i];
            worst = fmax(worst, fabs(s - y[n * O + o]));
        }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < I; i++) {
            double s = 0;
            for (int o = 0; o < O; o++) s += (double)dy[n * O + o] * w[o * I + i];
            worst = fmax(worst, fabs(s - dx[n * I + i]));
        }
    for (int o = 0; o < O; o++) {
        double sb = 0;
        for (int n = 0; n < N; n++) sb += dy[n * O + o];
        worst = fmax(worst, fabs(sb - gb[o]));
        for (int i = 0; i < I; i++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += (double)dy[n * O + o] * x[n * I + i];
            worst = fmax(worst, fabs(s - gw[o * I + i]));
            worst = fmax(worst, fabs((double)gw1[o * I + i] - gw[o * I + i]));
        }
    }
    CU_ASSERT(worst < 1e-5);
    /* parameters hold linear's init, U(-1/sqrt(I), 1/sqrt(I)) */
    int inside = 0;
    for (int i = 0; i < O * I; i++) inside += fabsf(w[i]) <= 1.0f / sqrtf((float)I) && w[i] != 0.0f;
    CU_ASSERT_EQUAL(inside, O * I);
    CU_ASSERT_EQUAL(glia_layer_run_flops(r), 0u + 2u * N * I * O);
    free(gw1), free(x), free(y), free(dy), free(dx), free(w), free(b), free(gw), free(gb);
    glia_layer_run_free(r);
    glia_context_free(c);
}

/* The same seed gives the same inputs and weights; another seed others. */
static void test_seeding(void)
{
    struct glia_context *c;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    const char *ini = "[conv]\ntype = conv2d\nfilters = 4\nsize = 3\npadding = 1\n";
    struct glia_shape in = S(4, 2, 3, 6, 5);
    struct glia_layer_run *a = run_new(c, ini, cpu, in, GLIA_CONTIGUOUS, 11), *b = run_new(c, ini, cpu, in, GLIA_CONTIGUOUS, 11),
                          *d = run_new(c, ini, cpu, in, GLIA_CHANNELS_LAST, 12);
    CU_ASSERT_EQUAL(glia_tensor_memory_format(glia_layer_run_input(d, 0)), GLIA_CHANNELS_LAST);
    CU_ASSERT_EQUAL(glia_tensor_memory_format(glia_layer_run_output(d)), GLIA_CHANNELS_LAST);
    CU_ASSERT_EQUAL(glia_tensor_memory_format(glia_layer_run_input_grad(d, 0)), GLIA_CHANNELS_LAST);
    size_t xn = glia_tensor_nbytes(glia_layer_run_input(a, 0));
    size_t wn = glia_tensor_nbytes(glia_layer_run_layer(a)->params[0].value);
    CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(glia_layer_run_input(a, 0)), glia_tensor_f32(glia_layer_run_input(b, 0)), xn), 0);
    CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(glia_layer_run_layer(a)->params[0].value),
                           glia_tensor_f32(glia_layer_run_layer(b)->params[0].value), wn), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(glia_tensor_f32(glia_layer_run_input(a, 0)), glia_tensor_f32(glia_layer_run_input(d, 0)), xn), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(glia_tensor_f32(glia_layer_run_layer(a)->params[0].value),
                               glia_tensor_f32(glia_layer_run_layer(d)->params[0].value), wn), 0);
    CU_ASSERT_EQUAL(glia_layer_run_flops(a), 2u * 2 * 4 * 6 * 5 * 3 * 9);
    for (int k = 0; k < 2; k++) {  /* both formats run both passes */
        struct glia_layer_run *r = k ? d : a;
        CU_ASSERT_EQUAL(glia_layer_run_forward(r, false), GLIA_OK);
        CU_ASSERT_EQUAL(glia_layer_run_backward(r), GLIA_EINVAL);  /* an eval forward keeps nothing */
        CU_ASSERT_EQUAL(glia_layer_run_forward(r, true), GLIA_OK);
        CU_ASSERT_EQUAL(glia_layer_run_backward(r), GLIA_OK);
    }
    glia_layer_run_free(a);
    glia_layer_run_free(b);
    glia_layer_run_free(d);
    glia_context_free(c);
}

/* A loss layer gets labels and a 1-element output-gradient scale. */
static void test_loss_layer(void)
{
    struct glia_context *c;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    struct glia_layer_run *r = run_new(c, "[loss]\ntype = softmax_cross_entropy\n", cpu, S(2, 6, 10, 0, 0), GLIA_CONTIGUOUS, 3);
    CU_ASSERT_EQUAL(glia_tensor_numel(glia_layer_run_output_grad(r)), 1);
    CU_ASSERT_EQUAL(glia_layer_run_forward(r, true), GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_run_backward(r), GLIA_OK);
    float loss = *glia_tensor_f32(glia_layer_run_output(r)), *dx = glia_tensor_f32(glia_layer_run_input_grad(r, 0));
    CU_ASSERT(isfinite(loss) && loss > 0);
    for (int n = 0; n < 6; n++) {  /* softmax - onehot sums to 0 over classes */
        double s = 0;
        for (int k = 0; k < 10; k++) s += dx[n * 10 + k];
        CU_ASSERT(fabs(s) < 1e-5);
    }
    glia_layer_run_free(r);
    glia_context_free(c);
}

static void expect_refused(const char *ini, struct glia_device dev, struct glia_shape in, enum glia_memory_format fmt,
                           glia_status want, const char *msg)
{
    struct glia_context *c;
    struct glia_layer_run *r = (struct glia_layer_run *)&r;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    glia_status st = glia_layer_run_new(c, ini, dev, &in, 1, fmt, 1, &r);
    CU_ASSERT_EQUAL(st, want);
    CU_ASSERT_PTR_NULL(r);
    if (st != want || !strstr(glia_context_error(c), msg))
        printf("\n  got %s: %s\n  want: %s\n", glia_status_name(st), glia_context_error(c), msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(c), msg));
    glia_context_free(c);
}

static void test_refusals(void)
{
    expect_refused("[fc]\ntype = linear\noutputs = 2\n", cpu, S(2, 3, 4, 0, 0), GLIA_CHANNELS_LAST, GLIA_EUNSUPPORTED,
                   "does not take channels_last");
    expect_refused("[fc]\ntype = linear\noutputs = 2\nimpl = nosuch\n", cpu, S(2, 3, 4, 0, 0), GLIA_CONTIGUOUS, GLIA_ECONFIG,
                   "no impl 'nosuch'");
    expect_refused("[fc]\ntype = linear\noutputs = 2\nwidth = 3\n", cpu, S(2, 3, 4, 0, 0), GLIA_CONTIGUOUS, GLIA_ECONFIG,
                   "width");
    expect_refused("[x]\ntype = nosuchlayer\n", cpu, S(2, 3, 4, 0, 0), GLIA_CONTIGUOUS, GLIA_ECONFIG,
                   "unknown layer type 'nosuchlayer'");
    expect_refused("[fc]\ntype = linear\noutputs = 2\n", cpu, S(1, 12, 0, 0, 0), GLIA_CONTIGUOUS, GLIA_ESHAPE,
                   "linear expects (N, ..., features) input of 2 or more dimensions, got 12");
}

/* Where a GPU is usable: the CUDA conv2d on the same seeded inputs and weights as the CPU one. */
static void test_cuda_matches_cpu(void)
{
    struct glia_context *c;
    struct glia_backend *gpu;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    struct glia_device cuda = {GLIA_DEVICE_CUDA, 0};
    if (glia_layer_run_backend_open(c, cuda, &gpu)) {
        CU_ASSERT(strlen(glia_context_error(c)) > 0);  /* says why */
        printf("(no GPU: %s) ", glia_context_error(c));
        glia_context_free(c);
        return;
    }
    const char *ini = "[conv]\ntype = conv2d\nfilters = 5\nsize = 3\npadding = 1\n";
    for (int f = 0; f < 2; f++) {
        enum glia_memory_format fmt = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
        struct glia_layer_run *a = run_new(c, ini, cpu, S(4, 2, 3, 7, 6), fmt, 5), *g = run_new(c, ini, cuda, S(4, 2, 3, 7, 6), fmt, 5);
        CU_ASSERT_EQUAL(glia_layer_run_layer(g)->kernel->device_type, GLIA_DEVICE_CUDA);
        CU_ASSERT_EQUAL(glia_layer_run_forward(a, true), GLIA_OK);
        CU_ASSERT_EQUAL(glia_layer_run_backward(a), GLIA_OK);
        CU_ASSERT_EQUAL(glia_layer_run_forward(g, true), GLIA_OK);
        CU_ASSERT_EQUAL(glia_layer_run_backward(g), GLIA_OK);
        CU_ASSERT_EQUAL(glia_layer_run_sync(g), GLIA_OK);
        const struct glia_tensor *pairs[][2] = {
            {glia_layer_run_output(a), glia_layer_run_output(g)},
            {glia_layer_run_input_grad(a, 0), glia_layer_run_input_grad(g, 0)},
            {glia_layer_run_layer(a)->params[0].grad, glia_layer_run_layer(g)->params[0].grad},
            {glia_layer_run_layer(a)->params[1].grad, glia_layer_run_layer(g)->params[1].grad}};
        for (int k = 0; k < 4; k++) {
            float *h = host_copy(pairs[k][1]);
            const float *want = glia_tensor_f32(pairs[k][0]);
            double worst = 0;
            for (int64_t i = 0; i < glia_tensor_numel(pairs[k][0]); i++)
                worst = fmax(worst, fabs((double)h[i] - want[i]) / fmax(1.0, fabs(want[i])));
            if (!(worst <= 1e-4)) printf("\n  %s tensor %d: max error %g\n", glia_memory_format_name(fmt), k, worst);
            CU_ASSERT(worst <= 1e-4);
            free(h);
        }
        glia_layer_run_free(a);
        glia_layer_run_free(g);
    }
    glia_context_free(c);
}

/* glia_layer_run_set_ids: an embedding run on ids looks up their rows (the weight's, checked by hand), has no input
 * gradient, and refuses ids of another count or an input it does not have. */
static void test_set_ids(void)
{
    struct glia_context *c;
    CU_ASSERT_FATAL(glia_context_new(&c) == GLIA_OK);
    struct glia_layer_run *r = run_new(c, "[e]\ntype = embedding\nvocab = 5\ndim = 3\noutput = sequence\npadding_idx = -1\n",
                                       cpu, S(2, 2, 2, 0, 0), GLIA_CONTIGUOUS, 3);
    CU_ASSERT_EQUAL(glia_layer_run_forward(r, true), GLIA_EINVAL);  /* f32 inputs: embedding refuses them */
    const int32_t ids[4] = {4, 0, 4, 2};
    glia_status sst = glia_layer_run_set_ids(r, 0, ids, 4);
    if (sst) printf("\n  %s\n", glia_context_error(c));
    CU_ASSERT_EQUAL_FATAL(sst, GLIA_OK);
    CU_ASSERT_PTR_NULL(glia_layer_run_input_grad(r, 0));
    CU_ASSERT_EQUAL_FATAL(glia_layer_run_forward(r, true), GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(glia_layer_run_backward(r), GLIA_OK);
    float *y = host_copy(glia_layer_run_output(r)), *w = host_copy(glia_layer_run_layer(r)->params[0].value);
    for (int i = 0; i < 4; i++)
        for (int d = 0; d < 3; d++) CU_ASSERT_EQUAL(y[i * 3 + d], w[ids[i] * 3 + d]);
    free(y);
    free(w);
    CU_ASSERT_EQUAL(glia_layer_run_set_ids(r, 0, ids, 3), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(c), "glia_layer_run_set_ids: 3 ids for input 0, of shape 2x2"));
    CU_ASSERT_EQUAL(glia_layer_run_set_ids(r, 1, ids, 4), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(c), "the run has no input 1"));
    glia_layer_run_free(r);
    glia_context_free(c);
}

GLIA_TEST_MAIN("layer_run", GLIA_TEST(test_linear_values), GLIA_TEST(test_seeding), GLIA_TEST(test_loss_layer),
               GLIA_TEST(test_refusals), GLIA_TEST(test_cuda_matches_cpu), GLIA_TEST(test_set_ids))
