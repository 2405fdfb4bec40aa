/* tests/test_attention.c — the attention layer's CPU kernel: gradient checks (causal or not, 1 or 2 heads, T on and
 * off the kernel's tile, dropout), the output against a plain T x T softmax in double, dropout's statistics and
 * eval mode, the same bits whatever the thread count, a cached decode chunk by chunk, and refusals (shapes, a backward without a training forward).
 * Not the CUDA kernel (test_cuda_attention) and not PyTorch (torch_layer_attention.py). */
#include <math.h>
#include <omp.h>
#include <string.h>
#include <glia/types/attention.h>
#include "layerutil.h"

static struct glia_context *ctx;

static void check_grad(const char *ini, struct glia_shape in, uint64_t seed)
{
    struct glia_gradcheck_report r;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_layer_gradcheck(ctx, ini, &in, 1, seed, 2e-2, &r);
    if (st) printf("\n  %s: %s\n", ini, glia_context_error(ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(r.n_checked == glia_shape_numel(&in));
    CU_ASSERT_EQUAL(r.n_skipped, 0);
    glia_context_free(ctx);
}

/* T = 5 (less than a tile of 16), 16 (one), 37 (two and a part) */
static void test_gradcheck(void)
{
    check_grad("[a]\ntype = attention\nheads = 1\n", S(3, 2, 5, 12, 0), 1);
    check_grad("[a]\ntype = attention\nheads = 2\n", S(3, 2, 5, 12, 0), 2);
    check_grad("[a]\ntype = attention\nheads = 1\ncausal = off\n", S(3, 2, 5, 12, 0), 3);
    check_grad("[a]\ntype = attention\nheads = 2\ncausal = off\n", S(3, 1, 37, 12, 0), 4);
    check_grad("[a]\ntype = attention\nheads = 2\n", S(3, 1, 37, 12, 0), 5);
    check_grad("[a]\ntype = attention\nheads = 1\n", S(3, 1, 16, 9, 0), 6);
}

static void test_gradcheck_dropout(void)
{
    check_grad("[a]\ntype = attention\nheads = 2\ndropout = 0.5\n", S(3, 2, 5, 12, 0), 7);
    check_grad("[a]\ntype = attention\nheads = 2\ndropout = 0.3\ncausal = off\n", S(3, 1, 37, 12, 0), 8);
    check_grad("[a]\ntype = attention\nheads = 1\ndropout = 0.5\n", S(3, 1, 37, 6, 0), 9);
}

/* ---- the output against the formula ---- */

/* y(N, T, C) of qkv(N, T, 3C) by softmax(q kᵀ / sqrt(D) + mask) v with the whole T x T scores in double, the
 * probabilities dropped as glia_attention_keep says when p > 0 */
static void reference(double *y, const float *x, int64_t N, int64_t T, int64_t C, int64_t H, bool causal, float p,
                      uint64_t seed)
{
    int64_t D = C / H;
    double *s = malloc((size_t)T * sizeof *s);
    for (int64_t n = 0; n < N; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                const float *q = x + (n * T + i) * 3 * C + h * D;
                int64_t nj = causal ? i + 1 : T;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < nj; j++) {
                    const float *k = x + (n * T + j) * 3 * C + C + h * D;
                    double d = 0;
                    for (int64_t e = 0; e < D; e++) d += (double)q[e] * k[e];
                    s[j] = d / sqrt((double)D);
                    mx = fmax(mx, s[j]);
                }
                for (int64_t j = 0; j < nj; j++) sum += s[j] = exp(s[j] - mx);
                double *yi = y + (n * T + i) * C + h * D;
                for (int64_t e = 0; e < D; e++) yi[e] = 0;
                for (int64_t j = 0; j < nj; j++) {
                    double w = s[j] / sum;
                    if (p > 0) w = glia_attention_keep(seed, p, n * H + h, i, j, T) ? w / (1.0 - p) : 0;
                    const float *v = x + (n * T + j) * 3 * C + 2 * C + h * D;
                    for (int64_t e = 0; e < D; e++) yi[e] += w * v[e];
                }
            }
    free(s);
}

/* The layer of ini on seeded N(0, 1) qkv (N, T, 3C), forward in mode train with seed; its output against the
 * reference */
static void check_value(const char *ini, int64_t N, int64_t T, int64_t C, int64_t H, bool causal, float p, bool train)
{
    struct glia_shape sh = S(3, N, T, 3 * C, 0), os = S(3, N, T, C, 0);
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, ini, &sh, 1, &B);
    struct glia_tensor *x, *y;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &y) == GLIA_OK);
    struct glia_rng rng;
    glia__rng_seed(&rng, (uint64_t)(N * 1000 + T));
    float *xv = glia_tensor_f32(x);
    for (int64_t i = 0; i < glia_tensor_numel(x); i++) xv[i] = 2.0f * (float)glia__rng_normal(&rng);
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd a = {in, 1, y, NULL, train, 4242, false, 7, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL_FATAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    double *want = malloc((size_t)(N * T * C) * sizeof *want), worst = 0;
    reference(want, xv, N, T, C, H, causal, train ? p : 0.0f, 4242);
    const float *got = glia_tensor_f32(y);
    for (int64_t i = 0; i < N * T * C; i++) worst = fmax(worst, fabs(got[i] - want[i]) / fmax(1, fabs(want[i])));
    if (!(worst < 1e-5)) printf("\n  %s: off by %g\n", ini, worst);
    CU_ASSERT(worst < 1e-5);
    free(want);
    glia_tensor_release(x);
    glia_tensor_release(y);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

static void test_value(void)
{
    check_value("[a]\ntype = attention\nheads = 1\n", 2, 5, 4, 1, true, 0, true);
    check_value("[a]\ntype = attention\nheads = 4\n", 2, 37, 16, 4, true, 0, true);
    check_value("[a]\ntype = attention\nheads = 2\ncausal = off\n", 1, 70, 8, 2, false, 0, false);
    check_value("[a]\ntype = attention\nheads = 3\ndropout = 0.5\n", 2, 37, 12, 3, true, 0.5f, true);
    check_value("[a]\ntype = attention\nheads = 1\ndropout = 0.2\ncausal = off\n", 1, 33, 5, 1, false, 0.2f, true);
    /* eval mode: no dropout */
    check_value("[a]\ntype = attention\nheads = 3\ndropout = 0.5\n", 2, 37, 12, 3, true, 0.5f, false);
}

/* A cached decode (glia_fwd.decode, what glia_model_decode runs): qkv(N, 37, 3C) given in chunks of 5, 1, 1, 13 and
 * 17 positions (the kept keys and values outgrowing their room on the way) gives each chunk's rows of the whole
 * window's output, dropout (eval) left out; pos 0 starts again, with other rows; causal = off is refused. */
static void test_decode(void)
{
    enum { N = 2, T = 37, C = 8, H = 2 };
    struct glia_shape sh = S(3, N, T, 3 * C, 0);
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[a]\ntype = attention\nheads = 2\ndropout = 0.3\n", &sh, 1, &B);
    CU_ASSERT(B.kernel->flags & GLIA_KERNEL_DECODE);
    float *xv = malloc(sizeof(float) * N * T * 3 * C);
    double *want = malloc(sizeof(double) * N * T * C);
    struct glia_rng rng;
    glia__rng_seed(&rng, 77);
    for (int i = 0; i < N * T * 3 * C; i++) xv[i] = 2.0f * (float)glia__rng_normal(&rng);
    reference(want, xv, N, T, C, H, true, 0, 0);
    const int chunk[] = {5, 1, 1, 13, 17};
    for (int round = 0; round < 2; round++) {
        int64_t n = round ? 1 : N;  /* the second round: pos 0 again, one sequence */
        double worst = 0;
        for (int c = 0, pos = 0; c < 5; pos += chunk[c++]) {
            struct glia_shape cs = S(3, n, chunk[c], 3 * C, 0), os = S(3, n, chunk[c], C, 0);
            struct glia_tensor *x, *y;
            CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &cs, &x) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &y) == GLIA_OK);
            for (int64_t r = 0; r < n; r++)
                memcpy(glia_tensor_f32(x) + r * chunk[c] * 3 * C, xv + (r * T + pos) * 3 * C,
                       sizeof(float) * chunk[c] * 3 * C);
            const struct glia_tensor *in[1] = {x};
            struct glia_fwd a = {in, 1, y, NULL, false, 1, false, 1, NULL, true, pos, NULL, NULL, NULL, NULL, false, NULL, NULL};
            CU_ASSERT_EQUAL_FATAL(B.kernel->forward(&B.l, &a), GLIA_OK);
            for (int64_t r = 0; r < n; r++)
                for (int64_t i = 0; i < chunk[c] * C; i++) {
                    double w = want[(r * T + pos) * C + i];
                    worst = fmax(worst, fabs(glia_tensor_f32(y)[r * chunk[c] * C + i] - w) / fmax(1, fabs(w)));
                }
            glia_tensor_release(x);
            glia_tensor_release(y);
        }
        if (!(worst < 1e-5)) printf("\n  decode round %d: off by %g\n", round, worst);
        CU_ASSERT(worst < 1e-5);
    }
    layer_unbuild(&B);
    layer_build(ctx, "[a]\ntype = attention\nheads = 2\ncausal = off\n", &sh, 1, &B);
    struct glia_tensor *x, *y;
    struct glia_shape ys = S(3, N, T, C, 0);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &ys, &y) == GLIA_OK);
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd a = {in, 1, y, NULL, false, 1, false, 1, NULL, true, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "needs causal = on"));
    glia_tensor_release(x);
    glia_tensor_release(y);
    layer_unbuild(&B);
    free(xv);
    free(want);
    glia_context_free(ctx);
}

