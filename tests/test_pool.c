/* tests/test_pool.c — the pooling layers maxpool2d, avgpool2d and global_avgpool: gradient checks,
 * forward and backward values against naive references written here (maxpool2d and avgpool2d also in
 * channels_last), agreement of the two memory formats, configuration errors. Not training. */
#include <math.h>
#include <string.h>
#include "layerutil.h"

static struct glia_context *ctx;

/* this file's layers build in their own context */
static void build(const char *ini, const struct glia_shape *in, struct built *B)
{
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    layer_build(ctx, ini, in, 1, B);
}

static void unbuild(struct built *B)
{
    layer_unbuild(B);
    glia_context_free(ctx);
}

/* ---- gradient checks ---- */

static void check_ok(const char *ini, struct glia_shape in, uint64_t seed)
{
    struct glia_gradcheck_report r;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    glia_status st = glia_layer_gradcheck(ctx, ini, &in, 1, seed, 2e-2, &r);
    if (st) printf("\n  %s\n", glia_context_error(ctx));
    CU_ASSERT_EQUAL(st, GLIA_OK);
    CU_ASSERT(r.n_checked > 0);
    CU_ASSERT(r.n_skipped * 10 <= r.n_checked);  /* ties within eps are rare in N(0,1) inputs */
    glia_context_free(ctx);
}

static void test_maxpool_gradcheck(void)
{
    check_ok("[p]\ntype = maxpool2d\n", S(4, 1, 1, 4, 4), 1);
    check_ok("[p]\ntype = maxpool2d\n", S(4, 3, 2, 5, 7), 2);                                /* odd: floor */
    check_ok("[p]\ntype = maxpool2d\nsize = 3\nstride = 2\n", S(4, 3, 2, 7, 6), 3);          /* overlapping */
    check_ok("[p]\ntype = maxpool2d\nsize = 3\nstride = 1\npadding = 1\n", S(4, 1, 2, 5, 4), 4);
    check_ok("[p]\ntype = maxpool2d\nsize = 3\nstride = 2\npadding = 1\n", S(4, 3, 1, 6, 5), 5);
    check_ok("[p]\ntype = maxpool2d\nsize = 2\npadding = 1\n", S(4, 3, 2, 3, 5), 6);
    check_ok("[p]\ntype = maxpool2d\nsize = 4\nstride = 3\npadding = 2\n", S(4, 1, 1, 9, 7), 7);
    check_ok("[p]\ntype = maxpool2d\nsize = 1\nstride = 2\n", S(4, 3, 2, 5, 5), 8);
}

static void test_avgpool_gradcheck(void)
{
    check_ok("[p]\ntype = avgpool2d\n", S(4, 1, 1, 4, 4), 11);
    check_ok("[p]\ntype = avgpool2d\n", S(4, 3, 2, 5, 7), 12);
    check_ok("[p]\ntype = avgpool2d\nsize = 3\nstride = 2\n", S(4, 3, 2, 7, 6), 13);
    check_ok("[p]\ntype = avgpool2d\nsize = 3\nstride = 1\npadding = 1\n", S(4, 1, 2, 5, 4), 14);
    check_ok("[p]\ntype = avgpool2d\nsize = 3\nstride = 2\npadding = 1\n", S(4, 3, 1, 6, 5), 15);
    check_ok("[p]\ntype = avgpool2d\nsize = 4\nstride = 3\npadding = 2\n", S(4, 1, 1, 9, 7), 16);
}

static void test_global_avgpool_gradcheck(void)
{
    check_ok("[g]\ntype = global_avgpool\n", S(4, 1, 3, 4, 5), 21);
    check_ok("[g]\ntype = global_avgpool\n", S(4, 3, 2, 7, 7), 22);
    check_ok("[g]\ntype = global_avgpool\n", S(4, 3, 5, 1, 1), 23);
}

/* ---- channels_last: gradient checks and agreement with NCHW over the configurations above ---- */

/* gradient check of the layer of `ini` on channels_last tensors, then format_diff (training forward and
 * backward, write and accumulate) at most tol: selection and the NCHW summation order make it exact */
static void check_nhwc(const char *ini, struct glia_shape in, uint64_t seed, double tol)
{
    gradcheck_nhwc(ini, &in, 1, seed, 2e-2);
    for (int acc = 0; acc < 2; acc++) {
        double d = format_diff(ini, &in, 1, acc, seed);
        if (!(d <= tol)) printf("\n  %s: formats differ by %g (accumulate %d)", ini, d, acc);
        CU_ASSERT(d <= tol);
    }
}

