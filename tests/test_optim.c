/* tests/test_optim.c — the sgd, adam, adamw and adadelta optimizers against PyTorch's update
 * formulas (torch.optim.SGD, Adam, AdamW, Adadelta) and lamb against Apex's FusedLAMB, computed here in double precision, their
 * defaults, and their configuration errors. Not a convergence test. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include <glia/glia.h>

#define N 257
#define STEPS 6
#define MAX_STATE 2

/* Hyperparameters of one reference run; each reference reads the fields it knows. */
struct ocfg {
    double mu, damp, wd;  /* sgd momentum and dampening; weight decay of every optimizer */
    int nesterov;
    double b1, b2, eps;   /* adam, adamw */
    double rho;           /* adadelta (eps above) */
};

/* One reference step over N elements: st are the n_state reference state arrays, mask the
 * weight decay flags (NULL: all). */
typedef void (*ref_fn)(const struct ocfg *c, double lr, double *w, double *const *st,
                       const float *g, const float *mask, int step);

static double decay_of(const struct ocfg *c, const float *mask, int i)
{
    return mask ? mask[i] * c->wd : c->wd;
}

/* torch.optim.SGD */
static void ref_sgd(const struct ocfg *c, double lr, double *w, double *const *st,
                    const float *g, const float *mask, int step)
{
    double *buf = st[0];
    for (int i = 0; i < N; i++) {
        double d = g[i] + decay_of(c, mask, i) * w[i];
        if (c->mu != 0) {
            buf[i] = step == 1 ? d : c->mu * buf[i] + (1 - c->damp) * d;
            d = c->nesterov ? d + c->mu * buf[i] : buf[i];
        }
        w[i] -= lr * d;
    }
}

/* Adam in the textbook form of torch.optim.Adam's documentation (m̂ = m / (1 − β1^t),
 * v̂ = v / (1 − β2^t), w −= lr m̂ / (√v̂ + ε)); the plugin uses torch's rearranged form, equal
 * in exact arithmetic. decoupled: AdamW (w *= 1 − lr wd first, g untouched); else L2 in g. */
static void adam_common(const struct ocfg *c, double lr, double *w, double *const *st,
                        const float *g, const float *mask, int step, int decoupled)
{
    double *m = st[0], *v = st[1];
    for (int i = 0; i < N; i++) {
        double d = g[i];
        if (decoupled)
            w[i] *= 1 - lr * decay_of(c, mask, i);
        else
            d += decay_of(c, mask, i) * w[i];
        m[i] = c->b1 * m[i] + (1 - c->b1) * d;
        v[i] = c->b2 * v[i] + (1 - c->b2) * d * d;
        double mhat = m[i] / (1 - pow(c->b1, step)), vhat = v[i] / (1 - pow(c->b2, step));
        w[i] -= lr * mhat / (sqrt(vhat) + c->eps);
    }
}

static void ref_adam(const struct ocfg *c, double lr, double *w, double *const *st,
                     const float *g, const float *mask, int step)
{
    adam_common(c, lr, w, st, g, mask, step, 0);
}

static void ref_adamw(const struct ocfg *c, double lr, double *w, double *const *st,
                      const float *g, const float *mask, int step)
{
    adam_common(c, lr, w, st, g, mask, step, 1);
}

/* torch.optim.Adadelta: square_avg, acc_delta */
static void ref_adadelta(const struct ocfg *c, double lr, double *w, double *const *st,
                         const float *g, const float *mask, int step)
{
    double *sq = st[0], *acc = st[1];
    (void)step;
    for (int i = 0; i < N; i++) {
        double d = g[i] + decay_of(c, mask, i) * w[i];
        sq[i] = c->rho * sq[i] + (1 - c->rho) * d * d;
        double delta = sqrt(acc[i] + c->eps) / sqrt(sq[i] + c->eps) * d;
        acc[i] = c->rho * acc[i] + (1 - c->rho) * delta * delta;
        w[i] -= lr * delta;
    }
}

static unsigned next(unsigned *x)
{
    *x = *x * 1103515245u + 12345u;
    return *x >> 16;
}

/* STEPS steps of optimizer `name` configured by `ini` against `ref` with `c`, from weights in
 * [-2, 2), gradients in [-1.43, 1.43) (every 11th element 1000 times smaller, so that eps
 * matters) and a learning rate lr0 that falls by a tenth a step, as a schedule would. Checks
 * n_state, the weights (max abs error <= tol) and the state arrays (max error <= tol relative to
 * the largest state value), and that the weights really moved. masked: every third element has
 * decay mask 0. OPTIM_DEBUG=1 in the environment prints every run's errors and movement. */
