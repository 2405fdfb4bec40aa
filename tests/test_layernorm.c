/* tests/test_layernorm.c — the layernorm layer on the CPU: finite-difference gradients and the gradient contract
 * (2-D, 3-D and 4-D inputs, affine on and off), forward values against the formula (constant rows included), the
 * same bits for any thread count, refusals, and its 1-D parameters under [train] weight_decay_1d. Not the CUDA
 * kernel (test_cuda_layernorm) nor PyTorch's values (torch_layer_layernorm.py). */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "layerutil.h"
#include "modelutil.h"

static struct glia_context *ctx;

static void check_ok(const char *ini, struct glia_shape in, uint64_t seed)
{
    struct glia_gradcheck_report r;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_layer_gradcheck(ctx, ini, &in, 1, seed, 2e-2, &r);
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(r.n_checked > 0);
    CU_ASSERT_EQUAL(r.n_skipped, 0);  /* smooth everywhere */
    glia_context_free(ctx);
}

/* (N, C), (N, T, C) and (N, C, H, W) (normalized over W), affine on and off, another eps */
static void test_gradcheck(void)
{
    check_ok("[ln]\ntype = layernorm\n", S(2, 4, 7, 0, 0), 1);
    check_ok("[ln]\ntype = layernorm\naffine = off\n", S(2, 4, 7, 0, 0), 2);
    check_ok("[ln]\ntype = layernorm\n", S(3, 2, 5, 6, 0), 3);
    check_ok("[ln]\ntype = layernorm\naffine = off\neps = 1e-3\n", S(3, 2, 5, 6, 0), 4);
    check_ok("[ln]\ntype = layernorm\n", S(4, 2, 3, 2, 5), 5);
    check_ok("[ln]\ntype = layernorm\n", S(2, 3, 1, 0, 0), 6);  /* C = 1: y = bias, dx = 0 */
}

/* A built layer's tensors for one input shape: x, y, dy, dx; the parameters set to the given values (NULL: left at
 * their init). */
struct ln_run {
    struct built B;
    struct glia_tensor *x, *y, *dy, *dx;
};

static void ln_open(struct ln_run *r, const char *ini, struct glia_shape s)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, ini, &s, 1, &r->B);
    struct glia_tensor **t[4] = {&r->x, &r->y, &r->dy, &r->dx};
    for (int i = 0; i < 4; i++) CU_ASSERT_FATAL(glia_tensor_new(r->B.b, GLIA_F32, &s, t[i]) == GLIA_OK);
}

