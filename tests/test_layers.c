/* tests/test_layers.c — finite-difference gradient checks and gradient-contract checks of every
 * built-in layer, and proof that the checker catches broken layers. Not training tests. */
#include <math.h>
#include <string.h>
#include "layerutil.h"

static struct glia_context *ctx;


static void check_ok(const char *ini, struct glia_shape in, uint64_t seed)
{
    struct glia_gradcheck_report r;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_layer_gradcheck(ctx, ini, &in, 1, seed, 2e-2, &r);
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(r.n_checked > 0);
    CU_ASSERT(r.n_skipped * 10 <= r.n_checked);  /* kinks are rare */
    glia_context_free(ctx);
}

/* The CPU softmax_cross_entropy's gradient in its forward's pass equals its backward's, bit for bit. */
static void test_sce_grad_in_forward(void)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    static const char *ini[2] = {"[loss]\ntype = softmax_cross_entropy\n",
                                 "[loss]\ntype = softmax_cross_entropy\nlabel_smoothing = 0.1\n"};
    static const int64_t rc[][3] = {{7, 5, 0}, {64, 300, 3}, {9, 11, 1}};
    for (int k = 0; k < 2; k++)
        for (size_t c = 0; c < sizeof rc / sizeof rc[0]; c++) {
            struct glia_shape in = S(2, rc[c][0], rc[c][1], 0, 0);
            struct built B;
            layer_build(ctx, ini[k], &in, 1, &B);
            loss_grad_in_forward_case(&B.l, B.b, rc[c][0], rc[c][1], (int)rc[c][2], 40 + c + 10 * (uint64_t)k);
            layer_unbuild(&B);
        }
    glia_context_free(ctx);
}

static void test_linear(void)
{
    check_ok("[fc]\ntype = linear\noutputs = 3\n", S(2, 4, 5, 0, 0), 1);
    check_ok("[fc]\ntype = linear\noutputs = 1\nbias = off\n", S(2, 3, 7, 0, 0), 2);
    check_ok("[fc]\ntype = linear\noutputs = 6\n", S(2, 1, 2, 0, 0), 3);
    /* (N, T, C) and 4-D: one GEMM over the rows of the leading dims, as nn.Linear */
    check_ok("[fc]\ntype = linear\noutputs = 4\n", S(3, 2, 3, 5, 0), 34);
    check_ok("[fc]\ntype = linear\noutputs = 3\nbias = off\n", S(3, 2, 3, 5, 0), 35);
    check_ok("[fc]\ntype = linear\noutputs = 2\n", S(4, 2, 1, 3, 3), 36);
    /* activation = gelu | gelu_tanh: the pre-activation kept for backward */
    check_ok("[fc]\ntype = linear\noutputs = 4\nactivation = gelu\n", S(3, 2, 3, 5, 0), 37);
    check_ok("[fc]\ntype = linear\noutputs = 3\nbias = off\nactivation = gelu_tanh\n", S(2, 4, 6, 0, 0), 38);
}

static void test_relu(void)
{
    check_ok("[r]\ntype = relu\n", S(2, 4, 6, 0, 0), 4);
    check_ok("[r]\ntype = relu\n", S(4, 2, 3, 2, 2), 5);
}

static void test_flatten(void) { check_ok("[f]\ntype = flatten\n", S(4, 2, 3, 2, 2), 6); }

static void test_softmax_cross_entropy(void)
{
    check_ok("[loss]\ntype = softmax_cross_entropy\n", S(2, 5, 4, 0, 0), 7);
    check_ok("[loss]\ntype = softmax_cross_entropy\n", S(2, 1, 10, 0, 0), 8);
    check_ok("[loss]\ntype = softmax_cross_entropy\nlabel_smoothing = 0.1\n", S(2, 5, 4, 0, 0), 9);
    check_ok("[loss]\ntype = softmax_cross_entropy\nlabel_smoothing = 1\n", S(2, 3, 6, 0, 0), 10);
    /* a language model's (N, T, V) logits with (N, T) labels; ignore_index = 0 leaves out the positions whose random
     * label is 0 */
    check_ok("[loss]\ntype = softmax_cross_entropy\n", S(3, 2, 4, 6, 0), 11);
    check_ok("[loss]\ntype = softmax_cross_entropy\nlabel_smoothing = 0.2\nignore_index = 0\n", S(3, 3, 5, 3, 0), 12);
}