static void run_opt(const char *name, const char *ini, int n_state, ref_fn ref, struct ocfg c,
                    int masked, double lr0, double tol)
{
    struct glia_context *ctx;
    struct glia_optimizer *o;
    char what[256];  /* name and ini on one line, for messages */
    snprintf(what, sizeof what, "%s '%s'", name, ini);
    for (char *p = what; *p; p++)
        if (*p == '\n') *p = ' ';
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_optimizer_new(ctx, name, ini, &o);
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_STRING_EQUAL(o->type->name, name);
    CU_ASSERT_EQUAL_FATAL(o->type->n_state, n_state);
    static float w[N], g[N], mask[N], state[MAX_STATE][N];
    static double rw[N], w0[N], rstate[MAX_STATE][N];
    memset(state, 0, sizeof state);
    memset(rstate, 0, sizeof rstate);
    float *sp[MAX_STATE] = {state[0], state[1]};
    double *rsp[MAX_STATE] = {rstate[0], rstate[1]};
    unsigned x = 12345;
    for (int i = 0; i < N; i++) {
        w[i] = (float)((int)next(&x) % 2000 - 1000) / 500.0f;
        rw[i] = w0[i] = w[i];
        mask[i] = i % 3 == 0 ? 0.0f : 1.0f;
    }
    double maxerr = 0, maxserr = 0;
    for (int step = 1; step <= STEPS; step++) {
        for (int i = 0; i < N; i++) {
            g[i] = (float)((int)next(&x) % 2000 - 1000) / 700.0f;
            if (i % 11 == 0) g[i] *= 1e-3f;
        }
        double lr = lr0 * (1 - 0.1 * (step - 1));
        struct glia_opt_step s = {w, g, sp, N, masked ? mask : NULL, lr, step, NULL, NULL, NULL, 0, NULL, NULL};
        CU_ASSERT_EQUAL(o->kernel->step(o, &s), GLIA_OK);
        ref(&c, lr, rw, rsp, g, masked ? mask : NULL, step);
        for (int i = 0; i < N; i++) maxerr = fmax(maxerr, fabs(w[i] - rw[i]));
        for (int k = 0; k < n_state; k++) {
            double err = 0, scale = 0;
            for (int i = 0; i < N; i++) {
                err = fmax(err, fabs(state[k][i] - rstate[k][i]));
                scale = fmax(scale, fabs(rstate[k][i]));
            }
            maxserr = fmax(maxserr, scale > 0 ? err / scale : err);
        }
    }
    if (getenv("OPTIM_DEBUG") || !(maxerr <= tol) || !(maxserr <= tol))
        printf("\n  %s: max error %g, state %g (tolerance %g)\n", what, maxerr, maxserr, tol);
    CU_ASSERT(maxerr <= tol);
    CU_ASSERT(maxserr <= tol);
    /* the update really moved the weights, by far more than the tolerance, so the checks
     * above cannot pass vacuously */
    double moved = 0;
    for (int i = 0; i < N; i++) moved = fmax(moved, fabs(rw[i] - w0[i]));
    if (getenv("OPTIM_DEBUG") || !(moved > 100 * tol)) printf("\n  %s: weights moved %g\n", what, moved);
    CU_ASSERT(moved > 100 * tol);
    glia_optimizer_free(o);
    glia_context_free(ctx);
}

/* ---- sgd ---- */
static void run_sgd(const char *ini, struct ocfg c) { run_opt("sgd", ini, 1, ref_sgd, c, 0, 0.1, 1e-5); }

static void test_plain(void) { run_sgd("", (struct ocfg){0}); }
static void test_momentum(void) { run_sgd("[optimizer]\nmomentum = 0.9\n", (struct ocfg){.mu = 0.9}); }
static void test_dampening(void)
{
    run_sgd("[optimizer]\nmomentum = 0.8\ndampening = 0.3\n", (struct ocfg){.mu = 0.8, .damp = 0.3});
}
static void test_nesterov(void)
{
    run_sgd("[optimizer]\nmomentum = 0.9\nnesterov = on\n", (struct ocfg){.mu = 0.9, .nesterov = 1});
}
static void test_weight_decay(void)
{
    run_sgd("[optimizer]\nmomentum = 0.5\nweight_decay = 0.01\n", (struct ocfg){.mu = 0.5, .wd = 0.01});
}

static void test_decay_mask(void)
{
    struct glia_context *ctx;
    struct glia_optimizer *o;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_optimizer_new(ctx, "sgd", "[optimizer]\nweight_decay = 0.5\n", &o) == GLIA_OK);
    float w[2] = {1, 1}, g[2] = {0, 0}, buf[2] = {0}, mask[2] = {1, 0};
    float *state[1] = {buf};
    struct glia_opt_step s = {w, g, state, 2, mask, 0.1, 1, NULL, NULL, NULL, 0, NULL, NULL};
    CU_ASSERT_EQUAL(o->kernel->step(o, &s), GLIA_OK);
    CU_ASSERT_DOUBLE_EQUAL(w[0], 0.95, 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(w[1], 1.0, 1e-6);
    glia_optimizer_free(o);
    glia_context_free(ctx);
}

/* ---- adam, adamw: torch's defaults are betas (0.9, 0.999), eps 1e-8, weight_decay 0 (Adam)
 * and 0.01 (AdamW) ---- */
#define ADAM_DEFAULTS .b1 = 0.9, .b2 = 0.999, .eps = 1e-8

