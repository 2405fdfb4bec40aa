/* tests/test_bn.c — the batchnorm layer (BatchNorm1d on (N, C), BatchNorm2d on (N, C, H, W)):
 * gradient checks, forward, backward and running statistics against a naive double reference
 * written here, eval with and without running statistics, configuration errors; channels_last
 * (NHWC) tensors against contiguous ones, for batchnorm and for global_avgpool. Not training. */
#include <math.h>
#include <string.h>
#include "layerutil.h"

static struct glia_context *ctx;


/* ---- gradient checks ---- */

static void check_ok(const char *ini, struct glia_shape in, uint64_t seed)
{
    struct glia_gradcheck_report r;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_layer_gradcheck(ctx, ini, &in, 1, seed, 2e-2, &r);
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(r.n_checked > 0);
    CU_ASSERT(r.n_skipped * 10 <= r.n_checked);  /* smooth: no kinks */
    glia_context_free(ctx);
}

static void test_gradcheck_1d(void)
{
    check_ok("[b]\ntype = batchnorm\n", S(2, 4, 3, 0, 0), 1);
    check_ok("[b]\ntype = batchnorm\n", S(2, 7, 5, 0, 0), 2);
    check_ok("[b]\ntype = batchnorm\n", S(2, 2, 4, 0, 0), 3);  /* two values per channel */
    check_ok("[b]\ntype = batchnorm\naffine = off\n", S(2, 4, 3, 0, 0), 4);
    check_ok("[b]\ntype = batchnorm\nmomentum = 0\n", S(2, 5, 3, 0, 0), 5);
    check_ok("[b]\ntype = batchnorm\nmomentum = 1\neps = 1e-3\n", S(2, 6, 2, 0, 0), 6);
    check_ok("[b]\ntype = batchnorm\ntrack_running_stats = off\n", S(2, 4, 3, 0, 0), 7);
}

static void test_gradcheck_2d(void)
{
    check_ok("[b]\ntype = batchnorm\n", S(4, 2, 3, 4, 5), 11);
    check_ok("[b]\ntype = batchnorm\n", S(4, 3, 2, 3, 3), 12);
    check_ok("[b]\ntype = batchnorm\n", S(4, 1, 3, 2, 1), 13);  /* batch of one: H*W values per channel */
    check_ok("[b]\ntype = batchnorm\naffine = off\n", S(4, 2, 3, 4, 5), 14);
    check_ok("[b]\ntype = batchnorm\nmomentum = 0.5\n", S(4, 3, 2, 3, 3), 15);
    check_ok("[b]\ntype = batchnorm\naffine = off\ntrack_running_stats = off\n", S(4, 2, 2, 3, 2), 16);
}

/* ---- values: the layer alone on the CPU backend against a naive double reference ---- */


static uint32_t lcg(uint32_t *st)
{
    *st = *st * 1103515245u + 12345u;
    return *st >> 8;
}

static double unit(uint32_t *st) { return (double)(lcg(st) % 20001) / 10000.0 - 1.0; } /* [-1, 1] */

/* The layer of `ini` for input shape `in`, its buffers at their declared init, weight and bias
 * at seeded values away from their init (so that gamma and beta matter) unless by_init. */
static void build(const char *ini, const struct glia_shape *in, bool by_init, uint32_t seed, struct built *B)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, ini, in, 1, B);
    for (int i = 0; i < B->l.n_params && !by_init; i++) {
        float *v = glia_tensor_f32(B->l.params[i].value);
        for (int64_t j = 0; j < glia_tensor_numel(B->l.params[i].value); j++)
            v[j] = (float)(i == 0 ? 1.0 + 0.5 * unit(&seed) : 0.5 * unit(&seed));
    }
}

static void unbuild(struct built *B)
{
    layer_unbuild(B);
    glia_context_free(ctx);
}



/* The reference: per channel c, over the M = N*HW values x[n][c][i]. */
struct ref {
    int64_t N, C, HW;
    double eps, momentum;
    double *rmean, *rvar;  /* running statistics (C), PyTorch's update */
};

/* Batch mean and biased variance of channel c. */
static void ref_stats(const struct ref *r, const float *x, int64_t c, double *mean, double *var)
{
    double s = 0, q = 0, M = (double)(r->N * r->HW);
    for (int64_t n = 0; n < r->N; n++)
        for (int64_t i = 0; i < r->HW; i++) s += x[(n * r->C + c) * r->HW + i];
    *mean = s / M;
    for (int64_t n = 0; n < r->N; n++)
        for (int64_t i = 0; i < r->HW; i++) {
            double d = x[(n * r->C + c) * r->HW + i] - *mean;
            q += d * d;
        }
    *var = q / M;
}

/* y = (x - mean)/sqrt(var + eps)*gamma + beta with the batch's statistics (running: the running
 * ones); a training forward (update) moves the running statistics toward the batch mean and the
 * unbiased batch variance. gamma/beta NULL: 1 and 0. */
static void ref_forward(struct ref *r, const float *x, const float *gamma, const float *beta, bool running,
                        bool update, double *y)
{
    double M = (double)(r->N * r->HW);
    for (int64_t c = 0; c < r->C; c++) {
        double mean, var;
        ref_stats(r, x, c, &mean, &var);
        if (update) {
            r->rmean[c] = (1 - r->momentum) * r->rmean[c] + r->momentum * mean;
            r->rvar[c] = (1 - r->momentum) * r->rvar[c] + r->momentum * var * M / (M - 1);
        }
        if (running) {
            mean = r->rmean[c];
            var = r->rvar[c];
        }
        for (int64_t n = 0; n < r->N; n++)
            for (int64_t i = 0; i < r->HW; i++) {
                int64_t k = (n * r->C + c) * r->HW + i;
                y[k] = (x[k] - mean) / sqrt(var + r->eps) * (gamma ? gamma[c] : 1.0) + (beta ? beta[c] : 0.0);
            }
    }
}

/* Gradients of a training forward: x_hat = (x - mean)/sigma, dgamma = sum(dy*x_hat), dbeta = sum(dy),
 * dx = gamma/sigma * (dy - mean(dy) - x_hat*mean(dy*x_hat)). */
static void ref_backward(const struct ref *r, const float *x, const float *dy, const float *gamma, double *dx,
                         double *dgamma, double *dbeta)
{
    double M = (double)(r->N * r->HW);
    for (int64_t c = 0; c < r->C; c++) {
        double mean, var, sd = 0, sdx = 0;
        ref_stats(r, x, c, &mean, &var);
        double sigma = sqrt(var + r->eps);
        for (int64_t n = 0; n < r->N; n++)
            for (int64_t i = 0; i < r->HW; i++) {
                int64_t k = (n * r->C + c) * r->HW + i;
                sd += dy[k];
                sdx += dy[k] * (x[k] - mean) / sigma;
            }
        dgamma[c] = sdx;
        dbeta[c] = sd;
        for (int64_t n = 0; n < r->N; n++)
            for (int64_t i = 0; i < r->HW; i++) {
                int64_t k = (n * r->C + c) * r->HW + i;
                double xh = (x[k] - mean) / sigma;
                dx[k] = (gamma ? gamma[c] : 1.0) / sigma * (dy[k] - sd / M - xh * sdx / M);
            }
    }
}