static void test_maxpool_nhwc(void)
{
    check_nhwc("[p]\ntype = maxpool2d\n", S(4, 1, 1, 4, 4), 1, 0);
    check_nhwc("[p]\ntype = maxpool2d\n", S(4, 3, 2, 5, 7), 2, 0);
    check_nhwc("[p]\ntype = maxpool2d\nsize = 3\nstride = 2\n", S(4, 3, 2, 7, 6), 3, 0);
    check_nhwc("[p]\ntype = maxpool2d\nsize = 3\nstride = 1\npadding = 1\n", S(4, 1, 2, 5, 4), 4, 0);
    check_nhwc("[p]\ntype = maxpool2d\nsize = 3\nstride = 2\npadding = 1\n", S(4, 3, 1, 6, 5), 5, 0);
    check_nhwc("[p]\ntype = maxpool2d\nsize = 2\npadding = 1\n", S(4, 3, 2, 3, 5), 6, 0);
    check_nhwc("[p]\ntype = maxpool2d\nsize = 4\nstride = 3\npadding = 2\n", S(4, 1, 1, 9, 7), 7, 0);
    check_nhwc("[p]\ntype = maxpool2d\nsize = 1\nstride = 2\n", S(4, 3, 2, 5, 5), 8, 0);
    /* more channels than a vector: the channel loop's remainder */
    check_nhwc("[p]\ntype = maxpool2d\nsize = 3\nstride = 2\npadding = 1\n", S(4, 2, 19, 7, 6), 9, 0);
}

static void test_avgpool_nhwc(void)
{
    check_nhwc("[p]\ntype = avgpool2d\n", S(4, 1, 1, 4, 4), 11, 1e-6);
    check_nhwc("[p]\ntype = avgpool2d\n", S(4, 3, 2, 5, 7), 12, 1e-6);
    check_nhwc("[p]\ntype = avgpool2d\nsize = 3\nstride = 2\n", S(4, 3, 2, 7, 6), 13, 1e-6);
    check_nhwc("[p]\ntype = avgpool2d\nsize = 3\nstride = 1\npadding = 1\n", S(4, 1, 2, 5, 4), 14, 1e-6);
    check_nhwc("[p]\ntype = avgpool2d\nsize = 3\nstride = 2\npadding = 1\n", S(4, 3, 1, 6, 5), 15, 1e-6);
    check_nhwc("[p]\ntype = avgpool2d\nsize = 4\nstride = 3\npadding = 2\n", S(4, 1, 1, 9, 7), 16, 1e-6);
    check_nhwc("[p]\ntype = avgpool2d\nsize = 3\nstride = 2\npadding = 1\n", S(4, 2, 19, 7, 6), 17, 1e-6);
}

/* ---- values: the layer alone on the CPU backend against naive references ---- */


/* Builds the one layer of `ini` for input shape `in` like the gradient checker does. */


enum kind { MAX, AVG, GLOBAL };

/* Output size by counting window positions (not the layer's formula). */
static int64_t n_windows(int64_t len, int k, int s, int p)
{
    int64_t n = 0;
    while (n * s + k <= len + 2 * p) n++;
    return n;
}

/* Naive pooling of one (H, W) plane through an explicitly padded copy: y (OH, OW) and, for MAX,
 * the plane offset of the first max in row-major window order. */
static void ref_plane(enum kind kind, const float *x, int64_t H, int64_t W, int k, int s, int p, float *y,
                      int64_t *arg)
{
    int64_t HP = H + 2 * p, WP = W + 2 * p, OH = n_windows(H, k, s, p), OW = n_windows(W, k, s, p);
    double *xp = malloc((size_t)(HP * WP) * sizeof *xp);
    for (int64_t h = 0; h < HP; h++)
        for (int64_t w = 0; w < WP; w++) {
            bool in = h >= p && h < H + p && w >= p && w < W + p;
            xp[h * WP + w] = in ? x[(h - p) * W + (w - p)] : kind == MAX ? -INFINITY : 0.0;
        }
    for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
            double best = -INFINITY, sum = 0;
            int64_t bi = -1;
            for (int i = 0; i < k; i++)
                for (int j = 0; j < k; j++) {
                    int64_t h = oh * s + i, w = ow * s + j;
                    double v = xp[h * WP + w];
                    sum += v;
                    if (v > best) {
                        best = v;
                        bi = (h - p) * W + (w - p);
                    }
                }
            y[oh * OW + ow] = (float)(kind == MAX ? best : sum / (k * k));
            if (arg) arg[oh * OW + ow] = bi;
        }
    free(xp);
}