static glia_status ln_step(struct ln_run *r, bool train, bool backward)
{
    const struct glia_tensor *in[1] = {r->x};
    struct glia_tensor *din[1] = {r->dx};
    bool acc[1] = {false};
    struct glia_fwd fa = {in, 1, r->y, NULL, train, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd ba = {in, 1, r->y, r->dy, din, acc, NULL, NULL, NULL, NULL, false};
    glia_status st = r->B.kernel->forward(&r->B.l, &fa);
    if (!st && backward) {
        for (int p = 0; p < r->B.l.n_params; p++) r->B.l.params[p].grad_unset = true;
        st = r->B.kernel->backward(&r->B.l, &ba);
    }
    return st;
}

static void ln_close(struct ln_run *r)
{
    glia_tensor_release(r->x);
    glia_tensor_release(r->y);
    glia_tensor_release(r->dy);
    glia_tensor_release(r->dx);
    layer_unbuild(&r->B);
    glia_context_free(ctx);
}

/* y and dx against the formulas in double, per row of (3, 4): a ramp, a constant row (var = 0: y = bias exactly, dx =
 * rstd*(g - mean(g)) with rstd = 1/sqrt(eps)), a row of large mean; weight and bias set, eps = 1e-3. */
static void test_forward_values(void)
{
    struct ln_run r;
    ln_open(&r, "[ln]\ntype = layernorm\neps = 1e-3\n", S(2, 3, 4, 0, 0));
    const float xv[12] = {1, 2, 3, 4, 5, 5, 5, 5, 1000, 1001, 999, 1000.5f}, wv[4] = {1, -2, 0.5f, 3},
                bv[4] = {0.1f, 0.2f, -0.3f, 0};
    memcpy(glia_tensor_f32(r.x), xv, sizeof xv);
    memcpy(glia_tensor_f32(r.B.l.params[0].value), wv, sizeof wv);
    memcpy(glia_tensor_f32(r.B.l.params[1].value), bv, sizeof bv);
    for (int i = 0; i < 12; i++) glia_tensor_f32(r.dy)[i] = (float)(i % 5) - 2.0f;
    CU_ASSERT_FATAL(ln_step(&r, true, true) == GLIA_OK);
    const float *y = glia_tensor_f32(r.y), *dx = glia_tensor_f32(r.dx);
    for (int n = 0; n < 3; n++) {
        const float *xr = xv + n * 4, *dyr = glia_tensor_f32(r.dy) + n * 4;
        double m = 0, v = 0, mg = 0, mgx = 0, xh[4], g[4];
        for (int i = 0; i < 4; i++) m += xr[i] / 4.0;
        for (int i = 0; i < 4; i++) v += (xr[i] - m) * (xr[i] - m) / 4.0;
        double rs = 1 / sqrt(v + 1e-3);
        for (int i = 0; i < 4; i++) {
            xh[i] = (xr[i] - m) * rs;
            g[i] = dyr[i] * wv[i];
            mg += g[i] / 4;
            mgx += g[i] * xh[i] / 4;
        }
        for (int i = 0; i < 4; i++) {
            double want = xh[i] * wv[i] + bv[i], dwant = rs * (g[i] - mg - xh[i] * mgx);
            CU_ASSERT_DOUBLE_EQUAL(y[n * 4 + i], want, 1e-5 * (1 + fabs(want)));
            CU_ASSERT_DOUBLE_EQUAL(dx[n * 4 + i], dwant, 1e-5 * (1 + fabs(dwant)));
            if (n == 1) CU_ASSERT_EQUAL(y[4 + i], bv[i]);  /* constant row: exactly the bias */
        }
    }
    ln_close(&r);
}

/* The weight and bias gradients and dx: the same bits with 1 and 3 threads (blocks of rows fixed by the shape). */
static void test_thread_count(void)
{
    struct ln_run r;
    struct glia_shape s = S(3, 5, 41, 24, 0);  /* 205 rows: 13 blocks */
    ln_open(&r, "[ln]\ntype = layernorm\n", s);
    struct glia_rng rng;
    glia__rng_seed(&rng, 7);
    int64_t n = glia_shape_numel(&s);
    for (int64_t i = 0; i < n; i++) {
        glia_tensor_f32(r.x)[i] = (float)glia__rng_normal(&rng) + 3.0f;
        glia_tensor_f32(r.dy)[i] = (float)glia__rng_normal(&rng);
    }
    for (int i = 0; i < 24; i++) glia_tensor_f32(r.B.l.params[0].value)[i] = 1.0f + 0.1f * (float)i;
    float g[2][48], *d[2];
    int keep = omp_get_max_threads();
    for (int k = 0; k < 2; k++) {
        omp_set_num_threads(k ? 3 : 1);
        CU_ASSERT_FATAL(ln_step(&r, true, true) == GLIA_OK);
        memcpy(g[k], glia_tensor_f32(r.B.l.params[0].grad), 24 * sizeof(float));
        memcpy(g[k] + 24, glia_tensor_f32(r.B.l.params[1].grad), 24 * sizeof(float));
        d[k] = malloc((size_t)n * sizeof(float));
        CU_ASSERT_FATAL(d[k] != NULL);
        memcpy(d[k], glia_tensor_f32(r.dx), (size_t)n * sizeof(float));
    }
    omp_set_num_threads(keep);
    CU_ASSERT_EQUAL(memcmp(g[0], g[1], sizeof g[0]), 0);
    CU_ASSERT_EQUAL(memcmp(d[0], d[1], (size_t)n * sizeof(float)), 0);
    free(d[0]);
    free(d[1]);
    ln_close(&r);
}

/* Backward needs a training forward just before it: after an eval forward (which keeps nothing) it is refused. */
static void test_backward_needs_training(void)
{
    struct ln_run r;
    ln_open(&r, "[ln]\ntype = layernorm\n", S(2, 2, 3, 0, 0));
    CU_ASSERT_FATAL(glia_tensor_fill_zero(r.x) == GLIA_OK && glia_tensor_fill_zero(r.dy) == GLIA_OK);
    CU_ASSERT_FATAL(ln_step(&r, true, true) == GLIA_OK);
    CU_ASSERT_EQUAL(ln_step(&r, false, true), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "[ln] layernorm backward needs a training forward"));
    ln_close(&r);
}

