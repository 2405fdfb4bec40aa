/* tests/test_cuda_dense.c — the CUDA linear, softmax_cross_entropy, flatten and dropout (and the
 * cuBLASLt GEMM under them) against the CPU impls on a GPU. Not a gradient check: the CPU impls
 * have theirs. Exits 77 (skipped) without a usable GPU or without the CUDA build. */
#include <dlfcn.h>
#include "cudautil.h"
#include <glia/types/linear.h>

static const enum glia_precision low_precisions[] = {GLIA_PRECISION_TF32, GLIA_PRECISION_BF16, GLIA_PRECISION_FP16};

/* cuda.so registers CUDA impls of these types, so cuda_build would not load the CPU plugin. */
static void need_cpu(const char *type)
{
    if (!glia__find_type(cuda_ctx, type)) CU_ASSERT_FATAL(glia_plugin_load(cuda_ctx, type) == GLIA_OK);
}

static void set_precision(enum glia_precision p)
{
    struct glia_runtime_options o = cuda_gpu->options;
    o.precision = p;
    CU_ASSERT_FATAL(glia_backend_configure(cuda_gpu, &o) == GLIA_OK);
}

/* The case in every combination of write/accumulate. */
static void expect_both_modes(struct cuda_case k, double tol)
{
    for (int acc = 0; acc < 2; acc++) {
        k.accumulate = acc;
        k.seed += 17;
        cuda_expect(&k, tol);
    }
}

/* ---- the GEMM slot: pointers aligned to 4 bytes only (parameters are packed in one arena) ---- */

static void gemm_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta)
{
    set_precision(GLIA_PRECISION_FP32);
    int64_t na = M * K, nb = K * N, nc = M * N, lda = ta ? M : K, ldb = tb ? K : N;
    struct glia_shape s = glia_shape_make(1, (int64_t[]){1 + na + nb + nc});
    float *h = malloc(sizeof(float) * (size_t)(1 + na + nb + nc)), *ref = malloc(sizeof(float) * (size_t)nc);
    struct glia_rng r;
    glia__rng_seed(&r, (uint64_t)(M * 1000 + N * 10 + K));
    cuda_randn(&r, h, 1 + na + nb + nc, 1.0f);
    const float *A = h + 1, *B = A + na, *C0 = B + nb;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += (double)(ta ? A[k * lda + m] : A[m * lda + k]) * (tb ? B[n * ldb + k] : B[k * ldb + n]);
            ref[m * N + n] = (float)(acc + beta * C0[m * N + n]);
        }
    struct glia_tensor *t;
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_F32, &s, &t) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_from_host(t, h, glia_tensor_nbytes(t)) == GLIA_OK);
    float *d = (float *)t->data + 1;  /* 4-byte aligned: A, B, C all off the 16-byte grid or on it by chance */
    glia_status st = glia_backend_gemm_f32(cuda_gpu, ta, tb, M, N, K, 1.0f, d, lda, d + na, ldb, beta, d + na + nb, N);
    if (st) printf("\n  gemm: %s\n", glia_context_error(cuda_ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_to_host(t, h, glia_tensor_nbytes(t)) == GLIA_OK);
    double worst = 0;
    for (int64_t i = 0; i < nc; i++) worst = fmax(worst, fabs(h[1 + na + nb + i] - ref[i]) / fmax(1.0, fabs(ref[i])));
    if (!(worst <= 1e-4)) printf("\n  gemm %c%c %lldx%lldx%lld beta %g: diff %g\n", ta ? 'T' : 'N', tb ? 'T' : 'N',
                                 (long long)M, (long long)N, (long long)K, beta, worst);
    CU_ASSERT(worst <= 1e-4);
    glia_tensor_release(t);
    free(h);
    free(ref);
}

static void test_gemm_unaligned(void)
{
    gemm_case(false, true, 5, 7, 13, 0.0f);
    gemm_case(false, false, 33, 17, 9, 1.0f);
    gemm_case(true, false, 64, 130, 31, 0.0f);
    gemm_case(true, true, 3, 1, 300, 1.0f);
}

/* ---- linear ---- */

static void test_linear_fp32(void)
{
    need_cpu("linear");
    static const struct {
        const char *ini;
        int64_t n, i;
    } cs[] = {
        {"[fc]\ntype = linear\noutputs = 7\n", 5, 13},
        {"[fc]\ntype = linear\noutputs = 1\n", 1, 1},
        {"[fc]\ntype = linear\noutputs = 33\nbias = off\n", 1, 37},
        {"[fc]\ntype = linear\noutputs = 130\n", 67, 300},
        {"[fc]\ntype = linear\noutputs = 10\nbias = off\n", 64, 784},
        {"[fc]\ntype = linear\noutputs = 64\n", 128, 96},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        struct glia_shape in = S(2, cs[c].n, cs[c].i, 0, 0);
        expect_both_modes((struct cuda_case){.ini = cs[c].ini, .in = &in, .n_in = 1, .seed = 100 + c},
                          cuda_tol(GLIA_PRECISION_FP32));
    }
}

/* cuda.so's glia__cuda_mixed_min_flop (dense.c: the least forward FLOPs of a linear whose f32 activations multiply in
 * the half type), found through the linear kernel's address; NULL when it cannot be found. */
static double *mixed_min_flop(void)
{
    const struct glia_kernel *k = glia__find_kernel(cuda_ctx, "linear", "cuda");
    Dl_info info;
    if (!k || !dladdr((void *)(uintptr_t)k->forward, &info)) return NULL;
    void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    double *v = h ? (double *)dlsym(h, "glia__cuda_mixed_min_flop") : NULL;
    if (h) dlclose(h);  /* the registry still holds it */
    return v;
}

/* Low precision rounds every GEMM operand (relative 2^-11 for TF32/fp16, 2^-8 for bf16), so the
 * error of a sum of K products grows like sqrt(K): sizes stay small enough for cuda_tol. f32 activations under bf16 or
 * fp16 (the layer feeding a loss) run f32 GEMMs at these sizes, and GEMMs of half copies (x, W, dy) with f32 sums and
 * results once a GEMM is large (glia__cuda_mixed_min_flop, set to 0 for the second pass); both within cuda_tol. */
static void test_linear_low_precision(void)
{
    need_cpu("linear");
    static const struct {
        const char *ini;
        int64_t n, i;
    } cs[] = {
        {"[fc]\ntype = linear\noutputs = 7\n", 5, 13},
        {"[fc]\ntype = linear\noutputs = 17\nbias = off\n", 1, 29},
        {"[fc]\ntype = linear\noutputs = 9\n", 3, 21},
    };
    double *min_flop = mixed_min_flop(), keep = min_flop ? *min_flop : 0.0;
    CU_ASSERT_PTR_NOT_NULL_FATAL(min_flop);
    CU_ASSERT(keep > 1e6);  /* a small classifier keeps its f32 GEMM */
    for (int mixed = 0; mixed < 2; mixed++) {
        *min_flop = mixed ? 0.0 : keep;
        for (size_t p = 0; p < sizeof low_precisions / sizeof low_precisions[0]; p++)
            for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
                struct glia_shape in = S(2, cs[c].n, cs[c].i, 0, 0);
                expect_both_modes((struct cuda_case){.ini = cs[c].ini, .in = &in, .n_in = 1,
                                                     .precision = low_precisions[p], .seed = 200 + c},
                                  cuda_tol(low_precisions[p]));
            }
    }
    *min_flop = keep;
    set_precision(GLIA_PRECISION_FP32);
}