static bool close_tol(double got, double want, double tol)
{
    return isfinite(got) && fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

/* Counts (and prints the first few) elements of got that are not close to want + base. */
static int compare(const char *what, const float *got, const double *want, double base, int64_t n, double tol)
{
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!close_tol(got[i], want[i] + base, tol) && bad++ < 3)
            printf("\n  %s[%lld] = %.9g, want %.9g", what, (long long)i, got[i], want[i] + base);
    return bad;
}

/* Seeded input with a different mean and spread per channel. */
static void fill_input(struct glia_tensor *t, int64_t C, int64_t HW, uint32_t *seed)
{
    float *d = glia_tensor_f32(t);
    for (int64_t k = 0; k < glia_tensor_numel(t); k++) {
        int64_t c = (k / HW) % C;
        d[k] = (float)(1.5 * (double)c - 1.0 + (1.0 + 0.5 * (double)c) * unit(seed));
    }
}

static struct glia_param *find(struct glia_param *arr, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(arr[i].name, name)) return &arr[i];
    return NULL;
}

/* For the layer of `ini` (with its momentum, eps, affine and track_running_stats as given here) on
 * shape sh: three training forwards (output and running statistics after the first and the third
 * against the reference), backward after the third (write over NaN garbage, accumulate, NULL din),
 * then eval forwards on a fresh input (running statistics or batch statistics), which must change
 * nothing and keep nothing. */
static void check_values(const char *ini, struct glia_shape sh, double momentum, double eps, bool affine, bool track,
                         uint32_t seed)
{
    struct built B;
    build(ini, &sh, false, seed, &B);
    int64_t N = sh.dim[0], C = sh.dim[1], HW = sh.ndim == 4 ? sh.dim[2] * sh.dim[3] : 1, n = N * C * HW;
    CU_ASSERT_EQUAL_FATAL(B.l.n_params, affine ? 2 : 0);
    CU_ASSERT_EQUAL_FATAL(B.l.n_buffers, track ? 2 : 0);
    struct glia_param *pw = find(B.l.params, B.l.n_params, "weight"), *pb = find(B.l.params, B.l.n_params, "bias");
    struct glia_param *prm = find(B.l.buffers, B.l.n_buffers, "running_mean");
    struct glia_param *prv = find(B.l.buffers, B.l.n_buffers, "running_var");
    if (affine) CU_ASSERT_FATAL(pw && pb);
    if (track) CU_ASSERT_FATAL(prm && prv);
    struct glia_shape os;
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &sh, 1, &os) == GLIA_OK);
    CU_ASSERT_FATAL(glia_shape_equal(&os, &sh));
    CU_ASSERT_PTR_NOT_NULL(B.type->flops);
    if (B.type->flops) CU_ASSERT(B.type->flops(&B.l, &sh, 1) > 0);

    struct glia_tensor *x[4], *y, *dy, *dx;
    for (int k = 0; k < 4; k++) {
        CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &x[k]) == GLIA_OK);
        fill_input(x[k], C, HW, &seed);
    }
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &y) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &dy) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &dx) == GLIA_OK);
    float *dyd = glia_tensor_f32(dy), *dxd = glia_tensor_f32(dx);
    for (int64_t i = 0; i < n; i++) dyd[i] = (float)unit(&seed);
    const float *gamma = pw ? glia_tensor_f32(pw->value) : NULL, *beta = pb ? glia_tensor_f32(pb->value) : NULL;

    double *ry = malloc((size_t)n * sizeof *ry), *rdx = malloc((size_t)n * sizeof *rdx);
    double *rm = calloc((size_t)C, sizeof *rm), *rv = malloc((size_t)C * sizeof *rv);
    double *rdg = malloc((size_t)C * sizeof *rdg), *rdb = malloc((size_t)C * sizeof *rdb);
    for (int64_t c = 0; c < C; c++) rv[c] = 1.0;
    struct ref r = {N, C, HW, eps, momentum, rm, rv};
    char what[160];

    /* three training forwards */
    const struct glia_tensor *in[1] = {NULL};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    for (int step = 0; step < 3; step++) {
        in[0] = x[step];
        ref_forward(&r, glia_tensor_f32(x[step]), gamma, beta, false, true, ry);
        CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
        snprintf(what, sizeof what, "%s step %d y", ini, step + 1);
        CU_ASSERT_EQUAL(compare(what, glia_tensor_f32(y), ry, 0, n, 2e-5), 0);
        if (track && step != 1) {
            snprintf(what, sizeof what, "%s step %d running_mean", ini, step + 1);
            CU_ASSERT_EQUAL(compare(what, glia_tensor_f32(prm->value), rm, 0, C, 1e-5), 0);
            snprintf(what, sizeof what, "%s step %d running_var", ini, step + 1);
            CU_ASSERT_EQUAL(compare(what, glia_tensor_f32(prv->value), rv, 0, C, 1e-5), 0);
        }
    }

    /* backward of the third: write over NaN garbage, then accumulate over 0.5 */
    ref_backward(&r, glia_tensor_f32(x[2]), dyd, gamma, rdx, rdg, rdb);
    struct glia_tensor *din[1] = {dx};
    bool acc[1] = {false};
    struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    for (int64_t i = 0; i < n; i++) dxd[i] = NAN;
    for (int i = 0; i < B.l.n_params; i++) {
        float *g = glia_tensor_f32(B.l.params[i].grad);
        for (int64_t c = 0; c < C; c++) g[c] = NAN;
        B.l.params[i].grad_unset = true;
    }
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_OK);
    for (int pass = 0; pass < 2; pass++) {
        double base = pass ? 0.5 : 0.0;
        const char *mode = pass ? "accumulate" : "write";
        snprintf(what, sizeof what, "%s dx (%s)", ini, mode);
        CU_ASSERT_EQUAL(compare(what, dxd, rdx, base, n, 1e-4), 0);
        if (affine) {
            snprintf(what, sizeof what, "%s dweight (%s)", ini, mode);
            CU_ASSERT_EQUAL(compare(what, glia_tensor_f32(pw->grad), rdg, base, C, 1e-4), 0);
            snprintf(what, sizeof what, "%s dbias (%s)", ini, mode);
            CU_ASSERT_EQUAL(compare(what, glia_tensor_f32(pb->grad), rdb, base, C, 1e-4), 0);
        }
        if (pass) break;
        acc[0] = true;
        for (int64_t i = 0; i < n; i++) dxd[i] = 0.5f;
        for (int i = 0; i < B.l.n_params; i++) {
            float *g = glia_tensor_f32(B.l.params[i].grad);
            for (int64_t c = 0; c < C; c++) g[c] = 0.5f;
            B.l.params[i].grad_unset = false;
        }
        CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_OK);
    }
    /* an input that needs no gradient: skipped, parameter gradients still come */
    din[0] = NULL;
    for (int i = 0; i < B.l.n_params; i++) B.l.params[i].grad_unset = true;
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_OK);
    if (affine) {
        snprintf(what, sizeof what, "%s dweight (no din)", ini);
        CU_ASSERT_EQUAL(compare(what, glia_tensor_f32(pw->grad), rdg, 0, C, 1e-4), 0);
    }
    din[0] = dx;

    /* eval on a fresh input: running statistics (or the batch's without them); nothing changes */
    float *snap_m = malloc((size_t)C * sizeof *snap_m), *snap_v = malloc((size_t)C * sizeof *snap_v);
    if (track) {
        memcpy(snap_m, glia_tensor_f32(prm->value), (size_t)C * sizeof *snap_m);
        memcpy(snap_v, glia_tensor_f32(prv->value), (size_t)C * sizeof *snap_v);
    }
    in[0] = x[3];
    fa.train = false;
    ref_forward(&r, glia_tensor_f32(x[3]), gamma, beta, track, false, ry);
    for (int rep = 0; rep < 2; rep++) {
        CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
        snprintf(what, sizeof what, "%s eval %d y", ini, rep + 1);
        CU_ASSERT_EQUAL(compare(what, glia_tensor_f32(y), ry, 0, n, 2e-5), 0);
        if (track) {
            CU_ASSERT_EQUAL(memcmp(snap_m, glia_tensor_f32(prm->value), (size_t)C * sizeof *snap_m), 0);
            CU_ASSERT_EQUAL(memcmp(snap_v, glia_tensor_f32(prv->value), (size_t)C * sizeof *snap_v), 0);
        }
    }
    /* eval kept nothing: backward is refused */
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "batchnorm backward needs a training forward"));

    free(snap_m);
    free(snap_v);
    free(ry);
    free(rdx);
    free(rm);
    free(rv);
    free(rdg);
    free(rdb);
    for (int k = 0; k < 4; k++) glia_tensor_release(x[k]);
    glia_tensor_release(y);
    glia_tensor_release(dy);
    glia_tensor_release(dx);
    unbuild(&B);
}