static void test_adam_defaults(void)
{
    run_opt("adam", "", 2, ref_adam, (struct ocfg){ADAM_DEFAULTS}, 0, 0.05, 1e-5);
}
static void test_adam_betas_eps(void)
{
    run_opt("adam", "[optimizer]\nbeta1 = 0.8\nbeta2 = 0.99\neps = 0.1\n", 2, ref_adam,
            (struct ocfg){.b1 = 0.8, .b2 = 0.99, .eps = 0.1}, 0, 0.05, 1e-5);
    run_opt("adam", "[optimizer]\nbeta1 = 0\nbeta2 = 0.5\neps = 1e-3\n", 2, ref_adam,
            (struct ocfg){.b1 = 0, .b2 = 0.5, .eps = 1e-3}, 0, 0.05, 1e-5);
}
static void test_adam_weight_decay(void)
{
    run_opt("adam", "[optimizer]\nweight_decay = 0.1\n", 2, ref_adam,
            (struct ocfg){ADAM_DEFAULTS, .wd = 0.1}, 0, 0.05, 1e-5);
    run_opt("adam", "[optimizer]\nweight_decay = 0.5\n", 2, ref_adam,
            (struct ocfg){ADAM_DEFAULTS, .wd = 0.5}, 1, 0.05, 1e-5);
}
static void test_adamw_defaults(void)
{
    run_opt("adamw", "", 2, ref_adamw, (struct ocfg){ADAM_DEFAULTS, .wd = 0.01}, 0, 0.05, 1e-5);
}
static void test_adamw_betas_eps(void)
{
    run_opt("adamw", "[optimizer]\nbeta1 = 0.5\nbeta2 = 0.9\neps = 0.01\nweight_decay = 0\n", 2,
            ref_adamw, (struct ocfg){.b1 = 0.5, .b2 = 0.9, .eps = 0.01}, 0, 0.05, 1e-5);
}
static void test_adamw_weight_decay(void)
{
    /* lr wd = 0.025 a step: decoupled decay moves w by ~0.05, L2 in g would differ */
    run_opt("adamw", "[optimizer]\nweight_decay = 0.5\n", 2, ref_adamw,
            (struct ocfg){ADAM_DEFAULTS, .wd = 0.5}, 0, 0.05, 1e-5);
    run_opt("adamw", "[optimizer]\nweight_decay = 0.5\n", 2, ref_adamw,
            (struct ocfg){ADAM_DEFAULTS, .wd = 0.5}, 1, 0.05, 1e-5);
}

/* decay mask 0 leaves a weight with zero gradient exactly where it is (decoupled decay and
 * L2 alike); mask 1 decays it */
static void test_decay_mask_adam_adadelta(void)
{
    static const char *const names[] = {"adam", "adamw", "adadelta"};
    for (int k = 0; k < 3; k++) {
        struct glia_context *ctx;
        struct glia_optimizer *o;
        CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
        CU_ASSERT_FATAL(glia_optimizer_new(ctx, names[k], "[optimizer]\nweight_decay = 0.5\n", &o) == GLIA_OK);
        float w[2] = {1, 1}, g[2] = {0, 0}, m[2] = {0}, v[2] = {0}, mask[2] = {1, 0};
        float *state[2] = {m, v};
        struct glia_opt_step s = {w, g, state, 2, mask, 0.1, 1, NULL, NULL, NULL, 0, NULL, NULL};
        CU_ASSERT_EQUAL(o->kernel->step(o, &s), GLIA_OK);
        if (!(w[0] < 1.0f) || w[1] != 1.0f) printf("\n  %s: w = %g %g\n", names[k], w[0], w[1]);
        CU_ASSERT(w[0] < 1.0f);
        CU_ASSERT_EQUAL(w[1], 1.0f);
        if (k == 1) CU_ASSERT_DOUBLE_EQUAL(w[0], 0.95, 1e-6);  /* adamw: 1 - lr wd, g = 0 */
        glia_optimizer_free(o);
        glia_context_free(ctx);
    }
}

/* ---- adadelta: torch's defaults rho 0.9, eps 1e-6, weight_decay 0, and lr 1.0 (glia takes lr
 * from [train]; the runs below pass torch's 1.0) ---- */
static void test_adadelta_defaults(void)
{
    run_opt("adadelta", "", 2, ref_adadelta, (struct ocfg){.rho = 0.9, .eps = 1e-6}, 0, 1.0, 1e-5);
}
static void test_adadelta_rho_eps(void)
{
    run_opt("adadelta", "[optimizer]\nrho = 0.5\neps = 1e-3\n", 2, ref_adadelta,
            (struct ocfg){.rho = 0.5, .eps = 1e-3}, 0, 1.0, 1e-5);
    /* the closed ends: rho 0 keeps no history, rho 1 never updates the averages (d = g) */
    run_opt("adadelta", "[optimizer]\nrho = 0\n", 2, ref_adadelta, (struct ocfg){.rho = 0, .eps = 1e-6}, 0,
            1.0, 1e-5);
    run_opt("adadelta", "[optimizer]\nrho = 1\n", 2, ref_adadelta, (struct ocfg){.rho = 1, .eps = 1e-6}, 0,
            0.1, 1e-5);
}
static void test_adadelta_weight_decay(void)
{
    run_opt("adadelta", "[optimizer]\nweight_decay = 0.1\n", 2, ref_adadelta,
            (struct ocfg){.rho = 0.9, .eps = 1e-6, .wd = 0.1}, 0, 1.0, 1e-5);
    run_opt("adadelta", "[optimizer]\nweight_decay = 0.5\n", 2, ref_adadelta,
            (struct ocfg){.rho = 0.9, .eps = 1e-6, .wd = 0.5}, 1, 1.0, 1e-5);
}

