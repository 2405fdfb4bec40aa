/* tests/test_cuda_pointwise.c — the CUDA relu, leaky_relu, sigmoid, tanh, gelu, add and pointwise
 * (NVRTC) impls against the CPU ones on a GPU. Exits 77 (skipped) without a usable GPU or without
 * the CUDA build. Not a test of the expression parser (test_pointwise does that on the host). */
#include "cudautil.h"

#define FP32 GLIA_PRECISION_FP32
#define NCHW GLIA_CONTIGUOUS
#define NHWC GLIA_CHANNELS_LAST

static const char *const activations[] = {
    "[l]\ntype = relu\n",
    "[l]\ntype = leaky_relu\nnegative_slope = 0.2\n",
    "[l]\ntype = leaky_relu\n", /* the default slope */
    "[l]\ntype = sigmoid\n",
    "[l]\ntype = tanh\n",
    "[l]\ntype = gelu\n",
    "[l]\ntype = gelu\napproximate = tanh\n",
};
#define N_ACTIVATIONS ((int)(sizeof activations / sizeof activations[0]))

/* The CPU plugins of the types under test: once cuda.so has registered its impls of a type,
 * finding the type no longer loads its CPU plugin on demand. */
static void cpu_plugins(void)
{
    static const char *const names[] = {"relu", "leaky_relu", "sigmoid", "tanh", "gelu", "add", "pointwise"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        CU_ASSERT_FATAL(glia_plugin_load(cuda_ctx, names[i]) == GLIA_OK);
}

/* cuda_expect over both gradient modes and, for 4-D inputs, both formats */
static void expect_all(const char *ini, const struct glia_shape *in, int n_in, double tol, uint64_t seed)
{
    for (int f = 0; f < (in[0].ndim == 4 ? 2 : 1); f++)
        for (int acc = 0; acc < 2; acc++) {
            struct cuda_case k = {ini,   in,   n_in, FP32, f ? NHWC : NCHW, false,
                                  acc,   NULL, seed + (uint64_t)(2 * f + acc), GLIA_F32, NULL};
            cuda_expect(&k, tol);
        }
}

/* ---- a finer harness: chosen input values, gradients for some inputs only, mixed modes,
 * aliased gradients, tensors at an offset in their storage ---- */

struct pair_case {
    const char *ini;
    const struct glia_shape *in;
    int n_in;
    enum glia_memory_format format;   /* of the GPU's 4-D tensors */
    int64_t offset;                   /* of each GPU tensor in its storage, in floats (1: unaligned) */
    const float *const *values;       /* n_in arrays in NCHW order; NULL: N(0, 1) */
    unsigned need;                    /* bit k: input k gets a gradient (else din[k] is NULL) */
    unsigned acc;                     /* bit k: accumulate onto 1 (else write over NaN) */
    bool alias01;                     /* din[1] is din[0]'s tensor, accumulating (an input fed twice) */
    uint64_t seed;
};

/* A GPU tensor of shape s in format f placed offset floats into its storage, holding v (NCHW). */
static struct glia_tensor *gpu_put_at(struct glia_shape s, enum glia_memory_format f, int64_t offset, const float *v)
{
    struct glia_tensor *h = tensor_as(cuda_cpu, s, NCHW), *hf = tensor_as(cuda_cpu, s, f), *base, *t;
    memcpy(glia_tensor_f32(h), v, glia_tensor_nbytes(h));
    CU_ASSERT_FATAL(glia_tensor_convert(hf, h, false) == GLIA_OK);
    struct glia_shape bs = S(1, glia_shape_numel(&s) + offset, 0, 0, 0);
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_F32, &bs, &base) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_view_as(base, offset, &s, s.ndim == 4 ? f : NCHW, &t) == GLIA_OK);
    glia_tensor_release(base);
    CU_ASSERT_FATAL(glia_tensor_from_host(t, glia_tensor_f32(hf), glia_tensor_nbytes(hf)) == GLIA_OK);
    glia_tensor_release(h);
    glia_tensor_release(hf);
    return t;
}

