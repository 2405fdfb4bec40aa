/* tests/test_conv.c — the conv2d layer: finite-difference gradient checks over stride, padding,
 * dilation, groups, bias and batch size; forward and backward values against a naive direct
 * convolution written here (also across batch-size changes, which rebuild the oneDNN
 * primitives, and on shapes where oneDNN works in blocked layouts); configuration errors. Not a
 * speed test. */
#include <math.h>
#include <string.h>
#include "layerutil.h"

static struct glia_context *ctx;

static struct glia_shape S4(int64_t n, int64_t c, int64_t h, int64_t w)
{
    return glia_shape_make(4, (int64_t[]){n, c, h, w});
}

/* One convolution: input (N, C, H, W), filters F, kernel k, stride s, padding p, dilation d,
 * groups g. */
struct cv {
    int64_t N, C, H, W, F, k, s, p, d, g;
    bool bias;
};

static int64_t out_extent(const struct cv *c, int64_t in) { return (in + 2 * c->p - c->d * (c->k - 1) - 1) / c->s + 1; }

static void cv_ini(const struct cv *c, char *buf, size_t n)
{
    snprintf(buf, n, "[c]\ntype = conv2d\nfilters = %lld\nsize = %lld\nstride = %lld\npadding = %lld\n"
                     "dilation = %lld\ngroups = %lld\nbias = %s\n",
             (long long)c->F, (long long)c->k, (long long)c->s, (long long)c->p, (long long)c->d, (long long)c->g,
             c->bias ? "on" : "off");
}

/* ---- gradient checks ---- */

static void check_grad(struct cv c, uint64_t seed)
{
    char ini[512];
    cv_ini(&c, ini, sizeof ini);
    struct glia_shape in = S4(c.N, c.C, c.H, c.W);
    struct glia_gradcheck_report r;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_layer_gradcheck(ctx, ini, &in, 1, seed, 2e-2, &r);
    if (st) printf("\n  %s\n  %s", ini, glia_context_error(ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    /* every input, weight and bias element compared; a convolution has no kinks */
    int64_t want = glia_shape_numel(&in) + c.F * (c.C / c.g) * c.k * c.k + (c.bias ? c.F : 0);
    CU_ASSERT_EQUAL(r.n_checked, want);
    CU_ASSERT_EQUAL(r.n_skipped, 0);
    CU_ASSERT(r.max_err < 1e-2);
    glia_context_free(ctx);
}

static void test_gradcheck_basic(void)
{
    /* N, C, H, W, F, k, s, p, d, g, bias */
    check_grad((struct cv){2, 3, 5, 6, 4, 1, 1, 0, 1, 1, true}, 1);   /* 1x1 */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 1, 0, 1, 1, true}, 2);   /* 3x3 valid */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 1, 1, 1, 1, true}, 3);   /* 3x3 same */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 1, 1, 1, 1, false}, 4);  /* no bias */
}

static void test_gradcheck_stride_dilation(void)
{
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 2, 0, 1, 1, true}, 11);  /* stride 2, uneven fit */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 2, 1, 1, 1, true}, 12);  /* stride 2, pad 1 */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 1, 0, 2, 1, true}, 13);  /* dilation 2 */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 1, 2, 2, 1, true}, 14);  /* dilation 2, pad 2 */
    check_grad((struct cv){2, 3, 6, 7, 4, 2, 2, 1, 2, 1, true}, 15);  /* even kernel, all at once */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 3, 2, 1, 1, false}, 16); /* stride > 2, big pad */
}

static void test_gradcheck_groups(void)
{
    check_grad((struct cv){2, 4, 5, 6, 4, 3, 1, 1, 1, 2, true}, 21);  /* groups 2 */
    check_grad((struct cv){2, 4, 5, 6, 6, 3, 2, 1, 1, 2, false}, 22); /* groups 2, 3 filters each */
    check_grad((struct cv){2, 3, 5, 6, 3, 3, 1, 1, 1, 3, true}, 23);  /* depthwise */
    check_grad((struct cv){2, 3, 5, 6, 6, 3, 1, 1, 2, 3, true}, 24);  /* depthwise x2, dilated */
}