/* (N, T, F) and 4-D inputs: one GEMM over every leading dim's rows, as the CPU's (and nn.Linear) */
static void test_linear_nd(void)
{
    need_cpu("linear");
    const struct {
        const char *ini;
        struct glia_shape in;
    } cs[] = {
        {"[fc]\ntype = linear\noutputs = 7\n", S(3, 2, 3, 5, 0)},
        {"[fc]\ntype = linear\noutputs = 33\nbias = off\n", S(3, 4, 17, 37, 0)},
        {"[fc]\ntype = linear\noutputs = 64\n", S(3, 8, 64, 96, 0)},
        {"[fc]\ntype = linear\noutputs = 5\n", S(4, 2, 3, 4, 6)},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        expect_both_modes((struct cuda_case){.ini = cs[c].ini, .in = &cs[c].in, .n_in = 1, .seed = 150 + c},
                          cuda_tol(GLIA_PRECISION_FP32));
        if (cs[c].in.dim[cs[c].in.ndim - 1] <= 6)  /* bf16 activations: sums short enough for cuda_tol */
            expect_both_modes((struct cuda_case){.ini = cs[c].ini, .in = &cs[c].in, .n_in = 1, .seed = 160 + c,
                                                 .precision = GLIA_PRECISION_BF16, .act = GLIA_BF16},
                              cuda_tol(GLIA_PRECISION_BF16));
    }
    set_precision(GLIA_PRECISION_FP32);
}

static void test_linear_eval(void)
{
    need_cpu("linear");
    struct glia_shape in = S(2, 3, 11, 0, 0);
    cuda_expect(&(struct cuda_case){.ini = "[fc]\ntype = linear\noutputs = 5\n", .in = &in, .n_in = 1, .eval = true,
                                    .seed = 300},
                cuda_tol(GLIA_PRECISION_FP32));
}

/* Parameters as views into one arena at odd float offsets, as the model lays them out: the GEMM
 * plans, the fused bias and the fused bias gradient must cope with 4-byte alignment. */