static float logical(const struct glia_tensor *t, int64_t i)
{
    if (t->shape.ndim != 4) return glia_tensor_f32(t)[i];
    const int64_t *d = t->shape.dim;
    int64_t w = i % d[3], h = i / d[3] % d[2], c = i / (d[3] * d[2]) % d[1], n = i / (d[3] * d[2] * d[1]);
    return at4(t, n, c, h, w);
}

/* Largest |cpu - gpu| / max(1, |cpu|); NaN against NaN and an infinity against the same one are equal. */
static double tdiff(const struct glia_tensor *cpu, const struct glia_tensor *gpu)
{
    struct glia_tensor *g = cuda_get(gpu);
    double worst = 0;
    for (int64_t i = 0; i < glia_tensor_numel(cpu); i++) {
        double a = logical(cpu, i), b = logical(g, i);
        if ((isnan(a) && isnan(b)) || a == b) continue;
        double e = fabs(a - b) / fmax(1.0, fabs(a));
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    glia_tensor_release(g);
    return worst;
}

static double pair_diff(const struct pair_case *k)
{
    struct cuda_built C, G;
    cuda_build(k->ini, "cpu", cuda_cpu, k->in, k->n_in, &C);
    cuda_build(k->ini, NULL, cuda_gpu, k->in, k->n_in, &G);
    struct glia_shape os;
    CU_ASSERT_FATAL(C.type->infer_shape(&C.l, k->in, k->n_in, &os) == GLIA_OK);
    struct glia_rng rng;
    glia__rng_seed(&rng, k->seed);
    struct glia_tensor *xc[GLIA__MAX_INPUTS], *xg[GLIA__MAX_INPUTS], *dxc[GLIA__MAX_INPUTS], *dxg[GLIA__MAX_INPUTS];
    bool acc[GLIA__MAX_INPUTS];
    for (int i = 0; i < k->n_in; i++) {
        int64_t n = glia_shape_numel(&k->in[i]);
        float *v = malloc(sizeof(float) * (size_t)n);
        if (k->values) memcpy(v, k->values[i], sizeof(float) * (size_t)n);
        else cuda_randn(&rng, v, n, 1.0f);
        xc[i] = cuda_put(cuda_cpu, k->in[i], NCHW, v);
        xg[i] = gpu_put_at(k->in[i], k->format, k->offset, v);
        acc[i] = k->acc >> i & 1u;
        for (int64_t j = 0; j < n; j++) v[j] = acc[i] ? 1.0f : NAN;
        dxc[i] = (k->need >> i & 1u) ? cuda_put(cuda_cpu, k->in[i], NCHW, v) : NULL;
        dxg[i] = (k->need >> i & 1u) ? gpu_put_at(k->in[i], k->format, k->offset, v) : NULL;
        free(v);
    }
    if (k->alias01) {
        CU_ASSERT_FATAL(k->n_in >= 2 && dxc[0] && dxc[1]);
        glia_tensor_release(dxc[1]);
        glia_tensor_release(dxg[1]);
        dxc[1] = glia_tensor_retain(dxc[0]);
        dxg[1] = glia_tensor_retain(dxg[0]);
        acc[1] = true;
    }
    int64_t on = glia_shape_numel(&os);
    float *ov = malloc(sizeof(float) * (size_t)on);
    cuda_randn(&rng, ov, on, 1.0f);
    struct glia_tensor *outc = tensor_as(cuda_cpu, os, NCHW), *outg = gpu_put_at(os, k->format, k->offset, ov);
    struct glia_tensor *doutc = cuda_put(cuda_cpu, os, NCHW, ov), *doutg = gpu_put_at(os, k->format, k->offset, ov);
    free(ov);
    const struct glia_tensor *inc[GLIA__MAX_INPUTS], *ing[GLIA__MAX_INPUTS];
    for (int i = 0; i < k->n_in; i++) inc[i] = xc[i], ing[i] = xg[i];
    struct glia_fwd fc = {inc, k->n_in, outc, NULL, true, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, fg = {ing, k->n_in, outg, NULL, true, 77, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_FATAL(C.kernel->forward(&C.l, &fc) == GLIA_OK);
    glia_status st = G.kernel->forward(&G.l, &fg);
    if (st) printf("\n  cuda forward: %s\n", glia_context_error(cuda_ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    double d = tdiff(outc, outg);
    struct glia_bwd bc = {inc, k->n_in, outc, doutc, dxc, acc, NULL, NULL, NULL, NULL, false}, bg = {ing, k->n_in, outg, doutg, dxg, acc, NULL, NULL, NULL, NULL, false};
    CU_ASSERT_FATAL(C.kernel->backward(&C.l, &bc) == GLIA_OK);
    st = G.kernel->backward(&G.l, &bg);
    if (st) printf("\n  cuda backward: %s\n", glia_context_error(cuda_ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    for (int i = 0; i < k->n_in; i++)
        if (dxc[i]) d = fmax(d, tdiff(dxc[i], dxg[i]));
    for (int i = 0; i < k->n_in; i++) {
        glia_tensor_release(xc[i]), glia_tensor_release(xg[i]);
        glia_tensor_release(dxc[i]), glia_tensor_release(dxg[i]);
    }
    glia_tensor_release(outc), glia_tensor_release(outg), glia_tensor_release(doutc), glia_tensor_release(doutg);
    cuda_unbuild(&C);
    cuda_unbuild(&G);
    return d;
}

static void pair_expect(const struct pair_case *k, double tol)
{
    double d = pair_diff(k);
    if (!(d <= tol))
        printf("\n  %s  %d input%s, %s, offset %lld, need %#x, acc %#x%s: diff %.3g (tol %.3g)\n", k->ini, k->n_in,
               k->n_in == 1 ? "" : "s", glia_memory_format_name(k->format), (long long)k->offset, k->need, k->acc,
               k->alias01 ? ", aliased" : "", d, tol);
    CU_ASSERT(d <= tol);
}

/* ---- the fixed activations ---- */

static void test_activations(void)
{
    cpu_plugins();
    const struct glia_shape shapes[] = {S(4, 2, 3, 5, 7), S(4, 1, 5, 3, 3), S(2, 3, 37, 0, 0), S(2, 1, 1, 0, 0)};
    for (int a = 0; a < N_ACTIVATIONS; a++)
        for (int s = 0; s < 4; s++) expect_all(activations[a], &shapes[s], 1, 1e-5, 100 + (uint64_t)(10 * a + s));
}

/* many blocks, a tail that is not a multiple of 4, eval mode, and a precision that only
 * GEMM and convolution follow */
static void test_activations_large_eval_tf32(void)
{
    cpu_plugins();
    const struct glia_shape big = S(2, 3, 349525, 0, 0), img = S(4, 3, 16, 33, 35);
    for (int a = 0; a < N_ACTIVATIONS; a++) {
        struct cuda_case k = {activations[a], &big, 1, FP32, NCHW, false, true, NULL, 7, GLIA_F32, NULL};
        cuda_expect(&k, 1e-5);
        struct cuda_case e = {activations[a], &img, 1, FP32, NHWC, true, false, NULL, 8, GLIA_F32, NULL};
        cuda_expect(&e, 1e-5);
        struct cuda_case t = {activations[a], &img, 1, GLIA_PRECISION_TF32, NHWC, false, false, NULL, 9, GLIA_F32, NULL};
        cuda_expect(&t, 1e-5);
    }
}

/* relu's gradient at 0 is 0 (decided on y); leaky_relu's sides are decided on x (0 goes to the
 * slope side); sigmoid saturates without overflow; the scalar path on unaligned tensors */
static void test_activation_edges(void)
{
    cpu_plugins();
    const struct glia_shape s = S(2, 3, 7, 0, 0);
    static const float v[21] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1.0f, -1.0f, 100.0f, -100.0f, 1e4f, -1e4f,
                                89.0f, -89.0f, 0.5f, -0.5f, 3.0f, -3.0f, 20.0f, -20.0f, 1e-7f, -1e-7f, 0.0f};
    const float *vals[1] = {v};
    const char *inis[] = {"[l]\ntype = relu\n", "[l]\ntype = leaky_relu\nnegative_slope = 0\n",
                          "[l]\ntype = leaky_relu\nnegative_slope = 0.3\n", "[l]\ntype = sigmoid\n",
                          "[l]\ntype = tanh\n", "[l]\ntype = gelu\n"};
    for (int a = 0; a < 6; a++)
        for (int acc = 0; acc < 2; acc++) {
            struct pair_case k = {inis[a], &s, 1, NCHW, 0, vals, 1, (unsigned)acc, false, 5};
            pair_expect(&k, a == 0 ? 0.0 : 1e-6);  /* relu: exact */
        }
    const struct glia_shape img = S(4, 3, 5, 3, 3);
    for (int a = 0; a < N_ACTIVATIONS; a++)
        for (int off = 1; off <= 4; off++)
            for (int f = 0; f < 2; f++) {
                struct pair_case k = {activations[a], &img, 1, f ? NHWC : NCHW, off, NULL, 1, (unsigned)(off & 1), false,
                                      (uint64_t)(off + 10 * f)};
                pair_expect(&k, 1e-5);
            }
}

/* The relu layer and the expression relu(x) on the GPU against torch.relu's values at its edges (bits:
 * NaN stays NaN, -0 stays -0, -inf gives +0) and its gradient (dy where y > 0 or y is NaN, else 0; the
 * layer selects, so an inf or NaN dy where y <= 0 gives 0, while the expression multiplies dy by its slope
 * and is compared on finite dy). */
static void test_relu_torch_values(void)
{
    cpu_plugins();
    enum { n = 9 };
    static const float x[n] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 1.5f, -1.5f, 1e-45f, -1e-45f};
    static const float want_y[n] = {NAN, -0.0f, 0.0f, INFINITY, 0.0f, 1.5f, 0.0f, 1e-45f, 0.0f};
    static const float dy_layer[n] = {NAN, INFINITY, -2.0f, INFINITY, NAN, 2.0f, INFINITY, -1.0f, NAN};
    static const float want_layer[n] = {NAN, 0.0f, 0.0f, INFINITY, 0.0f, 2.0f, 0.0f, -1.0f, 0.0f};
    static const float dy_expr[n] = {3.0f, 4.0f, 5.0f, -6.0f, 7.0f, 8.0f, 9.0f, -10.0f, 11.0f};
    static const float want_expr[n] = {3.0f, 0.0f, 0.0f, -6.0f, 0.0f, 8.0f, 0.0f, -10.0f, 0.0f};
    const char *inis[2] = {"[l]\ntype = relu\n", "[l]\ntype = pointwise\nexpr = relu(x)\n"};
    struct glia_shape s = S(2, 1, n, 0, 0);
    for (int k = 0; k < 2; k++) {
        struct cuda_built G;
        cuda_build(inis[k], NULL, cuda_gpu, &s, 1, &G);
        CU_ASSERT_EQUAL(G.kernel->device_type, GLIA_DEVICE_CUDA);
        float nan_fill[n];
        for (int i = 0; i < n; i++) nan_fill[i] = NAN;
        struct glia_tensor *tx = cuda_put(cuda_gpu, s, NCHW, x), *ty = cuda_put(cuda_gpu, s, NCHW, nan_fill);
        struct glia_tensor *tdy = cuda_put(cuda_gpu, s, NCHW, k ? dy_expr : dy_layer);
        struct glia_tensor *tdx = cuda_put(cuda_gpu, s, NCHW, nan_fill);
        const struct glia_tensor *in[1] = {tx};
        struct glia_fwd fa = {in, 1, ty, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
        CU_ASSERT_FATAL(G.kernel->forward(&G.l, &fa) == GLIA_OK);
        struct glia_tensor *din[1] = {tdx};
        bool acc[1] = {false};
        struct glia_bwd ba = {in, 1, ty, tdy, din, acc, NULL, NULL, NULL, NULL, false};
        CU_ASSERT_FATAL(G.kernel->backward(&G.l, &ba) == GLIA_OK);
        struct glia_tensor *hy = cuda_get(ty), *hdx = cuda_get(tdx);
        const float *y = glia_tensor_f32(hy), *dx = glia_tensor_f32(hdx), *want_dx = k ? want_expr : want_layer;
        for (int i = 0; i < n; i++) {
            bool ok = isnan(want_y[i]) ? isnan(y[i]) : !memcmp(&y[i], &want_y[i], sizeof y[i]);
            bool gok = isnan(want_dx[i]) ? isnan(dx[i]) : dx[i] == want_dx[i];
            if (!ok || !gok)
                printf("\n  %s: x %g: y %g (want %g), dx %g (want %g)", inis[k], x[i], y[i], want_y[i], dx[i], want_dx[i]);
            CU_ASSERT(ok && gok);
        }
        struct glia_tensor *all[] = {tx, ty, tdy, tdx, hy, hdx};
        for (int i = 0; i < 6; i++) glia_tensor_release(all[i]);
        cuda_unbuild(&G);
    }
}

/* ---- add ---- */

static void test_add(void)
{
    cpu_plugins();
    const char *ini = "[l]\ntype = add\n";
    const struct glia_shape img[10] = {S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7),
                                       S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7),
                                       S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7)};
    const struct glia_shape flat[3] = {S(2, 1, 13, 0, 0), S(2, 1, 13, 0, 0), S(2, 1, 13, 0, 0)};
    expect_all(ini, img, 2, 1e-6, 1);
    expect_all(ini, img, 3, 1e-6, 2);
    expect_all(ini, img, 10, 1e-6, 3);  /* more than one launch's worth of inputs */
    expect_all(ini, flat, 3, 1e-6, 4);
    /* gradients for some inputs only, mixed modes, across launches; an input fed twice */
    for (int f = 0; f < 2; f++) {
        struct pair_case k = {ini, img, 10, f ? NHWC : NCHW, 0, NULL, 0x2ddu, 0x134u, false, 11};
        pair_expect(&k, 1e-6);
        struct pair_case u = {ini, img, 3, f ? NHWC : NCHW, 1, NULL, 0x5u, 0x4u, false, 12};
        pair_expect(&u, 1e-6);
        struct pair_case al = {ini, img, 2, f ? NHWC : NCHW, 0, NULL, 0x3u, 0x0u, true, 13};
        pair_expect(&al, 1e-6);
    }
}

/* add on bf16 and f16 activations: the CPU's f32 sum of the same (rounded) values, rounded once per launch */
static void test_add_half(void)
{
    cpu_plugins();
    const struct glia_shape img[10] = {S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7),
                                       S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7),
                                       S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7)};
    const int n_in[] = {2, 3, 10};
    for (int h = 0; h < 2; h++)
        for (int n = 0; n < 3; n++)
            for (int f = 0; f < 2; f++)
                for (int acc = 0; acc < 2; acc++) {
                    struct cuda_case k = {.ini = "[l]\ntype = add\n", .in = img, .n_in = n_in[n], .precision = FP32,
                                          .format = f ? NHWC : NCHW, .accumulate = acc, .seed = 40 + (uint64_t)n,
                                          .act = h ? GLIA_F16 : GLIA_BF16};
                    double ulp = h ? 1.0 / 1024 : 1.0 / 128;  /* of values in [1, 2) */
                    /* over 8 inputs the first 8's sum is rounded too, and it may be larger than the whole */
                    cuda_expect(&k, (n_in[n] > 8 ? 2.0 : 0.5) * ulp);
                }
}