static void test_gradcheck_shapes(void)
{
    check_grad((struct cv){1, 3, 5, 6, 4, 3, 1, 1, 1, 1, true}, 31);  /* batch 1 */
    check_grad((struct cv){3, 2, 4, 5, 3, 3, 1, 1, 1, 1, true}, 32);  /* batch 3 */
    check_grad((struct cv){2, 2, 3, 9, 3, 3, 1, 0, 1, 1, true}, 33);  /* wide */
    check_grad((struct cv){2, 2, 9, 3, 3, 3, 2, 1, 1, 1, true}, 34);  /* tall, strided */
    check_grad((struct cv){2, 1, 4, 4, 1, 4, 1, 0, 1, 1, true}, 35);  /* kernel = image: 1x1 out */
}

/* ---- values against a naive direct convolution ---- */

static uint32_t lcg_state;
static float frand(void)
{
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (float)((lcg_state >> 8) * (1.0 / 16777216.0) * 2.0 - 1.0);  /* U(-1, 1) */
}
static void fill(struct glia_tensor *t, float garbage)
{
    float *d = glia_tensor_f32(t);
    for (int64_t i = 0; i < glia_tensor_numel(t); i++) d[i] = isnan(garbage) ? garbage : frand();
}

/* The conv2d of `ini` in the file's context, every parameter filled with fill(.., 0). */
static void build(struct built *t, const char *ini, struct glia_shape in)
{
    layer_build(ctx, ini, &in, 1, t);
    for (int i = 0; i < t->l.n_params; i++) fill(t->l.params[i].value, 0);
}

static void unbuild(struct built *t) { layer_unbuild(t); }

#define IDX4(a, b, c, d, B, C, D) ((((a) * (B) + (b)) * (C) + (c)) * (D) + (d))

/* y (N, F, OH, OW) from x and w (F, C/g, k, k), in double. */
static void naive_forward(const struct cv *c, const float *x, const float *w, const float *b, double *y)
{
    int64_t OH = out_extent(c, c->H), OW = out_extent(c, c->W), Cg = c->C / c->g, Fg = c->F / c->g;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t f = 0; f < c->F; f++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double s = b ? b[f] : 0.0;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t kh = 0; kh < c->k; kh++)
                            for (int64_t kw = 0; kw < c->k; kw++) {
                                int64_t ih = oh * c->s - c->p + kh * c->d, iw = ow * c->s - c->p + kw * c->d;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                int64_t ch = f / Fg * Cg + ci;
                                s += (double)x[IDX4(n, ch, ih, iw, c->C, c->H, c->W)] *
                                     w[IDX4(f, ci, kh, kw, Cg, c->k, c->k)];
                            }
                    y[IDX4(n, f, oh, ow, c->F, OH, OW)] = s;
                }
}

/* dx, dw, db (each may be NULL) from dy, written (=). */
static void naive_backward(const struct cv *c, const float *x, const float *w, const float *dy, double *dx,
                           double *dw, double *db)
{
    int64_t OH = out_extent(c, c->H), OW = out_extent(c, c->W), Cg = c->C / c->g, Fg = c->F / c->g;
    memset(dx, 0, (size_t)(c->N * c->C * c->H * c->W) * sizeof *dx);
    memset(dw, 0, (size_t)(c->F * Cg * c->k * c->k) * sizeof *dw);
    memset(db, 0, (size_t)c->F * sizeof *db);
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t f = 0; f < c->F; f++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double g = dy[IDX4(n, f, oh, ow, c->F, OH, OW)];
                    db[f] += g;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t kh = 0; kh < c->k; kh++)
                            for (int64_t kw = 0; kw < c->k; kw++) {
                                int64_t ih = oh * c->s - c->p + kh * c->d, iw = ow * c->s - c->p + kw * c->d;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                int64_t xi = IDX4(n, f / Fg * Cg + ci, ih, iw, c->C, c->H, c->W);
                                int64_t wi = IDX4(f, ci, kh, kw, Cg, c->k, c->k);
                                dx[xi] += g * w[wi];
                                dw[wi] += g * x[xi];
                            }
                }
}

/* Every element of got within 1e-4 of base + want (relative beyond magnitude 1). */
static bool close_all(const char *what, const float *got, const double *want, double base, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        double w = base + want[i];
        if (!(fabs((double)got[i] - w) <= 1e-4 * fmax(1.0, fabs(w)))) {
            printf("\n  %s [%lld] = %.9g, want %.9g", what, (long long)i, got[i], w);
            return false;
        }
    }
    return true;
}