static void test_linear_packed_params(void)
{
    need_cpu("linear");
    set_precision(GLIA_PRECISION_FP32);
    const char *ini = "[fc]\ntype = linear\noutputs = 7\n";
    int64_t N = 6, I = 11, O = 7;
    struct glia_shape in = S(2, N, I, 0, 0), os = S(2, N, O, 0, 0);
    struct cuda_built C, G;
    cuda_build(ini, "cpu", cuda_cpu, &in, 1, &C);
    cuda_build(ini, "cuda", cuda_gpu, &in, 1, &G);
    CU_ASSERT_FATAL(G.l.n_params == 2);
    struct glia_shape arena = S(1, 1 + O * I + O, 0, 0, 0);
    struct glia_tensor *wa, *ga;
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_F32, &arena, &wa) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_F32, &arena, &ga) == GLIA_OK);
    struct glia_rng r;
    glia__rng_seed(&r, 400);
    int64_t off = 1;
    for (int p = 0; p < 2; p++) {
        struct glia_param *pg = &G.l.params[p], *pc = &C.l.params[p];
        glia_tensor_release(pg->value);
        glia_tensor_release(pg->grad);
        CU_ASSERT_FATAL(glia_tensor_view(wa, off, &pg->shape, &pg->value) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_view(ga, off, &pg->shape, &pg->grad) == GLIA_OK);
        off += glia_shape_numel(&pg->shape);
        cuda_randn(&r, glia_tensor_f32(pc->value), glia_tensor_numel(pc->value), 0.5f);
        CU_ASSERT_FATAL(glia_tensor_from_host(pg->value, glia_tensor_f32(pc->value), glia_tensor_nbytes(pc->value)) ==
                        GLIA_OK);
    }
    float xv[6 * 11], dyv[6 * 7];
    cuda_randn(&r, xv, N * I, 1.0f);
    cuda_randn(&r, dyv, N * O, 1.0f);
    struct glia_tensor *xc = cuda_put(cuda_cpu, in, GLIA_CONTIGUOUS, xv), *xg = cuda_put(cuda_gpu, in, GLIA_CONTIGUOUS, xv);
    struct glia_tensor *dyc = cuda_put(cuda_cpu, os, GLIA_CONTIGUOUS, dyv), *dyg = cuda_put(cuda_gpu, os, GLIA_CONTIGUOUS, dyv);
    struct glia_tensor *yc = tensor_as(cuda_cpu, os, GLIA_CONTIGUOUS), *yg = tensor_as(cuda_gpu, os, GLIA_CONTIGUOUS);
    struct glia_tensor *dxc = tensor_as(cuda_cpu, in, GLIA_CONTIGUOUS), *dxg = tensor_as(cuda_gpu, in, GLIA_CONTIGUOUS);
    const struct glia_tensor *ic[1] = {xc}, *ig[1] = {xg};
    struct glia_fwd fc = {ic, 1, yc, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, fg = {ig, 1, yg, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_FATAL(C.kernel->forward(&C.l, &fc) == GLIA_OK);
    CU_ASSERT_FATAL(G.kernel->forward(&G.l, &fg) == GLIA_OK);
    CU_ASSERT(cuda_diff_of(yc, yg) <= 1e-5);
    for (int round = 0; round < 2; round++) {  /* write the gradients, then add onto them */
        bool acc[1] = {round == 1};
        for (int p = 0; p < 2; p++) C.l.params[p].grad_unset = G.l.params[p].grad_unset = round == 0;
        struct glia_tensor *dc[1] = {dxc}, *dg[1] = {dxg};
        struct glia_bwd bc = {ic, 1, yc, dyc, dc, acc, NULL, NULL, NULL, NULL, false}, bg = {ig, 1, yg, dyg, dg, acc, NULL, NULL, NULL, NULL, false};
        CU_ASSERT_FATAL(C.kernel->backward(&C.l, &bc) == GLIA_OK);
        glia_status st = G.kernel->backward(&G.l, &bg);
        if (st) printf("\n  backward: %s\n", glia_context_error(cuda_ctx));
        CU_ASSERT_FATAL(st == GLIA_OK);
        CU_ASSERT(cuda_diff_of(dxc, dxg) <= 1e-5);
        for (int p = 0; p < 2; p++) CU_ASSERT(cuda_diff_of(C.l.params[p].grad, G.l.params[p].grad) <= 1e-5);
    }
    glia_tensor_release(xc), glia_tensor_release(xg), glia_tensor_release(dyc), glia_tensor_release(dyg);
    glia_tensor_release(yc), glia_tensor_release(yg), glia_tensor_release(dxc), glia_tensor_release(dxg);
    glia_tensor_release(wa), glia_tensor_release(ga);
    cuda_unbuild(&C);
    cuda_unbuild(&G);
}

/* ---- linear with half activations ----
 * x, y, dy and dx in f16 or bf16 (GLIA_KERNEL_HALF), W, b and their gradients f32, against sums in double of the same
 * values: the inputs are half values already and W and b are rounded to the half type (the copies the kernel reads). The
 * products of two half values are exact in f32 and the GPU adds them in f32 (the emulator in double), so y and dx
 * equal the exact sum rounded once to the half type within one ulp of it, plus what f32 sums of k terms may lose
 * ((k + 2) 2^-24 of the terms' magnitudes: zero-ish at these sizes); dW and db, f32 sums of N terms, within that f32
 * bound alone, a relative 2^-24 per term: far tighter than any half rounding, so a half result or a half W in the
 * gradients would fail it. */

/* v rounded once to t (f16 or bf16), to nearest even: through an f32 rounded to odd, which keeps the sticky bit. */
static float half_round(double v, enum glia_dtype t)
{
    float f = (float)v;
    if ((double)f != v && isfinite(f)) {
        if (fabs((double)f) > fabs(v)) f = nextafterf(f, 0.0f);
        f = glia_bits_f32(glia_f32_bits(f) | 1u);
    }
    return t == GLIA_BF16 ? glia_bf16_to_f32(glia_f32_to_bf16(f)) : glia_f16_to_f32(glia_f32_to_f16(f));
}

/* The gap between half value h (of type t) and the next one away from zero. */
static double half_ulp(float h, enum glia_dtype t)
{
    uint16_t m = (uint16_t)((t == GLIA_BF16 ? glia_f32_to_bf16(h) : glia_f32_to_f16(h)) & 0x7fffu);
    double a = t == GLIA_BF16 ? glia_bf16_to_f32(m) : glia_f16_to_f32(m);
    double b = t == GLIA_BF16 ? glia_bf16_to_f32((uint16_t)(m + 1)) : glia_f16_to_f32((uint16_t)(m + 1));
    return b - a;
}

/* How many of got(n) miss ref(n) (exact sums of k terms of magnitude mag(n)): rounded once to t within one ulp, or
 * for t = f32 within the f32 summation bound. */
static int64_t half_misses(const char *what, const float *got, const double *ref, const double *mag, int64_t n,
                           int64_t k, enum glia_dtype t)
{
    int64_t bad = 0;
    for (int64_t j = 0; j < n; j++) {
        double want = t == GLIA_F32 ? ref[j] : half_round(ref[j], t);
        double tol = (double)(k + 2) * ldexp(mag[j], -24) + (t == GLIA_F32 ? 0.0 : half_ulp((float)want, t));
        if (!(fabs(got[j] - want) <= tol)) {
            if (!bad) printf("\n  %s[%lld] = %.9g, want %.9g (exact %.9g, tol %.3g)\n", what, (long long)j, got[j],
                             want, ref[j], tol);
            bad++;
        }
    }
    return bad;
}

/* t's values of a CUDA tensor, as f32 on the host (malloc'ed) */
static float *half_fetch(struct glia_tensor *g)
{
    struct glia_tensor *g32 = cuda_as_dtype(g, GLIA_F32), *h = cuda_get(g32);
    int64_t n = glia_tensor_numel(h);
    float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
    memcpy(v, glia_tensor_f32(h), sizeof(float) * (size_t)n);
    glia_tensor_release(g32);
    glia_tensor_release(h);
    return v;
}

/* One training forward and backward of a linear N x I -> O in type t against the reference; gradients written
 * (grad_unset, input gradient NaN before) or added onto ones. */
static void linear_half_case(enum glia_dtype t, int64_t N, int64_t I, int64_t O, bool bias, bool acc, uint64_t seed)
{
    set_precision(t == GLIA_BF16 ? GLIA_PRECISION_BF16 : GLIA_PRECISION_FP16);
    char ini[96];
    snprintf(ini, sizeof ini, "[fc]\ntype = linear\noutputs = %lld\nbias = %s\n", (long long)O, bias ? "on" : "off");
    struct glia_shape in = S(2, N, I, 0, 0), os = S(2, N, O, 0, 0);
    struct cuda_built G;
    cuda_build(ini, "cuda", cuda_gpu, &in, 1, &G);
    CU_ASSERT_FATAL(G.kernel->flags & GLIA_KERNEL_HALF);
    const struct glia_linear_attrs *p = G.l.attrs;
    struct glia_rng r;
    glia__rng_seed(&r, seed);
    float *w = malloc(sizeof(float) * (size_t)(O * I)), *b = malloc(sizeof(float) * (size_t)O);
    float *x = malloc(sizeof(float) * (size_t)(N * I)), *dy = malloc(sizeof(float) * (size_t)(N * O));
    float *fill = malloc(sizeof(float) * (size_t)(N * I > O * I ? N * I : O * I));
    cuda_randn(&r, w, O * I, 0.5f);  /* f32 master weights, not half values */
    cuda_randn(&r, b, O, 0.5f);
    cuda_randn(&r, x, N * I, 1.0f);
    cuda_randn(&r, dy, N * O, 1.0f);
    cuda_round(x, N * I, t);
    cuda_round(dy, N * O, t);
    for (int64_t j = 0; j < (N * I > O * I ? N * I : O * I); j++) fill[j] = acc ? 1.0f : NAN;
    CU_ASSERT_FATAL(glia_tensor_from_host(G.l.params[p->w].value, w, sizeof(float) * (size_t)(O * I)) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_from_host(G.l.params[p->w].grad, fill, sizeof(float) * (size_t)(O * I)) == GLIA_OK);
    G.l.params[p->w].grad_unset = !acc;
    if (bias) {
        CU_ASSERT_FATAL(glia_tensor_from_host(G.l.params[p->b].value, b, sizeof(float) * (size_t)O) == GLIA_OK);
        CU_ASSERT_FATAL(glia_tensor_from_host(G.l.params[p->b].grad, fill, sizeof(float) * (size_t)O) == GLIA_OK);
        G.l.params[p->b].grad_unset = !acc;
    }
    struct glia_tensor *xg = cuda_swap_dtype(cuda_put(cuda_gpu, in, GLIA_CONTIGUOUS, x), t);
    struct glia_tensor *dyg = cuda_swap_dtype(cuda_put(cuda_gpu, os, GLIA_CONTIGUOUS, dy), t);
    struct glia_tensor *dxg = cuda_swap_dtype(cuda_put(cuda_gpu, in, GLIA_CONTIGUOUS, fill), t);
    struct glia_tensor *yg = cuda_swap_dtype(tensor_as(cuda_gpu, os, GLIA_CONTIGUOUS), t);
    const struct glia_tensor *ig[1] = {xg};
    struct glia_fwd fg = {ig, 1, yg, NULL, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    glia_status st = G.kernel->forward(&G.l, &fg);
    if (st) printf("\n  forward: %s\n", glia_context_error(cuda_ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    struct glia_tensor *dg[1] = {dxg};
    bool accs[1] = {acc};
    struct glia_bwd bg = {ig, 1, yg, dyg, dg, accs, NULL, NULL, NULL, NULL, false};
    st = G.kernel->backward(&G.l, &bg);
    if (st) printf("\n  backward: %s\n", glia_context_error(cuda_ctx));
    CU_ASSERT_FATAL(st == GLIA_OK);
    /* the references, from the half W */
    double *ref = malloc(sizeof(double) * (size_t)(N * I + N * O + O * I + O + 1)), *mag = malloc(sizeof(double) * (size_t)(N * I + N * O + O * I + O + 1));
    double *ry = ref, *rdx = ry + N * O, *rdw = rdx + N * I, *rdb = rdw + O * I;
    double *my = mag, *mdx = my + N * O, *mdw = mdx + N * I, *mdb = mdw + O * I;
    double a0 = acc ? 1.0 : 0.0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < O; o++) {
            double s = bias ? half_round(b[o], t) : 0.0, m = fabs(s);  /* the bias's half copy, as autocast's */
            for (int64_t i = 0; i < I; i++) {
                double v = (double)x[n * I + i] * half_round(w[o * I + i], t);
                s += v, m += fabs(v);
            }
            ry[n * O + o] = s, my[n * O + o] = m;
        }
    for (int64_t n = 0; n < N; n++)
        for (int64_t i = 0; i < I; i++) {
            double s = a0, m = a0;
            for (int64_t o = 0; o < O; o++) {
                double v = (double)dy[n * O + o] * half_round(w[o * I + i], t);
                s += v, m += fabs(v);
            }
            rdx[n * I + i] = s, mdx[n * I + i] = m;
        }
    for (int64_t o = 0; o < O; o++) {
        double sb = a0, mb = a0;
        for (int64_t i = 0; i < I; i++) {
            double s = a0, m = a0;
            for (int64_t n = 0; n < N; n++) {
                double v = (double)dy[n * O + o] * x[n * I + i];
                s += v, m += fabs(v);
            }
            rdw[o * I + i] = s, mdw[o * I + i] = m;
        }
        for (int64_t n = 0; n < N; n++) sb += dy[n * O + o], mb += fabs(dy[n * O + o]);
        rdb[o] = sb, mdb[o] = mb;
    }
    float *gy = half_fetch(yg), *gdx = half_fetch(dxg), *gdw = half_fetch(G.l.params[p->w].grad);
    int64_t bad = half_misses("y", gy, ry, my, N * O, I + 1, t) + half_misses("dx", gdx, rdx, mdx, N * I, O + 1, t) +
                  half_misses("dW", gdw, rdw, mdw, O * I, N + 1, GLIA_F32);
    if (bias) {
        float *gdb = half_fetch(G.l.params[p->b].grad);
        bad += half_misses("db", gdb, rdb, mdb, O, N + 1, GLIA_F32);
        free(gdb);
    }
    if (bad) printf("  %s %lldx%lld -> %lld, bias %s, %s: %lld values off\n", glia_dtype_name(t), (long long)N,
                    (long long)I, (long long)O, bias ? "on" : "off", acc ? "accumulate" : "write", (long long)bad);
    CU_ASSERT_EQUAL(bad, 0);
    free(gy), free(gdx), free(gdw), free(ref), free(mag), free(w), free(b), free(x), free(dy), free(fill);
    glia_tensor_release(xg), glia_tensor_release(dyg), glia_tensor_release(dxg), glia_tensor_release(yg);
    cuda_unbuild(&G);
    set_precision(GLIA_PRECISION_FP32);
}

/* Every case with and without a bias, gradients written (the bias gradient in the GEMM's BGRADB epilogue) and added
 * (the column-sum kernel; N = 150 takes its two-pass form, 3 row chunks), in bf16 and f16. */
static void linear_half_cases(int64_t shift, uint64_t seed)
{
    static const int64_t sh[][3] = {{5, 13, 7}, {3, 21, 9}, {150, 24, 6}, {1, 37, 33}};
    for (int t = 0; t < 2; t++)
        for (size_t c = 0; c < sizeof sh / sizeof sh[0]; c++)
            for (int bias = 0; bias < 2; bias++)
                for (int acc = 0; acc < 2; acc++)
                    linear_half_case(t ? GLIA_F16 : GLIA_BF16, sh[c][0] + shift, sh[c][1], sh[c][2], bias, acc,
                                     seed + (uint64_t)(c * 8 + (size_t)bias * 2 + (size_t)acc + (size_t)t * 64));
}

static void test_linear_half(void)
{
    linear_half_cases(0, 500);
}

/* The same where cuBLASLt has no bias or bias-gradient epilogue (the emulator refuses them with
 * GLIA_EMU_NO_EPILOGUE; a GPU ignores it and takes the epilogues again): the GEMM's f32 result plus the bias rounded
 * once by a kernel, and the column-sum kernel for db. Other batch sizes than test_linear_half's, since each shape's
 * plan (and cuBLASLt's refusal) is cached. */
static void test_linear_half_fallback(void)
{
    setenv("GLIA_EMU_NO_EPILOGUE", "1", 1);
    linear_half_cases(1, 700);
    unsetenv("GLIA_EMU_NO_EPILOGUE");
}

/* ---- linear with an activation ----
 * activation = gelu_tanh takes cuBLASLt's GELU epilogues (GELU_AUX_BIAS in training, writing the pre-activation that
 * backward reads; GELU_BIAS in evaluation) where the output's row is a multiple of 8 values; other widths, the erf
 * form and (GLIA_EMU_NO_EPILOGUE) shapes without such an algorithm take the GEMM and the activation kernel. */
static void linear_act_cases(int64_t shift, uint64_t seed)
{
    need_cpu("linear");
    static const struct {
        const char *act;
        int64_t n, i, o;
        bool bias;
    } cs[] = {
        {"gelu_tanh", 5, 13, 8, true},  {"gelu_tanh", 6, 11, 16, false}, {"gelu_tanh", 4, 9, 7, true},
        {"gelu", 5, 13, 8, true},       {"gelu", 3, 6, 5, false},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        char ini[128];
        snprintf(ini, sizeof ini, "[fc]\ntype = linear\noutputs = %lld\nbias = %s\nactivation = %s\n",
                 (long long)cs[c].o, cs[c].bias ? "on" : "off", cs[c].act);
        struct glia_shape in = S(3, 2, cs[c].n + shift, cs[c].i, 0);
        expect_both_modes((struct cuda_case){.ini = ini, .in = &in, .n_in = 1, .seed = seed + c},
                          cuda_tol(GLIA_PRECISION_FP32));
        cuda_expect(&(struct cuda_case){.ini = ini, .in = &in, .n_in = 1, .eval = true, .seed = seed + 10 + c},
                    cuda_tol(GLIA_PRECISION_FP32));
        if (cs[c].i <= 6)  /* bf16 activations: sums short enough for cuda_tol */
            expect_both_modes((struct cuda_case){.ini = ini, .in = &in, .n_in = 1, .seed = seed + 20 + c,
                                                 .precision = GLIA_PRECISION_BF16, .act = GLIA_BF16},
                              cuda_tol(GLIA_PRECISION_BF16));
    }
    for (int t = 0; t < 2; t++) {  /* half activations through the epilogue: a row of 8 (a multiple of 8) */
        struct glia_shape in = S(3, 2, 3 + shift, 4, 0);
        expect_both_modes((struct cuda_case){.ini = "[fc]\ntype = linear\noutputs = 8\nactivation = gelu_tanh\n",
                                             .in = &in, .n_in = 1, .seed = seed + 30 + (uint64_t)t,
                                             .precision = t ? GLIA_PRECISION_FP16 : GLIA_PRECISION_BF16,
                                             .act = t ? GLIA_F16 : GLIA_BF16},
                          cuda_tol(t ? GLIA_PRECISION_FP16 : GLIA_PRECISION_BF16));
    }
    set_precision(GLIA_PRECISION_FP32);
}

static void test_linear_act(void)
{
    linear_act_cases(0, 800);
}

/* The same where cuBLASLt has no epilogue (see test_linear_half_fallback): one more row per batch, since each shape's
 * plan, and cuBLASLt's refusal, is cached. */
static void test_linear_act_fallback(void)
{
    setenv("GLIA_EMU_NO_EPILOGUE", "1", 1);
    linear_act_cases(1, 900);
    unsetenv("GLIA_EMU_NO_EPILOGUE");
}

/* ---- linear applying its producer's activation gradient (glia_bwd.din_act) ----
 * din(N,I) = (dy W) act'(pre): for gelu_tanh cuBLASLt's DGELU epilogue where the input's row (I values) is a multiple
 * of 8; other widths, gelu's erf form and (GLIA_EMU_NO_EPILOGUE) shapes without such an algorithm take the GEMM and
 * the activation-gradient kernel in place. Held to the CPU kernel (the GEMM, then the same formula), at fp32 and with
 * bf16 and f16 activations; the emulator counts the DGELU epilogues run. */
static void linear_din_act_cases(int64_t shift, uint64_t seed, bool epilogue)
{
    need_cpu("linear");
    void *h = dlopen("libglia-cudaemu.so", RTLD_NOW | RTLD_NOLOAD);
    long (*dgelu_runs)(bool) = h ? (long (*)(bool))(uintptr_t)dlsym(h, "glia_emu_lt_dgelu_runs") : NULL;
    if (h) dlclose(h);
    static const struct {
        const char *act;
        int64_t n, i, o;
        bool dgelu;  /* cuBLASLt's epilogue applies */
    } cs[] = {
        {"gelu_tanh", 5, 16, 8, true}, {"gelu_tanh", 4, 24, 5, true}, {"gelu_tanh", 6, 12, 8, false},
        {"gelu", 5, 16, 8, false},     {"gelu", 3, 7, 4, false},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        char ini[96];
        snprintf(ini, sizeof ini, "[fc]\ntype = linear\noutputs = %lld\n", (long long)cs[c].o);
        struct glia_shape in = S(2, cs[c].n + shift, cs[c].i, 0, 0);
        if (dgelu_runs) dgelu_runs(true);
        expect_both_modes((struct cuda_case){.ini = ini, .in = &in, .n_in = 1, .seed = seed + c, .din_act = cs[c].act},
                          cuda_tol(GLIA_PRECISION_FP32));
        if (dgelu_runs) CU_ASSERT_EQUAL(dgelu_runs(true), epilogue && cs[c].dgelu ? 2 : 0);
        for (int t = 0; t < 2; t++)  /* half activations: sums of O products, short enough for cuda_tol */
            expect_both_modes((struct cuda_case){.ini = ini, .in = &in, .n_in = 1, .seed = seed + 20 + 2 * c + (uint64_t)t,
                                                 .precision = t ? GLIA_PRECISION_FP16 : GLIA_PRECISION_BF16,
                                                 .act = t ? GLIA_F16 : GLIA_BF16, .din_act = cs[c].act},
                              cuda_tol(t ? GLIA_PRECISION_FP16 : GLIA_PRECISION_BF16));
        if (dgelu_runs) CU_ASSERT_EQUAL(dgelu_runs(true), epilogue && cs[c].dgelu ? 4 : 0);
    }
    set_precision(GLIA_PRECISION_FP32);
}

static void test_linear_din_act(void)
{
    linear_din_act_cases(0, 1000, true);
}

static void test_linear_din_act_fallback(void)
{
    setenv("GLIA_EMU_NO_EPILOGUE", "1", 1);
    linear_din_act_cases(1, 1100, false);
    unsetenv("GLIA_EMU_NO_EPILOGUE");
}

/* ---- softmax_cross_entropy ---- */

static void test_sce(void)
{
    need_cpu("softmax_cross_entropy");
    static const struct {
        const char *ini;
        int64_t n, c;
    } cs[] = {
        {"[loss]\ntype = softmax_cross_entropy\n", 1, 10},
        {"[loss]\ntype = softmax_cross_entropy\n", 33, 7},
        {"[loss]\ntype = softmax_cross_entropy\n", 64, 10},
        {"[loss]\ntype = softmax_cross_entropy\n", 5, 1000},
        {"[loss]\ntype = softmax_cross_entropy\n", 3, 1},
        {"[loss]\ntype = softmax_cross_entropy\nlabel_smoothing = 0.1\n", 17, 37},
        {"[loss]\ntype = softmax_cross_entropy\nlabel_smoothing = 1\n", 2, 6},
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        struct glia_shape in = S(2, cs[c].n, cs[c].c, 0, 0);
        struct cuda_case k = {.ini = cs[c].ini, .in = &in, .n_in = 1, .seed = 500 + c};
        expect_both_modes(k, cuda_tol(GLIA_PRECISION_FP32));
        k.eval = true;
        cuda_expect(&k, cuda_tol(GLIA_PRECISION_FP32));
    }
    /* a language model's (N, T, V) logits with (N, T) labels, some of them ignore_index's -100, others every one */
    static const struct {
        const char *ini;
        int64_t n, t, c;
        int ignore_every;
    } seq[] = {
        {"[loss]\ntype = softmax_cross_entropy\n", 3, 5, 11, 0},
        {"[loss]\ntype = softmax_cross_entropy\n", 2, 17, 40, 3},
        {"[loss]\ntype = softmax_cross_entropy\nlabel_smoothing = 0.1\n", 4, 6, 9, 4},
        {"[loss]\ntype = softmax_cross_entropy\n", 2, 3, 5, 1},  /* all ignored: loss 0, gradient 0 */
    };
    for (size_t c = 0; c < sizeof seq / sizeof seq[0]; c++) {
        struct glia_shape in = glia_shape_make(3, (int64_t[]){seq[c].n, seq[c].t, seq[c].c});
        struct cuda_case k = {.ini = seq[c].ini, .in = &in, .n_in = 1, .seed = 560 + c};
        cuda_ignore_every = seq[c].ignore_every;
        expect_both_modes(k, cuda_tol(GLIA_PRECISION_FP32));
        k.eval = true;
        cuda_expect(&k, cuda_tol(GLIA_PRECISION_FP32));
    }
    cuda_ignore_every = 0;
    /* half logits (GLIA_KERNEL_HALF), their gradient rounded once: 1000 classes take the 16-byte loads (8 halves),
     * 37 one value at a time; accumulated onto gradients of 1 it is the backward kernel that runs */
    for (int h = 0; h < 2; h++) {
        static const int64_t shp[][3] = {{4, 3, 1000}, {3, 5, 37}};
        for (int c = 0; c < 2; c++) {
            struct glia_shape in = glia_shape_make(3, (int64_t[]){shp[c][0], shp[c][1], shp[c][2]});
            struct cuda_case k = {.ini = "[loss]\ntype = softmax_cross_entropy\nlabel_smoothing = 0.1\n", .in = &in,
                                  .n_in = 1, .precision = GLIA_PRECISION_BF16, .act = h ? GLIA_F16 : GLIA_BF16,
                                  .seed = 580 + c};
            cuda_ignore_every = 4;
            expect_both_modes(k, h ? 1.0 / 2048 : 1.0 / 256);
            cuda_ignore_every = 0;
        }
    }
    /* only GEMM and convolution follow the precision: the loss stays fp32 */
    struct glia_shape in = S(2, 9, 13, 0, 0);
    cuda_expect(&(struct cuda_case){.ini = "[loss]\ntype = softmax_cross_entropy\n", .in = &in, .n_in = 1,
                                    .precision = GLIA_PRECISION_BF16, .seed = 550},
                cuda_tol(GLIA_PRECISION_FP32));
    set_precision(GLIA_PRECISION_FP32);
}

/* The CUDA softmax_cross_entropy's gradient in its forward's pass (the fused classifier) equals its backward's, bit
 * for bit, written over the logits, with ignored labels and a vocabulary a warp loops over many times; small batches
 * count their labels in the rows' kernel, larger ones (2100 rows) in a kernel of its own first. */
static void test_sce_grad_in_forward(void)
{
    static const int64_t rc[][3] = {{7, 5, 0}, {48, 1000, 3}, {9, 11, 1}, {3, 70, 2}, {2100, 3, 50}};
    for (size_t c = 0; c < sizeof rc / sizeof rc[0]; c++) {
        struct glia_shape in = S(2, rc[c][0], rc[c][1], 0, 0);
        struct cuda_built G;
        cuda_build(c == 3 ? "[loss]\ntype = softmax_cross_entropy\nlabel_smoothing = 0.2\n"
                          : "[loss]\ntype = softmax_cross_entropy\n", "cuda", cuda_gpu, &in, 1, &G);
        loss_grad_in_forward_case(&G.l, cuda_gpu, rc[c][0], rc[c][1], (int)rc[c][2], 70 + c);
        cuda_unbuild(&G);
    }
}

/* Half logits through glia_layer_run_new_typed on the GPU (what `glia bench layer` runs): the loss is the f32 CPU
 * kernel's on the same values (sums in double on both: float rounding apart), and the gradient written in the forward's
 * pass is the CPU's rounded once to the half type, within one unit in its last place (expf on two devices). */
static void test_sce_half_logits(void)
{
    need_cpu("softmax_cross_entropy");
    const enum glia_dtype types[] = {GLIA_BF16, GLIA_F16};
    const int64_t shp[][3] = {{2, 9, 1000}, {5, 3, 37}, {1, 2100, 8}};
    const char *ini = "[loss]\ntype = softmax_cross_entropy\n";
    for (int t = 0; t < 2; t++)
        for (int c = 0; c < 3; c++) {
            struct glia_shape in = glia_shape_make(3, (int64_t[]){shp[c][0], shp[c][1], shp[c][2]});
            struct glia_layer_run *rh = NULL, *rf = NULL;
            set_precision(GLIA_PRECISION_BF16);
            CU_ASSERT_FATAL(glia_layer_run_new_typed(cuda_ctx, ini, cuda_gpu->device, &in, 1, GLIA_CONTIGUOUS, types[t],
                                                     31 + c, &rh) == GLIA_OK);
            CU_ASSERT_FATAL(glia_layer_run_new(cuda_ctx, ini, cuda_cpu->device, &in, 1, GLIA_CONTIGUOUS, 31 + c, &rf) ==
                            GLIA_OK);
            struct glia_tensor *xh = glia_layer_run_input(rh, 0);
            CU_ASSERT_EQUAL(xh->dtype, types[t]);
            CU_ASSERT_EQUAL(glia_layer_run_output(rh)->dtype, GLIA_F32);
            int64_t n = glia_tensor_numel(xh), rows = n / shp[c][2];
            uint16_t *hx = malloc(2 * (size_t)n);
            CU_ASSERT_FATAL(glia_tensor_to_host(xh, hx, 2 * (size_t)n) == GLIA_OK);
            float *x = glia_tensor_f32(glia_layer_run_input(rf, 0));
            for (int64_t i = 0; i < n; i++) x[i] = glia_load_f32(hx, types[t], i);
            int32_t *lab = malloc(sizeof(int32_t) * (size_t)rows);  /* the same labels on both */
            CU_ASSERT_FATAL(glia_tensor_to_host(glia_layer_run_labels(rh), lab, sizeof(int32_t) * (size_t)rows) ==
                            GLIA_OK);
            memcpy(glia_tensor_i32(glia_layer_run_labels(rf)), lab, sizeof(int32_t) * (size_t)rows);
            CU_ASSERT_FATAL(glia_layer_run_forward(rh, true) == GLIA_OK);
            CU_ASSERT_FATAL(glia_layer_run_forward(rf, true) == GLIA_OK);
            CU_ASSERT_FATAL(glia_layer_run_sync(rh) == GLIA_OK);
            float lh, lf = glia_tensor_f32(glia_layer_run_output(rf))[0];
            CU_ASSERT_FATAL(glia_tensor_to_host(glia_layer_run_output(rh), &lh, sizeof lh) == GLIA_OK);
            CU_ASSERT(fabsf(lh - lf) <= 1e-6f * fabsf(lf));
            uint16_t *hg = malloc(2 * (size_t)n);
            CU_ASSERT_FATAL(glia_tensor_to_host(glia_layer_run_input_grad(rh, 0), hg, 2 * (size_t)n) == GLIA_OK);
            const float *gf = glia_tensor_f32(glia_layer_run_input_grad(rf, 0));
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                float want = types[t] == GLIA_BF16 ? glia_bf16_to_f32(glia_f32_to_bf16(gf[i]))
                                                   : glia_f16_to_f32(glia_f32_to_f16(gf[i]));
                float got = glia_load_f32(hg, types[t], i), ulp = fabsf(want) * (types[t] == GLIA_BF16 ? 0x1p-7f : 0x1p-10f);
                if (fabsf(got - want) > fmaxf(ulp, types[t] == GLIA_F16 ? 0x1p-24f : 0.0f)) bad++;
            }
            if (bad) printf("\n  %s %lld x %lld x %lld: %d of %lld gradients off\n", glia_dtype_name(types[t]),
                            (long long)shp[c][0], (long long)shp[c][1], (long long)shp[c][2], bad, (long long)n);
            CU_ASSERT_EQUAL(bad, 0);
            free(hx), free(hg), free(lab);
            glia_layer_run_free(rh);
            glia_layer_run_free(rf);
        }
    set_precision(GLIA_PRECISION_FP32);
}

/* A label out of range: the forward cannot refuse it without waiting for the GPU, so its loss
 * is NaN at once and the layer's next call after the flag reached the host returns GLIA_EINVAL. */
static void test_sce_bad_label(void)
{
    set_precision(GLIA_PRECISION_FP32);
    struct glia_shape in = S(2, 4, 5, 0, 0), ls = S(1, 4, 0, 0, 0), os = S(1, 1, 0, 0, 0);
    struct cuda_built G;
    cuda_build("[loss]\ntype = softmax_cross_entropy\n", "cuda", cuda_gpu, &in, 1, &G);
    float xv[20], one = 1.0f, loss = 0;
    struct glia_rng r;
    glia__rng_seed(&r, 600);
    cuda_randn(&r, xv, 20, 1.0f);
    struct glia_tensor *x = cuda_put(cuda_gpu, in, GLIA_CONTIGUOUS, xv), *out = tensor_as(cuda_gpu, os, GLIA_CONTIGUOUS);
    struct glia_tensor *dout = cuda_put(cuda_gpu, os, GLIA_CONTIGUOUS, &one), *dx = tensor_as(cuda_gpu, in, GLIA_CONTIGUOUS);
    struct glia_tensor *bad, *good;
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_I32, &ls, &bad) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_new(cuda_gpu, GLIA_I32, &ls, &good) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_from_host(bad, (int32_t[]){0, 7, 2, -1}, 4 * sizeof(int32_t)) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_from_host(good, (int32_t[]){0, 1, 2, 4}, 4 * sizeof(int32_t)) == GLIA_OK);
    const struct glia_tensor *ins[1] = {x};
    struct glia_fwd fb = {ins, 1, out, bad, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL}, fg = {ins, 1, out, good, true, 2, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
    CU_ASSERT_EQUAL(G.kernel->forward(&G.l, &fb), GLIA_OK);  /* queued; not yet known on the host */
    CU_ASSERT_FATAL(glia_backend_sync(cuda_gpu) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_to_host(out, &loss, sizeof loss) == GLIA_OK);
    CU_ASSERT(isnan(loss));
    struct glia_tensor *din[1] = {dx};
    bool acc[1] = {false};
    struct glia_bwd b = {ins, 1, out, dout, din, acc, bad, NULL, NULL, NULL, false};
    CU_ASSERT_EQUAL(G.kernel->backward(&G.l, &b), GLIA_EINVAL);
    const char *err = glia_context_error(cuda_ctx);
    if (!strstr(err, "[loss] label 7 at batch row 1 is out of range for 5 classes")) printf("\n  got: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "[loss] label 7 at batch row 1 is out of range for 5 classes"));
    /* reported once; good labels then give a finite loss and no error */
    CU_ASSERT_EQUAL(G.kernel->forward(&G.l, &fg), GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_sync(cuda_gpu) == GLIA_OK);
    CU_ASSERT_FATAL(glia_tensor_to_host(out, &loss, sizeof loss) == GLIA_OK);
    CU_ASSERT(isfinite(loss));
    CU_ASSERT_EQUAL(G.kernel->forward(&G.l, &fg), GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_sync(cuda_gpu) == GLIA_OK);
    b.labels = good;
    CU_ASSERT_EQUAL(G.kernel->backward(&G.l, &b), GLIA_OK);
    CU_ASSERT_FATAL(glia_backend_sync(cuda_gpu) == GLIA_OK);
    glia_tensor_release(x), glia_tensor_release(out), glia_tensor_release(dout), glia_tensor_release(dx);
    glia_tensor_release(bad), glia_tensor_release(good);
    cuda_unbuild(&G);
}

/* Logits with special values, a row at a time (C = 37: lanes hold one or two values each) on the CPU kernel (two
 * passes in double) and the CUDA one (one online pass): -inf entries (masked logits) add nothing, a row of -inf, a
 * +inf and a NaN give NaN on both; finite losses and gradients agree. */
static void test_sce_special_values(void)
{
    need_cpu("softmax_cross_entropy");
    set_precision(GLIA_PRECISION_FP32);
    enum { C = 37 };
    struct glia_shape in = S(2, 1, C, 0, 0), ls = S(1, 1, 0, 0, 0), os = S(1, 1, 0, 0, 0);
    struct cuda_built B[2];
    cuda_build("[loss]\ntype = softmax_cross_entropy\n", "cpu", cuda_cpu, &in, 1, &B[0]);
    cuda_build("[loss]\ntype = softmax_cross_entropy\n", "cuda", cuda_gpu, &in, 1, &B[1]);
    for (int c = 0; c < 4; c++) {
        float xv[C], one = 1.0f, loss[2], g[2][C];
        for (int j = 0; j < C; j++) xv[j] = (float)((j * 7) % 11) * 0.3f - 1.0f;
        if (c == 0) xv[0] = xv[5] = xv[33] = xv[36] = -INFINITY;   /* masked: finite */
        if (c == 1) for (int j = 0; j < C; j++) xv[j] = -INFINITY; /* all masked: NaN */
        if (c == 2) xv[34] = INFINITY;                            /* NaN */
        if (c == 3) xv[3] = NAN;                                  /* NaN */
        int32_t label = c == 0 ? 2 : 1;
        for (int d = 0; d < 2; d++) {
            struct glia_backend *b = d ? cuda_gpu : cuda_cpu;
            struct glia_tensor *x = cuda_put(b, in, GLIA_CONTIGUOUS, xv), *out = tensor_as(b, os, GLIA_CONTIGUOUS);
            struct glia_tensor *dout = cuda_put(b, os, GLIA_CONTIGUOUS, &one), *dx = tensor_as(b, in, GLIA_CONTIGUOUS), *y;
            CU_ASSERT_FATAL(glia_tensor_new(b, GLIA_I32, &ls, &y) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_from_host(y, &label, sizeof label) == GLIA_OK);
            const struct glia_tensor *ins[1] = {x};
            struct glia_tensor *din[1] = {dx};
            bool acc[1] = {false};
            struct glia_fwd f = {ins, 1, out, y, true, 1, false, 0, NULL, false, 0, NULL, NULL, NULL, NULL, false, NULL, NULL};
            struct glia_bwd bw = {ins, 1, out, dout, din, acc, y, NULL, NULL, NULL, false};
            CU_ASSERT_EQUAL(B[d].kernel->forward(&B[d].l, &f), GLIA_OK);
            CU_ASSERT_EQUAL(B[d].kernel->backward(&B[d].l, &bw), GLIA_OK);
            CU_ASSERT_FATAL(glia_backend_sync(b) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_to_host(out, &loss[d], sizeof loss[d]) == GLIA_OK);
            CU_ASSERT_FATAL(glia_tensor_to_host(dx, g[d], sizeof g[d]) == GLIA_OK);
            glia_tensor_release(x), glia_tensor_release(out), glia_tensor_release(dout), glia_tensor_release(dx);
            glia_tensor_release(y);
        }
        if (c == 0) {
            CU_ASSERT(isfinite(loss[1]) && fabs(loss[1] - loss[0]) <= 1e-6 * fmax(1.0, fabs(loss[0])));
            double worst = 0;
            for (int j = 0; j < C; j++) worst = fmax(worst, fabs(g[1][j] - g[0][j]));
            CU_ASSERT(worst <= 1e-6);
            CU_ASSERT(g[1][0] == 0.0f && g[1][36] == 0.0f);
        } else {
            if (!(isnan(loss[0]) && isnan(loss[1]))) printf("\n  case %d: loss %g on the CPU, %g on CUDA\n", c, loss[0], loss[1]);
            CU_ASSERT(isnan(loss[0]) && isnan(loss[1]));
        }
    }
    cuda_unbuild(&B[0]);
    cuda_unbuild(&B[1]);
}

/* ---- flatten: copies and transposes, so exact ---- */

static void test_flatten(void)
{
    need_cpu("flatten");
    set_precision(GLIA_PRECISION_FP32);
    const struct glia_shape shapes[] = {S(4, 2, 3, 5, 7), S(4, 1, 17, 3, 1), S(4, 3, 1, 1, 1), S(3, 2, 9, 5, 0),
                                        S(2, 4, 11, 0, 0)};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int f = 0; f < 2; f++)
            expect_both_modes((struct cuda_case){.ini = "[f]\ntype = flatten\n", .in = &shapes[s], .n_in = 1,
                                                 .format = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS,
                                                 .seed = 700 + s},
                              0.0);
    for (size_t s = 0; s < 2; s++)  /* half activations: moved as they are (an accumulation rounds once) */
        for (int f = 0; f < 2; f++)
            for (int h = 0; h < 2; h++)
                expect_both_modes((struct cuda_case){.ini = "[f]\ntype = flatten\n", .in = &shapes[s], .n_in = 1,
                                                     .format = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS,
                                                     .seed = 710 + s, .act = h ? GLIA_F16 : GLIA_BF16},
                                  h ? 1.0 / 2048 : 1.0 / 256);
}

/* ---- dropout: the CPU impl's mask, element for element ---- */

static void test_dropout_same_mask(void)
{
    need_cpu("dropout");
    set_precision(GLIA_PRECISION_FP32);
    static const char *inis[] = {"[d]\ntype = dropout\np = 0.3\n", "[d]\ntype = dropout\n",
                                 "[d]\ntype = dropout\np = 0\n", "[d]\ntype = dropout\np = 0.9\n"};
    const struct glia_shape shapes[] = {S(4, 2, 3, 5, 7), S(4, 1, 13, 3, 3), S(2, 6, 7, 0, 0), S(4, 3, 1, 1, 1),
                                        S(3, 2, 5, 12, 0)};  /* (N, T, C) */
    for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int f = 0; f < (shapes[s].ndim == 4 ? 2 : 1); f++) {
                struct cuda_case k = {.ini = inis[i], .in = &shapes[s], .n_in = 1,
                                      .format = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS, .seed = 800 + s};
                /* written: the same elements dropped, the same products -> bit-identical */
                struct cuda_diff d = cuda_compare(&k);
                if (d.out != 0 || d.din != 0)
                    printf("\n  %s %s: out %g din %g\n", inis[i], glia_memory_format_name(k.format), d.out, d.din);
                CU_ASSERT(d.out == 0 && d.din == 0);
                k.accumulate = true;
                cuda_expect(&k, 1e-6);
                k.accumulate = false;
                k.eval = true;  /* the identity */
                d = cuda_compare(&k);
                CU_ASSERT(d.out == 0);
            }
}