/* Naive gradient of one plane: dx (H, W) = sum over outputs of dy routed per the window rule. */
static void ref_plane_grad(enum kind kind, const int64_t *arg, const float *dy, int64_t H, int64_t W, int k, int s,
                           int p, double *dx)
{
    int64_t OH = n_windows(H, k, s, p), OW = n_windows(W, k, s, p);
    for (int64_t i = 0; i < H * W; i++) dx[i] = 0;
    for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
            double g = dy[oh * OW + ow];
            if (kind == MAX) {
                dx[arg[oh * OW + ow]] += g;
                continue;
            }
            for (int i = 0; i < k; i++)
                for (int j = 0; j < k; j++) {
                    int64_t h = oh * s + i - p, w = ow * s + j - p;
                    if (h >= 0 && h < H && w >= 0 && w < W) dx[h * W + w] += g / (k * k);
                }
        }
}

static uint32_t lcg(uint32_t *st)
{
    *st = *st * 1103515245u + 12345u;
    return *st >> 8;
}

static bool close_to(double got, double want) { return isfinite(got) && fabs(got - want) <= 1e-5 * fmax(1.0, fabs(want)); }

/* dst = src unless they are one tensor (the layer runs on the NCHW tensors themselves) */
static void convert(struct glia_tensor *dst, const struct glia_tensor *src)
{
    if (dst != src) CU_ASSERT_FATAL(glia_tensor_convert(dst, src, false) == GLIA_OK);
}

/* A tensor for the layer in format f: t itself when contiguous (or not 4-D), else a new channels_last one. */
static struct glia_tensor *layer_tensor(struct built *B, struct glia_tensor *t, enum glia_memory_format f)
{
    return f == GLIA_CONTIGUOUS || t->shape.ndim != 4 ? glia_tensor_retain(t) : tensor_as(B->b, t->shape, f);
}

/* Runs the layer of `ini` (kind; k, s, p as its keys say) on shape (N, C, H, W) with seeded
 * inputs (ties: small integers, so windows often hold equal maxima) and compares the training
 * forward, the backward in write mode over NaN garbage and in accumulate mode, the eval forward,
 * and a NULL din with the naive references. The layer's 4-D tensors are in format f (converted
 * from and to the NCHW ones the references use). */
