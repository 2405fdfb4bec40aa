/* tests/test_cuda_layernorm.c — the CUDA layernorm against its CPU kernel on a GPU: 2-D, 3-D and 4-D inputs, C below,
 * at and above a warp, affine on and off, write and accumulate, train and eval, many rows (warps striding in the
 * fused backward), rows too wide for it, constant rows, f16 and bf16 activations, repeatability and refusals. Exits 77
 * (skipped) without a usable GPU or without the CUDA build. Not a test of the CPU semantics: test_layernorm. */
#include "cudautil.h"

/* {write, accumulate} and an eval forward of one layer and input shape. */
static void expect_all(const char *ini, struct glia_shape in, double tol)
{
    for (int acc = 0; acc < 2; acc++) {
        struct cuda_case k = {.ini = ini, .in = &in, .n_in = 1, .accumulate = acc, .seed = 11 + 7 * (uint64_t)acc};
        cuda_expect(&k, tol);
    }
    struct cuda_case k = {.ini = ini, .in = &in, .n_in = 1, .eval = true, .seed = 5};
    cuda_expect(&k, tol);
}

static void test_layernorm(void)
{
    const char *inis[] = {"[ln]\ntype = layernorm\n", "[ln]\ntype = layernorm\naffine = off\n",
                          "[ln]\ntype = layernorm\neps = 1e-3\n"};
    struct glia_shape shapes[] = {
        S(2, 4, 7, 0, 0),     /* C below a warp */
        S(3, 2, 5, 16, 0),    /* (N, T, C) */
        S(3, 3, 11, 32, 0),   /* C one warp */
        S(3, 2, 9, 100, 0),   /* C over several warps, not a multiple of 32 */
        S(4, 2, 3, 4, 5),     /* 4-D: normalized over W */
        S(2, 1, 1, 0, 0),     /* C = 1 */
        S(3, 7, 130, 24, 0),  /* 910 rows: several blocks of the row kernels, 15 splits of the reduction */
    };
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) expect_all(inis[i], shapes[s], 1e-4);
}

/* More rows than the fused backward's blocks (512, of 8 warps): each warp takes 9 rows. C = 16: with
 * fewer features some of the N(0, 1) rows come out nearly constant, where the GPU's float statistics and the CPU's
 * double ones give dx apart by more than the tolerance. */
static void test_many_rows(void)
{
    struct cuda_case k = {.ini = "[ln]\ntype = layernorm\n", .in = &(struct glia_shape){2, {36000, 16}}, .n_in = 1,
                          .seed = 3};
    cuda_expect(&k, 1e-4);
}

/* GPT-2's 768 features (the fused backward's largest shared array: 8 warps of 2 x 768 floats), and rows wider than
 * it takes (6144 features): the input gradient and the parameter gradients in passes of their own (ln_dx, then the
 * column reduction over 2 splits); written and accumulated. */
static void test_wide_rows(void)
{
    int64_t widths[] = {768, 6200};
    for (int i = 0; i < 2; i++)
        for (int acc = 0; acc < 2; acc++) {
            struct cuda_case k = {.ini = "[ln]\ntype = layernorm\n", .in = &(struct glia_shape){2, {130, widths[i]}},
                                  .n_in = 1, .accumulate = acc, .seed = 5};
            cuda_expect(&k, 1e-4);
        }
}

/* Rows that are constant (var = 0: y = bias exactly on both, even with eps = 1e-12 and a value whose float sum over
 * the row would round) and rows of mean 1000, between ordinary rows: the GPU as the CPU. */