/* ---- pointwise (NVRTC) ---- */

struct pw_expr {
    const char *expr;
    int n_in;
};

static const struct pw_expr pw_exprs[] = {
    {"x * sigmoid(x)", 1},
    {"sigmoid(x) * x", 1},  /* the same IR: the same cached module */
    {"erf(x) + tanh(x)", 1},
    {"pow(abs(x) + 0.5, 1.7)", 1},
    {"log(abs(x) + 1) + sqrt(abs(x) + 0.01)", 1},
    {"exp(-x * x) * x^3 - 2 * x", 1},
    {"0.5 * x * (1 + erf(x / sqrt(2)))", 1},
    {"max(x, 0.1 * x) + y", 2},
    {"x / (abs(y) + 1)", 2},
    {"pow(abs(x) + 0.1, y)", 2},
    {"min(x, y) * ge(x, 0) - sign(y)", 2},
    {"select(ge(x, y), x, y * z)", 3},
    {"x * y + y * z + z * x", 3},
    {"min(x, y) * max(z, w) - sign(x) * w / (abs(y) + 1)", 4},
    {"x * sigmoid(y) + tanh(z) * w - pi", 4},
    {"dropout(x * sigmoid(x), 0.3)", 1},  /* the CPU impl's mask in either format */
    {"dropout(x + y, 0.5) * z", 3},
};
#define N_PW ((int)(sizeof pw_exprs / sizeof pw_exprs[0]))

