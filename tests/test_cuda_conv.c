/* tests/test_cuda_conv.c — the cuDNN conv2d (impl "cudnn") against the CPU one on a GPU: shapes
 * (3x3, stride 2, 1x1, 5x5, groups, depthwise, dilation, no bias, batch 1, odd channels, one
 * input channel, 1x1 output, rectangular kernels and padding: 1x3 over token sequences, 3x1,
 * 2x5; outputs large enough for the bias gradient's several splits and channel tiles), every precision, both memory formats, write and accumulate, cudnn_benchmark on and off,
 * a zero workspace limit, [runtime] deterministic (the same bits twice), eval forward, batch-size and length changes, no input gradient (the
 * first layer), the autotuner's workspace given back.
 * Exits 77 (skipped) without a usable GPU or without the CUDA build. Not a speed test. */
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

/* The longest sum of products behind one output element: forward C/g*kh*kw, backward data at
 * most F/g*kh*kw, backward filter N*OH*OW. */
static int64_t longest_sum(const struct cv *c)
{
    int64_t fwd = c->C / c->g * c->k * c->kw, bwd_d = c->F / c->g * c->k * c->kw;
    int64_t bwd_w = c->N * out_h(c, c->H) * out_w(c, c->W);
    int64_t n = fwd > bwd_d ? fwd : bwd_d;
    return n > bwd_w ? n : bwd_w;
}

/* Tolerance of a case at precision p. fp32 runs FMA only (no TF32): cuda_tol's 1e-4 holds for
 * every algorithm cuDNN may pick at these sizes, FFT and Winograd included (their fp32 error is
 * ~1e-6..1e-5 relative here). tf32, bf16 and fp16 round both factors of every product (unit
 * roundoff u: 2^-11 for tf32 and fp16, 2^-8 for bf16) and bf16/fp16 round the result once more:
 * over a sum of n products of unit-size terms the error has a standard deviation of about
 * 0.8 u sqrt(n), and the test measures it against max(1, |value|). So: max(cuda_tol(p),
 * u (1 + 4 sqrt(n))), about 5 standard deviations, for n the case's longest sum. */
