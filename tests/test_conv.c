/* tests/test_conv.c — the conv2d layer: finite-difference gradient checks over stride, padding,
 * dilation, groups, bias, batch size and rectangular kernels and padding (both memory formats);
 * forward and backward values against a naive direct convolution written here (also across
 * batch-size changes, and on shapes where oneDNN works in blocked layouts); the per-shape
 * primitive cache against fresh layers; configuration errors. Not a speed test. */
#include <math.h>
#include <string.h>
#include "layerutil.h"

static struct glia_context *ctx;

static struct glia_shape S4(int64_t n, int64_t c, int64_t h, int64_t w)
{
    return glia_shape_make(4, (int64_t[]){n, c, h, w});
}

/* One convolution: input (N, C, H, W), filters F, kernel k (height) x kw (width), stride s,
 * padding p (of H) and pw (of W), dilation d, groups g; relu: activation = relu. */
struct cv {
    int64_t N, C, H, W, F, k, s, p, d, g;
    bool bias;
    int64_t kw, pw;
    bool relu;
};

static int64_t KH(const struct cv *c) { return c->k; }
static int64_t KW(const struct cv *c) { return c->kw; }
static int64_t PH(const struct cv *c) { return c->p; }
static int64_t PW(const struct cv *c) { return c->pw; }
static bool rect(const struct cv *c) { return c->k != c->kw || c->p != c->pw; }

static int64_t out_h(const struct cv *c, int64_t in) { return (in + 2 * PH(c) - c->d * (KH(c) - 1) - 1) / c->s + 1; }
static int64_t out_w(const struct cv *c, int64_t in) { return (in + 2 * PW(c) - c->d * (KW(c) - 1) - 1) / c->s + 1; }

/* A rectangular case writes size_h, size_w, padding_h and padding_w after size = 5 and
 * padding = 7, which they override. */
static void cv_ini(const struct cv *c, char *buf, size_t n)
{
    int len = snprintf(buf, n, "[c]\ntype = conv2d\nfilters = %lld\nsize = %lld\nstride = %lld\npadding = %lld\n"
                               "dilation = %lld\ngroups = %lld\nbias = %s\n",
                       (long long)c->F, rect(c) ? 5ll : (long long)c->k, (long long)c->s,
                       rect(c) ? 7ll : (long long)c->p, (long long)c->d, (long long)c->g, c->bias ? "on" : "off");
    if (c->relu) len += snprintf(buf + len, n - (size_t)len, "activation = relu\n");
    if (rect(c))
        snprintf(buf + len, n - (size_t)len, "size_h = %lld\nsize_w = %lld\npadding_h = %lld\npadding_w = %lld\n",
                 (long long)KH(c), (long long)KW(c), (long long)PH(c), (long long)PW(c));
}

/* ---- gradient checks ---- */

/* Gradient check of c with its tensors in format f. */
static void check_grad_as(struct cv c, uint64_t seed, enum glia_memory_format f)
{
    char ini[512];
    cv_ini(&c, ini, sizeof ini);
    struct glia_shape in = S4(c.N, c.C, c.H, c.W);
    struct glia_gradcheck_report r;
    struct glia_gradcheck_options o = {.struct_size = sizeof o, .memory_format = f};
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_layer_gradcheck_ex(ctx, ini, &in, 1, &o, seed, 2e-2, &r);
    if (st) printf("\n  %s  (%s)\n  %s", ini, glia_memory_format_name(f), glia_context_error(ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    /* every input, weight and bias element compared; a convolution has no kinks, its relu a few */
    int64_t want = glia_shape_numel(&in) + c.F * (c.C / c.g) * KH(&c) * KW(&c) + (c.bias ? c.F : 0);
    CU_ASSERT_EQUAL(r.n_checked + r.n_skipped, want);
    CU_ASSERT(c.relu ? r.n_skipped * 10 <= want : r.n_skipped == 0);
    CU_ASSERT(r.max_err < 1e-2);
    glia_context_free(ctx);
}

static void check_grad(struct cv c, uint64_t seed) { check_grad_as(c, seed, GLIA_CONTIGUOUS); }

static void test_gradcheck_basic(void)
{
    /* N, C, H, W, F, k, s, p, d, g, bias, kw, pw */
    check_grad((struct cv){2, 3, 5, 6, 4, 1, 1, 0, 1, 1, true, 1, 0, false}, 1);   /* 1x1 */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 1, 0, 1, 1, true, 3, 0, false}, 2);   /* 3x3 valid */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 1, 1, 1, 1, true, 3, 1, false}, 3);   /* 3x3 same */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 1, 1, 1, 1, false, 3, 1, false}, 4);  /* no bias */
}