/* With q = 0 every score is 0, so each probability of a non-causal row is 1/T, and with v(j) the one-hot e_j (D = T)
 * y(i, j) is the probability of key j, dropped: 0, or 1/T / (1 - p). About half are 0 at p = 0.5; eval gives 1/T. */
static void test_dropout_statistics(void)
{
    enum { N = 8, T = 32 };
    struct glia_shape sh = S(3, N, T, 3 * T, 0), os = S(3, N, T, T, 0);
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[a]\ntype = attention\nheads = 1\ncausal = off\ndropout = 0.5\n", &sh, 1, &B);
    struct glia_tensor *x, *y, *y2;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &y) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &y2) == GLIA_OK);
    float *xv = glia_tensor_f32(x);
    memset(xv, 0, glia_tensor_nbytes(x));
    for (int n = 0; n < N; n++)
        for (int j = 0; j < T; j++) {
            float *row = xv + ((int64_t)n * T + j) * 3 * T;
            for (int k = 0; k < T; k++) row[T + k] = (float)(k + j % 5);  /* keys: any, as q = 0 */
            row[2 * T + j] = 1.0f;
        }
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd a = {in, 1, y, NULL, true, 99, false, 3, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL_FATAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    int zeros = 0, doubled = 0;
    const float *yv = glia_tensor_f32(y);
    for (int i = 0; i < N * T * T; i++) {
        zeros += yv[i] == 0.0f;
        doubled += fabsf(yv[i] - 2.0f / T) < 1e-6f;
    }
    CU_ASSERT_EQUAL(zeros + doubled, N * T * T);
    CU_ASSERT(zeros > 4096 - 400 && zeros < 4096 + 400);  /* 9 standard deviations */
    a.out = y2;
    a.seed = 100;  /* another step, another mask */
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    CU_ASSERT_NOT_EQUAL(memcmp(y->data, y2->data, glia_tensor_nbytes(y)), 0);
    a.seed = 99;  /* the same step seed, the same mask */
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(y->data, y2->data, glia_tensor_nbytes(y)), 0);
    a.train = false;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    int exact = 0;
    for (int i = 0; i < N * T * T; i++) exact += fabsf(glia_tensor_f32(y2)[i] - 1.0f / T) < 1e-6f;
    CU_ASSERT_EQUAL(exact, N * T * T);
    glia_tensor_release(x);
    glia_tensor_release(y);
    glia_tensor_release(y2);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