static void check_values(const char *ini, enum kind kind, int k, int s, int p, struct glia_shape sh, bool ties,
                         uint32_t seed, enum glia_memory_format f)
{
    struct built B;
    build(ini, &sh, &B);
    int64_t N = sh.dim[0], C = sh.dim[1], H = sh.dim[2], W = sh.dim[3];
    int64_t OH = kind == GLOBAL ? 1 : n_windows(H, k, s, p), OW = kind == GLOBAL ? 1 : n_windows(W, k, s, p);
    struct glia_shape os, want_os = kind == GLOBAL ? S(2, N, C, 0, 0) : S(4, N, C, OH, OW);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &sh, 1, &os) == GLIA_OK);
    CU_ASSERT_FATAL(glia_shape_equal(&os, &want_os));
    CU_ASSERT_PTR_NOT_NULL(B.type->flops);
    if (B.type->flops) CU_ASSERT(B.type->flops(&B.l, &sh, 1) > 0);
    struct glia_tensor *x, *y, *y2, *dy, *dx;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &dx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &y) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &y2) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &dy) == GLIA_OK);
    float *xd = glia_tensor_f32(x), *dyd = glia_tensor_f32(dy), *dxd = glia_tensor_f32(dx);
    for (int64_t i = 0; i < glia_tensor_numel(x); i++)
        xd[i] = ties ? (float)((int)(lcg(&seed) % 5) - 2) : (float)(lcg(&seed) % 20001) / 10000.0f - 1.0f;
    for (int64_t i = 0; i < glia_tensor_numel(dy); i++) dyd[i] = (float)(lcg(&seed) % 2001) / 1000.0f - 1.0f;

    /* references, plane by plane (global: the mean is an (H, W) window of stride 1) */
    int64_t planes = N * C, HW = H * W, OHW = OH * OW;
    int rk = kind == GLOBAL ? 0 : k;
    float *ry = malloc((size_t)glia_tensor_numel(y) * sizeof *ry);
    double *rdx = malloc((size_t)glia_tensor_numel(x) * sizeof *rdx);
    int64_t *arg = malloc((size_t)glia_tensor_numel(y) * sizeof *arg);
    for (int64_t pl = 0; pl < planes; pl++) {
        if (kind == GLOBAL) {
            double sum = 0;
            for (int64_t i = 0; i < HW; i++) sum += xd[pl * HW + i];
            ry[pl] = (float)(sum / (double)HW);
            for (int64_t i = 0; i < HW; i++) rdx[pl * HW + i] = (double)dyd[pl] / (double)HW;
            continue;
        }
        ref_plane(kind, xd + pl * HW, H, W, rk, s, p, ry + pl * OHW, arg + pl * OHW);
        ref_plane_grad(kind, arg + pl * OHW, dyd + pl * OHW, H, W, rk, s, p, rdx + pl * HW);
    }

    struct glia_tensor *lx = layer_tensor(&B, x, f), *ly = layer_tensor(&B, y, f), *ly2 = layer_tensor(&B, y2, f);
    struct glia_tensor *ldy = layer_tensor(&B, dy, f), *ldx = layer_tensor(&B, dx, f);
    convert(lx, x);
    convert(ldy, dy);
    const struct glia_tensor *in[1] = {lx};
    struct glia_fwd fa = {in, 1, ly, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
    convert(y, ly);
    int bad = 0;
    for (int64_t i = 0; i < glia_tensor_numel(y); i++)
        if (!close_to(glia_tensor_f32(y)[i], ry[i]) && bad++ < 3)
            printf("\n  %s (%s): y[%lld] = %.9g, want %.9g", ini, glia_memory_format_name(f), (long long)i,
                   glia_tensor_f32(y)[i], ry[i]);
    CU_ASSERT_EQUAL(bad, 0);

    struct glia_tensor *din[1] = {ldx};
    bool acc[1] = {false};
    struct glia_bwd ba = {in, 1, ly, ldy, din, acc, NULL, NULL, NULL, NULL, false};
    for (int64_t i = 0; i < glia_tensor_numel(dx); i++) dxd[i] = NAN;
    convert(ldx, dx);
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_OK);
    convert(dx, ldx);
    bad = 0;
    for (int64_t i = 0; i < glia_tensor_numel(dx); i++)
        if (!close_to(dxd[i], rdx[i]) && bad++ < 3)
            printf("\n  %s (%s): dx[%lld] = %.9g, want %.9g (write)", ini, glia_memory_format_name(f), (long long)i,
                   dxd[i], rdx[i]);
    CU_ASSERT_EQUAL(bad, 0);
    acc[0] = true;
    for (int64_t i = 0; i < glia_tensor_numel(dx); i++) dxd[i] = 0.5f;
    convert(ldx, dx);
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_OK);
    convert(dx, ldx);
    bad = 0;
    for (int64_t i = 0; i < glia_tensor_numel(dx); i++)
        if (!close_to(dxd[i], 0.5 + rdx[i]) && bad++ < 3)
            printf("\n  %s (%s): dx[%lld] = %.9g, want %.9g (accumulate)", ini, glia_memory_format_name(f),
                   (long long)i, dxd[i], 0.5 + rdx[i]);
    CU_ASSERT_EQUAL(bad, 0);
    din[0] = NULL;  /* an input that needs no gradient: skipped */
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_OK);

    fa.out = ly2;
    fa.train = false;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
    CU_ASSERT_EQUAL(memcmp(ly->data, ly2->data, glia_tensor_nbytes(ly)), 0);

    free(ry);
    free(rdx);
    free(arg);
    glia_tensor_release(x);
    glia_tensor_release(y);
    glia_tensor_release(y2);
    glia_tensor_release(dy);
    glia_tensor_release(dx);
    glia_tensor_release(lx);
    glia_tensor_release(ly);
    glia_tensor_release(ly2);
    glia_tensor_release(ldy);
    glia_tensor_release(ldx);
    unbuild(&B);
}

static void test_maxpool_values(void)
{
    for (int f = GLIA_CONTIGUOUS; f <= GLIA_CHANNELS_LAST; f++)
        for (int ties = 0; ties < 2; ties++) {
            check_values("[p]\ntype = maxpool2d\n", MAX, 2, 2, 0, S(4, 1, 1, 4, 4), ties, 1, f);
            check_values("[p]\ntype = maxpool2d\n", MAX, 2, 2, 0, S(4, 3, 2, 7, 5), ties, 2, f);
            check_values("[p]\ntype = maxpool2d\nsize = 3\nstride = 2\n", MAX, 3, 2, 0, S(4, 3, 2, 9, 8), ties, 3, f);
            check_values("[p]\ntype = maxpool2d\nsize = 3\nstride = 1\npadding = 1\n", MAX, 3, 1, 1, S(4, 2, 3, 6, 7),
                         ties, 4, f);
            check_values("[p]\ntype = maxpool2d\nsize = 3\nstride = 2\npadding = 1\n", MAX, 3, 2, 1, S(4, 3, 2, 7, 6),
                         ties, 5, f);
            check_values("[p]\ntype = maxpool2d\nsize = 5\nstride = 2\npadding = 2\n", MAX, 5, 2, 2, S(4, 1, 1, 5, 9),
                         ties, 6, f);
        }
}