static void test_gradcheck_stride_dilation(void)
{
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 2, 0, 1, 1, true, 3, 0, false}, 11);   /* stride 2, uneven fit */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 2, 1, 1, 1, true, 3, 1, false}, 12);   /* stride 2, pad 1 */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 1, 0, 2, 1, true, 3, 0, false}, 13);   /* dilation 2 */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 1, 2, 2, 1, true, 3, 2, false}, 14);   /* dilation 2, pad 2 */
    check_grad((struct cv){2, 3, 6, 7, 4, 2, 2, 1, 2, 1, true, 2, 1, false}, 15);   /* even kernel, all at once */
    check_grad((struct cv){2, 3, 5, 6, 4, 3, 3, 2, 1, 1, false, 3, 2, false}, 16);  /* stride > 2, big pad */
}

static void test_gradcheck_groups(void)
{
    check_grad((struct cv){2, 4, 5, 6, 4, 3, 1, 1, 1, 2, true, 3, 1, false}, 21);   /* groups 2 */
    check_grad((struct cv){2, 4, 5, 6, 6, 3, 2, 1, 1, 2, false, 3, 1, false}, 22);  /* groups 2, 3 filters each */
    check_grad((struct cv){2, 3, 5, 6, 3, 3, 1, 1, 1, 3, true, 3, 1, false}, 23);   /* depthwise */
    check_grad((struct cv){2, 3, 5, 6, 6, 3, 1, 1, 2, 3, true, 3, 1, false}, 24);   /* depthwise x2, dilated */
}

static void test_gradcheck_shapes(void)
{
    check_grad((struct cv){1, 3, 5, 6, 4, 3, 1, 1, 1, 1, true, 3, 1, false}, 31);  /* batch 1 */
    check_grad((struct cv){3, 2, 4, 5, 3, 3, 1, 1, 1, 1, true, 3, 1, false}, 32);  /* batch 3 */
    check_grad((struct cv){2, 2, 3, 9, 3, 3, 1, 0, 1, 1, true, 3, 0, false}, 33);  /* wide */
    check_grad((struct cv){2, 2, 9, 3, 3, 3, 2, 1, 1, 1, true, 3, 1, false}, 34);  /* tall, strided */
    check_grad((struct cv){2, 1, 4, 4, 1, 4, 1, 0, 1, 1, true, 4, 0, false}, 35);  /* kernel = image: 1x1 out */
}

/* Rectangular kernels and padding (size_h, size_w, padding_h, padding_w), in both formats:
 * PyTorch's kernel_size=(1, 3), padding=(0, 1) over (N, C, 1, L) token sequences first. */