/* ignore_index over (N, T, V) logits: the mean runs over the counted positions only, an ignored position's gradient
 * row is 0, and a batch with every position ignored gives loss 0 and gradient 0 (torch gives NaN). */
static void test_sce_ignore_index(void)
{
    struct glia_shape sh = S(3, 1, 3, 2, 0), ls = S(2, 1, 3, 0, 0), one = S(1, 1, 0, 0, 0);
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[l]\ntype = softmax_cross_entropy\nignore_index = 7\n", &sh, 1, &B);
    struct glia_tensor *x, *y, *out, *dout, *dx;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &dx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_I32, &ls, &y) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &one, &out) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &one, &dout) == GLIA_OK);
    float xv[6] = {1, 2, 0, 3, 5, -1};
    int32_t yv[3] = {1, 7, 0};
    memcpy(x->data, xv, sizeof xv);
    memcpy(y->data, yv, sizeof yv);
    glia_tensor_f32(dout)[0] = 1;
    const struct glia_tensor *in[1] = {x};
    struct glia_tensor *din[1] = {dx};
    bool acc[1] = {false};
    struct glia_fwd a = {in, 1, out, y, true, 0, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd b = {in, 1, out, dout, din, acc, y, NULL, NULL, NULL, false};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    double l0 = log(exp(1.0) + exp(2.0)) - 2, l2 = log(exp(5.0) + exp(-1.0)) - 5;
    CU_ASSERT_DOUBLE_EQUAL(glia_tensor_f32(out)[0], (l0 + l2) / 2, 1e-5);  /* position 1 does not count */
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &b), GLIA_OK);
    const float *g = glia_tensor_f32(dx);
    CU_ASSERT_DOUBLE_EQUAL(g[0], 0.5 * exp(1.0) / (exp(1.0) + exp(2.0)), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(g[1], 0.5 * (exp(2.0) / (exp(1.0) + exp(2.0)) - 1), 1e-6);
    CU_ASSERT_EQUAL(g[2], 0.0f);
    CU_ASSERT_EQUAL(g[3], 0.0f);
    /* every position ignored */
    for (int i = 0; i < 3; i++) glia_tensor_i32(y)[i] = 7;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    CU_ASSERT_EQUAL(glia_tensor_f32(out)[0], 0.0f);
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &b), GLIA_OK);
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(g[i], 0.0f);
    /* another label out of range is still refused, naming the position */
    glia_tensor_i32(y)[2] = 2;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "label 2 at batch row 2 is out of range for 2 classes"));
    glia_tensor_release(x), glia_tensor_release(dx), glia_tensor_release(y), glia_tensor_release(out);
    glia_tensor_release(dout);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

/* torch: F.cross_entropy([[1, 2, 3]], [0], label_smoothing=0.2) = 2.2076059 (by the formula
 * (1-e)(lse - x_y) + e mean_c(lse - x_c) with lse = 3.4076059) */