/* The same mask on bf16 and f16 activations: the CPU's f32 products, rounded once (half an ulp of the type), and in
 * eval the values as they are. */
static void test_dropout_half(void)
{
    need_cpu("dropout");
    const struct glia_shape shapes[] = {S(4, 2, 3, 5, 7), S(2, 6, 7, 0, 0)};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int f = 0; f < 2; f++)
            for (int h = 0; h < 2; h++) {
                struct cuda_case k = {.ini = "[d]\ntype = dropout\np = 0.3\n", .in = &shapes[s], .n_in = 1,
                                      .format = f ? GLIA_CHANNELS_LAST : GLIA_CONTIGUOUS, .seed = 820 + s,
                                      .precision = GLIA_PRECISION_BF16, .act = h ? GLIA_F16 : GLIA_BF16};
                double tol = h ? 1.0 / 2048 : 1.0 / 256;
                cuda_expect(&k, tol);
                k.accumulate = true;
                cuda_expect(&k, tol);
                k.accumulate = false;
                k.eval = true;
                struct cuda_diff d = cuda_compare(&k);
                CU_ASSERT(d.out == 0);
            }
}

CUDA_TEST_MAIN("cuda_dense", GLIA_TEST(test_gemm_unaligned), GLIA_TEST(test_linear_fp32),
               GLIA_TEST(test_linear_low_precision), GLIA_TEST(test_linear_nd), GLIA_TEST(test_linear_eval),
               GLIA_TEST(test_linear_packed_params),
               GLIA_TEST(test_linear_half), GLIA_TEST(test_linear_half_fallback), GLIA_TEST(test_linear_act),
               GLIA_TEST(test_linear_act_fallback), GLIA_TEST(test_linear_din_act), GLIA_TEST(test_linear_din_act_fallback),
               GLIA_TEST(test_sce), GLIA_TEST(test_sce_grad_in_forward), GLIA_TEST(test_sce_half_logits), GLIA_TEST(test_sce_bad_label), GLIA_TEST(test_sce_special_values), GLIA_TEST(test_flatten),
               GLIA_TEST(test_dropout_same_mask), GLIA_TEST(test_dropout_half))