/* backward right after an eval forward (which keeps nothing) is refused, naming the layer */
static void test_backward_needs_training(void)
{
    struct glia_shape sh = S(3, 1, 4, 6, 0), os = S(3, 1, 4, 2, 0);
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[att]\ntype = attention\nheads = 2\n", &sh, 1, &B);
    struct glia_tensor *x, *y, *dy, *dx;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &dx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &y) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &dy) == GLIA_OK);
    memset(x->data, 0, glia_tensor_nbytes(x));
    memset(dy->data, 0, glia_tensor_nbytes(dy));
    const struct glia_tensor *in[1] = {x};
    struct glia_tensor *din[1] = {dx};
    bool acc[1] = {false};
    struct glia_fwd a = {in, 1, y, NULL, false, 1, false, 1, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd b = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &b), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "[att] attention backward needs a training forward"));
    a.train = true;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &b), GLIA_OK);
    glia_tensor_release(x);
    glia_tensor_release(y);
    glia_tensor_release(dx);
    glia_tensor_release(dy);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

/* The output and input gradient of one training forward and backward (dropout on) with `threads` OpenMP threads. */
static void run_threads(int threads, float **y_out, float **dx_out)
{
    struct glia_shape sh = S(3, 3, 45, 24, 0), os = S(3, 3, 45, 8, 0);
    struct built B;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, "[a]\ntype = attention\nheads = 2\ndropout = 0.1\n", &sh, 1, &B);
    struct glia_tensor *x, *y, *dy, *dx;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &dx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &y) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &dy) == GLIA_OK);
    struct glia_rng rng;
    glia__rng_seed(&rng, 12);
    for (int64_t i = 0; i < glia_tensor_numel(x); i++) glia_tensor_f32(x)[i] = (float)glia__rng_normal(&rng);
    for (int64_t i = 0; i < glia_tensor_numel(dy); i++) glia_tensor_f32(dy)[i] = (float)glia__rng_normal(&rng);
    const struct glia_tensor *in[1] = {x};
    struct glia_tensor *din[1] = {dx};
    bool acc[1] = {false};
    struct glia_fwd a = {in, 1, y, NULL, true, 5, false, 1, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd b = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &a), GLIA_OK);
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &b), GLIA_OK);
    omp_set_num_threads(before);
    *y_out = malloc(glia_tensor_nbytes(y));
    *dx_out = malloc(glia_tensor_nbytes(dx));
    memcpy(*y_out, y->data, glia_tensor_nbytes(y));
    memcpy(*dx_out, dx->data, glia_tensor_nbytes(dx));
    glia_tensor_release(x);
    glia_tensor_release(y);
    glia_tensor_release(dx);
    glia_tensor_release(dy);
    layer_unbuild(&B);
    glia_context_free(ctx);
}