static void test_label_smoothing_value(void)
{
    struct glia_shape sh = S(2, 1, 3, 0, 0), one = S(1, 1, 0, 0, 0);
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[l]\ntype = softmax_cross_entropy\nlabel_smoothing = 0.2\n", &sh, 1, &B);
    struct glia_tensor *x, *y, *out;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_I32, &one, &y) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &one, &out) == GLIA_OK);
    float xv[3] = {1, 2, 3};
    memcpy(x->data, xv, sizeof xv);
    glia_tensor_i32(y)[0] = 0;
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd a = {in, 1, out, y, false, 0, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    double lse = log(exp(1.0) + exp(2.0) + exp(3.0));
    double want = 0.8 * (lse - 1) + 0.2 * ((lse - 1) + (lse - 2) + (lse - 3)) / 3;
    CU_ASSERT_DOUBLE_EQUAL(glia_tensor_f32(out)[0], want, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(want, 2.2076059, 1e-6);
    glia_tensor_release(x);
    glia_tensor_release(y);
    glia_tensor_release(out);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

static void test_sigmoid(void)
{
    check_ok("[s]\ntype = sigmoid\n", S(2, 4, 6, 0, 0), 11);
    check_ok("[s]\ntype = sigmoid\n", S(4, 2, 3, 2, 2), 12);
    check_ok("[s]\ntype = sigmoid\n", S(3, 1, 5, 7, 0), 13);
}

static void test_tanh(void)
{
    check_ok("[t]\ntype = tanh\n", S(2, 4, 6, 0, 0), 21);
    check_ok("[t]\ntype = tanh\n", S(4, 2, 3, 2, 2), 22);
    check_ok("[t]\ntype = tanh\n", S(1, 17, 0, 0, 0), 23);
}

static void test_gelu(void)
{
    check_ok("[g]\ntype = gelu\n", S(2, 4, 6, 0, 0), 31);
    check_ok("[g]\ntype = gelu\n", S(4, 2, 3, 2, 2), 32);
    check_ok("[g]\ntype = gelu\n", S(3, 2, 4, 3, 0), 33);
    check_ok("[g]\ntype = gelu\napproximate = tanh\n", S(3, 2, 4, 3, 0), 34);
}

static void test_leaky_relu(void)
{
    check_ok("[a]\ntype = leaky_relu\n", S(2, 4, 6, 0, 0), 41);
    check_ok("[a]\ntype = leaky_relu\n", S(4, 2, 3, 2, 2), 42);
    check_ok("[a]\ntype = leaky_relu\nnegative_slope = 0.2\n", S(2, 5, 4, 0, 0), 43);
    check_ok("[a]\ntype = leaky_relu\nnegative_slope = 0.2\n", S(4, 3, 2, 2, 2), 44);
    check_ok("[a]\ntype = leaky_relu\nnegative_slope = 0\n", S(2, 3, 5, 0, 0), 45);
}

static void test_leaky_relu_refuses_slope_out_of_range(void)
{
    struct glia_shape in = S(2, 3, 4, 0, 0);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_gradcheck(ctx, "[a]\ntype = leaky_relu\nnegative_slope = 2\n", &in, 1, 1, 1e-2, NULL),
                    GLIA_ECONFIG);
    if (!strstr(glia_context_error(ctx), "gradcheck.ini:3: [a] negative_slope:"))
        printf("\n  got: %s\n", glia_context_error(ctx));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "gradcheck.ini:3: [a] negative_slope:"));
    glia_context_free(ctx);
}

/* ---- forward values: the layer alone on the CPU backend, against reference values ---- */

/* Builds the one layer of `ini` like the gradient checker does (load its plugin, validate its
 * section, create), runs an eval-mode forward of the n values x on shape (1, n) and compares
 * with want (absolute error <= 1e-6, relative <= 1e-6). */