static void test_constant_rows(void)
{
    struct glia_shape s = S(3, 2, 6, 100, 0);
    enum { C = 100, R = 12, N = R * C };
    static float x[N], dy[N], w[C], b[C];
    struct glia_rng rng;
    glia__rng_seed(&rng, 9);
    cuda_randn(&rng, x, N, 1.0f);
    cuda_randn(&rng, dy, N, 1.0f);
    for (int i = 0; i < C; i++) w[i] = 1.0f + 0.5f * (float)glia__rng_normal(&rng), b[i] = (float)glia__rng_normal(&rng);
    for (int r = 0; r < R; r++)
        for (int i = 0; i < C; i++) {
            if (r % 3 == 0) x[r * C + i] = 0.1f * (float)(r + 1);
            if (r % 3 == 1) x[r * C + i] += 1000.0f;
        }
    struct glia_tensor *res[2][4];
    for (int d = 0; d < 2; d++) {
        struct glia_backend *be = d ? cuda_gpu : cuda_cpu;
        struct cuda_built B;
        cuda_build("[ln]\ntype = layernorm\neps = 1e-12\n", d ? "cuda" : "cpu", be, &s, 1, &B);
        CU_ASSERT_FATAL(glia_tensor_from_host(B.l.params[0].value, w, sizeof w) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_from_host(B.l.params[1].value, b, sizeof b) == GLIA_OK);
        B.l.params[0].grad_unset = B.l.params[1].grad_unset = true;
        struct glia_tensor *X = cuda_put(be, s, GLIA_CONTIGUOUS, x), *DY = cuda_put(be, s, GLIA_CONTIGUOUS, dy);
        struct glia_tensor *Y = tensor_as(be, s, GLIA_CONTIGUOUS), *DX = tensor_as(be, s, GLIA_CONTIGUOUS);
        const struct glia_tensor *in[1] = {X};
        struct glia_tensor *din[1] = {DX};
        bool acc[1] = {false};
        struct glia_fwd fa = {in, 1, Y, NULL, true, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        struct glia_bwd ba = {in, 1, Y, DY, din, acc, NULL, NULL, NULL, NULL, false};
        CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fa) == GLIA_OK && B.kernel->backward(&B.l, &ba) == GLIA_OK);
        res[d][0] = cuda_get(Y);
        res[d][1] = cuda_get(DX);
        res[d][2] = cuda_get(B.l.params[0].grad);
        res[d][3] = cuda_get(B.l.params[1].grad);
        glia_tensor_release(X);
        glia_tensor_release(DY);
        glia_tensor_release(Y);
        glia_tensor_release(DX);
        cuda_unbuild(&B);
    }
    for (int d = 0; d < 2; d++)
        for (int r = 0; r < R; r += 3)
            CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(res[d][0]) + r * C, b, sizeof b), 0);
    for (int k = 0; k < 4; k++) {
        double e = max_diff(res[0][k], res[1][k]);
        if (e > 1e-4) printf("\n  result %d: %g\n", k, e);
        CU_ASSERT(e <= 1e-4);
        glia_tensor_release(res[0][k]);
        glia_tensor_release(res[1][k]);
    }
}

/* bf16 and f16 activations (statistics, parameters and their gradients f32): the CPU's f32 results on the same
 * rounded values, rounded once. */
static void test_half(void)
{
    struct glia_shape shapes[] = {S(3, 2, 5, 16, 0), S(3, 3, 9, 100, 0)};
    const char *inis[] = {"[ln]\ntype = layernorm\n", "[ln]\ntype = layernorm\naffine = off\n"};
    for (size_t i = 0; i < 2; i++)
        for (size_t s = 0; s < 2; s++)
            for (int h = 0; h < 2; h++)
                for (int acc = 0; acc < 2; acc++) {
                    struct cuda_case k = {.ini = inis[i], .in = &shapes[s], .n_in = 1, .accumulate = acc,
                                          .seed = 60 + s, .act = h ? GLIA_F16 : GLIA_BF16};
                    struct cuda_diff d = cuda_compare(&k);
                    double tol = h ? 1.0 / 1024 : 1.0 / 128;
                    bool ok = d.out <= tol && d.din <= tol && d.dparam <= 1e-4;
                    if (!ok) printf("\n  %s %s acc %d: out %g din %g dparam %g\n", inis[i], glia_dtype_name(k.act), acc,
                                    d.out, d.din, d.dparam);
                    CU_ASSERT(ok);
                }
}