/* The schema defaults are torch's (the formula runs cannot tell eps 1e-8 from 1e-7). */
static double key_default(const struct glia_optimizer_type *ops, const char *key)
{
    for (const struct glia_key *k = ops->keys; k && k->name; k++)
        if (strcmp(k->name, key) == 0) return k->default_value ? strtod(k->default_value, NULL) : NAN;
    return NAN;
}

static void test_defaults(void)
{
    static const struct {
        const char *opt, *key;
        double want;
    } d[] = {
        {"adam", "beta1", 0.9},     {"adam", "beta2", 0.999},  {"adam", "eps", 1e-8},
        {"adam", "weight_decay", 0}, {"adamw", "beta1", 0.9},  {"adamw", "beta2", 0.999},
        {"adamw", "eps", 1e-8},     {"adamw", "weight_decay", 0.01}, {"adadelta", "rho", 0.9},
        {"adadelta", "eps", 1e-6},  {"adadelta", "weight_decay", 0}, {"lamb", "beta1", 0.9},
        {"lamb", "beta2", 0.999},   {"lamb", "eps", 1e-6},      {"lamb", "weight_decay", 0.01},
        {"lamb", "max_grad_norm", 1.0},    {"lars", "momentum", 0.9},  {"lars", "weight_decay", 0},
        {"lars", "trust_coefficient", 0.02}, {"lars", "eps", 1e-8}, {"novograd", "beta1", 0.9},
        {"novograd", "beta2", 0.999}, {"novograd", "eps", 1e-8}, {"novograd", "weight_decay", 0},
    };
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        struct glia_context *ctx;
        struct glia_optimizer *o;
        CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
        CU_ASSERT_FATAL(glia_optimizer_new(ctx, d[i].opt, NULL, &o) == GLIA_OK);
        double got = key_default(o->type, d[i].key);
        if (got != d[i].want) printf("\n  %s %s: default %g, want %g\n", d[i].opt, d[i].key, got, d[i].want);
        CU_ASSERT_EQUAL(got, d[i].want);
        CU_ASSERT_EQUAL(o->kernel->device_type, GLIA_DEVICE_CPU);
        glia_optimizer_free(o);
        glia_context_free(ctx);
    }
}

/* ---- configuration errors ---- */
static void expect_error(const char *name, const char *ini, glia_status want, const char *msg)
{
    struct glia_context *ctx;
    struct glia_optimizer *o = NULL;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_EQUAL(glia_optimizer_new(ctx, name, ini, &o), want);
    if (!strstr(glia_context_error(ctx), msg)) printf("\n  %s: got: %s\n", name, glia_context_error(ctx));
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), msg));
    CU_ASSERT_PTR_NULL(o);
    glia_context_free(ctx);
}

static void test_config_errors(void)
{
    expect_error("sgd", "[optimizer]\nnesterov = on\n", GLIA_ECONFIG,
                 "optimizer.ini:2: [optimizer] nesterov: Nesterov momentum needs momentum > 0");
    expect_error("sgd", "[optimizer]\nmomentun = 0.9\n", GLIA_ECONFIG,
                 "optimizer.ini:2: [optimizer] momentun: unknown key; did you mean 'momentum'?");
    expect_error("sgd", "[optimizer]\nmomentum = 1.5\n", GLIA_ECONFIG, "optimizer.ini:2: [optimizer] momentum:");
    expect_error("sgd", "[optimizer]\nweight_decay = lots\n", GLIA_ECONFIG,
                 "optimizer.ini:2: [optimizer] weight_decay:");
}

static void test_adam_config_errors(void)
{
    static const char *const names[] = {"adam", "adamw"};
    for (int k = 0; k < 2; k++) {
        const char *n = names[k];
        expect_error(n, "[optimizer]\nbeta1 = 1.5\n", GLIA_ECONFIG,
                     "optimizer.ini:2: [optimizer] beta1: 1.5 is out of range");
        expect_error(n, "[optimizer]\nbeta2 = -0.1\n", GLIA_ECONFIG,
                     "optimizer.ini:2: [optimizer] beta2: -0.1 is out of range");
        /* 1 passes the closed schema bounds; the plugin refuses it as torch does */
        expect_error(n, "[optimizer]\nbeta1 = 1\n", GLIA_ECONFIG,
                     "optimizer.ini:2: [optimizer] beta1: 1 is out of range [0, 1)");
        expect_error(n, "[optimizer]\nbeta1 = 0.9\nbeta2 = 1.0\n", GLIA_ECONFIG,
                     "optimizer.ini:3: [optimizer] beta2: 1 is out of range [0, 1)");
        expect_error(n, "[optimizer]\neps = 0\n", GLIA_ECONFIG, "optimizer.ini:2: [optimizer] eps: 0 is out of range");
        expect_error(n, "[optimizer]\nweight_decay = -0.01\n", GLIA_ECONFIG,
                     "optimizer.ini:2: [optimizer] weight_decay: -0.01 is out of range");
        expect_error(n, "[optimizer]\nbeta = 0.9\n", GLIA_ECONFIG, "optimizer.ini:2: [optimizer] beta: unknown key");
        expect_error(n, "[optimizer]\nbeta1 = lots\n", GLIA_ECONFIG,
                     "optimizer.ini:2: [optimizer] beta1: expected a number");
    }
}