/* The layer built by hand, like the gradient checker does. */



/* Forward (eval and training) and backward (write, then accumulate) of the built layer with
 * batch c.N, against the naive reference. */
static void check_values_at(struct built *t, const struct cv *c)
{
    struct glia_shape xs = S4(c->N, c->C, c->H, c->W), ys;
    CU_ASSERT_FATAL(t->ops->infer_shape(&t->l, &xs, 1, &ys) == GLIA_OK);
    struct glia_shape want_ys = S4(c->N, c->F, out_extent(c, c->H), out_extent(c, c->W));
    CU_ASSERT_FATAL(glia_shape_equal(&ys, &want_ys));
    uint64_t want_flops = 2ull * (uint64_t)(c->N * c->F * want_ys.dim[2] * want_ys.dim[3] * (c->C / c->g) * c->k * c->k);
    CU_ASSERT_EQUAL(t->ops->flops(&t->l, &xs, 1), want_flops);
    struct glia_tensor *x, *y, *dx, *dy;
    CU_ASSERT_FATAL(glia_tensor_new(t->b, GLIA_F32, &xs, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(t->b, GLIA_F32, &xs, &dx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(t->b, GLIA_F32, &ys, &y) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(t->b, GLIA_F32, &ys, &dy) == GLIA_OK);
    fill(x, 0);
    fill(dy, 0);
    struct glia_param *pw = &t->l.params[0], *pb = c->bias ? &t->l.params[1] : NULL;
    const float *w = glia_tensor_f32(pw->value), *b = pb ? glia_tensor_f32(pb->value) : NULL;
    int64_t nx = glia_tensor_numel(x), ny = glia_tensor_numel(y), nw = glia_tensor_numel(pw->value);
    double *ry = malloc((size_t)ny * sizeof *ry), *rdx = malloc((size_t)nx * sizeof *rdx);
    double *rdw = malloc((size_t)nw * sizeof *rdw), *rdb = malloc((size_t)c->F * sizeof *rdb);
    naive_forward(c, glia_tensor_f32(x), w, b, ry);
    naive_backward(c, glia_tensor_f32(x), w, glia_tensor_f32(dy), rdx, rdw, rdb);

    const struct glia_tensor *in[1] = {x};
    for (int train = 0; train < 2; train++) {
        fill(y, NAN);
        struct glia_fwd a = {in, 1, y, NULL, train, 7};
        CU_ASSERT_EQUAL(t->ops->forward(&t->l, &a), GLIA_OK);
        CU_ASSERT(close_all(train ? "y (train)" : "y (eval)", glia_tensor_f32(y), ry, 0, ny));
    }
    /* write mode over NaN garbage, then accumulate mode over the result */
    struct glia_tensor *din[1] = {dx};
    bool acc[1] = {false};
    struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL};
    fill(dx, NAN);
    for (int i = 0; i < t->l.n_params; i++) {
        fill(t->l.params[i].grad, NAN);
        t->l.params[i].grad_unset = true;
    }
    CU_ASSERT_EQUAL(t->ops->backward(&t->l, &ba), GLIA_OK);
    CU_ASSERT(close_all("dx", glia_tensor_f32(dx), rdx, 0, nx));
    CU_ASSERT(close_all("dw", glia_tensor_f32(pw->grad), rdw, 0, nw));
    if (pb) CU_ASSERT(close_all("db", glia_tensor_f32(pb->grad), rdb, 0, c->F));
    acc[0] = true;
    for (int i = 0; i < t->l.n_params; i++) t->l.params[i].grad_unset = false;
    CU_ASSERT_EQUAL(t->ops->backward(&t->l, &ba), GLIA_OK);
    for (int64_t i = 0; i < nx; i++) rdx[i] *= 2;
    for (int64_t i = 0; i < nw; i++) rdw[i] *= 2;
    for (int64_t i = 0; i < c->F; i++) rdb[i] *= 2;
    CU_ASSERT(close_all("dx (accumulated)", glia_tensor_f32(dx), rdx, 0, nx));
    CU_ASSERT(close_all("dw (accumulated)", glia_tensor_f32(pw->grad), rdw, 0, nw));
    if (pb) CU_ASSERT(close_all("db (accumulated)", glia_tensor_f32(pb->grad), rdb, 0, c->F));
    /* no input gradient wanted: parameters only */
    din[0] = NULL;
    acc[0] = false;
    for (int i = 0; i < t->l.n_params; i++) t->l.params[i].grad_unset = true;
    CU_ASSERT_EQUAL(t->ops->backward(&t->l, &ba), GLIA_OK);
    for (int64_t i = 0; i < nw; i++) rdw[i] /= 2;
    CU_ASSERT(close_all("dw (no din)", glia_tensor_f32(pw->grad), rdw, 0, nw));
    free(ry);
    free(rdx);
    free(rdw);
    free(rdb);
    glia_tensor_release(x);
    glia_tensor_release(y);
    glia_tensor_release(dx);
    glia_tensor_release(dy);
}

/* Builds c and checks values at batch sizes c.N, 1, c.N + 2, c.N (the cached primitives are
 * rebuilt each time the batch changes). */
static void check_values(struct cv c, uint32_t seed)
{
    char ini[512];
    cv_ini(&c, ini, sizeof ini);
    lcg_state = seed;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct built t;
    build(&t, ini, S4(c.N, c.C, c.H, c.W));
    /* parameters: weight (F, C/g, k, k) then bias (F), PyTorch's uniform init */
    CU_ASSERT_EQUAL_FATAL(t.l.n_params, c.bias ? 2 : 1);
    struct glia_shape ws = S4(c.F, c.C / c.g, c.k, c.k);
    CU_ASSERT(glia_shape_equal(&t.l.params[0].shape, &ws));
    CU_ASSERT_STRING_EQUAL(t.l.params[0].name, "weight");
    double a = 1.0 / sqrt((double)(c.C / c.g * c.k * c.k));
    for (int i = 0; i < t.l.n_params; i++) {
        CU_ASSERT_EQUAL(t.l.params[i].init.kind, GLIA_INIT_UNIFORM);
        CU_ASSERT_DOUBLE_EQUAL(t.l.params[i].init.a, a, 1e-12);
    }
    if (c.bias) {
        CU_ASSERT_STRING_EQUAL(t.l.params[1].name, "bias");
        CU_ASSERT(t.l.params[1].shape.ndim == 1 && t.l.params[1].shape.dim[0] == c.F);
    }
    int64_t batches[4] = {c.N, 1, c.N + 2, c.N};
    for (int i = 0; i < 4; i++) {
        struct cv ci = c;
        ci.N = batches[i];
        check_values_at(&t, &ci);
    }
    unbuild(&t);
    glia_context_free(ctx);
}

static void test_values_against_naive(void)
{
    /* N, C, H, W, F, k, s, p, d, g, bias */
    check_values((struct cv){2, 3, 5, 6, 4, 1, 1, 0, 1, 1, true}, 101);
    check_values((struct cv){2, 3, 5, 6, 4, 3, 1, 1, 1, 1, true}, 102);
    check_values((struct cv){3, 3, 7, 6, 4, 3, 2, 1, 1, 1, false}, 103);
    check_values((struct cv){2, 3, 8, 7, 5, 3, 1, 2, 2, 1, true}, 104);
    check_values((struct cv){2, 4, 6, 5, 6, 3, 2, 1, 1, 2, true}, 105);
    check_values((struct cv){2, 8, 9, 9, 8, 3, 1, 1, 1, 8, true}, 106);  /* depthwise */
    check_values((struct cv){2, 6, 9, 11, 12, 5, 3, 3, 2, 3, false}, 107);
    check_values((struct cv){1, 16, 12, 12, 32, 3, 1, 1, 1, 1, true}, 108); /* bigger: JIT paths */
}

/* The same layer on other input sizes: H and W may change too (fully convolutional). */
static void test_input_size_changes(void)
{
    struct cv c = {2, 3, 6, 6, 4, 3, 2, 1, 1, 1, true};
    char ini[512];
    cv_ini(&c, ini, sizeof ini);
    lcg_state = 5;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct built t;
    build(&t, ini, S4(c.N, c.C, c.H, c.W));
    check_values_at(&t, &c);
    struct cv c2 = c;
    c2.H = 9, c2.W = 4;
    check_values_at(&t, &c2);
    check_values_at(&t, &c);
    /* wrong channel count or an empty output: infer_shape refuses */
    struct glia_shape bad = S4(2, 4, 6, 6), os;
    CU_ASSERT_EQUAL(t.ops->infer_shape(&t.l, &bad, 1, &os), GLIA_ESHAPE);
    bad = S4(2, 3, 6, 0);
    CU_ASSERT_EQUAL(t.ops->infer_shape(&t.l, &bad, 1, &os), GLIA_ESHAPE);
    bad = glia_shape_make(3, (int64_t[]){2, 3, 6});
    CU_ASSERT_EQUAL(t.ops->infer_shape(&t.l, &bad, 1, &os), GLIA_ESHAPE);
    unbuild(&t);
    glia_context_free(ctx);
}

/* Shapes where oneDNN picks its blocked layouts (nChw16c activations, OIhw16i16o weights):
 * the layer reorders between them and the plain tensors, and accumulates through them. */
static void test_blocked_layouts(void)
{
    /* N, C, H, W, F, k, s, p, d, g, bias */
    check_values((struct cv){3, 1, 14, 14, 32, 3, 1, 0, 1, 1, true}, 111);   /* first layer: plain src */
    check_values((struct cv){2, 32, 12, 12, 64, 3, 1, 0, 1, 1, true}, 112);  /* all blocked */
    check_values((struct cv){2, 20, 9, 11, 24, 3, 2, 1, 1, 1, false}, 113); /* channels padded to 16 */
    check_values((struct cv){2, 32, 8, 8, 48, 1, 1, 0, 1, 1, true}, 114);   /* 1x1 */
    check_values((struct cv){2, 32, 10, 10, 64, 3, 1, 1, 1, 2, true}, 115); /* groups of 16 */
    check_values((struct cv){2, 32, 9, 9, 32, 3, 1, 1, 1, 32, true}, 116);  /* depthwise, blocked */
}

/* Backward-weights reuses the input a training forward reordered; an eval forward or a
 * training forward of another tensor in between must not leave it reading a stale copy. */
static void test_kept_input(void)
{
    struct cv c = {2, 32, 10, 10, 32, 3, 1, 1, 1, 1, true};
    char ini[512];
    cv_ini(&c, ini, sizeof ini);
    lcg_state = 9;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct built t;
    build(&t, ini, S4(c.N, c.C, c.H, c.W));
    struct glia_shape xs = S4(c.N, c.C, c.H, c.W), ys = S4(c.N, c.F, c.H, c.W);
    struct glia_tensor *x1, *x2, *y, *dx, *dy;
    CU_ASSERT_FATAL(glia_tensor_new(t.b, GLIA_F32, &xs, &x1) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(t.b, GLIA_F32, &xs, &x2) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(t.b, GLIA_F32, &xs, &dx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(t.b, GLIA_F32, &ys, &y) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(t.b, GLIA_F32, &ys, &dy) == GLIA_OK);
    fill(x1, 0);
    fill(x2, 0);
    fill(dy, 0);
    struct glia_param *pw = &t.l.params[0], *pb = &t.l.params[1];
    int64_t nx = glia_tensor_numel(x1), nw = glia_tensor_numel(pw->value);
    double *rdx = malloc((size_t)nx * sizeof *rdx), *rdw = malloc((size_t)nw * sizeof *rdw);
    double *rdb = malloc((size_t)c.F * sizeof *rdb);
    naive_backward(&c, glia_tensor_f32(x1), glia_tensor_f32(pw->value), glia_tensor_f32(dy), rdx, rdw, rdb);
    const struct glia_tensor *in1[1] = {x1}, *in2[1] = {x2};
    struct glia_tensor *din[1] = {dx};
    bool acc[1] = {false};
    struct glia_bwd ba = {in1, 1, y, dy, din, acc, NULL};
    for (int round = 0; round < 3; round++) {
        /* 0: train x1, eval x2; 1: train x2; 2: train x1 (the kept copy is right) */
        struct glia_fwd f1 = {round == 1 ? in2 : in1, 1, y, NULL, true, 7};
        struct glia_fwd f2 = {in2, 1, y, NULL, false, 7};
        CU_ASSERT_EQUAL(t.ops->forward(&t.l, &f1), GLIA_OK);
        if (round == 0) CU_ASSERT_EQUAL(t.ops->forward(&t.l, &f2), GLIA_OK);
        fill(dx, NAN);
        for (int i = 0; i < t.l.n_params; i++) {
            fill(t.l.params[i].grad, NAN);
            t.l.params[i].grad_unset = true;
        }
        CU_ASSERT_EQUAL(t.ops->backward(&t.l, &ba), GLIA_OK);
        CU_ASSERT(close_all("dx", glia_tensor_f32(dx), rdx, 0, nx));
        CU_ASSERT(close_all("dw", glia_tensor_f32(pw->grad), rdw, 0, nw));
        CU_ASSERT(close_all("db", glia_tensor_f32(pb->grad), rdb, 0, c.F));
    }
    free(rdx);
    free(rdw);
    free(rdb);
    glia_tensor_release(x1);
    glia_tensor_release(x2);
    glia_tensor_release(y);
    glia_tensor_release(dx);
    glia_tensor_release(dy);
    unbuild(&t);
    glia_context_free(ctx);
}

/* ---- configuration errors ---- */


static void test_config_errors(void)
{
    expect_error("[c]\ntype = conv2d\nfilters = 4\ngroups = 2\n", S4(2, 3, 5, 6), GLIA_ECONFIG,
                 "gradcheck.ini:4: [c] groups: 2 groups do not divide the 3 input channels");
    expect_error("[c]\ntype = conv2d\nfilters = 3\n\ngroups = 2\n", S4(2, 4, 5, 6), GLIA_ECONFIG,
                 "gradcheck.ini:5: [c] groups: 2 groups do not divide the 3 filters");
    expect_error("[c]\ntype = conv2d\nfilters = 4\ndilation = 3\n", S4(2, 3, 5, 6), GLIA_ESHAPE,
                 "gradcheck.ini:1: [c] conv2d output would be empty: input 5x6 with size 3, dilation 3, padding 0 "
                 "gives 0x0");
    expect_error("\n[c]\ntype = conv2d\nfilters = 4\nsize = 5\npadding = 1\n", S4(2, 3, 7, 2), GLIA_ESHAPE,
                 "gradcheck.ini:2: [c] conv2d output would be empty: input 7x2 with size 5, dilation 1, padding 1 "
                 "gives 5x0");
    expect_error("[c]\ntype = conv2d\nfilters = 4\n", glia_shape_make(2, (int64_t[]){2, 12}), GLIA_ESHAPE,
                 "gradcheck.ini:1: [c] conv2d expects (N, C, H, W) input, got 2x12");
    expect_error("[c]\ntype = conv2d\nfilters = 4\n", glia_shape_make(3, (int64_t[]){2, 3, 5}), GLIA_ESHAPE,
                 "gradcheck.ini:1: [c] conv2d expects (N, C, H, W) input, got 2x3x5");
    /* the schema's bounds and requirements (checked by the core) */
    expect_error("[c]\ntype = conv2d\n", S4(2, 3, 5, 6), GLIA_ECONFIG, "filters");
    expect_error("[c]\ntype = conv2d\nfilters = 4\nstride = 0\n", S4(2, 3, 5, 6), GLIA_ECONFIG,
                 "gradcheck.ini:4: [c] stride: 0 is out of range");
    expect_error("[c]\ntype = conv2d\nfilters = 4\npadding = -1\n", S4(2, 3, 5, 6), GLIA_ECONFIG,
                 "gradcheck.ini:4: [c] padding: -1 is out of range");
    expect_error("[c]\ntype = conv2d\nfilters = 4\ndilation = 0\n", S4(2, 3, 5, 6), GLIA_ECONFIG,
                 "gradcheck.ini:4: [c] dilation: 0 is out of range");
}

GLIA_TEST_MAIN("conv", GLIA_TEST(test_gradcheck_basic), GLIA_TEST(test_gradcheck_stride_dilation),
               GLIA_TEST(test_gradcheck_groups), GLIA_TEST(test_gradcheck_shapes),
               GLIA_TEST(test_values_against_naive), GLIA_TEST(test_input_size_changes),
               GLIA_TEST(test_blocked_layouts), GLIA_TEST(test_kept_input), GLIA_TEST(test_config_errors))