static void check_forward(const char *ini, const float *x, const float *want, int n)
{
    struct glia_tensor *tx = NULL, *ty = NULL;
    struct glia_shape sh = S(2, 1, n, 0, 0), os;
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, ini, &sh, 1, &B);
    const char *type = B.type->name;
    CU_ASSERT_PTR_NOT_NULL(B.type->flops);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &sh, 1, &os) == GLIA_OK);
    CU_ASSERT(glia_shape_equal(&os, &sh));
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &tx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &ty) == GLIA_OK);
    memcpy(glia_tensor_f32(tx), x, (size_t)n * sizeof *x);
    const struct glia_tensor *in[1] = {tx};
    struct glia_fwd a = {in, 1, ty, NULL, false, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    const float *y = glia_tensor_f32(ty);
    for (int i = 0; i < n; i++) {
        bool ok = isfinite(y[i]) && fabs((double)y[i] - want[i]) <= 1e-6 * fmax(1.0, fabs(want[i]));
        if (!ok) printf("\n  %s(%g) = %.9g, want %.9g", type, x[i], y[i], want[i]);
        CU_ASSERT(ok);
    }
    glia_tensor_release(tx);
    glia_tensor_release(ty);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

static void test_activation_forward_values(void)
{
    /* references in double precision (Python math.erf, math.exp, math.tanh) */
    const float xg[] = {1.0f, -1.0f, 0.0f, 2.0f, -3.0f, 0.5f};
    const float yg[] = {0.841344746f, -0.158655254f, 0.0f, 1.95449974f, -0.00404969409f, 0.345731231f};
    check_forward("[g]\ntype = gelu\n", xg, yg, 6);
    /* large |x| must saturate, not overflow to NaN */
    const float xs[] = {0.0f, 2.0f, -2.0f, 10.0f, -10.0f, 1000.0f, -1000.0f};
    const float ys[] = {0.5f, 0.880797078f, 0.119202922f, 0.999954602f, 4.53978687e-05f, 1.0f, 0.0f};
    check_forward("[s]\ntype = sigmoid\n", xs, ys, 7);
    const float xt[] = {0.5f, -1.0f, 0.0f, 3.0f, 100.0f, -100.0f};
    const float yt[] = {0.462117157f, -0.761594156f, 0.0f, 0.995054754f, 1.0f, -1.0f};
    check_forward("[t]\ntype = tanh\n", xt, yt, 6);
    const float xl[] = {-2.0f, 3.0f, 0.0f, -0.5f};
    const float yl[] = {-0.02f, 3.0f, 0.0f, -0.005f};
    check_forward("[a]\ntype = leaky_relu\n", xl, yl, 4);
    const float yl2[] = {-0.4f, 3.0f, 0.0f, -0.1f};
    check_forward("[a]\ntype = leaky_relu\nnegative_slope = 0.2\n", xl, yl2, 4);
}

/* relu at the edges, against torch.relu (float32 and float64 agree): NaN gives NaN and passes the
 * gradient (torch's threshold_backward: dy unless y <= 0), -0 stays -0 with gradient 0, +inf passes,
 * -inf gives +0. The gradient is a select, not a product: an inf or NaN dy where y <= 0 gives 0.
 * Bits are compared, so a NaN turned into 0 or a -0 into +0 fails. */
static void test_relu_edges(void)
{
    enum { n = 9 };
    const float x[n] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 1.5f, -1.5f, 1e-45f, -1e-45f};
    const float want_y[n] = {NAN, -0.0f, 0.0f, INFINITY, 0.0f, 1.5f, 0.0f, 1e-45f, 0.0f};
    const float dy[n] = {NAN, INFINITY, -2.0f, INFINITY, NAN, 2.0f, INFINITY, -1.0f, NAN};
    const float want_dx[n] = {NAN, 0.0f, 0.0f, INFINITY, 0.0f, 2.0f, 0.0f, -1.0f, 0.0f};
    struct glia_shape sh = S(2, 1, n, 0, 0);
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[r]\ntype = relu\n", &sh, 1, &B);
    struct glia_tensor *tx, *ty, *tdy, *tdx;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &tx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &ty) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &tdy) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &tdx) == GLIA_OK);
    memcpy(glia_tensor_f32(tx), x, sizeof x);
    memcpy(glia_tensor_f32(tdy), dy, sizeof dy);
    const struct glia_tensor *in[1] = {tx};
    struct glia_fwd fa = {in, 1, ty, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fa) == GLIA_OK);
    const float *y = glia_tensor_f32(ty), *dx = glia_tensor_f32(tdx);
    for (int i = 0; i < n; i++) {
        bool same = memcmp(&y[i], &want_y[i], sizeof y[i]) == 0 || (isnan(y[i]) && isnan(want_y[i]));
        if (!same) printf("\n  relu(%g) = %g, want %g", x[i], y[i], want_y[i]);
        CU_ASSERT(same && !signbit(y[i]) == !signbit(want_y[i]));
    }
    struct glia_tensor *din[1] = {tdx};
    for (int add = 0; add < 2; add++) {
        bool acc[1] = {add};
        for (int i = 0; i < n; i++) glia_tensor_f32(tdx)[i] = add ? 0.0f : NAN;  /* written over garbage, or += */
        struct glia_bwd ba = {in, 1, ty, tdy, din, acc, NULL, NULL, NULL, NULL, false};
        CU_ASSERT_FATAL(B.kernel->backward(&B.l, &ba) == GLIA_OK);
        for (int i = 0; i < n; i++) {
            bool same = dx[i] == want_dx[i] || (isnan(dx[i]) && isnan(want_dx[i]));
            if (!same) printf("\n  relu'(%g) * %g = %g, want %g (accumulate %d)", x[i], dy[i], dx[i], want_dx[i], add);
            CU_ASSERT(same);
        }
    }
    glia_tensor_release(tx);
    glia_tensor_release(ty);
    glia_tensor_release(tdy);
    glia_tensor_release(tdx);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