static void test_gradcheck_rect(void)
{
    static const struct cv cases[] = {
        /* N, C, H, W, F, k, s, p, d, g, bias, kw, pw */
        {2, 3, 1, 9, 4, 1, 1, 0, 1, 1, true, 3, 1, false},   /* 1x3, padding (0, 1): length kept */
        {2, 3, 1, 8, 4, 1, 2, 0, 1, 1, false, 3, 1, false},  /* 1x3 stride 2 */
        {2, 4, 1, 10, 4, 1, 1, 0, 1, 4, true, 3, 1, false},  /* 1x3 depthwise */
        {2, 3, 7, 4, 4, 3, 1, 1, 1, 1, true, 1, 0, false},   /* 3x1, padding (1, 0) */
        {2, 3, 6, 8, 4, 2, 1, 0, 1, 1, true, 5, 2, false},   /* 2x5, padding (0, 2) */
        {2, 4, 5, 9, 4, 2, 2, 1, 2, 2, true, 5, 3, false},   /* 2x5 strided, dilated, grouped, padding (1, 3) */
    };
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++)
            check_grad_as(cases[i], 41 + (uint64_t)(10 * f + i), f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS);
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
    int64_t OH = out_h(c, c->H), OW = out_w(c, c->W), Cg = c->C / c->g, Fg = c->F / c->g;
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t f = 0; f < c->F; f++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double s = b ? b[f] : 0.0;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t kh = 0; kh < KH(c); kh++)
                            for (int64_t kw = 0; kw < KW(c); kw++) {
                                int64_t ih = oh * c->s - PH(c) + kh * c->d, iw = ow * c->s - PW(c) + kw * c->d;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                int64_t ch = f / Fg * Cg + ci;
                                s += (double)x[IDX4(n, ch, ih, iw, c->C, c->H, c->W)] *
                                     w[IDX4(f, ci, kh, kw, Cg, KH(c), KW(c))];
                            }
                    y[IDX4(n, f, oh, ow, c->F, OH, OW)] = s;
                }
}