/* Each (sample, head) is one thread's, in a fixed order: the same bits with 1 thread as with 3. */
static void test_threads_same_bits(void)
{
    float *y1, *dx1, *y3, *dx3;
    run_threads(1, &y1, &dx1);
    run_threads(3, &y3, &dx3);
    CU_ASSERT_EQUAL(memcmp(y1, y3, 3 * 45 * 8 * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(dx1, dx3, 3 * 45 * 24 * sizeof(float)), 0);
    free(y1);
    free(dx1);
    free(y3);
    free(dx3);
}

static void test_refusals(void)
{
    expect_error("[att]\ntype = attention\nheads = 3\n", S(3, 2, 4, 12, 0), GLIA_ESHAPE,
                 "[att] heads: attention's input 2x4x12: C = 4 is not a multiple of heads = 3");
    expect_error("[att]\ntype = attention\nheads = 1\n", S(3, 2, 4, 13, 0), GLIA_ESHAPE,
                 "[att] attention's input 2x4x13: the last dim 13 is not 3C");
    expect_error("[att]\ntype = attention\nheads = 1\n", S(2, 2, 12, 0, 0), GLIA_ESHAPE,
                 "[att] attention takes the fused q, k, v projection (N, T, 3C), got 2x12");
    expect_error("[att]\ntype = attention\n", S(3, 2, 4, 12, 0), GLIA_ECONFIG, "heads");
    expect_error("[att]\ntype = attention\nheads = 1\ndropout = 1\n", S(3, 2, 4, 12, 0), GLIA_ECONFIG, "dropout");
}

GLIA_TEST_MAIN("attention", GLIA_TEST(test_gradcheck), GLIA_TEST(test_gradcheck_dropout), GLIA_TEST(test_value),
               GLIA_TEST(test_dropout_statistics), GLIA_TEST(test_backward_needs_training), GLIA_TEST(test_threads_same_bits),
               GLIA_TEST(test_refusals), GLIA_TEST(test_decode))
