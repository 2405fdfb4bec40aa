/* tests/test_cuda_conv.c — the cuDNN conv2d (impl "cudnn") against the CPU one on a GPU: shapes
 * (3x3, stride 2, 1x1, 5x5, groups, depthwise, dilation, no bias, batch 1, odd channels, one
 * input channel, 1x1 output, rectangular kernels and padding: 1x3 over token sequences, 3x1,
 * 2x5; outputs large enough for the bias gradient's several splits and channel tiles), every precision, both memory formats, write and accumulate, cudnn_benchmark on and off,
 * a zero workspace limit, [runtime] deterministic (the same bits twice), eval forward, batch-size and length changes, no input gradient (the
 * first layer), the autotuner's workspace given back. Every element of every result is held to an
 * error bound from its own terms (their count and magnitudes), whatever algorithm the autotuner
 * picks: a busy GPU makes it pick others.
 * Exits 77 (skipped) without a usable GPU or without the CUDA build. Not a speed test. */
#include <dlfcn.h>
#include "cudautil.h"

/* One convolution: input (N, C, H, W), filters F, kernel k (height) x kw (width), stride s,
 * padding p (of H) and pw (of W), dilation d, groups g. */
struct cv {
    int64_t N, C, H, W, F, k, s, p, d, g;
    bool bias;
    int64_t kw, pw;
};

static const struct cv cases[] = {
    /* N, C, H, W, F, k, s, p, d, g, bias, kw, pw */
    {2, 5, 9, 7, 8, 3, 1, 1, 1, 1, true, 3, 1},    /* 3x3 same, odd channels */
    {3, 3, 11, 10, 6, 3, 2, 1, 1, 1, true, 3, 1},  /* stride 2 */
    {2, 7, 6, 5, 16, 1, 1, 0, 1, 1, true, 1, 0},   /* 1x1 */
    {2, 4, 7, 7, 8, 1, 2, 0, 1, 1, false, 1, 0},   /* 1x1 stride 2 (a shortcut), no bias */
    {2, 3, 9, 9, 4, 5, 1, 2, 1, 1, true, 5, 2},    /* 5x5 */
    {2, 6, 7, 7, 6, 3, 1, 1, 1, 3, true, 3, 1},    /* groups */
    {2, 8, 6, 6, 8, 3, 1, 1, 1, 8, true, 3, 1},    /* depthwise */
    {2, 3, 9, 8, 4, 3, 1, 2, 2, 1, false, 3, 2},   /* dilation 2, no bias */
    {1, 3, 8, 8, 5, 3, 1, 1, 1, 1, true, 3, 1},    /* batch 1 */
    {2, 1, 8, 8, 5, 3, 1, 1, 1, 1, true, 3, 1},    /* one input channel: its bytes are the same in both formats */
    {2, 4, 3, 3, 7, 3, 1, 0, 1, 1, true, 3, 0},    /* 1x1 output: its bytes are the same in both formats */
    {2, 6, 1, 17, 8, 1, 1, 0, 1, 1, true, 3, 1},   /* 1x3, padding (0, 1): a token convolution */
    {2, 5, 7, 6, 4, 3, 1, 1, 1, 1, false, 1, 0},   /* 3x1, padding (1, 0) */
    {2, 4, 6, 9, 6, 2, 2, 0, 1, 2, true, 5, 2},    /* 2x5 strided, grouped, padding (0, 2) */
    {4, 2, 40, 40, 5, 3, 1, 1, 1, 1, true, 3, 1},  /* 6400 positions a channel: the bias gradient adds splits */
    {3, 2, 30, 30, 40, 3, 1, 1, 1, 1, true, 3, 1}, /* 40 filters: two channel tiles of the NHWC bias gradient */
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

static int64_t out_h(const struct cv *c, int64_t in) { return (in + 2 * c->p - c->d * (c->k - 1) - 1) / c->s + 1; }
static int64_t out_w(const struct cv *c, int64_t in) { return (in + 2 * c->pw - c->d * (c->kw - 1) - 1) / c->s + 1; }

/* Square cases write size and padding, rectangular ones size_h, size_w, padding_h, padding_w. */
static void cv_ini(const struct cv *c, char *buf, size_t n)
{
    int len = snprintf(buf, n, "[c]\ntype = conv2d\nfilters = %lld\nstride = %lld\ndilation = %lld\ngroups = %lld\n"
                               "bias = %s\n",
                       (long long)c->F, (long long)c->s, (long long)c->d, (long long)c->g, c->bias ? "on" : "off");
    if (c->k == c->kw && c->p == c->pw)
        snprintf(buf + len, n - (size_t)len, "size = %lld\npadding = %lld\n", (long long)c->k, (long long)c->p);
    else
        snprintf(buf + len, n - (size_t)len, "size_h = %lld\nsize_w = %lld\npadding_h = %lld\npadding_w = %lld\n",
                 (long long)c->k, (long long)c->kw, (long long)c->p, (long long)c->pw);
}

/* ---- error bounds ----
 * The CPU (fp32) and the GPU compute each result as a sum of terms: out = bias + sum x w,
 * din = sum dy w, dweight = sum x dy, dbias = sum dy, each plus the 1 already there when
 * accumulating. Their difference is bounded element by element by what that element's terms t
 * (computed here in double) allow:
 *  - tf32, bf16 and fp16 round both factors of every product to unit roundoff u_in (2^-11, 2^-8,
 *    2^-11): an error sum t (d1 + d2), |d| <= u_in, random with a standard deviation of about
 *    0.8 u_in sqrt(sum t^2), or biased by about u_in |sum t| where the hardware truncates;
 *  - bf16 and fp16 store the result once more rounded: u_out |sum t|;
 *  - both sides add in fp32 in an order and by an algorithm (direct, GEMM, FFT, Winograd, split
 *    reductions) that the autotuner picks, differently on a busy GPU: about u_32 sqrt(n) sqrt(sum t^2)
 *    for n terms of random signs added one by one or in parts, and u_32 sum |t| times the growth
 *    of the transforms (FFT, Winograd) that first mix the terms.
 * bound = 8 (u_in (sqrt(sum t^2) + |sum t|) + u_out |sum t|) + 64 u_32 (sqrt(n) sqrt(sum t^2) + sum |t|):
 * about ten standard deviations of the roundings of inputs and results, and a factor 64 for the
 * order and the transforms. In fp32 a wrong index, a missed or a doubled term is off by a whole
 * term, many times the bound at these sizes; the other precisions' bounds are their roundings. */
struct terms {
    double *sum, *abs, *sq;
    int64_t *n, len;
};

static void terms_init(struct terms *t, int64_t len)
{
    t->len = len;
    t->sum = calloc((size_t)len, sizeof(double));
    t->abs = calloc((size_t)len, sizeof(double));
    t->sq = calloc((size_t)len, sizeof(double));
    t->n = calloc((size_t)len, sizeof(int64_t));
    CU_ASSERT_FATAL(t->sum && t->abs && t->sq && t->n);
}

static void terms_free(struct terms *t) { free(t->sum), free(t->abs), free(t->sq), free(t->n); }

static void terms_add(struct terms *t, int64_t i, double v)
{
    t->sum[i] += v;
    t->abs[i] += fabs(v);
    t->sq[i] += v * v;
    t->n[i]++;
}

/* The terms of out (N, F, OH, OW), din (N, C, H, W), dweight (F, C/g, kh, kw) and dbias (F) of
 * case c from host x (N, C, H, W), w (F, C/g, kh, kw), b (F) or NULL, dy (N, F, OH, OW) or NULL
 * (no backward), the gradients starting at `start` (0 written, 1 accumulated). */
static void conv_terms(struct terms r[4], const struct cv *c, const float *x, const float *w, const float *b,
                       const float *dy, double start)
{
    const int64_t OH = out_h(c, c->H), OW = out_w(c, c->W), Cg = c->C / c->g, Fg = c->F / c->g;
    terms_init(&r[0], c->N * c->F * OH * OW);
    terms_init(&r[1], c->N * c->C * c->H * c->W);
    terms_init(&r[2], c->F * Cg * c->k * c->kw);
    terms_init(&r[3], c->F);
    for (int64_t n = 0; n < c->N; n++)
        for (int64_t f = 0; f < c->F; f++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    const int64_t o = ((n * c->F + f) * OH + oh) * OW + ow;
                    const double g = dy ? dy[o] : 0;
                    if (b) terms_add(&r[0], o, b[f]);
                    if (b && dy) terms_add(&r[3], f, g);
                    for (int64_t ci = 0; ci < Cg; ci++)
                        for (int64_t i = 0; i < c->k; i++)
                            for (int64_t j = 0; j < c->kw; j++) {
                                int64_t ih = oh * c->s - c->p + i * c->d, iw = ow * c->s - c->pw + j * c->d;
                                if (ih < 0 || ih >= c->H || iw < 0 || iw >= c->W) continue;
                                int64_t xi = ((n * c->C + f / Fg * Cg + ci) * c->H + ih) * c->W + iw;
                                int64_t wi = ((f * Cg + ci) * c->k + i) * c->kw + j;
                                terms_add(&r[0], o, (double)x[xi] * w[wi]);
                                if (!dy) continue;
                                terms_add(&r[1], xi, g * w[wi]);
                                terms_add(&r[2], wi, (double)x[xi] * g);
                            }
                }
    for (int q = 1; q < 4 && start != 0; q++)
        for (int64_t i = 0; i < r[q].len; i++) terms_add(&r[q], i, start);
}

/* The error bound above for one element at precision p. */
static double bound_of(const struct terms *t, int64_t i, enum glia_precision p)
{
    double u_in = p == GLIA_PRECISION_FP32 ? 0 : p == GLIA_PRECISION_BF16 ? 0x1p-8 : 0x1p-11;
    double u_out = p == GLIA_PRECISION_BF16 ? 0x1p-8 : p == GLIA_PRECISION_FP16 ? 0x1p-11 : 0;
    double v = fabs(t->sum[i]);
    double q = sqrt(t->sq[i]);
    return 8 * (u_in * (q + v) + u_out * v) + 64 * 0x1p-24 * (sqrt((double)t->n[i]) * q + t->abs[i]);
}

/* A tensor's values on the host in logical (contiguous) order; the caller frees them. */
static float *host_values(const struct glia_tensor *t)
{
    struct glia_tensor *h = cuda_get(t), *c = tensor_as(cuda_cpu, t->shape, GLIA_CONTIGUOUS);
    CU_ASSERT_FATAL(glia_tensor_convert(c, h, false) == GLIA_OK);
    size_t n = glia_tensor_nbytes(c);
    float *v = malloc(n ? n : 1);
    CU_ASSERT_FATAL(v != NULL);
    memcpy(v, glia_tensor_f32(c), n);
    glia_tensor_release(h);
    glia_tensor_release(c);
    return v;
}

/* Whether every element of the CPU's and the GPU's result `what` differ by at most its bound;
 * the worst element is named when one does not. */
static bool within_bound(const char *label, const char *what, const struct glia_tensor *cpu,
                         const struct glia_tensor *gpu, const struct terms *t, enum glia_precision p)
{
    float *a = host_values(cpu), *b = host_values(gpu);
    CU_ASSERT_FATAL(glia_tensor_numel(cpu) == t->len);
    int64_t worst = -1;
    double ratio = 0;
    for (int64_t i = 0; i < t->len; i++) {
        double d = fabs((double)a[i] - b[i]), r = d / bound_of(t, i, p);
        if (d == 0) r = 0;  /* exact, also where the bound is 0 (an input no window reads) */
        if (!(r <= ratio)) ratio = r, worst = i;
        if (isnan(r)) break;
    }
    bool ok = ratio <= 1;
    if (!ok)
        printf("\n  %s: %s[%lld] cpu %.9g gpu %.9g: differ by %.3g, bound %.3g (%lld terms, sum %.6g, "
               "sum |t| %.6g)\n", label, what, (long long)worst, a[worst], b[worst], fabs((double)a[worst] - b[worst]),
               bound_of(t, worst, p), (long long)t->n[worst], t->sum[worst], t->abs[worst]);
    free(a), free(b);
    return ok;
}

/* The GPU backend's runtime options (cuda_compare then sets the precision of each case). */
static void configure(enum glia_precision p, bool benchmark, size_t workspace_limit)
{
    struct glia_runtime_options o = cuda_gpu->options;
    o.precision = p;
    o.cudnn_benchmark = benchmark;
    o.workspace_limit = workspace_limit;
    o.deterministic = false;
    CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &o) == GLIA_OK);
}