static void test_adadelta_config_errors(void)
{
    expect_error("adadelta", "[optimizer]\nrho = 1.5\n", GLIA_ECONFIG,
                 "optimizer.ini:2: [optimizer] rho: 1.5 is out of range");
    expect_error("adadelta", "[optimizer]\nrho = -0.1\n", GLIA_ECONFIG,
                 "optimizer.ini:2: [optimizer] rho: -0.1 is out of range");
    expect_error("adadelta", "[optimizer]\neps = 0\n", GLIA_ECONFIG,
                 "optimizer.ini:2: [optimizer] eps: 0 is out of range");
    expect_error("adadelta", "[optimizer]\nweight_decay = -1\n", GLIA_ECONFIG,
                 "optimizer.ini:2: [optimizer] weight_decay: -1 is out of range");
    /* the learning rate is [train] lr, not an [optimizer] key */
    expect_error("adadelta", "[optimizer]\nlr = 1.0\n", GLIA_ECONFIG, "optimizer.ini:2: [optimizer] lr: unknown key");
    expect_error("adadelta", "[optimizer]\nrh = 0.9\n", GLIA_ECONFIG,
                 "optimizer.ini:2: [optimizer] rh: unknown key; did you mean 'rho'?");
}

/* ---- lamb: per-tensor norms over the segments of an arena ---- */

/* The arena of the lamb tests: tensors with padding between them (left as it is), one longer than a norm chunk
 * (4096), one that starts with zero weights, two without decay (mask 0), one of a single element. */
#define LN 5400
static const int64_t lamb_seg[] = {0, 100, 128, 37, 192, 5000, 5248, 20, 5376, 1};
#define LSEG 5
static bool lamb_decays(int t) { return t != 1 && t != 4; }

/* The settings of a reference run over the segments: lamb's, then lars's (wd and eps shared). */
struct lamb_ref {
    double b1, b2, eps, wd, max_norm;
    int nvlamb;
    double mu, damp, tc;  /* lars */
    int nesterov, clip;
    int averaging, bias_correction;  /* novograd (b1, b2, eps, wd above) */
};

/* One reference step over the LSEG tensors: m and v its state (lars: m the momentum buffer). */
typedef void (*seg_ref_fn)(const struct lamb_ref *c, double lr, double *w, double *m, double *v, const float *g, int step);

/* Apex FusedLAMB (multi_tensor_lamb.cu, adam_w_mode, grad averaging, bias correction) in double, from the betas as
 * the fp32 values Apex's kernel takes (1 - 0.999f is 1.3e-5 away from 0.001 relatively). */
static void ref_lamb(const struct lamb_ref *c0, double lr, double *w, double *m, double *v, const float *g, int step)
{
    static double u[LN];
    struct lamb_ref cf = *c0, *c = &cf;
    cf.b1 = (float)c0->b1, cf.b2 = (float)c0->b2;
    double gsq = 0;
    for (int t = 0; t < LSEG; t++)
        for (int64_t i = lamb_seg[2 * t]; i < lamb_seg[2 * t] + lamb_seg[2 * t + 1]; i++) gsq += (double)g[i] * g[i];
    double gn = sqrt(gsq), f = c->max_norm > 0 && gn > c->max_norm ? gn / c->max_norm : 1;
    for (int t = 0; t < LSEG; t++) {
        int64_t a = lamb_seg[2 * t], b = a + lamb_seg[2 * t + 1];
        double wd = lamb_decays(t) ? c->wd : 0, wn = 0, un = 0;
        for (int64_t i = a; i < b; i++) {
            double sg = g[i] / f;
            m[i] = c->b1 * m[i] + (1 - c->b1) * sg;
            v[i] = c->b2 * v[i] + (1 - c->b2) * sg * sg;
            u[i] = m[i] / (1 - pow(c->b1, step)) / (sqrt(v[i] / (1 - pow(c->b2, step))) + c->eps) + wd * w[i];
            wn += w[i] * w[i];
            un += u[i] * u[i];
        }
        wn = sqrt(wn), un = sqrt(un);
        double r = (c->nvlamb || wd != 0) && wn > 0 && un > 0 ? lr * wn / un : lr;
        for (int64_t i = a; i < b; i++) w[i] -= r * u[i];
    }
}