/* dx, dw, db (each may be NULL) from dy, written (=). */
static void naive_backward(const struct cv *c, const float *x, const float *w, const float *dy, double *dx,
                           double *dw, double *db)
{
    int64_t OH = out_h(c, c->H), OW = out_w(c, c->W), Cg = c->C / c->g, Fg = c->F / c->g;
    memset(dx, 0, (size_t)(c->N * c->C * c->H * c->W) * sizeof *dx);
    memset(dw, 0, (size_t)(c->F * Cg * KH(c) * KW(c)) * sizeof *dw);
    memset(db, 0, (size_t)c->F * sizeof *db);
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t f = 0; f < c->F; f++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double g = dy[IDX4(n, f, oh, ow, c->F, OH, OW)];
                    db[f] += g;
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t kh = 0; kh < KH(c); kh++)
                            for (int64_t kw = 0; kw < KW(c); kw++) {
                                int64_t ih = oh * c->s - PH(c) + kh * c->d, iw = ow * c->s - PW(c) + kw * c->d;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                int64_t xi = IDX4(n, f / Fg * Cg + ci, ih, iw, c->C, c->H, c->W);
                                int64_t wi = IDX4(f, ci, kh, kw, Cg, KH(c), KW(c));
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
    CU_ASSERT_FATAL(t->type->infer_shape(&t->l, &xs, 1, &ys) == GLIA_OK);
    struct glia_shape want_ys = S4(c->N, c->F, out_h(c, c->H), out_w(c, c->W));
    CU_ASSERT_FATAL(glia_shape_equal(&ys, &want_ys));
    uint64_t want_flops = 2ull * (uint64_t)(c->N * c->F * want_ys.dim[2] * want_ys.dim[3] * (c->C / c->g) * KH(c) * KW(c)) +
                          (c->relu ? (uint64_t)glia_shape_numel(&want_ys) : 0);
    CU_ASSERT_EQUAL(t->type->flops(&t->l, &xs, 1), want_flops);
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
    for (int64_t i = 0; c->relu && i < ny; i++) ry[i] = fmax(ry[i], 0.0);

    const struct glia_tensor *in[1] = {x};
    for (int train = 0; train < 2; train++) {
        fill(y, NAN);
        struct glia_fwd a = {in, 1, y, NULL, train, 7, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        CU_ASSERT_EQUAL(t->kernel->forward(&t->l, &a), GLIA_OK);
        CU_ASSERT(close_all(train ? "y (train)" : "y (eval)", glia_tensor_f32(y), ry, 0, ny));
    }
    /* the relu's backward: the convolution's for dy where the layer's output is positive */
    float *dym = malloc((size_t)ny * sizeof *dym);
    for (int64_t i = 0; i < ny; i++) dym[i] = c->relu && !(glia_tensor_f32(y)[i] > 0) ? 0.0f : glia_tensor_f32(dy)[i];
    naive_backward(c, glia_tensor_f32(x), w, dym, rdx, rdw, rdb);
    free(dym);
    /* write mode over NaN garbage, then accumulate mode over the result */
    struct glia_tensor *din[1] = {dx};
    bool acc[1] = {false};
    struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    fill(dx, NAN);
    for (int i = 0; i < t->l.n_params; i++) {
        fill(t->l.params[i].grad, NAN);
        t->l.params[i].grad_unset = true;
    }
    CU_ASSERT_EQUAL(t->kernel->backward(&t->l, &ba), GLIA_OK);
    CU_ASSERT(close_all("dx", glia_tensor_f32(dx), rdx, 0, nx));
    CU_ASSERT(close_all("dw", glia_tensor_f32(pw->grad), rdw, 0, nw));
    if (pb) CU_ASSERT(close_all("db", glia_tensor_f32(pb->grad), rdb, 0, c->F));
    acc[0] = true;
    for (int i = 0; i < t->l.n_params; i++) t->l.params[i].grad_unset = false;
    CU_ASSERT_EQUAL(t->kernel->backward(&t->l, &ba), GLIA_OK);
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
    CU_ASSERT_EQUAL(t->kernel->backward(&t->l, &ba), GLIA_OK);
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
    /* parameters: weight (F, C/g, kh, kw) then bias (F), PyTorch's uniform init */
    CU_ASSERT_EQUAL_FATAL(t.l.n_params, c.bias ? 2 : 1);
    struct glia_shape ws = S4(c.F, c.C / c.g, KH(&c), KW(&c));
    CU_ASSERT(glia_shape_equal(&t.l.params[0].shape, &ws));
    CU_ASSERT_STRING_EQUAL(t.l.params[0].name, "weight");
    double a = 1.0 / sqrt((double)(c.C / c.g * KH(&c) * KW(&c)));
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

/* activation = relu: y = relu(conv(x) + b), dy masked by y > 0; gradients, values (both formats, batch changes) */
static void test_activation_relu(void)
{
    /* N, C, H, W, F, k, s, p, d, g, bias, kw, pw, relu */
    static const struct cv cases[] = {
        {2, 3, 5, 6, 4, 3, 1, 1, 1, 1, true, 3, 1, true},
        {2, 4, 5, 6, 6, 3, 2, 1, 1, 2, false, 3, 1, true},
        {2, 3, 6, 7, 4, 2, 2, 1, 2, 1, true, 2, 1, true},
    };
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 3; i++) check_grad_as(cases[i], 201 + (uint64_t)i, f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS);
    check_values((struct cv){2, 3, 5, 6, 4, 3, 1, 1, 1, 1, true, 3, 1, true}, 211);
    check_values((struct cv){1, 16, 12, 12, 32, 3, 1, 1, 1, 1, true, 3, 1, true}, 212);  /* JIT paths, post-op */
    check_values((struct cv){2, 6, 9, 11, 12, 5, 3, 3, 2, 3, false, 5, 3, true}, 213);
}

static void test_values_against_naive(void)
{
    /* N, C, H, W, F, k, s, p, d, g, bias, kw, pw */
    check_values((struct cv){2, 3, 5, 6, 4, 1, 1, 0, 1, 1, true, 1, 0, false}, 101);
    check_values((struct cv){2, 3, 5, 6, 4, 3, 1, 1, 1, 1, true, 3, 1, false}, 102);
    check_values((struct cv){3, 3, 7, 6, 4, 3, 2, 1, 1, 1, false, 3, 1, false}, 103);
    check_values((struct cv){2, 3, 8, 7, 5, 3, 1, 2, 2, 1, true, 3, 2, false}, 104);
    check_values((struct cv){2, 4, 6, 5, 6, 3, 2, 1, 1, 2, true, 3, 1, false}, 105);
    check_values((struct cv){2, 8, 9, 9, 8, 3, 1, 1, 1, 8, true, 3, 1, false}, 106);  /* depthwise */
    check_values((struct cv){2, 6, 9, 11, 12, 5, 3, 3, 2, 3, false, 5, 3, false}, 107);
    check_values((struct cv){1, 16, 12, 12, 32, 3, 1, 1, 1, 1, true, 3, 1, false}, 108);  /* bigger: JIT paths */
}

/* The same layer on other input sizes: H and W may change too (fully convolutional). */
static void test_input_size_changes(void)
{
    struct cv c = {2, 3, 6, 6, 4, 3, 2, 1, 1, 1, true, 3, 1, false};
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
    CU_ASSERT_EQUAL(t.type->infer_shape(&t.l, &bad, 1, &os), GLIA_ESHAPE);
    bad = S4(2, 3, 6, 0);
    CU_ASSERT_EQUAL(t.type->infer_shape(&t.l, &bad, 1, &os), GLIA_ESHAPE);
    bad = glia_shape_make(3, (int64_t[]){2, 3, 6});
    CU_ASSERT_EQUAL(t.type->infer_shape(&t.l, &bad, 1, &os), GLIA_ESHAPE);
    unbuild(&t);
    glia_context_free(ctx);
}

/* Shapes where oneDNN picks its blocked layouts (nChw16c activations, OIhw16i16o weights):
 * the layer reorders between them and the plain tensors, and accumulates through them. */
static void test_blocked_layouts(void)
{
    /* N, C, H, W, F, k, s, p, d, g, bias, kw, pw */
    check_values((struct cv){3, 1, 14, 14, 32, 3, 1, 0, 1, 1, true, 3, 0, false}, 111);   /* first layer: plain src */
    check_values((struct cv){2, 32, 12, 12, 64, 3, 1, 0, 1, 1, true, 3, 0, false}, 112);  /* all blocked */
    check_values((struct cv){2, 20, 9, 11, 24, 3, 2, 1, 1, 1, false, 3, 1, false}, 113);  /* channels padded to 16 */
    check_values((struct cv){2, 32, 8, 8, 48, 1, 1, 0, 1, 1, true, 1, 0, false}, 114);    /* 1x1 */
    check_values((struct cv){2, 32, 10, 10, 64, 3, 1, 1, 1, 2, true, 3, 1, false}, 115);  /* groups of 16 */
    check_values((struct cv){2, 32, 9, 9, 32, 3, 1, 1, 1, 32, true, 3, 1, false}, 116);   /* depthwise, blocked */
}

/* Rectangular kernels and padding against the naive convolution, blocked layouts included. */
static void test_values_rect(void)
{
    /* N, C, H, W, F, k, s, p, d, g, bias, kw, pw */
    check_values((struct cv){2, 3, 1, 12, 5, 1, 1, 0, 1, 1, true, 3, 1, false}, 121);
    check_values((struct cv){2, 32, 1, 20, 32, 1, 1, 0, 1, 1, true, 3, 1, false}, 122);  /* blocked */
    check_values((struct cv){2, 16, 9, 6, 24, 3, 1, 1, 1, 1, false, 1, 0, false}, 123);
    check_values((struct cv){2, 6, 8, 11, 6, 2, 2, 1, 1, 3, true, 5, 2, false}, 124);
    check_values((struct cv){2, 32, 3, 17, 32, 1, 1, 0, 1, 32, true, 5, 2, false}, 125);  /* depthwise, blocked */
}

/* Backward-weights reuses the input a training forward reordered; an eval forward or a
 * training forward of another tensor in between must not leave it reading a stale copy. */
static void test_kept_input(void)
{
    struct cv c = {2, 32, 10, 10, 32, 3, 1, 1, 1, 1, true, 3, 1, false};
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
    struct glia_bwd ba = {in1, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    for (int round = 0; round < 3; round++) {
        /* 0: train x1, eval x2; 1: train x2; 2: train x1 (the kept copy is right) */
        struct glia_fwd f1 = {round == 1 ? in2 : in1, 1, y, NULL, true, 7, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        struct glia_fwd f2 = {in2, 1, y, NULL, false, 7, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        CU_ASSERT_EQUAL(t.kernel->forward(&t.l, &f1), GLIA_OK);
        if (round == 0) CU_ASSERT_EQUAL(t.kernel->forward(&t.l, &f2), GLIA_OK);
        fill(dx, NAN);
        for (int i = 0; i < t.l.n_params; i++) {
            fill(t.l.params[i].grad, NAN);
            t.l.params[i].grad_unset = true;
        }
        CU_ASSERT_EQUAL(t.kernel->backward(&t.l, &ba), GLIA_OK);
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

/* ---- the per-shape primitive cache ---- */

/* A token convolution whose primitives use blocked layouts (32 channels): reorders, and the
 * training forward's reordered input kept for backward-weights. */
static const char *cache_ini = "[c]\ntype = conv2d\nfilters = 32\nsize_h = 1\nsize_w = 3\npadding_w = 1\n";

/* The tensors of one call of shape (N, 32, 1, L) in format f, viewed at the start of the four
 * buffers of one set (x, y, dx, dy): calls of every shape share addresses, as a model's
 * activations do when the batch or the length changes. x and dy random. */
struct call_io {
    struct glia_tensor *x, *y, *dx, *dy;
};

static void io_at(struct glia_tensor *const set[4], int64_t N, int64_t L, bool nhwc, struct call_io *io)
{
    enum glia_memory_format f = nhwc ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
    struct glia_shape xs = S4(N, 32, 1, L);
    struct glia_tensor **t[4] = {&io->x, &io->y, &io->dx, &io->dy};
    for (int i = 0; i < 4; i++) CU_ASSERT_FATAL(glia_tensor_view_as(set[i], 0, &xs, f, t[i]) == GLIA_OK);
    fill(io->x, 0);
    fill(io->dy, 0);
}

static void io_free(struct call_io *io)
{
    glia_tensor_release(io->x);
    glia_tensor_release(io->y);
    glia_tensor_release(io->dx);
    glia_tensor_release(io->dy);
}

static void io_forward(struct built *t, struct call_io *io, bool train)
{
    const struct glia_tensor *in[1] = {io->x};
    struct glia_fwd a = {in, 1, io->y, NULL, train, 7, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    fill(io->y, NAN);
    CU_ASSERT_EQUAL(t->kernel->forward(&t->l, &a), GLIA_OK);
}

/* Backward writing the input and parameter gradients (over NaN). */
static void io_backward(struct built *t, struct call_io *io)
{
    const struct glia_tensor *in[1] = {io->x};
    struct glia_tensor *din[1] = {io->dx};
    bool acc[1] = {false};
    struct glia_bwd a = {in, 1, io->y, io->dy, din, acc, NULL, NULL, NULL, NULL, false};
    fill(io->dx, NAN);
    for (int i = 0; i < t->l.n_params; i++) {
        fill(t->l.params[i].grad, NAN);
        t->l.params[i].grad_unset = true;
    }
    CU_ASSERT_EQUAL(t->kernel->backward(&t->l, &a), GLIA_OK);
}

static bool same_bits(const char *what, const struct glia_tensor *a, const struct glia_tensor *b)
{
    bool same = !memcmp(glia_tensor_f32(a), glia_tensor_f32(b), (size_t)glia_tensor_numel(a) * sizeof(float));
    if (!same) printf("\n  %s differs from a fresh layer's", what);
    return same;
}

/* A fresh layer with t's weights, made for io's shape and format alone, computes the same bits
 * as t did: the output (eval: of an eval forward), else also the input and parameter gradients
 * of a training forward and a backward that writes them. */
static void expect_fresh(struct built *t, const struct call_io *io, bool eval)
{
    struct built F;
    layer_build(ctx, cache_ini, &io->x->shape, 1, &F);
    for (int i = 0; i < t->l.n_params; i++)
        memcpy(glia_tensor_f32(F.l.params[i].value), glia_tensor_f32(t->l.params[i].value),
               glia_tensor_nbytes(t->l.params[i].value));
    enum glia_memory_format f = glia_tensor_memory_format(io->x);
    struct call_io r = {tensor_as(F.b, io->x->shape, f), tensor_as(F.b, io->y->shape, f),
                        tensor_as(F.b, io->dx->shape, f), tensor_as(F.b, io->dy->shape, f)};
    memcpy(glia_tensor_f32(r.x), glia_tensor_f32(io->x), glia_tensor_nbytes(io->x));
    memcpy(glia_tensor_f32(r.dy), glia_tensor_f32(io->dy), glia_tensor_nbytes(io->dy));
    io_forward(&F, &r, !eval);
    CU_ASSERT(same_bits("y", io->y, r.y));
    if (!eval) {
        io_backward(&F, &r);
        CU_ASSERT(same_bits("dx", io->dx, r.dx));
        for (int i = 0; i < t->l.n_params; i++)
            CU_ASSERT(same_bits(t->l.params[i].name, t->l.params[i].grad, F.l.params[i].grad));
    }
    io_free(&r);
    layer_unbuild(&F);
}

/* One layer called on shapes that change from call to call (lengths, batch, format; more
 * shapes than it caches), training forwards whose backwards come after other shapes' calls:
 * every result has the bits of a fresh layer made for that call's shape. */
static void test_shape_cache(void)
{
    lcg_state = 13;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    struct built t;
    build(&t, cache_ini, S4(2, 32, 1, 12));
    struct glia_tensor *set[2][4];
    struct glia_shape big = glia_shape_make(1, (int64_t[]){3 * 32 * 1 * 14});
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++) CU_ASSERT_FATAL(glia_tensor_new(t.b, GLIA_F32, &big, &set[k][i]) == GLIA_OK);
    struct call_io a, b;
    /* one shape at a time: lengths 12, 7, 12 again, a batch change, channels_last, 7 again */
    static const int64_t one[][3] = {{2, 12, 0}, {2, 7, 0}, {2, 12, 0}, {3, 12, 0}, {2, 12, 1}, {2, 7, 0}};
    for (int i = 0; i < (int)(sizeof one / sizeof one[0]); i++) {
        io_at(set[0], one[i][0], one[i][1], one[i][2], &a);
        io_forward(&t, &a, true);
        io_backward(&t, &a);
        expect_fresh(&t, &a, false);
        io_free(&a);
    }
    /* two training forwards, then their backwards (in the forwards' order) */
    io_at(set[0], 2, 12, false, &a);
    io_at(set[1], 2, 7, false, &b);
    io_forward(&t, &a, true);
    io_forward(&t, &b, true);
    io_backward(&t, &a);
    expect_fresh(&t, &a, false);
    io_backward(&t, &b);
    expect_fresh(&t, &b, false);
    /* an eval forward of another shape between a training forward and its backward */
    io_forward(&t, &a, true);
    io_forward(&t, &b, false);
    expect_fresh(&t, &b, true);
    io_backward(&t, &a);
    expect_fresh(&t, &a, false);
    io_free(&b);
    /* more shapes than the cache holds between a training forward and its backward (its entry
     * is replaced), then every length twice over */
    io_forward(&t, &a, true);
    for (int64_t L = 3; L <= 10; L++) {
        io_at(set[1], 2, L, false, &b);
        io_forward(&t, &b, true);
        io_backward(&t, &b);
        io_free(&b);
    }
    io_backward(&t, &a);
    expect_fresh(&t, &a, false);
    io_free(&a);
    for (int round = 0; round < 2; round++)
        for (int64_t L = 3; L <= 14; L++) {
            io_at(set[0], 2, L, false, &a);
            io_forward(&t, &a, true);
            io_backward(&t, &a);
            expect_fresh(&t, &a, false);
            io_free(&a);
        }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++) glia_tensor_release(set[k][i]);
    unbuild(&t);
    glia_context_free(ctx);
}

/* ---- configuration ---- */

/* size_h, size_w, padding_h, padding_w default to size and padding, and win over them. */
static void test_rect_keys(void)
{
    static const struct {
        const char *keys;
        struct glia_shape in, weight, out;
    } cases[] = {
        {"size = 3\nsize_w = 5\npadding = 1\npadding_h = 0\n", {4, {2, 3, 6, 9}}, {4, {4, 3, 3, 5}},
         {4, {2, 4, 4, 7}}},
        {"size_h = 1\nsize_w = 3\npadding_w = 1\n", {4, {2, 3, 1, 10}}, {4, {4, 3, 1, 3}}, {4, {2, 4, 1, 10}}},
        {"size = 2\nsize_h = 2\npadding_w = 2\n", {4, {2, 3, 5, 5}}, {4, {4, 3, 2, 2}}, {4, {2, 4, 4, 8}}},
        {"size_w = 1\npadding = 1\n", {4, {2, 3, 5, 5}}, {4, {4, 3, 3, 1}}, {4, {2, 4, 5, 7}}},
    };
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        char ini[256];
        snprintf(ini, sizeof ini, "[c]\ntype = conv2d\nfilters = 4\n%s", cases[i].keys);
        struct built t;
        struct glia_shape os;
        build(&t, ini, cases[i].in);
        CU_ASSERT(glia_shape_equal(&t.l.params[0].shape, &cases[i].weight));
        CU_ASSERT_FATAL(t.type->infer_shape(&t.l, &cases[i].in, 1, &os) == GLIA_OK);
        CU_ASSERT(glia_shape_equal(&os, &cases[i].out));
        int64_t fan_in = 3 * cases[i].weight.dim[2] * cases[i].weight.dim[3];
        CU_ASSERT_DOUBLE_EQUAL(t.l.params[0].init.a, 1.0 / sqrt((double)fan_in), 1e-12);
        uint64_t flops = 2ull * (uint64_t)(glia_shape_numel(&os) * fan_in);
        CU_ASSERT_EQUAL(t.type->flops(&t.l, &cases[i].in, 1), flops);
        unbuild(&t);
    }
    glia_context_free(ctx);
}


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
    expect_error("[c]\ntype = conv2d\nfilters = 4\nsize_h = 3\nsize_w = 1\n", S4(2, 3, 1, 8), GLIA_ESHAPE,
                 "gradcheck.ini:1: [c] conv2d output would be empty: input 1x8 with size 3x1, dilation 1, padding 0 "
                 "gives 0x8");
    expect_error("[c]\ntype = conv2d\nfilters = 4\nsize = 1\nsize_w = 6\npadding_w = 1\n", S4(2, 3, 4, 3), GLIA_ESHAPE,
                 "gradcheck.ini:1: [c] conv2d output would be empty: input 4x3 with size 1x6, dilation 1, padding 0x1 "
                 "gives 4x0");
    /* the schema's bounds and requirements (checked by the core) */
    expect_error("[c]\ntype = conv2d\n", S4(2, 3, 5, 6), GLIA_ECONFIG, "filters");
    expect_error("[c]\ntype = conv2d\nfilters = 4\nstride = 0\n", S4(2, 3, 5, 6), GLIA_ECONFIG,
                 "gradcheck.ini:4: [c] stride: 0 is out of range");
    expect_error("[c]\ntype = conv2d\nfilters = 4\npadding = -1\n", S4(2, 3, 5, 6), GLIA_ECONFIG,
                 "gradcheck.ini:4: [c] padding: -1 is out of range");
    expect_error("[c]\ntype = conv2d\nfilters = 4\ndilation = 0\n", S4(2, 3, 5, 6), GLIA_ECONFIG,
                 "gradcheck.ini:4: [c] dilation: 0 is out of range");
    expect_error("[c]\ntype = conv2d\nfilters = 4\nsize_w = 0\n", S4(2, 3, 5, 6), GLIA_ECONFIG,
                 "gradcheck.ini:4: [c] size_w: 0 is out of range");
    expect_error("[c]\ntype = conv2d\nfilters = 4\n\npadding_h = -1\n", S4(2, 3, 5, 6), GLIA_ECONFIG,
                 "gradcheck.ini:5: [c] padding_h: -1 is out of range");
}

GLIA_TEST_MAIN("conv", GLIA_TEST(test_gradcheck_basic), GLIA_TEST(test_gradcheck_stride_dilation),
               GLIA_TEST(test_gradcheck_groups), GLIA_TEST(test_gradcheck_shapes),
               GLIA_TEST(test_values_against_naive), GLIA_TEST(test_input_size_changes),
               GLIA_TEST(test_blocked_layouts), GLIA_TEST(test_kept_input), GLIA_TEST(test_gradcheck_rect),
               GLIA_TEST(test_values_rect), GLIA_TEST(test_shape_cache), GLIA_TEST(test_rect_keys),
               GLIA_TEST(test_config_errors), GLIA_TEST(test_activation_relu))