static void test_linear_refuses_1d_input(void)
{
    struct glia_shape in = S(1, 6, 0, 0, 0);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_gradcheck(ctx, "[fc]\ntype = linear\noutputs = 3\n", &in, 1, 1, 1e-2, NULL), GLIA_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx),
                                  "gradcheck.ini:1: [fc] linear expects (N, ..., features) input of 2 or more dimensions, got 6"));
    glia_context_free(ctx);
}

/* linear's init: nn.Linear's U(+-1/sqrt(features)) for weight and bias by default; init_std > 0 gives GPT-2's, weight
 * N(0, init_std^2) and bias zeros (the bias-less layer too); a negative init_std is refused naming the key. */
static void test_linear_init(void)
{
    struct glia_shape in = S(2, 4, 16, 0, 0);
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[fc]\ntype = linear\noutputs = 3\n", &in, 1, &B);
    CU_ASSERT_FATAL(B.l.n_params == 2);
    for (int k = 0; k < 2; k++) CU_ASSERT(B.l.params[k].init.kind == GLIA_INIT_UNIFORM && B.l.params[k].init.a == 0.25);
    layer_unbuild(&B);
    layer_build(ctx, "[fc]\ntype = linear\noutputs = 3\ninit_std = 0.02\n", &in, 1, &B);
    CU_ASSERT_FATAL(B.l.n_params == 2);
    CU_ASSERT(B.l.params[0].init.kind == GLIA_INIT_NORMAL && B.l.params[0].init.a == 0.02);
    CU_ASSERT(B.l.params[1].init.kind == GLIA_INIT_ZEROS);
    layer_unbuild(&B);
    layer_build(ctx, "[fc]\ntype = linear\noutputs = 3\nbias = off\ninit_std = 0.004\n", &in, 1, &B);
    CU_ASSERT(B.l.n_params == 1 && B.l.params[0].init.kind == GLIA_INIT_NORMAL && B.l.params[0].init.a == 0.004);
    layer_unbuild(&B);
    CU_ASSERT_NOT_EQUAL(glia_layer_gradcheck(ctx, "[fc]\ntype = linear\noutputs = 3\ninit_std = -1\n", &in, 1, 1, 1e-2,
                                             NULL), GLIA_OK);
    if (!strstr(glia_context_error(ctx), "[fc] init_std")) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "[fc] init_std"));
    glia_context_free(ctx);
}