static void test_pointwise_exprs(void)
{
    cpu_plugins();
    const struct glia_shape img[4] = {S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7)};
    const struct glia_shape one[4] = {S(4, 1, 5, 3, 3), S(4, 1, 5, 3, 3), S(4, 1, 5, 3, 3), S(4, 1, 5, 3, 3)};
    const struct glia_shape flat[4] = {S(2, 3, 37, 0, 0), S(2, 3, 37, 0, 0), S(2, 3, 37, 0, 0), S(2, 3, 37, 0, 0)};
    char ini[256];
    for (int e = 0; e < N_PW; e++) {
        snprintf(ini, sizeof ini, "[l]\ntype = pointwise\nexpr = %s\n", pw_exprs[e].expr);
        expect_all(ini, img, pw_exprs[e].n_in, 1e-4, 200 + (uint64_t)e);
        expect_all(ini, one, pw_exprs[e].n_in, 1e-4, 300 + (uint64_t)e);
        expect_all(ini, flat, pw_exprs[e].n_in, 1e-4, 400 + (uint64_t)e);
    }
}

/* A transformer's (N, T, C) sequences: every activation, add, and the chains fuse_pointwise makes of them (gelu
 * feeding a residual add feeding a dropout, and GPT-2's tanh form of gelu), in f32 and bf16. */