#define DEFAULT_WORKSPACE ((size_t)1 << 30)

/* Random N(0, scale^2) host values of shape s; the caller frees them. */
static float *random_values(struct glia_rng *r, struct glia_shape s, float scale)
{
    int64_t n = glia_shape_numel(&s);
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    CU_ASSERT_FATAL(v != NULL);
    cuda_randn(r, v, n, scale);
    return v;
}

/* A tensor of shape s on b in format f filled with v (gradients to be written over: NaN). */
static struct glia_tensor *filled_tensor(struct glia_backend *b, struct glia_shape s, enum glia_memory_format f, float v)
{
    int64_t n = glia_shape_numel(&s);
    float *h = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) h[i] = v;
    struct glia_tensor *t = cuda_put(b, s, f, h);
    free(h);
    return t;
}

/* What one pass runs: a training forward and backward, or an eval forward; the backward writes
 * its gradients over NaN or adds them onto 1 (acc), and computes an input gradient or not (the
 * first layer of a model). */
struct pass {
    bool eval, acc, no_din;
};

/* One pass of case c through the CPU layer C and the CUDA layer G (both built for c, equal
 * weights): fresh random input and output gradient from rng, the GPU's tensors in format f, each
 * result checked against the CPU's within its error bound at the backend's precision p. */