static void test_values_1d(void)
{
    check_values("[b]\ntype = batchnorm\n", S(2, 4, 3, 0, 0), 0.1, 1e-5, true, true, 1);
    check_values("[b]\ntype = batchnorm\nmomentum = 0.3\n", S(2, 7, 5, 0, 0), 0.3, 1e-5, true, true, 2);
    check_values("[b]\ntype = batchnorm\nmomentum = 1\neps = 0.01\n", S(2, 2, 3, 0, 0), 1.0, 0.01, true, true, 3);
    check_values("[b]\ntype = batchnorm\nmomentum = 0\n", S(2, 5, 2, 0, 0), 0.0, 1e-5, true, true, 4);
    check_values("[b]\ntype = batchnorm\naffine = off\n", S(2, 6, 4, 0, 0), 0.1, 1e-5, false, true, 5);
    check_values("[b]\ntype = batchnorm\ntrack_running_stats = off\n", S(2, 6, 3, 0, 0), 0.1, 1e-5, true, false, 6);
    check_values("[b]\ntype = batchnorm\nmomentum = 0.2\n", S(2, 64, 33, 0, 0), 0.2, 1e-5, true, true, 7);
}

static void test_values_2d(void)
{
    check_values("[b]\ntype = batchnorm\n", S(4, 2, 3, 4, 5), 0.1, 1e-5, true, true, 11);
    check_values("[b]\ntype = batchnorm\nmomentum = 0.3\n", S(4, 3, 2, 3, 3), 0.3, 1e-5, true, true, 12);
    check_values("[b]\ntype = batchnorm\n", S(4, 1, 3, 2, 2), 0.1, 1e-5, true, true, 13);
    check_values("[b]\ntype = batchnorm\naffine = off\neps = 0.1\n", S(4, 3, 4, 2, 3), 0.1, 0.1, false, true, 14);
    check_values("[b]\ntype = batchnorm\ntrack_running_stats = off\n", S(4, 2, 3, 3, 4), 0.1, 1e-5, true, false, 15);
    check_values("[b]\ntype = batchnorm\naffine = off\ntrack_running_stats = off\n", S(4, 3, 2, 2, 5), 0.1, 1e-5,
                 false, false, 16);
    check_values("[b]\ntype = batchnorm\nmomentum = 0.05\n", S(4, 8, 16, 7, 9), 0.05, 1e-5, true, true, 17);
}

/* Declared parameters and buffers: names, shapes, inits (PyTorch's). */
static void test_declarations(void)
{
    struct built B;
    struct glia_shape sh = S(4, 2, 5, 3, 3);
    build("[b]\ntype = batchnorm\n", &sh, true, 1, &B);
    CU_ASSERT(B.type->flags & GLIA_TYPE_NORMALIZATION);  /* the drop_bias_before_norm pass looks for it */
    CU_ASSERT(!(B.type->flags & GLIA_TYPE_LOSS));
    CU_ASSERT_EQUAL_FATAL(B.l.n_params, 2);
    CU_ASSERT_EQUAL_FATAL(B.l.n_buffers, 2);
    const char *names[4] = {"weight", "bias", "running_mean", "running_var"};
    struct glia_param *e[4] = {&B.l.params[0], &B.l.params[1], &B.l.buffers[0], &B.l.buffers[1]};
    enum glia_init_kind kinds[4] = {GLIA_INIT_CONST, GLIA_INIT_ZEROS, GLIA_INIT_ZEROS, GLIA_INIT_CONST};
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_STRING_EQUAL(e[i]->name, names[i]);
        CU_ASSERT(e[i]->shape.ndim == 1 && e[i]->shape.dim[0] == 5);
        CU_ASSERT_EQUAL(e[i]->init.kind, kinds[i]);
        if (kinds[i] == GLIA_INIT_CONST) CU_ASSERT_DOUBLE_EQUAL(e[i]->init.a, 1.0, 0);
    }
    /* another channel count is refused by shape inference; another batch or plane is not */
    struct glia_shape os, s2 = S(4, 7, 5, 1, 2), s3 = S(4, 2, 4, 3, 3), s4 = S(3, 2, 5, 3, 0);
    CU_ASSERT_EQUAL(B.type->infer_shape(&B.l, &s2, 1, &os), GLIA_OK);
    CU_ASSERT(glia_shape_equal(&os, &s2));
    CU_ASSERT_EQUAL(B.type->infer_shape(&B.l, &s3, 1, &os), GLIA_ESHAPE);
    CU_ASSERT_EQUAL(B.type->infer_shape(&B.l, &s4, 1, &os), GLIA_ESHAPE);
    unbuild(&B);
}

/* PyTorch: BatchNorm1d(1) on x = (1, 2, 3, 4)ᵀ gives (x - 2.5)/sqrt(1.25 + 1e-5), running_mean 0.25,
 * running_var 0.9 + 0.1*5/3; eval of the same x uses those. Weight and bias at their init. */