static void test_sequences(void)
{
    cpu_plugins();
    const struct glia_shape seq[3] = {S(3, 2, 5, 12, 0), S(3, 2, 5, 12, 0), S(3, 2, 5, 12, 0)};
    const struct glia_shape odd = S(3, 3, 7, 33, 0);
    for (int a = 0; a < N_ACTIVATIONS; a++) {
        expect_all(activations[a], &seq[0], 1, 1e-5, 500 + (uint64_t)a);
        expect_all(activations[a], &odd, 1, 1e-5, 510 + (uint64_t)a);
    }
    expect_all("[l]\ntype = add\n", seq, 2, 1e-6, 520);
    expect_all("[l]\ntype = add\n", seq, 3, 1e-6, 521);
    static const char *const chains[] = {
        "[l]\ntype = pointwise\nexpr = dropout(0.5 * x * (1 + erf(x * 0.70710678118654752)) + y, 0.1)\n",
        "[l]\ntype = pointwise\nexpr = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x^3)))\n",
        "[l]\ntype = pointwise\nexpr = relu(x + y + z)\n",
    };
    const int n_in[3] = {2, 1, 3};
    for (int c = 0; c < 3; c++) {
        expect_all(chains[c], seq, n_in[c], 1e-4, 530 + (uint64_t)c);
        for (int acc = 0; acc < 2; acc++) {
            struct cuda_case k = {.ini = chains[c], .in = seq, .n_in = n_in[c], .precision = GLIA_PRECISION_BF16,
                                  .accumulate = acc, .seed = 540 + (uint64_t)c, .act = GLIA_BF16};
            cuda_expect(&k, 1.0 / 256 + 1e-4);
        }
    }
}