static void test_avgpool_values(void)
{
    for (int f = GLIA_CONTIGUOUS; f <= GLIA_CHANNELS_LAST; f++) {
        check_values("[p]\ntype = avgpool2d\n", AVG, 2, 2, 0, S(4, 1, 1, 4, 4), false, 11, f);
        check_values("[p]\ntype = avgpool2d\n", AVG, 2, 2, 0, S(4, 3, 2, 7, 5), false, 12, f);
        check_values("[p]\ntype = avgpool2d\nsize = 3\nstride = 2\n", AVG, 3, 2, 0, S(4, 3, 2, 9, 8), false, 13, f);
        check_values("[p]\ntype = avgpool2d\nsize = 3\nstride = 1\npadding = 1\n", AVG, 3, 1, 1, S(4, 2, 3, 6, 7),
                     false, 14, f);
        check_values("[p]\ntype = avgpool2d\nsize = 3\nstride = 2\npadding = 1\n", AVG, 3, 2, 1, S(4, 3, 2, 7, 6),
                     false, 15, f);
        check_values("[p]\ntype = avgpool2d\nsize = 5\nstride = 2\npadding = 2\n", AVG, 5, 2, 2, S(4, 1, 1, 5, 9),
                     false, 16, f);
    }
}

static void test_global_avgpool_values(void)
{
    check_values("[g]\ntype = global_avgpool\n", GLOBAL, 0, 0, 0, S(4, 1, 3, 4, 5), false, 21, GLIA_CONTIGUOUS);
    check_values("[g]\ntype = global_avgpool\n", GLOBAL, 0, 0, 0, S(4, 3, 2, 7, 7), false, 22, GLIA_CONTIGUOUS);
    check_values("[g]\ntype = global_avgpool\n", GLOBAL, 0, 0, 0, S(4, 2, 4, 1, 1), false, 23, GLIA_CONTIGUOUS);
}

/* One plane (1, 1, H, W) through the layer: training forward into y, then backward of dy = 1
 * into dx (write mode). */
static void run_plane(const char *ini, int64_t H, int64_t W, const float *x, float *y, int64_t ny, float *dx)
{
    struct built B;
    struct glia_shape sh = S(4, 1, 1, H, W), os;
    build(ini, &sh, &B);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &sh, 1, &os) == GLIA_OK);
    CU_ASSERT_FATAL(glia_shape_numel(&os) == ny);
    struct glia_tensor *tx, *ty, *tdy, *tdx;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &tx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &tdx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &ty) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &os, &tdy) == GLIA_OK);
    memcpy(glia_tensor_f32(tx), x, (size_t)(H * W) * sizeof *x);
    for (int64_t i = 0; i < ny; i++) glia_tensor_f32(tdy)[i] = 1.0f;
    const struct glia_tensor *in[1] = {tx};
    struct glia_fwd fa = {in, 1, ty, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
    struct glia_tensor *din[1] = {tdx};
    bool acc[1] = {false};
    struct glia_bwd ba = {in, 1, ty, tdy, din, acc, NULL, NULL, NULL, NULL, false};
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_OK);
    memcpy(y, glia_tensor_f32(ty), (size_t)ny * sizeof *y);
    memcpy(dx, glia_tensor_f32(tdx), (size_t)(H * W) * sizeof *dx);
    glia_tensor_release(tx);
    glia_tensor_release(ty);
    glia_tensor_release(tdy);
    glia_tensor_release(tdx);
    unbuild(&B);
}

static void expect_floats(const char *what, const float *got, const float *want, int n)
{
    for (int i = 0; i < n; i++) {
        bool ok = close_to(got[i], want[i]);
        if (!ok) printf("\n  %s[%d] = %.9g, want %.9g", what, i, got[i], want[i]);
        CU_ASSERT(ok);
    }
}