static void test_hand_computed(void)
{
    struct built B;
    struct glia_shape sh = S(2, 4, 1, 0, 0);
    build("[b]\ntype = batchnorm\n", &sh, true, 1, &B);
    struct glia_tensor *x, *y;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &y) == GLIA_OK);
    for (int i = 0; i < 4; i++) glia_tensor_f32(x)[i] = (float)(i + 1);
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
    for (int i = 0; i < 4; i++) CU_ASSERT_DOUBLE_EQUAL(glia_tensor_f32(y)[i], (i + 1 - 2.5) / sqrt(1.25 + 1e-5), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(glia_tensor_f32(B.l.buffers[0].value)[0], 0.25, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(glia_tensor_f32(B.l.buffers[1].value)[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-6);
    /* the same forward run again in backward (checkpoint_segments): the same output, the statistics moved once */
    float y1[4], rm = glia_tensor_f32(B.l.buffers[0].value)[0], rv = glia_tensor_f32(B.l.buffers[1].value)[0];
    memcpy(y1, glia_tensor_f32(y), sizeof y1);
    memset(glia_tensor_f32(y), 0, sizeof y1);
    fa.recompute = true;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(y1, glia_tensor_f32(y), sizeof y1), 0);
    CU_ASSERT(glia_tensor_f32(B.l.buffers[0].value)[0] == rm && glia_tensor_f32(B.l.buffers[1].value)[0] == rv);
    fa.recompute = false;
    fa.train = false;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
    double sd = sqrt(0.9 + 0.1 * 5.0 / 3.0 + 1e-5);
    for (int i = 0; i < 4; i++) CU_ASSERT_DOUBLE_EQUAL(glia_tensor_f32(y)[i], (i + 1 - 0.25) / sd, 1e-6);
    glia_tensor_release(x);
    glia_tensor_release(y);
    unbuild(&B);
}

/* One value per channel in training (PyTorch raises); eval of the same batch is fine. */
static void test_single_value_per_channel(void)
{
    struct built B;
    struct glia_shape sh = S(2, 1, 3, 0, 0);
    build("[b]\ntype = batchnorm\n", &sh, true, 1, &B);
    struct glia_tensor *x, *y;
    CU_ASSERT_FATAL(glia_tensor_zeros(B.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_zeros(B.b, GLIA_F32, &sh, &y) == GLIA_OK);
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_ESHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "[b] batchnorm needs more than 1 value per channel in training, got input 1x3"));
    CU_ASSERT_DOUBLE_EQUAL(glia_tensor_f32(B.l.buffers[0].value)[0], 0.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(glia_tensor_f32(B.l.buffers[1].value)[0], 1.0, 0);
    fa.train = false;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
    glia_tensor_release(x);
    glia_tensor_release(y);
    unbuild(&B);
}

/* ---- channels_last (NHWC): the same layer on the same logical values in both formats ---- */

static void nhwc_check(const char *ini, struct glia_shape in, uint64_t seed)
{
    gradcheck_nhwc(ini, &in, 1, seed, 2e-2);
}

static void test_gradcheck_2d_nhwc(void)
{
    nhwc_check("[b]\ntype = batchnorm\n", S(4, 2, 3, 4, 5), 21);
    nhwc_check("[b]\ntype = batchnorm\n", S(4, 3, 2, 3, 3), 22);
    nhwc_check("[b]\ntype = batchnorm\naffine = off\n", S(4, 2, 3, 4, 5), 23);
    nhwc_check("[b]\ntype = batchnorm\nmomentum = 0.5\n", S(4, 1, 3, 2, 3), 24);   /* batch of one */
    nhwc_check("[b]\ntype = batchnorm\n", S(4, 5, 3, 1, 1), 25);                    /* H*W = 1 */
    nhwc_check("[b]\ntype = batchnorm\naffine = off\n", S(4, 6, 2, 1, 1), 26);
    nhwc_check("[b]\ntype = batchnorm\n", S(4, 3, 1, 2, 3), 27);                    /* C = 1 */
    nhwc_check("[b]\ntype = batchnorm\naffine = off\n", S(4, 2, 1, 3, 2), 28);
    nhwc_check("[b]\ntype = batchnorm\ntrack_running_stats = off\n", S(4, 2, 4, 2, 3), 29);
}

static void test_global_avgpool_nhwc_gradcheck(void)
{
    nhwc_check("[g]\ntype = global_avgpool\n", S(4, 2, 3, 4, 5), 31);
    nhwc_check("[g]\ntype = global_avgpool\n", S(4, 3, 5, 3, 1), 32);
    nhwc_check("[g]\ntype = global_avgpool\n", S(4, 2, 4, 1, 1), 33);   /* H*W = 1 */
    nhwc_check("[g]\ntype = global_avgpool\n", S(4, 3, 1, 2, 3), 34);   /* C = 1 */
    nhwc_check("[g]\ntype = global_avgpool\n", S(4, 1, 70, 2, 2), 35);  /* more than one block of 64 channels */
}

/* format_diff over both accumulate modes for each (ini, shape). */
static void diff_both(const char *ini, struct glia_shape in, uint64_t seed)
{
    for (int acc = 0; acc < 2; acc++) {
        double d = format_diff(ini, &in, 1, acc, seed);
        char buf[64];
        if (!(d < 1e-5))
            printf("\n  %s %s accumulate %d: NCHW and NHWC differ by %g\n", ini, glia_shape_str(&in, buf, sizeof buf),
                   acc, d);
        CU_ASSERT(d < 1e-5);
    }
}

static void test_format_diff_nhwc(void)
{
    diff_both("[b]\ntype = batchnorm\n", S(4, 2, 3, 4, 5), 41);
    diff_both("[b]\ntype = batchnorm\naffine = off\n", S(4, 3, 4, 2, 3), 42);
    diff_both("[b]\ntype = batchnorm\n", S(4, 4, 7, 1, 1), 43);                       /* H*W = 1 */
    diff_both("[b]\ntype = batchnorm\n", S(4, 3, 1, 3, 4), 44);                       /* C = 1 */
    diff_both("[b]\ntype = batchnorm\ntrack_running_stats = off\n", S(4, 2, 5, 3, 3), 45);
    diff_both("[b]\ntype = batchnorm\nmomentum = 0.3\n", S(4, 8, 130, 7, 9), 46);    /* 504 rows: 32 blocks */
    diff_both("[b]\ntype = batchnorm\n", S(4, 5, 24, 17, 19), 47);                    /* 1615 rows: 64 blocks */
    diff_both("[b]\ntype = batchnorm\n", S(4, 1, 3, 3, 5), 48);                       /* 15 rows: one block */
}

static void test_global_avgpool_nhwc_format_diff(void)
{
    diff_both("[g]\ntype = global_avgpool\n", S(4, 2, 3, 4, 5), 51);
    diff_both("[g]\ntype = global_avgpool\n", S(4, 3, 1, 4, 4), 52);    /* C = 1 */
    diff_both("[g]\ntype = global_avgpool\n", S(4, 3, 9, 1, 1), 53);    /* H*W = 1 */
    diff_both("[g]\ntype = global_avgpool\n", S(4, 3, 130, 5, 6), 54); /* three blocks of channels, the last short */
    diff_both("[g]\ntype = global_avgpool\n", S(4, 1, 64, 7, 7), 55);
}

/* global_avgpool on channels_last input against a double reference read through the strides;
 * the gradient written over NaN, then accumulated onto itself. */
static void test_global_avgpool_nhwc_values(void)
{
    struct glia_shape sh = S(4, 3, 70, 3, 5);
    int64_t N = 3, C = 70, HW = 15;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct built B;
    layer_build(ctx, "[g]\ntype = global_avgpool\n", &sh, 1, &B);
    struct glia_shape os = S(2, N, C, 0, 0);
    struct glia_tensor *x = tensor_as(B.b, sh, GLIA_CHANNELS_LAST), *dx = tensor_as(B.b, sh, GLIA_CHANNELS_LAST);
    struct glia_tensor *y = tensor_as(B.b, os, GLIA_CONTIGUOUS), *dy = tensor_as(B.b, os, GLIA_CONTIGUOUS);
    CU_ASSERT_EQUAL(glia_tensor_memory_format(x), GLIA_CHANNELS_LAST);
    uint32_t seed = 7;
    float *xd = glia_tensor_f32(x), *dxd = glia_tensor_f32(dx), *yd = glia_tensor_f32(y), *dyd = glia_tensor_f32(dy);
    for (int64_t i = 0; i < N * C * HW; i++) xd[i] = (float)unit(&seed), dxd[i] = NAN;
    for (int64_t i = 0; i < N * C; i++) dyd[i] = (float)unit(&seed);
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
    int bad = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t h = 0; h < 3; h++)
                for (int64_t w = 0; w < 5; w++) s += at4(x, n, c, h, w);
            bad += !(fabs(yd[n * C + c] - s / HW) <= 1e-6);
        }
    CU_ASSERT_EQUAL(bad, 0);
    struct glia_tensor *din[1] = {dx};
    bool acc[1] = {false};
    struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    for (int pass = 0; pass < 2; pass++) {
        CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_OK);
        bad = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = 0; c < C; c++)
                for (int64_t h = 0; h < 3; h++)
                    for (int64_t w = 0; w < 5; w++)
                        bad += !(fabs(at4(dx, n, c, h, w) - (pass + 1) * dyd[n * C + c] / HW) <= 1e-6);
        CU_ASSERT_EQUAL(bad, 0);
        acc[0] = true;
    }
    glia_tensor_release(x);
    glia_tensor_release(dx);
    glia_tensor_release(y);
    glia_tensor_release(dy);
    unbuild(&B);
}