/* A 1-D input is refused, naming the file, line and section; affine off declares no parameters. */
static void test_refusals_and_params(void)
{
    struct glia_shape one = S(1, 6, 0, 0, 0);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_gradcheck(ctx, "[ln]\ntype = layernorm\n", &one, 1, 1, 1e-2, NULL), GLIA_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "gradcheck.ini:1: [ln] layernorm expects (N, C), (N, T, C)"));
    glia_context_free(ctx);
    struct ln_run r;
    ln_open(&r, "[ln]\ntype = layernorm\naffine = off\n", S(2, 2, 3, 0, 0));
    CU_ASSERT_EQUAL(r.B.l.n_params, 0);
    ln_close(&r);
    ln_open(&r, "[ln]\ntype = layernorm\n", S(3, 2, 3, 5, 0));
    CU_ASSERT_EQUAL_FATAL(r.B.l.n_params, 2);
    CU_ASSERT_STRING_EQUAL(r.B.l.params[0].name, "weight");
    CU_ASSERT_STRING_EQUAL(r.B.l.params[1].name, "bias");
    for (int p = 0; p < 2; p++) CU_ASSERT(r.B.l.params[p].shape.ndim == 1 && r.B.l.params[p].shape.dim[0] == 5);
    CU_ASSERT_EQUAL(glia_tensor_f32(r.B.l.params[0].value)[4], 1.0f);
    CU_ASSERT_EQUAL(glia_tensor_f32(r.B.l.params[1].value)[4], 0.0f);
    ln_close(&r);
}

/* [train] weight_decay_1d = off leaves layernorm's weight and bias (1-D) without weight decay, as the biases; and fc1's
 * bias stays (layernorm is no normalization for [graph] drop_bias_before_norm, on by default). */
static void test_weight_decay_1d(void)
{
    for (int k = 0; k < 2; k++) {
        char text[1024], *txt = NULL;
        size_t len = 0;
        snprintf(text, sizeof text,
                 "[runtime]\ndevice = cpu\n[data]\nformat = synthetic\nchannels = 1\nrows = 4\ncols = 4\nclasses = 3\n"
                 "train_samples = 16\ntest_samples = 8\n[train]\noptimizer = adamw\n%s"
                 "[flat]\ntype = flatten\n[fc1]\ntype = linear\noutputs = 8\n[ln]\ntype = layernorm\n"
                 "[fc2]\ntype = linear\noutputs = 3\nbias = off\n[loss]\ntype = softmax_cross_entropy\n",
                 k ? "weight_decay_1d = off\n" : "");
        struct run r;
        open_run(&r, text);
        FILE *f = open_memstream(&txt, &len);
        glia_model_summary(r.m, f);
        fclose(f);
        if (k) CU_ASSERT_PTR_NOT_NULL(strstr(txt, "\nno weight decay: fc1.bias ln.weight ln.bias\n"))
        else CU_ASSERT_PTR_NULL(strstr(txt, "no weight decay"));
        free(txt);
        close_run(&r);
    }
}

GLIA_TEST_MAIN("layernorm", GLIA_TEST(test_gradcheck), GLIA_TEST(test_forward_values), GLIA_TEST(test_thread_count),
               GLIA_TEST(test_backward_needs_training), GLIA_TEST(test_refusals_and_params),
               GLIA_TEST(test_weight_decay_1d))