/* The output shape of linear on 3-D and 4-D inputs: only the last dim changes, and flops count every row. */
static void test_linear_nd_shape(void)
{
    struct glia_shape in = S(3, 2, 3, 5, 0), out;
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[fc]\ntype = linear\noutputs = 4\n", &in, 1, &B);
    CU_ASSERT_EQUAL_FATAL(B.type->infer_shape(&B.l, &in, 1, &out), GLIA_OK);
    CU_ASSERT(out.ndim == 3 && out.dim[0] == 2 && out.dim[1] == 3 && out.dim[2] == 4);
    CU_ASSERT_EQUAL(B.type->flops(&B.l, &in, 1), 2ull * 6 * 5 * 4);
    struct glia_shape bad = S(3, 2, 3, 6, 0);
    CU_ASSERT_EQUAL(B.type->infer_shape(&B.l, &bad, 1, &out), GLIA_ESHAPE);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

static void check_multi(const char *ini, const struct glia_shape *in, int n, uint64_t seed)
{
    struct glia_gradcheck_report r;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_layer_gradcheck(ctx, ini, in, n, seed, 2e-2, &r);
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(r.n_checked > 0);
    glia_context_free(ctx);
}

static void test_dropout(void)
{
    check_ok("[d]\ntype = dropout\np = 0.3\n", S(2, 6, 7, 0, 0), 21);
    check_ok("[d]\ntype = dropout\n", S(4, 2, 3, 2, 2), 22);
    check_ok("[d]\ntype = dropout\np = 0\n", S(2, 3, 3, 0, 0), 23);
    check_ok("[d]\ntype = dropout\np = 0.2\n", S(3, 2, 3, 4, 0), 24);
}

static void test_dropout_statistics(void)
{
    /* training: about p of the elements are zero, the rest scaled by 1/(1-p); eval: identity */
    struct glia_shape sh = S(2, 100, 100, 0, 0);
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[d]\ntype = dropout\np = 0.25\n", &sh, 1, &B);
    const struct glia_kernel *ops = B.kernel;
    struct glia_backend *b = B.b;
    struct glia_layer *l = &B.l;
    struct glia_tensor *x, *y1, *y2;
    CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &sh, &y1) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_F32, &sh, &y2) == GLIA_OK);
    for (int i = 0; i < 10000; i++) glia_tensor_f32(x)[i] = 1.0f;
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd a = {in, 1, y1, NULL, true, 99, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(ops->forward(l, &a), GLIA_OK);
    int zeros = 0, scaled = 0;
    for (int i = 0; i < 10000; i++) {
        float v = glia_tensor_f32(y1)[i];
        zeros += v == 0.0f;
        scaled += fabsf(v - 1.0f / 0.75f) < 1e-6f;
    }
    CU_ASSERT_EQUAL(zeros + scaled, 10000);
    CU_ASSERT(zeros > 2300 && zeros < 2700);
    a.out = y2;
    a.seed = 100;  /* another step, another mask */
    CU_ASSERT_EQUAL(ops->forward(l, &a), GLIA_OK);
    CU_ASSERT_NOT_EQUAL(memcmp(y1->data, y2->data, glia_tensor_nbytes(y1)), 0);
    a.seed = 99;   /* the same step seed, the same mask */
    CU_ASSERT_EQUAL(ops->forward(l, &a), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(y1->data, y2->data, glia_tensor_nbytes(y1)), 0);
    a.train = false;
    CU_ASSERT_EQUAL(ops->forward(l, &a), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(x->data, y2->data, glia_tensor_nbytes(x)), 0);
    glia_tensor_release(x);
    glia_tensor_release(y1);
    glia_tensor_release(y2);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

static void test_add(void)
{
    struct glia_shape two[2] = {S(2, 3, 4, 0, 0), S(2, 3, 4, 0, 0)};
    check_multi("[a]\ntype = add\n", two, 2, 31);
    struct glia_shape three[3] = {S(4, 2, 2, 2, 2), S(4, 2, 2, 2, 2), S(4, 2, 2, 2, 2)};
    check_multi("[a]\ntype = add\n", three, 3, 32);
    struct glia_shape seq[2] = {S(3, 2, 3, 4, 0), S(3, 2, 3, 4, 0)};  /* (N, T, C): a transformer's residual */
    check_multi("[a]\ntype = add\n", seq, 2, 33);
    struct glia_shape bad[2] = {S(2, 3, 4, 0, 0), S(2, 3, 5, 0, 0)};
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_gradcheck(ctx, "[a]\ntype = add\n", bad, 2, 1, 1e-2, NULL), GLIA_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "add needs equal shapes: input 1 is 3x4, input 2 is 3x5"));
    glia_context_free(ctx);
}

static void test_concat(void)
{
    struct glia_shape ch[2] = {S(4, 2, 3, 2, 2), S(4, 2, 1, 2, 2)};
    check_multi("[c]\ntype = concat\n", ch, 2, 41);
    struct glia_shape last[3] = {S(2, 3, 2, 0, 0), S(2, 3, 4, 0, 0), S(2, 3, 1, 0, 0)};
    check_multi("[c]\ntype = concat\n", last, 3, 42);
    struct glia_shape mid[2] = {S(3, 2, 3, 4, 0), S(3, 2, 3, 1, 0)};
    check_multi("[c]\ntype = concat\naxis = 2\n", mid, 2, 43);
    struct glia_shape bad[2] = {S(4, 2, 3, 2, 2), S(4, 2, 1, 2, 3)};
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_gradcheck(ctx, "[c]\ntype = concat\n", bad, 2, 1, 1e-2, NULL), GLIA_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "concat along axis 1: input 1 is 2x3x2x2, input 2 is 2x1x2x3"));
    glia_context_free(ctx);
}