static double tol_for(enum glia_precision p, const struct cv *c)
{
    double u = p == GLIA_PRECISION_BF16 ? 0x1p-8 : 0x1p-11;
    if (p == GLIA_PRECISION_FP32) return cuda_tol(p);
    return fmax(cuda_tol(p), u * (1.0 + 4.0 * sqrt((double)longest_sum(c))));
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

/* Every case at precision p in format f, writing and accumulating, with the current options. */
static void run_cases(enum glia_precision p, enum glia_memory_format f, uint64_t seed)
{
    for (int i = 0; i < N_CASES; i++) {
        const struct cv *c = &cases[i];
        char ini[512];
        cv_ini(c, ini, sizeof ini);
        struct glia_shape in = S(4, c->N, c->C, c->H, c->W);
        for (int acc = 0; acc < 2; acc++) {
            struct cuda_case k = {.ini = ini, .in = &in, .n_in = 1, .precision = p, .format = f,
                                  .accumulate = acc, .impl = "cudnn", .seed = seed + (uint64_t)(2 * i + acc)};
            cuda_expect(&k, tol_for(p, c));
        }
    }
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
        for (int f = 0; f < 2; f++) {
            const struct cv *c = &cases[1];
            char ini[512];
            cv_ini(c, ini, sizeof ini);
            struct glia_shape in = S(4, c->N, c->C, c->H, c->W);
            struct cuda_case k = {.ini = ini, .in = &in, .n_in = 1, .precision = ps[i],
                                  .format = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS, .eval = true,
                                  .impl = "cudnn", .seed = 6000 + (uint64_t)(2 * i + f)};
            cuda_expect(&k, tol_for(ps[i], c));
        }
}

/* Random N(0, 1) values for a tensor of shape s on backend b in format f (the same values on
 * the host in *v, which the caller frees). */
static struct glia_tensor *random_tensor(struct glia_rng *r, struct glia_backend *b, struct glia_shape s,
                                         enum glia_memory_format f, float **v)
{
    int64_t n = glia_shape_numel(&s);
    if (!*v) {
        *v = malloc(sizeof(float) * (size_t)n);
        cuda_randn(r, *v, n, 1.0f);
    }
    return cuda_put(b, s, f, *v);
}

/* A tensor of shape s on b in format f filled with NaN (gradients to be written over). */
static struct glia_tensor *nan_tensor(struct glia_backend *b, struct glia_shape s, enum glia_memory_format f)
{
    int64_t n = glia_shape_numel(&s);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = NAN;
    struct glia_tensor *t = cuda_put(b, s, f, v);
    free(v);
    return t;
}

/* One CPU and one CUDA layer of `ini` run on inputs of shapes in[0..n) in turn, in format f: the
 * CUDA one sets its descriptors again when the shape changes, takes the algorithms of a shape it
 * has seen from the cache or finds new ones, and keeps matching. */
static void shape_changes(const char *ini, const struct glia_shape *shapes, int n_shapes, enum glia_memory_format f,
                          uint64_t seed)
{
    struct cuda_built C, G;
    configure(GLIA_PRECISION_FP32, true, DEFAULT_WORKSPACE);
    cuda_build(ini, "cpu", cuda_cpu, &shapes[0], 1, &C);
    cuda_build(ini, "cudnn", cuda_gpu, &shapes[0], 1, &G);
    struct glia_rng rng;
    glia__rng_seed(&rng, seed);
    for (int p = 0; p < C.l.n_params; p++) {
        int64_t n = glia_tensor_numel(C.l.params[p].value);
        float *v = glia_tensor_f32(C.l.params[p].value);
        cuda_randn(&rng, v, n, 0.5f);
        CU_ASSERT_FATAL(glia_tensor_from_host(G.l.params[p].value, v, glia_tensor_nbytes(C.l.params[p].value)) ==
                        GLIA_OK);
    }
    for (int step = 0; step < n_shapes; step++) {
        struct glia_shape in = shapes[step], os;
        CU_ASSERT_FATAL(C.ops->infer_shape(&C.l, &in, 1, &os) == GLIA_OK);
        float *xv = NULL, *dyv = NULL;
        struct glia_tensor *xc = random_tensor(&rng, cuda_cpu, in, GLIA_CONTIGUOUS, &xv);
        struct glia_tensor *xg = random_tensor(&rng, cuda_gpu, in, f, &xv);
        struct glia_tensor *dyc = random_tensor(&rng, cuda_cpu, os, GLIA_CONTIGUOUS, &dyv);
        struct glia_tensor *dyg = random_tensor(&rng, cuda_gpu, os, f, &dyv);
        struct glia_tensor *yc = tensor_as(cuda_cpu, os, GLIA_CONTIGUOUS), *yg = tensor_as(cuda_gpu, os, f);
        struct glia_tensor *dxc = nan_tensor(cuda_cpu, in, GLIA_CONTIGUOUS), *dxg = nan_tensor(cuda_gpu, in, f);
        const struct glia_tensor *inc[1] = {xc}, *ing[1] = {xg};
        struct glia_fwd fc = {inc, 1, yc, NULL, true, 77, false, 0, NULL}, fg = {ing, 1, yg, NULL, true, 77, false, 0, NULL};
        CU_ASSERT_FATAL(C.ops->forward(&C.l, &fc) == GLIA_OK);
        glia_status st = G.ops->forward(&G.l, &fg);
        if (st) printf("\n  cuda forward: %s\n", glia_context_error(cuda_ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        for (int p = 0; p < C.l.n_params; p++) {
            int64_t n = glia_tensor_numel(C.l.params[p].grad);
            float *g = glia_tensor_f32(C.l.params[p].grad);
            for (int64_t i = 0; i < n; i++) g[i] = NAN;
            CU_ASSERT_FATAL(glia_tensor_from_host(G.l.params[p].grad, g, glia_tensor_nbytes(C.l.params[p].grad)) ==
                            GLIA_OK);
            C.l.params[p].grad_unset = G.l.params[p].grad_unset = true;
        }
        bool acc[1] = {false};
        struct glia_tensor *dinc[1] = {dxc}, *ding[1] = {dxg};
        struct glia_bwd bc = {inc, 1, yc, dyc, dinc, acc, NULL}, bg = {ing, 1, yg, dyg, ding, acc, NULL};
        CU_ASSERT_FATAL(C.ops->backward(&C.l, &bc) == GLIA_OK);
        st = G.ops->backward(&G.l, &bg);
        if (st) printf("\n  cuda backward: %s\n", glia_context_error(cuda_ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        double d_out = cuda_diff_of(yc, yg), d_in = cuda_diff_of(dxc, dxg), d_par = 0;
        for (int p = 0; p < C.l.n_params; p++)
            d_par = fmax(d_par, cuda_diff_of(C.l.params[p].grad, G.l.params[p].grad));
        if (!(d_out <= 1e-4 && d_in <= 1e-4 && d_par <= 1e-4))
            printf("\n  %s  input %lldx%lldx%lldx%lld, %s: out %.3g din %.3g dparam %.3g\n", ini,
                   (long long)in.dim[0], (long long)in.dim[1], (long long)in.dim[2], (long long)in.dim[3],
                   glia_memory_format_name(f), d_out, d_in, d_par);
        CU_ASSERT(d_out <= 1e-4 && d_in <= 1e-4 && d_par <= 1e-4);
        struct glia_tensor *all[] = {xc, xg, dyc, dyg, yc, yg, dxc, dxg};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) glia_tensor_release(all[i]);
        free(xv);
        free(dyv);
    }
    cuda_unbuild(&C);
    cuda_unbuild(&G);
}

/* Batch sizes 3, 1, 3 under a 3x3 stride 2; lengths 16, 9, 16, 23, 9 and a batch change under
 * a 1x3 with padding (0, 1) (variable-length token sequences). */
static void test_shape_change(void)
{
    const struct glia_shape batches[] = {S(4, 3, 3, 9, 8), S(4, 1, 3, 9, 8), S(4, 3, 3, 9, 8)};
    const struct glia_shape lengths[] = {S(4, 3, 8, 1, 16), S(4, 3, 8, 1, 9), S(4, 3, 8, 1, 16), S(4, 3, 8, 1, 23),
                                         S(4, 3, 8, 1, 9), S(4, 5, 8, 1, 9)};
    for (int f = 0; f < 2; f++) {
        enum glia_memory_format fmt = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS;
        shape_changes("[c]\ntype = conv2d\nfilters = 6\nsize = 3\nstride = 2\npadding = 1\n", batches, 3, fmt,
                      7000 + (uint64_t)f);
        shape_changes("[c]\ntype = conv2d\nfilters = 12\nsize_h = 1\nsize_w = 3\npadding_w = 1\n", lengths, 6, fmt,
                      7100 + (uint64_t)f);
    }
}

/* Case c at precision p in format f with no input gradient asked (din[0] NULL: the first layer of
 * a model): the parameter gradients still match, written over NaN (acc false) or added onto 1. */
static void no_input_grad(const struct cv *c, enum glia_precision p, enum glia_memory_format f, bool acc, uint64_t seed)
{
    char ini[512];
    cv_ini(c, ini, sizeof ini);
    struct glia_shape in = S(4, c->N, c->C, c->H, c->W), os;
    struct cuda_built C, G;
    configure(p, true, DEFAULT_WORKSPACE);
    cuda_build(ini, "cpu", cuda_cpu, &in, 1, &C);
    cuda_build(ini, "cudnn", cuda_gpu, &in, 1, &G);
    CU_ASSERT_FATAL(C.ops->infer_shape(&C.l, &in, 1, &os) == GLIA_OK);
    struct glia_rng rng;
    glia__rng_seed(&rng, seed);
    for (int q = 0; q < C.l.n_params; q++) {
        int64_t n = glia_tensor_numel(C.l.params[q].value);
        float *v = glia_tensor_f32(C.l.params[q].value);
        cuda_randn(&rng, v, n, 0.5f);
        CU_ASSERT_FATAL(glia_tensor_from_host(G.l.params[q].value, v, glia_tensor_nbytes(C.l.params[q].value)) ==
                        GLIA_OK);
    }
    float *xv = NULL, *dyv = NULL;
    struct glia_tensor *xc = random_tensor(&rng, cuda_cpu, in, GLIA_CONTIGUOUS, &xv);
    struct glia_tensor *xg = random_tensor(&rng, cuda_gpu, in, f, &xv);
    struct glia_tensor *dyc = random_tensor(&rng, cuda_cpu, os, GLIA_CONTIGUOUS, &dyv);
    struct glia_tensor *dyg = random_tensor(&rng, cuda_gpu, os, f, &dyv);
    struct glia_tensor *yc = tensor_as(cuda_cpu, os, GLIA_CONTIGUOUS), *yg = tensor_as(cuda_gpu, os, f);
    const struct glia_tensor *inc[1] = {xc}, *ing[1] = {xg};
    struct glia_fwd fc = {inc, 1, yc, NULL, true, 77, false, 0, NULL}, fg = {ing, 1, yg, NULL, true, 77, false, 0, NULL};
    CU_ASSERT_FATAL(C.ops->forward(&C.l, &fc) == GLIA_OK);
    glia_status st = G.ops->forward(&G.l, &fg);
    if (st) printf("\n  cuda forward: %s\n", glia_context_error(cuda_ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    for (int q = 0; q < C.l.n_params; q++) {
        int64_t n = glia_tensor_numel(C.l.params[q].grad);
        float *g = glia_tensor_f32(C.l.params[q].grad);
        for (int64_t i = 0; i < n; i++) g[i] = acc ? 1.0f : NAN;
        CU_ASSERT_FATAL(glia_tensor_from_host(G.l.params[q].grad, g, glia_tensor_nbytes(C.l.params[q].grad)) ==
                        GLIA_OK);
        C.l.params[q].grad_unset = G.l.params[q].grad_unset = !acc;
    }
    bool accs[1] = {false};
    struct glia_tensor *none[1] = {NULL};
    struct glia_bwd bc = {inc, 1, yc, dyc, none, accs, NULL}, bg = {ing, 1, yg, dyg, none, accs, NULL};
    CU_ASSERT_FATAL(C.ops->backward(&C.l, &bc) == GLIA_OK);
    st = G.ops->backward(&G.l, &bg);
    if (st) printf("\n  cuda backward: %s\n", glia_context_error(cuda_ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    double d = cuda_diff_of(yc, yg);
    for (int q = 0; q < C.l.n_params; q++) d = fmax(d, cuda_diff_of(C.l.params[q].grad, G.l.params[q].grad));
    if (!(d <= tol_for(p, c)))
        printf("\n  %s  no input gradient, %s, %s%s: diff %.3g (tol %.3g)\n", ini, glia_precision_name(p),
               glia_memory_format_name(f), acc ? ", accumulate" : "", d, tol_for(p, c));
    CU_ASSERT(d <= tol_for(p, c));
    struct glia_tensor *all[] = {xc, xg, dyc, dyg, yc, yg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) glia_tensor_release(all[i]);
    free(xv);
    free(dyv);
    cuda_unbuild(&C);
    cuda_unbuild(&G);
}

static void test_no_input_grad(void)
{
    const enum glia_precision ps[] = {GLIA_PRECISION_FP32, GLIA_PRECISION_BF16};
    for (int i = 0; i < 2; i++)
        for (int f = 0; f < 2; f++)
            for (int acc = 0; acc < 2; acc++) {
                const struct cv *c = &cases[f ? 5 : 0];  /* groups in channels_last: the filter transposes */
                no_input_grad(c, ps[i], f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS, acc, 8000 + (uint64_t)(4 * i + 2 * f + acc));
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
        float *v = NULL;
        glia_tensor_release(G.l.params[q].value);
        G.l.params[q].value = random_tensor(&rng, b, G.l.params[q].shape, GLIA_CONTIGUOUS, &v);
        G.l.params[q].grad_unset = true;
        free(v);
    }
    float *xv = NULL, *dyv = NULL;
    struct glia_tensor *x = random_tensor(&rng, b, in, GLIA_CONTIGUOUS, &xv);
    struct glia_tensor *dy = random_tensor(&rng, b, os, GLIA_CONTIGUOUS, &dyv);
    struct glia_tensor *y = tensor_as(b, os, GLIA_CONTIGUOUS), *dx = tensor_as(b, in, GLIA_CONTIGUOUS);
    struct glia_memory_stats s0, s1;
    CU_ASSERT_FATAL(glia_backend_memory_stats(b, &s0) == GLIA_OK);
    FILE *log = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(log);
    glia_log_set(cuda_ctx, log, GLIA_LOG_DEBUG);  /* the layer's context: where its choices are logged */
    const struct glia_tensor *ins[1] = {x};
    struct glia_tensor *dins[1] = {dx};
    bool accs[1] = {false};
    struct glia_fwd f = {ins, 1, y, NULL, true, 1, false, 0, NULL};
    struct glia_bwd bw = {ins, 1, y, dy, dins, accs, NULL};
    CU_ASSERT_EQUAL(G.ops->forward(&G.l, &f), GLIA_OK);
    CU_ASSERT_EQUAL(G.ops->backward(&G.l, &bw), GLIA_OK);
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

CUDA_TEST_MAIN("cuda_conv", GLIA_TEST(test_fp32), GLIA_TEST(test_tf32), GLIA_TEST(test_bf16), GLIA_TEST(test_fp16),
               GLIA_TEST(test_zero_workspace), GLIA_TEST(test_deterministic), GLIA_TEST(test_eval), GLIA_TEST(test_shape_change),
               GLIA_TEST(test_no_input_grad), GLIA_TEST(test_tuning_workspace_given_back))