/* STEPS steps of lamb configured by ini against ref_lamb. The error allowed: 5e-6 absolute (5 fp32 ulps) on weights of up to 10
 * and 1e-6 relative on the moments, fp32 rounding of norms over up to 5000 elements and of the moments' ratio
 * (about 1e-7 relative each) grown over 6 steps, far below what any change of the rule gives (the update moves the
 * weights by more than 1e-3). The padding between the tensors stays as it is. *clipped: the gradients were scaled. */
static void run_seg(const char *name, int n_state, seg_ref_fn ref, const char *ini, struct lamb_ref c, bool *clipped)
{
    struct glia_context *ctx;
    struct glia_optimizer *o;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_optimizer_new(ctx, name, ini, &o);
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_EQUAL_FATAL(o->type->n_state, n_state);
    static float w[LN], g[LN], mask[LN], m[LN], v[LN];
    static double rw[LN], rm[LN], rv[LN], w0[LN];
    memset(m, 0, sizeof m), memset(v, 0, sizeof v), memset(rm, 0, sizeof rm), memset(rv, 0, sizeof rv);
    float *sp[MAX_STATE] = {m, v};
    unsigned x = 777;
    for (int i = 0; i < LN; i++) w[i] = 7.0f, mask[i] = 1.0f;  /* padding: 7, its gradient 0 */
    for (int t = 0; t < LSEG; t++)
        for (int64_t i = lamb_seg[2 * t]; i < lamb_seg[2 * t] + lamb_seg[2 * t + 1]; i++) {
            w[i] = t == 3 ? 0.0f : (float)((int)next(&x) % 2000 - 1000) / (t == 2 ? 100.0f : 500.0f);
            mask[i] = lamb_decays(t) ? 1.0f : 0.0f;
        }
    for (int i = 0; i < LN; i++) rw[i] = w0[i] = w[i];
    double maxerr = 0, maxserr = 0, lr0 = 0.01;
    *clipped = false;
    for (int step = 1; step <= STEPS; step++) {
        double gsq = 0;
        memset(g, 0, sizeof g);
        for (int t = 0; t < LSEG; t++)
            for (int64_t i = lamb_seg[2 * t]; i < lamb_seg[2 * t] + lamb_seg[2 * t + 1]; i++) {
                g[i] = (float)((int)next(&x) % 2000 - 1000) / 700.0f;
                if (i % 11 == 0) g[i] *= 1e-3f;
                gsq += (double)g[i] * g[i];
            }
        *clipped |= c.max_norm > 0 && sqrt(gsq) > c.max_norm;
        double lr = lr0 * (1 - 0.1 * (step - 1));
        struct glia_opt_step s = {w, g, sp, LN, mask, lr, step, NULL, NULL, NULL, LSEG, lamb_seg, NULL};
        CU_ASSERT_EQUAL(o->kernel->step(o, &s), GLIA_OK);
        ref(&c, lr, rw, rm, rv, g, step);
        double ms = 0, vs = 0, me = 0, ve = 0;
        for (int i = 0; i < LN; i++) {
            maxerr = fmax(maxerr, fabs(w[i] - rw[i]));
            me = fmax(me, fabs(m[i] - rm[i])), ms = fmax(ms, fabs(rm[i]));
            ve = fmax(ve, fabs(v[i] - rv[i])), vs = fmax(vs, fabs(rv[i]));
        }
        if (getenv("OPTIM_DEBUG")) printf("\n step %d m %g v %g", step, me / ms, ve / vs);
        maxserr = fmax(maxserr, fmax(me / ms, vs > 0 ? ve / vs : ve));
    }
    if (getenv("OPTIM_DEBUG") || !(maxerr <= 5e-6) || !(maxserr <= 1e-6))
        printf("\n  %s '%s': max error %g, state %g\n", name, ini, maxerr, maxserr);
    CU_ASSERT(maxerr <= 5e-6);
    CU_ASSERT(maxserr <= 1e-6);
    double moved = 0;
    for (int t = 0; t < LSEG; t++)
        for (int64_t i = lamb_seg[2 * t]; i < lamb_seg[2 * t] + lamb_seg[2 * t + 1]; i++) moved = fmax(moved, fabs(rw[i] - w0[i]));
    CU_ASSERT(moved > 1e-3);
    for (int i = 0; i < LN; i++)
        if (rw[i] == 7.0 && w[i] != 7.0f) {
            CU_FAIL("the optimizer changed the padding between tensors");
            break;
        }
    glia_optimizer_free(o);
    glia_context_free(ctx);
}

static void run_lamb(const char *ini, struct lamb_ref c, bool *clipped) { run_seg("lamb", 2, ref_lamb, ini, c, clipped); }

static const struct lamb_ref lamb_defaults = {.b1 = 0.9, .b2 = 0.999, .eps = 1e-6, .wd = 0.01, .max_norm = 1.0};

/* Defaults: the global norm (about 40) is above max_grad_norm 1, so the gradients are scaled. */
static void test_lamb_defaults(void)
{
    bool clipped;
    run_lamb("", lamb_defaults, &clipped);
    CU_ASSERT(clipped);
}