/* A tensor in format f holding the logical values of the contiguous src. */
static struct glia_tensor *as_format(struct glia_backend *b, const struct glia_tensor *src, enum glia_memory_format f)
{
    struct glia_tensor *t = tensor_as(b, src->shape, f);
    CU_ASSERT_FATAL(glia_tensor_convert(t, src, false) == GLIA_OK);
    return t;
}

/* Inputs with a large mean and a small spread (channel means 100, -37.5 and 1000, spread 1e-3), where the
 * float nearest the mean is off by up to 3.8e-6 (3e-5 at 1000), a large part of a std: the outputs must
 * still be the double formula's within 1e-5 (training, then eval on the running statistics of momentum 1
 * or, without them, on the batch's; with and without activation = relu; either memory format). Normalizing by the float mean
 * alone was off by up to 0.05 here (the channel of mean 1000). */
static void large_mean_case(const char *ini, struct glia_shape sh, enum glia_memory_format f, double eps, bool track,
                            bool relu, uint32_t seed)
{
    struct built B;
    build(ini, &sh, false, seed, &B);
    int64_t N = sh.dim[0], C = sh.dim[1], HW = sh.ndim == 4 ? sh.dim[2] * sh.dim[3] : 1, n = N * C * HW;
    static const double means[3] = {100.0, -37.5, 1000.0};
    struct glia_tensor *xc = tensor_as(B.b, sh, GLIA_CONTIGUOUS), *yc = tensor_as(B.b, sh, GLIA_CONTIGUOUS);
    float *v = glia_tensor_f32(xc);
    for (int64_t k = 0; k < n; k++) v[k] = (float)(means[(k / HW) % C % 3] + 1e-3 * unit(&seed));
    struct glia_tensor *x = as_format(B.b, xc, f), *y = tensor_as(B.b, sh, f);
    const float *gamma = glia_tensor_f32(B.l.params[0].value), *beta = glia_tensor_f32(B.l.params[1].value);
    double *ry = malloc((size_t)n * sizeof *ry), *rm = calloc((size_t)C, sizeof *rm), *rv = malloc((size_t)C * sizeof *rv);
    for (int64_t c = 0; c < C; c++) rv[c] = 1.0;
    struct ref r = {N, C, HW, eps, 1.0, rm, rv};
    const struct glia_tensor *in[1] = {x};
    struct glia_fwd fa = {in, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    char what[200];
    for (int pass = 0; pass < 2; pass++) {  /* training, then eval (on the running statistics, or the batch's) */
        fa.train = pass == 0;
        bool running = pass == 1 && track;
        if (running)
            for (int64_t c = 0; c < C; c++)  /* the buffers as the layer stored them (floats) */
                rm[c] = glia_tensor_f32(B.l.buffers[0].value)[c], rv[c] = glia_tensor_f32(B.l.buffers[1].value)[c];
        ref_forward(&r, v, gamma, beta, running, false, ry);
        if (relu)
            for (int64_t k = 0; k < n; k++) ry[k] = ry[k] < 0 ? 0 : ry[k];
        CU_ASSERT_FATAL(B.kernel->forward(&B.l, &fa) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_convert(yc, y, false) == GLIA_OK);
        snprintf(what, sizeof what, "%s %s pass %d y", ini, glia_memory_format_name(f), pass);
        CU_ASSERT_EQUAL(compare(what, glia_tensor_f32(yc), ry, 0, n, 1e-5), 0);
    }
    free(ry);
    free(rm);
    free(rv);
    glia_tensor_release(x);
    glia_tensor_release(xc);
    glia_tensor_release(y);
    glia_tensor_release(yc);
    unbuild(&B);
}

static void test_large_mean(void)
{
    for (int f = 0; f < 2; f++) {
        enum glia_memory_format fmt = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
        large_mean_case("[b]\ntype = batchnorm\nmomentum = 1\neps = 1e-8\n", S(4, 4, 3, 5, 6), fmt, 1e-8, true, false, 81);
        large_mean_case("[b]\ntype = batchnorm\nmomentum = 1\n", S(4, 2, 3, 7, 9), fmt, 1e-5, true, false, 82);
        large_mean_case("[b]\ntype = batchnorm\nmomentum = 1\neps = 1e-8\nactivation = relu\n", S(4, 3, 3, 4, 4), fmt,
                        1e-8, true, true, 83);
        large_mean_case("[b]\ntype = batchnorm\neps = 1e-8\ntrack_running_stats = off\n", S(4, 2, 3, 4, 5), fmt, 1e-8,
                        false, false, 84);
    }
    large_mean_case("[b]\ntype = batchnorm\nmomentum = 1\neps = 1e-8\n", S(2, 64, 6, 0, 0), GLIA_CONTIGUOUS, 1e-8, true,
                    false, 85);
}

/* Two layers of `ini`, R always given contiguous tensors and L channels_last ones (alternate: L
 * switches format every call), with the same weights: three training forwards and backwards of the
 * same inputs (mean away from 0, variance away from 1, so the running statistics move), then two
 * evals. Outputs, input and parameter gradients and the running statistics must agree after every
 * call; the evals change no buffer, and a backward after them is refused. */
static void check_formats_running(const char *ini, struct glia_shape sh, bool alternate, uint32_t seed)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct built R, L;
    layer_build(ctx, ini, &sh, 1, &R);
    layer_build(ctx, ini, &sh, 1, &L);
    CU_ASSERT_FATAL(R.l.n_params == L.l.n_params && R.l.n_buffers == L.l.n_buffers);
    for (int i = 0; i < R.l.n_params; i++) {
        float *v = glia_tensor_f32(R.l.params[i].value), *u = glia_tensor_f32(L.l.params[i].value);
        for (int64_t j = 0; j < glia_tensor_numel(R.l.params[i].value); j++)
            u[j] = v[j] = (float)(i == 0 ? 1.0 + 0.5 * unit(&seed) : 0.5 * unit(&seed));
    }
    int64_t n = glia_shape_numel(&sh), C = sh.dim[1];
    struct glia_tensor *x, *dy, *y0, *dx0;
    CU_ASSERT_FATAL(glia_tensor_new(R.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(R.b, GLIA_F32, &sh, &dy) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(R.b, GLIA_F32, &sh, &y0) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(R.b, GLIA_F32, &sh, &dx0) == GLIA_OK);
    float *xd = glia_tensor_f32(x), *dyd = glia_tensor_f32(dy);
    bool track = R.l.n_buffers == 2;
    float *snap[2][2];  /* [layer][buffer] */
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 2; i++) snap[k][i] = malloc((size_t)C * sizeof(float));
    for (int step = 0; step < 5; step++) {
        bool train = step < 3;
        enum glia_memory_format f = alternate && step % 2 ? GLIA_CONTIGUOUS : GLIA_CHANNELS_LAST;
        for (int64_t i = 0; i < n; i++) {
            int64_t c = i / (sh.dim[2] * sh.dim[3]) % C;
            xd[i] = (float)(0.3 * c - 0.5 + (1.5 + 0.25 * step) * unit(&seed));
            dyd[i] = (float)unit(&seed);
        }
        struct glia_tensor *x1 = as_format(R.b, x, f), *dy1 = as_format(R.b, dy, f), *y1 = tensor_as(R.b, sh, f);
        struct glia_tensor *dx1 = tensor_as(R.b, sh, f);
        for (int k = 0; k < 2 && track; k++)
            for (int i = 0; i < 2; i++)
                memcpy(snap[k][i], glia_tensor_f32((k ? &L : &R)->l.buffers[i].value), (size_t)C * sizeof(float));
        const struct glia_tensor *in0[1] = {x}, *in1[1] = {x1};
        struct glia_fwd fa0 = {in0, 1, y0, NULL, train, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, fa1 = {in1, 1, y1, NULL, train, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        CU_ASSERT_EQUAL_FATAL(R.kernel->forward(&R.l, &fa0), GLIA_OK);
        CU_ASSERT_EQUAL_FATAL(L.kernel->forward(&L.l, &fa1), GLIA_OK);
        double d = max_diff(y0, y1);
        struct glia_tensor *din0[1] = {dx0}, *din1[1] = {dx1};
        bool acc[1] = {false};
        struct glia_bwd ba0 = {in0, 1, y0, dy, din0, acc, NULL, NULL, NULL, NULL, false}, ba1 = {in1, 1, y1, dy1, din1, acc, NULL, NULL, NULL, NULL, false};
        if (train) {
            for (int i = 0; i < R.l.n_params; i++) R.l.params[i].grad_unset = L.l.params[i].grad_unset = true;
            CU_ASSERT_EQUAL_FATAL(R.kernel->backward(&R.l, &ba0), GLIA_OK);
            CU_ASSERT_EQUAL_FATAL(L.kernel->backward(&L.l, &ba1), GLIA_OK);
            d = fmax(d, max_diff(dx0, dx1));
            for (int i = 0; i < R.l.n_params; i++) d = fmax(d, max_diff(R.l.params[i].grad, L.l.params[i].grad));
        } else {
            CU_ASSERT_EQUAL(L.kernel->backward(&L.l, &ba1), GLIA_EINVAL);  /* eval kept nothing */
        }
        double db = 0;
        int moved = 0, kept = 0;
        for (int i = 0; i < R.l.n_buffers; i++) {
            const float *r = glia_tensor_f32(R.l.buffers[i].value), *l = glia_tensor_f32(L.l.buffers[i].value);
            db = fmax(db, max_diff(R.l.buffers[i].value, L.l.buffers[i].value));
            for (int64_t c = 0; c < C; c++) {
                moved += r[c] != snap[0][i][c] && l[c] != snap[1][i][c];
                kept += r[c] == snap[0][i][c] && l[c] == snap[1][i][c];
            }
        }
        if (!(d < 1e-5) || !(db < 1e-6))
            printf("\n  %s step %d (%s, %s): outputs and gradients differ by %g, running statistics by %g\n", ini,
                   step, train ? "train" : "eval", glia_memory_format_name(f), d, db);
        CU_ASSERT(d < 1e-5);
        CU_ASSERT(db < 1e-6);
        if (track) CU_ASSERT_EQUAL(train ? moved : kept, 2 * C);  /* training moves every statistic, eval none */
        glia_tensor_release(x1);
        glia_tensor_release(dy1);
        glia_tensor_release(y1);
        glia_tensor_release(dx1);
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 2; i++) free(snap[k][i]);
    glia_tensor_release(x);
    glia_tensor_release(dy);
    glia_tensor_release(y0);
    glia_tensor_release(dx0);
    layer_unbuild(&R);
    layer_unbuild(&L);
    glia_context_free(ctx);
}

static void test_eval_nhwc(void)
{
    check_formats_running("[b]\ntype = batchnorm\n", S(4, 4, 3, 5, 6), false, 61);
    check_formats_running("[b]\ntype = batchnorm\nmomentum = 0.3\n", S(4, 4, 3, 5, 6), true, 62);
    check_formats_running("[b]\ntype = batchnorm\naffine = off\nmomentum = 1\n", S(4, 6, 9, 1, 1), true, 63);
    check_formats_running("[b]\ntype = batchnorm\n", S(4, 2, 1, 4, 4), false, 64);
    check_formats_running("[b]\ntype = batchnorm\nmomentum = 0.2\n", S(4, 8, 70, 6, 5), true, 65);
    check_formats_running("[b]\ntype = batchnorm\ntrack_running_stats = off\n", S(4, 3, 5, 3, 4), true, 66);
}

/* ---- configuration errors ---- */


/* ---- activation = relu ---- */

/* batchnorm with activation = relu against batchnorm then a relu layer, on the same input and
 * parameters: the same output bits in training and eval, and the same dx, dgamma and dbeta bits
 * (the fused backward masks dy where the unfused relu does), in both memory formats. */
static void relu_case(struct glia_shape sh, enum glia_memory_format f, uint32_t seed)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct built fu, bn, re;
    layer_build(ctx, "[b]\ntype = batchnorm\nactivation = relu\nmomentum = 0.3\n", &sh, 1, &fu);
    layer_build(ctx, "[b]\ntype = batchnorm\nmomentum = 0.3\n", &sh, 1, &bn);
    layer_build(ctx, "[r]\ntype = relu\n", &sh, 1, &re);
    for (int i = 0; i < fu.l.n_params; i++)
        for (int64_t j = 0; j < glia_tensor_numel(fu.l.params[i].value); j++)
            glia_tensor_f32(fu.l.params[i].value)[j] = glia_tensor_f32(bn.l.params[i].value)[j] =
                (float)(i == 0 ? 1.0 + 0.5 * unit(&seed) : 0.5 * unit(&seed));
    struct glia_backend *b = fu.b;
    struct glia_tensor *x = tensor_as(b, sh, f), *dy = tensor_as(b, sh, f), *y1 = tensor_as(b, sh, f),
                       *y2 = tensor_as(b, sh, f), *yr = tensor_as(b, sh, f), *dmid = tensor_as(b, sh, f),
                       *dx1 = tensor_as(b, sh, f), *dx2 = tensor_as(b, sh, f);
    int64_t n = glia_tensor_numel(x);
    size_t bytes = sizeof(float) * (size_t)n;
    for (int64_t i = 0; i < n; i++) glia_tensor_f32(x)[i] = (float)(2 * unit(&seed)), glia_tensor_f32(dy)[i] = (float)unit(&seed);
    for (int train = 1; train >= 0; train--) {
        const struct glia_tensor *in[1] = {x}, *mid[1] = {y2};
        bool acc[1] = {false};
        struct glia_fwd a1 = {in, 1, y1, NULL, train, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, a2 = {in, 1, y2, NULL, train, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL},
                        ar = {mid, 1, yr, NULL, train, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        CU_ASSERT_EQUAL(fu.kernel->forward(&fu.l, &a1), GLIA_OK);
        CU_ASSERT_EQUAL(bn.kernel->forward(&bn.l, &a2), GLIA_OK);
        CU_ASSERT_EQUAL(re.kernel->forward(&re.l, &ar), GLIA_OK);
        CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(y1), glia_tensor_f32(yr), bytes), 0);
        if (!train) break;
        int zeros = 0;
        for (int64_t i = 0; i < n; i++) zeros += glia_tensor_f32(y1)[i] == 0.0f;
        CU_ASSERT(zeros > n / 5 && zeros < 4 * n / 5);  /* the relu cuts */
        struct glia_tensor *d1[1] = {dx1}, *dm[1] = {dmid}, *d2[1] = {dx2};
        for (int i = 0; i < fu.l.n_params; i++) fu.l.params[i].grad_unset = bn.l.params[i].grad_unset = true;
        struct glia_bwd b1 = {in, 1, y1, dy, d1, acc, NULL, NULL, NULL, NULL, false}, br = {mid, 1, yr, dy, dm, acc, NULL, NULL, NULL, NULL, false},
                        b2 = {in, 1, y2, dmid, d2, acc, NULL, NULL, NULL, NULL, false};
        CU_ASSERT_EQUAL(fu.kernel->backward(&fu.l, &b1), GLIA_OK);
        CU_ASSERT_EQUAL(re.kernel->backward(&re.l, &br), GLIA_OK);
        CU_ASSERT_EQUAL(bn.kernel->backward(&bn.l, &b2), GLIA_OK);
        CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(dx1), glia_tensor_f32(dx2), bytes), 0);
        for (int i = 0; i < fu.l.n_params; i++)
            CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(fu.l.params[i].grad), glia_tensor_f32(bn.l.params[i].grad),
                                   sizeof(float) * (size_t)glia_tensor_numel(fu.l.params[i].grad)), 0);
    }
    for (int i = 0; i < fu.l.n_buffers; i++)  /* the running statistics moved alike */
        CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(fu.l.buffers[i].value), glia_tensor_f32(bn.l.buffers[i].value),
                               sizeof(float) * (size_t)glia_tensor_numel(fu.l.buffers[i].value)), 0);
    struct glia_tensor *all[] = {x, dy, y1, y2, yr, dmid, dx1, dx2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) glia_tensor_release(all[i]);
    layer_unbuild(&fu);
    layer_unbuild(&bn);
    layer_unbuild(&re);
    glia_context_free(ctx);
}