static void conv_pass(const struct cv *c, struct cuda_built *C, struct cuda_built *G, enum glia_precision p,
                      enum glia_memory_format f, struct pass k, struct glia_rng *rng, const char *ini)
{
    struct glia_shape in = S(4, c->N, c->C, c->H, c->W), os = S(4, c->N, c->F, out_h(c, c->H), out_w(c, c->W));
    char label[800], s[64];
    snprintf(label, sizeof label, "%s  input %s, %s, %s, %s%s%s", ini, glia_shape_str(&in, s, sizeof s),
             glia_precision_name(p), glia_memory_format_name(f), k.eval ? "eval" : "train", k.acc ? ", accumulate" : "",
             k.no_din ? ", no input gradient" : "");
    float *xv = random_values(rng, in, 1.0f), *dyv = random_values(rng, os, 1.0f);
    struct glia_tensor *xc = cuda_put(cuda_cpu, in, GLIA_CONTIGUOUS, xv), *xg = cuda_put(cuda_gpu, in, f, xv);
    struct glia_tensor *dyc = cuda_put(cuda_cpu, os, GLIA_CONTIGUOUS, dyv), *dyg = cuda_put(cuda_gpu, os, f, dyv);
    struct glia_tensor *yc = tensor_as(cuda_cpu, os, GLIA_CONTIGUOUS), *yg = tensor_as(cuda_gpu, os, f);
    float start = k.acc ? 1.0f : NAN;
    struct glia_tensor *dxc = filled_tensor(cuda_cpu, in, GLIA_CONTIGUOUS, start), *dxg = filled_tensor(cuda_gpu, in, f, start);
    const struct glia_tensor *inc[1] = {xc}, *ing[1] = {xg};
    struct glia_fwd fc = {inc, 1, yc, NULL, !k.eval, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, fg = {ing, 1, yg, NULL, !k.eval, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_FATAL(C->kernel->forward(&C->l, &fc) == GLIA_OK);
    glia_status st = G->kernel->forward(&G->l, &fg);
    if (st) printf("\n  cuda forward: %s\n", glia_context_error(cuda_ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    if (!k.eval) {
        for (int q = 0; q < C->l.n_params; q++) {
            struct glia_param *pc = &C->l.params[q], *pg = &G->l.params[q];
            float *g = glia_tensor_f32(pc->grad);
            for (int64_t i = 0; i < glia_tensor_numel(pc->grad); i++) g[i] = start;
            CU_ASSERT_FATAL(glia_tensor_from_host(pg->grad, g, glia_tensor_nbytes(pc->grad)) == GLIA_OK);
            pc->grad_unset = pg->grad_unset = !k.acc;
        }
        bool acc[1] = {k.acc};
        struct glia_tensor *dinc[1] = {k.no_din ? NULL : dxc}, *ding[1] = {k.no_din ? NULL : dxg};
        struct glia_bwd bc = {inc, 1, yc, dyc, dinc, acc, NULL, NULL, NULL, NULL, false}, bg = {ing, 1, yg, dyg, ding, acc, NULL, NULL, NULL, NULL, false};
        CU_ASSERT_FATAL(C->kernel->backward(&C->l, &bc) == GLIA_OK);
        st = G->kernel->backward(&G->l, &bg);
        if (st) printf("\n  cuda backward: %s\n", glia_context_error(cuda_ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
    }
    const float *wv = glia_tensor_f32(C->l.params[0].value), *bv = c->bias ? glia_tensor_f32(C->l.params[1].value) : NULL;
    struct terms t[4];
    conv_terms(t, c, xv, wv, bv, k.eval ? NULL : dyv, k.acc ? 1.0 : 0.0);
    CU_ASSERT(within_bound(label, "out", yc, yg, &t[0], p));
    if (!k.eval && !k.no_din) CU_ASSERT(within_bound(label, "din", dxc, dxg, &t[1], p));
    if (!k.eval) CU_ASSERT(within_bound(label, "dweight", C->l.params[0].grad, G->l.params[0].grad, &t[2], p));
    if (!k.eval && c->bias) CU_ASSERT(within_bound(label, "dbias", C->l.params[1].grad, G->l.params[1].grad, &t[3], p));
    for (int q = 0; q < 4; q++) terms_free(&t[q]);
    struct glia_tensor *all[] = {xc, xg, dyc, dyg, yc, yg, dxc, dxg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) glia_tensor_release(all[i]);
    free(xv), free(dyv);
}

/* Builds the CPU and the CUDA layer of case c with equal random weights (N(0, 0.25)) from rng. */
static void conv_build(const struct cv *c, const char *ini, struct cuda_built *C, struct cuda_built *G,
                       struct glia_rng *rng)
{
    struct glia_shape in = S(4, c->N, c->C, c->H, c->W);
    cuda_build(ini, "cpu", cuda_cpu, &in, 1, C);
    cuda_build(ini, "cudnn", cuda_gpu, &in, 1, G);
    CU_ASSERT_FATAL(C->l.n_params == G->l.n_params && C->l.n_params == (c->bias ? 2 : 1));
    for (int q = 0; q < C->l.n_params; q++) {
        float *v = random_values(rng, C->l.params[q].shape, 0.5f);
        memcpy(glia_tensor_f32(C->l.params[q].value), v, glia_tensor_nbytes(C->l.params[q].value));
        CU_ASSERT_FATAL(glia_tensor_from_host(G->l.params[q].value, v, glia_tensor_nbytes(C->l.params[q].value)) ==
                        GLIA_OK);
        free(v);
    }
}

/* Case c, one pass k at precision p in format f with the backend's other options as they are. */
static void conv_check(const struct cv *c, enum glia_precision p, enum glia_memory_format f, struct pass k,
                       uint64_t seed)
{
    struct glia_runtime_options o = cuda_gpu->options;
    o.precision = p;
    CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &o) == GLIA_OK);
    char ini[512];
    cv_ini(c, ini, sizeof ini);
    struct glia_rng rng;
    glia__rng_seed(&rng, seed);
    struct cuda_built C, G;
    conv_build(c, ini, &C, &G, &rng);
    conv_pass(c, &C, &G, p, f, k, &rng, ini);
    cuda_unbuild(&C);
    cuda_unbuild(&G);
}

/* Every case at precision p in format f, writing and accumulating, with the current options. */
static void run_cases(enum glia_precision p, enum glia_memory_format f, uint64_t seed)
{
    for (int i = 0; i < N_CASES; i++)
        for (int acc = 0; acc < 2; acc++)
            conv_check(&cases[i], p, f, (struct pass){.acc = acc}, seed + (uint64_t)(2 * i + acc));
}

/* Both formats, cudnn_benchmark off (heuristics) then on (timed), at precision p. */
static void run_precision(enum glia_precision p, uint64_t seed)
{
    for (int bench = 0; bench < 2; bench++) {
        configure(p, bench, DEFAULT_WORKSPACE);
        run_cases(p, GLIA_CONTIGUOUS, seed);
        run_cases(p, GLIA_CHANNELS_LAST, seed + 100);
    }
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

static void test_fp32(void) { run_precision(GLIA_PRECISION_FP32, 1000); }
static void test_tf32(void) { run_precision(GLIA_PRECISION_TF32, 2000); }
static void test_bf16(void) { run_precision(GLIA_PRECISION_BF16, 3000); }
static void test_fp16(void) { run_precision(GLIA_PRECISION_FP16, 4000); }

/* No workspace at all: only the algorithms that need none (fp32 NCHW has them in every
 * direction), chosen by heuristics and by timing. */
static void test_zero_workspace(void)
{
    for (int bench = 0; bench < 2; bench++) {
        configure(GLIA_PRECISION_FP32, bench, 0);
        run_cases(GLIA_PRECISION_FP32, GLIA_CONTIGUOUS, 5000);
    }
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

/* [runtime] deterministic = on: only the algorithms cuDNN calls deterministic (not those that add with
 * atomics), so a training forward and backward twice on the same input give the same bits; by heuristics and by
 * timing, fp32 and bf16, both formats, a grouped strided case too. */
static void test_deterministic(void)
{
    const enum glia_precision ps[] = {GLIA_PRECISION_FP32, GLIA_PRECISION_BF16};
    for (int i = 0; i < 2; i++)
        for (int bench = 0; bench < 2; bench++) {
            configure(ps[i], bench, DEFAULT_WORKSPACE);
            struct glia_runtime_options o = cuda_gpu->options;
            o.deterministic = true;
            CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &o) == GLIA_OK);
            for (int f = 0; f < 2; f++) {
                enum glia_memory_format mf = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
                cuda_repeatable("cudnn", "[c]\ntype = conv2d\nfilters = 16\nsize = 3\npadding = 1\n", S(4, 8, 8, 14, 14),
                                mf);
                cuda_repeatable("cudnn", "[c]\ntype = conv2d\nfilters = 8\nsize = 3\nstride = 2\ngroups = 2\n",
                                S(4, 4, 8, 13, 11), mf);
            }
        }
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

/* A forward in eval mode matches, in every precision and format. */
static void test_eval(void)
{
    const enum glia_precision ps[] = {GLIA_PRECISION_FP32, GLIA_PRECISION_TF32, GLIA_PRECISION_BF16,
                                      GLIA_PRECISION_FP16};
    for (int i = 0; i < 4; i++)
        for (int f = 0; f < 2; f++)
            conv_check(&cases[1], ps[i], f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS, (struct pass){.eval = true},
                       6000 + (uint64_t)(2 * i + f));
}

/* One CPU and one CUDA layer of geometry c run on inputs of shapes (N, c->C, H, W) in[0..n) in
 * turn, in format f: the CUDA one sets its descriptors again when the shape changes, takes the
 * algorithms of a shape it has seen from the cache or finds new ones, and keeps matching. */
static void shape_changes(const struct cv *c, const struct glia_shape *shapes, int n_shapes, enum glia_memory_format f,
                          uint64_t seed)
{
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
    struct cv at = *c;
    at.N = shapes[0].dim[0], at.H = shapes[0].dim[2], at.W = shapes[0].dim[3];
    char ini[512];
    cv_ini(c, ini, sizeof ini);
    struct glia_rng rng;
    glia__rng_seed(&rng, seed);
    struct cuda_built C, G;
    conv_build(&at, ini, &C, &G, &rng);
    for (int step = 0; step < n_shapes; step++) {
        CU_ASSERT_FATAL(shapes[step].dim[1] == c->C);
        at.N = shapes[step].dim[0], at.H = shapes[step].dim[2], at.W = shapes[step].dim[3];
        conv_pass(&at, &C, &G, GLIA_PRECISION_FP32, f, (struct pass){0}, &rng, ini);
    }
    cuda_unbuild(&C);
    cuda_unbuild(&G);
}

/* Batch sizes 3, 1, 3 under a 3x3 stride 2; lengths 16, 9, 16, 23, 9 and a batch change under
 * a 1x3 with padding (0, 1) (variable-length token sequences). */
static void test_shape_change(void)
{
    /* N, C, H, W, F, k, s, p, d, g, bias, kw, pw: N, H and W come from the shapes */
    const struct cv strided = {0, 3, 0, 0, 6, 3, 2, 1, 1, 1, true, 3, 1};
    const struct cv tokens = {0, 8, 0, 0, 12, 1, 1, 0, 1, 1, true, 3, 1};
    const struct glia_shape batches[] = {S(4, 3, 3, 9, 8), S(4, 1, 3, 9, 8), S(4, 3, 3, 9, 8)};
    const struct glia_shape lengths[] = {S(4, 3, 8, 1, 16), S(4, 3, 8, 1, 9), S(4, 3, 8, 1, 16), S(4, 3, 8, 1, 23),
                                         S(4, 3, 8, 1, 9), S(4, 5, 8, 1, 9)};
    for (int f = 0; f < 2; f++) {
        enum glia_memory_format fmt = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
        shape_changes(&strided, batches, 3, fmt, 7000 + (uint64_t)f);
        shape_changes(&tokens, lengths, 6, fmt, 7100 + (uint64_t)f);
    }
}

/* With no input gradient asked (din[0] NULL: the first layer of a model) the parameter gradients
 * still match, written over NaN or added onto 1. */
static void test_no_input_grad(void)
{
    const enum glia_precision ps[] = {GLIA_PRECISION_FP32, GLIA_PRECISION_BF16};
    for (int i = 0; i < 2; i++)
        for (int f = 0; f < 2; f++)
            for (int acc = 0; acc < 2; acc++) {
                const struct cv *c = &cases[f ? 5 : 0];  /* groups in channels_last: the filter transposes */
                configure(ps[i], true, DEFAULT_WORKSPACE);
                conv_check(c, ps[i], f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS, (struct pass){.acc = acc, .no_din = true},
                           8000 + (uint64_t)(4 * i + 2 * f + acc));
            }
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

/* The largest "N bytes of workspace" among the algorithm choices logged in f, and how many. */
static size_t chosen_workspace(FILE *f, int *n)
{
    char line[2048];
    size_t most = 0;
    *n = 0;
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        const char *w = strstr(line, " bytes of workspace");
        if (!w) continue;
        while (w > line && w[-1] >= '0' && w[-1] <= '9') w--;
        size_t v = (size_t)strtoull(w, NULL, 10);
        if (v > most) most = v;
        ++*n;
    }
    return most;
}

/* cudnn_benchmark offers cuDNN the largest workspace any algorithm asks for (up to workspace_mb);
 * afterwards only what the chosen algorithms run with stays allocated. On a backend of its own (a
 * fresh cache and scratch), a forward and backward at a shape tuned here first: the bytes in use
 * grow by at most twice the largest chosen workspace (from the debug log), not by the timing's. */
static void test_tuning_workspace_given_back(void)
{
    struct glia_context *ctx;
    struct glia_backend *b;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_plugin_load(ctx, "cuda") == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CUDA, 0}, &b) == GLIA_OK);
    struct glia_runtime_options o = b->options;
    o.precision = GLIA_PRECISION_FP32;
    o.cudnn_benchmark = true;
    o.workspace_limit = DEFAULT_WORKSPACE;
    CU_ASSERT_FATAL(glia_backend_configure(b, &o) == GLIA_OK);
    const char *ini = "[c]\ntype = conv2d\nfilters = 24\nsize = 3\npadding = 1\n";
    struct glia_shape in = S(4, 5, 24, 19, 17), os = S(4, 5, 24, 19, 17);  /* a shape no other test tunes */
    struct cuda_built G;
    cuda_build(ini, "cudnn", b, &in, 1, &G);
    struct glia_rng rng;
    glia__rng_seed(&rng, 9000);
    for (int q = 0; q < G.l.n_params; q++) {
        float *v = random_values(&rng, G.l.params[q].shape, 1.0f);
        glia_tensor_release(G.l.params[q].value);
        G.l.params[q].value = cuda_put(b, G.l.params[q].shape, GLIA_CONTIGUOUS, v);
        G.l.params[q].grad_unset = true;
        free(v);
    }
    float *xv = random_values(&rng, in, 1.0f), *dyv = random_values(&rng, os, 1.0f);
    struct glia_tensor *x = cuda_put(b, in, GLIA_CONTIGUOUS, xv);
    struct glia_tensor *dy = cuda_put(b, os, GLIA_CONTIGUOUS, dyv);
    struct glia_tensor *y = tensor_as(b, os, GLIA_CONTIGUOUS), *dx = tensor_as(b, in, GLIA_CONTIGUOUS);
    struct glia_memory_stats s0, s1;
    CU_ASSERT_FATAL(glia_backend_memory_stats(b, &s0) == GLIA_OK);
    FILE *log = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(log);
    glia_log_set(cuda_ctx, log, GLIA_LOG_DEBUG);  /* the layer's context: where its choices are logged */
    const struct glia_tensor *ins[1] = {x};
    struct glia_tensor *dins[1] = {dx};
    bool accs[1] = {false};
    struct glia_fwd f = {ins, 1, y, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd bw = {ins, 1, y, dy, dins, accs, NULL, NULL, NULL, NULL, false};
    CU_ASSERT_EQUAL(G.kernel->forward(&G.l, &f), GLIA_OK);
    CU_ASSERT_EQUAL(G.kernel->backward(&G.l, &bw), GLIA_OK);
    glia_log_set(cuda_ctx, stderr, GLIA_LOG_INFO);
    CU_ASSERT_FATAL(glia_backend_memory_stats(b, &s1) == GLIA_OK);
    int n;
    size_t ws = chosen_workspace(log, &n), grown = s1.current > s0.current ? s1.current - s0.current : 0;
    fclose(log);
    CU_ASSERT_EQUAL(n, 3);  /* forward, backward data, backward filter */
    if (!(grown <= 2 * ws + ((size_t)1 << 20)))
        printf("\n  after autotuning %zu bytes more in use; the chosen algorithms need %zu\n", grown, ws);
    CU_ASSERT(grown <= 2 * ws + ((size_t)1 << 20));
    struct glia_tensor *all[] = {x, dy, y, dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) glia_tensor_release(all[i]);
    free(xv);
    free(dyv);
    cuda_unbuild(&G);
    glia_context_free(ctx);
}

/* The emulator's record of the largest workspace cuDNN was handed (NULL on a GPU: the emulator is not loaded). */
typedef size_t (*ws_seen_fn)(bool reset);
static ws_seen_fn emu_ws_seen(void)
{
    void *h = dlopen("libglia-cudaemu.so", RTLD_NOW | RTLD_NOLOAD);
    ws_seen_fn f = h ? (ws_seen_fn)(uintptr_t)dlsym(h, "glia_emu_cudnn_workspace_seen") : NULL;
    if (h) dlclose(h);  /* cuda.so still holds it */
    return f;
}

/* A training forward and backward (eval: an evaluation's forward alone) of a 3x3 conv2d on input `in` (NCHW) on
 * backend b, which is set to time algorithms with workspace_limit `limit`; the largest workspace logged as chosen into
 * *chosen. */
static void tuned_pass(struct glia_backend *b, size_t limit, struct glia_shape in, bool eval, size_t *chosen)
{
    struct glia_runtime_options o = b->options;
    o.precision = GLIA_PRECISION_FP32;
    o.cudnn_benchmark = true;
    o.workspace_limit = limit;
    o.deterministic = false;
    CU_ASSERT_FATAL(glia_backend_configure(b, &o) == GLIA_OK);
    struct glia_shape os = in;
    os.dim[1] = 8;
    struct cuda_built G;
    cuda_build("[c]\ntype = conv2d\nfilters = 8\nsize = 3\npadding = 1\n", "cudnn", b, &in, 1, &G);
    struct glia_rng rng;
    glia__rng_seed(&rng, 9100);
    for (int q = 0; q < G.l.n_params; q++) {
        float *v = random_values(&rng, G.l.params[q].shape, 1.0f);
        glia_tensor_release(G.l.params[q].value);
        G.l.params[q].value = cuda_put(b, G.l.params[q].shape, GLIA_CONTIGUOUS, v);
        G.l.params[q].grad_unset = true;
        free(v);
    }
    float *xv = random_values(&rng, in, 1.0f), *dyv = random_values(&rng, os, 1.0f);
    struct glia_tensor *x = cuda_put(b, in, GLIA_CONTIGUOUS, xv), *dy = cuda_put(b, os, GLIA_CONTIGUOUS, dyv);
    struct glia_tensor *y = tensor_as(b, os, GLIA_CONTIGUOUS), *dx = tensor_as(b, in, GLIA_CONTIGUOUS);
    FILE *log = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(log);
    glia_log_set(cuda_ctx, log, GLIA_LOG_DEBUG);
    const struct glia_tensor *ins[1] = {x};
    struct glia_tensor *dins[1] = {dx};
    bool accs[1] = {false};
    struct glia_fwd f = {ins, 1, y, NULL, !eval, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    struct glia_bwd bw = {ins, 1, y, dy, dins, accs, NULL, NULL, NULL, NULL, false};
    CU_ASSERT_EQUAL(G.kernel->forward(&G.l, &f), GLIA_OK);
    if (!eval) CU_ASSERT_EQUAL(G.kernel->backward(&G.l, &bw), GLIA_OK);
    glia_log_set(cuda_ctx, stderr, GLIA_LOG_INFO);
    int n;
    *chosen = chosen_workspace(log, &n);
    CU_ASSERT_EQUAL(n, eval ? 1 : 3);
    fclose(log);
    struct glia_tensor *all[] = {x, dy, y, dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) glia_tensor_release(all[i]);
    free(xv);
    free(dyv);
    cuda_unbuild(&G);
}

/* The workspace cuDNN is handed -- by the timing (Find*Ex) and by the runs -- never exceeds workspace_mb, and
 * with the default limit the timing offers only what an algorithm of cuDNN's heuristic list needs (at most
 * 256 MiB): not the largest workspace any algorithm id asks for (the emulator's FFT algorithms ask 64 MiB and
 * are never on its list; on a GPU they ask GiBs). The emulator records what it was handed; on a GPU the
 * logged choices are checked against the limit. */
static void test_tuning_workspace_bounded(void)
{
    struct glia_context *ctx;
    struct glia_backend *b;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_plugin_load(ctx, "cuda") == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CUDA, 0}, &b) == GLIA_OK);
    ws_seen_fn seen = emu_ws_seen();
    const size_t limits[] = {2048, (size_t)1 << 20, DEFAULT_WORKSPACE};
    for (int i = 0; i < 3; i++) {
        if (seen) seen(true);
        size_t chosen;
        tuned_pass(b, limits[i], S(4, 3, 5, 21 + i, 13), false, &chosen);  /* shapes no other test tunes */
        CU_ASSERT(chosen <= limits[i]);
        if (!seen) continue;
        size_t got = seen(false);
        bool ok = got <= limits[i] && got <= ((size_t)256 << 20) && got < ((size_t)64 << 20);
        if (!ok) printf("\n  workspace limit %zu: cuDNN was handed %zu bytes\n", limits[i], got);
        CU_ASSERT(ok);
    }
    if (!seen) printf("(on a GPU: the handed workspace is not recorded) ");
    glia_context_free(ctx);
}

/* A small layer's timing offers at most 8 times the bytes of its operands, and at least 32 MiB, below the 256 MiB cap
 * (conv.c's TUNE_WS_PER_DATA, TUNE_WS_MIN), and an evaluation's forward at most 32 MiB: under the emulator, with the
 * fastest forward algorithm wanting 40 MiB (GLIA_EMU_CUDNN_FWD_WS), a 4x3x27x13 input's timing hands cuDNN no more
 * than 32 MiB and the forward takes another algorithm; a larger one takes it in training, not in evaluation. On a GPU
 * the variable means nothing (skipped). */
static void test_tuning_workspace_per_layer(void)
{
    ws_seen_fn seen = emu_ws_seen();
    if (!seen) {
        printf("(not the emulator: skipped) ");
        return;
    }
    struct glia_context *ctx;
    struct glia_backend *b;
    CU_ASSERT_FATAL(glia_context_new(&ctx) == GLIA_OK);
    CU_ASSERT_FATAL(glia_plugin_load(ctx, "cuda") == GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_get(ctx, (struct glia_device){GLIA_DEVICE_CUDA, 0}, &b) == GLIA_OK);
    setenv("GLIA_EMU_CUDNN_FWD_WS", "41943040", 1);
    seen(true);
    size_t chosen;
    tuned_pass(b, DEFAULT_WORKSPACE, S(4, 4, 3, 27, 13), false, &chosen);  /* a shape no other test tunes */
    size_t got = seen(false);
    unsetenv("GLIA_EMU_CUDNN_FWD_WS");
    if (got > ((size_t)32 << 20) || chosen > ((size_t)32 << 20))
        printf("\n  cuDNN was handed %zu bytes, the choices take up to %zu\n", got, chosen);
    CU_ASSERT(got <= ((size_t)32 << 20));
    CU_ASSERT(chosen <= ((size_t)32 << 20));
    /* an evaluation's forward is timed within 32 MiB even where its operands would allow more: a 64x1x64x64 input
     * (75 MB of operands with its 64x8x64x64 output) takes the 40 MiB algorithm in training, not in evaluation */
    setenv("GLIA_EMU_CUDNN_FWD_WS", "41943040", 1);
    size_t train_ws, eval_ws;
    seen(true);
    tuned_pass(b, DEFAULT_WORKSPACE, S(4, 64, 1, 64, 64), false, &train_ws);
    size_t train_got = seen(true);
    tuned_pass(b, DEFAULT_WORKSPACE, S(4, 64, 1, 64, 64), true, &eval_ws);
    size_t eval_got = seen(false);
    unsetenv("GLIA_EMU_CUDNN_FWD_WS");
    if (train_ws != ((size_t)40 << 20) || eval_ws > ((size_t)32 << 20) || eval_got > ((size_t)32 << 20))
        printf("\n  training chose %zu bytes (handed %zu), evaluation %zu (handed %zu)\n", train_ws, train_got, eval_ws,
               eval_got);
    CU_ASSERT_EQUAL(train_ws, (size_t)40 << 20);
    CU_ASSERT(eval_ws <= ((size_t)32 << 20));
    CU_ASSERT(eval_got <= ((size_t)32 << 20));
    glia_context_free(ctx);
}

/* Half activations (precision bf16 or fp16, x, y, dy and dx of that type: GLIA_KERNEL_HALF): cuDNN reads and writes
 * them directly; against the CPU's f32 convolution of the same (rounded) inputs within the precision's tolerance,
 * with and without bias, in both formats, writing and accumulating. */
static void test_half_activations(void)
{
    static const char *const inis[] = {"[c]\ntype = conv2d\nfilters = 8\nsize = 3\npadding = 1\n",
                                       "[c]\ntype = conv2d\nfilters = 6\nsize = 3\nstride = 2\nbias = off\n"};
    const struct glia_shape in = S(4, 2, 4, 9, 7);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 2; i++)
            for (int f = 0; f < 2; f++)
                for (int acc = 0; acc < 2; acc++) {
                    enum glia_precision p = h ? GLIA_PRECISION_FP16 : GLIA_PRECISION_BF16;
                    configure(p, f == 1, DEFAULT_WORKSPACE);
                    struct cuda_case k = {.ini = inis[i], .in = &in, .n_in = 1, .precision = p,
                                          .format = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS, .accumulate = acc,
                                          .seed = 90 + (uint64_t)i, .act = h ? GLIA_F16 : GLIA_BF16};
                    cuda_expect(&k, cuda_tol(p));
                }
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

/* The emulator's count of convolutions run through cuDNN's graph API, or (fused) of fused convolution graphs run (NULL
 * on a GPU). */
typedef long (*graph_runs_fn)(bool reset);
static graph_runs_fn emu_runs(const char *name)
{
    void *h = dlopen("libglia-cudaemu.so", RTLD_NOW | RTLD_NOLOAD);
    graph_runs_fn f = h ? (graph_runs_fn)(uintptr_t)dlsym(h, name) : NULL;
    if (h) dlclose(h);
    return f;
}
static graph_runs_fn emu_graph_runs(void) { return emu_runs("glia_emu_cudnn_conv_graph_runs"); }

/* cuDNN's graph API: a plan of the graph runs each direction (heuristics and timed), its first run in a layer checked
 * against the legacy algorithm; a plan whose results are off (GLIA_EMU_CUDNN_CONV_SKEW) is caught by that check,
 * warned about, and the legacy algorithm runs that shape from then on, in this layer and the next; a graph cuDNN
 * refuses (GLIA_EMU_CUDNN_MAX_OPS=0) leaves the legacy algorithm; where the instant heuristics give nothing
 * (GLIA_EMU_CUDNN_NO_INSTANT=1), a plan of the fallback list runs; engines compiled at run time (GLIA_EMU_CUDNN_RTC=1)
 * make plans as any other, unless GLIA_CUDA_CONV_RTC=off refuses them: then the legacy algorithm runs. Every result is
 * held to the CPU's within the usual bound. Shapes of their own: the choices are cached per shape. On a GPU, the
 * results only. */
static void test_graph_api(void)
{
    graph_runs_fn runs = emu_graph_runs(), built = emu_runs("glia_emu_cudnn_plans_built"),
                  legacy = emu_runs("glia_emu_cudnn_legacy_conv_runs");
    for (int mode = 0; mode < 7; mode++) {
        /* 0, 1: a plan runs (heuristics, timed); 2: a skewed plan; 3: a refused graph; 4: the instant heuristics give
         * nothing, the fallback list's plan runs; 5: engines compiled at run time, taken (as 0); 6: refused (as 3) */
        const struct cv c = {3 + mode, 4, 8, 8, 8, 3, 1, 1, 1, 1, true, 3, 1};
        if (mode == 2) setenv("GLIA_EMU_CUDNN_CONV_SKEW", "1", 1);
        if (mode == 3) setenv("GLIA_EMU_CUDNN_MAX_OPS", "0", 1);
        if (mode == 4) setenv("GLIA_EMU_CUDNN_NO_INSTANT", "1", 1);
        if (mode >= 5) setenv("GLIA_EMU_CUDNN_RTC", "1", 1);
        if (mode == 6) setenv("GLIA_CUDA_CONV_RTC", "off", 1);
        const int as = mode == 5 ? 0 : mode == 6 ? 3 : mode;  /* the mode whose counts it has */
        configure(GLIA_PRECISION_FP32, mode == 1, DEFAULT_WORKSPACE);
        for (int layer = 0; layer < 2; layer++) {  /* the second layer takes the cached choice */
            if (runs) runs(true), built(true), legacy(true);
            conv_check(&c, GLIA_PRECISION_FP32, GLIA_CONTIGUOUS, (struct pass){0}, 7000 + (uint64_t)(10 * mode + layer));
            long n = runs ? runs(true) : -1, b = runs ? built(true) : -1, g = runs ? legacy(true) : -1;
            if (!runs) continue;
            if (as <= 1 || as == 4) CU_ASSERT(n >= 3);  /* forward, data and filter gradients: each timed or checked */
            if (as == 2) CU_ASSERT_EQUAL(n, layer ? 0 : 3);  /* each direction's check only, then never */
            if (as == 3) CU_ASSERT_EQUAL(n, 0);
            /* plans built: the first layer one a direction from the instant heuristics (modes 0, 2; mode 4: the
             * fallback list's), more with the autotuner (mode 1: mode B's and the fallback list's); the second layer
             * builds its cached choice's plan alone (none where that choice is the legacy algorithm: mode 2) */
            long want = as == 3 ? 0 : layer == 0 ? (as == 1 ? 6 : 3) : as == 2 ? 0 : 3;
            if (b != want) printf("\n  mode %d layer %d: %ld plans built, %ld expected\n", mode, layer, b, want);
            CU_ASSERT_EQUAL(b, want);
            /* legacy runs: the first layer's checks (or, refused or skewed, every direction); the second layer runs
             * the plans the first checked without checking them again */
            long legacy_want = layer == 1 && (as <= 1 || as == 4) ? 0 : 3;
            if (g != legacy_want) printf("\n  mode %d layer %d: %ld legacy runs, %ld expected\n", mode, layer, g, legacy_want);
            CU_ASSERT_EQUAL(g, legacy_want);
        }
        unsetenv("GLIA_EMU_CUDNN_CONV_SKEW");
        unsetenv("GLIA_EMU_CUDNN_MAX_OPS");
        unsetenv("GLIA_EMU_CUDNN_NO_INSTANT");
        unsetenv("GLIA_EMU_CUDNN_RTC");
        unsetenv("GLIA_CUDA_CONV_RTC");
    }
    if (!runs) printf("(on a GPU: the plans run are not counted) ");
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

/* A nonfused Winograd algorithm (GLIA_EMU_CUDNN_WINOGRAD=1 lists it first and fastest, its results 2e-3 of the
 * largest value off, as one was for a 5x5 data gradient on an H200): strict fp32 never runs it, chosen by the
 * heuristics or timed, and holds to the CPU; bf16 may (here it runs, so fp32's count of 0 is not for want of it). The
 * case's 5x5 at shapes of its own (the choices are cached per shape). On a GPU, the results only. */
static void test_winograd_refused_fp32(void)
{
    graph_runs_fn wino = emu_runs("glia_emu_cudnn_winograd_runs");
    setenv("GLIA_EMU_CUDNN_WINOGRAD", "1", 1);
    for (int tune = 0; tune < 2; tune++) {
        const struct cv c = {2, 3, 11 + tune, 13, 4, 5, 1, 2, 1, 1, true, 5, 2};
        configure(GLIA_PRECISION_FP32, tune, DEFAULT_WORKSPACE);
        if (wino) wino(true);
        conv_check(&c, GLIA_PRECISION_FP32, GLIA_CONTIGUOUS, (struct pass){0}, 7100 + (uint64_t)tune);
        if (wino) CU_ASSERT_EQUAL(wino(true), 0);
        configure(GLIA_PRECISION_BF16, tune, DEFAULT_WORKSPACE);
        conv_check(&c, GLIA_PRECISION_BF16, GLIA_CONTIGUOUS, (struct pass){0}, 7110 + (uint64_t)tune);
        if (wino) CU_ASSERT(wino(true) > 0);
    }
    unsetenv("GLIA_EMU_CUDNN_WINOGRAD");
    if (!wino) printf("(on a GPU: the algorithms run are not counted) ");
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

/* G's parameters and their gradients as views one float into arenas *wa and *ga (the caller releases them), as a
 * model packs parameters (fp32 ones aligned to 4 bytes only), holding C's values. */
static void params_at_offset(const struct cuda_built *C, struct cuda_built *G, struct glia_tensor **wa,
                             struct glia_tensor **ga)
{
    int64_t total = 1;
    for (int q = 0; q < G->l.n_params; q++) total += glia_shape_numel(&G->l.params[q].shape);
    struct glia_shape arena = S(1, total, 0, 0, 0);
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_F32, &arena, wa) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_F32, &arena, ga) == GLIA_OK);
    int64_t off = 1;
    for (int q = 0; q < G->l.n_params; q++) {
        struct glia_param *pg = &G->l.params[q];
        glia_tensor_release(pg->value);
        glia_tensor_release(pg->grad);
        CU_ASSERT_FATAL(glia_tensor_view(*wa, off, &pg->shape, &pg->value) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_view(*ga, off, &pg->shape, &pg->grad) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_from_host(pg->value, glia_tensor_f32(C->l.params[q].value),
                                              glia_tensor_nbytes(C->l.params[q].value)) == GLIA_OK);
        off += glia_shape_numel(&pg->shape);
    }
}

