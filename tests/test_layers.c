/* tests/test_layers.c — finite-difference gradient checks and gradient-contract checks of every
 * built-in layer, and proof that the checker catches broken layers. Not training tests. */
#include <math.h>
#include <string.h>
#include "internal.h"
#include "testutil.h"

static struct glia_context *ctx;

static struct glia_shape S(int n, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t dims[4] = {a, b, c, d};
    return glia_shape_make(n, dims);
}

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

static void test_linear(void)
{
    check_ok("[fc]\ntype = linear\noutputs = 3\n", S(2, 4, 5, 0, 0), 1);
    check_ok("[fc]\ntype = linear\noutputs = 1\nbias = off\n", S(2, 3, 7, 0, 0), 2);
    check_ok("[fc]\ntype = linear\noutputs = 6\n", S(2, 1, 2, 0, 0), 3);
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
}

static void test_linear_refuses_4d_input(void)
{
    struct glia_shape in = S(4, 2, 1, 3, 3);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_gradcheck(ctx, "[fc]\ntype = linear\noutputs = 3\n", &in, 1, 1, 1e-2, NULL), GLIA_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "gradcheck.ini:1: [fc] linear expects (N, features) input, got 2x1x3x3"));
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
    static const struct glia_layer_ops name_##_ops = {                                       \
        .struct_size = sizeof(struct glia_layer_ops), .type = #name_, .impl = "cpu",        \
        .min_inputs = 1, .max_inputs = 1, .create = id_create, .infer_shape = id_infer,      \
        .forward = id_forward, .backward = bw};
BROKEN(bad_scale, bad_scale_backward)
BROKEN(bad_acc, bad_acc_backward)
BROKEN(bad_unset, bad_unset_backward)

static void expect_caught(const struct glia_layer_ops *ops, const char *ini, const char *msg)
{
    struct glia_shape in = S(2, 3, 4, 0, 0);
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct glia_registry r = {ctx, -1};
    CU_ASSERT_FATAL(glia_register_layer(&r, ops) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_layer_gradcheck(ctx, ini, &in, 1, 1, 1e-2, NULL), GLIA_ENUMERIC);
    if (!strstr(glia_context_error(ctx), msg)) printf("\n  got: %s\n", glia_context_error(ctx));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), msg));
    glia_context_free(ctx);
}

static void test_checker_catches_wrong_gradient(void)
{
    expect_caught(&bad_scale_ops, "[b]\ntype = bad_scale\n", "gradcheck [b]: error");
}

static void test_checker_catches_ignored_accumulate(void)
{
    expect_caught(&bad_acc_ops, "[b]\ntype = bad_acc\n", "gradient contract: [b] input 0");
}

static void test_checker_catches_write_over_garbage(void)
{
    expect_caught(&bad_unset_ops, "[b]\ntype = bad_unset\n", "gradcheck [b]: error inf");
}

GLIA_TEST_MAIN("layers", GLIA_TEST(test_linear), GLIA_TEST(test_relu), GLIA_TEST(test_flatten),
               GLIA_TEST(test_softmax_cross_entropy), GLIA_TEST(test_linear_refuses_4d_input),
               GLIA_TEST(test_checker_catches_wrong_gradient), GLIA_TEST(test_checker_catches_ignored_accumulate),
               GLIA_TEST(test_checker_catches_write_over_garbage))