/* The offset of logical element (n, c, i) of an (N, C) or (N, C, H, W) tensor (i < H*W) in format f. */
static int64_t at_nci(struct glia_shape sh, enum glia_memory_format f, int64_t n, int64_t c, int64_t i)
{
    int64_t C = sh.dim[1], HW = sh.ndim == 4 ? sh.dim[2] * sh.dim[3] : 1;
    return f == GLIA_CHANNELS_LAST && sh.ndim == 4 ? (n * HW + i) * C + c : (n * C + c) * HW + i;
}

static int64_t count_nan(const struct glia_tensor *t)
{
    int64_t k = 0;
    for (int64_t i = 0; i < glia_tensor_numel(t); i++) k += isnan(glia_tensor_f32(t)[i]);
    return k;
}

/* activation = relu lets NaN through as the relu layer (and torch.relu) does. Eval with fresh running
 * statistics: one NaN, one +inf and one -inf among the inputs give NaN, +inf and +0 alone, the bits of
 * batchnorm then relu. Training with a NaN in channel 0: that channel's mean is NaN, so its outputs,
 * its dx and dgamma are NaN, and its dbeta is the plain sum of dy there (the relu passes every NaN y's
 * gradient), as torch's BatchNorm2d then relu give; the other channels are untouched. Before, the fused
 * relu turned the NaNs into zeros. */