/* ---- broken layers: the checker must catch each ---- */

static glia_status id_create(struct glia_layer *l, const struct glia_section *c, const struct glia_shape *in, int n)
{
    return GLIA_OK;
}
static glia_status id_infer(const struct glia_layer *l, const struct glia_shape *in, int n, struct glia_shape *out)
{
    *out = in[0];
    return GLIA_OK;
}
static glia_status id_forward(struct glia_layer *l, const struct glia_fwd *a)
{
    memcpy(a->out->data, a->in[0]->data, glia_tensor_nbytes(a->out));
    return GLIA_OK;
}
/* wrong: gradient doubled */
static glia_status bad_scale_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    float *dx = a->din[0]->data;
    const float *dy = a->dout->data;
    for (int64_t i = 0; i < glia_tensor_numel(a->dout); i++) dx[i] = (a->din_accumulate[0] ? dx[i] : 0) + 2 * dy[i];
    return GLIA_OK;
}
/* wrong: ignores din_accumulate */
static glia_status bad_acc_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    memcpy(a->din[0]->data, a->dout->data, glia_tensor_nbytes(a->dout));
    return GLIA_OK;
}
/* wrong: always adds, even into an unset (garbage) input gradient */
static glia_status bad_unset_backward(struct glia_layer *l, const struct glia_bwd *a)
{
    float *dx = a->din[0]->data;
    const float *dy = a->dout->data;
    for (int64_t i = 0; i < glia_tensor_numel(a->dout); i++) dx[i] += dy[i];
    return GLIA_OK;
}

#define BROKEN(name_, bw)                                                                    \
    static const struct glia_layer_type name_##_type = {                                     \
        .struct_size = sizeof(struct glia_layer_type), .name = #name_, .min_inputs = 1,      \
        .max_inputs = 1, .create = id_create, .infer_shape = id_infer};                      \
    static const struct glia_kernel name_##_ops = {                                          \
        .struct_size = sizeof(struct glia_kernel), .type = #name_, .impl = "cpu",            \
        .forward = id_forward, .backward = bw};
BROKEN(bad_scale, bad_scale_backward)
BROKEN(bad_acc, bad_acc_backward)
BROKEN(bad_unset, bad_unset_backward)

static void expect_caught(const struct glia_layer_type *type, const struct glia_kernel *ops, const char *ini,
                          const char *msg)
{
    struct glia_shape in = S(2, 3, 4, 0, 0);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct glia_registry r = {ctx, -1};
    CU_ASSERT_FATAL(glia_register_layer_type(&r, type) == GLIA_OK);
    CU_ASSERT_FATAL(glia_register_kernel(&r, ops) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_gradcheck(ctx, ini, &in, 1, 1, 1e-2, NULL), GLIA_ENUMERIC);
    if (!strstr(glia_context_error(ctx), msg)) printf("\n  got: %s\n", glia_context_error(ctx));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), msg));
    glia_context_free(ctx);
}

/* ---- the init_param slot ---- */

/* a layer with parameters "a" (3) and "b" (2), both init 1.5, whose init_param sets b to 42 + its index */
static glia_status two_params_create(struct glia_layer *l, const struct glia_section *c, const struct glia_shape *in,
                                     int n)
{
    struct glia_shape s3 = S(1, 3, 0, 0, 0), s2 = S(1, 2, 0, 0, 0);
    glia_status st = glia_layer_add_param(l, "a", &s3, (struct glia_param_init){GLIA_INIT_CONST, 1.5}, NULL);
    return st ? st : glia_layer_add_param(l, "b", &s2, (struct glia_param_init){GLIA_INIT_CONST, 1.5}, NULL);
}
static void set_b(const struct glia_layer *l, int index, float *values)
{
    if (!strcmp(l->params[index].name, "b"))
        for (int i = 0; i < 2; i++) values[i] = 42.0f + (float)i;
}
static const struct glia_layer_type init_new_type = {
    .struct_size = sizeof(struct glia_layer_type), .name = "init_new", .min_inputs = 1, .max_inputs = 1,
    .create = two_params_create, .infer_shape = id_infer, .init_param = set_b};