/* The activations and pointwise expressions on bf16 and f16 activations (precision bf16, fp16: the kernels compiled
 * for that type too): the CPU's f32 results on the same (rounded) values, rounded once. */
static void test_jit_half(void)
{
    cpu_plugins();
    const struct glia_shape img[4] = {S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7)};
    char ini[256];
    for (int e = 0; e < N_ACTIVATIONS + N_PW; e++)
        for (int h = 0; h < 2; h++)
            for (int f = 0; f < 2; f++)
                for (int acc = 0; acc < 2; acc++) {
                    const struct pw_expr *pw = e < N_ACTIVATIONS ? NULL : &pw_exprs[e - N_ACTIVATIONS];
                    if (!pw) snprintf(ini, sizeof ini, "%s", activations[e]);
                    else snprintf(ini, sizeof ini, "[l]\ntype = pointwise\nexpr = %s\n", pw->expr);
                    struct cuda_case k = {.ini = ini, .in = img, .n_in = pw ? pw->n_in : 1,
                                          .precision = h ? GLIA_PRECISION_FP16 : GLIA_PRECISION_BF16,
                                          .format = f ? NHWC : NCHW, .accumulate = acc, .seed = 500 + (uint64_t)e,
                                          .act = h ? GLIA_F16 : GLIA_BF16};
                    cuda_expect(&k, (h ? 1.0 / 2048 : 1.0 / 256) + 1e-4);
                }
}