static void relu_nan_case(struct glia_shape sh, enum glia_memory_format f, uint32_t seed)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct built fu, bn, re;
    layer_build(ctx, "[b]\ntype = batchnorm\nactivation = relu\n", &sh, 1, &fu);
    layer_build(ctx, "[b]\ntype = batchnorm\n", &sh, 1, &bn);
    layer_build(ctx, "[r]\ntype = relu\n", &sh, 1, &re);
    for (int i = 0; i < fu.l.n_params; i++)
        for (int64_t j = 0; j < glia_tensor_numel(fu.l.params[i].value); j++)
            glia_tensor_f32(fu.l.params[i].value)[j] = glia_tensor_f32(bn.l.params[i].value)[j] =
                (float)(i == 0 ? 1.0 + 0.5 * unit(&seed) : 0.5 * unit(&seed));
    struct glia_backend *b = fu.b;
    struct glia_tensor *x = tensor_as(b, sh, f), *dy = tensor_as(b, sh, f), *y1 = tensor_as(b, sh, f),
                       *y2 = tensor_as(b, sh, f), *yr = tensor_as(b, sh, f), *dmid = tensor_as(b, sh, f),
                       *dx1 = tensor_as(b, sh, f), *dx2 = tensor_as(b, sh, f);
    int64_t n = glia_tensor_numel(x), N = sh.dim[0], HW = n / (N * sh.dim[1]);
    size_t bytes = sizeof(float) * (size_t)n;
    float *xv = glia_tensor_f32(x);
    for (int64_t i = 0; i < n; i++) xv[i] = (float)(2 * unit(&seed)), glia_tensor_f32(dy)[i] = (float)unit(&seed);
    const struct glia_tensor *in[1] = {x}, *mid[1] = {y2};
    bool acc[1] = {false};
    struct glia_fwd a1 = {in, 1, y1, NULL, false, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, a2 = {in, 1, y2, NULL, false, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL},
                    ar = {mid, 1, yr, NULL, false, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    int64_t pn = at_nci(sh, f, 0, 1, 0), pi = at_nci(sh, f, N - 1, 2, HW - 1), pm = at_nci(sh, f, 1, 0, 0);
    xv[pn] = NAN, xv[pi] = INFINITY, xv[pm] = -INFINITY;
    CU_ASSERT_EQUAL(fu.kernel->forward(&fu.l, &a1), GLIA_OK);
    CU_ASSERT_EQUAL(bn.kernel->forward(&bn.l, &a2), GLIA_OK);
    CU_ASSERT_EQUAL(re.kernel->forward(&re.l, &ar), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(y1), glia_tensor_f32(yr), bytes), 0);
    const float *y = glia_tensor_f32(y1);
    CU_ASSERT(count_nan(y1) == 1 && isnan(y[pn]));
    CU_ASSERT(y[pi] == INFINITY && y[pm] == 0.0f && !signbit(y[pm]));
    /* training: a NaN in channel 0 only */
    xv[pn] = 0.5f, xv[pi] = 0.25f, xv[pm] = -0.5f, xv[at_nci(sh, f, N - 1, 0, HW / 2)] = NAN;
    a1.train = a2.train = ar.train = true;
    CU_ASSERT_EQUAL(fu.kernel->forward(&fu.l, &a1), GLIA_OK);
    CU_ASSERT_EQUAL(bn.kernel->forward(&bn.l, &a2), GLIA_OK);
    CU_ASSERT_EQUAL(re.kernel->forward(&re.l, &ar), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(y1), glia_tensor_f32(yr), bytes), 0);
    CU_ASSERT_EQUAL(count_nan(y1), N * HW);
    for (int64_t k = 0; k < N; k++) CU_ASSERT(isnan(y[at_nci(sh, f, k, 0, 0)]));
    struct glia_tensor *d1[1] = {dx1}, *dm[1] = {dmid}, *d2[1] = {dx2};
    for (int i = 0; i < fu.l.n_params; i++) fu.l.params[i].grad_unset = bn.l.params[i].grad_unset = true;
    struct glia_bwd b1 = {in, 1, y1, dy, d1, acc, NULL, NULL, NULL, NULL, false}, br = {mid, 1, yr, dy, dm, acc, NULL, NULL, NULL, NULL, false},
                    b2 = {in, 1, y2, dmid, d2, acc, NULL, NULL, NULL, NULL, false};
    CU_ASSERT_EQUAL(fu.kernel->backward(&fu.l, &b1), GLIA_OK);
    CU_ASSERT_EQUAL(re.kernel->backward(&re.l, &br), GLIA_OK);
    CU_ASSERT_EQUAL(bn.kernel->backward(&bn.l, &b2), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(dx1), glia_tensor_f32(dx2), bytes), 0);
    CU_ASSERT_EQUAL(count_nan(dx1), N * HW);
    for (int i = 0; i < fu.l.n_params; i++)
        CU_ASSERT_EQUAL(memcmp(glia_tensor_f32(fu.l.params[i].grad), glia_tensor_f32(bn.l.params[i].grad),
                               sizeof(float) * (size_t)glia_tensor_numel(fu.l.params[i].grad)), 0);
    double sdy = 0;
    for (int64_t k = 0; k < N; k++)
        for (int64_t i = 0; i < HW; i++) sdy += glia_tensor_f32(dy)[at_nci(sh, f, k, 0, i)];
    const float *dgamma = glia_tensor_f32(fu.l.params[0].grad), *dbeta = glia_tensor_f32(fu.l.params[1].grad);
    CU_ASSERT(isnan(dgamma[0]) && !isnan(dgamma[1]) && !isnan(dbeta[1]));
    CU_ASSERT(fabs(dbeta[0] - sdy) <= 1e-5);
    struct glia_tensor *all[] = {x, dy, y1, y2, yr, dmid, dx1, dx2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) glia_tensor_release(all[i]);
    layer_unbuild(&fu);
    layer_unbuild(&bn);
    layer_unbuild(&re);
    glia_context_free(ctx);
}