/* the same without the slot: the drawn values stay */
static const struct glia_layer_type init_none_type = {
    .struct_size = sizeof(struct glia_layer_type), .name = "init_none", .min_inputs = 1, .max_inputs = 1,
    .create = two_params_create, .infer_shape = id_infer};
static const struct glia_kernel init_new_cpu = {
    .struct_size = sizeof(struct glia_kernel), .type = "init_new", .impl = "cpu", .forward = id_forward};
static const struct glia_kernel init_none_cpu = {
    .struct_size = sizeof(struct glia_kernel), .type = "init_none", .impl = "cpu", .forward = id_forward};

/* The core draws a parameter's declared init, then hands it to the type's init_param (for each parameter, with its
 * index), when the type has one. */
static void test_init_param_slot(void)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct glia_registry r = {ctx, -1};
    CU_ASSERT_FATAL(glia_register_layer_type(&r, &init_new_type) == GLIA_OK);
    CU_ASSERT_FATAL(glia_register_layer_type(&r, &init_none_type) == GLIA_OK);
    CU_ASSERT_FATAL(glia_register_kernel(&r, &init_new_cpu) == GLIA_OK);
    CU_ASSERT_FATAL(glia_register_kernel(&r, &init_none_cpu) == GLIA_OK);
    struct glia_shape in = S(2, 2, 3, 0, 0);
    const char *inis[2] = {"[l]\ntype = init_new\n", "[l]\ntype = init_none\n"};
    for (int k = 0; k < 2; k++) {
        struct glia_layer_run *run;
        glia_status st = glia_layer_run_new(ctx, inis[k], (struct glia_device){GLIA_DEVICE_CPU, 0}, &in, 1,
                                            GLIA_CONTIGUOUS, 1, &run);
        if (st) printf("\n  %s\n", glia_context_error(ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        const struct glia_layer *l = glia_layer_run_layer(run);
        const float *a = glia_tensor_f32(l->params[0].value), *b = glia_tensor_f32(l->params[1].value);
        CU_ASSERT(a[0] == 1.5f && a[1] == 1.5f && a[2] == 1.5f);
        CU_ASSERT(k == 0 ? b[0] == 42.0f && b[1] == 43.0f : b[0] == 1.5f && b[1] == 1.5f);
        glia_layer_run_free(run);
    }
    glia_context_free(ctx);
}

static void test_checker_catches_wrong_gradient(void)
{
    expect_caught(&bad_scale_type, &bad_scale_ops, "[b]\ntype = bad_scale\n", "gradcheck [b]: error");
}

static void test_checker_catches_ignored_accumulate(void)
{
    expect_caught(&bad_acc_type, &bad_acc_ops, "[b]\ntype = bad_acc\n", "gradient contract: [b] input 0");
}

static void test_checker_catches_write_over_garbage(void)
{
    expect_caught(&bad_unset_type, &bad_unset_ops, "[b]\ntype = bad_unset\n", "gradcheck [b]: error inf");
}

GLIA_TEST_MAIN("layers", GLIA_TEST(test_label_smoothing_value), GLIA_TEST(test_dropout), GLIA_TEST(test_dropout_statistics), GLIA_TEST(test_add),
               GLIA_TEST(test_concat), GLIA_TEST(test_sce_grad_in_forward), GLIA_TEST(test_linear), GLIA_TEST(test_relu), GLIA_TEST(test_relu_edges), GLIA_TEST(test_flatten),
               GLIA_TEST(test_softmax_cross_entropy), GLIA_TEST(test_sce_ignore_index), GLIA_TEST(test_sigmoid), GLIA_TEST(test_tanh),
               GLIA_TEST(test_gelu), GLIA_TEST(test_leaky_relu), GLIA_TEST(test_leaky_relu_refuses_slope_out_of_range),
               GLIA_TEST(test_activation_forward_values), GLIA_TEST(test_linear_refuses_1d_input),
               GLIA_TEST(test_linear_nd_shape), GLIA_TEST(test_linear_init),
               GLIA_TEST(test_checker_catches_wrong_gradient), GLIA_TEST(test_checker_catches_ignored_accumulate),
               GLIA_TEST(test_checker_catches_write_over_garbage), GLIA_TEST(test_init_param_slot))