/* Twice on the same input: the same bits (no atomics). */
static void test_repeatable(void)
{
    cuda_repeatable("cuda", "[ln]\ntype = layernorm\n", S(3, 6, 50, 96, 0), GLIA_CONTIGUOUS);
    cuda_repeatable("cuda", "[ln]\ntype = layernorm\n", S(2, 3000, 40, 0, 0), GLIA_CONTIGUOUS);
}

/* Backward needs a training forward just before it (as on the CPU): after an eval forward it is refused. */
static void test_backward_needs_training(void)
{
    struct glia_shape s = S(3, 2, 3, 8, 0);
    struct cuda_built G;
    cuda_build("[ln]\ntype = layernorm\n", "cuda", cuda_gpu, &s, 1, &G);
    struct glia_tensor *x = tensor_as(cuda_gpu, s, GLIA_CONTIGUOUS), *dx = tensor_as(cuda_gpu, s, GLIA_CONTIGUOUS);
    struct glia_tensor *y = tensor_as(cuda_gpu, s, GLIA_CONTIGUOUS), *dy = tensor_as(cuda_gpu, s, GLIA_CONTIGUOUS);
    CU_ASSERT_FATAL(glia_tensor_fill_zero(x) == GLIA_OK && glia_tensor_fill_zero(dy) == GLIA_OK);
    for (int p = 0; p < G.l.n_params; p++) {
        CU_ASSERT_FATAL(glia_tensor_fill_zero(G.l.params[p].value) == GLIA_OK);
        G.l.params[p].grad_unset = true;
    }
    const struct glia_tensor *in[1] = {x};
    struct glia_tensor *din[1] = {dx};
    bool acc[1] = {false};
    struct glia_fwd ft = {in, 1, y, NULL, true, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, fe = {in, 1, y, NULL, false, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    CU_ASSERT_FATAL(G.kernel->forward(&G.l, &ft) == GLIA_OK);
    CU_ASSERT_FATAL(G.kernel->forward(&G.l, &fe) == GLIA_OK);
    CU_ASSERT_EQUAL(G.kernel->backward(&G.l, &ba), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(cuda_ctx), "layernorm backward needs a training forward"));
    glia_tensor_release(x);
    glia_tensor_release(dx);
    glia_tensor_release(y);
    glia_tensor_release(dy);
    cuda_unbuild(&G);
}

/* A CPU and a CUDA kernel that take the same tensors; the CUDA one capturable and taking half activations. */
static void test_same_description(void)
{
    if (!glia__find_type(cuda_ctx, "layernorm")) CU_ASSERT_FATAL(glia_plugin_load(cuda_ctx, "layernorm") == GLIA_OK);
    const struct glia_kernel *c = glia__find_kernel(cuda_ctx, "layernorm", "cpu"),
                             *g = glia__find_kernel(cuda_ctx, "layernorm", "cuda");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(c->device_type, GLIA_DEVICE_CPU);
    CU_ASSERT_EQUAL(g->device_type, GLIA_DEVICE_CUDA);
    CU_ASSERT_EQUAL(c->flags, g->flags & ~(uint32_t)(GLIA_KERNEL_CAPTURABLE | GLIA_KERNEL_HALF));
    CU_ASSERT(g->flags & GLIA_KERNEL_CAPTURABLE);
    CU_ASSERT(g->flags & GLIA_KERNEL_HALF);
}

CUDA_TEST_MAIN("cuda_layernorm", GLIA_TEST(test_same_description), GLIA_TEST(test_layernorm), GLIA_TEST(test_many_rows), GLIA_TEST(test_wide_rows),
               GLIA_TEST(test_constant_rows),
               GLIA_TEST(test_half), GLIA_TEST(test_repeatable), GLIA_TEST(test_backward_needs_training))