/* Weights and their gradients as views 4 bytes into one arena, as a model packs parameters: an fp32 NCHW convolution
 * reads the weight and writes its gradient in place there, which the graph's tensors (16-byte aligned) cannot take,
 * so every direction runs the legacy algorithm (none through a graph plan, in the emulator) and the results hold. */
static void test_graph_api_unaligned(void)
{
    graph_runs_fn runs = emu_graph_runs();
    const struct cv c = {7, 4, 8, 8, 8, 3, 1, 1, 1, 1, true, 3, 1};
    configure(GLIA_PRECISION_FP32, false, DEFAULT_WORKSPACE);
    char ini[512];
    cv_ini(&c, ini, sizeof ini);
    struct glia_rng rng;
    glia__rng_seed(&rng, 7100);
    struct cuda_built C, G;
    conv_build(&c, ini, &C, &G, &rng);
    struct glia_tensor *wa, *ga;
    params_at_offset(&C, &G, &wa, &ga);
    if (runs) runs(true);
    conv_pass(&c, &C, &G, GLIA_PRECISION_FP32, GLIA_CONTIGUOUS, (struct pass){0}, &rng, ini);
    if (runs) CU_ASSERT_EQUAL(runs(true), 0);
    cuda_unbuild(&C);
    cuda_unbuild(&G);
    glia_tensor_release(wa);
    glia_tensor_release(ga);
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

/* y(n) of a device tensor, in its format's order, as f32 host values (malloc'd). */
static float *values_of(const struct glia_tensor *t)
{
    struct glia_tensor *f = cuda_as_dtype((struct glia_tensor *)t, GLIA_F32), *h = cuda_get(f);
    float *v = malloc(glia_tensor_nbytes(h));
    memcpy(v, glia_tensor_f32(h), glia_tensor_nbytes(h));
    glia_tensor_release(f);
    glia_tensor_release(h);
    return v;
}

/* activation = relu: against the CPU's fused layer at fp32 (both formats, writing and accumulating, heuristics and
 * timed); and at every precision, with f32 and half activations and deterministic algorithms, what the same GPU
 * computes unfused: the output is max(y, 0) of the plain layer's (bit for bit where no fused graph ran: the second pass
 * is the same kernel; within the precision's tolerance where one did, which rounds once), and the gradients are bit for
 * bit the plain layer's backward of dy where the fused output is positive. */
static void test_activation_relu(void)
{
    /* the third: the first at 8x8, whose planes (64 values) the second pass takes in 16-byte packs in NCHW too (9x7:
     * one by one there; NHWC's 8 channels are packs in both) */
    static const char *const inis[] = {"[c]\ntype = conv2d\nfilters = 8\nsize = 3\npadding = 1\nactivation = relu\n",
                                       "[c]\ntype = conv2d\nfilters = 6\nsize = 3\nstride = 2\nbias = off\n"
                                       "activation = relu\n",
                                       "[c]\ntype = conv2d\nfilters = 8\nsize = 3\npadding = 1\nactivation = relu\n"};
    const struct glia_shape shapes[] = {S(4, 2, 4, 9, 7), S(4, 2, 4, 9, 7), S(4, 2, 4, 8, 8)};
    for (int i = 0; i < 3; i++)
        for (int f = 0; f < 2; f++)
            for (int acc = 0; acc < 2; acc++) {
                const struct glia_shape in = shapes[i];
                configure(GLIA_PRECISION_FP32, acc == 1, DEFAULT_WORKSPACE);
                struct cuda_case k = {.ini = inis[i], .in = &in, .n_in = 1, .precision = GLIA_PRECISION_FP32,
                                      .format = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS, .accumulate = acc,
                                      .seed = 300 + (uint64_t)i};
                cuda_expect(&k, cuda_tol(GLIA_PRECISION_FP32));
            }
    static const enum glia_precision precs[] = {GLIA_PRECISION_FP32, GLIA_PRECISION_TF32, GLIA_PRECISION_BF16,
                                                GLIA_PRECISION_FP16, GLIA_PRECISION_BF16};
    graph_runs_fn fused_runs = emu_runs("glia_emu_cudnn_fused_conv_runs");
    for (int pf = 0; pf < 10; pf++)  /* in the emulator, the second five with fused graphs refused: the second pass */
        for (int i = 0; i < 3; i++)
            for (int f = 0; f < 2; f++) {
                const struct glia_shape in = shapes[i];
                int pi = pf % 5;
                if (pf >= 5) setenv("GLIA_EMU_CUDNN_MAX_OPS", "1", 1);
                enum glia_precision p = precs[pi];
                /* half activations for bf16 and fp16, then bf16 on f32 activations (converted copies) */
                enum glia_dtype dt = pi == 2 ? GLIA_BF16 : pi == 3 ? GLIA_F16 : GLIA_F32;
                enum glia_memory_format fmt = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
                configure(p, false, DEFAULT_WORKSPACE);  /* deterministic algorithms: bit for bit */
                struct glia_runtime_options o = cuda_gpu->options;
                o.deterministic = true;
                CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &o) == GLIA_OK);
                char plain[256];
                snprintf(plain, sizeof plain, "%.*s", (int)(strstr(inis[i], "activation") - inis[i]), inis[i]);
                struct cuda_built R, P;
                cuda_build(inis[i], "cudnn", cuda_gpu, &in, 1, &R);
                cuda_build(plain, "cudnn", cuda_gpu, &in, 1, &P);
                struct glia_rng rng;
                glia__rng_seed(&rng, 400 + (uint64_t)(10 * pf + 2 * i + f));
                for (int q = 0; q < R.l.n_params; q++) {
                    float *v = random_values(&rng, R.l.params[q].shape, 0.5f);
                    size_t nb = glia_tensor_nbytes(R.l.params[q].value);
                    CU_ASSERT_FATAL(glia_tensor_from_host(R.l.params[q].value, v, nb) == GLIA_OK);
                    CU_ASSERT_FATAL(glia_tensor_from_host(P.l.params[q].value, v, nb) == GLIA_OK);
                    free(v);
                }
                struct glia_shape os;
                CU_ASSERT_FATAL(R.type->infer_shape(&R.l, &in, 1, &os) == GLIA_OK);
                float *xv = random_values(&rng, in, 1.0f), *dyv = random_values(&rng, os, 1.0f);
                struct glia_tensor *x = cuda_swap_dtype(cuda_put(cuda_gpu, in, fmt, xv), dt);
                struct glia_tensor *dy = cuda_swap_dtype(cuda_put(cuda_gpu, os, fmt, dyv), dt);
                struct glia_tensor *yr = cuda_swap_dtype(tensor_as(cuda_gpu, os, fmt), dt);
                struct glia_tensor *yp = cuda_swap_dtype(tensor_as(cuda_gpu, os, fmt), dt);
                struct glia_tensor *dxr = cuda_swap_dtype(tensor_as(cuda_gpu, in, fmt), dt);
                struct glia_tensor *dxp = cuda_swap_dtype(tensor_as(cuda_gpu, in, fmt), dt);
                const struct glia_tensor *ins[1] = {x};
                struct glia_fwd fr = {ins, 1, yr, NULL, true, 5, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
                struct glia_fwd fp = {ins, 1, yp, NULL, true, 5, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
                if (fused_runs) fused_runs(true);
                glia_status st = R.kernel->forward(&R.l, &fr);
                bool fused = !fused_runs || fused_runs(true) > 0;  /* on a GPU: maybe */
                if (fused_runs && pf >= 5) CU_ASSERT(!fused);  /* so the bit-for-bit branch below runs */
                if (!st) st = P.kernel->forward(&P.l, &fp);
                if (st) printf("\n  forward: %s\n", glia_context_error(cuda_ctx));
                CU_ASSERT_FATAL(st == GLIA_OK);
                float *vr = values_of(yr), *vp = values_of(yp), *dyh = values_of(dy);
                int64_t ny = glia_shape_numel(&os), bad = 0, pos = 0;
                double tol = fused ? cuda_tol(p) : 0.0;  /* a fused plan adds the bias before it rounds */
                for (int64_t j = 0; j < ny; j++) {
                    double want = vp[j] < 0.0f ? 0.0 : vp[j];
                    bad += !(fabs(vr[j] - want) <= tol * fmax(1.0, fabs(want)));
                    pos += vr[j] > 0.0f;
                    dyh[j] = vr[j] > 0.0f ? dyh[j] : 0.0f;  /* the relu's backward, in the format's order */
                }
                CU_ASSERT(bad == 0 && pos > 0 && pos < ny);
                struct glia_tensor *dym = tensor_as(cuda_gpu, os, fmt);
                CU_ASSERT_FATAL(glia_tensor_from_host(dym, dyh, glia_tensor_nbytes(dym)) == GLIA_OK);
                dym = cuda_swap_dtype(dym, dt);  /* exact: dy was of dt already */
                bool acc[1] = {false};
                struct glia_tensor *dinr[1] = {dxr}, *dinp[1] = {dxp};
                for (int q = 0; q < R.l.n_params; q++) R.l.params[q].grad_unset = P.l.params[q].grad_unset = true;
                struct glia_bwd br = {ins, 1, yr, dy, dinr, acc, NULL, NULL, NULL, NULL, false}, bp = {ins, 1, yp, dym, dinp, acc, NULL, NULL, NULL, NULL, false};
                st = R.kernel->backward(&R.l, &br);
                if (!st) st = P.kernel->backward(&P.l, &bp);
                if (st) printf("\n  backward: %s\n", glia_context_error(cuda_ctx));
                CU_ASSERT_FATAL(st == GLIA_OK);
                float *a = values_of(dxr), *b = values_of(dxp);
                bool same = !memcmp(a, b, glia_tensor_nbytes(dxr) / glia_dtype_size(dt) * sizeof(float));
                free(a), free(b);
                for (int q = 0; q < R.l.n_params; q++) {
                    a = values_of(R.l.params[q].grad), b = values_of(P.l.params[q].grad);
                    same = same && !memcmp(a, b, glia_tensor_nbytes(R.l.params[q].grad));
                    free(a), free(b);
                }
                if (!same || bad) printf("\n  %s%s %s: fused and unfused differ (%lld outputs)\n", inis[i],
                                         glia_precision_name(p), glia_dtype_name(dt), (long long)bad);
                CU_ASSERT(same);
                struct glia_tensor *all[] = {x, dy, yr, yp, dxr, dxp, dym};
                for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) glia_tensor_release(all[j]);
                free(xv), free(dyv), free(vr), free(vp), free(dyh);
                cuda_unbuild(&R);
                cuda_unbuild(&P);
                unsetenv("GLIA_EMU_CUDNN_MAX_OPS");
            }
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

/* The fused forward graph (convolution, bias, relu; cuDNN's runtime fusion) runs only where the autotuner timed it
 * faster than the plain convolution's plans and the legacy algorithms with the second pass: without the autotuner it
 * is not built (the plain plan and the second pass run); timed and faster (the emulator's fused graph takes 0.5
 * simulated ms, the plain one 0.8) it runs, its first run in each layer checked against the legacy algorithm and the
 * second pass, and a second layer of the shape runs it from the cached choice; timed and slower
 * (GLIA_EMU_CUDNN_FUSED_MS=2) the plain plan and the second pass run, in the second layer too; a fused graph cuDNN
 * refuses (GLIA_EMU_CUDNN_MAX_OPS=1) leaves the plain plans; a fused plan whose results are off
 * (GLIA_EMU_CUDNN_CONV_SKEW) is caught by its check. Results against the CPU every time; the plans counted in the
 * emulator only. */
static void test_graph_api_fused(void)
{
    graph_runs_fn fused = emu_runs("glia_emu_cudnn_fused_conv_runs"), convs = emu_graph_runs();
    static const char *const inis[] = {"[c]\ntype = conv2d\nfilters = 8\nsize = 3\npadding = 1\nactivation = relu\n",
                                       "[c]\ntype = conv2d\nfilters = 8\nsize = 3\nbias = off\nactivation = relu\n"};
    for (int mode = 0; mode < 5; mode++)
        for (int i = 0; i < 2; i++)
            for (int f = 0; f < 2; f++) {
                /* 0: heuristics; 1: timed, fused faster; 2: the fused graph refused; 3: a skewed plan; 4: timed, fused
                 * slower */
                if (mode == 2) setenv("GLIA_EMU_CUDNN_MAX_OPS", "1", 1);
                if (mode == 3) setenv("GLIA_EMU_CUDNN_CONV_SKEW", "1", 1);
                if (mode == 4) setenv("GLIA_EMU_CUDNN_FUSED_MS", "2", 1);
                configure(GLIA_PRECISION_FP32, mode >= 1, DEFAULT_WORKSPACE);
                const struct glia_shape in = S(4, 3 + mode, 4, 8, 8);  /* a shape of its own: choices are cached */
                struct cuda_case k = {.ini = inis[i], .in = &in, .n_in = 1, .precision = GLIA_PRECISION_FP32,
                                      .format = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS, .seed = 500 + (uint64_t)i};
                long nf[2] = {-1, -1}, nc[2] = {-1, -1};
                for (int layer = 0; layer < 2; layer++) {  /* the second takes the first's cached choice */
                    if (fused) fused(true), convs(true);
                    cuda_expect(&k, cuda_tol(GLIA_PRECISION_FP32));
                    if (fused) nf[layer] = fused(true), nc[layer] = convs(true);
                }
                unsetenv("GLIA_EMU_CUDNN_MAX_OPS");
                unsetenv("GLIA_EMU_CUDNN_CONV_SKEW");
                unsetenv("GLIA_EMU_CUDNN_FUSED_MS");
                if (!fused) continue;
                bool ok = mode == 0 || mode == 2 ? nf[0] == 0 && nf[1] == 0 && nc[0] >= 1 && nc[1] >= 1
                          : mode == 1       ? nf[0] >= 1 && nc[0] > nf[0] && nf[1] >= 1  /* both graphs timed */
                          : mode == 3       ? nf[0] >= 1 && nf[1] == 0  /* caught: the legacy algorithm from then on */
                                            : nf[0] >= 1 && nc[0] > nf[0] && nf[1] == 0 && nc[1] >= 1;
                if (!ok)
                    printf("\n  mode %d, %s %s: %ld and %ld fused graphs, %ld and %ld convolution graphs run\n", mode,
                           inis[i], f ? "nhwc" : "nchw", nf[0], nf[1], nc[0], nc[1]);
                CU_ASSERT(ok);
            }
    if (!fused) printf("(on a GPU: the plans run are not counted) ");
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

/* Graph plans inside a CUDA graph ([runtime] cuda_graph): a pass as it comes builds and checks the plans, the next is
 * captured with them, and replays of that capture compute on new inputs what the CPU computes (the plans ran, counted
 * in the emulator); after 20 other shapes have passed through the layer, whose graph sets it keeps 16 of, the captured
 * plans are still there (their set pinned) and replays still agree. fp32, NCHW, with and without the fused relu. */
static void test_graph_api_captured(void)
{
    graph_runs_fn runs = emu_graph_runs();
    if (!glia_backend_can_capture(cuda_gpu)) return;
    static const char *const inis[] = {"[c]\ntype = conv2d\nfilters = 8\nsize = 3\npadding = 1\nactivation = relu\n",
                                       "[c]\ntype = conv2d\nfilters = 8\nsize = 3\npadding = 1\nbias = off\n"};
    for (int i = 0; i < 2; i++) {
        configure(GLIA_PRECISION_FP32, false, DEFAULT_WORKSPACE);
        const struct cv c = {11, 4, 8, 8, 8, 3, 1, 1, 1, 1, i == 0, 3, 1};  /* a shape of its own: choices are cached */
        struct glia_shape in = S(4, c.N, c.C, c.H, c.W), os = S(4, c.N, c.F, c.H, c.W);
        struct glia_rng rng;
        glia__rng_seed(&rng, 7300 + (uint64_t)i);
        struct cuda_built C, G;
        conv_build(&c, inis[i], &C, &G, &rng);
        struct glia_tensor *xg = tensor_as(cuda_gpu, in, GLIA_CONTIGUOUS), *dyg = tensor_as(cuda_gpu, os, GLIA_CONTIGUOUS);
        struct glia_tensor *yg = tensor_as(cuda_gpu, os, GLIA_CONTIGUOUS), *dxg = tensor_as(cuda_gpu, in, GLIA_CONTIGUOUS);
        struct glia_tensor *xc = tensor_as(cuda_cpu, in, GLIA_CONTIGUOUS), *dyc = tensor_as(cuda_cpu, os, GLIA_CONTIGUOUS);
        struct glia_tensor *yc = tensor_as(cuda_cpu, os, GLIA_CONTIGUOUS), *dxc = tensor_as(cuda_cpu, in, GLIA_CONTIGUOUS);
        const struct glia_tensor *ing[1] = {xg}, *inc[1] = {xc};
        struct glia_tensor *ding[1] = {dxg}, *dinc[1] = {dxc};
        bool acc[1] = {false};
        struct glia_fwd fg = {ing, 1, yg, NULL, true, 3, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        struct glia_fwd fc = {inc, 1, yc, NULL, true, 3, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        struct glia_bwd bg = {ing, 1, yg, dyg, ding, acc, NULL, NULL, NULL, NULL, false}, bc = {inc, 1, yc, dyc, dinc, acc, NULL, NULL, NULL, NULL, false};
        void *exec = NULL;
        for (int round = 0; round < 4; round++) {  /* 0: as it comes; 1: captured; 2, 3: replayed */
            float *xv = random_values(&rng, in, 1.0f), *dyv = random_values(&rng, os, 1.0f);
            memcpy(glia_tensor_f32(xc), xv, glia_tensor_nbytes(xc));
            memcpy(glia_tensor_f32(dyc), dyv, glia_tensor_nbytes(dyc));
            CU_ASSERT_FATAL(glia_tensor_from_host(xg, xv, glia_tensor_nbytes(xc)) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_from_host(dyg, dyv, glia_tensor_nbytes(dyc)) == GLIA_OK);
            free(xv), free(dyv);
            for (int q = 0; q < G.l.n_params; q++) G.l.params[q].grad_unset = C.l.params[q].grad_unset = true;
            if (runs) runs(true);
            glia_status st = GLIA_OK;
            if (round == 1) CU_ASSERT_FATAL(glia_backend_capture_begin(cuda_gpu) == GLIA_OK);
            if (round <= 1) {
                st = G.kernel->forward(&G.l, &fg);
                if (!st) st = G.kernel->backward(&G.l, &bg);
            }
            if (round == 1) CU_ASSERT_FATAL(glia_backend_capture_end(cuda_gpu, &exec) == GLIA_OK && exec);
            if (round >= 1 && !st) st = glia_backend_graph_launch(cuda_gpu, exec);
            if (!st) st = glia_backend_sync(cuda_gpu);
            if (st) printf("\n  round %d: %s\n", round, glia_context_error(cuda_ctx));
            CU_ASSERT_FATAL(st == GLIA_OK);
            long n = runs ? runs(true) : -1;
            if (runs) CU_ASSERT(n >= 3);  /* forward, data and filter gradients: a plan each (a replay: the captured) */
            CU_ASSERT_FATAL(C.kernel->forward(&C.l, &fc) == GLIA_OK && C.kernel->backward(&C.l, &bc) == GLIA_OK);
            double d[4] = {cuda_diff_of(yc, yg), cuda_diff_of(dxc, dxg), cuda_diff_of(C.l.params[0].grad, G.l.params[0].grad),
                           i == 0 ? cuda_diff_of(C.l.params[1].grad, G.l.params[1].grad) : 0.0};
            bool ok = d[0] <= 1e-4 && d[1] <= 1e-4 && d[2] <= 1e-3 && d[3] <= 1e-3;
            if (!ok || (runs && n < 3))
                printf("\n  %sround %d: %ld plans run; y %g, dx %g, dw %g, db %g off\n", inis[i], round, n, d[0], d[1], d[2],
                       d[3]);
            CU_ASSERT(ok);
            if (round == 2) {  /* 20 other shapes through the layer: 16 sets kept, the captured one pinned */
                for (int k = 1; k <= 20; k++) {
                    struct glia_shape in2 = S(4, c.N + k, c.C, c.H, c.W), os2 = S(4, c.N + k, c.F, c.H, c.W);
                    struct glia_tensor *x2 = tensor_as(cuda_gpu, in2, GLIA_CONTIGUOUS), *y2 = tensor_as(cuda_gpu, os2, GLIA_CONTIGUOUS);
                    const struct glia_tensor *in2s[1] = {x2};
                    struct glia_fwd f2 = {in2s, 1, y2, NULL, false, 3, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
                    float *v2 = random_values(&rng, in2, 1.0f);
                    CU_ASSERT_FATAL(glia_tensor_from_host(x2, v2, glia_tensor_nbytes(x2)) == GLIA_OK);
                    free(v2);
                    CU_ASSERT_FATAL(G.kernel->forward(&G.l, &f2) == GLIA_OK);
                    glia_tensor_release(x2);
                    glia_tensor_release(y2);
                }
                CU_ASSERT_FATAL(glia_backend_sync(cuda_gpu) == GLIA_OK);
            }
        }
        glia_backend_graph_free(cuda_gpu, exec);
        struct glia_tensor *all[] = {xg, dyg, yg, dxg, xc, dyc, yc, dxc};
        for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) glia_tensor_release(all[j]);
        cuda_unbuild(&C);
        cuda_unbuild(&G);
    }
    if (!runs) printf("(on a GPU: the plans run are not counted) ");
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

/* An evaluation forward with a following batchnorm's affine (glia_fwd.affine: (y - mean)*scale + shift, then its
 * relu), against the CPU kernel's: with and without bias and relu, both formats, fp32 and bf16 (half activations),
 * F a multiple of 4 and not (the affine's rows copied to aligned scratch); with the autotuner cuDNN's fused graph runs
 * (counted in the emulator, where it is the faster), and where it is refused (GLIA_EMU_CUDNN_MAX_OPS=1) the
 * convolution's plan and one second pass do. */
static void test_eval_affine(void)
{
    graph_runs_fn fused = emu_runs("glia_emu_cudnn_fused_conv_runs");
    for (int refuse = 0; refuse < 2; refuse++)
        for (int v = 0; v < 8; v++) {
            bool bias = v & 1, relu = v & 2, half = v & 4;
            int64_t F = refuse ? 8 : (v & 1 ? 6 : 8);
            for (int f = 0; f < 2; f++) {
                enum glia_precision p = half ? GLIA_PRECISION_BF16 : GLIA_PRECISION_FP32;
                enum glia_dtype dt = half ? GLIA_BF16 : GLIA_F32;
                enum glia_memory_format fmt = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
                if (refuse) setenv("GLIA_EMU_CUDNN_MAX_OPS", "1", 1);
                configure(p, true, DEFAULT_WORKSPACE);
                const struct cv c = {2 + refuse, 4, 7, 6, F, 3, 1, 1, 1, 1, bias, 3, 1};
                char ini[512];
                cv_ini(&c, ini, sizeof ini);
                struct glia_rng rng;
                glia__rng_seed(&rng, 7400 + (uint64_t)(16 * refuse + 2 * v + f));
                struct cuda_built C, G;
                conv_build(&c, ini, &C, &G, &rng);
                struct glia_shape in = S(4, c.N, c.C, c.H, c.W), os = S(4, c.N, F, c.H, c.W), as = S(2, 3, F, 0, 0);
                float *xv = random_values(&rng, in, 1.0f), *av = random_values(&rng, as, 0.5f);
                for (int64_t j = F; j < 2 * F; j++) av[j] = 0.5f + fabsf(av[j]);  /* scale: positive */
                cuda_round(xv, glia_shape_numel(&in), dt);  /* the CPU computes on the values the GPU gets */
                struct glia_tensor *xc = cuda_put(cuda_cpu, in, GLIA_CONTIGUOUS, xv), *yc = tensor_as(cuda_cpu, os, GLIA_CONTIGUOUS);
                struct glia_tensor *ac = cuda_put(cuda_cpu, as, GLIA_CONTIGUOUS, av), *ag = cuda_put(cuda_gpu, as, GLIA_CONTIGUOUS, av);
                struct glia_tensor *xg = cuda_swap_dtype(cuda_put(cuda_gpu, in, fmt, xv), dt);
                struct glia_tensor *yg = cuda_swap_dtype(tensor_as(cuda_gpu, os, fmt), dt);
                const struct glia_tensor *inc[1] = {xc}, *ing[1] = {xg};
                struct glia_fwd fc = {inc, 1, yc, NULL, false, 3, false, 0, NULL, false, 0, NULL, NULL, NULL, ac, relu, NULL, NULL};
                struct glia_fwd fg = {ing, 1, yg, NULL, false, 3, false, 0, NULL, false, 0, NULL, NULL, NULL, ag, relu, NULL, NULL};
                CU_ASSERT_FATAL(C.kernel->forward(&C.l, &fc) == GLIA_OK);
                if (fused) fused(true);
                glia_status st = G.kernel->forward(&G.l, &fg);
                if (!st) st = G.kernel->forward(&G.l, &fg);  /* the check's run, then the plan's */
                if (st) printf("\n  %s", glia_context_error(cuda_ctx));
                CU_ASSERT_FATAL(st == GLIA_OK);
                long n = fused ? fused(true) : -1;
                if (fused) CU_ASSERT(refuse ? n == 0 : n >= 1);
                double d = cuda_diff_of(yc, yg), tol = half ? 3e-2 : 1e-4;
                int64_t neg = 0;
                struct glia_tensor *y32 = cuda_as_dtype(yg, GLIA_F32), *h = cuda_get(y32);
                for (int64_t j = 0; j < glia_tensor_numel(h); j++) neg += glia_tensor_f32(h)[j] < 0;
                glia_tensor_release(h);
                glia_tensor_release(y32);
                if (!(d <= tol) || (relu && neg)) printf("\n  %s%s %s: %g off, %lld negative\n", ini, half ? "bf16" : "fp32",
                                                         f ? "nhwc" : "nchw", d, (long long)neg);
                CU_ASSERT(d <= tol);
                CU_ASSERT(!relu || neg == 0);
                struct glia_tensor *all[] = {xc, yc, ac, ag, xg, yg};
                for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) glia_tensor_release(all[j]);
                free(xv), free(av);
                cuda_unbuild(&C);
                cuda_unbuild(&G);
                unsetenv("GLIA_EMU_CUDNN_MAX_OPS");
            }
        }
    if (!fused) printf("(on a GPU: the plans run are not counted) ");
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

/* A fused graph's bias read from a packed arena at a 4-byte offset (channels_last: the weights go through aligned
 * scratch anyway): the bias is copied to 16-byte aligned scratch, the fused graph runs (timed, and the faster in the
 * emulator; counted there), and the results hold against the CPU, training and evaluation. */
static void test_fused_unaligned_bias(void)
{
    graph_runs_fn fused = emu_runs("glia_emu_cudnn_fused_conv_runs");
    const struct cv c = {13, 4, 8, 8, 8, 3, 1, 1, 1, 1, true, 3, 1};  /* a shape of its own: choices are cached */
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
    char ini[512];
    cv_ini(&c, ini, sizeof ini);
    strcat(ini, "activation = relu\n");
    struct glia_rng rng;
    glia__rng_seed(&rng, 7500);
    struct cuda_built C, G;
    conv_build(&c, ini, &C, &G, &rng);
    struct glia_tensor *wa, *ga;
    params_at_offset(&C, &G, &wa, &ga);
    CU_ASSERT(((uintptr_t)G.l.params[1].value->data & 15u) != 0);  /* the bias: not 16-byte aligned */
    for (int eval = 0; eval < 2; eval++) {
        if (fused) fused(true);
        conv_pass(&c, &C, &G, GLIA_PRECISION_FP32, GLIA_CHANNELS_LAST, (struct pass){.eval = eval}, &rng, ini);
        if (fused) CU_ASSERT(fused(true) >= 1);
    }
    cuda_unbuild(&C);
    cuda_unbuild(&G);
    glia_tensor_release(wa);
    glia_tensor_release(ga);
    if (!fused) printf("(on a GPU: the plans run are not counted) ");
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
}

CUDA_TEST_MAIN("cuda_conv", GLIA_TEST(test_fp32), GLIA_TEST(test_tf32), GLIA_TEST(test_bf16), GLIA_TEST(test_fp16),
               GLIA_TEST(test_zero_workspace), GLIA_TEST(test_deterministic), GLIA_TEST(test_eval), GLIA_TEST(test_shape_change),
               GLIA_TEST(test_no_input_grad), GLIA_TEST(test_tuning_workspace_given_back),
               GLIA_TEST(test_tuning_workspace_bounded), GLIA_TEST(test_tuning_workspace_per_layer), GLIA_TEST(test_half_activations), GLIA_TEST(test_graph_api), GLIA_TEST(test_winograd_refused_fp32),
               GLIA_TEST(test_graph_api_unaligned), GLIA_TEST(test_activation_relu),
               GLIA_TEST(test_graph_api_fused), GLIA_TEST(test_graph_api_captured),
               GLIA_TEST(test_eval_affine), GLIA_TEST(test_fused_unaligned_bias))