/* gradients for some inputs only (NULL din), mixed write/accumulate, an input fed twice,
 * unaligned tensors */
static void test_pointwise_grad_modes(void)
{
    cpu_plugins();
    const struct glia_shape img[4] = {S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7), S(4, 2, 3, 5, 7)};
    const char *ini3 = "[l]\ntype = pointwise\nexpr = select(ge(x, y), x, y * z)\n";
    const char *ini4 = "[l]\ntype = pointwise\nexpr = x * sigmoid(y) + tanh(z) * w\n";
    const char *mul = "[l]\ntype = pointwise\nexpr = x * y + exp(x)\n";
    for (int f = 0; f < 2; f++) {
        enum glia_memory_format fmt = f ? NHWC : NCHW;
        struct pair_case a = {ini3, img, 3, fmt, 0, NULL, 0x5u, 0x4u, false, 21};
        pair_expect(&a, 1e-4);
        struct pair_case b = {ini4, img, 4, fmt, 1, NULL, 0x6u, 0x2u, false, 22};
        pair_expect(&b, 1e-4);
        struct pair_case c = {ini4, img, 4, fmt, 3, NULL, 0xfu, 0x9u, false, 23};
        pair_expect(&c, 1e-4);
        struct pair_case d = {mul, img, 2, fmt, 0, NULL, 0x3u, 0x0u, true, 24};
        pair_expect(&d, 1e-4);
        struct pair_case e = {ini3, img, 3, fmt, 0, NULL, 0x0u, 0x0u, false, 25};  /* no gradient at all */
        pair_expect(&e, 1e-4);
    }
}

/* NaN, infinities, signed zeros through max/min (NaN from either side), sign, select, ge,
 * sigmoid (no overflow), division by zero */