/* max_grad_norm above the gradients' norm, and 0 (off): the gradients as they are. */
static void test_lamb_not_clipped(void)
{
    bool clipped;
    struct lamb_ref c = lamb_defaults;
    c.max_norm = 1000;
    run_lamb("[optimizer]\nmax_grad_norm = 1000\n", c, &clipped);
    CU_ASSERT(!clipped);
    c.max_norm = 0;
    run_lamb("[optimizer]\nmax_grad_norm = 0\n", c, &clipped);
    CU_ASSERT(!clipped);
}

/* nvlamb: the trust ratio on the tensors without decay too; other betas, eps and decay. */
static void test_lamb_nvlamb(void)
{
    bool clipped;
    struct lamb_ref c = {.b1 = 0.8, .b2 = 0.99, .eps = 1e-4, .wd = 0.1, .max_norm = 5, .nvlamb = 1};
    run_lamb("[optimizer]\nnvlamb = on\nbeta1 = 0.8\nbeta2 = 0.99\neps = 1e-4\nweight_decay = 0.1\nmax_grad_norm = 5\n",
             c, &clipped);
    c.nvlamb = 0;
    run_lamb("[optimizer]\nbeta1 = 0.8\nbeta2 = 0.99\neps = 1e-4\nweight_decay = 0.1\nmax_grad_norm = 5\n", c, &clipped);
    c.wd = 0;  /* no decay anywhere: no trust ratio without nvlamb, plain Adam-style steps of lr */
    run_lamb("[optimizer]\nbeta1 = 0.8\nbeta2 = 0.99\neps = 1e-4\nweight_decay = 0\nmax_grad_norm = 5\n", c, &clipped);
}

/* A step without segments is refused with a clear error rather than run on the flat arena. */
static void test_lamb_needs_segments(void)
{
    struct glia_context *ctx;
    struct glia_optimizer *o;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_optimizer_new(ctx, "lamb", NULL, &o) == GLIA_OK);
    CU_ASSERT(o->kernel->flags & GLIA_OPT_KERNEL_SEGMENTS);
    float w[4] = {1, 2, 3, 4}, g[4] = {1, 1, 1, 1}, m[4] = {0}, v[4] = {0};
    float *sp[MAX_STATE] = {m, v};
    struct glia_opt_step s = {w, g, sp, 4, NULL, 0.1, 1, NULL, NULL, NULL, 0, NULL, NULL};
    CU_ASSERT_EQUAL(o->kernel->step(o, &s), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "no tensor segments"));
    CU_ASSERT_EQUAL(w[0], 1.0f);
    glia_optimizer_free(o);
    glia_context_free(ctx);
}

static void test_lamb_config_errors(void)
{
    expect_error("lamb", "[optimizer]\nbeta2 = 1\n", GLIA_ECONFIG, "optimizer.ini:2: [optimizer] beta2: 1 is out of range [0, 1)");
    expect_error("lamb", "[optimizer]\nmax_grad_norm = -1\n", GLIA_ECONFIG, "optimizer.ini:2: [optimizer] max_grad_norm:");
    expect_error("lamb", "[optimizer]\nnvlamb = maybe\n", GLIA_ECONFIG, "optimizer.ini:2: [optimizer] nvlamb:");
}

/* ---- lars ---- */

/* Apex LARC around torch.optim.SGD, in double: per tensor with decay and nonzero norms a = tc |w| / (|g| + wd |w| +
 * eps), clip: min(a / lr, 1), g' = (g + wd w) a; else g' = g; then SGD with momentum, no decay. */
static void ref_lars(const struct lamb_ref *c, double lr, double *w, double *buf, double *v, const float *g, int step)
{
    (void)v;
    for (int t = 0; t < LSEG; t++) {
        int64_t a0 = lamb_seg[2 * t], b = a0 + lamb_seg[2 * t + 1];
        double wn = 0, gn = 0;
        for (int64_t i = a0; i < b; i++) wn += w[i] * w[i], gn += (double)g[i] * g[i];
        wn = sqrt(wn), gn = sqrt(gn);
        bool scaled = lamb_decays(t) && wn > 0 && gn > 0;
        double a = scaled ? c->tc * wn / (gn + wn * c->wd + c->eps) : 1;
        if (scaled && c->clip) a = fmin(a / lr, 1);
        for (int64_t i = a0; i < b; i++) {
            double d = scaled ? (g[i] + c->wd * w[i]) * a : g[i];
            if (c->mu != 0) {
                buf[i] = step == 1 ? d : c->mu * buf[i] + (1 - c->damp) * d;
                d = c->nesterov ? d + c->mu * buf[i] : buf[i];
            }
            w[i] -= lr * d;
        }
    }
}

static void run_lars(const char *ini, struct lamb_ref c)
{
    bool clipped;
    run_seg("lars", 1, ref_lars, ini, c, &clipped);
}

static const struct lamb_ref lars_defaults = {.mu = 0.9, .tc = 0.02, .clip = 1, .eps = 1e-8};

/* The defaults (no decay: the trust ratio on every tensor with its mask flag), with decay, clip off (the ratios far
 * from 1), Nesterov and dampening; the zero-weight tensor keeps its plain gradient on the first step. */