static void test_relu_activation_nan(void)
{
    relu_nan_case(S(2, 6, 3, 0, 0), GLIA_CONTIGUOUS, 71);
    relu_nan_case(S(4, 3, 3, 2, 3), GLIA_CONTIGUOUS, 72);
    relu_nan_case(S(4, 3, 3, 2, 3), GLIA_CHANNELS_LAST, 73);
}

static void test_relu_activation(void)
{
    relu_case(S(2, 16, 5, 0, 0), GLIA_CONTIGUOUS, 61);
    relu_case(S(4, 4, 3, 5, 6), GLIA_CONTIGUOUS, 62);
    relu_case(S(4, 4, 3, 5, 6), GLIA_CHANNELS_LAST, 63);
    relu_case(S(4, 8, 130, 7, 9), GLIA_CHANNELS_LAST, 64);  /* 504 rows: 32 blocks */
    check_ok("[b]\ntype = batchnorm\nactivation = relu\n", S(2, 6, 3, 0, 0), 65);
    check_ok("[b]\ntype = batchnorm\nactivation = relu\n", S(4, 3, 2, 3, 3), 66);
    nhwc_check("[b]\ntype = batchnorm\nactivation = relu\n", S(4, 2, 3, 4, 5), 67);
    diff_both("[b]\ntype = batchnorm\nactivation = relu\n", S(4, 2, 3, 4, 5), 68);
}

static void test_config_errors(void)
{
    expect_error("[b]\ntype = batchnorm\n", S(3, 2, 3, 4, 0), GLIA_ESHAPE,
                 "gradcheck.ini:1: [b] batchnorm expects (N, C) or (N, C, H, W) input, got 2x3x4");
    expect_error("[b]\ntype = batchnorm\n", S(1, 8, 0, 0, 0), GLIA_ESHAPE,
                 "gradcheck.ini:1: [b] batchnorm expects (N, C) or (N, C, H, W) input, got 8");
    expect_error("[b]\ntype = batchnorm\nmomentum = 2\n", S(2, 4, 3, 0, 0), GLIA_ECONFIG,
                 "gradcheck.ini:3: [b] momentum: 2 is out of range [0, 1]");
    expect_error("[b]\ntype = batchnorm\naffine = off\nmomentum = -0.1\n", S(2, 4, 3, 0, 0), GLIA_ECONFIG,
                 "gradcheck.ini:4: [b] momentum: ");
    expect_error("[b]\ntype = batchnorm\neps = 0\n", S(2, 4, 3, 0, 0), GLIA_ECONFIG,
                 "gradcheck.ini:3: [b] eps: 0 is out of range [1e-12, 1]");
    expect_error("[b]\ntype = batchnorm\naffine = maybe\n", S(2, 4, 3, 0, 0), GLIA_ECONFIG,
                 "gradcheck.ini:3: [b] affine: ");
    expect_error("[b]\ntype = batchnorm\nactivation = gelu\n", S(2, 4, 3, 0, 0), GLIA_ECONFIG,
                 "gradcheck.ini:3: [b] activation: ");
}

GLIA_TEST_MAIN("bn", GLIA_TEST(test_gradcheck_1d), GLIA_TEST(test_gradcheck_2d), GLIA_TEST(test_values_1d),
               GLIA_TEST(test_values_2d), GLIA_TEST(test_declarations), GLIA_TEST(test_hand_computed),
               GLIA_TEST(test_single_value_per_channel), GLIA_TEST(test_config_errors),
               GLIA_TEST(test_gradcheck_2d_nhwc), GLIA_TEST(test_global_avgpool_nhwc_gradcheck),
               GLIA_TEST(test_format_diff_nhwc), GLIA_TEST(test_global_avgpool_nhwc_format_diff),
               GLIA_TEST(test_global_avgpool_nhwc_values), GLIA_TEST(test_eval_nhwc),
               GLIA_TEST(test_relu_activation), GLIA_TEST(test_relu_activation_nan),
               GLIA_TEST(test_large_mean))