static void test_hand_computed(void)
{
    /* x = 0..15 on a 4x4 plane; PyTorch gives the same */
    float x[16], y[4], dx[16];
    for (int i = 0; i < 16; i++) x[i] = (float)i;
    run_plane("[p]\ntype = maxpool2d\n", 4, 4, x, y, 4, dx);
    expect_floats("maxpool2d y", y, (const float[]){5, 7, 13, 15}, 4);
    expect_floats("maxpool2d dx", dx, (const float[]){0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1}, 16);
    run_plane("[p]\ntype = maxpool2d\nsize = 3\nstride = 2\npadding = 1\n", 4, 4, x, y, 4, dx);
    expect_floats("maxpool2d pad y", y, (const float[]){5, 7, 13, 15}, 4);
    run_plane("[p]\ntype = avgpool2d\n", 4, 4, x, y, 4, dx);
    expect_floats("avgpool2d y", y, (const float[]){2.5f, 4.5f, 10.5f, 12.5f}, 4);
    expect_floats("avgpool2d dx", dx, (const float[]){.25f, .25f, .25f, .25f, .25f, .25f, .25f, .25f, .25f, .25f, .25f,
                                                      .25f, .25f, .25f, .25f, .25f}, 16);
    /* padding counts in the divisor: 9 always */
    run_plane("[p]\ntype = avgpool2d\nsize = 3\nstride = 2\npadding = 1\n", 4, 4, x, y, 4, dx);
    expect_floats("avgpool2d pad y", y, (const float[]){10.0f / 9, 24.0f / 9, 51.0f / 9, 90.0f / 9}, 4);
    expect_floats("avgpool2d pad dx", dx,
                  (const float[]){1.0f / 9, 2.0f / 9, 1.0f / 9, 1.0f / 9, 2.0f / 9, 4.0f / 9, 2.0f / 9, 2.0f / 9,
                                  1.0f / 9, 2.0f / 9, 1.0f / 9, 1.0f / 9, 1.0f / 9, 2.0f / 9, 1.0f / 9, 1.0f / 9},
                  16);
    run_plane("[g]\ntype = global_avgpool\n", 4, 4, x, y, 1, dx);
    expect_floats("global_avgpool y", y, (const float[]){7.5f}, 1);
    expect_floats("global_avgpool dx", dx, (const float[]){.0625f, .0625f, .0625f, .0625f, .0625f, .0625f, .0625f, .0625f,
                                                           .0625f, .0625f, .0625f, .0625f, .0625f, .0625f, .0625f, .0625f},
                  16);
}

/* NaN wins a window, and the last NaN in row-major order takes the gradient, in the 2x2 path and
 * in the general one (the CUDA impl follows the same rule). */
static void test_maxpool_nan(void)
{
    float x[16] = {1, NAN, 3, 4, 5, 6, NAN, NAN, 0, 0, 0, 0, 0, 0, 0, 0}, y[4], dx[16];
    run_plane("[p]\ntype = maxpool2d\n", 4, 4, x, y, 4, dx);
    CU_ASSERT(isnan(y[0]) && isnan(y[1]) && y[2] == 0 && y[3] == 0);
    expect_floats("nan 2x2 dx", dx, (const float[]){0, 1, 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0}, 16);
    float x2[6] = {1, NAN, NAN, 5, 6, 2}, y2[2], dx2[6];
    run_plane("[p]\ntype = maxpool2d\nstride = 1\n", 2, 3, x2, y2, 2, dx2);
    CU_ASSERT(isnan(y2[0]) && isnan(y2[1]));
    expect_floats("nan stride 1 dx", dx2, (const float[]){0, 1, 1, 0, 0, 0}, 6);
}

static void test_maxpool_ties_and_overlap(void)
{
    /* ties: each 2x2 window of a constant 3x3 plane (stride 1) sends its gradient to its first
     * element in row-major order, as PyTorch does */
    float ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, y[4], dx[9];
    run_plane("[p]\ntype = maxpool2d\nstride = 1\n", 3, 3, ones, y, 4, dx);
    expect_floats("ties y", y, (const float[]){1, 1, 1, 1}, 4);
    expect_floats("ties dx", dx, (const float[]){1, 1, 0, 1, 1, 0, 0, 0, 0}, 9);
    /* overlap: the centre is the max of all four windows and gets the sum of their gradients */
    float centre[9] = {0, 0, 0, 0, 9, 0, 0, 0, 0};
    run_plane("[p]\ntype = maxpool2d\nstride = 1\n", 3, 3, centre, y, 4, dx);
    expect_floats("overlap y", y, (const float[]){9, 9, 9, 9}, 4);
    expect_floats("overlap dx", dx, (const float[]){0, 0, 0, 0, 4, 0, 0, 0, 0}, 9);
    /* -inf padding: a negative plane keeps its own values, never the border's */
    float neg[9] = {-5, -4, -3, -2, -1, -6, -7, -8, -9};
    float y9[9];
    run_plane("[p]\ntype = maxpool2d\nsize = 3\nstride = 1\npadding = 1\n", 3, 3, neg, y9, 9, dx);
    expect_floats("padding y", y9, (const float[]){-1, -1, -1, -1, -1, -1, -1, -1, -1}, 9);
    expect_floats("padding dx", dx, (const float[]){0, 0, 0, 0, 9, 0, 0, 0, 0}, 9);
}