static void test_pointwise_special_values(void)
{
    cpu_plugins();
    const struct glia_shape s[2] = {S(2, 2, 12, 0, 0), S(2, 2, 12, 0, 0)};
    static const float x[24] = {NAN, 1.0f, INFINITY, -INFINITY, 0.0f, -0.0f, 2.0f, -3.0f, 1e30f, -1e-30f, 100.0f, -100.0f,
                                5.0f, NAN, 0.0f, -2.0f, INFINITY, 7.0f, -0.0f, 1.0f, -1.0f, 0.5f, 88.0f, -88.0f};
    static const float y[24] = {1.0f, NAN, 0.0f, 5.0f, -0.0f, 0.0f, 2.0f, -3.0f, -1e30f, 1e-30f, -100.0f, 100.0f,
                                NAN, 5.0f, 0.0f, INFINITY, -INFINITY, -7.0f, 0.0f, -1.0f, 1.0f, -0.5f, 0.0f, 3.0f};
    const float *vals[2] = {x, y};
    const char *exprs[] = {"max(x, y)", "min(x, y)", "max(y, x) * 2", "sign(x) + sign(y)", "select(x, y, 2)",
                           "ge(x, y) * 3 + x", "sigmoid(x) + sigmoid(y)", "x / y", "abs(x) - abs(y)",
                           "relu(x) + relu(y) * 2", "relu(x * y)"};
    char ini[128];
    for (int e = 0; e < (int)(sizeof exprs / sizeof exprs[0]); e++)
        for (int acc = 0; acc < 2; acc++) {
            snprintf(ini, sizeof ini, "[l]\ntype = pointwise\nexpr = %s\n", exprs[e]);
            struct pair_case k = {ini, s, 2, NCHW, 0, vals, 0x3u, acc ? 0x3u : 0x0u, false, 31};
            pair_expect(&k, 1e-6);
        }
}

/* a configuration error of the expression is reported for a layer on the CUDA kernel like on the CPU's, naming the
 * file and line, and leaves nothing behind */
static void test_pointwise_bad_expr(void)
{
    cpu_plugins();
    struct glia_config *cfg;
    CU_ASSERT_FATAL(glia_config_parse_string(cuda_ctx, "layer.ini", "[l]\ntype = pointwise\nexpr = x +* 2\n", &cfg) ==
                    GLIA_OK);
    const struct glia_layer_type *type = glia__find_type(cuda_ctx, "pointwise");
    const struct glia_kernel *k = glia__find_kernel_for(cuda_ctx, "pointwise", GLIA_DEVICE_CUDA);
    CU_ASSERT_PTR_NOT_NULL_FATAL(type);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    const struct glia_key *sch[] = {glia__core_schema("layer"), type->keys};
    CU_ASSERT_FATAL(glia__section_validate(cfg->sections[0], sch, 2) == GLIA_OK);
    struct glia_shape in = S(2, 2, 3, 0, 0);
    struct glia_layer l = {.name = "l", .type = type, .kernel = k, .ctx = cuda_ctx, .backend = cuda_gpu};
    bool created = true;
    glia_status st = glia__layer_create(&l, cfg->sections[0], &in, 1, &created);
    CU_ASSERT_EQUAL(st, GLIA_ECONFIG);
    CU_ASSERT(!created);
    CU_ASSERT_PTR_NOT_NULL(strstr(glia_context_error(cuda_ctx), "layer.ini:3"));
    CU_ASSERT_PTR_NULL(l.attrs);
    CU_ASSERT_PTR_NULL(l.state);
    glia_config_free(cfg);
}

CUDA_TEST_MAIN("cuda_pointwise", GLIA_TEST(test_activations), GLIA_TEST(test_activations_large_eval_tf32),
               GLIA_TEST(test_activation_edges), GLIA_TEST(test_relu_torch_values), GLIA_TEST(test_add), GLIA_TEST(test_add_half), GLIA_TEST(test_pointwise_exprs), GLIA_TEST(test_jit_half),
               GLIA_TEST(test_sequences),
               GLIA_TEST(test_pointwise_grad_modes), GLIA_TEST(test_pointwise_special_values),
               GLIA_TEST(test_pointwise_bad_expr))