static void test_lars(void)
{
    run_lars("", lars_defaults);
    struct lamb_ref c = lars_defaults;
    c.wd = 0.05;
    run_lars("[optimizer]\nweight_decay = 0.05\n", c);
    c.clip = 0;
    run_lars("[optimizer]\nweight_decay = 0.05\nclip = off\n", c);
    c.clip = 1, c.nesterov = 1, c.tc = 0.5, c.wd = 0.01;
    run_lars("[optimizer]\nweight_decay = 0.01\nnesterov = on\ntrust_coefficient = 0.5\n", c);
    c.nesterov = 0, c.damp = 0.3, c.mu = 0.5;
    run_lars("[optimizer]\nweight_decay = 0.01\ntrust_coefficient = 0.5\nmomentum = 0.5\ndampening = 0.3\n", c);
}

static void test_lars_config_errors(void)
{
    expect_error("lars", "[optimizer]\nnesterov = on\ndampening = 0.1\n", GLIA_ECONFIG,
                 "optimizer.ini:2: [optimizer] nesterov: Nesterov momentum needs momentum > 0");
    expect_error("lars", "[optimizer]\ntrust_coefficient = 0\n", GLIA_ECONFIG, "optimizer.ini:2: [optimizer] trust_coefficient:");
}

/* ---- novograd ---- */

/* Apex FusedNovoGrad (moment mode 1: reg_inside_moment off) in double from fp32 betas, as its kernel takes them; n of
 * each tensor kept in v at the tensor's offset, as glia keeps it. */
static void ref_novograd(const struct lamb_ref *c, double lr, double *w, double *m, double *v, const float *g, int step)
{
    double b1 = (float)c->b1, b2 = (float)c->b2, b3 = c->averaging ? 1 - b1 : 1;
    double bc1 = c->bias_correction ? 1 - pow(b1, step) : 1, bc2 = c->bias_correction ? sqrt(1 - pow(b2, step)) : 1;
    for (int t = 0; t < LSEG; t++) {
        int64_t a = lamb_seg[2 * t], b = a + lamb_seg[2 * t + 1];
        double sq = 0, wd = lamb_decays(t) ? c->wd : 0;
        for (int64_t i = a; i < b; i++) sq += (double)g[i] * g[i];
        double n = step == 1 ? sqrt(sq) : v[a];
        n = v[a] = sqrt(b2 * n * n + (1 - b2) * sq);
        for (int64_t i = a; i < b; i++) {
            m[i] = b1 * m[i] + b3 * g[i];
            w[i] -= lr * (m[i] / bc1 / (n / bc2 + c->eps) + wd * w[i]);
        }
    }
}

static void run_novograd(const char *ini, struct lamb_ref c)
{
    bool clipped;
    run_seg("novograd", 2, ref_novograd, ini, c, &clipped);
}

static const struct lamb_ref novograd_defaults = {.b1 = 0.9, .b2 = 0.999, .eps = 1e-8, .averaging = 1,
                                                  .bias_correction = 1};

/* The defaults, Jasper's betas with decay, grad averaging and bias correction off. */
static void test_novograd(void)
{
    run_novograd("", novograd_defaults);
    struct lamb_ref c = novograd_defaults;
    c.b1 = 0.95, c.b2 = 0.98, c.wd = 0.001;
    run_novograd("[optimizer]\nbeta1 = 0.95\nbeta2 = 0.98\nweight_decay = 0.001\n", c);
    c.averaging = 0, c.bias_correction = 0, c.eps = 1e-3;
    run_novograd("[optimizer]\nbeta1 = 0.95\nbeta2 = 0.98\nweight_decay = 0.001\ngrad_averaging = off\n"
                 "bias_correction = off\neps = 1e-3\n", c);
}

GLIA_TEST_MAIN("optim", GLIA_TEST(test_plain), GLIA_TEST(test_momentum), GLIA_TEST(test_dampening),
               GLIA_TEST(test_nesterov), GLIA_TEST(test_weight_decay), GLIA_TEST(test_decay_mask),
               GLIA_TEST(test_config_errors), GLIA_TEST(test_adam_defaults), GLIA_TEST(test_adam_betas_eps),
               GLIA_TEST(test_adam_weight_decay), GLIA_TEST(test_adamw_defaults),
               GLIA_TEST(test_adamw_betas_eps), GLIA_TEST(test_adamw_weight_decay),
               GLIA_TEST(test_decay_mask_adam_adadelta), GLIA_TEST(test_adadelta_defaults),
               GLIA_TEST(test_adadelta_rho_eps), GLIA_TEST(test_adadelta_weight_decay),
               GLIA_TEST(test_defaults), GLIA_TEST(test_adam_config_errors),
               GLIA_TEST(test_adadelta_config_errors), GLIA_TEST(test_lamb_defaults),
               GLIA_TEST(test_lamb_not_clipped), GLIA_TEST(test_lamb_nvlamb), GLIA_TEST(test_lamb_needs_segments),
               GLIA_TEST(test_lamb_config_errors), GLIA_TEST(test_lars), GLIA_TEST(test_lars_config_errors),
               GLIA_TEST(test_novograd))