static void test_maxpool_eval_keeps_nothing(void)
{
    /* an eval forward leaves nothing for backward: backward after it is refused */
    struct built B;
    struct glia_shape sh = S(4, 2, 1, 4, 4), os;
    build("[p]\ntype = maxpool2d\n", &sh, &B);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &sh, 1, &os) == GLIA_OK);
    struct glia_tensor *x, *y, *dy, *dx;
    CU_ASSERT_FATAL(glia_tensor_zeros(B.b, GLIA_F32, &sh, &x) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_zeros(B.b, GLIA_F32, &sh, &dx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_zeros(B.b, GLIA_F32, &os, &y) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_zeros(B.b, GLIA_F32, &os, &dy) == GLIA_OK);
    const struct glia_tensor *in[1] = {x};
    struct glia_tensor *din[1] = {dx};
    bool acc[1] = {false};
    struct glia_fwd fa = {in, 1, y, NULL, false, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd ba = {in, 1, y, dy, din, acc, NULL, NULL, NULL, NULL, false};
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), "[p] maxpool2d backward needs a training forward"));
    fa.train = true;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_OK);
    /* a bigger batch later grows what training keeps */
    struct glia_shape sh3 = S(4, 3, 1, 4, 4), os3;
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &sh3, 1, &os3) == GLIA_OK);
    CU_ASSERT(os3.dim[0] == 3 && os3.dim[2] == 2 && os3.dim[3] == 2);
    struct glia_tensor *x3, *y3, *dy3, *dx3;
    CU_ASSERT_FATAL(glia_tensor_zeros(B.b, GLIA_F32, &sh3, &x3) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_zeros(B.b, GLIA_F32, &sh3, &dx3) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_zeros(B.b, GLIA_F32, &os3, &y3) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_zeros(B.b, GLIA_F32, &os3, &dy3) == GLIA_OK);
    in[0] = x3;
    din[0] = dx3;
    fa.out = y3;
    ba.out = y3;
    ba.dout = dy3;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa), GLIA_OK);
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba), GLIA_OK);
    glia_tensor_release(x);
    glia_tensor_release(y);
    glia_tensor_release(dy);
    glia_tensor_release(dx);
    glia_tensor_release(x3);
    glia_tensor_release(y3);
    glia_tensor_release(dy3);
    glia_tensor_release(dx3);
    unbuild(&B);
}

static void test_maxpool_formats_alternate(void)
{
    /* one instance called in NCHW and NHWC in turn: backward uses the indices of the training forward
     * just before it, and refuses those of the other format */
    struct built B;
    struct glia_shape sh = S(4, 2, 3, 5, 6), os;
    build("[p]\ntype = maxpool2d\nsize = 3\nstride = 2\npadding = 1\n", &sh, &B);
    CU_ASSERT_FATAL(B.type->infer_shape(&B.l, &sh, 1, &os) == GLIA_OK);
    struct glia_tensor *t[2][4];  /* [format][x, y, dy, dx] */
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 4; i++) t[f][i] = tensor_as(B.b, i == 0 || i == 3 ? sh : os, f);
    uint32_t seed = 7;
    float *xd = glia_tensor_f32(t[0][0]), *dyd = glia_tensor_f32(t[0][2]);
    for (int64_t i = 0; i < glia_shape_numel(&sh); i++) xd[i] = (float)(lcg(&seed) % 20001) / 10000.0f - 1.0f;
    for (int64_t i = 0; i < glia_shape_numel(&os); i++) dyd[i] = (float)(lcg(&seed) % 2001) / 1000.0f - 1.0f;
    convert(t[1][0], t[0][0]);
    convert(t[1][2], t[0][2]);
    const struct glia_tensor *in[2][1] = {{t[0][0]}, {t[1][0]}};
    struct glia_tensor *din[2][1] = {{t[0][3]}, {t[1][3]}};
    bool acc[1] = {false};
    struct glia_fwd fa[2] = {{in[0], 1, t[0][1], NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, {in[1], 1, t[1][1], NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}};
    struct glia_bwd ba[2] = {{in[0], 1, t[0][1], t[0][2], din[0], acc, NULL, NULL, NULL, NULL, false},
                             {in[1], 1, t[1][1], t[1][2], din[1], acc, NULL, NULL, NULL, NULL, false}};
    int64_t n = glia_shape_numel(&sh);
    float *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
    struct glia_tensor *back;
    CU_ASSERT_FATAL(glia_tensor_new(B.b, GLIA_F32, &sh, &back) == GLIA_OK);
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa[0]), GLIA_OK);
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba[0]), GLIA_OK);
    memcpy(want, glia_tensor_f32(t[0][3]), (size_t)n * sizeof *want);
    for (int round = 0; round < 2; round++)
        for (int f = 1; f >= 0; f--) {
            CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa[f]), GLIA_OK);
            CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba[!f]), GLIA_EINVAL);
            CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(ctx), f ? "memory format (channels_last, got contiguous)"
                                                                     : "memory format (contiguous, got channels_last)"));
            CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba[f]), GLIA_OK);
            convert(back, t[f][3]);
            memcpy(got, glia_tensor_f32(back), (size_t)n * sizeof *got);
            CU_ASSERT_EQUAL(memcmp(got, want, (size_t)n * sizeof *got), 0);
        }
    /* an eval forward in the other format drops the indices */
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa[1]), GLIA_OK);
    fa[0].train = false;
    CU_ASSERT_EQUAL(B.kernel->forward(&B.l, &fa[0]), GLIA_OK);
    CU_ASSERT_EQUAL(B.kernel->backward(&B.l, &ba[1]), GLIA_EINVAL);
    free(want);
    free(got);
    glia_tensor_release(back);
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 4; i++) glia_tensor_release(t[f][i]);
    unbuild(&B);
}

