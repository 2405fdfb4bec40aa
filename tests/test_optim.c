/* tests/test_optim.c — the sgd optimizer against torch.optim.SGD's update formula, computed
 * here in double precision, and its configuration errors. Not a convergence test. */
#include <math.h>
#include <string.h>
#include "testutil.h"
#include <glia/glia.h>

#define N 257

struct sgd_cfg {
    double mu, damp, wd;
    int nesterov;
};

/* Reference: torch.optim.SGD, one parameter vector, `steps` steps with gradients g(t). */
static void reference(const struct sgd_cfg *c, double lr, double *w, double *buf, const float *g, int step)
{
    for (int i = 0; i < N; i++) {
        double d = g[i] + c->wd * w[i];
        if (c->mu != 0) {
            buf[i] = step == 1 ? d : c->mu * buf[i] + (1 - c->damp) * d;
            d = c->nesterov ? d + c->mu * buf[i] : buf[i];
        }
        w[i] -= lr * d;
    }
}

static void run_case(const char *ini, struct sgd_cfg c)
{
    struct glia_context *ctx;
    struct glia_optimizer *o;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_optimizer_new(ctx, "sgd", ini, &o);
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_EQUAL(o->ops->n_state, 1);
    float w[N], g[N], buf[N] = {0};
    double rw[N], rbuf[N] = {0};
    unsigned x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        w[i] = (float)((int)(x >> 16) % 2000 - 1000) / 500.0f;
        rw[i] = w[i];
    }
    double maxerr = 0;
    for (int step = 1; step <= 5; step++) {
        for (int i = 0; i < N; i++) {
            x = x * 1103515245u + 12345u;
            g[i] = (float)((int)(x >> 16) % 2000 - 1000) / 700.0f;
        }
        float *state[1] = {buf};
        struct glia_opt_step s = {w, g, state, N, NULL, 0.1, step, NULL};
        CU_ASSERT_EQUAL(o->ops->step(o, &s), GLIA_OK);
        reference(&c, 0.1, rw, rbuf, g, step);
        for (int i = 0; i < N; i++) maxerr = fmax(maxerr, fabs(w[i] - rw[i]));
    }
    if (maxerr > 1e-5) printf("\n  %s: max error %g\n", ini, maxerr);
    CU_ASSERT(maxerr <= 1e-5);
    /* the update really moved the weights (the check above cannot pass vacuously) */
    double moved = 0;
    for (int i = 0; i < N; i++) moved += fabs(rw[i]);
    CU_ASSERT(moved > 1.0);
    glia_optimizer_free(o);
    glia_context_free(ctx);
}

static void test_plain(void) { run_case("", (struct sgd_cfg){0, 0, 0, 0}); }
static void test_momentum(void) { run_case("[optimizer]\nmomentum = 0.9\n", (struct sgd_cfg){0.9, 0, 0, 0}); }
static void test_dampening(void)
{
    run_case("[optimizer]\nmomentum = 0.8\ndampening = 0.3\n", (struct sgd_cfg){0.8, 0.3, 0, 0});
}
static void test_nesterov(void)
{
    run_case("[optimizer]\nmomentum = 0.9\nnesterov = on\n", (struct sgd_cfg){0.9, 0, 0, 1});
}
static void test_weight_decay(void)
{
    run_case("[optimizer]\nmomentum = 0.5\nweight_decay = 0.01\n", (struct sgd_cfg){0.5, 0, 0.01, 0});
}

static void test_decay_mask(void)
{
    struct glia_context *ctx;
    struct glia_optimizer *o;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_optimizer_new(ctx, "sgd", "[optimizer]\nweight_decay = 0.5\n", &o) == GLIA_OK);
    float w[2] = {1, 1}, g[2] = {0, 0}, buf[2] = {0}, mask[2] = {1, 0};
    float *state[1] = {buf};
    struct glia_opt_step s = {w, g, state, 2, mask, 0.1, 1, NULL};
    CU_ASSERT_EQUAL(o->ops->step(o, &s), GLIA_OK);
    CU_ASSERT_DOUBLE_EQUAL(w[0], 0.95, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w[1], 1.0, 1e-6);
    glia_optimizer_free(o);
    glia_context_free(ctx);
}

static void expect_error(const char *ini, glia_status want, const char *msg)
{
    struct glia_context *ctx;
    struct glia_optimizer *o = NULL;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_optimizer_new(ctx, "sgd", ini, &o), want);
    if (!strstr(glia_context_error(ctx), msg)) printf("\n  got: %s\n", glia_context_error(ctx));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), msg));
    CU_ASSERT_PTR_NULL(o);
    glia_context_free(ctx);
}

static void test_config_errors(void)
{
    expect_error("[optimizer]\nnesterov = on\n", GLIA_ECONFIG,
                 "optimizer.ini:2: [optimizer] nesterov: Nesterov momentum needs momentum > 0");
    expect_error("[optimizer]\nmomentun = 0.9\n", GLIA_ECONFIG,
                 "optimizer.ini:2: [optimizer] momentun: unknown key; did you mean 'momentum'?");
    expect_error("[optimizer]\nmomentum = 1.5\n", GLIA_ECONFIG, "optimizer.ini:2: [optimizer] momentum:");
    expect_error("[optimizer]\nweight_decay = lots\n", GLIA_ECONFIG, "optimizer.ini:2: [optimizer] weight_decay:");
}

GLIA_TEST_MAIN("optim", GLIA_TEST(test_plain), GLIA_TEST(test_momentum), GLIA_TEST(test_dampening),
               GLIA_TEST(test_nesterov), GLIA_TEST(test_weight_decay), GLIA_TEST(test_decay_mask),
               GLIA_TEST(test_config_errors))