/* ---- configuration errors ---- */


static void test_config_errors(void)
{
    expect_error("[p]\ntype = maxpool2d\n", S(3, 2, 4, 4, 0), GLIA_ESHAPE,
                 "gradcheck.ini:1: [p] maxpool2d expects (N, C, H, W) input, got 2x4x4");
    expect_error("[p]\ntype = avgpool2d\n", S(2, 2, 3, 0, 0), GLIA_ESHAPE,
                 "gradcheck.ini:1: [p] avgpool2d expects (N, C, H, W) input, got 2x3");
    expect_error("[g]\ntype = global_avgpool\n", S(3, 2, 3, 4, 0), GLIA_ESHAPE,
                 "gradcheck.ini:1: [g] global_avgpool expects (N, C, H, W) input, got 2x3x4");
    expect_error("[p]\ntype = maxpool2d\nsize = 3\npadding = 2\n", S(4, 2, 1, 8, 8), GLIA_ECONFIG,
                 "gradcheck.ini:4: [p] padding: 2 is more than half the window size 3");
    expect_error("[p]\ntype = avgpool2d\npadding = 2\n", S(4, 2, 1, 8, 8), GLIA_ECONFIG,
                 "gradcheck.ini:3: [p] padding: 2 is more than half the window size 2");
    expect_error("[p]\ntype = maxpool2d\nsize = 5\npadding = 1\n", S(4, 2, 1, 2, 6), GLIA_ESHAPE,
                 "gradcheck.ini:3: [p] size: window 5x5 is larger than the padded input 4x8");
    /* a defaulted key is placed at its section */
    expect_error("[p]\ntype = avgpool2d\n", S(4, 2, 1, 1, 5), GLIA_ESHAPE,
                 "gradcheck.ini:1: [p] size: window 2x2 is larger than the padded input 1x5");
    expect_error("[p]\ntype = maxpool2d\nstride = -1\n", S(4, 2, 1, 4, 4), GLIA_ECONFIG, "gradcheck.ini:3: [p] stride: ");
    expect_error("[p]\ntype = avgpool2d\nsize = 0\n", S(4, 2, 1, 4, 4), GLIA_ECONFIG, "gradcheck.ini:3: [p] size: ");
}

GLIA_TEST_MAIN("pool", GLIA_TEST(test_maxpool_gradcheck), GLIA_TEST(test_avgpool_gradcheck),
               GLIA_TEST(test_global_avgpool_gradcheck), GLIA_TEST(test_maxpool_nhwc), GLIA_TEST(test_avgpool_nhwc),
               GLIA_TEST(test_maxpool_values), GLIA_TEST(test_avgpool_values), GLIA_TEST(test_global_avgpool_values),
               GLIA_TEST(test_hand_computed), GLIA_TEST(test_maxpool_nan), GLIA_TEST(test_maxpool_ties_and_overlap),
               GLIA_TEST(test_maxpool_eval_keeps_nothing), GLIA_TEST(test_maxpool_formats_alternate),
               GLIA_TEST(test_config_errors))
